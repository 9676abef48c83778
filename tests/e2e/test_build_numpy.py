"""``relay.build`` end to end with the ``numpy`` target, against the outputs TVM computed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.codegen.numpy_library import NumpyLibrary
from kiln.contrib import graph_executor
from kiln.errors import KilnError
from kiln.interpreter import evaluate
from kiln.ir.expr import Call, Constant, Function
from kiln.ir.visitor import post_order
from kiln.relay import testing
from kiln.runtime import load_module, load_param_dict
from kiln.runtime.graph_json import parse_graph_json
from kiln.target import Target, TargetError, host_triple
from kiln.transform import PassContext


def small_network() -> tvm.IRModule:
    """The fixtures' small network (tests/fixtures/tvm/small_relay.txt)."""
    data = relay.var("data", shape=(1, 3, 16, 16))
    w = relay.var("conv_weight", shape=(8, 3, 3, 3))
    bn = [relay.var(f"bn_{n}", shape=(8,)) for n in ("gamma", "beta", "mean", "var")]
    dw, db = relay.var("dense_weight", shape=(10, 512)), relay.var("dense_bias", shape=(10,))
    x = relay.nn.conv2d(data, w, padding=(1, 1), channels=8, kernel_size=(3, 3))
    x = relay.nn.relu(relay.nn.batch_norm(x, *bn)[0])
    x = relay.nn.batch_flatten(relay.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2)))
    x = relay.nn.softmax(relay.nn.bias_add(relay.nn.dense(x, dw), db))
    return tvm.IRModule.from_expr(relay.Function([data, w, *bn, dw, db], x))


@pytest.fixture(scope="module")
def small():
    fixtures = Path(__file__).parents[1] / "fixtures" / "tvm"
    params = {k: v.numpy() for k, v in
              load_param_dict((fixtures / "small_params_original.params").read_bytes()).items()}
    return {"mod": small_network(), "params": params,
            "input": np.load(fixtures / "small_input.npy"),
            "o3": np.load(fixtures / "small_o3_output.npy"),
            "o0": np.load(fixtures / "small_o0_unbound_output.npy")}


