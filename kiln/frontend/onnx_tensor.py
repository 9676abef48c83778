"""ONNX converters: shape and data movement (Reshape, Slice, Gather, Scatter, Pad, Shape, ...).

Every shape Kiln compiles is static, so these converters compute target shapes, slice bounds and
split sizes in Python from the input types and from constant inputs, and emit relay ops with
fully resolved attributes (no relay special codes such as ``-1`` or ``0`` in reshape targets).
Ops whose value depends only on shapes (Shape, Size, ConstantOfShape, Range, EyeLike) become
constants; NonZero, Unique and Compress fold when their input is constant and are rejected
otherwise (their output shape would depend on data).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.frontend.onnx_common import (
    InputDependentError,
    NodeContext,
    const,
    converter,
    normalize_axis,
    onnx_dtype,
)
from kiln.ir.expr import Expr
from kiln.ir.types import np_dtype
from kiln.op import elemwise as ew

__all__ = ["nonneg_indices", "reshape_to", "static_slice"]


def _tf() -> Any:
    from kiln.op import transform

    return transform


def reshape_to(ctx: NodeContext, x: Expr, shape: Sequence[int]) -> Expr:
    """``x`` reshaped to the static ``shape`` (``x`` itself when it already has it)."""
    shape = tuple(int(d) for d in shape)
    if ctx.shape(x) == shape:
        return x
    # allowzero: a 0 in the target is an empty dim, never relay's "copy this dim" code.
    return _tf().reshape(x, newshape=shape, allowzero=0 in shape)


def static_slice(ctx: NodeContext, x: Expr, axes: Sequence[int], starts: Sequence[int],
                 ends: Sequence[int], steps: Sequence[int] | None = None) -> Expr:
    """ONNX Slice semantics (clamping, negative indices and steps) as one strided_slice."""
    shape = ctx.shape(x)
    begin = [0] * len(shape)
    end = list(shape)
    strides = [1] * len(shape)
    steps = list(steps) if steps is not None else [1] * len(axes)
    seen: set[int] = set()
    for axis, start, stop, step in zip(axes, starts, ends, steps):
        axis = normalize_axis(ctx, int(axis), len(shape), "slice axis")
        if axis in seen:
            raise ctx.error(f"axis {axis} is sliced twice")
        seen.add(axis)
        if step == 0:
            raise ctx.error(f"slice step 0 on axis {axis}")
        dim = shape[axis]
        lo, hi, st = slice(int(start), int(stop), int(step)).indices(dim)
        if len(range(lo, hi, st)) == 0:
            lo, hi, st = 0, 0, 1
        elif st < 0 and hi < 0:
            hi = -(dim + 1)  # "before index 0" in strided_slice's convention
        begin[axis], end[axis], strides[axis] = lo, hi, st
    if begin == [0] * len(shape) and end == list(shape) and strides == [1] * len(shape):
        return x
    return _tf().strided_slice(x, begin=begin, end=end, strides=strides)


def _axes_arg(ctx: NodeContext, input_index: int, first_opset: int) -> list[int] | None:
    """Axes from an attribute (before ``first_opset``) or from a constant input (from it on)."""
    if ctx.opset < first_opset:
        axes = ctx.attr("axes")
        return None if axes is None else [int(a) for a in axes]
    if not ctx.has_input(input_index):
        return None
    return ctx.ints(input_index, "axes")


def nonneg_indices(ctx: NodeContext, indices: Expr, dim: int) -> Expr:
    """``indices`` with negative entries wrapped by ``dim`` (computed at import when constant)."""
    value = ctx.value(indices)
    dtype = ctx.dtype(indices)
    if value is not None:
        return const(np.where(value < 0, value + dim, value), dtype)
    return ew.where(ew.less(indices, const(0, dtype)), ew.add(indices, const(dim, dtype)), indices)


# --- shapes as constants -----------------------------------------------------------------------

@converter("Shape")
def _shape(ctx: NodeContext) -> Expr:
    shape = ctx.shape(0)
    start, end = int(ctx.attr("start", 0)), ctx.attr("end")
    picked = list(shape)[slice(start, None if end is None else int(end))]
    return const(np.array(picked, dtype=np.int64))


@converter("Size")
def _size(ctx: NodeContext) -> Expr:
    return const(np.array(int(np.prod(ctx.shape(0), dtype=np.int64)), dtype=np.int64))


@converter("ConstantOfShape")
def _constant_of_shape(ctx: NodeContext) -> Expr:
    shape = ctx.ints(0, "shape")
    value = ctx.attr("value")
    fill = np.zeros((), np.float32) if value is None else np.asarray(value).reshape(-1)[:1].reshape(())
    return const(np.full(shape, fill, dtype=fill.dtype))


@converter("Range")
def _range(ctx: NodeContext) -> Expr:
    start, limit, delta = (ctx.const_input(i, what) for i, what in
                           enumerate(("start", "limit", "delta")))
    dtype = np.asarray(start).dtype
    s, lim, d = (np.asarray(v).reshape(()).item() for v in (start, limit, delta))
    if d == 0:
        raise ctx.error("delta is 0")
    count = max(int(np.ceil((lim - s) / d)), 0)
    return const((s + np.arange(count) * d).astype(dtype))


@converter("EyeLike")
def _eye_like(ctx: NodeContext) -> Expr:
    shape = ctx.shape(0)
    if len(shape) != 2:
        raise ctx.error(f"input must be 2-d, got shape {shape}")
    dtype = onnx_dtype(int(ctx.attr("dtype")), "EyeLike dtype") if ctx.attr("dtype") is not None \
        else ctx.dtype(0)
    return const(np.eye(shape[0], shape[1], k=int(ctx.attr("k", 0)), dtype=np_dtype(dtype)))


# --- reshaping -------------------------------------------------------------------------------

@converter("Reshape", needs=("reshape",))
def _reshape(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    shape = ctx.shape(x)
    target = [int(v) for v in ctx.attr("shape")] if ctx.opset < 5 else ctx.ints(1, "shape")
    allowzero = int(ctx.attr("allowzero", 0))
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(shape):
                raise ctx.error(f"target shape {target} copies dim {i}, which the input lacks")
            out.append(shape[i])
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise ctx.error(f"target shape {target} has more than one -1")
    size = int(np.prod(shape))
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        if known == 0 or size % known:
            raise ctx.error(f"cannot reshape {shape} to {target}")
        out[out.index(-1)] = size // known
    if int(np.prod(out)) != size:
        raise ctx.error(f"cannot reshape {shape} ({size} elements) to {target}")
    return reshape_to(ctx, x, out)


@converter("Flatten", needs=("reshape",))
def _flatten(ctx: NodeContext) -> Expr:
    shape = ctx.shape(0)
    axis = int(ctx.attr("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise ctx.error(f"axis {ctx.attr('axis')} is out of range for a {len(shape)}-d input")
    return reshape_to(ctx, ctx.input(0), (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))


@converter("Squeeze", needs=("reshape",))
def _squeeze(ctx: NodeContext) -> Expr:
    shape = ctx.shape(0)
    axes = _axes_arg(ctx, 1, 13)
    if axes is None:
        drop = {i for i, d in enumerate(shape) if d == 1}
    else:
        drop = {normalize_axis(ctx, a, len(shape)) for a in axes}
        bad = [a for a in drop if shape[a] != 1]
        if bad:
            raise ctx.error(f"cannot squeeze axes {sorted(bad)} of shape {shape}: not of size 1")
    return reshape_to(ctx, ctx.input(0), [d for i, d in enumerate(shape) if i not in drop])


@converter("Unsqueeze", needs=("reshape",))
def _unsqueeze(ctx: NodeContext) -> Expr:
    shape = ctx.shape(0)
    axes = _axes_arg(ctx, 1, 13)
    if not axes:
        raise ctx.error("axes are required")
    rank = len(shape) + len(axes)
    where = sorted({normalize_axis(ctx, a, rank) for a in axes})
    if len(where) != len(axes):
        raise ctx.error(f"axes {axes} repeat an axis")
    dims = iter(shape)
    out = [1 if i in where else next(dims) for i in range(rank)]
    return reshape_to(ctx, ctx.input(0), out)


@converter("Transpose", needs=("transpose",))
def _transpose(ctx: NodeContext) -> Expr:
    rank = ctx.ndim(0)
    perm = ctx.attr("perm")
    axes = list(range(rank))[::-1] if perm is None else [normalize_axis(ctx, int(p), rank) for p in perm]
    if axes == list(range(rank)):
        return ctx.input(0)
    return _tf().transpose(ctx.input(0), axes=axes)


@converter("Concat", needs=("concatenate",))
def _concat(ctx: NodeContext) -> Expr:
    args = [x for x in ctx.inputs if x is not None]
    rank = ctx.ndim(args[0])
    axis = normalize_axis(ctx, int(ctx.attr("axis", 1 if ctx.opset < 4 else 0)), rank)
    if len(args) == 1:
        return args[0]
    return _tf().concatenate(args, axis=axis)


@converter("Split", needs=("split",))
def _split(ctx: NodeContext) -> list[Expr | None]:
    x = ctx.input(0)
    shape = ctx.shape(x)
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), len(shape))
    dim = shape[axis]
    if ctx.opset < 13 and ctx.attr("split") is not None:
        sizes = [int(s) for s in ctx.attr("split")]
    elif ctx.opset >= 13 and ctx.has_input(1):
        sizes = ctx.ints(1, "split")
    else:
        n = int(ctx.attr("num_outputs", ctx.num_outputs))
        chunk = -(-dim // n)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]
        if ctx.opset < 18 and dim % n:
            raise ctx.error(f"cannot split dim {dim} into {n} equal parts")
    if sum(sizes) != dim:
        raise ctx.error(f"split sizes {sizes} do not add up to dim {axis} of shape {shape}")
    if len(sizes) == 1:
        return [x]
    indices = list(np.cumsum(sizes)[:-1].tolist())
    parts = _tf().split(x, indices_or_sections=indices, axis=axis)
    return [parts[i] for i in range(len(sizes))]


@converter("Slice", needs=("strided_slice",))
def _slice(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    if ctx.opset < 10:
        starts = [int(v) for v in ctx.attr("starts")]
        ends = [int(v) for v in ctx.attr("ends")]
        axes = [int(v) for v in ctx.attr("axes", list(range(len(starts))))]
        steps = [1] * len(starts)
    else:
        starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
        axes = ctx.ints(3, "axes") if ctx.has_input(3) else list(range(len(starts)))
        steps = ctx.ints(4, "steps") if ctx.has_input(4) else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    return static_slice(ctx, x, axes, starts, ends, steps)


@converter("Expand", needs=("broadcast_to",))
def _expand(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    shape = ctx.shape(x)
    target = ctx.ints(1, "shape")
    rank = max(len(shape), len(target))
    a = (1,) * (rank - len(shape)) + tuple(shape)
    b = (1,) * (rank - len(target)) + tuple(target)
    out = []
    for da, db in zip(a, b):
        if da != db and da != 1 and db != 1:
            raise ctx.error(f"cannot expand shape {shape} to {target}")
        out.append(db if da == 1 else da)
    if tuple(out) == shape:
        return x
    return _tf().broadcast_to(x, tuple(out))


@converter("Tile", needs=("tile",))
def _tile(ctx: NodeContext) -> Expr:
    reps = ctx.ints(1, "repeats")
    if len(reps) != ctx.ndim(0):
        raise ctx.error(f"repeats {reps} must have one entry per input dim")
    if all(r == 1 for r in reps):
        return ctx.input(0)
    return _tf().tile(ctx.input(0), reps=reps)


# --- gather and scatter ------------------------------------------------------------------------

@converter("Gather", needs=("take",))
def _gather(ctx: NodeContext) -> Expr:
    x, idx = ctx.input(0), ctx.input(1)
    shape = ctx.shape(x)
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), len(shape))
    idx = nonneg_indices(ctx, idx, shape[axis])
    return _tf().take(x, idx, axis=axis, mode="clip")


@converter("GatherElements", needs=("gather",))
def _gather_elements(ctx: NodeContext) -> Expr:
    x, idx = ctx.input(0), ctx.input(1)
    shape = ctx.shape(x)
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), len(shape))
    return _tf().gather(x, axis, nonneg_indices(ctx, idx, shape[axis]))


def _index_first(ctx: NodeContext, data: Expr, idx: Expr, batch_dims: int) -> Expr:
    """ONNX's index-last layout (..., M) to relay's index-first (M, ...), negatives wrapped."""
    shape, ishape = ctx.shape(data), ctx.shape(idx)
    m = ishape[-1]
    dims = np.array(shape[batch_dims:batch_dims + m], dtype=np_dtype(ctx.dtype(idx)))
    value = ctx.value(idx)
    if value is not None:
        wrapped = np.where(value < 0, value + dims, value)
        return const(np.moveaxis(wrapped, -1, 0).copy(), ctx.dtype(idx))
    fixed = ew.where(ew.less(idx, const(0, ctx.dtype(idx))), ew.add(idx, const(dims)), idx)
    rank = len(ishape)
    return _tf().transpose(fixed, axes=[rank - 1, *range(rank - 1)])


@converter("GatherND", needs=("gather_nd", "transpose"))
def _gather_nd(ctx: NodeContext) -> Expr:
    x, idx = ctx.input(0), ctx.input(1)
    batch_dims = int(ctx.attr("batch_dims", 0))
    m = ctx.shape(idx)[-1]
    return _tf().gather_nd(x, _index_first(ctx, x, idx, batch_dims), batch_dims=batch_dims,
                           index_rank=m)


def _check_scatter(attrs: dict[str, Any], opset: int) -> str | None:
    reduction = _reduction(attrs)
    return None if reduction in ("none", "add", "mul", "min", "max") else f"reduction={reduction!r}"


def _reduction(attrs: dict[str, Any]) -> str:
    """The scatter reduction; ``"update"`` (relay's name, which onnxruntime and TVM accept) is
    ``"none"``."""
    reduction = str(attrs.get("reduction", "none"))
    return "none" if reduction == "update" else reduction


@converter("ScatterElements", "Scatter", needs=("scatter_elements",), check=_check_scatter)
def _scatter_elements(ctx: NodeContext) -> Expr:
    x, idx, upd = ctx.input(0), ctx.input(1), ctx.input(2)
    shape = ctx.shape(x)
    axis = normalize_axis(ctx, int(ctx.attr("axis", 0)), len(shape))
    reduction = _reduction(ctx.attrs)
    return _tf().scatter_elements(x, nonneg_indices(ctx, idx, shape[axis]), upd, axis=axis,
                                  reduction="update" if reduction == "none" else reduction)


@converter("ScatterND", needs=("scatter_nd", "scatter_elements", "transpose"), check=_check_scatter)
def _scatter_nd(ctx: NodeContext) -> Expr:
    x, idx, upd = ctx.input(0), ctx.input(1), ctx.input(2)
    reduction = _reduction(ctx.attrs)
    if reduction in ("none", "add"):
        mode = "add" if reduction == "add" else "update"
        return _tf().scatter_nd(x, _index_first(ctx, x, idx, 0), upd, mode=mode)
    return _scatter_nd_elementwise(ctx, x, idx, upd, reduction)


def _scatter_nd_elementwise(ctx: NodeContext, x: Expr, idx: Expr, upd: Expr, reduction: str) -> Expr:
    """ScatterND with mul/min/max as a scatter_elements over the flattened data: each index
    tuple addresses a contiguous slice of the flattened tensor."""
    shape, ishape = ctx.shape(x), ctx.shape(idx)
    m = ishape[-1]
    strides = np.array([int(np.prod(shape[i + 1:])) for i in range(m)], dtype=np.int64)
    slice_size = int(np.prod(shape[m:]))
    fixed = _index_first(ctx, x, idx, 0)  # (m, ...) with negatives wrapped
    rest = ctx.shape(fixed)[1:]
    weights = const(strides.reshape((m,) + (1,) * len(rest)))
    base = _red_sum(ew.multiply(ew.cast(fixed, "int64"), weights), 0)
    offsets = const(np.arange(slice_size, dtype=np.int64))
    flat_idx = ew.add(reshape_to(ctx, base, (*rest, 1)), offsets)
    total = int(np.prod(shape))
    count = int(np.prod(rest)) * slice_size
    out = _tf().scatter_elements(reshape_to(ctx, x, (total,)), reshape_to(ctx, flat_idx, (count,)),
                                 reshape_to(ctx, upd, (count,)), axis=0, reduction=reduction)
    return reshape_to(ctx, out, shape)


def _red_sum(x: Expr, axis: int) -> Expr:
    from kiln.op import reduce

    return reduce.sum(x, axis=[axis], keepdims=False)


def _check_tensor_scatter(attrs: dict[str, Any], opset: int) -> str | None:
    mode = attrs.get("mode", "linear")
    return None if mode in ("linear", "circular") else f"mode={mode!r}"


@converter("TensorScatter", needs=("scatter_elements", "broadcast_to"), check=_check_tensor_scatter)
def _tensor_scatter(ctx: NodeContext) -> Expr:
    """Write ``update`` into a cache along ``axis`` from each batch entry's write index."""
    cache, update = ctx.input(0), ctx.input(1)
    shape, ushape = ctx.shape(cache), ctx.shape(update)
    axis = normalize_axis(ctx, int(ctx.attr("axis", -2)), len(shape))
    if axis == 0:
        raise ctx.error("axis 0 is the batch axis; the sequence axis must be another one")
    start = ctx.input(2) if ctx.has_input(2) else const(np.zeros(shape[0], np.int64))
    start = ew.cast(start, "int64") if ctx.dtype(start) != "int64" else start
    rank = len(ushape)
    base = reshape_to(ctx, start, (shape[0],) + (1,) * (rank - 1))
    steps = np.arange(ushape[axis], dtype=np.int64).reshape((1,) * axis + (-1,) + (1,) * (rank - axis - 1))
    index = ew.add(base, const(steps))
    if ctx.attr("mode", "linear") == "circular":
        index = ew.floor_mod(index, const(shape[axis], "int64"))
    index = _tf().broadcast_to(index, ushape)
    return _tf().scatter_elements(cache, index, update, axis=axis, reduction="update")


# --- padding -------------------------------------------------------------------------------------

def _check_pad(attrs: dict[str, Any], opset: int) -> str | None:
    mode = attrs.get("mode", "constant")
    return None if mode in ("constant", "edge", "reflect", "wrap") else f"mode={mode!r}"


@converter("Pad", needs=("nn.pad", "strided_slice", "concatenate"), check=_check_pad)
def _pad(ctx: NodeContext) -> Expr:
    from kiln.op import nn

    x = ctx.input(0)
    shape = ctx.shape(x)
    rank = len(shape)
    mode = ctx.attr("mode", "constant")
    if ctx.opset < 11:
        pads = [int(p) for p in ctx.attr("pads", ctx.attr("paddings", [0] * 2 * rank))]
        value: Expr | float = float(ctx.attr("value", 0.0))
        axes = list(range(rank))
    else:
        pads = ctx.ints(1, "pads")
        value = ctx.input(2) if ctx.has_input(2) and int(np.prod(ctx.shape(2))) else 0.0
        axes = ctx.ints(3, "axes") if ctx.has_input(3) else list(range(rank))
    axes = [normalize_axis(ctx, a, rank) for a in axes]
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"pads {pads} must hold two entries per padded axis ({len(axes)})")
    before, after = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        before[a], after[a] = pads[k], pads[k + len(axes)]
    # Negative pads crop: slice first, then pad with the non-negative remainder.
    if any(p < 0 for p in before + after):
        x = static_slice(ctx, x, list(range(rank)), [max(-b, 0) for b in before],
                         [d - max(-a, 0) for d, a in zip(shape, after)])
        before, after = [max(b, 0) for b in before], [max(a, 0) for a in after]
    if not any(before) and not any(after):
        return x
    if mode == "wrap":
        return _wrap_pad(ctx, x, before, after)
    if isinstance(value, Expr):
        pad_value = reshape_to(ctx, value, ())
        if ctx.dtype(pad_value) != ctx.dtype(x):
            pad_value = ew.cast(pad_value, ctx.dtype(x))
    else:
        pad_value = const(value, ctx.dtype(x))
    return nn.pad(x, pad_width=list(zip(before, after)), pad_value=pad_value, pad_mode=mode)


