"""kiln.testing.external_codegen: Kiln's version of TVM's test-tree helper."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.relay.testing import external_codegen as ec


def test_set_external_func_attr() -> None:
    x = relay.var("x", shape=(2,))
    f = ec.set_external_func_attr(relay.Function([x], x), "ccompiler", "ccompiler_0")
    assert f.attrs["Compiler"] == "ccompiler" and f.attrs["global_symbol"] == "ccompiler_0"
    assert int(f.attrs["Primitive"]) == 1


def test_parametrizations_skip_aot_with_the_reason() -> None:
    def t(check_result):  # type: ignore[no-untyped-def]
        pass

    mark = ec.parametrize_external_codegen_checks(t).pytestmark[0]
    params = mark.args[1]
    assert [p.values[0] for p in params] == [ec.check_aot_executor_result,
                                             ec.check_graph_executor_result, ec.check_vm_result]
    aot_marks = [m for m in params[0].marks if m.name == "skip"]
    assert "AOT" in aot_marks[0].kwargs["reason"]
    json_mark = ec.parametrize_external_json_codegen_checks(t).pytestmark[-1]
    assert len(json_mark.args[1]) == 2
    with pytest.raises(pytest.skip.Exception, match="AOT"):
        ec.check_aot_executor_result(None, {}, (1,), None)


def _inline_external_add() -> tuple[object, np.ndarray, np.ndarray]:
    x, y = relay.var("x", shape=(8, 8)), relay.var("y", shape=(8, 8))
    x0, y0 = relay.var("x0", shape=(8, 8)), relay.var("y0", shape=(8, 8))
    f = ec.set_external_func_attr(relay.Function([x0, y0], (x0 + y0) * y0), "ccompiler", "ccompiler_0")
    mod = kiln.IRModule.from_expr(relay.Call(f, [x, y]))
    rng = np.random.default_rng(0)
    return mod, rng.random((8, 8), dtype=np.float32), rng.random((8, 8), dtype=np.float32)


def test_inline_external_function_is_compiled_and_exported_with_the_library() -> None:
    """TVM's build takes a Compiler function literal inline in main; the library's export links
    the region kernels in, so the reloaded library runs the graph (TVM's update_lib flow)."""
    mod, a, b = _inline_external_add()
    factory = relay.build(mod, target="llvm")
    assert [m.compiler for m in factory.lib.imported_modules] == ["ccompiler"]
    reloaded = ec.update_lib(factory.lib)
    assert reloaded.find_kernel("ccompiler_0") is not None
    ec.check_graph_executor_result(mod, {"x": a, "y": b}, (8, 8), (a + b) * b)
