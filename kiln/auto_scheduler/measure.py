"""Measurement of schedule candidates: TVM's ``tvm.auto_scheduler.measure``.

The data types (:class:`MeasureErrorNo`, :class:`MeasureInput`, :class:`BuildResult`,
:class:`MeasureResult`) come first; the builder and runner (``LocalBuilder``, ``LocalRunner``,
``local_builder_build``, ``local_run``) follow.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln.auto_scheduler._worker import JobResult, function_ref, get_pool
from kiln.config import settings, usable_cpus
from kiln.te.tensor import PlaceholderOp

if TYPE_CHECKING:
    from kiln.auto_scheduler.search_task import SearchTask
    from kiln.te.loop_state import State

__all__ = [
    "MAX_FLOAT",
    "BuildResult",
    "LocalBuilder",
    "LocalRunner",
    "MeasureErrorNo",
    "MeasureInput",
    "MeasureResult",
    "ProgramBuilder",
    "ProgramRunner",
    "error_name",
    "local_builder_build",
    "local_run",
]


class MeasureErrorNo:
    """Error numbers of a measurement, as TVM records them in ``r[1]``."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1
    COMPILE_HOST = 2
    COMPILE_DEVICE = 3
    RUNTIME_DEVICE = 4
    WRONG_ANSWER = 5
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8


#: Names of the error numbers, indexed by number (TVM's ``ErrorNoToStr``).
ERROR_NAMES: tuple[str, ...] = (
    "NoError", "InstantiationError", "CompileHostError", "CompileDeviceError",
    "RuntimeDeviceError", "WrongAnswerError", "BuildTimeoutError", "RunTimeoutError",
    "UnknownError",
)


def error_name(error_no: int) -> str:
    """The name of an error number (``"UnknownError(<n>)"`` for numbers outside TVM's range)."""
    if 0 <= error_no < len(ERROR_NAMES):
        return ERROR_NAMES[error_no]
    return f"UnknownError({error_no})"


class MeasureInput:
    """A candidate to measure: a task and a state (the schedule as a list of steps).

    Parameters
    ----------
    task : SearchTask
        The task the state belongs to.
    state : kiln.te.loop_state.State
        The schedule; ``state.transform_steps`` are the steps a record stores.
    """

    def __init__(self, task: SearchTask, state: State):
        self.task = task
        self.state = state

    def __repr__(self) -> str:
        from kiln.auto_scheduler.measure_record import input_steps

        steps = len(input_steps(self))  # without replaying a record's steps
        return f"MeasureInput(workload_key={self.task.workload_key!r}, steps={steps})"


class BuildResult:
    """What building one candidate produced.

    Parameters
    ----------
    filename : str
        The built shared library ("" on error).
    args : sequence of tensors
        The function's arguments.
    error_no : int
        A :class:`MeasureErrorNo` value.
    error_msg : str
        The error's text ("" when there was none).
    time_cost : float
        Seconds the build took.
    """

    def __init__(self, filename: str, args: Sequence[Any], error_no: int, error_msg: str,
                 time_cost: float):
        self.filename = filename
        self.args = list(args)
        self.error_no = int(error_no)
        self.error_msg = error_msg or ""
        self.time_cost = float(time_cost)

    def __repr__(self) -> str:
        return (f"BuildResult(filename={self.filename!r}, error_no={self.error_no}, "
                f"time_cost={self.time_cost:.3g})")


class MeasureResult:
    """What measuring one candidate produced.

    Parameters
    ----------
    costs : sequence of float
        Seconds per run, one per repeat (``[1e10]`` on error).
    error_no : int
        A :class:`MeasureErrorNo` value.
    error_msg : str
        The error's text ("" when there was none); kept in the sidecar, never in the record.
    all_cost : float
        Wall seconds for build and run together.
    timestamp : float
        When the measurement finished (seconds since the epoch; records store it as an int).
    """

    def __init__(self, costs: Sequence[float], error_no: int, error_msg: str, all_cost: float,
                 timestamp: float):
        self.costs = [float(c) for c in costs]
        self.error_no = int(error_no)
        self.error_msg = error_msg or ""
        self.all_cost = float(all_cost)
        self.timestamp = timestamp

    def mean_cost(self) -> float:
        """The mean of :attr:`costs` (``1e10`` when there are none)."""
        return sum(self.costs) / len(self.costs) if self.costs else 1e10

    def __repr__(self) -> str:
        return (f"MeasureResult(costs={self.costs}, error_no={self.error_no}, "
                f"all_cost={self.all_cost:.3g}, timestamp={self.timestamp})")


