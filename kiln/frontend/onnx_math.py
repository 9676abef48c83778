"""ONNX converters: elementwise math, comparisons, logic, casts, clip, where and activations.

Binary ops use relay's NumPy-style broadcasting, which is ONNX's multidirectional broadcasting.
Activations without a relay operator of their own (Elu, Selu, Celu, HardSigmoid, HardSwish, Mish,
Softplus, Softsign, Gelu, Shrink, ThresholdedRelu) are composed from elementwise ops.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from kiln.frontend.onnx_common import (
    NodeContext,
    const,
    converter,
    onnx_dtype,
    scalar_like,
)
from kiln.ir.expr import Expr
from kiln.ir.types import is_float, is_int, np_dtype
from kiln.op import elemwise as ew
from kiln.runtime.dtype import dtype_range

__all__: list[str] = []

_UNARY = {
    "Abs": "abs", "Neg": "negative", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Floor": "floor",
    "Ceil": "ceil", "Round": "round", "Sign": "sign", "Sin": "sin", "Cos": "cos", "Tan": "tan",
    "Asin": "asin", "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh",
    "Acosh": "acosh", "Atanh": "atanh", "Erf": "erf", "Sigmoid": "sigmoid", "Tanh": "tanh",
    "IsNaN": "isnan", "Not": "logical_not", "BitwiseNot": "bitwise_not",
}

_BINARY = {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Equal": "equal",
    "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
    "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor",
    "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor",
}


def _call(name: str, *args: Expr) -> Expr:
    builder: Any = getattr(ew, name)
    return builder(*args)


def _unary(ctx: NodeContext) -> Expr:
    return _call(_UNARY[ctx.op_type], ctx.input(0))


for _op_type, _relay in _UNARY.items():
    converter(_op_type, needs=(_relay,))(_unary)


def legacy_broadcast(ctx: NodeContext, a: Expr, b: Expr) -> Expr:
    """Opset < 7 ``broadcast=1, axis=k``: align ``b``'s dims with ``a``'s starting at ``axis``."""
    if not ctx.attr("broadcast", 0) or ctx.attr("axis") is None:
        return b
    from kiln.op import transform as tf

    rank_a, shape_b = ctx.ndim(a), ctx.shape(b)
    axis = int(ctx.attr("axis")) % max(rank_a, 1)
    newshape = (1,) * axis + shape_b + (1,) * (rank_a - axis - len(shape_b))
    return tf.reshape(b, newshape)


def _binary(ctx: NodeContext) -> Expr:
    a, b = ctx.input(0), ctx.input(1)
    return _call(_BINARY[ctx.op_type], a, legacy_broadcast(ctx, a, b))


for _op_type, _relay in _BINARY.items():
    converter(_op_type, needs=(_relay,))(_binary)


@converter("Identity")
def _identity(ctx: NodeContext) -> Expr:
    return ctx.input(0)


@converter("Reciprocal", needs=("divide",))
def _reciprocal(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    return ew.divide(scalar_like(ctx, 1, x), x)


@converter("IsInf", needs=("isinf", "logical_and", "greater", "less"))
def _isinf(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    pos, neg = int(ctx.attr("detect_positive", 1)), int(ctx.attr("detect_negative", 1))
    inf = ew.isinf(x)
    if pos and neg:
        return inf
    if pos:
        return ew.logical_and(inf, ew.greater(x, scalar_like(ctx, 0, x)))
    if neg:
        return ew.logical_and(inf, ew.less(x, scalar_like(ctx, 0, x)))
    return ew.logical_and(inf, ew.logical_not(inf))


@converter("Pow", needs=("power", "cast"))
def _pow(ctx: NodeContext) -> Expr:
    x, y = ctx.input(0), ctx.input(1)
    tx, ty = ctx.dtype(x), ctx.dtype(y)
    if is_int(tx):
        # ONNX computes integer powers as the float result truncated back to the base type.
        out = ew.power(ew.cast(x, "float64"), ew.cast(y, "float64"))
        return ew.cast(out, tx)
    if tx != ty:
        y = ew.cast(y, tx)
    return ew.power(x, y)


@converter("Mod", needs=("mod", "floor_mod"))
def _mod(ctx: NodeContext) -> Expr:
    a, b = ctx.input(0), ctx.input(1)
    # fmod=1 truncates like C's fmod; fmod=0 takes the divisor's sign (also for floats, as the
    # ONNX reference and its tests do).
    return ew.mod(a, b) if int(ctx.attr("fmod", 0)) else ew.floor_mod(a, b)


def _check_bitshift(attrs: dict[str, Any], opset: int) -> str | None:
    direction = attrs.get("direction", "")
    return None if direction in ("LEFT", "RIGHT") else f"direction={direction!r}"


@converter("BitShift", needs=("left_shift", "right_shift"), check=_check_bitshift)
def _bitshift(ctx: NodeContext) -> Expr:
    a, b = ctx.input(0), ctx.input(1)
    return ew.left_shift(a, b) if ctx.attr("direction") == "LEFT" else ew.right_shift(a, b)


def _variadic(ctx: NodeContext, name: str) -> Expr:
    args = [x for x in ctx.inputs if x is not None]
    if not args:
        raise ctx.error("needs at least one input")
    out = args[0]
    for x in args[1:]:
        out = _call(name, out, x)
    return out


@converter("Sum", needs=("add",))
def _sum(ctx: NodeContext) -> Expr:
    return _variadic(ctx, "add")


@converter("Max", needs=("maximum",))
def _max(ctx: NodeContext) -> Expr:
    return _variadic(ctx, "maximum")


@converter("Min", needs=("minimum",))
def _min(ctx: NodeContext) -> Expr:
    return _variadic(ctx, "minimum")


@converter("Mean", needs=("add", "divide"))
def _mean(ctx: NodeContext) -> Expr:
    total = _variadic(ctx, "add")
    n = sum(x is not None for x in ctx.inputs)
    return ew.divide(total, scalar_like(ctx, n, total))


@converter("Where", needs=("where",))
def _where(ctx: NodeContext) -> Expr:
    return ew.where(ctx.input(0), ctx.input(1), ctx.input(2))


def _cast_target(to: Any) -> int:
    """The ONNX element type of Cast's ``to`` (an enum value, or a name before opset 6)."""
    if isinstance(to, str):
        return int(onnx.TensorProto.DataType.Value(to.upper()))
    return int(to)


