"""The two engines under test, set up the same way for every benchmark.

* onnxruntime: a CPU ``InferenceSession`` with ``intra_op_num_threads=T``,
  ``inter_op_num_threads=1``, sequential execution and every graph optimization on.
* Kiln: ``relay.frontend.from_onnx`` (or a relay module), ``relay.build`` at the given opt level
  and target, timed twice in a fresh compile cache (cold, then warm), and a
  ``graph_executor.GraphModule`` on the CPU with its thread count set explicitly.

One run of either engine takes the inputs, runs the graph and hands back every output as a
NumPy array, so neither side skips work the other does.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

import kiln
from kiln import relay
from kiln.codegen.compiler import cache_info
from kiln.config import settings
from kiln.contrib import graph_executor
from kiln.ir import IRModule
from kiln.runtime.factory import GraphExecutorFactoryModule

__all__ = ["KilnBuild", "KilnRunner", "OutputCheck", "build_kiln", "check_outputs", "compile_cache",
           "ort_runner", "ort_session", "warm_up_compiler"]

# Relative error (max |kiln - ort| / max |ort|) above which outputs are reported as wrong.
MISMATCH_REL = 1e-3


def ort_session(model: onnx.ModelProto, threads: int) -> ort.InferenceSession:
    """An onnxruntime CPU session on ``threads`` intra-op threads, optimizations on.

    Parameters
    ----------
    model : onnx.ModelProto
        The model.
    threads : int
        ``intra_op_num_threads`` (``inter_op_num_threads`` is 1, execution sequential).

    Returns
    -------
    onnxruntime.InferenceSession
        The session.
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def ort_runner(session: ort.InferenceSession, feeds: Mapping[str, np.ndarray],
               copy_io: bool = True) -> Callable[[], list[np.ndarray]]:
    """One onnxruntime run.

    Parameters
    ----------
    session : onnxruntime.InferenceSession
        The session.
    feeds : mapping of str to numpy.ndarray
        The inputs.
    copy_io : bool
        True: ``session.run`` with the inputs, returning fresh output arrays (what an
        application does). False: inputs and outputs bound once to fixed buffers
        (``run_with_iobinding``), so a run is the graph's execution alone.

    Returns
    -------
    callable
        One run; returns the outputs.
    """
    inputs = dict(feeds)
    if copy_io:
        return lambda: list(session.run(None, inputs))
    binding = session.io_binding()
    for name, value in inputs.items():
        binding.bind_cpu_input(name, np.ascontiguousarray(value))
    outputs = [np.empty_like(o) for o in session.run(None, inputs)]
    for info, out in zip(session.get_outputs(), outputs):
        binding.bind_output(info.name, "cpu", 0, out.dtype, out.shape, out.ctypes.data)

    def run() -> list[np.ndarray]:
        session.run_with_iobinding(binding)
        return outputs

    return run


@contextlib.contextmanager
def compile_cache(folder: Path | str) -> Iterator[Path]:
    """Point Kiln's compile cache (``settings.cache_dir``) at ``folder`` for a while."""
    previous = settings.cache_dir
    settings.cache_dir = Path(folder)
    try:
        yield Path(folder)
    finally:
        settings.cache_dir = previous


@dataclass
class KilnBuild:
    """A Kiln build and what it cost.

    Attributes
    ----------
    factory : GraphExecutorFactoryModule
        What ``relay.build`` returned (the cold build's).
    import_s : float
        Seconds in ``from_onnx`` (0 when a relay module was given).
    cold_s : float
        Seconds of ``relay.build`` with an empty compile cache.
    warm_s : float
        Seconds of the same build again, with the cache the cold build filled.
    kernels : int
        Operator nodes (kernel calls) in the built graph.
    cold_cc_runs, warm_cc_runs : int
        C compiler (and linker) runs during each build: the warm build should need none.
    """

    factory: GraphExecutorFactoryModule
    import_s: float
    cold_s: float
    warm_s: float
    kernels: int
    cold_cc_runs: int
    warm_cc_runs: int


def _build(mod: IRModule, params: Mapping[str, Any], target: str,
           opt_level: int) -> GraphExecutorFactoryModule:
    with kiln.transform.PassContext(opt_level=opt_level):
        return relay.build(mod, target=target, params=dict(params))


def warm_up_compiler(target: str = "c", opt_level: int = 3) -> None:
    """Build a one-op function once, in a throw-away cache.

    One-time costs of the process (lazy imports, compiler probes) then do not land in the first
    model's cold compile time.
    """
    x = relay.var("x", shape=(4,), dtype="float32")
    with tempfile.TemporaryDirectory(prefix="kiln-bench-cache-") as tmp, compile_cache(tmp):
        _build(IRModule.from_expr(relay.Function([x], relay.add(x, x))), {}, target, opt_level)


