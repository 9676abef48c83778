"""The PyTorch-exported benchmark models (``bench/models_real.py``) and the FLOP counts they need.

At a reduced size, each model is exported by PyTorch's own exporter; onnxruntime must reproduce
PyTorch's outputs (the export is faithful), and Kiln's compiled module (``relay.build`` at opt
level 3, graph executor) must reproduce onnxruntime's, to rtol 1e-4 and atol 1e-4 x the output's
largest magnitude. At full size (``--runslow``), the GFLOP of each registry entry is checked and
Kiln is checked again. The counts of ConvTranspose, LSTM and GRU are checked against formulas
written here and a brute-force count.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench.models import MODELS, check_gflop, make_feeds
from bench.onnx_graph import count_gflop, count_macs
from kiln import relay
from tests.frontend._compiled import run_compiled
from tests.frontend._onnx_helpers import run_ort

pytest.importorskip("torch")

from bench import models_real

REAL = ("dbnet_det", "crnn_rec", "yolov8n_det", "mobilenet_v3", "regnet_y_400mf", "conv1d_bilstm",
        "tiny_gru_stream")
# Reduced sizes: every block kind and op of the full model, small enough for a unit test.
SMALL: dict[str, dict[str, Any]] = {
    "dbnet_det": {"image_size": 64},
    "crnn_rec": {"width": 32, "widths": (8, 16, 16, 32), "hidden": 16, "num_classes": 11},
    "yolov8n_det": {"image_size": 64, "num_classes": 10},
    "mobilenet_v3": {"image_size": 32, "width_mult": 0.5, "num_classes": 10},
    "regnet_y_400mf": {"image_size": 32, "widths": (16, 24), "depths": (1, 2), "num_classes": 10},
    "conv1d_bilstm": {"steps": 16, "channels": 32, "hidden": 16, "num_tags": 8},
    "tiny_gru_stream": {},
    "tiny_lstm_stream": {"cell": "lstm"},
}
# The GFLOP of the full-size models (2 x MACs of Conv, ConvTranspose, MatMul, Gemm, LSTM, GRU),
# restated here as the oracle; YOLOv8n's is the 8.7 that ultralytics publishes.
FULL_GFLOP = {"dbnet_det": 5.047, "crnn_rec": 1.280, "yolov8n_det": 8.744, "mobilenet_v3": 0.4332,
              "regnet_y_400mf": 0.8037, "conv1d_bilstm": 0.3334, "tiny_gru_stream": 0.000156}
# The ONNX op types each exported model must contain (what the architecture is about).
REQUIRED_OPS = {
    "dbnet_det": {"Conv", "Relu", "MaxPool", "Add", "Resize", "Concat", "ConvTranspose",
                  "BatchNormalization", "Sigmoid"},
    "crnn_rec": {"Conv", "Relu", "MaxPool", "Squeeze", "Transpose", "LSTM", "MatMul", "Softmax"},
    "yolov8n_det": {"Conv", "Sigmoid", "Mul", "Split", "Concat", "MaxPool", "Resize", "Reshape",
                    "Softmax", "Sub", "Add", "Div"},
    "mobilenet_v3": {"Conv", "HardSwish", "HardSigmoid", "Relu", "GlobalAveragePool", "Mul", "Add",
                     "Flatten", "Gemm"},
    "regnet_y_400mf": {"Conv", "Relu", "GlobalAveragePool", "Sigmoid", "Mul", "Add", "Gemm"},
    "conv1d_bilstm": {"Conv", "Relu", "Transpose", "LSTM", "MatMul"},
    "tiny_gru_stream": {"MatMul", "Relu", "GRU", "Sigmoid"},
    "tiny_lstm_stream": {"MatMul", "Relu", "LSTM", "Sigmoid"},
}
# Kiln's compile of these fits the default run's time; the two largest graphs go under --runslow.
FAST = ("tiny_gru_stream", "tiny_lstm_stream", "conv1d_bilstm", "crnn_rec", "dbnet_det",
        "regnet_y_400mf")
SLOW = ("mobilenet_v3", "yolov8n_det")


def _registry_name(case: str) -> str:
    return "tiny_gru_stream" if case == "tiny_lstm_stream" else case


@functools.cache
def _small(case: str) -> tuple[Any, dict[str, np.ndarray], onnx.ModelProto]:
    """The torch module, inputs and exported model of a case at its reduced size (once per process)."""
    module, feeds, outputs = models_real.torch_model(_registry_name(case), **SMALL[case])
    return module, feeds, models_real.export_torch(module, feeds, outputs)


def _assert_close(actual: np.ndarray, expected: np.ndarray, rel: float = 1e-4) -> None:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    assert np.all(np.isfinite(expected))
    scale = float(np.max(np.abs(expected)))
    np.testing.assert_allclose(actual, expected, rtol=rel, atol=rel * scale)


def _check_kiln(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    expected = run_ort(model, feeds)
    mod, params = relay.frontend.from_onnx(model, freeze_params=False)
    actual = run_compiled(mod, params, feeds)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        _assert_close(a, e)


@pytest.mark.parametrize("case", list(SMALL))
def test_export_is_faithful_and_has_the_architecture_ops(case: str) -> None:
    module, feeds, model = _small(case)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == models_real.OPSET
    assert [i.name for i in model.graph.input] == list(feeds)
    assert REQUIRED_OPS[case] <= {n.op_type for n in model.graph.node}
    expected = models_real.reference_outputs(module, feeds)
    actual = run_ort(model, feeds)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert np.max(np.abs(e)) > 1e-2 and (e.size == 1 or np.std(e) > 1e-4)
        _assert_close(a, e)


@pytest.mark.parametrize("case", [*FAST, *(pytest.param(c, marks=pytest.mark.slow) for c in SLOW)])
def test_kiln_compiled_matches_onnxruntime(case: str) -> None:
    _, feeds, model = _small(case)
    _check_kiln(model, feeds)


def _attr(node: onnx.NodeProto, name: str) -> Any:
    return next(helper.get_attribute_value(a) for a in node.attribute if a.name == name)


def test_rnn_exports_are_what_the_architectures_say() -> None:
    crnn = _small("crnn_rec")[2].graph.node
    lstms = [n for n in crnn if n.op_type == "LSTM"]
    assert len(lstms) == 2  # two stacked layers, both bidirectional
    assert all(_attr(n, "direction") == b"bidirectional" for n in lstms)
    gru = next(n for n in _small("tiny_gru_stream")[2].graph.node if n.op_type == "GRU")
    assert _attr(gru, "linear_before_reset") == 1  # PyTorch's GRU
    assert len(gru.input) == 6 and gru.input[5] == "h"  # the state comes in as initial_h
    convs = [n for n in _small("conv1d_bilstm")[2].graph.node if n.op_type == "Conv"]
    assert [len(_attr(n, "kernel_shape")) for n in convs] == [1, 1]


def test_yolo_dfl_and_output_layout() -> None:
    model = _small("yolov8n_det")[2]
    dfl = next(n for n in model.graph.node if n.op_type == "Conv" and "dfl" in n.name)
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert weights[dfl.input[1]].ravel().tolist() == list(range(16))
    anchors = (64 // 8) ** 2 + (64 // 16) ** 2 + (64 // 32) ** 2
    out = model.graph.output[0].type.tensor_type.shape
    assert [d.dim_value for d in out.dim] == [1, 4 + 10, anchors]


@pytest.mark.parametrize("case", ["tiny_gru_stream", "conv1d_bilstm"])
def test_builders_are_deterministic(case: str) -> None:
    again = models_real.export_torch(*models_real.torch_model(case, **SMALL[case]))
    assert again.SerializeToString() == _small(case)[2].SerializeToString()


def test_regnet_convs_have_groups_of_eight() -> None:
    convs = [n for n in _small("regnet_y_400mf")[2].graph.node if n.op_type == "Conv"]
    grouped = [_attr(n, "group") for n in convs if _attr(n, "group") > 1]
    assert grouped == [2, 3, 3]  # one block of width 16, two of 24: groups of 8 channels


def test_registry_holds_the_seven_models() -> None:
    for name in REAL:
        spec = MODELS[name]
        assert spec.gflop == FULL_GFLOP[name]
        assert spec.builder is getattr(models_real, name)
    for name in ("resnet18", "resnet50", "mobilenet_v2", "vit_tiny", "minilm_l6"):
        assert name in MODELS


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="cell"):
        models_real.tiny_gru_stream(cell="rnn")
    with pytest.raises(ValueError, match="height"):
        models_real.torch_model("crnn_rec", height=48)


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL)
def test_full_size_gflop_and_kiln_matches_onnxruntime(name: str) -> None:
    model = MODELS[name].build()
    gflop, ok = check_gflop(MODELS[name], model)
    assert ok and gflop == pytest.approx(FULL_GFLOP[name], rel=1e-3)
    _check_kiln(model, make_feeds(model, seed=1))


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in SMALL if c not in ("tiny_gru_stream", "conv1d_bilstm")])
def test_builders_are_deterministic_slow(case: str) -> None:
    again = models_real.export_torch(*models_real.torch_model(_registry_name(case), **SMALL[case]))
    assert again.SerializeToString() == _small(case)[2].SerializeToString()


# --- the counts of the new op types --------------------------------------------------------------
def _model(node: onnx.NodeProto, inputs: dict[str, tuple[int, ...]],
           weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _brute_conv_transpose_macs(cin: int, cout: int, size: int, k: int, stride: int, pad: int,
                               groups: int) -> tuple[int, int]:
    """Products that land inside the output (counted one by one), and all products."""
    out = (size - 1) * stride - 2 * pad + k
    landed = 0
    for i in range(size):
        for j in range(size):
            for a in range(k):
                for b in range(k):
                    y, x = i * stride + a - pad, j * stride + b - pad
                    landed += 0 <= y < out and 0 <= x < out
    return (cin * (cout // groups)) * landed, (cin * (cout // groups)) * size * size * k * k


@pytest.mark.parametrize(("cin", "cout", "size", "k", "stride", "pad", "groups"),
                         [(4, 6, 5, 2, 2, 0, 1), (6, 4, 4, 3, 2, 1, 2), (3, 5, 6, 4, 1, 0, 1)])
def test_count_macs_conv_transpose(cin: int, cout: int, size: int, k: int, stride: int, pad: int,
                                   groups: int) -> None:
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[k, k], strides=[stride] * 2,
                            pads=[pad] * 4, group=groups)
    w = np.zeros((cin, cout // groups, k, k), np.float32)
    macs = count_macs(_model(node, {"x": (1, cin, size, size)}, {"w": w}))
    landed, total = _brute_conv_transpose_macs(cin, cout, size, k, stride, pad, groups)
    assert macs == {"Conv": 0, "MatMul": 0, "Gemm": 0, "ConvTranspose": total}
    if pad == 0:  # nothing cropped: every product lands in the output
        assert total == landed


@pytest.mark.parametrize(("op", "gates"), [("LSTM", 4), ("GRU", 3), ("RNN", 1)])
@pytest.mark.parametrize(("direction", "layout"), [("forward", 0), ("bidirectional", 1)])
def test_count_macs_recurrent(op: str, gates: int, direction: str, layout: int) -> None:
    seq, batch, inp, hidden = 7, 2, 5, 3
    dirs = 2 if direction == "bidirectional" else 1
    node = helper.make_node(op, ["x", "w", "r"], ["y"], hidden_size=hidden, direction=direction,
                            layout=layout)
    x_shape = (seq, batch, inp) if layout == 0 else (batch, seq, inp)
    weights = {"w": np.zeros((dirs, gates * hidden, inp), np.float32),
               "r": np.zeros((dirs, gates * hidden, hidden), np.float32)}
    macs = count_macs(_model(node, {"x": x_shape}, weights))
    # per step and direction: the gates' input product (inp) and recurrence product (hidden)
    assert macs[op] == seq * dirs * batch * gates * hidden * (inp + hidden)
    assert count_gflop(_model(node, {"x": x_shape}, weights)) == pytest.approx(2 * macs[op] / 1e9)


def test_count_macs_refuses_unknown_shapes() -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3])
    model = _model(node, {"x": ("N", 3, 8, 8)}, {"w": np.zeros((4, 3, 3, 3), np.float32)})
    with pytest.raises(ValueError, match="unknown"):
        count_macs(model)
