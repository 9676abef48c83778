"""TVM's network tuning logs apply to Kiln (issue 11, item 6): Kiln's task DAGs print as TVM's.

The expected DAG texts below are written by hand from TVM's sources (v0.15-v0.19; the fixtures
were written by TVM 0.19), not produced by Kiln:

- which ops form tasks, and in which layout, for ``auto_scheduler.extract_tasks(mod, params,
  "llvm")`` at opt level 3 (``python/tvm/auto_scheduler/relay_integration.py``: the build runs
  with ``relay.backend.use_auto_scheduler``; only functions with a reduction are tasks):
  ``python/tvm/relay/op/strategy/x86.py`` (NCHW ``conv2d`` is the AutoTVM template
  ``conv2d_NCHWc.x86``, so ``python/tvm/topi/x86/conv2d_alter_op.py`` blocks it with the default
  configuration of ``topi/x86/conv2d_avx_common.py: _fallback_schedule``, 4 float32 lanes for plain
  ``llvm`` by ``topi/x86/utils.py: get_simd_32bit_lanes``; ``dense`` is ``dense.generic`` =
  ``topi.nn.dense`` at plevel 11, which ``topi/x86/dense_alter_op.py`` leaves unpacked);
- the computes: ``python/tvm/topi/nn/conv2d.py: conv2d_NCHWc`` (iterators ``n, oc_chunk, oh, ow,
  oc_block``, reductions ``ic, kh, kw``, ``data_pad`` from ``topi/nn/pad.py``, whose ``*indices``
  lambda gives ``i0, ...``), C++ TOPI's ``te::compute`` (``ax0, ...``) for ``add``
  (``include/tvm/topi/broadcast.h``), ``nn.relu`` (``topi/nn.h``) and ``pool_max``
  (``topi/nn/pooling.h``, reductions ``rv0, rv1``), ``topi/nn/dense.py: matmul`` (``T_matmul_NT``
  over ``*indices``), ``topi/nn/softmax.py``, ``topi/nn/conv2d.py: conv`` (``conv2d_nhwc(nn, yy,
  xx, ff)``, ``pad_temp``);
- the print and the key: ``src/auto_scheduler/compute_dag.cc`` (``PrintDAG``; the workload key
  is the MD5 of the simple-mode print, which leaves placeholder shapes out and prints a body that
  is a bare call as its op, followed by the shapes
  of the inputs, in traversal order, and outputs), placeholders ``p0, p1, ...`` as FuseOps names the
  fused function's parameters (``src/relay/backend/te_compiler_cache.cc`` names them after them).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.auto_scheduler import ApplyHistoryBest
from kiln.codegen.native import function_to_dag
from kiln.contrib import graph_executor
from kiln.runtime.params import load_param_dict
from kiln.transform import PassContext
from kiln.transform.alter_op_layout import tvm_conv_blocks

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tvm"
# plain "llvm" in TVM means 4 float32 lanes; -mcpu=x86-64 gives Kiln the same width (TVM's blocks)
LLVM4 = "llvm -mcpu=x86-64"
LLVM8 = "llvm -mcpu=haswell"

# --- TVM's task DAGs of the small network (fixtures/tvm/small_relay.txt), from TOPI's rules ------
CONV = """\
p0 = PLACEHOLDER [1, 1, 16, 16, 3]
data_pad(i0, i1, i2, i3, i4) = tir.if_then_else(((((i2 >= 1) && (i2 < 17)) && (i3 >= 1)) && \
(i3 < 17)), p0[i0, i1, (i2 - 1), (i3 - 1), i4], 0f)
p1 = PLACEHOLDER [2, 1, 3, 3, 3, 4]
conv2d_NCHWc(n, oc_chunk, oh, ow, oc_block) += (data_pad[n, floordiv(ic, 3), (oh + kh), \
(ow + kw), floormod(ic, 3)]*p1[oc_chunk, floordiv(ic, 3), kh, kw, floormod(ic, 3), oc_block])
p2 = PLACEHOLDER [1, 2, 1, 1, 4]
T_add(ax0, ax1, ax2, ax3, ax4) = (conv2d_NCHWc[ax0, ax1, ax2, ax3, ax4] + p2[ax0, ax1, 0, 0, ax4])
T_relu(ax0, ax1, ax2, ax3, ax4) = max(T_add[ax0, ax1, ax2, ax3, ax4], 0f)
"""
POOL = """\
p0 = PLACEHOLDER [1, 2, 16, 16, 4]
pool_max(ax0, ax1, ax2, ax3, ax4) max= p0[ax0, ax1, ((ax2*2) + rv0), ((ax3*2) + rv1), ax4]
"""
DENSE = """\
p0 = PLACEHOLDER [1, 512]
p1 = PLACEHOLDER [10, 512]
T_matmul_NT(i0, i1) += (p0[i0, k]*p1[i1, k])
p2 = PLACEHOLDER [10]
T_add(ax0, ax1) = (T_matmul_NT[ax0, ax1] + p2[ax1])
"""
SOFTMAX = """\
p0 = PLACEHOLDER [1, 10]
T_softmax_maxelem(i0) max= p0[i0, k]
T_softmax_exp(i0, i1) = tir.exp((p0[i0, i1] - T_softmax_maxelem[i0]))
T_softmax_expsum(i0) += T_softmax_exp[i0, k]
T_softmax_norm(i0, i1) = (T_softmax_exp[i0, i1]/T_softmax_expsum[i0])
"""
# output shapes (the key lists the inputs, from the placeholders, then the outputs)
TVM_TASKS = {
    "tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add_nn_relu": (CONV, [[1, 2, 16, 16, 4]]),
    "tvmgen_default_fused_nn_max_pool2d": (POOL, [[1, 2, 8, 8, 4]]),
    "tvmgen_default_fused_nn_dense_add": (DENSE, [[1, 10]]),
    "tvmgen_default_fused_nn_softmax": (SOFTMAX, [[1, 10]]),
}


def tvm_key(text: str, out_shapes: list[list[int]]) -> str:
    """TVM's ``ComputeDAG.workload_key()`` of a DAG printed as ``text``."""
    shapes = [json.loads(m) for m in re.findall(r"= PLACEHOLDER (\[.*\])", text)]
    simple = re.sub(r"= PLACEHOLDER \[.*\]", "= PLACEHOLDER ", text)
    # simple mode prints a body that is a bare call as its op only: " = Op(tir.exp)"
    simple = re.sub(r"^(\w+\([^)]*\)(?:\.v\d+)?) = (tir\.\w+)\(.*$", r"\1 = Op(\2)", simple,
                    flags=re.M)
    return json.dumps([hashlib.md5(simple.encode()).hexdigest(), *shapes, *out_shapes])


