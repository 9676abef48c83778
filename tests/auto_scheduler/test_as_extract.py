"""``auto_scheduler.extract_tasks``: one task per distinct fused function ``relay.build`` compiles,
with Kiln's compute DAG registered under its workload key (issue 11, item 5)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.auto_scheduler import ComputeDAG, LayoutRewriteOption, SearchTask, extract_tasks
from kiln.te import dispatch
from kiln.te.workload import workload_key_to_tensors
from kiln.transform import PassContext

pytestmark = pytest.mark.requires_cc


def small_model() -> tuple[kiln.IRModule, dict[str, np.ndarray]]:
    """conv+relu twice with the same shapes (one kernel, called twice), max pool, a residual add,
    dense and softmax."""
    rng = np.random.default_rng(0)
    data = relay.var("data", shape=(1, 8, 16, 16))
    x = data
    params = {}
    for i in range(2):
        w = relay.var(f"w{i}", shape=(8, 8, 3, 3))
        b = relay.var(f"b{i}", shape=(8,))
        x = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w, padding=(1, 1)), b))
        params[f"w{i}"] = rng.standard_normal((8, 8, 3, 3)).astype("float32") * 0.2
        params[f"b{i}"] = rng.standard_normal(8).astype("float32")
    x = relay.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    x = relay.nn.batch_flatten(x)
    wd = relay.var("wd", shape=(10, 8 * 8 * 8))
    params["wd"] = rng.standard_normal((10, 512)).astype("float32") * 0.05
    y = relay.nn.softmax(relay.nn.dense(x, wd))
    func = relay.Function(relay.analysis.free_vars(y), y)
    return kiln.IRModule.from_expr(func), params


class Recorder:
    """A dispatcher that answers nothing and remembers what the build asked."""

    def __init__(self):
        self.asked: dict[str, str] = {}
        self.reduces: dict[str, bool] = {}

    def query(self, workload_key, dag, func_name, target=None):
        if not func_name.startswith("tvmgen_"):
            return None  # AlterOpLayout asking whether the log has TVM's layout of an op
        self.asked[func_name] = workload_key
        self.reduces[func_name] = any(op.reduce_axis for op in dag.ops
                                      if hasattr(op, "reduce_axis"))
        return None


def _built_keys(mod, params, target="llvm"):
    rec = Recorder()
    with PassContext(opt_level=3), dispatch.using(rec):
        factory = relay.build(mod, target=target, params=params)
    return rec, factory


def test_one_task_per_distinct_complex_function_with_weights():
    mod, params = small_model()
    tasks, weights = extract_tasks(mod, params, "llvm")
    rec, factory = _built_keys(mod, params)
    calls: dict[str, int] = {}
    for node in factory.graph.nodes:
        if node.op == "tvm_op":
            calls[node.func_name] = calls.get(node.func_name, 0) + 1
    # the build's functions with a reduction, grouped by workload key, weighted by calls
    expected: dict[str, int] = {}
    for name, key in rec.asked.items():
        if rec.reduces[name]:
            expected[key] = expected.get(key, 0) + calls[name]
    assert {t.workload_key: w for t, w in zip(tasks, weights)} == expected
    assert len(tasks) == len({t.workload_key for t in tasks}) == 4  # conv, pool, dense, softmax
    # the two convolutions share one kernel: one task of weight 2
    assert [w for t, w in zip(tasks, weights) if "conv2d" in t.desc] == [2]


def test_tasks_carry_kiln_dags_registered_under_their_keys():
    mod, params = small_model()
    tasks, _ = extract_tasks(mod, params, "llvm")
    for task in tasks:
        assert isinstance(task, SearchTask)
        assert task.compute_dag.workload_key() == task.workload_key
        # the registry gives the same DAG back, so records for the key replay
        again = ComputeDAG(workload_key_to_tensors(task.workload_key))
        assert again.print_dag() == task.compute_dag.print_dag()
        assert str(task.target).startswith("llvm")
        assert task.layout_rewrite_option == LayoutRewriteOption.NO_REWRITE
        assert len(task.hardware_params.to_list()) == 8
        assert task.desc.startswith("tvmgen_default_fused_")
    descs = " ".join(t.desc for t in tasks)
    for op in ("conv2d", "max_pool2d", "dense", "softmax"):
        assert op in descs


def test_simple_tasks_only_when_asked():
    mod, params = small_model()
    tasks, weights = extract_tasks(mod, params, "llvm")
    all_tasks, all_weights = extract_tasks(mod, params, "llvm", include_simple_tasks=True)
    complex_keys = {t.workload_key for t in tasks}
    extra = [t for t in all_tasks if t.workload_key not in complex_keys]
    assert complex_keys < {t.workload_key for t in all_tasks}
    assert extra and all(not dispatch.has_complex_op(t.compute_dag) for t in extra)
    assert all(dispatch.has_complex_op(t.compute_dag) for t in tasks)
    rec, _ = _built_keys(mod, params)
    assert {t.workload_key for t in all_tasks} == set(rec.asked.values())
    assert sum(all_weights) > sum(weights)


def test_dump_workload_to_dag_log(tmp_path):
    mod, params = small_model()
    log = tmp_path / "dags.json"
    tasks, _ = extract_tasks(mod, params, "llvm", dump_workload_to_dag_log=str(log))
    dumped = json.loads(log.read_text())
    assert set(dumped) == {t.workload_key for t in tasks}
    for t in tasks:
        assert "PLACEHOLDER" in dumped[t.workload_key]
        assert dumped[t.workload_key] == str(t.compute_dag)


def test_resnet18_tasks_are_what_the_build_compiles():
    mod, params = relay.testing.resnet.get_workload(num_classes=10, image_shape=(3, 32, 32))
    tasks, weights = extract_tasks(mod, params, "llvm", include_simple_tasks=True)
    rec, factory = _built_keys(mod, params)
    assert {t.workload_key for t in tasks} == set(rec.asked.values())
    n_calls = sum(1 for n in factory.graph.nodes if n.op == "tvm_op" and n.func_name in rec.asked)
    assert sum(weights) == n_calls
    complex_tasks, _ = extract_tasks(mod, params, "llvm")
    # every convolution, the pools, dense and softmax; not the element-wise adds and transforms
    assert {t.workload_key for t in complex_tasks} == {k for n, k in rec.asked.items()
                                                       if rec.reduces[n]}
    simple = [n for n in rec.asked if not rec.reduces[n]]
    assert simple and all("conv2d" not in n and "pool" not in n for n in simple)
    assert sum("conv2d" in t.desc for t in complex_tasks) >= 12


def test_a_function_is_accepted_as_tvm_tutorials_pass_it():
    mod, params = small_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tasks, weights = extract_tasks(mod["main"], params, "llvm")
    expected, expected_weights = extract_tasks(mod, params, "llvm")
    assert [t.workload_key for t in tasks] == [t.workload_key for t in expected]
    assert weights == expected_weights
    with pytest.raises(TypeError, match="IRModule"):
        extract_tasks("model.onnx", params, "llvm")
