"""Scalar and index expressions of tensor expressions (TVM's ``PrimExpr`` family).

Expressions are immutable nodes that compare and hash **by identity**, like TVM's ``ObjectRef``:
two ``var("i")`` are different variables. Python arithmetic and ordering comparisons build
expressions (``i * 4 + j``, ``x < 0``); ``==`` stays identity so nodes can live in dicts and sets;
use :func:`equal` / :meth:`PrimExpr.equal` to build an equality test and
:func:`kiln.te.simplify.expr_equal` to compare two expressions structurally.

Construction folds constants the way TVM's operator overloads do (``1 * 16 * 64`` is ``1024``,
``x + 0`` is ``x``), so printed compute definitions look like TVM's.

``str(expr)`` prints TVM's legacy text form, the one Ansor's ``ComputeDAG`` print uses:
``(A[i, k]*B[k, j])``, ``max(C[i0, i1], 0f)``, ``floordiv(i, 4)``, ``select(c, a, b)``,
``float32(x)``, ``tir.exp(x)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiln.errors import KilnTypeError
from kiln.runtime import dtype as _dtype

if TYPE_CHECKING:
    from kiln.te.tensor import CommReducer, IterVar, Tensor

__all__ = [
    "And",
    "Binary",
    "Call",
    "Cast",
    "Compare",
    "FloatImm",
    "IdentityCompare",
    "IntImm",
    "Not",
    "Or",
    "PrimExpr",
    "Reduce",
    "Select",
    "TensorLoad",
    "Var",
    "as_expr",
    "choice_parts",
    "const",
    "dtype_bits",
    "conjuncts",
    "is_const_int",
    "is_float_dtype",
    "is_int_dtype",
    "is_uint_dtype",
    "legacy_repr",
]

# --- dtype helpers -----------------------------------------------------------------------------


def is_float_dtype(dtype: str) -> bool:
    """True for ``float16/32/64``, bfloat16 and the narrow floats (``float8_e4m3fn``, ...)."""
    return _dtype.is_float(dtype)


def is_int_dtype(dtype: str) -> bool:
    """True for signed integer dtypes."""
    return dtype.startswith("int")


def is_uint_dtype(dtype: str) -> bool:
    """True for unsigned integer dtypes (not bool)."""
    return dtype.startswith("uint")


def dtype_bits(dtype: str) -> int:
    """Bit width of a dtype (bool counts as 1)."""
    return _dtype.dtype_bits(dtype)


def _kind_rank(dtype: str) -> int:
    if is_float_dtype(dtype):
        return 3
    if is_int_dtype(dtype):
        return 2
    if is_uint_dtype(dtype):
        return 1
    return 0


def _promote(a: str, b: str) -> str:
    """The common dtype of two operands (TVM's ``BinaryOpMatchTypes``, simplified)."""
    if a == b:
        return a
    ka, kb = _kind_rank(a), _kind_rank(b)
    if ka != kb:
        if max(ka, kb) == 3:
            return a if ka == 3 else b
        if min(ka, kb) == 0:  # bool with an integer
            return a if ka else b
        # signed with unsigned: the wider one, signed on a tie
        if dtype_bits(a) != dtype_bits(b):
            return a if dtype_bits(a) > dtype_bits(b) else b
        return a if ka == 2 else b
    return a if dtype_bits(a) >= dtype_bits(b) else b


# --- nodes -------------------------------------------------------------------------------------


class PrimExpr:
    """Base class of scalar expressions; arithmetic operators build new expressions."""

    __slots__ = ()
    dtype: str

    # arithmetic (TVM's python operator overloads)
    def __add__(self, other: Any) -> PrimExpr:
        return _binary("add", self, other)

    def __radd__(self, other: Any) -> PrimExpr:
        return _binary("add", other, self)

    def __sub__(self, other: Any) -> PrimExpr:
        return _binary("sub", self, other)

    def __rsub__(self, other: Any) -> PrimExpr:
        return _binary("sub", other, self)

    def __mul__(self, other: Any) -> PrimExpr:
        return _binary("mul", self, other)

    def __rmul__(self, other: Any) -> PrimExpr:
        return _binary("mul", other, self)

    def __truediv__(self, other: Any) -> PrimExpr:
        return _binary("div", self, other)

    def __rtruediv__(self, other: Any) -> PrimExpr:
        return _binary("div", other, self)

    def __floordiv__(self, other: Any) -> PrimExpr:
        return _binary("floordiv", self, other)

    def __rfloordiv__(self, other: Any) -> PrimExpr:
        return _binary("floordiv", other, self)

    def __mod__(self, other: Any) -> PrimExpr:
        return _binary("floormod", self, other)

    def __rmod__(self, other: Any) -> PrimExpr:
        return _binary("floormod", other, self)

    def __neg__(self) -> PrimExpr:
        return _binary("sub", const(0, self.dtype), self)

    def __lt__(self, other: Any) -> PrimExpr:
        return _compare("lt", self, other)

    def __le__(self, other: Any) -> PrimExpr:
        return _compare("le", self, other)

    def __gt__(self, other: Any) -> PrimExpr:
        return _compare("gt", self, other)

    def __ge__(self, other: Any) -> PrimExpr:
        return _compare("ge", self, other)

    def __and__(self, other: Any) -> PrimExpr:
        return logical_and(self, other)

    def __or__(self, other: Any) -> PrimExpr:
        return logical_or(self, other)

    def __invert__(self) -> PrimExpr:
        return logical_not(self)

    def __bool__(self) -> bool:
        raise TypeError(f"the truth value of the expression {self} is unknown while building IR; "
                        "use te.if_then_else / te.all / te.any instead of Python's if/and/or")

    # ``a == b`` builds an equality test, as in TVM; used as a Python bool (dict lookups, ``in``)
    # it tells whether both sides are the same node, so hashing stays by identity.
    def __eq__(self, other: object) -> Any:  # type: ignore[override]
        return _identity_compare("eq", self, other)

    def __ne__(self, other: object) -> Any:  # type: ignore[override]
        return _identity_compare("ne", self, other)

    __hash__ = object.__hash__

    def equal(self, other: Any) -> PrimExpr:
        """The expression ``self == other``."""
        return _compare("eq", self, other)

    def not_equal(self, other: Any) -> PrimExpr:
        """The expression ``self != other``."""
        return _compare("ne", self, other)

    def astype(self, dtype: str) -> PrimExpr:
        """Convert to ``dtype``."""
        return cast(self, dtype)

    def __str__(self) -> str:
        return legacy_repr(self)

    def __repr__(self) -> str:
        return legacy_repr(self)


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class Var(PrimExpr):
    """A scalar variable (loop index, reduction axis, ...)."""

    name: str
    dtype: str = "int32"


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class IntImm(PrimExpr):
    """An integer (or bool) constant; usable as a Python bool."""

    value: int
    dtype: str = "int32"

    def __bool__(self) -> bool:
        return self.value != 0

    def __int__(self) -> int:
        return self.value


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class FloatImm(PrimExpr):
    """A floating-point constant."""

    value: float
    dtype: str = "float32"


# Binary arithmetic kinds: add sub mul div (true/trunc division) mod (trunc) floordiv floormod
# min max.
BINARY_KINDS = ("add", "sub", "mul", "div", "mod", "floordiv", "floormod", "min", "max")
COMPARE_KINDS = ("eq", "ne", "lt", "le", "gt", "ge")


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class Binary(PrimExpr):
    """``a <kind> b`` for an arithmetic kind in :data:`BINARY_KINDS`."""

    kind: str
    a: PrimExpr
    b: PrimExpr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class Compare(PrimExpr):
    """``a <kind> b`` for a comparison kind in :data:`COMPARE_KINDS`; a bool."""

    kind: str
    a: PrimExpr
    b: PrimExpr
    dtype: str = "bool"


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class IdentityCompare(Compare):
    """``a == b`` / ``a != b`` written with Python's operators.

    It is an ordinary comparison in expressions; converted to a Python bool it answers whether
    the two operands are the same node (``==``) or not (``!=``), which keeps expressions usable
    as dict keys and in ``in`` tests.
    """

    same: bool = False

    def __bool__(self) -> bool:
        return self.same == (self.kind == "eq")


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class And(PrimExpr):
    """Logical and of two bools."""

    a: PrimExpr
    b: PrimExpr
    dtype: str = "bool"


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class Or(PrimExpr):
    """Logical or of two bools."""

    a: PrimExpr
    b: PrimExpr
    dtype: str = "bool"


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class Not(PrimExpr):
    """Logical not of a bool."""

    a: PrimExpr
    dtype: str = "bool"


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class Select(PrimExpr):
    """``true_value`` where ``condition`` holds, else ``false_value`` (both are evaluated)."""

    condition: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class Cast(PrimExpr):
    """Conversion of ``value`` to ``dtype`` (floats to ints truncate toward zero)."""

    dtype: str
    value: PrimExpr


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class Call(PrimExpr):
    """An intrinsic call such as ``exp`` or ``bitwise_and``; printed as ``tir.<name>(...)``.

    ``arg_max``, when set, is an upper bound on the first argument that the op computing it
    guarantees (softmax's ``exp(x - max(x))`` has 0): code generators may pick a cheaper form
    for that domain. It is a fact about the values, not part of the computation, so it is not
    printed and a DAG's workload key does not see it."""

    name: str
    args: tuple[PrimExpr, ...]
    dtype: str
    arg_max: float | None = None


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class TensorLoad(PrimExpr):
    """Element ``tensor[indices]`` of a tensor (TVM's ``ProducerLoad``)."""

    tensor: Tensor
    indices: tuple[PrimExpr, ...]
    dtype: str


@dataclass(frozen=True, eq=False, repr=False, slots=True)
class Reduce(PrimExpr):
    """A commutative reduction of ``source`` over ``axis`` where ``condition`` holds.

    ``value_index`` picks the component of a tuple reduction (argmax has two); ``init`` optionally
    gives the starting values instead of the reducer's identity.
    """

    combiner: CommReducer
    source: tuple[PrimExpr, ...]
    axis: tuple[IterVar, ...]
    condition: PrimExpr
    value_index: int
    init: tuple[PrimExpr, ...]
    dtype: str


# --- construction helpers ----------------------------------------------------------------------


def const(value: Any, dtype: str | None = None) -> PrimExpr:
    """A constant of ``dtype`` (default: int32 for Python ints, float32 for floats, bool for bools).

    Parameters
    ----------
    value : int, float or bool
        The value.
    dtype : str, optional
        Its dtype.

    Returns
    -------
    PrimExpr
        An :class:`IntImm` or :class:`FloatImm`.
    """
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = "int32"
        else:
            dtype = "float32"
    if is_float_dtype(dtype):
        return FloatImm(float(value), dtype)
    if dtype == "bool":
        return IntImm(int(bool(value)), "bool")
    if isinstance(value, float) and not value.is_integer():
        raise KilnTypeError(f"const: {value!r} is not an integer but dtype is {dtype}")
    return IntImm(_wrap_int(int(value), dtype), dtype)


def as_expr(value: Any, dtype: str | None = None) -> PrimExpr:
    """``value`` as an expression: expressions pass through, numbers become constants."""
    if isinstance(value, PrimExpr):
        return value
    if hasattr(value, "var") and isinstance(value.var, PrimExpr):  # an IterVar
        return value.var
    if isinstance(value, (bool, int, float)):
        return const(value, dtype)
    raise KilnTypeError(f"cannot use {value!r} (a {type(value).__name__}) as a tensor expression")


def conjuncts(e: PrimExpr) -> list[PrimExpr]:
    """The terms of a chain of logical ands (``[e]`` for any other expression)."""
    if isinstance(e, And):
        return conjuncts(e.a) + conjuncts(e.b)
    return [e]


def is_const_int(e: PrimExpr, value: int | None = None) -> bool:
    """True if ``e`` is an integer constant (equal to ``value`` when given)."""
    return isinstance(e, IntImm) and (value is None or e.value == value)


def _const_value(e: PrimExpr) -> int | float | None:
    if isinstance(e, (IntImm, FloatImm)):
        return e.value
    return None


def _match(a: Any, b: Any) -> tuple[PrimExpr, PrimExpr]:
    """Both operands as expressions of one dtype (Python numbers take the other's dtype)."""
    if not isinstance(a, PrimExpr) and isinstance(b, PrimExpr):
        b = as_expr(b)
        a = _scalar_like(a, b.dtype)
    elif not isinstance(b, PrimExpr) and isinstance(a, PrimExpr):
        a = as_expr(a)
        b = _scalar_like(b, a.dtype)
    else:
        a, b = as_expr(a), as_expr(b)
    if a.dtype != b.dtype:
        target = _promote(a.dtype, b.dtype)
        a, b = cast(a, target), cast(b, target)
    return a, b


def _scalar_like(value: Any, dtype: str) -> PrimExpr:
    if hasattr(value, "var") and isinstance(value.var, PrimExpr):
        return value.var
    if isinstance(value, float) and not is_float_dtype(dtype) and not value.is_integer():
        return const(value, "float32")
    if dtype == "bool" and not isinstance(value, bool):
        return const(value, "int32")
    return const(value, dtype)


def _int_div_trunc(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


def _fold(kind: str, a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
    """TVM's ``TryConstFold``: constant operands and the identities x+0, x*1, x*0, x/1, ..."""
    va, vb = _const_value(a), _const_value(b)
    dtype = a.dtype
    is_int = not is_float_dtype(dtype)
    if va is not None and vb is not None:
        if kind == "add":
            return const(va + vb, dtype)
        if kind == "sub":
            return const(va - vb, dtype)
        if kind == "mul":
            return const(va * vb, dtype)
        if kind == "min":
            return const(min(va, vb), dtype)
        if kind == "max":
            return const(max(va, vb), dtype)
        if vb != 0:
            if kind == "div":
                return const(_int_div_trunc(int(va), int(vb)) if is_int else va / vb, dtype)
            if kind == "mod" and is_int:
                return const(int(va) - _int_div_trunc(int(va), int(vb)) * int(vb), dtype)
            if kind == "floordiv":
                return const(int(va) // int(vb) if is_int else math.floor(va / vb), dtype)
            if kind == "floormod" and is_int:
                return const(int(va) % int(vb), dtype)
        return None
    if kind == "add":
        if va == 0:
            return b
        if vb == 0:
            return a
    elif kind == "sub":
        if vb == 0:
            return a
    elif kind == "mul":
        if va == 1:
            return b
        if vb == 1:
            return a
        if is_int and va == 0:
            return a
        if is_int and vb == 0:
            return b
    elif kind in ("div", "floordiv"):
        if is_int and va == 0:
            return a
        if vb == 1:
            return a
    elif kind == "floormod" and is_int:
        if va == 0:
            return a
        if vb == 1:
            return const(0, dtype)
    return None


def _binary(kind: str, a: Any, b: Any) -> PrimExpr:
    ea, eb = _match(a, b)
    if ea.dtype == "bool" and kind not in ("min", "max"):
        ea, eb = cast(ea, "int32"), cast(eb, "int32")
    folded = _fold(kind, ea, eb)
    if folded is not None:
        return folded
    return Binary(kind, ea, eb, ea.dtype)


def binary(kind: str, a: Any, b: Any) -> PrimExpr:
    """Build ``a <kind> b`` for a kind in :data:`BINARY_KINDS`, folding constants."""
    if kind not in BINARY_KINDS:
        raise ValueError(f"unknown binary kind {kind!r}")
    return _binary(kind, a, b)


def _compare(kind: str, a: Any, b: Any) -> PrimExpr:
    ea, eb = _match(a, b)
    va, vb = _const_value(ea), _const_value(eb)
    if va is not None and vb is not None:
        result = {
            "eq": va == vb, "ne": va != vb, "lt": va < vb,
            "le": va <= vb, "gt": va > vb, "ge": va >= vb,
        }[kind]
        return const(bool(result), "bool")
    return Compare(kind, ea, eb)


def _identity_compare(kind: str, a: PrimExpr, b: object) -> Any:
    if not isinstance(b, (PrimExpr, bool, int, float)) and not hasattr(b, "var"):
        return NotImplemented
    ea, eb = _match(a, b)
    va, vb = _const_value(ea), _const_value(eb)
    if va is not None and vb is not None:
        return const((va == vb) == (kind == "eq"), "bool")
    return IdentityCompare(kind, ea, eb, "bool", a is b)


def compare(kind: str, a: Any, b: Any) -> PrimExpr:
    """Build the comparison ``a <kind> b`` (kind in :data:`COMPARE_KINDS`)."""
    if kind not in COMPARE_KINDS:
        raise ValueError(f"unknown comparison kind {kind!r}")
    return _compare(kind, a, b)


def _as_bool(e: Any) -> PrimExpr:
    x = as_expr(e)
    if x.dtype == "bool":
        return x
    return _compare("ne", x, 0)


def logical_and(a: Any, b: Any) -> PrimExpr:
    """``a && b`` (constants fold)."""
    x, y = _as_bool(a), _as_bool(b)
    for p, q in ((x, y), (y, x)):
        if isinstance(p, IntImm):
            return q if p.value else const(False)
    return And(x, y)


def logical_or(a: Any, b: Any) -> PrimExpr:
    """``a || b`` (constants fold)."""
    x, y = _as_bool(a), _as_bool(b)
    for p, q in ((x, y), (y, x)):
        if isinstance(p, IntImm):
            return const(True) if p.value else q
    return Or(x, y)


def logical_not(a: Any) -> PrimExpr:
    """``!a`` (constants fold)."""
    x = _as_bool(a)
    if isinstance(x, IntImm):
        return const(not x.value)
    return Not(x)


def cast(value: Any, dtype: str) -> PrimExpr:
    """``value`` converted to ``dtype``; constants convert at once, same-dtype casts vanish."""
    x = as_expr(value)
    if x.dtype == dtype:
        return x
    if isinstance(x, (IntImm, FloatImm)):
        v = x.value
        if is_float_dtype(dtype):
            return FloatImm(float(v), dtype)
        if dtype == "bool":
            return IntImm(int(v != 0), "bool")
        if isinstance(v, float) and not math.isfinite(v):
            return Cast(dtype, x)
        return IntImm(_wrap_int(int(v), dtype), dtype)
    return Cast(dtype, x)


def _wrap_int(v: int, dtype: str) -> int:
    bits = dtype_bits(dtype)
    v &= (1 << bits) - 1
    if is_int_dtype(dtype) and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def choice_parts(e: PrimExpr) -> tuple[PrimExpr, PrimExpr, PrimExpr] | None:
    """``(condition, then, else)`` of a :class:`Select` or an ``if_then_else`` call, else None."""
    if isinstance(e, Call) and e.name == "if_then_else":
        return e.args[0], e.args[1], e.args[2]
    if isinstance(e, Select):
        return e.condition, e.true_value, e.false_value
    return None


def select(condition: Any, true_value: Any, false_value: Any) -> PrimExpr:
    """``true_value`` if ``condition`` else ``false_value`` (a constant condition folds)."""
    cond = _as_bool(condition)
    t, f = _match(true_value, false_value)
    if isinstance(cond, IntImm):
        return t if cond.value else f
    return Select(cond, t, f, t.dtype)


def call(name: str, args: Sequence[Any], dtype: str | None = None) -> PrimExpr:
    """Intrinsic ``name(args)``; the result dtype defaults to the first argument's."""
    exprs = tuple(as_expr(a) for a in args)
    return Call(name, exprs, dtype or exprs[0].dtype)


# --- text form ----------------------------------------------------------------------------------


def legacy_repr(e: PrimExpr) -> str:
    """``e`` in TVM's legacy text form (see :mod:`kiln.te.printer`)."""
    from kiln.te.printer import legacy_repr as _legacy_repr

    return _legacy_repr(e)
