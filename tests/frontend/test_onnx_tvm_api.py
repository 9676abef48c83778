"""What TVM's ONNX tests expect of ``from_onnx`` beyond the ops: ``convert_config``
(``use_nt_batch_matmul``), ``export_node_renamed_model_path``, the AssertionError for an unknown
input name, and ``reduction="update"``; checked against onnxruntime and TVM's behaviour."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from kiln import relay
from kiln.errors import FrontendError
from tests.frontend._onnx_helpers import run_kiln, run_ort, single_node_model


def _matmul_model(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[onnx.ModelProto, dict]:
    rng = np.random.default_rng(0)
    return single_node_model("MatMul", [rng.standard_normal(a_shape).astype(np.float32),
                                        rng.standard_normal(b_shape).astype(np.float32)])


@pytest.mark.parametrize("use_nt", [True, False])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 4, 5)), ((4, 1, 3, 2), (1, 5, 2, 6)),
                                    ((3, 4), (2, 4, 5))])
def test_batch_matmul_forms_match_onnxruntime(use_nt: bool, shapes: tuple) -> None:
    model, feeds = _matmul_model(*shapes)
    expected = run_ort(model, feeds)[0]
    actual = run_kiln(model, feeds, convert_config={"use_nt_batch_matmul": use_nt})[0]
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("use_nt", [True, False])
def test_use_nt_batch_matmul_picks_the_form(use_nt: bool) -> None:
    model, feeds = _matmul_model((2, 3, 4), (2, 4, 3))
    mod, _ = relay.frontend.from_onnx(model, {k: v.shape for k, v in feeds.items()},
                                      convert_config={"use_nt_batch_matmul": use_nt})
    text = str(mod)
    assert ("transpose" in text) == use_nt
    assert "nn.batch_matmul" in text


def test_default_is_the_nt_form() -> None:
    model, feeds = _matmul_model((2, 3, 4), (2, 4, 3))
    mod, _ = relay.frontend.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    assert "transpose" in str(mod)


def test_unknown_convert_config_key_is_named() -> None:
    model, _ = _matmul_model((2, 3), (3, 2))
    with pytest.raises(FrontendError, match="use_nt_batch_matmul"):
        relay.frontend.from_onnx(model, convert_config={"no_such_option": 1})


def test_export_node_renamed_model(tmp_path: os.PathLike) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["r"], ["s"]),
             helper.make_node("Neg", ["s"], ["y"]), helper.make_node("Relu", ["y"], ["z"], name="keep")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph)
    relay.frontend.from_onnx(model, export_node_renamed_model_path=str(tmp_path))
    files = os.listdir(tmp_path)
    assert files == ["tvm_exported_model_chain.onnx"]
    exported = onnx.load(os.path.join(tmp_path, files[0]))
    assert [n.name for n in exported.graph.node] == ["Relu_0", "Relu_1", "Neg_0", "keep"]
    assert [n.name for n in model.graph.node] == ["", "", "", "keep"]  # the caller's model is untouched


def test_unknown_input_name_is_an_assertion_error() -> None:
    model, _ = _matmul_model((2, 3), (3, 2))
    with pytest.raises(AssertionError, match="not a graph input"):  # TVM's from_onnx asserts
        relay.frontend.from_onnx(model, shape={"no_such_input": [5]})
    with pytest.raises(FrontendError):
        relay.frontend.from_onnx(model, shape={"no_such_input": [5]})


def test_scatter_elements_update_is_plain_assignment() -> None:
    # TVM's tests write reduction="update" (relay's name); onnxruntime runs it as "none"
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    idx = np.array([[1, 0, 1]], dtype=np.int64)
    upd = np.array([[10, 20, 30]], dtype=np.float32)
    model, feeds = single_node_model("ScatterElements", [data, idx, upd], {"reduction": "update"})
    np.testing.assert_array_equal(run_kiln(model, feeds)[0], run_ort(model, feeds)[0])


def test_given_shape_taken_where_it_cannot_contradict_the_model() -> None:
    # a scalar input fed as (1,) (onnxruntime accepts it; TVM takes every given shape) and an
    # input no node reads; a real contradiction is still an error
    nodes = [helper.make_node("Mul", ["x", "s"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
              helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
              helper.make_tensor_value_info("unused", TensorProto.FLOAT, [])]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    graph = helper.make_graph(nodes, "g", inputs, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": np.array([1, 2, 3], np.float32), "s": np.array([2], np.float32),
             "unused": np.zeros(0, np.float32)}
    expected = run_ort(model, feeds)[0]
    np.testing.assert_array_equal(run_kiln(model, feeds)[0], expected)
    with pytest.raises(FrontendError, match="rank"):
        relay.frontend.from_onnx(model, shape={"x": (3, 1)})


@pytest.mark.parametrize("sr", [16000, 4000])
def test_if_on_a_graph_input_selects_between_same_typed_branches(sr: int) -> None:
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3])])
    nodes = [helper.make_node("Greater", ["sr", "limit"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                     helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two"),
         onnx.numpy_helper.from_array(np.array(8000, np.int64), "limit")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": np.array([1.0, -2.0, 3.0], np.float32), "sr": np.array(sr, np.int64)}
    np.testing.assert_array_equal(run_kiln(model, feeds)[0], run_ort(model, feeds)[0])
