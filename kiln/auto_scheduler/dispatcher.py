"""Dispatch contexts: the tuned schedules a build uses (TVM's ``auto_scheduler.dispatcher``).

A state (its ``transform_steps``) is the schedule configuration of a workload. While a
dispatch context is entered, :func:`kiln.relay.build` asks it, for every fused function it
compiles, for the state of that function's workload key (the MD5 key of Kiln's compute DAG);
the answer replaces the template or default schedule, and functions without an answer keep
theirs::

    with auto_scheduler.ApplyHistoryBest("resnet.json"):
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target="llvm", params=params)
    lib.metadata["tuning"]["line"]  # 'tuning log: 20/20 tasks applied'

A record whose steps do not replay on Kiln's DAG is reported with a warning naming the function
and the function gets its default schedule. The build logs the coverage line on the
``kiln.auto_scheduler`` logger (INFO when every task found a record, WARNING otherwise) and stores
it, with the names of the functions left on default schedules, in ``metadata["tuning"]``. That
line replaces TVM's per-workload "Cannot find tuned schedules" warning, so the root
:class:`FallbackContext` only logs at DEBUG level.

The contexts reach the build through :mod:`kiln.te.dispatch` (the build layer does not import the
auto-scheduler).
"""

from __future__ import annotations

import logging
import math
import pathlib
from abc import ABC, abstractmethod
from typing import Any

from kiln.auto_scheduler.measure import MeasureInput
from kiln.auto_scheduler.workload_registry import calc_workload_dis_factor, decode_workload_key
from kiln.target import Target
from kiln.te import dispatch as te_dispatch
from kiln.te.dag import ComputeDAG

__all__ = [
    "ApplyHistoryBest",
    "DispatchContext",
    "FallbackContext",
]

logger = logging.getLogger("kiln.auto_scheduler")


class _BuildQuery:
    """What :mod:`kiln.te.dispatch` holds for an entered context: the build's view of it."""

    def __init__(self, ctx: DispatchContext):
        self.ctx = ctx

    def query(self, workload_key: str, dag: ComputeDAG, func_name: str,
              target: Any = None) -> Any:
        tgt = Target.canon_target(target) if target is not None else None
        tgt = tgt or Target.current() or Target("llvm")
        return self.ctx.query(tgt, workload_key, te_dispatch.has_complex_op(dag), dag, func_name)


class DispatchContext(ABC):
    """Base class of dispatch contexts (TVM's ``auto_scheduler.DispatchContext``).

    A context answers :meth:`query` from its own configurations (:meth:`_query_inside`) and
    otherwise asks the context that was current when it was entered. ``with ctx:`` makes it
    :attr:`DispatchContext.current` and the one :func:`kiln.relay.build` asks.
    """

    current: DispatchContext | None = None

    def __init__(self) -> None:
        self._old_ctx = DispatchContext.current
        self._tokens: list[Any] = []

    def query(self, target: Target, workload_key: str, has_complex_op: bool, dag: ComputeDAG,
              func_name: str) -> Any:
        """The state for a workload, from this context or the ones outside it.

        Parameters
        ----------
        target : Target
            The build's target.
        workload_key : str
            The workload key of the function's DAG.
        has_complex_op : bool
            Whether the DAG has a reduction (a task TVM tunes by default).
        dag : ComputeDAG
            The function's DAG.
        func_name : str
            The kernel's name.

        Returns
        -------
        State or None
            The schedule configuration, or None when no context has one.
        """
        ret = self._query_inside(target, workload_key, func_name)
        if ret is None and self._old_ctx is not None:
            ret = self._old_ctx.query(target, workload_key, has_complex_op, dag, func_name)
        return ret

    @abstractmethod
    def update(self, target: Target, workload_key: str, state: Any) -> None:
        """Set the configuration of a workload (in this context)."""

    @abstractmethod
    def _query_inside(self, target: Target, workload_key: str, func_name: str) -> Any:
        """The configuration this context itself holds for a workload, or None."""

    def __enter__(self) -> DispatchContext:
        self._old_ctx = DispatchContext.current
        DispatchContext.current = self
        self._tokens.append(te_dispatch.push_dispatcher(_BuildQuery(self)))
        return self

    def __exit__(self, ptype: object, value: object, trace: object) -> None:
        DispatchContext.current = self._old_ctx
        if self._tokens:
            te_dispatch.pop_dispatcher(self._tokens.pop())


_Best = dict[str, dict[str, dict[Any, tuple[Any, float]]]]


def _entry(best: _Best, target_key: str,
           workload_key: str) -> tuple[dict[Any, tuple[Any, float]], str, Any]:
    workload_hash, workload_args = decode_workload_key(workload_key)
    by_hash = best.setdefault(target_key, {})
    return by_hash.setdefault(workload_hash, {}), workload_hash, workload_args


def _state_of(kept: Any) -> Any:
    """The state of a kept record (replayed on first use) or a state set with ``update``."""
    return kept.state if isinstance(kept, MeasureInput) else kept


def _mean_cost(res: Any) -> float:
    costs = [float(c) for c in getattr(res, "costs", [])]
    return sum(costs) / len(costs) if costs else math.inf


