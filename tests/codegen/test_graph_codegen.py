"""Graph codegen against the graph JSON files TVM 0.19 wrote for the same networks."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.codegen.graph_codegen import (
    MAX_FUNC_NAME_LENGTH,
    KernelNamer,
    NameSupply,
    graph_codegen,
    std_string_hash,
)
from kiln.errors import KilnError
from kiln.ir.expr import Call, Op
from kiln.runtime import load_param_dict
from kiln.runtime.graph_json import parse_graph_json
from kiln.transform import FuseOps, InferType, PassContext


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


def multi_network() -> tvm.IRModule:
    """The fixtures' multi-output network (3-way split, casts, a comparison, a 4-tuple)."""
    x = relay.var("x", shape=(2, 6))
    s = relay.split(x, 3, axis=1)
    out = relay.Tuple([relay.nn.relu(s[0]), relay.cast(relay.multiply(s[1], relay.const(10.0)), "int32"),
                       relay.greater(s[2], relay.const(0.0)), relay.cast(x, "float16")])
    return tvm.IRModule.from_expr(relay.Function([x], out))


def lower(mod: tvm.IRModule, opt_level: int):
    with PassContext(opt_level=opt_level):
        optimized, _ = relay.optimize(mod, target="numpy")
    return graph_codegen(optimized["main"])


def _without_extras(attrs: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (attrs or {}).items() if k not in ("hash", "source_names")}


@pytest.mark.parametrize("mod,opt_level,fixture", [
    (small_network, 0, "small_o0_unbound.graph.json"),
    (multi_network, 0, "multi_o0.graph.json"),
    (multi_network, 3, "multi_o3.graph.json"),
])
def test_graph_matches_tvm(mod, opt_level, fixture, fixtures_dir):
    ours = json.loads(lower(mod(), opt_level).graph_json)
    tvm_graph = json.loads((fixtures_dir / fixture).read_text())
    for key in ("arg_nodes", "heads", "node_row_ptr", "attrs"):
        assert ours[key] == tvm_graph[key], key
    assert len(ours["nodes"]) == len(tvm_graph["nodes"])
    for mine, theirs in zip(ours["nodes"], tvm_graph["nodes"]):
        assert (mine["op"], mine["name"], mine["inputs"]) == (theirs["op"], theirs["name"],
                                                             theirs["inputs"])
        assert _without_extras(mine.get("attrs")) == _without_extras(theirs.get("attrs"))
        if theirs["op"] == "tvm_op":
            assert len(mine["attrs"]["hash"]) == 16


def test_small_network_at_opt_level_3(fixtures_dir):
    params = load_param_dict((fixtures_dir / "small_params_original.params").read_bytes())
    with PassContext(opt_level=3):
        optimized, _ = relay.optimize(small_network(), target="numpy", params=params)
    lowered = graph_codegen(optimized["main"])
    ops = [(n.name, n.func_name) for n in lowered.graph.nodes if not n.is_input]
    assert ops == [
        ("tvmgen_default_fused_nn_conv2d_add_nn_relu", "tvmgen_default_fused_nn_conv2d_add_nn_relu"),
        ("tvmgen_default_fused_nn_max_pool2d", "tvmgen_default_fused_nn_max_pool2d"),
        ("reshape_nop", "__nop"),  # batch_flatten aliases the pooled tensor
        ("tvmgen_default_fused_nn_dense_add", "tvmgen_default_fused_nn_dense_add"),
        ("tvmgen_default_fused_nn_softmax", "tvmgen_default_fused_nn_softmax"),
    ]
    # like TVM's small_o3 graph: the input, then params p0..p3 (BN folded into the conv)
    tvm_graph = json.loads((fixtures_dir / "small_o3.graph.json").read_text())
    names = [n.name for n in lowered.graph.nodes if n.is_input]
    assert names == [tvm_graph["nodes"][i]["name"] for i in tvm_graph["arg_nodes"]]
    assert lowered.params["p0"].shape == (8, 3, 3, 3) and lowered.params["p3"].shape == (10,)
    parse_graph_json(lowered.graph_json)


