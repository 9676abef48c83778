"""Ansor's search (issue 12, part A): sketches, random annotation, mutation, ``SketchPolicy``
rounds, resume from a log, ``ProgramMeasurer``.

The tasks are real: a blocked conv2d + bias + relu extracted from a relay model (the DAG the
native build compiles, with a matching template) and a dense registered as a workload. Every
measured candidate is built and run in worker processes and compared with the unscheduled
computation (the runner's correctness check), so a sketch or mutation that computes something
else fails here.
"""

from __future__ import annotations

import math
import random
import time
import warnings

import numpy as np
import pytest

import kiln
from kiln import auto_scheduler, relay, te
from kiln.auto_scheduler import LocalBuilder, LocalRunner, MeasureInput, extract_tasks
from kiln.auto_scheduler import cost_model as cm
from kiln.auto_scheduler import search_policy as sp
from kiln.auto_scheduler import sketch as sk
from kiln.auto_scheduler.cost_model import RandomModel
from kiln.auto_scheduler.measure_record import RecordToFile, load_records
from kiln.auto_scheduler.measurer import MeasureCallback, ProgramMeasurer
from kiln.auto_scheduler.search_policy import EmptyPolicy, PreloadMeasuredStates, SketchPolicy
from kiln.te.lower import lower
from kiln.te.steps import SplitStep, parse_step

pytestmark = pytest.mark.requires_cc

SMALL = {"evolutionary_search_population": 24, "evolutionary_search_num_iters": 1,
         "sample_init_min_population": 8}


def conv_task(c: int = 16, hw: int = 8) -> auto_scheduler.SearchTask:
    """conv2d(3x3, pad 1) + bias + relu on (1, c, hw, hw), as ``extract_tasks`` makes it."""
    data = relay.var("data", shape=(1, c, hw, hw))
    w = relay.var("w", shape=(c, c, 3, 3))
    b = relay.var("b", shape=(c,))
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(data, w, padding=(1, 1)), b))
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((c, c, 3, 3)).astype("float32"),
              "b": rng.standard_normal(c).astype("float32")}
    mod = kiln.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))
    tasks, _ = extract_tasks(mod, params, "llvm")
    assert len(tasks) == 1
    return tasks[0]


def search_dense(m: int, n: int, k: int) -> list[te.Tensor]:
    """``C = A @ W.T``."""
    A = te.placeholder((m, k), name="A")
    W = te.placeholder((n, k), name="W")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * W[j, r], axis=[r]), name="C")
    return [A, W, C]


def search_rowsum(n: int, m: int) -> list[te.Tensor]:
    """Row sums of a wide matrix (the rfactor rule's case)."""
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    return [A, te.compute((n,), lambda i: te.sum(A[i, k], axis=[k]), name="B")]


auto_scheduler.register_workload(search_dense, override=True)
auto_scheduler.register_workload(search_rowsum, override=True)


def dense_task(m: int = 32, n: int = 32, k: int = 32) -> auto_scheduler.SearchTask:
    return auto_scheduler.SearchTask(func=search_dense, args=(m, n, k), target="llvm")


def measurer(callbacks: tuple = ()) -> ProgramMeasurer:
    return ProgramMeasurer(LocalBuilder(timeout=60),
                           LocalRunner(timeout=30, number=1, min_repeat_ms=0,
                                       check_correctness=True),
                           callbacks=callbacks, verbose=0)


def _prefixes(steps: list) -> set[str]:
    return {s.prefix for s in steps}


def test_sketches_of_conv_dense_and_rowsum_follow_the_cpu_rules() -> None:
    conv, dense = conv_task(), dense_task()
    rowsum = auto_scheduler.SearchTask(func=search_rowsum, args=(4, 2048), target="llvm")
    conv_sk = sk.generate_sketches(conv.compute_dag, {}, 2)
    dense_sk = sk.generate_sketches(dense.compute_dag, {}, 2)
    row_sk = sk.generate_sketches(rowsum.compute_dag, {}, 2)
    # conv: bias add inlined; SSRSRS tiling fused into relu at level 1 and 2, or on its own
    assert len(conv_sk) == 3
    assert all(s.transform_steps[0].to_record() == ["CI", 5] for s in conv_sk)
    assert sum("CA" in _prefixes(s.transform_steps) for s in conv_sk) == 2
    # dense: cache_write + tiling fused at two levels, or plain tiling
    assert len(dense_sk) == 3
    assert sum("CHW" in _prefixes(s.transform_steps) for s in dense_sk) == 2
    for s in conv_sk + dense_sk:
        splits = [st for st in s.transform_steps if isinstance(st, SplitStep)]
        assert splits and all(None in st.lengths for st in splits)  # lengths left to fill
    # a wide reduction is factored (two ways) besides the plain sketch
    assert sum("RF" in _prefixes(s.transform_steps) for s in row_sk) == 2
    assert len(row_sk) == 3


