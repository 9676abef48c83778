"""Math intrinsics and helper constructors of tensor expressions (``te.exp``, ``te.if_then_else``, ...).

Floating-point intrinsics become :class:`~kiln.te.expr.Call` nodes printed ``tir.<name>(x)`` and
lowered to libm (scalar code) or to Kiln's vector approximations (vector code). Integer
variants fold to plain arithmetic where TVM does so (``abs`` of an int is a select, ``floor`` of
an int is the int itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.errors import KilnTypeError
from kiln.te import expr as E
from kiln.te.expr import PrimExpr, as_expr, const

__all__ = [
    "FLOAT_INTRINSICS",
    "abs",
    "acos",
    "acosh",
    "all",
    "any",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "ceil",
    "cos",
    "cosh",
    "erf",
    "exp",
    "exp2",
    "exp10",
    "expm1",
    "fabs",
    "floor",
    "floordiv",
    "floormod",
    "fmod",
    "if_then_else",
    "isfinite",
    "isinf",
    "isnan",
    "log",
    "log1p",
    "log2",
    "log10",
    "nearbyint",
    "pow",
    "power",
    "round",
    "rsqrt",
    "shift_left",
    "shift_right",
    "sigmoid",
    "sin",
    "sinh",
    "sqrt",
    "tan",
    "tanh",
    "trunc",
    "truncdiv",
    "truncmod",
]

# Unary float intrinsics: name -> arity. ``round`` rounds half to even (C's nearbyint).
FLOAT_INTRINSICS: dict[str, int] = {
    "exp": 1, "exp2": 1, "exp10": 1, "expm1": 1, "log": 1, "log2": 1, "log10": 1, "log1p": 1,
    "sqrt": 1, "rsqrt": 1, "sigmoid": 1, "tanh": 1, "erf": 1,
    "sin": 1, "cos": 1, "tan": 1, "asin": 1, "acos": 1, "atan": 1,
    "sinh": 1, "cosh": 1, "asinh": 1, "acosh": 1, "atanh": 1,
    "fabs": 1, "floor": 1, "ceil": 1, "round": 1, "nearbyint": 1, "trunc": 1,
    "pow": 2, "atan2": 2, "fmod": 2,
}


def _float_call(name: str, *args: Any) -> PrimExpr:
    exprs = [as_expr(a) for a in args]
    if len(exprs) == 2:
        exprs = list(E._match(exprs[0], exprs[1]))
    dtype = exprs[0].dtype
    if not E.is_float_dtype(dtype):
        raise KilnTypeError(f"te.{name}: needs a float argument, got {exprs[0]} of dtype {dtype}")
    return E.Call(name, tuple(exprs), dtype)


def _make_float_unary(name: str) -> Callable[[Any], PrimExpr]:
    def intrinsic(x: Any) -> PrimExpr:
        return _float_call(name, x)

    intrinsic.__name__ = name
    intrinsic.__doc__ = f"Elementwise ``{name}`` of a float expression."
    return intrinsic


def exp(x: Any, upper: float | None = None) -> PrimExpr:
    """Elementwise ``exp`` of a float expression.

    ``upper``: a bound the caller guarantees ``x`` never exceeds (NaN aside), such as 0 for
    softmax's ``x - max(x)``. Code generators may use it (the C vector code then needs no
    overflow handling); it is not printed and does not change the DAG's workload key."""
    e = _float_call("exp", x)
    if upper is None:
        return e
    assert isinstance(e, E.Call)
    return E.Call(e.name, e.args, e.dtype, float(upper))


exp2 = _make_float_unary("exp2")
exp10 = _make_float_unary("exp10")
expm1 = _make_float_unary("expm1")
log = _make_float_unary("log")
log2 = _make_float_unary("log2")
log10 = _make_float_unary("log10")
log1p = _make_float_unary("log1p")
sqrt = _make_float_unary("sqrt")
rsqrt = _make_float_unary("rsqrt")
sigmoid = _make_float_unary("sigmoid")
tanh = _make_float_unary("tanh")
erf = _make_float_unary("erf")
sin = _make_float_unary("sin")
cos = _make_float_unary("cos")
tan = _make_float_unary("tan")
asin = _make_float_unary("asin")
acos = _make_float_unary("acos")
atan = _make_float_unary("atan")
sinh = _make_float_unary("sinh")
cosh = _make_float_unary("cosh")
asinh = _make_float_unary("asinh")
acosh = _make_float_unary("acosh")
atanh = _make_float_unary("atanh")
fabs = _make_float_unary("fabs")


