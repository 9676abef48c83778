"""``ApplyHistoryBest`` and the dispatch stack: a tuning log applied to ``relay.build``, with the
coverage line, fallbacks to the default schedule and the compile cache (issue 11, item 5)."""

from __future__ import annotations

import dataclasses
import logging
import threading
import warnings

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.auto_scheduler import (
    ApplyHistoryBest,
    DispatchContext,
    MeasureInput,
    MeasureResult,
    extract_tasks,
    make_workload_key,
    register_workload,
    save_records,
)
from kiln.auto_scheduler.dispatcher import FallbackContext
from kiln.auto_scheduler.search_task import SearchTask
from kiln.codegen.native import detect_vector_bytes
from kiln.config import settings
from kiln.contrib import graph_executor
from kiln.target import Target
from kiln.te import dispatch
from kiln.te import tensor as te
from kiln.te.dag import ComputeDAG
from kiln.te.default_schedule import default_schedule
from kiln.te.loop_state import State
from kiln.te.steps import SplitStep, parse_step
from kiln.te.templates import TargetInfo, apply_template
from kiln.transform import PassContext

# --- helpers -------------------------------------------------------------------------------------


def template_state(dag: ComputeDAG) -> State:
    """The schedule the untuned build gives ``dag`` (template, else default), as a State."""
    vb, threads = detect_vector_bytes(), max(1, settings.num_threads)
    return apply_template(dag, TargetInfo(vb, threads)) or default_schedule(dag, vb, threads)


def with_steps(state: State, steps: list) -> State:
    new = state.copy()
    new.transform_steps = list(steps)
    return new


def mutate_split(state: State) -> State | None:
    """The state with one split factor halved (another valid factorization), or None."""
    steps = list(state.transform_steps)
    for i, step in enumerate(steps):
        if isinstance(step, SplitStep):
            for j, length in enumerate(step.lengths):
                if length and length > 1 and length % 2 == 0:
                    lengths = list(step.lengths)
                    lengths[j] = length // 2
                    steps[i] = dataclasses.replace(step, lengths=tuple(lengths))
                    return with_steps(state, steps)
    return None


def broken(state: State) -> State:
    """The state plus a step naming an iterator that does not exist."""
    last = len(state.stages) - 1
    return with_steps(state, [*state.transform_steps, parse_step(["AN", last, 999, 3])])


def ok_result(cost: float = 1e-3) -> MeasureResult:
    return MeasureResult([cost], 0, "", 0.5, 1700000000)


def write_log(path, tasks, states) -> str:
    save_records(path, [MeasureInput(t, s) for t, s in zip(tasks, states)],
                 [ok_result() for _ in tasks])
    return str(path)


def small_model():
    rng = np.random.default_rng(1)
    data = relay.var("data", shape=(1, 8, 16, 16))
    w = relay.var("w", shape=(16, 8, 3, 3))
    b = relay.var("b", shape=(16,))
    x = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(data, w, padding=(1, 1)), b))
    x = relay.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    wd = relay.var("wd", shape=(10, 16 * 8 * 8))
    y = relay.nn.softmax(relay.nn.dense(relay.nn.batch_flatten(x), wd))
    params = {"w": rng.standard_normal((16, 8, 3, 3)).astype("float32") * 0.2,
              "b": rng.standard_normal(16).astype("float32"),
              "wd": rng.standard_normal((10, 1024)).astype("float32") * 0.05}
    mod = kiln.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))
    x_value = rng.standard_normal((1, 8, 16, 16)).astype("float32")
    return mod, params, x_value


def build(mod, params, target="llvm"):
    with PassContext(opt_level=3):
        return relay.build(mod, target=target, params=params)


def run(factory, x):
    m = graph_executor.GraphModule(factory["default"](kiln.cpu()))
    m.set_input("data", x)
    m.run()
    return m.get_output(0).numpy()


def interpret(mod, params, x):
    return relay.create_executor("debug", mod=mod, params=params).evaluate()(x).numpy()


# --- the dispatch stack --------------------------------------------------------------------------


class Answer:
    def __init__(self, answer):
        self.answer = answer

    def query(self, workload_key, dag, func_name, target=None):
        return self.answer