def test_params_are_constants_in_first_use_order():
    x = relay.var("x", shape=(3,))
    a, b = np.arange(3, dtype="float32"), np.ones((2, 3), "float32")
    body = relay.add(relay.multiply(x, relay.const(a)), relay.const(b))
    mod = tvm.IRModule.from_expr(relay.Function([x], body))
    with PassContext(opt_level=0):
        fused = InferType()(FuseOps()(InferType()(mod)))
    lowered = graph_codegen(fused["main"])
    assert list(lowered.params) == ["p0", "p1"]
    np.testing.assert_array_equal(lowered.params["p0"], a)
    np.testing.assert_array_equal(lowered.params["p1"], b)
    assert [n.name for n in lowered.graph.nodes] == [
        "x", "p0", "tvmgen_default_fused_multiply", "p1", "tvmgen_default_fused_add"]


def test_tuple_results_give_multi_output_nodes_and_several_heads():
    lowered = lower(multi_network(), 3)
    g = lowered.graph
    split = g.nodes[1]
    assert split.num_outputs == 3 and g.node_row_ptr[:3] == (0, 1, 4)
    assert len(g.heads) == 4
    assert g.dltypes[-3:] == ("int32", "uint1", "float16")


def test_structurally_equal_functions_share_a_kernel_and_names_are_fresh():
    x = relay.var("x", shape=(4,))
    y = relay.var("y", shape=(4,))
    body = relay.Tuple([relay.exp(x), relay.exp(y), relay.exp(relay.reshape(x, (2, 2)))])
    mod = tvm.IRModule.from_expr(relay.Function([x, y], body))
    with PassContext(opt_level=0):
        fused = InferType()(FuseOps()(InferType()(mod)))
    lowered = graph_codegen(fused["main"], mod_name="net")
    ops = [(n.name, n.func_name) for n in lowered.graph.nodes if not n.is_input]
    assert ops == [("tvmgen_net_fused_exp", "tvmgen_net_fused_exp"),
                   ("tvmgen_net_fused_exp_1", "tvmgen_net_fused_exp"),
                   ("reshape_nop", "__nop"),
                   # node names come from a second NameSupply, where "..._exp_1" is taken
                   ("tvmgen_net_fused_exp_1_1", "tvmgen_net_fused_exp_1")]
    assert sorted(lowered.functions) == ["tvmgen_net_fused_exp", "tvmgen_net_fused_exp_1"]


def test_name_supply_follows_tvm():
    supply = NameSupply("tvmgen_default")
    names = [supply.fresh("fused_nn.relu", add_prefix=True) for _ in range(3)]
    assert names == ["tvmgen_default_fused_nn_relu", "tvmgen_default_fused_nn_relu_1",
                     "tvmgen_default_fused_nn_relu_2"]
    plain = NameSupply()
    assert [plain.fresh("a_1"), plain.fresh("a"), plain.fresh("a")] == ["a_1", "a", "a_2"]


# std::hash<std::string> of libstdc++ (x86-64), computed with g++ for these strings.
LIBSTDCXX_HASHES = {
    "fused_nn_conv2d": 0xC83DC82268333CAE,
    "fused_nn.contrib_conv2d_NCHWc_add_nn.relu_nn.max_pool2d_layout_transform_nn.batch_flatten_xyz":
        0x4F48E259D3CE8163,
}


def test_std_string_hash_matches_libstdcxx():
    for text, value in LIBSTDCXX_HASHES.items():
        assert std_string_hash(text) == value


@pytest.mark.requires_cc
@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (libstdc++) as the oracle")
def test_std_string_hash_against_compiled_cxx(tmp_path, rng):
    src = tmp_path / "h.cc"
    src.write_text("#include <iostream>\n#include <string>\nint main(){std::string s;"
                   "while(std::getline(std::cin,s))std::cout<<std::hash<std::string>{}(s)<<'\\n';}\n")
    exe = tmp_path / "h"
    subprocess.run(["g++", "-O1", str(src), "-o", str(exe)], check=True)
    words = ["", "a", "fused", "fused_add_" * 9] + [
        "".join(chr(c) for c in rng.integers(97, 123, n)) for n in range(1, 40, 3)]
    out = subprocess.run([str(exe)], input="\n".join(words) + "\n", capture_output=True, text=True,
                         check=True).stdout.split()
    assert [std_string_hash(w) for w in words] == [int(v) for v in out]


