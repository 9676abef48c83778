"""ONNX converters: quantization (QuantizeLinear, DequantizeLinear, QLinearMatMul, QLinearConv,
MatMulInteger, ConvInteger).

Relay-era TVM lowers these through its ``qnn`` dialect; Kiln composes them from plain ops with
ONNX's arithmetic: integer products accumulate in int32 after subtracting zero points,
requantization rounds half to even and saturates to the output type. Per-axis scales and zero
points are reshaped to broadcast along their axis, blocked ones (opset 21) repeated over their
blocks. Opset 19+ float8, 21+ int4/uint4 and 25+ int2/uint2 and float4_e2m1fn quantized types
are supported (float8 and float4 convert like Cast, with ``saturate``).
"""

from __future__ import annotations

import kiln.op as K
from kiln.frontend.onnx_common import NodeContext, converter, normalize_axis, onnx_dtype
from kiln.frontend.onnx_math import onnx_cast
from kiln.frontend.onnx_nn import matmul
from kiln.frontend.onnx_tensor import reshape_to
from kiln.ir.expr import Expr
from kiln.ir.types import is_float
from kiln.op import elemwise as ew
from kiln.runtime.dtype import dtype_range

__all__: list[str] = []

_QUANT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int4", "uint4", "int2",
                 "uint2")
# Float quantized types (opset 19+ float8, opset 23+ float4): x / scale converts like Cast.
_FLOAT_QUANT_DTYPES = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                       "float4_e2m1fn")


