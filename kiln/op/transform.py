"""Shape-changing operators: reshape, transpose, squeeze, expand_dims, concatenate, stack, split.

The rest of the transform family lives in sibling modules re-exported here:
:mod:`~kiln.op.transform_index` (slicing, take, gather, one_hot, unravel_index),
:mod:`~kiln.op.transform_scatter` (scatter_elements, scatter_nd),
:mod:`~kiln.op.transform_fill` (broadcasting, tile, repeat, reverse, arange, full/zeros/ones,
meshgrid), :mod:`~kiln.op.transform_layout` (layout_transform, shape_of, ndarray_size) and
:mod:`~kiln.op.transform_math` (trilu, einsum, matrix_set_diag).

Shapes are static: ``reshape``'s ``newshape`` and ``split``'s sections are attributes, so a builder
given a computed expression for them raises; a ``relay.const`` is accepted and unpacked, as TVM does.
"""

from __future__ import annotations

import itertools
from math import prod
from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr, TupleWrapper
from kiln.ir.types import TensorType, TupleType, Type, tensor_of
from kiln.op import transform_fill, transform_index, transform_layout, transform_math, transform_scatter
from kiln.op.registry import OpPattern, make_call, register_op, tensor_arg, tuple_arg
from kiln.op.transform_common import as_result, const_int, const_ints, optional_axes, tuple_expr
from kiln.op.transform_fill import *  # noqa: F403
from kiln.op.transform_index import *  # noqa: F403
from kiln.op.transform_layout import *  # noqa: F403
from kiln.op.transform_math import *  # noqa: F403
from kiln.op.transform_scatter import *  # noqa: F403

__all__ = [
    "ConcatenateAttrs",
    "ExpandDimsAttrs",
    "ReshapeAttrs",
    "ReshapeLikeAttrs",
    "SplitAttrs",
    "SqueezeAttrs",
    "StackAttrs",
    "TransposeAttrs",
    "concatenate",
    "expand_dims",
    "infer_newshape",
    "reshape",
    "reshape_like",
    "reverse_reshape",
    "split",
    "squeeze",
    "stack",
    "transpose",
]
__all__ += (transform_fill.__all__ + transform_index.__all__ + transform_layout.__all__
            + transform_math.__all__ + transform_scatter.__all__)


# --- reshape ---------------------------------------------------------------------------------

@attrs_class("relay.attrs.ReshapeAttrs")
class ReshapeAttrs(Attrs):
    """Target shape of ``reshape``, with relay's special codes (see :func:`infer_newshape`)."""

    newshape: tuple[int, ...]
    allowzero: bool = False


