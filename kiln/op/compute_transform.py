"""Tensor-expression computes of the shape-changing and layout operators (``kiln.op.transform``).

Every compute here is injective: each output element reads one input element (or is a
constant), so the default schedule inlines them into their consumers. ``reshape`` (and
``reshape_like``, ``squeeze``, ``expand_dims``) maps coordinates group by group: runs of input and
output dimensions with equal products are raveled and unraveled together, so dimensions a
reshape keeps stay plain loop variables (contiguous, vectorizable reads). ``layout_transform``
follows :mod:`kiln.op.transform_layout`: a block that does not divide its axis pads with zeros.

Importing this module also attaches the computes of the other transform modules
(:mod:`~kiln.op.compute_transform_index`, :mod:`~kiln.op.compute_transform_fill`,
:mod:`~kiln.op.compute_transform_math`). Attached as ``get_op_def(name).compute``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kiln import te
from kiln.ir.types import Type
from kiln.op import (  # noqa: F401  (attach the computes of the other transform modules)
    compute_transform_fill,
    compute_transform_index,
    compute_transform_math,
)
from kiln.op.compute_elemwise import ax_compute
from kiln.op.compute_transform_common import ravel, tensor_type, tuple_types, unravel
from kiln.op.registry import get_op_def
from kiln.op.transform_layout import parse_layout
from kiln.te import expr as E
from kiln.te.expr import PrimExpr

__all__ = ["reshape_coords", "reshape_tensor"]


def _groups(in_shape: Sequence[int], out_shape: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """Pair up runs of input and output dimensions whose sizes multiply to the same number."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(in_shape) or j < len(out_shape):
        gi: list[int] = []
        go: list[int] = []
        pi = po = 1
        if i < len(in_shape):
            gi.append(i)
            pi *= in_shape[i]
            i += 1
        if j < len(out_shape):
            go.append(j)
            po *= out_shape[j]
            j += 1
        while pi != po:
            if pi < po:
                gi.append(i)
                pi *= in_shape[i]
                i += 1
            else:
                go.append(j)
                po *= out_shape[j]
                j += 1
        groups.append((gi, go))
    return groups


def reshape_coords(out_idx: Sequence[Any], out_shape: Sequence[int],
                   in_shape: Sequence[int]) -> list[PrimExpr]:
    """Input coordinates of output position ``out_idx`` of a row-major reshape.

    Parameters
    ----------
    out_idx : sequence of expr
        Output coordinates.
    out_shape, in_shape : sequence of int
        Output and input shapes (same element count).

    Returns
    -------
    list of PrimExpr
        One coordinate per input dimension.
    """
    if math.prod(in_shape) == 0:
        return [E.const(0)] * len(in_shape)  # an empty tensor: no element is ever read
    coords: list[PrimExpr] = [E.const(0)] * len(in_shape)
    for gi, go in _groups(in_shape, out_shape):
        flat = ravel([out_idx[d] for d in go], [out_shape[d] for d in go])
        for d, c in zip(gi, unravel(flat, [in_shape[d] for d in gi])):
            coords[d] = c
    return coords


def reshape_tensor(x: te.Tensor, shape: Sequence[int], name: str = "T_reshape") -> te.Tensor:
    """``x`` reshaped (row-major) to ``shape``.

    Parameters
    ----------
    x : te.Tensor
        The input.
    shape : sequence of int
        The new shape (same element count).
    name : str
        Stage name.

    Returns
    -------
    te.Tensor
        An injective stage.
    """
    return te.compute(tuple(shape), lambda *i: x(*reshape_coords(i, shape, x.shape)), name=name,
                      tag="injective")


def _reshape_like(name: str) -> Any:
    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        return reshape_tensor(inputs[0], tensor_type(out_type).shape, f"T_{name}")

    return compute


def _transpose_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    n = x.ndim
    perm = list(range(n - 1, -1, -1)) if attrs.axes is None else [a % n for a in attrs.axes]

    def element(*i: PrimExpr) -> PrimExpr:
        coords: list[PrimExpr] = [E.const(0)] * n
        for k, p in enumerate(perm):
            coords[p] = i[k]
        return x(*coords)

    return te.compute(tensor_type(out_type).shape, element, name="T_transpose", tag="injective")


