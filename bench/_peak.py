"""Measure this CPU's fp32 FMA peak with a small C program.

The probe runs independent chains of fused multiply-adds on full-width vector registers (32
bytes with AVX, 64 with AVX-512F, else 16; chosen by the compiler's ``-march=native`` macros),
enough chains to hide the FMA latency without spilling registers, in one OpenMP thread per core
asked for. It reports the best of several timed repetitions, each about 0.2 s long, after a
warm-up. FLOPs count 2 per lane per FMA.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kiln.config import settings

__all__ = ["PROBE_SOURCE", "fma_peak"]

PROBE_SOURCE = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__AVX512F__)
#define VBYTES 64
#define CHAINS 16
#elif defined(__AVX__)
#define VBYTES 32
#define CHAINS 12
#else
#define VBYTES 16
#define CHAINS 12
#endif
#define LANES (VBYTES / 4)

typedef float vf __attribute__((vector_size(VBYTES)));

/* Seconds for `iters` rounds of CHAINS independent FMAs in each of `threads` threads. */
static double run(long iters, int threads, float *sink) {
    double start = omp_get_wtime();
    float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
        vf acc[CHAINS];
        vf mul, add;
        for (int l = 0; l < LANES; l++) {
            mul[l] = 0.9999999f;
            add[l] = 1e-7f * (float)(l + 1);
        }
        for (int c = 0; c < CHAINS; c++)
            for (int l = 0; l < LANES; l++)
                acc[c][l] = (float)(c + l + omp_get_thread_num());
        for (long i = 0; i < iters; i++) {
#pragma GCC unroll 16
            for (int c = 0; c < CHAINS; c++) acc[c] = acc[c] * mul + add;
        }
        for (int c = 0; c < CHAINS; c++)
            for (int l = 0; l < LANES; l++) total += acc[c][l];
    }
    *sink += total;
    return omp_get_wtime() - start;
}

int main(int argc, char **argv) {
    float sink = 0.0f;
    printf("vector_bytes %d chains %d\n", VBYTES, CHAINS);
    for (int a = 1; a < argc; a++) {
        int threads = atoi(argv[a]);
        long iters = 1000000;
        double t = run(iters, threads, &sink);
        while (t < 0.05) {
            iters *= 2;
            t = run(iters, threads, &sink);
        }
        iters = (long)(iters * (0.2 / t)) + 1;
        double best = 1e30;
        for (int r = 0; r < 5; r++) {
            t = run(iters, threads, &sink);
            if (t < best) best = t;
        }
        double flops = 2.0 * LANES * CHAINS * (double)iters * threads;
        printf("threads %d gflops %.2f\n", threads, flops / best / 1e9);
    }
    printf("checksum %g\n", (double)sink); /* keeps the chains alive */
    return 0;
}
"""


def fma_peak(threads: Sequence[int], avx2: bool = False) -> dict[int, float]:
    """Measured fp32 FMA peak of this CPU in GFLOP/s, per thread count.

    Parameters
    ----------
    threads : sequence of int
        Thread counts to measure (one OpenMP thread per core asked for).
    avx2 : bool
        Probe with 32-byte vectors even where the CPU has AVX-512 (``-mno-avx512f``): the peak
        of AVX2 code on this machine, for comparisons held to AVX2.

    Returns
    -------
    dict of int to float
        GFLOP/s per thread count.

    Raises
    ------
    RuntimeError
        The probe did not compile or run (the compiler's message is included).
    """
    with tempfile.TemporaryDirectory(prefix="kiln-peak-") as tmp:
        src = Path(tmp) / "fma_peak.c"
        exe = Path(tmp) / "fma_peak"
        src.write_text(PROBE_SOURCE)
        cmd = [*shlex.split(settings.cc), "-O3", "-march=native", *(["-mno-avx512f"] if avx2 else []),
               "-ffp-contract=fast", "-fopenmp", str(src), "-o", str(exe)]
        built = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if built.returncode != 0:
            raise RuntimeError(f"FMA probe: {shlex.join(cmd)} failed:\n{built.stderr.strip()}")
        ran = subprocess.run([str(exe), *map(str, threads)], capture_output=True, text=True,
                             check=False, timeout=120)
        if ran.returncode != 0:
            raise RuntimeError(f"FMA probe exited with {ran.returncode}:\n{ran.stderr.strip()}")
    peaks: dict[int, float] = {}
    for line in ran.stdout.splitlines():
        words = line.split()
        if words[:1] == ["threads"]:
            peaks[int(words[1])] = float(words[3])
    return peaks
