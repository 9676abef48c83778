"""``kiln.debug.compare``: find the node that diverges from onnxruntime or the interpreter.

Oracles: onnxruntime on the source ONNX model, Kiln's interpreter on the unoptimised module, the
debug dump TVM itself wrote (``tests/fixtures/tvm/debug_dump``, NCHW{c} layouts) against a NumPy
computation of that network, and NumPy packing formulas for blocked layouts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import relay
from kiln.debug import ReferenceValues, compare, compare_outputs, stamp_source_names
from kiln.debug.compare import unpack_layout
from kiln.debug.reference import ReferenceGroup
from kiln.errors import KilnError
from kiln.runtime.factory import GraphExecutorFactoryModule
from kiln.runtime.graph_json import parse_graph_json
from kiln.runtime.params import load_param_dict
from tests.debug._models import INPUT_SHAPE, native_available, save_resnet_onnx

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tvm"
TARGETS = ["numpy", pytest.param("c", marks=[pytest.mark.requires_cc, pytest.mark.skipif(
    not native_available(), reason="the C backend (kiln.codegen.build_native) is not available")])]
REFERENCES = ["onnxruntime", "interpreter"]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_resnet_onnx(tmp_path_factory.mktemp("model") / "resnet.onnx")


@pytest.fixture(scope="module")
def imported(model_path: Path) -> tuple[kiln.IRModule, dict[str, Any]]:
    return relay.frontend.from_onnx(str(model_path), shape={"data": INPUT_SHAPE})


@pytest.fixture(scope="module", params=TARGETS)
def built(request: pytest.FixtureRequest, imported: tuple[kiln.IRModule, dict[str, Any]]) -> Any:
    mod, params = imported
    with kiln.transform.PassContext(opt_level=3):
        return relay.build(mod, target=request.param, params=params)


@pytest.fixture(scope="module")
def inputs() -> dict[str, np.ndarray]:
    return {"data": np.random.RandomState(1).standard_normal(INPUT_SHAPE).astype(np.float32)}


def _layout_only(func_name: str) -> bool:
    return re.fullmatch(r"tvmgen_default_fused_layout_transform(_\d+)?", func_name) is not None


def _reference(kind: str, model_path: Path) -> str:
    return str(model_path) if kind == "onnxruntime" else "interpreter"


def _conv_weight_readers(lib: Any) -> list[tuple[str, int]]:
    """(weight param name, the conv node reading it) for every convolution of the build."""
    graph = lib.graph
    found = []
    for nid, node in enumerate(graph.nodes):
        if "conv2d" not in node.func_name:
            continue
        weight = node.inputs[1].node_id
        assert graph.nodes[weight].is_input
        readers = [i for i, n in enumerate(graph.nodes) if any(e.node_id == weight for e in n.inputs)]
        assert readers == [nid]
        found.append((graph.nodes[weight].name, nid))
    return found


@pytest.mark.parametrize("kind", REFERENCES)
def test_untouched_build_has_no_divergence(kind: str, built: Any, model_path: Path,
                                           imported: tuple[kiln.IRModule, dict[str, Any]],
                                           inputs: dict[str, np.ndarray]) -> None:
    report = compare(built, _reference(kind, model_path), inputs, mod=imported[0])
    assert report.first_divergence is None
    assert report.first_nonfinite is None
    op_nodes = [n for n in built.graph.nodes if not n.is_input]
    assert len(report.nodes) == len(op_nodes)
    # fused opt-level-3 nodes all have a reference, except layout transforms of the input
    assert all(n.status == "ok" for n in report.nodes if not _layout_only(n.func_name))
    last = report.nodes[-1]
    assert last.source_nodes == ["softmax"] and last.status == "ok"
    assert last.max_abs_err is not None and last.max_abs_err < 1e-5


@pytest.mark.parametrize("kind", REFERENCES)
def test_planted_fault_names_the_node_reading_the_weight(
        kind: str, built: Any, model_path: Path, imported: tuple[kiln.IRModule, dict[str, Any]],
        inputs: dict[str, np.ndarray]) -> None:
    readers = _conv_weight_readers(built)
    assert len(readers) >= 6
    for name, reader in readers:
        weight = built.get_params()[name].numpy().copy()
        weight.flat[0] += 1.0
        report = compare(built, _reference(kind, model_path), inputs, params={name: weight},
                         mod=imported[0])
        first = report.first_divergence
        assert first is not None, name
        assert first.node_index == reader and first.node == built.graph.nodes[reader].name
        assert first.max_abs_err > 0.01 and first.mismatches > 0
        assert first.source_nodes == built.graph.nodes[reader].attr("source_names").split(",")
        before = [n for n in report.nodes if n.node_index < reader]
        assert all(n.status == "ok" for n in before if not _layout_only(n.func_name))
        assert not any(n.diverged for n in before)


def test_params_are_not_changed_by_an_override(built: Any, model_path: Path,
                                               inputs: dict[str, np.ndarray]) -> None:
    name = _conv_weight_readers(built)[0][0]
    original = built.get_params()[name].numpy().copy()
    compare(built, str(model_path), inputs, params={name: original * 2})
    np.testing.assert_array_equal(built.get_params()[name].numpy(), original)
    assert compare(built, str(model_path), inputs).first_divergence is None


def test_unknown_param_override_is_an_error(built: Any, model_path: Path,
                                            inputs: dict[str, np.ndarray]) -> None:
    with pytest.raises(KilnError, match="no param 'conv_w'.*p0"):
        compare(built, str(model_path), inputs, params={"conv_w": np.zeros(1, "float32")})


def test_interpreter_needs_the_module(built: Any, inputs: dict[str, np.ndarray]) -> None:
    with pytest.raises(KilnError, match="mod="):
        compare(built, "interpreter", inputs)


def test_unfused_build_reports_partial_nodes(imported: tuple[kiln.IRModule, dict[str, Any]],
                                             model_path: Path,
                                             inputs: dict[str, np.ndarray]) -> None:
    mod, params = imported
    with kiln.transform.PassContext(opt_level=0):
        lib = relay.build(mod, target="numpy", params=params)
    report = compare(lib, str(model_path), inputs)
    assert report.first_divergence is None
    partial = [n for n in report.nodes if n.reason.startswith("partial")]
    assert partial and all(n.status == "no reference" for n in partial)
    # batch norm is several nodes at opt level 0: only the last one stands for the ONNX node
    bn = [n for n in report.nodes if n.source_nodes == ["stem_bn"]]
    assert [n.status for n in bn][-1] == "ok" and all(n.status != "ok" for n in bn[:-1])
    assert {n.reference for n in report.nodes if n.status == "ok"} >= {"stem_out", "stem_bn_out",
                                                                        "stem_relu_out", "prob"}


def test_nan_input_is_reported_not_diverged(built: Any, model_path: Path) -> None:
    x = np.random.RandomState(2).standard_normal(INPUT_SHAPE).astype(np.float32)
    x[0, 0, 5, 5] = np.nan
    report = compare(built, str(model_path), {"data": x})
    first_nan = report.first_nonfinite
    assert first_nan is not None and first_nan.node_index == report.nodes[0].node_index
    assert first_nan.nan_count > 0
    compared = next(n for n in report.nodes if n.status != "no reference")
    assert compared.nan_count > 0 and compared.ref_nan_count == compared.nan_count
    assert report.first_divergence is None
    assert "first NaN/Inf" in report.summary()


def test_exported_artifact_and_report_json(built: Any, model_path: Path, tmp_path: Path,
                                           inputs: dict[str, np.ndarray]) -> None:
    name, reader = _conv_weight_readers(built)[2]
    params = {k: v.numpy() for k, v in built.get_params().items()}
    params[name] = params[name] * 1.5
    faulty = GraphExecutorFactoryModule(built.graph_json, built.get_lib(), params)
    path = tmp_path / "faulty.so"
    faulty.export_library(str(path))
    report = compare(str(path), str(model_path), inputs)
    assert report.first_divergence is not None and report.first_divergence.node_index == reader
    report.to_json(tmp_path / "report.json")
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["first_divergence"]["node"] == built.graph.nodes[reader].name
    assert data["first_divergence"]["source_nodes"] == report.first_divergence.source_nodes
    assert len(data["nodes"]) == len(report.nodes)
    text = str(report)
    marked = [line for line in text.splitlines() if line.startswith(">>")]
    assert len(marked) == 1 and built.graph.nodes[reader].name in marked[0]
    assert "FIRST DIVERGENCE" in text


def test_relay_module_stamped_against_the_interpreter() -> None:
    raw = load_param_dict((FIXTURES / "small_params_original.params").read_bytes())
    params = {k: v.numpy() for k, v in raw.items()}
    data = relay.var("data", shape=(1, 3, 16, 16))
    x = relay.nn.conv2d(data, relay.var("conv_weight", shape=(8, 3, 3, 3)), padding=(1, 1))
    x = relay.nn.relu(relay.nn.batch_norm(x, *[relay.var(n, shape=(8,)) for n in
                                               ("bn_gamma", "bn_beta", "bn_mean", "bn_var")])[0])
    x = relay.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    x = relay.nn.dense(relay.nn.batch_flatten(x), relay.var("dense_weight", shape=(10, 512)))
    x = relay.nn.softmax(relay.nn.bias_add(x, relay.var("dense_bias", shape=(10,))))
    mod = stamp_source_names(kiln.IRModule.from_expr(relay.Function(relay.analysis.free_vars(x), x)))
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="numpy", params=params)
    feed = {"data": np.load(FIXTURES / "small_input.npy")}
    report = compare(lib, "interpreter", feed, mod=mod, reference_params=params)
    assert report.first_divergence is None and report.compared >= 4
    conv = next(i for i, n in enumerate(lib.graph.nodes) if "conv2d" in n.func_name)
    weight_param = lib.graph.nodes[lib.graph.nodes[conv].inputs[1].node_id].name
    bad = lib.get_params()[weight_param].numpy() * 1.1
    report = compare(lib, "interpreter", feed, params={weight_param: bad}, mod=mod,
                     reference_params=params)
    assert report.first_divergence is not None and report.first_divergence.node_index == conv


# --- layouts: TVM's own dump, NCHW3c / NCHW4c ----------------------------------------------------

def _small_oracle(x: np.ndarray, p: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    conv = np.einsum("nchwij,ocij->nohw", windows, p["conv_weight"].astype(np.float64))
    scale = p["bn_gamma"] / np.sqrt(p["bn_var"].astype(np.float64) + 1e-5)
    relu = np.maximum((conv - p["bn_mean"][:, None, None]) * scale[:, None, None] +
                      p["bn_beta"][:, None, None], 0)
    pool = relu.reshape(1, 8, 8, 2, 8, 2).max(axis=(3, 5))
    logits = pool.reshape(1, 512) @ p["dense_weight"].T.astype(np.float64) + p["dense_bias"]
    e = np.exp(logits - logits.max())
    return {"relu": relu, "pool": pool, "flatten": pool.reshape(1, 512), "dense": logits,
            "softmax": e / e.sum()}


def _tvm_dump_case() -> tuple[Any, list[np.ndarray], ReferenceValues]:
    """TVM's small-network graph (names added) and node outputs, and a NumPy reference."""
    graph = json.loads((FIXTURES / "small_o3.graph.json").read_text())
    names = {"tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add_nn_relu": "relu",
             "tvmgen_default_fused_nn_max_pool2d": "pool",
             "tvmgen_default_fused_layout_transform_nn_batch_flatten": "flatten",
             "tvmgen_default_fused_nn_contrib_dense_pack_add": "dense",
             "tvmgen_default_fused_nn_softmax": "softmax"}
    for node in graph["nodes"]:
        if node["name"] in names:
            node["attrs"]["source_names"] = names[node["name"]]
    parsed = parse_graph_json(json.dumps(graph))
    dumped = load_param_dict(
        (FIXTURES / "debug_dump" / "_tvmdbg_device_CPU_0" / "output_tensors.params").read_bytes())
    outputs = [dumped[f"{n.name}____topo-index:{i}____output-num:0"].numpy()
               for i, n in enumerate(parsed.nodes)]
    raw = load_param_dict((FIXTURES / "small_params_original.params").read_bytes())
    layers = _small_oracle(np.load(FIXTURES / "small_input.npy"),
                           {k: v.numpy() for k, v in raw.items()})
    ref = ReferenceValues("numpy", "float64 NumPy", {
        name: [ReferenceGroup([name], [value.astype(np.float32)])] for name, value in layers.items()})
    return parsed, outputs, ref


