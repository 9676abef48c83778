"""TFLite converters: one function per builtin operator (or family), registered with
:func:`kiln.frontend.tflite.converter`.

Tensors keep TFLite's layouts: NHWC data, ``OHWI`` convolution kernels, ``1HW(C*M)`` depthwise
kernels (``IHWO`` with one input channel per group) and ``(units, in)`` fully connected weights.
``SAME`` padding is TensorFlow's: the total ``max((ceil(in / s) - 1) * s + (k - 1) * d + 1 - in, 0)``
split with the smaller half first. Fused activations (RELU, RELU_N1_TO_1, RELU6, TANH) follow the
operator; on integers they clamp to the quantized bounds of the output tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import kiln.op as K
from kiln.frontend.tflite import (
    OpContext,
    TensorInfo,
    _along,
    _const,
    converter,
    padding_mode,
    saturate,
)
from kiln.ir.expr import Expr
from kiln.op import elemwise as ew
from kiln.op import nn
from kiln.op import reduce as red

__all__: list[str] = []

_ACT_RANGES = {1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}
_ACT_NAMES = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}
_FLOATS = ("float16", "float32", "float64")


# --- shared helpers ------------------------------------------------------------------------------
def _scalar(value: float, like: str) -> Expr:
    return _const(value, like)


def _fused_check(cls_name: str) -> Callable[[OpContext], str | None]:
    def check(ctx: OpContext) -> str | None:
        code = int(ctx.opt(cls_name, "FusedActivationFunction", 0))
        if code not in (0, 1, 2, 3, 4):
            return f"fused activation {_ACT_NAMES.get(code, code)}"
        return None

    return check


def activation(ctx: OpContext, x: Expr, code: int) -> Expr:
    """Apply fused activation ``code`` to ``x`` (float, or integers of the output tensor)."""
    code = int(code)
    if code == 0:
        return x
    dtype = ctx.dtype(x)
    if dtype in _FLOATS:
        if code == 4:
            return ew.tanh(x)
        lo, hi = _ACT_RANGES[code]
        if hi is None:
            return ew.maximum(x, _scalar(lo, dtype))
        return ew.clip(x, lo, hi)
    out = ctx.outputs[0]
    if not out.quantized or code == 4:
        raise ctx.error(f"fused activation {_ACT_NAMES[code]} on {dtype} values")
    assert out.scale is not None and out.zero_point is not None
    scale, zp = float(out.scale[0]), int(out.zero_point[0])
    info = np.iinfo(np.dtype(out.dtype))
    lo, hi = _ACT_RANGES[code]
    qlo = max(int(info.min), zp + int(np.round(lo / scale)))
    qhi = int(info.max) if hi is None else min(int(info.max), zp + int(np.round(hi / scale)))
    return ew.minimum(ew.maximum(x, _const(qlo, dtype)), _const(qhi, dtype))


def _fused(ctx: OpContext, x: Expr, cls_name: str) -> Expr:
    return activation(ctx, x, int(ctx.opt(cls_name, "FusedActivationFunction", 0)))


def same_pads(size: int, k: int, s: int, d: int) -> tuple[int, int]:
    """TensorFlow's SAME padding ``(before, after)`` of one axis."""
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def _pads2d(mode: int, hw: Sequence[int], k: Sequence[int], s: Sequence[int],
            d: Sequence[int]) -> tuple[int, int, int, int]:
    if padding_mode(mode) == "VALID":
        return 0, 0, 0, 0
    (t, b), (left, r) = (same_pads(hw[i], k[i], s[i], d[i]) for i in range(2))
    return t, left, b, r


