"""TVM's ``tvm.autotvm`` dispatch contexts and configuration entities.

AutoTVM tunes hand-written schedule templates; Kiln has no templates (its tuner is
:mod:`kiln.auto_scheduler`, Ansor-style). What scripts use at module level and in their fixtures is
here and behaves as TVM's: the dispatch-context stack (:class:`DispatchContext`,
:class:`FallbackContext`, :class:`ApplyConfig`, :class:`ApplyHistoryBest` /
:func:`apply_history_best`, which loads AutoTVM JSON records and answers ``query(target,
workload)`` with the best one) and the entities of :mod:`kiln.autotvm.task.space`.

Kiln's build consults no AutoTVM context: entering :func:`apply_history_best` warns once that its
records will not change the compiled code. Tuning itself (``autotvm.tuner``, ``measure``) is out
of scope until tuning lands; use :mod:`kiln.auto_scheduler`.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable
from typing import Any

from kiln.autotvm import task
from kiln.autotvm.task.space import ConfigEntity, FallbackConfigEntity

__all__ = ["ApplyConfig", "ApplyHistoryBest", "DispatchContext", "FallbackContext",
           "apply_history_best", "task"]


def _key(target: Any, workload: Any) -> tuple[str, str]:
    return str(target), json.dumps(workload, default=str)


class DispatchContext:
    """Base of the dispatch-context stack: ``query(target, workload)`` -> a config.

    ``DispatchContext.current`` is the innermost context entered (``with ctx:``); a context that
    has no answer asks the one it was entered inside, and finally the global fallback.
    """

    current: DispatchContext | None = None

    def __init__(self) -> None:
        self._old_ctx: DispatchContext | None = None

    def query(self, target: Any, workload: Any) -> Any:
        """The config for ``workload`` on ``target``, from this context or an outer one."""
        ret = self._query_inside(target, workload)
        if ret is None and self._old_ctx is not None:
            ret = self._old_ctx.query(target, workload)
        return ret

    def update(self, target: Any, workload: Any, cfg: Any) -> None:
        """Record ``cfg`` for ``workload`` (contexts that keep no records ignore it)."""

    def _query_inside(self, target: Any, workload: Any) -> Any:
        raise NotImplementedError

    def __enter__(self) -> DispatchContext:
        self._old_ctx = DispatchContext.current
        DispatchContext.current = self
        return self

    def __exit__(self, *exc: object) -> None:
        DispatchContext.current = self._old_ctx


class FallbackContext(DispatchContext):
    """Answers every query: a :class:`FallbackConfigEntity` per (target, workload), remembered."""

    def __init__(self) -> None:
        super().__init__()
        self.memory: dict[Any, Any] = {}
        self.silent = False

    def _query_inside(self, target: Any, workload: Any) -> Any:
        key = _key(target, workload)
        if key not in self.memory:
            self.memory[key] = FallbackConfigEntity()
        return self.memory[key]

    def update(self, target: Any, workload: Any, cfg: Any) -> None:
        """Remember ``cfg`` for ``workload`` on ``target``."""
        self.memory[_key(target, workload)] = cfg

    def clear_cache(self, target: Any, workload: Any) -> None:
        """Forget the config of ``workload`` on ``target``."""
        self.memory.pop(_key(target, workload), None)


class ApplyConfig(DispatchContext):
    """Answers every query with one config."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self._config = config
        self.workload: Any = None

    def _query_inside(self, target: Any, workload: Any) -> Any:
        self.workload = workload
        return self._config


def _records(source: Any) -> Iterable[tuple[str, Any, ConfigEntity, float]]:
    """(target, workload, config, mean cost) per successful record of a log file or list."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, encoding="utf-8") as f:
            lines: Iterable[Any] = [ln for ln in f.read().splitlines() if ln.strip()]
    else:
        lines = source
    for line in lines:
        rec = json.loads(line) if isinstance(line, str) else line
        if "i" in rec:  # version 0.1: "i": [target, task, args, kwargs, workload, config]
            inp = rec["i"]
            target, workload, config = inp[0], inp[4], inp[5]
            result = rec["r"]
        else:  # version 0.2: "input": [target, task, args, kwargs], "config", "result"
            target, name, args = rec["input"][0], rec["input"][1], rec["input"][2]
            workload, config, result = [name, *args], rec["config"], rec["result"]
        costs, error_no = result[0], result[1]
        if error_no != 0:
            continue
        yield str(target), workload, ConfigEntity.from_json_dict(config), \
            sum(costs) / max(len(costs), 1)


class ApplyHistoryBest(DispatchContext):
    """Answers queries with the fastest recorded config of each (target, workload).

    Parameters
    ----------
    records : str, path, or iterable of records
        An AutoTVM log file (one JSON record a line) or the records themselves.
    """

    _warned = False

    def __init__(self, records: Any) -> None:
        super().__init__()
        self.best_by_targetkey: dict[tuple[str, str], tuple[ConfigEntity, float]] = {}
        if records is not None:
            self.load(records)

    def load(self, records: Any) -> None:
        """Add ``records``; a faster record of the same (target, workload) replaces the slower."""
        for target, workload, cfg, cost in _records(records):
            key = _key(target, workload)
            old = self.best_by_targetkey.get(key)
            if old is None or cost < old[1]:
                cfg.cost = cost
                self.best_by_targetkey[key] = (cfg, cost)

    def _query_inside(self, target: Any, workload: Any) -> Any:
        hit = self.best_by_targetkey.get(_key(target, workload))
        return hit[0] if hit else None

    def __enter__(self) -> DispatchContext:
        if not ApplyHistoryBest._warned:
            ApplyHistoryBest._warned = True
            warnings.warn("kiln.autotvm.apply_history_best: Kiln has no AutoTVM schedule templates, "
                          "so these records do not change what relay.build compiles (Kiln tunes "
                          "with kiln.auto_scheduler)", stacklevel=2)
        return super().__enter__()


def apply_history_best(records: Any) -> ApplyHistoryBest:
    """A context answering queries with the best of ``records`` (see :class:`ApplyHistoryBest`)."""
    return ApplyHistoryBest(records)


DispatchContext.current = FallbackContext()
