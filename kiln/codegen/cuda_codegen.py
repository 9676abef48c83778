"""Loop IR to CUDA C: the kernels of a fused function and how to launch them.

The same :class:`~kiln.te.loop_ir.PrimFunc` the C backend prints (see
:mod:`kiln.codegen.c_codegen`, whose expression printer this one shares) becomes one or more
``extern "C" __global__`` kernels:

* Every statement at the root of the function (after the buffers allocated there) is one kernel,
  ``<func_name>_kernel<k>``, launched in order. Its loops bound to ``blockIdx.*`` and
  ``threadIdx.*`` set the launch shape: the largest extent bound to each index; a loop bound to a
  smaller extent than the launch tests its index (``if (threadIdx.x < 64)``).
* Buffers allocated at the root (what one kernel writes and the next reads) live in device
  memory: the library allocates them when a call is bound (:class:`LaunchPlan` ``workspace``).
  Buffers allocated inside a kernel are per-thread arrays (registers, or local memory), or
  ``__shared__`` arrays for the ``shared`` scope, written between two ``__syncthreads()``.
* Kernel arguments are the function's buffers (``__restrict__`` pointers) and the workspace
  buffers the kernel reads or writes.
* A header comment lists the fused ops and the source-model nodes, as in the C backend.

The scalar helpers (NumPy's integer division, NaN-propagating min/max, sigmoid, ...) are the C
prelude's, declared ``__device__``; CUDA's math library supplies ``expf`` and the rest, so float
results can differ from the C backend's by the ulps CUDA documents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kiln.codegen.c_codegen import CCodegen, FunctionState
from kiln.codegen.c_prelude import scalar_helpers
from kiln.codegen.c_types import C_TYPES, c_type, np_name
from kiln.errors import CompileError
from kiln.runtime.cuda_library import LaunchSpec
from kiln.te import expr as E
from kiln.te.loop_ir import (
    THREAD_KINDS,
    Allocate,
    Buffer,
    BufferLoad,
    For,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    own_exprs,
    walk_stmts,
)
from kiln.te.simplify import Simplifier
from kiln.te.visit import post_order

__all__ = ["CUDA_PRELUDE", "CudaCodegen", "LaunchPlan", "MAX_LOCAL_BYTES", "MAX_SHARED_BYTES",
           "launch_limits"]

#: A kernel's per-thread array larger than this is refused (it would spill to local memory).
MAX_LOCAL_BYTES = 1 << 14
#: Static shared memory a block may use (every CUDA GPU since compute capability 2.0).
MAX_SHARED_BYTES = 48 << 10

CUDA_PRELUDE = (r"""/* Kiln CUDA kernels: fixed-width integers and the C prelude's helpers on the device. */
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define INT32_MIN (-2147483647 - 1)
#define INT64_MIN (-9223372036854775807LL - 1)
#define NAN __int_as_float(0x7fc00000)
#define INFINITY __int_as_float(0x7f800000)

