"""Tuned-schedule dispatch: which schedule the native build uses for each fused function.

The build layer (:mod:`kiln.codegen.native`, :mod:`kiln.build_module`) must not import the
auto-scheduler, yet ``with auto_scheduler.ApplyHistoryBest(log): relay.build(...)`` has to reach
it. This module is the meeting point: a stack of *dispatchers* (a :mod:`contextvars` variable, so
threads and tasks keep their own) that the auto-scheduler's dispatch contexts push themselves onto,
and that the build asks, per fused function, "is there a tuned schedule for this DAG?".

A dispatcher is any object with ``query(workload_key, dag, func_name, target=None)`` returning a
:class:`~kiln.te.loop_state.State`, a list of steps, or ``None``. :func:`lookup` asks the stack
from the innermost dispatcher outwards and returns the first answer.

:class:`TuningLookup` is what one build uses: a ``schedule_lookup(dag, func_name)`` callable for
:func:`~kiln.codegen.native.build_native` that asks the stack and counts what happened to each
function (tuned schedule applied, no record, record failed to replay), so the build can print and
store the coverage line ``tuning log: 17/20 tasks applied; default schedule for: ...``.

Which functions count as *tasks* follows TVM's rule for extracting tuning tasks: a function is a
task when one of its computations is a reduction (convolution, dense, pooling, softmax, ...);
purely element-wise or injective functions (add + relu, layout transforms) are not tuned by
default, so they do not count against the coverage unless a record for them was applied.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from kiln.te import expr as E
from kiln.te.dag import ComputeDAG
from kiln.te.tensor import ComputeOp

__all__ = [
    "Dispatcher",
    "TuningLookup",
    "current_dispatchers",
    "has_complex_op",
    "lookup",
    "pop_dispatcher",
    "push_dispatcher",
    "using",
]

logger = logging.getLogger("kiln.auto_scheduler")


class Dispatcher(Protocol):
    """What the build asks for a tuned schedule."""

    def query(self, workload_key: str, dag: ComputeDAG, func_name: str,
              target: Any = None) -> Any:
        """The tuned state (or step list) for ``workload_key``, or ``None``."""


_stack: ContextVar[tuple[Dispatcher, ...]] = ContextVar("kiln_dispatch_stack", default=())


def current_dispatchers() -> tuple[Dispatcher, ...]:
    """The dispatchers entered in this context, outermost first."""
    return _stack.get()


def push_dispatcher(dispatcher: Dispatcher) -> Any:
    """Make ``dispatcher`` the innermost one; returns a token for :func:`pop_dispatcher`."""
    return _stack.set((*_stack.get(), dispatcher))


def pop_dispatcher(token: Any) -> None:
    """Undo the :func:`push_dispatcher` that returned ``token``."""
    _stack.reset(token)


@contextlib.contextmanager
def using(dispatcher: Dispatcher) -> Iterator[Dispatcher]:
    """Push ``dispatcher`` for the duration of a ``with`` block."""
    token = push_dispatcher(dispatcher)
    try:
        yield dispatcher
    finally:
        pop_dispatcher(token)


def lookup(workload_key: str, dag: ComputeDAG, func_name: str, target: Any = None,
           dispatchers: tuple[Dispatcher, ...] | None = None) -> Any:
    """The innermost dispatcher's answer for a workload (``None`` when none has one).

    ``dispatchers`` (default: the current stack) is the stack to ask, outermost first.
    """
    stack = _stack.get() if dispatchers is None else dispatchers
    for dispatcher in reversed(stack):
        found = dispatcher.query(workload_key, dag, func_name, target)
        if found is not None:
            return found
    return None


def has_complex_op(dag: ComputeDAG) -> bool:
    """Whether a computation of ``dag`` is a reduction (TVM's rule for a task worth tuning)."""
    return any(isinstance(op, ComputeOp) and any(isinstance(b, E.Reduce) for b in op.body)
               for op in dag.ops)


@dataclass(eq=False)  # entries are compared by identity
class _Entry:
    func_names: list[str]
    complex_op: bool
    status: str  # "applied", "missing" or "failed"
    reason: str = ""


@dataclass
class TuningLookup:
    """A build's schedule lookup over the dispatch stack, counting the coverage.

    Parameters
    ----------
    target : Target, optional
        The build's target (dispatchers match records by its keys and model).
    dispatchers : tuple, optional
        The stack to ask (default: the current one, taken when the lookup is made, so that
        worker threads lowering for the build ask the same dispatchers).

    Examples
    --------
    >>> tracker = TuningLookup.from_context(target)  # doctest: +SKIP
    >>> lib = build_native(functions, target, schedule_lookup=tracker)  # doctest: +SKIP
    >>> tracker.coverage_line()  # doctest: +SKIP
    'tuning log: 20/20 tasks applied'
    """

    target: Any = None
    dispatchers: tuple[Dispatcher, ...] = field(default_factory=lambda: _stack.get())
    entries: dict[str, _Entry] = field(default_factory=dict)

    @staticmethod
    def from_context(target: Any = None) -> TuningLookup | None:
        """A lookup over the current stack, or ``None`` when no dispatcher is entered."""
        stack = _stack.get()
        return TuningLookup(target, stack) if stack else None

    def __call__(self, dag: ComputeDAG, func_name: str) -> Any:
        """The tuned steps for one fused function, or ``None`` (use the default schedule)."""
        key = dag.workload_key()
        try:
            found = lookup(key, dag, func_name, self.target, self.dispatchers)
        except Exception as err:  # a record that does not replay must not break the build
            reason = f"{type(err).__name__}: {err}"
            warnings.warn(f"tuning log: the tuned schedule of {func_name} (workload key {key}) "
                          f"does not replay ({reason}); using the default schedule", stacklevel=2)
            self._note(key, func_name, dag, "failed", reason)
            return None
        self._note(key, func_name, dag, "applied" if found is not None else "missing")
        return found

    def replay_failed(self, dag: ComputeDAG, func_name: str, reason: str) -> None:
        """The steps returned for ``func_name`` did not replay; it got the default schedule."""
        self._note(dag.workload_key(), func_name, dag, "failed", reason)

    def _note(self, key: str, func_name: str, dag: ComputeDAG, status: str,
              reason: str = "") -> None:
        entry = self.entries.get(key)
        if entry is None:
            self.entries[key] = _Entry([func_name], has_complex_op(dag), status, reason)
            return
        if func_name not in entry.func_names:
            entry.func_names.append(func_name)
        if status == "failed" or entry.status == "missing":
            entry.status, entry.reason = status, reason or entry.reason

    # --- the report ------------------------------------------------------------------------------
    def _tasks(self) -> list[_Entry]:
        return [e for e in self.entries.values() if e.complex_op or e.status != "missing"]

    def summary(self) -> dict[str, Any]:
        """The coverage as JSON-able data (stored as ``factory.metadata["tuning"]``)."""
        tasks = self._tasks()
        applied = [e for e in tasks if e.status == "applied"]
        missing = [n for e in tasks if e.status == "missing" for n in e.func_names]
        failed = {n: e.reason for e in tasks if e.status == "failed" for n in e.func_names}
        return {
            "tasks": len(tasks),
            "applied": len(applied),
            "default_schedule": missing + list(failed),
            "replay_failed": failed,
            "applied_functions": [n for e in applied for n in e.func_names],
            "untuned_simple_functions": sum(len(e.func_names) for e in self.entries.values()
                                            if e not in tasks),
            "line": self.coverage_line(),
        }

    def coverage_line(self) -> str:
        """``tuning log: A/N tasks applied[; default schedule for: f, g (record failed: h)]``."""
        tasks = self._tasks()
        applied = sum(1 for e in tasks if e.status == "applied")
        line = f"tuning log: {applied}/{len(tasks)} tasks applied"
        missing = [n for e in tasks if e.status == "missing" for n in e.func_names]
        failed = [n for e in tasks if e.status == "failed" for n in e.func_names]
        if missing or failed:
            names = ", ".join(missing)
            if failed:
                names += ("; " if missing else "") + "record failed to replay: " + ", ".join(failed)
            line += f"; default schedule for: {names}"
        return line

    def report(self) -> str:
        """Log the coverage line (INFO when full, WARNING otherwise) and return it."""
        line = self.coverage_line()
        tasks = self._tasks()
        full = all(e.status == "applied" for e in tasks)
        logger.log(logging.INFO if full else logging.WARNING, "%s", line)
        return line
