"""Scatter operators: scatter_elements and scatter_nd.

Both write into a copy of ``data``. Indices in ``[-n, n)`` are accepted (negative ones count from
the end, as ONNX allows); others are rejected. ``scatter_nd`` uses relay's index layout: the index
tuple is the *first* axis of ``indices`` (shape ``(M, Y...)``), not the last as in ONNX. With
``"update"``, the last of several updates to one position wins; the other reductions (``add``,
``mul``, ``min``, ``max``) combine every update with the existing value.
"""

from __future__ import annotations

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr
from kiln.ir.types import TensorType, Type
from kiln.op.registry import OpPattern, make_call, register_op, tensor_arg
from kiln.op.transform_common import as_result, check_index_dtype, wrap_negative
from kiln.op.transform_index import element_index, nd_index

__all__ = [
    "ScatterElementsAttrs",
    "ScatterNDAttrs",
    "scatter_elements",
    "scatter_nd",
]


_SCATTER_REDUCTIONS = {
    "add": np.add,
    "mul": np.multiply,
    "min": np.minimum,
    "max": np.maximum,
}


@attrs_class("relay.attrs.ScatterElementsAttrs")
class ScatterElementsAttrs(Attrs):
    """Axis and reduction (``update``, ``add``, ``mul``, ``min``, ``max``) of ``scatter_elements``."""

    axis: int = 0
    reduction: str = "update"


def _check_scatter_args(op: str, types: list[Type], reduction: str) -> tuple[TensorType, ...]:
    data = tensor_arg(types, 0, op, "data")
    indices = tensor_arg(types, 1, op, "indices")
    updates = tensor_arg(types, 2, op, "updates")
    check_index_dtype(op, indices)
    if updates.dtype != data.dtype:
        raise KilnTypeError(f"{op}: updates have dtype {updates.dtype} but data has {data.dtype}")
    if reduction != "update" and reduction not in _SCATTER_REDUCTIONS:
        raise KilnTypeError(f"{op}: unknown reduction {reduction!r}; use update, add, mul, min or max")
    return data, indices, updates


def _scatter_elements_rel(types: list[Type], attrs: ScatterElementsAttrs) -> Type:
    data, indices, updates = _check_scatter_args("scatter_elements", types, attrs.reduction)
    if not -data.ndim <= attrs.axis < max(data.ndim, 1):
        raise KilnTypeError(f"scatter_elements: axis {attrs.axis} is out of range for data {data.shape}")
    if indices.shape != updates.shape or indices.ndim != data.ndim:
        raise KilnTypeError(f"scatter_elements: indices {indices.shape} and updates {updates.shape} must "
                            f"have the same shape and the rank of data {data.shape}")
    axis = attrs.axis % data.ndim
    for d, (i, n) in enumerate(zip(indices.shape, data.shape)):
        if d != axis and i > n:
            raise KilnTypeError(f"scatter_elements: indices {indices.shape} are larger than data "
                                f"{data.shape} on axis {d}")
    return data


def _scatter_into(out: np.ndarray, where: tuple[np.ndarray, ...], updates: np.ndarray,
                  reduction: str) -> None:
    if reduction == "update":
        out[where] = updates
    else:
        _SCATTER_REDUCTIONS[reduction].at(out, where, updates)


def _scatter_elements_ref(args: list[np.ndarray], attrs: ScatterElementsAttrs, out: Type) -> np.ndarray:
    x, idx, upd = args
    axis = attrs.axis % x.ndim
    result = x.copy()
    idx = wrap_negative("scatter_elements", idx, x.shape[axis])
    _scatter_into(result, element_index(idx, axis), upd, attrs.reduction)
    return as_result(out, result)


register_op("scatter_elements", num_inputs=3, type_rel=_scatter_elements_rel,
            reference=_scatter_elements_ref, pattern=OpPattern.OPAQUE,
            attrs_type=ScatterElementsAttrs, doc="scatter elements along an axis (ONNX ScatterElements)")


def scatter_elements(data: Expr, indices: Expr, updates: Expr, axis: int = 0,
                     reduction: str = "update") -> Call:
    """Write (or combine) ``updates`` into a copy of ``data`` at element positions along ``axis``.

    Parameters
    ----------
    data : Expr
        The tensor to update.
    indices : Expr
        Integer positions along ``axis``, same shape as ``updates``.
    updates : Expr
        The new values.
    axis : int
        The indexed axis.
    reduction : str
        ``"update"`` (overwrite; the last duplicate wins), ``"add"``, ``"mul"``, ``"min"`` or ``"max"``.

    Returns
    -------
    Call
        The updated tensor.
    """
    return make_call("scatter_elements", [data, indices, updates],
                     ScatterElementsAttrs(axis=int(axis), reduction=str(reduction)))


@attrs_class("relay.attrs.ScatterNDAttrs")
class ScatterNDAttrs(Attrs):
    """Reduction mode of ``scatter_nd`` (``update``, ``add``, ``mul``, ``min``, ``max``)."""

    mode: str = "update"


def _scatter_nd_rel(types: list[Type], attrs: ScatterNDAttrs) -> Type:
    data, indices, updates = _check_scatter_args("scatter_nd", types, attrs.mode)
    if indices.ndim == 0 or indices.shape[0] > data.ndim:
        raise KilnTypeError(f"scatter_nd: indices {indices.shape} must be (M, Y...) with M <= "
                            f"{data.ndim} (the rank of data {data.shape})")
    m = indices.shape[0]
    want = indices.shape[1:] + data.shape[m:]
    if updates.shape != want:
        raise KilnTypeError(f"scatter_nd: updates have shape {updates.shape} but indices {indices.shape} "
                            f"and data {data.shape} need {want}")
    return data


def _scatter_nd_ref(args: list[np.ndarray], attrs: ScatterNDAttrs, out: Type) -> np.ndarray:
    x, idx, upd = args
    result = x.copy()
    _scatter_into(result, nd_index("scatter_nd", x.shape, idx, 0), upd, attrs.mode)
    return as_result(out, result)


register_op("scatter_nd", num_inputs=3, type_rel=_scatter_nd_rel, reference=_scatter_nd_ref,
            pattern=OpPattern.OPAQUE, attrs_type=ScatterNDAttrs,
            doc="scatter slices by index tuples (index tuple on the first axis)")


def scatter_nd(data: Expr, indices: Expr, updates: Expr, mode: str = "update") -> Call:
    """Write (or combine) slices of ``updates`` into a copy of ``data`` at index tuples.

    Parameters
    ----------
    data : Expr
        The tensor to update, shape ``(X_0, ..., X_{n-1})``.
    indices : Expr
        Integer tensor of shape ``(M, Y...)``.
    updates : Expr
        Shape ``(Y..., X_M, ..., X_{n-1})``.
    mode : str
        ``"update"``, ``"add"``, ``"mul"``, ``"min"`` or ``"max"``.

    Returns
    -------
    Call
        The updated tensor.
    """
    return make_call("scatter_nd", [data, indices, updates], ScatterNDAttrs(mode=str(mode)))