def _param(ctx: NodeContext, v: Expr, x: Expr, axis: int) -> Expr:
    """A scale or zero point of Quantize/DequantizeLinear shaped to broadcast against ``x``:
    per tensor, per ``axis`` or (``block_size``, opset 21) per block of ``axis``, each value
    repeated over its block (the last block may be shorter)."""
    block = int(ctx.attr("block_size", 0) or 0)
    rank = ctx.ndim(x)
    if not block:
        return _along_axis(ctx, v, rank, axis)
    axis = normalize_axis(ctx, axis, rank)
    x_shape, v_shape = ctx.shape(x), ctx.shape(v)
    if len(v_shape) != rank or -(-x_shape[axis] // block) != v_shape[axis]:
        raise ctx.error(f"block_size={block}: a parameter of shape {v_shape} does not block "
                        f"an input of shape {x_shape} along axis {axis}")
    out = K.repeat(v, block, axis)
    if v_shape[axis] * block != x_shape[axis]:
        out = K.strided_slice(out, [0], [x_shape[axis]], axes=[axis])
    return out


def _along_axis(ctx: NodeContext, v: Expr, rank: int, axis: int) -> Expr:
    """A scalar or 1-d per-axis parameter shaped to broadcast against a rank-``rank`` tensor."""
    shape = ctx.shape(v)
    if len(shape) == 0 or (len(shape) == 1 and shape[0] == 1):
        return reshape_to(ctx, v, ())
    if len(shape) == 1 and rank > 1:
        axis = normalize_axis(ctx, axis, rank)
        return reshape_to(ctx, v, (1,) * axis + shape + (1,) * (rank - axis - 1))
    return v


def _saturate(ctx: NodeContext, x: Expr, dtype: str) -> Expr:
    """Round half to even, clamp to ``dtype``'s range and convert."""
    lo, hi = dtype_range(dtype)
    return ew.cast(ew.clip(ew.round(x), lo, hi), dtype)


def _quant_dtype(ctx: NodeContext, zero_point: Expr | None) -> str:
    if zero_point is not None:
        dtype = ctx.dtype(zero_point)
    elif ctx.attr("output_dtype"):
        dtype = onnx_dtype(int(ctx.attr("output_dtype")), "QuantizeLinear output_dtype")
    else:
        dtype = "uint8"
    if dtype not in _QUANT_DTYPES and dtype not in _FLOAT_QUANT_DTYPES:
        raise ctx.unsupported(f"quantizing to {dtype}")
    return dtype


@converter("QuantizeLinear", needs=("round", "clip", "cast", "divide"))
def _quantize(ctx: NodeContext) -> Expr:
    x, scale = ctx.input(0), ctx.input(1)
    zp = ctx.optional_input(2)
    axis = int(ctx.attr("axis", 1))
    dtype = _quant_dtype(ctx, zp)
    work = ctx.dtype(x) if ctx.dtype(x) != "float16" else "float32"
    xs = ew.cast(x, work) if ctx.dtype(x) != work else x
    scaled = ew.divide(xs, ew.cast(_param(ctx, scale, x, axis), work))
    if dtype in _FLOAT_QUANT_DTYPES:  # ONNX's reference: float8 ignores the (zero) zero point
        if dtype == "float4_e2m1fn" and zp is not None:
            scaled = ew.add(scaled, ew.cast(_param(ctx, zp, x, axis), work))
        return onnx_cast(ctx, scaled, dtype, bool(int(ctx.attr("saturate", 1))))
    q = ew.round(scaled)
    if zp is not None:
        q = ew.add(q, ew.cast(_param(ctx, zp, x, axis), work))
    return _saturate(ctx, q, dtype)


@converter("DequantizeLinear", needs=("cast", "subtract", "multiply"))
def _dequantize(ctx: NodeContext) -> Expr:
    x, scale = ctx.input(0), ctx.input(1)
    zp = ctx.optional_input(2)
    axis = int(ctx.attr("axis", 1))
    out_dtype = ctx.dtype(scale)
    if not is_float(out_dtype):
        raise ctx.error(f"x_scale must be floating point, got {out_dtype}")
    work = "float64" if ctx.dtype(x) in ("int32", "uint32") else "float32"
    v = ew.cast(x, work)
    if zp is not None:
        v = ew.subtract(v, ew.cast(_param(ctx, zp, x, axis), work))
    out = ew.multiply(v, ew.cast(_param(ctx, scale, x, axis), work))
    return ew.cast(out, out_dtype)


def _centered(ctx: NodeContext, x: Expr, zp: Expr | None, rank: int, axis: int) -> Expr:
    """``int32(x) - int32(zero_point)``."""
    v = ew.cast(x, "int32")
    if zp is None:
        return v
    return ew.subtract(v, ew.cast(_along_axis(ctx, zp, rank, axis), "int32"))


def _requantize(ctx: NodeContext, acc: Expr, scale: Expr, y_scale: Expr, y_zp: Expr | None,
                out_dtype: str) -> Expr:
    """``saturate(round(acc * scale / y_scale) + y_zp)``, in float64 like ONNX's reference."""
    factor = ew.divide(ew.cast(scale, "float64"), ew.cast(y_scale, "float64"))
    v = ew.multiply(ew.cast(acc, "float64"), factor)
    if y_zp is not None:
        v = ew.add(v, ew.cast(y_zp, "float64"))
    return _saturate(ctx, v, out_dtype)


@converter("MatMulInteger", needs=("nn.dense", "nn.batch_matmul", "cast"))
def _matmul_integer(ctx: NodeContext) -> Expr:
    a, b = ctx.input(0), ctx.input(1)
    ra, rb = ctx.ndim(a), ctx.ndim(b)
    a_c = _centered(ctx, a, ctx.optional_input(2), ra, ra - 2 if ra > 1 else 0)
    b_c = _centered(ctx, b, ctx.optional_input(3), rb, rb - 1)
    return matmul(ctx, a_c, b_c)


@converter("QLinearMatMul", needs=("nn.dense", "nn.batch_matmul", "cast", "round", "clip"))
def _qlinear_matmul(ctx: NodeContext) -> Expr:
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale = (ctx.input(i) for i in range(7))
    y_zp = ctx.optional_input(7)
    ra, rb = ctx.ndim(a), ctx.ndim(b)
    acc = matmul(ctx, _centered(ctx, a, a_zp, ra, ra - 2 if ra > 1 else 0),
                 _centered(ctx, b, b_zp, rb, rb - 1))
    rank = ctx.ndim(acc)
    scale = ew.multiply(ew.cast(_along_axis(ctx, a_scale, rank, rank - 2), "float64"),
                        ew.cast(_along_axis(ctx, b_scale, rank, rank - 1), "float64"))
    out_dtype = ctx.dtype(y_zp) if y_zp is not None else ctx.dtype(a)
    return _requantize(ctx, acc, scale, _along_axis(ctx, y_scale, rank, rank - 1),
                       None if y_zp is None else _along_axis(ctx, y_zp, rank, rank - 1), out_dtype)


def _integer_conv(ctx: NodeContext, x: Expr, w: Expr, x_zp: Expr | None, w_zp: Expr | None) -> Expr:
    """int32 convolution of zero-point-centred operands, with the node's conv attributes."""
    from kiln.frontend.onnx_conv import conv_call

    xc = _centered(ctx, x, x_zp, ctx.ndim(x), 1)
    wc = _centered(ctx, w, w_zp, ctx.ndim(w), 0)
    return conv_call(ctx, xc, wc, out_dtype="int32")


@converter("ConvInteger", needs=("nn.conv2d", "cast"))
def _conv_integer(ctx: NodeContext) -> Expr:
    return _integer_conv(ctx, ctx.input(0), ctx.input(1), ctx.optional_input(2), ctx.optional_input(3))


@converter("QLinearConv", needs=("nn.conv2d", "cast", "round", "clip"))
def _qlinear_conv(ctx: NodeContext) -> Expr:
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale = (ctx.input(i) for i in range(7))
    y_zp = ctx.optional_input(7)
    acc = _integer_conv(ctx, x, w, x_zp, w_zp)
    if ctx.has_input(8):
        acc = ew.add(acc, _along_axis(ctx, ew.cast(ctx.input(8), "int32"), ctx.ndim(acc), 1))
    rank = ctx.ndim(acc)
    scale = ew.multiply(ew.cast(_along_axis(ctx, x_scale, rank, 1), "float64"),
                        ew.cast(_along_axis(ctx, w_scale, rank, 1), "float64"))
    out_dtype = ctx.dtype(y_zp) if y_zp is not None else ctx.dtype(x)
    return _requantize(ctx, acc, scale, _along_axis(ctx, y_scale, rank, 1),
                       None if y_zp is None else _along_axis(ctx, y_zp, rank, 1), out_dtype)
