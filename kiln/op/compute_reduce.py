"""Tensor-expression computes of the reductions (``kiln.op.reduce``).

Each compute follows the operator's NumPy reference: axes come from
:func:`~kiln.op.transform_common.reduce_axes` (``None``/empty: all, negative axes, ``exclude``),
``keepdims`` keeps reduced axes as size 1. Float sums, means, products and variances accumulate
in float64 in a ``comm_reduce`` stage and are rounded once by an element-wise stage, as the
references compute them; integer sums and products wrap in the input dtype; the integer mean
divides the wrapped sum by the element count, truncating toward zero. ``max``/``min`` of an empty
axis give ``-inf``/``+inf`` (the integer limits for integers), NaN propagates. ``argmax``/``argmin``
use a tuple reduction over (flat index into the reduced axes, value): NaN counts as the extreme
value (the first NaN wins, like NumPy), ties pick the first index, or the last with
``select_last_index``. Attached to the registry as ``get_op_def(name).compute``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from kiln import te
from kiln.ir.types import Type
from kiln.op.compute_transform_common import (
    accumulate_dtype,
    broadcast_index,
    highest,
    logical_all,
    logical_any,
    lowest,
    ravel,
    tensor_type,
)
from kiln.op.registry import get_op_def
from kiln.op.transform_common import reduce_axes
from kiln.te import expr as E
from kiln.te.expr import PrimExpr

__all__ = ["reduction_compute"]

Reducer = Callable[..., Any]
Element = Callable[[list[Any]], PrimExpr]


def _axes(x: te.Tensor, attrs: Any, op: str) -> tuple[int, ...]:
    return reduce_axes(x.ndim, attrs.axis, attrs.exclude, op)


def reduction_compute(x: te.Tensor, axes: Sequence[int], keepdims: bool, element: Element,
                      reducer: Reducer, name: str, out_shape: Sequence[int]) -> Any:
    """Reduce ``element(coords)`` of ``x``'s index space over ``axes``.

    Parameters
    ----------
    x : te.Tensor
        The tensor whose index space is reduced.
    axes : sequence of int
        Reduced axes (non-negative, increasing).
    keepdims : bool
        Whether reduced axes stay in the output as size 1.
    element : callable
        ``element(coords) -> expr``: the value at full coordinates of ``x`` (reduction
        variables at the reduced axes).
    reducer : callable
        A ``te`` reducer (``te.sum``, a ``comm_reducer``); with no reduced axis the element itself
        is the result.
    name : str
        Stage name.
    out_shape : sequence of int
        The output shape.

    Returns
    -------
    te.Tensor or list of te.Tensor
        The reduction (a list for tuple reducers).
    """
    raxes = {a: te.reduce_axis((0, x.shape[a]), name=f"k{a}") for a in axes}

    def coords_of(out_idx: Sequence[PrimExpr]) -> list[Any]:
        coords: list[Any] = []
        pos = 0
        for d in range(x.ndim):
            if d in raxes:
                coords.append(raxes[d])
                pos += int(keepdims)
            else:
                coords.append(out_idx[pos])
                pos += 1
        return coords

    if not raxes:
        return te.compute(out_shape, lambda *i: element(coords_of(i)), name=name, tag="elemwise")
    return te.compute(out_shape, lambda *i: reducer(element(coords_of(i)), axis=list(raxes.values())),
                      name=name, tag="comm_reduce")


def _count(x: te.Tensor, axes: Sequence[int]) -> int:
    return math.prod(x.shape[a] for a in axes)


def _make_simple(op: str, reducer: Reducer, accumulate: bool) -> Callable[..., te.Tensor]:
    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        x = inputs[0]
        out = tensor_type(out_type)
        axes = _axes(x, attrs, op)
        acc = accumulate_dtype(x.dtype) if accumulate else x.dtype
        if acc == x.dtype:
            return reduction_compute(x, axes, attrs.keepdims, lambda c: x(*c), reducer, f"T_{op}",
                                     out.shape)
        red = reduction_compute(x, axes, attrs.keepdims, lambda c: E.cast(x(*c), acc), reducer,
                                f"T_{op}_acc", out.shape)
        return te.compute(out.shape, lambda *i: E.cast(red(*i), out.dtype), name=f"T_{op}",
                          tag="elemwise")

    return compute


# te.max/te.min start from the finite limits; the references start from -inf/+inf.
_max = te.comm_reducer(lambda x, y: E.binary("max", x, y), lowest, name="max")
_min = te.comm_reducer(lambda x, y: E.binary("min", x, y), highest, name="min")


def _mean_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    out = tensor_type(out_type)
    axes = _axes(x, attrs, "mean")
    count = _count(x, axes)
    acc = accumulate_dtype(x.dtype)
    total = reduction_compute(x, axes, attrs.keepdims, lambda c: E.cast(x(*c), acc), te.sum,
                              "T_mean_sum", out.shape)

    def finish(*i: PrimExpr) -> PrimExpr:
        s = total(*i)
        if E.is_float_dtype(acc):
            value = s / E.const(float(count), acc) if count else E.const(float("nan"), acc)
        elif count:
            value = te.truncdiv(E.cast(s, "int64"), E.const(count, "int64"))
        else:
            value = s
        return E.cast(value, out.dtype)

    return te.compute(out.shape, finish, name="T_mean", tag="elemwise")


def _beats(a: PrimExpr, b: PrimExpr, largest: bool) -> PrimExpr:
    """Whether value ``a`` is strictly more extreme than ``b`` (NaN most extreme, like NumPy)."""
    strict = a > b if largest else a < b
    if not E.is_float_dtype(a.dtype):
        return strict
    return te.any(strict, te.all(te.isnan(a), E.logical_not(te.isnan(b))))


def _ties(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    same = E.compare("eq", a, b)
    if not E.is_float_dtype(a.dtype):
        return same
    return te.any(same, te.all(te.isnan(a), te.isnan(b)))


def _arg_reducer(largest: bool, last: bool) -> Reducer:
    def combine(lhs: list[PrimExpr], rhs: list[PrimExpr]) -> list[PrimExpr]:
        li, lv = lhs
        ri, rv = rhs
        later = ri > li if last else ri < li
        take_rhs = te.any(_beats(rv, lv, largest), te.all(_ties(rv, lv), later))
        return [E.select(take_rhs, ri, li), E.select(take_rhs, rv, lv)]

    def identity(index_dtype: str, value_dtype: str) -> list[PrimExpr]:
        # The identity loses every comparison and every tie against a real element.
        index = E.const(-1 if last else 2**31 - 1, index_dtype)
        return [index, lowest(value_dtype) if largest else highest(value_dtype)]

    return te.comm_reducer(combine, identity, name="argmax" if largest else "argmin")


def _make_arg(op: str, largest: bool) -> Callable[..., te.Tensor]:
    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        x = inputs[0]
        out = tensor_type(out_type)
        axes = _axes(x, attrs, op)
        if not axes:
            return te.compute(out.shape, lambda *i: E.const(0, out.dtype), name=f"T_{op}",
                              tag="elemwise")
        reducer = _arg_reducer(largest, attrs.select_last_index)
        red_shape = [x.shape[a] for a in axes]

        def element(coords: list[Any]) -> Any:
            flat = ravel([coords[a] for a in axes], red_shape)
            return (flat, x(*coords))

        parts = reduction_compute(x, axes, attrs.keepdims, element, reducer, f"T_{op}_red_temp",
                                  out.shape)
        # The value component is scratch: the kernel's output is a copy of the index component.
        index = parts[0]
        return te.compute(out.shape, lambda *i: index(*i), name=f"T_{op}", tag="elemwise")

    return compute


def _variance_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x, m = inputs
    out = tensor_type(out_type)
    axes = _axes(x, attrs, "variance")
    count = _count(x, axes) - int(attrs.unbiased)

    def element(coords: list[Any]) -> PrimExpr:
        d = E.cast(x(*coords), "float64") - E.cast(m(*broadcast_index(m, x.shape, coords)),
                                                    "float64")
        return d * d

    squares = reduction_compute(x, axes, attrs.keepdims, element, te.sum, "T_variance_sum",
                                out.shape)

    def finish(*i: PrimExpr) -> PrimExpr:
        if count <= 0:
            return E.cast(E.const(float("nan"), "float64"), out.dtype)
        return E.cast(squares(*i) / E.const(float(count), "float64"), out.dtype)

    return te.compute(out.shape, finish, name="T_variance", tag="elemwise")


def _register() -> None:
    get_op_def("sum").compute = _make_simple("sum", te.sum, accumulate=True)
    get_op_def("prod").compute = _make_simple("prod", te.prod, accumulate=True)
    get_op_def("max").compute = _make_simple("max", _max, accumulate=False)
    get_op_def("min").compute = _make_simple("min", _min, accumulate=False)
    get_op_def("all").compute = _make_simple("all", logical_all, accumulate=False)
    get_op_def("any").compute = _make_simple("any", logical_any, accumulate=False)
    get_op_def("mean").compute = _mean_compute
    get_op_def("argmax").compute = _make_arg("argmax", largest=True)
    get_op_def("argmin").compute = _make_arg("argmin", largest=False)
    get_op_def("variance").compute = _variance_compute


_register()