def infer_newshape(ishape: tuple[int, ...], newshape: tuple[int, ...], allowzero: bool = False,
                   op: str = "reshape") -> tuple[int, ...]:
    """Resolve relay's special codes in ``newshape`` against the input shape ``ishape``.

    Codes: ``0`` copies the input dimension at the same position (a literal 0 when ``allowzero``);
    ``-1`` is inferred from the remaining elements (at most one); ``-2`` copies all remaining input
    dimensions; ``-3`` merges the next two input dimensions; ``-4, a, b`` splits the next input
    dimension into ``a`` and ``b`` (either may be -1).

    Parameters
    ----------
    ishape : tuple of int
        Input shape.
    newshape : tuple of int
        Requested shape with special codes.
    allowzero : bool
        Whether ``0`` means an empty dimension rather than "copy".
    op : str
        Operator name for error messages.

    Returns
    -------
    tuple of int
        The output shape; its element count equals the input's.
    """
    def fail(reason: str) -> KilnTypeError:
        return KilnTypeError(f"{op}: cannot reshape a tensor of shape {ishape} to newshape "
                             f"{newshape}: {reason}")

    oshape: list[int] = []
    used_in: set[int] = set()
    used_out: set[int] = set()
    src = 0
    infer = -1
    i = 0
    while i < len(newshape):
        code = newshape[i]
        if code > 0 or (code == 0 and allowzero):
            oshape.append(code)
            src += 1
        elif code == 0:
            if src >= len(ishape):
                raise fail(f"code 0 at position {i} copies input dimension {src}, which does not exist")
            used_in.add(src)
            used_out.add(len(oshape))
            oshape.append(ishape[src])
            src += 1
        elif code == -1:
            if infer >= 0:
                raise fail("more than one dimension is -1")
            infer = len(oshape)
            oshape.append(1)
            src += 1
        elif code == -2:
            while src < len(ishape):
                used_in.add(src)
                used_out.add(len(oshape))
                oshape.append(ishape[src])
                src += 1
        elif code == -3:
            if src + 1 >= len(ishape):
                raise fail(f"code -3 at position {i} merges input dimensions {src} and {src + 1}, "
                           "which do not exist")
            used_in.update((src, src + 1))
            used_out.add(len(oshape))
            oshape.append(ishape[src] * ishape[src + 1])
            src += 2
        elif code == -4:
            if i + 2 >= len(newshape) or src >= len(ishape):
                raise fail(f"code -4 at position {i} needs two following values and an input dimension")
            whole, a, b = ishape[src], newshape[i + 1], newshape[i + 2]
            if a == -1 and b == -1:
                raise fail("code -4 cannot split into two -1 dimensions")
            if a == -1 and b > 0 and whole % b == 0:
                a = whole // b
            elif b == -1 and a > 0 and whole % a == 0:
                b = whole // a
            if a <= 0 or b <= 0 or a * b != whole:
                raise fail(f"code -4 cannot split input dimension {src} of size {whole} into "
                           f"({newshape[i + 1]}, {newshape[i + 2]})")
            used_in.add(src)
            used_out.update((len(oshape), len(oshape) + 1))
            oshape += [a, b]
            src += 1
            i += 2
        else:
            raise fail(f"unsupported special value {code}")
        i += 1
    if infer >= 0:
        known = prod(oshape[j] for j in range(len(oshape)) if j not in used_out and j != infer)
        remaining = prod(ishape[j] for j in range(len(ishape)) if j not in used_in)
        if known == 0 or remaining % known:
            raise fail(f"the -1 dimension cannot be inferred ({remaining} elements left for "
                       f"{known} per step)")
        oshape[infer] = remaining // known
    if prod(oshape) != prod(ishape):
        raise fail(f"the result {tuple(oshape)} has {prod(oshape)} elements but the input has "
                   f"{prod(ishape)}")
    return tuple(oshape)


def _reshape_rel(types: list[Type], attrs: ReshapeAttrs) -> Type:
    data = tensor_arg(types, 0, "reshape", "data")
    return TensorType(infer_newshape(data.shape, attrs.newshape, attrs.allowzero), data.dtype)


register_op("reshape", num_inputs=1, type_rel=_reshape_rel,
            reference=lambda args, attrs, out: np.reshape(args[0], tensor_of(out).shape),
            pattern=OpPattern.INJECTIVE, attrs_type=ReshapeAttrs, doc="change the shape",
            reshape_only=True)


def reshape(data: Expr, newshape: Any, allowzero: bool = False) -> Call:
    """Reshape ``data``, with relay's special codes (0, -1, -2, -3, -4; see :func:`infer_newshape`).

    Parameters
    ----------
    data : Expr
        The input tensor.
    newshape : int, sequence of int or Constant
        The new shape (a constant: Kiln compiles static shapes).
    allowzero : bool
        Treat ``0`` as an empty dimension instead of "copy the input dimension".

    Returns
    -------
    Call
        The reshape.
    """
    return make_call("reshape", [data], ReshapeAttrs(newshape=const_ints(newshape, "reshape", "newshape"),
                                                     allowzero=bool(allowzero)))


def _reverse_reshape_rel(types: list[Type], attrs: ReshapeAttrs) -> Type:
    data = tensor_arg(types, 0, "contrib_reverse_reshape", "data")
    out = infer_newshape(data.shape[::-1], attrs.newshape[::-1], attrs.allowzero,
                         "contrib_reverse_reshape")
    return TensorType(out[::-1], data.dtype)


register_op("contrib_reverse_reshape", num_inputs=1, type_rel=_reverse_reshape_rel,
            reference=lambda args, attrs, out: np.reshape(args[0], tensor_of(out).shape),
            pattern=OpPattern.INJECTIVE, attrs_type=ReshapeAttrs,
            doc="reshape with the special codes read from the right", reshape_only=True)