# --- measurement: LocalBuilder / LocalRunner ---------------------------------------------------
#
# A candidate is built and run in worker processes (kiln.auto_scheduler._worker): a crash, a hang
# or a runaway compile costs a worker, never the tuning process. Building replays the state's
# steps on the task's DAG, lowers it to one kernel named ``default_function`` and compiles that
# kernel alone, linked against Kiln's runtime library (compiled once; see
# kiln.codegen.standalone), into a fresh temporary folder; running loads the library in the
# runner's worker, fills the arguments with random data and times the kernel as TVM's
# ``time_evaluator`` does. The runner removes the folder once the candidate is measured.


#: The cost recorded for a candidate that failed (TVM writes ``[1e10]``).
MAX_FLOAT = 1e10
#: The kernel's symbol in a candidate library (TVM's default function name).
KERNEL_NAME = "default_function"
# what a cuda task's build writes: the CUDA library's container payload
_CUDA_SUFFIX = ".cuda"
_FOLDER_PREFIX = "kiln-measure-"
_PRELOAD = ("kiln.auto_scheduler.measure", "kiln.codegen.standalone", "kiln.te.lower")

BuildFuncType = Callable[[str, list[str], "list[str] | None"], Any]


class ProgramBuilder(ABC):
    """Base class of builders: :meth:`build` turns measure inputs into build results."""

    timeout: float = 15
    n_parallel: int = 1

    @abstractmethod
    def build(self, measure_inputs: Sequence[MeasureInput], verbose: int = 1) -> list[BuildResult]:
        """Build programs and return results (one per input, in order).

        Parameters
        ----------
        measure_inputs : list of MeasureInput
            The candidates.
        verbose : int
            1 prints a ``.`` per built candidate (``.E`` error, ``.T`` timeout).
        """


class ProgramRunner(ABC):
    """Base class of runners: :meth:`run` measures built programs."""

    @abstractmethod
    def run(self, measure_inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult],
            verbose: int = 1) -> list[MeasureResult]:
        """Measure programs and return results (one per input, in order).

        Parameters
        ----------
        measure_inputs : list of MeasureInput
            The candidates.
        build_results : list of BuildResult
            What the builder made of them.
        verbose : int
            1 prints a ``*`` per measured candidate (``*E`` error, ``*T`` timeout).
        """


def _check_build_func(build_func: str | BuildFuncType) -> str | None:
    """``None`` for the default, else the reference a worker resolves the callable by."""
    if build_func == "default":
        return None
    if isinstance(build_func, str):
        raise ValueError(f"build_func {build_func!r} is not known: Kiln builds shared libraries "
                         "('default') or calls a function build_func(output, sources, options)")
    if not callable(build_func):
        raise ValueError(f"build_func must be 'default' or a callable, got {build_func!r}")
    ref = function_ref(build_func)
    if "<" in ref or ref.startswith("__main__:"):
        raise ValueError(f"build_func {ref} must be a module-level function of an importable "
                         "module: it runs in worker processes, which import it by name")
    return ref


class LocalBuilder(ProgramBuilder):
    """Builds candidates in parallel worker processes on this machine.

    Parameters
    ----------
    timeout : float
        Seconds one candidate's build may take, counted from when a worker starts it.
    n_parallel : int, optional
        Builds at once; default: the CPUs this process may use
        (:func:`kiln.config.usable_cpus`: affinity mask and cgroup quota, not the host's count).
    build_func : str or callable
        ``"default"``: compile the kernel into a shared library. A module-level callable
        ``build_func(output, sources, options)`` (TVM's ``create_shared`` signature) replaces
        the compile step; it runs in the workers and may wrap
        :func:`kiln.codegen.standalone.compile_kernel`.

    Examples
    --------
    >>> builder = LocalBuilder(timeout=15)
    >>> build_results = builder.build(inputs)  # doctest: +SKIP
    """

    def __init__(self, timeout: float = 15, n_parallel: int | None = None,
                 build_func: str | BuildFuncType = "default"):
        _check_build_func(build_func)
        self.timeout = timeout
        self.n_parallel = int(n_parallel) if n_parallel else usable_cpus()
        self.build_func = build_func

    def build(self, measure_inputs: Sequence[MeasureInput], verbose: int = 1) -> list[BuildResult]:
        return local_builder_build(measure_inputs, self.timeout, self.n_parallel,
                                   self.build_func, verbose)

    def __repr__(self) -> str:
        return f"LocalBuilder(timeout={self.timeout}, n_parallel={self.n_parallel})"


