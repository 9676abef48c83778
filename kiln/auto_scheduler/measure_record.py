"""Tuning records (logs): TVM's JSON-lines format, read leniently, written exactly as TVM writes.

A record is one line (SPEC section 11)::

    {"i": [[KEY, TARGET, [8 hardware ints], TARGET_HOST, LAYOUT_REWRITE, [INPUT NAMES]],
           [[], [STEPS]]], "r": [[COSTS], ERROR_NO, ALL_COST, TIMESTAMP], "v": "v0.6"}

Lines are written as TVM's C++ writer (dmlc ``JSONWriter``) writes them: ``", "`` and ``": "``
separators, doubles in C++ ``ostream`` form (``0.1``, ``1e+10``: six significant digits), the
timestamp as an int; so a TVM-written line read and written back is byte-identical, and TVM reads
every line Kiln writes (it rejects any key but i/r/v).

Reading never stops at a bad line: a corrupt, truncated, unknown-version or unknown-step line is
skipped with one :class:`RecordWarning` naming the file and line. What Kiln keeps beyond TVM's
fields (the DAG print of each workload, error messages, Kiln's version, the machine) goes to a
*sidecar* next to the log, ``LOG.kiln.jsonl`` (one JSON object a line, appended); a log without
one loads the same.

A record's task is re-created from its workload key through the workload registry; its state is
the DAG's initial state with the steps replayed (on first use of ``inp.state``). A record whose
workload is not registered in this process still loads, lists and writes back; replaying it
raises a :class:`~kiln.errors.TuningLogError` that says so.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.auto_scheduler.compute_dag import ComputeDAG
from kiln.auto_scheduler.measure import ERROR_NAMES, MeasureErrorNo, MeasureInput, MeasureResult
from kiln.auto_scheduler.search_task import HardwareParams, SearchTask
from kiln.auto_scheduler.workload_registry import (
    calc_workload_dis_factor,
    decode_workload_key,
)
from kiln.errors import TuningLogError
from kiln.runtime.dmlc_json import escape
from kiln.te.loop_state import State
from kiln.te.steps import Step, parse_step

__all__ = [
    "KNOWN_VERSIONS",
    "LOG_VERSION",
    "SIDECAR_SUFFIX",
    "LogEntry",
    "RecordReader",
    "RecordToFile",
    "RecordWarning",
    "Sidecar",
    "best_entries",
    "distill_record_file",
    "dump_record_to_string",
    "input_steps",
    "load_best_record",
    "load_record_from_string",
    "load_records",
    "merge_record_files",
    "read_sidecar",
    "record_id",
    "replay_steps",
    "save_records",
    "sidecar_path",
]

LOG_VERSION = "v0.6"
"""The record version Kiln writes (TVM's ``AUTO_SCHEDULER_LOG_VERSION``)."""

KNOWN_VERSIONS = ("v0.1", "v0.2", "v0.3", "v0.4", "v0.5", "v0.6")
"""Versions whose lines Kiln reads (older ones may lack the trailing task fields)."""

SIDECAR_SUFFIX = ".kiln.jsonl"
"""The sidecar of ``LOG`` is ``LOG`` + this suffix."""

MAX_ERROR_MSG = 20000
"""Longest error message kept in a sidecar (longer ones keep their start and end)."""


class RecordWarning(UserWarning):
    """A tuning-log line (or sidecar line) was skipped; the message names the file and line."""


# --- writing: dmlc JSONWriter's format ----------------------------------------------------------
def format_double(value: float) -> str:
    """A double as C++ ``std::ostream << double`` writes it (``%g``: ``0.1``, ``1e+10``, ``1``)."""
    return format(value, "g")


def _write_string(text: str, out: list[str]) -> None:
    out.append(escape(text))  # dmlc's JSON writer escapes strings this way


def _write_value(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        _write_string(value, out)
    elif isinstance(value, bool):
        out.append("1" if value else "0")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(format_double(value))
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for k, item in enumerate(value):
            if k:
                out.append(", ")
            _write_value(item, out)
        out.append("]")
    elif value is None:
        out.append("null")
    else:
        raise TuningLogError(f"cannot write {type(value).__name__} {value!r} into a record")


def input_steps(inp: MeasureInput) -> list[Step]:
    """The transform steps of a measure input (without replaying a record's steps)."""
    if isinstance(inp, _RecordInput) and inp._state is None:
        return list(inp._steps)
    return list(inp.state.transform_steps)


def _record_fields(inp: MeasureInput, res: MeasureResult) -> tuple[list[Any], list[Any]]:
    task = inp.task
    target_text = getattr(task, "target_text", None) or str(task.target)
    host_text = getattr(task, "target_host_text", None)
    if host_text is None:
        host = getattr(task, "target_host", None)
        host_text = "" if host is None else str(host)
    hw = task.hardware_params
    hw_list = hw.to_list() if hw is not None else HardwareParams(target=None).to_list()
    task_part = [task.workload_key, target_text, [int(v) for v in hw_list], host_text,
                 int(task.layout_rewrite_option), [str(n) for n in task.task_input_names]]
    state_part = [[], [step.to_record() for step in input_steps(inp)]]
    costs = [float(c) for c in res.costs]
    result_part = [costs, int(res.error_no), float(res.all_cost), int(res.timestamp)]
    return [task_part, state_part], result_part


def dump_record_to_string(inp: MeasureInput, res: MeasureResult) -> str:
    """One record line, newline included, exactly as TVM's ``WriteMeasureRecords`` writes it.

    Parameters
    ----------
    inp : MeasureInput
        The task and state.
    res : MeasureResult
        The measurement (its ``error_msg`` is not part of a record).

    Returns
    -------
    str
        ``{"i": ..., "r": ..., "v": "v0.6"}`` and ``"\\n"``.
    """
    i_part, r_part = _record_fields(inp, res)
    out = ['{"i": ']
    _write_value(i_part, out)
    out.append(', "r": ')
    _write_value(r_part, out)
    out.append(', "v": ')
    _write_string(LOG_VERSION, out)
    out.append("}\n")
    return "".join(out)


def record_id(line: str) -> str:
    """The id of a record line in a sidecar: a hash of the line (without its newline)."""
    return hashlib.sha1(line.rstrip("\r\n").encode("utf-8")).hexdigest()[:20]


# --- reading -----------------------------------------------------------------------------------
class _BadRecord(TuningLogError):
    """Why one line is not a record (the reader's skip reason)."""


def _expect(cond: bool, reason: str) -> None:
    if not cond:
        raise _BadRecord(reason)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass
class _Context:
    """Per-reader caches: a workload's DAG is built once, a task once per distinct task part."""

    dags: dict[str, tuple[ComputeDAG | None, str | None]] = field(default_factory=dict)
    tasks: dict[str, SearchTask] = field(default_factory=dict)

    def dag(self, key: str) -> tuple[ComputeDAG | None, str | None]:
        if key not in self.dags:
            try:
                self.dags[key] = (_cached_dag(key), None)
            except Exception as e:  # an unknown or broken workload still loads
                self.dags[key] = (None, str(e) or type(e).__name__)
        return self.dags[key]


# workload key -> (its registry entry, the DAG built from it): reading record after record with
# load_record_from_string builds each workload's DAG once, until its registration changes
_DAG_CACHE: dict[str, tuple[Any, ComputeDAG]] = {}
_DAG_CACHE_SIZE = 256


def _cached_dag(key: str) -> ComputeDAG:
    from kiln.auto_scheduler.workload_registry import WORKLOAD_FUNC_REGISTRY

    entry = WORKLOAD_FUNC_REGISTRY.get(key)
    if entry is None:
        entry = WORKLOAD_FUNC_REGISTRY.get(str(decode_workload_key(key)[0]))
    hit = _DAG_CACHE.get(key)
    if entry is not None and hit is not None and hit[0] is entry:
        return hit[1]
    dag = ComputeDAG(key)
    if entry is not None:
        if len(_DAG_CACHE) >= _DAG_CACHE_SIZE:
            _DAG_CACHE.clear()
        _DAG_CACHE[key] = (entry, dag)
    return dag


def _parse_task(task: Any, ctx: _Context) -> SearchTask:
    _expect(isinstance(task, list) and len(task) >= 2, "the task is not [workload_key, target, ...]")
    key, target = task[0], task[1]
    _expect(isinstance(key, str) and isinstance(target, str),
            "the workload key and target must be strings")
    rest = task[2:]
    hw: list[int] | None = None
    host, layout, names = "", 0, []
    if rest:
        hw = rest[0]
        _expect(isinstance(hw, list) and len(hw) == 8 and all(_is_int(v) for v in hw),
                f"hardware params must be 8 integers, got {hw!r}")
        if len(rest) > 1:
            _expect(len(rest) >= 3, "the task has a target host but no layout rewrite option")
            host, layout = rest[1], rest[2]
            _expect(isinstance(host, str), "the target host must be a string")
            _expect(_is_int(layout) and layout in (0, 1, 2),
                    f"layout rewrite option must be 0, 1 or 2, got {layout!r}")
            if len(rest) > 3:
                names = rest[3]
                _expect(isinstance(names, list) and all(isinstance(n, str) for n in names),
                        "task input names must be a list of strings")
                _expect(len(rest) == 4, "the task has more than 6 fields")
    cache_key = json.dumps([key, target, hw, host, layout, names])
    cached = ctx.tasks.get(cache_key)
    if cached is not None:
        return cached
    try:
        hardware = HardwareParams.from_list(hw) if hw is not None else HardwareParams(target=None)
    except TuningLogError as e:
        raise _BadRecord(str(e)) from None
    dag, error = ctx.dag(key)
    try:
        made = SearchTask._from_record(key, target, hardware, host, layout, names, dag, error)
    except Exception as e:
        raise _BadRecord(f"target {target!r}: {e}") from None
    ctx.tasks[cache_key] = made
    return made


def _parse_steps(state: Any) -> list[Step]:
    _expect(isinstance(state, list) and len(state) == 2, "the state is not [[], [steps]]")
    _expect(state[0] == [], "the state's stage list must be empty")
    _expect(isinstance(state[1], list), "the steps are not a list")
    steps = []
    for k, raw in enumerate(state[1]):
        try:
            steps.append(parse_step(raw))
        except TuningLogError as e:
            raise _BadRecord(f"step {k}: {e}") from None
    return steps


def _parse_result(r: Any) -> MeasureResult:
    _expect(isinstance(r, list) and len(r) == 4,
            "the result is not [costs, error_no, all_cost, timestamp]")
    costs, error_no, all_cost, timestamp = r
    _expect(isinstance(costs, list) and all(_is_number(c) for c in costs),
            "the costs are not a list of numbers")
    _expect(_is_int(error_no), f"error number {error_no!r} is not an integer")
    _expect(_is_number(all_cost), f"all_cost {all_cost!r} is not a number")
    _expect(_is_number(timestamp), f"timestamp {timestamp!r} is not a number")
    return MeasureResult(costs, error_no, "", all_cost, timestamp)


def _parse_record(text: str, ctx: _Context, where: str) -> tuple[MeasureInput, MeasureResult]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise _BadRecord(f"not valid JSON ({e.msg}: column {e.colno}; truncated or corrupt)"
                         ) from None
    _expect(isinstance(obj, dict), "not a JSON object")
    unknown = sorted(set(obj) - {"i", "r", "v"})
    if unknown:
        raise _BadRecord(f"unknown key {unknown[0]!r} (TVM reads only i, r and v)")
    _expect("i" in obj and "r" in obj, "missing " + ("'i'" if "i" not in obj else "'r'"))
    version = obj.get("v")
    _expect(version is not None, "no version ('v')")
    _expect(version in KNOWN_VERSIONS,
            f"unknown version {version!r} (Kiln reads {', '.join(KNOWN_VERSIONS)})")
    i_part = obj["i"]
    _expect(isinstance(i_part, list) and len(i_part) == 2, "'i' is not [task, state]")
    steps = _parse_steps(i_part[1])
    task = _parse_task(i_part[0], ctx)
    res = _parse_result(obj["r"])
    return _RecordInput(task, steps, where), res


class _RecordInput(MeasureInput):
    """A measure input read from a record: the state is replayed on first use."""

    def __init__(self, task: SearchTask, steps: list[Step], where: str):
        self.task = task
        self._steps = steps
        self._where = where
        self._state: State | None = None

    @property  # type: ignore[override]
    def state(self) -> State:
        """The task's initial state with the record's steps replayed."""
        if self._state is None:
            dag = self.task.compute_dag
            if dag is None:
                steps_only = State([], None)
                steps_only.transform_steps = list(self._steps)
                self._state = steps_only
            else:
                self._state = replay_steps(dag, self._steps, self._where)
        return self._state

    @state.setter
    def state(self, value: State) -> None:
        self._state = value


def replay_steps(dag: ComputeDAG, steps: Sequence[Step], where: str = "") -> State:
    """``dag``'s initial state with ``steps`` applied in order.

    Parameters
    ----------
    dag : ComputeDAG
        The task's DAG.
    steps : sequence of Step
        The steps (e.g. :func:`input_steps` of a record).
    where : str
        Where the steps come from (``"log.json:12"``), for the error message.

    Returns
    -------
    State
        The replayed state.

    Raises
    ------
    TuningLogError
        A step does not apply; the message names it and ``where``.
    """
    state = dag.init_state
    for k, step in enumerate(steps):
        state.transform_steps.append(step)
        try:
            step.apply_to_state(state, dag)
        except Exception as e:
            prefix = f"{where}: " if where else ""
            raise TuningLogError(f"{prefix}step {k} {step.to_record()} does not replay on the DAG "
                                 f"of this workload: {e}") from e
    return state


def load_record_from_string(record: str) -> tuple[MeasureInput, MeasureResult]:
    """A record line as a (MeasureInput, MeasureResult) pair.

    Parameters
    ----------
    record : str
        One line (a trailing newline is fine).

    Returns
    -------
    (MeasureInput, MeasureResult)

    Raises
    ------
    TuningLogError
        The line is not a record Kiln can read; the message says why.
    """
    try:
        return _parse_record(record.strip(), _Context(), "<string>")
    except _BadRecord as e:
        raise TuningLogError(f"not a tuning record: {e}") from None


@dataclass
class LogEntry:
    """One line of a log as :meth:`RecordReader.entries` sees it.

    Attributes
    ----------
    lineno : int
        1-based line number.
    line : str
        The line without its newline.
    inp, res : MeasureInput, MeasureResult or None
        The record (None for a bad line).
    error : str or None
        Why the line is not a record (None for a good line).
    """

    lineno: int
    line: str
    inp: MeasureInput | None
    res: MeasureResult | None
    error: str | None


class RecordReader:
    """Reader of a tuning log, line by line.

    Lines starting with ``#`` or a space, and blank lines, are skipped silently (as TVM does);
    every other line that is not a readable record is skipped with one :class:`RecordWarning`
    naming the file and line. Error messages from the log's sidecar are put back into the
    results' ``error_msg``.

    Parameters
    ----------
    filename : str or Path
        The log. A missing file reads as empty (with a warning).

    Examples
    --------
    >>> for inp, res in RecordReader("matmul.json"):
    ...     print(inp.task.workload_key, res.costs)
    """

    def __init__(self, filename: str | Path):
        self.filename = str(filename)
        if not os.path.exists(self.filename):
            warnings.warn(f"{self.filename} does not exist", RecordWarning, stacklevel=2)
        self._ctx = _Context()

    def entries(self) -> Iterator[LogEntry]:
        """Every non-comment line, good or bad, without warnings."""
        if not os.path.exists(self.filename):
            return
        errors = read_sidecar(self.filename).errors
        with open(self.filename, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                raw = raw.rstrip(b"\r\n")
                if not raw.strip() or raw[:1] in (b"#", b" "):
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    yield LogEntry(lineno, raw.decode("utf-8", "replace"), None, None,
                                   f"not UTF-8 text (byte {e.start})")
                    continue
                try:
                    inp, res = _parse_record(text, self._ctx, f"{self.filename}:{lineno}")
                except _BadRecord as e:
                    yield LogEntry(lineno, text, None, None, str(e))
                    continue
                if errors:
                    res.error_msg = errors.get(record_id(text), "")
                yield LogEntry(lineno, text, inp, res, None)

    def __iter__(self) -> Iterator[tuple[MeasureInput, MeasureResult]]:
        for entry in self.entries():
            if entry.error is not None:
                warnings.warn(f"{self.filename}:{entry.lineno}: skipped a tuning record: "
                              f"{entry.error}", RecordWarning, stacklevel=2)
                continue
            assert entry.inp is not None and entry.res is not None
            yield entry.inp, entry.res

    def read_lines(self, max_lines: int | None = None, skip_lines: int = 0
                   ) -> tuple[list[MeasureInput], list[MeasureResult]]:
        """Read records (after skipping ``skip_lines`` records), at most ``max_lines`` of them.

        Parameters
        ----------
        max_lines : int, optional
            The most records to return (None or 0: all).
        skip_lines : int
            Records to skip first.

        Returns
        -------
        (list of MeasureInput, list of MeasureResult)
        """
        inputs: list[MeasureInput] = []
        results: list[MeasureResult] = []
        for inp, res in self:
            if skip_lines > 0:
                skip_lines -= 1
                continue
            inputs.append(inp)
            results.append(res)
            if max_lines and len(inputs) >= max_lines:
                break
        return inputs, results


def load_records(filename: str | Path) -> Iterator[tuple[MeasureInput, MeasureResult]]:
    """The (MeasureInput, MeasureResult) pairs of a log (bad lines skipped with a warning)."""
    return iter(RecordReader(filename))


# --- the sidecar -------------------------------------------------------------------------------
def sidecar_path(filename: str | Path) -> Path:
    """The sidecar of a log: ``LOG.kiln.jsonl`` next to it."""
    return Path(str(filename) + SIDECAR_SUFFIX)


@dataclass
class Sidecar:
    """What a log's sidecar holds.

    Attributes
    ----------
    dags : dict
        Workload key -> the DAG's print (TVM's ``PrintDAG``).
    errors : dict
        Record id (:func:`record_id`) -> error message.
    sessions : list of dict
        One per writer: Kiln's version, the machine, the time.
    """

    dags: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    sessions: list[dict[str, Any]] = field(default_factory=list)


def read_sidecar(filename: str | Path) -> Sidecar:
    """The sidecar of the log ``filename`` (empty when there is none; bad lines are warned about
    and skipped)."""
    out = Sidecar()
    path = sidecar_path(filename)
    if not path.is_file():
        return out
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                kind = obj["type"]
                if kind == "dag":
                    out.dags[str(obj["workload_key"])] = str(obj["dag"])
                elif kind == "error":
                    out.errors[str(obj["record"])] = str(obj["error_msg"])
                elif kind == "session":
                    out.sessions.append(obj)
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                warnings.warn(f"{path}:{lineno}: skipped a sidecar line ({type(e).__name__}: {e})",
                              RecordWarning, stacklevel=2)
    return out


def _machine() -> dict[str, Any]:
    from kiln.config import usable_cpus

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"system": platform.system(), "release": platform.release(),
            "machine": platform.machine(), "cpu": cpu, "usable_cpus": usable_cpus(),
            "python": platform.python_version()}


def _session_entry() -> dict[str, Any]:
    from kiln._version import __version__

    return {"type": "session", "kiln_version": __version__, "machine": _machine(),
            "time": int(time.time())}


def _clip(msg: str) -> str:
    if len(msg) <= MAX_ERROR_MSG:
        return msg
    half = MAX_ERROR_MSG // 2
    return msg[:half] + "\n...(cut)...\n" + msg[-half:]


def _append_sidecar(filename: str | Path, entries: Iterable[dict[str, Any]]) -> None:
    lines = [json.dumps(e, ensure_ascii=False) + "\n" for e in entries]
    if lines:
        with open(sidecar_path(filename), "a", encoding="utf-8") as f:
            f.writelines(lines)


def _sidecar_entries(lines: Sequence[str], inputs: Sequence[MeasureInput],
                     results: Sequence[MeasureResult], known_dags: set[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line, inp, res in zip(lines, inputs, results):
        key = inp.task.workload_key
        dag = getattr(inp.task, "compute_dag", None)
        if key not in known_dags and dag is not None:
            known_dags.add(key)
            out.append({"type": "dag", "workload_key": key, "dag": dag.print_dag()})
        if res.error_msg:
            out.append({"type": "error", "record": record_id(line), "error_no": res.error_no,
                        "error_msg": _clip(res.error_msg)})
    return out


def _write_records(filename: str | Path, inputs: Sequence[MeasureInput],
                   results: Sequence[MeasureResult], known_dags: set[str] | None,
                   session: bool) -> set[str]:
    if len(inputs) != len(results):
        raise TuningLogError(f"{len(inputs)} inputs but {len(results)} results")
    path = Path(filename)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [dump_record_to_string(inp, res) for inp, res in zip(inputs, results)]
    with open(path, "a", encoding="utf-8") as f:
        f.writelines(lines)
    if known_dags is None:
        known_dags = set(read_sidecar(path).dags)
    entries = ([_session_entry()] if session else []) + \
        _sidecar_entries(lines, inputs, results, known_dags)
    _append_sidecar(path, entries)
    return known_dags


def save_records(filename: str | Path, inputs: Sequence[MeasureInput],
                 results: Sequence[MeasureResult]) -> None:
    """Append records to a log (and their DAG prints and error messages to its sidecar).

    Parameters
    ----------
    filename : str or Path
        The log (created with its directory when missing).
    inputs : sequence of MeasureInput
    results : sequence of MeasureResult
    """
    _write_records(filename, inputs, results, None, session=True)


class RecordToFile:
    """A measure callback that appends every measured record to a log (TVM's ``RecordToFile``).

    The sidecar gets one session entry (Kiln's version, the machine), each workload's DAG print
    once, and the error message of every failed candidate.

    Parameters
    ----------
    filename : str or Path
        The log.
    """

    def __init__(self, filename: str | Path):
        self.filename = str(filename)
        Path(self.filename).resolve().parent.mkdir(parents=True, exist_ok=True)
        self._known_dags: set[str] | None = None

    def callback(self, policy: Any, inputs: Sequence[MeasureInput],
                 results: Sequence[MeasureResult]) -> None:
        """Append ``inputs``/``results`` (``policy`` is unused)."""
        first = self._known_dags is None
        self._known_dags = _write_records(self.filename, inputs, results, self._known_dags,
                                          session=first)

    def __call__(self, policy: Any, inputs: Sequence[MeasureInput],
                 results: Sequence[MeasureResult]) -> None:
        self.callback(policy, inputs, results)

    def __repr__(self) -> str:
        return f"RecordToFile({self.filename!r})"


# --- best records, distill, merge ---------------------------------------------------------------
def _mean_cost(res: MeasureResult) -> float:
    costs = [float(c) for c in res.costs]
    return sum(costs) / len(costs) if costs else math.inf


def _target_kind(target: Any) -> str | None:
    if target is None:
        return None
    if isinstance(target, str):
        from kiln.auto_scheduler.search_task import parse_record_target

        target = parse_record_target(target)
    return str(target.kind.name)


def load_best_record(filename: str | Path, workload_key: str | None = None, target: Any = None,
                     include_compatible: bool = False
                     ) -> tuple[MeasureInput | None, MeasureResult | None]:
    """The valid record (error 0) with the lowest mean cost, as TVM ranks them.

    Parameters
    ----------
    filename : str or Path
        The log.
    workload_key : str, optional
        Only records of this workload (None: all workloads).
    target : str or Target, optional
        Only records whose target has this kind (``llvm``, ...).
    include_compatible : bool
        Also records of compatible workloads (same function or DAG, arguments that divide this
        key's), their cost scaled by TVM's distance factor.

    Returns
    -------
    (MeasureInput, MeasureResult) or (None, None)
        None when there is no such record.
    """
    kind = _target_kind(target)
    wanted = decode_workload_key(workload_key) if workload_key is not None else None
    best_cost = math.inf
    best: tuple[MeasureInput | None, MeasureResult | None] = (None, None)
    for inp, res in RecordReader(filename):
        if res.error_no != MeasureErrorNo.NO_ERROR:
            continue
        if kind is not None and inp.task.target.kind.name != kind:
            continue
        cost = _mean_cost(res)
        if wanted is not None:
            factor = calc_workload_dis_factor(wanted, decode_workload_key(inp.task.workload_key))
            if factor == math.inf or (not include_compatible and factor != 1):
                continue
            cost *= factor
        if cost < best_cost:
            best_cost, best = cost, (inp, res)
    return best


def best_entries(entries: Iterable[LogEntry]) -> list[LogEntry]:
    """The best valid entry per (target key, workload), in file order (TVM's distill rule)."""
    best: dict[tuple[Any, ...], tuple[float, int, LogEntry]] = {}
    for order, entry in enumerate(entries):
        if entry.inp is None or entry.res is None or entry.res.error_no != 0:
            continue
        cost = _mean_cost(entry.res)
        name, args = decode_workload_key(entry.inp.task.workload_key)
        for target_key in entry.inp.task.target.keys:
            slot = (target_key, name, args)
            if slot not in best or cost < best[slot][0]:
                best[slot] = (cost, order, entry)
    unique = {order: entry for _, order, entry in best.values()}
    return [unique[k] for k in sorted(unique)]


def _warn_bad(filename: str | Path, entries: Iterable[LogEntry]) -> Iterator[LogEntry]:
    for entry in entries:
        if entry.error is not None:
            warnings.warn(f"{filename}:{entry.lineno}: skipped a tuning record: {entry.error}",
                          RecordWarning, stacklevel=3)
            continue
        yield entry


def _write_lines_atomically(out_file: str | Path, lines: Sequence[str]) -> None:
    path = Path(out_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _rewrite_sidecar(out_file: str | Path, sources: Sequence[str | Path], keep_keys: set[str] | None,
                     keep_records: set[str]) -> None:
    """Write ``out_file``'s sidecar from the sidecars of ``sources`` (only what the kept records
    need), plus a session entry for this write."""
    entries: list[dict[str, Any]] = [_session_entry()]
    seen_dags: set[str] = set()
    seen_errors: set[str] = set()
    for src in sources:
        side = read_sidecar(src)
        for key, text in side.dags.items():
            if key not in seen_dags and (keep_keys is None or key in keep_keys):
                seen_dags.add(key)
                entries.append({"type": "dag", "workload_key": key, "dag": text})
        for rid, msg in side.errors.items():
            if rid in keep_records and rid not in seen_errors:
                seen_errors.add(rid)
                entries.append({"type": "error", "record": rid, "error_msg": msg})
    side_path = sidecar_path(out_file)
    side_path.unlink(missing_ok=True)
    _append_sidecar(out_file, entries)


def distill_record_file(in_file: str | Path, out_file: str | Path) -> int:
    """Keep the best valid record of each workload (per target key) of ``in_file`` in ``out_file``.

    As in TVM, records already in ``out_file`` compete too, and ``out_file`` is then rewritten.
    Lines are kept byte for byte, in file order.

    Parameters
    ----------
    in_file : str or Path
        The log to distill.
    out_file : str or Path
        The log to write.

    Returns
    -------
    int
        The number of records written.
    """
    sources: list[str | Path] = [in_file]
    if os.path.isfile(out_file) and os.path.abspath(out_file) != os.path.abspath(in_file):
        sources.append(out_file)
    entries = [e for src in sources for e in _warn_bad(src, RecordReader(src).entries())]
    best = best_entries(entries)
    _write_lines_atomically(out_file, [e.line for e in best])
    keys = {e.inp.task.workload_key for e in best if e.inp is not None}
    _rewrite_sidecar(out_file, sources, keys, set())
    return len(best)


def merge_record_files(out_file: str | Path, in_files: Sequence[str | Path]) -> tuple[int, int]:
    """Write the readable records of ``in_files`` to ``out_file``, in order, each line once.

    Bad lines are skipped with a warning; identical lines are written once; the sidecars are
    merged. ``out_file`` may be one of the inputs.

    Parameters
    ----------
    out_file : str or Path
        The merged log (replaced).
    in_files : sequence of str or Path
        The logs.

    Returns
    -------
    (int, int)
        Records written, and duplicate lines dropped.
    """
    lines: list[str] = []
    seen: set[str] = set()
    duplicates = 0
    for src in in_files:
        if not os.path.isfile(src):
            raise TuningLogError(f"tuning log {src} does not exist")
        for entry in _warn_bad(src, RecordReader(src).entries()):
            if entry.line in seen:
                duplicates += 1
                continue
            seen.add(entry.line)
            lines.append(entry.line)
    _write_lines_atomically(out_file, lines)
    _rewrite_sidecar(out_file, list(in_files), None, {record_id(line) for line in lines})
    return len(lines), duplicates


ERROR_NO_NAMES = ERROR_NAMES
"""Names of the error numbers, indexed by number (re-exported for the command line)."""

