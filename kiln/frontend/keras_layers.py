"""Keras 3 layer converters: one function per layer class, in the table :data:`LAYERS`.

A converted Keras tensor is a :class:`KVal`: a relay expression and a layout flag. With
``layout="NCHW"`` spatial layers (convolutions, pooling, padding, ...) work channels-first (the
Keras tensor with its last axis moved to axis 1, ``cf``); shape-sensitive layers (Flatten, Reshape,
Dense on sequences, recurrent layers, attention, ...) work on the Keras (channels-last) layout, and
:class:`Ctx` transposes between the two only where a layer needs it. Elementwise layers keep
whatever layout their input has, mapping their axes and weights to it.

Recurrent layers are unrolled over the static sequence length (one ``nn.dense`` projecting the
whole sequence, then per step a ``nn.dense`` with the recurrent kernel and the gate updates); the
attention layer is dense projections plus two ``nn.batch_matmul`` per call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import kiln.op as K
from kiln.errors import FrontendError
from kiln.frontend.common import ImportState
from kiln.ir.expr import Constant, Expr

__all__ = ["LAYERS", "Ctx", "KVal", "check_layer"]


class KVal:
    """A converted Keras tensor: ``expr`` holds it channels-first when ``cf`` (rank >= 3)."""

    __slots__ = ("cf", "expr")

    def __init__(self, expr: Expr, cf: bool = False):
        self.expr = expr
        self.cf = cf


def _np(value: Any) -> np.ndarray:
    """A Keras variable (or anything array-like) as a NumPy array."""
    if hasattr(value, "numpy"):
        return np.asarray(value.numpy())
    return np.asarray(value)


def _to_cf_axes(rank: int) -> list[int]:
    return [0, rank - 1, *range(1, rank - 1)]


def _to_cl_axes(rank: int) -> list[int]:
    return [0, *range(2, rank), 1]


class Ctx:
    """What converters share: the import state, the layout policy and the weight cache.

    Parameters
    ----------
    state : ImportState
        The import (constants, typing, provenance).
    nchw : bool
        True for ``layout="NCHW"``: spatial layers work channels-first.
    """

    def __init__(self, state: ImportState, nchw: bool):
        self.state = state
        self.nchw = nchw
        self.layer_name = ""
        self._weights: dict[tuple[int, str], Expr] = {}

    # --- errors, weights, shapes ----------------------------------------------------------------
    def error(self, layer: Any, message: str) -> FrontendError:
        """A :class:`FrontendError` naming ``layer``."""
        return FrontendError(f"Keras layer {layer.name!r} ({type(layer).__name__}): {message}")

    def weight(self, layer: Any, tag: str, make: Callable[[], np.ndarray]) -> Expr:
        """The weight ``tag`` of ``layer`` (``make()`` computes it once; shared layers reuse it)."""
        key = (id(layer), tag)
        if key not in self._weights:
            self._weights[key] = self.state.constant(f"{layer.name}.{tag}", make())
        return self._weights[key]

    def shape(self, expr: Expr) -> tuple[int, ...]:
        """The static shape of ``expr``."""
        return self.state.shape_of(expr)

    def dtype(self, expr: Expr) -> str:
        """The dtype of ``expr``."""
        return self.state.dtype_of(expr)

    def scalar(self, value: float, like: Expr) -> Constant:
        """A 0-d constant with the dtype of ``like``."""
        return Constant(np.asarray(value, dtype=self.dtype(like)))

    # --- layouts -------------------------------------------------------------------------------
    def cl(self, v: KVal) -> Expr:
        """``v`` in the Keras (channels-last) layout."""
        if not v.cf:
            return v.expr
        return K.transpose(v.expr, _to_cl_axes(len(self.shape(v.expr))))

    def cf(self, v: KVal) -> Expr:
        """``v`` channels-first."""
        if v.cf:
            return v.expr
        return K.transpose(v.expr, _to_cf_axes(len(self.shape(v.expr))))

    def spatial(self, v: KVal) -> tuple[Expr, bool]:
        """``v`` in the layout spatial layers use (channels-first for ``NCHW``) and that flag."""
        return (self.cf(v), True) if self.nchw else (self.cl(v), False)

    def axis(self, v: KVal, axis: int) -> int:
        """The axis of ``v.expr`` holding Keras axis ``axis``."""
        rank = len(self.shape(v.expr))
        axis = axis + rank if axis < 0 else axis
        if not 0 <= axis < rank:
            raise FrontendError(f"axis {axis} out of range for rank {rank} in {self.layer_name!r}")
        if not v.cf or axis == 0:
            return axis
        return 1 if axis == rank - 1 else axis + 1

    def keras_shape(self, v: KVal) -> tuple[int, ...]:
        """The shape of ``v`` in the Keras layout."""
        s = self.shape(v.expr)
        return (s[0], *s[2:], s[1]) if v.cf else s

    def broadcast_const(self, v: KVal, arr: np.ndarray) -> np.ndarray:
        """A constant shaped for Keras broadcasting against ``v``, moved to ``v``'s layout."""
        rank = len(self.shape(v.expr))
        arr = np.asarray(arr)
        if v.cf and arr.ndim == rank:
            return arr.transpose(_to_cf_axes(rank))
        if v.cf and arr.ndim >= 1:
            full = arr.reshape((1,) * (rank - arr.ndim) + arr.shape)
            return full.transpose(_to_cf_axes(rank))
        return arr

    def same_layout(self, vals: Sequence[KVal]) -> tuple[list[Expr], bool]:
        """The exprs of ``vals`` in one layout (the first one's, when all ranks agree)."""
        ranks = {len(self.shape(v.expr)) for v in vals}
        cf = vals[0].cf and len(ranks) == 1
        return [self.cf(v) if cf else self.cl(v) for v in vals], cf


Converter = Callable[[Ctx, Any, list[KVal], dict[str, Any]], list[KVal]]
Check = Callable[[Any], str | None]


# --- activations ------------------------------------------------------------------------------

def _elu(ctx: Ctx, x: Expr, alpha: float) -> Expr:
    neg = K.multiply(ctx.scalar(alpha, x), K.subtract(K.exp(K.minimum(x, ctx.scalar(0, x))),
                                                      ctx.scalar(1, x)))
    return K.where(K.greater(x, ctx.scalar(0, x)), x, neg)