def tvm_log(path: Path, tasks: list[tuple[str, list[list[int]]]] | None = None) -> Path:
    """A log as TVM writes it, one record (no steps: TVM's naive schedule) per task."""
    lines = []
    for text, outs in tasks or list(TVM_TASKS.values()):
        inp = [[tvm_key(text, outs), "llvm -keys=cpu", [2, 64, 64, 0, 0, 0, 0, 0], "", 1, []],
               [[], []]]
        lines.append(json.dumps({"i": inp, "r": [[1e-05], 0, 0.25, 1700000000], "v": "v0.6"}))
    path.write_text("\n".join(lines) + "\n")
    return path


def small_network() -> tuple[tvm.IRModule, dict[str, np.ndarray]]:
    """fixtures/tvm/small_relay.txt with its original weights."""
    data = relay.var("data", shape=(1, 3, 16, 16))
    w = relay.var("conv_weight", shape=(8, 3, 3, 3))
    bn = [relay.var(f"bn_{n}", shape=(8,)) for n in ("gamma", "beta", "mean", "var")]
    dw, db = relay.var("dense_weight", shape=(10, 512)), relay.var("dense_bias", shape=(10,))
    x = relay.nn.conv2d(data, w, padding=(1, 1), channels=8, kernel_size=(3, 3))
    x = relay.nn.relu(relay.nn.batch_norm(x, *bn)[0])
    x = relay.nn.batch_flatten(relay.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2)))
    x = relay.nn.softmax(relay.nn.bias_add(relay.nn.dense(x, dw), db))
    params = {k: v.numpy() for k, v in
              load_param_dict((FIXTURES / "small_params_original.params").read_bytes()).items()}
    return tvm.IRModule.from_expr(relay.Function([data, w, *bn, dw, db], x)), params


