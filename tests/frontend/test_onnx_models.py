"""Whole models in the shape exporters write them, imported by Kiln and compared with onnxruntime.

Each model is built here with onnx.helper and random weights: a ResNet-style CNN, a
MobileNetV2-style depthwise net, a BERT-style encoder layer (mask arithmetic, shape-computed
reshapes, layer norm spelled out as older exporters do, erf GELU), a YOLO-style head and LSTM
sequence models. Kiln runs them with the reference interpreter.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kiln.ir import Call, post_order
from tests.frontend._onnx_helpers import init, make_model, node, run_kiln, run_ort, value_info

RTOL, ATOL = 1e-4, 1e-5


def _close(model, feeds, **kwargs):
    expected = run_ort(model, feeds)
    actual = run_kiln(model, feeds, **kwargs)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(a, e, rtol=RTOL, atol=ATOL)


class _Weights:
    """Seeded random initializers with unique names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.inits = []

    def add(self, name, shape, scale=0.2, positive=False):
        value = self.rng.standard_normal(shape).astype(np.float32) * scale
        if positive:
            value = np.abs(value) + 0.5
        self.inits.append(init(name, value))
        return name

    def const(self, name, value):
        self.inits.append(init(name, np.asarray(value)))
        return name


# --- ResNet-style CNN ------------------------------------------------------------------------

def _conv_bn(w: _Weights, nodes, x, cin, cout, k, stride, name, relu=True):
    pad = k // 2
    nodes.append(node("Conv", [x, w.add(f"{name}.w", (cout, cin, k, k))], [f"{name}.c"],
                      name=f"{name}/Conv", kernel_shape=[k, k], strides=[stride, stride],
                      pads=[pad] * 4))
    nodes.append(node("BatchNormalization",
                      [f"{name}.c", w.add(f"{name}.g", (cout,), positive=True), w.add(f"{name}.b", (cout,)),
                       w.add(f"{name}.m", (cout,)), w.add(f"{name}.v", (cout,), positive=True)],
                      [f"{name}.bn"], name=f"{name}/BatchNormalization", epsilon=1e-5))
    if not relu:
        return f"{name}.bn"
    nodes.append(node("Relu", [f"{name}.bn"], [f"{name}.r"], name=f"{name}/Relu"))
    return f"{name}.r"