class LocalRunner(ProgramRunner):
    """Measures built candidates one after another in a worker process on this machine.

    Parameters
    ----------
    timeout : float
        Seconds one candidate's measurement may take (loading, checking, timing).
    number : int
        Runs per measurement (TVM's ``number``; grown to fill ``min_repeat_ms``).
    repeat : int
        Measurements; ``costs`` has one entry (seconds per run) for each.
    min_repeat_ms : float
        Minimum duration of one measurement, in milliseconds.
    cooldown_interval : float
        Seconds to pause after each candidate.
    enable_cpu_cache_flush : bool
        Evict the arguments from the CPU caches before every run (sets ``number`` to 1 and
        ``min_repeat_ms`` to 0, as TVM does).
    check_correctness : bool
        Kiln's addition: compare every candidate's outputs with those of the task's unscheduled
        computation on the same inputs; a mismatch is error 5 (``WRONG_ANSWER``).
    """

    def __init__(self, timeout: float = 10, number: int = 3, repeat: int = 1,
                 min_repeat_ms: float = 100, cooldown_interval: float = 0.0,
                 enable_cpu_cache_flush: bool = False, check_correctness: bool = False):
        if enable_cpu_cache_flush:
            number, min_repeat_ms = 1, 0
        self.timeout = timeout
        self.number = number
        self.repeat = repeat
        self.min_repeat_ms = min_repeat_ms
        self.cooldown_interval = cooldown_interval
        self.enable_cpu_cache_flush = enable_cpu_cache_flush
        self.check_correctness = check_correctness

    def run(self, measure_inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult],
            verbose: int = 1) -> list[MeasureResult]:
        return local_run(measure_inputs, build_results, self.timeout, self.number, self.repeat,
                         self.min_repeat_ms, self.cooldown_interval, self.enable_cpu_cache_flush,
                         verbose, check_correctness=self.check_correctness)

    def __repr__(self) -> str:
        return (f"LocalRunner(timeout={self.timeout}, number={self.number}, repeat={self.repeat}, "
                f"min_repeat_ms={self.min_repeat_ms})")


# --- what the workers need -----------------------------------------------------------------

def _config() -> dict[str, Any]:
    return {"cc": settings.cc, "cache_dir": str(settings.cache_dir),
            "num_threads": settings.num_threads}


def _apply_config(config: dict[str, Any]) -> None:
    settings.cc = config["cc"]
    settings.cache_dir = Path(config["cache_dir"])
    settings.num_threads = config["num_threads"]


def _vector_bytes(task: Any) -> int:
    """Vector register bytes of the task's target (this machine's when it does not say)."""
    try:
        return int(task.target.vector_width("int8"))
    except Exception:  # a target without a CPU vector width: this machine's
        from kiln.target import native_vector_bytes

        return native_vector_bytes()


def _isa_flags(task: Any) -> list[str]:
    """Instruction-set compiler flags of the task's target (none: this machine's)."""
    try:
        return list(task.target.isa().flags)
    except Exception:  # a target without an instruction set: this machine's
        return []


def _cuda_arch(task: Any) -> str | None:
    """For a cuda task: its ``-arch`` (``""``: the GPU's, found where the build runs); else None."""
    target = getattr(task, "target", None)
    if target is None or not getattr(target, "is_cuda", False):
        return None
    return str(target.arch)


def _input_steps(inp: MeasureInput) -> list[Any]:
    from kiln.auto_scheduler.measure_record import input_steps

    return input_steps(inp)


def _task_tensors(inp: MeasureInput) -> list[Any]:
    task = inp.task
    require = getattr(task, "require_dag", None)
    dag = require() if require is not None else task.compute_dag
    assert dag is not None, "a task without require_dag() carries its compute DAG"
    return list(dag.tensors)