def reverse_reshape(data: Expr, newshape: Any) -> Call:
    """Reshape ``data``, reading ``newshape``'s special codes from right to left (TVM's
    ``reverse_reshape``: ``(10, 5, 4)`` with ``(-1, 0)`` gives ``(50, 4)``).

    Parameters
    ----------
    data : Expr
        The input tensor.
    newshape : int, sequence of int or Constant
        The new shape with special codes (see :func:`infer_newshape`).

    Returns
    -------
    Call
        The reshape (operator ``contrib_reverse_reshape``).
    """
    return make_call("contrib_reverse_reshape", [data],
                     ReshapeAttrs(newshape=const_ints(newshape, "reverse_reshape", "newshape")))


@attrs_class("relay.attrs.ReshapeLikeAttrs")
class ReshapeLikeAttrs(Attrs):
    """Which dimensions of ``data`` are replaced by which dimensions of ``shape_like``."""

    lhs_begin: int = 0
    lhs_end: int | None = None
    rhs_begin: int = 0
    rhs_end: int | None = None


def _span(ndim: int, begin: int, end: int | None) -> tuple[int, int]:
    b = begin + ndim if begin < 0 else begin
    e = ndim if end is None else (end + ndim if end < 0 else end)
    return b, e


def _reshape_like_rel(types: list[Type], attrs: ReshapeLikeAttrs) -> Type:
    data = tensor_arg(types, 0, "reshape_like", "data")
    like = tensor_arg(types, 1, "reshape_like", "shape_like")
    lb, le = _span(data.ndim, attrs.lhs_begin, attrs.lhs_end)
    rb, re = _span(like.ndim, attrs.rhs_begin, attrs.rhs_end)
    if not (0 <= lb <= le <= data.ndim and 0 <= rb <= re <= like.ndim):
        raise KilnTypeError(f"reshape_like: dimension ranges [{attrs.lhs_begin}, {attrs.lhs_end}) of "
                            f"{data.shape} and [{attrs.rhs_begin}, {attrs.rhs_end}) of {like.shape} "
                            "are out of range")
    shape = data.shape[:lb] + like.shape[rb:re] + data.shape[le:]
    if prod(shape) != data.size:
        raise KilnTypeError(f"reshape_like: cannot reshape a tensor of shape {data.shape} "
                            f"({data.size} elements) to {shape} ({prod(shape)} elements)")
    return TensorType(shape, data.dtype)


register_op("reshape_like", num_inputs=2, type_rel=_reshape_like_rel,
            reference=lambda args, attrs, out: np.reshape(args[0], tensor_of(out).shape),
            pattern=OpPattern.INJECTIVE, attrs_type=ReshapeLikeAttrs,
            doc="reshape to (part of) another tensor's shape")


def reshape_like(data: Expr, shape_like: Expr, lhs_begin: int = 0, lhs_end: int | None = None,
                 rhs_begin: int = 0, rhs_end: int | None = None) -> Call:
    """Reshape ``data``: ``data.shape[lhs_begin:lhs_end]`` becomes ``shape_like.shape[rhs_begin:rhs_end]``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    shape_like : Expr
        The tensor whose shape is copied.
    lhs_begin, lhs_end, rhs_begin, rhs_end : int or None
        Dimension ranges (``None`` end: to the last dimension).

    Returns
    -------
    Call
        The reshape.
    """
    attrs = ReshapeLikeAttrs(lhs_begin=int(lhs_begin), lhs_end=None if lhs_end is None else int(lhs_end),
                             rhs_begin=int(rhs_begin), rhs_end=None if rhs_end is None else int(rhs_end))
    return make_call("reshape_like", [data, shape_like], attrs)


# --- transpose, squeeze, expand_dims ---------------------------------------------------------

@attrs_class("relay.attrs.TransposeAttrs")
class TransposeAttrs(Attrs):
    """Permutation of ``transpose`` (``None``: reverse the axes)."""

    axes: tuple[int, ...] | None


def _permutation(ndim: int, axes: tuple[int, ...] | None) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim - 1, -1, -1))
    if len(axes) != ndim:
        raise KilnTypeError(f"transpose: axes {axes} has {len(axes)} elements but the data is {ndim}-d")
    perm = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise KilnTypeError(f"transpose: axis {a} in axes {axes} is out of range for {ndim}-d data")
        perm.append(a % ndim)
    if len(set(perm)) != ndim:
        raise KilnTypeError(f"transpose: axes {axes} repeats an axis")
    return tuple(perm)