def run(factory, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    m = graph_executor.GraphModule(factory["default"](tvm.cpu()))
    m.set_input(**inputs)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_small_network_with_bound_params_matches_tvm(small, opt_level):
    with PassContext(opt_level=opt_level):
        factory = relay.build(small["mod"], target="numpy", params=small["params"])
    (out,) = run(factory, {"data": small["input"]})
    np.testing.assert_allclose(out, small["o3"], atol=1e-5, rtol=0)
    graph_json, lib, params = factory
    parse_graph_json(graph_json)
    assert isinstance(lib, NumpyLibrary)
    assert set(params) == {f"p{i}" for i in range(len(params))}


def test_small_network_unbound_at_opt_level_0_matches_tvm(small, fixtures_dir):
    with PassContext(opt_level=0):
        factory = relay.build(small["mod"], target="numpy")
    (out,) = run(factory, {"data": small["input"], **small["params"]})
    np.testing.assert_allclose(out, small["o0"], atol=1e-5, rtol=0)
    tvm_params = load_param_dict((fixtures_dir / "small_o0_unbound.params").read_bytes())
    assert list(factory.get_params()) == list(tvm_params) == ["p0"]
    np.testing.assert_array_equal(factory.get_params()["p0"].numpy(), tvm_params["p0"].numpy())
    assert factory.get_graph_json() == factory.graph_json


def test_folding_prunes_params(small):
    with PassContext(opt_level=3):
        factory = relay.build(small["mod"], target="numpy", params=small["params"])
    shapes = sorted(v.shape for v in factory.get_params().values())
    # BN's four vectors are folded into the conv weight and one bias: 4 params instead of 7
    assert shapes == [(8, 1, 1), (8, 3, 3, 3), (10,), (10, 512)]
    folded = factory.get_params()["p0"].numpy()
    assert not np.allclose(folded, small["params"]["conv_weight"])


def test_constant_subgraphs_of_params_become_one_param(rng):
    x = relay.var("x", shape=(4,))
    a, b = relay.var("a", shape=(4,)), relay.var("b", shape=(4,))
    mod = tvm.IRModule.from_expr(relay.Function([x, a, b], relay.add(x, relay.multiply(a, b))))
    av, bv = rng.normal(size=4).astype("float32"), rng.normal(size=4).astype("float32")
    with PassContext(opt_level=2):
        factory = relay.build(mod, target="numpy", params={"a": av, "b": bv})
    assert list(factory.get_params()) == ["p0"]
    np.testing.assert_allclose(factory.get_params()["p0"].numpy(), av * bv, rtol=1e-6)
    xv = rng.normal(size=4).astype("float32")
    np.testing.assert_allclose(run(factory, {"x": xv})[0], xv + av * bv, rtol=1e-6)


def test_disabled_and_required_passes(small):
    with PassContext(opt_level=3, disabled_pass=["FoldScaleAxis"]):
        factory = relay.build(small["mod"], target="numpy", params=small["params"])
    assert "BackwardFoldScaleAxis" not in factory.metadata["passes"]
    np.testing.assert_array_equal(factory.get_params()["p0"].numpy(), small["params"]["conv_weight"])
    np.testing.assert_allclose(run(factory, {"data": small["input"]})[0], small["o3"], atol=1e-5)

    with PassContext(opt_level=0, required_pass=["FoldConstant"]):
        factory = relay.build(small["mod"], target="numpy", params=small["params"])
    assert "FoldConstant" in factory.metadata["passes"]
    assert "EliminateCommonSubexpr" not in factory.metadata["passes"]
    np.testing.assert_allclose(run(factory, {"data": small["input"]})[0], small["o3"], atol=1e-5)


def test_metadata_records_the_build(small):
    with PassContext(opt_level=2):
        factory = relay.build(small["mod"], target="numpy", params=small["params"], mod_name="net")
    meta = factory.metadata
    assert meta["target"] == "numpy -keys=cpu" and meta["opt_level"] == 2
    assert meta["inputs"] == [{"name": "data", "shape": [1, 3, 16, 16], "dtype": "float32"}]
    assert meta["outputs"] == [{"name": "output_0", "shape": [1, 10], "dtype": "float32"}]
    assert meta["kiln_version"] == tvm.__version__
    assert meta["memory_plan"]["planned_bytes"] <= meta["memory_plan"]["unplanned_bytes"]
    assert all(n.func_name.startswith("tvmgen_net_") for n in factory.graph.nodes
               if not n.is_input and n.func_name != "__nop")
    assert factory["net"](tvm.cpu()) is not None


def test_multi_output_network_matches_tvm(fixtures_dir):
    x = relay.var("x", shape=(2, 6))
    s = relay.split(x, 3, axis=1)
    out = relay.Tuple([relay.nn.relu(s[0]), relay.cast(relay.multiply(s[1], relay.const(10.0)), "int32"),
                       relay.greater(s[2], relay.const(0.0)), relay.cast(x, "float16")])
    mod = tvm.IRModule.from_expr(relay.Function([x], out))
    with PassContext(opt_level=3):
        factory = relay.build(mod, target="numpy")
    outs = run(factory, {"x": np.load(fixtures_dir / "multi_input.npy")})
    expected = np.load(fixtures_dir / "multi_o3_outputs.npz")
    for i, got in enumerate(outs):
        want = expected[f"out{i}"]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_export_and_load_give_the_same_outputs(small, tmp_path):
    with PassContext(opt_level=3):
        factory = relay.build(small["mod"], target="numpy", params=small["params"])
    path = tmp_path / "small.kiln"
    factory.export_library(path)
    loaded = load_module(str(path))
    m = graph_executor.GraphModule(loaded["default"](tvm.cpu()))
    m.set_input("data", small["input"])
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), small["o3"], atol=1e-5)


def test_optimize_returns_the_fused_module(small):
    with PassContext(opt_level=3):
        mod, params = relay.optimize(small["mod"], target="numpy", params=small["params"])
    assert params == {}
    main = mod["main"]
    assert [p.name_hint for p in main.params] == ["data"]
    calls = [n for n in post_order(main, into_functions=False) if isinstance(n, Call)]
    assert all(isinstance(c.op, Function) and c.op.attrs["Primitive"] == 1 for c in calls)
    assert sum(isinstance(n, Constant) for n in post_order(main, into_functions=False)) == 4


