"""The ONNX importer's contract: inputs and params, provenance, static shapes and folding,
control flow, function expansion, and errors that say what went wrong."""

from __future__ import annotations

import contextlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from kiln import relay
from kiln.errors import DynamicShapeError, FrontendError, InputShapeError, UnsupportedOpError
from kiln.frontend.onnx import from_onnx
from kiln.frontend.onnx_common import DynamicValueError, InputDependentError
from kiln.interpreter import evaluate
from kiln.ir import Call, Constant, Var, post_order
from kiln.op.dyn import ValueSpecializationError
from tests.frontend._onnx_helpers import init, make_model, node, run_kiln, run_ort, value_info


def _calls(mod):
    return [n for n in post_order(mod["main"]) if isinstance(n, Call)]


def _conv_model(weight_is_input: bool = False, opset: int = 13):
    w = np.random.default_rng(0).standard_normal((4, 2, 3, 3)).astype(np.float32)
    inputs = [value_info("x", np.float32, [1, 2, 5, 5])]
    if weight_is_input:
        inputs.append(value_info("W", np.float32, [4, 2, 3, 3]))
    nodes = [node("Conv", ["x", "W"], ["c"], kernel_shape=[3, 3]), node("Relu", ["c"], ["y"])]
    return make_model(nodes, inputs, [value_info("y", np.float32, [1, 4, 3, 3])], [init("W", w)],
                      opset=opset), w


# --- inputs and params ---------------------------------------------------------------------

@pytest.mark.parametrize("listed_as_input", [False, True])
def test_frozen_initializers_are_constants_not_inputs(listed_as_input):
    model, w = _conv_model(listed_as_input)
    mod, params = from_onnx(model)
    assert [p.name_hint for p in mod["main"].params] == ["x"]
    assert params == {}
    consts = [n for n in post_order(mod["main"]) if isinstance(n, Constant)]
    assert any(c.value.shape == w.shape and np.array_equal(c.value, w) for c in consts)


@pytest.mark.parametrize("listed_as_input", [False, True])
def test_unfrozen_initializers_are_named_params(listed_as_input):
    model, w = _conv_model(listed_as_input)
    mod, params = from_onnx(model, freeze_params=False)
    assert [p.name_hint for p in mod["main"].params] == ["x", "W"]
    assert list(params) == ["W"]
    np.testing.assert_array_equal(params["W"].numpy(), w)
    x = np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float32)
    out = evaluate(mod, {"x": x}, params={k: v.numpy() for k, v in params.items()})
    np.testing.assert_allclose(out, run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_unfrozen_constant_nodes_become_params_named_after_their_output():
    nodes = [node("Constant", [], ["bias"], value=init("v", np.arange(3, dtype=np.float32))),
             node("Add", ["x", "bias"], ["y"])]
    model = make_model(nodes, [value_info("x", np.float32, [2, 3])], [value_info("y", np.float32, [2, 3])])
    mod, params = from_onnx(model, freeze_params=False)
    assert [p.name_hint for p in mod["main"].params] == ["x", "bias"]
    np.testing.assert_array_equal(params["bias"].numpy(), np.arange(3, dtype=np.float32))
    frozen, frozen_params = from_onnx(model)
    assert frozen_params == {} and [p.name_hint for p in frozen["main"].params] == ["x"]


def test_unused_params_are_dropped_and_shape_only_constants_fold():
    nodes = [node("Shape", ["x"], ["s"]), node("Reshape", ["x", "target"], ["y"])]
    model = make_model(nodes, [value_info("x", np.float32, [2, 3])], [value_info("y", np.float32, [3, 2])],
                       [init("target", np.array([3, 2], np.int64)), init("unused", np.ones(4, np.float32))])
    mod, params = from_onnx(model, freeze_params=False)
    assert [p.name_hint for p in mod["main"].params] == ["x"] and params == {}


def test_input_dtypes_come_from_the_model_and_dtype_overrides():
    nodes = [node("Identity", ["ids"], ["a"]), node("Identity", ["x"], ["b"])]
    model = make_model(nodes, [value_info("ids", np.int64, [3]), value_info("x", np.float32, [3])],
                       [value_info("a", np.int64, [3]), value_info("b", np.float32, [3])])
    mod, _ = from_onnx(model)
    assert [p.type_annotation.dtype for p in mod["main"].params] == ["int64", "float32"]
    mod, _ = from_onnx(model, dtype={"x": "float16"})
    assert [p.type_annotation.dtype for p in mod["main"].params] == ["int64", "float16"]
    model.graph.input[1].type.tensor_type.elem_type = TensorProto.UNDEFINED
    mod, _ = from_onnx(model, dtype="float64")
    assert mod["main"].params[1].type_annotation.dtype == "float64"


def test_path_and_bytes_and_relay_facade(tmp_path):
    model, _ = _conv_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 5)).astype(np.float32)
    expected = run_ort(model, {"x": x})[0]
    for source in (str(path), path, model.SerializeToString()):
        mod, params = relay.frontend.from_onnx(source)
        np.testing.assert_allclose(evaluate(mod, {"x": x}, params=params), expected, rtol=1e-5, atol=1e-6)


