"""CoreML NeuralNetwork layer converters: one function per ``NeuralNetworkLayer`` kind.

Each converter takes the import state (:class:`kiln.frontend.coreml._Importer`), the layer's
parameter message and its input expressions, and returns the layer's output expression(s).
Tensors are NCHW (CoreML's rank-5 ``[Seq, Batch, C, H, W]`` blobs without the sequence axis, as
TVM does); the newer ND layers (``*Broadcastable``, ``softmaxND``, ``reshapeStatic``, ...) work on
the exact shapes. The semantics follow the comments of CoreML's ``NeuralNetwork.proto``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import kiln.op as K
from kiln.errors import FrontendError
from kiln.ir.expr import Expr, const

__all__ = ["CHECKS", "LAYERS", "matmul", "weight_array"]

Converter = Callable[[Any, Any, list[Expr]], "Expr | list[Expr]"]
LAYERS: dict[str, Converter] = {}
# optional attribute checks run before conversion: a non-empty string is the unsupported detail
CHECKS: dict[str, Callable[[Any], str]] = {}


def layer(*kinds: str, check: Callable[[Any], str] | None = None) -> Callable[[Converter], Converter]:
    """Register a converter for the ``NeuralNetworkLayer`` oneof fields ``kinds``."""
    def deco(fn: Converter) -> Converter:
        for k in kinds:
            LAYERS[k] = fn
            if check is not None:
                CHECKS[k] = check
        return fn
    return deco


# --- weights and small helpers -----------------------------------------------------------------

def weight_array(wp: Any, shape: Sequence[int] | None = None, what: str = "weights") -> np.ndarray:
    """A ``WeightParams`` message as a float32 array (float32 or float16 storage)."""
    if wp.floatValue:
        arr = np.asarray(wp.floatValue, dtype=np.float32)
    elif wp.float16Value:
        arr = np.frombuffer(wp.float16Value, dtype=np.float16).astype(np.float32)
    elif wp.rawValue:
        arr = np.frombuffer(wp.rawValue, dtype=np.float32).copy()
    elif wp.HasField("quantization") or wp.int8RawValue:
        raise FrontendError(f"quantized {what} are not supported by the CoreML importer")
    else:
        arr = np.zeros(0, dtype=np.float32)
    if shape is not None:
        size = int(np.prod(shape))
        if arr.size != size:
            raise FrontendError(f"{what} hold {arr.size} values, expected {size} for shape {list(shape)}")
        arr = arr.reshape(tuple(int(d) for d in shape))
    return arr


def _f(v: float) -> Expr:
    return const(np.float32(v))


def _w(imp: Any, wp: Any, shape: Sequence[int] | None, what: str) -> Expr:
    arr = weight_array(wp, shape, f"{what} of layer {imp.layer_name!r}")
    return imp.constant(f"{imp.layer_name}.{what}", arr)


def _rank(imp: Any, x: Expr) -> int:
    return len(imp.shape_of(x))


def _caxis(imp: Any, x: Expr) -> int:
    """CoreML's channel axis (-3 for rank >= 3 blobs, the last axis of a vector batch)."""
    return -3 if _rank(imp, x) >= 3 else -1


