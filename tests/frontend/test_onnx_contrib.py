"""onnxruntime's ``com.microsoft`` contrib operators (the ones TVM imports), checked against
onnxruntime itself."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.frontend._onnx_helpers import run_kiln, run_ort

_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
         np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int16): TensorProto.INT16,
         np.dtype(np.uint8): TensorProto.UINT8}


def _ms_model(op: str, inputs: Sequence[tuple[str, np.ndarray | None]], n_outputs: int = 1,
              initializers: Sequence[tuple[str, np.ndarray]] = (),
              **attrs: Any) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One com.microsoft node; ``(name, None)`` omits an optional input."""
    names = [name if value is not None else "" for name, value in inputs]
    feeds = {n: v for n, v in inputs if v is not None}
    init_names = {n for n, _ in initializers}
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [node], "contrib",
        [helper.make_tensor_value_info(n, _ELEM[v.dtype], v.shape) for n, v in feeds.items()
         if n not in init_names],
        [helper.make_empty_tensor_value_info(o) for o in outs],
        [onnx.numpy_helper.from_array(v, n) for n, v in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model, {n: v for n, v in feeds.items() if n not in init_names}


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-5,
           atol: float = 1e-5, outputs: int | None = None) -> None:
    expected = run_ort(model, feeds)
    actual = run_kiln(model, feeds)
    for i, (a, e) in enumerate(list(zip(actual, expected))[:outputs]):
        assert (a.shape, a.dtype) == (e.shape, e.dtype), f"output {i}"
        np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=f"output {i}")


_X = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 2.5, 100.0, -100.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["Gelu", "FastGelu"])
def test_gelu(op: str, dtype: type) -> None:
    model, feeds = _ms_model(op, [("x", _X.astype(dtype))])
    _check(model, feeds, atol=1e-3 if dtype == np.float16 else 1e-5)


@pytest.mark.parametrize("op", ["BiasGelu", "FastGelu"])
def test_gelu_with_bias(op: str) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    bias = np.linspace(-1, 1, 4).astype(np.float32)
    model, feeds = _ms_model(op, [("x", x), ("bias", bias)])
    _check(model, feeds)


def test_skip_layer_normalization() -> None:
    rng = np.random.default_rng(1)
    x, skip = (rng.standard_normal((2, 3, 16)).astype(np.float32) for _ in range(2))
    gamma, beta, bias = (rng.standard_normal(16).astype(np.float32) for _ in range(3))
    model, feeds = _ms_model("SkipLayerNormalization", [("x", x), ("skip", skip), ("gamma", gamma),
                                                         ("beta", beta), ("bias", bias)], epsilon=1e-4)
    _check(model, feeds)
    model, feeds = _ms_model("SkipLayerNormalization", [("x", x), ("skip", skip), ("gamma", gamma)])
    _check(model, feeds)


@pytest.mark.parametrize("with_segments", [True, False])
def test_embed_layer_normalization(with_segments: bool) -> None:
    rng = np.random.default_rng(2)
    batch, seq, hidden, vocab = 2, 3, 8, 5
    ids = rng.integers(0, vocab, (batch, seq)).astype(np.int32)
    segs = rng.integers(0, 2, (batch, seq)).astype(np.int32) if with_segments else None
    word = rng.standard_normal((vocab, hidden)).astype(np.float32)
    pos = rng.standard_normal((seq + 2, hidden)).astype(np.float32)
    seg_emb = rng.standard_normal((2, hidden)).astype(np.float32) if with_segments else None
    gamma, beta = (rng.standard_normal(hidden).astype(np.float32) for _ in range(2))
    mask = np.array([[1, 1, 0], [1, 0, 0]], dtype=np.int32)
    model, feeds = _ms_model("EmbedLayerNormalization",
                             [("ids", ids), ("segs", segs), ("word", word), ("pos", pos),
                              ("seg_emb", seg_emb), ("gamma", gamma), ("beta", beta), ("mask", mask)],
                             n_outputs=2, epsilon=1e-4)
    _check(model, feeds, rtol=1e-4, atol=1e-4)