# --- provenance ------------------------------------------------------------------------------

def test_every_call_carries_its_onnx_node_name():
    nodes = [node("MatMul", ["x", "w"], ["m"], name="proj"), node("Add", ["m", "b"], ["a"]),
             node("Gelu", ["a"], ["y"], name="act")]
    model = make_model(nodes, [value_info("x", np.float32, [2, 4])], [value_info("y", np.float32, [2, 3])],
                       [init("w", np.ones((4, 3), np.float32)), init("b", np.zeros(3, np.float32))], opset=20)
    mod, _ = from_onnx(model)
    calls = _calls(mod)
    assert all(c.source_names for c in calls)
    by_name = {}
    for c in calls:
        by_name.setdefault(c.source_names[0], set()).add(c.op.name)
    assert by_name["proj"] == {"nn.dense"}  # the constant weight's transpose folded away
    assert "add" in by_name["Add_1"]  # unnamed node: <OpType>_<index in graph>
    assert "erf" in by_name["act"]  # a node lowered to several calls stamps all of them


# --- static shapes -----------------------------------------------------------------------------

def test_unbound_dynamic_dim_names_input_and_dim():
    model, _ = _conv_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(FrontendError, match=r"input 'x' has unknown dim 0 \('batch'\).*shape="):
        from_onnx(model)
    mod, _ = from_onnx(model, shape={"x": (3, 2, 5, 5)})
    assert mod["main"].params[0].type_annotation.shape == (3, 2, 5, 5)


def test_bad_shape_arguments_are_clear():
    model, _ = _conv_model()
    with pytest.raises(FrontendError, match="a shape was given for 'y', which is not a graph input"):
        from_onnx(model, shape={"y": (1,)})
    with pytest.raises(FrontendError, match="rank 3"):
        from_onnx(model, shape={"x": (1, 2, 5)})


def _seg_model(dims):
    return make_model([node("Relu", ["input"], ["y"])], [value_info("input", np.float32, dims)],
                      [value_info("y", np.float32, dims)])


def test_given_shape_must_match_the_models_static_dims():
    model = _seg_model([1, 45])
    with pytest.raises(InputShapeError, match=r"input 'input'.*dim 0: the model declares 1, got 2") as e:
        from_onnx(model, shape={"input": (2, 45)})
    got = (e.value.input_name, e.value.dim, e.value.declared, e.value.given)
    assert got == ("input", 0, (1, 45), (2, 45))
    with pytest.raises(InputShapeError, match=r"rank 3, but the model declares rank 2") as e:
        from_onnx(model, shape={"input": (1, 45, 1)})
    assert e.value.dim is None
    with pytest.raises(FrontendError, match="negative"):
        from_onnx(model, shape={"input": (-1, 45)})
    mod, _ = from_onnx(model, shape={"input": (1, 45)})  # restating the model's shape is fine
    assert mod["main"].params[0].type_annotation.shape == (1, 45)


