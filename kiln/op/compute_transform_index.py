"""Tensor-expression computes of the indexing and scatter operators.

Covers :mod:`kiln.op.transform_index` (``strided_slice``, ``slice_like``, ``take``, ``gather``,
``gather_nd``, ``one_hot``, ``unravel_index``) and :mod:`kiln.op.transform_scatter`
(``scatter_elements``, ``scatter_nd``), following their reference kernels: ``take`` clips, wraps
(floor modulo) or, in ``"fast"`` mode, counts negative indices from the end; ``gather``,
``gather_nd`` and the scatters count negative indices from the end. The references reject indices
still out of range; compiled kernels cannot raise, so gathers clamp them into range (never
reading outside a buffer) and scatters ignore them.

Scatters are written as reductions over the updates: output element ``p`` combines ``data[p]``
(the reduction's ``init``) with every update whose index lands on ``p``, in the updates' row-major
order, which is the order NumPy's ``ufunc.at`` applies them in, so float results match bit for
bit. ``"update"`` keeps the last such update (a ``max`` reduction over update positions). Each
output element scans all candidate updates: ``scatter_elements`` costs ``O(size(data) *
indices.shape[axis])``, ``scatter_nd`` ``O(size(data) * M * prod(Y))`` for indices of shape
``(M, Y...)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from kiln import te
from kiln.ir.types import Type
from kiln.op.compute_transform_common import (
    clamp,
    ravel,
    safe_index,
    tensor_type,
    unravel,
    wrap_negative,
)
from kiln.op.registry import get_op_def
from kiln.op.transform_index import slice_ranges
from kiln.te import expr as E
from kiln.te.expr import PrimExpr

__all__: list[str] = []


def _strided_slice_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    slices = slice_ranges(x.shape, attrs)
    starts, steps = [], []
    for dim, s in zip(x.shape, slices):
        start, _, step = s.indices(dim)
        starts.append(start)
        steps.append(step)

    def element(*i: PrimExpr) -> PrimExpr:
        return x(*[b + c * s for c, b, s in zip(i, starts, steps)])

    return te.compute(tensor_type(out_type).shape, element, name="T_strided_slice",
                      tag="injective")


def _slice_like_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    return te.compute(tensor_type(out_type).shape, lambda *i: x(*i), name="T_slice_like",
                      tag="injective")


def _take_index(value: PrimExpr, n: int, mode: str) -> PrimExpr:
    if mode == "wrap":
        v = te.floormod(E.cast(value, "int64"), max(n, 1))
    elif mode == "fast":
        v = wrap_negative(value, n)
    else:  # clip
        v = E.cast(value, "int64")
    return safe_index(v, n)


def _take_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x, idx = inputs
    out = tensor_type(out_type)
    if attrs.axis is None:
        def flat_element(*i: PrimExpr) -> PrimExpr:
            k = _take_index(idx(*i), math.prod(x.shape), attrs.mode)
            return x(*unravel(k, x.shape))

        return te.compute(out.shape, flat_element, name="T_take", tag="injective")
    axis = attrs.axis % x.ndim
    batch = attrs.batch_dims + idx.ndim if attrs.batch_dims < 0 else attrs.batch_dims
    span = idx.ndim - batch

    def element(*i: PrimExpr) -> PrimExpr:
        k = _take_index(idx(*i[:batch], *i[axis:axis + span]), x.shape[axis], attrs.mode)
        return x(*i[:axis], k, *i[axis + span:])

    return te.compute(out.shape, element, name="T_take", tag="injective")


def _gather_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x, idx = inputs
    axis = attrs.axis % x.ndim

    def element(*i: PrimExpr) -> PrimExpr:
        k = safe_index(wrap_negative(idx(*i), x.shape[axis]), x.shape[axis])
        return x(*i[:axis], k, *i[axis + 1:])

    return te.compute(tensor_type(out_type).shape, element, name="T_gather", tag="injective")


def _gather_nd_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x, idx = inputs
    m, batch = idx.shape[0], attrs.batch_dims
    y_rank = idx.ndim - 1

    def element(*i: PrimExpr) -> PrimExpr:
        y = i[:y_rank]
        coords = list(y[:batch])
        for k in range(m):
            n = x.shape[batch + k]
            coords.append(safe_index(wrap_negative(idx(k, *y), n), n))
        return x(*coords, *i[y_rank:])

    return te.compute(tensor_type(out_type).shape, element, name="T_gather_nd", tag="injective")


def _one_hot_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    idx, on, off = inputs
    out = tensor_type(out_type)
    axis = attrs.axis % out.ndim
    on_value, off_value = E.cast(on(), out.dtype), E.cast(off(), out.dtype)

    def element(*i: PrimExpr) -> PrimExpr:
        hot = E.compare("eq", E.cast(idx(*i[:axis], *i[axis + 1:]), "int64"),
                        E.cast(i[axis], "int64"))
        return E.select(hot, on_value, off_value)

    return te.compute(out.shape, element, name="T_one_hot", tag="injective")


def _unravel_index_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    idx, dims = inputs
    out = tensor_type(out_type)
    m = dims.shape[0]

    def dim(e: Any) -> PrimExpr:
        # The reference rejects non-positive dimensions; a compiled kernel divides by 1 instead.
        return E.binary("max", E.cast(dims(e), "int64"), E.const(1, "int64"))

    # stride[d] = prod(dims[d + 1:]); floordiv by it equals the reference's repeated floordivs.
    e = te.reduce_axis((0, m), name="e")
    stride = te.compute((m,), lambda d: te.prod(dim(e), axis=e, where=e > d),
                        name="T_unravel_stride", tag="comm_reduce")

    def element(d: PrimExpr, *i: PrimExpr) -> PrimExpr:
        q = te.floordiv(E.cast(idx(*i), "int64"), stride(d))
        return E.cast(te.floormod(q, dim(d)), out.dtype)

    return te.compute(out.shape, element, name="T_unravel_index", tag="injective")


# --- scatters --------------------------------------------------------------------------------

_REDUCERS: dict[str, Callable[..., Any]] = {
    "add": te.sum,
    "mul": te.prod,
    "min": te.min,
    "max": te.max,
}


def _scatter_result(x: te.Tensor, reduction: str, axes: Sequence[te.IterVar],
                    matches: Callable[[Sequence[PrimExpr]], PrimExpr],
                    update_at: Callable[[Sequence[Any], Sequence[Any]], PrimExpr],
                    position: Callable[[Sequence[Any]], PrimExpr],
                    update_of: Callable[[Sequence[PrimExpr], PrimExpr], PrimExpr],
                    name: str) -> te.Tensor:
    """The scatter of updates into ``x`` (see the module docstring).

    ``matches(p)`` says whether the update at the reduction position lands on output ``p``;
    ``update_at(p, axes)`` reads that update, ``position(axes)`` numbers it (row-major), and
    ``update_of(p, number)`` reads update ``number`` again for output ``p``.
    """
    if reduction != "update":
        reducer = _REDUCERS[reduction]
        return te.compute(x.shape, lambda *p: reducer(update_at(p, axes), axis=list(axes),
                                                      where=matches(p), init=x(*p)),
                          name=name, tag="comm_reduce")
    last = te.compute(x.shape, lambda *p: te.max(position(axes), axis=list(axes),
                                                 where=matches(p), init=-1),
                      name=f"{name}_last", tag="comm_reduce")
    return te.compute(x.shape, lambda *p: te.if_then_else(last(*p) >= 0, update_of(p, last(*p)),
                                                          x(*p)),
                      name=name, tag="injective")


def _scatter_elements_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x, idx, upd = inputs
    axis = attrs.axis % x.ndim
    n = x.shape[axis]
    j = te.reduce_axis((0, idx.shape[axis]), name="j")

    def coords(p: Sequence[Any], k: Any) -> list[Any]:
        # The update's position: p's coordinates, clamped into indices' shape, with k on axis.
        return [k if d == axis else clamp(p[d], 0, idx.shape[d] - 1)
                for d in range(x.ndim)]

    def matches(p: Sequence[PrimExpr]) -> PrimExpr:
        inside = [p[d] < idx.shape[d] for d in range(x.ndim)
                  if d != axis and idx.shape[d] < x.shape[d]]
        target = wrap_negative(idx(*coords(p, j)), n)
        return te.all(*inside, E.compare("eq", target, E.cast(p[axis], "int64")))

    if 0 in idx.shape:  # no updates
        return te.compute(x.shape, lambda *p: x(*p), name="T_scatter_elements", tag="injective")
    return _scatter_result(x, attrs.reduction, [j], matches,
                           lambda p, axes: upd(*coords(p, axes[0])),
                           lambda axes: E.as_expr(axes[0]),
                           lambda p, k: upd(*coords(p, k)), "T_scatter_elements")


def _scatter_nd_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x, idx, upd = inputs
    m, y_shape = idx.shape[0], idx.shape[1:]
    if 0 in idx.shape:
        return te.compute(x.shape, lambda *p: x(*p), name="T_scatter_nd", tag="injective")
    if not y_shape:  # one index tuple: no reduction needed
        return _scatter_nd_single(x, idx, upd, attrs.mode)
    ys = [te.reduce_axis((0, d), name=f"y{k}") for k, d in enumerate(y_shape)]

    def matches(p: Sequence[PrimExpr]) -> PrimExpr:
        return te.all(*[E.compare("eq", wrap_negative(idx(k, *ys), x.shape[k]),
                                  E.cast(p[k], "int64")) for k in range(m)])

    return _scatter_result(x, attrs.mode, ys, matches,
                           lambda p, axes: upd(*axes, *p[m:]),
                           lambda axes: ravel(axes, y_shape),
                           lambda p, k: upd(*unravel(k, y_shape), *p[m:]), "T_scatter_nd")


def _scatter_nd_single(x: te.Tensor, idx: te.Tensor, upd: te.Tensor, mode: str) -> te.Tensor:
    m = idx.shape[0]
    combine = {
        "update": lambda old, new: new,
        "add": lambda old, new: old + new,
        "mul": lambda old, new: old * new,
        "min": lambda old, new: E.binary("min", old, new),
        "max": lambda old, new: E.binary("max", old, new),
    }[mode]

    def element(*p: PrimExpr) -> PrimExpr:
        hit = te.all(*[E.compare("eq", wrap_negative(idx(k), x.shape[k]), E.cast(p[k], "int64"))
                       for k in range(m)])
        return E.select(hit, combine(x(*p), upd(*p[m:])), x(*p))

    return te.compute(x.shape, element, name="T_scatter_nd", tag="injective")


def _register() -> None:
    get_op_def("strided_slice").compute = _strided_slice_compute
    get_op_def("slice_like").compute = _slice_like_compute
    get_op_def("take").compute = _take_compute
    get_op_def("gather").compute = _gather_compute
    get_op_def("gather_nd").compute = _gather_nd_compute
    get_op_def("one_hot").compute = _one_hot_compute
    get_op_def("unravel_index").compute = _unravel_index_compute
    get_op_def("scatter_elements").compute = _scatter_elements_compute
    get_op_def("scatter_nd").compute = _scatter_nd_compute


_register()
