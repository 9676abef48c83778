"""``SearchTask`` and ``HardwareParams`` (TVM's ``tvm.auto_scheduler.search_task``).

A task is one computation to tune for one target: its :class:`ComputeDAG`, its workload key and
the hardware it is tuned for. Tasks come from a registered function (``SearchTask(func=matmul,
args=(512, 512, 512), target="llvm")``), a workload key, or a model (``extract_tasks``); a task
read back from a record is re-created from its workload key through the workload registry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln.auto_scheduler.compute_dag import ComputeDAG, LayoutRewriteOption
from kiln.auto_scheduler.workload_registry import (
    WORKLOAD_FUNC_REGISTRY,
    make_workload_key,
    register_workload_tensors,
)
from kiln.errors import TuningLogError
from kiln.target import Target, TargetError

if TYPE_CHECKING:
    from kiln.te.schedule import Schedule
    from kiln.te.tensor import Tensor

__all__ = [
    "HardwareParams",
    "RecordTarget",
    "SearchTask",
    "get_task_input_buffer",
    "parse_record_target",
    "register_task_input_buffer",
]

_HW_FIELDS = ("num_cores", "vector_unit_bytes", "cache_line_bytes", "max_shared_memory_per_block",
              "max_local_memory_per_block", "max_threads_per_block", "max_vthread_extent",
              "warp_size")


class HardwareParams:
    """The hardware a task is tuned for; a record stores these as 8 integers.

    Any parameter left out takes this machine's CPU value: ``num_cores`` the CPUs this process
    may use (affinity and cgroup quota), ``vector_unit_bytes`` the vector register bytes Kiln
    compiles for (from the target's ``-mcpu``/``-mattr``, else this CPU), ``cache_line_bytes``
    64, the GPU limits 0.

    Parameters
    ----------
    num_cores, vector_unit_bytes, cache_line_bytes, max_shared_memory_per_block,
    max_local_memory_per_block, max_threads_per_block, max_vthread_extent, warp_size : int, optional
        The parameters, in a record's order.
    target : str or Target, optional
        The target whose vector width is the default.
    target_host : str or Target, optional
        Accepted for TVM's signature (CPU targets are their own host).
    """

    def __init__(self, num_cores: int | None = None, vector_unit_bytes: int | None = None,
                 cache_line_bytes: int | None = None,
                 max_shared_memory_per_block: int | None = None,
                 max_local_memory_per_block: int | None = None,
                 max_threads_per_block: int | None = None, max_vthread_extent: int | None = None,
                 warp_size: int | None = None, target: str | Target | None = None,
                 target_host: str | Target | None = None):
        if num_cores is None:
            from kiln.config import usable_cpus

            num_cores = usable_cpus()
        if vector_unit_bytes is None:
            vector_unit_bytes = _default_vector_bytes(target)
        self.num_cores = int(num_cores)
        self.vector_unit_bytes = int(vector_unit_bytes)
        self.cache_line_bytes = int(64 if cache_line_bytes is None else cache_line_bytes)
        self.max_shared_memory_per_block = int(max_shared_memory_per_block or 0)
        self.max_local_memory_per_block = int(max_local_memory_per_block or 0)
        self.max_threads_per_block = int(max_threads_per_block or 0)
        self.max_vthread_extent = int(max_vthread_extent or 0)
        self.warp_size = int(warp_size or 0)

    def to_list(self) -> list[int]:
        """The 8 integers a record stores, in TVM's order."""
        return [getattr(self, f) for f in _HW_FIELDS]

    @staticmethod
    def from_list(values: Sequence[int]) -> HardwareParams:
        """The parameters from a record's 8 integers."""
        if len(values) != len(_HW_FIELDS):
            raise TuningLogError(f"hardware params need {len(_HW_FIELDS)} integers, got {list(values)}")
        v = [int(x) for x in values]
        return HardwareParams(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HardwareParams) and self.to_list() == other.to_list()

    def __hash__(self) -> int:
        return hash(tuple(self.to_list()))

    def __repr__(self) -> str:
        return f"HardwareParams({', '.join(f'{f}={getattr(self, f)}' for f in _HW_FIELDS)})"

    def __str__(self) -> str:
        return "HardwareParams:\n" + "".join(f"  {f}: {getattr(self, f)}\n" for f in _HW_FIELDS)


def _default_vector_bytes(target: str | Target | None) -> int:
    try:
        t = Target(target) if target is not None else None
    except TargetError:
        t = None
    if t is not None and t.is_native:
        return t.vector_width("int8")
    from kiln.target import native_vector_bytes

    return native_vector_bytes()


class _RecordKind:
    """The kind of a :class:`RecordTarget` (only its name is known)."""

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return self.name


class RecordTarget:
    """A target string from a record that Kiln cannot compile for (``cuda ...``), kept verbatim.

    It has the parts of a :class:`~kiln.target.Target` that reading logs needs: ``kind.name``,
    ``keys`` and ``str()`` (the original text).
    """

    def __init__(self, text: str):
        self.text = text
        words = text.split()
        self.kind = _RecordKind(words[0] if words else "")
        keys = re.search(r"-keys=(\S+)", text)
        self.keys: tuple[str, ...] = tuple(k for k in keys.group(1).split(",") if k) if keys \
            else (self.kind.name,)
        self.attrs: dict[str, Any] = {}
        self.host = None
        model = re.search(r"-model=(\S+)", text)
        self.model = model.group(1) if model else "unknown"

    @property
    def is_native(self) -> bool:
        """Always False: Kiln cannot build for this target."""
        return False

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"RecordTarget({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return str(self) == str(other)

    def __hash__(self) -> int:
        return hash(self.text)


def parse_record_target(text: str) -> Target | RecordTarget:
    """The target a record names: a :class:`~kiln.target.Target` when Kiln knows its kind
    (options Kiln does not know, such as ``-link-params=0``, are left out), else a
    :class:`RecordTarget`."""
    try:
        return Target(text)
    except TargetError:
        pass
    words = text.split()
    if words:
        kept = [w for w in words[1:] if _option_known(words[0], w)]
        if len(kept) < len(words) - 1:
            try:
                return Target(" ".join([words[0], *kept]))
            except TargetError:
                pass
    return RecordTarget(text)


def _option_known(kind: str, word: str) -> bool:
    from kiln.target import _KINDS

    known = _KINDS.get(kind)
    key = word.lstrip("-").partition("=")[0]
    return known is not None and key in known.options


# Task input buffers (TVM's special inputs, e.g. sparse weights), by workload key and name.
_TASK_INPUT_BUFFERS: dict[str, dict[str, Any]] = {}


def register_task_input_buffer(workload_key: str, input_name: str, input_data: Any,
                               overwrite: bool = False, save_to_file: bool = False) -> Any:
    """Register data a task's measurement must use for the input named ``input_name``.

    Parameters
    ----------
    workload_key : str
        The task.
    input_name : str
        The placeholder's name.
    input_data : NDArray or numpy.ndarray
        The data.
    overwrite : bool
        Replace an existing registration.
    save_to_file : bool
        Accepted for TVM's signature (Kiln keeps the data in memory only).

    Returns
    -------
    The registered data (the existing one when ``overwrite`` is False and the name is taken).
    """
    table = _TASK_INPUT_BUFFERS.setdefault(workload_key, {})
    if input_name in table and not overwrite:
        return table[input_name]
    table[input_name] = input_data
    return input_data


def get_task_input_buffer(workload_key: str, input_name: str) -> Any:
    """The data registered for a task input (:class:`TuningLogError` when there is none)."""
    try:
        return _TASK_INPUT_BUFFERS[workload_key][input_name]
    except KeyError:
        raise TuningLogError(f"no input buffer {input_name!r} is registered for workload "
                             f"{workload_key}") from None


class SearchTask:
    """One computation to tune for one target.

    Parameters
    ----------
    func : callable or str, optional
        A function registered with ``register_workload`` (or its name); with ``args`` it gives
        the workload key.
    args : sequence, optional
        The function's arguments.
    compute_dag : ComputeDAG, optional
        The computation (default: rebuilt from the workload key through the registry).
    workload_key : str, optional
        The task's key (needed when ``func`` is not given).
    target : str or Target
        The target.
    target_host : str or Target, optional
        The host target (none for CPU targets).
    hardware_params : HardwareParams, optional
        Default: this machine's (:class:`HardwareParams`).
    layout_rewrite_option : int, optional
        A :class:`LayoutRewriteOption` (default: TVM's default for the target).
    task_inputs : dict or list, optional
        Special input data by placeholder name (registered with
        :func:`register_task_input_buffer`) or just the names.
    task_inputs_overwrite, task_inputs_save_to_file : bool
        Passed to :func:`register_task_input_buffer`.
    desc : str
        A description (e.g. the fused function's name).

    Examples
    --------
    >>> task = SearchTask(func=matmul, args=(512, 512, 512), target="llvm")
    >>> sch, args = task.apply_best("matmul.json")
    """

    def __init__(self, func: Any = None, args: Sequence[Any] | None = None,
                 compute_dag: ComputeDAG | None = None, workload_key: str | None = None,
                 target: str | Target | None = None, target_host: str | Target | None = None,
                 hardware_params: HardwareParams | None = None,
                 layout_rewrite_option: int | None = None,
                 task_inputs: Mapping[str, Any] | Sequence[str] | None = None,
                 task_inputs_overwrite: bool = False, task_inputs_save_to_file: bool = False,
                 desc: str = ""):
        if func is None and workload_key is None:
            raise TuningLogError("SearchTask needs a workload function (func=, args=) or a "
                                 "workload_key")
        if func is not None:
            workload_key = make_workload_key(func, tuple(args or ()))
        assert workload_key is not None
        if compute_dag is None:
            compute_dag = ComputeDAG(workload_key)
        if target is None:
            raise TuningLogError("SearchTask needs a target (e.g. target=\"llvm\")")
        target_obj = target if isinstance(target, (Target, RecordTarget)) else Target(target)
        if target_host is None and isinstance(target_obj, Target):
            target_host = target_obj.host
        host_obj = None if target_host is None else (
            target_host if isinstance(target_host, (Target, RecordTarget)) else Target(target_host))
        if layout_rewrite_option is None:
            layout_rewrite_option = LayoutRewriteOption.get_target_default(target_obj)
        names: list[str] = []
        if isinstance(task_inputs, Mapping):
            for name, data in task_inputs.items():
                register_task_input_buffer(workload_key, name, data, task_inputs_overwrite,
                                           task_inputs_save_to_file)
                names.append(str(name))
        elif task_inputs is not None:
            if isinstance(task_inputs, str):
                raise TypeError("task_inputs must be a dict or a list of names, not a string")
            names = [str(n) for n in task_inputs]
        self.compute_dag: ComputeDAG | None = compute_dag
        self.workload_key: str = workload_key
        self.target: Target | RecordTarget = target_obj
        self.target_host: Target | RecordTarget | None = host_obj
        self.hardware_params = hardware_params if hardware_params is not None else \
            HardwareParams(target=target_obj if isinstance(target_obj, Target) else None)
        self.layout_rewrite_option = int(layout_rewrite_option)
        self.task_input_names = names
        self.desc = desc
        # the target texts a record gave, written back verbatim (None: str(target))
        self._record_target_text: str | None = None
        self._record_target_host_text: str | None = None
        self._dag_error: str | None = None

    @classmethod
    def _from_record(cls, workload_key: str, target_text: str, hardware_params: HardwareParams,
                     target_host_text: str, layout_rewrite_option: int,
                     task_input_names: Sequence[str], compute_dag: ComputeDAG | None,
                     dag_error: str | None) -> SearchTask:
        """A task as a record describes it; ``compute_dag`` is None for unknown workloads."""
        task = cls.__new__(cls)
        task.compute_dag = compute_dag
        task.workload_key = workload_key
        task.target = parse_record_target(target_text)
        task.target_host = parse_record_target(target_host_text) if target_host_text else None
        task.hardware_params = hardware_params
        task.layout_rewrite_option = int(layout_rewrite_option)
        task.task_input_names = list(task_input_names)
        task.desc = ""
        task._record_target_text = target_text
        task._record_target_host_text = target_host_text
        task._dag_error = dag_error
        return task

    @property
    def target_text(self) -> str:
        """The target as a record writes it."""
        return self._record_target_text if self._record_target_text is not None \
            else str(self.target)

    @property
    def target_host_text(self) -> str:
        """The host target as a record writes it (``""`` when there is none)."""
        if self._record_target_host_text is not None:
            return self._record_target_host_text
        return "" if self.target_host is None else str(self.target_host)

    def require_dag(self) -> ComputeDAG:
        """The task's DAG, or a :class:`TuningLogError` saying why it is unknown."""
        if self.compute_dag is None:
            why = f": {self._dag_error}" if self._dag_error else ""
            raise TuningLogError(
                f"workload {self.workload_key} has no compute DAG in this process{why}; register "
                "its function with @auto_scheduler.register_workload (or extract the task from "
                "its model) before replaying its records")
        return self.compute_dag

    def apply_best(self, log_file: str | Path, include_compatible: bool = False,
                   layout_rewrite_option: int | None = None) -> tuple[Schedule, list[Tensor]]:
        """The schedule of the best valid record of this task in ``log_file``.

        Parameters
        ----------
        log_file : str or Path
            A tuning log.
        include_compatible : bool
            Also consider records of compatible workloads (TVM's rule).
        layout_rewrite_option : int, optional
            Accepted for TVM's signature.

        Returns
        -------
        (Schedule, list of Tensor)
            For :func:`kiln.build` / :func:`kiln.te.lower`.
        """
        from kiln.auto_scheduler.measure_record import input_steps

        dag = self.require_dag()
        inp = self._best_input(log_file, include_compatible)
        return dag.apply_steps(input_steps(inp)), list(dag.tensors)

    def print_best(self, log_file: str | Path, print_mode: str = "schedule") -> str:
        """The loop nest of the best valid record of this task in ``log_file`` (also printed).

        Parameters
        ----------
        log_file : str or Path
            A tuning log.
        print_mode : str
            ``"schedule"`` (TVM's other mode, ``"cuda"``, needs a GPU target).

        Returns
        -------
        str
            The state's loop nest, as ``str(state)`` prints it.
        """
        if print_mode != "schedule":
            raise TuningLogError(f"print_best: print_mode {print_mode!r} needs a CUDA target; "
                                 "Kiln prints the loop nest ('schedule')")
        from kiln.auto_scheduler.measure_record import input_steps, replay_steps

        dag = self.require_dag()
        text = str(replay_steps(dag, input_steps(self._best_input(log_file, False))))
        print(text, end="")
        return text

    def _best_input(self, log_file: str | Path, include_compatible: bool) -> Any:
        from kiln.auto_scheduler.measure_record import load_best_record

        inp, _ = load_best_record(log_file, self.workload_key,
                                  include_compatible=include_compatible)
        if inp is None:
            raise TuningLogError(f"no valid record of workload {self.workload_key} in {log_file}")
        return inp

    def __repr__(self) -> str:
        return (f"SearchTask(workload_key={self.workload_key!r}, target={self.target_text!r}"
                + (f", desc={self.desc!r}" if self.desc else "") + ")")

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # a DAG-hash workload unpickled in another process is registered there (as TVM does)
        key = state.get("workload_key")
        dag = state.get("compute_dag")
        if isinstance(key, str) and dag is not None:
            try:
                name = json.loads(key)[0]
            except (json.JSONDecodeError, IndexError, KeyError, TypeError):
                name = key
            if name not in WORKLOAD_FUNC_REGISTRY and key not in WORKLOAD_FUNC_REGISTRY:
                register_workload_tensors(key, dag.tensors)
        self.__dict__.update(state)