def test_symbolic_and_unknown_dims_take_any_size_static_ones_do_not():
    model = _seg_model(["batch", 45])
    model.graph.input[0].type.tensor_type.shape.dim[1].Clear()  # dim 1: neither value nor name
    mod, _ = from_onnx(model, shape={"input": (3, 7)})
    assert mod["main"].params[0].type_annotation.shape == (3, 7)
    model = _seg_model(["batch", 45])
    message = r"dim 1: the model declares 45, got 44 \(model shape \[batch, 45\]"
    with pytest.raises(InputShapeError, match=message):
        from_onnx(model, shape={"input": (3, 44)})


def test_dynamic_shape_error_carries_the_unbound_dims_for_each_front_end():
    model = make_model([node("Add", ["x", "m"], ["y"])],
                       [value_info("x", np.float32, ["N", 3, 48, "W"]), value_info("m", np.float32, None)],
                       [value_info("y", np.float32, None)])
    model.graph.input[1].type.tensor_type.ClearField("shape")
    with pytest.raises(DynamicShapeError) as e:
        from_onnx(model)
    assert e.value.unbound == [("x", ("N", 3, 48, "W"), (0, 3)), ("m", None, ())]
    api = str(e.value)
    assert "input 'x' has unknown dim 0 ('N'), dim 3 ('W'); input 'm' has no declared shape" in api
    assert "shape={'x': (1, 3, 48, 1), 'm': (d0, d1, ...)} to from_onnx" in api
    cli = e.value.describe("cli")
    assert "--input-shapes x:1x3x48x1,m:D0xD1x..." in cli and "shape=" not in cli


def test_dtype_and_const_inputs_must_name_graph_inputs():
    model = _seg_model([1, 45])
    with pytest.raises(FrontendError, match="dtype names 'inputs', which is not a graph input.*'input'"):
        from_onnx(model, dtype={"inputs": "float16"})
    with pytest.raises(FrontendError, match="const_inputs names 'y', which is not a graph input"):
        from_onnx(model, const_inputs={"y": np.zeros((1, 45), np.float32)})


def test_output_names_are_kept_on_the_module():
    nodes = [node("Relu", ["x"], ["output"]), node("Neg", ["x"], ["/model/stateN.1"])]
    model = make_model(nodes, [value_info("x", np.float32, [2])],
                       [value_info("output", np.float32, [2]),
                        value_info("/model/stateN.1", np.float32, [2])])
    mod, _ = from_onnx(model)
    assert mod.attrs["output_names"] == ("output", "/model/stateN.1")
    assert relay.transform.InferType()(mod).attrs["output_names"] == ("output", "/model/stateN.1")


def test_shape_arithmetic_folds_to_constants():
    nodes = [
        node("Shape", ["x"], ["s"]),
        node("Gather", ["s", "one"], ["n"], axis=0),
        node("Range", ["zero", "n", "one"], ["r"]),
        node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
        node("Unsqueeze", ["n", "axes0"], ["n1"]),
        node("ConstantOfShape", ["n1"], ["ones"], value=init("v", np.array([2.0], np.float32))),
        node("Mul", ["rf", "ones"], ["w"]),
        node("Expand", ["w", "s"], ["wx"]),
        node("Add", ["x", "wx"], ["y"]),
    ]
    model = make_model(nodes, [value_info("x", np.float32, ["a", "b"])], [value_info("y", np.float32, None)],
                       [init("zero", np.array(0, np.int64)), init("one", np.array(1, np.int64)),
                        init("axes0", np.array([0], np.int64))])
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    mod, _ = from_onnx(model, shape={"x": x.shape})
    assert [c.op.name for c in _calls(mod)] == ["add"]  # everything else folded
    np.testing.assert_allclose(run_kiln(model, {"x": x})[0], run_ort(model, {"x": x})[0])


