"""Candidates per minute of the auto-scheduler's measurement (builder, runner, end to end).

Builds and measures tiled schedules of a 512x512x512 float32 matmul with varied split factors,
as the tuner would, with ``LocalBuilder`` / ``LocalRunner`` at TVM's defaults (runner: number=3,
repeat=1, min_repeat_ms=100), and prints candidates per minute for each phase::

    python -m bench.bench_measure [--candidates 48] [--n-parallel N] [--min-repeat-ms 100]

The first batch also starts the worker processes; the figures are for a second batch with warm
workers (as in a tuning session) and, separately, the cold first batch.
"""

from __future__ import annotations

import argparse
import itertools
import time

from kiln import auto_scheduler, te
from kiln.auto_scheduler import measure
from kiln.config import settings, usable_cpus


@auto_scheduler.register_workload("bench_matmul", override=True)
def bench_matmul(n: int, m: int, k: int) -> list[te.Tensor]:
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=[r]), name="C")
    return [A, B, C]


def candidates(task: auto_scheduler.SearchTask, count: int) -> list[measure.MeasureInput]:
    """Tiled states: i split in two levels, j tiled and vectorized, k split, outer loop parallel."""
    combos = itertools.product([2, 4, 8, 16], [8, 16, 32], [1, 4, 8, 16], [2, 4])
    inputs = []
    for ti, tj, tk, ti2 in itertools.islice(combos, count):
        s = task.compute_dag.init_state
        i, j, k = s.stages[2].iters
        i0, i1, i2 = s.split(2, i, [ti, ti2])
        j0, j1 = s.split(2, j, [tj])
        k0, k1 = s.split(2, k, [tk])
        s.reorder(2, [i0, j0, i1, k0, k1, i2, j1])
        s.parallel(2, i0)
        s.vectorize(2, j1)
        s.unroll(2, i2)
        inputs.append(measure.MeasureInput(task, s))
    return inputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=48)
    ap.add_argument("--n-parallel", type=int, default=None)
    ap.add_argument("--min-repeat-ms", type=float, default=100)
    opts = ap.parse_args()
    task = auto_scheduler.SearchTask(func=bench_matmul, args=(512, 512, 512), target="llvm")
    inputs = candidates(task, opts.candidates)
    builder = auto_scheduler.LocalBuilder(n_parallel=opts.n_parallel)
    runner = auto_scheduler.LocalRunner(min_repeat_ms=opts.min_repeat_ms)
    print(f"{len(inputs)} candidates, usable CPUs {usable_cpus()}, builder n_parallel "
          f"{builder.n_parallel}, kernel threads {settings.num_threads}")
    for label in ("cold (workers start)", "warm"):
        t0 = time.perf_counter()
        builds = builder.build(inputs, verbose=0)
        t1 = time.perf_counter()
        results = runner.run(inputs, builds, verbose=0)
        t2 = time.perf_counter()
        errors = sum(r.error_no != 0 for r in results)
        best = min(r.costs[0] for r in results)
        n = len(inputs)
        print(f"{label}: builder {n / (t1 - t0) * 60:.0f}/min ({t1 - t0:.1f} s), runner "
              f"{n / (t2 - t1) * 60:.0f}/min ({t2 - t1:.1f} s), end to end "
              f"{n / (t2 - t0) * 60:.0f}/min; errors {errors}; best {best * 1e3:.2f} ms "
              f"({2 * 512 ** 3 / best / 1e9:.1f} GFLOP/s)")


if __name__ == "__main__":
    main()
