"""``kiln.build``: one scheduled computation to a callable kernel (TVM's ``tvm.build``).

Seed 004's replay flow ends here: steps from a tuning record give a schedule
(``dag.apply_steps_from_state(state)`` or ``task.apply_best(log)``), and ``kiln.build`` lowers
it, generates C and compiles a self-contained shared library (in the compile cache) whose
function runs in place on NDArrays::

    sch, args = task.apply_best("matmul.json")
    mod = kiln.build(sch, args, target="llvm")
    mod(a, b, c)                      # or mod["default_function"](a, b, c)
    timer = mod.time_evaluator(mod.entry_name, kiln.cpu(), number=10)
    print(timer(a, b, c).mean)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kiln.errors import CompileError
from kiln.runtime.cuda_library import CudaFunctionModule
from kiln.runtime.module import Kernel
from kiln.runtime.native import NativeLibrary
from kiln.runtime.profiling import BenchmarkResult, time_function

__all__ = ["BuiltModule", "build"]


class BuiltModule(NativeLibrary):
    """The library :func:`build` returns: one kernel, callable directly.

    Attributes
    ----------
    entry_name : str
        The kernel's name (``mod[entry_name]`` is the kernel).
    """

    type_key = "c"

    def __init__(self, path: str | Path, entry_name: str, sources: Sequence[str | Path],
                 signature: Any):
        super().__init__(path, sources=sources, signatures={entry_name: signature})
        self.entry_name = entry_name

    @property
    def entry_func(self) -> Callable[..., None]:
        """The kernel: call it with the arguments (inputs, then outputs) as NDArrays."""
        kernel = self.kernel(self.entry_name)
        if kernel is None:  # the library was built with this symbol
            raise CompileError(f"{self.path} does not export {self.entry_name}")
        return kernel

    def __call__(self, *args: Any) -> None:
        """Run the kernel on ``args`` (NDArrays or NumPy arrays; outputs written in place)."""
        self.entry_func(*args)

    def get_source(self, fmt: str = "c") -> str:
        """The C source the library was compiled from."""
        return "".join(Path(s).read_text() for s in self.sources if Path(s).suffix == ".c")

    def time_evaluator(self, func_name: str, dev: Any = None, number: int = 10, repeat: int = 1,
                       min_repeat_ms: float = 0, limit_zero_time_iterations: int = 100,
                       cooldown_interval_ms: float = 0, repeats_to_cooldown: int = 1,
                       f_preproc: str = "") -> Callable[..., BenchmarkResult]:
        """A function timing ``func_name`` on given arguments, as TVM's ``time_evaluator``.

        Parameters
        ----------
        func_name : str
            The kernel (``mod.entry_name``).
        dev : Device
            The CPU.
        number, repeat, min_repeat_ms : int, int, float
            ``repeat`` measurements of ``number`` runs each (``number`` grows until one
            measurement lasts ``min_repeat_ms``), after one warm-up run.
        limit_zero_time_iterations, cooldown_interval_ms, repeats_to_cooldown
            As TVM.
        f_preproc : str
            Accepted for TVM's signature (no preprocessing function exists in Kiln).

        Returns
        -------
        callable
            ``f(*args) -> BenchmarkResult`` (``.mean``, ``.results`` in seconds per run).
        """
        kernel = self.get_function(func_name)
        assert isinstance(kernel, Kernel)  # a native library's functions are its kernels

        def evaluator(*args: Any) -> BenchmarkResult:
            from kiln.runtime.module import _as_array

            arrays = [_as_array(a, func_name, i) for i, a in enumerate(args)]
            call = kernel.bind(arrays)
            return time_function(call, repeat=repeat, number=number, min_repeat_ms=min_repeat_ms,
                                 limit_zero_time_iterations=limit_zero_time_iterations,
                                 cooldown_interval_ms=cooldown_interval_ms,
                                 repeats_to_cooldown=repeats_to_cooldown,
                                 num_threads=self.num_threads)

        return evaluator


def _target(target: Any) -> Any:
    from kiln.target import Target, TargetError

    if target is None:
        target = "c"
    tgt = target if isinstance(target, Target) else Target(str(target))
    if not (tgt.is_native or tgt.is_cuda):
        raise TargetError(f"kiln.build compiles C for this CPU or CUDA for a GPU; target {tgt} is "
                          "neither a C/LLVM nor a cuda target")
    return tgt


def build(inputs: Any, args: Sequence[Any] | None = None, target: Any = None,
          target_host: Any = None, name: str = "default_function",
          binds: Any = None) -> BuiltModule | CudaFunctionModule:
    """Compile a schedule (or a lowered function) into a callable module (TVM's ``tvm.build``).

    Parameters
    ----------
    inputs : Schedule or PrimFunc
        A :class:`kiln.te.Schedule` (from ``dag.apply_steps_from_state(state)``,
        ``task.apply_best(log)``, ...) or what :func:`kiln.te.lower` returned.
    args : list of Tensor
        For a schedule: the kernel's tensors, inputs then outputs (the order of the call).
    target : str or Target, optional
        ``"c"`` or ``"llvm ..."`` (default ``"c"``): C compiled for this CPU; ``"cuda"``
        (``-arch=sm_90``; default: GPU 0's): CUDA kernels, called with NDArrays on
        ``kiln.cuda()``.
    target_host : str or Target, optional
        Accepted for TVM's signature (CPU targets are their own host).
    name : str
        The kernel's name (for a schedule).
    binds : optional
        Not supported (buffers are always dense); must be None.

    Returns
    -------
    BuiltModule or CudaFunctionModule
        ``mod(*arrays)``, ``mod[name](*arrays)``, ``mod.time_evaluator`` (a cuda build: on GPU
        NDArrays, timed with CUDA events).

    Raises
    ------
    CompileError
        The schedule cannot be lowered or the C does not compile.

    Examples
    --------
    >>> sch, args = dag.apply_steps_from_state(state)  # doctest: +SKIP
    >>> mod = kiln.build(sch, args, target="llvm")  # doctest: +SKIP
    >>> mod(a, b, c)  # doctest: +SKIP
    """
    from kiln.codegen.c_codegen import CCodegen
    from kiln.codegen.native import compile_module, runtime_object, target_compile_flags
    from kiln.te.loop_ir import PrimFunc
    from kiln.te.lower import lower
    from kiln.te.schedule import Schedule

    if binds is not None:
        raise CompileError("kiln.build: binds= is not supported (kernel buffers are dense)")
    tgt = _target(target)
    if isinstance(inputs, PrimFunc):
        func = inputs
    elif isinstance(inputs, Schedule):
        if args is None:
            raise CompileError("kiln.build(schedule, args): args (the kernel's tensors, inputs "
                               "then outputs) are required")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or name.startswith("kiln_"):
            raise CompileError(f"kiln.build: kernel name {name!r} is not a C identifier free for "
                               "a kernel")
        func = lower(inputs, args=list(args), name=name)
    else:
        raise CompileError(f"kiln.build takes a Schedule (with args) or a lowered PrimFunc, not "
                           f"{type(inputs).__name__}")
    if tgt.is_cuda:
        from kiln.codegen.cuda import cuda_arch, cuda_library

        return CudaFunctionModule(cuda_library([func], cuda_arch(tgt)), func.name)
    source = CCodegen(tgt.vector_width("int8")).module([func])
    flags = target_compile_flags(tgt)
    so = compile_module(source, func.name, flags=flags)
    signature = tuple((tuple(b.shape), b.dtype) for b in func.params)
    return BuiltModule(so, func.name, [so.with_suffix(".c"), runtime_object(flags).with_suffix(".c")],
                       signature)
