"""ONNX converters: quantization (QuantizeLinear, DequantizeLinear, QLinearMatMul, QLinearConv,
MatMulInteger, ConvInteger).

Relay-era TVM lowers these through its ``qnn`` dialect; Kiln composes them from plain ops with
ONNX's arithmetic: integer products accumulate in int32 after subtracting zero points,
requantization rounds half to even and saturates to the output type. Per-axis scales and zero
points are reshaped to broadcast along their axis; block quantization is not supported.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.frontend.onnx_common import NodeContext, converter, normalize_axis, onnx_dtype
from kiln.frontend.onnx_nn import matmul
from kiln.frontend.onnx_tensor import reshape_to
from kiln.ir.expr import Expr
from kiln.ir.types import is_float, np_dtype
from kiln.op import elemwise as ew

__all__: list[str] = []

_QUANT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32")


def _check_block(attrs: dict[str, Any], opset: int) -> str | None:
    return f"block_size={attrs['block_size']}" if int(attrs.get("block_size", 0) or 0) else None


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
    info = np.iinfo(np_dtype(dtype))
    return ew.cast(ew.clip(ew.round(x), float(info.min), float(info.max)), dtype)


def _quant_dtype(ctx: NodeContext, zero_point: Expr | None) -> str:
    if zero_point is not None:
        dtype = ctx.dtype(zero_point)
    elif ctx.attr("output_dtype"):
        dtype = onnx_dtype(int(ctx.attr("output_dtype")), "QuantizeLinear output_dtype")
    else:
        dtype = "uint8"
    if dtype not in _QUANT_DTYPES:
        raise ctx.unsupported(f"quantizing to {dtype}")
    return dtype


@converter("QuantizeLinear", needs=("round", "clip", "cast", "divide"), check=_check_block)
def _quantize(ctx: NodeContext) -> Expr:
    x, scale = ctx.input(0), ctx.input(1)
    zp = ctx.optional_input(2)
    rank, axis = ctx.ndim(x), int(ctx.attr("axis", 1))
    dtype = _quant_dtype(ctx, zp)
    work = ctx.dtype(x) if ctx.dtype(x) != "float16" else "float32"
    xs = ew.cast(x, work) if ctx.dtype(x) != work else x
    scaled = ew.divide(xs, ew.cast(_along_axis(ctx, scale, rank, axis), work))
    q = ew.round(scaled)
    if zp is not None:
        q = ew.add(q, ew.cast(_along_axis(ctx, zp, rank, axis), work))
    return _saturate(ctx, q, dtype)


@converter("DequantizeLinear", needs=("cast", "subtract", "multiply"), check=_check_block)
def _dequantize(ctx: NodeContext) -> Expr:
    x, scale = ctx.input(0), ctx.input(1)
    zp = ctx.optional_input(2)
    rank, axis = ctx.ndim(x), int(ctx.attr("axis", 1))
    out_dtype = ctx.dtype(scale)
    if not is_float(out_dtype):
        raise ctx.error(f"x_scale must be floating point, got {out_dtype}")
    work = "float64" if ctx.dtype(x) in ("int32", "uint32") else "float32"
    v = ew.cast(x, work)
    if zp is not None:
        v = ew.subtract(v, ew.cast(_along_axis(ctx, zp, rank, axis), work))
    out = ew.multiply(v, ew.cast(_along_axis(ctx, scale, rank, axis), work))
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