def build(target: str) -> tuple[object, dict[str, str]]:
    mod, params = small_network()
    with PassContext(opt_level=3):
        factory = relay.build(mod, target=target, params=params)
    dags = {name: function_to_dag(f, name).dag for name, f in factory.get_lib().functions.items()}
    return factory, dags


def run(factory: object) -> np.ndarray:
    m = graph_executor.GraphModule(factory["default"](tvm.cpu()))
    m.set_input(data=np.load(FIXTURES / "small_input.npy"))
    m.run()
    return m.get_output(0).numpy()


def test_tvm_conv_blocks_follow_tvms_fallback_rule():
    # TVM's own plain-llvm build of the small network blocked its conv as OIHW3i4o
    graph = json.loads((FIXTURES / "small_o3.graph.json").read_text())
    conv = next(n for n in graph["nodes"] if "conv2d_NCHWc" in n["name"])
    ic, oc = tvm_conv_blocks(3, 8, 4)
    assert conv["attrs"]["kernel_layout"] == f"OIHW{ic}i{oc}o"
    # oc: the largest divisor up to the lanes; ic: the largest divisor up to oc
    assert tvm_conv_blocks(64, 64, 16) == (16, 16)
    assert tvm_conv_blocks(3, 10, 8) == (3, 5)
    assert tvm_conv_blocks(96, 24, 16) == (12, 12)


@pytest.mark.requires_cc
def test_small_network_conv_pool_softmax_tasks_print_as_tvm():
    """Kiln's default build at TVM's vector width: conv, pool and softmax already have TVM's keys;
    the dense task is Kiln's packed dense (faster), not TVM's."""
    _, dags = build(LLVM4)
    for name in ("tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add_nn_relu",
                 "tvmgen_default_fused_nn_max_pool2d", "tvmgen_default_fused_nn_softmax"):
        text, outs = TVM_TASKS[name]
        assert dags[name].print_dag() == text, name
        assert dags[name].workload_key() == tvm_key(text, outs), name
    dense = dags["tvmgen_default_fused_nn_contrib_dense_pack_add"]
    assert dense.workload_key() != tvm_key(*TVM_TASKS["tvmgen_default_fused_nn_dense_add"])


@pytest.mark.requires_cc
def test_tvm_log_applies_to_every_task_and_switches_dense_to_tvms_layout(tmp_path):
    log = tvm_log(tmp_path / "tvm_small.json")
    with ApplyHistoryBest(str(log)):
        factory, dags = build(LLVM4)
    assert set(TVM_TASKS) <= set(dags)
    for name, (text, outs) in TVM_TASKS.items():
        assert dags[name].print_dag() == text, name
        assert dags[name].workload_key() == tvm_key(text, outs), name
    assert factory.metadata["tuning"]["line"] == "tuning log: 4/4 tasks applied"
    np.testing.assert_allclose(run(factory), np.load(FIXTURES / "small_o3_output.npy"), rtol=0,
                               atol=1e-6)


@pytest.mark.requires_cc
def test_tvm_log_switches_conv_blocks_to_the_ones_it_was_tuned_with(tmp_path):
    """At 8 lanes Kiln blocks the conv 3i8o; a log written by TVM for plain llvm (4 lanes) asks
    for 3i4o: the conv takes TVM's blocks, and the pool after it follows."""
    _, default = build(LLVM8)
    conv = "tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add_nn_relu"
    assert default[conv].workload_key() != tvm_key(*TVM_TASKS[conv])
    log = tvm_log(tmp_path / "tvm_small.json")
    with ApplyHistoryBest(str(log)):
        factory, dags = build(LLVM8)
    for name, (text, outs) in TVM_TASKS.items():
        assert dags[name].workload_key() == tvm_key(text, outs), name
    assert factory.metadata["tuning"]["line"] == "tuning log: 4/4 tasks applied"
    np.testing.assert_allclose(run(factory), np.load(FIXTURES / "small_o3_output.npy"), rtol=0,
                               atol=1e-6)