def _transpose_rel(types: list[Type], attrs: TransposeAttrs) -> Type:
    data = tensor_arg(types, 0, "transpose", "data")
    perm = _permutation(data.ndim, attrs.axes)
    return TensorType(tuple(data.shape[p] for p in perm), data.dtype)


register_op("transpose", num_inputs=1, type_rel=_transpose_rel,
            reference=lambda args, attrs, out: np.transpose(args[0], _permutation(args[0].ndim,
                                                                                  attrs.axes)),
            pattern=OpPattern.INJECTIVE, attrs_type=TransposeAttrs, doc="permute the axes",
            layout="transpose")


def transpose(data: Expr, axes: Any = None) -> Call:
    """Permute the axes of ``data``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    axes : sequence of int, optional
        Output axis ``i`` is input axis ``axes[i]``; ``None`` reverses the axes.

    Returns
    -------
    Call
        The transpose.
    """
    return make_call("transpose", [data], TransposeAttrs(axes=optional_axes(axes, "transpose", "axes")))


@attrs_class("relay.attrs.SqueezeAttrs")
class SqueezeAttrs(Attrs):
    """Axes removed by ``squeeze`` (``None``: every axis of size 1)."""

    axis: tuple[int, ...] | None = None


def _squeezed_axes(shape: tuple[int, ...], axis: tuple[int, ...] | None) -> set[int]:
    ndim = len(shape)
    if axis is None:
        return {i for i, d in enumerate(shape) if d == 1}
    out = set()
    for a in axis:
        if not -ndim <= a < ndim:
            raise KilnTypeError(f"squeeze: axis {a} is out of range for a tensor of shape {shape}")
        if shape[a] != 1:
            raise KilnTypeError(f"squeeze: axis {a} of a tensor of shape {shape} has size {shape[a]}, "
                                "not 1")
        out.add(a % ndim)
    return out


def _squeeze_rel(types: list[Type], attrs: SqueezeAttrs) -> Type:
    data = tensor_arg(types, 0, "squeeze", "data")
    drop = _squeezed_axes(data.shape, attrs.axis)
    return TensorType(tuple(d for i, d in enumerate(data.shape) if i not in drop), data.dtype)


register_op("squeeze", num_inputs=1, type_rel=_squeeze_rel,
            reference=lambda args, attrs, out: np.reshape(args[0], tensor_of(out).shape),
            pattern=OpPattern.INJECTIVE, attrs_type=SqueezeAttrs, doc="remove axes of size 1",
            layout="squeeze", reshape_only=True)


def squeeze(data: Expr, axis: Any = None) -> Call:
    """Remove axes of size 1.

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis : None, int or sequence of int
        Axes to remove (each must have size 1); ``None`` removes every axis of size 1.

    Returns
    -------
    Call
        The squeeze.
    """
    return make_call("squeeze", [data], SqueezeAttrs(axis=optional_axes(axis, "squeeze")))


@attrs_class("relay.attrs.ExpandDimsAttrs")
class ExpandDimsAttrs(Attrs):
    """Where ``expand_dims`` inserts how many axes of size 1."""

    axis: int
    num_newaxis: int = 1


def _expand_dims_rel(types: list[Type], attrs: ExpandDimsAttrs) -> Type:
    data = tensor_arg(types, 0, "expand_dims", "data")
    ndim = data.ndim
    if attrs.num_newaxis < 0:
        raise KilnTypeError(f"expand_dims: num_newaxis must be >= 0, got {attrs.num_newaxis}")
    if not -ndim - 1 <= attrs.axis <= ndim:
        raise KilnTypeError(f"expand_dims: axis {attrs.axis} is out of range [{-ndim - 1}, {ndim}] "
                            f"for a tensor of shape {data.shape}")
    pivot = attrs.axis + ndim + 1 if attrs.axis < 0 else attrs.axis
    shape = data.shape[:pivot] + (1,) * attrs.num_newaxis + data.shape[pivot:]
    return TensorType(shape, data.dtype)