@pytest.mark.parametrize("kind", ["debug", "graph", "vm"])
def test_create_executor(kind, rng):
    x = relay.var("x", shape=(2, 3))
    y = relay.var("y", shape=(2, 3))
    mod = tvm.IRModule.from_expr(relay.Function([x, y], relay.Tuple([relay.add(x, y), relay.exp(x)])))
    f = relay.create_executor(kind, mod=mod, target="numpy").evaluate()
    xv, yv = rng.normal(size=(2, 3)).astype("float32"), rng.normal(size=(2, 3)).astype("float32")
    for res in (f(xv, yv), f(xv, y=yv), f(x=xv, y=yv)):
        np.testing.assert_allclose(res[0].numpy(), xv + yv, rtol=1e-6)
        np.testing.assert_allclose(res[1].numpy(), np.exp(xv), rtol=1e-6)
    with pytest.raises(KilnError, match="both by position"):
        f(xv, yv, x=xv)
    with pytest.raises(KilnError, match="missing argument 'y'"):
        f(xv)
    value = relay.create_executor(kind, target="numpy").evaluate(
        relay.add(relay.const(1.0), relay.const(2.0)))
    assert float(value.numpy()) == 3.0


def test_create_executor_binds_params(rng):
    x = relay.var("x", shape=(3,))
    w = relay.var("w", shape=(3,))
    mod = tvm.IRModule.from_expr(relay.Function([x, w], relay.multiply(x, w)))
    wv, xv = rng.normal(size=3).astype("float32"), rng.normal(size=3).astype("float32")
    f = relay.create_executor("graph", mod=mod, params={"w": wv}).evaluate()
    np.testing.assert_allclose(f(xv).numpy(), xv * wv, rtol=1e-6)


def test_c_targets_call_the_native_code_generator(monkeypatch, rng):
    import kiln.codegen as codegen

    seen = {}

    def fake_build_native(functions, target):
        seen["target"], seen["names"] = str(target), sorted(functions)
        return NumpyLibrary(functions)

    monkeypatch.setattr(codegen, "build_native", fake_build_native, raising=False)
    x = relay.var("x", shape=(4,))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.exp(relay.add(x, relay.const(1.0)))))
    for target in ("c", "llvm -mcpu=znver3"):
        factory = relay.build(mod, target=target)
        assert seen["target"] == str(Target(target))
        assert seen["names"] == ["tvmgen_default_fused_add_exp"]
        xv = rng.normal(size=4).astype("float32")
        np.testing.assert_allclose(run(factory, {"x": xv})[0], np.exp(xv + 1), rtol=1e-6)


# --- targets ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text,canonical", [
    ("c", "c -keys=cpu"),
    ("numpy", "numpy -keys=cpu"),
    ("llvm -mcpu=znver3", "llvm -keys=cpu -mcpu=znver3"),
    ("llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+v8.2a",
     "llvm -keys=cpu -mattr=+neon,+v8.2a -mtriple=aarch64-linux-gnu"),
    ("llvm -device=arm_cpu -mcpu=cortex-a72", "llvm -keys=arm_cpu,cpu -device=arm_cpu -mcpu=cortex-a72"),
    ("llvm -keys=cpu -mtriple=x86_64-unknown-linux-gnu", "llvm -keys=cpu -mtriple=x86_64-unknown-linux-gnu"),
])
def test_target_strings_are_tvms_canonical_form(text, canonical):
    t = Target(text)
    assert str(t) == canonical
    assert Target(str(t)) == t and Target(t.export()) == t
    assert t.keys[-1] == "cpu" and t.get_target_device_type() == 1


def test_plain_llvm_gets_the_host_triple():
    t = Target("llvm")
    assert str(t) == f"llvm -keys=cpu -mtriple={host_triple()}"
    assert t.kind.name == "llvm" and t.is_native and t.mcpu == ""
    assert not Target("numpy").is_native


