"""The relay VM API: ``relay.vm.compile``, ``Executable.save``/``load_exec`` and
``VirtualMachine`` running compiled code, checked against NumPy and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay, runtime
from kiln.errors import KilnError
from kiln.ir import IRModule
from kiln.op.dyn import ValueSpecializationError
from tests.frontend._onnx_helpers import make_model, node, run_ort, value_info


def _tuple_module() -> IRModule:
    x = relay.var("x", shape=(2, 3), dtype="float32")
    w = relay.var("w", shape=(2, 3), dtype="float32")
    y = relay.add(x, w)
    return IRModule.from_expr(relay.Function([x, w], relay.Tuple([relay.nn.relu(y), relay.exp(x)])))


def test_compile_save_load_run_with_params_and_tuple_result(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    w = rng.standard_normal((2, 3)).astype(np.float32)
    exe = relay.vm.compile(_tuple_module(), target="llvm", params={"w": w})
    code, lib = exe.save()
    lib.export_library(str(tmp_path / "lib.so"), fcompile=False, options=["-O2"])
    loaded = runtime.vm.Executable.load_exec(code, runtime.load_module(str(tmp_path / "lib.so")))
    vm = runtime.vm.VirtualMachine(loaded, kiln.cpu())
    out = vm.run(x=x)
    assert isinstance(out, runtime.container.ADT) and len(out) == 2
    np.testing.assert_allclose(out[0].numpy(), np.maximum(x + w, 0), rtol=1e-6)
    np.testing.assert_allclose(out[1].numpy(), np.exp(x), rtol=1e-6)
    vm.set_input("main", x * 2)
    np.testing.assert_allclose(vm.invoke("main")[0].numpy(), np.maximum(2 * x + w, 0), rtol=1e-6)


def test_bad_executables_and_functions_are_clear_errors(tmp_path):
    with pytest.raises(KilnError, match="not a Kiln VM executable"):
        runtime.vm.Executable.load_exec(b"\x00" * 32, None)
    exe = relay.vm.compile(_tuple_module(), target="llvm")
    vm = runtime.vm.VirtualMachine(exe, [kiln.cpu()])
    with pytest.raises(KilnError, match="one function, 'main', not 'other'"):
        vm.invoke("other")
    with pytest.raises(KilnError, match="fcompile"):
        exe.lib.export_library(str(tmp_path / "lib.so"), fcompile=lambda *a: None)


def test_value_specialized_model_runs_on_the_vm_but_cannot_be_saved():
    nodes = [node("ReduceMax", ["x", "axes"], ["y"], keepdims=0)]
    model = make_model(nodes, [value_info("x", np.float32, [4, 5]), value_info("axes", np.int64, [1])],
                       [value_info("y", np.float32, [4])], opset=18)
    mod, _ = relay.frontend.from_onnx(model)
    exe = relay.vm.compile(mod, target="llvm")
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    axes = np.array([1], np.int64)
    got = runtime.vm.VirtualMachine(exe, kiln.cpu()).run(x, axes)
    np.testing.assert_allclose(got.numpy(), run_ort(model, {"x": x, "axes": axes})[0])
    with pytest.raises(ValueSpecializationError, match="no static code to save"):
        exe.save()
