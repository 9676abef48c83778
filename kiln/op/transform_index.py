"""Indexing operators: strided_slice, slice_like, take, gather, gather_nd, one_hot, unravel_index.

Index conventions (the reference kernels define them; compiled kernels must agree):

* ``strided_slice`` clamps bounds exactly as NumPy/ONNX ``Slice`` do: negative bounds count from
  the end, out-of-range bounds are clamped, and an empty range gives a zero-size dimension.
* ``take`` handles out-of-range indices by ``mode``: ``"clip"`` clamps to ``[0, n - 1]`` (so
  negative indices read element 0, as TVM), ``"wrap"`` wraps modulo ``n``, ``"fast"`` accepts
  ``[-n, n)`` with negative indices counting from the end and rejects anything else.
* ``gather`` and ``gather_nd`` (like the scatters of :mod:`~kiln.op.transform_scatter`) accept
  indices in ``[-n, n)`` (negative ones count from the end, as ONNX allows) and reject others.
* ``gather_nd`` uses relay's index layout: the index tuple is the *first* axis of ``indices``
  (shape ``(M, Y...)``), not the last as in ONNX.
* ``one_hot`` compares indices with ``0 .. depth - 1``: a negative index selects nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

from kiln.errors import KilnError, KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr, _to_expr, const
from kiln.ir.types import TensorType, Type, as_dtype, tensor_of
from kiln.op.registry import OpPattern, make_call, register_op, tensor_arg
from kiln.op.transform_common import (
    as_result,
    check_index_dtype,
    const_int,
    const_ints,
    optional_axes,
    wrap_negative,
)

__all__ = [
    "GatherAttrs",
    "GatherNDAttrs",
    "OneHotAttrs",
    "SliceLikeAttrs",
    "StridedSliceAttrs",
    "TakeAttrs",
    "gather",
    "gather_nd",
    "one_hot",
    "slice_like",
    "strided_slice",
    "take",
    "unravel_index",
]

Bound = int | None


# --- strided_slice, slice_like ---------------------------------------------------------------

@attrs_class("relay.attrs.StridedSliceAttrs", always_print=("axes",))
class StridedSliceAttrs(Attrs):
    """Bounds of ``strided_slice`` (``None`` entries: from the start / to the end)."""

    begin: tuple[Bound, ...]
    end: tuple[Bound, ...]
    strides: tuple[int, ...]
    slice_mode: str = "end"
    axes: tuple[int, ...] | None = None


def slice_ranges(shape: tuple[int, ...], attrs: StridedSliceAttrs) -> tuple[slice, ...]:
    """The NumPy slices ``strided_slice`` takes, one per dimension of a tensor of ``shape``.

    Parameters
    ----------
    shape : tuple of int
        Input shape.
    attrs : StridedSliceAttrs
        The slice.

    Returns
    -------
    tuple of slice
        Normalised slices (``x[slices]`` is the result).
    """
    ndim = len(shape)
    begin, end, strides = list(attrs.begin), list(attrs.end), list(attrs.strides)
    if attrs.slice_mode not in ("end", "size"):
        raise KilnTypeError(f"strided_slice: slice_mode must be 'end' or 'size', got {attrs.slice_mode!r}")
    if attrs.axes is None:
        axes = list(range(ndim))
        if max(len(begin), len(end), len(strides)) > ndim:
            raise KilnTypeError(f"strided_slice: begin {attrs.begin}, end {attrs.end} and strides "
                                f"{attrs.strides} have more entries than the {ndim}-d data {shape}")
    else:
        axes = list(attrs.axes)
        if not len(begin) == len(end) == len(axes):
            raise KilnTypeError(f"strided_slice: axes {attrs.axes}, begin {attrs.begin} and end "
                                f"{attrs.end} must have the same length")
        for a in axes:
            if not -ndim <= a < ndim:
                raise KilnTypeError(f"strided_slice: axis {a} is out of range for shape {shape}")
    n = len(axes)
    strides += [1] * (n - len(strides))
    begin += [None] * (n - len(begin))
    end += [None] * (n - len(end))
    out = [slice(None)] * ndim
    for i, axis in enumerate(axes):
        dim = shape[axis]
        step = 1 if attrs.slice_mode == "size" else strides[i]
        if step == 0:
            raise KilnTypeError(f"strided_slice: stride of axis {axis} is 0")
        b, e = begin[i], end[i]
        if attrs.slice_mode == "size":
            start = 0 if b is None else (b + dim if b < 0 else b)
            e = None if e is None or e < 0 else start + e
        picked = range(dim)[slice(b, e, step)]
        # a negative stop means "before element 0", which only None can spell in a slice
        stop = picked.stop if picked.stop >= 0 else None
        out[axis % ndim] = slice(picked.start, stop, picked.step) if len(picked) else slice(0, 0)
    return tuple(out)


def _strided_slice_rel(types: list[Type], attrs: StridedSliceAttrs) -> Type:
    data = tensor_arg(types, 0, "strided_slice", "data")
    ranges = slice_ranges(data.shape, attrs)
    return TensorType(tuple(len(range(dim)[s]) for dim, s in zip(data.shape, ranges)), data.dtype)


register_op("strided_slice", num_inputs=1, type_rel=_strided_slice_rel,
            reference=lambda args, attrs, out: args[0][slice_ranges(args[0].shape, attrs)],
            pattern=OpPattern.INJECTIVE, attrs_type=StridedSliceAttrs, doc="NumPy-style slicing",
            layout="strided_slice")


def _bounds(value: Any, what: str) -> tuple[Bound, ...]:
    if isinstance(value, (Expr, np.ndarray, int, np.integer)):
        return const_ints(value, "strided_slice", what)
    return tuple(None if v is None else const_int(v, "strided_slice", what) for v in value)


def strided_slice(data: Expr, begin: Any, end: Any, strides: Any = None, axes: Any = None,
                  slice_mode: str = "end") -> Call:
    """Slice ``data`` with per-axis begin, end and stride (NumPy semantics).

    Bounds must be constants (Kiln compiles static shapes); entries may be ``None`` for "from the
    start"/"to the end".

    Parameters
    ----------
    data : Expr
        The input tensor.
    begin, end : sequence of int or Constant
        Bounds per axis (missing trailing axes are taken whole).
    strides : sequence of int, optional
        Steps per axis (default 1; negative steps walk backwards).
    axes : sequence of int, optional
        The axes ``begin``/``end``/``strides`` refer to (default: the leading axes).
    slice_mode : str
        ``"end"``: ``end`` is exclusive; ``"size"``: ``end`` is the slice length (negative: to the
        end) and strides are ignored.

    Returns
    -------
    Call
        The slice.
    """
    no_strides = strides is None or (isinstance(strides, (list, tuple)) and not strides)
    attrs = StridedSliceAttrs(begin=_bounds(begin, "begin"), end=_bounds(end, "end"),
                              strides=(1,) if no_strides else const_ints(strides, "strided_slice",
                                                                         "strides"),
                              slice_mode=str(slice_mode),
                              axes=optional_axes(axes, "strided_slice", "axes"))
    return make_call("strided_slice", [data], attrs)


@attrs_class("relay.attrs.SliceLikeAttrs")
class SliceLikeAttrs(Attrs):
    """Axes ``slice_like`` cuts (``None``: the leading axes ``shape_like`` has)."""

    axes: tuple[int, ...] | None


def _slice_like_shape(data: TensorType, like: TensorType, axes: tuple[int, ...] | None) -> tuple[int, ...]:
    shape = list(data.shape)
    if axes is None:
        chosen = list(range(min(data.ndim, like.ndim)))
    else:
        if not axes:
            raise KilnTypeError("slice_like: axes cannot be empty")
        chosen = []
        for a in axes:
            axis = a + data.ndim if a < 0 else a
            if not 0 <= axis < min(data.ndim, like.ndim):
                raise KilnTypeError(f"slice_like: axis {a} is out of range for data {data.shape} and "
                                    f"shape_like {like.shape}")
            chosen.append(axis)
    for axis in chosen:
        if like.shape[axis] > data.shape[axis]:
            raise KilnTypeError(f"slice_like: shape_like {like.shape} is larger than data {data.shape} "
                                f"on axis {axis}")
        shape[axis] = like.shape[axis]
    return tuple(shape)


def _slice_like_rel(types: list[Type], attrs: SliceLikeAttrs) -> Type:
    data = tensor_arg(types, 0, "slice_like", "data")
    like = tensor_arg(types, 1, "slice_like", "shape_like")
    return TensorType(_slice_like_shape(data, like, attrs.axes), data.dtype)


register_op("slice_like", num_inputs=2, type_rel=_slice_like_rel,
            reference=lambda args, attrs, out: args[0][tuple(slice(0, d) for d in tensor_of(out).shape)],
            pattern=OpPattern.INJECTIVE, attrs_type=SliceLikeAttrs,
            doc="slice to the shape of another tensor")


def slice_like(data: Expr, shape_like: Expr, axes: Any = None) -> Call:
    """Cut ``data`` (from index 0) to the size of ``shape_like`` on ``axes``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    shape_like : Expr
        The tensor whose sizes are used.
    axes : sequence of int, optional
        Axes to cut; ``None`` cuts every axis ``shape_like`` has.

    Returns
    -------
    Call
        The slice.
    """
    return make_call("slice_like", [data, shape_like],
                     SliceLikeAttrs(axes=optional_axes(axes, "slice_like", "axes")))


# --- take, gather, gather_nd -----------------------------------------------------------------

@attrs_class("relay.attrs.TakeAttrs")
class TakeAttrs(Attrs):
    """Axis, batch dimensions and out-of-range mode of ``take``."""

    batch_dims: int = 0
    axis: int | None = None
    mode: str = "clip"


def _take_plan(data: TensorType | np.ndarray, indices_ndim: int, attrs: TakeAttrs) -> tuple[int, int]:
    """Normalised ``(axis, batch_dims)`` of a take; ``(0, 0)`` when ``axis=None`` flattens the data."""
    ndim = data.ndim
    if attrs.mode not in ("clip", "wrap", "fast"):
        raise KilnTypeError(f"take: mode must be 'clip', 'wrap' or 'fast', got {attrs.mode!r}")
    if attrs.axis is None:
        return 0, 0
    if not -ndim <= attrs.axis < ndim:
        raise KilnTypeError(f"take: axis {attrs.axis} is out of range for data of shape {data.shape}")
    axis = attrs.axis % ndim
    batch = attrs.batch_dims + indices_ndim if attrs.batch_dims < 0 else attrs.batch_dims
    if not 0 <= batch <= min(axis, indices_ndim):
        raise KilnTypeError(f"take: batch_dims {attrs.batch_dims} must be within [0, axis={axis}] and "
                            f"at most the {indices_ndim} dimensions of indices")
    return axis, batch


def _take_rel(types: list[Type], attrs: TakeAttrs) -> Type:
    data = tensor_arg(types, 0, "take", "data")
    indices = tensor_arg(types, 1, "take", "indices")
    check_index_dtype("take", indices)
    axis, batch = _take_plan(data, indices.ndim, attrs)
    if indices.size and (data.size if attrs.axis is None else data.shape[axis]) == 0:
        raise KilnTypeError(f"take: cannot take from an empty axis of data {data.shape}")
    if attrs.axis is None:
        return TensorType(indices.shape, data.dtype)
    if data.shape[:batch] != indices.shape[:batch]:
        raise KilnTypeError(f"take: the first {batch} (batch) dimensions of data {data.shape} and "
                            f"indices {indices.shape} differ")
    shape = data.shape[:axis] + indices.shape[batch:] + data.shape[axis + 1:]
    return TensorType(shape, data.dtype)


def _take_ref(args: list[np.ndarray], attrs: TakeAttrs, out: Type) -> np.ndarray:
    x, idx = args
    axis, batch = _take_plan(x, idx.ndim, attrs)
    if attrs.axis is None:
        x = x.reshape(-1)
    n = x.shape[axis]
    idx = idx.astype(np.int64)
    if attrs.mode == "clip":
        idx = np.clip(idx, 0, n - 1)
    elif attrs.mode == "wrap":
        idx = np.mod(idx, n) if n else idx
    else:
        idx = wrap_negative("take", idx, n)
    if batch == 0:
        return as_result(out, np.take(x, idx, axis=axis))
    groups = prod(x.shape[:batch])
    xb = x.reshape((groups, *x.shape[batch:]))
    ib = idx.reshape((groups, *idx.shape[batch:]))
    parts = [np.take(xb[g], ib[g], axis=axis - batch) for g in range(groups)]
    shape = tensor_of(out).shape
    return as_result(out, np.stack(parts).reshape(shape) if parts else np.zeros(shape))


register_op("take", num_inputs=2, type_rel=_take_rel, reference=_take_ref,
            pattern=OpPattern.INJECTIVE, attrs_type=TakeAttrs, doc="select slices by index")


def take(data: Expr, indices: Any, axis: int | None = None, batch_dims: int = 0,
         mode: str = "clip") -> Call:
    """Take elements (``axis=None``: of the flattened data) or slices along ``axis`` by index.

    Parameters
    ----------
    data : Expr
        The source tensor.
    indices : Expr or int
        Integer indices; the result has ``data.shape[:axis] + indices.shape[batch_dims:] +
        data.shape[axis + 1:]``.
    axis : int, optional
        The axis to index; ``None`` indexes the flattened data.
    batch_dims : int
        Leading dimensions shared by ``data`` and ``indices``.
    mode : str
        Out-of-range handling: ``"clip"``, ``"wrap"`` or ``"fast"`` (see the module docstring).

    Returns
    -------
    Call
        The take.
    """
    attrs = TakeAttrs(batch_dims=int(batch_dims), axis=None if axis is None else int(axis), mode=str(mode))
    return make_call("take", [data, _to_expr(indices)], attrs)


@attrs_class("relay.attrs.GatherAttrs")
class GatherAttrs(Attrs):
    """Axis of ``gather``."""

    axis: int | None = None


def _gather_rel(types: list[Type], attrs: GatherAttrs) -> Type:
    data = tensor_arg(types, 0, "gather", "data")
    indices = tensor_arg(types, 1, "gather", "indices")
    check_index_dtype("gather", indices)
    if attrs.axis is None or not -data.ndim <= attrs.axis < data.ndim:
        raise KilnTypeError(f"gather: axis {attrs.axis} is out of range for data of shape {data.shape}")
    axis = attrs.axis % data.ndim
    if indices.ndim != data.ndim:
        raise KilnTypeError(f"gather: indices {indices.shape} and data {data.shape} must have the "
                            "same rank")
    for d, (i, n) in enumerate(zip(indices.shape, data.shape)):
        if d != axis and i > n:
            raise KilnTypeError(f"gather: indices {indices.shape} are larger than data {data.shape} "
                                f"on axis {d}")
    return TensorType(indices.shape, data.dtype)


def element_index(idx: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """The fancy index of ``gather``/``scatter_elements``: ``idx``'s own positions, axis ``axis`` replaced.

    Parameters
    ----------
    idx : numpy.ndarray
        Non-negative indices along ``axis``.
    axis : int
        The indexed axis.

    Returns
    -------
    tuple of numpy.ndarray
        Broadcastable index arrays, one per axis.
    """
    grid: list[np.ndarray] = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    return tuple(grid)


def _gather_ref(args: list[np.ndarray], attrs: GatherAttrs, out: Type) -> np.ndarray:
    x, idx = args
    assert attrs.axis is not None  # _gather_rel rejects a missing axis
    axis = attrs.axis % x.ndim
    idx = wrap_negative("gather", idx, x.shape[axis])
    return as_result(out, x[element_index(idx, axis)])


register_op("gather", num_inputs=2, type_rel=_gather_rel, reference=_gather_ref,
            pattern=OpPattern.INJECTIVE, attrs_type=GatherAttrs,
            doc="gather elements along an axis (ONNX GatherElements)")


def gather(data: Expr, axis: int, indices: Expr) -> Call:
    """``out[i][j][k] = data[indices[i][j][k]][j][k]`` for ``axis=0`` (ONNX GatherElements).

    Parameters
    ----------
    data : Expr
        The source tensor.
    axis : int
        The indexed axis.
    indices : Expr
        Integer indices of the same rank as ``data``; the result has their shape.

    Returns
    -------
    Call
        The gather.
    """
    return make_call("gather", [data, indices], GatherAttrs(axis=const_int(axis, "gather", "axis")))


@attrs_class("relay.attrs.GatherNDAttrs")
class GatherNDAttrs(Attrs):
    """Batch dimensions and (optional, informative) index tuple length of ``gather_nd``."""

    batch_dims: int = 0
    index_rank: int | None = None


def _gather_nd_rel(types: list[Type], attrs: GatherNDAttrs) -> Type:
    data = tensor_arg(types, 0, "gather_nd", "data")
    indices = tensor_arg(types, 1, "gather_nd", "indices")
    check_index_dtype("gather_nd", indices)
    if indices.ndim == 0:
        raise KilnTypeError("gather_nd: indices must have at least one dimension (the index tuple)")
    m, b = indices.shape[0], attrs.batch_dims
    if attrs.index_rank is not None and attrs.index_rank != m:
        raise KilnTypeError(f"gather_nd: index_rank {attrs.index_rank} differs from indices.shape[0] = {m}")
    if b < 0 or m + b > data.ndim or b > indices.ndim - 1:
        raise KilnTypeError(f"gather_nd: indices {indices.shape} (index tuples of length {m}) and "
                            f"batch_dims {b} do not fit data of shape {data.shape}")
    if data.shape[:b] != indices.shape[1:1 + b]:
        raise KilnTypeError(f"gather_nd: the {b} batch dimensions of data {data.shape} and indices "
                            f"{indices.shape} (after the index axis) differ")
    return TensorType(indices.shape[1:] + data.shape[b + m:], data.dtype)


def nd_index(op: str, x_shape: tuple[int, ...], idx: np.ndarray, batch: int) -> tuple[np.ndarray, ...]:
    """The fancy index of ``gather_nd``/``scatter_nd`` (index tuples on the first axis of ``idx``).

    Parameters
    ----------
    op : str
        Operator name, for errors about out-of-range indices.
    x_shape : tuple of int
        Shape of the indexed tensor.
    idx : numpy.ndarray
        Indices of shape ``(M, Y...)``.
    batch : int
        Leading batch dimensions shared by ``x`` and ``Y``.

    Returns
    -------
    tuple of numpy.ndarray
        ``batch + M`` index arrays of shape ``Y``.
    """
    m, y_shape = idx.shape[0], idx.shape[1:]
    grid: Sequence[np.ndarray] = np.indices(y_shape, sparse=True) if y_shape else []
    parts = [np.broadcast_to(grid[i], y_shape) for i in range(batch)]
    for j in range(m):
        parts.append(wrap_negative(op, idx[j], x_shape[batch + j]))
    return tuple(parts)


def _gather_nd_ref(args: list[np.ndarray], attrs: GatherNDAttrs, out: Type) -> np.ndarray:
    x, idx = args
    return as_result(out, x[nd_index("gather_nd", x.shape, idx, attrs.batch_dims)])


register_op("gather_nd", num_inputs=2, type_rel=_gather_nd_rel, reference=_gather_nd_ref,
            pattern=OpPattern.INJECTIVE, attrs_type=GatherNDAttrs,
            doc="gather slices by index tuples (index tuple on the first axis)")


def gather_nd(data: Expr, indices: Expr, batch_dims: int = 0, index_rank: int | None = None) -> Call:
    """Gather slices of ``data`` addressed by index tuples.

    Parameters
    ----------
    data : Expr
        The source tensor, shape ``(B..., X_0, ..., X_{n-1})`` with ``batch_dims`` leading B axes.
    indices : Expr
        Integer tensor of shape ``(M, B..., Y...)``: ``indices[:, b, y]`` indexes the first ``M``
        non-batch axes of ``data``.
    batch_dims : int
        Number of leading batch dimensions.
    index_rank : int, optional
        ``M`` (checked if given).

    Returns
    -------
    Call
        A tensor of shape ``(B..., Y..., X_M, ..., X_{n-1})``.
    """
    rank = None if index_rank is None else int(index_rank)
    attrs = GatherNDAttrs(batch_dims=int(batch_dims), index_rank=rank)
    return make_call("gather_nd", [data, indices], attrs)


# --- one_hot, unravel_index ------------------------------------------------------------------

@attrs_class("relay.attrs.OneHotAttrs")
class OneHotAttrs(Attrs):
    """Depth, axis and dtype of ``one_hot``."""

    depth: int = 1
    axis: int = -1
    dtype: str | None = None


def _one_hot_rel(types: list[Type], attrs: OneHotAttrs) -> Type:
    indices = tensor_arg(types, 0, "one_hot", "indices")
    on = tensor_arg(types, 1, "one_hot", "on_value")
    off = tensor_arg(types, 2, "one_hot", "off_value")
    check_index_dtype("one_hot", indices)
    if on.ndim or off.ndim:
        raise KilnTypeError(f"one_hot: on_value and off_value must be scalars, got shapes {on.shape} "
                            f"and {off.shape}")
    if attrs.depth <= 0:
        raise KilnTypeError(f"one_hot: depth must be positive, got {attrs.depth}")
    ndim = indices.ndim + 1
    if not -ndim <= attrs.axis < ndim:
        raise KilnTypeError(f"one_hot: axis {attrs.axis} is out of range for {ndim}-d output")
    axis = attrs.axis % ndim
    shape = (*indices.shape[:axis], attrs.depth, *indices.shape[axis:])
    return TensorType(shape, attrs.dtype or on.dtype)


def _one_hot_ref(args: list[np.ndarray], attrs: OneHotAttrs, out: Type) -> np.ndarray:
    idx, on, off = args
    assert isinstance(out, TensorType)
    axis = attrs.axis % out.ndim
    positions = np.arange(attrs.depth).reshape((-1,) + (1,) * (idx.ndim - axis))
    hot = np.expand_dims(idx, axis) == positions
    return as_result(out, np.where(hot, as_result(out, on), as_result(out, off)))


register_op("one_hot", num_inputs=3, type_rel=_one_hot_rel, reference=_one_hot_ref,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=OneHotAttrs, doc="one-hot encoding")


def one_hot(indices: Expr, on_value: Any, off_value: Any, depth: Any, axis: int, dtype: str) -> Call:
    """One-hot encode ``indices``: ``on_value`` where ``index == k``, else ``off_value``.

    ``depth`` decides the output shape, so it must be a constant (int or ``relay.const``);
    ``on_value``/``off_value`` are scalar expressions (Python numbers become constants of ``dtype``).

    Parameters
    ----------
    indices : Expr
        Integer tensor.
    on_value, off_value : Expr or number
        Scalars.
    depth : int or Constant
        Number of classes.
    axis : int
        Where the class axis goes (-1: last).
    dtype : str
        Output dtype.

    Returns
    -------
    Call
        A tensor with one more dimension than ``indices``.
    """
    dtype = as_dtype(dtype)
    on = on_value if isinstance(on_value, Expr) else const(on_value, dtype)
    off = off_value if isinstance(off_value, Expr) else const(off_value, dtype)
    attrs = OneHotAttrs(depth=const_int(depth, "one_hot", "depth"), axis=int(axis), dtype=dtype)
    return make_call("one_hot", [indices, on, off], attrs)


def _unravel_rel(types: list[Type], attrs: Any) -> Type:
    indices = tensor_arg(types, 0, "unravel_index", "indices")
    shape = tensor_arg(types, 1, "unravel_index", "shape")
    check_index_dtype("unravel_index", indices)
    check_index_dtype("unravel_index", shape, "shape")
    if indices.ndim > 1 or shape.ndim != 1:
        raise KilnTypeError(f"unravel_index: indices must be 0-d or 1-d and shape 1-d, got "
                            f"{indices.shape} and {shape.shape}")
    return TensorType(shape.shape + indices.shape, indices.dtype)


def _unravel_ref(args: list[np.ndarray], attrs: Any, out: Type) -> np.ndarray:
    idx, dims = args[0].astype(np.int64), args[1].astype(np.int64)
    coords = []
    for d in dims[::-1]:
        if d <= 0:
            raise KilnError(f"unravel_index: shape {dims.tolist()} has a non-positive dimension")
        coords.append(np.mod(idx, d))
        idx = np.floor_divide(idx, d)
    return as_result(out, np.stack(coords[::-1]) if coords else np.zeros(tensor_of(out).shape))


register_op("unravel_index", num_inputs=2, type_rel=_unravel_rel, reference=_unravel_ref,
            pattern=OpPattern.INJECTIVE, doc="flat indices to coordinates")


def unravel_index(indices: Expr, shape: Any) -> Call:
    """Coordinates of flat ``indices`` in a tensor of ``shape`` (one row per dimension).

    Parameters
    ----------
    indices : Expr
        0-d or 1-d integer tensor of flat indices.
    shape : Expr or sequence of int
        The shape (a 1-d integer tensor).

    Returns
    -------
    Call
        Shape ``(len(shape),) + indices.shape``, dtype of ``indices``.
    """
    if not isinstance(shape, Expr):
        shape = const(np.asarray(const_ints(shape, "unravel_index", "shape"), dtype=np.int64))
    return make_call("unravel_index", [indices, shape])
