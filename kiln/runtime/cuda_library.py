"""The ``cuda`` kernel library: compiled CUDA kernels and the launch plan of each fused function.

A :class:`CudaLibrary` holds one translation unit's PTX (and the cubin for the architecture it
was compiled for) plus, per fused function, its :class:`LaunchSpec` s: which kernels to launch,
with what grid and block, on which of the function's arguments and workspace buffers. It is
deployable: it needs only the CUDA driver (:mod:`kiln.runtime.cuda_driver`), not the compiler.

Kernels are bound to :class:`~kiln.runtime.cuda_driver.DeviceView` s (the GPU graph executor's
entries): binding checks shapes and dtypes once, allocates the function's workspace on the
device and returns a call that queues the launches on the library's stream.

Exported, it is a library kind (``cuda``) of Kiln's container; its payload is JSON (the
architecture, the launch plans, the argument signatures) followed by the PTX and the cubin.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kiln.errors import RuntimeFormatError
from kiln.runtime.cuda_driver import (
    CudaError,
    CudaNDArray,
    DeviceBuffer,
    DeviceView,
    LoadedModule,
    Stream,
    cuda,
    time_launches,
)
from kiln.runtime.dtype import as_dtype
from kiln.runtime.module import (
    Kernel,
    KernelError,
    KernelLibrary,
    Module,
    Signature,
    register_library_kind,
)
from kiln.runtime.profiling import BenchmarkResult

__all__ = ["CudaFunctionModule", "CudaKernel", "CudaLibrary", "LaunchSpec"]


@dataclass(frozen=True)
class LaunchSpec:
    """One kernel launch: ``args`` are argument indices (``-1 - j``: workspace buffer ``j``)."""

    symbol: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: tuple[int, ...]
    shared_bytes: int = 0


class CudaKernel(Kernel):
    """A fused function on the GPU: its launches, workspace sizes and argument signature."""

    def __init__(self, name: str, library: CudaLibrary, launches: Sequence[LaunchSpec],
                 workspace: Sequence[int], signature: Signature):
        super().__init__(name)
        self.library = library
        self.launches = list(launches)
        self.workspace = list(workspace)
        self.signature = signature

    def bind(self, arrays: Sequence[Any]) -> Callable[[], None]:
        """Queue this function's kernels on ``arrays`` (device views, inputs then outputs)."""
        if len(arrays) != len(self.signature):
            raise KernelError(f"kernel {self.name} takes {len(self.signature)} arrays (inputs then "
                              f"outputs), got {len(arrays)}")
        device_id = None
        for i, (a, (shape, dtype)) in enumerate(zip(arrays, self.signature)):
            if not isinstance(a, DeviceView):
                raise KernelError(f"kernel {self.name}: argument {i} must be in GPU memory (a "
                                  f"device view), got {type(a).__name__}; run it with a graph "
                                  "executor on kiln.cuda()")
            if a.shape != tuple(shape) or as_dtype(a.dtype) != dtype:
                raise KernelError(f"kernel {self.name}: argument {i} must be {tuple(shape)} "
                                  f"{dtype}, got {a.shape} {a.dtype}")
            device_id = a.buffer.device_id if device_id is None else device_id
        dev = 0 if device_id is None else device_id
        module = self.library.loaded(dev)
        stream = self.library.stream(dev)
        scratch = [DeviceBuffer(n, dev) for n in self.workspace]
        pointers = [a.ptr for a in arrays]
        calls = []
        for spec in self.launches:
            ptrs = [pointers[i] if i >= 0 else scratch[-1 - i].ptr for i in spec.args]
            calls.append(module.function(spec.symbol).launcher(spec.grid, spec.block, ptrs, stream,
                                                              spec.shared_bytes))
        if len(calls) == 1:
            single = calls[0]
            single.keep_alive = scratch  # type: ignore[attr-defined]
            return single

        def run() -> None:
            for call in calls:
                call()

        run.keep_alive = scratch  # type: ignore[attr-defined]
        return run


