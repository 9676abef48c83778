"""Layout and shape queries: layout_transform, shape_of, ndarray_size.

A layout string names each axis with a letter: an upper-case letter is a whole ("primal") axis, a
number followed by a lower-case letter is a block of that primal axis (``"NCHW8c"``: channels split
into blocks of 8, the block innermost; ``"OIHW8i8o"``). ``layout_transform`` moves data between
two layouts with the same primal axes. As in TVM, splitting an axis whose size the block does not
divide rounds the outer size up and fills the padding with zeros; joining blocks back keeps the
padded size.
"""

from __future__ import annotations

import re

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr
from kiln.ir.types import TensorType, Type, as_dtype, np_dtype, tensor_of
from kiln.op.registry import OpPattern, make_call, register_op, tensor_arg

__all__ = [
    "LayoutTransformAttrs",
    "NdarraySizeAttrs",
    "ShapeOfAttrs",
    "layout_transform",
    "ndarray_size",
    "parse_layout",
    "shape_of",
]

_TOKEN = re.compile(r"(\d*)([A-Za-z])")


def parse_layout(layout: str, op: str = "layout_transform") -> list[tuple[str, int]]:
    """Split a layout string into ``(letter, block)`` pairs (``block`` 0 for a primal axis).

    Parameters
    ----------
    layout : str
        E.g. ``"NCHW8c"``.
    op : str
        Operator name for error messages.

    Returns
    -------
    list of (str, int)
        ``[("N", 0), ("C", 0), ("H", 0), ("W", 0), ("C", 8)]`` for ``"NCHW8c"``: block axes are
        reported under their primal (upper-case) letter.
    """
    pos = 0
    axes: list[tuple[str, int]] = []
    for m in _TOKEN.finditer(layout):
        if m.start() != pos:
            break
        pos = m.end()
        digits, letter = m.groups()
        if letter.isupper():
            if digits:
                raise KilnTypeError(f"{op}: layout {layout!r}: primal axis {letter} cannot have a "
                                    "block size (write the block as a lower-case axis)")
            axes.append((letter, 0))
        else:
            if not digits or int(digits) <= 0:
                raise KilnTypeError(f"{op}: layout {layout!r}: block axis {letter} needs a positive size")
            axes.append((letter.upper(), int(digits)))
    if pos != len(layout) or not axes:
        raise KilnTypeError(f"{op}: cannot parse layout {layout!r}")
    for kind in (True, False):
        letters = [a for a, b in axes if bool(b) == kind]
        if len(set(letters)) != len(letters):
            raise KilnTypeError(f"{op}: layout {layout!r} repeats an axis")
    primal = {a for a, b in axes if b == 0}
    for a, b in axes:
        if b and a not in primal:
            raise KilnTypeError(f"{op}: layout {layout!r} has block axis {a.lower()} without axis {a}")
    return axes


def _blocks(axes: list[tuple[str, int]]) -> dict[str, int]:
    return {a: b for a, b in axes if b}


def _logical_extents(shape: tuple[int, ...], src: list[tuple[str, int]], layout: str) -> dict[str, int]:
    if len(shape) != len(src):
        raise KilnTypeError(f"layout_transform: data of shape {shape} does not have the "
                            f"{len(src)} axes of layout {layout!r}")
    blocks = _blocks(src)
    extents = {}
    for (letter, block), dim in zip(src, shape):
        if block:
            if dim != block:
                raise KilnTypeError(f"layout_transform: axis {block}{letter.lower()} of layout {layout!r} "
                                    f"has size {dim} in data of shape {shape}")
        else:
            extents[letter] = dim * blocks.get(letter, 1)
    return extents


@attrs_class("relay.attrs.LayoutTransformAttrs")
class LayoutTransformAttrs(Attrs):
    """Source and destination layouts of ``layout_transform``."""

    src_layout: str
    dst_layout: str


def _plan(shape: tuple[int, ...], attrs: LayoutTransformAttrs) -> tuple[list, list, dict[str, int]]:
    src = parse_layout(attrs.src_layout)
    dst = parse_layout(attrs.dst_layout)
    if {a for a, b in src if not b} != {a for a, b in dst if not b}:
        raise KilnTypeError(f"layout_transform: cannot convert from {attrs.src_layout!r} to "
                            f"{attrs.dst_layout!r}: the primal axes differ")
    return src, dst, _logical_extents(shape, src, attrs.src_layout)