def _wrap_pad(ctx: NodeContext, x: Expr, before: list[int], after: list[int]) -> Expr:
    """Circular padding: each axis gets its own tail in front and its head behind."""
    for axis, (b, a) in enumerate(zip(before, after)):
        if not b and not a:
            continue
        dim = ctx.shape(x)[axis]
        if b > dim or a > dim:
            raise ctx.error(f"wrap padding of {max(a, b)} exceeds dim {axis} of size {dim}")
        pieces = []
        if b:
            pieces.append(static_slice(ctx, x, [axis], [dim - b], [dim]))
        pieces.append(x)
        if a:
            pieces.append(static_slice(ctx, x, [axis], [0], [a]))
        x = _tf().concatenate(pieces, axis=axis)
    return x


# --- index generation ----------------------------------------------------------------------------

@converter("OneHot", needs=("one_hot", "cast"))
def _one_hot(ctx: NodeContext) -> Expr:
    indices, values = ctx.input(0), ctx.input(2)
    depth = int(ctx.scalar(1, "depth"))
    axis = int(ctx.attr("axis", -1))
    if ctx.dtype(indices) != "int64":
        indices = ew.cast(indices, "int64")
    indices = nonneg_indices(ctx, indices, depth)
    known = ctx.value(values)
    dtype = ctx.dtype(values)
    if known is not None:
        off, on = const(known.reshape(-1)[0], dtype), const(known.reshape(-1)[1], dtype)
    else:
        off = _tf().take(values, const(0, "int64"), axis=0)
        on = _tf().take(values, const(1, "int64"), axis=0)
    return _tf().one_hot(indices, on, off, depth, axis=axis, dtype=dtype)


