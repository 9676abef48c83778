"""What the machine allows: measured FMA peak and memory bandwidth, and a kernel's share of them.

:func:`machine_peak` compiles two small kernels with the build's instruction-set flags and runs
them on Kiln's own thread pool:

* **FMA peak**: every chunk runs 12 independent chains of vector fused multiply-adds (enough to
  hide the latency of two FMA ports), so the time is bounded by the FMA throughput alone;
* **memory bandwidth**: every chunk copies its slice of a 256 MiB buffer (STREAM's copy: each
  element read once and written once, counted as 8 bytes per float).

Results are cached per instruction set, thread count and CPU (``<cache_dir>/peak.json``), so a
profile measures them once per machine; a measurement taken while the machine was busy (load
average above half its CPUs, or a multi-thread FMA probe under 3/4 of the one-core peak times
the threads: another process held a core) is used by its process only. The FMA peak of T
threads is never taken below T one-core peaks. :func:`roofline` then places a
kernel: its arithmetic intensity (FLOPs per byte of tensors read and written), the attainable
rate ``min(peak, intensity * bandwidth)``, and the share of it the kernel reached.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from kiln.config import settings
from kiln.runtime.dtype import np_dtype

__all__ = ["Peak", "Roofline", "machine_peak", "roofline"]

_CHAINS = 12
_FMA_ITERS = 1 << 17
_COPY_BYTES = 256 << 20
_measured: dict[str, Peak] = {}  # this process's measurements, busy machine or not


@dataclass(frozen=True)
class Peak:
    """Measured limits of the machine for one instruction set and thread count.

    Attributes
    ----------
    gflops : float
        Float32 fused multiply-add peak, GFLOP/s (an FMA counts 2).
    gbps : float
        Memory bandwidth of a large copy, GB/s.
    num_threads : int
        Threads the kernels ran with.
    isa : str
        The compiler's instruction-set flags.
    load : float
        The machine's 1-minute load average when measured (a busy machine measures less than it
        has; such a measurement is not cached).
    """

    gflops: float
    gbps: float
    num_threads: int
    isa: str
    load: float = 0.0


@dataclass(frozen=True)
class Roofline:
    """Where one kernel stands against the machine's limits.

    Attributes
    ----------
    gflops : float
        Achieved GFLOP/s.
    gbps : float
        Achieved GB/s over the bytes of the tensors it reads and writes.
    intensity : float
        FLOPs per byte.
    attainable_gflops : float
        ``min(peak, intensity * bandwidth)``.
    percent : float
        Achieved over attainable, in percent.
    bound : str
        ``"compute"`` or ``"memory"``: which limit the attainable rate comes from; ``"cache"``
        when the kernel moved its bytes faster than the machine's copy bandwidth (its data
        stayed in cache, above the memory roofline): it is then judged against the FMA peak.
    """

    gflops: float
    gbps: float
    intensity: float
    attainable_gflops: float
    percent: float
    bound: str


def _source(vector_bytes: int) -> str:
    lanes = max(1, vector_bytes // 4)
    chains = "\n".join(f"    v a{k} = x + ({float(k)}f * e);" for k in range(_CHAINS))
    steps = "\n".join(f"      a{k} = a{k} * m + c;" for k in range(_CHAINS))
    total = " + ".join(f"a{k}" for k in range(_CHAINS))
    return f"""#include <stdint.h>
#include <string.h>
typedef void (*kiln_task_fn)(void* ctx, int64_t begin, int64_t end);
void kiln_parallel_for(kiln_task_fn fn, void* ctx, int64_t n);
typedef float v __attribute__((vector_size({lanes * 4})));

static void fma_chunk(void* ctx, int64_t begin, int64_t end) {{
  float* out = (float*)ctx;
  for (int64_t t = begin; t < end; ++t) {{
    v x = {{0}}, e = {{0}}, m = {{0}}, c = {{0}};
    x += out[t]; e += 1e-7f; m += 0.999999f; c += 1e-6f;
{chains}
    for (int64_t i = 0; i < {_FMA_ITERS}; ++i) {{
{steps}
    }}
    v s = {total};
    float r = 0;
    for (int l = 0; l < {lanes}; ++l) r += s[l];
    out[t] = r;
  }}
}}

int32_t kiln_peak_fma(void** args) {{
  int64_t n = ((const int64_t*)args[1])[0];
  kiln_parallel_for(fma_chunk, args[0], n);
  return 0;
}}

typedef struct {{ float* dst; const float* src; int64_t per; int64_t n; }} copy_ctx;

static void copy_chunk(void* ctx, int64_t begin, int64_t end) {{
  const copy_ctx* c = (const copy_ctx*)ctx;
  for (int64_t t = begin; t < end; ++t) {{
    int64_t lo = t * c->per, hi = lo + c->per < c->n ? lo + c->per : c->n;
    if (lo < hi) memcpy(c->dst + lo, c->src + lo, (size_t)(hi - lo) * sizeof(float));
  }}
}}

