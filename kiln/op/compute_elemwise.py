"""Tensor-expression computes of the element-wise operators (``kiln.op.elemwise``).

Each compute follows the operator's NumPy reference exactly: binary operators broadcast like
NumPy (a dimension of size 1 is read at index 0), integer ``divide``/``mod`` truncate while
``floor_divide``/``floor_mod`` round down (both give 0 for a zero divisor), integer ``power``
goes through float64, ``cast`` from float to integer truncates toward zero (NaN and infinities
give 0), ``round`` rounds half to even, ``clip`` bounds integers to the representable range.
Attached to the registry as ``get_op_def(name).compute``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln import te
from kiln.ir.types import TensorType, Type
from kiln.op.elemwise import BINARY_OPS, UNARY_OPS
from kiln.op.registry import get_op_def
from kiln.runtime.dtype import int_range
from kiln.te import expr as E
from kiln.te.expr import PrimExpr
from kiln.te.tensor import DATA_PAR, IterVar, Range, make_compute_op

__all__ = ["ax_compute", "broadcast_indices", "elemwise_unary", "elemwise_binary", "named_compute"]

Unary = Callable[[PrimExpr], PrimExpr]
Binary = Callable[[PrimExpr, PrimExpr], PrimExpr]


def named_compute(shape: Sequence[int], fcompute: Callable[..., Any], names: Sequence[str],
                  name: str, tag: str = "", attrs: dict[str, Any] | None = None) -> Any:
    """``te.compute`` whose spatial iterators are called ``names`` (``fcompute`` takes them in order).

    TOPI's computes name their iterators after the lambda's parameters (Python TOPI) or
    ``ax0, ax1, ...`` (C++ TOPI's ``te::compute``); the names are part of the DAG print, hence of
    the auto-scheduler's workload keys, so Kiln's computes use the same names as TOPI's.
    """
    dims = tuple(int(d) for d in shape)
    if len(names) != len(dims):
        raise ValueError(f"compute {name}: {len(names)} iterator names for shape {dims}")
    axis = tuple(IterVar(E.Var(n, "int32"), Range(E.const(0), E.const(d)), DATA_PAR)
                 for n, d in zip(names, dims))
    result = fcompute(*[iv.var for iv in axis])
    bodies = tuple(result) if isinstance(result, (list, tuple)) else (result,)
    op = make_compute_op(name, tag, attrs or {}, axis, tuple(E.as_expr(b) for b in bodies))
    outs = [op.output(i) for i in range(op.num_outputs)]
    return outs[0] if len(outs) == 1 else outs


def ax_compute(shape: Sequence[int], fcompute: Callable[..., Any], name: str, tag: str = "",
               attrs: dict[str, Any] | None = None) -> Any:
    """``te.compute`` with C++ TOPI's iterator names ``ax0, ax1, ...``.

    C++ TOPI builds its element-wise, broadcast, injective and pooling computes with
    ``te::compute(shape, [](const Array<Var>& i) {...})``, which names iterator ``k`` ``ax<k>``
    (``src/te/operation/compute_op.cc``); relay's C++ operators (``add``, ``nn.relu``, ``cast``,
    ``layout_transform``, ``nn.max_pool2d``, ...) print that way in TVM's task DAGs.
    """
    return named_compute(shape, fcompute, [f"ax{k}" for k in range(len(tuple(shape)))], name,
                         tag, attrs)


def broadcast_indices(t: te.Tensor, out_shape: Sequence[int], idx: Sequence[PrimExpr]) -> tuple:
    """Indices reading ``t`` at output position ``idx`` under NumPy broadcasting."""
    off = len(out_shape) - t.ndim
    return tuple(E.const(0) if t.shape[d] == 1 and out_shape[off + d] != 1 else idx[off + d]
                 for d in range(t.ndim))


def _out(out_type: Type) -> TensorType:
    assert isinstance(out_type, TensorType)
    return out_type


def _neg(x: PrimExpr) -> PrimExpr:
    if E.is_float_dtype(x.dtype):
        return x * E.const(-1.0, x.dtype)  # keeps the sign of zero, like numpy.negative
    return E.const(0, x.dtype) - x


def _sign(x: PrimExpr) -> PrimExpr:
    one, zero = E.const(1, x.dtype), E.const(0, x.dtype)
    if E.is_uint_dtype(x.dtype):
        return E.select(x > zero, one, zero)
    rest = x if E.is_float_dtype(x.dtype) else zero  # 0 stays 0, NaN stays NaN
    return E.select(x > zero, one, E.select(x < zero, E.const(-1, x.dtype), rest))


_UNARY: dict[str, Unary] = {
    "negative": _neg,
    "abs": te.abs,
    "sign": _sign,
    "exp": te.exp, "fast_exp": te.exp, "log": te.log, "log2": te.log2, "log10": te.log10,
    "sqrt": te.sqrt, "rsqrt": te.rsqrt, "tanh": te.tanh, "fast_tanh": te.tanh,
    "sigmoid": te.sigmoid, "erf": te.erf, "fast_erf": te.erf,
    "sin": te.sin, "cos": te.cos, "tan": te.tan, "asin": te.asin, "acos": te.acos,
    "atan": te.atan, "sinh": te.sinh, "cosh": te.cosh, "asinh": te.asinh, "acosh": te.acosh,
    "atanh": te.atanh,
    "floor": te.floor, "ceil": te.ceil, "round": te.round, "trunc": te.trunc,
    "isnan": te.isnan, "isinf": te.isinf, "isfinite": te.isfinite,
    "logical_not": E.logical_not,
    "copy": lambda x: x,
}


def _bitwise_not(x: PrimExpr) -> PrimExpr:
    return E.logical_not(x) if x.dtype == "bool" else te.bitwise_not(x)


_UNARY["bitwise_not"] = _bitwise_not


def _x86_indefinite(dtype: str) -> PrimExpr:
    """What NumPy's float-to-``dtype`` cast gives for NaN or infinity on x86 (the conversion
    instruction's minimum integer, through int32 for narrower types and int64 for uint32)."""
    if dtype in ("int64", "uint64"):
        return E.const(np.iinfo("int64").min, "int64").astype(dtype)
    if dtype == "int32":
        return E.const(np.iinfo("int32").min, "int32")
    return E.const(0, dtype)


