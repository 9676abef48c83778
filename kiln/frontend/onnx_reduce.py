"""ONNX converters: reductions, ArgMax/ArgMin, TopK, CumSum/CumProd and Einsum.

Reduction axes come from the ``axes`` attribute before opset 13 (ReduceSum) or 18 (the others)
and from a constant input after. ``noop_with_empty_axes`` with no axes applies only the
elementwise part of the reduction (``ReduceSumSquare`` squares, ``ReduceL1`` takes ``abs``...).
Reducing over a zero-size axis gives the reduction's identity, computed at import.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln.frontend.onnx_common import NodeContext, const, converter, normalize_axis, scalar_like
from kiln.frontend.onnx_tensor import reshape_to
from kiln.ir.expr import Expr
from kiln.ir.types import is_float, np_dtype
from kiln.op import elemwise as ew

__all__: list[str] = []


def _red() -> Any:
    from kiln.op import reduce

    return reduce


def _tf() -> Any:
    from kiln.op import transform

    return transform


# ONNX op -> (relay reduction, value over an empty set)
_REDUCTIONS: dict[str, tuple[str, float]] = {
    "ReduceSum": ("sum", 0.0), "ReduceMean": ("mean", math.nan), "ReduceMax": ("max", -math.inf),
    "ReduceMin": ("min", math.inf), "ReduceProd": ("prod", 1.0), "ReduceL1": ("sum", 0.0),
    "ReduceL2": ("sum", 0.0), "ReduceSumSquare": ("sum", 0.0), "ReduceLogSum": ("sum", -math.inf),
    "ReduceLogSumExp": ("max", -math.inf),
}


def _reduce_axes(ctx: NodeContext, rank: int) -> list[int] | None:
    """The axes to reduce; None means all, [] means none (noop_with_empty_axes)."""
    first_input_opset = 13 if ctx.op_type == "ReduceSum" else 18
    if ctx.opset < first_input_opset:
        axes = ctx.attr("axes")
        axes = None if axes is None else [int(a) for a in axes]
    else:
        axes = ctx.ints(1, "axes") if ctx.has_input(1) else None
    if not axes:
        return [] if int(ctx.attr("noop_with_empty_axes", 0)) else None
    norm = sorted({normalize_axis(ctx, a, rank, "reduction axis") for a in axes})
    return norm


def _empty_value(dtype: str, value: float) -> Any:
    """The reduction's identity in ``dtype`` (integer types use their extreme values for +-inf)."""
    if is_float(dtype):
        return value
    if dtype == "bool":
        return value > 0 if math.isinf(value) else bool(value) and not math.isnan(value)
    info = np.iinfo(np_dtype(dtype))
    if math.isinf(value):
        return info.min if value < 0 else info.max
    return 0 if math.isnan(value) else value


def _pre(ctx: NodeContext, x: Expr) -> Expr:
    op = ctx.op_type
    if op == "ReduceL1":
        return ew.abs(x)
    if op in ("ReduceL2", "ReduceSumSquare"):
        return ew.multiply(x, x)
    return x


def _post(ctx: NodeContext, y: Expr) -> Expr:
    if ctx.op_type == "ReduceL2":
        return ew.sqrt(y)
    if ctx.op_type == "ReduceLogSum":
        return ew.log(y)
    return y


def _reduce(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    shape = ctx.shape(x)
    dtype = ctx.dtype(x)
    keepdims = bool(int(ctx.attr("keepdims", 1)))
    axes = _reduce_axes(ctx, len(shape))
    if axes == []:
        return _post(ctx, _pre(ctx, x))
    axes = list(range(len(shape))) if axes is None else axes
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)
    relay_name, empty = _REDUCTIONS[ctx.op_type]
    if any(shape[a] == 0 for a in axes):
        return const(np.full(out_shape, _empty_value(dtype, empty), dtype=np_dtype(dtype)))
    if ctx.op_type == "ReduceLogSumExp":
        return _log_sum_exp(ctx, x, axes, keepdims, out_shape)
    reduced = getattr(_red(), relay_name)(_pre(ctx, x), axis=axes, keepdims=keepdims)
    return _post(ctx, reduced)


def _log_sum_exp(ctx: NodeContext, x: Expr, axes: list[int], keepdims: bool,
                 out_shape: tuple[int, ...]) -> Expr:
    # max + log(sum(exp(x - max))): exact for large inputs; an all -inf slice gives -inf.
    peak = _red().max(x, axis=axes, keepdims=True)
    safe = ew.where(ew.isfinite(peak), peak, scalar_like(ctx, 0, x))
    total = _red().sum(ew.exp(ew.subtract(x, safe)), axis=axes, keepdims=True)
    out = ew.add(ew.log(total), safe)
    return reshape_to(ctx, out, out_shape) if not keepdims else out


for _op_type, (_relay, _) in _REDUCTIONS.items():
    _needs = ("sum", "max", "log", "exp", "reshape") if _op_type == "ReduceLogSumExp" else (_relay,)
    converter(_op_type, needs=_needs)(_reduce)


def _arg(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    rank = ctx.ndim(x)
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), rank)
    build = _red().argmax if ctx.op_type == "ArgMax" else _red().argmin
    out = build(x, axis=[axis], keepdims=bool(int(ctx.attr("keepdims", 1))),
                select_last_index=bool(int(ctx.attr("select_last_index", 0))))
    return out if ctx.dtype(out) == "int64" else ew.cast(out, "int64")


converter("ArgMax", needs=("argmax",))(_arg)
converter("ArgMin", needs=("argmin",))(_arg)


@converter("TopK", needs=("topk",))
def _topk(ctx: NodeContext) -> list[Expr | None]:
    from kiln.op import algorithm

    x = ctx.input(0)
    rank = ctx.ndim(x)
    axis = normalize_axis(ctx, int(ctx.attr("axis", -1)), rank)
    if ctx.opset < 10:
        k = int(ctx.attr("k"))
    else:
        k = int(ctx.scalar(1, "k"))
    largest = bool(int(ctx.attr("largest", 1)))
    out = algorithm.topk(x, k=k, axis=axis, ret_type="both", is_ascend=not largest, dtype="int64")
    return [out[0], out[1]]


def _cumulative(ctx: NodeContext, name: str) -> Expr:
    from kiln.op import algorithm

    x = ctx.input(0)
    rank = ctx.ndim(x)
    axis = normalize_axis(ctx, int(ctx.scalar(1, "axis")), rank)
    reverse = bool(int(ctx.attr("reverse", 0)))
    exclusive = bool(int(ctx.attr("exclusive", 0)))
    if reverse:
        x = _tf().reverse(x, axis=axis)
    out = getattr(algorithm, name)(x, axis=axis, exclusive=exclusive)
    return _tf().reverse(out, axis=axis) if reverse else out


@converter("CumSum", needs=("cumsum", "reverse"))
def _cumsum(ctx: NodeContext) -> Expr:
    return _cumulative(ctx, "cumsum")


@converter("CumProd", needs=("cumprod", "reverse"))
def _cumprod(ctx: NodeContext) -> Expr:
    return _cumulative(ctx, "cumprod")


@converter("Einsum", needs=("einsum",))
def _einsum(ctx: NodeContext) -> Expr:
    equation = str(ctx.attr("equation")).replace(" ", "")
    args = [x for x in ctx.inputs if x is not None]
    return _tf().einsum(args, equation)