""" + scalar_helpers("static __device__ __forceinline__"))

_DIMS = ("x", "y", "z")


@dataclass
class LaunchPlan:
    """How a fused function runs: workspace buffers (bytes each) and kernels in order."""

    name: str
    workspace: list[int] = field(default_factory=list)
    launches: list[LaunchSpec] = field(default_factory=list)


def _extents(s: Stmt) -> dict[str, int]:
    """The largest extent bound to each thread index in ``s``."""
    out: dict[str, int] = {}
    for node in walk_stmts(s):
        if isinstance(node, For) and node.kind in THREAD_KINDS:
            out[node.kind] = max(out.get(node.kind, 1), node.extent)
    return out


def _buffers_used(s: Stmt) -> list[Buffer]:
    seen: dict[int, Buffer] = {}
    for node in walk_stmts(s):
        if isinstance(node, Store):
            seen.setdefault(id(node.buffer), node.buffer)
        for e in own_exprs(node):
            for n in post_order(e):
                if isinstance(n, BufferLoad):
                    seen.setdefault(id(n.buffer), n.buffer)
    return list(seen.values())


def launch_limits(kernel: str, body: Stmt) -> None:
    """Raise :class:`CompileError` when a kernel's launch shape or shared memory exceeds what every
    CUDA GPU allows (1024 threads per block, 48 KiB of static shared memory)."""
    ext = _extents(body)
    threads = 1
    for d in _DIMS:
        threads *= ext.get(f"threadIdx.{d}", 1)
    if threads > 1024:
        raise CompileError(f"kernel {kernel}: {threads} threads per block (loops bound to "
                           f"threadIdx: {ext}); CUDA allows 1024")
    if ext.get("blockIdx.y", 1) > 65535 or ext.get("blockIdx.z", 1) > 65535:
        raise CompileError(f"kernel {kernel}: grid {ext} exceeds 65535 blocks in y or z")
    shared = sum(n.buffer.size * np.dtype(np_name(n.buffer.dtype)).itemsize
                 for n in walk_stmts(body) if isinstance(n, Allocate) and n.buffer.scope == "shared")
    if shared > MAX_SHARED_BYTES:
        raise CompileError(f"kernel {kernel}: {shared} bytes of shared memory per block; CUDA "
                           f"allows {MAX_SHARED_BYTES} without opting in (schedule a smaller tile)")


def _shared_stores(s: Stmt) -> bool:
    return any(isinstance(n, Store) and n.buffer.scope == "shared" for n in walk_stmts(s))


class CudaCodegen(CCodegen):
    """Renders :class:`~kiln.te.loop_ir.PrimFunc` s as one CUDA translation unit.

    After :meth:`module`, :attr:`plans` holds each function's :class:`LaunchPlan`.
    """

    CONST_STORAGE = "__device__ const"
    RESTRICT = "__restrict__"

    def __init__(self) -> None:
        super().__init__(vector_bytes=4)
        self.plans: dict[str, LaunchPlan] = {}
        self._launch: dict[str, int] = {}

    def module(self, funcs: Sequence[PrimFunc]) -> str:
        """The translation unit: prelude, constants, then every function's kernels."""
        self.plans = {}
        bodies = [self.function(f) for f in funcs]
        parts = [CUDA_PRELUDE, *self.constants, *bodies]
        return "\n".join(p.rstrip("\n") + "\n" for p in parts if p)

    def function(self, func: PrimFunc) -> str:
        """The kernels of one fused function (its launch plan goes to :attr:`plans`)."""
        for b in func.params:
            if b.dtype == "float16" or b.dtype not in C_TYPES:
                raise CompileError(f"kernel {func.name}: {b.dtype} tensors ({b.name}) are not "
                                   "supported by the cuda target yet (float32, float64, integers "
                                   "and bool are)")
        body = func.body
        workspace: list[Buffer] = []
        while isinstance(body, Allocate):
            workspace.append(body.buffer)
            body = body.body
        parts = list(body.stmts) if isinstance(body, Seq) else [body]
        plan = LaunchPlan(func.name, [b.size * np.dtype(np_name(b.dtype)).itemsize
                                      for b in workspace])
        head = [f"/* Kiln kernels of {func.name}"]
        if func.attrs.get("fused_ops"):
            head.append(f" * fused ops: {', '.join(func.attrs['fused_ops'])}")
        if func.attrs.get("source_names"):
            head.append(f" * source nodes: {', '.join(func.attrs['source_names'])}")
        for i, b in enumerate(func.params):
            shape = "x".join(str(d) for d in b.shape) or "scalar"
            head.append(f" * args[{i}] {b.kind:6s} {b.name}: {b.dtype}[{shape}]")
        for j, b in enumerate(workspace):
            head.append(f" * workspace[{j}] {b.name}: {b.dtype}[{b.size}]")
        head.append(" */")
        texts = ["\n".join(head)]
        index = {id(b): i for i, b in enumerate(func.params)}
        index.update({id(b): -1 - j for j, b in enumerate(workspace)})
        for part in parts:
            if not _buffers_used(part):
                continue
            k = len(plan.launches)
            texts.append(self._kernel(func, part, f"{func.name}_kernel{k}", index, plan))
        self.plans[func.name] = plan
        return "\n".join(texts) + "\n"

    def _kernel(self, func: PrimFunc, body: Stmt, symbol: str, index: dict[int, int],
                plan: LaunchPlan) -> str:
        self.state = FunctionState(func_name=symbol)
        self.simp = Simplifier({n.var: (0, max(n.extent - 1, 0)) for n in walk_stmts(body)
                                if isinstance(n, For)})
        used = [b for b in _buffers_used(body) if b.kind != "const"]
        args = sorted((b for b in used if id(b) in index), key=lambda b: (index[id(b)] < 0,
                                                                         abs(index[id(b)])))
        biggest = max([b.size for b in args] + [1])
        self.index_type = "int64_t" if biggest >= (1 << 31) - 1 else "int32_t"
        launch_limits(symbol, body)
        self._launch = _extents(body)
        for name in [b.name for b in args]:
            self._reserve(name)
        decls = []
        for b in args:
            const = "const " if b.kind == "input" else ""
            decls.append(f"{const}{c_type(b.dtype)}* __restrict__ {b.name}")
            self.state.buffer_types[id(b)] = f"{c_type(b.dtype)}*"
        f = self.state
        grid = tuple(self._launch.get(f"blockIdx.{d}", 1) for d in _DIMS)
        block = tuple(self._launch.get(f"threadIdx.{d}", 1) for d in _DIMS)
        threads = block[0] * block[1] * block[2]
        bounds = f"__launch_bounds__({threads}) " if threads > 1 else ""
        f.lines = [f'extern "C" __global__ void {bounds}{symbol}({", ".join(decls)}) {{']
        self._const_buffers(PrimFunc(symbol, func.params, body))
        self.stmt(body)
        f.lines.append("}")
        plan.launches.append(LaunchSpec(symbol, grid, block, tuple(index[id(b)] for b in args)))
        return "\n".join(f.lines) + "\n"

    # --- statements ---------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        """Emit a statement; a statement storing into a shared buffer is fenced by barriers
        (before: the block is done reading what it overwrites; after: every thread's stores are
        visible), one barrier between two such statements."""
        if isinstance(s, Seq):
            for x in s.stmts:
                fills = _shared_stores(x)
                if fills:
                    self._barrier()
                self.stmt(x)
                if fills:
                    self._barrier()
            return
        super().stmt(s)

    def _barrier(self) -> None:
        lines = self.state.lines
        if not (lines and lines[-1].strip() == "__syncthreads();"):
            self.emit("__syncthreads();")

    def _for(self, s: For) -> None:
        f = self.state
        var = self.var_name(s.var)
        it = self.index_type
        f.var_types[id(s.var)] = it
        if s.kind in THREAD_KINDS:
            self.emit(f"const {it} {var} = ({it}){s.kind};")
            if s.extent < self._launch.get(s.kind, 1):
                if any(_shared_stores(x) for x in walk_stmts(s.body) if isinstance(x, Seq)):
                    raise CompileError(
                        f"kernel {self.state.func_name}: loop {s.var.name} binds {s.extent} of "
                        f"the block's {self._launch[s.kind]} {s.kind} threads around a shared-"
                        "memory barrier, which every thread must reach; bind the same extent "
                        "to every loop on that index")
                with self.block(f"if ({var} < {s.extent}) {{"):
                    self.stmt(s.body)
            else:
                self.stmt(s.body)
            return
        if s.kind in ("unrolled", "vectorized", "vthread"):
            self.emit(f"#pragma unroll {min(s.extent, 64)}" if s.extent > 64 else "#pragma unroll")
        with self.block(f"for ({it} {var} = 0; {var} < {s.extent}; ++{var}) {{"):
            f.loop_depth += 1
            self.stmt(s.body)
            f.loop_depth -= 1

    def _allocate(self, s: Allocate) -> None:
        b = s.buffer
        ct = c_type(b.dtype)
        nbytes = b.size * np.dtype(np_name(b.dtype)).itemsize
        self._reserve(b.name)
        self.state.buffer_types[id(b)] = f"{ct}*"
        with self.block("{"):
            if b.scope == "shared":
                self.emit(f"__shared__ {ct} {b.name}[{max(b.size, 1)}];  /* {nbytes} bytes */")
            else:
                if nbytes > MAX_LOCAL_BYTES:
                    raise CompileError(
                        f"kernel {self.state.func_name}: buffer {b.name} ({nbytes} bytes) is "
                        f"allocated per GPU thread; the cuda target allows {MAX_LOCAL_BYTES} "
                        "(compute it at the root or at an outer loop)")
                self.emit(f"{ct} {b.name}[{max(b.size, 1)}];  /* per thread, {nbytes} bytes */")
            self.stmt(s.body)

    # --- expressions --------------------------------------------------------------------------
    def _call(self, e: E.Call) -> str:
        if e.name in ("isnan", "isinf", "isfinite") and e.args[0].dtype == "float32":
            return f"({e.name}({self.expr(e.args[0])}) != 0)"
        return super()._call(e)
