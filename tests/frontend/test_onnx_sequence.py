"""Sequences built and consumed inside a graph (as exported models use them): tuples at import.

Oracle: onnxruntime on the same model; the compiled path (``relay.build`` with the C target) is
checked against it too.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.errors import FrontendError
from kiln.frontend.onnx import from_onnx
from tests.frontend._onnx_helpers import make_model, node, run_kiln, run_ort, value_info

F32 = np.float32


def _int(name: str, value: int) -> TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [], [value])


def _model(nodes, outputs, inits=(), shape=(2, 3, 4)):
    return make_model(nodes, [value_info("x", F32, list(shape))],
                      [value_info(o, F32 if o != "n" else np.int64, None) for o in outputs],
                      list(inits), opset=17)


CASES = {
    "split-at-length-concat": (
        [node("SplitToSequence", ["x"], ["s"], axis=1, keepdims=0),
         node("SequenceAt", ["s", "one"], ["a"]),
         node("SequenceLength", ["s"], ["n"]),
         node("ConcatFromSequence", ["s"], ["c"], axis=0, new_axis=1),
         node("Cast", ["n"], ["nf"], to=1),
         node("Mul", ["a", "nf"], ["y"])],
        ["c", "y", "n"], [_int("one", 1)]),
    "split-sizes-concat-negative-axis": (
        [node("SplitToSequence", ["x", "sizes"], ["s"], axis=-1),
         node("SequenceAt", ["s", "minus_one"], ["last"]),
         node("ConcatFromSequence", ["s"], ["c"], axis=-1)],
        ["c", "last"], [helper.make_tensor("sizes", TensorProto.INT64, [3], [1, 2, 1]),
                        _int("minus_one", -1)]),
    "split-chunk-size": (
        [node("SplitToSequence", ["x", "three"], ["s"], axis=2),
         node("SequenceAt", ["s", "one"], ["tail"]),
         node("ConcatFromSequence", ["s"], ["c"], axis=2)],
        ["c", "tail"], [_int("three", 3), _int("one", 1)]),
    "construct-insert-erase": (
        [node("Relu", ["x"], ["r"]),
         node("Neg", ["x"], ["m"]),
         node("SequenceConstruct", ["x", "r"], ["s"]),
         node("SequenceInsert", ["s", "m", "zero"], ["s2"]),  # [m, x, r]
         node("SequenceInsert", ["s2", "r"], ["s3"]),  # [m, x, r, r]
         node("SequenceErase", ["s3", "one"], ["s4"]),  # [m, r, r]
         node("SequenceErase", ["s4"], ["s5"]),  # [m, r]
         node("ConcatFromSequence", ["s5"], ["c"], axis=0, new_axis=1),
         node("SequenceLength", ["s4"], ["n"])],
        ["c", "n"], [_int("zero", 0), _int("one", 1)]),
    "empty-then-insert": (
        [node("SequenceEmpty", [], ["e"], dtype=1),
         node("SequenceInsert", ["e", "x"], ["s"]),
         node("SequenceInsert", ["s", "x"], ["s2"]),
         node("ConcatFromSequence", ["s2"], ["c"], axis=1)],
        ["c"], []),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sequence_ops_match_onnxruntime(name):
    nodes, outputs, inits = CASES[name]
    model = _model(nodes, outputs, inits)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 4)).astype(F32)}
    expected = run_ort(model, feeds)
    for got, want in zip(run_kiln(model, feeds), expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_sequences_compile_to_c():
    nodes, outputs, inits = CASES["split-at-length-concat"]
    model = _model(nodes, outputs, inits)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 3, 4)).astype(F32)}
    mod, params = from_onnx(model)
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="c", params=params)
    module = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    module.run(**feeds)
    for i, want in enumerate(run_ort(model, feeds)):
        np.testing.assert_allclose(module.get_output(i).numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("position, message", [(5, "out of range"), (-4, "out of range")])
def test_bad_positions_name_the_node(position, message):
    model = _model([node("SplitToSequence", ["x"], ["s"], axis=1, name="split"),
                    node("SequenceAt", ["s", "p"], ["a"], name="at")], ["a"], [_int("p", position)])
    with pytest.raises(FrontendError, match=f"SequenceAt node 'at'.*{message}"):
        from_onnx(model)


def test_position_from_a_graph_input_must_be_bound():
    model = make_model([node("SplitToSequence", ["x"], ["s"], axis=1),
                        node("SequenceAt", ["s", "p"], ["a"], name="at")],
                       [value_info("x", F32, [2, 3, 4]), value_info("p", np.int64, [])],
                       [value_info("a", F32, None)], opset=17)
    with pytest.raises(FrontendError, match="must be known at import"):
        from_onnx(model)
    x = np.ones((2, 3, 4), F32)
    got = run_kiln(model, {"x": x}, const_inputs={"p": np.array(2, np.int64)})
    np.testing.assert_array_equal(got[0], run_ort(model, {"x": x, "p": np.array(2, np.int64)})[0])


def test_optionals_holding_a_tensor():
    x_opt = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3]))
    nodes = [helper.make_node("Optional", ["x"], ["o"]),
             helper.make_node("OptionalGetElement", ["o"], ["v"]),
             helper.make_node("OptionalGetElement", ["w"], ["wv"]),
             helper.make_node("Add", ["v", "wv"], ["y"]),
             helper.make_node("OptionalHasElement", ["w"], ["has"]),
             helper.make_node("OptionalHasElement", [], ["none"])]
    graph = helper.make_graph(nodes, "opt", [x_opt, helper.make_value_info("w", opt_type)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                               helper.make_tensor_value_info("none", TensorProto.BOOL, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32),
             "w": rng.standard_normal((2, 3)).astype(np.float32)}
    for got, want in zip(run_kiln(model, feeds), run_ort(model, feeds)):
        np.testing.assert_array_equal(got, want)