def _build_job(payload: dict[str, Any]) -> tuple[str, int, str, float]:
    """In a builder worker: replay, lower, generate and compile one candidate."""
    from kiln.codegen import standalone
    from kiln.te.dag import ComputeDAG
    from kiln.te.lower import lower
    from kiln.te.steps import parse_step

    tic = time.time()
    _apply_config(payload["config"])
    try:
        dag = ComputeDAG(payload["tensors"])
        steps = [parse_step(r) for r in payload["steps"]]
        sch = dag.apply_steps(steps)
    except Exception:
        return "", MeasureErrorNo.INSTANTIATION_ERROR, traceback.format_exc(), time.time() - tic
    folder = payload["folder"]
    try:
        func = lower(sch, args=dag.tensors, name=KERNEL_NAME)
        if payload.get("cuda_arch") is not None:  # a GPU task: the CUDA library's payload
            return _build_cuda(func, payload["cuda_arch"], folder), MeasureErrorNo.NO_ERROR, \
                "", time.time() - tic
        src = Path(folder) / f"{KERNEL_NAME}.c"
        src.write_text(standalone.kernel_source(func, payload["vector_bytes"]))
        output = str(Path(folder) / f"{KERNEL_NAME}.so")
        if payload["build_func"] is None:
            standalone.compile_kernel([src], output, payload.get("isa_flags"))
        else:
            from kiln.auto_scheduler._worker import resolve

            resolve(payload["build_func"])(output, [str(src)], None)
        if not Path(output).is_file():
            raise FileNotFoundError(f"the build function wrote no library at {output}")
    except Exception:
        return "", MeasureErrorNo.COMPILE_HOST, traceback.format_exc(), time.time() - tic
    return output, MeasureErrorNo.NO_ERROR, "", time.time() - tic


def _build_cuda(func: Any, arch: str, folder: str) -> str:
    """A candidate's CUDA kernels compiled for ``arch`` (GPU 0's when empty), written as a
    ``cuda`` library payload; returns its path."""
    from kiln.codegen.cuda import cuda_arch, cuda_library
    from kiln.runtime.cuda_library import save_cuda_library
    from kiln.target import Target

    lib = cuda_library([func], arch or cuda_arch(Target("cuda")))
    output = Path(folder) / f"{KERNEL_NAME}{_CUDA_SUFFIX}"
    output.write_bytes(save_cuda_library(lib))
    return str(output)


def local_builder_build(inputs: Sequence[MeasureInput], timeout: float,
                        n_parallel: int | None = None, build_func: str | BuildFuncType = "default",
                        verbose: int = 1) -> list[BuildResult]:
    """Build candidates in worker processes (TVM's ``local_builder_build``).

    Parameters
    ----------
    inputs : list of MeasureInput
        The candidates.
    timeout : float
        Seconds each build may take from when a worker starts it; a build that takes longer is
        stopped (its worker and compiler are killed) and recorded as error 6.
    n_parallel : int, optional
        Builds at once (default: the CPUs this process may use).
    build_func : str or callable
        See :class:`LocalBuilder`.
    verbose : int
        1 prints ``.`` per candidate (``.E`` error, ``.T`` timeout).

    Returns
    -------
    list of BuildResult
        One per input, in order: the library's path, or the error number and message.
    """
    ref = _check_build_func(build_func)
    n = int(n_parallel) if n_parallel else usable_cpus()
    results: list[BuildResult | None] = [None] * len(inputs)
    jobs: list[tuple[Any, ...]] = []
    where: list[int] = []
    config = _config()
    for i, inp in enumerate(inputs):
        try:
            payload = {"tensors": _task_tensors(inp),
                       "steps": [s.to_record() for s in _input_steps(inp)],
                       "config": config, "vector_bytes": _vector_bytes(inp.task),
                       "isa_flags": _isa_flags(inp.task), "build_func": ref, "folder": "",
                       "cuda_arch": _cuda_arch(inp.task)}
        except Exception:  # no DAG for the workload, or steps that cannot be written
            results[i] = BuildResult("", [], MeasureErrorNo.INSTANTIATION_ERROR,
                                     traceback.format_exc(), 0.0)
            _progress(verbose, ".E")
            continue
        # made here, so that it is removed here too when the build fails or is stopped
        payload["folder"] = tempfile.mkdtemp(prefix=_FOLDER_PREFIX)
        jobs.append((payload,))
        where.append(i)

    def done(k: int, job: JobResult) -> None:
        i = where[k]
        if job.status != "ok" or job.value[1] != MeasureErrorNo.NO_ERROR:
            shutil.rmtree(jobs[k][0]["folder"], ignore_errors=True)
        if job.status == "ok":
            filename, error_no, error_msg, seconds = job.value
            args = _task_tensors(inputs[i]) if error_no == 0 else []
            results[i] = BuildResult(filename, args, error_no, error_msg, seconds)
            _progress(verbose, "." if error_no == 0 else ".E")
        elif job.status == "timeout":
            results[i] = BuildResult("", [], MeasureErrorNo.BUILD_TIMEOUT,
                                     f"the build took longer than {timeout} s and was stopped",
                                     timeout)
            _progress(verbose, ".T")
        else:
            results[i] = BuildResult("", [], MeasureErrorNo.COMPILE_HOST,
                                     _job_message(job), job.seconds)
            _progress(verbose, ".E")

    if jobs:
        get_pool("build", n, _PRELOAD).map(function_ref(_build_job), jobs, timeout, done)
    return [r for r in results if r is not None]