class ApplyHistoryBest(DispatchContext):
    """Apply the best record of a tuning log (TVM's ``auto_scheduler.ApplyHistoryBest``).

    For each workload key (and each target key or model of the record's target) the record with
    the lowest mean cost among those without error is kept; a build inside the context uses its
    state for every fused function whose DAG has that key. The tables (``best_by_targetkey``,
    ``best_by_model``: target key or model -> workload hash -> flattened arguments -> (record
    input, cost)) hold the records' inputs; a state is replayed only when a build asks for it.

    Parameters
    ----------
    records : str, Path, list of str or Path, or iterable of (MeasureInput, MeasureResult)
        Log file(s) (read leniently: bad lines are skipped with a warning) or records.
    n_lines : int, optional
        Use only the first ``n_lines`` records.
    include_compatible : bool
        Also answer for a workload with the best record of a *compatible* one: the same DAG hash
        with shapes that divide the wanted ones (:func:`calc_workload_dis_factor`); costs are
        scaled by the size ratio before comparing (TVM's ``calc_workload_dis_factor``).

    Examples
    --------
    >>> with ApplyHistoryBest("log.json"):  # doctest: +SKIP
    ...     lib = relay.build(mod, target="llvm", params=params)
    """

    def __init__(self, records: Any, n_lines: int | None = None,
                 include_compatible: bool = False):
        super().__init__()
        self.include_compatible = include_compatible
        self.best_by_targetkey: _Best = {}
        self.best_by_model: _Best = {}
        self._best_user_defined: _Best = {}
        self.load(records, n_lines)

    def load(self, records: Any, n_lines: int | None = None) -> None:
        """Add records to this context (see the class parameters)."""
        if isinstance(records, (str, pathlib.Path)):
            records = [records]
        if isinstance(records, (list, tuple)) and records \
                and all(isinstance(r, (str, pathlib.Path)) for r in records):
            from kiln.auto_scheduler.measure_record import load_records

            records = (rec for name in records for rec in load_records(str(name)))
        if not records:
            return
        counter = 0
        for inp, res in records:
            if n_lines is not None and counter >= n_lines:
                break
            counter += 1
            if res.error_no != 0:
                continue
            cost = _mean_cost(res)
            if not math.isfinite(cost) or cost >= 1e10:
                continue
            task = inp.task
            for k in task.target.keys:
                self._keep(self.best_by_targetkey, k, task.workload_key, inp, cost)
            model = getattr(task.target, "model", "unknown")  # a RecordTarget has none
            if model != "unknown":
                self._keep(self.best_by_model, model, task.workload_key, inp, cost)
        logger.debug("Finish loading %d records", counter)

    @staticmethod
    def _keep(best: _Best, target_key: str, workload_key: str, inp: Any, cost: float) -> None:
        entry, _, args = _entry(best, target_key, workload_key)
        if args not in entry or entry[args][1] > cost:
            entry[args] = (inp, cost)

    def _match(self, best: _Best, target_key: str, workload_key: str) -> Any:
        entry, workload_hash, args = _entry(best, target_key, workload_key)
        if args in entry:
            return _state_of(entry[args][0])
        if not self.include_compatible:
            return None
        best_cost, best_state = math.inf, None
        for other_args, (state, cost) in entry.items():
            factor = calc_workload_dis_factor((workload_hash, args), (workload_hash, other_args))
            if math.isfinite(factor) and cost * factor < best_cost:
                best_cost, best_state = cost * factor, state
        return None if best_state is None else _state_of(best_state)

    def _query_inside(self, target: Target, workload_key: str, func_name: str = "") -> Any:
        if target is None:
            raise RuntimeError("Need a target context to find the history best: build inside "
                               "`with kiln.target.Target('llvm'):` or pass target=")
        for best in (self._best_user_defined, self.best_by_model):
            ret = self._match(best, target.model, workload_key)
            if ret is not None:
                return ret
        for k in target.keys:
            for best in (self._best_user_defined, self.best_by_targetkey):
                ret = self._match(best, k, workload_key)
                if ret is not None:
                    return ret
        return None

    def update(self, target: Target, workload_key: str, state: Any) -> None:
        """Use ``state`` for ``workload_key`` on ``target`` (wins over the loaded records)."""
        entry, _, args = _entry(self._best_user_defined, target.model, workload_key)
        entry[args] = (state, 0.0)
        for k in target.keys:
            entry, _, args = _entry(self._best_user_defined, k, workload_key)
            entry[args] = (state, 0.0)


class FallbackContext(DispatchContext):
    """The root context: no tuned schedules, except those set with :meth:`update`.

    TVM warns here for every workload without a record; Kiln's build reports the coverage in
    one line instead (see the module docstring), so the message is logged at DEBUG level.
    """

    def __init__(self) -> None:
        super().__init__()
        self.memory: dict[tuple[str, str], Any] = {}
        self.verbose = 1
        self.messages: set[str] = set()

    def query(self, target: Target, workload_key: str, has_complex_op: bool, dag: ComputeDAG,
              func_name: str) -> Any:
        key = (str(target), workload_key)
        if key in self.memory:
            return self.memory[key]
        if self.verbose == 2 or (has_complex_op and self.verbose == 1):
            msg = (f"Cannot find tuned schedules for target={target}, workload_key={workload_key}"
                   f" ({func_name}); the default schedule is used. Compute DAG info:\n{dag}")
            if msg not in self.messages:
                self.messages.add(msg)
                logger.debug(msg)
        self.memory[key] = None
        return None

    def _query_inside(self, target: Target, workload_key: str, func_name: str = "") -> Any:
        raise RuntimeError("FallbackContext._query_inside is never called")

    def update(self, target: Target, workload_key: str, state: Any) -> None:
        """Use ``state`` for ``workload_key`` on ``target`` outside any other context."""
        self.memory[(str(target), workload_key)] = state


DispatchContext.current = FallbackContext()
