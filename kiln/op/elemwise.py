"""Elementwise and broadcasting operators: math, comparisons, logic, clip, cast, where.

Unary ops keep their input's shape and dtype (or return bool for predicates); binary ops
broadcast NumPy-style and require both dtypes to match, as relay does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr, _to_expr
from kiln.ir.types import TensorType, Type, as_dtype, is_float, is_int, np_dtype, tensor_of
from kiln.op.arg_types import same_as_result
from kiln.op.registry import (
    OpPattern,
    broadcast_shapes,
    make_call,
    register_op,
    tensor_arg,
)

__all__ = [
    "BINARY_OPS",
    "UNARY_OPS",
    "CastAttrs",
    "ClipAttrs",
    "cast",
    "cast_like",
    "clip",
    "reinterpret",
    "where",
]

# --- reference helpers ---------------------------------------------------------------------------

_erf = np.frompyfunc(math.erf, 1, 1)


def _ref_erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(_erf(x.astype(np.float64)), dtype=np.float64)


def _ref_sigmoid(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    out = np.empty_like(x64)
    pos = x64 >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x64[pos]))
    ex = np.exp(x64[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def _int_shift(name: str, ufunc: Callable[[np.ndarray, np.ndarray], np.ndarray]
               ) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A shift that type-checks for any dtype (TVM's broadcast rule) but computes on ints only."""

    def shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.kind not in "iub":
            raise KilnTypeError(f"{name}: cannot shift {a.dtype} values (shifts compute on "
                                "integer tensors)")
        return ufunc(a, b)

    return shift


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return np.divide(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.floor_divide(a, b)
        r = np.remainder(a, b)
    fix = (r != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype)


def _trunc_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return np.fmod(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(a, b)


def _int_power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return np.power(a, b)
    return np.power(a.astype(np.float64), b.astype(np.float64))


# Unary ops: name -> (reference on the input array, which dtypes it accepts, result dtype rule).
# Kinds: "float" (floating only), "numeric" (ints and floats), "bool", "int", "any".
_UnaryRef = Callable[[np.ndarray], np.ndarray]
UNARY_OPS: dict[str, tuple[_UnaryRef, str, str]] = {
    "negative": (np.negative, "numeric", "same"),
    "abs": (np.abs, "numeric", "same"),
    "sign": (np.sign, "numeric", "same"),
    "exp": (lambda x: np.exp(x.astype(np.float64)), "float", "same"),
    "fast_exp": (lambda x: np.exp(x.astype(np.float64)), "float", "same"),
    "log": (lambda x: np.log(x.astype(np.float64)), "float", "same"),
    "log2": (lambda x: np.log2(x.astype(np.float64)), "float", "same"),
    "log10": (lambda x: np.log10(x.astype(np.float64)), "float", "same"),
    "sqrt": (lambda x: np.sqrt(x.astype(np.float64)), "float", "same"),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x.astype(np.float64)), "float", "same"),
    "tanh": (lambda x: np.tanh(x.astype(np.float64)), "float", "same"),
    "fast_tanh": (lambda x: np.tanh(x.astype(np.float64)), "float", "same"),
    "sigmoid": (_ref_sigmoid, "float", "same"),
    "erf": (_ref_erf, "float", "same"),
    "fast_erf": (_ref_erf, "float", "same"),
    "sin": (lambda x: np.sin(x.astype(np.float64)), "float", "same"),
    "cos": (lambda x: np.cos(x.astype(np.float64)), "float", "same"),
    "tan": (lambda x: np.tan(x.astype(np.float64)), "float", "same"),
    "asin": (lambda x: np.arcsin(x.astype(np.float64)), "float", "same"),
    "acos": (lambda x: np.arccos(x.astype(np.float64)), "float", "same"),
    "atan": (lambda x: np.arctan(x.astype(np.float64)), "float", "same"),
    "sinh": (lambda x: np.sinh(x.astype(np.float64)), "float", "same"),
    "cosh": (lambda x: np.cosh(x.astype(np.float64)), "float", "same"),
    "asinh": (lambda x: np.arcsinh(x.astype(np.float64)), "float", "same"),
    "acosh": (lambda x: np.arccosh(x.astype(np.float64)), "float", "same"),
    "atanh": (lambda x: np.arctanh(x.astype(np.float64)), "float", "same"),
    "floor": (np.floor, "numeric", "same"),
    "ceil": (np.ceil, "numeric", "same"),
    "round": (np.round, "numeric", "same"),
    "trunc": (np.trunc, "numeric", "same"),
    "isnan": (np.isnan, "float", "bool"),
    "isinf": (np.isinf, "float", "bool"),
    "isfinite": (np.isfinite, "float", "bool"),
    "logical_not": (np.logical_not, "bool", "bool"),
    "bitwise_not": (np.invert, "int", "same"),
    "copy": (np.copy, "any", "same"),
}

