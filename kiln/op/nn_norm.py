"""Normalisation operators: batch_norm, layer_norm, instance_norm, group_norm, lrn, l2_normalize.

Part of the ``nn`` family (builders are exported by :mod:`kiln.op.nn`). Statistics use the biased
variance, as TVM and ONNX do; kernels compute in float64 and cast back.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr, TupleWrapper
from kiln.ir.types import TensorType, TupleType, Type, is_float
from kiln.op.arg_types import axis_vectors
from kiln.op.nn_common import along_axis, to_out
from kiln.op.registry import OpPattern, make_call, normalize_axis, register_op, tensor_arg

__all__ = ["batch_norm", "group_norm", "instance_norm", "l2_normalize", "layer_norm", "lrn"]


def _float_data(types: list[Type], op: str) -> TensorType:
    data = tensor_arg(types, 0, op, "data")
    if not is_float(data.dtype):
        raise KilnTypeError(f"{op}: data must be a floating-point tensor, got {data.dtype}")
    return data


def _channel_params(types: list[Type], op: str, data: TensorType, axis: int,
                    names: tuple[str, ...]) -> int:
    """Check that arguments 1.. (``names``) are ``(C,)`` tensors of the data's dtype, where ``C``
    is the size of ``axis``; returns the normalised axis."""
    axis = normalize_axis(axis, data.ndim, op)
    want = TensorType((data.shape[axis],), data.dtype)
    for i, name in enumerate(names, start=1):
        got = tensor_arg(types, i, op, name)
        if got != want:
            raise KilnTypeError(f"{op}: {name} must be {want} (axis {axis} of data "
                                f"{data.shape}), got {got}")
    return axis


def _normalize(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def _affine(y: np.ndarray, gamma: np.ndarray, beta: np.ndarray, axis: int, attrs: Any) -> np.ndarray:
    if attrs.scale:
        y = y * along_axis(gamma.astype(np.float64), y.ndim, axis)
    if attrs.center:
        y = y + along_axis(beta.astype(np.float64), y.ndim, axis)
    return y


# --- batch_norm --------------------------------------------------------------------------------

@attrs_class("relay.attrs.BatchNormAttrs")
class BatchNormAttrs(Attrs):
    """Attributes of ``nn.batch_norm``."""

    axis: int = 1
    epsilon: float = 1e-5
    center: bool = True
    scale: bool = True


def _batch_norm_rel(types: list[Type], attrs: BatchNormAttrs) -> Type:
    op = "nn.batch_norm"
    data = _float_data(types, op)
    axis = _channel_params(types, op, data, attrs.axis, ("gamma", "beta", "moving_mean",
                                                          "moving_var"))
    vec = TensorType((data.shape[axis],), data.dtype)
    return TupleType((data, vec, vec))


def _batch_norm_ref(args: list[np.ndarray], attrs: BatchNormAttrs, out_type: Type) -> tuple:
    data, gamma, beta, mean, var = args
    axis = normalize_axis(attrs.axis, data.ndim, "nn.batch_norm")
    x = data.astype(np.float64)
    mean64 = along_axis(mean.astype(np.float64), x.ndim, axis)
    var64 = along_axis(var.astype(np.float64), x.ndim, axis)
    y = (x - mean64) / np.sqrt(var64 + attrs.epsilon)
    assert isinstance(out_type, TupleType)
    return to_out(_affine(y, gamma, beta, axis, attrs), out_type.fields[0]), mean.copy(), var.copy()


register_op("nn.batch_norm", layout="axis", num_inputs=5, type_rel=_batch_norm_rel, reference=_batch_norm_ref,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=BatchNormAttrs,
            doc="inference batch normalisation: (normalised data, moving_mean, moving_var)",
            infer_args=axis_vectors(1, 2, 3, 4))


# --- layer_norm, instance_norm, group_norm -----------------------------------------------------

@attrs_class("relay.attrs.LayerNormAttrs")
class LayerNormAttrs(Attrs):
    """Attributes of ``nn.layer_norm``."""

    axis: int = -1
    epsilon: float = 1e-5
    center: bool = True
    scale: bool = True


@attrs_class("relay.attrs.InstanceNormAttrs")
class InstanceNormAttrs(Attrs):
    """Attributes of ``nn.instance_norm``."""

    axis: int = 1
    epsilon: float = 1e-5
    center: bool = True
    scale: bool = True


@attrs_class("relay.attrs.GroupNormAttrs")
class GroupNormAttrs(Attrs):
    """Attributes of ``nn.group_norm``."""

    num_groups: int = 0
    axis: int = 1
    epsilon: float = 1e-5
    center: bool = True
    scale: bool = True


def _layer_norm_rel(types: list[Type], attrs: LayerNormAttrs) -> Type:
    data = _float_data(types, "nn.layer_norm")
    _channel_params(types, "nn.layer_norm", data, attrs.axis, ("gamma", "beta"))
    return data


def _layer_norm_ref(args: list[np.ndarray], attrs: LayerNormAttrs, out_type: Type) -> np.ndarray:
    data, gamma, beta = args
    axis = normalize_axis(attrs.axis, data.ndim, "nn.layer_norm")
    y = _normalize(data.astype(np.float64), (axis,), attrs.epsilon)
    return to_out(_affine(y, gamma, beta, axis, attrs), out_type)


def _instance_norm_rel(types: list[Type], attrs: InstanceNormAttrs) -> Type:
    data = _float_data(types, "nn.instance_norm")
    if data.ndim < 3:
        raise KilnTypeError(f"nn.instance_norm: data must have at least 3 axes (batch, channel, "
                            f"spatial), got shape {data.shape}")
    _channel_params(types, "nn.instance_norm", data, attrs.axis, ("gamma", "beta"))
    return data


def _instance_norm_ref(args: list[np.ndarray], attrs: InstanceNormAttrs,
                       out_type: Type) -> np.ndarray:
    data, gamma, beta = args
    axis = normalize_axis(attrs.axis, data.ndim, "nn.instance_norm")
    axes = tuple(i for i in range(1, data.ndim) if i != axis)
    y = _normalize(data.astype(np.float64), axes, attrs.epsilon)
    return to_out(_affine(y, gamma, beta, axis, attrs), out_type)


def _group_norm_rel(types: list[Type], attrs: GroupNormAttrs) -> Type:
    op = "nn.group_norm"
    data = _float_data(types, op)
    axis = _channel_params(types, op, data, attrs.axis, ("gamma", "beta"))
    if axis == 0:
        raise KilnTypeError(f"{op}: the channel axis cannot be the batch axis 0 (data {data.shape})")
    groups = int(attrs.num_groups)
    if groups < 1 or data.shape[axis] % groups:
        raise KilnTypeError(f"{op}: num_groups={groups} must be positive and divide the "
                            f"{data.shape[axis]} channels of data {data.shape}")
    return data


def _group_norm_ref(args: list[np.ndarray], attrs: GroupNormAttrs, out_type: Type) -> np.ndarray:
    data, gamma, beta = args
    axis = normalize_axis(attrs.axis, data.ndim, "nn.group_norm")
    x = np.moveaxis(data.astype(np.float64), axis, 1)
    grouped = x.reshape(x.shape[0], attrs.num_groups, -1)
    y = _normalize(grouped, (2,), attrs.epsilon).reshape(x.shape)
    return to_out(_affine(np.moveaxis(y, 1, axis), gamma, beta, axis, attrs), out_type)


register_op("nn.layer_norm", layout="axis", num_inputs=3, type_rel=_layer_norm_rel, reference=_layer_norm_ref,
            pattern=OpPattern.OPAQUE, attrs_type=LayerNormAttrs,
            doc="normalise along one axis, then scale and shift", infer_args=axis_vectors(1, 2))
register_op("nn.instance_norm", num_inputs=3, type_rel=_instance_norm_rel,
            reference=_instance_norm_ref, pattern=OpPattern.OPAQUE, attrs_type=InstanceNormAttrs,
            doc="normalise each (batch, channel) over the other axes, then scale and shift",
            infer_args=axis_vectors(1, 2), layout="axis")
register_op("nn.group_norm", num_inputs=3, type_rel=_group_norm_rel, reference=_group_norm_ref,
            pattern=OpPattern.OPAQUE, attrs_type=GroupNormAttrs,
            doc="normalise each channel group over its channels and the spatial axes",
            infer_args=axis_vectors(1, 2))


# --- lrn, l2_normalize -------------------------------------------------------------------------

@attrs_class("relay.attrs.LRNAttrs")
class LRNAttrs(Attrs):
    """Attributes of ``nn.lrn``."""

    size: int = 5
    axis: int = 1
    bias: float = 2.0
    alpha: float = 0.0001
    beta: float = 0.75


@attrs_class("relay.attrs.L2NormalizeAttrs")
class L2NormalizeAttrs(Attrs):
    """Attributes of ``nn.l2_normalize`` (no defaults: both always print)."""

    eps: float
    axis: tuple[int, ...]


def _lrn_rel(types: list[Type], attrs: LRNAttrs) -> Type:
    data = _float_data(types, "nn.lrn")
    normalize_axis(attrs.axis, data.ndim, "nn.lrn")
    if attrs.size < 1:
        raise KilnTypeError(f"nn.lrn: size must be positive, got {attrs.size}")
    return data


def _lrn_ref(args: list[np.ndarray], attrs: LRNAttrs, out_type: Type) -> np.ndarray:
    x = args[0].astype(np.float64)
    axis = normalize_axis(attrs.axis, x.ndim, "nn.lrn")
    before, after = (attrs.size - 1) // 2, attrs.size // 2
    sq = np.moveaxis(x * x, axis, 0)
    padded = np.pad(sq, [(before, after)] + [(0, 0)] * (x.ndim - 1))
    # size >= 1 (checked by the type relation): the sum is an array, never the int start value
    window = cast(np.ndarray, sum(padded[i:i + sq.shape[0]] for i in range(attrs.size)))
    denom = (attrs.bias + attrs.alpha * np.moveaxis(window, 0, axis) / attrs.size) ** attrs.beta
    return to_out(x / denom, out_type)


def _l2_rel(types: list[Type], attrs: L2NormalizeAttrs) -> Type:
    data = _float_data(types, "nn.l2_normalize")
    for a in attrs.axis:
        normalize_axis(a, data.ndim, "nn.l2_normalize")
    return data


def _l2_ref(args: list[np.ndarray], attrs: L2NormalizeAttrs, out_type: Type) -> np.ndarray:
    x = args[0].astype(np.float64)
    axes = tuple(normalize_axis(a, x.ndim, "nn.l2_normalize") for a in attrs.axis)
    axes = axes or tuple(range(x.ndim))  # no axes: the whole tensor, as TVM's reductions
    norm = np.sqrt(np.maximum((x * x).sum(axis=axes, keepdims=True), attrs.eps))
    return to_out(x / norm, out_type)


register_op("nn.lrn", num_inputs=1, type_rel=_lrn_rel, reference=_lrn_ref,
            pattern=OpPattern.OPAQUE, attrs_type=LRNAttrs,
            doc="local response normalisation across a window of channels")
register_op("nn.l2_normalize", num_inputs=1, type_rel=_l2_rel, reference=_l2_ref,
            pattern=OpPattern.OPAQUE, attrs_type=L2NormalizeAttrs,
            doc="x / sqrt(max(sum(x^2 over axes), eps))", layout="axes")


# --- builders ----------------------------------------------------------------------------------

def batch_norm(data: Expr, gamma: Expr, beta: Expr, moving_mean: Expr, moving_var: Expr,
               axis: int = 1, epsilon: float = 1e-5, center: bool = True,
               scale: bool = True) -> TupleWrapper:
    """Inference batch normalisation (``relay.nn.batch_norm``).

    ``out = (data - moving_mean) / sqrt(moving_var + epsilon) * gamma + beta`` along ``axis``.

    Parameters
    ----------
    data : Expr
        Input.
    gamma, beta, moving_mean, moving_var : Expr
        ``(data.shape[axis],)`` parameters.
    axis : int
        The channel axis.
    epsilon : float
        Added to the variance.
    center, scale : bool
        Whether to add ``beta`` / multiply by ``gamma``.

    Returns
    -------
    TupleWrapper
        ``(out, moving_mean, moving_var)``; ``[0]`` is the normalised data.
    """
    attrs = BatchNormAttrs(int(axis), float(epsilon), bool(center), bool(scale))
    call = make_call("nn.batch_norm", [data, gamma, beta, moving_mean, moving_var], attrs)
    return TupleWrapper(call, 3)


def layer_norm(data: Expr, gamma: Expr, beta: Expr, axis: int = -1, epsilon: float = 1e-5,
               center: bool = True, scale: bool = True) -> Call:
    """Layer normalisation along one axis (``relay.nn.layer_norm``).

    Parameters
    ----------
    data : Expr
        Input.
    gamma, beta : Expr
        ``(data.shape[axis],)`` scale and shift.
    axis : int
        The normalised axis.
    epsilon : float
        Added to the variance.
    center, scale : bool
        Whether to add ``beta`` / multiply by ``gamma``.

    Returns
    -------
    Call
        The normalised tensor.
    """
    return make_call("nn.layer_norm", [data, gamma, beta],
                     LayerNormAttrs(int(axis), float(epsilon), bool(center), bool(scale)))


def instance_norm(data: Expr, gamma: Expr, beta: Expr, axis: int = 1, epsilon: float = 1e-5,
                  center: bool = True, scale: bool = True) -> Call:
    """Instance normalisation (``relay.nn.instance_norm``): each sample and channel is normalised
    over the remaining axes.

    Parameters
    ----------
    data : Expr
        ``(N, C, ...)`` input (channel axis ``axis``).
    gamma, beta : Expr
        ``(C,)`` scale and shift.
    axis : int
        The channel axis.
    epsilon : float
        Added to the variance.
    center, scale : bool
        Whether to add ``beta`` / multiply by ``gamma``.

    Returns
    -------
    Call
        The normalised tensor.
    """
    return make_call("nn.instance_norm", [data, gamma, beta],
                     InstanceNormAttrs(int(axis), float(epsilon), bool(center), bool(scale)))


def group_norm(data: Expr, gamma: Expr, beta: Expr, num_groups: int, axis: int = 1,
               epsilon: float = 1e-5, center: bool = True, scale: bool = True) -> Call:
    """Group normalisation (``relay.nn.group_norm``): channels split into ``num_groups`` groups,
    each normalised per sample over its channels and the spatial axes.

    Parameters
    ----------
    data : Expr
        ``(N, C, ...)`` input (channel axis ``axis``).
    gamma, beta : Expr
        ``(C,)`` per-channel scale and shift.
    num_groups : int
        Number of groups; divides ``C``.
    axis : int
        The channel axis.
    epsilon : float
        Added to the variance.
    center, scale : bool
        Whether to add ``beta`` / multiply by ``gamma``.

    Returns
    -------
    Call
        The normalised tensor.
    """
    return make_call("nn.group_norm", [data, gamma, beta],
                     GroupNormAttrs(int(num_groups), int(axis), float(epsilon), bool(center),
                                    bool(scale)))


def lrn(data: Expr, size: int = 5, axis: int = 1, bias: float = 2, alpha: float = 0.00001,
        beta: float = 0.75) -> Call:
    """Local response normalisation across channels (``relay.nn.lrn``).

    ``out = data / (bias + alpha / size * sum(data^2 over the window)) ** beta``; the window spans
    ``(size - 1) // 2`` channels before and ``size // 2`` after (ONNX ``LRN``).

    Parameters
    ----------
    data : Expr
        Floating-point input.
    size : int
        Window length.
    axis : int
        The channel axis.
    bias, alpha, beta : float
        Formula constants (TVM's builder defaults).

    Returns
    -------
    Call
        The normalised tensor.
    """
    return make_call("nn.lrn", [data],
                     LRNAttrs(int(size), int(axis), float(bias), float(alpha), float(beta)))


def l2_normalize(data: Expr, eps: float, axis: Any = None) -> Call:
    """``data / sqrt(max(sum(data^2 over axis), eps))`` (``relay.nn.l2_normalize``).

    Parameters
    ----------
    data : Expr
        Floating-point input.
    eps : float
        Lower bound of the squared norm.
    axis : int or sequence of int, optional
        The reduced axes (default: every axis).

    Returns
    -------
    Call
        The normalised tensor.
    """
    if axis is None:
        axes: tuple[int, ...] = ()
    elif isinstance(axis, int):
        axes = (axis,)
    else:
        axes = tuple(int(a) for a in axis)
    return make_call("nn.l2_normalize", [data], L2NormalizeAttrs(float(eps), axes))
