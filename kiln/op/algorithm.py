"""Sorting and scans: sort, argsort, topk, cumsum, cumprod.

Sorting is stable in both directions: equal values keep their original order, so for ``topk``
(largest first) ties are returned lower index first, as ONNX ``TopK`` requires. ``topk``'s ``k``
decides the output shape, so it must be a constant (int or ``relay.const``); ``k < 1`` selects
every element, as in TVM. Scans accumulate in the output dtype (integers wrap around like C);
floats are accumulated in float64 and rounded once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr, TupleWrapper
from kiln.ir.types import TensorType, TupleType, Type, as_dtype, is_int, np_dtype
from kiln.op.registry import OpPattern, make_call, register_op, tensor_arg
from kiln.op.transform_common import as_result, check_dtype_kind, const_int

__all__ = [
    "ArgsortAttrs",
    "ScanopAttrs",
    "TopkAttrs",
    "argsort",
    "cumprod",
    "cumsum",
    "sort",
    "stable_order",
    "topk",
]


def stable_order(x: np.ndarray, axis: int, ascending: bool) -> np.ndarray:
    """Indices that sort ``x`` along ``axis``, keeping equal values in index order.

    Parameters
    ----------
    x : numpy.ndarray
        The values.
    axis : int
        The sorted axis.
    ascending : bool
        Sort direction; descending order also puts the lower index first among equal values.

    Returns
    -------
    numpy.ndarray
        int64 indices of ``x``'s shape.
    """
    if ascending:
        return np.argsort(x, axis=axis, kind="stable")
    # Sorting the reversed array ascending and reversing the result is a stable descending sort.
    order = np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    return x.shape[axis] - 1 - order


def _check_axis(op: str, data: TensorType, axis: int) -> int:
    if not -data.ndim <= axis < data.ndim:
        raise KilnTypeError(f"{op}: axis {axis} is out of range for data of shape {data.shape}")
    return axis % data.ndim


# --- sort, argsort ---------------------------------------------------------------------------

@attrs_class("relay.attrs.ArgsortAttrs")
class ArgsortAttrs(Attrs):
    """Axis, direction and index dtype of ``sort``/``argsort``."""

    axis: int = -1
    is_ascend: bool = True
    dtype: str | None = None


def _sort_rel(types: list[Type], attrs: ArgsortAttrs) -> Type:
    data = tensor_arg(types, 0, "sort", "data")
    _check_axis("sort", data, attrs.axis)
    return data


def _sort_ref(args: list[np.ndarray], attrs: ArgsortAttrs, out: Type) -> np.ndarray:
    x = args[0]
    order = stable_order(x, attrs.axis, attrs.is_ascend)
    return np.take_along_axis(x, order, axis=attrs.axis)


register_op("sort", num_inputs=1, type_rel=_sort_rel, reference=_sort_ref, pattern=OpPattern.OPAQUE,
            attrs_type=ArgsortAttrs, doc="sort along an axis")


def _argsort_rel(types: list[Type], attrs: ArgsortAttrs) -> Type:
    data = tensor_arg(types, 0, "argsort", "data")
    _check_axis("argsort", data, attrs.axis)
    dtype = attrs.dtype or "int32"
    if not is_int(dtype):
        raise KilnTypeError(f"argsort: index dtype must be an integer type, got {dtype}")
    return TensorType(data.shape, dtype)


register_op("argsort", num_inputs=1, type_rel=_argsort_rel,
            reference=lambda args, attrs, out: as_result(out, stable_order(args[0], attrs.axis,
                                                                           attrs.is_ascend)),
            pattern=OpPattern.OPAQUE, attrs_type=ArgsortAttrs, doc="indices that sort along an axis")


def sort(data: Expr, axis: int = -1, is_ascend: bool = True) -> Call:
    """Sort ``data`` along ``axis`` (stable).

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis : int
        The axis to sort.
    is_ascend : bool
        Ascending (default) or descending order.

    Returns
    -------
    Call
        The sorted tensor.
    """
    return make_call("sort", [data], ArgsortAttrs(axis=int(axis), is_ascend=bool(is_ascend)))


def argsort(data: Expr, axis: int = -1, is_ascend: bool = True, dtype: str = "int32") -> Call:
    """Indices that sort ``data`` along ``axis`` (stable: equal values keep index order).

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis : int
        The axis to sort.
    is_ascend : bool
        Ascending (default) or descending order.
    dtype : str
        Index dtype.

    Returns
    -------
    Call
        The indices.
    """
    attrs = ArgsortAttrs(axis=int(axis), is_ascend=bool(is_ascend), dtype=as_dtype(dtype))
    return make_call("argsort", [data], attrs)


# --- topk ------------------------------------------------------------------------------------

@attrs_class("relay.attrs.TopkAttrs")
class TopkAttrs(Attrs):
    """``k``, axis, result kind, direction and index dtype of ``topk``."""

    k: int
    axis: int = -1
    ret_type: str = "both"
    is_ascend: bool = False
    dtype: str | None = None


def _topk_rel(types: list[Type], attrs: TopkAttrs) -> Type:
    data = tensor_arg(types, 0, "topk", "data")
    axis = _check_axis("topk", data, attrs.axis)
    dim = data.shape[axis]
    if attrs.k > dim:
        raise KilnTypeError(f"topk: k={attrs.k} is larger than axis {attrs.axis} of shape {data.shape}")
    shape = (*data.shape[:axis], dim if attrs.k < 1 else attrs.k, *data.shape[axis + 1:])
    values = TensorType(shape, data.dtype)
    indices = TensorType(shape, attrs.dtype or "int32")
    if attrs.ret_type == "both":
        return TupleType((values, indices))
    if attrs.ret_type == "values":
        return values
    if attrs.ret_type == "indices":
        return indices
    raise KilnTypeError(f"topk: ret_type must be 'both', 'values' or 'indices', got {attrs.ret_type!r}")


def _topk_ref(args: list[np.ndarray], attrs: TopkAttrs, out: Type) -> Any:
    x = args[0]
    axis = attrs.axis % x.ndim
    k = x.shape[axis] if attrs.k < 1 else attrs.k
    order = np.take(stable_order(x, axis, attrs.is_ascend), np.arange(k), axis=axis)
    values = np.take_along_axis(x, order, axis=axis)
    index_dtype = np_dtype(attrs.dtype or "int32")
    if attrs.ret_type == "both":
        return values, order.astype(index_dtype)
    return values if attrs.ret_type == "values" else order.astype(index_dtype)


register_op("topk", num_inputs=1, type_rel=_topk_rel, reference=_topk_ref, pattern=OpPattern.OPAQUE,
            attrs_type=TopkAttrs, doc="the k largest (or smallest) elements and their indices",
            layout="split")


def topk(data: Expr, k: Any = 1, axis: int = -1, ret_type: str = "both", is_ascend: bool = False,
         dtype: str = "int32") -> Any:
    """The ``k`` largest (``is_ascend=False``) or smallest elements along ``axis``, sorted.

    Parameters
    ----------
    data : Expr
        The input tensor.
    k : int or Constant
        How many elements (a constant; ``k < 1`` selects all).
    axis : int
        The axis.
    ret_type : str
        ``"both"`` (values and indices), ``"values"`` or ``"indices"``.
    is_ascend : bool
        Select the smallest elements, in ascending order.
    dtype : str
        Index dtype.

    Returns
    -------
    TupleWrapper or Call
        ``(values, indices)`` for ``ret_type="both"``, else one tensor.
    """
    attrs = TopkAttrs(k=const_int(k, "topk", "k"), axis=int(axis), ret_type=str(ret_type),
                      is_ascend=bool(is_ascend), dtype=as_dtype(dtype))
    call = make_call("topk", [data], attrs)
    return TupleWrapper(call, 2) if ret_type == "both" else call


# --- cumsum, cumprod -------------------------------------------------------------------------

@attrs_class("relay.attrs.ScanopAttrs")
class ScanopAttrs(Attrs):
    """Axis (``None``: the flattened tensor), accumulation dtype and exclusiveness of a scan."""

    axis: int | None = None
    dtype: str | None = None
    exclusive: bool = False


def _make_scan_rel(name: str) -> Any:
    def rel(types: list[Type], attrs: ScanopAttrs) -> Type:
        data = tensor_arg(types, 0, name, "data")
        dtype = attrs.dtype or data.dtype
        check_dtype_kind(name, TensorType((), dtype), "fi", "the accumulation dtype")
        if attrs.axis is None:
            return TensorType((data.size,), dtype)
        _check_axis(name, data, attrs.axis)
        return TensorType(data.shape, dtype)

    return rel


def _make_scan_ref(ufunc: np.ufunc) -> Any:
    def reference(args: list[np.ndarray], attrs: ScanopAttrs, out: Type) -> np.ndarray:
        assert isinstance(out, TensorType)
        x = as_result(out, args[0])
        axis = 0 if attrs.axis is None else attrs.axis % max(x.ndim, 1)
        if attrs.axis is None:
            x = x.reshape(-1)
        work = x.astype(np.float64) if x.dtype.kind == "f" else x
        scanned = ufunc.accumulate(work, axis=axis, dtype=work.dtype)
        if attrs.exclusive and scanned.shape[axis]:
            identity = np.full_like(np.take(scanned, [0], axis=axis), ufunc.identity)
            scanned = np.concatenate([identity, np.delete(scanned, -1, axis=axis)], axis=axis)
        return as_result(out, scanned)

    return reference


register_op("cumsum", num_inputs=1, type_rel=_make_scan_rel("cumsum"), reference=_make_scan_ref(np.add),
            pattern=OpPattern.OPAQUE, attrs_type=ScanopAttrs, doc="cumulative sum")
register_op("cumprod", num_inputs=1, type_rel=_make_scan_rel("cumprod"),
            reference=_make_scan_ref(np.multiply), pattern=OpPattern.OPAQUE, attrs_type=ScanopAttrs,
            doc="cumulative product")


def _scan(name: str, data: Expr, axis: int | None, dtype: str | None, exclusive: bool | None) -> Call:
    attrs = ScanopAttrs(axis=None if axis is None else int(axis),
                        dtype=as_dtype(dtype) if dtype else None, exclusive=bool(exclusive))
    return make_call(name, [data], attrs)


def cumsum(data: Expr, axis: int | None = None, dtype: str | None = None,
           exclusive: bool | None = None) -> Call:
    """Cumulative sum of ``data`` along ``axis``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis : int, optional
        The axis; ``None`` scans the flattened tensor (the result is 1-d).
    dtype : str, optional
        Accumulation and result dtype (default: ``data``'s).
    exclusive : bool, optional
        Exclude each element from its own sum (the first result is 0).

    Returns
    -------
    Call
        The scan.
    """
    return _scan("cumsum", data, axis, dtype, exclusive)


def cumprod(data: Expr, axis: int | None = None, dtype: str | None = None,
            exclusive: bool | None = None) -> Call:
    """Cumulative product of ``data`` along ``axis``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis : int, optional
        The axis; ``None`` scans the flattened tensor (the result is 1-d).
    dtype : str, optional
        Accumulation and result dtype (default: ``data``'s).
    exclusive : bool, optional
        Exclude each element from its own product (the first result is 1).

    Returns
    -------
    Call
        The scan.
    """
    return _scan("cumprod", data, axis, dtype, exclusive)

from kiln.op import compute_algorithm  # noqa: E402,F401  (attaches TE computes)