def _job_message(job: JobResult) -> str:
    if job.status == "died":
        return f"{job.value}"
    return str(job.value)


def _progress(verbose: int, text: str) -> None:
    if verbose >= 1:
        print(text, end="", flush=True)


# --- running -----------------------------------------------------------------------------------

_reference_cache: dict[str, list[Any]] = {}


def _random_arrays(specs: Sequence[tuple[tuple[int, ...], str]]) -> list[Any]:
    """Arguments filled as TVM's ``random_fill`` does (uniform floats, small integers)."""
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = []
    for shape, dtype in specs:
        if dtype.startswith("float"):
            a = rng.uniform(-1.0, 1.0, shape).astype(dtype)
        elif dtype == "bool":
            a = rng.integers(0, 2, shape).astype(bool)
        else:
            a = rng.integers(0, 8, shape).astype(dtype)
        arrays.append(np.ascontiguousarray(a))
    return arrays


def _reference_outputs(payload: dict[str, Any], arrays: list[Any]) -> list[Any]:
    """Outputs of the task's unscheduled computation on ``arrays`` (cached per workload)."""
    import numpy as np

    from kiln.codegen.c_codegen import CCodegen
    from kiln.codegen.native import compile_module
    from kiln.runtime.native import NativeLibrary
    from kiln.te.dag import ComputeDAG
    from kiln.te.lower import lower

    key = payload["workload_key"]
    if key not in _reference_cache:
        dag = ComputeDAG(payload["tensors"])
        func = lower(dag, [], name="kiln_reference_kernel")
        so = compile_module(CCodegen(payload["vector_bytes"]).module([func]), "reference")
        ref_arrays = [a.copy() for a in arrays]
        kernel = NativeLibrary(so).kernel(func.name)
        assert kernel is not None  # the library is built from this one function
        kernel(*ref_arrays)
        n_in = payload["n_inputs"]
        _reference_cache[key] = [np.array(a) for a in ref_arrays[n_in:]]
    return _reference_cache[key]


def _compare(got: Sequence[Any], want: Sequence[Any]) -> str:
    """"" when the outputs agree, else what differs."""
    import numpy as np

    for k, (g, w) in enumerate(zip(got, want)):
        if g.dtype.kind == "f":
            scale = float(np.max(np.abs(w))) if w.size else 0.0
            ok = np.allclose(g, w, rtol=1e-3, atol=1e-4 * max(scale, 1.0), equal_nan=True)
        else:
            ok = np.array_equal(g, w)
        if not ok:
            diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
            where = np.unravel_index(int(np.nanargmax(np.where(np.isnan(diff), np.inf, diff))),
                                     g.shape) if g.size else ()
            return (f"output {k} differs from the unscheduled computation's: largest difference "
                    f"at {tuple(int(x) for x in where)}: got {g[where]}, expected {w[where]}")
    return ""


def _flush_caches(buffer: Any) -> None:
    buffer += 1  # touch more memory than the caches hold


_pinned: list[Any] = []


def _pin_runtime() -> None:
    """Keep Kiln's runtime library loaded for good: its pool threads outlive any candidate."""
    import ctypes

    from kiln.codegen.standalone import runtime_library

    if not _pinned:
        _pinned.append(ctypes.CDLL(str(runtime_library()), mode=os.RTLD_LOCAL | os.RTLD_NOW))


