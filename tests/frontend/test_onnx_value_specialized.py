"""ONNX models whose shapes depend on input values: imported as one ``dyn.specialized_import``,
run by the executors with one static import and build per set of deciding values, checked
against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from _onnx_helpers import make_model, node, run_ort, value_info
from onnx import TensorProto, helper

import kiln
from kiln import relay
from kiln.frontend.onnx import from_onnx
from kiln.frontend.onnx_common import DynamicValueError
from kiln.op.dyn import ValueSpecializationError


def _reduce_model():
    nodes = [node("ReduceSum", ["x", "axes"], ["y"], name="sum", keepdims=1)]
    return make_model(nodes, [value_info("x", np.float32, [2, 3, 4]), value_info("axes", np.int64, [1])],
                      [value_info("y", np.float32, [2, 1, 4])], opset=18)


def _run(mod, kind, *args):
    return relay.create_executor(kind, mod=mod, device=kiln.cpu(), target="llvm").evaluate()(*args)


def test_import_keeps_the_model_typed_by_its_declared_outputs():
    mod, params = from_onnx(_reduce_model())
    assert params == {}
    main = relay.transform.InferType()(mod)["main"]
    assert [p.name_hint for p in main.params] == ["x", "axes"]
    assert main.body.op.name == "dyn.specialized_import"
    assert main.body.attrs.value_inputs == ("axes",)
    assert str(main.checked_type.ret_type) == "Tensor[(2, 1, 4), float32]"
    assert "dyn.specialized_import" in mod.astext()
    again, _ = from_onnx(_reduce_model())
    assert kiln.ir.structural_equal(mod, again)


@pytest.mark.parametrize("kind", ["vm", "graph", "debug"])
def test_executors_specialize_on_the_values(kind):
    model = _reduce_model()
    mod, _ = from_onnx(model)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    f = relay.create_executor(kind, mod=mod, device=kiln.cpu(), target="llvm").evaluate()
    for axes in ([1], [-2]):
        feeds = {"x": x, "axes": np.array(axes, np.int64)}
        np.testing.assert_allclose(f(x, feeds["axes"]).numpy(), run_ort(model, feeds)[0], rtol=1e-5)


def test_values_that_contradict_the_declared_type_are_an_error():
    mod, _ = from_onnx(_reduce_model())
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueSpecializationError, match=r"declares output type Tensor\[\(2, 1, 4\).*"
                                                        r"axes.*Tensor\[\(1, 3, 4\)"):
        _run(mod, "vm", x, np.array([0], np.int64))


def test_tuple_outputs_and_a_second_deciding_input():
    # TopK's k and Reshape's shape both come from inputs: the second is found while specializing
    nodes = [node("TopK", ["x", "k"], ["v", "i"], name="top", axis=1),
             node("Reshape", ["v", "shape"], ["r"], name="re")]
    model = make_model(nodes, [value_info("x", np.float32, [3, 5]), value_info("k", np.int64, [1]),
                               value_info("shape", np.int64, [2])],
                       [value_info("r", np.float32, [2, 3]), value_info("i", np.int64, [3, 2])])
    mod, _ = from_onnx(model)
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    feeds = {"x": x, "k": np.array([2], np.int64), "shape": np.array([2, 3], np.int64)}
    r, i = _run(mod, "vm", *feeds.values())
    want_r, want_i = run_ort(model, feeds)
    np.testing.assert_allclose(r.numpy(), want_r)
    np.testing.assert_array_equal(i.numpy(), want_i)


def test_relay_build_says_why_it_cannot():
    mod, _ = from_onnx(_reduce_model())
    with pytest.raises(ValueSpecializationError, match=r"'axes'.*const_inputs.*create_executor\('vm'"):
        relay.build(mod, target="llvm")


def test_undeclared_output_shapes_still_need_const_inputs():
    nodes = [node("Reshape", ["x", "target"], ["y"], name="r")]
    model = make_model(nodes, [value_info("x", np.float32, [2, 6]), value_info("target", np.int64, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    with pytest.raises(DynamicValueError, match="Reshape node 'r'"):
        from_onnx(model)


def test_deciding_input_bound_by_the_executor_params():
    model = _reduce_model()
    mod, _ = from_onnx(model)
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    axes = np.array([1], np.int64)
    f = relay.create_executor("vm", mod=mod, device=kiln.cpu(), target="llvm",
                              params={"axes": axes}).evaluate()
    np.testing.assert_allclose(f(x).numpy(), run_ort(model, {"x": x, "axes": axes})[0], rtol=1e-5)


def test_one_import_per_distinct_value_and_old_builds_are_dropped(monkeypatch):
    from kiln import build_module
    from kiln.frontend import onnx as onnx_frontend

    imports = []
    run = onnx_frontend._Importer.run
    monkeypatch.setattr(onnx_frontend._Importer, "run",
                        lambda self: imports.append(dict(self.const_inputs)) or run(self))
    mod, _ = from_onnx(_reduce_model())
    imports.clear()
    f = relay.create_executor("vm", mod=mod, device=kiln.cpu(), target="llvm").evaluate()
    x = np.ones((2, 3, 4), np.float32)
    one, minus_two = np.array([1], np.int64), np.array([-2], np.int64)
    for axes in (one, one, minus_two, one):
        f(x, axes)
    assert [int(i["axes"][0]) for i in imports] == [1, -2]
    monkeypatch.setattr(build_module, "MAX_SPECIALIZATIONS", 1)
    f = relay.create_executor("vm", mod=mod, device=kiln.cpu(), target="llvm").evaluate()
    imports.clear()
    for axes in (one, minus_two, one):
        f(x, axes)
    assert len(imports) == 3
