"""Creating and repeating tensors: broadcast_to, tile, repeat, reverse, arange, full, zeros, ones, meshgrid.

Shapes are static: ``full``/``zeros``/``ones``/``broadcast_to`` take their shape, ``tile`` its
repetitions and ``arange`` its start/stop/step as constants (Python numbers or ``relay.const``),
stored as attributes. ``full``'s fill value stays an expression argument, as in TVM, since it does
not affect the shape.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr, Tuple, TupleWrapper, _to_expr, const
from kiln.ir.types import TensorType, TupleType, Type, as_dtype, is_int, np_dtype, tensor_of
from kiln.op.registry import OpPattern, broadcast_shapes, make_call, register_op, tensor_arg, tuple_arg
from kiln.op.transform_common import as_result, const_int, const_ints, const_number, tuple_expr

__all__ = [
    "ArangeAttrs",
    "InitOpAttrs",
    "MeshgridAttrs",
    "RepeatAttrs",
    "ReverseAttrs",
    "ReverseSequenceAttrs",
    "TileAttrs",
    "arange",
    "broadcast_to",
    "broadcast_to_like",
    "collapse_sum_like",
    "collapse_sum_to",
    "collapsed_axes",
    "full",
    "full_like",
    "meshgrid",
    "ones",
    "ones_like",
    "repeat",
    "reverse",
    "reverse_sequence",
    "tile",
    "zeros",
    "zeros_like",
]


@attrs_class("relay.attrs.InitOpAttrs")
class InitOpAttrs(Attrs):
    """Static shape (and dtype) of ``full``, ``zeros``, ``ones`` and ``broadcast_to``."""

    shape: tuple[int, ...]
    dtype: str | None = None


def _shape_attr(shape: Any, op: str) -> tuple[int, ...]:
    dims = const_ints(shape, op, "shape")
    if any(d < 0 for d in dims):
        raise KilnTypeError(f"{op}: shape {dims} has a negative dimension")
    return dims


# --- broadcast_to, broadcast_to_like ---------------------------------------------------------

def _broadcast_target(op: str, data: TensorType, shape: tuple[int, ...]) -> tuple[int, ...]:
    result = broadcast_shapes(data.shape, shape, op)
    if result != shape:
        raise KilnTypeError(f"{op}: cannot broadcast a tensor of shape {data.shape} to shape {shape} "
                            f"(broadcasting gives {result})")
    return shape


def _broadcast_to_rel(types: list[Type], attrs: InitOpAttrs) -> Type:
    data = tensor_arg(types, 0, "broadcast_to", "data")
    return TensorType(_broadcast_target("broadcast_to", data, attrs.shape), data.dtype)


def _broadcast_ref(args: list[np.ndarray], attrs: Any, out: Type) -> np.ndarray:
    assert isinstance(out, TensorType)
    return np.broadcast_to(args[0], out.shape)


register_op("broadcast_to", num_inputs=1, type_rel=_broadcast_to_rel, reference=_broadcast_ref,
            pattern=OpPattern.BROADCAST, attrs_type=InitOpAttrs, doc="broadcast to a static shape")


def broadcast_to(data: Expr, shape: Any) -> Call:
    """Broadcast ``data`` (NumPy rules) to ``shape``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    shape : int, sequence of int or Constant
        The target shape (a constant).

    Returns
    -------
    Call
        The broadcast.
    """
    return make_call("broadcast_to", [data], InitOpAttrs(shape=_shape_attr(shape, "broadcast_to")))


def _broadcast_to_like_rel(types: list[Type], attrs: Any) -> Type:
    data = tensor_arg(types, 0, "broadcast_to_like", "data")
    like = tensor_arg(types, 1, "broadcast_to_like", "broadcast_type")
    return TensorType(_broadcast_target("broadcast_to_like", data, like.shape), data.dtype)


register_op("broadcast_to_like", num_inputs=2, type_rel=_broadcast_to_like_rel, reference=_broadcast_ref,
            pattern=OpPattern.BROADCAST, doc="broadcast to another tensor's shape",
            layout="")  # its second operand gives a shape, not values


def broadcast_to_like(data: Expr, broadcast_type: Expr) -> Call:
    """Broadcast ``data`` to the shape of ``broadcast_type``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    broadcast_type : Expr
        The tensor whose shape is the target.

    Returns
    -------
    Call
        The broadcast.
    """
    return make_call("broadcast_to_like", [data, broadcast_type])


# --- collapse_sum_to, collapse_sum_like: the adjoints of broadcasting ---------------------------

def collapsed_axes(shape: tuple[int, ...], target: tuple[int, ...], op: str) -> tuple[int, ...]:
    """Axes of ``shape`` summed to reach ``target``: the leading extra axes, and the axes where
    ``target`` has 1 and ``shape`` more (``target`` must broadcast to ``shape``)."""
    if broadcast_shapes(shape, target, op) != tuple(shape):
        raise KilnTypeError(f"{op}: shape {target} does not broadcast to the data shape {shape}")
    lead = len(shape) - len(target)
    return tuple(range(lead)) + tuple(lead + j for j, d in enumerate(target)
                                      if d == 1 and shape[lead + j] != 1)


def _collapse_ref(args: list[np.ndarray], attrs: Any, out: Type) -> np.ndarray:
    assert isinstance(out, TensorType)
    axes = collapsed_axes(args[0].shape, out.shape, "collapse_sum")
    return as_result(out, np.sum(args[0], axis=axes).reshape(out.shape))


def _collapse_sum_to_rel(types: list[Type], attrs: InitOpAttrs) -> Type:
    data = tensor_arg(types, 0, "collapse_sum_to", "data")
    collapsed_axes(data.shape, attrs.shape, "collapse_sum_to")
    return TensorType(attrs.shape, data.dtype)


register_op("collapse_sum_to", num_inputs=1, type_rel=_collapse_sum_to_rel, reference=_collapse_ref,
            pattern=OpPattern.COMM_REDUCE, attrs_type=InitOpAttrs,
            doc="sum over the axes a broadcast to the data shape would add")


def collapse_sum_to(data: Expr, shape: Any) -> Call:
    """Sum ``data`` down to ``shape``: the adjoint of ``broadcast_to(x, data.shape)``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    shape : sequence of int or Constant
        A shape that broadcasts to ``data``'s (a constant).

    Returns
    -------
    Call
        The sum over the leading extra axes and the axes where ``shape`` has 1.
    """
    return make_call("collapse_sum_to", [data],
                     InitOpAttrs(shape=_shape_attr(shape, "collapse_sum_to")))


def _collapse_sum_like_rel(types: list[Type], attrs: Any) -> Type:
    data = tensor_arg(types, 0, "collapse_sum_like", "data")
    like = tensor_arg(types, 1, "collapse_sum_like", "collapse_type")
    collapsed_axes(data.shape, like.shape, "collapse_sum_like")
    return TensorType(like.shape, data.dtype)


register_op("collapse_sum_like", num_inputs=2, type_rel=_collapse_sum_like_rel,
            reference=_collapse_ref, pattern=OpPattern.COMM_REDUCE,
            doc="sum down to another tensor's shape", layout="")


def collapse_sum_like(data: Expr, collapse_type: Expr) -> Call:
    """Sum ``data`` down to the shape of ``collapse_type`` (see :func:`collapse_sum_to`)."""
    return make_call("collapse_sum_like", [data, collapse_type])


# --- tile, repeat, reverse, reverse_sequence -------------------------------------------------

@attrs_class("relay.attrs.TileAttrs")
class TileAttrs(Attrs):
    """Repetitions of ``tile`` per axis."""

    reps: tuple[int, ...]


def _tile_rel(types: list[Type], attrs: TileAttrs) -> Type:
    data = tensor_arg(types, 0, "tile", "data")
    if any(r < 0 for r in attrs.reps):
        raise KilnTypeError(f"tile: reps {attrs.reps} has a negative entry")
    ndim = max(data.ndim, len(attrs.reps))
    shape = (1,) * (ndim - data.ndim) + data.shape
    reps = (1,) * (ndim - len(attrs.reps)) + attrs.reps
    return TensorType(tuple(d * r for d, r in zip(shape, reps)), data.dtype)


register_op("tile", num_inputs=1, type_rel=_tile_rel,
            reference=lambda args, attrs, out: np.tile(args[0], attrs.reps),
            pattern=OpPattern.BROADCAST, attrs_type=TileAttrs, doc="repeat the whole tensor per axis")


def tile(data: Expr, reps: Any) -> Call:
    """Repeat ``data`` ``reps[i]`` times along axis ``i`` (``numpy.tile``).

    Parameters
    ----------
    data : Expr
        The input tensor.
    reps : sequence of int or Constant
        Repetitions; a shorter ``reps`` is padded with leading ones, a longer one adds leading axes.

    Returns
    -------
    Call
        The tiled tensor.
    """
    return make_call("tile", [data], TileAttrs(reps=const_ints(reps, "tile", "reps")))


@attrs_class("relay.attrs.RepeatAttrs")
class RepeatAttrs(Attrs):
    """Repetitions and axis of ``repeat``."""

    repeats: int
    axis: int | None = None


def _repeat_rel(types: list[Type], attrs: RepeatAttrs) -> Type:
    data = tensor_arg(types, 0, "repeat", "data")
    if attrs.repeats < 0:
        raise KilnTypeError(f"repeat: repeats must be >= 0, got {attrs.repeats}")
    if attrs.axis is None:
        return TensorType((data.size * attrs.repeats,), data.dtype)
    if not -data.ndim <= attrs.axis < data.ndim:
        raise KilnTypeError(f"repeat: axis {attrs.axis} is out of range for shape {data.shape}")
    axis = attrs.axis % data.ndim
    shape = list(data.shape)
    shape[axis] *= attrs.repeats
    return TensorType(tuple(shape), data.dtype)


register_op("repeat", num_inputs=1, type_rel=_repeat_rel,
            reference=lambda args, attrs, out: np.repeat(args[0], attrs.repeats, axis=attrs.axis),
            pattern=OpPattern.BROADCAST, attrs_type=RepeatAttrs, doc="repeat each element")


def repeat(data: Expr, repeats: int, axis: int | None) -> Call:
    """Repeat each element of ``data`` ``repeats`` times along ``axis`` (``numpy.repeat``).

    Parameters
    ----------
    data : Expr
        The input tensor.
    repeats : int
        Repetitions per element.
    axis : int or None
        The axis; ``None`` repeats the flattened tensor.

    Returns
    -------
    Call
        The repeated tensor.
    """
    attrs = RepeatAttrs(repeats=const_int(repeats, "repeat", "repeats"),
                        axis=None if axis is None else int(axis))
    return make_call("repeat", [data], attrs)


@attrs_class("relay.attrs.ReverseAttrs")
class ReverseAttrs(Attrs):
    """Axis of ``reverse`` (``None``: every axis)."""

    axis: int | None = None


def _reverse_rel(types: list[Type], attrs: ReverseAttrs) -> Type:
    data = tensor_arg(types, 0, "reverse", "data")
    if attrs.axis is not None and not -data.ndim <= attrs.axis < data.ndim:
        raise KilnTypeError(f"reverse: axis {attrs.axis} is out of range for shape {data.shape}")
    return data


register_op("reverse", num_inputs=1, type_rel=_reverse_rel,
            reference=lambda args, attrs, out: np.flip(args[0], attrs.axis),
            pattern=OpPattern.INJECTIVE, attrs_type=ReverseAttrs, doc="reverse the order along an axis")


def reverse(data: Expr, axis: int) -> Call:
    """Reverse ``data`` along ``axis``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis : int
        The axis to reverse.

    Returns
    -------
    Call
        The reversed tensor.
    """
    return make_call("reverse", [data], ReverseAttrs(axis=None if axis is None else int(axis)))


@attrs_class("relay.attrs.ReverseSequenceAttrs")
class ReverseSequenceAttrs(Attrs):
    """Sequence and batch axes of ``reverse_sequence``."""

    seq_axis: int = 1
    batch_axis: int = 0


def _reverse_sequence_rel(types: list[Type], attrs: ReverseSequenceAttrs) -> Type:
    data = tensor_arg(types, 0, "reverse_sequence", "data")
    lengths = tensor_arg(types, 1, "reverse_sequence", "seq_lengths")
    if not is_int(lengths.dtype):
        raise KilnTypeError(f"reverse_sequence: seq_lengths must be integers, got {lengths.dtype}")
    for name, axis in (("seq_axis", attrs.seq_axis), ("batch_axis", attrs.batch_axis)):
        if not -data.ndim <= axis < data.ndim:
            raise KilnTypeError(f"reverse_sequence: {name} {axis} is out of range for shape {data.shape}")
    batch = attrs.batch_axis % data.ndim
    if attrs.seq_axis % data.ndim == batch:
        raise KilnTypeError("reverse_sequence: seq_axis and batch_axis must differ")
    if lengths.shape != (data.shape[batch],):
        raise KilnTypeError(f"reverse_sequence: seq_lengths must have shape ({data.shape[batch]},) "
                            f"(the batch axis of data {data.shape}), got {lengths.shape}")
    return data


def _reverse_sequence_ref(args: list[np.ndarray], attrs: ReverseSequenceAttrs, out: Type) -> np.ndarray:
    x, lengths = args
    seq, batch = attrs.seq_axis % x.ndim, attrs.batch_axis % x.ndim
    moved = np.moveaxis(x, (batch, seq), (0, 1))
    result = np.empty_like(moved)
    n = moved.shape[1]
    pos = np.arange(n)
    for b, length in enumerate(lengths.astype(np.int64).tolist()):
        # TVM's rule: positions past the length stay; a length above n reverses the whole axis.
        length = min(length, n)
        source = np.where((length <= 1) | (pos >= length), pos, length - 1 - pos)
        result[b] = moved[b, source]
    return np.moveaxis(result, (0, 1), (batch, seq))


register_op("reverse_sequence", num_inputs=2, type_rel=_reverse_sequence_rel,
            reference=_reverse_sequence_ref, pattern=OpPattern.INJECTIVE,
            attrs_type=ReverseSequenceAttrs, doc="reverse variable-length prefixes")


def reverse_sequence(data: Expr, seq_lengths: Expr, seq_axis: int = 1, batch_axis: int = 0) -> Call:
    """Reverse the first ``seq_lengths[b]`` elements along ``seq_axis`` of each batch entry ``b``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    seq_lengths : Expr
        1-d integer tensor, one length per entry of ``batch_axis``.
    seq_axis, batch_axis : int
        The sequence and batch axes.

    Returns
    -------
    Call
        The tensor with reversed prefixes.
    """
    return make_call("reverse_sequence", [data, seq_lengths],
                     ReverseSequenceAttrs(seq_axis=int(seq_axis), batch_axis=int(batch_axis)))


# --- arange, full, zeros, ones, *_like -------------------------------------------------------

@attrs_class("relay.attrs.ArangeAttrs")
class ArangeAttrs(Attrs):
    """Static start, stop, step and dtype of ``arange``."""

    start: int | float
    stop: int | float
    step: int | float
    dtype: str


def _arange_length(attrs: ArangeAttrs) -> int:
    if attrs.step == 0:
        raise KilnTypeError("arange: step must not be 0")
    return max(0, math.ceil((attrs.stop - attrs.start) / attrs.step))


def _arange_rel(types: list[Type], attrs: ArangeAttrs) -> Type:
    return TensorType((_arange_length(attrs),), attrs.dtype)


def _arange_ref(args: list[np.ndarray], attrs: ArangeAttrs, out: Type) -> np.ndarray:
    dtype = np.float64 if isinstance(attrs.step, float) else np.int64
    i: np.ndarray = np.arange(_arange_length(attrs), dtype=dtype)
    return as_result(out, attrs.start + attrs.step * i)


register_op("arange", num_inputs=0, type_rel=_arange_rel, reference=_arange_ref,
            pattern=OpPattern.OPAQUE, attrs_type=ArangeAttrs, doc="evenly spaced values")


def _in_dtype(value: Any, dtype: str, what: str) -> int | float:
    number = const_number(value, "arange", what)
    return np.asarray(number).astype(np_dtype(dtype)).item()


def arange(start: Any, stop: Any = None, step: Any = None, dtype: str = "float32") -> Call:
    """Values ``start, start + step, ...`` below ``stop`` (``numpy.arange``).

    ``start``, ``stop`` and ``step`` decide the length, so they must be constants (Python numbers or
    ``relay.const``); they are converted to ``dtype`` first, as TVM does.

    Parameters
    ----------
    start : number or Constant
        First value (or the stop, when ``stop`` is omitted).
    stop : number or Constant, optional
        Exclusive end.
    step : number or Constant, optional
        Spacing (default 1).
    dtype : str
        Output dtype.

    Returns
    -------
    Call
        A 1-d tensor of ``ceil((stop - start) / step)`` values.
    """
    dtype = as_dtype(dtype)
    if stop is None:
        start, stop = 0, start
    attrs = ArangeAttrs(start=_in_dtype(start, dtype, "start"), stop=_in_dtype(stop, dtype, "stop"),
                        step=_in_dtype(1 if step is None else step, dtype, "step"), dtype=dtype)
    return make_call("arange", [], attrs)


def _full_rel(types: list[Type], attrs: InitOpAttrs) -> Type:
    fill = tensor_arg(types, 0, "full", "fill_value")
    if fill.ndim:
        raise KilnTypeError(f"full: fill_value must be a scalar, got shape {fill.shape}")
    return TensorType(attrs.shape, attrs.dtype or fill.dtype)


def _full_ref(args: list[np.ndarray], attrs: Any, out: Type) -> np.ndarray:
    assert isinstance(out, TensorType)
    return np.full(out.shape, as_result(out, args[-1]))


register_op("full", num_inputs=1, type_rel=_full_rel, reference=_full_ref,
            pattern=OpPattern.ELEMWISE, attrs_type=InitOpAttrs, doc="a tensor filled with a value")


def full(fill_value: Any, shape: Any = (), dtype: str = "") -> Call:
    """A tensor of static ``shape`` filled with ``fill_value``.

    Parameters
    ----------
    fill_value : Expr or number
        A scalar (a number becomes a constant of ``dtype``).
    shape : int, sequence of int or Constant
        The shape (a constant).
    dtype : str
        Output dtype; empty means the dtype of ``fill_value``.

    Returns
    -------
    Call
        The filled tensor.
    """
    out_dtype = as_dtype(dtype) if dtype else None
    value = fill_value if isinstance(fill_value, Expr) else const(fill_value, out_dtype)
    return make_call("full", [value], InitOpAttrs(shape=_shape_attr(shape, "full"), dtype=out_dtype))


def _init_rel(types: list[Type], attrs: InitOpAttrs) -> Type:
    return TensorType(attrs.shape, attrs.dtype or "float32")


register_op("zeros", num_inputs=0, type_rel=_init_rel,
            reference=lambda args, attrs, out: np.zeros(tensor_of(out).shape, np_dtype(tensor_of(out).dtype)),
            pattern=OpPattern.ELEMWISE, attrs_type=InitOpAttrs, doc="a tensor of zeros")
register_op("ones", num_inputs=0, type_rel=_init_rel,
            reference=lambda args, attrs, out: np.ones(tensor_of(out).shape, np_dtype(tensor_of(out).dtype)),
            pattern=OpPattern.ELEMWISE, attrs_type=InitOpAttrs, doc="a tensor of ones")


def zeros(shape: Any, dtype: str) -> Call:
    """A tensor of zeros of static ``shape`` and ``dtype``.

    Parameters
    ----------
    shape : int, sequence of int or Constant
        The shape (a constant).
    dtype : str
        The dtype.

    Returns
    -------
    Call
        The tensor.
    """
    return make_call("zeros", [], InitOpAttrs(shape=_shape_attr(shape, "zeros"), dtype=as_dtype(dtype)))


def ones(shape: Any, dtype: str) -> Call:
    """A tensor of ones of static ``shape`` and ``dtype``.

    Parameters
    ----------
    shape : int, sequence of int or Constant
        The shape (a constant).
    dtype : str
        The dtype.

    Returns
    -------
    Call
        The tensor.
    """
    return make_call("ones", [], InitOpAttrs(shape=_shape_attr(shape, "ones"), dtype=as_dtype(dtype)))


def _full_like_rel(types: list[Type], attrs: Any) -> Type:
    data = tensor_arg(types, 0, "full_like", "data")
    fill = tensor_arg(types, 1, "full_like", "fill_value")
    if fill.ndim:
        raise KilnTypeError(f"full_like: fill_value must be a scalar, got shape {fill.shape}")
    return data


register_op("full_like", num_inputs=2, type_rel=_full_like_rel, reference=_full_ref,
            pattern=OpPattern.ELEMWISE, doc="a tensor like another, filled with a value")


def full_like(data: Expr, fill_value: Any) -> Call:
    """A tensor of ``data``'s shape and dtype filled with the scalar ``fill_value``.

    Parameters
    ----------
    data : Expr
        The tensor whose type is copied.
    fill_value : Expr or number
        The value.

    Returns
    -------
    Call
        The filled tensor.
    """
    return make_call("full_like", [data, _to_expr(fill_value, data)])


def _like_rel(name: str) -> Any:
    def rel(types: list[Type], attrs: Any) -> Type:
        return tensor_arg(types, 0, name, "data")

    return rel


register_op("zeros_like", num_inputs=1, type_rel=_like_rel("zeros_like"),
            reference=lambda args, attrs, out: np.zeros_like(args[0]),
            pattern=OpPattern.ELEMWISE, doc="zeros shaped like a tensor")
register_op("ones_like", num_inputs=1, type_rel=_like_rel("ones_like"),
            reference=lambda args, attrs, out: np.ones_like(args[0]),
            pattern=OpPattern.ELEMWISE, doc="ones shaped like a tensor")


def zeros_like(data: Expr) -> Call:
    """Zeros of ``data``'s shape and dtype.

    Parameters
    ----------
    data : Expr
        The tensor whose type is copied.

    Returns
    -------
    Call
        The zeros.
    """
    return make_call("zeros_like", [data])


def ones_like(data: Expr) -> Call:
    """Ones of ``data``'s shape and dtype.

    Parameters
    ----------
    data : Expr
        The tensor whose type is copied.

    Returns
    -------
    Call
        The ones.
    """
    return make_call("ones_like", [data])


# --- meshgrid --------------------------------------------------------------------------------

@attrs_class("relay.attrs.MeshgridAttrs")
class MeshgridAttrs(Attrs):
    """Indexing convention of ``meshgrid``: ``"ij"`` (matrix) or ``"xy"`` (Cartesian)."""

    indexing: str = "ij"


def _meshgrid_rel(types: list[Type], attrs: MeshgridAttrs) -> Type:
    tup = tuple_arg(types, 0, "meshgrid")
    if attrs.indexing not in ("ij", "xy"):
        raise KilnTypeError(f"meshgrid: indexing must be 'ij' or 'xy', got {attrs.indexing!r}")
    sizes = []
    for i, f in enumerate(tup.fields):
        assert isinstance(f, TensorType)
        if f.ndim > 1:
            raise KilnTypeError(f"meshgrid: field {i} must be 0-d or 1-d, got shape {f.shape}")
        sizes.append(f.size)
    if attrs.indexing == "xy" and len(sizes) >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    return TupleType(tuple(TensorType(tuple(sizes), f.dtype) for f in tup.fields
                           if isinstance(f, TensorType)))


register_op("meshgrid", num_inputs=1, type_rel=_meshgrid_rel,
            reference=lambda args, attrs, out: tuple(np.meshgrid(*[a.reshape(-1) for a in args[0]],
                                                                 indexing=attrs.indexing)),
            pattern=OpPattern.INJECTIVE, attrs_type=MeshgridAttrs, doc="coordinate grids")


def meshgrid(data: Any, indexing: str = "ij") -> TupleWrapper:
    """Coordinate grids from 1-d tensors (``numpy.meshgrid``).

    Parameters
    ----------
    data : list of Expr or Tuple
        The 1-d coordinate tensors.
    indexing : str
        ``"ij"`` (matrix) or ``"xy"`` (Cartesian: the first two output axes swapped).

    Returns
    -------
    TupleWrapper
        One grid per input.
    """
    tup = tuple_expr(data, "meshgrid")
    if isinstance(tup, Tuple):
        size = len(tup.fields)
    elif tup.has_type and isinstance(tup.checked_type, TupleType):
        size = len(tup.checked_type.fields)
    else:
        raise KilnTypeError("meshgrid: pass a list or relay.Tuple of 1-d tensors")
    return TupleWrapper(make_call("meshgrid", [tup], MeshgridAttrs(indexing=str(indexing))), size)
