"""ONNX converters: onnxruntime's ``com.microsoft`` contrib operators that TVM imports (Gelu,
FastGelu, BiasGelu, SkipLayerNormalization, EmbedLayerNormalization, Attention, QAttention,
MatMulInteger16, QGemm).

Each follows onnxruntime's CPU kernel: the GELU variants use erf (Gelu, BiasGelu) or the tanh
approximation (FastGelu) in the input's dtype; the layer norms normalize over the last axis;
Attention splits one packed QKV projection into ``num_heads`` heads, appends ``past`` keys and
values, adds ``mask_filter_value`` (-10000) where the raw 0/1 mask is 0 and, when
``unidirectional``, above the causal diagonal, and returns ``present`` (the keys and values,
stacked). The quantized ops subtract zero points and accumulate exactly (int32 or float32 sums of
8-bit products) before scaling.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln.frontend.onnx_common import NodeContext, const, converter, scalar_like
from kiln.frontend.onnx_nn import matmul
from kiln.frontend.onnx_quant import _along_axis, _centered, _saturate
from kiln.frontend.onnx_tensor import reshape_to
from kiln.ir.expr import Expr
from kiln.op import elemwise as ew

__all__: list[str] = []

MS = "com.microsoft."


def _tf() -> Any:
    from kiln.op import transform

    return transform


def _nn() -> Any:
    from kiln.op import nn

    return nn


def _gelu_erf(ctx: NodeContext, x: Expr) -> Expr:
    erf = ew.erf(ew.multiply(x, scalar_like(ctx, 1.0 / math.sqrt(2.0), x)))
    return ew.multiply(ew.multiply(scalar_like(ctx, 0.5, x), x), ew.add(scalar_like(ctx, 1, x), erf))


def _gelu_tanh(ctx: NodeContext, x: Expr) -> Expr:
    cube = ew.multiply(ew.multiply(x, x), x)
    inner = ew.multiply(scalar_like(ctx, math.sqrt(2.0 / math.pi), x),
                        ew.add(x, ew.multiply(scalar_like(ctx, 0.044715, x), cube)))
    return ew.multiply(ew.multiply(scalar_like(ctx, 0.5, x), x),
                       ew.add(scalar_like(ctx, 1, x), ew.tanh(inner)))


@converter(MS + "Gelu", needs=("erf",))
def _ms_gelu(ctx: NodeContext) -> Expr:
    return _gelu_erf(ctx, ctx.input(0))


@converter(MS + "BiasGelu", needs=("erf",))
def _ms_bias_gelu(ctx: NodeContext) -> Expr:
    return _gelu_erf(ctx, ew.add(ctx.input(0), ctx.input(1)))


@converter(MS + "FastGelu", needs=("tanh",))
def _ms_fast_gelu(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    bias = ctx.optional_input(1)
    return _gelu_tanh(ctx, x if bias is None else ew.add(x, bias))


def _layer_norm_last(ctx: NodeContext, x: Expr, gamma: Expr, beta: Expr | None, eps: float) -> Expr:
    shape = ctx.shape(x)
    if beta is None:
        beta = const(np.zeros(shape[-1]), ctx.dtype(x))
    return _nn().layer_norm(x, gamma, beta, axis=-1, epsilon=eps)


@converter(MS + "SkipLayerNormalization", needs=("nn.layer_norm", "mean", "rsqrt"))
def _ms_skip_layer_norm(ctx: NodeContext) -> list[Expr | None]:
    x = ew.add(ctx.input(0), ctx.input(1))
    bias = ctx.optional_input(4)
    if bias is not None:
        x = ew.add(x, bias)
    gamma, beta = ctx.input(2), ctx.optional_input(3)
    eps = float(ctx.attr("epsilon", 1e-12))
    out: list[Expr | None] = [_layer_norm_last(ctx, x, gamma, beta, eps)]
    if ctx.wants_output(1) or ctx.wants_output(2):
        from kiln.op import reduce

        mean = reduce.mean(x, axis=[-1], keepdims=True)
        centered = ew.subtract(x, mean)
        var = reduce.mean(ew.multiply(centered, centered), axis=[-1], keepdims=True)
        out += [mean, ew.rsqrt(ew.add(var, scalar_like(ctx, eps, x)))]
    else:
        out += [None, None]
    out.append(x)
    return out


@converter(MS + "EmbedLayerNormalization", needs=("take", "nn.layer_norm", "sum", "cast"))
def _ms_embed_layer_norm(ctx: NodeContext) -> list[Expr | None]:
    ids = ctx.input(0)
    batch, seq = ctx.shape(ids)
    word, pos = ctx.input(2), ctx.input(3)
    emb = _tf().take(word, ids, axis=0)
    position_ids = ctx.optional_input(8)
    if position_ids is None:
        pos_emb = _tf().strided_slice(pos, [0], [seq], axes=[0])
        emb = ew.add(emb, reshape_to(ctx, pos_emb, (1, seq, ctx.shape(pos)[1])))
    else:
        emb = ew.add(emb, _tf().take(pos, position_ids, axis=0))
    segment_ids, segment = ctx.optional_input(1), ctx.optional_input(4)
    if segment_ids is not None and segment is not None:
        emb = ew.add(emb, _tf().take(segment, segment_ids, axis=0))
    eps = float(ctx.attr("epsilon", 1e-12))
    out = _layer_norm_last(ctx, emb, ctx.input(5), ctx.optional_input(6), eps)
    mask = ctx.optional_input(7)
    mask_index: Expr
    if mask is not None:
        from kiln.op import reduce

        mask_index = ew.cast(reduce.sum(ew.cast(mask, "int32"), axis=[1]), "int32")
    else:
        mask_index = const(np.zeros(batch, dtype=np.int32))
    return [out, mask_index, emb]


def _attention(ctx: NodeContext, qkv: Expr, mask: Expr | None, past: Expr | None) -> list[Expr | None]:
    """Multi-head attention of a packed ``(B, S, Hq + Hk + Hv)`` projection."""
    batch, seq, total = ctx.shape(qkv)
    heads = int(ctx.attr("num_heads"))
    sizes = [int(s) for s in ctx.attr("qkv_hidden_sizes", [])] or [total // 3] * 3
    if sum(sizes) != total or any(s % heads for s in sizes) or sizes[0] != sizes[1]:
        raise ctx.error(f"qkv_hidden_sizes {sizes} do not fit a projection of width {total} and "
                        f"{heads} heads")
    tf = _tf()
    q, k, v = tf.split(qkv, [sizes[0], sizes[0] + sizes[1]], axis=2)
    head, v_head = sizes[0] // heads, sizes[2] // heads

    def heads_first(x: Expr, size: int) -> Expr:  # (B, S, N*h) -> (B, N, S, h)
        return tf.transpose(reshape_to(ctx, x, (batch, seq, heads, size)), (0, 2, 1, 3))

    q, k, v = heads_first(q, head), heads_first(k, head), heads_first(v, v_head)
    past_len = 0
    if past is not None:
        past_len = ctx.shape(past)[3]
        pk, pv = tf.split(past, 2, axis=0)
        k = tf.concatenate([reshape_to(ctx, pk, ctx.shape(past)[1:]), k], axis=2)
        v = tf.concatenate([reshape_to(ctx, pv, ctx.shape(past)[1:]), v], axis=2)
    present = tf.stack([k, v], axis=0)
    total_len = past_len + seq
    dtype = ctx.dtype(qkv)
    scale = float(ctx.attr("scale", 0.0) or 1.0 / math.sqrt(head))
    q3 = reshape_to(ctx, q, (batch * heads, seq, head))
    k3 = reshape_to(ctx, k, (batch * heads, total_len, head))
    scores = _nn().batch_matmul(q3, k3, transpose_a=False, transpose_b=True)
    scores = reshape_to(ctx, ew.multiply(scores, const(scale, dtype)), (batch, heads, seq, total_len))
    filler = float(ctx.attr("mask_filter_value", -10000.0))
    if mask is not None:
        mask_shape = ctx.shape(mask)
        if mask_shape != (batch, total_len):
            raise ctx.unsupported(f"mask_index of shape {mask_shape} (only the raw (batch, "
                                  f"{total_len}) 0/1 mask is supported)")
        keep = ew.greater(mask, scalar_like(ctx, 0, mask))
        raw = ew.where(keep, const(0.0, dtype), const(filler, dtype))
        scores = ew.add(scores, reshape_to(ctx, raw, (batch, 1, 1, total_len)))
    if int(ctx.attr("unidirectional", 0)):
        # a key after the query's position is excluded outright (not by mask_filter_value)
        future = np.triu(np.ones((seq, total_len), dtype=bool), k=past_len + 1)
        lowest = float(np.finfo(np_float(dtype)).min)
        scores = ew.where(const(future.reshape(1, 1, seq, total_len)), const(lowest, dtype), scores)
    probs = _nn().softmax(scores, axis=-1)
    v3 = reshape_to(ctx, v, (batch * heads, total_len, v_head))
    p3 = reshape_to(ctx, probs, (batch * heads, seq, total_len))
    ctx_out = _nn().batch_matmul(p3, tf.transpose(v3, (0, 2, 1)), transpose_a=False, transpose_b=True)
    out = tf.transpose(reshape_to(ctx, ctx_out, (batch, heads, seq, v_head)), (0, 2, 1, 3))
    return [reshape_to(ctx, out, (batch, seq, heads * v_head)), present]


def np_float(dtype: str) -> Any:
    return np.float16 if dtype == "float16" else np.float64 if dtype == "float64" else np.float32


_ATTENTION_NEEDS = ("nn.dense", "nn.batch_matmul", "nn.softmax", "split", "transpose", "concatenate",
                    "stack", "where", "greater")


@converter(MS + "Attention", needs=_ATTENTION_NEEDS)
def _ms_attention(ctx: NodeContext) -> list[Expr | None]:
    qkv = ew.add(matmul(ctx, ctx.input(0), ctx.input(1)), ctx.input(2))
    for i, what in ((5, "relative_position_bias"), (6, "past_sequence_length"), (7, "attention_bias")):
        if ctx.has_input(i):
            raise ctx.unsupported(f"Attention with input {i} ({what})")
    return _attention(ctx, qkv, ctx.optional_input(3), ctx.optional_input(4))


@converter(MS + "QAttention", needs=(*_ATTENTION_NEEDS, "cast", "subtract", "multiply"))
def _ms_qattention(ctx: NodeContext) -> list[Expr | None]:
    x, w, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    # float32 sums of products of 8-bit values are exact while they stay below 2**24
    xc = ew.cast(_centered(ctx, x, ctx.optional_input(6), ctx.ndim(x), ctx.ndim(x) - 1), "float32")
    wc = ew.cast(_centered(ctx, w, ctx.optional_input(7), ctx.ndim(w), ctx.ndim(w) - 1), "float32")
    scale = ew.multiply(reshape_to(ctx, ctx.input(3), ()), _along_axis(ctx, ctx.input(4), 2, 1))
    qkv = ew.add(ew.multiply(matmul(ctx, xc, wc), scale), bias)
    return _attention(ctx, qkv, ctx.optional_input(5), ctx.optional_input(8))


@converter(MS + "MatMulInteger16", needs=("nn.dense", "nn.batch_matmul", "cast"))
def _ms_matmul_integer16(ctx: NodeContext) -> Expr:
    return matmul(ctx, ew.cast(ctx.input(0), "int32"), ew.cast(ctx.input(1), "int32"))


@converter(MS + "QGemm", needs=("nn.dense", "cast", "round", "clip"))
def _ms_qgemm(ctx: NodeContext) -> Expr:
    a, a_scale, a_zp, b, b_scale, b_zp = (ctx.input(i) for i in range(6))
    if int(ctx.attr("transA", 0)):
        a = _tf().transpose(a, (1, 0))
    if int(ctx.attr("transB", 0)):
        b = _tf().transpose(b, (1, 0))
    acc = matmul(ctx, _centered(ctx, a, a_zp, 2, 0), _centered(ctx, b, b_zp, 2, 1))
    c = ctx.optional_input(6)
    if c is not None:
        acc = ew.add(acc, ew.cast(c, "int32"))
    alpha = float(ctx.attr("alpha", 1.0))
    scale = ew.multiply(ew.cast(reshape_to(ctx, a_scale, ()), "float64"),
                        ew.cast(_along_axis(ctx, b_scale, 2, 1), "float64"))
    y = ew.multiply(ew.multiply(ew.cast(acc, "float64"), scale), const(alpha, "float64"))
    y_scale = ctx.optional_input(7)
    if y_scale is None:
        return ew.cast(y, "float32")
    y = ew.divide(y, ew.cast(reshape_to(ctx, y_scale, ()), "float64"))
    y_zp = ctx.optional_input(8)
    if y_zp is not None:
        y = ew.add(ew.round(y), ew.cast(reshape_to(ctx, y_zp, ()), "float64"))
    return _saturate(ctx, y, ctx.dtype(y_zp) if y_zp is not None else "uint8")
