"""Tuning options and the entry points that tune tasks into a log (TVM's ``TuningOptions`` and
``auto_schedule``), with resuming.

:func:`tune_tasks` is what ``kiln tune`` runs: it appends every measured record to the log as it
arrives (``RecordToFile`` opens, appends and closes the log for every batch the measurer
reports, so a killed run loses at most the batch in flight) and, with ``resume=True``, picks up
where an earlier run on the same log stopped: the trials in the log count against the budget and
no state in it is measured again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln.auto_scheduler.measure import LocalBuilder, LocalRunner, ProgramBuilder, ProgramRunner

if TYPE_CHECKING:
    from kiln.auto_scheduler.search_task import SearchTask
    from kiln.auto_scheduler.task_scheduler import TaskScheduler, TaskSchedulerCallback
    from kiln.te.schedule import Schedule
    from kiln.te.tensor import Tensor

__all__ = ["TuningOptions", "auto_schedule", "repair_log_tail", "tune_task", "tune_tasks"]


class TuningOptions:
    """How to tune: the budget, the round size, where candidates are built and run, and what
    to do with each measured batch (TVM's ``TuningOptions``).

    Parameters
    ----------
    num_measure_trials : int
        Candidates to measure in all (0: only the search, no measurement).
    early_stopping : int, optional
        Stop after this many trials without improvement (None: never).
    num_measures_per_round : int
        Candidates per round (the scheduler lowers it so every task gets a round).
    verbose : int
        0 silent; 1 progress, the task table and the measurer's ``.``/``*`` marks.
    builder : str or ProgramBuilder
        ``"local"`` (:class:`LocalBuilder`) or a builder (e.g. :class:`RayBuilder`).
    runner : str or ProgramRunner
        ``"local"`` (:class:`LocalRunner`) or a runner (e.g. :class:`RayRunner`).
    measure_callbacks : list of MeasureCallback, optional
        Called with every measured batch, e.g. ``[RecordToFile("log.json")]``.
    """

    def __init__(self, num_measure_trials: int = 0, early_stopping: int | None = None,
                 num_measures_per_round: int = 64, verbose: int = 1,
                 builder: str | ProgramBuilder = "local", runner: str | ProgramRunner = "local",
                 measure_callbacks: Sequence[Any] | None = None):
        if isinstance(builder, str):
            if builder != "local":
                raise ValueError(f"invalid builder {builder!r}: 'local' or a ProgramBuilder")
            builder = LocalBuilder()
        if isinstance(runner, str):
            if runner != "local":
                raise ValueError(f"invalid runner {runner!r}: 'local' or a ProgramRunner")
            runner = LocalRunner()
        self.num_measure_trials = int(num_measure_trials)
        self.early_stopping = -1 if early_stopping is None else int(early_stopping)
        self.num_measures_per_round = int(num_measures_per_round)
        self.verbose = int(verbose)
        self.builder: ProgramBuilder = builder
        self.runner: ProgramRunner = runner
        self.measure_callbacks: list[Any] = list(measure_callbacks or [])

    def __repr__(self) -> str:
        return (f"TuningOptions(num_measure_trials={self.num_measure_trials}, "
                f"num_measures_per_round={self.num_measures_per_round}, builder={self.builder!r}, "
                f"runner={self.runner!r})")


def repair_log_tail(log_file: str | Path) -> int:
    """Cut a log's unfinished last line (a run killed while writing it); returns bytes cut.

    Without this, the next record appended would be glued to the broken line and lost with it.
    """
    path = Path(log_file)
    if not path.is_file():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return 0
        chunk = 1 << 16
        pos = size
        while pos > 0:  # find the last newline
            start = max(0, pos - chunk)
            f.seek(start)
            data = f.read(pos - start)
            k = data.rfind(b"\n")
            if k >= 0:
                keep = start + k + 1
                break
            pos = start
        else:
            keep = 0
        f.truncate(keep)
    return size - keep


def tune_tasks(tasks: Sequence[SearchTask], task_weights: Sequence[float] | None, log_file: str | Path,
               num_measure_trials: int, *, resume: bool = False, num_measures_per_round: int = 64,
               builder: str | ProgramBuilder = "local", runner: str | ProgramRunner = "local",
               search_policy: str | Sequence[Any] = "default",
               search_policy_params: dict[str, Any] | None = None, early_stopping: int | None = None,
               per_task_early_stopping: int | None = None, strategy: str = "gradient",
               callbacks: Sequence[TaskSchedulerCallback] | None = None,
               measure_callbacks: Sequence[Any] = (), verbose: int = 1) -> TaskScheduler:
    """Tune a model's tasks into ``log_file``, or resume an earlier run on it.

    Parameters
    ----------
    tasks : list of SearchTask
        The tasks (:func:`~kiln.auto_scheduler.extract_tasks`).
    task_weights : list of float, optional
        Their weights (how often the model runs each).
    log_file : str or Path
        The log: records are appended as they are measured.
    num_measure_trials : int
        The budget, counting the trials a resumed log already holds.
    resume : bool
        Continue the run the log records. False with a log that holds records is an error
        (so that no run's records are mixed into another's by mistake).
    num_measures_per_round, early_stopping : int
        As :class:`TuningOptions`.
    builder, runner : str or ProgramBuilder / ProgramRunner
        Where candidates are built and measured.
    search_policy, search_policy_params : see :meth:`TaskScheduler.tune`
    per_task_early_stopping : int, optional
        Stop a task after this many trials without improvement.
    strategy : str
        ``"gradient"`` or ``"round-robin"``.
    callbacks : list of TaskSchedulerCallback, optional
        The scheduler's callbacks (default: its own).
    measure_callbacks : list of MeasureCallback
        Called after the log is written, with every measured batch.
    verbose : int
        As :class:`TuningOptions`.

    Returns
    -------
    TaskScheduler
        The scheduler after tuning: ``best_costs``, ``task_trials``, ``summary()``.
    """
    from kiln.auto_scheduler.measure_record import RecordToFile
    from kiln.auto_scheduler.task_scheduler import TaskScheduler
    from kiln.errors import TuningLogError

    log = Path(log_file)
    has_records = log.is_file() and log.stat().st_size > 0
    if has_records and not resume:
        raise TuningLogError(f"{log} already holds records: resume it (--resume / resume=True) or "
                             "write to another log")
    if resume and has_records:
        repair_log_tail(log)
    options = TuningOptions(num_measure_trials=num_measure_trials, early_stopping=early_stopping,
                            num_measures_per_round=num_measures_per_round, verbose=verbose,
                            builder=builder, runner=runner,
                            measure_callbacks=[RecordToFile(str(log)), *measure_callbacks])
    scheduler = TaskScheduler(tasks, task_weights, strategy=strategy,
                              load_log_file=str(log) if resume and has_records else None,
                              callbacks=callbacks)
    scheduler.tune(options, search_policy=search_policy, search_policy_params=search_policy_params,
                   per_task_early_stopping=per_task_early_stopping)
    return scheduler


def auto_schedule(task: SearchTask, search_policy: Any = None,
                  tuning_options: TuningOptions | None = None) -> tuple[Schedule, list[Tensor]]:
    """Tune one task and return its best schedule (TVM's ``auto_schedule``).

    Parameters
    ----------
    task : SearchTask
        The task.
    search_policy : SearchPolicy, optional
        Default: ``SketchPolicy(task)`` with the gradient-boosted cost model.
    tuning_options : TuningOptions, optional
        Default: ``TuningOptions()`` (no measurement).

    Returns
    -------
    (Schedule, list of Tensor)
        The best measured state's schedule (the task's initial state when nothing was measured).
    """
    policy = search_policy if search_policy is not None else _default_policy(task)
    options = tuning_options if tuning_options is not None else TuningOptions()
    best = tune_task(task, options, policy)
    dag = task.require_dag()
    state = best if best is not None else dag.init_state
    return dag.apply_steps(state.transform_steps), list(dag.tensors)


def _default_policy(task: SearchTask) -> Any:
    from kiln.auto_scheduler.task_scheduler import make_search_policies

    return make_search_policies("default", None, [task], 64, 1)[0]


def tune_task(task: SearchTask, tuning_options: TuningOptions, search_policy: Any = None) -> Any:
    """Tune one task for ``tuning_options.num_measure_trials`` trials; the best state or None.

    Rounds of ``num_measures_per_round`` go to the policy until the budget is spent, the policy
    has nothing new to measure, or ``early_stopping`` trials pass without improvement.
    """
    from kiln.auto_scheduler.measurer import ProgramMeasurer

    policy = search_policy if search_policy is not None else _default_policy(task)
    opt = tuning_options
    measurer = ProgramMeasurer(opt.builder, opt.runner, opt.measure_callbacks, opt.verbose)
    best_cost, best_state, best_ct, ct = float("inf"), None, 0, 0
    while ct < opt.num_measure_trials:
        n = min(opt.num_measures_per_round, opt.num_measure_trials - ct)
        inputs, results = policy.continue_search_one_round(n, measurer)
        if not inputs:
            break
        for inp, res in zip(inputs, results):
            ct += 1
            if res.error_no == 0 and res.costs:
                cost = sum(res.costs) / len(res.costs)
                if cost < best_cost:
                    best_cost, best_state, best_ct = cost, inp.state, ct
        if 0 <= opt.early_stopping <= ct - best_ct:
            break
    return best_state