def test_sampled_sketches_compile_and_compute_the_right_result() -> None:
    rng = random.Random(1)
    inputs = []
    for task in (conv_task(), dense_task(),
                 auto_scheduler.SearchTask(func=search_rowsum, args=(4, 2048), target="llvm")):
        dag = task.compute_dag
        for sketch in sk.generate_sketches(dag, {}, 2):
            state = None
            while state is None:
                state = sk.sample_state(dag, sketch, rng, {}, 2)
            assert sk.state_key(sk.replay(dag, state.transform_steps)) == sk.state_key(state)
            lower(dag, state, name="k")
            inputs.append((task, MeasureInput(task, state)))
    m = measurer()
    for task, inp in inputs:
        res = m.measure(task, None, [inp])
        assert res[0].error_no == 0, f"{res[0].error_msg[-2000:]}\n{inp.state}"
    assert m.ct == len(inputs) and m.error_ct == 0


def test_mutations_replay_and_are_mostly_valid() -> None:
    task = conv_task()
    dag = task.compute_dag
    rng = random.Random(2)
    sketches = sk.generate_sketches(dag, {}, 2)
    states = [s for s in (sk.sample_state(dag, sketches[i % 3], rng, {}, 2) for i in range(12)) if s]
    policy = SketchPolicy(task, RandomModel(0), params=SMALL, seed=0, verbose=0)
    states += policy.untuned_states()
    ok = 0
    changed = 0
    tries = 300
    lowered = 0
    for i in range(tries):
        parent = states[i % len(states)]
        child = sk.mutate(dag, parent, rng, {})
        if child is None:
            continue
        ok += 1
        changed += sk.state_key(child) != sk.state_key(parent)
        if i % 25 == 0:
            lower(dag, child, name="m")
            lowered += 1
    print(f"mutation validity: {ok}/{tries} = {ok / tries:.0%}, changed {changed}, lowered {lowered}")
    assert ok / tries > 0.6 and changed > 0.5 * ok


def test_continue_search_one_round_measures_distinct_states_template_first() -> None:
    task = conv_task()
    calls = []

    class Count(MeasureCallback):
        def callback(self, policy, inputs, results) -> None:
            calls.append((policy, len(inputs), len(results)))

    m = measurer((Count(),))
    policy = SketchPolicy(task, RandomModel(0), params=SMALL, seed=0, verbose=0)
    template = policy.untuned_states()[0]
    assert any(s.to_record()[0] == "CHW" for s in template.transform_steps)  # the conv template
    inputs, results = policy.continue_search_one_round(6, m)
    keys = [sk.state_key(i.state) for i in inputs]
    assert len(inputs) == len(results) == 6 and len(set(keys)) == 6
    assert keys[0] == sk.state_key(template)
    assert all(r.error_no == 0 for r in results), [r.error_msg[-500:] for r in results]
    inputs2, results2 = policy.continue_search_one_round(6, m)
    keys2 = [sk.state_key(i.state) for i in inputs2]
    assert len(keys2) == 6 and not set(keys2) & set(keys) and len(set(keys2)) == 6
    assert policy.measured_state_keys == set(keys) | set(keys2)
    assert m.ct == 12 and sum(n for _, n, _ in calls) == 12 and calls[0][0] is policy
    assert m.best_cost[task.workload_key] == min(r.mean_cost() for r in results + results2)
    assert sk.state_key(m.best_state[task.workload_key]) in policy.measured_state_keys