def _matmul_dag(n=8):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return ComputeDAG([a, b, c])


def _relu_dag(n=8):
    a = te.placeholder((n, n), name="A")
    return ComputeDAG([a, te.compute((n, n), lambda i, j: te.max(a[i, j], 0.0), name="R")])


def test_stack_answers_innermost_first_and_unwinds():
    dag = _matmul_dag()
    assert dispatch.current_dispatchers() == ()
    assert dispatch.lookup("k", dag, "f") is None
    with dispatch.using(Answer("outer")):
        with dispatch.using(Answer(None)):
            assert dispatch.lookup("k", dag, "f") == "outer"  # the inner one has nothing
        with dispatch.using(Answer("inner")):
            assert dispatch.lookup("k", dag, "f") == "inner"
        assert len(dispatch.current_dispatchers()) == 1
    assert dispatch.current_dispatchers() == ()
    assert dispatch.TuningLookup.from_context() is None  # no context: the build asks nothing


def test_coverage_counts_reductions_as_tasks():
    mm, relu = _matmul_dag(), _relu_dag()
    assert dispatch.has_complex_op(mm) and not dispatch.has_complex_op(relu)
    with dispatch.using(Answer(None)):
        track = dispatch.TuningLookup.from_context()
        assert track(mm, "f_mm") is None and track(relu, "f_relu") is None
    assert track.coverage_line() == "tuning log: 0/1 tasks applied; default schedule for: f_mm"
    summary = track.summary()
    assert summary["untuned_simple_functions"] == 1 and summary["default_schedule"] == ["f_mm"]
    with dispatch.using(Answer([])):
        track = dispatch.TuningLookup.from_context()
        track(mm, "f_mm"), track(mm, "f_mm_again"), track(relu, "f_relu")
    # a simple function that found a record counts as an applied task
    assert track.coverage_line() == "tuning log: 2/2 tasks applied"
    # a worker thread (a fresh context, no dispatcher of its own) asks the build's stack
    with dispatch.using(Answer("tuned")):
        track = dispatch.TuningLookup.from_context()
    answers = []
    worker = threading.Thread(target=lambda: answers.append(track(mm, "f_mm")))
    worker.start()
    worker.join()
    assert answers == ["tuned"]
    track(mm, "f_mm_again")
    track.replay_failed(mm, "f_mm", "IndexError: no iterator 9")
    assert track.coverage_line() == ("tuning log: 0/1 tasks applied; default schedule for: "
                                     "record failed to replay: f_mm, f_mm_again")
    assert track.summary()["replay_failed"] == {"f_mm": "IndexError: no iterator 9",
                                                "f_mm_again": "IndexError: no iterator 9"}


# --- ApplyHistoryBest on records -----------------------------------------------------------------


@register_workload
def as_dispatch_matmul(n: int):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return [a, b, c]


def _split_state(task, factor):
    state = task.compute_dag.init_state
    state.split(2, 0, [factor])
    return state


def test_best_valid_record_per_workload_wins():
    task = SearchTask(func=as_dispatch_matmul, args=(16,), target="llvm")
    states = [_split_state(task, f) for f in (2, 4, 8, 16)]
    results = [MeasureResult([3e-3, 1e-3], 0, "", 1, 0),  # mean 2e-3
               MeasureResult([1e-4], 4, "crashed", 1, 0),  # fastest, but an error
               MeasureResult([1.5e-3], 0, "", 1, 0),  # the best valid one
               MeasureResult([1e10], 0, "", 1, 0)]
    records = [(MeasureInput(task, s), r) for s, r in zip(states, results)]
    llvm = Target("llvm")
    ctx = ApplyHistoryBest(records)
    best = ctx.query(llvm, task.workload_key, True, task.compute_dag, "f")
    assert best.transform_steps[0].lengths == (8,)
    first_two = ApplyHistoryBest(records, n_lines=2)
    assert first_two.query(llvm, task.workload_key, True, task.compute_dag, "f") \
        .transform_steps[0].lengths == (2,)
    other = make_workload_key(as_dispatch_matmul, (32,))
    assert ctx.query(llvm, other, True, task.compute_dag, "f") is None