def _dst_shape(dst: list[tuple[str, int]], extents: dict[str, int]) -> tuple[int, ...]:
    blocks = _blocks(dst)
    return tuple(block if block else -(-extents[letter] // blocks.get(letter, 1)) for letter, block in dst)


def _layout_transform_rel(types: list[Type], attrs: LayoutTransformAttrs) -> Type:
    data = tensor_arg(types, 0, "layout_transform", "data")
    _, dst, extents = _plan(data.shape, attrs)
    return TensorType(_dst_shape(dst, extents), data.dtype)


def _layout_transform_ref(args: list[np.ndarray], attrs: LayoutTransformAttrs, out: Type) -> np.ndarray:
    x = args[0]
    src, dst, extents = _plan(x.shape, attrs)
    # 1. source -> logical (one axis per primal letter, in source order)
    order = [letter for letter, block in src if not block]
    perm = []
    for letter in order:
        perm += [i for i, (a, b) in enumerate(src) if a == letter and not b]
        perm += [i for i, (a, b) in enumerate(src) if a == letter and b]
    logical = np.transpose(x, perm).reshape([extents[a] for a in order])
    # 2. logical -> padded and split by the destination blocks -> destination order
    dst_blocks = _blocks(dst)
    pads = [(0, -(-extents[a] // dst_blocks.get(a, 1)) * dst_blocks.get(a, 1) - extents[a]) for a in order]
    padded = np.pad(logical, pads) if any(p for _, p in pads) else logical
    split_shape: list[int] = []
    position: dict[tuple[str, bool], int] = {}
    for k, a in enumerate(order):
        position[(a, False)] = len(split_shape)
        if a in dst_blocks:
            split_shape += [padded.shape[k] // dst_blocks[a], dst_blocks[a]]
            position[(a, True)] = len(split_shape) - 1
        else:
            split_shape.append(padded.shape[k])
    split = padded.reshape(split_shape)
    return np.transpose(split, [position[(a, bool(b))] for a, b in dst])


register_op("layout_transform", layout="layout_transform", num_inputs=1, type_rel=_layout_transform_rel,
            reference=_layout_transform_ref, pattern=OpPattern.INJECTIVE,
            attrs_type=LayoutTransformAttrs, doc="move data between layouts (NCHW <-> NCHW8c, ...)")


def layout_transform(data: Expr, src_layout: str, dst_layout: str) -> Call:
    """Move ``data`` from ``src_layout`` to ``dst_layout`` (e.g. ``"NCHW"`` to ``"NCHW8c"``).

    Parameters
    ----------
    data : Expr
        The input tensor, in ``src_layout``.
    src_layout, dst_layout : str
        Layout strings with the same primal axes.

    Returns
    -------
    Call
        The tensor in ``dst_layout`` (zero-padded where a block does not divide an axis).
    """
    return make_call("layout_transform", [data],
                     LayoutTransformAttrs(src_layout=str(src_layout), dst_layout=str(dst_layout)))


@attrs_class("relay.attrs.ShapeOfAttrs")
class ShapeOfAttrs(Attrs):
    """Dtype of ``shape_of``'s result."""

    dtype: str | None = None


def _shape_of_rel(types: list[Type], attrs: ShapeOfAttrs) -> Type:
    data = tensor_arg(types, 0, "shape_of", "data")
    return TensorType((data.ndim,), attrs.dtype or "int32")


register_op("shape_of", num_inputs=1, type_rel=_shape_of_rel,
            reference=lambda args, attrs, out: np.array(args[0].shape, dtype=np_dtype(tensor_of(out).dtype)),
            pattern=OpPattern.OPAQUE, attrs_type=ShapeOfAttrs, doc="the shape as a 1-d tensor")


def shape_of(data: Expr, dtype: str = "int32") -> Call:
    """The shape of ``data`` as a 1-d tensor of ``dtype``.

    Parameters
    ----------
    data : Expr
        The tensor.
    dtype : str
        Result dtype.

    Returns
    -------
    Call
        The shape.
    """
    return make_call("shape_of", [data], ShapeOfAttrs(dtype=as_dtype(dtype)))


@attrs_class("relay.attrs.NdarraySizeAttrs")
class NdarraySizeAttrs(Attrs):
    """Dtype of ``ndarray_size``'s result."""

    dtype: str | None = None


def _ndarray_size_rel(types: list[Type], attrs: NdarraySizeAttrs) -> Type:
    tensor_arg(types, 0, "ndarray_size", "data")
    return TensorType((), attrs.dtype or "int32")


register_op("ndarray_size", num_inputs=1, type_rel=_ndarray_size_rel,
            reference=lambda args, attrs, out: np.array(args[0].size, dtype=np_dtype(tensor_of(out).dtype)),
            pattern=OpPattern.INJECTIVE, attrs_type=NdarraySizeAttrs, doc="the element count")


def ndarray_size(data: Expr, dtype: str = "int32") -> Call:
    """The number of elements of ``data`` as a 0-d tensor of ``dtype``.

    Parameters
    ----------
    data : Expr
        The tensor.
    dtype : str
        Result dtype.

    Returns
    -------
    Call
        The count.
    """
    return make_call("ndarray_size", [data], NdarraySizeAttrs(dtype=as_dtype(dtype)))