register_op("expand_dims", num_inputs=1, type_rel=_expand_dims_rel,
            reference=lambda args, attrs, out: np.reshape(args[0], tensor_of(out).shape),
            pattern=OpPattern.BROADCAST, attrs_type=ExpandDimsAttrs, doc="insert axes of size 1",
            reshape_only=True)


def expand_dims(data: Expr, axis: int, num_newaxis: int = 1) -> Call:
    """Insert ``num_newaxis`` axes of size 1 at position ``axis``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis : int
        Where the new axes go, in ``[-ndim - 1, ndim]``.
    num_newaxis : int
        How many axes to insert.

    Returns
    -------
    Call
        The expand_dims.
    """
    attrs = ExpandDimsAttrs(axis=const_int(axis, "expand_dims", "axis"), num_newaxis=int(num_newaxis))
    return make_call("expand_dims", [data], attrs)


# --- concatenate, stack, split ---------------------------------------------------------------

@attrs_class("relay.attrs.ConcatenateAttrs")
class ConcatenateAttrs(Attrs):
    """Axis of ``concatenate``."""

    axis: int = 0


def _same_fields(op: str, fields: tuple[Type, ...], skip_axis: int | None) -> TensorType:
    if not fields:
        raise KilnTypeError(f"{op}: needs at least one tensor")
    first = fields[0]
    assert isinstance(first, TensorType)
    for i, f in enumerate(fields[1:], start=1):
        assert isinstance(f, TensorType)
        if f.dtype != first.dtype:
            raise KilnTypeError(f"{op}: field {i} has dtype {f.dtype} but field 0 has {first.dtype}")
        if f.ndim != first.ndim:
            raise KilnTypeError(f"{op}: field {i} has shape {f.shape} ({f.ndim}-d) but field 0 has "
                                f"shape {first.shape} ({first.ndim}-d)")
        for d, (x, y) in enumerate(zip(first.shape, f.shape)):
            if d != skip_axis and x != y:
                where = f" (axis {skip_axis} is the {op} axis)" if skip_axis is not None else ""
                raise KilnTypeError(f"{op}: field {i} has shape {f.shape} but field 0 has shape "
                                    f"{first.shape}: dimension {d} differs{where}")
    return first


def _concatenate_rel(types: list[Type], attrs: ConcatenateAttrs) -> Type:
    tup = tuple_arg(types, 0, "concatenate")
    first = tup.fields[0] if tup.fields else None
    if not isinstance(first, TensorType):
        raise KilnTypeError("concatenate: needs at least one tensor")
    ndim = first.ndim
    if not -ndim <= attrs.axis < ndim:
        raise KilnTypeError(f"concatenate: axis {attrs.axis} is out of range for {ndim}-d tensors")
    axis = attrs.axis % ndim
    _same_fields("concatenate", tup.fields, axis)
    total = sum(f.shape[axis] for f in tup.fields if isinstance(f, TensorType))
    return TensorType((*first.shape[:axis], total, *first.shape[axis + 1:]), first.dtype)


register_op("concatenate", layout="concatenate", num_inputs=1, type_rel=_concatenate_rel,
            reference=lambda args, attrs, out: as_result(out, np.concatenate(args[0], axis=attrs.axis)),
            pattern=OpPattern.INJECTIVE, attrs_type=ConcatenateAttrs,
            doc="join a tuple of tensors along an existing axis")


def concatenate(data: Any, axis: int) -> Call:
    """Join tensors along an existing axis.

    Parameters
    ----------
    data : list of Expr or Tuple
        The tensors (same dtype and rank, equal sizes except along ``axis``).
    axis : int
        The axis to join along.

    Returns
    -------
    Call
        The concatenation.
    """
    attrs = ConcatenateAttrs(axis=const_int(axis, "concatenate", "axis"))
    return make_call("concatenate", [tuple_expr(data, "concatenate")], attrs)


@attrs_class("relay.attrs.StackAttrs")
class StackAttrs(Attrs):
    """Axis of ``stack``."""

    axis: int = 0


def _stack_rel(types: list[Type], attrs: StackAttrs) -> Type:
    tup = tuple_arg(types, 0, "stack")
    first = _same_fields("stack", tup.fields, None)
    ndim = first.ndim
    if not -ndim - 1 <= attrs.axis <= ndim:
        raise KilnTypeError(f"stack: axis {attrs.axis} is out of range [{-ndim - 1}, {ndim}] for "
                            f"{ndim}-d tensors")
    axis = attrs.axis % (ndim + 1)
    return TensorType((*first.shape[:axis], len(tup.fields), *first.shape[axis:]), first.dtype)


