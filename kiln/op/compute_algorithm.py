"""Tensor-expression computes of sorting and scans (``kiln.op.algorithm``).

Tensor expressions are data parallel and Kiln's TE has no scan or extern stage, so these ops are
written as reductions:

* ``sort``, ``argsort`` and ``topk`` rank every element of a row: ``rank[i]`` counts the
  elements that sort before element ``i`` (a smaller key, or an equal key at a smaller index:
  the stable order of the reference, NaN sorting as the largest value like NumPy). The element
  of rank ``r`` is then found with a second reduction, ``order[r] = sum_j (rank[j] == r ? j :
  0)`` (ranks are a permutation, so exactly one ``j`` matches). Both passes cost ``O(n^2)`` per
  row of length ``n`` (and parallelise over rows and positions).
* ``cumsum`` and ``cumprod`` reduce over the triangular range ``j <= i`` (``j < i`` when
  exclusive) of the scanned axis, ``O(n^2)`` per row, in increasing ``j``: floats accumulate in
  float64 and are rounded once, integers wrap in the result dtype, as in the references.

Attached as ``get_op_def(name).compute``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kiln import te
from kiln.ir.types import Type
from kiln.op.compute_transform_common import (
    accumulate_dtype,
    safe_index,
    tensor_type,
    tuple_types,
    unravel,
)
from kiln.op.registry import get_op_def
from kiln.te import expr as E
from kiln.te.expr import PrimExpr

__all__ = ["sort_order"]


def _key_less(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """``a < b`` in NumPy's sort order (NaN after every number)."""
    if not E.is_float_dtype(a.dtype):
        return a < b
    return te.any(a < b, te.all(te.isnan(b), E.logical_not(te.isnan(a))))


def _key_equal(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """``a == b`` in NumPy's sort order (NaNs are equal to each other)."""
    if not E.is_float_dtype(a.dtype):
        return E.compare("eq", a, b)
    return te.any(E.compare("eq", a, b), te.all(te.isnan(a), te.isnan(b)))


def sort_order(x: te.Tensor, axis: int, ascending: bool, count: int) -> te.Tensor:
    """The int32 indices of the first ``count`` elements of each row of ``x`` in stable order.

    Parameters
    ----------
    x : te.Tensor
        The data.
    axis : int
        The sorted axis (non-negative).
    ascending : bool
        Direction; descending order also keeps equal elements in index order.
    count : int
        How many positions of the order to produce (the size of ``axis`` for a full sort).

    Returns
    -------
    te.Tensor
        ``x``'s shape with ``count`` on ``axis``: position ``r`` holds the index of the element
        of rank ``r``.
    """
    n = x.shape[axis]

    def at(p: tuple[PrimExpr, ...], k: Any) -> tuple[Any, ...]:
        return (*p[:axis], k, *p[axis + 1:])

    j = te.reduce_axis((0, n), name="j")

    def rank_of(*p: PrimExpr) -> PrimExpr:
        mine, other = x(*p), x(*at(p, j))
        first = _key_less(other, mine) if ascending else _key_less(mine, other)
        before = te.any(first, te.all(_key_equal(other, mine), j < p[axis]))
        # a branch-free count (a where= guard would mispredict on random data)
        return te.sum(E.select(before, E.const(1), E.const(0)), axis=j)

    rank = te.compute(x.shape, rank_of, name="T_sort_rank", tag="comm_reduce")
    shape = (*x.shape[:axis], count, *x.shape[axis + 1:])
    r = te.reduce_axis((0, n), name="r")
    return te.compute(shape, lambda *p: te.sum(E.select(E.compare("eq", rank(*at(p, r)), p[axis]),
                                                        E.as_expr(r), E.const(0)), axis=r),
                      name="T_sort_order", tag="comm_reduce")


def _sort_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    axis = attrs.axis % x.ndim
    order = sort_order(x, axis, attrs.is_ascend, x.shape[axis])
    return _take_along(x, order, axis, "T_sort")


def _take_along(x: te.Tensor, order: te.Tensor, axis: int, name: str) -> te.Tensor:
    def element(*p: PrimExpr) -> PrimExpr:
        k = safe_index(E.cast(order(*p), "int64"), x.shape[axis])
        return x(*p[:axis], k, *p[axis + 1:])

    return te.compute(order.shape, element, name=name, tag="injective")


def _argsort_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    out = tensor_type(out_type)
    axis = attrs.axis % x.ndim
    order = sort_order(x, axis, attrs.is_ascend, x.shape[axis])
    return te.compute(out.shape, lambda *p: E.cast(order(*p), out.dtype), name="T_argsort",
                      tag="elemwise")


def _topk_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> Any:
    x = inputs[0]
    axis = attrs.axis % x.ndim
    fields = tuple_types(out_type)
    count = fields[0].shape[axis]
    order = sort_order(x, axis, attrs.is_ascend, count)
    values = _take_along(x, order, axis, "T_topk_values")
    index_dtype = fields[-1].dtype
    indices = te.compute(order.shape, lambda *p: E.cast(order(*p), index_dtype),
                         name="T_topk_indices", tag="elemwise")
    if attrs.ret_type == "both":
        return [values, indices]
    return values if attrs.ret_type == "values" else indices


def _make_scan(name: str, reducer: Callable[..., Any]) -> Callable[..., te.Tensor]:
    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        x = inputs[0]
        out = tensor_type(out_type)
        acc = accumulate_dtype(out.dtype)
        if attrs.axis is None:
            n, axis = math.prod(x.shape), 0

            def read(p: tuple[PrimExpr, ...], k: Any) -> PrimExpr:
                return x(*unravel(E.as_expr(k), x.shape))
        else:
            axis = attrs.axis % x.ndim
            n = x.shape[axis]

            def read(p: tuple[PrimExpr, ...], k: Any) -> PrimExpr:
                return x(*p[:axis], k, *p[axis + 1:])

        j = te.reduce_axis((0, n), name="j")

        def element(*p: PrimExpr) -> PrimExpr:
            inside = j < p[axis] if attrs.exclusive else j <= p[axis]
            # The reference first converts the data to the result dtype, then accumulates.
            value = E.cast(E.cast(read(p, j), out.dtype), acc)
            return reducer(value, axis=j, where=inside)

        if acc == out.dtype:
            return te.compute(out.shape, element, name=f"T_{name}", tag="comm_reduce")
        total = te.compute(out.shape, element, name=f"T_{name}_acc", tag="comm_reduce")
        return te.compute(out.shape, lambda *p: E.cast(total(*p), out.dtype), name=f"T_{name}",
                          tag="elemwise")

    return compute


def _register() -> None:
    get_op_def("sort").compute = _sort_compute
    get_op_def("argsort").compute = _argsort_compute
    get_op_def("topk").compute = _topk_compute
    get_op_def("cumsum").compute = _make_scan("cumsum", te.sum)
    get_op_def("cumprod").compute = _make_scan("cumprod", te.prod)


_register()