def test_tvm_blocked_layouts_are_converted_back() -> None:
    graph, outputs, ref = _tvm_dump_case()
    nodes = {n.node: n for n in compare_outputs(graph, outputs, ref)}
    conv = nodes["tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add_nn_relu"]
    pool = nodes["tvmgen_default_fused_nn_max_pool2d"]
    assert (conv.status, conv.layout, conv.shape) == ("ok", "NCHW4c", (1, 2, 16, 16, 4))
    assert (pool.status, pool.layout) == ("ok", "NCHW4c")
    assert nodes["tvmgen_default_fused_nn_softmax"].status == "ok"
    assert nodes["tvmgen_default_fused_layout_transform_nn_batch_flatten"].layout is None
    assert nodes["tvmgen_default_fused_layout_transform"].reason == "no source names"
    assert all(n.max_abs_err is None or n.max_abs_err < 1e-5 for n in nodes.values())


def test_fault_in_a_blocked_tensor_is_located() -> None:
    graph, outputs, ref = _tvm_dump_case()
    pool = next(i for i, n in enumerate(graph.nodes) if n.name.endswith("max_pool2d"))
    outputs[pool] = outputs[pool].copy()
    outputs[pool][0, 1, 3, 5, 2] += 1.0  # channel 1 * 4 + 2 = 6 of NCHW, row 3, column 5
    report = compare_outputs(graph, outputs, ref)
    first = next(n for n in report if n.diverged)
    assert first.node_index == pool and first.mismatches == 1
    assert first.max_abs_err == pytest.approx(1.0, abs=1e-5)


@settings(max_examples=40, deadline=None)
@given(order=st.permutations("NCHW"), blocked=st.sampled_from("NCHW"),
       factor=st.integers(1, 4), outer=st.lists(st.integers(1, 3), min_size=4, max_size=4))
def test_unpack_layout_inverts_numpy_packing(order: list[str], blocked: str, factor: int,
                                            outer: list[int]) -> None:
    primal = "".join(order)
    sizes = dict(zip(primal, outer))
    sizes[blocked] *= factor
    x = np.arange(np.prod([sizes[a] for a in primal]), dtype=np.float32).reshape(
        [sizes[a] for a in primal])
    k = primal.index(blocked)
    split = x.reshape((*x.shape[:k], sizes[blocked] // factor, factor, *x.shape[k + 1:]))
    packed = np.moveaxis(split, k + 1, -1)  # the block axis goes innermost
    layout = primal + f"{factor}{blocked.lower()}"
    result = unpack_layout(packed, layout)
    assert result is not None
    unpacked, name = result
    assert name == primal
    np.testing.assert_array_equal(unpacked, x)
    assert unpack_layout(packed, primal) is None  # wrong rank: not this layout