@pytest.mark.requires_cc
def test_nhwc_conv2d_task_prints_as_topi_nn_conv():
    """TVM's x86 strategy tunes NHWC conv2d as ``topi.nn.conv2d_nhwc`` (``nn.conv``); Kiln keeps
    NHWC convolutions in NHWC, so their tasks print as TVM's (co = 8: no winograd)."""
    data = relay.var("data", shape=(1, 16, 16, 3))
    w, b = relay.var("w", shape=(3, 3, 3, 8)), relay.var("b", shape=(8,))
    y = relay.nn.conv2d(data, w, padding=(1, 1), data_layout="NHWC", kernel_layout="HWIO")
    y = relay.nn.relu(relay.nn.bias_add(y, b, axis=3))
    mod = tvm.IRModule.from_expr(relay.Function([data, w, b], y))
    params = {"w": np.ones((3, 3, 3, 8), "float32"), "b": np.ones(8, "float32")}
    with PassContext(opt_level=3):
        factory = relay.build(mod, target=LLVM4, params=params)
    (name, f), = factory.get_lib().functions.items()
    expected = """\
p0 = PLACEHOLDER [1, 16, 16, 3]
pad_temp(i0, i1, i2, i3) = tir.if_then_else(((((i1 >= 1) && (i1 < 17)) && (i2 >= 1)) && \
(i2 < 17)), p0[i0, (i1 - 1), (i2 - 1), i3], 0f)
p1 = PLACEHOLDER [3, 3, 3, 8]
conv2d_nhwc(nn, yy, xx, ff) += (pad_temp[nn, (yy + ry), (xx + rx), rc]*p1[ry, rx, rc, ff])
p2 = PLACEHOLDER [8]
T_add(ax0, ax1, ax2, ax3) = (conv2d_nhwc[ax0, ax1, ax2, ax3] + p2[ax3])
T_relu(ax0, ax1, ax2, ax3) = max(T_add[ax0, ax1, ax2, ax3], 0f)
"""
    dag = function_to_dag(f, name).dag
    assert dag.print_dag() == expected
    assert dag.workload_key() == tvm_key(expected, [[1, 16, 16, 8]])


@pytest.mark.requires_cc
def test_tvm_log_keeps_batch_matmul_in_tvms_form(tmp_path):
    """Kiln transposes ``B`` of a batched product for speed (AlterBatchMatmul); TVM's x86 strategy
    with the auto-scheduler tunes ``topi.nn.batch_matmul`` as it is (``batch_matmul.generic``,
    ``python/tvm/topi/nn/batch_matmul.py``: ``lambda b, i, j`` over ``k``)."""
    expected = """\
p0 = PLACEHOLDER [2, 16, 32]
p1 = PLACEHOLDER [2, 8, 32]
T_batch_matmul_NT(b, i, j) += (p0[b, i, k]*p1[b, j, k])
"""
    a, b = relay.var("a", shape=(2, 16, 32)), relay.var("b", shape=(2, 8, 32))
    mod = tvm.IRModule.from_expr(relay.Function([a, b], relay.nn.batch_matmul(a, b)))
    key = tvm_key(expected, [[2, 16, 8]])

    def build_bmm() -> tuple[object, list]:
        with PassContext(opt_level=3):
            factory = relay.build(mod, target=LLVM4)
        return factory, [function_to_dag(f, n).dag for n, f in
                         factory.get_lib().functions.items()]

    _, default = build_bmm()
    assert key not in [d.workload_key() for d in default]
    with ApplyHistoryBest(str(tvm_log(tmp_path / "bmm.json", [(expected, [[2, 16, 8]])]))):
        factory, dags = build_bmm()
    assert [d.print_dag() for d in dags] == [expected]
    assert [d.workload_key() for d in dags] == [key]
    assert factory.metadata["tuning"]["line"] == "tuning log: 1/1 tasks applied"
    rng = np.random.default_rng(0)
    xa, xb = rng.standard_normal((2, 16, 32), "float32"), rng.standard_normal((2, 8, 32), "float32")
    m = graph_executor.GraphModule(factory["default"](tvm.cpu()))
    m.set_input(a=xa, b=xb)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), xa @ xb.transpose(0, 2, 1), rtol=1e-5,
                               atol=1e-5)