def test_shape_deciding_input_needs_const_inputs():
    nodes = [node("Reshape", ["x", "target"], ["y"], name="r")]
    model = make_model(nodes, [value_info("x", np.float32, [2, 6]), value_info("target", np.int64, [2])],
                       [value_info("y", np.float32, None)])
    with pytest.raises(DynamicValueError, match="Reshape node 'r'.*'target'.*const_inputs") as err:
        from_onnx(model)
    assert err.value.inputs == ["target"]
    mod, _ = from_onnx(model, const_inputs={"target": np.array([3, 4])})
    assert [p.name_hint for p in mod["main"].params] == ["x"]
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(evaluate(mod, {"x": x}), x.reshape(3, 4))


# --- control flow ------------------------------------------------------------------------------

def _if_model():
    then_g = helper.make_graph([node("Mul", ["x", "two"], ["t"])], "then", [],
                               [value_info("t", np.float32, [3])])
    else_g = helper.make_graph([node("Neg", ["x"], ["e"])], "else", [], [value_info("e", np.float32, [3])])
    nodes = [node("Greater", ["sr", "limit"], ["cond"]),
             node("If", ["cond"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)]
    return make_model(nodes, [value_info("x", np.float32, [3]), value_info("sr", np.int64, [])],
                      [value_info("y", np.float32, [3])],
                      [init("two", np.array(2.0, np.float32)), init("limit", np.array(8000, np.int64))])


@pytest.mark.parametrize("sr", [16000, 4000])
def test_if_with_bound_condition_is_inlined(sr):
    model = _if_model()
    x = np.array([1.0, -2.0, 3.0], np.float32)
    mod, _ = from_onnx(model, const_inputs={"sr": sr})
    assert [p.name_hint for p in mod["main"].params] == ["x"]
    expected = run_ort(model, {"x": x, "sr": np.array(sr, np.int64)})[0]
    np.testing.assert_allclose(evaluate(mod, {"x": x}), expected)
    names = {s for c in _calls(mod) for s in c.source_names}
    assert names <= {"branch/then_branch/Mul_0", "branch/else_branch/Neg_0"}


def test_if_on_graph_input_with_differently_typed_branches():
    model = _if_model()
    else_g = next(a.g for a in model.graph.node[1].attribute if a.name == "else_branch")
    else_g.node[0].CopyFrom(node("Concat", ["x", "x"], ["e"], axis=0))  # (6,): not the then type
    # the declared output type (3,) makes it a value-specialized import: the executor imports
    # it per condition value, and the branch that contradicts the declaration is an error
    mod, _ = from_onnx(model)
    f = relay.create_executor("vm", mod=mod, target="llvm").evaluate()
    x = np.array([1.0, -2.0, 3.0], np.float32)
    sr = np.array(16000, np.int64)
    np.testing.assert_allclose(f(x, sr).numpy(), run_ort(model, {"x": x, "sr": sr})[0])
    with pytest.raises(ValueSpecializationError, match=r"declares output type Tensor\[\(3\)"):
        f(x, np.array(4000, np.int64))
    # without a static declared type there is nothing to type main with
    model.graph.output[0].CopyFrom(value_info("y", np.float32, None))
    with pytest.raises(InputDependentError, match="'branch'.*'sr'.*different types") as err:
        from_onnx(model)
    assert isinstance(err.value, UnsupportedOpError) and err.value.inputs == ["sr"]


def test_data_dependent_shapes_fold_only_when_constant():
    nodes = [node("NonZero", ["x"], ["y"])]
    model = make_model(nodes, [value_info("x", np.float32, [2, 3])], [value_info("y", np.int64, None)],
                       opset=13)
    with pytest.raises(UnsupportedOpError, match="NonZero.*output shape depends on the data"):
        from_onnx(model)
    x = np.array([[1, 0, 2], [0, 0, 3]], np.float32)
    mod, _ = from_onnx(model, const_inputs={"x": x})
    np.testing.assert_array_equal(evaluate(mod, {}), np.array(np.nonzero(x)))


# --- functions -------------------------------------------------------------------------------

def test_model_local_function_is_expanded():
    fn = helper.make_function(
        "custom", "ScaledTanh", ["a"], ["b"],
        [node("Tanh", ["a"], ["t"]), node("Mul", ["t", "k"], ["b"]),
         helper.make_node("Constant", [], ["k"], value_float=1.5)],
        [helper.make_opsetid("", 17)])
    fn.node.insert(0, fn.node.pop())  # the Constant first, as exporters order it
    graph = helper.make_graph([helper.make_node("ScaledTanh", ["x"], ["y"], domain="custom", name="st")],
                              "g", [value_info("x", np.float32, [4])], [value_info("y", np.float32, [4])])
    model = helper.make_model(graph, functions=[fn], opset_imports=[helper.make_opsetid("", 17),
                                                                    helper.make_opsetid("custom", 1)])
    x = np.linspace(-2, 2, 4).astype(np.float32)
    np.testing.assert_allclose(run_kiln(model, {"x": x})[0], run_ort(model, {"x": x})[0], rtol=1e-6)
    mod, _ = from_onnx(model)
    assert {s for c in _calls(mod) for s in c.source_names} == {"st"}


def test_op_without_converter_uses_its_onnx_function():
    nodes = [node("RMSNormalization", ["x", "scale"], ["y"], axis=-1, epsilon=1e-5, name="rms")]
    model = make_model(nodes, [value_info("x", np.float32, [2, 5])], [value_info("y", np.float32, [2, 5])],
                       [init("scale", np.linspace(0.5, 1.5, 5).astype(np.float32))], opset=23)
    x = np.random.default_rng(4).standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_allclose(run_kiln(model, {"x": x})[0], run_ort(model, {"x": x})[0], rtol=1e-5,
                               atol=1e-6)


# --- errors --------------------------------------------------------------------------------------

def test_unsupported_ops_are_listed_together_before_conversion():
    nodes = [
        node("Reshape", ["x", "dyn"], ["r"]),  # would fail conversion first if conversion started
        node("FancyOp", ["r"], ["a"], name="f1"),
        node("FancyOp", ["a"], ["b"], name="f2"),
        helper.make_node("Weird", ["b"], ["c"], domain="com.vendor", name="w"),
        node("Conv", ["c", "c"], ["d"], name="conv", auto_pad="DIAGONAL"),
    ]
    model = make_model(nodes, [value_info("x", np.float32, [2, 2]), value_info("dyn", np.int64, [2])],
                       [value_info("d", np.float32, None)], opset=15)
    with pytest.raises(UnsupportedOpError) as err:
        from_onnx(model)
    text = str(err.value)
    assert "at opset 15" in text and "'f1', 'f2'" in text and "com.vendor.Weird" in text
    assert "auto_pad='DIAGONAL'" in text
    assert len(err.value.problems) == 3


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_corrupt_files_are_frontend_errors(tmp_path, damage):
    model, _ = _conv_model()
    data = model.SerializeToString()
    data = data[: len(data) // 2] if damage == "truncated" else b"\x08\x07not an onnx model" * 10
    path = tmp_path / "broken.onnx"
    path.write_bytes(data)
    with pytest.raises(FrontendError, match="corrupt|truncated|malformed|no graph"):
        from_onnx(str(path))


def test_names_that_are_not_utf8_are_frontend_errors():
    model, _ = _conv_model()
    model.graph.node[0].name = "conv_zz_node"
    data = model.SerializeToString().replace(b"conv_zz_node", b"conv_\xe6\xff_node")
    with pytest.raises(FrontendError, match=r"name of node #0 in graph is not valid UTF-8"):
        from_onnx(data)


def test_random_byte_damage_gives_frontend_errors_only():
    """Flip a few bytes of a valid model many times: every failure is a FrontendError."""
    model, _ = _conv_model()
    data = model.SerializeToString()
    rng = np.random.default_rng(0)
    for _ in range(200):
        damaged = bytearray(data)
        for pos in rng.integers(0, len(data), size=rng.integers(1, 4)):
            damaged[pos] = int(rng.integers(0, 256))
        with contextlib.suppress(FrontendError):  # anything else fails the test
            from_onnx(bytes(damaged))


def test_missing_file_and_wrong_argument_type():
    with pytest.raises(FrontendError, match="does not exist"):
        from_onnx("/nonexistent/model.onnx")
    with pytest.raises(FrontendError, match="takes an onnx.ModelProto"):
        from_onnx(42)


def test_type_errors_name_the_node_and_shapes():
    nodes = [node("Add", ["a", "b"], ["y"], name="bad_add")]
    model = make_model(nodes, [value_info("a", np.float32, [2, 3]), value_info("b", np.float32, [4, 5])],
                       [value_info("y", np.float32, None)])
    with pytest.raises(FrontendError, match=r"Add node 'bad_add'.*\(2, 3\).*\(4, 5\)"):
        from_onnx(model)


def test_converter_failures_are_wrapped_with_node_context():
    nodes = [node("Transpose", ["a"], ["y"], name="tp", perm=[0, 5])]
    model = make_model(nodes, [value_info("a", np.float32, [2, 3])], [value_info("y", np.float32, None)])
    with pytest.raises(FrontendError, match=r"Transpose node 'tp' \(opset 17\).*Tensor\[\(2, 3\), float32\]"):
        from_onnx(model)


def test_undefined_input_is_named():
    nodes = [node("Relu", ["ghost"], ["y"], name="r")]
    model = make_model(nodes, [value_info("a", np.float32, [2])], [value_info("y", np.float32, None)])
    with pytest.raises(FrontendError, match="Relu node 'r': input 0 \\('ghost'\\)"):
        from_onnx(model)


def test_opset_override_changes_semantics():
    # Softmax before opset 13 normalizes over the input flattened from `axis` on.
    nodes = [node("Softmax", ["x"], ["y"], axis=1)]
    model = make_model(nodes, [value_info("x", np.float32, [2, 3, 4])], [value_info("y", np.float32, None)],
                       opset=11)
    x = np.random.default_rng(5).standard_normal((2, 3, 4)).astype(np.float32)
    old = run_kiln(model, {"x": x})[0]
    np.testing.assert_allclose(old.reshape(2, -1).sum(axis=1), 1.0, rtol=1e-5)
    new = run_kiln(model, {"x": x}, opset=13)[0]
    np.testing.assert_allclose(new.sum(axis=1), 1.0, rtol=1e-5)


def test_inputs_are_vars_with_static_types():
    model, _ = _conv_model()
    mod, _ = from_onnx(model)
    (x,) = mod["main"].params
    assert isinstance(x, Var) and x.type_annotation.shape == (1, 2, 5, 5)


def test_unfrozen_names_stay_unique_and_function_constants_stay_embedded():
    # An If branch with an initializer named like the outer one gets a stable suffixed name.
    branch = helper.make_graph([node("Add", ["x", "w"], ["t"])], "then", [],
                               [value_info("t", np.float32, [3])], [init("w", np.full(3, 2.0, np.float32))])
    other = helper.make_graph([node("Identity", ["x"], ["e"])], "else", [],
                              [value_info("e", np.float32, [3])])
    nodes = [node("Mul", ["x", "w"], ["m"]),
             node("If", ["flag"], ["y"], then_branch=branch, else_branch=other),
             node("RMSNormalization", ["m", "w"], ["r"], axis=-1)]
    model = make_model(nodes, [value_info("x", np.float32, [3])],
                       [value_info("y", np.float32, [3]), value_info("r", np.float32, [3])],
                       [init("w", np.full(3, 3.0, np.float32)), init("flag", np.array(True))], opset=23)
    mod, params = from_onnx(model, freeze_params=False)
    assert [p.name_hint for p in mod["main"].params] == ["x", "w", "w_1"]
    assert set(params) == {"w", "w_1"}  # the RMSNormalization body's constants are not params
    x = np.array([1.0, -2.0, 0.5], np.float32)
    out = evaluate(mod, {"x": x}, params={k: v.numpy() for k, v in params.items()})
    for a, e in zip(out, run_ort(model, {"x": x})):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


def test_supported_ops_lists_the_converters():
    from kiln.frontend.onnx import supported_ops

    ops = supported_ops()
    assert {"Conv", "LSTM", "Resize", "If", "Constant", "GridSample"} <= set(ops) and ops == sorted(ops)