def _gelu(ctx: Ctx, x: Expr, approximate: bool) -> Expr:
    s = ctx.scalar
    if approximate:
        inner = K.multiply(s(math.sqrt(2 / math.pi), x),
                           K.add(x, K.multiply(s(0.044715, x), K.multiply(x, K.multiply(x, x)))))
        return K.multiply(K.multiply(s(0.5, x), x), K.add(s(1, x), K.tanh(inner)))
    return K.multiply(K.multiply(s(0.5, x), x),
                      K.add(s(1, x), K.erf(K.multiply(x, s(1 / math.sqrt(2), x)))))


def _softmax(x: Expr, axes: Sequence[int]) -> Expr:
    if len(axes) == 1:
        return K.nn.softmax(x, axis=axes[0])
    shifted = K.subtract(x, K.max(x, axis=list(axes), keepdims=True))
    e = K.exp(shifted)
    return K.divide(e, K.sum(e, axis=list(axes), keepdims=True))


def _hard_sigmoid(ctx: Ctx, x: Expr) -> Expr:
    return K.divide(K.clip(K.add(x, ctx.scalar(3, x)), 0.0, 6.0), ctx.scalar(6, x))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946

_ACTIVATIONS: dict[str, Callable[[Ctx, Expr], Expr]] = {
    "linear": lambda ctx, x: x,
    "relu": lambda ctx, x: K.nn.relu(x),
    "relu6": lambda ctx, x: K.clip(x, 0.0, 6.0),
    "sigmoid": lambda ctx, x: K.sigmoid(x),
    "hard_sigmoid": _hard_sigmoid,
    "hard_silu": lambda ctx, x: K.multiply(x, _hard_sigmoid(ctx, x)),
    "silu": lambda ctx, x: K.multiply(x, K.sigmoid(x)),
    "gelu": lambda ctx, x: _gelu(ctx, x, False),
    "tanh": lambda ctx, x: K.tanh(x),
    "elu": lambda ctx, x: _elu(ctx, x, 1.0),
    "selu": lambda ctx, x: K.multiply(ctx.scalar(_SELU_SCALE, x), _elu(ctx, x, _SELU_ALPHA)),
    "softplus": lambda ctx, x: K.add(K.nn.relu(x), K.log(K.add(ctx.scalar(1, x),
                                                             K.exp(K.negative(K.abs(x)))))),
    "softsign": lambda ctx, x: K.divide(x, K.add(ctx.scalar(1, x), K.abs(x))),
    "leaky_relu": lambda ctx, x: K.nn.leaky_relu(x, alpha=0.2),
    "exponential": lambda ctx, x: K.exp(x),
    "mish": lambda ctx, x: K.multiply(x, K.tanh(_ACTIVATIONS["softplus"](ctx, x))),
    "log_sigmoid": lambda ctx, x: K.negative(_ACTIVATIONS["softplus"](ctx, K.negative(x))),
    "hard_tanh": lambda ctx, x: K.clip(x, -1.0, 1.0),
    "tanh_shrink": lambda ctx, x: K.subtract(x, K.tanh(x)),
}
_AXIS_ACTIVATIONS = {"softmax", "log_softmax"}


def activation_name(fn: Any) -> str:
    """The Keras name of an activation function (``swish`` is ``silu``, ...)."""
    if isinstance(fn, str):
        import keras

        fn = keras.activations.get(fn)
    return str(getattr(fn, "__name__", type(fn).__name__))


def _check_activation(fn: Any) -> str | None:
    name = activation_name(fn)
    if name in _ACTIVATIONS or name in _AXIS_ACTIVATIONS:
        return None
    return f"activation {name!r}"


def apply_activation(ctx: Ctx, fn: Any, v: KVal) -> KVal:
    """``v`` through the Keras activation ``fn`` (softmax over the Keras last axis)."""
    name = activation_name(fn)
    if name in _AXIS_ACTIVATIONS:
        axis = ctx.axis(v, -1)
        out = (K.nn.softmax(v.expr, axis=axis) if name == "softmax"
               else K.nn.log_softmax(v.expr, axis=axis))
        return KVal(out, v.cf)
    return KVal(_ACTIVATIONS[name](ctx, v.expr), v.cf)