def _resnet(batch: int | str):
    w, nodes = _Weights(0), []
    x = _conv_bn(w, nodes, "input", 3, 8, 3, 1, "stem")
    nodes.append(node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x = "pool"
    for i, (cin, cout, stride) in enumerate([(8, 8, 1), (8, 16, 2)]):
        y = _conv_bn(w, nodes, x, cin, cout, 3, stride, f"b{i}a")
        y = _conv_bn(w, nodes, y, cout, cout, 3, 1, f"b{i}b", relu=False)
        skip = x if (cin, stride) == (cout, 1) else _conv_bn(w, nodes, x, cin, cout, 1, stride, f"b{i}s",
                                                              relu=False)
        nodes.append(node("Add", [y, skip], [f"b{i}.sum"]))
        nodes.append(node("Relu", [f"b{i}.sum"], [f"b{i}.out"]))
        x = f"b{i}.out"
    nodes.append(node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(node("Flatten", ["gap"], ["flat"], axis=1))
    nodes.append(node("Gemm", ["flat", w.add("fc.w", (10, 16)), w.add("fc.b", (10,))], ["logits"],
                      transB=1))
    return make_model(nodes, [value_info("input", np.float32, [batch, 3, 16, 16])],
                      [value_info("logits", np.float32, [batch, 10])], w.inits, opset=13)


@pytest.mark.parametrize("freeze", [True, False])
def test_resnet_style(freeze):
    model = _resnet("batch")
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    _close(model, {"input": x}, freeze_params=freeze)


def test_resnet_style_keeps_node_names():
    from kiln.frontend.onnx import from_onnx

    mod, _ = from_onnx(_resnet(1))
    calls = [n for n in post_order(mod["main"]) if isinstance(n, Call)]
    assert calls and all(c.source_names for c in calls)
    names = {s for c in calls for s in c.source_names}
    assert {"stem/Conv", "stem/BatchNormalization", "b1a/Relu"} <= names


# --- MobileNetV2-style depthwise net ---------------------------------------------------------

def _mobilenet(opset: int):
    w, nodes = _Weights(2), []

    def clip6(src, dst):
        if opset >= 11:
            nodes.append(node("Clip", [src, "zero", "six"], [dst]))
        else:
            nodes.append(node("Clip", [src], [dst], min=0.0, max=6.0))

    if opset >= 11:
        w.const("zero", np.array(0.0, np.float32))
        w.const("six", np.array(6.0, np.float32))
    nodes.append(node("Conv", ["x", w.add("stem.w", (8, 3, 3, 3))], ["s"], kernel_shape=[3, 3],
                      strides=[2, 2], pads=[1, 1, 1, 1]))
    clip6("s", "s6")
    x, c = "s6", 8
    for i, expand in enumerate([2, 3]):
        hidden = c * expand
        nodes.append(node("Conv", [x, w.add(f"e{i}.w", (hidden, c, 1, 1)), w.add(f"e{i}.b", (hidden,))],
                          [f"e{i}"], kernel_shape=[1, 1]))
        clip6(f"e{i}", f"e{i}.a")
        depthwise = [f"e{i}.a", w.add(f"d{i}.w", (hidden, 1, 3, 3)), w.add(f"d{i}.b", (hidden,))]
        nodes.append(node("Conv", depthwise, [f"d{i}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                          group=hidden))
        if opset >= 14:
            nodes.append(node("HardSwish", [f"d{i}"], [f"d{i}.a"]))
        else:
            clip6(f"d{i}", f"d{i}.a")
        nodes.append(node("Conv", [f"d{i}.a", w.add(f"p{i}.w", (c, hidden, 1, 1))], [f"p{i}"],
                          kernel_shape=[1, 1]))
        nodes.append(node("Add", [x, f"p{i}"], [f"r{i}"]))
        x = f"r{i}"
    nodes.append(node("ReduceMean", [x], ["pooled"], axes=[2, 3], keepdims=0))
    nodes.append(node("MatMul", ["pooled", w.add("fc.w", (c, 5))], ["mm"]))
    nodes.append(node("Add", ["mm", w.add("fc.b", (5,))], ["out"]))
    return make_model(nodes, [value_info("x", np.float32, [1, 3, 16, 16])],
                      [value_info("out", np.float32, [1, 5])], w.inits, opset=opset)


@pytest.mark.parametrize("opset", [9, 13, 14])
def test_mobilenet_v2_style(opset):
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32) * 3
    _close(_mobilenet(opset), {"x": x})


# --- BERT-style encoder layer -----------------------------------------------------------------

def _layer_norm(w: _Weights, nodes, x, hidden, name):
    """LayerNormalization spelled out the way older exporters write it."""
    nodes += [
        node("ReduceMean", [x], [f"{name}.mean"], axes=[-1]),
        node("Sub", [x, f"{name}.mean"], [f"{name}.d"]),
        node("Pow", [f"{name}.d", "two"], [f"{name}.sq"]),
        node("ReduceMean", [f"{name}.sq"], [f"{name}.var"], axes=[-1]),
        node("Add", [f"{name}.var", "eps"], [f"{name}.ve"]),
        node("Sqrt", [f"{name}.ve"], [f"{name}.std"]),
        node("Div", [f"{name}.d", f"{name}.std"], [f"{name}.n"]),
        node("Mul", [f"{name}.n", w.add(f"{name}.g", (hidden,), positive=True)], [f"{name}.s"]),
        node("Add", [f"{name}.s", w.add(f"{name}.b", (hidden,))], [f"{name}.out"]),
    ]
    return f"{name}.out"


def _linear(w: _Weights, nodes, x, fan_in, fan_out, name):
    nodes.append(node("MatMul", [x, w.add(f"{name}.w", (fan_in, fan_out))], [f"{name}.mm"]))
    nodes.append(node("Add", [f"{name}.mm", w.add(f"{name}.b", (fan_out,))], [f"{name}.out"]))
    return f"{name}.out"


def _heads_shape(nodes, src, heads, head_dim, name):
    """Concat(batch, seq, heads, head_dim) from Shape/Gather/Unsqueeze, as exporters write it."""
    for i, part in enumerate(("batch", "seq")):
        nodes.append(node("Shape", [src], [f"{name}.shape{i}"]))
        nodes.append(node("Gather", [f"{name}.shape{i}", f"idx{i}"], [f"{name}.{part}"], axis=0))
        nodes.append(node("Unsqueeze", [f"{name}.{part}", "axis0"], [f"{name}.{part}1"]))
    nodes.append(node("Concat", [f"{name}.batch1", f"{name}.seq1", "heads_dims"], [f"{name}.shape"],
                      axis=0))
    return f"{name}.shape"


def _bert(batch, seq, hidden=16, heads=2, vocab=30):
    w, nodes = _Weights(4), []
    head_dim = hidden // heads
    w.const("two", np.array(2.0, np.float32))
    w.const("eps", np.array(1e-12, np.float32))
    w.const("one", np.array(1.0, np.float32))
    w.const("neg", np.array(-10000.0, np.float32))
    w.const("scale", np.array(math.sqrt(head_dim), np.float32))
    w.const("sqrt2", np.array(math.sqrt(2.0), np.float32))
    w.const("half", np.array(0.5, np.float32))
    w.const("idx0", np.array(0, np.int64))
    w.const("idx1", np.array(1, np.int64))
    w.const("axis0", np.array([0], np.int64))
    w.const("axes12", np.array([1, 2], np.int64))
    w.const("heads_dims", np.array([heads, head_dim], np.int64))
    w.const("merge_dims", np.array([0, 0, hidden], np.int64))
    nodes.append(node("Gather", [w.add("emb", (vocab, hidden)), "input_ids"], ["embedded"], axis=0))
    x = _layer_norm(w, nodes, "embedded", hidden, "ln0")
    # Extended attention mask: (1 - mask[:, None, None, :]) * -10000.
    nodes += [
        node("Unsqueeze", ["attention_mask", "axes12"], ["mask4"]),
        node("Cast", ["mask4"], ["maskf"], to=1),
        node("Sub", ["one", "maskf"], ["inv"]),
        node("Mul", ["inv", "neg"], ["bias_mask"]),
    ]
    heads_out = {}
    for part in ("q", "k", "v"):
        proj = _linear(w, nodes, x, hidden, hidden, part)
        shape = _heads_shape(nodes, proj, heads, head_dim, part)
        nodes.append(node("Reshape", [proj, shape], [f"{part}.split"]))
        perm = [0, 2, 3, 1] if part == "k" else [0, 2, 1, 3]
        nodes.append(node("Transpose", [f"{part}.split"], [f"{part}.t"], perm=perm))
        heads_out[part] = f"{part}.t"
    nodes += [
        node("MatMul", [heads_out["q"], heads_out["k"]], ["scores"]),
        node("Div", ["scores", "scale"], ["scaled"]),
        node("Add", ["scaled", "bias_mask"], ["masked"]),
        node("Softmax", ["masked"], ["probs"], axis=-1),
        node("MatMul", ["probs", heads_out["v"]], ["ctx"]),
        node("Transpose", ["ctx"], ["ctx.t"], perm=[0, 2, 1, 3]),
        node("Reshape", ["ctx.t", "merge_dims"], ["ctx.m"]),
    ]
    attn = _linear(w, nodes, "ctx.m", hidden, hidden, "o")
    nodes.append(node("Add", [attn, x], ["res1"]))
    x = _layer_norm(w, nodes, "res1", hidden, "ln1")
    inner = _linear(w, nodes, x, hidden, 4 * hidden, "ff1")
    nodes += [
        node("Div", [inner, "sqrt2"], ["g.div"]),
        node("Erf", ["g.div"], ["g.erf"]),
        node("Add", ["g.erf", "one"], ["g.add"]),
        node("Mul", [inner, "g.add"], ["g.mul"]),
        node("Mul", ["g.mul", "half"], ["gelu"]),
    ]
    out = _linear(w, nodes, "gelu", 4 * hidden, hidden, "ff2")
    nodes.append(node("Add", [out, x], ["res2"]))
    final = _layer_norm(w, nodes, "res2", hidden, "ln2")
    nodes.append(node("Identity", [final], ["last_hidden_state"]))
    return make_model(
        nodes,
        [value_info("input_ids", np.int64, [batch, seq]),
         value_info("attention_mask", np.int64, [batch, seq])],
        [value_info("last_hidden_state", np.float32, [batch, seq, hidden])], w.inits, opset=13)


def test_bert_style_encoder_layer():
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 30, size=(2, 7)).astype(np.int64)
    mask = np.ones((2, 7), np.int64)
    mask[1, 4:] = 0
    model = _bert("batch", "sequence")
    _close(model, {"input_ids": ids, "attention_mask": mask})


def test_bert_style_shape_arithmetic_folds_to_constants():
    from kiln.frontend.onnx import from_onnx

    mod, _ = from_onnx(_bert("batch", "sequence"), shape={"input_ids": (2, 7), "attention_mask": (2, 7)})
    ops = {n.op.name for n in post_order(mod["main"]) if isinstance(n, Call)}
    assert "shape_of" not in ops and "concatenate" not in ops
    assert {"nn.softmax", "erf", "reshape", "transpose"} <= ops


# --- YOLO-style head --------------------------------------------------------------------------

def _yolo(anchors=2, classes=3):
    w, nodes = _Weights(6), []
    ch = anchors * (5 + classes)
    w.const("scales", np.array([1.0, 1.0, 2.0, 2.0], np.float32))
    w.const("roi", np.zeros((0,), np.float32))
    w.const("split", np.array([2, 2, 1 + classes], np.int64))
    grid_y, grid_x = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
    grid = np.stack([grid_x, grid_y]).reshape(1, 1, 2, 8, 8).astype(np.float32)
    w.const("grid", grid)
    w.const("stride", np.array(4.0, np.float32))
    w.const("anchor_wh", (np.arange(1, 2 * anchors + 1, dtype=np.float32) * 3).reshape(1, anchors, 2, 1, 1))
    w.const("head_shape", np.array([1, anchors, 5 + classes, 8, 8], np.int64))
    w.const("two", np.array(2.0, np.float32))
    nodes += [
        node("Conv", ["deep", w.add("lat.w", (4, 8, 1, 1))], ["lat"], kernel_shape=[1, 1]),
        node("Resize", ["lat", "roi", "scales"], ["up"], mode="nearest"),
        node("Concat", ["up", "shallow"], ["merged"], axis=1),
        node("Conv", ["merged", w.add("head.w", (ch, 8, 3, 3)), w.add("head.b", (ch,))], ["head"],
             kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("Reshape", ["head", "head_shape"], ["pred"]),
        node("Split", ["pred", "split"], ["xy", "wh", "conf"], axis=2),
        node("Sigmoid", ["xy"], ["xy.s"]),
        node("Add", ["xy.s", "grid"], ["xy.g"]),
        node("Mul", ["xy.g", "stride"], ["xy.out"]),
        node("Exp", ["wh"], ["wh.e"]),
        node("Mul", ["wh.e", "anchor_wh"], ["wh.out"]),
        node("Sigmoid", ["conf"], ["conf.out"]),
        node("Concat", ["xy.out", "wh.out", "conf.out"], ["boxes"], axis=2),
        node("Transpose", ["boxes"], ["detections"], perm=[0, 1, 3, 4, 2]),
    ]
    return make_model(
        nodes,
        [value_info("deep", np.float32, [1, 8, 4, 4]), value_info("shallow", np.float32, [1, 4, 8, 8])],
        [value_info("detections", np.float32, [1, anchors, 8, 8, 5 + classes])], w.inits, opset=13)


def test_yolo_style_head():
    rng = np.random.default_rng(7)
    feeds = {"deep": rng.standard_normal((1, 8, 4, 4)).astype(np.float32),
             "shallow": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}
    _close(_yolo(), feeds)


# --- LSTM sequence models -----------------------------------------------------------------------

def _lstm_model(layout: int, direction: str, with_states: bool, seq_lens: np.ndarray | None = None):
    w, nodes = _Weights(8), []
    seq, batch, feat, hidden = 5, 3, 4, 6
    dirs = 2 if direction == "bidirectional" else 1
    inputs = ["x", w.add("W", (dirs, 4 * hidden, feat), 0.4), w.add("R", (dirs, 4 * hidden, hidden), 0.4),
              w.add("B", (dirs, 8 * hidden), 0.4)]
    state_shape = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    inputs.append(w.const("lens", seq_lens) if seq_lens is not None else "")
    if with_states:
        inputs += [w.add("h0", state_shape, 0.5), w.add("c0", state_shape, 0.5)]
    nodes.append(node("LSTM", inputs, ["Y", "Y_h", "Y_c"], name="encoder/LSTM", hidden_size=hidden,
                      direction=direction, layout=layout))
    y_shape = (batch, seq, dirs, hidden) if layout else (seq, dirs, batch, hidden)
    x_shape = (batch, seq, feat) if layout else (seq, batch, feat)
    model = make_model(nodes, [value_info("x", np.float32, list(x_shape))],
                       [value_info("Y", np.float32, list(y_shape)),
                        value_info("Y_h", np.float32, list(state_shape)),
                        value_info("Y_c", np.float32, list(state_shape))], w.inits, opset=14)
    return model, x_shape


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_sequence_model(direction):
    model, x_shape = _lstm_model(0, direction, with_states=direction != "forward")
    x = np.random.default_rng(9).standard_normal(x_shape).astype(np.float32)
    _close(model, {"x": x})


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_batch_first(direction):
    # onnxruntime runs only layout=0: the oracle is the time-major model on transposed data.
    batch_first, x_shape = _lstm_model(1, direction, with_states=True)
    time_major, _ = _lstm_model(0, direction, with_states=True)
    for t_bf, t_tm in zip(batch_first.graph.initializer, time_major.graph.initializer):
        if t_bf.name in ("h0", "c0"):
            value = np.frombuffer(t_bf.raw_data, np.float32).reshape(t_bf.dims)
            t_tm.CopyFrom(init(t_bf.name, np.ascontiguousarray(value.transpose(1, 0, 2))))
    x = np.random.default_rng(11).standard_normal(x_shape).astype(np.float32)
    y, y_h, y_c = run_ort(time_major, {"x": np.ascontiguousarray(x.transpose(1, 0, 2))})
    expected = [y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), y_c.transpose(1, 0, 2)]
    actual = run_kiln(batch_first, {"x": x})
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=RTOL, atol=ATOL)


def test_lstm_bidirectional_with_sequence_lengths():
    model, x_shape = _lstm_model(0, "bidirectional", True, np.array([5, 2, 4], np.int32))
    x = np.random.default_rng(10).standard_normal(x_shape).astype(np.float32)
    _close(model, {"x": x})