def _check_cast(attrs: dict[str, Any], opset: int) -> str | None:
    try:
        onnx_dtype(_cast_target(attrs.get("to", 0)), "the target type")
    except Exception as e:  # an unknown type name or a type Kiln lacks
        return str(e)
    return None


def onnx_cast(ctx: NodeContext, x: Expr, target: str, saturate: bool = True) -> Expr:
    """ONNX's Cast of ``x`` to ``target``: relay's cast (rounding to nearest even; NumPy's and
    ``ml_dtypes``' conversions), except that with ``saturate`` (ONNX's default) a float8 target
    clamps out-of-range values and infinities to its largest finite value, keeping NaN."""
    source = ctx.dtype(x)
    if source == target:
        return x
    if target.startswith("float8_") and saturate:
        if source not in ("float16", "float32", "float64"):
            x = ew.cast(x, "float32")
        hi = dtype_range(target)[1]
        x = ew.clip(x, -hi, hi)
    return ew.cast(x, target)


@converter("Cast", needs=("cast", "clip"), check=_check_cast)
def _cast(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    target = onnx_dtype(_cast_target(ctx.attr("to")), f"Cast node {ctx.name!r} target")
    return onnx_cast(ctx, x, target, bool(int(ctx.attr("saturate", 1))))


@converter("BitCast", needs=("reinterpret",), check=_check_cast)
def _bitcast(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    target = onnx_dtype(_cast_target(ctx.attr("to")), f"BitCast node {ctx.name!r} target")
    return x if ctx.dtype(x) == target else ew.reinterpret(x, target)


@converter("CastLike", needs=("cast", "clip"))
def _cast_like(ctx: NodeContext) -> Expr:
    return onnx_cast(ctx, ctx.input(0), ctx.dtype(1), bool(int(ctx.attr("saturate", 1))))


def _bound(ctx: NodeContext, i: int, attr: str) -> tuple[float | None, Expr | None]:
    """A Clip bound: (constant value, None), (None, expression) or (None, None) when absent."""
    if ctx.opset < 11:
        value = ctx.attr(attr)
        return (None if value is None else float(value)), None
    if not ctx.has_input(i):
        return None, None
    known = ctx.value(i)
    if known is not None:
        return float(np.asarray(known).reshape(-1)[0]), None
    return None, ctx.input(i)


@converter("Clip", needs=("clip", "maximum", "minimum"))
def _clip(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    dtype = ctx.dtype(x)
    lo, lo_expr = _bound(ctx, 1, "min")
    hi, hi_expr = _bound(ctx, 2, "max")
    if lo_expr is not None or hi_expr is not None:
        out = x
        if lo is not None:
            out = ew.maximum(out, const(lo, dtype))
        elif lo_expr is not None:
            out = ew.maximum(out, lo_expr)
        if hi is not None:
            out = ew.minimum(out, const(hi, dtype))
        elif hi_expr is not None:
            out = ew.minimum(out, hi_expr)
        return out
    if lo is None and hi is None:
        return x
    if is_float(dtype):
        lo = -math.inf if lo is None else lo
        hi = math.inf if hi is None else hi
    else:
        info = np.iinfo(np_dtype(dtype)) if dtype != "bool" else None
        lo = (info.min if info else 0) if lo is None else lo
        hi = (info.max if info else 1) if hi is None else hi
    if lo > hi:
        # ONNX: every element becomes max (the bounds are applied min-then-max).
        return ew.minimum(ew.maximum(x, const(lo, dtype)), const(hi, dtype))
    return ew.clip(x, lo, hi)


# --- activations --------------------------------------------------------------------------------

def _f(ctx: NodeContext, value: float, like: Expr) -> Expr:
    return scalar_like(ctx, value, like)


@converter("Relu", needs=("nn.relu",))
def _relu(ctx: NodeContext) -> Expr:
    from kiln.op import nn

    return nn.relu(ctx.input(0))


@converter("LeakyRelu", needs=("nn.leaky_relu",))
def _leaky_relu(ctx: NodeContext) -> Expr:
    from kiln.op import nn

    return nn.leaky_relu(ctx.input(0), alpha=float(ctx.attr("alpha", 0.01)))


@converter("PRelu", needs=("nn.prelu", "where", "less", "multiply"))
def _prelu(ctx: NodeContext) -> Expr:
    from kiln.op import nn
    from kiln.op import transform as tf

    x, slope = ctx.input(0), ctx.input(1)
    xs, ss = ctx.shape(x), ctx.shape(slope)
    channels = xs[1] if len(xs) > 1 else None
    size = int(np.prod(ss)) if ss else 1
    per_channel = (channels is not None and size == channels and len(ss) <= len(xs) - 1
                   and all(d == 1 for d in ss[1:]) and (len(ss) == len(xs) - 1 or len(ss) == 1))
    if per_channel and ctx.dtype(x) == ctx.dtype(slope):
        return nn.prelu(x, tf.reshape(slope, (channels,)), axis=1)
    return ew.where(ew.less(x, _f(ctx, 0, x)), ew.multiply(x, slope), x)


def _elu_core(ctx: NodeContext, x: Expr, alpha: float) -> Expr:
    neg = ew.multiply(_f(ctx, alpha, x), ew.subtract(ew.exp(x), _f(ctx, 1, x)))
    return ew.where(ew.greater(x, _f(ctx, 0, x)), x, neg)


@converter("Elu", needs=("where", "exp"))
def _elu(ctx: NodeContext) -> Expr:
    return _elu_core(ctx, ctx.input(0), float(ctx.attr("alpha", 1.0)))


@converter("Selu", needs=("where", "exp"))
def _selu(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.67326319217681884765625))
    gamma = float(ctx.attr("gamma", 1.05070102214813232421875))
    return ew.multiply(_f(ctx, gamma, x), _elu_core(ctx, x, alpha))


@converter("Celu", needs=("maximum", "minimum", "exp"))
def _celu(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.0))
    neg = ew.multiply(_f(ctx, alpha, x),
                      ew.subtract(ew.exp(ew.divide(x, _f(ctx, alpha, x))), _f(ctx, 1, x)))
    return ew.add(ew.maximum(x, _f(ctx, 0, x)), ew.minimum(neg, _f(ctx, 0, x)))


@converter("ThresholdedRelu", needs=("where", "greater"))
def _thresholded_relu(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    alpha = float(ctx.attr("alpha", 1.0))
    return ew.where(ew.greater(x, _f(ctx, alpha, x)), x, _f(ctx, 0, x))


def _hard_sigmoid(ctx: NodeContext, x: Expr, alpha: float, beta: float) -> Expr:
    return ew.clip(ew.add(ew.multiply(x, _f(ctx, alpha, x)), _f(ctx, beta, x)), 0.0, 1.0)


@converter("HardSigmoid", needs=("clip",))
def _hardsigmoid(ctx: NodeContext) -> Expr:
    return _hard_sigmoid(ctx, ctx.input(0), float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5)))