def test_long_fused_names_are_cut_like_tvm():
    x = relay.var("x", shape=(3,))
    body = x
    for _ in range(12):
        body = relay.negative(body)
    mod = tvm.IRModule.from_expr(relay.Function([x], body))
    with PassContext(opt_level=2):
        fused = InferType()(FuseOps()(InferType()(mod)))
    fn = fused["main"].body.op
    full = "fused" + "_negative" * 12
    cut = f"{full[:MAX_FUNC_NAME_LENGTH]}_{std_string_hash(full):x}_"
    assert KernelNamer().name(fn) == "tvmgen_default_" + cut


def test_source_names_attribute():
    x = relay.var("x", shape=(2,))
    a = Call(Op.get("exp"), [x], source_names=("Exp_1",))
    b = Call(Op.get("negative"), [a], source_names=("Neg_2",))
    mod = tvm.IRModule.from_expr(relay.Function([x], b))
    with PassContext(opt_level=2):
        fused = InferType()(FuseOps()(InferType()(mod)))
    node = graph_codegen(fused["main"]).graph.nodes[1]
    assert node.attr("source_names") == "Exp_1,Neg_2"


def test_unfused_main_is_a_clear_error():
    x = relay.var("x", shape=(2,))
    mod = InferType()(tvm.IRModule.from_expr(relay.Function([x], relay.exp(x))))
    with pytest.raises(KilnError, match="run FuseOps"):
        graph_codegen(mod["main"])


def test_calls_of_global_functions_are_rejected():
    mod = tvm.IRModule()
    a = relay.var("a", shape=(2,))
    mod["helper"] = relay.Function([a], relay.exp(a))
    x = relay.var("x", shape=(2,))
    mod["main"] = relay.Function([x], relay.Call(mod.get_global_var("helper"), [x]))
    mod = InferType()(mod)
    with pytest.raises(KilnError, match="global function @helper"):
        graph_codegen(mod["main"])


def test_tuple_inputs_are_rejected():
    t = relay.var("t", relay.TupleType([relay.TensorType((2,)), relay.TensorType((2,))]))
    mod = InferType()(tvm.IRModule.from_expr(relay.Function([t], relay.TupleGetItem(t, 0))))
    with pytest.raises(KilnError, match="input %t .* must be tensors"):
        graph_codegen(mod["main"])


def test_equal_constants_are_one_param() -> None:
    """An RNN unrolled at import repacks its recurrent weight once per step; the copies are equal
    and must be stored (and read from cache) once."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8)).astype("float32")
    x = relay.var("x", shape=(1, 8))
    h = x
    for _ in range(4):  # a distinct Constant object per step, same values
        h = relay.tanh(relay.nn.dense(h, relay.const(w.copy())))
    scale = relay.const(np.float32(2.0))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.multiply(h, scale)))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="numpy")
    params = lib.get_params()
    weights = [v.numpy() for v in params.values() if v.numpy().size == 64]
    assert len(weights) == 1, {k: v.shape for k, v in params.items()}
    xv = rng.standard_normal((1, 8)).astype("float32")
    want = xv
    for _ in range(4):
        want = np.tanh(want @ w.T)
    from kiln.contrib import graph_executor

    gm = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    gm.set_input("x", xv)
    gm.run()
    np.testing.assert_allclose(gm.get_output(0).numpy(), want * 2, rtol=1e-5)


def test_inputs_sharing_a_name_get_distinct_graph_names():
    x = relay.var("x", shape=(2, 3))
    w1, w2 = relay.var("w", shape=(2, 3)), relay.var("w", shape=(2, 3))
    mod = tvm.IRModule.from_expr(relay.Function([x, w1, w2], relay.subtract(relay.add(x, w1), w2)))
    lib = relay.build(mod, target="c")
    graph = json.loads(lib.get_graph_json())
    assert [graph["nodes"][i]["name"] for i in graph["arg_nodes"]] == ["x", "w", "w_1"]
    m = tvm.contrib.graph_executor.GraphModule(lib["default"](tvm.cpu()))
    a, b, c = (np.full((2, 3), v, np.float32) for v in (1.0, 2.0, 5.0))
    m.run(x=a, w=b, w_1=c)
    np.testing.assert_array_equal(m.get_output(0).numpy(), a + b - c)