def _int_power(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if E.is_float_dtype(a.dtype):
        return te.power(a, b)
    # the reference raises in float64 and converts without cleaning infinities
    p = te.power(E.cast(a, "float64"), E.cast(b, "float64"))
    return E.select(te.isfinite(p), E.cast(p, a.dtype), _x86_indefinite(a.dtype))


def _mod(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return te.fmod(a, b) if E.is_float_dtype(a.dtype) else E.binary("mod", a, b)


def _bool_or_int(int_fn: Binary, bool_fn: Binary) -> Binary:
    def fn(a: PrimExpr, b: PrimExpr) -> PrimExpr:
        return bool_fn(a, b) if a.dtype == "bool" else int_fn(a, b)

    return fn


_BINARY: dict[str, Binary] = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: E.binary("div", a, b),
    "floor_divide": lambda a, b: E.binary("floordiv", a, b),
    "mod": _mod,
    "floor_mod": lambda a, b: E.binary("floormod", a, b),
    "power": _int_power,
    "maximum": lambda a, b: E.binary("max", a, b),
    "minimum": lambda a, b: E.binary("min", a, b),
    "atan2": te.atan2,
    "equal": lambda a, b: E.compare("eq", a, b),
    "not_equal": lambda a, b: E.compare("ne", a, b),
    "less": lambda a, b: E.compare("lt", a, b),
    "less_equal": lambda a, b: E.compare("le", a, b),
    "greater": lambda a, b: E.compare("gt", a, b),
    "greater_equal": lambda a, b: E.compare("ge", a, b),
    "logical_and": E.logical_and,
    "logical_or": E.logical_or,
    "logical_xor": lambda a, b: E.compare("ne", a, b),
    "bitwise_and": _bool_or_int(te.bitwise_and, E.logical_and),
    "bitwise_or": _bool_or_int(te.bitwise_or, E.logical_or),
    "bitwise_xor": _bool_or_int(te.bitwise_xor, lambda a, b: E.compare("ne", a, b)),
    "left_shift": te.shift_left,
    "right_shift": te.shift_right,
}


def elemwise_unary(name: str, fn: Unary) -> Callable[[list[te.Tensor], Any, Type], te.Tensor]:
    """The compute of a unary op applying ``fn`` to each element."""
    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        x = inputs[0]
        out = _out(out_type)
        return ax_compute(x.shape, lambda *i: E.cast(fn(x(*i)), out.dtype), name=f"T_{name}",
                          tag="elemwise")

    return compute


def elemwise_binary(name: str, fn: Binary) -> Callable[[list[te.Tensor], Any, Type], te.Tensor]:
    """The compute of a broadcasting binary op applying ``fn`` to each pair of elements."""
    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        a, b = inputs
        out = _out(out_type)

        def element(*i: PrimExpr) -> PrimExpr:
            x = a(*broadcast_indices(a, out.shape, i))
            y = b(*broadcast_indices(b, out.shape, i))
            return E.cast(fn(x, y), out.dtype)

        return ax_compute(out.shape, element, name=f"T_{name}", tag="broadcast")

    return compute


def _clip_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    lo, hi = float(attrs.a_min), float(attrs.a_max)
    if not E.is_float_dtype(x.dtype):
        info_min, info_max = int_range(x.dtype)
        lo_i = max(math.ceil(lo), info_min) if math.isfinite(lo) else info_min
        hi_i = min(math.floor(hi), info_max) if math.isfinite(hi) else info_max
        lo_c, hi_c = E.const(lo_i, x.dtype), E.const(hi_i, x.dtype)
    else:
        lo_c, hi_c = E.const(lo, x.dtype), E.const(hi, x.dtype)
    return ax_compute(x.shape, lambda *i: E.binary("min", E.binary("max", x(*i), lo_c), hi_c),
                      name="T_clip", tag="elemwise")


def _cast_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    dtype = _out(out_type).dtype
    return ax_compute(x.shape, lambda *i: E.cast(x(*i), dtype), name="T_cast", tag="elemwise")


def _reinterpret_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    dtype = _out(out_type).dtype
    return ax_compute(x.shape, lambda *i: E.Call("reinterpret", (x(*i),), dtype),
                      name="T_reinterpret", tag="elemwise")


def _where_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    cond, x, y = inputs
    out = _out(out_type)

    def element(*i: PrimExpr) -> PrimExpr:
        c = cond(*broadcast_indices(cond, out.shape, i))
        return E.select(c, x(*broadcast_indices(x, out.shape, i)),
                        y(*broadcast_indices(y, out.shape, i)))

    return ax_compute(out.shape, element, name="T_where", tag="broadcast")


def _register() -> None:
    for name in UNARY_OPS:
        get_op_def(name).compute = elemwise_unary(name, _UNARY[name])
    for name in BINARY_OPS:
        get_op_def(name).compute = elemwise_binary(name, _BINARY[name])
    get_op_def("clip").compute = _clip_compute
    get_op_def("cast").compute = _cast_compute
    get_op_def("cast_like").compute = lambda inputs, attrs, out: _cast_compute(inputs[:1], attrs,
                                                                               out)
    get_op_def("where").compute = _where_compute
    get_op_def("reinterpret").compute = _reinterpret_compute


_register()
