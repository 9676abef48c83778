"""ONNX builders for the transformer benchmark models: a ViT and a BERT-style encoder.

* :func:`vit` writes timm's VisionTransformer as exported at opset 17: a strided Conv patch
  embedding, a class token and position embedding as initializers, pre-norm blocks with
  ``LayerNormalization`` ops, one fused QKV projection (MatMul + Add) split into heads by
  Reshape/Transpose and Split/Squeeze, scaled dot-product attention with Softmax, an erf GELU
  MLP, and a head on the class token.
* :func:`bert` writes a MiniLM/BERT encoder as older exporters did (opset 14): int64
  ``input_ids`` and ``attention_mask`` inputs, word/position/token-type embeddings via Gather,
  the mask turned into an additive bias with Unsqueeze/Cast/Sub/Mul, layer norm spelled out as
  ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, separate Q/K/V projections and erf GELU.

Linear weights are drawn with standard deviation ``1/sqrt(fan_in)`` so that attention scores are
not all zero and the softmax is exercised.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from bench.onnx_graph import GraphBuilder, param_name

__all__ = ["bert", "vit"]


def _linear(b: GraphBuilder, x: str, fan_in: int, fan_out: int, scope: str) -> str:
    """``x @ W + bias`` as MatMul + Add, the way exporters write ``nn.Linear`` on 3-D inputs."""
    name = param_name(scope)
    w = b.normal(f"{name}.weight", (fan_in, fan_out), 1.0 / math.sqrt(fan_in))
    bias = b.normal(f"{name}.bias", (fan_out,), 0.02)
    return b.node("Add", [b.node("MatMul", [x, w], scope), bias], scope)


def _gelu_erf(b: GraphBuilder, x: str, scope: str) -> str:
    """``x * 0.5 * (1 + erf(x / sqrt(2)))`` in the exporters' order of operations."""
    sqrt2 = b.const(f"{scope}/Constant_sqrt2", np.float32(math.sqrt(2.0)))
    one = b.const(f"{scope}/Constant_one", np.float32(1.0))
    half = b.const(f"{scope}/Constant_half", np.float32(0.5))
    erf = b.node("Erf", [b.node("Div", [x, sqrt2], scope)], scope)
    return b.node("Mul", [b.node("Mul", [x, b.node("Add", [erf, one], scope)], scope), half],
                  scope)


def _shape(b: GraphBuilder, name: str, dims: tuple[int, ...]) -> str:
    return b.const(name, np.array(dims, dtype=np.int64))


def _layer_norm(b: GraphBuilder, x: str, dim: int, scope: str, eps: float) -> str:
    name = param_name(scope)
    gamma = b.normal(f"{name}.weight", (dim,), 0.1, mean=1.0)
    beta = b.normal(f"{name}.bias", (dim,), 0.1)
    return b.node("LayerNormalization", [x, gamma, beta], scope, axis=-1, epsilon=eps)


def _attention_core(b: GraphBuilder, q: str, k_t: str, v: str, scale: float, scope: str,
                    bias: str | None = None) -> str:
    """``softmax(q @ k_t * scale + bias) @ v`` for (1, heads, tokens, head_dim) tensors."""
    scores = b.node("MatMul", [q, k_t], scope)
    scores = b.node("Mul", [scores, b.const(f"{scope}/Constant_scale", np.float32(scale))], scope)
    if bias is not None:
        scores = b.node("Add", [scores, bias], scope)
    probs = b.node("Softmax", [scores], scope, axis=-1)
    return b.node("MatMul", [probs, v], scope)


def _vit_attention(b: GraphBuilder, x: str, tokens: int, dim: int, heads: int, scope: str) -> str:
    head_dim = dim // heads
    qkv = _linear(b, x, dim, 3 * dim, f"{scope}/qkv")
    qkv = b.node("Reshape", [qkv, _shape(b, f"{scope}/shape_qkv", (1, tokens, 3, heads, head_dim))],
                 scope)
    qkv = b.node("Transpose", [qkv], scope, perm=[2, 0, 3, 1, 4])
    parts = b.node_outputs("Split", [qkv, _shape(b, f"{scope}/split", (1, 1, 1))], scope,
                           num_outputs=3, axis=0)
    axis0 = _shape(b, f"{scope}/axes0", (0,))
    q, k, v = (b.node("Squeeze", [p, axis0], scope) for p in parts)
    k_t = b.node("Transpose", [k], scope, perm=[0, 1, 3, 2])
    y = _attention_core(b, q, k_t, v, head_dim ** -0.5, scope)
    y = b.node("Transpose", [y], scope, perm=[0, 2, 1, 3])
    y = b.node("Reshape", [y, _shape(b, f"{scope}/shape_out", (1, tokens, dim))], scope)
    return _linear(b, y, dim, dim, f"{scope}/proj")


