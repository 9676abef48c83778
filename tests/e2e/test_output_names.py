"""Output names survive the whole path: ONNX import, ``relay.build``, graph JSON, export, load,
and ``GraphModule.get_output(name)`` (issue 18, point 2)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import kiln
from kiln import relay
from kiln.codegen.graph_codegen import head_names
from kiln.contrib import graph_executor
from kiln.errors import KilnError, RuntimeFormatError
from kiln.ir.types import TensorType, TupleType
from kiln.runtime import load_module
from kiln.runtime.export import decode_module_blob
from kiln.runtime.factory import GraphExecutorFactoryModule
from kiln.runtime.graph_executor import InputError
from kiln.runtime.graph_json import parse_graph_json

TARGETS = ["numpy", pytest.param("c", marks=pytest.mark.requires_cc)]
# the graph attrs TVM's reader knows; it rejects any other list_str attr ("cannot skip graph attr")
TVM_GRAPH_ATTRS = {"dltype", "storage_id", "shape", "device_index"}


def _model() -> onnx.ModelProto:
    """Outputs that are a computed tensor, the graph input itself, a constant, the same tensor
    under two names, and the same name twice."""
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Relu", ["x"], ["output"]),
             helper.make_node("Constant", [], ["c"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [3], [1, 2, 3])),
             helper.make_node("Identity", ["output"], ["/dec/stateN.1"])]
    graph = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [3])],
                              [vi(n, TensorProto.FLOAT, [3])
                               for n in ("output", "x", "c", "/dec/stateN.1", "output")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    return model


NAMES = ["output", "x", "c", "/dec/stateN.1", "output_1"]
X = np.array([-1.0, 0.5, 2.0], np.float32)


def _reference() -> list[np.ndarray]:
    session = ort.InferenceSession(_model().SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": X})


def _build(target: str) -> GraphExecutorFactoryModule:
    mod, params = relay.frontend.from_onnx(_model())
    with kiln.transform.PassContext(opt_level=3):
        return relay.build(mod, target=target, params=params)


def _run(lib) -> graph_executor.GraphModule:
    m = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    m.set_input("x", X)
    m.run()
    return m


@pytest.mark.parametrize("target", TARGETS)
def test_get_output_by_name_and_index(target):
    m = _run(_build(target))
    assert m.get_output_names() == NAMES
    for i, (name, expected) in enumerate(zip(NAMES, _reference())):
        assert m.get_output_index(name) == i
        np.testing.assert_allclose(m.get_output(name).numpy(), expected, rtol=1e-6)
        np.testing.assert_array_equal(m.get_output(i).numpy(), m.get_output(name).numpy())
    out = np.empty(3, np.float32)
    m.get_output("c", out)
    np.testing.assert_array_equal(out, [1, 2, 3])
    assert m.get_output_index("nope") == -1
    with pytest.raises(InputError, match=r"no output named 'nope'; its outputs are output, x, c"):
        m.get_output("nope")
    with pytest.raises(IndexError):
        m.get_output(5)


def test_graph_json_keeps_names_where_tvm_tolerates_them():
    factory = _build("numpy")
    raw = json.loads(factory.get_graph_json())
    assert set(raw["attrs"]) <= TVM_GRAPH_ATTRS  # an extra list_str attr would break TVM
    assert list(raw)[-1] == "metadata" and raw["metadata"] == {"output_names": NAMES}
    graph = parse_graph_json(factory.get_graph_json())
    assert graph.output_names == tuple(NAMES)
    assert parse_graph_json(graph.to_json()).to_json() == graph.to_json()
    metadata = decode_module_blob(factory.module_blob()).metadata
    assert [o["name"] for o in metadata["outputs"]] == NAMES


@pytest.mark.parametrize("target", TARGETS)
def test_export_and_load_keep_the_names(tmp_path, target):
    path = tmp_path / ("m.so" if target == "c" else "m.kpkg")
    _build(target).export_library(path)
    lib = load_module(path)
    assert [o["name"] for o in lib.metadata["outputs"]] == NAMES
    assert lib.graph.output_names == tuple(NAMES)
    m = _run(lib)
    for name, expected in zip(NAMES, _reference()):
        np.testing.assert_allclose(m.get_output(name).numpy(), expected, rtol=1e-6)


def test_hand_built_functions_fall_back_to_positional_names():
    x = relay.var("x", shape=(2,))
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.Tuple([relay.nn.relu(x), x])))
    factory = relay.build(mod, target="numpy")
    assert "metadata" not in json.loads(factory.get_graph_json())  # TVM's text, unchanged
    m = _run_hand(factory)
    assert m.get_output_names() == ["output_0", "output_1"]
    np.testing.assert_array_equal(m.get_output("output_1").numpy(), [-1, 2])
    # names given by hand on the module are used
    named = kiln.IRModule(mod.functions, attrs={"output_names": ("relu", "same")})
    assert _run_hand(relay.build(named, target="numpy")).get_output_names() == ["relu", "same"]
    bad = kiln.IRModule(mod.functions, attrs={"output_names": ("only_one", "two", "three")})
    with pytest.raises(KilnError, match="3 output names"):
        relay.build(bad, target="numpy")


def _run_hand(factory) -> graph_executor.GraphModule:
    m = graph_executor.GraphModule(factory["default"](kiln.cpu()))
    m.set_input("x", np.array([-1, 2], np.float32))
    m.run()
    return m


def test_tvm_graph_json_without_names_still_loads(fixtures_dir):
    text = (fixtures_dir / "multi_o3.graph.json").read_text()
    graph = parse_graph_json(text)
    assert graph.output_names == ("output_0", "output_1", "output_2", "output_3")
    assert graph.to_json() == text


def test_malformed_output_names_are_rejected(fixtures_dir):
    raw = json.loads((fixtures_dir / "multi_o3.graph.json").read_text())
    for bad in (["a", "b"], ["a", "b", "c", 4], ["a", "a", "b", "c"]):
        raw["metadata"] = {"output_names": bad}
        with pytest.raises(RuntimeFormatError, match="output_names must list 4 distinct strings"):
            parse_graph_json(json.dumps(raw))


def test_head_names_expand_tuple_outputs():
    t = TensorType((2,), "float32")
    assert head_names(TupleType((t, TupleType((t, t)))), ["a", "seq"]) == ["a", "seq_0", "seq_1"]
    assert head_names(t, ["y"]) == ["y"]
    assert head_names(TupleType((t, t)), ["y"]) == ["y_0", "y_1"]
    assert head_names(TupleType((t, t)), ["y", "y"]) == ["y", "y_1"]
    with pytest.raises(KilnError, match="2 output names"):
        head_names(t, ["a", "b"])