def test_add_measured_from_a_log_prevents_measuring_again(tmp_path) -> None:
    task = dense_task()
    log = tmp_path / "dense.json"
    first = SketchPolicy(task, RandomModel(0), params=SMALL, seed=3, verbose=0)
    inputs, _ = first.continue_search_one_round(5, measurer((RecordToFile(log),)))
    assert len(list(load_records(log))) == 5
    resumed = SketchPolicy(task, RandomModel(0), params=SMALL, seed=3, verbose=0,
                           init_search_callbacks=[PreloadMeasuredStates(log)])
    old = {sk.state_key(i.state) for i in inputs}
    assert resumed.measured_state_keys == old
    again, results = resumed.continue_search_one_round(5, measurer())
    new = {sk.state_key(i.state) for i in again}
    assert len(new) == len(again) > 0 and not new & old  # the same seed: only unmeasured ones
    assert all(r.error_no == 0 for r in results)


def test_measurer_counts_errors_and_empty_policy_measures_once() -> None:
    task = dense_task()
    m = measurer()
    broken = task.compute_dag.init_state
    broken.transform_steps.append(parse_step(["SP", 9, 0, 32, [8], 1]))
    res = m.measure(task, None, [MeasureInput(task, broken),
                                 MeasureInput(task, task.compute_dag.init_state)])
    assert [r.error_no for r in res][1] == 0 and res[0].error_no != 0
    assert (m.ct, m.error_ct) == (2, 1)
    empty = EmptyPolicy(task, verbose=0)
    assert len(empty.continue_search_one_round(4, m)[0]) == 1
    assert empty.continue_search_one_round(4, m) == ([], [])


def test_default_cost_model_falls_back_with_one_warning(monkeypatch) -> None:
    monkeypatch.setattr(sp, "lightgbm_available", lambda: False)
    monkeypatch.setattr(sp, "_warned_no_model", False)
    task = dense_task()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = SketchPolicy(task, verbose=0)
        b = SketchPolicy(task, verbose=0)
    msgs = [str(w.message) for w in caught if "cost model" in str(w.message)]
    assert msgs == ["tuning without a cost model: install kiln[tune]"]
    assert isinstance(a.cost_model, RandomModel) and isinstance(b.cost_model, RandomModel)
    monkeypatch.setitem(__import__("sys").modules, "lightgbm", None)
    with pytest.raises(ImportError, match=r"kiln\[tune\]"):
        cm.LGBModel()


@pytest.mark.slow
def test_resnet18_conv_search_beats_or_matches_the_template(monkeypatch) -> None:
    """64 trials on ResNet-18's 3x3 64->64 56x56 conv (+bias+relu) with the LightGBM model, one
    kernel thread (timings on a shared machine); the template and the 4 best states are then
    re-measured 3 times, interleaved, and the minimum of each compared."""
    from kiln.config import settings

    monkeypatch.setattr(settings, "num_threads", 1)
    task = conv_task(64, 56)
    policy = SketchPolicy(task, cm.LGBModel(num_warmup_sample=16, seed=0),
                          params={"evolutionary_search_population": 128,
                                  "evolutionary_search_num_iters": 3}, seed=0, verbose=0)
    m = ProgramMeasurer(LocalBuilder(timeout=60),
                        LocalRunner(timeout=30, number=3, repeat=3, min_repeat_ms=50,
                                    check_correctness=True), verbose=0)
    tic = time.time()
    measured = []
    while m.ct < 64:
        inputs, results = policy.continue_search_one_round(16, m)
        if not inputs:
            break
        measured += [(r.mean_cost(), i.state) for i, r in zip(inputs, results) if r.error_no == 0]
    top = [st for _, st in sorted(measured, key=lambda x: x[0])[:4]]
    cands = [MeasureInput(task, st) for st in [policy.untuned_states()[0], *top]]
    mins = [math.inf] * len(cands)
    for _ in range(3):
        res = LocalRunner(timeout=60, number=5, repeat=5, min_repeat_ms=100).run(
            cands, LocalBuilder(timeout=60).build(cands, verbose=0), verbose=0)
        mins = [min(x, min(r.costs)) for x, r in zip(mins, res)]
    template, best = mins[0], min(mins[1:])
    print(f"search {time.time() - tic:.0f} s, {m.ct} trials: template {template * 1e3:.3f} ms, "
          f"best {best * 1e3:.3f} ms, speedup {template / best:.2f}x")
    assert best <= template * 1.05