register_op("stack", num_inputs=1, type_rel=_stack_rel,
            reference=lambda args, attrs, out: as_result(out, np.stack(list(args[0]), axis=attrs.axis)),
            pattern=OpPattern.INJECTIVE, attrs_type=StackAttrs,
            doc="join a tuple of tensors along a new axis")


def stack(data: Any, axis: int) -> Call:
    """Join same-shaped tensors along a new axis.

    Parameters
    ----------
    data : list of Expr or Tuple
        The tensors.
    axis : int
        Position of the new axis in the result.

    Returns
    -------
    Call
        The stack.
    """
    return make_call("stack", [tuple_expr(data, "stack")], StackAttrs(axis=const_int(axis, "stack", "axis")))


@attrs_class("relay.attrs.SplitAttrs")
class SplitAttrs(Attrs):
    """Sections (an int: equal parts) or split indices (a tuple) and the axis of ``split``."""

    indices_or_sections: int | tuple[int, ...]
    axis: int = 0


def _split_bounds(dim: int, spec: int | tuple[int, ...], shape: tuple[int, ...]) -> list[int]:
    if isinstance(spec, int):
        if spec <= 0 or dim % spec:
            raise KilnTypeError(f"split: {spec} equal sections do not divide dimension of size {dim} "
                                f"(shape {shape})")
        step = dim // spec
        return [step * i for i in range(spec + 1)]
    bounds = [0, *spec, dim]
    if any(prev > nxt for prev, nxt in itertools.pairwise(bounds)):
        raise KilnTypeError(f"split: indices {spec} must be ascending within [0, {dim}] "
                            f"(shape {shape})")
    return bounds


def _split_rel(types: list[Type], attrs: SplitAttrs) -> Type:
    data = tensor_arg(types, 0, "split", "data")
    if data.ndim == 0:
        raise KilnTypeError("split: data must have at least one dimension")
    if not -data.ndim <= attrs.axis < data.ndim:
        raise KilnTypeError(f"split: axis {attrs.axis} is out of range for shape {data.shape}")
    axis = attrs.axis % data.ndim
    bounds = _split_bounds(data.shape[axis], attrs.indices_or_sections, data.shape)
    fields = [TensorType((*data.shape[:axis], e - b, *data.shape[axis + 1:]), data.dtype)
              for b, e in itertools.pairwise(bounds)]
    return TupleType(tuple(fields))


def _split_ref(args: list[np.ndarray], attrs: SplitAttrs, out: Type) -> tuple[np.ndarray, ...]:
    x = args[0]
    axis = attrs.axis % x.ndim
    bounds = _split_bounds(x.shape[axis], attrs.indices_or_sections, x.shape)
    return tuple(np.split(x, bounds[1:-1], axis=axis))


register_op("split", num_inputs=1, type_rel=_split_rel, reference=_split_ref,
            pattern=OpPattern.INJECTIVE, attrs_type=SplitAttrs, doc="split into a tuple of parts",
            layout="split")


def split(data: Expr, indices_or_sections: Any, axis: int = 0) -> TupleWrapper:
    """Split ``data`` along ``axis`` into a tuple.

    Parameters
    ----------
    data : Expr
        The input tensor.
    indices_or_sections : int or sequence of int
        An int: that many equal parts; a sequence: the ascending indices where parts start.
    axis : int
        The axis to split.

    Returns
    -------
    TupleWrapper
        The parts (``split(...)[i]`` is part ``i``).
    """
    if isinstance(indices_or_sections, (int, np.integer)):
        size = int(indices_or_sections)
        spec: int | tuple[int, ...] = size
    else:
        spec = const_ints(indices_or_sections, "split", "indices_or_sections")
        size = len(spec) + 1
    call = make_call("split", [data], SplitAttrs(indices_or_sections=spec,
                                                 axis=const_int(axis, "split", "axis")))
    return TupleWrapper(call, size)

from kiln.op import compute_transform  # noqa: E402,F401  (attaches TE computes)