def build_kiln(model: onnx.ModelProto | IRModule, target: str = "c", opt_level: int = 3,
               params: Mapping[str, Any] | None = None) -> KilnBuild:
    """Import (when given ONNX) and build with Kiln, timing a cold and a warm compile.

    The cold build runs with ``settings.cache_dir`` pointed at a new, empty folder; the warm
    build repeats it with that folder as it was left. The folder is removed afterwards (the
    loaded library stays usable).

    Parameters
    ----------
    model : onnx.ModelProto or IRModule
        The model; ONNX is imported with ``freeze_params=False``, so its weights are bound by
        ``relay.build`` as a TVM script does.
    target : str
        Kiln's target (``"c"`` compiles C kernels).
    opt_level : int
        The ``PassContext`` opt level of both builds.
    params : mapping of str to array, optional
        Params of a relay module (ignored for ONNX, which brings its own).

    Returns
    -------
    KilnBuild
        The factory and the times.
    """
    import_s = 0.0
    if isinstance(model, onnx.ModelProto):
        start = time.perf_counter()
        mod, params = relay.frontend.from_onnx(model, freeze_params=False)
        import_s = time.perf_counter() - start
    else:
        mod = model
    with tempfile.TemporaryDirectory(prefix="kiln-bench-cache-") as tmp, compile_cache(tmp):
        runs = cache_info().compiler_runs
        start = time.perf_counter()
        factory = _build(mod, params or {}, target, opt_level)
        cold_s = time.perf_counter() - start
        cold_runs = cache_info().compiler_runs - runs
        start = time.perf_counter()
        _build(mod, params or {}, target, opt_level)
        warm_s = time.perf_counter() - start
        warm_runs = cache_info().compiler_runs - runs - cold_runs
    kernels = sum(1 for n in factory.graph.nodes if not n.is_input and n.func_name != "__nop")
    return KilnBuild(factory, import_s, cold_s, warm_s, kernels, cold_runs, warm_runs)


class KilnRunner:
    """One Kiln run per call.

    Parameters
    ----------
    build : KilnBuild
        The build to run.
    feeds : mapping of str to numpy.ndarray
        The inputs.
    threads : int
        Threads asked of the executor (``GraphModule.set_num_threads``).
    copy_io : bool
        True: every run sets the inputs and copies every output out (as ``ort_runner`` does).
        False: inputs are set once and a run is ``module.run()`` alone.

    Attributes
    ----------
    threads : int
        Threads the executor reports running on afterwards (1 for a library without
        threading, such as the ``numpy`` target's): benchmark lines print this one.
    """

    def __init__(self, build: KilnBuild, feeds: Mapping[str, np.ndarray], threads: int,
                 copy_io: bool = True):
        self.module = graph_executor.GraphModule(build.factory["default"](kiln.cpu()))
        self.module.set_num_threads(threads)
        self.threads = self.module.num_threads
        self.inputs = dict(feeds)
        self.copy_io = copy_io
        self.num_outputs = self.module.get_num_outputs()
        self.module.set_input(**self.inputs)

    def outputs(self) -> list[np.ndarray]:
        """Copies of the outputs of the last run."""
        return [np.array(self.module.get_output(i).numpy()) for i in range(self.num_outputs)]

    def __call__(self) -> list[np.ndarray] | None:
        if not self.copy_io:
            self.module.run()
            return None
        self.module.set_input(**self.inputs)
        self.module.run()
        return self.outputs()


@dataclass(frozen=True)
class OutputCheck:
    """How far Kiln's outputs are from onnxruntime's.

    Attributes
    ----------
    max_abs : float
        Largest absolute difference over every output.
    rel : float
        ``max_abs`` divided by the largest magnitude in onnxruntime's outputs.
    problem : str
        Empty when the outputs agree; otherwise what is wrong (shapes, NaNs, a large error).
    """

    max_abs: float
    rel: float
    problem: str

    @property
    def ok(self) -> bool:
        """Whether the outputs agree."""
        return not self.problem


def check_outputs(kiln_out: list[np.ndarray], ort_out: list[np.ndarray]) -> OutputCheck:
    """Compare Kiln's outputs with onnxruntime's (the oracle)."""
    if len(kiln_out) != len(ort_out):
        return OutputCheck(float("nan"), float("nan"),
                           f"{len(kiln_out)} outputs, onnxruntime has {len(ort_out)}")
    max_abs, scale = 0.0, 0.0
    for i, (k, o) in enumerate(zip(kiln_out, ort_out)):
        if k.shape != o.shape:
            return OutputCheck(float("nan"), float("nan"),
                               f"output {i} has shape {k.shape}, onnxruntime's {o.shape}")
        if not np.all(np.isfinite(k)):
            return OutputCheck(float("nan"), float("nan"), f"output {i} has NaN or Inf")
        max_abs = max(max_abs, float(np.max(np.abs(k.astype(np.float64) - o), initial=0.0)))
        scale = max(scale, float(np.max(np.abs(o), initial=0.0)))
    rel = max_abs / scale if scale else max_abs
    problem = f"relative error {rel:.2e} > {MISMATCH_REL:g}" if rel > MISMATCH_REL else ""
    return OutputCheck(max_abs, rel, problem)