def _attention_inputs(rng: np.random.Generator, batch: int, seq: int, hin: int, heads: int,
                      head: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = rng.standard_normal((batch, seq, hin)).astype(np.float32)
    w = (rng.standard_normal((hin, 3 * heads * head)) * 0.3).astype(np.float32)
    b = rng.standard_normal(3 * heads * head).astype(np.float32)
    return x, w, b


@pytest.mark.parametrize("unidirectional", [0, 1])
@pytest.mark.parametrize("past_len", [0, 3])
def test_attention(unidirectional: int, past_len: int) -> None:
    rng = np.random.default_rng(3 + unidirectional + past_len)
    batch, seq, hin, heads, head = 3, 4, 5, 2, 3
    x, w, b = _attention_inputs(rng, batch, seq, hin, heads, head)
    # a 0/1 key mask whose first key is masked in some rows (a fully masked causal row included)
    mask = rng.integers(0, 2, (batch, past_len + seq)).astype(np.int32)
    mask[0, :] = [0] + [1] * (past_len + seq - 1)
    inputs: list[tuple[str, np.ndarray | None]] = [("x", x), ("w", w), ("b", b), ("mask", mask)]
    if past_len:
        inputs.append(("past", rng.random((2, batch, heads, past_len, head)).astype(np.float32)))
    model, feeds = _ms_model("Attention", inputs, n_outputs=2, num_heads=heads,
                             unidirectional=unidirectional)
    _check(model, feeds, rtol=1e-4, atol=1e-4)


def test_qattention() -> None:
    rng = np.random.default_rng(4)
    batch, seq, hin, heads, head = 2, 3, 6, 2, 4
    x = rng.integers(0, 255, (batch, seq, hin)).astype(np.uint8)
    w = rng.integers(0, 255, (hin, 3 * heads * head)).astype(np.uint8)
    b = rng.standard_normal(3 * heads * head).astype(np.float32)
    scales = [("x_scale", np.array(0.01, np.float32)), ("w_scale", np.array(0.02, np.float32))]
    zps = [("x_zp", np.array(120, np.uint8)), ("w_zp", np.array(130, np.uint8))]
    mask = np.array([[1, 1, 0], [1, 0, 1]], dtype=np.int32)
    model, feeds = _ms_model("QAttention", [("x", x), ("w", w), ("b", b), *scales, ("mask", mask), *zps],
                             n_outputs=2, num_heads=heads, unidirectional=1,
                             initializers=[*scales, *zps])
    _check(model, feeds, rtol=1e-3, atol=1e-3)


def test_matmul_integer16() -> None:
    rng = np.random.default_rng(5)
    a = rng.integers(-2000, 2000, (2, 3, 4)).astype(np.int16)
    b = rng.integers(-2000, 2000, (4, 5)).astype(np.int16)
    model, feeds = _ms_model("MatMulInteger16", [("a", a), ("b", b)])
    _check(model, feeds, rtol=0, atol=0)


@pytest.mark.parametrize("quantized_out", [True, False])
@pytest.mark.parametrize("per_column", [True, False])
def test_qgemm(quantized_out: bool, per_column: bool) -> None:
    rng = np.random.default_rng(6)
    a = rng.integers(0, 255, (4, 6)).astype(np.uint8)
    b = rng.integers(0, 255, (5, 6)).astype(np.uint8)
    n = 5 if per_column else ()
    consts = [("a_scale", np.array(0.05, np.float32)), ("a_zp", np.array(7, np.uint8)),
              ("b_scale", rng.random(n).astype(np.float32)),
              ("b_zp", rng.integers(0, 255, n).astype(np.uint8))]
    c = rng.integers(-1000, 1000, 5).astype(np.int32)
    inputs: list[tuple[str, np.ndarray | None]] = [("a", a), consts[0], consts[1], ("b", b), consts[2],
                                                   consts[3], ("c", c)]
    if quantized_out:
        y = [("y_scale", np.array(40.0, np.float32)), ("y_zp", np.array(100, np.uint8))]
        inputs += y
        consts += y
    model, feeds = _ms_model("QGemm", inputs, initializers=consts, alpha=0.5, transB=1)
    _check(model, feeds, rtol=1e-5, atol=0 if quantized_out else 1e-3)


@pytest.mark.parametrize("q_heads", [4, 2])
def test_preview_domain_flex_attention_expands_from_its_onnx_function(q_heads: int) -> None:
    # ai.onnx.preview.FlexAttention has no Kiln converter: ONNX builds its body (with the
    # score_mod subgraph inlined) for the node, and Kiln imports that; GQA when q_heads > 2
    b, kv_heads, sq, skv, d = 1, 2, 3, 5, 4
    cap = 2.0
    score_mod = helper.make_graph(
        [helper.make_node("Div", ["s", "c"], ["t"]), helper.make_node("Tanh", ["t"], ["u"]),
         helper.make_node("Mul", ["u", "c"], ["out"])], "softcap",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.array(cap, np.float32), "c")])
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview",
                            score_mod=score_mod, scale=0.25)
    shapes = {"Q": [b, q_heads, sq, d], "K": [b, kv_heads, skv, d], "V": [b, kv_heads, skv, d]}
    graph = helper.make_graph(
        [node], "flex", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [b, q_heads, sq, d])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                    helper.make_opsetid("ai.onnx.preview", 1)])
    rng = np.random.default_rng(7)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    k = np.repeat(feeds["K"], q_heads // kv_heads, axis=1)
    v = np.repeat(feeds["V"], q_heads // kv_heads, axis=1)
    scores = np.tanh(feeds["Q"] @ k.transpose(0, 1, 3, 2) * 0.25 / cap) * cap
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    want = probs / probs.sum(-1, keepdims=True) @ v
    np.testing.assert_allclose(run_kiln(model, feeds)[0], want, rtol=1e-5, atol=1e-6)
