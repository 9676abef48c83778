"""``build_cuda``: fused relay functions to one :class:`~kiln.runtime.cuda_library.CudaLibrary`.

Each fused function becomes a tensor-expression DAG (as for the C backend:
:func:`~kiln.codegen.native.function_to_dag`), is scheduled (a tuned schedule when
``schedule_lookup`` has one, else :func:`~kiln.te.gpu_schedule.gpu_schedule`), lowered to loop IR
and printed as CUDA kernels by :class:`~kiln.codegen.cuda_codegen.CudaCodegen`; the whole module
is one translation unit compiled by :func:`~kiln.codegen.cuda_compiler.compile_cuda`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiln import progress
from kiln.codegen.cuda_codegen import CudaCodegen
from kiln.codegen.cuda_compiler import compile_cuda
from kiln.codegen.native import ScheduleLookup, lower_fused
from kiln.errors import CompileError
from kiln.ir.expr import Function
from kiln.runtime.cuda_driver import CudaError, cuda
from kiln.runtime.cuda_library import CudaLibrary
from kiln.target import Target
from kiln.te.gpu_schedule import gpu_schedule
from kiln.te.loop_ir import PrimFunc

__all__ = ["build_cuda", "cuda_arch", "cuda_library", "lower_cuda_function"]


def cuda_arch(target: Target) -> str:
    """The architecture to compile for: the target's ``-arch``, else GPU 0's."""
    if target.arch:
        return target.arch
    try:
        return cuda(0).arch
    except CudaError as e:
        raise CompileError(f"target {target}: no -arch given and no GPU to take it from ({e}); "
                           "name the GPU, e.g. target='cuda -arch=sm_90'") from None


def lower_cuda_function(name: str, func: Function,
                        schedule_lookup: ScheduleLookup | None = None) -> PrimFunc:
    """The loop IR of one fused function for the GPU (tuned schedule if found, else the default
    GPU schedule, :func:`~kiln.codegen.native.lower_fused`)."""
    return lower_fused(name, func, gpu_schedule, schedule_lookup)


def build_cuda(functions: Mapping[str, Function], target: Any = "cuda", *,
               schedule_lookup: ScheduleLookup | None = None) -> CudaLibrary:
    """Compile fused functions into a :class:`~kiln.runtime.cuda_library.CudaLibrary`.

    Parameters
    ----------
    functions : mapping of str to Function
        Kernel name (graph JSON ``func_name``) to fused primitive function.
    target : Target or str
        A cuda target; ``-arch`` picks the GPU architecture (default: GPU 0's).
    schedule_lookup : callable, optional
        ``schedule_lookup(dag, func_name) -> State | list[Step] | None`` (a tuning log).
    """
    tgt = Target(target)
    if not tgt.is_cuda:
        raise CompileError(f"build_cuda: target {tgt} is not a cuda target")
    arch = cuda_arch(tgt)
    prims: list[PrimFunc] = []
    with progress.stage("lowering", total=len(functions), unit="distinct kernels") as st:
        for name, fn in functions.items():
            prims.append(lower_cuda_function(name, fn, schedule_lookup))
            st.advance()
    lib = cuda_library(prims, arch)
    lib.functions = dict(functions)  # provenance for the debugger
    return lib


def cuda_library(prims: list[PrimFunc], arch: str) -> CudaLibrary:
    """Loop-IR functions printed as one CUDA translation unit, compiled for ``arch``."""
    cg = CudaCodegen()
    with progress.stage("generating CUDA"):
        source = cg.module(prims)
    with progress.stage("compiling CUDA", total=len(prims), unit="distinct kernels") as st:
        binary = compile_cuda(source, arch, "kernels" if len(prims) != 1 else prims[0].name)
        st.advance(len(prims))
    plans = {name: {"workspace": plan.workspace, "launches": plan.launches}
             for name, plan in cg.plans.items()}
    signatures = {p.name: tuple((tuple(b.shape), b.dtype) for b in p.params) for p in prims}
    lib = CudaLibrary(arch, binary.ptx, binary.cubin, plans, signatures, source)
    lib.kernel_flops = {p.name: float(p.attrs.get("flops", -1)) for p in prims}
    return lib
