"""Measurement on a Ray cluster: :class:`RayBuilder` and :class:`RayRunner` (Ray is optional:
``pip install kiln[ray]``).

Each candidate is one Ray task. The build task compiles the kernel on whichever worker Ray picks
and returns the library's bytes through Ray's object store; the run task writes them to a
temporary file on its own worker, loads and times the kernel there, and reports the worker's
node, process and :class:`~kiln.auto_scheduler.HardwareParams` with the result (``res.worker``).
So builder and runner may sit on different machines. A worker that dies (a crashing kernel, a
lost node) makes Ray run the task again on another worker, up to ``max_retries`` times; after
that the candidate is recorded with an error number (``COMPILE_HOST`` for a build,
``RUNTIME_DEVICE`` for a run) and a message saying the worker died. A candidate that runs past
``timeout`` is cancelled and recorded as ``BUILD_TIMEOUT``/``RUN_TIMEOUT``. No candidate is
ever lost: every input gets a result, in order.

Examples
--------
>>> ray.init(address="auto")  # doctest: +SKIP
>>> options = TuningOptions(200, builder=RayBuilder(), runner=RayRunner(),  # doctest: +SKIP
...                         measure_callbacks=[RecordToFile("model.json")])
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kiln.auto_scheduler import measure
from kiln.auto_scheduler.measure import (
    MAX_FLOAT,
    BuildResult,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    ProgramBuilder,
    ProgramRunner,
)
from kiln.errors import KilnError
from kiln.te.tensor import PlaceholderOp

__all__ = ["RayBuildResult", "RayBuilder", "RayRunner", "init_ray", "ray_hardware_params"]

_INSTALL_HINT = "Ray is not installed: pip install 'kiln[ray]' (or pip install ray)"


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise KilnError(_INSTALL_HINT) from None
    return ray


def init_ray(address: str | None = None, **kwargs: Any) -> Any:
    """Connect to a Ray cluster (``address``: ``"auto"``, ``"ray://host:10001"``, ...) or, with
    ``None``/``"local"``, start a local one; nothing when Ray is already initialized.

    Returns
    -------
    module
        The ``ray`` module.
    """
    ray = _ray()
    if not ray.is_initialized():
        kwargs.setdefault("include_dashboard", False)
        kwargs.setdefault("log_to_driver", False)
        ray.init(address=None if address in (None, "local") else address, **kwargs)
    return ray


def _worker_info() -> dict[str, Any]:
    """Where a Ray task runs: node id, process id, host and this worker's hardware params."""
    import socket

    from kiln.auto_scheduler.search_task import HardwareParams

    try:
        import ray

        node = ray.get_runtime_context().get_node_id()
    except Exception:  # outside a Ray task
        node = ""
    return {"node": node, "pid": os.getpid(), "host": socket.gethostname(),
            "hardware": HardwareParams().to_list()}


def _extend_path(path: Sequence[str]) -> None:
    """Let the worker import what the driver can (e.g. a test's build_func)."""
    for p in path:
        if p not in sys.path and os.path.isdir(p or "."):
            sys.path.append(p)


def _ray_build(payload: dict[str, Any]) -> tuple[bytes, int, str, float, dict[str, Any]]:
    """In a Ray worker: build one candidate; the library comes back as bytes."""
    _extend_path(payload.pop("sys_path", ()))
    folder = tempfile.mkdtemp(prefix="kiln-ray-build-")
    payload["folder"] = folder
    try:
        output, error_no, msg, seconds = measure._build_job(payload)
        data = Path(output).read_bytes() if error_no == MeasureErrorNo.NO_ERROR else b""
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return data, error_no, msg, seconds, _worker_info()


def _ray_run(payload: dict[str, Any], library: bytes
             ) -> tuple[list[float], int, str, float, dict[str, Any]]:
    """In a Ray worker: write the library to a file, then load, check and time it."""
    tic = time.time()
    _extend_path(payload.pop("sys_path", ()))
    folder = tempfile.mkdtemp(prefix="kiln-ray-run-")
    try:
        filename = os.path.join(folder, f"{measure.KERNEL_NAME}.so")
        Path(filename).write_bytes(library)
        payload["filename"] = filename
        costs, error_no, msg = measure._run_job(payload)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return costs, error_no, msg, time.time() - tic, _worker_info()


