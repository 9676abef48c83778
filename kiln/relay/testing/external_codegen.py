"""Kiln's version of TVM's test-tree helper ``tests/python/relay/utils/external_codegen.py``.

TVM's external-codegen tests import ``utils.external_codegen`` from their own test tree; the
conformance runner (:mod:`kiln.testing.compat`) supplies that module, re-exporting this one. The
names and their behaviour follow TVM's helper: build a module whose functions are partitioned to
an external compiler, export the kernel library, load it back and compare the executor's output
with the expected result.

The AOT executor check (TVM's microTVM flow) is out of scope: its parameter is skipped with the
reason, as TVM skips it when built without ``USE_MICRO``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "check_aot_executor_result",
    "check_graph_executor_result",
    "check_vm_result",
    "parametrize_external_codegen_checks",
    "parametrize_external_json_codegen_checks",
    "set_external_func_attr",
    "update_lib",
]

_AOT_REASON = "needs TVM's AOT executor (microTVM), which Kiln does not have"


def _pytest() -> Any:
    import pytest

    return pytest


def update_lib(lib: Any) -> Any:
    """Export the kernel library ``lib`` to a shared library in a temporary folder and load it back.

    TVM compiles its external C sources here; Kiln's export does the same with its C compiler.
    """
    from kiln.runtime.module import load_module

    folder = Path(tempfile.mkdtemp(prefix="kiln_extcodegen_"))
    path = folder / "lib.so"
    lib.export_library(str(path))
    return load_module(str(path))


def check_graph_executor_result(mod: Any, map_inputs: dict[str, Any], out_shape: Any, result: Any,
                                tol: float = 1e-5, target: Any = "llvm", device: Any = None) -> None:
    """Build ``mod`` for the graph executor, export and reload its library, run, compare with ``result``."""
    import kiln
    from kiln import build_module
    from kiln.contrib import graph_executor
    from kiln.testing import assert_allclose
    from kiln.transform import PassContext

    device = device if device is not None else kiln.cpu()
    with PassContext(opt_level=3, disabled_pass=["AlterOpLayout"]):
        factory = build_module.build(mod, target=target)
    lib = update_lib(factory.lib)
    rt_mod = graph_executor.create(factory.graph_json, lib, device)
    for name, data in map_inputs.items():
        rt_mod.set_input(name, data)
    for name, value in factory.get_params().items():  # as TVM's helper does: Kiln keeps the
        rt_mod.set_input(name, value)  # constants of external functions in the params
    rt_mod.run()
    out = rt_mod.get_output(0, kiln.nd.empty(out_shape, device=device))
    assert_allclose(out.numpy(), result, rtol=tol, atol=tol)


def check_vm_result(mod: Any, map_inputs: dict[str, Any], out_shape: Any, result: Any,
                    tol: float = 1e-5, target: Any = "llvm", device: Any = None) -> None:
    """Compile ``mod`` for the relay VM, save and reload the executable with an exported library, run."""
    import kiln
    from kiln import relay, runtime
    from kiln.testing import assert_allclose
    from kiln.transform import PassContext

    device = device if device is not None else kiln.cpu()
    with PassContext(opt_level=3, disabled_pass=["AlterOpLayout"]):
        exe = relay.vm.compile(mod, target=target)  # type: ignore[attr-defined]
    code, lib = exe.save()
    lib = update_lib(lib)
    exe = runtime.vm.Executable.load_exec(code, lib)  # type: ignore[attr-defined]
    vm = runtime.vm.VirtualMachine(exe, device)  # type: ignore[attr-defined]
    out = vm.run(**map_inputs)
    assert_allclose(out.numpy(), np.asarray(result), rtol=tol, atol=tol)


def check_aot_executor_result(mod: Any, map_inputs: dict[str, Any], out_shape: Any, result: Any,
                              tol: float = 1e-5, target: Any = "llvm", device: Any = None) -> None:
    """TVM's AOT (microTVM) check: skipped, Kiln has no AOT executor."""
    _pytest().skip(_AOT_REASON)


def _skip_windows() -> Any:
    return _pytest().mark.skipif(sys.platform == "win32", reason="Skip test on Windows for now")


def parametrize_external_codegen_checks(test: Any) -> Any:
    """Run ``test`` once per check: AOT (skipped: out of scope), graph executor, VM."""
    pytest = _pytest()
    return pytest.mark.parametrize("check_result", [
        pytest.param(check_aot_executor_result, marks=[pytest.mark.skip(reason=_AOT_REASON)]),
        pytest.param(check_graph_executor_result, marks=[_skip_windows()]),
        pytest.param(check_vm_result, marks=[_skip_windows()]),
    ])(test)


def parametrize_external_json_codegen_checks(test: Any) -> Any:
    """Run ``test`` once per check of the JSON codegens: graph executor, VM."""
    pytest = _pytest()
    return pytest.mark.parametrize("check_result", [
        pytest.param(check_graph_executor_result, marks=[_skip_windows()]),
        pytest.param(check_vm_result, marks=[_skip_windows()]),
    ])(test)


def set_external_func_attr(func: Any, compiler: str, ext_symbol: str) -> Any:
    """``func`` marked primitive and handed to external ``compiler`` under the symbol ``ext_symbol``."""
    from kiln import tir

    func = func.with_attr("Primitive", tir.IntImm("int32", 1))
    func = func.with_attr("Compiler", compiler)
    return func.with_attr("global_symbol", ext_symbol)