class CudaLibrary(KernelLibrary):
    """Compiled CUDA kernels of a build (see the module docstring).

    Parameters
    ----------
    arch : str
        The architecture the kernels were compiled for (``"sm_90"``).
    ptx : bytes
        The PTX of the translation unit (JIT-compiled by the driver on other GPUs).
    cubin : bytes or None
        Machine code for ``arch``, loaded instead of the PTX on a GPU of that architecture.
    plans : mapping
        Per fused function: ``{"workspace": [bytes, ...], "launches": [LaunchSpec, ...]}``.
    signatures : mapping
        Per fused function: the (shape, dtype) of each argument, inputs then outputs.
    source : str, optional
        The CUDA source (for ``get_source``; not exported).
    """

    type_key = "cuda"

    def __init__(self, arch: str, ptx: bytes, cubin: bytes | None,
                 plans: Mapping[str, Mapping[str, Any]], signatures: Mapping[str, Signature],
                 source: str = ""):
        super().__init__()
        self.arch = arch
        self.ptx = ptx
        self.cubin = cubin
        self.plans = {k: dict(v) for k, v in plans.items()}
        self.signatures = dict(signatures)
        self.source = source
        self.kernel_flops: dict[str, float] = {}
        # the fused functions by kernel name when built in this process (for the debugger)
        self.functions: dict[str, object] | None = None
        self._loaded: dict[int, LoadedModule] = {}
        self._streams: dict[int, Stream] = {}
        self._kernels: dict[str, CudaKernel] = {}

    def kernel(self, name: str) -> CudaKernel | None:
        """The fused function ``name``."""
        plan = self.plans.get(name)
        if plan is None:
            return None
        if name not in self._kernels:
            self._kernels[name] = CudaKernel(name, self, plan["launches"], plan["workspace"],
                                             self.signatures[name])
        return self._kernels[name]

    def get_source(self, fmt: str = "") -> str:
        """The CUDA source (``fmt="cu"``) or the PTX (``"ptx"``)."""
        if fmt == "ptx":
            return self.ptx.decode()
        return self.source

    def loaded(self, device_id: int) -> LoadedModule:
        """The kernels loaded on GPU ``device_id`` (once): the cubin when it is for that GPU's
        architecture, else the PTX."""
        module = self._loaded.get(device_id)
        if module is None:
            dev = cuda(device_id)
            image = self.cubin if self.cubin is not None and dev.arch == self.arch else self.ptx
            try:
                module = LoadedModule(image, device_id, f"the kernels compiled for {self.arch}")
            except CudaError:
                if image is self.ptx or self.ptx is None:
                    raise
                module = LoadedModule(self.ptx, device_id, f"the PTX compiled for {self.arch}")
            self._loaded[device_id] = module
        return module

    def stream(self, device_id: int) -> Stream:
        """The stream this library's kernels run on, on GPU ``device_id``."""
        stream = self._streams.get(device_id)
        if stream is None:
            stream = self._streams[device_id] = Stream(device_id)
        return stream


