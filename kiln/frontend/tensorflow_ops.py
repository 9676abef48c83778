"""TensorFlow converters: one function per TF op kind, registered in :data:`CONVERTERS`.

A converter takes a :class:`NodeContext` and returns the node's outputs (relay expressions, or a
:class:`TensorList` for the ``TensorList*`` ops). The importer stamps the node name on the new
calls and folds constants afterwards. Shapes are static; values that decide shapes (a Reshape
target, StridedSlice bounds, reduction axes) are read with :meth:`NodeContext.const_input`.
Layouts stay as the model wrote them: NHWC convolutions use ``kernel_layout="HWIO"`` (depthwise:
``HWIO`` with ``groups`` = input channels), NCHW ones ``HWIO`` too (TF's filter layout).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import kiln.op as K
from kiln.errors import FrontendError, UnsupportedOpError
from kiln.frontend.common import require
from kiln.ir.expr import Constant, Expr
from kiln.ir.printer import format_type
from kiln.ir.types import np_dtype
from kiln.op import conv as _conv
from kiln.op import image as _image
from kiln.op import nn as _nn
from kiln.op import pool as _pool

__all__ = ["CONVERTERS", "MULTI_OUTPUT", "NodeContext", "StringConstant", "TensorList", "attr_value",
           "dtype_name"]

Converter = Callable[["NodeContext"], Sequence[Any]]
CONVERTERS: dict[str, Converter] = {}

# Ops whose node name, as an output, means all their outputs.
MULTI_OUTPUT = frozenset({"Split", "SplitV", "Unpack", "IdentityN", "TopKV2", "ShapeN"})

_DTYPES = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string",
           9: "int64", 10: "bool", 14: "bfloat16", 17: "uint16", 19: "float16", 20: "resource",
           21: "variant", 22: "uint32", 23: "uint64"}


def dtype_name(enum: int) -> str:
    """The dtype name of a TF ``DataType`` enum value."""
    if enum not in _DTYPES:
        raise FrontendError(f"TensorFlow dtype enum {enum} is not supported by Kiln")
    return _DTYPES[enum]


def attr_value(v: Any) -> Any:
    """A TF ``AttrValue`` as a Python value (str, int, float, bool, dtype name, shape list,
    ndarray, function name, or a list of those)."""
    kind = v.WhichOneof("value")
    if kind == "s":
        return v.s.decode("utf-8", errors="replace")
    if kind in ("i", "f", "b"):
        return getattr(v, kind)
    if kind == "type":
        return _DTYPES.get(v.type, str(v.type))
    if kind == "shape":
        return None if v.shape.unknown_rank else [int(d.size) for d in v.shape.dim]
    if kind == "tensor":
        tensor_util = require("tensorflow.python.framework.tensor_util", "tensorflow", "from_tensorflow")
        return np.array(tensor_util.MakeNdarray(v.tensor))
    if kind == "func":
        return v.func.name
    if kind == "list":
        lst = v.list
        if lst.i:
            return [int(i) for i in lst.i]
        if lst.f:
            return [float(f) for f in lst.f]
        if lst.s:
            return [s.decode("utf-8", errors="replace") for s in lst.s]
        if lst.b:
            return [bool(b) for b in lst.b]
        if lst.type:
            return [_DTYPES.get(t, str(t)) for t in lst.type]
        if lst.shape:
            return [None if s.unknown_rank else [int(d.size) for d in s.dim] for s in lst.shape]
        if lst.func:
            return [f.name for f in lst.func]
        return []
    return None


@dataclass
class TensorList:
    """A TF ``TensorList`` (a TensorArray) during the import: one expression per element."""

    items: list[Expr | None]
    element_shape: tuple[int, ...] | None
    dtype: str
    note: str = field(default="")


@dataclass
class StringConstant:
    """A string ``Const`` (an ``Assert`` message): Kiln computes nothing with strings."""

    name: str


_MISSING = object()


class NodeContext:
    """Everything a converter sees of one TF node."""

    def __init__(self, importer: Any, node: Any, name: str, inputs: list[Any], attrs: dict[str, Any]):
        self.importer = importer
        self.node = node
        self.op: str = node.op
        self.name = name
        self.inputs = inputs
        self.attrs = attrs

    def input(self, i: int) -> Expr:
        if i >= len(self.inputs):
            raise self.error(f"expected at least {i + 1} inputs, got {len(self.inputs)}")
        x = self.inputs[i]
        if isinstance(x, StringConstant):
            raise self.error(f"input {i} is the string constant {x.name!r}; Kiln takes strings only as "
                             "the image input of DecodeJpeg")
        if not isinstance(x, Expr):
            raise self.error(f"input {i} is a {type(x).__name__}, not a tensor")
        return x

    def attr(self, key: str, default: Any = _MISSING) -> Any:
        if key in self.attrs and self.attrs[key] is not None:
            return self.attrs[key]
        if default is _MISSING:
            raise self.error(f"attribute {key!r} is missing")
        return default

    def shape(self, x: Expr | int) -> tuple[int, ...]:
        return self.importer.shape_of(self.input(x) if isinstance(x, int) else x)

    def dtype(self, x: Expr | int) -> str:
        return self.importer.dtype_of(self.input(x) if isinstance(x, int) else x)

    def const_input(self, i: int, what: str = "") -> np.ndarray:
        x = self.input(i)
        value = self.importer.value_of(x)
        if value is None:
            deps = self.importer.inputs_of(x)
            raise self.error(f"{what or f'input {i}'} must be known at import, but it is computed from "
                             f"graph inputs {deps}")
        return np.asarray(value)

    def ints(self, i: int, what: str = "") -> list[int]:
        return [int(v) for v in self.const_input(i, what).reshape(-1)]

    def scalar(self, value: Any, like: Expr | str) -> Constant:
        dtype = like if isinstance(like, str) else self.dtype(like)
        return Constant(np.array(value, dtype=np_dtype(dtype)))

    def error(self, msg: str) -> FrontendError:
        return FrontendError(f"{self.op} node {self.name!r}: {msg}")

    def unsupported(self, detail: str) -> UnsupportedOpError:
        return UnsupportedOpError([(self.op, [self.name], detail)], framework="TensorFlow")

    def describe_inputs(self) -> str:
        parts = []
        for x in self.inputs:
            if isinstance(x, Expr):
                try:
                    parts.append(format_type(self.importer.type_of(x)))
                except Exception:
                    parts.append("?")
            else:
                parts.append(type(x).__name__)
        return "(" + ", ".join(parts) + ")"


def converter(*ops: str) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for op in ops:
            CONVERTERS[op] = fn
        return fn

    return register


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# --- elementwise ---------------------------------------------------------------------------

_UNARY: dict[str, Callable[[Expr], Expr]] = {
    "Relu": _nn.relu, "Sigmoid": K.sigmoid, "Tanh": K.tanh, "Exp": K.exp, "Log": K.log,
    "Neg": K.negative, "Abs": K.abs, "Sqrt": K.sqrt, "Rsqrt": K.rsqrt, "Erf": K.erf,
    "Floor": K.floor, "Ceil": K.ceil, "Sign": K.sign, "Sin": K.sin, "Cos": K.cos, "Tan": K.tan,
    "IsNan": K.isnan, "IsInf": K.isinf, "IsFinite": K.isfinite, "LogicalNot": K.logical_not,
    "Round": K.round, "Asin": K.asin, "Acos": K.acos, "Atan": K.atan, "Sinh": K.sinh, "Cosh": K.cosh,
}
_BINARY: dict[str, Callable[[Any, Any], Expr]] = {
    "Add": K.add, "AddV2": K.add, "Sub": K.subtract, "Mul": K.multiply, "RealDiv": K.divide,
    "Div": K.divide, "TruncateDiv": K.divide, "FloorDiv": K.floor_divide, "FloorMod": K.floor_mod,
    "Mod": K.mod, "Maximum": K.maximum, "Minimum": K.minimum, "Pow": K.power, "Less": K.less,
    "LessEqual": K.less_equal, "Greater": K.greater, "GreaterEqual": K.greater_equal,
    "Equal": K.equal, "NotEqual": K.not_equal, "LogicalAnd": K.logical_and, "LogicalOr": K.logical_or,
    "Atan2": K.atan2, "BitwiseAnd": K.bitwise_and, "BitwiseOr": K.bitwise_or,
}


def _unary(fn: Callable[[Expr], Expr]) -> Converter:
    return lambda ctx: [fn(ctx.input(0))]


def _binary(fn: Callable[[Any, Any], Expr]) -> Converter:
    return lambda ctx: [fn(ctx.input(0), ctx.input(1))]


for _uop, _ufn in _UNARY.items():
    CONVERTERS[_uop] = _unary(_ufn)
for _bop, _bfn in _BINARY.items():
    CONVERTERS[_bop] = _binary(_bfn)


@converter("Relu6")
def _relu6(ctx: NodeContext) -> list[Expr]:
    return [K.clip(ctx.input(0), 0.0, 6.0)]


@converter("LeakyRelu")
def _leaky_relu(ctx: NodeContext) -> list[Expr]:
    return [_nn.leaky_relu(ctx.input(0), alpha=float(ctx.attr("alpha", 0.2)))]


def _elu_core(ctx: NodeContext, x: Expr, alpha: float) -> Expr:
    neg = K.multiply(ctx.scalar(alpha, x), K.subtract(K.exp(x), ctx.scalar(1, x)))
    return K.where(K.greater(x, ctx.scalar(0, x)), x, neg)


@converter("Elu")
def _elu(ctx: NodeContext) -> list[Expr]:
    return [_elu_core(ctx, ctx.input(0), 1.0)]


@converter("Selu")
def _selu(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    return [K.multiply(ctx.scalar(1.0507009873554804934193349852946, x),
                       _elu_core(ctx, x, 1.6732632423543772848170429916717))]


@converter("Softplus")
def _softplus(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)  # max(x, 0) + log(1 + exp(-|x|)): no overflow for large |x|
    tail = K.log(K.add(ctx.scalar(1, x), K.exp(K.negative(K.abs(x)))))
    return [K.add(K.maximum(x, ctx.scalar(0, x)), tail)]


@converter("Softsign")
def _softsign(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    return [K.divide(x, K.add(ctx.scalar(1, x), K.abs(x)))]


@converter("Erfc")
def _erfc(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    return [K.subtract(ctx.scalar(1, x), K.erf(x))]


@converter("Square")
def _square(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    return [K.multiply(x, x)]


@converter("Reciprocal", "Inv")
def _reciprocal(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    return [K.divide(ctx.scalar(1, x), x)]


@converter("Log1p")
def _log1p(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    return [K.log(K.add(x, ctx.scalar(1, x)))]


@converter("Expm1")
def _expm1(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    return [K.subtract(K.exp(x), ctx.scalar(1, x))]


@converter("SquaredDifference")
def _squared_difference(ctx: NodeContext) -> list[Expr]:
    d = K.subtract(ctx.input(0), ctx.input(1))
    return [K.multiply(d, d)]


@converter("DivNoNan")
def _div_no_nan(ctx: NodeContext) -> list[Expr]:
    x, y = ctx.input(0), ctx.input(1)
    zero = ctx.scalar(0, y)
    safe = K.where(K.equal(y, zero), ctx.scalar(1, y), y)
    return [K.where(K.equal(y, zero), zero, K.divide(x, safe))]


@converter("AddN")
def _add_n(ctx: NodeContext) -> list[Expr]:
    out = ctx.input(0)
    for i in range(1, len(ctx.inputs)):
        out = K.add(out, ctx.input(i))
    return [out]


@converter("ClipByValue")
def _clip_by_value(ctx: NodeContext) -> list[Expr]:
    return [K.minimum(K.maximum(ctx.input(0), ctx.input(1)), ctx.input(2))]


@converter("Cast")
def _cast(ctx: NodeContext) -> list[Expr]:
    x, dst = ctx.input(0), ctx.attr("DstT")
    return [x if ctx.dtype(x) == dst else K.cast(x, dst)]


@converter("Select", "SelectV2")
def _select(ctx: NodeContext) -> list[Expr]:
    cond, x, y = ctx.input(0), ctx.input(1), ctx.input(2)
    cs, xs = ctx.shape(cond), ctx.shape(x)
    if ctx.op == "Select" and len(cs) == 1 and len(xs) > 1:
        cond = K.reshape(cond, [cs[0]] + [1] * (len(xs) - 1))  # a vector picks whole rows
    return [K.where(cond, x, y)]


@converter("ZerosLike")
def _zeros_like(ctx: NodeContext) -> list[Expr]:
    return [K.zeros_like(ctx.input(0))]


@converter("OnesLike")
def _ones_like(ctx: NodeContext) -> list[Expr]:
    return [K.ones_like(ctx.input(0))]


@converter("Identity", "StopGradient", "PreventGradient", "Snapshot", "CheckNumerics", "EnsureShape",
           "DecodeJpeg")
def _identity(ctx: NodeContext) -> list[Any]:
    # DecodeJpeg passes its input through, as in TVM: the decoded image is fed in place of the bytes.
    return [ctx.inputs[0]]


@converter("IdentityN")
def _identity_n(ctx: NodeContext) -> list[Any]:
    return list(ctx.inputs)


@converter("NoOp", "Assert")
def _no_op(ctx: NodeContext) -> list[Any]:
    return []


# --- nn ------------------------------------------------------------------------------------

def _spatial(values: Sequence[int], data_format: str) -> list[int]:
    return [int(v) for v in (values[1:3] if data_format.startswith("NH") else values[2:4])]


def _same_pads(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    dk = (kernel - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + dk - size, 0)
    return total // 2, total - total // 2


def _pads(ctx: NodeContext, in_hw: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
          dilations: Sequence[int], data_format: str) -> list[int]:
    """relay ``(top, left, bottom, right)`` padding from TF's ``padding`` attribute."""
    mode = ctx.attr("padding")
    if mode == "VALID":
        return [0, 0, 0, 0]
    if mode == "SAME":
        (t, b), (l, r) = (_same_pads(s, k, st, d) for s, k, st, d in zip(in_hw, kernel, strides, dilations))
        return [t, l, b, r]
    if mode == "EXPLICIT":
        ex = [int(v) for v in ctx.attr("explicit_paddings")]
        pairs = [ex[2 * i:2 * i + 2] for i in range(len(ex) // 2)]
        (t, b), (l, r) = (pairs[1], pairs[2]) if data_format.startswith("NH") else (pairs[2], pairs[3])
        return [t, l, b, r]
    raise ctx.unsupported(f"padding={mode!r}")


def _layout(ctx: NodeContext) -> str:
    fmt = ctx.attr("data_format", "NHWC")
    if fmt not in ("NHWC", "NCHW"):
        raise ctx.unsupported(f"data_format={fmt!r}")
    return fmt


@converter("Conv2D", "DepthwiseConv2dNative")
def _conv2d(ctx: NodeContext) -> list[Expr]:
    x, w = ctx.input(0), ctx.input(1)
    fmt = _layout(ctx)
    xs, ws = ctx.shape(x), ctx.shape(w)
    cin = xs[3] if fmt == "NHWC" else xs[1]
    kh, kw = ws[0], ws[1]
    strides = _spatial(ctx.attr("strides", [1, 1, 1, 1]), fmt)
    dilations = _spatial(ctx.attr("dilations", [1, 1, 1, 1]), fmt)
    pads = _pads(ctx, _spatial(xs, fmt), (kh, kw), strides, dilations, fmt)
    if ctx.op == "DepthwiseConv2dNative":
        # [kh, kw, in, multiplier] -> HWIO with groups = in: output channel c * multiplier + m
        w = K.reshape(w, [kh, kw, 1, ws[2] * ws[3]])
        groups, channels = cin, ws[2] * ws[3]
    else:
        if cin % ws[2]:
            raise ctx.error(f"input channels {cin} are not a multiple of the filter's {ws[2]}")
        groups, channels = cin // ws[2], ws[3]
    return [_conv.conv2d(x, w, strides=strides, padding=pads, dilation=dilations, groups=groups,
                         channels=channels, kernel_size=(kh, kw), data_layout=fmt, kernel_layout="HWIO")]


@converter("Conv2DBackpropInput")
def _conv2d_transpose(ctx: NodeContext) -> list[Expr]:
    sizes, w, x = ctx.ints(0, "input_sizes"), ctx.input(1), ctx.input(2)
    fmt = _layout(ctx)
    xs, ws = ctx.shape(x), ctx.shape(w)
    kh, kw = ws[0], ws[1]
    strides = _spatial(ctx.attr("strides", [1, 1, 1, 1]), fmt)
    dilations = _spatial(ctx.attr("dilations", [1, 1, 1, 1]), fmt)
    out_hw = _spatial(sizes, fmt)
    pads = _pads(ctx, out_hw, (kh, kw), strides, dilations, fmt)
    in_hw = _spatial(xs, fmt)
    out_pad = []
    for i in range(2):
        natural = (in_hw[i] - 1) * strides[i] + (ws[i] - 1) * dilations[i] + 1 - pads[i] - pads[i + 2]
        out_pad.append(out_hw[i] - natural)
    if any(p < 0 or p >= max(s, d) for p, s, d in zip(out_pad, strides, dilations)):
        raise ctx.error(f"input_sizes {sizes} cannot come out of a transposed convolution of {xs}")
    # TF's filter is [kh, kw, out_channels, in_channels] of the transposed conv: HWOI
    return [_conv.conv2d_transpose(x, w, strides=strides, padding=pads, dilation=dilations,
                                   channels=ws[2], kernel_size=(kh, kw), data_layout=fmt,
                                   kernel_layout="HWOI", output_padding=out_pad)]


@converter("BiasAdd", "BiasAddV1")
def _bias_add(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    axis = 1 if ctx.attr("data_format", "NHWC") == "NCHW" else len(ctx.shape(x)) - 1
    return [_nn.bias_add(x, ctx.input(1), axis=axis)]


@converter("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def _fused_batch_norm(ctx: NodeContext) -> list[Expr | None]:
    if ctx.attr("is_training", False):
        raise ctx.unsupported("is_training=True (Kiln imports inference graphs)")
    x = ctx.input(0)
    axis = 1 if _layout(ctx) == "NCHW" else 3
    mean, var = ctx.input(3), ctx.input(4)
    y = _nn.batch_norm(x, ctx.input(1), ctx.input(2), mean, var, axis=axis,
                       epsilon=float(ctx.attr("epsilon", 1e-4)))[0]
    return [y, mean, var, mean, var, None]


@converter("MaxPool", "AvgPool", "MaxPoolV2")
def _pool2d(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    fmt = _layout(ctx)
    if ctx.op == "MaxPoolV2":
        ksize, strides_all = ctx.ints(1, "ksize"), ctx.ints(2, "strides")
    else:
        ksize, strides_all = ctx.attr("ksize"), ctx.attr("strides")
    kernel, strides = _spatial(ksize, fmt), _spatial(strides_all, fmt)
    pads = _pads(ctx, _spatial(ctx.shape(x), fmt), kernel, strides, (1, 1), fmt)
    if ctx.op == "AvgPool":
        return [_pool.avg_pool2d(x, pool_size=kernel, strides=strides, padding=pads, layout=fmt,
                                 count_include_pad=False)]
    return [_pool.max_pool2d(x, pool_size=kernel, strides=strides, padding=pads, layout=fmt)]


@converter("Softmax")
def _softmax(ctx: NodeContext) -> list[Expr]:
    return [_nn.softmax(ctx.input(0), axis=-1)]


@converter("LogSoftmax")
def _log_softmax(ctx: NodeContext) -> list[Expr]:
    return [_nn.log_softmax(ctx.input(0), axis=-1)]


@converter("LRN")
def _lrn(ctx: NodeContext) -> list[Expr]:
    size = 2 * int(ctx.attr("depth_radius", 5)) + 1
    return [_nn.lrn(ctx.input(0), size=size, axis=3, bias=float(ctx.attr("bias", 1.0)),
                    alpha=float(ctx.attr("alpha", 1.0)) * size, beta=float(ctx.attr("beta", 0.5)))]


@converter("MatMul")
def _matmul(ctx: NodeContext) -> list[Expr]:
    a, b = ctx.input(0), ctx.input(1)
    ta, tb = bool(ctx.attr("transpose_a", False)), bool(ctx.attr("transpose_b", False))
    if ta:
        a = K.transpose(a, [1, 0])
    # dense takes the weight as [units, in]: the transpose of a constant weight folds away
    return [_nn.dense(a, b if tb else K.transpose(b, [1, 0]))]


@converter("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _batch_matmul(ctx: NodeContext) -> list[Expr]:
    a, b = ctx.input(0), ctx.input(1)
    ta, tb = bool(ctx.attr("adj_x", False)), bool(ctx.attr("adj_y", False))
    sa, sb = ctx.shape(a), ctx.shape(b)
    if len(sa) == 2 and len(sb) == 2:
        return [_nn.matmul(a, b, transpose_a=ta, transpose_b=tb)]
    batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    if sa[:-2] != batch:
        a = K.broadcast_to(a, [*batch, *sa[-2:]])
    if sb[:-2] != batch:
        b = K.broadcast_to(b, [*batch, *sb[-2:]])
    n = int(np.prod(batch)) if batch else 1
    a3, b3 = K.reshape(a, [n, *sa[-2:]]), K.reshape(b, [n, *sb[-2:]])
    out = _nn.batch_matmul(a3, b3, transpose_a=ta, transpose_b=tb)
    rows = sa[-1] if ta else sa[-2]
    cols = sb[-2] if tb else sb[-1]
    return [K.reshape(out, [*batch, rows, cols])]


@converter("Einsum")
def _einsum(ctx: NodeContext) -> list[Expr]:
    return [K.einsum([ctx.input(i) for i in range(len(ctx.inputs))], ctx.attr("equation"))]


# --- reductions ----------------------------------------------------------------------------

_REDUCE = {"Mean": K.mean, "Sum": K.sum, "Max": K.max, "Min": K.min, "Prod": K.prod, "All": K.all,
           "Any": K.any}


def _reduce(fn: Callable[..., Expr]) -> Converter:
    def convert(ctx: NodeContext) -> list[Expr]:
        x = ctx.input(0)
        rank = len(ctx.shape(x))
        axes = sorted({_axis(a, rank) for a in ctx.ints(1, "the reduction axes")})
        if not axes:
            return [x]
        return [fn(x, axis=axes, keepdims=bool(ctx.attr("keep_dims", False)))]

    return convert


for _rop, _rfn in _REDUCE.items():
    CONVERTERS[_rop] = _reduce(_rfn)


@converter("ArgMax", "ArgMin")
def _arg_reduce(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    axis = _axis(ctx.ints(1, "the axis")[0], len(ctx.shape(x)))
    fn = K.argmax if ctx.op == "ArgMax" else K.argmin
    out = fn(x, axis=[axis])
    dtype = ctx.attr("output_type", "int64")
    return [K.cast(out, dtype)]


@converter("Cumsum", "Cumprod")
def _cumulative(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    axis = _axis(ctx.ints(1, "the axis")[0], len(ctx.shape(x)))
    reverse = bool(ctx.attr("reverse", False))
    if reverse:
        x = K.reverse(x, axis)
    fn = K.cumsum if ctx.op == "Cumsum" else K.cumprod
    out = fn(x, axis=axis, exclusive=bool(ctx.attr("exclusive", False)))
    return [K.reverse(out, axis) if reverse else out]


# --- shapes and data movement --------------------------------------------------------------

@converter("Reshape")
def _reshape(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    size = int(np.prod(ctx.shape(x)))
    target = ctx.ints(1, "the Reshape target shape")
    if target.count(-1) > 1:
        raise ctx.error(f"target shape {target} has several -1 dims")
    if -1 in target:
        known = int(np.prod([d for d in target if d != -1]))
        target[target.index(-1)] = size // known if known else 0
    if int(np.prod(target)) != size:
        raise ctx.error(f"cannot reshape {ctx.shape(x)} to {target}")
    return [K.reshape(x, target)]


@converter("Squeeze")
def _squeeze(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    shape = ctx.shape(x)
    dims = ctx.attr("squeeze_dims", []) or ctx.attr("axis", [])
    axes = [_axis(a, len(shape)) for a in dims] if dims else [i for i, d in enumerate(shape) if d == 1]
    return [K.squeeze(x, axis=axes) if axes else x]


@converter("ExpandDims")
def _expand_dims(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    axis = ctx.ints(1, "the axis")[0]
    rank = len(ctx.shape(x))
    return [K.expand_dims(x, axis + rank + 1 if axis < 0 else axis)]


@converter("Transpose")
def _transpose(ctx: NodeContext) -> list[Expr]:
    return [K.transpose(ctx.input(0), ctx.ints(1, "the permutation"))]


@converter("ConcatV2", "Concat")
def _concat(ctx: NodeContext) -> list[Expr]:
    if ctx.op == "Concat":
        axis, parts = ctx.ints(0, "the axis")[0], [ctx.input(i) for i in range(1, len(ctx.inputs))]
    else:
        n = len(ctx.inputs) - 1
        axis, parts = ctx.ints(n, "the axis")[0], [ctx.input(i) for i in range(n)]
    return [K.concatenate(parts, axis=_axis(axis, len(ctx.shape(parts[0]))))]


@converter("Pack")
def _pack(ctx: NodeContext) -> list[Expr]:
    parts = [ctx.input(i) for i in range(len(ctx.inputs))]
    rank = len(ctx.shape(parts[0])) + 1
    return [K.stack(parts, axis=_axis(int(ctx.attr("axis", 0)), rank))]


@converter("Unpack")
def _unpack(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    shape = ctx.shape(x)
    axis = _axis(int(ctx.attr("axis", 0)), len(shape))
    num = shape[axis]
    parts = K.split(x, num, axis=axis) if num > 1 else [x]
    return [K.squeeze(parts[i], axis=[axis]) for i in range(num)]


def _split_at(x: Expr, sizes: Sequence[int], axis: int) -> list[Expr]:
    if len(sizes) == 1:
        return [x]
    bounds = list(np.cumsum(sizes)[:-1])
    parts = K.split(x, [int(b) for b in bounds], axis=axis)
    return [parts[i] for i in range(len(sizes))]


@converter("Split")
def _split(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(1)
    shape = ctx.shape(x)
    axis = _axis(ctx.ints(0, "the axis")[0], len(shape))
    n = int(ctx.attr("num_split"))
    if shape[axis] % n:
        raise ctx.error(f"axis {axis} of {shape} does not split into {n} equal parts")
    return _split_at(x, [shape[axis] // n] * n, axis)


@converter("SplitV")
def _split_v(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    shape = ctx.shape(x)
    axis = _axis(ctx.ints(2, "the axis")[0], len(shape))
    sizes = ctx.ints(1, "size_splits")
    if -1 in sizes:
        sizes[sizes.index(-1)] = shape[axis] - (sum(sizes) + 1)
    return _split_at(x, sizes, axis)


@converter("StridedSlice")
def _strided_slice(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    shape = ctx.shape(x)
    rank = len(shape)
    begin, end, strides = ctx.ints(1, "begin"), ctx.ints(2, "end"), ctx.ints(3, "strides")
    masks = {k: int(ctx.attr(k, 0)) for k in ("begin_mask", "end_mask", "ellipsis_mask",
                                               "new_axis_mask", "shrink_axis_mask")}

    def bit(mask: str, k: int) -> bool:
        return bool(masks[mask] >> k & 1)

    real = sum(1 for k in range(len(begin)) if not bit("new_axis_mask", k) and not bit("ellipsis_mask", k))
    ranges: list[range] = [range(d) for d in shape]
    final: list[int] = []
    dim = 0
    for k in range(len(begin)):
        if bit("ellipsis_mask", k):
            for _ in range(rank - real):
                final.append(shape[dim])
                dim += 1
            continue
        if bit("new_axis_mask", k):
            final.append(1)
            continue
        if dim >= rank:
            raise ctx.error(f"slice spec of {len(begin)} entries is longer than the rank {rank}")
        d = shape[dim]
        if bit("shrink_axis_mask", k):
            b = begin[k] + d if begin[k] < 0 else begin[k]
            if not 0 <= b < d:
                raise ctx.error(f"index {begin[k]} is out of range for axis {dim} of size {d}")
            ranges[dim] = range(b, b + 1)
        else:
            sl = slice(None if bit("begin_mask", k) else begin[k], None if bit("end_mask", k) else end[k],
                       strides[k])
            ranges[dim] = range(*sl.indices(d))
            final.append(len(ranges[dim]))
        dim += 1
    final.extend(shape[dim:])
    out = x
    if all(r.step > 0 for r in ranges):
        if any(len(r) == 0 for r in ranges):
            return [K.reshape(K.strided_slice(x, [0] * rank, [0] * rank), final)]
        if any((r.start, r.stop, r.step) != (0, d, 1) for r, d in zip(ranges, shape)):
            out = K.strided_slice(x, [r.start for r in ranges], [r.start + (len(r) - 1) * r.step + 1
                                                                 for r in ranges], [r.step for r in ranges])
    else:
        for axis, r in enumerate(ranges):
            if (r.start, r.stop, r.step) != (0, shape[axis], 1):
                out = K.take(out, Constant(np.array(list(r), dtype=np.int32)), axis=axis)
    if tuple(final) != tuple(len(r) for r in ranges):
        out = K.reshape(out, final)
    return [out]


@converter("Slice")
def _slice(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    shape = ctx.shape(x)
    begin, size = ctx.ints(1, "begin"), ctx.ints(2, "size")
    end = [d if s == -1 else b + s for b, s, d in zip(begin, size, shape)]
    if begin == [0] * len(shape) and end == list(shape):
        return [x]
    return [K.strided_slice(x, begin, end)]


def _paddings(ctx: NodeContext) -> list[tuple[int, int]]:
    p = ctx.const_input(1, "the paddings").astype(np.int64).reshape(-1, 2)
    return [(int(a), int(b)) for a, b in p]


@converter("Pad", "PadV2")
def _pad(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    value = float(ctx.const_input(2, "the pad value").reshape(-1)[0]) if ctx.op == "PadV2" else 0.0
    return [_nn.pad(x, _paddings(ctx), pad_value=value)]


@converter("MirrorPad")
def _mirror_pad(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    pads = _paddings(ctx)
    mode = ctx.attr("mode", "REFLECT")
    if mode == "REFLECT":
        return [_nn.pad(x, pads, pad_mode="reflect")]
    if mode != "SYMMETRIC":
        raise ctx.unsupported(f"mode={mode!r}")
    out, shape = x, list(ctx.shape(x))
    for axis, (before, after) in enumerate(pads):
        parts = []
        if before:
            parts.append(K.reverse(K.strided_slice(out, [0], [before], axes=[axis]), axis))
        parts.append(out)
        if after:
            n = shape[axis]
            parts.append(K.reverse(K.strided_slice(out, [n - after], [n], axes=[axis]), axis))
        if len(parts) > 1:
            out = K.concatenate(parts, axis=axis)
            shape[axis] += before + after
    return [out]


@converter("Tile")
def _tile(ctx: NodeContext) -> list[Expr]:
    return [K.tile(ctx.input(0), ctx.ints(1, "multiples"))]


@converter("BroadcastTo")
def _broadcast_to(ctx: NodeContext) -> list[Expr]:
    return [K.broadcast_to(ctx.input(0), ctx.ints(1, "the shape"))]


@converter("Fill")
def _fill(ctx: NodeContext) -> list[Expr]:
    return [K.broadcast_to(ctx.input(1), ctx.ints(0, "dims"))]


@converter("Shape", "ShapeN")
def _shape(ctx: NodeContext) -> list[Expr]:
    dtype = np_dtype(ctx.attr("out_type", "int32"))
    return [Constant(np.array(ctx.shape(i), dtype=dtype)) for i in range(len(ctx.inputs))]


@converter("Size")
def _size(ctx: NodeContext) -> list[Expr]:
    return [Constant(np.array(int(np.prod(ctx.shape(0))), dtype=np_dtype(ctx.attr("out_type", "int32"))))]


@converter("Rank")
def _rank(ctx: NodeContext) -> list[Expr]:
    return [Constant(np.array(len(ctx.shape(0)), dtype=np.int32))]


@converter("Range")
def _range(ctx: NodeContext) -> list[Expr]:
    start, limit, delta = (ctx.const_input(i, what).reshape(-1)[0] for i, what in
                           enumerate(("start", "limit", "delta")))
    dtype = np_dtype(ctx.attr("Tidx", "int32"))
    return [Constant(np.arange(start, limit, delta).astype(dtype))]


@converter("GatherV2", "Gather")
def _gather(ctx: NodeContext) -> list[Expr]:
    x, idx = ctx.input(0), ctx.input(1)
    axis = ctx.ints(2, "the axis")[0] if ctx.op == "GatherV2" else 0
    axis = _axis(axis, len(ctx.shape(x)))
    batch_dims = int(ctx.attr("batch_dims", 0))
    if batch_dims < 0:
        batch_dims += len(ctx.shape(idx))
    return [K.take(x, idx, axis=axis, batch_dims=batch_dims)]


@converter("GatherNd")
def _gather_nd(ctx: NodeContext) -> list[Expr]:
    x, idx = ctx.input(0), ctx.input(1)
    r = len(ctx.shape(idx))
    return [K.gather_nd(x, K.transpose(idx, [r - 1, *range(r - 1)]),
                        batch_dims=int(ctx.attr("batch_dims", 0)))]


@converter("OneHot")
def _one_hot(ctx: NodeContext) -> list[Expr]:
    depth = ctx.ints(1, "depth")[0]
    return [K.one_hot(ctx.input(0), ctx.input(2), ctx.input(3), depth, axis=int(ctx.attr("axis", -1)),
                      dtype=ctx.attr("T"))]


@converter("TopKV2")
def _topk(ctx: NodeContext) -> list[Expr]:
    k = ctx.ints(1, "k")[0]
    out = K.topk(ctx.input(0), k=k, axis=-1, ret_type="both", is_ascend=False,
                 dtype=ctx.attr("index_type", "int32"))
    return [out[0], out[1]]


@converter("ReverseV2")
def _reverse(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    for a in ctx.ints(1, "the axes"):
        x = K.reverse(x, _axis(a, len(ctx.shape(x))))
    return [x]


@converter("DepthToSpace", "SpaceToDepth")
def _depth_space(ctx: NodeContext) -> list[Expr]:
    fmt = _layout(ctx)
    bs = int(ctx.attr("block_size"))
    if ctx.op == "DepthToSpace":
        return [_nn.depth_to_space(ctx.input(0), bs, layout=fmt, mode="DCR")]
    return [_nn.space_to_depth(ctx.input(0), bs, layout=fmt)]


@converter("SpaceToBatchND")
def _space_to_batch(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    block = ctx.ints(1, "block_shape")
    pads = ctx.const_input(2, "the paddings").astype(np.int64).reshape(-1, 2).tolist()
    shape = ctx.shape(x)
    m, rest = len(block), list(shape[1 + len(block):])
    if any(p for pair in pads for p in pair):
        x = _nn.pad(x, [(0, 0), *[(int(a), int(b)) for a, b in pads], *[(0, 0)] * len(rest)])
    padded = [shape[1 + i] + pads[i][0] + pads[i][1] for i in range(m)]
    if any(p % b for p, b in zip(padded, block)):
        raise ctx.error(f"padded spatial dims {padded} are not multiples of block_shape {block}")
    split = [shape[0]]
    for p, b in zip(padded, block):
        split += [p // b, b]
    x = K.reshape(x, split + rest)
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)]
    x = K.transpose(x, perm + list(range(2 * m + 1, 2 * m + 1 + len(rest))))
    n = shape[0] * int(np.prod(block))
    return [K.reshape(x, [n, *[p // b for p, b in zip(padded, block)], *rest])]


@converter("BatchToSpaceND")
def _batch_to_space(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    block = ctx.ints(1, "block_shape")
    crops = ctx.const_input(2, "the crops").astype(np.int64).reshape(-1, 2).tolist()
    shape = ctx.shape(x)
    m, rest = len(block), list(shape[1 + len(block):])
    batch = shape[0] // int(np.prod(block))
    x = K.reshape(x, [*block, batch, *shape[1:]])
    perm = [m]
    for i in range(m):
        perm += [m + 1 + i, i]
    x = K.transpose(x, perm + list(range(2 * m + 1, 2 * m + 1 + len(rest))))
    full = [shape[1 + i] * block[i] for i in range(m)]
    x = K.reshape(x, [batch, *full, *rest])
    if any(c for pair in crops for c in pair):
        begin = [0] + [int(c[0]) for c in crops] + [0] * len(rest)
        end = [batch] + [f - int(c[1]) for f, c in zip(full, crops)] + rest
        x = K.strided_slice(x, begin, end)
    return [x]


@converter("ResizeBilinear", "ResizeNearestNeighbor")
def _resize(ctx: NodeContext) -> list[Expr]:
    x = ctx.input(0)
    size = ctx.ints(1, "the output size")
    align, half = bool(ctx.attr("align_corners", False)), bool(ctx.attr("half_pixel_centers", False))
    if ctx.op == "ResizeNearestNeighbor":
        mode = "align_corners" if align else ("tf_half_pixel_for_nn" if half else "asymmetric")
        return [_image.resize2d(x, size, layout="NHWC", method="nearest_neighbor",
                                coordinate_transformation_mode=mode,
                                rounding_method="round" if align else "floor")]
    if ctx.dtype(x) != "float32":
        x = K.cast(x, "float32")  # TF's bilinear resize returns float32
    mode = "align_corners" if align else ("half_pixel" if half else "asymmetric")
    return [_image.resize2d(x, size, layout="NHWC", method="linear", coordinate_transformation_mode=mode)]


# --- TensorList (TensorArray) ----------------------------------------------------------------

def _element_shape(ctx: NodeContext, i: int) -> tuple[int, ...] | None:
    value = ctx.importer.value_of(ctx.input(i))
    if value is None:
        return None
    dims = [int(d) for d in np.asarray(value).reshape(-1)]
    return None if (not dims and np.asarray(value).ndim == 0) or any(d < 0 for d in dims) else tuple(dims)


def _tensor_list(ctx: NodeContext, i: int) -> TensorList:
    tl = ctx.inputs[i]
    if not isinstance(tl, TensorList):
        raise ctx.error(f"input {i} is not a TensorList")
    return tl


@converter("TensorListReserve")
def _tl_reserve(ctx: NodeContext) -> list[Any]:
    n = ctx.ints(1, "num_elements")[0]
    if n < 0:
        raise ctx.unsupported("a TensorList of unknown length")
    return [TensorList([None] * n, _element_shape(ctx, 0), ctx.attr("element_dtype", "float32"))]


@converter("TensorListFromTensor")
def _tl_from_tensor(ctx: NodeContext) -> list[Any]:
    x = ctx.input(0)
    shape = ctx.shape(x)
    items: list[Expr | None] = [K.take(x, Constant(np.array(i, dtype=np.int32)), axis=0)
                                for i in range(shape[0])]
    done = ctx.importer.finish(items, ctx.name)
    return [TensorList(list(done), tuple(shape[1:]), ctx.dtype(x))]


@converter("TensorListGetItem")
def _tl_get(ctx: NodeContext) -> list[Any]:
    tl = _tensor_list(ctx, 0)
    i = ctx.ints(1, "the index")[0]
    if not 0 <= i < len(tl.items):
        raise ctx.error(f"index {i} is out of range for a TensorList of {len(tl.items)}")
    item = tl.items[i]
    if item is None:
        shape = tl.element_shape or _element_shape(ctx, 2)
        if shape is None:
            raise ctx.error(f"element {i} is read before it is written")
        item = K.zeros(list(shape), tl.dtype)
    return [item]


@converter("TensorListSetItem")
def _tl_set(ctx: NodeContext) -> list[Any]:
    tl = _tensor_list(ctx, 0)
    i = ctx.ints(1, "the index")[0]
    items = list(tl.items)
    if i >= len(items):
        items.extend([None] * (i + 1 - len(items)))
    items[i] = ctx.input(2)
    return [TensorList(items, tl.element_shape or ctx.shape(2), tl.dtype)]


@converter("TensorListLength")
def _tl_length(ctx: NodeContext) -> list[Any]:
    return [Constant(np.array(len(_tensor_list(ctx, 0).items), dtype=np.int32))]


@converter("TensorListStack")
def _tl_stack(ctx: NodeContext) -> list[Any]:
    tl = _tensor_list(ctx, 0)
    shape = tl.element_shape or _element_shape(ctx, 1)
    items = []
    for item in tl.items:
        if item is None:
            if shape is None:
                raise ctx.error("stacks unwritten elements of unknown shape")
            item = K.zeros(list(shape), tl.dtype)
        items.append(item)
    if not items:
        raise ctx.unsupported("stacking an empty TensorList")
    return [K.stack(items, axis=0)]