def test_include_compatible_uses_a_smaller_shape_of_the_same_dag():
    small = SearchTask(func=as_dispatch_matmul, args=(16,), target="llvm")
    records = [(MeasureInput(small, _split_state(small, 4)), ok_result())]
    big = make_workload_key(as_dispatch_matmul, (32,))
    llvm = Target("llvm")
    assert ApplyHistoryBest(records).query(llvm, big, True, None, "f") is None
    found = ApplyHistoryBest(records, include_compatible=True).query(llvm, big, True, None, "f")
    assert found.transform_steps[0].lengths == (4,)
    odd = make_workload_key(as_dispatch_matmul, (24,))  # 24 is not a multiple of 16
    assert ApplyHistoryBest(records, include_compatible=True).query(llvm, odd, True, None,
                                                                    "f") is None


def test_contexts_nest_and_restore_current():
    task = SearchTask(func=as_dispatch_matmul, args=(16,), target="llvm")
    outer = ApplyHistoryBest([(MeasureInput(task, _split_state(task, 2)), ok_result())])
    inner = ApplyHistoryBest([])
    root = DispatchContext.current
    assert isinstance(root, FallbackContext)
    llvm = Target("llvm")
    with outer:
        with inner:
            assert DispatchContext.current is inner
            # the inner context has no record: the outer one answers (TVM's chain)
            got = inner.query(llvm, task.workload_key, True, task.compute_dag, "f")
            assert got.transform_steps[0].lengths == (2,)
            inner.update(llvm, task.workload_key, _split_state(task, 8))
            got = dispatch.lookup(task.workload_key, task.compute_dag, "f", llvm)
            assert got.transform_steps[0].lengths == (8,)
        assert DispatchContext.current is outer
    assert DispatchContext.current is root and dispatch.current_dispatchers() == ()


# --- applied to relay.build ----------------------------------------------------------------------


@pytest.mark.requires_cc
def test_full_log_reproduces_the_untuned_build(tmp_path, caplog):
    mod, params, x = small_model()
    tasks, _ = extract_tasks(mod, params, "llvm")
    untuned = build(mod, params)
    assert "tuning" not in untuned.metadata
    log = write_log(tmp_path / "same.json", tasks, [template_state(t.compute_dag) for t in tasks])
    with caplog.at_level(logging.INFO, logger="kiln.auto_scheduler"), ApplyHistoryBest(log):
        tuned = build(mod, params)
    line = f"tuning log: {len(tasks)}/{len(tasks)} tasks applied"
    assert tuned.metadata["tuning"]["line"] == line
    assert line in caplog.text
    # the templates' own steps give the same C: the content-addressed cache serves the same library
    assert tuned.lib.path == untuned.lib.path
    np.testing.assert_array_equal(run(tuned, x), run(untuned, x))


