"""TVM names of the relay facade that TVM's relay tests import: each behaves as TVM's."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.errors import KilnError, RPCUnsupportedError
from kiln.interpreter import evaluate
from kiln.ir.expr import Call, Constant, Function, Op
from kiln.ir.module import IRModule
from kiln.relay import transform
from kiln.relay.testing import byoc, run_infer_type, run_opt_pass


def _calls(expr, name):
    found = []
    relay.expr_functor.post_order_visit(
        expr, lambda n: found.append(n) if isinstance(n, Call) and isinstance(n.op, Op)
        and n.op.name == name else None)
    return found


def test_run_opt_pass_folds_a_function_and_returns_main() -> None:
    x = relay.var("x", shape=(2,))
    c = relay.add(relay.const(np.float32(1)), relay.const(np.float32(2)))
    out = run_opt_pass(relay.Function([x], relay.add(x, c)), transform.FoldConstant())
    assert isinstance(out, Function)
    assert not _calls(out.body.args[1], "add") and isinstance(out.body.args[1], Constant)
    assert float(out.body.args[1].data.numpy()) == 3.0
    assert out.body.checked_type is not None


def test_run_opt_pass_on_a_body_returns_the_body() -> None:
    x = relay.var("x", shape=(2,))
    body = relay.multiply(x, relay.add(relay.const(np.float32(2)), relay.const(np.float32(3))))
    out = run_opt_pass(body, transform.FoldConstant())
    assert not isinstance(out, Function) and isinstance(out.args[1], Constant)
    assert tuple(run_infer_type(body).checked_type.shape) == (2,)
    with pytest.raises(KilnError, match="not a pass"):
        run_opt_pass(body, "FoldConstant")
    with pytest.raises(KilnError, match="prelude"):
        run_opt_pass(body, transform.InferType(), import_prelude=True)


def test_compiler_begin_end_round_trip_through_partition_graph() -> None:
    from kiln.relay.op.annotation import compiler_begin, compiler_end

    x, y = relay.var("x", shape=(3,)), relay.var("y", shape=(3,))
    inner = relay.add(compiler_begin(x, "ccompiler"), compiler_begin(y, "ccompiler"))
    f = relay.Function([x, y], relay.exp(compiler_end(inner, "ccompiler")))
    mod = transform.PartitionGraph()(IRModule.from_expr(f))
    externals = [gv for gv in mod.get_global_vars() if gv.name_hint != "main"]
    assert len(externals) == 1
    ext = mod[externals[0]]
    assert ext.attrs["Compiler"] == "ccompiler" and len(_calls(ext.body, "add")) == 1
    assert not _calls(mod["main"], "annotation.compiler_begin")
    assert relay.annotation.compiler_end is compiler_end


def test_stop_fusion_splits_fusion_and_disappears() -> None:
    def net(fence: bool) -> Function:
        x = relay.var("x", shape=(10, 20))
        y = relay.add(x, relay.const(np.float32(1)))
        return relay.Function([x], relay.exp(relay.annotation.stop_fusion(y) if fence else y))

    fused = run_opt_pass(net(True), transform.FuseOps())
    assert isinstance(fused.body.op, Function) and isinstance(fused.body.args[0].op, Function)
    assert [c.op.name for c in _calls(fused.body.op.body, "exp")] == ["exp"]
    assert not _calls(fused, "annotation.stop_fusion")
    together = run_opt_pass(net(False), transform.FuseOps())
    assert isinstance(together.body.args[0], relay.Var)  # one group without the fence
    data = np.random.default_rng(0).random((10, 20), dtype=np.float32)
    got = evaluate(net(True), [data])
    np.testing.assert_allclose(np.asarray(got), np.exp(data + 1), rtol=1e-6)


def test_expr_mutator_is_top_down_like_tvms() -> None:
    x = relay.var("x", shape=(10, 10))
    ws = [relay.var(f"w{i}", shape=(10, 10)) for i in range(3)]
    q = relay.multiply(relay.subtract(relay.add(x, ws[0]), ws[1]), ws[2])
    other = relay.subtract(relay.add(x, ws[0]), ws[1])
    f = relay.Function([x, *ws], relay.Tuple([q, other]))
    out = byoc.CcompilerAnnotator().visit(f)
    assert len(_calls(out, "annotation.compiler_begin")) == 4  # x, w0, w1, w2
    assert len(_calls(out, "annotation.compiler_end")) == 1
    assert relay.ExprMutator().visit(f) is f  # unchanged graphs are not rebuilt


def test_op_registry_module_and_backend_names() -> None:
    from kiln.relay.op import op as reg

    assert reg.get("nn.relu").name == "nn.relu"
    with pytest.raises(KilnError, match="register_strategy"):  # no counterpart in Kiln
        reg.register_strategy("nn.relu", None, level=11)
    from kiln.relay.backend import Executor, te_compiler
    from kiln.relay.backend.runtime import Runtime

    te_compiler.get().clear()
    assert Executor("aot", {"link-params": True})["link-params"] is True
    with pytest.raises(KilnError, match="graph executor"):
        relay.build(IRModule.from_expr(relay.Function([], relay.const(1.0))),
                    target="llvm", executor=Executor("aot"), runtime=Runtime("cpp"))
    with pytest.raises(KilnError, match="unknown runtime"):
        Runtime("js")


def test_rpc_imports_and_raises_when_used() -> None:
    from kiln import rpc

    assert kiln.rpc is rpc
    with pytest.raises(RPCUnsupportedError, match="Kiln has no RPC"):
        rpc.Server("127.0.0.1")
    with pytest.raises(RPCUnsupportedError, match="connect"):
        rpc.connect("127.0.0.1", 9090)


def test_inception_v3_workload_matches_tvms_structure() -> None:
    from kiln.relay.testing import inception_v3

    mod, params = inception_v3.get_workload(batch_size=2, num_classes=10)
    main = mod["main"]
    assert tuple(main.checked_type.ret_type.shape) == (2, 10)
    # 94 conv + batch-norm blocks (weight, gamma, beta, mean, var) and the dense layer, as TVM's
    assert len(params) == 94 * 5 + 2
    assert {"conv_conv1_weight", "mixed_10_tower_1_mixed_conv_1_conv1_weight", "fc1_weight",
            "fc2_bias"} <= set(params)
    assert params["fc1_weight"].shape == (10, 2048)
    assert len(_calls(main, "concatenate")) == 11


def test_symbolic_dimensions_say_kiln_has_static_shapes() -> None:
    from kiln import te
    from kiln.errors import SymbolicShapeError

    with pytest.raises(SymbolicShapeError, match=r"relay\.Any\(\).*static shapes"):
        relay.Any()
    with pytest.raises(SymbolicShapeError, match=r"te\.size_var\('n'\).*static shapes"):
        te.size_var("n")