def _select(index: PrimExpr, starts: list[int], values: list[PrimExpr]) -> PrimExpr:
    """``values[k]`` for the ``k`` with ``starts[k] <= index < starts[k + 1]`` (``starts[0]`` is
    the first index), evaluating only the chosen value: a balanced tree of comparisons, so a
    concatenation of a thousand tensors (an LSTM's steps) is ten deep, not a thousand."""
    if len(values) == 1:
        return values[0]
    mid = len(values) // 2
    return te.if_then_else(index < starts[mid], _select(index, starts[:mid], values[:mid]),
                           _select(index, starts[mid:], values[mid:]))


def _concatenate_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    out = tensor_type(out_type)
    axis = attrs.axis % out.ndim
    pieces: list[tuple[te.Tensor, int]] = []
    offset = 0
    for t in inputs:
        if t.shape[axis]:
            pieces.append((t, offset))
        offset += t.shape[axis]
    pieces = pieces or [(inputs[0], 0)]

    def element(*i: PrimExpr) -> PrimExpr:
        def read(t: te.Tensor, off: int) -> PrimExpr:
            return t(*i[:axis], i[axis] - off, *i[axis + 1:])

        return _select(i[axis], [off for _, off in pieces], [read(t, off) for t, off in pieces])

    return te.compute(out.shape, element, name="T_concat", tag="injective")


def _stack_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    out = tensor_type(out_type)
    axis = attrs.axis % out.ndim

    def element(*i: PrimExpr) -> PrimExpr:
        rest = (*i[:axis], *i[axis + 1:])
        return _select(i[axis], list(range(len(inputs))), [t(*rest) for t in inputs])

    return te.compute(out.shape, element, name="T_stack", tag="injective")


def _split_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> list[te.Tensor]:
    x = inputs[0]
    axis = attrs.axis % x.ndim
    results = []
    begin = 0
    for field in tuple_types(out_type):
        def element(*i: PrimExpr, begin: int = begin) -> PrimExpr:
            return x(*i[:axis], i[axis] + begin, *i[axis + 1:])

        results.append(te.compute(field.shape, element, name="T_split", tag="injective"))
        begin += field.shape[axis]
    return results


def _layout_transform_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    src = parse_layout(attrs.src_layout)
    dst = parse_layout(attrs.dst_layout)
    src_blocks = {a: b for a, b in src if b}
    dst_blocks = {a: b for a, b in dst if b}
    extents = {a: x.shape[p] * src_blocks.get(a, 1) for p, (a, b) in enumerate(src) if not b}

    def element(*i: PrimExpr) -> PrimExpr:
        outer = {a: i[p] for p, (a, b) in enumerate(dst) if not b}
        inner = {a: i[p] for p, (a, b) in enumerate(dst) if b}
        logical = {a: outer[a] * dst_blocks[a] + inner[a] if a in dst_blocks else outer[a]
                   for a in outer}
        coords = []
        for a, b in src:
            if b:
                coords.append(te.floormod(logical[a], b))
            elif a in src_blocks:
                coords.append(te.floordiv(logical[a], src_blocks[a]))
            else:
                coords.append(logical[a])
        padded = [logical[a] < extents[a] for a in dst_blocks if extents[a] % dst_blocks[a]]
        if not padded:
            return x(*coords)
        return te.if_then_else(te.all(*padded), x(*coords), E.const(0, x.dtype))

    # topi::layout_transform (include/tvm/topi/transform.h): T_layout_trans(ax0, ...)
    return ax_compute(tensor_type(out_type).shape, element, name="T_layout_trans",
                      tag="injective")


def _shape_of_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    shape = inputs[0].shape
    out = tensor_type(out_type)

    def element(i: PrimExpr) -> PrimExpr:
        value = E.const(0, out.dtype)
        for d in reversed(range(len(shape))):
            value = E.select(E.compare("eq", i, d), E.const(shape[d], out.dtype), value)
        return value

    return te.compute(out.shape, element, name="T_shape_of", tag="injective")


def _ndarray_size_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    out = tensor_type(out_type)
    size = math.prod(inputs[0].shape)
    return te.compute((), lambda: E.const(size, out.dtype), name="T_ndarray_size", tag="injective")


def _register() -> None:
    for name in ("reshape", "reshape_like", "squeeze", "expand_dims", "contrib_reverse_reshape"):
        get_op_def(name).compute = _reshape_like(name)
    get_op_def("transpose").compute = _transpose_compute
    get_op_def("concatenate").compute = _concatenate_compute
    get_op_def("stack").compute = _stack_compute
    get_op_def("split").compute = _split_compute
    get_op_def("layout_transform").compute = _layout_transform_compute
    get_op_def("shape_of").compute = _shape_of_compute
    get_op_def("ndarray_size").compute = _ndarray_size_compute


_register()