@pytest.mark.requires_cc
def test_mutated_split_factors_compile_anew_and_compute_the_same(tmp_path):
    mod, params, x = small_model()
    tasks, _ = extract_tasks(mod, params, "llvm")
    states = [template_state(t.compute_dag) for t in tasks]
    mutated = [mutate_split(s) for s in states]
    assert sum(m is not None for m in mutated) >= 2
    states = [m or s for m, s in zip(mutated, states)]
    log = write_log(tmp_path / "mutated.json", tasks, states)
    untuned = build(mod, params)
    with ApplyHistoryBest(log):
        tuned = build(mod, params)
    assert tuned.metadata["tuning"]["applied"] == len(tasks)
    assert tuned.lib.path != untuned.lib.path  # not the cached untuned library
    got = run(tuned, x)
    np.testing.assert_allclose(got, run(untuned, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, interpret(mod, params, x), rtol=1e-4, atol=1e-6)


@pytest.mark.requires_cc
def test_partial_log_names_the_default_functions(tmp_path, caplog):
    mod, params, x = small_model()
    tasks, _ = extract_tasks(mod, params, "llvm")
    keep = [t for t in tasks if "softmax" not in t.desc and "dense" not in t.desc]
    log = write_log(tmp_path / "partial.json", keep, [template_state(t.compute_dag) for t in keep])
    with caplog.at_level(logging.WARNING, logger="kiln.auto_scheduler"), ApplyHistoryBest(log):
        tuned = build(mod, params)
    tuning = tuned.metadata["tuning"]
    missing = [t.desc for t in tasks if t not in keep]
    assert tuning["line"] == (f"tuning log: {len(keep)}/{len(tasks)} tasks applied; "
                              f"default schedule for: {', '.join(missing)}")
    assert tuning["default_schedule"] == missing
    assert tuning["line"] in caplog.text
    np.testing.assert_allclose(run(tuned, x), interpret(mod, params, x), rtol=1e-4, atol=1e-6)


@pytest.mark.requires_cc
@pytest.mark.parametrize("source", ["log", "records"])
def test_a_record_that_does_not_replay_warns_and_falls_back(tmp_path, source):
    mod, params, x = small_model()
    tasks, _ = extract_tasks(mod, params, "llvm")
    states = [template_state(t.compute_dag) for t in tasks]
    bad = next(i for i, t in enumerate(tasks) if "conv2d" in t.desc)
    states[bad] = broken(states[bad])
    if source == "log":  # read back: the state replays (and fails) when the build asks for it
        records = write_log(tmp_path / "bad.json", tasks, states)
    else:  # states in memory: the steps fail when the build lowers them
        records = [(MeasureInput(t, s), ok_result()) for t, s in zip(tasks, states)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ApplyHistoryBest(records):
            tuned = build(mod, params)
    name = tasks[bad].desc
    messages = [str(w.message) for w in caught if "does not replay" in str(w.message)]
    assert len(messages) == 1 and name in messages[0] and "default schedule" in messages[0]
    tuning = tuned.metadata["tuning"]
    assert tuning["applied"] == len(tasks) - 1 and list(tuning["replay_failed"]) == [name]
    assert tuning["line"].endswith(f"default schedule for: record failed to replay: {name}")
    np.testing.assert_allclose(run(tuned, x), interpret(mod, params, x), rtol=1e-4, atol=1e-6)


def test_numpy_target_has_no_schedules_to_apply(tmp_path):
    mod, params, _ = small_model()
    with ApplyHistoryBest([]):
        factory = build(mod, params, target="numpy")
    assert "tuning" not in factory.metadata


# --- the done-when networks ----------------------------------------------------------------------


def _resnet_log(tmp_path, num_layers, image_shape):
    mod, params = relay.testing.resnet.get_workload(num_layers=num_layers, num_classes=10,
                                                    image_shape=image_shape)
    tasks, _ = extract_tasks(mod, params, "llvm")
    states = []
    n_mutated = 0
    for k, task in enumerate(tasks):
        state = template_state(task.compute_dag)
        mutated = mutate_split(state) if k % 3 == 0 else None
        n_mutated += mutated is not None
        states.append(mutated or state)
    return mod, params, tasks, write_log(tmp_path / "resnet.json", tasks, states), n_mutated


@pytest.mark.requires_cc
def test_resnet18_tuned_log_reproduces_untuned_outputs_with_full_coverage(tmp_path):
    mod, params, tasks, log, n_mutated = _resnet_log(tmp_path, 18, (3, 64, 64))
    assert n_mutated >= 4
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype("float32")
    untuned = build(mod, params)
    with ApplyHistoryBest(log):
        tuned = build(mod, params)
    line = tuned.metadata["tuning"]["line"]
    assert line == f"tuning log: {len(tasks)}/{len(tasks)} tasks applied"
    assert len(tasks) == 24
    got = run(tuned, x)
    np.testing.assert_allclose(got, run(untuned, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, interpret(mod, params, x), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.requires_cc
def test_resnet50_full_coverage(tmp_path):
    mod, params, tasks, log, _ = _resnet_log(tmp_path, 50, (3, 224, 224))
    with ApplyHistoryBest(log):
        tuned = build(mod, params)
    assert tuned.metadata["tuning"]["line"] == f"tuning log: {len(tasks)}/{len(tasks)} tasks applied"
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype("float32")
    np.testing.assert_allclose(run(tuned, x), run(build(mod, params), x), rtol=1e-5, atol=1e-6)
