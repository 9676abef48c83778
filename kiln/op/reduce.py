"""Reductions: sum, mean, max, min, prod, all, any, argmax, argmin, variance (+ std, logsumexp).

Every reduction takes ``axis`` (``None`` or an empty list: every axis; an int or a list of ints,
negative values counting from the end), ``keepdims`` (keep reduced axes as size 1) and ``exclude``
(reduce the axes *not* listed), with TVM's semantics and attribute classes. Integer tensors keep
their dtype: sums and products wrap around like C, and the mean of integers is the integer sum
divided by the element count, truncated toward zero (TVM computes it the same way). Float results
are computed in float64 and rounded once. ``argmax``/``argmin`` return int32 indices (into the
flattened reduced axes when several are reduced); ties pick the first index unless
``select_last_index``.

``std``, ``mean_variance``, ``mean_std`` and ``logsumexp`` are builders that compose registered
operators exactly as TVM's do, so their graphs print like TVM's. The builders ``sum``, ``max``,
``min``, ``all`` and ``any`` shadow Python's built-ins inside this module (as in TVM), so code here
reaches the built-ins through :mod:`builtins`.
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr, Tuple, TupleWrapper
from kiln.ir.types import TensorType, Type
from kiln.op import elemwise as _elemwise  # builders made from tables: typed as module attributes
from kiln.op.registry import OpPattern, broadcast_shapes, make_call, register_op, tensor_arg
from kiln.op.transform import squeeze
from kiln.op.transform_common import as_result, check_dtype_kind, optional_axes, reduce_axes

__all__ = [
    "ArgReduceAttrs",
    "ReduceAttrs",
    "VarianceAttrs",
    "all",
    "any",
    "argmax",
    "argmin",
    "logsumexp",
    "max",
    "mean",
    "mean_std",
    "mean_variance",
    "min",
    "prod",
    "std",
    "sum",
    "variance",
]


@attrs_class("relay.attrs.ReduceAttrs")
class ReduceAttrs(Attrs):
    """Axes and flags of a reduction (``sum``, ``mean``, ``max``, ...)."""

    axis: tuple[int, ...] | None = None
    keepdims: bool = False
    exclude: bool = False


@attrs_class("relay.attrs.ArgReduceAttrs")
class ArgReduceAttrs(Attrs):
    """Axes and flags of ``argmax``/``argmin``."""

    axis: tuple[int, ...] | None = None
    keepdims: bool = False
    select_last_index: bool = False
    exclude: bool = False


@attrs_class("relay.attrs.VarianceAttrs")
class VarianceAttrs(Attrs):
    """Axes and flags of ``variance`` (``unbiased`` divides by ``n - 1``)."""

    axis: tuple[int, ...] | None = None
    keepdims: bool = False
    exclude: bool = False
    unbiased: bool = False


AnyReduceAttrs = ReduceAttrs | ArgReduceAttrs | VarianceAttrs


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _axes_of(x: np.ndarray, attrs: AnyReduceAttrs, op: str) -> tuple[int, ...]:
    return reduce_axes(x.ndim, attrs.axis, attrs.exclude, op)


# --- type relations --------------------------------------------------------------------------

def _make_reduce_rel(name: str, kinds: str) -> Any:
    def rel(types: list[Type], attrs: ReduceAttrs) -> Type:
        data = tensor_arg(types, 0, name, "data")
        check_dtype_kind(name, data, kinds)
        axes = reduce_axes(data.ndim, attrs.axis, attrs.exclude, name)
        return TensorType(_reduced_shape(data.shape, axes, attrs.keepdims), data.dtype)

    return rel


def _make_arg_reduce_rel(name: str) -> Any:
    def rel(types: list[Type], attrs: ArgReduceAttrs) -> Type:
        data = tensor_arg(types, 0, name, "data")
        check_dtype_kind(name, data, "fib")
        if data.ndim == 0:
            raise KilnTypeError(f"{name}: data must have at least one dimension, got a 0-d tensor")
        axes = reduce_axes(data.ndim, attrs.axis, attrs.exclude, name)
        if builtins.any(data.shape[a] == 0 for a in axes):
            raise KilnTypeError(f"{name}: cannot reduce over an empty axis of a tensor of shape {data.shape}")
        return TensorType(_reduced_shape(data.shape, axes, attrs.keepdims), "int32")

    return rel


def _variance_rel(types: list[Type], attrs: VarianceAttrs) -> Type:
    data = tensor_arg(types, 0, "variance", "data")
    mean_t = tensor_arg(types, 1, "variance", "mean")
    check_dtype_kind("variance", data, "f")
    if mean_t.dtype != data.dtype:
        raise KilnTypeError(f"variance: mean has dtype {mean_t.dtype} but data has {data.dtype}")
    if mean_t.ndim != data.ndim or broadcast_shapes(data.shape, mean_t.shape, "variance") != data.shape:
        raise KilnTypeError(f"variance: mean of shape {mean_t.shape} does not broadcast to data of "
                            f"shape {data.shape} with the same rank")
    axes = reduce_axes(data.ndim, attrs.axis, attrs.exclude, "variance")
    return TensorType(_reduced_shape(data.shape, axes, attrs.keepdims), data.dtype)


# --- reference kernels -----------------------------------------------------------------------

def _lowest(dtype: np.dtype) -> Any:
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


def _highest(dtype: np.dtype) -> Any:
    if dtype.kind == "f":
        return np.inf
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max


def _ref_sum(args: list[np.ndarray], attrs: ReduceAttrs, out: Type) -> np.ndarray:
    x = args[0]
    axes = _axes_of(x, attrs, "sum")
    if x.dtype.kind == "f":
        return as_result(out, np.sum(x.astype(np.float64), axis=axes, keepdims=attrs.keepdims))
    return as_result(out, np.sum(x, axis=axes, keepdims=attrs.keepdims, dtype=x.dtype))


def _ref_prod(args: list[np.ndarray], attrs: ReduceAttrs, out: Type) -> np.ndarray:
    x = args[0]
    axes = _axes_of(x, attrs, "prod")
    if x.dtype.kind == "f":
        return as_result(out, np.prod(x.astype(np.float64), axis=axes, keepdims=attrs.keepdims))
    return as_result(out, np.prod(x, axis=axes, keepdims=attrs.keepdims, dtype=x.dtype))


def _ref_mean(args: list[np.ndarray], attrs: ReduceAttrs, out: Type) -> np.ndarray:
    x = args[0]
    axes = _axes_of(x, attrs, "mean")
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if x.dtype.kind == "f":
        total = np.sum(x.astype(np.float64), axis=axes, keepdims=attrs.keepdims)
        return as_result(out, total / count if count else np.full_like(total, np.nan))
    total = np.sum(x, axis=axes, keepdims=attrs.keepdims, dtype=x.dtype).astype(np.int64)
    if count == 0:
        return as_result(out, total)
    quotient = np.abs(total) // count
    return as_result(out, np.where(total < 0, -quotient, quotient))


def _ref_max(args: list[np.ndarray], attrs: ReduceAttrs, out: Type) -> np.ndarray:
    x = args[0]
    axes = _axes_of(x, attrs, "max")
    return as_result(out, np.max(x, axis=axes, keepdims=attrs.keepdims, initial=_lowest(x.dtype)))


def _ref_min(args: list[np.ndarray], attrs: ReduceAttrs, out: Type) -> np.ndarray:
    x = args[0]
    axes = _axes_of(x, attrs, "min")
    return as_result(out, np.min(x, axis=axes, keepdims=attrs.keepdims, initial=_highest(x.dtype)))


def _ref_all(args: list[np.ndarray], attrs: ReduceAttrs, out: Type) -> np.ndarray:
    x = args[0]
    return as_result(out, np.all(x, axis=_axes_of(x, attrs, "all"), keepdims=attrs.keepdims))


def _ref_any(args: list[np.ndarray], attrs: ReduceAttrs, out: Type) -> np.ndarray:
    x = args[0]
    return as_result(out, np.any(x, axis=_axes_of(x, attrs, "any"), keepdims=attrs.keepdims))


def _make_arg_reference(name: str, pick: Any) -> Any:
    def reference(args: list[np.ndarray], attrs: ArgReduceAttrs, out: Type) -> np.ndarray:
        x = args[0]
        axes = _axes_of(x, attrs, name)
        kept = [i for i in range(x.ndim) if i not in axes]
        # Move the reduced axes last and flatten them: the index is into their row-major order.
        moved = np.transpose(x, kept + list(axes))
        flat = moved.reshape((*moved.shape[:len(kept)], -1))
        n = flat.shape[-1]
        if attrs.select_last_index:
            index = n - 1 - pick(flat[..., ::-1], axis=-1)
        else:
            index = pick(flat, axis=-1)
        index = np.asarray(index)
        if attrs.keepdims:
            index = index.reshape(_reduced_shape(x.shape, axes, True))
        return as_result(out, index)

    return reference


def _ref_variance(args: list[np.ndarray], attrs: VarianceAttrs, out: Type) -> np.ndarray:
    x, m = args[0].astype(np.float64), args[1].astype(np.float64)
    axes = _axes_of(x, attrs, "variance")
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64)) - int(attrs.unbiased)
    squares = np.sum((x - m) ** 2, axis=axes, keepdims=attrs.keepdims)
    return as_result(out, squares / count if count > 0 else np.full_like(squares, np.nan))


# --- registration ----------------------------------------------------------------------------

_REDUCE_OPS = {
    "sum": (_ref_sum, "fi", "sum of elements"),
    "mean": (_ref_mean, "fi", "mean of elements"),
    "prod": (_ref_prod, "fi", "product of elements"),
    "max": (_ref_max, "fib", "largest element"),
    "min": (_ref_min, "fib", "smallest element"),
    "all": (_ref_all, "b", "logical and of elements"),
    "any": (_ref_any, "b", "logical or of elements"),
}

for _name, (_ref, _kinds, _doc) in _REDUCE_OPS.items():
    # layout passes remap the axes of the numeric reductions (all/any stay in their layout)
    register_op(_name, num_inputs=1, type_rel=_make_reduce_rel(_name, _kinds), reference=_ref,
                pattern=OpPattern.COMM_REDUCE, attrs_type=ReduceAttrs, doc=_doc,
                layout="reduce" if _kinds != "b" else "")

register_op("argmax", num_inputs=1, type_rel=_make_arg_reduce_rel("argmax"),
            reference=_make_arg_reference("argmax", np.argmax), pattern=OpPattern.COMM_REDUCE,
            attrs_type=ArgReduceAttrs, doc="index of the largest element", layout="reduce")
register_op("argmin", num_inputs=1, type_rel=_make_arg_reduce_rel("argmin"),
            reference=_make_arg_reference("argmin", np.argmin), pattern=OpPattern.COMM_REDUCE,
            attrs_type=ArgReduceAttrs, doc="index of the smallest element", layout="reduce")
register_op("variance", num_inputs=2, type_rel=_variance_rel, reference=_ref_variance,
            pattern=OpPattern.COMM_REDUCE, attrs_type=VarianceAttrs,
            doc="mean squared deviation from a given mean", layout="reduce")


# --- builders --------------------------------------------------------------------------------

def _reduce(name: str, data: Expr, axis: Any, keepdims: bool, exclude: bool) -> Call:
    attrs = ReduceAttrs(axis=optional_axes(axis, name), keepdims=bool(keepdims), exclude=bool(exclude))
    return make_call(name, [data], attrs)


def sum(data: Expr, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Call:
    """Sum of ``data`` over ``axis``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis : None, int or sequence of int
        Axes to reduce; ``None`` reduces all of them.
    keepdims : bool
        Keep the reduced axes as dimensions of size 1.
    exclude : bool
        Reduce over the axes *not* in ``axis``.

    Returns
    -------
    Call
        The reduction.
    """
    return _reduce("sum", data, axis, keepdims, exclude)


def mean(data: Expr, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Call:
    """Mean of ``data`` over ``axis`` (integers: the integer sum divided by the count, truncated).

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis : None, int or sequence of int
        Axes to reduce; ``None`` reduces all of them.
    keepdims : bool
        Keep the reduced axes as dimensions of size 1.
    exclude : bool
        Reduce over the axes *not* in ``axis``.

    Returns
    -------
    Call
        The reduction.
    """
    return _reduce("mean", data, axis, keepdims, exclude)


def prod(data: Expr, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Call:
    """Product of ``data`` over ``axis``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis : None, int or sequence of int
        Axes to reduce; ``None`` reduces all of them.
    keepdims : bool
        Keep the reduced axes as dimensions of size 1.
    exclude : bool
        Reduce over the axes *not* in ``axis``.

    Returns
    -------
    Call
        The reduction.
    """
    return _reduce("prod", data, axis, keepdims, exclude)


def max(data: Expr, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Call:
    """Largest element of ``data`` over ``axis``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis : None, int or sequence of int
        Axes to reduce; ``None`` reduces all of them.
    keepdims : bool
        Keep the reduced axes as dimensions of size 1.
    exclude : bool
        Reduce over the axes *not* in ``axis``.

    Returns
    -------
    Call
        The reduction.
    """
    return _reduce("max", data, axis, keepdims, exclude)


def min(data: Expr, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Call:
    """Smallest element of ``data`` over ``axis``.

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis : None, int or sequence of int
        Axes to reduce; ``None`` reduces all of them.
    keepdims : bool
        Keep the reduced axes as dimensions of size 1.
    exclude : bool
        Reduce over the axes *not* in ``axis``.

    Returns
    -------
    Call
        The reduction.
    """
    return _reduce("min", data, axis, keepdims, exclude)


def all(data: Expr, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Call:
    """Logical and of ``data`` over ``axis``.

    Parameters
    ----------
    data : Expr
        The input tensor (bool).
    axis : None, int or sequence of int
        Axes to reduce; ``None`` reduces all of them.
    keepdims : bool
        Keep the reduced axes as dimensions of size 1.
    exclude : bool
        Reduce over the axes *not* in ``axis``.

    Returns
    -------
    Call
        The reduction.
    """
    return _reduce("all", data, axis, keepdims, exclude)


def any(data: Expr, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Call:
    """Logical or of ``data`` over ``axis``.

    Parameters
    ----------
    data : Expr
        The input tensor (bool).
    axis : None, int or sequence of int
        Axes to reduce; ``None`` reduces all of them.
    keepdims : bool
        Keep the reduced axes as dimensions of size 1.
    exclude : bool
        Reduce over the axes *not* in ``axis``.

    Returns
    -------
    Call
        The reduction.
    """
    return _reduce("any", data, axis, keepdims, exclude)


def _arg_reduce(name: str, data: Expr, axis: Any, keepdims: bool, exclude: bool,
                select_last_index: bool) -> Call:
    attrs = ArgReduceAttrs(axis=optional_axes(axis, name), keepdims=bool(keepdims),
                           select_last_index=bool(select_last_index), exclude=bool(exclude))
    return make_call(name, [data], attrs)


def argmax(data: Expr, axis: Any = None, keepdims: bool = False, exclude: bool = False,
           select_last_index: bool = False) -> Call:
    """Index (int32) of the largest element over ``axis``.

    Parameters
    ----------
    data : Expr
        The input tensor (at least 1-d).
    axis, keepdims, exclude
        As for :func:`sum`.
    select_last_index : bool
        On ties, return the last index instead of the first.

    Returns
    -------
    Call
        The reduction.
    """
    return _arg_reduce("argmax", data, axis, keepdims, exclude, select_last_index)


def argmin(data: Expr, axis: Any = None, keepdims: bool = False, exclude: bool = False,
           select_last_index: bool = False) -> Call:
    """Index (int32) of the smallest element over ``axis``.

    Parameters
    ----------
    data : Expr
        The input tensor (at least 1-d).
    axis, keepdims, exclude
        As for :func:`sum`.
    select_last_index : bool
        On ties, return the last index instead of the first.

    Returns
    -------
    Call
        The reduction.
    """
    return _arg_reduce("argmin", data, axis, keepdims, exclude, select_last_index)


def _variance_call(data: Expr, m: Expr, axis: tuple[int, ...] | None, keepdims: bool, exclude: bool,
                   unbiased: bool) -> Call:
    attrs = VarianceAttrs(axis=axis, keepdims=bool(keepdims), exclude=bool(exclude),
                          unbiased=bool(unbiased))
    return make_call("variance", [data, m], attrs)


def variance(data: Expr, axis: Any = None, keepdims: bool = False, exclude: bool = False,
             unbiased: bool = False, with_mean: Expr | None = None) -> Call:
    """Variance of ``data`` over ``axis`` (float tensors).

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis, keepdims, exclude
        As for :func:`sum`.
    unbiased : bool
        Divide by ``n - 1`` instead of ``n``.
    with_mean : Expr, optional
        A precomputed mean (same rank as ``data``, reduced axes of size 1); by default
        ``mean(data, axis, keepdims=True, exclude)``.

    Returns
    -------
    Call
        The ``variance(data, mean)`` call.
    """
    axes = optional_axes(axis, "variance")
    m = mean(data, axes, True, exclude) if with_mean is None else with_mean
    return _variance_call(data, m, axes, keepdims, exclude, unbiased)


def std(data: Expr, axis: Any = None, keepdims: bool = False, exclude: bool = False,
        unbiased: bool = False) -> Call:
    """Standard deviation of ``data`` over ``axis``: ``sqrt(variance(data, mean(data), ...))``.

    Parameters
    ----------
    data : Expr
        The input tensor (float).
    axis, keepdims, exclude
        As for :func:`sum`.
    unbiased : bool
        Divide by ``n - 1`` instead of ``n``.

    Returns
    -------
    Call
        The ``sqrt`` of the variance.
    """
    axes = optional_axes(axis, "std")
    m = mean(data, axes, True, exclude)
    return _elemwise.sqrt(_variance_call(data, m, axes, keepdims, exclude, unbiased))


def _drop_reduced(m: Expr, data: Expr, axes: tuple[int, ...] | None, exclude: bool) -> Expr:
    # TVM squeezes the keepdims mean over ``axis``; with ``exclude`` those are the kept axes, so
    # the mean is recomputed without keepdims instead.
    if exclude and axes:
        return mean(data, axes, False, True)
    return squeeze(m, list(axes) if axes else None)


def mean_variance(data: Expr, axis: Any = None, keepdims: bool = False, exclude: bool = False,
                  unbiased: bool = False) -> TupleWrapper:
    """``(mean, variance)`` of ``data`` over ``axis`` as a two-field tuple.

    Parameters
    ----------
    data : Expr
        The input tensor.
    axis, keepdims, exclude, unbiased
        As for :func:`variance`.

    Returns
    -------
    TupleWrapper
        ``(mean, variance)``.
    """
    axes = optional_axes(axis, "mean_variance")
    m: Expr = mean(data, axes, True, exclude)
    var = _variance_call(data, m, axes, keepdims, exclude, unbiased)
    if not keepdims:
        m = _drop_reduced(m, data, axes, exclude)
    return TupleWrapper(Tuple([m, var]), 2)


def mean_std(data: Expr, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> TupleWrapper:
    """``(mean, std)`` of ``data`` over ``axis`` as a two-field tuple.

    Parameters
    ----------
    data : Expr
        The input tensor (float).
    axis, keepdims, exclude
        As for :func:`sum`.

    Returns
    -------
    TupleWrapper
        ``(mean, std)`` (biased standard deviation).
    """
    axes = optional_axes(axis, "mean_std")
    m: Expr = mean(data, axes, True, exclude)
    s = _elemwise.sqrt(_variance_call(data, m, axes, keepdims, exclude, False))
    if not keepdims:
        m = _drop_reduced(m, data, axes, exclude)
    return TupleWrapper(Tuple([m, s]), 2)


def logsumexp(data: Expr, axis: Any = None, keepdims: bool = False) -> Expr:
    """``log(sum(exp(data)))`` over ``axis``, computed stably as TVM does.

    Parameters
    ----------
    data : Expr
        A float tensor.
    axis : None, int or sequence of int
        Axes to reduce.
    keepdims : bool
        Keep the reduced axes as size-1 dimensions.

    Returns
    -------
    Expr
        ``log(sum(exp(data - m), axis, keepdims=True)) + m`` with ``m = max(data, axis,
        keepdims=True)``, squeezed over ``axis`` unless ``keepdims``.
    """
    axes = optional_axes(axis, "logsumexp")
    max_x = max(data, axes, True)
    sum_x = sum(_elemwise.exp(_elemwise.subtract(data, max_x)), axes, True)
    out = _elemwise.add(_elemwise.log(sum_x), max_x)
    return out if keepdims else squeeze(out, list(axes) if axes else None)

from kiln.op import compute_reduce  # noqa: E402,F401  (attaches TE computes)