def _run_job(payload: dict[str, Any]) -> tuple[list[float], int, str]:
    """In the runner worker: load one candidate, optionally check it, time it."""
    import _ctypes
    import ctypes

    import numpy as np

    from kiln.runtime.profiling import time_function

    _apply_config(payload["config"])
    if payload["filename"].endswith(_CUDA_SUFFIX):
        return _run_cuda_job(payload)
    try:
        _pin_runtime()
        lib = ctypes.CDLL(payload["filename"], mode=os.RTLD_LOCAL | os.RTLD_NOW)
        kernel = getattr(lib, KERNEL_NAME)
    except (OSError, AttributeError):
        return [MAX_FLOAT], MeasureErrorNo.COMPILE_DEVICE, traceback.format_exc()
    try:
        kernel.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        kernel.restype = ctypes.c_int32
        with_threads = getattr(lib, "kiln_set_num_threads", None)
        if with_threads is not None:
            with_threads.argtypes = [ctypes.c_int32]
            with_threads.restype = None
            with_threads(int(payload["config"]["num_threads"]))
        arrays = _random_arrays(payload["specs"])
        argv = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])

        def call() -> None:
            rc = kernel(argv)
            if rc != 0:
                raise RuntimeError(f"the kernel returned {rc}")

        if payload["check"]:
            want = _reference_outputs(payload, arrays)
            outs = arrays[payload["n_inputs"]:]
            for o in outs:
                o.fill(np.nan if o.dtype.kind == "f" else 0)
            call()
            mismatch = _compare(outs, want)
            if mismatch:
                return [MAX_FLOAT], MeasureErrorNo.WRONG_ANSWER, mismatch
        if payload["flush"]:
            flush = np.zeros(1 << 24, dtype=np.float32)  # 64 MiB
            call()
            costs = []
            for _ in range(payload["repeat"]):
                _flush_caches(flush)
                start = time.perf_counter()
                call()
                costs.append(time.perf_counter() - start)
        else:
            costs = time_function(call, repeat=payload["repeat"], number=payload["number"],
                                  min_repeat_ms=payload["min_repeat_ms"]).results
    except Exception:
        return [MAX_FLOAT], MeasureErrorNo.RUNTIME_DEVICE, traceback.format_exc()
    finally:
        handle = getattr(lib, "_handle", None)
        del lib
        if handle:
            _ctypes.dlclose(handle)
    if payload["cooldown"] > 0:
        time.sleep(payload["cooldown"])
    return [float(c) for c in costs], MeasureErrorNo.NO_ERROR, ""


def _run_cuda_job(payload: dict[str, Any]) -> tuple[list[float], int, str]:
    """In the runner worker: load a cuda candidate on GPU 0, optionally check it, time it with
    CUDA events (``number`` launches per measurement)."""
    import numpy as np

    from kiln.runtime.cuda_driver import DeviceBuffer, DeviceView, time_launches
    from kiln.runtime.cuda_library import load_cuda_library

    try:
        lib = load_cuda_library(Path(payload["filename"]).read_bytes(), payload["filename"])
        kernel = lib.kernel(KERNEL_NAME)
        if kernel is None:
            raise KeyError(f"{payload['filename']} has no function {KERNEL_NAME}")
        arrays = _random_arrays(payload["specs"])
        for out in arrays[payload["n_inputs"]:]:
            out.fill(np.nan if out.dtype.kind == "f" else 0)
        views = [DeviceView(DeviceBuffer(a.nbytes), a.shape, a.dtype) for a in arrays]
        for view, a in zip(views, arrays):
            view.copy_from(a)
        call, stream = kernel.bind(views), lib.stream(0)
    except Exception:
        return [MAX_FLOAT], MeasureErrorNo.COMPILE_DEVICE, traceback.format_exc()
    try:
        if payload["check"]:
            want = _reference_outputs(payload, arrays)
            call()
            stream.synchronize()
            mismatch = _compare([v.numpy() for v in views[payload["n_inputs"]:]], want)
            if mismatch:
                return [MAX_FLOAT], MeasureErrorNo.WRONG_ANSWER, mismatch
        costs = time_launches(call, stream, payload["number"], payload["repeat"],
                              payload["min_repeat_ms"])
    except Exception:
        return [MAX_FLOAT], MeasureErrorNo.RUNTIME_DEVICE, traceback.format_exc()
    if payload["cooldown"] > 0:
        time.sleep(payload["cooldown"])
    return [float(c) for c in costs], MeasureErrorNo.NO_ERROR, ""