def _int_or_float(name: str) -> Callable[[Any], PrimExpr]:
    def intrinsic(x: Any) -> PrimExpr:
        e = as_expr(x)
        if not E.is_float_dtype(e.dtype):
            return e  # rounding an integer is the integer itself
        return E.Call(name, (e,), e.dtype)

    intrinsic.__name__ = name
    intrinsic.__doc__ = f"``{name}`` of a float expression (identity on integers)."
    return intrinsic


floor = _int_or_float("floor")
ceil = _int_or_float("ceil")
round = _int_or_float("round")
nearbyint = _int_or_float("nearbyint")
trunc = _int_or_float("trunc")


def abs(x: Any) -> PrimExpr:
    """Absolute value: ``fabs`` for floats, a select for signed ints, identity for unsigned."""
    e = as_expr(x)
    if E.is_float_dtype(e.dtype):
        return E.Call("fabs", (e,), e.dtype)
    if E.is_uint_dtype(e.dtype) or e.dtype == "bool":
        return e
    return E.select(e >= 0, e, -e)


def pow(x: Any, y: Any) -> PrimExpr:
    """``x ** y`` for floats."""
    return _float_call("pow", x, y)


power = pow


def atan2(y: Any, x: Any) -> PrimExpr:
    """Four-quadrant arc tangent of ``y / x``."""
    return _float_call("atan2", y, x)


def fmod(x: Any, y: Any) -> PrimExpr:
    """Float remainder with the sign of ``x`` (C's ``fmod``)."""
    return _float_call("fmod", x, y)


def _float_predicate(name: str) -> Callable[[Any], PrimExpr]:
    def predicate(x: Any) -> PrimExpr:
        e = as_expr(x)
        if not E.is_float_dtype(e.dtype):
            return const(name == "isfinite")
        return E.Call(name, (e,), "bool")

    predicate.__name__ = name
    predicate.__doc__ = f"``{name}`` of a float expression (a bool)."
    return predicate


isnan = _float_predicate("isnan")
isinf = _float_predicate("isinf")
isfinite = _float_predicate("isfinite")


def if_then_else(cond: Any, t: Any, f: Any) -> PrimExpr:
    """``t`` if ``cond`` else ``f``, evaluating only the chosen branch (guards out-of-bounds reads)."""
    c = E._as_bool(cond)
    a, b = E._match(t, f)
    if isinstance(c, E.IntImm):
        return a if c.value else b
    return E.Call("if_then_else", (c, a, b), a.dtype)


def _int_call(name: str, *args: Any) -> PrimExpr:
    exprs = [as_expr(a) for a in args]
    if len(exprs) == 2:
        exprs = list(E._match(exprs[0], exprs[1]))
    dtype = exprs[0].dtype
    if E.is_float_dtype(dtype):
        raise KilnTypeError(f"te.{name}: needs integer arguments, got dtype {dtype}")
    return E.Call(name, tuple(exprs), dtype)


def bitwise_and(x: Any, y: Any) -> PrimExpr:
    """Bitwise and of integers."""
    return _int_call("bitwise_and", x, y)


def bitwise_or(x: Any, y: Any) -> PrimExpr:
    """Bitwise or of integers."""
    return _int_call("bitwise_or", x, y)


def bitwise_xor(x: Any, y: Any) -> PrimExpr:
    """Bitwise xor of integers."""
    return _int_call("bitwise_xor", x, y)


def bitwise_not(x: Any) -> PrimExpr:
    """Bitwise complement of an integer."""
    return _int_call("bitwise_not", x)


def shift_left(x: Any, y: Any) -> PrimExpr:
    """``x << y`` (0 once ``y`` reaches the bit width, like NumPy)."""
    return _int_call("shift_left", x, y)


def shift_right(x: Any, y: Any) -> PrimExpr:
    """``x >> y`` (arithmetic for signed types; saturates past the bit width like NumPy)."""
    return _int_call("shift_right", x, y)


def floordiv(a: Any, b: Any) -> PrimExpr:
    """Division rounding toward minus infinity."""
    return E.binary("floordiv", a, b)


def floormod(a: Any, b: Any) -> PrimExpr:
    """Remainder of :func:`floordiv` (sign of the divisor)."""
    return E.binary("floormod", a, b)


def truncdiv(a: Any, b: Any) -> PrimExpr:
    """Division rounding toward zero (C's ``/`` on integers)."""
    return E.binary("div", a, b)


def truncmod(a: Any, b: Any) -> PrimExpr:
    """Remainder of :func:`truncdiv` (sign of the dividend)."""
    return E.binary("mod", a, b)


def all(*conds: Any) -> PrimExpr:
    """Logical and of all conditions."""
    out: PrimExpr = const(True)
    for c in conds:
        out = E.logical_and(out, c)
    return out


def any(*conds: Any) -> PrimExpr:
    """Logical or of all conditions."""
    out: PrimExpr = const(False)
    for c in conds:
        out = E.logical_or(out, c)
    return out