def _chw(values: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """A ``[1]``/``[C]``/``[1,H,W]``/``[C,H,W]`` CoreML parameter shaped to broadcast on NCHW."""
    shape = [int(d) for d in shape] or [values.size]
    if len(shape) == 1:
        shape = [shape[0], 1, 1] if shape[0] != 1 else [1]
    return values.reshape(shape)


def _fold(op: Callable[[Expr, Expr], Expr], xs: list[Expr]) -> Expr:
    out = xs[0]
    for x in xs[1:]:
        out = op(out, x)
    return out


def _pad_amounts(border: Any) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) of a ``BorderAmounts`` message ([H, W] edge sizes)."""
    b = list(border.borderAmounts)
    if not b:
        return (0, 0, 0, 0)
    return (int(b[0].startEdgeSize), int(b[1].startEdgeSize), int(b[0].endEdgeSize), int(b[1].endEdgeSize))


def same_pad(size: int, kernel: int, stride: int, top_left_heavy: bool = False) -> tuple[int, int]:
    """SAME padding (output ``ceil(size / stride)``); the extra pixel goes bottom-right by default."""
    out = -(-size // stride)
    pad = max(0, (out - 1) * stride + kernel - size)
    small, big = pad // 2, pad - pad // 2
    return (big, small) if top_left_heavy else (small, big)


# --- convolution, pooling, dense ---------------------------------------------------------------

def _check_conv(p: Any) -> str:
    if p.WhichOneof("ConvolutionPaddingType") not in ("valid", "same"):
        return "padding type must be valid or same"
    return ""


@layer("convolution", check=_check_conv)
def _convolution(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    h, w = imp.shape_of(x)[-2:]
    ks = [int(k) for k in p.kernelSize] or [3, 3]
    st = [int(s) for s in p.stride] or [1, 1]
    dil = [int(d) for d in p.dilationFactor] or [1, 1]
    groups = int(p.nGroups) or 1
    cout = int(p.outputChannels)
    if p.isDeconvolution:
        wt = _w(imp, p.weights, [int(p.kernelChannels), cout // groups, *ks], "weights")
        full = [(h - 1) * st[0] + ks[0], (w - 1) * st[1] + ks[1]]
        if p.outputShape:
            target = [int(d) for d in p.outputShape]
        elif p.WhichOneof("ConvolutionPaddingType") == "same":
            target = [h * st[0], w * st[1]]
        else:
            t, left, b, r = _pad_amounts(p.valid.paddingAmounts)
            target = [full[0] - t - b, full[1] - left - r]
        # crop the full transposed convolution to the target size (extra goes bottom/right)
        crop = [full[i] - target[i] for i in range(2)]
        if min(crop) < 0:
            extra = [max(0, -d) for d in crop]
            crop = [max(0, d) for d in crop]
        else:
            extra = [0, 0]
        pad = (crop[0] // 2, crop[1] // 2, crop[0] - crop[0] // 2, crop[1] - crop[1] // 2)
        out = K.conv.conv2d_transpose(x, wt, strides=st, padding=pad, groups=groups, channels=cout,
                                    kernel_size=ks, kernel_layout="IOHW", output_padding=extra)
    else:
        if len(xs) > 1:
            wt = xs[1]
        else:
            wt = _w(imp, p.weights, [cout, int(p.kernelChannels), *ks], "weights")
        eff = [(ks[i] - 1) * dil[i] + 1 for i in range(2)]
        if p.WhichOneof("ConvolutionPaddingType") == "same":
            tlh = p.same.asymmetryMode == p.same.TOP_LEFT_HEAVY
            pt, pb = same_pad(h, eff[0], st[0], tlh)
            pl, pr = same_pad(w, eff[1], st[1], tlh)
            pad = (pt, pl, pb, pr)
        else:
            pad = _pad_amounts(p.valid.paddingAmounts)
        out = K.conv.conv2d(x, wt, strides=st, padding=pad, dilation=dil, groups=groups,
                          channels=cout, kernel_size=ks)
    if p.hasBias:
        out = K.nn.bias_add(out, _w(imp, p.bias, [cout], "bias"))
    return out


def _check_pool(p: Any) -> str:
    if p.type == p.L2:
        return "L2 pooling"
    return ""


@layer("pooling", check=_check_pool)
def _pooling(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    is_max = p.type == p.MAX
    if p.globalPooling:
        return K.pool.global_max_pool2d(x) if is_max else K.pool.global_avg_pool2d(x)
    _, _, h, w = imp.shape_of(x)
    ks = [int(k) for k in p.kernelSize] or [3, 3]
    st = [int(s) for s in p.stride] or [1, 1]
    kind = p.WhichOneof("PoolingPaddingType") or "valid"
    if kind == "valid":
        pad = _pad_amounts(p.valid.paddingAmounts)
    elif kind == "same":
        tlh = p.same.asymmetryMode == p.same.TOP_LEFT_HEAVY
        pt, pb = same_pad(h, ks[0], st[0], tlh)
        pl, pr = same_pad(w, ks[1], st[1], tlh)
        pad = (pt, pl, pb, pr)
    else:  # includeLastPixel: symmetric padding, the last window starts inside the padded input
        amounts = [int(a) for a in p.includeLastPixel.paddingAmounts] or [0, 0]
        extra = []
        for size, k, s, a in ((h, ks[0], st[0], amounts[0]), (w, ks[1], st[1], amounts[1])):
            out = math.ceil((size + 2 * a - k) / s) + 1
            if a > 0 and (out - 1) * s >= size + a:
                out -= 1
            extra.append(max(0, (out - 1) * s + k - (size + 2 * a)))
        if not is_max and not p.avgPoolExcludePadding and any(amounts):
            # the symmetric padding counts in the average, the overflow of the last window does not
            x = K.nn.pad(x, [(0, 0), (0, 0), (amounts[0], amounts[0]), (amounts[1], amounts[1])])
            return K.pool.avg_pool2d(x, pool_size=ks, strides=st, padding=(0, 0, extra[0], extra[1]),
                                   count_include_pad=False)
        pad = (amounts[0], amounts[1], amounts[0] + extra[0], amounts[1] + extra[1])
    if is_max:
        return K.pool.max_pool2d(x, pool_size=ks, strides=st, padding=pad)
    return K.pool.avg_pool2d(x, pool_size=ks, strides=st, padding=pad,
                           count_include_pad=not p.avgPoolExcludePadding)


@layer("innerProduct")
def _inner_product(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    if _rank(imp, x) != 2:
        x = K.nn.batch_flatten(x)
    units = int(p.outputChannels)
    out = K.nn.dense(x, _w(imp, p.weights, [units, int(p.inputChannels)], "weights"), units=units)
    if p.hasBias:
        out = K.nn.bias_add(out, _w(imp, p.bias, [units], "bias"), axis=-1)
    return out


def matmul(imp: Any, a: Expr, b: Expr) -> Expr:
    """NumPy ``a @ b`` for operands of rank >= 2 (batch dims broadcast)."""
    sa, sb = imp.shape_of(a), imp.shape_of(b)
    if len(sb) == 2:
        return K.nn.matmul(a, b)
    batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    a = K.broadcast_to(a, [*batch, *sa[-2:]]) if sa[:-2] != batch else a
    b = K.broadcast_to(b, [*batch, *sb[-2:]]) if sb[:-2] != batch else b
    size = int(np.prod(batch, dtype=np.int64))
    out = K.nn.batch_matmul(K.reshape(a, [size, *sa[-2:]]), K.reshape(b, [size, *sb[-2:]]),
                            transpose_b=False)
    return K.reshape(out, [*batch, sa[-2], sb[-1]])


def _swap_last(imp: Any, x: Expr) -> Expr:
    r = _rank(imp, x)
    return K.transpose(x, [*range(r - 2), r - 1, r - 2])


@layer("batchedMatmul")
def _batched_matmul(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    a = xs[0]
    if len(xs) > 1:
        b = xs[1]
        ra, rb = _rank(imp, a), _rank(imp, b)
        if ra == 1:
            a = K.expand_dims(a, 0)
        if rb == 1:
            b = K.expand_dims(b, 1)
        if p.transposeA:
            a = _swap_last(imp, a)
        if p.transposeB:
            b = _swap_last(imp, b)
        out = matmul(imp, a, b)
        if ra == 1:
            out = K.squeeze(out, [-2])
        if rb == 1:
            out = K.squeeze(out, [-1])
        return out
    if p.transposeA:
        a = _swap_last(imp, a)
    k, units = int(p.weightMatrixFirstDimension), int(p.weightMatrixSecondDimension)
    # [X1, X2] stored column-major
    wt = np.ascontiguousarray(weight_array(p.weights, [units, k], f"weights of layer {imp.layer_name!r}").T)
    out = K.nn.matmul(a, imp.constant(f"{imp.layer_name}.weights", wt))
    if p.hasBias:
        out = K.add(out, _w(imp, p.bias, [units], "bias"))
    return out


# --- normalisation -----------------------------------------------------------------------------

@layer("batchnorm")
def _batchnorm(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    c = int(p.channels)
    eps = float(p.epsilon) or 1e-5
    gamma, beta = _w(imp, p.gamma, [c], "gamma"), _w(imp, p.beta, [c], "beta")
    axis = _rank(imp, x) - 3 if _rank(imp, x) >= 3 else 1
    mean: Expr
    var: Expr
    if p.computeMeanVar:
        if p.instanceNormalization:
            return K.nn.instance_norm(x, gamma, beta, axis=axis, epsilon=eps)
        mean = K.mean(x, axis=[i for i in range(_rank(imp, x)) if i != axis], keepdims=True)
        var = K.mean(K.multiply(K.subtract(x, mean), K.subtract(x, mean)),
                     axis=[i for i in range(_rank(imp, x)) if i != axis], keepdims=True)
        shape = [c] + [1] * (_rank(imp, x) - axis - 1)
        norm = K.divide(K.subtract(x, mean), K.sqrt(K.add(var, _f(eps))))
        return K.add(K.multiply(norm, K.reshape(gamma, shape)), K.reshape(beta, shape))
    mean, var = _w(imp, p.mean, [c], "mean"), _w(imp, p.variance, [c], "variance")
    return K.nn.batch_norm(x, gamma, beta, mean, var, axis=axis, epsilon=eps)[0]


@layer("l2normalize")
def _l2normalize(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    eps = float(p.epsilon) or 1e-6
    axes = [-3, -2, -1] if _rank(imp, x) >= 3 else [-1]
    # x / sqrt(sum(x^2) + eps) over C, H, W
    norm = K.sqrt(K.add(K.sum(K.multiply(x, x), axis=axes, keepdims=True), _f(eps)))
    return K.divide(x, norm)


@layer("lrn")
def _lrn(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    return K.nn.lrn(x, size=int(p.localSize), axis=_rank(imp, x) - 3, bias=float(p.k) or 1.0,
                    alpha=float(p.alpha), beta=float(p.beta))


@layer("mvn")
def _mvn(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    axes = [-3, -2, -1] if p.acrossChannels else [-2, -1]
    out = K.subtract(x, K.mean(x, axis=axes, keepdims=True))
    if p.normalizeVariance:
        var = K.mean(K.multiply(out, out), axis=axes, keepdims=True)
        out = K.divide(out, K.add(K.sqrt(var), _f(float(p.epsilon) or 1e-6)))
    return out


@layer("layerNormalization")
def _layer_norm(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    shape = [int(d) for d in p.normalizedShape]
    axes = list(range(-len(shape), 0))
    mean = K.mean(x, axis=axes, keepdims=True)
    cent = K.subtract(x, mean)
    var = K.mean(K.multiply(cent, cent), axis=axes, keepdims=True)
    out = K.divide(cent, K.sqrt(K.add(var, _f(float(p.eps)))))
    out = K.multiply(out, _w(imp, p.gamma, shape, "gamma"))
    return K.add(out, _w(imp, p.beta, shape, "beta"))


@layer("softmax")
def _softmax(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.nn.softmax(xs[0], axis=_caxis(imp, xs[0]))


@layer("softmaxND")
def _softmax_nd(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.nn.softmax(xs[0], axis=int(p.axis))


# --- activations -------------------------------------------------------------------------------

_ACTIVATIONS = ("linear", "ReLU", "leakyReLU", "thresholdedReLU", "PReLU", "tanh", "scaledTanh",
                "sigmoid", "sigmoidHard", "ELU", "softsign", "softplus", "parametricSoftplus")


def _check_activation(p: Any) -> str:
    kind = p.WhichOneof("NonlinearityType")
    return "" if kind in _ACTIVATIONS else f"activation {kind}"


def activation(imp: Any, p: Any, x: Expr) -> Expr:
    """The ``ActivationParams`` nonlinearity applied to ``x``."""
    kind = p.WhichOneof("NonlinearityType")
    a = getattr(p, kind)
    if kind == "linear":
        return K.add(K.multiply(x, _f(a.alpha)), _f(a.beta))
    if kind == "ReLU":
        return K.nn.relu(x)
    if kind == "leakyReLU":
        return K.nn.leaky_relu(x, alpha=float(a.alpha))
    if kind == "thresholdedReLU":
        return K.where(K.greater_equal(x, _f(a.alpha)), x, _f(0.0))
    if kind in ("PReLU", "parametricSoftplus"):
        c = imp.shape_of(x)[_caxis(imp, x)]
        shape = [c, 1, 1] if _rank(imp, x) >= 3 else [c]

        def per_channel(wp: Any, what: str) -> Expr:
            arr = weight_array(wp, None, f"{what} of layer {imp.layer_name!r}")
            return imp.constant(f"{imp.layer_name}.{what}",
                                arr.reshape(shape) if arr.size == c else arr.reshape([1] * len(shape)))
        if kind == "PReLU":
            return K.where(K.greater_equal(x, _f(0.0)), x, K.multiply(x, per_channel(a.alpha, "alpha")))
        alpha, beta = per_channel(a.alpha, "alpha"), per_channel(a.beta, "beta")
        return K.multiply(alpha, _softplus(K.multiply(beta, x)))
    if kind == "tanh":
        return K.tanh(x)
    if kind == "scaledTanh":
        return K.multiply(K.tanh(K.multiply(x, _f(a.beta))), _f(a.alpha))
    if kind == "sigmoid":
        return K.sigmoid(x)
    if kind == "sigmoidHard":
        return K.clip(K.add(K.multiply(x, _f(a.alpha)), _f(a.beta)), 0.0, 1.0)
    if kind == "ELU":
        return K.where(K.greater_equal(x, _f(0.0)), x,
                       K.multiply(K.subtract(K.exp(x), _f(1.0)), _f(a.alpha)))
    if kind == "softsign":
        return K.divide(x, K.add(K.abs(x), _f(1.0)))
    if kind == "softplus":
        return _softplus(x)
    raise FrontendError(f"layer {imp.layer_name!r}: activation {kind} is not supported")


def _softplus(x: Expr) -> Expr:
    # log(1 + e^x) = max(x, 0) + log(1 + e^-|x|), stable for large |x|
    return K.add(K.nn.relu(x), K.log(K.add(K.exp(K.negative(K.abs(x))), _f(1.0))))


@layer("activation", check=_check_activation)
def _activation(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return activation(imp, p, xs[0])


@layer("clip")
def _clip(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.clip(xs[0], float(p.minVal), float(p.maxVal))


@layer("clampedReLU")
def _clamped_relu(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    # min(beta, x if x >= 0 else alpha * x)
    return K.minimum(K.where(K.greater_equal(x, _f(0.0)), x, K.multiply(x, _f(p.alpha))), _f(p.beta))


@layer("gelu")
def _gelu(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    if p.mode == p.TANH_APPROXIMATION:
        inner = K.multiply(_f(math.sqrt(2 / math.pi)),
                           K.add(x, K.multiply(_f(0.044715), K.multiply(x, K.multiply(x, x)))))
        return K.multiply(K.multiply(_f(0.5), x), K.add(_f(1.0), K.tanh(inner)))
    if p.mode == p.SIGMOID_APPROXIMATION:
        return K.multiply(x, K.sigmoid(K.multiply(_f(1.702), x)))
    return K.multiply(K.multiply(_f(0.5), x), K.add(_f(1.0), K.erf(K.multiply(x, _f(1 / math.sqrt(2))))))


_UNARY = {"ceil": "ceil", "floor": "floor", "sign": "sign", "round": "round", "sin": "sin", "cos": "cos",
          "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh",
          "tanh": "tanh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "erf": "erf"}


def _simple_unary(name: str) -> Converter:
    def conv(imp: Any, p: Any, xs: list[Expr]) -> Expr:
        return getattr(K, name)(xs[0])
    return conv


for _kind, _fn in _UNARY.items():
    layer(_kind)(_simple_unary(_fn))


@layer("exp2")
def _exp2(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.power(_f(2.0), xs[0])


@layer("unary")
def _unary(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    scale = float(p.scale) or 1.0
    if scale != 1.0 or p.shift:
        x = K.add(K.multiply(x, _f(scale)), _f(p.shift))  # x <- scale * x + shift
    eps = float(p.epsilon) or 1e-6
    t = p.type
    if t == p.SQRT:
        return K.sqrt(x)
    if t == p.RSQRT:
        return K.rsqrt(K.add(x, _f(eps)))
    if t == p.INVERSE:
        return K.divide(_f(1.0), K.add(x, _f(eps)))
    if t == p.POWER:
        return K.power(x, _f(p.alpha))
    if t == p.EXP:
        return K.exp(x)
    if t == p.LOG:
        return K.log(x)
    if t == p.ABS:
        return K.abs(x)
    return K.maximum(x, _f(p.alpha))  # THRESHOLD


# --- elementwise -------------------------------------------------------------------------------

@layer("add")
def _add(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return _fold(K.add, xs) if len(xs) > 1 else K.add(xs[0], _f(p.alpha))


@layer("multiply")
def _multiply(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return _fold(K.multiply, xs) if len(xs) > 1 else K.multiply(xs[0], _f(p.alpha))


@layer("average")
def _average(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.divide(_fold(K.add, xs), _f(len(xs)))


@layer("max")
def _max(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return _fold(K.maximum, xs)


@layer("min")
def _min(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return _fold(K.minimum, xs)


_BROADCAST = {"addBroadcastable": "add", "subtractBroadcastable": "subtract",
              "multiplyBroadcastable": "multiply", "divideBroadcastable": "divide",
              "maxBroadcastable": "maximum", "minBroadcastable": "minimum", "powBroadcastable": "power",
              "floorDivBroadcastable": "floor_divide", "modBroadcastable": "floor_mod"}
_COMPARE = {"equal": "equal", "notEqual": "not_equal", "lessThan": "less", "lessEqual": "less_equal",
            "greaterThan": "greater", "greaterEqual": "greater_equal", "logicalAnd": "logical_and",
            "logicalOr": "logical_or", "logicalXor": "logical_xor"}


def _binary(name: str, boolean: bool) -> Converter:
    def conv(imp: Any, p: Any, xs: list[Expr]) -> Expr:
        if len(xs) == 1:  # comparisons with one input use the layer's alpha
            xs = [xs[0], _f(p.alpha)]
        a, b = xs
        if name.startswith("logical_"):
            a, b = K.not_equal(a, _f(0.0)), K.not_equal(b, _f(0.0))
        out = getattr(K, name)(a, b)
        return K.cast(out, "float32") if boolean else out
    return conv


for _kind, _fn in _BROADCAST.items():
    layer(_kind)(_binary(_fn, False))
for _kind, _fn in _COMPARE.items():
    layer(_kind)(_binary(_fn, True))


@layer("logicalNot")
def _logical_not(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.cast(K.equal(xs[0], _f(0.0)), "float32")


@layer("whereBroadcastable")
def _where(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.where(K.not_equal(xs[0], _f(0.0)), xs[1], xs[2])


@layer("scale")
def _scale(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    scale = weight_array(p.scale, None, f"scale of layer {imp.layer_name!r}")
    out = K.multiply(xs[0], imp.constant(f"{imp.layer_name}.scale", _chw(scale, p.shapeScale)))
    if p.hasBias:
        bias = weight_array(p.bias, None, f"bias of layer {imp.layer_name!r}")
        out = K.add(out, imp.constant(f"{imp.layer_name}.bias", _chw(bias, p.shapeBias)))
    return out


@layer("bias")
def _bias(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    bias = weight_array(p.bias, None, f"bias of layer {imp.layer_name!r}")
    return K.add(xs[0], imp.constant(f"{imp.layer_name}.bias", _chw(bias, p.shape)))


# --- reductions --------------------------------------------------------------------------------

@layer("reduce")
def _reduce(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    axes = {p.CHW: [-3, -2, -1], p.HW: [-2, -1], p.C: [-3], p.H: [-2], p.W: [-1]}[p.axis]
    m, eps = p.mode, float(p.epsilon) or 1e-6
    if m == p.ARGMAX:
        return K.cast(K.argmax(x, axis=axes, keepdims=True), "float32")
    return _reduce_mode({p.SUM: "sum", p.AVG: "mean", p.PROD: "prod", p.LOGSUM: "logsum",
                         p.SUMSQUARE: "sumsquare", p.L1: "l1", p.L2: "l2", p.MAX: "max",
                         p.MIN: "min"}[m], x, axes, True, eps)


def _reduce_mode(mode: str, x: Expr, axes: list[int] | None, keep: bool, eps: float = 0.0) -> Expr:
    if mode in ("sum", "mean", "prod", "max", "min"):
        return getattr(K, mode)(x, axis=axes, keepdims=keep)
    if mode == "logsum":
        return K.log(K.sum(K.add(x, _f(eps)) if eps else x, axis=axes, keepdims=keep))
    if mode == "sumsquare":
        return K.sum(K.multiply(x, x), axis=axes, keepdims=keep)
    if mode == "l1":
        return K.sum(K.abs(x), axis=axes, keepdims=keep)
    if mode == "l2":
        return K.sqrt(K.sum(K.multiply(x, x), axis=axes, keepdims=keep))
    return K.logsumexp(x, axis=axes, keepdims=keep)  # logsumexp


def _reduce_nd(mode: str) -> Converter:
    def conv(imp: Any, p: Any, xs: list[Expr]) -> Expr:
        axes = None if p.reduceAll else [int(a) for a in p.axes]
        return _reduce_mode(mode, xs[0], axes, bool(p.keepDims))
    return conv


for _kind, _mode in {"reduceSum": "sum", "reduceMean": "mean", "reduceProd": "prod", "reduceMax": "max",
                     "reduceMin": "min", "reduceL1": "l1", "reduceL2": "l2", "reduceLogSum": "logsum",
                     "reduceSumSquare": "sumsquare", "reduceLogSumExp": "logsumexp"}.items():
    layer(_kind)(_reduce_nd(_mode))


@layer("argMax", "argMin")
def _arg(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    fn = K.argmax if type(p).__name__ == "ArgMaxLayerParams" else K.argmin
    out = fn(xs[0], axis=[int(p.axis)], keepdims=not p.removeDim)
    return K.cast(out, "float32")


# --- shape manipulation ------------------------------------------------------------------------

@layer("flatten")
def _flatten(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    if p.mode == p.CHANNEL_LAST and _rank(imp, x) == 4:
        x = K.transpose(x, [0, 2, 3, 1])
    return K.nn.batch_flatten(x)


@layer("flattenTo2D")
def _flatten_2d(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    shape = imp.shape_of(xs[0])
    axis = int(p.axis) % (len(shape) + 1) if p.axis >= 0 else int(p.axis) + len(shape)
    lead = int(np.prod(shape[:axis], dtype=np.int64))
    return K.reshape(xs[0], [lead, int(np.prod(shape[axis:], dtype=np.int64))])


@layer("reshape")
def _reshape(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    n = imp.shape_of(x)[0]
    target = [int(d) for d in p.targetShape]
    if len(target) == 4:
        if target[0] != 1:
            raise FrontendError(f"layer {imp.layer_name!r}: reshape to a sequence length {target[0]} != 1")
        target = target[1:]
    if p.mode == p.CHANNEL_LAST and _rank(imp, x) == 4:
        out = K.reshape(K.transpose(x, [0, 2, 3, 1]), [n, target[1], target[2], target[0]])
        return K.transpose(out, [0, 3, 1, 2])
    return K.reshape(x, [n, *target])


@layer("reshapeStatic")
def _reshape_static(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.reshape(xs[0], [int(d) for d in p.targetShape])


@layer("rankPreservingReshape")
def _rank_reshape(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.reshape(xs[0], [int(d) for d in p.targetShape])


@layer("permute")
def _permute(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.transpose(xs[0], [int(a) for a in p.axis])


@layer("transpose")
def _transpose(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.transpose(xs[0], [int(a) for a in p.axes])


@layer("squeeze")
def _squeeze(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    if p.squeezeAll:
        return K.squeeze(xs[0])
    return K.squeeze(xs[0], [int(a) for a in p.axes])


@layer("expandDims")
def _expand_dims(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    rank = _rank(imp, xs[0]) + len(p.axes)
    shape = list(imp.shape_of(xs[0]))
    for a in sorted(int(a) % rank for a in p.axes):
        shape.insert(a, 1)
    return K.reshape(xs[0], shape)


def _check_concat(p: Any) -> str:
    return "sequenceConcat" if p.sequenceConcat else ""


@layer("concat", check=_check_concat)
def _concat(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.concatenate(xs, axis=_caxis(imp, xs[0]))


@layer("concatND")
def _concat_nd(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.concatenate(xs, axis=int(p.axis))


@layer("split")
def _split(imp: Any, p: Any, xs: list[Expr]) -> list[Expr]:
    parts = K.split(xs[0], int(p.nOutputs), axis=_caxis(imp, xs[0]))
    return [parts[i] for i in range(int(p.nOutputs))]


@layer("splitND")
def _split_nd(imp: Any, p: Any, xs: list[Expr]) -> list[Expr]:
    axis = int(p.axis)
    if p.splitSizes:
        idx = list(np.cumsum([int(s) for s in p.splitSizes])[:-1])
        n = len(p.splitSizes)
        parts = K.split(xs[0], [int(i) for i in idx], axis=axis)
    else:
        n = int(p.numSplits)
        parts = K.split(xs[0], n, axis=axis)
    return [parts[i] for i in range(n)]


@layer("slice")
def _slice(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    axis = {p.CHANNEL_AXIS: -3, p.HEIGHT_AXIS: -2, p.WIDTH_AXIS: -1}[p.axis] % _rank(imp, x)
    size = imp.shape_of(x)[axis]
    end = int(p.endIndex)
    end = end if end > 0 else size + end
    return K.strided_slice(x, [int(p.startIndex)], [end], [int(p.stride) or 1], axes=[axis])


@layer("sliceStatic")
def _slice_static(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    shape = imp.shape_of(x)
    begin, end, strides = [], [], []
    for i, size in enumerate(shape):
        s = int(p.strides[i]) if p.strides else 1
        b = 0 if p.beginMasks and p.beginMasks[i] else int(p.beginIds[i])
        e = int(p.endIds[i])
        if p.endMasks and p.endMasks[i]:
            e = size if s > 0 else -size - 1
        begin.append(b)
        end.append(e)
        strides.append(s)
    out = K.strided_slice(x, begin, end, strides)
    squeeze = [i for i, m in enumerate(p.squeezeMasks) if m]
    return K.squeeze(out, squeeze) if squeeze else out


@layer("padding")
def _padding(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    t, left, b, r = _pad_amounts(p.paddingAmounts)
    width = [(0, 0)] * (_rank(imp, x) - 2) + [(t, b), (left, r)]
    kind = p.WhichOneof("PaddingType")
    if kind == "constant":
        return K.nn.pad(x, width, pad_value=float(p.constant.value))
    return K.nn.pad(x, width, pad_mode="reflect" if kind == "reflection" else "edge")


def _check_constant_pad(p: Any) -> str:
    return "padToGivenOutputSizeMode" if p.padToGivenOutputSizeMode else ""


@layer("constantPad", check=_check_constant_pad)
def _constant_pad(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    rank = _rank(imp, x)
    amounts = [int(a) for a in p.padAmounts]
    k = len(amounts) // 2
    width = [(0, 0)] * (rank - k) + [(amounts[2 * i], amounts[2 * i + 1]) for i in range(k)]
    return K.nn.pad(x, width, pad_value=float(p.value))


@layer("crop")
def _crop(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    _, _, h, w = imp.shape_of(x)
    if len(xs) > 1:  # crop to the second input's size at the given offset
        _, _, th, tw = imp.shape_of(xs[1])
        oy, ox = [int(o) for o in p.offset] or [0, 0]
        return K.strided_slice(x, [oy, ox], [oy + th, ox + tw], axes=[2, 3])
    t, left, b, r = _pad_amounts(p.cropAmounts)
    return K.strided_slice(x, [t, left], [h - b, w - r], axes=[2, 3])


@layer("reorganizeData")
def _reorganize(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    bs = int(p.blockSize)
    if p.mode == p.SPACE_TO_DEPTH:
        return K.nn.space_to_depth(xs[0], bs)
    if p.mode == p.DEPTH_TO_SPACE:
        return K.nn.depth_to_space(xs[0], bs, mode="DCR")
    return K.nn.depth_to_space(xs[0], bs, mode="CRD")  # PIXEL_SHUFFLE


@layer("tile")
def _tile(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.tile(xs[0], [int(r) for r in p.reps])


@layer("stack")
def _stack(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.stack(xs, axis=int(p.axis))


@layer("gather")
def _gather(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.take(xs[0], K.cast(xs[1], "int32"), axis=int(p.axis))


@layer("cumSum")
def _cumsum(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x, axis = xs[0], int(p.axis)
    if p.reverse:
        x = K.reverse(x, axis)
    out = K.cumsum(x, axis=axis, exclusive=bool(p.excludeFinalSum))
    return K.reverse(out, axis) if p.reverse else out


@layer("loadConstant")
def _load_constant(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    shape = [int(d) for d in p.shape]
    return _w(imp, p.data, [1, *shape] if len(shape) == 3 else shape, "data")


@layer("loadConstantND")
def _load_constant_nd(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return _w(imp, p.data, [int(d) for d in p.shape], "data")


@layer("copy")
def _copy(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    return K.copy(xs[0])


# --- resampling --------------------------------------------------------------------------------

def linear_matrix(size_in: int, size_out: int, grid: np.ndarray) -> np.ndarray:
    """The ``[size_out, size_in]`` linear-interpolation matrix sampling at ``grid`` (input coords)."""
    grid = np.clip(grid, 0, size_in - 1)
    lo = np.floor(grid).astype(np.int64)
    hi = np.minimum(lo + 1, size_in - 1)
    frac = grid - lo
    m = np.zeros((size_out, size_in), dtype=np.float64)
    m[np.arange(size_out), lo] += 1 - frac
    m[np.arange(size_out), hi] += frac
    return m.astype(np.float32)


def resize_linear(imp: Any, x: Expr, mh: np.ndarray, mw: np.ndarray) -> Expr:
    """``mh @ x @ mw.T`` over the last two axes of NCHW ``x`` (separable linear resampling)."""
    n, c, h, w = imp.shape_of(x)
    oh, ow = mh.shape[0], mw.shape[0]
    y = K.nn.dense(K.reshape(x, [n * c * h, w]), imp.constant(f"{imp.layer_name}.resize_w", mw))
    y = K.transpose(K.reshape(y, [n, c, h, ow]), [0, 1, 3, 2])
    y = K.nn.dense(K.reshape(y, [n * c * ow, h]), imp.constant(f"{imp.layer_name}.resize_h", mh))
    return K.transpose(K.reshape(y, [n, c, ow, oh]), [0, 1, 3, 2])


@layer("upsample")
def _upsample(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    _, _, h, w = imp.shape_of(x)
    if p.fractionalScalingFactor:
        sh, sw = (float(s) for s in p.fractionalScalingFactor)
    else:
        sh, sw = (float(s) for s in p.scalingFactor) if p.scalingFactor else (1.0, 1.0)
    oh, ow = math.floor(h * sh), math.floor(w * sw)
    if p.mode == p.NN:
        return K.nn.upsampling(x, scale_h=int(sh), scale_w=int(sw), method="nearest_neighbor")

    def grid(size: int, out: int) -> np.ndarray:
        i = np.arange(out, dtype=np.float64)
        if p.linearUpsampleMode == p.ALIGN_CORNERS_TRUE:
            return i * ((size - 1) / (out - 1) if out > 1 else 0.0)
        if p.linearUpsampleMode == p.ALIGN_CORNERS_FALSE:
            s = size / out
            return i * s + 0.5 * s - 0.5
        return i * ((size - size / out) / (out - 1) if out > 1 else 0.0)  # DEFAULT
    return resize_linear(imp, x, linear_matrix(h, oh, grid(h, oh)), linear_matrix(w, ow, grid(w, ow)))


@layer("resizeBilinear")
def _resize_bilinear(imp: Any, p: Any, xs: list[Expr]) -> Expr:
    x = xs[0]
    _, _, h, w = imp.shape_of(x)
    oh, ow = [int(s) for s in p.targetSize] or [1, 1]
    mode = p.mode.samplingMethod

    def grid(size: int, out: int) -> np.ndarray:
        m = p.mode
        if mode == m.STRICT_ALIGN_ENDPOINTS_MODE:
            return np.linspace(0, size - 1, out)
        if mode == m.ALIGN_ENDPOINTS_MODE:
            return np.full(out, (size - 1) / 2) if out == 1 else np.linspace(0, size - 1, out)
        if mode == m.UPSAMPLE_MODE:
            return np.minimum(size - 1, np.linspace(0, size - size / out, out))
        # ROI_ALIGN_MODE: start = 0.5 * (X / N) - 0.5, end = X - 0.5 * (X / N) - 0.5 (linspace)
        return np.linspace(0.5 * size / out - 0.5, size - 0.5 * size / out - 0.5, out)
    return resize_linear(imp, x, linear_matrix(h, oh, grid(h, oh)), linear_matrix(w, ow, grid(w, ow)))


# --- recurrent ---------------------------------------------------------------------------------

_RNN_ACTS = ("linear", "sigmoid", "tanh", "ReLU", "scaledTanh", "sigmoidHard")


def _check_lstm(p: Any) -> str:
    acts = [*p.activations] if hasattr(p, "activations") else [
        *p.activationsForwardLSTM, *p.activationsBackwardLSTM]
    bad = [a.WhichOneof("NonlinearityType") for a in acts
           if a.WhichOneof("NonlinearityType") not in _RNN_ACTS]
    return f"activations {bad}" if bad else ""


def _lstm_direction(imp: Any, lp: Any, wp: Any, acts: Sequence[Any], seq: list[Expr], h: Expr,
                    c: Expr, hidden: int, inp: int, tag: str) -> tuple[list[Expr], Expr, Expr]:
    """Unrolled LSTM over ``seq`` (list of ``[B, I]``); returns outputs per step and final h, c."""
    def mat(field: str, shape: Sequence[int]) -> np.ndarray:
        return weight_array(getattr(wp, field), shape, f"{field} of layer {imp.layer_name!r}")
    gates = ("inputGate", "forgetGate", "blockInput", "outputGate")
    wx = np.concatenate([mat(f"{g}WeightMatrix", [hidden, inp]) for g in gates])
    wh = np.concatenate([mat(f"{g}RecursionMatrix", [hidden, hidden]) for g in gates])
    wx_c = imp.constant(f"{imp.layer_name}.{tag}W", wx)
    wh_c = imp.constant(f"{imp.layer_name}.{tag}R", wh)
    bias = np.zeros(4 * hidden, dtype=np.float32)
    if lp.hasBiasVectors:
        bias = np.concatenate([mat(f"{g}BiasVector", [hidden]) for g in gates])
    if lp.forgetBias:
        bias[hidden:2 * hidden] += 1.0
    b_c = imp.constant(f"{imp.layer_name}.{tag}b", bias)
    peep = None
    if lp.hasPeepholeVectors:
        peep = [imp.constant(f"{imp.layer_name}.{tag}p{g}", mat(f"{g}PeepholeVector", [hidden]))
                for g in ("inputGate", "forgetGate", "outputGate")]
    clip = float(lp.cellClipThreshold) or 50.0
    f_act, g_act, h_act = acts

    def act(a: Any, v: Expr) -> Expr:
        return activation(imp, a, K.clip(v, -50.0, 50.0))
    outs = []
    for x in seq:
        z = K.add(K.add(K.nn.dense(x, wx_c), K.nn.dense(h, wh_c)), b_c)
        parts = K.split(z, 4, axis=1)
        zi, zf, zz, zo = (parts[i] for i in range(4))
        if peep is not None:
            zi = K.add(zi, K.multiply(peep[0], c))
            zf = K.add(zf, K.multiply(peep[1], c))
        i_t, blk = act(f_act, zi), act(g_act, zz)
        if lp.coupledInputAndForgetGate:
            c = K.add(K.multiply(c, K.subtract(_f(1.0), i_t)), K.multiply(i_t, blk))
        else:
            c = K.add(K.multiply(c, act(f_act, zf)), K.multiply(i_t, blk))
        c = K.clip(c, -clip, clip)
        if peep is not None:
            zo = K.add(zo, K.multiply(peep[2], c))
        h = K.multiply(activation(imp, h_act, c), act(f_act, zo))
        outs.append(h)
    return outs, h, c


def _lstm_inputs(imp: Any, xs: list[Expr], hidden: int, n_states: int) -> tuple[list[Expr], list[Expr], int]:
    x = xs[0]
    shape = imp.shape_of(x)
    if len(shape) not in (3, 5) or (len(shape) == 5 and shape[3:] != (1, 1)):
        raise FrontendError(f"layer {imp.layer_name!r}: LSTM input must be [Seq, Batch, C, 1, 1] or "
                            f"[Seq, Batch, C], got {list(shape)} (pass shape= to from_coreml)")
    s, b, cin = shape[:3]
    x3 = K.reshape(x, [s, b, cin]) if len(shape) == 5 else x
    seq: list[Expr] = [K.reshape(K.strided_slice(x3, [t], [t + 1], axes=[0]), [b, cin]) for t in range(s)]
    states: list[Expr] = []
    for i in range(n_states):
        states.append(K.reshape(xs[1 + i], [b, hidden]) if len(xs) > 1 + i
                      else const(np.zeros((b, hidden), dtype=np.float32)))
    return seq, states, len(shape)


def _lstm_out(ys: list[Expr], rank: int, seq_out: bool) -> Expr:
    out = K.stack(ys if seq_out else ys[-1:], axis=0)
    return K.expand_dims(out, -1, num_newaxis=2) if rank == 5 else out


def _state(h: Expr, rank: int) -> Expr:
    out = K.expand_dims(h, 0)
    return K.expand_dims(out, -1, num_newaxis=2) if rank == 5 else out


@layer("uniDirectionalLSTM", check=_check_lstm)
def _uni_lstm(imp: Any, p: Any, xs: list[Expr]) -> list[Expr]:
    hidden, inp = int(p.outputVectorSize), int(p.inputVectorSize)
    seq, (h, c), rank = _lstm_inputs(imp, xs, hidden, 2)
    if p.reverseInput:
        seq = seq[::-1]
    ys, h, c = _lstm_direction(imp, p.params, p.weightParams, p.activations, seq, h, c, hidden, inp, "")
    if p.reverseInput:
        ys = ys[::-1]
    return [_lstm_out(ys, rank, p.params.sequenceOutput), _state(h, rank), _state(c, rank)]


@layer("biDirectionalLSTM", check=_check_lstm)
def _bi_lstm(imp: Any, p: Any, xs: list[Expr]) -> list[Expr]:
    hidden, inp = int(p.outputVectorSize), int(p.inputVectorSize)
    seq, (h, c, hb, cb), rank = _lstm_inputs(imp, xs, hidden, 4)
    fw, bw = p.weightParams
    ys, h, c = _lstm_direction(imp, p.params, fw, p.activationsForwardLSTM, seq, h, c, hidden, inp, "fw.")
    yb, hb, cb = _lstm_direction(imp, p.params, bw, p.activationsBackwardLSTM, seq[::-1], hb, cb,
                                 hidden, inp, "bw.")
    yb = yb[::-1]
    both: list[Expr] = [K.concatenate([f, b], axis=1) for f, b in zip(ys, yb)]
    if not p.params.sequenceOutput:
        both = [K.concatenate([ys[-1], yb[0]], axis=1)]
    return [_lstm_out(both, rank, True), _state(h, rank), _state(c, rank), _state(hb, rank),
            _state(cb, rank)]
