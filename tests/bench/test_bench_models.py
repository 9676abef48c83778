"""The benchmark suite's builders and helpers, so that they cannot rot.

Every model builder, at a reduced size, must write a valid ONNX model that onnxruntime runs and
that Kiln imports and evaluates (reference interpreter) to onnxruntime's result; at full size,
its GFLOP must match the published figures. The FLOP counter and the kernel cases are checked
against formulas written here, and the alternating timer against the order it must call in.
No test looks at a time.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench._engines import KilnRunner, build_kiln, check_outputs
from bench._timing import Comparison, EngineTimes, compare, runs_per_block, time_alone
from bench.bench_kernels import Conv, Gemm
from bench.models import MODELS, make_feeds
from bench.onnx_graph import count_gflop, count_macs, param_name
from kiln.frontend.onnx import from_onnx
from kiln.interpreter import evaluate
from tests.frontend._onnx_helpers import run_ort

# Reduced sizes: every block kind and op of the full model, small enough for a unit test.
SMALL = {
    "resnet18": {"image_size": 32, "width": 8, "num_classes": 10},
    "resnet50": {"image_size": 32, "width": 8, "num_classes": 10},
    "mobilenet_v2": {"image_size": 32, "width_mult": 0.25, "num_classes": 10},
    "vit_tiny": {"image_size": 32, "patch": 8, "dim": 24, "depth": 2, "heads": 3, "mlp": 48,
                 "num_classes": 10},
    "minilm_l6": {"seq_len": 16, "hidden": 24, "heads": 3, "layers": 2, "intermediate": 48,
                  "vocab": 50, "max_positions": 32},
}
# The published sizes (PERFORMANCE.md), restated here as the oracle.
PUBLISHED_GFLOP = {"resnet18": 3.63, "resnet50": 8.18, "mobilenet_v2": 0.60, "vit_tiny": 2.51,
                   "minilm_l6": 2.87}
# The ONNX op types each model must contain (the features the task asks of its builder).
REQUIRED_OPS = {
    "resnet18": {"Conv", "BatchNormalization", "Relu", "MaxPool", "Add", "GlobalAveragePool",
                 "Flatten", "Gemm"},
    "resnet50": {"Conv", "BatchNormalization", "Relu", "MaxPool", "Add", "GlobalAveragePool",
                 "Flatten", "Gemm"},
    "mobilenet_v2": {"Conv", "BatchNormalization", "Clip", "Add", "GlobalAveragePool", "Flatten",
                     "Gemm"},
    "vit_tiny": {"Conv", "Concat", "LayerNormalization", "MatMul", "Add", "Reshape", "Transpose",
                 "Softmax", "Erf", "Gather", "Gemm"},
    "minilm_l6": {"Gather", "Unsqueeze", "Cast", "Sub", "Mul", "ReduceMean", "Pow", "Sqrt", "Div",
                  "MatMul", "Add", "Reshape", "Transpose", "Softmax", "Erf"},
}

needs_cc = pytest.mark.requires_cc


def _assert_close(actual: np.ndarray, expected: np.ndarray, rel: float = 1e-4) -> None:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    scale = float(np.max(np.abs(expected)))
    np.testing.assert_allclose(actual, expected, rtol=rel, atol=rel * scale)


@pytest.mark.parametrize("name", list(SMALL))
def test_builder_runs_in_onnxruntime_and_kiln_matches(name: str) -> None:
    model = MODELS[name].build(**SMALL[name])
    onnx.checker.check_model(model, full_check=True)
    assert REQUIRED_OPS[name] <= {n.op_type for n in model.graph.node}
    feeds = make_feeds(model, seed=1)
    expected = run_ort(model, feeds)
    assert all(np.all(np.isfinite(e)) and np.std(e) > 1e-3 for e in expected)
    mod, params = from_onnx(model, freeze_params=False)
    out = evaluate(mod, feeds, params=params)
    actual = list(out) if isinstance(out, tuple) else [out]
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        _assert_close(a, e)


@pytest.mark.parametrize("name", list(SMALL))
def test_builders_are_deterministic(name: str) -> None:
    assert (MODELS[name].build(**SMALL[name]).SerializeToString()
            == MODELS[name].build(**SMALL[name]).SerializeToString())


@pytest.mark.parametrize("name", list(PUBLISHED_GFLOP))
def test_full_size_gflop_matches_published(name: str) -> None:
    assert MODELS[name].gflop == PUBLISHED_GFLOP[name]
    assert count_gflop(MODELS[name].build()) == pytest.approx(PUBLISHED_GFLOP[name], rel=0.01)


@needs_cc
@pytest.mark.parametrize("name", list(SMALL))
def test_native_build_matches_onnxruntime(name: str) -> None:
    model = MODELS[name].build(**SMALL[name])
    feeds = make_feeds(model)
    build = build_kiln(model, target="c", opt_level=3)
    assert build.cold_s > 0 and build.warm_s > 0 and build.kernels > 0
    run = KilnRunner(build, feeds, threads=1)
    assert run.threads == 1
    actual = run()
    assert actual is not None
    check = check_outputs(actual, run_ort(model, feeds))
    assert check.ok, check.problem


def _model(node: onnx.NodeProto, inputs: dict[str, tuple[int, ...]],
           weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("cin", "cout", "size", "k", "stride", "groups"),
                         [(3, 8, 9, 3, 1, 1), (4, 6, 10, 3, 2, 2), (8, 8, 7, 3, 1, 8), (5, 7, 6, 1, 1, 1)])
def test_count_macs_conv(cin: int, cout: int, size: int, k: int, stride: int, groups: int) -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k], strides=[stride] * 2,
                            pads=[k // 2] * 4, group=groups)
    w = np.zeros((cout, cin // groups, k, k), np.float32)
    out = (size + 2 * (k // 2) - k) // stride + 1
    macs = count_macs(_model(node, {"x": (1, cin, size, size)}, {"w": w}))
    assert macs == {"Conv": cout * out * out * (cin // groups) * k * k, "MatMul": 0, "Gemm": 0}


@pytest.mark.parametrize(("a", "b"), [((4, 5), (5, 3)), ((2, 3, 4, 6), (6, 7)), ((2, 4, 6), (2, 6, 5))])
def test_count_macs_matmul(a: tuple[int, ...], b: tuple[int, ...]) -> None:
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    macs = count_macs(_model(node, {"a": a}, {"b": np.zeros(b, np.float32)}))
    out = np.zeros(a) @ np.zeros(b)
    assert macs["MatMul"] == out.size * a[-1]


@pytest.mark.parametrize("trans_a", [0, 1])
def test_count_macs_gemm(trans_a: int) -> None:
    m, k, n = 3, 5, 4
    node = helper.make_node("Gemm", ["a", "b"], ["y"], transA=trans_a, transB=1)
    a_shape = (k, m) if trans_a else (m, k)
    assert count_macs(_model(node, {"a": a_shape}, {"b": np.zeros((n, k), np.float32)}))["Gemm"] == m * n * k


@pytest.mark.parametrize(("scope", "expected"), [
    ("/layer1/layer1.0/conv1", "layer1.0.conv1"),
    ("/features/features.1/conv/conv.0/conv.0.0", "features.1.conv.0.0"),
    ("/conv1", "conv1"),
    ("/blocks/blocks.3/attn/qkv", "blocks.3.attn.qkv"),
])
def test_param_name(scope: str, expected: str) -> None:
    assert param_name(scope) == expected


def test_make_feeds_bert_inputs() -> None:
    model = MODELS["minilm_l6"].build(**SMALL["minilm_l6"])
    feeds = make_feeds(model, seed=3)
    ids, mask = feeds["input_ids"], feeds["attention_mask"]
    assert ids.dtype == np.int64 and ids.shape == (1, 16)
    assert ids.min() >= 0 and ids.max() < SMALL["minilm_l6"]["vocab"]
    assert mask.tolist() == [[1] * 12 + [0] * 4]


def _naive_conv(x: np.ndarray, w: np.ndarray, stride: int, groups: int) -> np.ndarray:
    cout, cpg, k, _ = w.shape
    pad = k // 2
    xp = np.pad(x[0].astype(np.float64), ((0, 0), (pad, pad), (pad, pad)))
    size = (x.shape[2] + 2 * pad - k) // stride + 1
    out = np.zeros((cout, size, size))
    per_group = cout // groups
    for o in range(cout):
        g = o // per_group
        for i in range(size):
            for j in range(size):
                window = xp[g * cpg:(g + 1) * cpg, i * stride:i * stride + k, j * stride:j * stride + k]
                out[o, i, j] = np.sum(window * w[o])
    return out[None]


@pytest.mark.parametrize("case", [Gemm("g", 6, 5, 7), Conv("c", 4, 7, 6, 3, stride=2),
                                  Conv("dw", 6, 8, 6, 3, groups=6), Conv("pw", 5, 6, 8, 1)],
                         ids=lambda c: c.name)
def test_kernel_cases_agree(case: Gemm | Conv) -> None:
    x, w = case.arrays(np.random.default_rng(0))
    if isinstance(case, Gemm):
        expected = x.astype(np.float64) @ w.astype(np.float64).T
        macs = case.m * case.n * case.k
    else:
        expected = _naive_conv(x, w, case.stride, case.groups)
        macs = expected.size * (case.cin // case.groups) * case.kernel ** 2
    assert case.gflop == pytest.approx(2 * macs / 1e9)
    model = case.onnx_model(w)
    assert sum(count_macs(model).values()) == macs
    np.testing.assert_allclose(run_ort(model, {"x": x})[0], expected, rtol=1e-4, atol=1e-4)
    mod, params = case.relay_module(w)
    np.testing.assert_allclose(evaluate(mod, {"x": x}, params=params), expected, rtol=1e-4, atol=1e-4)


def test_check_outputs_flags_wrong_results() -> None:
    ref = [np.array([1.0, -2.0, 4.0], np.float32)]
    assert check_outputs([ref[0] + 1e-6], ref).ok
    assert not check_outputs([ref[0] * 1.01], ref).ok
    assert not check_outputs([np.array([1.0, np.nan, 4.0], np.float32)], ref).ok
    assert not check_outputs([ref[0][:2]], ref).ok
    assert not check_outputs([], ref).ok


def test_compare_alternates_blocks() -> None:
    calls: list[str] = []
    result = compare(lambda: calls.append("a"), lambda: calls.append("b"), blocks=4,
                     block_s=1e-9, max_seconds=1e9, warm_up_s=0.0)
    # after the warm-ups (3 calls each), blocks of one run each in the order AB BA AB BA
    assert calls[:6] == ["a"] * 3 + ["b"] * 3
    assert "".join(calls[6:]) == "abbaabba"
    assert result.blocks == 4 and len(result.ratios) == 4
    assert all(len(block) == 1 for block in result.a.blocks + result.b.blocks)
    assert math.isfinite(result.ratio)


def test_best_ratio_compares_each_engines_fastest_block() -> None:
    a = EngineTimes(((0.030, 0.032), (0.020, 0.022), (0.031,)))
    b = EngineTimes(((0.010,), (0.011, 0.013), (0.012,)))
    result = Comparison(a, b)
    assert result.best_ratio == pytest.approx(0.021 / 0.010)
    assert result.ratio == pytest.approx(0.031 / 0.012)  # the median pair: not the same


def test_time_alone_counts_blocks() -> None:
    calls: list[int] = []
    times = time_alone(lambda: calls.append(1), blocks=5, block_s=1e-9, max_seconds=1e9,
                       warm_up_s=0.0)
    assert len(times.blocks) == 5 and len(calls) == 3 + 5


@pytest.mark.parametrize(("per_run", "block", "runs"), [(0.01, 0.2, 20), (0.3, 0.2, 1), (0.07, 0.2, 3)])
def test_runs_per_block(per_run: float, block: float, runs: int) -> None:
    assert runs_per_block(per_run, block) == runs