def _activation(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    return [apply_activation(ctx, layer.activation, ins[0])]


def _relu(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x = ins[0].expr
    slope, threshold = float(layer.negative_slope), float(layer.threshold)
    max_value = None if layer.max_value is None else float(layer.max_value)
    if slope == 0.0 and threshold == 0.0:
        out = K.nn.relu(x) if max_value is None else K.clip(x, 0.0, max_value)
        return [KVal(out, ins[0].cf)]
    # f(x) = x (threshold <= x < max_value), slope * (x - threshold) below the threshold.
    t = ctx.scalar(threshold, x)
    below = K.multiply(ctx.scalar(slope, x), K.subtract(x, t))
    out = K.where(K.greater_equal(x, t), x, below)
    if max_value is not None:
        out = K.minimum(out, ctx.scalar(max_value, x))
    return [KVal(out, ins[0].cf)]


def _leaky_relu(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    return [KVal(K.nn.leaky_relu(ins[0].expr, alpha=float(layer.negative_slope)), ins[0].cf)]


def _elu_layer(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    return [KVal(_elu(ctx, ins[0].expr, float(layer.alpha)), ins[0].cf)]


def _prelu(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    v = ins[0]
    alpha = ctx.weight(layer, f"alpha.{int(v.cf)}", lambda: ctx.broadcast_const(v, _np(layer.alpha)))
    x = v.expr
    return [KVal(K.add(K.nn.relu(x), K.multiply(alpha, K.minimum(x, ctx.scalar(0, x)))), v.cf)]


def _softmax_layer(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    v = ins[0]
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    x = v.expr
    if kw.get("mask") is not None:
        m = kw["mask"]
        mask = K.cast(K.cast(ctx.cf(m) if v.cf else ctx.cl(m), "bool"), ctx.dtype(x))
        x = K.add(x, K.multiply(K.subtract(ctx.scalar(1, x), mask), ctx.scalar(-1e9, x)))
    return [KVal(_softmax(x, [ctx.axis(v, int(a)) for a in axes]), v.cf)]


def _identity(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    return [ins[0]]


# --- dense, embedding, normalisation ----------------------------------------------------------

def _last_axis_dense(ctx: Ctx, x: Expr, w_t: Expr, bias: Expr | None) -> Expr:
    """``x @ w_t.T + bias`` over the last axis of ``x`` (any rank)."""
    shape = ctx.shape(x)
    units = ctx.shape(w_t)[0]
    flat = x if len(shape) == 2 else K.reshape(x, (-1, shape[-1]))
    out = K.nn.dense(flat, w_t, units=units)
    if bias is not None:
        out = K.nn.bias_add(out, bias, axis=1)
    return out if len(shape) == 2 else K.reshape(out, (*shape[:-1], units))


def _dense(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x = ctx.cl(ins[0])
    w = ctx.weight(layer, "kernel", lambda: _np(layer.kernel).T)
    b = ctx.weight(layer, "bias", lambda: _np(layer.bias)) if layer.use_bias else None
    return [apply_activation(ctx, layer.activation, KVal(_last_axis_dense(ctx, x, w, b)))]


def _check_dense(layer: Any) -> str | None:
    if getattr(layer, "quantization_mode", None):
        return f"quantization_mode={layer.quantization_mode!r}"
    return _check_activation(layer.activation)


def _embedding(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    idx = ctx.cl(ins[0])
    if ctx.dtype(idx) not in ("int32", "int64"):
        idx = K.cast(idx, "int32")
    table = ctx.weight(layer, "embeddings", lambda: _np(layer.embeddings))
    return [KVal(K.take(table, idx, axis=0))]


def _batch_norm(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    v = ins[0]
    axis = ctx.axis(v, int(layer.axis))
    n = ctx.shape(v.expr)[axis]

    def get(attr: str, default: float) -> Expr:
        var = getattr(layer, attr, None)
        return ctx.weight(layer, attr, lambda: _np(var) if var is not None
                          else np.full(n, default, np.float32))

    out = K.nn.batch_norm(v.expr, get("gamma", 1.0), get("beta", 0.0), get("moving_mean", 0.0),
                          get("moving_variance", 1.0), axis=axis, epsilon=float(layer.epsilon),
                          center=bool(layer.center), scale=bool(layer.scale))[0]
    return [KVal(out, v.cf)]


def _check_batch_norm(layer: Any) -> str | None:
    if isinstance(layer.axis, (list, tuple)):
        return f"axis={list(layer.axis)}"
    if getattr(layer, "renorm", False):
        return "renorm=True"
    return None


def _layer_norm(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    v = ins[0]
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    eps = float(layer.epsilon)
    rms = bool(getattr(layer, "rms_scaling", False))
    if len(axes) == 1 and not rms:
        axis = ctx.axis(v, int(axes[0]))
        n = ctx.shape(v.expr)[axis]
        gamma = ctx.weight(layer, "gamma", lambda: _np(layer.gamma) if layer.scale
                           else np.ones(n, np.float32))
        beta = ctx.weight(layer, "beta", lambda: _np(layer.beta) if layer.center
                          else np.zeros(n, np.float32))
        return [KVal(K.nn.layer_norm(v.expr, gamma, beta, axis=axis, epsilon=eps,
                                     center=bool(layer.center), scale=bool(layer.scale)), v.cf)]
    x = ctx.cl(v)
    rank = len(ctx.shape(x))
    axes = sorted(int(a) % rank for a in axes)
    if rms:
        # Keras' (deprecated) rms_scaling divides by the standard deviation, not the RMS.
        inv = K.rsqrt(K.add(K.variance(x, axis=axes, keepdims=True), ctx.scalar(eps, x)))
        out = K.multiply(x, inv)
    else:
        mean = K.mean(x, axis=axes, keepdims=True)
        var = K.variance(x, axis=axes, keepdims=True)
        out = K.multiply(K.subtract(x, mean), K.rsqrt(K.add(var, ctx.scalar(eps, x))))
    shape = [ctx.shape(x)[a] if a in axes else 1 for a in range(rank)]
    if layer.scale:
        out = K.multiply(out, ctx.weight(layer, "gamma.b", lambda: _np(layer.gamma).reshape(shape)))
    if layer.center and not rms:
        out = K.add(out, ctx.weight(layer, "beta.b", lambda: _np(layer.beta).reshape(shape)))
    return [KVal(out)]


def _rms_norm(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x = ctx.cl(ins[0])
    rank = len(ctx.shape(x))
    axes = sorted(int(a) % rank for a in (layer.axis if isinstance(layer.axis, (list, tuple))
                                         else [layer.axis]))
    eps = float(layer.epsilon if layer.epsilon is not None else 1e-7)
    out = K.multiply(x, K.rsqrt(K.add(K.mean(K.multiply(x, x), axis=axes, keepdims=True),
                                      ctx.scalar(eps, x))))
    shape = [ctx.shape(x)[a] if a in axes else 1 for a in range(rank)]
    return [KVal(K.multiply(out, ctx.weight(layer, "scale", lambda: _np(layer.scale).reshape(shape))))]


def _unit_norm(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    v = ins[0]
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    x = v.expr
    # Keras: x * rsqrt(max(sum(x^2), eps^2)) with eps 1e-12.
    sq = K.sum(K.multiply(x, x), axis=[ctx.axis(v, int(a)) for a in axes], keepdims=True)
    return [KVal(K.multiply(x, K.rsqrt(K.maximum(sq, ctx.scalar(1e-24, x)))), v.cf)]


def _group_norm(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    v = ins[0]
    x = ctx.cf(v) if len(ctx.shape(v.expr)) > 2 else v.expr
    n = ctx.shape(x)[1]
    gamma = ctx.weight(layer, "gamma", lambda: _np(layer.gamma) if layer.scale else np.ones(n, np.float32))
    beta = ctx.weight(layer, "beta", lambda: _np(layer.beta) if layer.center else np.zeros(n, np.float32))
    out = K.nn.group_norm(x, gamma, beta, num_groups=int(layer.groups), axis=1,
                          epsilon=float(layer.epsilon), center=bool(layer.center), scale=bool(layer.scale))
    return [KVal(out, len(ctx.shape(x)) > 2)]


def _check_group_norm(layer: Any) -> str | None:
    return None if int(layer.axis) == -1 else f"axis={layer.axis}"


def _rescaling(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    v = ins[0]
    x = v.expr
    if ctx.dtype(x) not in ("float32", "float64", "float16"):
        x = K.cast(x, "float32")
    dt = ctx.dtype(x)
    scale = ctx.weight(layer, f"scale.{int(v.cf)}",
                       lambda: ctx.broadcast_const(v, np.asarray(layer.scale, dtype=dt)))
    offset = ctx.weight(layer, f"offset.{int(v.cf)}",
                        lambda: ctx.broadcast_const(v, np.asarray(layer.offset, dtype=dt)))
    return [KVal(K.add(K.multiply(x, scale), offset), v.cf)]


def _normalization(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    v = ins[0]
    x = v.expr
    mean = _np(layer.mean).astype(np.float32)
    std = np.maximum(np.sqrt(_np(layer.variance).astype(np.float32)), np.float32(1e-7))
    m = ctx.weight(layer, f"mean.{int(v.cf)}", lambda: ctx.broadcast_const(v, mean))
    s = ctx.weight(layer, f"std.{int(v.cf)}", lambda: ctx.broadcast_const(v, std))
    if ctx.dtype(x) != "float32":
        x = K.cast(x, "float32")
    out = K.add(m, K.multiply(x, s)) if layer.invert else K.divide(K.subtract(x, m), s)
    return [KVal(out, v.cf)]


# --- convolution and pooling --------------------------------------------------------------------

def _tuple(value: Any, n: int) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * n
    return tuple(int(x) for x in value)


def _same_pads(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TensorFlow's ``SAME`` padding of one axis: ``(before, after)``."""
    eff = (kernel - 1) * dilation + 1
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + eff - size, 0)
    return total // 2, total - total // 2


def _layouts(nsp: int, cf: bool) -> tuple[str, str]:
    sp = "DHW"[3 - nsp:]
    return ("NC" + sp, "OI" + sp) if cf else ("N" + sp + "C", sp + "IO")


def _conv_padding(ctx: Ctx, layer: Any, x: Expr, cf: bool, kernel: Sequence[int],
                  strides: Sequence[int], dilation: Sequence[int]) -> tuple[Expr, list[int]]:
    """The data (left-padded for ``causal``) and the ``(befores..., afters...)`` padding."""
    nsp = len(kernel)
    shape = ctx.shape(x)
    sizes = shape[2:] if cf else shape[1:-1]
    mode = layer.padding
    if mode == "valid":
        return x, [0] * (2 * nsp)
    if mode == "causal":
        left = (kernel[0] - 1) * dilation[0]
        pads = [(0, 0), (0, 0), (left, 0)] if cf else [(0, 0), (left, 0), (0, 0)]
        return K.nn.pad(x, pads), [0, 0]
    pairs = [_same_pads(sizes[i], kernel[i], strides[i], dilation[i]) for i in range(nsp)]
    return x, [p[0] for p in pairs] + [p[1] for p in pairs]


def _conv_nd(ctx: Ctx, layer: Any, x: Expr, cf: bool, w: Expr, kernel: Sequence[int], groups: int,
             channels: int) -> Expr:
    nsp = len(kernel)
    strides = _tuple(layer.strides, nsp)
    dilation = _tuple(layer.dilation_rate, nsp)
    x, pads = _conv_padding(ctx, layer, x, cf, kernel, strides, dilation)
    data_layout, kernel_layout = _layouts(nsp, cf)
    fn = {1: K.conv.conv1d, 2: K.conv.conv2d, 3: K.conv.conv3d}[nsp]
    return fn(x, w, strides=strides, padding=pads, dilation=dilation, groups=groups,
              channels=channels, kernel_size=tuple(kernel), data_layout=data_layout,
              kernel_layout=kernel_layout)


def _kernel(layer: Any, attr: str, cf: bool) -> Callable[[], np.ndarray]:
    """A Keras ``(spatial..., I, O)`` kernel in OI+spatial (``cf``) or spatial+IO order."""
    def make() -> np.ndarray:
        k = _np(getattr(layer, attr))
        return k.transpose([k.ndim - 1, k.ndim - 2, *range(k.ndim - 2)]) if cf else k
    return make


def _finish_conv(ctx: Ctx, layer: Any, out: Expr, cf: bool) -> list[KVal]:
    if layer.use_bias:
        b = ctx.weight(layer, "bias", lambda: _np(layer.bias))
        out = K.nn.bias_add(out, b, axis=1 if cf else -1)
    return [apply_activation(ctx, layer.activation, KVal(out, cf))]


def _conv(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x, cf = ctx.spatial(ins[0])
    k = _np(layer.kernel)
    nsp = k.ndim - 2
    w = ctx.weight(layer, f"kernel.{int(cf)}", _kernel(layer, "kernel", cf))
    out = _conv_nd(ctx, layer, x, cf, w, k.shape[:nsp], int(getattr(layer, "groups", 1)), k.shape[-1])
    return _finish_conv(ctx, layer, out, cf)


def _depthwise_weight(k: np.ndarray, cf: bool) -> np.ndarray:
    """A ``(spatial..., C, M)`` depthwise kernel as a grouped-conv kernel with ``C*M`` outputs."""
    nsp = k.ndim - 2
    k = k.reshape(*k.shape[:nsp], 1, k.shape[-2] * k.shape[-1])
    return k.transpose([k.ndim - 1, k.ndim - 2, *range(nsp)]) if cf else k


def _depthwise(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x, cf = ctx.spatial(ins[0])
    k = _np(layer.kernel)
    nsp = k.ndim - 2
    w = ctx.weight(layer, f"kernel.{int(cf)}", lambda: _depthwise_weight(k, cf))
    out = _conv_nd(ctx, layer, x, cf, w, k.shape[:nsp], k.shape[-2], k.shape[-2] * k.shape[-1])
    return _finish_conv(ctx, layer, out, cf)


def _separable(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x, cf = ctx.spatial(ins[0])
    k = _np(layer.depthwise_kernel)
    nsp = k.ndim - 2
    dw = ctx.weight(layer, f"depthwise_kernel.{int(cf)}", lambda: _depthwise_weight(k, cf))
    out = _conv_nd(ctx, layer, x, cf, dw, k.shape[:nsp], k.shape[-2], k.shape[-2] * k.shape[-1])
    pk = _np(layer.pointwise_kernel)
    pw = ctx.weight(layer, f"pointwise_kernel.{int(cf)}", _kernel(layer, "pointwise_kernel", cf))
    data_layout, kernel_layout = _layouts(nsp, cf)
    fn = {1: K.conv.conv1d, 2: K.conv.conv2d}[nsp]
    out = fn(out, pw, channels=pk.shape[-1], kernel_size=(1,) * nsp, data_layout=data_layout,
             kernel_layout=kernel_layout)
    return _finish_conv(ctx, layer, out, cf)


def _conv_transpose(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x, cf = ctx.spatial(ins[0])
    k = _np(layer.kernel)  # (spatial..., out, in)
    nsp = k.ndim - 2
    kernel = k.shape[:nsp]
    strides = _tuple(layer.strides, nsp)
    dilation = _tuple(layer.dilation_rate, nsp)
    shape = ctx.shape(x)
    sizes = shape[2:] if cf else shape[1:-1]
    out_shape = layer.compute_output_shape((1, *sizes, k.shape[-1]))
    befores, afters, extra = [], [], []
    for i in range(nsp):
        eff = (kernel[i] - 1) * dilation[i] + 1
        total = (sizes[i] - 1) * strides[i] + eff - int(out_shape[1 + i])
        before = total // 2 if layer.padding == "same" and total > 0 else 0
        befores.append(before)
        afters.append(max(total - before, 0))
        extra.append(max(-total, 0))
    sp = "DHW"[3 - nsp:]

    def make() -> np.ndarray:
        return k.transpose([k.ndim - 1, k.ndim - 2, *range(nsp)]) if cf else k

    w = ctx.weight(layer, f"kernel.{int(cf)}", make)
    fn = {1: K.conv.conv1d_transpose, 2: K.conv.conv2d_transpose, 3: K.conv.conv3d_transpose}[nsp]
    out = fn(x, w, strides=strides, padding=befores + afters, dilation=dilation,
             channels=k.shape[-2], kernel_size=tuple(kernel), output_padding=tuple(extra),
             data_layout="NC" + sp if cf else "N" + sp + "C",
             kernel_layout="IO" + sp if cf else sp + "OI")
    return _finish_conv(ctx, layer, out, cf)


def _check_conv(layer: Any) -> str | None:
    if getattr(layer, "data_format", "channels_last") != "channels_last":
        return f"data_format={layer.data_format!r}"
    if getattr(layer, "quantization_mode", None):
        return f"quantization_mode={layer.quantization_mode!r}"
    return _check_activation(layer.activation)


def _check_channels_last(layer: Any) -> str | None:
    if getattr(layer, "data_format", "channels_last") != "channels_last":
        return f"data_format={layer.data_format!r}"
    return None


def _pool(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x, cf = ctx.spatial(ins[0])
    nsp = len(ctx.shape(x)) - 2
    size = _tuple(layer.pool_size, nsp)
    strides = _tuple(layer.strides, nsp)
    shape = ctx.shape(x)
    sizes = shape[2:] if cf else shape[1:-1]
    if layer.padding == "same":
        pairs = [_same_pads(sizes[i], size[i], strides[i]) for i in range(nsp)]
        pads = [p[0] for p in pairs] + [p[1] for p in pairs]
    else:
        pads = [0] * (2 * nsp)
    layout = _layouts(nsp, cf)[0]
    kind = "max" if "Max" in type(layer).__name__ else "avg"
    fn = getattr(K.pool, f"{kind}_pool{nsp}d")
    extra = {} if kind == "max" else {"count_include_pad": False}
    return [KVal(fn(x, pool_size=size, strides=strides, padding=pads, layout=layout, **extra), cf)]


def _global_pool(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    v = ins[0]
    rank = len(ctx.shape(v.expr))
    axes = list(range(2, rank)) if v.cf else list(range(1, rank - 1))
    reduce = K.max if "Max" in type(layer).__name__ else K.mean
    keep = bool(getattr(layer, "keepdims", False))
    return [KVal(reduce(v.expr, axis=axes, keepdims=keep), v.cf and keep)]


# --- shape layers -------------------------------------------------------------------------------

def _flatten(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x = ctx.cl(ins[0])
    shape = ctx.shape(x)
    return [KVal(K.reshape(x, (shape[0], int(np.prod(shape[1:], dtype=np.int64)))))]


def _reshape(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x = ctx.cl(ins[0])
    return [KVal(K.reshape(x, (ctx.shape(x)[0], *(int(d) for d in layer.target_shape))))]


def _permute(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    return [KVal(K.transpose(ctx.cl(ins[0]), (0, *(int(d) for d in layer.dims))))]


def _repeat_vector(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x = ctx.cl(ins[0])
    return [KVal(K.repeat(K.expand_dims(x, 1), int(layer.n), axis=1))]


def _pairs(value: Any, n: int) -> list[tuple[int, int]]:
    if isinstance(value, int):
        return [(value, value)] * n
    out = []
    for item in value:
        out.append((int(item), int(item)) if isinstance(item, int) else (int(item[0]), int(item[1])))
    if len(out) == 1 and n == 1:
        return out
    if len(out) == 2 and n == 1:  # ZeroPadding1D/Cropping1D keep one (before, after) pair
        return [(out[0][0], out[1][0])]
    return out


def _pad_or_crop(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x, cf = ctx.spatial(ins[0])
    nsp = len(ctx.shape(x)) - 2
    crop = type(layer).__name__.startswith("Cropping")
    pairs = _pairs(layer.cropping if crop else layer.padding, nsp)
    if crop:
        shape = ctx.shape(x)
        first = 2 if cf else 1
        axes = list(range(first, first + nsp))
        ends = [shape[a] - e for a, (_, e) in zip(axes, pairs)]
        out = K.strided_slice(x, [b for b, _ in pairs], ends, axes=axes)
    else:
        widths = [(0, 0), (0, 0), *pairs] if cf else [(0, 0), *pairs, (0, 0)]
        out = K.nn.pad(x, widths)
    return [KVal(out, cf)]


def _upsampling(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    name = type(layer).__name__
    if name == "UpSampling1D":
        x = ctx.cl(ins[0])
        return [KVal(K.repeat(x, int(layer.size), axis=1))]
    x, cf = ctx.spatial(ins[0])
    if name == "UpSampling3D":
        d, h, w = _tuple(layer.size, 3)
        axes = (2, 3, 4) if cf else (1, 2, 3)
        for a, r in zip(axes, (d, h, w)):
            x = K.repeat(x, r, axis=a)
        return [KVal(x, cf)]
    h, w = _tuple(layer.size, 2)
    layout = "NCHW" if cf else "NHWC"
    if layer.interpolation == "nearest":
        return [KVal(K.nn.upsampling(x, scale_h=h, scale_w=w, layout=layout), cf)]
    shape = ctx.shape(x)
    size = (shape[2] * h, shape[3] * w) if cf else (shape[1] * h, shape[2] * w)
    method = {"bilinear": "linear", "bicubic": "cubic"}[layer.interpolation]
    out = K.image.resize2d(x, size, layout=layout, method=method,
                           coordinate_transformation_mode="half_pixel",
                           cubic_alpha=-0.5)
    return [KVal(out, cf)]


def _check_upsampling(layer: Any) -> str | None:
    bad = _check_channels_last(layer)
    if bad:
        return bad
    interp = getattr(layer, "interpolation", "nearest")
    if interp not in ("nearest", "bilinear"):
        return f"interpolation={interp!r}"
    return None


# --- merging --------------------------------------------------------------------------------------

def _merge(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    exprs, cf = ctx.same_layout(ins)
    kind = type(layer).__name__
    if kind == "Subtract":
        return [KVal(K.subtract(exprs[0], exprs[1]), cf)]
    op = {"Add": K.add, "Average": K.add, "Multiply": K.multiply, "Maximum": K.maximum,
          "Minimum": K.minimum}[kind]
    out = exprs[0]
    for e in exprs[1:]:
        out = op(out, e)
    if kind == "Average":
        out = K.divide(out, ctx.scalar(len(exprs), out))
    return [KVal(out, cf)]


def _concatenate(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    exprs, cf = ctx.same_layout(ins)
    axis = ctx.axis(KVal(exprs[0], cf), int(layer.axis))
    return [KVal(K.concatenate(exprs, axis=axis), cf)]


def _dot(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    a, b = (ctx.cl(v) for v in ins)
    ra, rb = len(ctx.shape(a)), len(ctx.shape(b))
    axes = layer.axes if isinstance(layer.axes, (list, tuple)) else [layer.axes, layer.axes]
    ax, bx = (int(axes[0]) % ra, int(axes[1]) % rb)
    if layer.normalize:
        a = K.nn.l2_normalize(a, eps=1e-12, axis=[ax])
        b = K.nn.l2_normalize(b, eps=1e-12, axis=[bx])
    if ra == 2 and rb == 2:
        return [KVal(K.sum(K.multiply(a, b), axis=[1], keepdims=True))]
    # (B, M, K) x (B, K, N) with the contracted axes moved into place.
    a3 = a if ax == 2 else K.transpose(a, (0, 2, 1))
    b3 = b if bx == 1 else K.transpose(b, (0, 2, 1))
    return [KVal(K.nn.batch_matmul(a3, b3, transpose_b=False))]


def _check_dot(layer: Any) -> str | None:
    axes = layer.axes if isinstance(layer.axes, (list, tuple)) else [layer.axes, layer.axes]
    if any(int(a) not in (1, 2, -1) for a in axes):
        return f"axes={layer.axes}"
    return None


# --- recurrent layers -----------------------------------------------------------------------------

def _gates(x: Expr, n: int, units: int) -> list[Expr]:
    return [K.strided_slice(x, [k * units], [(k + 1) * units], axes=[1]) for k in range(n)]


def _rnn(ctx: Ctx, layer: Any, x: Expr, init: list[Expr] | None,
         reverse: bool) -> tuple[list[Expr], list[Expr]]:
    """Unroll ``layer`` over ``x`` (batch, time, features): per-step outputs and final states."""
    cell = layer.cell
    kind = type(layer).__name__
    batch, steps, feat = ctx.shape(x)
    units = int(cell.units)
    ngates = {"LSTM": 4, "GRU": 3, "SimpleRNN": 1}[kind]
    reset_after = kind == "GRU" and bool(cell.reset_after)
    kernel = ctx.weight(layer, "kernel", lambda: _np(cell.kernel).T)
    rec = _np(cell.recurrent_kernel)
    in_bias = rec_bias = None
    if cell.use_bias:
        b = _np(cell.bias)
        in_bias = ctx.weight(layer, "bias", lambda: b[0] if b.ndim == 2 else b)
        if reset_after:
            rec_bias = ctx.weight(layer, "recurrent_bias", lambda: b[1])
    proj = _last_axis_dense(ctx, K.reshape(x, (batch * steps, feat)), kernel, in_bias)
    proj = K.reshape(proj, (batch, steps, ngates * units))
    act = lambda e: apply_activation(ctx, cell.activation, KVal(e)).expr  # noqa: E731
    rec_act = ((lambda e: apply_activation(ctx, cell.recurrent_activation, KVal(e)).expr)
               if kind != "SimpleRNN" else act)
    zeros = Constant(np.zeros((batch, units), dtype=ctx.dtype(x)))
    h = init[0] if init else zeros
    c = init[1] if init and len(init) > 1 else zeros
    order = range(steps - 1, -1, -1) if reverse else range(steps)
    if kind == "GRU" and not reset_after:
        rec_zr = ctx.weight(layer, "recurrent_kernel.zr", lambda: rec[:, :2 * units].T)
        rec_h = ctx.weight(layer, "recurrent_kernel.h", lambda: rec[:, 2 * units:].T)
    else:
        rec_all = ctx.weight(layer, "recurrent_kernel", lambda: rec.T)
    outs = []
    for t in order:
        xt = K.reshape(K.strided_slice(proj, [t], [t + 1], axes=[1]), (batch, ngates * units))
        if kind == "SimpleRNN":
            h = act(K.add(xt, K.nn.dense(h, rec_all, units=units)))
        elif kind == "LSTM":
            i, f, g, o = _gates(K.add(xt, K.nn.dense(h, rec_all, units=4 * units)), 4, units)
            c = K.add(K.multiply(rec_act(f), c), K.multiply(rec_act(i), act(g)))
            h = K.multiply(rec_act(o), act(c))
        else:
            xz, xr, xh = _gates(xt, 3, units)
            if reset_after:
                hr = K.nn.dense(h, rec_all, units=3 * units)
                if rec_bias is not None:
                    hr = K.nn.bias_add(hr, rec_bias, axis=1)
                rz, rr, rh = _gates(hr, 3, units)
                z, r = rec_act(K.add(xz, rz)), rec_act(K.add(xr, rr))
                hh = act(K.add(xh, K.multiply(r, rh)))
            else:
                rz, rr = _gates(K.nn.dense(h, rec_zr, units=2 * units), 2, units)
                z, r = rec_act(K.add(xz, rz)), rec_act(K.add(xr, rr))
                hh = act(K.add(xh, K.nn.dense(K.multiply(r, h), rec_h, units=units)))
            h = K.add(K.multiply(z, h), K.multiply(K.subtract(ctx.scalar(1, hh), z), hh))
        outs.append(h)
    return outs, ([h, c] if kind == "LSTM" else [h])


def _rnn_outputs(layer: Any, steps: list[Expr], states: list[Expr]) -> list[Expr]:
    seq = K.stack(steps, axis=1) if layer.return_sequences else steps[-1]
    return [seq, *states] if layer.return_state else [seq]


def _initial_state(ctx: Ctx, kw: dict[str, Any], ins: list[KVal]) -> list[Expr] | None:
    init = kw.get("initial_state")
    if init is None and len(ins) > 1:
        init = ins[1:]
    if init is None:
        return None
    init = init if isinstance(init, (list, tuple)) else [init]
    return [ctx.cl(v) for v in init]


def _recurrent(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x = ctx.cl(ins[0])
    steps, states = _rnn(ctx, layer, x, _initial_state(ctx, kw, ins), bool(layer.go_backwards))
    return [KVal(e) for e in _rnn_outputs(layer, steps, states)]


def _check_recurrent(layer: Any) -> str | None:
    if getattr(layer, "stateful", False):
        return "stateful=True"
    if type(layer.cell).__name__ not in ("LSTMCell", "GRUCell", "SimpleRNNCell"):
        return f"cell {type(layer.cell).__name__}"
    for fn in (layer.cell.activation, getattr(layer.cell, "recurrent_activation", None)):
        if fn is not None and _check_activation(fn):
            return _check_activation(fn)
    return None


def _bidirectional(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x = ctx.cl(ins[0])
    init = _initial_state(ctx, kw, ins)
    fw, bw = layer.forward_layer, layer.backward_layer
    half = None if init is None else len(init) // 2
    f_steps, f_states = _rnn(ctx, fw, x, None if init is None else init[:half], bool(fw.go_backwards))
    b_steps, b_states = _rnn(ctx, bw, x, None if init is None else init[half:], bool(bw.go_backwards))
    f_out: Expr
    b_out: Expr
    if fw.return_sequences:
        f_out, b_out = K.stack(f_steps, axis=1), K.stack(b_steps[::-1], axis=1)
    else:
        f_out, b_out = f_steps[-1], b_steps[-1]
    mode = layer.merge_mode
    merged: list[Expr]
    if mode == "concat":
        merged = [K.concatenate([f_out, b_out], axis=-1)]
    elif mode == "sum":
        merged = [K.add(f_out, b_out)]
    elif mode == "mul":
        merged = [K.multiply(f_out, b_out)]
    elif mode == "ave":
        merged = [K.divide(K.add(f_out, b_out), ctx.scalar(2, f_out))]
    else:
        merged = [f_out, b_out]
    states = [*f_states, *b_states] if layer.return_state else []
    return [KVal(e) for e in (*merged, *states)]


def _check_bidirectional(layer: Any) -> str | None:
    for sub in (layer.forward_layer, layer.backward_layer):
        if type(sub).__name__ not in ("LSTM", "GRU", "SimpleRNN"):
            return f"wrapped layer {type(sub).__name__}"
        bad = _check_recurrent(sub)
        if bad:
            return bad
    return None


# --- attention and wrappers -----------------------------------------------------------------------

def _mha(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    query = ins[0] if ins else kw["query"]
    value = ins[1] if len(ins) > 1 else kw["value"]
    key = ins[2] if len(ins) > 2 else kw.get("key") or value
    q_in, k_in, v_in = ctx.cl(query), ctx.cl(key), ctx.cl(value)
    heads, kd = int(layer._num_heads), int(layer._key_dim)
    vd = int(layer._value_dim or kd)

    def project(x: Expr, dense: Any, tag: str, dim: int) -> Expr:
        b, t, d = ctx.shape(x)
        w = ctx.weight(layer, f"{tag}.kernel", lambda: _np(dense.kernel).reshape(d, heads * dim).T)
        bias = (ctx.weight(layer, f"{tag}.bias", lambda: _np(dense.bias).reshape(heads * dim))
                if dense.bias is not None else None)
        y = K.reshape(_last_axis_dense(ctx, x, w, bias), (b, t, heads, dim))
        return K.reshape(K.transpose(y, (0, 2, 1, 3)), (b * heads, t, dim))

    batch, tq, _ = ctx.shape(q_in)
    tk = ctx.shape(k_in)[1]
    q = project(q_in, layer._query_dense, "query", kd)
    k = project(k_in, layer._key_dense, "key", kd)
    v = project(v_in, layer._value_dense, "value", vd)
    q = K.multiply(q, ctx.scalar(1.0 / math.sqrt(kd), q))
    scores = K.nn.batch_matmul(q, k, transpose_b=True)  # (B*H, Tq, Tk)
    mask: Expr | None = None
    if kw.get("attention_mask") is not None:
        mask = K.cast(K.cast(ctx.cl(kw["attention_mask"]), "bool"), ctx.dtype(scores))  # (B, Tq, Tk)
        mask = K.reshape(K.repeat(K.expand_dims(mask, 1), heads, axis=1), (batch * heads, tq, tk))
    if kw.get("use_causal_mask"):
        tri = Constant(np.tril(np.ones((tq, tk), dtype=ctx.dtype(scores))))
        mask = tri if mask is None else K.multiply(mask, tri)
    if mask is not None:
        one = ctx.scalar(1, scores)
        scores = K.add(scores, K.multiply(K.subtract(one, mask), ctx.scalar(-1e9, scores)))
    probs = K.nn.softmax(scores, axis=-1)
    ctxv = K.nn.batch_matmul(probs, v, transpose_b=False)  # (B*H, Tq, vd)
    ctxv = K.reshape(K.transpose(K.reshape(ctxv, (batch, heads, tq, vd)), (0, 2, 1, 3)),
                     (batch, tq, heads * vd))
    od = layer._output_dense
    out_dim = _np(od.kernel).shape[-1]
    w = ctx.weight(layer, "output.kernel", lambda: _np(od.kernel).reshape(heads * vd, out_dim).T)
    b = ctx.weight(layer, "output.bias", lambda: _np(od.bias)) if od.bias is not None else None
    out = _last_axis_dense(ctx, ctxv, w, b)
    if kw.get("return_attention_scores"):
        return [KVal(out), KVal(K.reshape(probs, (batch, heads, tq, tk)))]
    return [KVal(out)]


def _check_mha(layer: Any) -> str | None:
    axes = layer._attention_axes
    if axes is not None and tuple(axes) not in ((1,), (-3,)):
        return f"attention_axes={axes}"
    for d in (layer._query_dense, layer._key_dense, layer._value_dense):
        if len(_np(d.kernel).shape) != 3:
            return "inputs of rank other than 3"
    return None


def _time_distributed(ctx: Ctx, layer: Any, ins: list[KVal], kw: dict[str, Any]) -> list[KVal]:
    x = ctx.cl(ins[0])
    shape = ctx.shape(x)
    inner = layer.layer
    flat = K.reshape(x, (shape[0] * shape[1], *shape[2:]))
    outs = LAYERS[type(inner).__name__][0](ctx, inner, [KVal(flat)], {})
    res = []
    for o in outs:
        e = ctx.cl(o)
        res.append(KVal(K.reshape(e, (shape[0], shape[1], *ctx.shape(e)[1:]))))
    return res


def _check_time_distributed(layer: Any) -> str | None:
    return check_layer(layer.layer)


# --- the table ------------------------------------------------------------------------------------

_SPATIAL = _check_channels_last

#: Keras layer class name -> (converter, check returning why a layer instance is unsupported).
LAYERS: dict[str, tuple[Converter, Check | None]] = {
    "InputLayer": (_identity, None),
    "Dense": (_dense, _check_dense),
    "Conv1D": (_conv, _check_conv),
    "Conv2D": (_conv, _check_conv),
    "Conv3D": (_conv, _check_conv),
    "DepthwiseConv1D": (_depthwise, _check_conv),
    "DepthwiseConv2D": (_depthwise, _check_conv),
    "SeparableConv1D": (_separable, _check_conv),
    "SeparableConv2D": (_separable, _check_conv),
    "Conv1DTranspose": (_conv_transpose, _check_conv),
    "Conv2DTranspose": (_conv_transpose, _check_conv),
    "Conv3DTranspose": (_conv_transpose, _check_conv),
    "BatchNormalization": (_batch_norm, _check_batch_norm),
    "LayerNormalization": (_layer_norm, None),
    "Activation": (_activation, lambda layer: _check_activation(layer.activation)),
    "ReLU": (_relu, None),
    "LeakyReLU": (_leaky_relu, None),
    "PReLU": (_prelu, None),
    "ELU": (_elu_layer, None),
    "Softmax": (_softmax_layer, None),
    "MaxPooling1D": (_pool, _SPATIAL),
    "MaxPooling2D": (_pool, _SPATIAL),
    "MaxPooling3D": (_pool, _SPATIAL),
    "AveragePooling1D": (_pool, _SPATIAL),
    "AveragePooling2D": (_pool, _SPATIAL),
    "AveragePooling3D": (_pool, _SPATIAL),
    "GlobalAveragePooling1D": (_global_pool, _SPATIAL),
    "GlobalAveragePooling2D": (_global_pool, _SPATIAL),
    "GlobalAveragePooling3D": (_global_pool, _SPATIAL),
    "GlobalMaxPooling1D": (_global_pool, _SPATIAL),
    "GlobalMaxPooling2D": (_global_pool, _SPATIAL),
    "GlobalMaxPooling3D": (_global_pool, _SPATIAL),
    "Flatten": (_flatten, _SPATIAL),
    "Reshape": (_reshape, None),
    "Permute": (_permute, None),
    "RepeatVector": (_repeat_vector, None),
    "Dropout": (_identity, None),
    "SpatialDropout1D": (_identity, None),
    "SpatialDropout2D": (_identity, None),
    "SpatialDropout3D": (_identity, None),
    "GaussianDropout": (_identity, None),
    "GaussianNoise": (_identity, None),
    "AlphaDropout": (_identity, None),
    "ActivityRegularization": (_identity, None),
    "Identity": (_identity, None),
    "ZeroPadding1D": (_pad_or_crop, _SPATIAL),
    "ZeroPadding2D": (_pad_or_crop, _SPATIAL),
    "ZeroPadding3D": (_pad_or_crop, _SPATIAL),
    "Cropping1D": (_pad_or_crop, _SPATIAL),
    "Cropping2D": (_pad_or_crop, _SPATIAL),
    "Cropping3D": (_pad_or_crop, _SPATIAL),
    "UpSampling1D": (_upsampling, None),
    "UpSampling2D": (_upsampling, _check_upsampling),
    "UpSampling3D": (_upsampling, _SPATIAL),
    "Concatenate": (_concatenate, None),
    "Add": (_merge, None),
    "Subtract": (_merge, None),
    "Multiply": (_merge, None),
    "Average": (_merge, None),
    "Maximum": (_merge, None),
    "Minimum": (_merge, None),
    "Dot": (_dot, _check_dot),
    "Embedding": (_embedding, lambda layer: "mask_zero=True (masks are not propagated)"
                  if getattr(layer, "mask_zero", False) else None),
    "SimpleRNN": (_recurrent, _check_recurrent),
    "LSTM": (_recurrent, _check_recurrent),
    "GRU": (_recurrent, _check_recurrent),
    "Bidirectional": (_bidirectional, _check_bidirectional),
    "MultiHeadAttention": (_mha, _check_mha),
    "TimeDistributed": (_time_distributed, _check_time_distributed),
    "RMSNormalization": (_rms_norm, None),
    "UnitNormalization": (_unit_norm, None),
    "GroupNormalization": (_group_norm, _check_group_norm),
    "Rescaling": (_rescaling, None),
    "Normalization": (_normalization, None),
}


def check_layer(layer: Any) -> str | None:
    """None if ``layer`` converts, else why not (``"no converter"`` or the detail)."""
    entry = LAYERS.get(type(layer).__name__)
    if entry is None:
        return "no converter"
    return entry[1](layer) if entry[1] is not None else None