def _remove_build(filename: str) -> None:
    folder = Path(filename).parent
    if filename and folder.name.startswith(_FOLDER_PREFIX):
        shutil.rmtree(folder, ignore_errors=True)


def local_run(inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult],
              timeout: float = 10, number: int = 3, repeat: int = 1, min_repeat_ms: float = 0,
              cooldown_interval: float = 0, enable_cpu_cache_flush: bool = False,
              verbose: int = 1, *, check_correctness: bool = False) -> list[MeasureResult]:
    """Measure built candidates in a worker process (TVM's ``local_run``).

    Candidates run one after another in one worker (so they do not disturb each other's
    timings); a candidate that crashes the worker is error 4 (``RUNTIME_DEVICE``), one that runs
    longer than ``timeout`` is error 7 (``RUN_TIMEOUT``); either way the worker is replaced and
    the next candidate measured.

    Parameters
    ----------
    inputs : list of MeasureInput
        The candidates.
    build_results : list of BuildResult
        Their builds (a failed build gives its error without running).
    timeout : float
        Seconds one candidate's measurement may take.
    number, repeat, min_repeat_ms : int, int, float
        As TVM's ``time_evaluator``: ``repeat`` measurements of ``number`` runs, ``number``
        grown until one measurement lasts ``min_repeat_ms``; one warm-up run first.
    cooldown_interval : float
        Seconds to pause after each candidate.
    enable_cpu_cache_flush : bool
        Evict the caches before every run (one run per measurement).
    verbose : int
        1 prints ``*`` per candidate (``*E`` error, ``*T`` timeout) and a newline at the end.
    check_correctness : bool
        Compare outputs with the unscheduled computation's (error 5 on a mismatch).

    Returns
    -------
    list of MeasureResult
        One per input: seconds per run in ``costs``, build + run wall seconds in ``all_cost``,
        an integer ``timestamp``.
    """
    if len(inputs) != len(build_results):
        raise ValueError(f"local_run: {len(inputs)} inputs but {len(build_results)} build "
                         "results")
    if enable_cpu_cache_flush:
        number, min_repeat_ms = 1, 0
    results: list[MeasureResult | None] = [None] * len(inputs)
    jobs: list[tuple[Any, ...]] = []
    where: list[int] = []
    config = _config()
    for i, (inp, build) in enumerate(zip(inputs, build_results)):
        if build.error_no != MeasureErrorNo.NO_ERROR:
            results[i] = MeasureResult([MAX_FLOAT], build.error_no, build.error_msg,
                                       build.time_cost, int(time.time()))
            _progress(verbose, "*E")
            continue
        tensors = list(build.args) or _task_tensors(inp)
        payload = {"filename": build.filename,
                   "specs": [(tuple(int(d) for d in t.shape), t.dtype) for t in tensors],
                   "n_inputs": sum(isinstance(t.op, PlaceholderOp) for t in tensors),
                   "number": int(number), "repeat": int(repeat),
                   "min_repeat_ms": float(min_repeat_ms), "cooldown": float(cooldown_interval),
                   "flush": bool(enable_cpu_cache_flush), "check": bool(check_correctness),
                   "config": config, "workload_key": inp.task.workload_key,
                   "vector_bytes": _vector_bytes(inp.task),
                   "tensors": tensors if check_correctness else None}
        jobs.append((payload,))
        where.append(i)

    def done(k: int, job: JobResult) -> None:
        i = where[k]
        build = build_results[i]
        if job.status == "ok":
            costs, error_no, error_msg = job.value
        elif job.status == "timeout":
            costs, error_no = [MAX_FLOAT], MeasureErrorNo.RUN_TIMEOUT
            error_msg = f"the measurement took longer than {timeout} s and was stopped"
        else:
            costs, error_no, error_msg = [MAX_FLOAT], MeasureErrorNo.RUNTIME_DEVICE, \
                _job_message(job)
        results[i] = MeasureResult(costs, error_no, error_msg, build.time_cost + job.seconds,
                                   int(time.time()))
        _remove_build(build.filename)
        _progress(verbose, "*" if error_no == 0 else ("*T" if error_no == 7 else "*E"))

    if jobs:
        get_pool("run", 1, _PRELOAD).map(function_ref(_run_job), jobs, timeout, done)
    if verbose >= 1:
        print("", flush=True)
    return [r for r in results if r is not None]