def _node_hardware() -> dict[str, Any]:
    return _worker_info()


_REMOTES: dict[tuple[str, int], Any] = {}


def _remote(fn: Callable[..., Any], max_retries: int) -> Any:
    key = (fn.__name__, max_retries)
    if key not in _REMOTES:
        _REMOTES[key] = _ray().remote(max_retries=max_retries, retry_exceptions=False, num_cpus=1)(fn)
    return _REMOTES[key]


def ray_hardware_params() -> dict[str, Any]:
    """Each alive node's hardware params, as a worker on that node reports them.

    Returns
    -------
    dict of str to HardwareParams
        By node id.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from kiln.auto_scheduler.search_task import HardwareParams

    ray = _ray()
    refs = [_remote(_node_hardware, 1).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote()
        for node in ray.nodes() if node.get("Alive")]
    return {info["node"]: HardwareParams.from_list(info["hardware"]) for info in ray.get(refs)}


def _died(ray: Any, exc: BaseException) -> bool:
    kinds = tuple(k for k in (getattr(ray.exceptions, "WorkerCrashedError", None),
                              getattr(ray.exceptions, "NodeDiedError", None),
                              getattr(ray.exceptions, "ActorDiedError", None)) if k is not None)
    return isinstance(exc, kinds)


def _cluster_cpus(ray: Any) -> int:
    try:
        return max(1, int(ray.cluster_resources().get("CPU", 1)))
    except Exception:  # an old or unusual cluster
        return 1


def _alive_nodes(ray: Any) -> int:
    try:
        return max(1, sum(1 for n in ray.nodes() if n.get("Alive")))
    except Exception:  # an old or unusual cluster
        return 1


def _run_all(ray: Any, submit: Callable[[int], Any], count: int, n_parallel: int, timeout: float,
             done: Callable[[int, str, Any], None]) -> None:
    """Submit ``count`` Ray tasks, at most ``n_parallel`` at a time; ``done(k, status, value)``
    gets each outcome: ``"ok"`` (the value), ``"died"``/``"error"`` (the exception) or
    ``"timeout"`` (None), counted from when the task was submitted."""
    pending = list(range(count))
    running: dict[Any, tuple[int, float]] = {}
    while pending or running:
        while pending and len(running) < n_parallel:
            k = pending.pop(0)
            running[submit(k)] = (k, time.monotonic())
        first_deadline = min(t for _, t in running.values()) + timeout
        ready, _ = ray.wait(list(running), num_returns=1,
                            timeout=max(0.01, first_deadline - time.monotonic()))
        for ref in ready:
            k, _t = running.pop(ref)
            try:
                done(k, "ok", ray.get(ref))
            except Exception as e:  # the task raised or its worker died (after Ray's retries)
                done(k, "died" if _died(ray, e) else "error", e)
        now = time.monotonic()
        for ref, (k, t) in list(running.items()):
            if now - t >= timeout:
                running.pop(ref)
                with contextlib.suppress(Exception):  # already finished or gone
                    ray.cancel(ref, force=True)
                done(k, "timeout", None)


def _message(status: str, exc: Any, retries: int) -> str:
    if status == "died":
        return (f"the Ray worker died (the task was tried {retries + 1} times on fresh workers): "
                f"{type(exc).__name__}: {exc}")
    return f"the Ray task failed: {type(exc).__name__}: {exc}"


class RayBuildResult(BuildResult):
    """A build result whose library lives in Ray's object store (``library``: an ObjectRef of
    bytes) rather than in a file; ``worker`` says where it was built."""

    def __init__(self, library: Any, args: Sequence[Any], error_no: int, error_msg: str,
                 time_cost: float, worker: dict[str, Any] | None = None):
        super().__init__("", args, error_no, error_msg, time_cost)
        self.library = library
        self.worker = worker or {}


class RayBuilder(ProgramBuilder):
    """Builds candidates as Ray tasks (see the module docstring).

    Parameters
    ----------
    timeout : float
        Seconds one build may take from its submission; longer ones are cancelled (error 6).
    n_parallel : int, optional
        Builds in flight at once (default: the cluster's CPUs).
    build_func : str or callable
        As :class:`~kiln.auto_scheduler.LocalBuilder` (a module-level function importable on
        the workers).
    address : str, optional
        The cluster to connect to when Ray is not initialized yet (None: a local instance).
    max_retries : int
        Times a build whose worker died is run again on a fresh worker.
    """

    def __init__(self, timeout: float = 15, n_parallel: int | None = None,
                 build_func: str | Callable[..., Any] = "default", address: str | None = None,
                 max_retries: int = 2):
        self.timeout = timeout
        self.build_func = build_func
        self._ref = measure._check_build_func(build_func)
        self.address = address
        self.max_retries = int(max_retries)
        self._n_parallel = int(n_parallel) if n_parallel else None

    @property
    def n_parallel(self) -> int:
        """Builds in flight at once (default: the cluster's CPUs)."""
        return self._n_parallel or _cluster_cpus(init_ray(self.address))

    @n_parallel.setter
    def n_parallel(self, value: int | None) -> None:
        self._n_parallel = int(value) if value else None

    def build(self, measure_inputs: Sequence[MeasureInput], verbose: int = 1) -> list[BuildResult]:
        ray = init_ray(self.address)
        results: list[BuildResult | None] = [None] * len(measure_inputs)
        payloads: list[dict[str, Any]] = []
        where: list[int] = []
        config = measure._config()
        for i, inp in enumerate(measure_inputs):
            try:
                payloads.append({"tensors": measure._task_tensors(inp),
                                 "steps": [s.to_record() for s in measure._input_steps(inp)],
                                 "config": config, "vector_bytes": measure._vector_bytes(inp.task),
                                 "isa_flags": measure._isa_flags(inp.task), "build_func": self._ref,
                                 "folder": "", "sys_path": list(sys.path)})
                where.append(i)
            except Exception:  # no DAG for the workload, or steps that cannot be written
                results[i] = BuildResult("", [], MeasureErrorNo.INSTANTIATION_ERROR,
                                         traceback.format_exc(), 0.0)
                measure._progress(verbose, ".E")
        remote = _remote(_ray_build, self.max_retries)

        def submit(k: int) -> Any:
            return remote.remote(payloads[k])

        def done(k: int, status: str, value: Any) -> None:
            i = where[k]
            if status == "ok":
                data, error_no, msg, seconds, worker = value
                args = measure._task_tensors(measure_inputs[i]) if error_no == 0 else []
                results[i] = RayBuildResult(ray.put(data) if error_no == 0 else None, args, error_no, msg,
                                            seconds, worker)
                measure._progress(verbose, "." if error_no == 0 else ".E")
            elif status == "timeout":
                results[i] = BuildResult("", [], MeasureErrorNo.BUILD_TIMEOUT,
                                         f"the build took longer than {self.timeout} s and was cancelled",
                                         self.timeout)
                measure._progress(verbose, ".T")
            else:
                results[i] = BuildResult("", [], MeasureErrorNo.COMPILE_HOST,
                                         _message(status, value, self.max_retries), 0.0)
                measure._progress(verbose, ".E")

        if payloads:
            _run_all(ray, submit, len(payloads), self.n_parallel, self.timeout, done)
        return [r for r in results if r is not None]

    def __repr__(self) -> str:
        return f"RayBuilder(timeout={self.timeout}, max_retries={self.max_retries})"


class RayRunner(ProgramRunner):
    """Measures built candidates as Ray tasks (see the module docstring).

    Takes :class:`RayBuildResult` (from :class:`RayBuilder`) or plain build results whose library
    file this process can read (e.g. from :class:`~kiln.auto_scheduler.LocalBuilder`); either
    way the bytes travel to the worker. Each result has ``worker``: the node, process, host and
    hardware params of the worker that measured it.

    Parameters
    ----------
    timeout : float
        Seconds one measurement may take from its submission (error 7 when longer).
    number, repeat, min_repeat_ms, cooldown_interval, enable_cpu_cache_flush, check_correctness
        As :class:`~kiln.auto_scheduler.LocalRunner`.
    n_parallel : int, optional
        Measurements in flight at once (default: one per alive node, so that kernels timed on
        one machine do not disturb each other).
    address : str, optional
        The cluster to connect to when Ray is not initialized yet (None: a local instance).
    max_retries : int
        Times a measurement whose worker died is run again on a fresh worker.
    """

    def __init__(self, timeout: float = 10, number: int = 3, repeat: int = 1,
                 min_repeat_ms: float = 100, cooldown_interval: float = 0.0,
                 enable_cpu_cache_flush: bool = False, check_correctness: bool = False,
                 n_parallel: int | None = None, address: str | None = None, max_retries: int = 2):
        if enable_cpu_cache_flush:
            number, min_repeat_ms = 1, 0
        self.timeout = timeout
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self.cooldown_interval = cooldown_interval
        self.enable_cpu_cache_flush = enable_cpu_cache_flush
        self.check_correctness = check_correctness
        self.n_parallel = n_parallel
        self.address = address
        self.max_retries = int(max_retries)
        self.workers: dict[str, dict[str, Any]] = {}  # node id -> the last report from that node

    def run(self, measure_inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult],
            verbose: int = 1) -> list[MeasureResult]:
        if len(measure_inputs) != len(build_results):
            raise ValueError(f"RayRunner: {len(measure_inputs)} inputs but {len(build_results)} "
                             "build results")
        ray = init_ray(self.address)
        results: list[MeasureResult | None] = [None] * len(measure_inputs)
        jobs: list[tuple[dict[str, Any], Any]] = []
        where: list[int] = []
        config = measure._config()
        for i, (inp, build) in enumerate(zip(measure_inputs, build_results)):
            if build.error_no != MeasureErrorNo.NO_ERROR:
                results[i] = MeasureResult([MAX_FLOAT], build.error_no, build.error_msg,
                                           build.time_cost, int(time.time()))
                measure._progress(verbose, "*E")
                continue
            try:
                if isinstance(build, RayBuildResult):
                    library = build.library
                else:  # a library file (e.g. LocalBuilder's): its bytes travel, the file goes
                    library = ray.put(Path(build.filename).read_bytes())
                    measure._remove_build(build.filename)
            except OSError:
                results[i] = MeasureResult([MAX_FLOAT], MeasureErrorNo.COMPILE_DEVICE,
                                           traceback.format_exc(), build.time_cost, int(time.time()))
                measure._progress(verbose, "*E")
                continue
            tensors = list(build.args) or measure._task_tensors(inp)
            payload = {"filename": "", "sys_path": list(sys.path),
                       "specs": [(tuple(int(d) for d in t.shape), t.dtype) for t in tensors],
                       "n_inputs": sum(isinstance(t.op, PlaceholderOp) for t in tensors),
                       "number": int(self.number), "repeat": int(self.repeat),
                       "min_repeat_ms": float(self.min_repeat_ms),
                       "cooldown": float(self.cooldown_interval),
                       "flush": bool(self.enable_cpu_cache_flush), "check": bool(self.check_correctness),
                       "config": config, "workload_key": inp.task.workload_key,
                       "vector_bytes": measure._vector_bytes(inp.task),
                       "tensors": tensors if self.check_correctness else None}
            jobs.append((payload, library))
            where.append(i)
        remote = _remote(_ray_run, self.max_retries)

        def done(k: int, status: str, value: Any) -> None:
            i = where[k]
            build = build_results[i]
            worker: dict[str, Any] = {}
            seconds = 0.0
            if status == "ok":
                costs, error_no, msg, seconds, worker = value
                self.workers[worker.get("node", "")] = worker
            elif status == "timeout":
                costs, error_no = [MAX_FLOAT], MeasureErrorNo.RUN_TIMEOUT
                msg = f"the measurement took longer than {self.timeout} s and was cancelled"
            else:
                costs, error_no = [MAX_FLOAT], MeasureErrorNo.RUNTIME_DEVICE
                msg = _message(status, value, self.max_retries)
            res = MeasureResult(costs, error_no, msg, build.time_cost + seconds, int(time.time()))
            res.worker = worker  # type: ignore[attr-defined]
            results[i] = res
            measure._progress(verbose, "*" if error_no == 0 else ("*T" if error_no == 7 else "*E"))

        if jobs:
            n = self.n_parallel or _alive_nodes(ray)
            _run_all(ray, lambda k: remote.remote(*jobs[k]), len(jobs), n, self.timeout, done)
        if verbose >= 1:
            print("", flush=True)
        return [r for r in results if r is not None]

    def __repr__(self) -> str:
        return (f"RayRunner(timeout={self.timeout}, number={self.number}, repeat={self.repeat}, "
                f"min_repeat_ms={self.min_repeat_ms})")