# Binary broadcasting ops: name -> (reference, accepted dtype kind, result dtype rule).
_BinaryRef = Callable[[np.ndarray, np.ndarray], np.ndarray]
BINARY_OPS: dict[str, tuple[_BinaryRef, str, str]] = {
    "add": (np.add, "numeric", "same"),
    "subtract": (np.subtract, "numeric", "same"),
    "multiply": (np.multiply, "numeric", "same"),
    "divide": (_trunc_div, "numeric", "same"),
    "floor_divide": (np.floor_divide, "numeric", "same"),
    "mod": (_trunc_mod, "numeric", "same"),
    "floor_mod": (np.mod, "numeric", "same"),
    "power": (_int_power, "numeric", "same"),
    "maximum": (np.maximum, "numeric", "same"),
    "minimum": (np.minimum, "numeric", "same"),
    "atan2": (lambda a, b: np.arctan2(a.astype(np.float64), b.astype(np.float64)), "float", "same"),
    "equal": (np.equal, "any", "bool"),
    "not_equal": (np.not_equal, "any", "bool"),
    "less": (np.less, "any", "bool"),
    "less_equal": (np.less_equal, "any", "bool"),
    "greater": (np.greater, "any", "bool"),
    "greater_equal": (np.greater_equal, "any", "bool"),
    "logical_and": (np.logical_and, "bool", "bool"),
    "logical_or": (np.logical_or, "bool", "bool"),
    "logical_xor": (np.logical_xor, "bool", "bool"),
    "bitwise_and": (np.bitwise_and, "int", "same"),
    "bitwise_or": (np.bitwise_or, "int", "same"),
    "bitwise_xor": (np.bitwise_xor, "int", "same"),
    "left_shift": (_int_shift("left_shift", np.left_shift), "int", "same"),
    "right_shift": (_int_shift("right_shift", np.right_shift), "int", "same"),
}
# Computed on integers only (the kind above), but typed for any dtype as TVM's BroadcastRel does
_TYPED_FOR_ANY_DTYPE = frozenset({"left_shift", "right_shift"})


def _check_kind(op: str, dtype: str, kind: str) -> None:
    ok = {
        "float": is_float(dtype),
        "numeric": is_float(dtype) or is_int(dtype),
        "bool": dtype == "bool",
        "int": is_int(dtype) or dtype == "bool",
        "any": True,
    }[kind]
    if not ok:
        raise KilnTypeError(f"{op}: dtype {dtype} is not supported (needs {kind} tensors)")


def _result(out_type: Type, value: Any) -> np.ndarray:
    assert isinstance(out_type, TensorType)
    with np.errstate(all="ignore"):
        return np.asarray(value).astype(np_dtype(out_type.dtype), copy=False)


# --- registration ----------------------------------------------------------------------------

def _register_unary(name: str, ref: _UnaryRef, kind: str, rule: str) -> None:
    def rel(types: list[Type], attrs: Any) -> Type:
        x = tensor_arg(types, 0, name)
        _check_kind(name, x.dtype, kind)
        return TensorType(x.shape, "bool" if rule == "bool" else x.dtype)

    def reference(args: list[np.ndarray], attrs: Any, out_type: Type) -> np.ndarray:
        with np.errstate(all="ignore"):
            return _result(out_type, ref(args[0]))

    register_op(name, num_inputs=1, type_rel=rel, reference=reference, pattern=OpPattern.ELEMWISE,
                doc=f"elementwise {name}",
                infer_args=same_as_result if rule == "same" or kind == "bool" else None)