class CudaFunctionModule(Module):
    """One fused function of a :class:`CudaLibrary`, callable on GPU NDArrays (what
    ``kiln.build(sch, args, target="cuda")`` returns).

    Attributes
    ----------
    entry_name : str
        The function's name (``mod[entry_name]`` is the call).
    library : CudaLibrary
        The compiled kernels.
    """

    type_key = "cuda"

    def __init__(self, library: CudaLibrary, entry_name: str):
        super().__init__()
        self.library = library
        self.entry_name = entry_name
        self.import_module(library)

    def _bound(self, name: str, args: Sequence[Any]) -> tuple[Callable[[], None], Stream]:
        kernel = self.library.kernel(name)
        if kernel is None:
            raise KernelError(f"the CUDA module has no function {name!r} (it has "
                              f"{', '.join(self.library.plans)})")
        views = []
        for i, a in enumerate(args):
            if not isinstance(a, CudaNDArray):
                raise KernelError(f"{name}: argument {i} must be an NDArray on a CUDA device "
                                  f"(kiln.nd.array(x, kiln.cuda())), got {type(a).__name__}")
            views.append(a.view)
        call = kernel.bind(views)
        device_id = views[0].buffer.device_id if views else 0
        return call, self.library.stream(device_id)

    def __call__(self, *args: Any) -> None:
        """Run the function on GPU NDArrays (inputs, then outputs written in place); returns
        when the GPU has finished."""
        self._run(self.entry_name, args)

    def _function(self, name: str) -> Callable[..., Any] | None:
        if name not in self.library.plans:
            return None
        return lambda *args: self._run(name, args)

    def _run(self, name: str, args: Sequence[Any]) -> None:
        call, stream = self._bound(name, args)
        call()
        stream.synchronize()

    def get_source(self, fmt: str = "") -> str:
        """The CUDA source (or ``fmt="ptx"``: the PTX)."""
        return self.library.get_source(fmt)

    def time_evaluator(self, func_name: str, dev: Any = None, number: int = 10, repeat: int = 1,
                       min_repeat_ms: float = 0, **_: Any) -> Callable[..., BenchmarkResult]:
        """``f(*args) -> BenchmarkResult``: ``repeat`` measurements of ``number`` back-to-back
        launches each, timed with CUDA events on the function's stream, after one warm-up run;
        ``number`` grows until a measurement lasts ``min_repeat_ms``."""
        def evaluator(*args: Any) -> BenchmarkResult:
            call, stream = self._bound(func_name, args)
            return BenchmarkResult(time_launches(call, stream, number, repeat, min_repeat_ms))

        return evaluator


def _spec_json(spec: LaunchSpec) -> dict[str, Any]:
    return {"symbol": spec.symbol, "grid": list(spec.grid), "block": list(spec.block),
            "args": list(spec.args), "shared_bytes": spec.shared_bytes}


def save_cuda_library(library: CudaLibrary) -> bytes:
    """The container payload: u64-length JSON header, u64-length PTX, u64-length cubin."""
    header = {"arch": library.arch,
              "plans": {name: {"workspace": list(p["workspace"]),
                               "launches": [_spec_json(s) for s in p["launches"]]}
                        for name, p in library.plans.items()},
              "signatures": {name: [[list(shape), dtype] for shape, dtype in sig]
                             for name, sig in library.signatures.items()}}
    parts = [json.dumps(header).encode(), library.ptx, library.cubin or b""]
    return b"".join(struct.pack("<Q", len(p)) + p for p in parts)


def load_cuda_library(payload: bytes, what: str = "cuda container") -> CudaLibrary:
    """A ``cuda`` library from its container payload (no GPU is touched until it runs)."""
    parts: list[bytes] = []
    pos = 0
    for _ in range(3):
        if pos + 8 > len(payload):
            raise RuntimeFormatError(f"{what}: the cuda library payload is truncated")
        (n,) = struct.unpack_from("<Q", payload, pos)
        pos += 8
        if pos + n > len(payload):
            raise RuntimeFormatError(f"{what}: the cuda library payload is truncated")
        parts.append(payload[pos:pos + n])
        pos += n
    try:
        header = json.loads(parts[0])
        plans = {name: {"workspace": [int(x) for x in p["workspace"]],
                        "launches": [LaunchSpec(s["symbol"], tuple(s["grid"]), tuple(s["block"]),
                                                tuple(s["args"]), int(s["shared_bytes"]))
                                     for s in p["launches"]]}
                 for name, p in header["plans"].items()}
        signatures = {name: tuple((tuple(shape), str(dtype)) for shape, dtype in sig)
                      for name, sig in header["signatures"].items()}
        arch = str(header["arch"])
    except (ValueError, KeyError, TypeError) as e:
        raise RuntimeFormatError(f"{what}: the cuda library header is unreadable: {e}") from None
    return CudaLibrary(arch, parts[1], parts[2] or None, plans, signatures)


register_library_kind(CudaLibrary.type_key, CudaLibrary, save_cuda_library, load_cuda_library)