@converter("HardSwish", needs=("clip",))
def _hardswish(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    return ew.multiply(x, _hard_sigmoid(ctx, x, 1.0 / 6.0, 0.5))


def _softplus_core(ctx: NodeContext, x: Expr) -> Expr:
    # max(x, 0) + log(1 + exp(-|x|)): no overflow for large |x|.
    tail = ew.log(ew.add(_f(ctx, 1, x), ew.exp(ew.negative(ew.abs(x)))))
    return ew.add(ew.maximum(x, _f(ctx, 0, x)), tail)


@converter("Softplus", needs=("exp", "log", "maximum"))
def _softplus(ctx: NodeContext) -> Expr:
    return _softplus_core(ctx, ctx.input(0))


@converter("Softsign", needs=("abs", "divide"))
def _softsign(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    return ew.divide(x, ew.add(_f(ctx, 1, x), ew.abs(x)))


@converter("Mish", needs=("tanh", "exp", "log"))
def _mish(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    return ew.multiply(x, ew.tanh(_softplus_core(ctx, x)))


def _check_gelu(attrs: dict[str, Any], opset: int) -> str | None:
    mode = attrs.get("approximate", "none")
    return None if mode in ("none", "tanh") else f"approximate={mode!r}"


@converter("Gelu", needs=("erf", "tanh"), check=_check_gelu)
def _gelu(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    half_x = ew.multiply(_f(ctx, 0.5, x), x)
    if ctx.attr("approximate", "none") == "tanh":
        cube = ew.multiply(ew.multiply(x, x), x)
        inner = ew.multiply(_f(ctx, math.sqrt(2.0 / math.pi), x),
                            ew.add(x, ew.multiply(_f(ctx, 0.044715, x), cube)))
        return ew.multiply(half_x, ew.add(_f(ctx, 1, x), ew.tanh(inner)))
    erf = ew.erf(ew.multiply(x, _f(ctx, 1.0 / math.sqrt(2.0), x)))
    return ew.multiply(half_x, ew.add(_f(ctx, 1, x), erf))


@converter("Shrink", needs=("where", "less", "greater"))
def _shrink(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    bias, lambd = float(ctx.attr("bias", 0.0)), float(ctx.attr("lambd", 0.5))
    low = ew.where(ew.less(x, _f(ctx, -lambd, x)), ew.add(x, _f(ctx, bias, x)), _f(ctx, 0, x))
    return ew.where(ew.greater(x, _f(ctx, lambd, x)), ew.subtract(x, _f(ctx, bias, x)), low)