def _register_binary(name: str, ref: _BinaryRef, kind: str, rule: str) -> None:
    def rel(types: list[Type], attrs: Any) -> Type:
        a = tensor_arg(types, 0, name, "lhs")
        b = tensor_arg(types, 1, name, "rhs")
        if a.dtype != b.dtype:
            raise KilnTypeError(f"{name}: operand dtypes differ: lhs is {a.dtype}, rhs is {b.dtype}")
        _check_kind(name, a.dtype, "any" if name in _TYPED_FOR_ANY_DTYPE else kind)
        shape = broadcast_shapes(a.shape, b.shape, name)
        return TensorType(shape, "bool" if rule == "bool" else a.dtype)

    def reference(args: list[np.ndarray], attrs: Any, out_type: Type) -> np.ndarray:
        with np.errstate(all="ignore"):
            return _result(out_type, ref(args[0], args[1]))

    register_op(name, num_inputs=2, type_rel=rel, reference=reference, pattern=OpPattern.BROADCAST,
                doc=f"broadcasting {name}", fold_scale=_FOLD_SCALE.get(name, ""))


# FoldScaleAxis passes a per-channel scale through these (OpDef.fold_scale)
_FOLD_SCALE = {"add": "add", "subtract": "add", "multiply": "multiply"}


for _name, (_uref, _kind, _rule) in UNARY_OPS.items():
    _register_unary(_name, _uref, _kind, _rule)
for _name, (_bref, _kind, _rule) in BINARY_OPS.items():
    _register_binary(_name, _bref, _kind, _rule)


# --- clip, cast, where -----------------------------------------------------------------------

@attrs_class("relay.attrs.ClipAttrs")
class ClipAttrs(Attrs):
    """Bounds of ``clip``."""

    a_min: float = 0.0
    a_max: float = 0.0


def _clip_rel(types: list[Type], attrs: ClipAttrs) -> Type:
    x = tensor_arg(types, 0, "clip")
    _check_kind("clip", x.dtype, "numeric")
    return x


def _clip_ref(args: list[np.ndarray], attrs: ClipAttrs, out_type: Type) -> np.ndarray:
    x = args[0]
    lo, hi = attrs.a_min, attrs.a_max
    if x.dtype.kind != "f":
        info = np.iinfo(x.dtype)
        lo, hi = max(math.ceil(lo), info.min), min(math.floor(hi), info.max)
    return _result(out_type, np.minimum(np.maximum(x, lo), hi))


register_op("clip", num_inputs=1, type_rel=_clip_rel, reference=_clip_ref,
            pattern=OpPattern.ELEMWISE, attrs_type=ClipAttrs, doc="clamp to [a_min, a_max]",
            infer_args=same_as_result)


@attrs_class("relay.attrs.CastAttrs")
class CastAttrs(Attrs):
    """Target dtype of ``cast``."""

    dtype: str = "float32"


def _cast_rel(types: list[Type], attrs: CastAttrs) -> Type:
    x = tensor_arg(types, 0, "cast")
    return TensorType(x.shape, attrs.dtype)


def _cast_array(x: np.ndarray, dtype: str) -> np.ndarray:
    target = np_dtype(dtype)
    if x.dtype.kind == "f" and target.kind in "iu":
        with np.errstate(all="ignore"):
            x = np.trunc(x)
            x = np.where(np.isfinite(x), x, 0)
    with np.errstate(all="ignore"):
        return x.astype(target)


register_op("cast", num_inputs=1, type_rel=_cast_rel,
            reference=lambda args, attrs, out: _cast_array(args[0], attrs.dtype),
            pattern=OpPattern.ELEMWISE, attrs_type=CastAttrs, doc="convert dtype")


def _reinterpret_rel(types: list[Type], attrs: CastAttrs) -> Type:
    x = tensor_arg(types, 0, "reinterpret")
    if attrs.dtype == "bool" or np_dtype(x.dtype).itemsize != np_dtype(attrs.dtype).itemsize:
        raise KilnTypeError(f"reinterpret: cannot reinterpret {x.dtype} as {attrs.dtype}: both "
                            "must have the same bit width, and bool is only a source (its bytes "
                            "are 0 or 1)")
    return TensorType(x.shape, attrs.dtype)


