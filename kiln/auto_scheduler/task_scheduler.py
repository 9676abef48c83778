"""The task scheduler: shares a trial budget among the tasks of a model (TVM's
``tvm.auto_scheduler.task_scheduler``).

A model has several tasks (its fused kernels), each weighted by how often the graph calls it. The
scheduler tunes them in rounds of ``num_measures_per_round`` trials: one round per task first
(round-robin warm-up), then each round goes to the task whose next round is expected to lower the
objective (by default the end-to-end latency ``sum(weight * best latency)``) the most. That is
Ansor's "gradient" strategy (section 6 of Zheng et al., "Ansor: Generating High-Performance
Tensor Programs for Deep Learning", OSDI 2020)::

    grad_i = df/dg_i * (alpha * backward_i + (1 - alpha) * forward_i)

``backward_i`` is the latency change over the task's last ``backward_window_size`` rounds;
``forward_i`` the change expected from one more round, the smaller of an optimistic
``g_i / t_i`` and the latency a similar task (same op tags, about the same FLOPs) reaches,
``beta * flop_i / best_flops_of_group``. The task with the most negative gradient is tuned next.

A tuning log given as ``load_log_file`` restores the scheduler: trials already in it count
against the budget, best latencies and round counts come back, every policy learns which states
it measured (so none is measured again) and the cost model is retrained on the log.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from kiln.auto_scheduler.measure import MAX_FLOAT, MeasureErrorNo, MeasureInput, MeasureResult

if TYPE_CHECKING:
    from kiln.auto_scheduler.compute_dag import ComputeDAG
    from kiln.auto_scheduler.search_task import SearchTask
    from kiln.auto_scheduler.tuning import TuningOptions

__all__ = [
    "LogEstimatedLatency",
    "PrintTableInfo",
    "TaskScheduler",
    "TaskSchedulerCallback",
    "TuningProgress",
    "derive_similarity_tag",
    "make_search_policies",
    "state_key",
]

logger = logging.getLogger("kiln.auto_scheduler")

#: Costs at or above this are "not measured yet / failed" (TVM's ``1e9`` test).
_INVALID = 1e9
#: Rounds without one valid candidate after which a task is given up (Kiln's addition).
_GIVE_UP_ROUNDS = 3


def state_key(inp: MeasureInput) -> str:
    """A candidate's identity: its workload key and its steps as a record writes them.

    Two inputs with equal keys are the same program; a resumed run never measures one twice.
    """
    from kiln.auto_scheduler.measure_record import input_steps

    steps = [s.to_record() for s in input_steps(inp)]
    return inp.task.workload_key + "|" + json.dumps(steps, separators=(",", ":"))


def _mean(costs: Sequence[float]) -> float:
    return float(sum(costs) / len(costs)) if costs else MAX_FLOAT


def make_search_policies(search_policy: str | Sequence[Any], search_policy_params: dict[str, Any] | None,
                         tasks: Sequence[SearchTask], num_measures_per_round: int, verbose: int,
                         load_model_file: str | None = None, load_log_file: str | None = None,
                         adaptive_training: bool = False) -> list[Any]:
    """One search policy per task (TVM's ``make_search_policies``).

    Parameters
    ----------
    search_policy : str or list of SearchPolicy
        ``"default"`` or ``"sketch.xgb"`` (SketchPolicy with the gradient-boosted model;
        ``"sketch.lgb"`` is the same), ``"sketch.random"`` (SketchPolicy with RandomModel), or
        ready policies, one per task.
    search_policy_params : dict, optional
        SketchPolicy's parameters.
    tasks : list of SearchTask
        The tasks.
    num_measures_per_round : int
        Trials per round (the cost model's warm-up is one round per task).
    verbose : int
        The policies' verbosity.
    load_model_file : str, optional
        A saved cost model to start from.
    load_log_file : str, optional
        A log to train the cost model on (when no model file is given).
    adaptive_training : bool
        Retrain the model less often as records pile up.

    Returns
    -------
    list of SearchPolicy
    """
    if not isinstance(search_policy, str):
        policies = list(search_policy)
        if len(policies) != len(tasks):
            raise ValueError(f"{len(policies)} search policies for {len(tasks)} tasks")
        return policies
    name = "sketch.xgb" if search_policy == "default" else search_policy
    policy_type, _, model_type = name.partition(".")
    if policy_type != "sketch" or model_type not in ("xgb", "lgb", "random"):
        raise ValueError(f"invalid search policy {search_policy!r}: expected 'default', 'sketch.xgb', "
                         "'sketch.lgb' or 'sketch.random'")
    from kiln.auto_scheduler import cost_model as cm
    from kiln.auto_scheduler.search_policy import SketchPolicy

    model: Any
    if model_type == "random":
        model = cm.RandomModel()
    else:
        model = _boosted_model(cm, len(tasks) * num_measures_per_round, load_model_file,
                               adaptive_training)
        if load_model_file:
            logger.info("TaskScheduler: loading the cost model from %s", load_model_file)
            model.load(load_model_file)
        elif load_log_file:
            logger.info("TaskScheduler: training the cost model on %s", load_log_file)
            model.update_from_file(load_log_file)
    return [SketchPolicy(task, model, params=search_policy_params, verbose=verbose) for task in tasks]


def _boosted_model(cm: Any, num_warmup_sample: int, model_file: str | None, adaptive: bool) -> Any:
    """The gradient-boosted cost model, whichever of TVM's keyword spellings it takes."""
    cls = getattr(cm, "LGBModel", None) or cm.XGBModel
    for kwargs in ({"num_warmup_sample": num_warmup_sample, "model_file": model_file,
                    "adaptive_training": adaptive},
                   {"num_warmup_sample": num_warmup_sample, "model_file": model_file,
                    "adapative_training": adaptive},
                   {"num_warmup_sample": num_warmup_sample}):
        try:
            return cls(**kwargs)
        except TypeError:
            continue
    return cls()


def derive_similarity_tag(dag: ComputeDAG, log_base: float = 1.618) -> str:
    """The tag grouping similar tasks: the ops' ``auto_scheduler_task_scheduler_tag`` attributes
    and ``log(flop)``; ``""`` (similar to nothing) when no op has a tag."""
    tag = "".join(str(op.attrs["auto_scheduler_task_scheduler_tag"]) + "_"
                  for op in dag.ops if getattr(op, "attrs", None)
                  and op.attrs.get("auto_scheduler_task_scheduler_tag"))
    if tag:
        tag += str(int(math.log(max(dag.flop_ct, 0) + 1, log_base)))
    return tag


class TaskScheduler:
    """Shares tuning trials among tasks (TVM's ``TaskScheduler``).

    Parameters
    ----------
    tasks : list of SearchTask
        The tasks to tune.
    task_weights : list of float, optional
        How often the model runs each task; the objective is then ``sum(w * latency)``
        (default: every weight 1).
    objective_func : callable, optional
        ``f(latencies) -> float`` to minimize instead of the weighted sum.
    strategy : str
        ``"gradient"`` (Ansor's) or ``"round-robin"``.
    load_model_file : str, optional
        A saved cost model to start from.
    load_log_file : str, optional
        A log of an earlier run of these tasks to resume (see the module docstring).
    alpha, beta : float
        The gradient's weight of the backward estimate, and the similar-task speed ratio.
    gamma : float
        Accepted for TVM's signature (unused there too).
    backward_window_size : int
        Rounds the backward estimate looks back.
    callbacks : list of TaskSchedulerCallback, optional
        Called before and after each round (default: :class:`PrintTableInfo` and
        :class:`TuningProgress`).

    Examples
    --------
    >>> tasks, weights = auto_scheduler.extract_tasks(mod, params, "llvm")  # doctest: +SKIP
    >>> tuner = TaskScheduler(tasks, weights)  # doctest: +SKIP
    >>> tuner.tune(TuningOptions(num_measure_trials=200,  # doctest: +SKIP
    ...                          measure_callbacks=[RecordToFile("model.json")]))
    """

    def __init__(self, tasks: Sequence[SearchTask], task_weights: Sequence[float] | None = None,
                 objective_func: Callable[[Sequence[float]], float] | None = None,
                 strategy: str = "gradient", load_model_file: str | None = None,
                 load_log_file: str | None = None, alpha: float = 0.2, beta: float = 2,
                 gamma: float = 0.5, backward_window_size: int = 3,
                 callbacks: Sequence[TaskSchedulerCallback] | None = None):
        if not tasks:
            raise ValueError("TaskScheduler: no tasks to tune")
        if strategy not in ("round-robin", "gradient"):
            raise ValueError(f"TaskScheduler: strategy {strategy!r} is not 'gradient' or 'round-robin'")
        self.tasks = list(tasks)
        n = len(self.tasks)
        if task_weights is not None and len(task_weights) != n:
            raise ValueError(f"TaskScheduler: {len(task_weights)} weights for {n} tasks")
        self.task_weights = [float(w) for w in task_weights] if task_weights is not None else [1.0] * n
        weights = list(self.task_weights)
        self.objective_func: Callable[[Sequence[float]], float] = objective_func or (
            lambda costs: float(sum(c * w for c, w in zip(costs, weights))))
        self.strategy = strategy
        self.load_model_file = load_model_file
        self.load_log_file = load_log_file
        self.alpha, self.beta, self.gamma = alpha, beta, gamma
        self.backward_window_size = backward_window_size
        self.callbacks = list(callbacks) if callbacks is not None else [PrintTableInfo(), TuningProgress()]

        self.task_cts = [0] * n  # rounds per task
        self.task_trials = [0] * n  # measured candidates per task
        self.task_best_cts = [0] * n  # the round of each task's best cost
        self.task_costs_history: list[list[float]] = [[] for _ in range(n)]
        self.best_costs = np.full(n, MAX_FLOAT)
        self.cur_score = self._compute_score(self.best_costs)
        self.dead_tasks: set[int] = set()
        self.restored_ct = 0  # trials read back from load_log_file
        self.history: list[tuple[int, int, float]] = []  # (trials so far, task, objective) per round
        self.tune_option: TuningOptions | None = None
        self.measurer: Any = None
        self.search_policies: list[Any] = []
        self.num_measures_per_round = 0
        self.ct = self.best_ct = 0
        self.best_score = self.cur_score
        self.tic = time.time()
        self.early_stopping_all = self.early_stopping_task = 1e20

        self.task_tags: list[str | None] = []
        self.tag_to_group_id: dict[str, int] = {}
        self.group_task_ids: list[list[int]] = []
        self.flop_cts: list[float] = []
        for i, task in enumerate(self.tasks):
            dag = task.compute_dag
            tag = derive_similarity_tag(dag) if dag is not None else ""
            self.task_tags.append(tag)
            self.flop_cts.append(float(dag.flop_ct) if dag is not None else -1.0)
            if tag:
                group = self.tag_to_group_id.setdefault(tag, len(self.tag_to_group_id))
                if group == len(self.group_task_ids):
                    self.group_task_ids.append([])
                self.group_task_ids[group].append(i)

    # --- the tuning loop --------------------------------------------------------------------
    def tune(self, tune_option: TuningOptions, search_policy: str | Sequence[Any] = "default",
             search_policy_params: dict[str, Any] | None = None, adaptive_training: bool = False,
             per_task_early_stopping: int | None = None) -> None:
        """Tune the tasks until ``tune_option.num_measure_trials`` candidates are measured.

        Parameters
        ----------
        tune_option : TuningOptions
            The budget, round size, builder, runner and measure callbacks.
        search_policy : str or list of SearchPolicy
            ``"default"`` (SketchPolicy + gradient-boosted model), ``"sketch.xgb"``,
            ``"sketch.random"``, or one policy per task.
        search_policy_params : dict, optional
            SketchPolicy's parameters.
        adaptive_training : bool
            Retrain the cost model less often as records pile up.
        per_task_early_stopping : int, optional
            Stop tuning a task after this many trials without improving it.
        """
        from kiln.auto_scheduler.measurer import ProgramMeasurer

        self.tune_option = tune_option
        budget = int(tune_option.num_measure_trials)
        self.early_stopping_all = 1e20 if tune_option.early_stopping < 0 else tune_option.early_stopping
        self.early_stopping_task = 1e20 if per_task_early_stopping is None else per_task_early_stopping
        self.num_measures_per_round = min(tune_option.num_measures_per_round, budget // len(self.tasks))
        if self.num_measures_per_round <= 0:
            raise ValueError(f"num_measure_trials={budget} is too small for {len(self.tasks)} tasks: "
                             f"give each task at least one trial (>= {len(self.tasks)})")
        self.measurer = ProgramMeasurer(tune_option.builder, tune_option.runner,
                                        tune_option.measure_callbacks, tune_option.verbose)
        self.ct = self.best_ct = 0
        self.tic = time.time()

        preload: list[tuple[list[MeasureInput], list[MeasureResult]]] = [([], []) for _ in self.tasks]
        if self.load_log_file:
            preload = self._restore_status(self.load_log_file, self.num_measures_per_round)
        # the log's records reach the cost model through add_measured (SketchPolicy trains the
        # model on what it is given), so the model is not trained on the file a second time
        self.search_policies = make_search_policies(
            search_policy, search_policy_params, self.tasks, self.num_measures_per_round,
            tune_option.verbose, self.load_model_file, None, adaptive_training)
        for policy, (inputs, results) in zip(self.search_policies, preload):
            if inputs:
                policy.add_measured(inputs, results)

        for cb in self.callbacks:
            cb.start(self)
        try:
            self._loop(budget)
        finally:
            for cb in self.callbacks:
                cb.finish(self)

    def _loop(self, budget: int) -> None:
        for idx in range(len(self.tasks)):  # round-robin warm-up, skipping restored tasks
            if self.ct >= budget:
                break
            if not self.task_cts[idx]:
                self._tune_task(idx, budget)
        self.best_ct, self.best_score = self.ct, self.cur_score
        task_idx = -1
        while self.ct < budget and len(self.dead_tasks) < len(self.tasks):
            if self.strategy == "round-robin":
                task_idx = (task_idx + 1) % len(self.tasks)
                while task_idx in self.dead_tasks:
                    task_idx = (task_idx + 1) % len(self.tasks)
            else:
                task_idx = self._pick_by_gradient()
            self._tune_task(task_idx, budget)
            self._adjust_similarity_group(task_idx)
            if self.cur_score < self.best_score:
                self.best_score, self.best_ct = self.cur_score, self.ct
            elif self.ct - self.best_ct >= self.early_stopping_all and \
                    all(c < _INVALID for c in self.best_costs):
                if self.tune_option is not None and self.tune_option.verbose >= 1:
                    print(f"Stop early since no performance improvement in the last "
                          f"{self.early_stopping_all} measurement trials.")
                break

    def gradients(self) -> list[float]:
        """Each task's gradient of the objective with respect to one more round (0 for dead
        tasks, ``-inf`` for a task not tuned yet); the most negative one is tuned next."""
        grads: list[float] = []
        for i in range(len(self.tasks)):
            if i in self.dead_tasks:
                grads.append(0.0)
                continue
            if self.task_cts[i] == 0:
                grads.append(-math.inf)
                continue
            # chain rule: d objective / d latency_i
            delta = 1e-4
            new_costs = list(self.best_costs)
            new_costs[i] -= delta
            chain_grad = (self._compute_score(self.best_costs) - self._compute_score(new_costs)) / delta
            # backward: the latency change per round over the last rounds
            hist, t, w = self.task_costs_history[i], self.task_cts[i], self.backward_window_size
            if t - 1 < len(hist) and t - 1 - w >= 0:
                backward_grad = (hist[t - 1] - hist[t - 1 - w]) / w
            else:
                backward_grad = 0.0
            # forward: optimistic g_i / t_i, or what a similar task reaches
            g_next_1 = self.best_costs[i] - self.best_costs[i] / t
            g_next_2 = self.beta * 1e30
            group = self.tag_to_group_id.get(self.task_tags[i] or "")
            if group is not None and len(self.group_task_ids[group]) > 1:
                best_flops = max(self.flop_cts[j] / self.best_costs[j] for j in self.group_task_ids[group])
                g_next_2 = self.beta * self.flop_cts[i] / best_flops
            forward_grad = min(g_next_1, g_next_2) - self.best_costs[i]
            grads.append(float(chain_grad * (self.alpha * backward_grad + (1 - self.alpha) * forward_grad)))
        return grads

    def _pick_by_gradient(self) -> int:
        grads = self.gradients()
        if max(grads) == min(grads):
            live = [i for i in range(len(self.tasks)) if i not in self.dead_tasks]
            return int(np.random.choice(live))
        return int(np.argmin(grads))

    def _tune_task(self, task_idx: int, budget: int) -> None:
        """Tune one task for one round (at most the trials left in the budget)."""
        for cb in self.callbacks:
            cb.pre_tune(self, task_idx)
        n = min(self.num_measures_per_round, budget - self.ct)
        inputs, results = self.search_policies[task_idx].continue_search_one_round(n, self.measurer)
        for res in results:
            cost = _mean(res.costs) if res.error_no == MeasureErrorNo.NO_ERROR else MAX_FLOAT
            if cost < self.best_costs[task_idx]:
                self.task_best_cts[task_idx] = self.task_cts[task_idx]
                self.best_costs[task_idx] = cost
        # no candidate left, or no improvement for a long while: stop tuning this task
        no_change = (self.task_cts[task_idx] - self.task_best_cts[task_idx]) * self.num_measures_per_round
        if not inputs or no_change > self.early_stopping_task:
            self.dead_tasks.add(task_idx)
        elif self.task_cts[task_idx] + 1 >= _GIVE_UP_ROUNDS and self.best_costs[task_idx] >= _INVALID:
            # every candidate failed: its (huge) latency would draw every later round to it
            logger.warning("TaskScheduler: giving up task %d: all %d candidates of its first %d rounds "
                           "failed", task_idx, self.task_trials[task_idx] + len(inputs), _GIVE_UP_ROUNDS)
            self.dead_tasks.add(task_idx)
        self.task_cts[task_idx] += 1
        self.task_trials[task_idx] += len(inputs)
        self.task_costs_history[task_idx].append(float(self.best_costs[task_idx]))
        self.ct += len(inputs)
        self.cur_score = self._compute_score(self.best_costs)
        self.history.append((self.ct, task_idx, float(self.cur_score)))
        for cb in self.callbacks:
            cb.post_tune(self, task_idx)

    def _compute_score(self, costs: Sequence[float] | np.ndarray) -> float:
        return float(self.objective_func(list(costs)))

    def _adjust_similarity_group(self, task_idx: int) -> None:
        """Take a task out of its group when, tuned much more, it stays far slower than the
        group's fastest (it is not similar after all)."""
        group = self.tag_to_group_id.get(self.task_tags[task_idx] or "")
        if group is None or len(self.group_task_ids[group]) <= 1:
            return
        ids = self.group_task_ids[group]
        best_group_flops = max(self.flop_cts[j] / self.best_costs[j] for j in ids)
        cur_flops = self.flop_cts[task_idx] / self.best_costs[task_idx]
        if cur_flops < best_group_flops / self.beta and \
                self.task_cts[task_idx] > 5 + max(self.task_cts[j] for j in ids if j != task_idx):
            self.task_tags[task_idx] = None
            ids.remove(task_idx)

    # --- resuming ---------------------------------------------------------------------------
    def _restore_status(self, log_file: str, num_measures_per_round: int
                        ) -> list[tuple[list[MeasureInput], list[MeasureResult]]]:
        """Read ``log_file``'s records of these tasks: trial counts (which count against the
        budget), best costs and round counts; return each task's records for its policy."""
        from kiln.auto_scheduler.measure_record import load_records

        by_key = {(t.workload_key, str(t.target)): i for i, t in enumerate(self.tasks)}
        out: list[tuple[list[MeasureInput], list[MeasureResult]]] = [([], []) for _ in self.tasks]
        seen: set[str] = set()
        total = 0
        if os.path.exists(log_file):
            for inp, res in load_records(log_file):
                total += 1
                i = by_key.get((inp.task.workload_key, str(inp.task.target)))
                if i is None:
                    continue
                key = state_key(inp)
                if key in seen:  # a duplicate (e.g. a merged log) is one trial
                    continue
                seen.add(key)
                inp.task = self.tasks[i]  # the policy's own task object
                out[i][0].append(inp)
                out[i][1].append(res)
                self.task_trials[i] += 1
                if res.error_no == MeasureErrorNo.NO_ERROR:
                    self.best_costs[i] = min(self.best_costs[i], _mean(res.costs))
        for i in range(len(self.tasks)):
            # rounds are an estimate: the round size may have been another one
            trials = self.task_trials[i]
            self.task_cts[i] = max(1, int(trials / num_measures_per_round + 0.5)) if trials else 0
            self.task_best_cts[i] = self.task_cts[i]
            if trials:
                self.task_costs_history[i].append(float(self.best_costs[i]))
        self.restored_ct = self.ct = sum(self.task_trials)
        self.cur_score = self._compute_score(self.best_costs)
        logger.info("TaskScheduler: loaded %d records from %s (%d trials of these tasks)", total,
                    log_file, self.ct)
        return out

    # --- reporting --------------------------------------------------------------------------
    def estimated_latency(self) -> float | None:
        """The objective in seconds (the estimated end-to-end latency), or None while a task has
        no valid measurement."""
        return self.cur_score if all(c < _INVALID for c in self.best_costs) else None

    def summary(self) -> list[dict[str, Any]]:
        """One row per task: id, description, weight, trials, best latency (s, None if none)."""
        return [{"id": i, "desc": getattr(t, "desc", "") or t.workload_key, "weight": self.task_weights[i],
                 "trials": self.task_trials[i],
                 "latency": float(self.best_costs[i]) if self.best_costs[i] < _INVALID else None,
                 "flop": self.flop_cts[i]}
                for i, t in enumerate(self.tasks)]


# --- callbacks ---------------------------------------------------------------------------------
class TaskSchedulerCallback:
    """Called around every round of :class:`TaskScheduler` (base class: does nothing)."""

    def start(self, task_scheduler: TaskScheduler) -> None:
        """Tuning starts (after a resumed log was read)."""

    def pre_tune(self, task_scheduler: TaskScheduler, task_id: int) -> None:
        """Task ``task_id`` is about to be tuned for one round."""

    def post_tune(self, task_scheduler: TaskScheduler, task_id: int) -> None:
        """Task ``task_id`` was tuned for one round."""

    def finish(self, task_scheduler: TaskScheduler) -> None:
        """Tuning ended (also when it raised)."""


def _ms(cost: float) -> str:
    return f"{1e3 * cost:.3f}" if cost < _INVALID else "-"


class PrintTableInfo(TaskSchedulerCallback):
    """Prints TVM's table of every task's latency, speed and trials before each round
    (``tune_option.verbose >= 1``)."""

    def pre_tune(self, task_scheduler: TaskScheduler, task_id: int) -> None:
        ts = task_scheduler
        if ts.tune_option is None or ts.tune_option.verbose < 1:
            return
        print("|  ID  | Latency (ms) | Speed (GFLOPS) | Trials |")
        print("-------------------------------------------------")
        for i in range(len(ts.tasks)):
            cost = ts.best_costs[i]
            speed = f"{ts.flop_cts[i] / cost / 1e9:.2f}" if cost < _INVALID and ts.flop_cts[i] > 0 else "-"
            print(f"| {i:4d} | {_ms(cost):>12s} | {speed:>14s} | {ts.task_trials[i]:6d} |")
        print("-------------------------------------------------")
        total = ts.estimated_latency()
        print(f"Estimated total latency: {_ms(total) if total is not None else '-'} ms\t"
              f"Trials: {ts.ct}\tUsed time : {time.time() - ts.tic:.0f} s\tNext ID: {task_id}\t",
              flush=True)


class LogEstimatedLatency(TaskSchedulerCallback):
    """Appends ``ElapsedTime(s) ... EstimatedLatency(ms) ... Trials ...`` to a TSV file after each
    round (an existing file is replaced when tuning starts)."""

    def __init__(self, log_file: str | Path):
        self.log_file = str(log_file)
        if os.path.exists(self.log_file):
            os.remove(self.log_file)

    def post_tune(self, task_scheduler: TaskScheduler, task_id: int) -> None:
        total = task_scheduler.estimated_latency()
        with open(self.log_file, "a", encoding="utf-8") as f:
            f.write(f"ElapsedTime(s)\t{time.time() - task_scheduler.tic:.0f}\tEstimatedLatency(ms)\t"
                    f"{_ms(total) if total is not None else 'N/A'}\tTrials\t{task_scheduler.ct}\n")


def _ms_g(cost: float) -> str:
    return f"{1e3 * cost:.4g}" if cost < _INVALID else "-"


def _fmt_seconds(s: float) -> str:
    s = max(0, int(s + 0.5))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class TuningProgress(TaskSchedulerCallback):
    """Shows tuning progress with an ETA (``tune_option.verbose >= 1``).

    On a terminal a tqdm bar of the trials, with the estimated end-to-end latency; elsewhere
    (a pipe, a file, no tqdm) one plain line per round: the task, its trials and best latency,
    the trials done, the estimated latency, the elapsed time and the ETA. The ETA counts only
    the trials of this run (not those a resumed log brought).

    Parameters
    ----------
    stream : file, optional
        Where to write (default: standard error).
    bar : bool, optional
        Force the bar on (True) or off (False); default: when ``stream`` is a terminal.
    enabled : bool, optional
        Show progress whatever ``tune_option.verbose`` says (True) or never (False).
    """

    def __init__(self, stream: TextIO | None = None, bar: bool | None = None,
                 enabled: bool | None = None):
        self.stream = stream
        self.bar = bar
        self.enabled = enabled
        self._tqdm: Any = None
        self._active = False

    def _out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stderr

    def start(self, task_scheduler: TaskScheduler) -> None:
        ts = task_scheduler
        if ts.tune_option is None:
            return
        self._active = self.enabled if self.enabled is not None else ts.tune_option.verbose >= 1
        if not self._active:
            return
        total = int(ts.tune_option.num_measure_trials)
        use_bar = self.bar if self.bar is not None else bool(getattr(self._out(), "isatty", lambda: False)())
        if use_bar:
            try:
                from tqdm import tqdm
            except ImportError:
                use_bar = False
        if use_bar:
            try:
                width = os.get_terminal_size(self._out().fileno()).columns
            except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
                width = 0
            # a terminal that reports no size (0 columns) would get an empty bar
            size: dict[str, Any] = {"dynamic_ncols": True} if width > 0 else {"ncols": 100, "nrows": 24}
            self._tqdm = tqdm(total=total, initial=min(ts.ct, total), unit="trial", file=self._out(),
                              desc="tuning", **size)
        if ts.restored_ct:
            self._write(f"resumed {ts.restored_ct} trials from {ts.load_log_file}")

    def _write(self, text: str) -> None:
        if self._tqdm is not None:
            self._tqdm.write(text, file=self._out())
        else:
            print(text, file=self._out(), flush=True)

    def eta(self, task_scheduler: TaskScheduler) -> float | None:
        """Seconds left at this run's pace (None before its first trial)."""
        ts = task_scheduler
        done = ts.ct - ts.restored_ct
        if done <= 0 or ts.tune_option is None:
            return None
        left = max(0, int(ts.tune_option.num_measure_trials) - ts.ct)
        return (time.time() - ts.tic) / done * left

    def post_tune(self, task_scheduler: TaskScheduler, task_id: int) -> None:
        if not self._active:
            return
        ts = task_scheduler
        total = ts.estimated_latency()
        est = f"{_ms_g(total)} ms" if total is not None else "-"
        if self._tqdm is not None:
            self._tqdm.n = min(ts.ct, self._tqdm.total)
            self._tqdm.set_postfix_str(f"est. latency {est}, task {task_id} best "
                                       f"{_ms_g(ts.best_costs[task_id])} ms", refresh=True)
            return
        eta = self.eta(ts)
        assert ts.tune_option is not None
        best = _ms_g(ts.best_costs[task_id])
        self._write(f"task {task_id}: {ts.task_trials[task_id]} trials, best {best} ms"
                    f" | {ts.ct}/{ts.tune_option.num_measure_trials} trials, est. latency {est}, "
                    f"elapsed {_fmt_seconds(time.time() - ts.tic)}, "
                    f"ETA {_fmt_seconds(eta) if eta is not None else '?'}")

    def finish(self, task_scheduler: TaskScheduler) -> None:
        if self._tqdm is not None:
            self._tqdm.close()
            self._tqdm = None