@converter("Trilu", needs=("trilu",))
def _trilu(ctx: NodeContext) -> Expr:
    k = int(ctx.scalar(1, "k")) if ctx.has_input(1) else 0
    return _tf().trilu(ctx.input(0), k, upper=bool(ctx.attr("upper", 1)))


@converter("ReverseSequence", needs=("reverse_sequence",))
def _reverse_sequence(ctx: NodeContext) -> Expr:
    return _tf().reverse_sequence(ctx.input(0), ctx.input(1), seq_axis=int(ctx.attr("time_axis", 0)),
                                  batch_axis=int(ctx.attr("batch_axis", 1)))


# --- data-dependent shapes: only when the data is constant ---------------------------------------

def _constant_data(ctx: NodeContext, i: int) -> np.ndarray:
    value = ctx.value(i)
    if value is None:
        names = ctx.importer.inputs_of(ctx.input(i))
        raise InputDependentError(
            ctx.op_type, ctx.name, f"{ctx.op_type} on data computed from graph input(s) "
            + ", ".join(repr(n) for n in names) + ": its output shape depends on the data, and Kiln "
            "compiles static shapes (bind those inputs with const_inputs= to fold it)", ctx.opset, names)
    return value


@converter("NonZero")
def _nonzero(ctx: NodeContext) -> Expr:
    data = _constant_data(ctx, 0)
    return const(np.array(np.nonzero(data), dtype=np.int64).reshape(data.ndim, -1))


@converter("Unique")
def _unique(ctx: NodeContext) -> list[Expr | None]:
    data = _constant_data(ctx, 0)
    axis = ctx.attr("axis")
    values, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True,
                                               return_counts=True,
                                               axis=None if axis is None else int(axis))
    if not int(ctx.attr("sorted", 1)):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values = np.take(values, order, axis=0 if axis is None else int(axis))
        first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
    return [const(values), const(first.astype(np.int64)), const(inverse.reshape(-1).astype(np.int64)),
            const(counts.astype(np.int64))]


@converter("Compress", needs=("take", "reshape"))
def _compress(ctx: NodeContext) -> Expr:
    cond = np.asarray(_constant_data(ctx, 1)).astype(bool).reshape(-1)
    x = ctx.input(0)
    axis = ctx.attr("axis")
    if axis is None:
        x = reshape_to(ctx, x, (int(np.prod(ctx.shape(x))),))
        axis = 0
    axis = normalize_axis(ctx, int(axis), ctx.ndim(x))
    picked = np.nonzero(cond[:ctx.shape(x)[axis]])[0].astype(np.int64)
    return _tf().take(x, const(picked), axis=axis)