int32_t kiln_peak_copy(void** args) {{
  int64_t n = ((const int64_t*)args[2])[0];
  int64_t chunks = ((const int64_t*)args[2])[1];
  copy_ctx c = {{(float*)args[0], (const float*)args[1], (n + chunks - 1) / chunks, n}};
  kiln_parallel_for(copy_chunk, &c, chunks);
  return 0;
}}
"""


def _measure(num_threads: int, target: Any) -> Peak:
    from kiln.codegen.native import compile_module, target_compile_flags
    from kiln.runtime.native import NativeLibrary
    from kiln.target import Target

    load = os.getloadavg()[0]
    tgt = target if isinstance(target, Target) else Target(target or "c")
    vector_bytes = tgt.vector_width("int8")
    flags = target_compile_flags(tgt)
    lib = NativeLibrary(compile_module(_source(vector_bytes), "kiln_peak", flags=flags))
    lib.set_num_threads(num_threads)
    fma, copy = lib.kernel("kiln_peak_fma"), lib.kernel("kiln_peak_copy")
    assert fma is not None and copy is not None
    tasks = 8 * num_threads  # ~10 ms a run: thread wake-ups do not count
    out = np.ones(tasks, dtype=np.float32)
    count = np.array([tasks], dtype=np.int64)
    fma(out, count)  # warm-up: threads started
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        fma(out, count)
        best = min(best, time.perf_counter() - start)
    flops = tasks * _FMA_ITERS * _CHAINS * max(1, vector_bytes // 4) * 2
    n = _COPY_BYTES // 4
    src = np.ones(n, dtype=np.float32)
    dst = np.empty_like(src)
    params = np.array([n, 16 * num_threads], dtype=np.int64)
    copy(dst, src, params)  # pages faulted in
    best_copy = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        copy(dst, src, params)
        best_copy = min(best_copy, time.perf_counter() - start)
    return Peak(gflops=flops / best / 1e9, gbps=2 * n * 4 / best_copy / 1e9, num_threads=num_threads,
                isa=" ".join(flags), load=load)


def _cache_path() -> Path:
    return Path(settings.cache_dir) / "peak.json"


def machine_peak(num_threads: int | None = None, target: Any = None) -> Peak:
    """The FMA peak and memory bandwidth of this machine (measured once, then cached).

    Parameters
    ----------
    num_threads : int, optional
        Threads (default: ``settings.num_threads``).
    target : Target or str, optional
        The instruction set to measure with (default: this machine's).
    """
    from kiln.codegen.native import target_compile_flags

    threads = max(1, num_threads or settings.num_threads)
    key = (f"v3|{platform.node()}|{os.cpu_count()}|{threads}|"  # v3: the method of this version
           f"{' '.join(target_compile_flags(target or 'c'))}")
    path = _cache_path()
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if key in cached:
        return Peak(**cached[key])
    if key in _measured:
        return _measured[key]
    peak = _measure(threads, target)
    contended = False
    if threads > 1:
        # FMA units scale with cores: the peak of T threads is T one-core peaks. A T-thread
        # probe far below that ran while another process held a core (the load average lags
        # behind such a process), and kernels would then show above 100% of the roofline.
        single = machine_peak(1, target)
        contended = peak.gflops < 0.75 * threads * single.gflops
        peak = replace(peak, gflops=max(peak.gflops, threads * single.gflops))
    _measured[key] = peak
    if contended or peak.load > (os.cpu_count() or 1) / 2:
        return peak  # a busy machine: this process uses it, the next one measures again
    cached[key] = asdict(peak)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(cached, indent=1))
    os.replace(tmp, path)
    return peak


def tensor_bytes(shapes: Sequence[Sequence[int]], dtypes: Sequence[str]) -> int:
    """Bytes of tensors of ``shapes`` and ``dtypes``."""
    return int(sum(int(np.prod(s, dtype=np.int64)) * np_dtype(d).itemsize
                   for s, d in zip(shapes, dtypes)))


def roofline(flops: float, nbytes: float, seconds: float, peak: Peak) -> Roofline:
    """Place a kernel of ``flops`` FLOPs moving ``nbytes`` bytes in ``seconds`` on the roofline."""
    gflops = flops / seconds / 1e9 if seconds > 0 else 0.0
    gbps = nbytes / seconds / 1e9 if seconds > 0 else 0.0
    intensity = flops / nbytes if nbytes else float("inf")
    memory_roof = intensity * peak.gbps
    attainable = min(peak.gflops, memory_roof)
    bound = "memory" if memory_roof < peak.gflops else "compute"
    in_cache = peak.gbps > 0 and gbps > peak.gbps  # faster than DRAM allows: cache-resident
    if flops <= 0:  # data movement only: judged against the bandwidth
        return Roofline(0.0, gbps, 0.0, 0.0, 100.0 * gbps / peak.gbps if peak.gbps else 0.0,
                        "cache" if in_cache else "memory")
    if bound == "memory" and in_cache:
        attainable, bound = peak.gflops, "cache"
    return Roofline(gflops, gbps, intensity, attainable, 100.0 * gflops / attainable if attainable else 0.0,
                    bound)
