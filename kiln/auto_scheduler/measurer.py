"""``ProgramMeasurer``: builds and runs candidates, keeps the best per workload, calls callbacks
(TVM's ``ProgramMeasurer`` and ``MeasureCallback``)."""

from __future__ import annotations

import math
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from kiln.auto_scheduler.measure import (
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    ProgramBuilder,
    ProgramRunner,
    error_name,
)

__all__ = ["DEFAULT_MAX_CONTINUOUS_ERROR", "MeasureCallback", "ProgramMeasurer"]

#: Errors in a row after which the measurer warns (TVM's default).
DEFAULT_MAX_CONTINUOUS_ERROR = 150


class MeasureCallback(ABC):
    """Called after every measured batch (``RecordToFile`` is one)."""

    @abstractmethod
    def callback(self, policy: Any, inputs: Sequence[MeasureInput],
                 results: Sequence[MeasureResult]) -> None:
        """React to a measured batch.

        Parameters
        ----------
        policy : SearchPolicy
            The policy that proposed the candidates.
        inputs : list of MeasureInput
            The candidates.
        results : list of MeasureResult
            Their measurements.
        """


class ProgramMeasurer:
    """Measures candidates with a builder and a runner.

    Parameters
    ----------
    builder : ProgramBuilder
        Builds the candidates (``LocalBuilder``).
    runner : ProgramRunner
        Runs them (``LocalRunner``).
    callbacks : sequence
        Objects with ``callback(policy, inputs, results)`` (:class:`MeasureCallback`,
        ``RecordToFile``), called after every batch.
    verbose : int
        0 silent, 1 one line per batch and the builder/runner progress marks.
    max_continuous_error : int, optional
        Errors in a row after which a warning says that something is wrong
        (default :data:`DEFAULT_MAX_CONTINUOUS_ERROR`).

    Attributes
    ----------
    best_cost : dict of str to float
        Best mean cost (seconds) per workload key.
    best_state : dict of str to State
        The state that got it.
    best_ct : dict of str to int
        The trial number (``ct``) at which it was measured.
    ct : int
        Candidates measured.
    error_ct : int
        Candidates that failed (any error number), in total.
    continuous_error_ct : int
        Failures since the last valid measurement.
    """

    def __init__(self, builder: ProgramBuilder, runner: ProgramRunner, callbacks: Sequence[Any] = (),
                 verbose: int = 1, max_continuous_error: int | None = None):
        self.builder = builder
        self.runner = runner
        self.callbacks = list(callbacks)
        self.verbose = int(verbose)
        self.max_continuous_error = DEFAULT_MAX_CONTINUOUS_ERROR if max_continuous_error is None \
            else int(max_continuous_error)
        self.reset()

    def reset(self) -> None:
        """Forget the counters and the best states."""
        self.best_cost: dict[str, float] = {}
        self.best_state: dict[str, Any] = {}
        self.best_ct: dict[str, int] = {}
        self.ct = 0
        self.error_ct = 0
        self.continuous_error_ct = 0
        self._warned = False

    def measure(self, task: Any, policy: Any, inputs: Sequence[MeasureInput],
                batch_size: int = -1) -> list[MeasureResult]:
        """Build and run ``inputs`` in batches; update the best states; call the callbacks.

        Parameters
        ----------
        task : SearchTask
            The task (its workload key files the best state).
        policy : SearchPolicy
            Passed to the callbacks.
        inputs : list of MeasureInput
            The candidates.
        batch_size : int
            Candidates per build/run batch (-1: twice the builder's parallelism, as TVM).

        Returns
        -------
        list of MeasureResult
            One per input, in order.
        """
        if batch_size <= 0:
            batch_size = max(1, 2 * int(getattr(self.builder, "n_parallel", 1)))
        results: list[MeasureResult] = []
        key = task.workload_key
        for start in range(0, len(inputs), batch_size):
            batch = list(inputs[start:start + batch_size])
            tic = time.time()
            builds = self.builder.build(batch, verbose=self.verbose)
            res = self.runner.run(batch, builds, verbose=self.verbose)
            for inp, r in zip(batch, res):
                self.ct += 1
                if r.error_no == MeasureErrorNo.NO_ERROR:
                    self.continuous_error_ct = 0
                    cost = r.mean_cost()
                    if cost < self.best_cost.get(key, math.inf):
                        self.best_cost[key] = cost
                        self.best_state[key] = inp.state
                        self.best_ct[key] = self.ct
                else:
                    self.error_ct += 1
                    self.continuous_error_ct += 1
                    if self.verbose >= 2:
                        print(f"#{self.ct} {error_name(r.error_no)}: {r.error_msg[-2000:]}")
            if self.continuous_error_ct > self.max_continuous_error and not self._warned:
                self._warned = True
                warnings.warn(f"{self.continuous_error_ct} measurements in a row failed; the "
                              "last error: " + (res[-1].error_msg[-500:] if res else ""),
                              stacklevel=2)
            for cb in self.callbacks:
                fn = getattr(cb, "callback", None)
                (fn if fn is not None else cb)(policy, batch, res)
            results += res
            if self.verbose >= 1:
                best = self.best_cost.get(key, math.inf)
                flop = _flop(task)
                gflops = f", best {flop / best / 1e9:.2f} GFLOPS" if flop > 0 and best < math.inf \
                    else ""
                print(f"measured {self.ct} trials ({self.error_ct} errors), best "
                      f"{best * 1e3:.4g} ms{gflops}, batch {time.time() - tic:.1f} s", flush=True)
        return results


def _flop(task: Any) -> float:
    dag = getattr(task, "compute_dag", None)
    try:
        return float(dag.flop_ct) if dag is not None else -1.0
    except Exception:  # a DAG whose FLOPs are unknown
        return -1.0