def _axis(ctx: OpContext, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def _ints(ctx: OpContext, i: int, what: str) -> list[int]:
    return [int(v) for v in np.asarray(ctx.value(i, what)).reshape(-1)]


# --- integer (qnn-style) arithmetic ------------------------------------------------------------
def _centered(x: Expr, info: TensorInfo, rank: int, acc: str) -> Expr:
    """``acc(x) - acc(zero_point)``."""
    v = ew.cast(x, acc)
    assert info.zero_point is not None
    zp = _along(info.zero_point, rank, info.qdim)
    return ew.subtract(v, _const(zp, acc)) if np.any(zp != 0) else v


def _requantize_acc(ctx: OpContext, acc: Expr, w: TensorInfo, code: int) -> Expr:
    """``saturate(round(acc * s_x * s_w / s_y) + zp_y)`` with the fused activation's bounds."""
    x, y = ctx.info(0), ctx.outputs[0]
    assert x.scale is not None and w.scale is not None and y.scale is not None and y.zero_point is not None
    rank = len(ctx.shape(acc))
    mult = np.float64(x.scale[0]) * w.scale.astype(np.float64) / np.float64(y.scale[0])
    v = ew.multiply(ew.cast(acc, "float64"), _const(_along(mult, rank, rank - 1), "float64"))
    v = ew.add(v, _const(float(y.zero_point[0]), "float64"))
    lo = hi = None
    if int(code) in _ACT_RANGES:
        a, b = _ACT_RANGES[int(code)]
        lo = float(y.zero_point[0]) + float(np.round(a / y.scale[0]))
        hi = None if b is None else float(y.zero_point[0]) + float(np.round(b / y.scale[0]))
    elif int(code) == 4:
        raise ctx.error("quantized fused TANH")
    return saturate(v, y.dtype, lo, hi, work="float64")


def _int_bias(ctx: OpContext, acc: Expr, acc_dtype: str) -> Expr:
    if not ctx.has_input(2):
        return acc
    b = ctx.raw(2)
    if ctx.dtype(b) in _FLOATS:
        raise ctx.error("a float bias on a quantized operator")
    return ew.add(acc, ew.cast(b, acc_dtype))


def _acc_dtype(ctx: OpContext) -> str:
    return "int64" if ctx.info(0).dtype == "int16" else "int32"


def _int_path(ctx: OpContext) -> bool:
    return ctx.quantized and ctx.info(1).quantized


# --- convolutions and dense ----------------------------------------------------------------------
def _strides_dilation(ctx: OpContext, options: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """The (H, W) strides and dilation of a convolution's options table (at least 1 each)."""
    strides = (max(int(ctx.opt(options, "StrideH", 1)), 1), max(int(ctx.opt(options, "StrideW", 1)), 1))
    dil = (max(int(ctx.opt(options, "DilationHFactor", 1)), 1),
           max(int(ctx.opt(options, "DilationWFactor", 1)), 1))
    return strides, dil


def _conv_bias_activation(ctx: OpContext, kw: dict[str, Any], code: int) -> Expr:
    """``conv2d(**kw)`` of inputs 0 and 1, plus the bias (input 2) and the fused activation: in
    integer arithmetic with one requantization for quantized weights, else in float."""
    if _int_path(ctx):
        xs, ws = ctx.info(0), ctx.info(1)
        acc_t = _acc_dtype(ctx)
        acc = K.conv.conv2d(_centered(ctx.raw(0), xs, 4, acc_t), _centered(ctx.raw(1), ws, 4, acc_t),
                            out_dtype=acc_t, **kw)
        return _requantize_acc(ctx, _int_bias(ctx, acc, acc_t), ws, code)
    y = K.conv.conv2d(ctx.input(0), ctx.input(1), **kw)
    if ctx.has_input(2):
        y = ew.add(y, ctx.input(2))
    return activation(ctx, y, code)


@converter("CONV_2D", quant="int", check=_fused_check("Conv2DOptions"))
def _conv2d(ctx: OpContext) -> Expr:
    o = "Conv2DOptions"
    strides, dil = _strides_dilation(ctx, o)
    x_shape = ctx.shape(ctx.raw(0))
    w_shape = ctx.shape(ctx.raw(1))
    pads = _pads2d(ctx.opt(o, "Padding", 0), x_shape[1:3], w_shape[1:3], strides, dil)
    groups = x_shape[3] // w_shape[3] if w_shape[3] else 1
    kw: dict[str, Any] = dict(strides=strides, padding=pads, dilation=dil, groups=groups, channels=w_shape[0],
              kernel_size=w_shape[1:3], data_layout="NHWC", kernel_layout="OHWI")
    return _conv_bias_activation(ctx, kw, int(ctx.opt(o, "FusedActivationFunction", 0)))


@converter("DEPTHWISE_CONV_2D", quant="int", check=_fused_check("DepthwiseConv2DOptions"))
def _depthwise(ctx: OpContext) -> Expr:
    o = "DepthwiseConv2DOptions"
    strides, dil = _strides_dilation(ctx, o)
    x_shape = ctx.shape(ctx.raw(0))
    w_shape = ctx.shape(ctx.raw(1))
    if w_shape[0] != 1 or w_shape[3] % max(x_shape[3], 1):
        raise ctx.error(f"depthwise kernel {list(w_shape)} does not fit input channels {x_shape[3]}")
    pads = _pads2d(ctx.opt(o, "Padding", 0), x_shape[1:3], w_shape[1:3], strides, dil)
    kw: dict[str, Any] = dict(strides=strides, padding=pads, dilation=dil, groups=x_shape[3],
                              channels=w_shape[3], kernel_size=w_shape[1:3], data_layout="NHWC",
                              kernel_layout="IHWO")
    return _conv_bias_activation(ctx, kw, int(ctx.opt(o, "FusedActivationFunction", 0)))


@converter("TRANSPOSE_CONV", check=_fused_check("TransposeConvOptions"))
def _transpose_conv(ctx: OpContext) -> Expr:
    o = "TransposeConvOptions"
    out_shape = _ints(ctx, 0, "output_shape")
    w, x = ctx.input(1), ctx.input(2)
    xs, ws = ctx.shape(x), ctx.shape(w)
    strides = (max(int(ctx.opt(o, "StrideH", 1)), 1), max(int(ctx.opt(o, "StrideW", 1)), 1))
    same = padding_mode(ctx.opt(o, "Padding", 0)) == "SAME"
    begin, end, extra = [], [], []
    for i in range(2):
        full = (xs[1 + i] - 1) * strides[i] + ws[1 + i]
        total = max(full - out_shape[1 + i], 0)
        b = total // 2 if same else 0
        begin.append(b)
        end.append(total - b)
        extra.append(out_shape[1 + i] - (full - total))
    if any(e < 0 or e >= strides[i] for i, e in enumerate(extra)):
        raise ctx.error(f"output_shape {out_shape} does not fit input {list(xs)} and kernel {list(ws)}")
    y = K.conv.conv2d_transpose(x, w, strides=strides, padding=(begin[0], begin[1], end[0], end[1]),
                                channels=ws[0], kernel_size=ws[1:3], data_layout="NHWC",
                                kernel_layout="OHWI", output_padding=extra)
    if ctx.has_input(3):
        y = ew.add(y, ctx.input(3))
    return _fused(ctx, y, o)


@converter("FULLY_CONNECTED", quant="int", check=_fused_check("FullyConnectedOptions"))
def _fully_connected(ctx: OpContext) -> Expr:
    o = "FullyConnectedOptions"
    x_raw, w_raw = ctx.raw(0), ctx.raw(1)
    xs, ws = ctx.shape(x_raw), ctx.shape(w_raw)
    units, k = ws
    if int(np.prod(xs)) % k:
        raise ctx.error(f"input {list(xs)} does not split into rows of {k}")
    keep = bool(ctx.opt(o, "KeepNumDims", False))
    code = int(ctx.opt(o, "FusedActivationFunction", 0))
    if _int_path(ctx):
        acc_t = _acc_dtype(ctx)
        x2 = K.reshape(_centered(x_raw, ctx.info(0), 0, acc_t), (-1, k))
        acc = nn.dense(x2, _centered(w_raw, ctx.info(1), 2, acc_t), units=units, out_dtype=acc_t)
        y = _requantize_acc(ctx, _int_bias(ctx, acc, acc_t), ctx.info(1), code)
    else:
        y = nn.dense(K.reshape(ctx.input(0), (-1, k)), ctx.input(1), units=units)
        if ctx.has_input(2):
            y = ew.add(y, ctx.input(2))
        y = activation(ctx, y, code)
    if keep:
        y = K.reshape(y, (*xs[:-1], units))
    return y


# --- element-wise ------------------------------------------------------------------------------
_BINARY = {"ADD": (ew.add, "AddOptions"), "SUB": (ew.subtract, "SubOptions"),
           "MUL": (ew.multiply, "MulOptions"), "DIV": (ew.divide, "DivOptions")}


def _binary_check(ctx: OpContext) -> str | None:
    return _fused_check(_BINARY[ctx.code][1])(ctx)


@converter(*_BINARY, check=_binary_check)
def _binary(ctx: OpContext) -> Expr:
    fn, opts = _BINARY[ctx.code]
    return _fused(ctx, fn(ctx.input(0), ctx.input(1)), opts)


_SIMPLE_BINARY = {"MAXIMUM": ew.maximum, "MINIMUM": ew.minimum, "POW": ew.power,
                  "FLOOR_DIV": ew.floor_divide, "FLOOR_MOD": ew.floor_mod, "LESS": ew.less,
                  "LESS_EQUAL": ew.less_equal, "GREATER": ew.greater, "GREATER_EQUAL": ew.greater_equal,
                  "EQUAL": ew.equal, "NOT_EQUAL": ew.not_equal, "LOGICAL_AND": ew.logical_and,
                  "LOGICAL_OR": ew.logical_or, "ATAN2": ew.atan2}


@converter(*_SIMPLE_BINARY)
def _simple_binary(ctx: OpContext) -> Expr:
    return _SIMPLE_BINARY[ctx.code](ctx.input(0), ctx.input(1))


@converter("SQUARED_DIFFERENCE")
def _squared_difference(ctx: OpContext) -> Expr:
    d = ew.subtract(ctx.input(0), ctx.input(1))
    return ew.multiply(d, d)


_UNARY = {"EXP": ew.exp, "LOG": ew.log, "SQRT": ew.sqrt, "RSQRT": ew.rsqrt, "ABS": ew.abs,
          "NEG": ew.negative, "SIN": ew.sin, "COS": ew.cos, "TANH": ew.tanh, "LOGISTIC": ew.sigmoid,
          "FLOOR": ew.floor, "CEIL": ew.ceil, "LOGICAL_NOT": ew.logical_not, "SIGN": ew.sign}


@converter(*_UNARY)
def _unary(ctx: OpContext) -> Expr:
    return _UNARY[ctx.code](ctx.input(0))


@converter("ROUND")
def _round(ctx: OpContext) -> Expr:
    return ew.round(ctx.input(0))  # TFLite's ROUND is banker's rounding, like relay's round


@converter("SQUARE")
def _square(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    return ew.multiply(x, x)


@converter("RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1")
def _relu(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    dt = ctx.dtype(x)
    if ctx.code == "RELU":
        return ew.maximum(x, _scalar(0.0, dt))
    lo, hi = {"RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0), "RELU_0_TO_1": (0.0, 1.0)}[ctx.code]
    return ew.clip(x, lo, hi)


@converter("HARD_SWISH")
def _hard_swish(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    dt = ctx.dtype(x)
    return ew.multiply(x, ew.divide(ew.clip(ew.add(x, _scalar(3.0, dt)), 0.0, 6.0), _scalar(6.0, dt)))


@converter("LEAKY_RELU")
def _leaky_relu(ctx: OpContext) -> Expr:
    return nn.leaky_relu(ctx.input(0), float(ctx.opt("LeakyReluOptions", "Alpha", 0.2)))


@converter("ELU")
def _elu(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    dt = ctx.dtype(x)
    return ew.where(ew.less(x, _scalar(0.0, dt)), ew.subtract(ew.exp(x), _scalar(1.0, dt)), x)


@converter("PRELU")
def _prelu(ctx: OpContext) -> Expr:
    x, alpha = ctx.input(0), ctx.input(1)
    return ew.where(ew.less(x, _scalar(0.0, ctx.dtype(x))), ew.multiply(x, alpha), x)


@converter("GELU")
def _gelu(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    dt = ctx.dtype(x)

    def c(v: float) -> Expr:
        return _scalar(v, dt)

    if bool(ctx.opt("GeluOptions", "Approximate", False)):
        inner = ew.multiply(c(float(np.sqrt(2 / np.pi))),
                            ew.add(x, ew.multiply(c(0.044715), ew.multiply(x, ew.multiply(x, x)))))
        return ew.multiply(ew.multiply(c(0.5), x), ew.add(c(1.0), ew.tanh(inner)))
    erf = ew.erf(ew.multiply(x, c(float(1 / np.sqrt(2)))))
    return ew.multiply(ew.multiply(c(0.5), x), ew.add(c(1.0), erf))


@converter("CAST")
def _cast(ctx: OpContext) -> Expr:
    return ew.cast(ctx.input(0), ctx.out_dtype())


@converter("DEQUANTIZE", quant="int")
def _dequantize(ctx: OpContext) -> Expr:
    # ctx.input dequantizes a quantized tensor; a float16 one is only converted
    return ew.cast(ctx.input(0), ctx.outputs[0].dtype)


@converter("QUANTIZE", quant="int")
def _quantize(ctx: OpContext) -> Expr:
    from kiln.frontend.tflite import quantize, requantize

    src, dst = ctx.info(0), ctx.outputs[0]
    x = ctx.raw(0)
    if not dst.quantized:
        raise ctx.error("the output tensor has no scale")
    if src.quantized:
        return requantize(x, src, dst, len(ctx.shape(x)))
    return quantize(x, dst, len(ctx.shape(x)))


@converter("ADD_N")
def _add_n(ctx: OpContext) -> Expr:
    y = ctx.input(0)
    for i in range(1, len(ctx.inputs)):
        y = ew.add(y, ctx.input(i))
    return y


@converter("SELECT", "SELECT_V2")
def _select(ctx: OpContext) -> Expr:
    return ew.where(ctx.input(0), ctx.input(1), ctx.input(2))


# --- activations over an axis -----------------------------------------------------------------
@converter("SOFTMAX")
def _softmax(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    beta = float(ctx.opt("SoftmaxOptions", "Beta", 1.0))
    if beta != 1.0:
        x = ew.multiply(x, _scalar(beta, ctx.dtype(x)))
    return nn.softmax(x, axis=-1)


@converter("LOG_SOFTMAX")
def _log_softmax(ctx: OpContext) -> Expr:
    return nn.log_softmax(ctx.input(0), axis=-1)


@converter("L2_NORMALIZATION", check=_fused_check("L2NormOptions"))
def _l2_norm(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    return _fused(ctx, nn.l2_normalize(x, 1e-6, axis=[len(ctx.shape(x)) - 1]), "L2NormOptions")


@converter("LOCAL_RESPONSE_NORMALIZATION")
def _lrn(ctx: OpContext) -> Expr:
    o = "LocalResponseNormalizationOptions"
    radius = int(ctx.opt(o, "Radius", 5))
    size = 2 * radius + 1
    # relay's lrn divides alpha by size; TFLite's alpha multiplies the plain sum
    return nn.lrn(ctx.input(0), size=size, axis=3, bias=float(ctx.opt(o, "Bias", 1.0)),
                  alpha=float(ctx.opt(o, "Alpha", 1.0)) * size, beta=float(ctx.opt(o, "Beta", 0.5)))


# --- pooling -----------------------------------------------------------------------------------
def _pool(ctx: OpContext, kind: str) -> Expr:
    o = "Pool2DOptions"
    x = ctx.input(0)
    xs = ctx.shape(x)
    k = (int(ctx.opt(o, "FilterHeight", 1)), int(ctx.opt(o, "FilterWidth", 1)))
    s = (max(int(ctx.opt(o, "StrideH", 1)), 1), max(int(ctx.opt(o, "StrideW", 1)), 1))
    pads = _pads2d(ctx.opt(o, "Padding", 0), xs[1:3], k, s, (1, 1))
    if kind == "max":
        y = K.pool.max_pool2d(x, pool_size=k, strides=s, padding=pads, layout="NHWC")
    elif kind == "avg":
        y = K.pool.avg_pool2d(x, pool_size=k, strides=s, padding=pads, layout="NHWC",
                              count_include_pad=False)
    else:  # L2: sqrt(mean of squares over the valid positions)
        sq = ew.multiply(x, x)
        y = ew.sqrt(K.pool.avg_pool2d(sq, pool_size=k, strides=s, padding=pads, layout="NHWC",
                                      count_include_pad=False))
    return _fused(ctx, y, o)


@converter("MAX_POOL_2D", quant="pass", check=_fused_check("Pool2DOptions"))
def _max_pool(ctx: OpContext) -> Expr:
    return _pool(ctx, "max")


@converter("AVERAGE_POOL_2D", check=_fused_check("Pool2DOptions"))
def _avg_pool(ctx: OpContext) -> Expr:
    return _pool(ctx, "avg")


@converter("L2_POOL_2D", check=_fused_check("Pool2DOptions"))
def _l2_pool(ctx: OpContext) -> Expr:
    return _pool(ctx, "l2")


# --- reductions -------------------------------------------------------------------------------
_REDUCE = {"MEAN": red.mean, "SUM": red.sum, "REDUCE_MAX": red.max, "REDUCE_MIN": red.min,
           "REDUCE_PROD": red.prod, "REDUCE_ANY": red.any, "REDUCE_ALL": red.all}


@converter(*_REDUCE)
def _reduce(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    rank = len(ctx.shape(x))
    axes = sorted({_axis(ctx, a, rank) for a in _ints(ctx, 1, "axes")})
    keep = bool(ctx.opt("ReducerOptions", "KeepDims", False))
    if not axes:
        return x
    return _REDUCE[ctx.code](x, axis=axes, keepdims=keep)


@converter("ARG_MAX", "ARG_MIN", quant="pass")
def _arg(ctx: OpContext) -> Expr:
    x = ctx.raw(0)
    axis = _axis(ctx, _ints(ctx, 1, "axis")[0], len(ctx.shape(x)))
    fn = red.argmax if ctx.code == "ARG_MAX" else red.argmin
    return ew.cast(fn(x, axis=[axis], keepdims=False), ctx.outputs[0].dtype)


# --- shapes and data movement (integers pass through) ----------------------------------------
@converter("RESHAPE", quant="pass")
def _reshape(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    if ctx.has_input(1):
        shape = _ints(ctx, 1, "shape")
    else:
        opts = ctx.options("ReshapeOptions")
        shape = [int(v) for v in opts.NewShapeAsNumpy()] if opts is not None and opts.NewShapeLength() \
            else list(ctx.outputs[0].shape)
    return K.reshape(x, shape)


@converter("SQUEEZE", quant="pass")
def _squeeze(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    shape = ctx.shape(x)
    opts = ctx.options("SqueezeOptions")
    dims = [int(v) for v in opts.SqueezeDimsAsNumpy()] if opts is not None and opts.SqueezeDimsLength() \
        else []
    axes = [_axis(ctx, d, len(shape)) for d in dims] if dims else [i for i, d in enumerate(shape) if d == 1]
    return K.reshape(x, [d for i, d in enumerate(shape) if i not in axes])


@converter("EXPAND_DIMS", quant="pass")
def _expand_dims(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    shape = list(ctx.shape(x))
    axis = _ints(ctx, 1, "axis")[0]
    if axis < 0:
        axis += len(shape) + 1
    shape.insert(axis, 1)
    return K.reshape(x, shape)


@converter("TRANSPOSE", quant="pass")
def _transpose(ctx: OpContext) -> Expr:
    return K.transpose(ctx.input(0), _ints(ctx, 1, "perm"))


@converter("SHAPE")
def _shape(ctx: OpContext) -> Expr:
    return _const(ctx.shape(ctx.raw(0)), ctx.outputs[0].dtype)


@converter("RANK")
def _rank(ctx: OpContext) -> Expr:
    return _const(len(ctx.shape(ctx.raw(0))), ctx.outputs[0].dtype)


@converter("CONCATENATION", quant="pass", check=_fused_check("ConcatenationOptions"))
def _concat(ctx: OpContext) -> Expr:
    xs = [ctx.input(i) for i in range(len(ctx.inputs))]
    rank = len(ctx.shape(xs[0]))
    axis = _axis(ctx, int(ctx.opt("ConcatenationOptions", "Axis", 0)), rank)
    return _fused(ctx, K.concatenate(xs, axis=axis), "ConcatenationOptions")


@converter("PACK", quant="pass")
def _pack(ctx: OpContext) -> Expr:
    xs = [ctx.input(i) for i in range(len(ctx.inputs))]
    rank = len(ctx.shape(xs[0])) + 1
    return K.stack(xs, axis=_axis(ctx, int(ctx.opt("PackOptions", "Axis", 0)), rank))


@converter("UNPACK", quant="pass")
def _unpack(ctx: OpContext) -> list[Expr]:
    x = ctx.input(0)
    shape = ctx.shape(x)
    axis = _axis(ctx, int(ctx.opt("UnpackOptions", "Axis", 0)), len(shape))
    rest = [d for i, d in enumerate(shape) if i != axis]
    return [K.reshape(_take_range(x, axis, i, i + 1, len(shape)), rest) for i in range(shape[axis])]


def _take_range(x: Expr, axis: int, begin: int, end: int, rank: int) -> Expr:
    b = [0] * rank
    e = [-1] * rank
    b[axis], e[axis] = begin, end - begin
    return K.strided_slice(x, b, e, slice_mode="size")


def _split_sizes(ctx: OpContext, x: Expr, axis: int, sizes: list[int]) -> list[Expr]:
    rank = len(ctx.shape(x))
    outs, start = [], 0
    for s in sizes:
        outs.append(_take_range(x, axis, start, start + s, rank))
        start += s
    return outs


@converter("SPLIT", quant="pass")
def _split(ctx: OpContext) -> list[Expr]:
    x = ctx.input(1)
    shape = ctx.shape(x)
    axis = _axis(ctx, _ints(ctx, 0, "axis")[0], len(shape))
    n = int(ctx.opt("SplitOptions", "NumSplits", len(ctx.outputs)))
    if shape[axis] % n:
        raise ctx.error(f"axis {axis} of size {shape[axis]} does not split into {n}")
    return _split_sizes(ctx, x, axis, [shape[axis] // n] * n)


@converter("SPLIT_V", quant="pass")
def _split_v(ctx: OpContext) -> list[Expr]:
    x = ctx.input(0)
    shape = ctx.shape(x)
    axis = _axis(ctx, _ints(ctx, 2, "axis")[0], len(shape))
    sizes = _ints(ctx, 1, "size_splits")
    if sizes.count(-1) == 1:
        sizes[sizes.index(-1)] = shape[axis] - (sum(sizes) + 1)
    return _split_sizes(ctx, x, axis, sizes)


@converter("SLICE", quant="pass")
def _slice(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    shape = ctx.shape(x)
    begin, size = _ints(ctx, 1, "begin"), _ints(ctx, 2, "size")
    end = [shape[i] if s < 0 else b + s for i, (b, s) in enumerate(zip(begin, size))]
    return K.strided_slice(x, begin, end)


def _bits(mask: int, i: int) -> bool:
    return bool((int(mask) >> i) & 1)


@converter("STRIDED_SLICE", quant="pass")
def _strided_slice(ctx: OpContext) -> Expr:
    o = "StridedSliceOptions"
    x = ctx.input(0)
    shape = ctx.shape(x)
    begin, end = _ints(ctx, 1, "begin"), _ints(ctx, 2, "end")
    strides = _ints(ctx, 3, "strides") if ctx.has_input(3) else [1] * len(begin)
    bm, em = int(ctx.opt(o, "BeginMask", 0)), int(ctx.opt(o, "EndMask", 0))
    ellipsis, new_axis = int(ctx.opt(o, "EllipsisMask", 0)), int(ctx.opt(o, "NewAxisMask", 0))
    shrink = int(ctx.opt(o, "ShrinkAxisMask", 0))
    offset = bool(ctx.opt(o, "Offset", False)) if hasattr(ctx.imp.tfl.StridedSliceOptions, "Offset") \
        else False
    b_all: list[int] = []
    e_all: list[int | None] = []
    s_all: list[int] = []
    out_shape: list[int] = []
    dim = 0
    for i in range(len(begin)):
        if _bits(ellipsis, i):
            remaining = len(begin) - i - 1 - sum(_bits(new_axis, j) for j in range(i + 1, len(begin)))
            count = len(shape) - dim - remaining
            for _ in range(count):
                b_all.append(0)
                e_all.append(shape[dim])
                s_all.append(1)
                out_shape.append(shape[dim])
                dim += 1
            continue
        if _bits(new_axis, i):
            out_shape.append(1)
            continue
        size = shape[dim]
        st = strides[i]
        b = begin[i]
        e = b + end[i] if offset else end[i]
        if _bits(shrink, i):
            b = b + size if b < 0 else b
            b_all.append(b)
            e_all.append(b + 1)
            s_all.append(1)
        else:
            start, stop, step = slice(None if _bits(bm, i) else b, None if _bits(em, i) else e,
                                      st).indices(size)
            n = len(range(start, stop, step))
            b_all.append(start)
            e_all.append(stop if stop >= 0 else None)
            s_all.append(step)
            out_shape.append(n)
        dim += 1
    while dim < len(shape):
        b_all.append(0)
        e_all.append(shape[dim])
        s_all.append(1)
        out_shape.append(shape[dim])
        dim += 1
    y = K.strided_slice(x, b_all, e_all, s_all)
    return K.reshape(y, out_shape)


@converter("GATHER", quant="pass", check=lambda ctx: "batch_dims != 0"
           if int(ctx.opt("GatherOptions", "BatchDims", 0)) else None)
def _gather(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    axis = _axis(ctx, int(ctx.opt("GatherOptions", "Axis", 0)), len(ctx.shape(x)))
    return K.take(x, ctx.input(1), axis=axis)


@converter("GATHER_ND", quant="pass")
def _gather_nd(ctx: OpContext) -> Expr:
    idx = ctx.input(1)
    rank = len(ctx.shape(idx))
    return K.gather_nd(ctx.input(0), K.transpose(idx, [rank - 1, *range(rank - 1)]))


@converter("PAD", "PADV2", quant="pass")
def _pad(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    pads = np.asarray(ctx.value(1, "paddings")).reshape(-1, 2).astype(int).tolist()
    dt = ctx.dtype(x)
    if ctx.code == "PADV2" and ctx.has_input(2):
        value = ctx.input(2)
        if ctx.info(2).quantized and not ctx.info(2).same_qparams(ctx.outputs[0]) and dt not in _FLOATS:
            raise ctx.error("a pad value quantized differently from the output")
        value = K.reshape(value, ())
    else:
        out = ctx.outputs[0]
        zero = float(out.zero_point[0]) if out.quantized and dt not in _FLOATS and \
            out.zero_point is not None else 0.0
        value = _const(zero, dt)
    return nn.pad(x, [tuple(p) for p in pads], value)


@converter("MIRROR_PAD", quant="pass")
def _mirror_pad(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    pads = np.asarray(ctx.value(1, "paddings")).reshape(-1, 2).astype(int).tolist()
    mode = int(ctx.opt("MirrorPadOptions", "Mode", 0))  # 0 REFLECT, 1 SYMMETRIC
    if mode == 0:
        return nn.pad(x, [tuple(p) for p in pads], _const(0, ctx.dtype(x)), pad_mode="reflect")
    shape = list(ctx.shape(x))
    rank = len(shape)
    for axis, (before, after) in enumerate(pads):
        parts = []
        if before:
            parts.append(K.reverse(_take_range(x, axis, 0, before, rank), axis=axis))
        parts.append(x)
        if after:
            parts.append(K.reverse(_take_range(x, axis, shape[axis] - after, shape[axis], rank), axis=axis))
        if len(parts) > 1:
            x = K.concatenate(parts, axis=axis)
            shape[axis] += before + after
    return x


@converter("TILE", quant="pass")
def _tile(ctx: OpContext) -> Expr:
    return K.tile(ctx.input(0), _ints(ctx, 1, "multiples"))


@converter("BROADCAST_TO", quant="pass")
def _broadcast_to(ctx: OpContext) -> Expr:
    return K.broadcast_to(ctx.input(0), _ints(ctx, 1, "shape"))


@converter("REVERSE_V2", quant="pass")
def _reverse(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    for a in _ints(ctx, 1, "axis"):
        x = K.reverse(x, axis=_axis(ctx, a, len(ctx.shape(x))))
    return x


@converter("FILL")
def _fill(ctx: OpContext) -> Expr:
    return K.broadcast_to(K.reshape(ctx.input(1), ()), _ints(ctx, 0, "dims"))


@converter("ZEROS_LIKE", "ONES_LIKE")
def _like(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    return K.zeros_like(x) if ctx.code == "ZEROS_LIKE" else K.ones_like(x)


@converter("RANGE")
def _range(ctx: OpContext) -> Expr:
    start, limit, delta = (np.asarray(ctx.value(i, n)).reshape(()).item() for i, n in
                           enumerate(("start", "limit", "delta")))
    return _const(np.arange(start, limit, delta), ctx.outputs[0].dtype)


@converter("DEPTH_TO_SPACE", quant="pass")
def _depth_to_space(ctx: OpContext) -> Expr:
    return nn.depth_to_space(ctx.input(0), int(ctx.opt("DepthToSpaceOptions", "BlockSize", 2)),
                             layout="NHWC", mode="DCR")


@converter("SPACE_TO_DEPTH", quant="pass")
def _space_to_depth(ctx: OpContext) -> Expr:
    return nn.space_to_depth(ctx.input(0), int(ctx.opt("SpaceToDepthOptions", "BlockSize", 2)),
                             layout="NHWC")


# --- images --------------------------------------------------------------------------------------
def _resize(ctx: OpContext, method: str, cls_name: str) -> Expr:
    x = ctx.input(0)
    size = _ints(ctx, 1, "size")
    align = bool(ctx.opt(cls_name, "AlignCorners", False))
    half = bool(ctx.opt(cls_name, "HalfPixelCenters", False))
    if method == "linear":
        mode = "align_corners" if align else "half_pixel" if half else "asymmetric"
        rounding = ""
    else:
        mode = "align_corners" if align else "tf_half_pixel_for_nn" if half else "asymmetric"
        rounding = "round_prefer_ceil" if align else "floor"
    return K.image.resize2d(x, size, layout="NHWC", method=method, coordinate_transformation_mode=mode,
                            rounding_method=rounding)


@converter("RESIZE_BILINEAR")
def _resize_bilinear(ctx: OpContext) -> Expr:
    return _resize(ctx, "linear", "ResizeBilinearOptions")


@converter("RESIZE_NEAREST_NEIGHBOR", quant="pass")
def _resize_nearest(ctx: OpContext) -> Expr:
    return _resize(ctx, "nearest_neighbor", "ResizeNearestNeighborOptions")


# --- matrix products ---------------------------------------------------------------------------
@converter("BATCH_MATMUL")
def _batch_matmul(ctx: OpContext) -> Expr:
    a, b = ctx.input(0), ctx.input(1)
    adj_x = bool(ctx.opt("BatchMatMulOptions", "AdjX", False))
    adj_y = bool(ctx.opt("BatchMatMulOptions", "AdjY", False))
    sa, sb = ctx.shape(a), ctx.shape(b)
    if len(sa) < 2 or len(sb) < 2:
        raise ctx.error(f"operands {list(sa)} and {list(sb)} must have rank 2 or more")
    batch = tuple(np.broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2])))
    a = K.broadcast_to(a, (*batch, *sa[-2:])) if tuple(sa[:-2]) != batch else a
    b = K.broadcast_to(b, (*batch, *sb[-2:])) if tuple(sb[:-2]) != batch else b
    n = int(np.prod(batch)) if batch else 1
    a3 = K.reshape(a, (n, *sa[-2:]))
    b3 = K.reshape(b, (n, *sb[-2:]))
    y = nn.batch_matmul(a3, b3, transpose_a=adj_x, transpose_b=adj_y)
    m = sa[-1] if adj_x else sa[-2]
    k = sb[-2] if adj_y else sb[-1]
    return K.reshape(y, (*batch, m, k))


# --- algorithms --------------------------------------------------------------------------------
@converter("TOPK_V2")
def _topk(ctx: OpContext) -> list[Expr]:
    k = _ints(ctx, 1, "k")[0]
    vals, idx = K.topk(ctx.input(0), k=k, axis=-1, ret_type="both", dtype=ctx.outputs[1].dtype)
    return [vals, idx]


@converter("CUMSUM")
def _cumsum(ctx: OpContext) -> Expr:
    x = ctx.input(0)
    axis = _axis(ctx, _ints(ctx, 1, "axis")[0], len(ctx.shape(x)))
    reverse = bool(ctx.opt("CumsumOptions", "Reverse", False))
    exclusive = bool(ctx.opt("CumsumOptions", "Exclusive", False))
    if reverse:
        x = K.reverse(x, axis=axis)
    y = K.cumsum(x, axis=axis, exclusive=exclusive)
    return K.reverse(y, axis=axis) if reverse else y


# --- recurrent ---------------------------------------------------------------------------------
def _lstm_check(ctx: OpContext) -> str | None:
    if any(i is not None and i.quantized for i in ctx.inputs) or ctx.outputs[0].quantized:
        return "quantized LSTM"
    if any(ctx.has_input(i) for i in range(20, 24)):
        return "layer-normalized LSTM"
    return _fused_check("UnidirectionalSequenceLSTMOptions")(ctx)


def _step(ctx: OpContext, seq: Expr, t: int, rest: Sequence[int]) -> Expr:
    return K.reshape(_take_range(seq, 0, t, t + 1, 1 + len(rest)), tuple(rest))


@converter("UNIDIRECTIONAL_SEQUENCE_LSTM", check=_lstm_check)
def _lstm(ctx: OpContext) -> Expr:
    """Unrolled over the static sequence: one dense for every step's input projection, then per
    step the recurrent dense, gates (CIFG, peepholes), cell clip and optional projection."""
    o = "UnidirectionalSequenceLSTMOptions"
    x = ctx.input(0)
    time_major = bool(ctx.opt(o, "TimeMajor", False))
    if not time_major:
        x = K.transpose(x, [1, 0, 2])
    steps, batch, n_in = ctx.shape(x)

    def opt_in(i: int) -> Expr | None:
        return ctx.input(i) if ctx.has_input(i) else None

    w = {g: opt_in(1 + k) for k, g in enumerate("ifco")}
    r = {g: opt_in(5 + k) for k, g in enumerate("ifco")}
    peep = {"i": opt_in(9), "f": opt_in(10), "o": opt_in(11)}
    bias = {g: opt_in(12 + k) for k, g in enumerate("ifco")}
    cifg = w["i"] is None
    gates = [g for g in "ifco" if w[g] is not None]
    wf = w["f"]
    if wf is None or any(r[g] is None for g in gates):
        raise ctx.error("the forget-gate weights and every recurrent weight of a present gate are required")
    n_cell = ctx.shape(wf)[0]
    code = int(ctx.opt(o, "FusedActivationFunction", 4))

    def act(v: Expr) -> Expr:
        return activation(ctx, v, code)

    cell_clip = float(ctx.opt(o, "CellClip", 0.0))
    proj_clip = float(ctx.opt(o, "ProjClip", 0.0))
    w_cat = K.concatenate([w[g] for g in gates], axis=0)
    r_cat = K.concatenate([r[g] for g in gates], axis=0)
    zeros = _const(np.zeros(n_cell, np.float32), "float32")
    b_cat = K.concatenate([bias[g] or zeros for g in gates], axis=0)
    xp = ew.add(nn.dense(K.reshape(x, (steps * batch, n_in)), w_cat), b_cat)
    xp = K.reshape(xp, (steps, batch, len(gates) * n_cell))
    h, c = ctx.input(18), ctx.input(19)
    proj_w, proj_b = opt_in(16), opt_in(17)
    one = _const(1.0, "float32")
    outs = []
    for t in range(steps):
        z = ew.add(_step(ctx, xp, t, (batch, len(gates) * n_cell)), nn.dense(h, r_cat))
        parts = dict(zip(gates, _split_sizes(ctx, z, 1, [n_cell] * len(gates))))

        def gate(g: str, cell: Expr, parts: dict[str, Expr] = parts) -> Expr:
            pre = parts[g]
            p = peep.get(g)
            return ew.sigmoid(pre if p is None else ew.add(pre, ew.multiply(p, cell)))

        f = gate("f", c)
        i = ew.subtract(one, f) if cifg else gate("i", c)
        c = ew.add(ew.multiply(f, c), ew.multiply(i, act(parts["c"])))
        if cell_clip > 0:
            c = ew.clip(c, -cell_clip, cell_clip)
        h = ew.multiply(gate("o", c), act(c))
        if proj_w is not None:
            h = nn.dense(h, proj_w)
            if proj_b is not None:
                h = ew.add(h, proj_b)
            if proj_clip > 0:
                h = ew.clip(h, -proj_clip, proj_clip)
        outs.append(h)
    y = K.stack(outs, axis=0)
    return y if time_major else K.transpose(y, [1, 0, 2])