register_op("reinterpret", num_inputs=1, type_rel=_reinterpret_rel,
            reference=lambda args, attrs, out: np.asarray(args[0], order="C").view(
                np_dtype(attrs.dtype)),
            pattern=OpPattern.ELEMWISE, attrs_type=CastAttrs,
            doc="the same bits read as another dtype of the same width")


def _cast_like_rel(types: list[Type], attrs: Any) -> Type:
    x = tensor_arg(types, 0, "cast_like")
    like = tensor_arg(types, 1, "cast_like", "dtype_like")
    return TensorType(x.shape, like.dtype)


register_op("cast_like", num_inputs=2, type_rel=_cast_like_rel,
            reference=lambda args, attrs, out: _cast_array(args[0], tensor_of(out).dtype),
            pattern=OpPattern.ELEMWISE, doc="convert to the dtype of another tensor")


def _where_rel(types: list[Type], attrs: Any) -> Type:
    cond = tensor_arg(types, 0, "where", "condition")
    x = tensor_arg(types, 1, "where", "x")
    y = tensor_arg(types, 2, "where", "y")
    if x.dtype != y.dtype:
        raise KilnTypeError(f"where: x and y dtypes differ: {x.dtype} vs {y.dtype}")
    shape = broadcast_shapes(broadcast_shapes(cond.shape, x.shape, "where"), y.shape, "where")
    return TensorType(shape, x.dtype)


register_op("where", num_inputs=3, type_rel=_where_rel,
            reference=lambda args, attrs, out: _result(out, np.where(args[0].astype(bool), args[1],
                                                                      args[2])),
            pattern=OpPattern.BROADCAST, doc="select x where condition else y")


# --- builders (relay.add, relay.exp, ...) ----------------------------------------------------

def _operand(value: Any, other: Any) -> Expr:
    if isinstance(value, Expr):
        return value
    like = other if isinstance(other, Expr) else None
    return _to_expr(value, like)


def _make_unary(name: str) -> Callable[[Expr], Call]:
    def build(data: Expr) -> Call:
        return make_call(name, [_operand(data, None)])

    build.__name__ = name
    build.__doc__ = f"Elementwise ``{name}`` of ``data``."
    return build


def _make_binary(name: str) -> Callable[[Any, Any], Call]:
    def build(lhs: Any, rhs: Any) -> Call:
        return make_call(name, [_operand(lhs, rhs), _operand(rhs, lhs)])

    build.__name__ = name
    build.__doc__ = f"Broadcasting ``{name}`` of ``lhs`` and ``rhs``."
    return build


if TYPE_CHECKING:
    # the builders below are made from the tables; a type checker sees them through this
    def __getattr__(name: str) -> Any: ...


for _name in UNARY_OPS:
    globals()[_name] = _make_unary(_name)
    __all__.append(_name)
for _name in BINARY_OPS:
    globals()[_name] = _make_binary(_name)
    __all__.append(_name)


def clip(a: Expr, a_min: float, a_max: float) -> Call:
    """Clamp ``a`` to ``[a_min, a_max]``."""
    return make_call("clip", [a], ClipAttrs(a_min=float(a_min), a_max=float(a_max)))


def cast(data: Expr, dtype: str) -> Call:
    """Convert ``data`` to ``dtype`` (floats to ints truncate toward zero)."""
    return make_call("cast", [data], CastAttrs(dtype=as_dtype(dtype)))


def reinterpret(data: Expr, dtype: str) -> Call:
    """The bits of ``data`` read as ``dtype`` (same width; ``relay.reinterpret``, ONNX BitCast)."""
    return make_call("reinterpret", [data], CastAttrs(dtype=as_dtype(dtype)))


def cast_like(data: Expr, dtype_like: Expr) -> Call:
    """Convert ``data`` to the dtype of ``dtype_like``."""
    return make_call("cast_like", [data, dtype_like])


def where(condition: Expr, x: Any, y: Any) -> Call:
    """``x`` where ``condition`` holds, else ``y`` (all three broadcast)."""
    return make_call("where", [condition, _operand(x, y), _operand(y, x)])

# TE computes used by the C code generator (kept in their own module).
from kiln.op import compute_elemwise  # noqa: E402,F401
