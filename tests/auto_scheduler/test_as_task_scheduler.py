"""TaskScheduler: Ansor's gradient allocation, the trial budget, per-task early stopping, progress,
and resuming a killed run from its log (issue 12, part B).

The allocation tests use scripted policies (each round's latency is given), so which task gets
each round is checked exactly. The resume test tunes two real tasks with SketchPolicy and real
builds and runs:
one run is stopped after a few trials, a second resumes it with the same budget, and the log must
end up with exactly that many distinct states, none measured twice.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import auto_scheduler, te
from kiln.auto_scheduler import MeasureResult, SearchTask
from kiln.auto_scheduler.cost_model import RandomModel
from kiln.auto_scheduler.measure import LocalBuilder, LocalRunner
from kiln.auto_scheduler.plot import tuning_curves
from kiln.auto_scheduler.search_policy import SketchPolicy
from kiln.auto_scheduler.task_scheduler import (
    LogEstimatedLatency,
    PrintTableInfo,
    TaskScheduler,
    TaskSchedulerCallback,
    TuningProgress,
)
from kiln.auto_scheduler.tuning import TuningOptions, repair_log_tail, tune_tasks


# --- scripted policies: the allocation tests ------------------------------------------------
class ScriptedPolicy:
    """A policy whose k-th round "measures" n candidates of latency ``curve(k)``."""

    def __init__(self, task: Any, curve: Any):
        self.search_task, self.curve, self.rounds = task, curve, 0
        self.preloaded = 0

    def continue_search_one_round(self, num_measure: int, measurer: Any
                                  ) -> tuple[list[Any], list[MeasureResult]]:
        cost = self.curve(self.rounds)
        self.rounds += 1
        if cost is None:  # nothing left to try
            return [], []
        return [object()] * num_measure, [MeasureResult([cost], 0, "", 0.0, 0)] * num_measure

    def add_measured(self, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        self.preloaded += len(inputs)


class _Task:
    def __init__(self, name: str):
        self.workload_key, self.desc, self.compute_dag, self.target = name, name, None, "llvm"


def _schedule(curves: list[Any], weights: list[float], trials: int, per_round: int = 4,
              **kwargs: Any) -> tuple[TaskScheduler, list[ScriptedPolicy]]:
    tasks = [_Task(f"t{i}") for i in range(len(curves))]
    policies = [ScriptedPolicy(t, c) for t, c in zip(tasks, curves)]
    per_task = kwargs.pop("per_task_early_stopping", None)
    ts = TaskScheduler(tasks, weights, callbacks=[], **kwargs)  # type: ignore[arg-type]
    ts.tune(TuningOptions(trials, num_measures_per_round=per_round, verbose=0), search_policy=policies,
            per_task_early_stopping=per_task)
    return ts, policies


def _improving(start: float) -> Any:
    return lambda k: start / (1 + k)


def test_gradient_gives_more_rounds_to_the_task_that_weighs_more() -> None:
    ts, _ = _schedule([_improving(1e-3), _improving(1e-3)], [10, 1], trials=80)
    assert ts.ct == 80 and sum(ts.task_trials) == 80
    assert ts.task_cts[0] >= 3 * ts.task_cts[1], ts.task_cts
    # round-robin ignores the weights
    rr, _ = _schedule([_improving(1e-3), _improving(1e-3)], [10, 1], trials=80, strategy="round-robin")
    assert rr.task_cts == [10, 10]


def test_gradient_prefers_the_slower_task() -> None:
    # same weight and improvement rate; task 0 starts 5x slower, so it has more to gain
    ts, _ = _schedule([_improving(5e-3), _improving(1e-3)], [1, 1], trials=80)
    assert ts.task_cts[0] >= 1.5 * ts.task_cts[1], ts.task_cts  # about sqrt(5): 1/t curves
    grads = ts.gradients()
    assert all(g <= 0 for g in grads)


def test_budget_is_exact_and_estimated_latency_is_the_weighted_sum() -> None:
    ts, _ = _schedule([_improving(2e-3), _improving(1e-3)], [2, 3], trials=19, per_round=4)
    assert ts.ct == 19  # the last round is cut to what is left
    want = 2 * ts.best_costs[0] + 3 * ts.best_costs[1]
    assert ts.estimated_latency() == pytest.approx(want)
    rows = ts.summary()
    assert [r["trials"] for r in rows] == ts.task_trials and rows[0]["latency"] == ts.best_costs[0]


def test_dead_and_early_stopped_tasks_get_no_more_rounds() -> None:
    # task 0 runs out of candidates after 2 rounds; task 1 never improves after round 0
    ts, pols = _schedule([lambda k: 1e-3 if k < 2 else None, lambda k: 1e-3], [1, 1], trials=400,
                         per_task_early_stopping=8)
    assert ts.dead_tasks == {0, 1}
    assert pols[0].rounds == 3  # the empty round marks it dead
    assert ts.ct < 400


def test_a_task_whose_candidates_all_fail_is_given_up() -> None:
    # an error costs 1e10 s: without giving up, that task would draw every round
    ts, pols = _schedule([lambda k: 1e10, _improving(1e-3)], [1, 1], trials=80)
    assert 0 in ts.dead_tasks and pols[0].rounds == 3
    assert ts.ct == 80 and ts.task_trials == [12, 68]


def test_too_small_a_budget_is_an_error() -> None:
    with pytest.raises(ValueError, match="too small"):
        _schedule([_improving(1e-3)] * 3, [1, 1, 1], trials=2)


def test_plain_progress_lines_have_trials_latency_and_eta() -> None:
    out = io.StringIO()
    tasks = [_Task("a"), _Task("b")]
    ts = TaskScheduler(tasks, [1, 2], callbacks=[TuningProgress(out)])  # type: ignore[arg-type]
    ts.tune(TuningOptions(16, num_measures_per_round=4, verbose=1),
            search_policy=[ScriptedPolicy(t, _improving(1e-3)) for t in tasks])
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("task 0: 4 trials, best 1 ms | 4/16 trials, est. latency -")
    assert "ETA" in lines[0] and "est. latency 3 ms" in lines[1]
    assert lines[-1].split("|")[1].strip().startswith("16/16 trials")


# --- real tasks: resume ---------------------------------------------------------------------
def tsched_matmul(n: int) -> list[te.Tensor]:
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    return [A, B, te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), name="C")]


def tsched_rowsum(n: int) -> list[te.Tensor]:
    A = te.placeholder((n, n), name="A")
    k = te.reduce_axis((0, n), name="k")
    return [A, te.compute((n,), lambda i: te.sum(A[i, k], axis=[k]), name="S")]


auto_scheduler.register_workload(tsched_matmul, override=True)
auto_scheduler.register_workload(tsched_rowsum, override=True)


#: A small evolutionary search: the test is about resuming, not about finding fast kernels.
SMALL_SEARCH = {"evolutionary_search_population": 16, "evolutionary_search_num_iters": 1,
                "sample_init_min_population": 8}


def _policies(tasks: list[SearchTask]) -> list[SketchPolicy]:
    """SketchPolicy with the random model (no training: fast)."""
    return [SketchPolicy(t, RandomModel(), params=SMALL_SEARCH, seed=k, verbose=0)
            for k, t in enumerate(tasks)]


class StopAfter(TaskSchedulerCallback):
    """Interrupts tuning (as Ctrl-C would) once ``n`` trials are measured."""

    def __init__(self, n: int):
        self.n = n

    def post_tune(self, task_scheduler: TaskScheduler, task_id: int) -> None:
        if task_scheduler.ct >= self.n:
            raise KeyboardInterrupt


def _log_keys(log: Path) -> list[str]:
    return [json.dumps(json.loads(line)["i"], sort_keys=True) for line in log.read_text().splitlines()]


def _tasks() -> list[SearchTask]:
    return [SearchTask(func=tsched_matmul, args=(32,), target="llvm"),
            SearchTask(func=tsched_rowsum, args=(64,), target="llvm")]




@pytest.mark.requires_cc
def test_resume_reaches_the_budget_without_measuring_a_state_twice(tmp_path: Path) -> None:
    log = tmp_path / "tune.json"
    quick = {"builder": LocalBuilder(timeout=30), "runner": LocalRunner(number=1, min_repeat_ms=0),
             "num_measures_per_round": 3, "verbose": 0}
    tasks = _tasks()
    with pytest.raises(KeyboardInterrupt):
        tune_tasks(tasks, [1, 1], log, 12, search_policy=_policies(tasks), callbacks=[StopAfter(5)],
                   **quick)  # type: ignore[arg-type]
    first = _log_keys(log)
    assert 5 <= len(first) < 12
    # an interrupted write leaves half a line: it is cut before appending
    with open(log, "a") as f:
        f.write('{"i": [["trunc')
    assert repair_log_tail(log) == len('{"i": [["trunc')

    tasks = _tasks()
    with pytest.raises(Exception, match="already holds records"):
        tune_tasks(tasks, [1, 1], log, 12, **quick)  # type: ignore[arg-type]
    ts = tune_tasks(tasks, [1, 1], log, 12, resume=True, search_policy=_policies(tasks), callbacks=[],
                    **quick)  # type: ignore[arg-type]
    keys = _log_keys(log)
    assert keys[:len(first)] == first
    assert len(keys) == 12 and len(set(keys)) == 12  # the budget, no state measured twice
    assert ts.restored_ct == len(first) and ts.ct == 12
    assert sum(ts.task_trials) == 12 and all(n > 0 for n in ts.task_trials)
    # the restored best costs are the log's
    best = {}
    for inp, res in auto_scheduler.load_records(log):
        if res.error_no == 0:
            c = float(np.mean(res.costs))
            best[inp.task.workload_key] = min(best.get(inp.task.workload_key, 1e10), c)
    assert [ts.best_costs[i] for i in range(2)] == pytest.approx([best[t.workload_key] for t in tasks],
                                                                 rel=1e-5)
    # the plot's curves, from the same log
    curves = tuning_curves(log, tasks, [1, 1])
    assert [c[-1][0] for c in curves.per_task] == ts.task_trials
    assert [c[-1][1] for c in curves.per_task] == pytest.approx([1e3 * c for c in ts.best_costs], rel=1e-5)
    assert curves.total[-1] == (12, pytest.approx(1e3 * ts.estimated_latency(), rel=1e-5))


def test_tvm_table_and_latency_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = [_Task("a"), _Task("b")]
    tsv = tmp_path / "total_latency.tsv"
    ts = TaskScheduler(tasks, [1, 2], callbacks=[PrintTableInfo(), LogEstimatedLatency(tsv)])  # type: ignore[arg-type]
    ts.tune(TuningOptions(8, num_measures_per_round=4, verbose=1),
            search_policy=[ScriptedPolicy(t, _improving(1e-3)) for t in tasks])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "|  ID  | Latency (ms) | Speed (GFLOPS) | Trials |"
    assert out[2] == "|    0 |            - |              - |      0 |"
    assert out[-4] == "|    0 |        1.000 |              - |      4 |"  # before the last round
    assert out[-1].startswith("Estimated total latency: - ms\tTrials: 4\t")  # task 1 not yet measured
    rows = [line.split("\t") for line in tsv.read_text().splitlines()]
    assert [r[3] for r in rows] == ["N/A", "3.000"] and [r[5] for r in rows] == ["4", "8"]


def test_progress_bar_mode_draws_a_tqdm_bar() -> None:
    out = io.StringIO()
    tasks = [_Task("a"), _Task("b")]
    ts = TaskScheduler(tasks, [1, 1], callbacks=[TuningProgress(out, bar=True)])  # type: ignore[arg-type]
    ts.tune(TuningOptions(8, num_measures_per_round=4, verbose=1),
            search_policy=[ScriptedPolicy(t, _improving(1e-3)) for t in tasks])
    text = out.getvalue()
    assert "8/8" in text and "est. latency 2 ms" in text and "trial" in text


@pytest.mark.requires_cc
def test_tune_task_and_auto_schedule_on_one_task(tmp_path: Path) -> None:
    task = SearchTask(func=tsched_rowsum, args=(64,), target="llvm")
    log = tmp_path / "one.json"
    options = TuningOptions(4, num_measures_per_round=2, verbose=0,
                            runner=LocalRunner(number=1, min_repeat_ms=0),
                            measure_callbacks=[auto_scheduler.RecordToFile(log)])
    policy = SketchPolicy(task, RandomModel(), params=SMALL_SEARCH, seed=0, verbose=0)
    sch, args = auto_scheduler.auto_schedule(task, policy, options)
    assert len(log.read_text().splitlines()) == 4
    _, res = auto_scheduler.load_best_record(log, task.workload_key)
    assert res is not None and res.error_no == 0
    # the best schedule computes the row sums
    mod = kiln.build(sch, args, target="llvm")
    a = np.random.default_rng(0).standard_normal((64, 64)).astype("float32")
    out = kiln.nd.empty((64,), "float32")
    mod(kiln.nd.array(a), out)
    np.testing.assert_allclose(out.numpy(), a.sum(axis=1), rtol=1e-4, atol=1e-4)