def vit(image_size: int = 224, patch: int = 16, dim: int = 192, depth: int = 12, heads: int = 3,
        mlp: int = 768, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """A ViT (``vit_tiny_patch16_224`` by default) as ONNX (opset 17), batch 1, float32.

    Parameters
    ----------
    image_size : int
        Height and width of the ``input`` image; ``(image_size / patch)^2 + 1`` tokens.
    patch : int
        Patch size (kernel and stride of the embedding Conv).
    dim : int
        Embedding width.
    depth : int
        Transformer blocks.
    heads : int
        Attention heads (``dim`` must be a multiple).
    mlp : int
        Hidden width of the MLP.
    num_classes : int
        Outputs of the head.
    seed : int
        Seed of the random weights.

    Returns
    -------
    onnx.ModelProto
        Input ``input`` ``(1, 3, image_size, image_size)``, output ``output`` ``(1, num_classes)``.
    """
    if dim % heads or image_size % patch:
        raise ValueError(f"vit: dim {dim} must be a multiple of heads {heads} and image_size "
                         f"{image_size} a multiple of patch {patch}")
    b = GraphBuilder("vit", seed)
    grid = image_size // patch
    tokens = grid * grid + 1
    x = b.input("input", TensorProto.FLOAT, (1, 3, image_size, image_size))
    w = b.normal("patch_embed.proj.weight", (dim, 3, patch, patch), 1.0 / math.sqrt(3 * patch ** 2))
    x = b.node("Conv", [x, w, b.normal("patch_embed.proj.bias", (dim,), 0.02)], "/patch_embed/proj",
               dilations=[1, 1], group=1, kernel_shape=[patch, patch], pads=[0, 0, 0, 0],
               strides=[patch, patch])
    x = b.node("Reshape", [x, _shape(b, "/patch_embed/shape", (1, dim, grid * grid))], "/patch_embed")
    x = b.node("Transpose", [x], "/patch_embed", perm=[0, 2, 1])
    x = b.node("Concat", [b.normal("cls_token", (1, 1, dim), 0.1), x], "", axis=1)
    x = b.node("Add", [x, b.normal("pos_embed", (1, tokens, dim), 0.1)], "")
    for i in range(depth):
        scope = f"/blocks/blocks.{i}"
        y = _layer_norm(b, x, dim, f"{scope}/norm1", 1e-6)
        x = b.node("Add", [x, _vit_attention(b, y, tokens, dim, heads, f"{scope}/attn")], scope)
        y = _layer_norm(b, x, dim, f"{scope}/norm2", 1e-6)
        y = _gelu_erf(b, _linear(b, y, dim, mlp, f"{scope}/mlp/fc1"), f"{scope}/mlp/act")
        x = b.node("Add", [x, _linear(b, y, mlp, dim, f"{scope}/mlp/fc2")], scope)
    x = _layer_norm(b, x, dim, "/norm", 1e-6)
    cls = b.node("Gather", [x, b.const("/Constant_cls_index", np.int64(0))], "", axis=1)
    head = b.node("Gemm", [cls, b.normal("head.weight", (num_classes, dim), 1.0 / math.sqrt(dim)),
                           b.normal("head.bias", (num_classes,), 0.02)], "/head", transB=1)
    b.output(head, "output", (1, num_classes))
    return b.model(opset=17)


def _layer_norm_decomposed(b: GraphBuilder, x: str, dim: int, scope: str, eps: float) -> str:
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` over the last axis, spelled out."""
    name = param_name(scope)
    mean = b.node("ReduceMean", [x], scope, axes=[-1], keepdims=1)
    centred = b.node("Sub", [x, mean], scope)
    square = b.node("Pow", [centred, b.const(f"{scope}/Constant_two", np.float32(2.0))], scope)
    var = b.node("ReduceMean", [square], scope, axes=[-1], keepdims=1)
    std = b.node("Sqrt", [b.node("Add", [var, b.const(f"{scope}/Constant_eps", np.float32(eps))],
                                 scope)], scope)
    normed = b.node("Div", [centred, std], scope)
    gamma = b.normal(f"{name}.weight", (dim,), 0.1, mean=1.0)
    beta = b.normal(f"{name}.bias", (dim,), 0.1)
    return b.node("Add", [b.node("Mul", [normed, gamma], scope), beta], scope)


def _split_heads(b: GraphBuilder, x: str, seq: int, heads: int, head_dim: int, scope: str,
                 perm: list[int]) -> str:
    x = b.node("Reshape", [x, _shape(b, f"{scope}/shape", (1, seq, heads, head_dim))], scope)
    return b.node("Transpose", [x], scope, perm=perm)


def _bert_layer(b: GraphBuilder, x: str, mask_bias: str, seq: int, hidden: int, heads: int,
                intermediate: int, scope: str) -> str:
    head_dim = hidden // heads
    att = f"{scope}/attention/self"
    q = _split_heads(b, _linear(b, x, hidden, hidden, f"{att}/query"), seq, heads, head_dim,
                     f"{att}/query", [0, 2, 1, 3])
    k_t = _split_heads(b, _linear(b, x, hidden, hidden, f"{att}/key"), seq, heads, head_dim,
                       f"{att}/key", [0, 2, 3, 1])
    v = _split_heads(b, _linear(b, x, hidden, hidden, f"{att}/value"), seq, heads, head_dim,
                     f"{att}/value", [0, 2, 1, 3])
    ctx = _attention_core(b, q, k_t, v, head_dim ** -0.5, att, bias=mask_bias)
    ctx = b.node("Transpose", [ctx], att, perm=[0, 2, 1, 3])
    ctx = b.node("Reshape", [ctx, _shape(b, f"{att}/shape_out", (1, seq, hidden))], att)
    out = f"{scope}/attention/output"
    y = b.node("Add", [_linear(b, ctx, hidden, hidden, f"{out}/dense"), x], out)
    x = _layer_norm_decomposed(b, y, hidden, f"{out}/LayerNorm", 1e-12)
    y = _gelu_erf(b, _linear(b, x, hidden, intermediate, f"{scope}/intermediate/dense"),
                  f"{scope}/intermediate/intermediate_act_fn")
    y = b.node("Add", [_linear(b, y, intermediate, hidden, f"{scope}/output/dense"), x],
               f"{scope}/output")
    return _layer_norm_decomposed(b, y, hidden, f"{scope}/output/LayerNorm", 1e-12)


def bert(seq_len: int = 128, hidden: int = 384, heads: int = 12, layers: int = 6,
         intermediate: int = 1536, vocab: int = 30522, max_positions: int = 512,
         seed: int = 0) -> onnx.ModelProto:
    """A BERT encoder (MiniLM-L6 by default) as ONNX (opset 14), batch 1.

    Parameters
    ----------
    seq_len : int
        Tokens per sequence.
    hidden : int
        Hidden width.
    heads : int
        Attention heads (``hidden`` must be a multiple).
    layers : int
        Encoder layers.
    intermediate : int
        Hidden width of the feed-forward block.
    vocab : int
        Rows of the word-embedding table.
    max_positions : int
        Rows of the position-embedding table (at least ``seq_len``).
    seed : int
        Seed of the random weights.

    Returns
    -------
    onnx.ModelProto
        Inputs ``input_ids`` and ``attention_mask`` (int64, ``(1, seq_len)``), output
        ``last_hidden_state`` float32 ``(1, seq_len, hidden)``.
    """
    if hidden % heads or seq_len > max_positions:
        raise ValueError(f"bert: hidden {hidden} must be a multiple of heads {heads} and seq_len "
                         f"{seq_len} at most max_positions {max_positions}")
    b = GraphBuilder("bert", seed)
    ids = b.input("input_ids", TensorProto.INT64, (1, seq_len))
    mask = b.input("attention_mask", TensorProto.INT64, (1, seq_len))
    emb = "/embeddings"
    words = b.node("Gather", [b.normal("embeddings.word_embeddings.weight", (vocab, hidden), 0.5),
                              ids], f"{emb}/word_embeddings", axis=0)
    positions = b.const("embeddings.position_ids", np.arange(seq_len, dtype=np.int64)[None])
    pos = b.node("Gather", [b.normal("embeddings.position_embeddings.weight",
                                     (max_positions, hidden), 0.5), positions],
                 f"{emb}/position_embeddings", axis=0)
    token_types = b.const("embeddings.token_type_ids", np.zeros((1, seq_len), dtype=np.int64))
    types = b.node("Gather", [b.normal("embeddings.token_type_embeddings.weight", (2, hidden), 0.5),
                              token_types], f"{emb}/token_type_embeddings", axis=0)
    x = b.node("Add", [b.node("Add", [words, types], emb), pos], emb)
    x = _layer_norm_decomposed(b, x, hidden, f"{emb}/LayerNorm", 1e-12)
    # (1, seq) int mask -> (1, 1, 1, seq) float bias: 0 where attended, -10000 where masked
    bias = b.node("Unsqueeze", [mask, _shape(b, "/Constant_axes", (1, 2))], "")
    bias = b.node("Cast", [bias], "", to=TensorProto.FLOAT)
    bias = b.node("Sub", [b.const("/Constant_one", np.float32(1.0)), bias], "")
    bias = b.node("Mul", [bias, b.const("/Constant_min", np.float32(-10000.0))], "")
    for i in range(layers):
        x = _bert_layer(b, x, bias, seq_len, hidden, heads, intermediate,
                        f"/encoder/layer.{i}")
    b.output(x, "last_hidden_state", (1, seq_len, hidden))
    return b.model(opset=14)