def test_target_errors_and_current_target(small):
    with pytest.raises(TargetError, match="CPUs and CUDA GPUs"):
        Target("opencl")
    with pytest.raises(TargetError, match="unknown option -foo"):
        Target("llvm -foo=1")
    with pytest.raises(TargetError, match="needs an integer"):
        Target("llvm -num-cores=many")
    with pytest.raises(TargetError, match="no target given"):
        relay.build(small["mod"])
    with pytest.raises(KilnError, match="graph executor, not 'aot'"):
        relay.build(small["mod"], target="numpy", executor="aot")
    with Target("numpy") as t:
        assert Target.current() is t
        factory = relay.build(small["mod"], params=small["params"])
    assert Target.current() is None
    assert factory.metadata["target"] == "numpy -keys=cpu"


# the module is built untyped: SimplifyInference's required InferType runs first (as in TVM)
@pytest.mark.parametrize("opt_level,expected", [
    (0, ["Inline", "InferType", "SimplifyInference", "SimplifyExpr", "FuseOps", "InferType"]),
    (1, ["Inline", "RemoveUnusedFunctions", "InferType", "SimplifyInference", "SimplifyExpr",
         "FuseOps", "InferType"]),
    (2, ["Inline", "RemoveUnusedFunctions", "InferType", "SimplifyInference", "FoldConstant",
         "SimplifyExpr", "FoldConstant", "FuseOps", "InferType"]),
    (3, ["Inline", "RemoveUnusedFunctions", "InferType", "SimplifyInference",
         "EliminateCommonSubexpr", "FoldConstant", "BackwardFoldScaleAxis", "ForwardFoldScaleAxis",
         "FoldConstant", "SimplifyExpr", "CanonicalizeOps", "FoldConstant", "FuseOps", "InferType"]),
])
def test_passes_run_at_each_opt_level_follow_tvm_levels(small, opt_level, expected):
    with PassContext(opt_level=opt_level):
        factory = relay.build(small["mod"], target="numpy", params=small["params"])
    assert factory.metadata["passes"] == expected


@pytest.mark.parametrize("name,kwargs", [
    ("resnet", {"num_layers": 20, "image_shape": (3, 16, 16), "num_classes": 10}),  # CIFAR form
    ("mobilenet", {"image_shape": (3, 32, 32), "num_classes": 10}),
])
def test_workloads_build_to_the_interpreters_result(name, kwargs, rng):
    """Every pass on a real network: the built graph computes what the unoptimised module does."""
    mod, params = getattr(testing, name).get_workload(batch_size=1, **kwargs)
    # the initial BN statistics are trivial (mean 0, var 1): make them count
    params = {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in params.items()}
    for key, value in params.items():
        if key.endswith(("moving_mean", "beta")):
            params[key] = rng.normal(scale=0.1, size=value.shape).astype(value.dtype)
        elif key.endswith(("moving_var", "gamma")):
            params[key] = rng.uniform(0.5, 1.5, value.shape).astype(value.dtype)
    data = rng.normal(size=(1, *kwargs["image_shape"])).astype("float32")
    expected = evaluate(mod, {"data": data, **params})
    with PassContext(opt_level=3):
        factory = relay.build(mod, target="numpy", params=params)
    np.testing.assert_allclose(run(factory, {"data": data})[0], expected, rtol=1e-4, atol=1e-5)


def test_inline_functions_are_built_at_every_level(rng):
    mod = tvm.IRModule()
    a = relay.var("a", shape=(3,))
    mod["helper"] = relay.Function([a], relay.exp(a)).with_attr("Inline", 1)
    x = relay.var("x", shape=(3,))
    mod["main"] = relay.Function([x], relay.add(relay.Call(mod.get_global_var("helper"), [x]), x))
    xv = rng.normal(size=3).astype("float32")
    for level in (0, 3):
        with PassContext(opt_level=level):
            factory = relay.build(mod, target="numpy")
        np.testing.assert_allclose(run(factory, {"x": xv})[0], np.exp(xv) + xv, rtol=1e-6)
