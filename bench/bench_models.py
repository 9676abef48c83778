"""End-to-end benchmark: Kiln against onnxruntime on the benchmark models, batch 1, float32.

Usage (from the repository root)::

    python bench/bench_models.py                                   # every model, 1 and 2 threads
    python bench/bench_models.py --models resnet18,minilm_l6 --threads 2 --repeat 20
    python bench/bench_models.py --json out.json

For each model: build it as ONNX (random weights, fixed seed), check its GFLOP against the
published figure, import it with ``relay.frontend.from_onnx``, build it with ``relay.build`` at
opt level 3 (cold compile in an empty cache, then warm), and for each thread count run Kiln
and onnxruntime in the same process, alternating blocks of runs after a warm-up. One line per
(model, threads) gives both medians, the median per-block ratio Kiln/onnxruntime, GFLOP/s and
share of the FMA peak, compile times and the output difference. A model Kiln cannot import,
build or run is reported with its error, onnxruntime is still timed, and the others go on.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _ort_isa  # noqa: E402

if __name__ == "__main__":  # onnxruntime's kernels are chosen before anything imports it
    _ort_isa.select_for_script(sys.argv[1:])

import onnxruntime as ort  # noqa: E402

from bench._engines import (  # noqa: E402
    KilnBuild,
    KilnRunner,
    OutputCheck,
    build_kiln,
    check_outputs,
    ort_runner,
    ort_session,
    warm_up_compiler,
)
from bench._peak import fma_peak  # noqa: E402
from bench._report import (  # noqa: E402
    machine_info,
    machine_lines,
    pct,
    peak_lines,
    peak_table,
    write_json,
)
from bench._timing import compare, time_alone  # noqa: E402
from bench.models import MODELS, check_gflop, make_feeds  # noqa: E402


@dataclass
class Row:
    """One (model, threads) measurement; times in ms, compile times in s, NaN when not measured."""

    model: str
    threads: int
    gflop: float
    ort_ms: float
    kiln_ms: float = float("nan")
    ratio: float = float("nan")
    ratio_low: float = float("nan")
    ratio_high: float = float("nan")
    ratio_best: float = float("nan")
    ort_gflops: float = float("nan")
    kiln_gflops: float = float("nan")
    ort_pct_peak: float = float("nan")
    kiln_pct_peak: float = float("nan")
    kiln_threads: int = 0
    import_s: float = float("nan")
    compile_cold_s: float = float("nan")
    compile_warm_s: float = float("nan")
    cc_runs: tuple[int, int] = (0, 0)
    kernels: int = 0
    max_abs_diff: float = float("nan")
    rel_diff: float = float("nan")
    blocks: int = 0
    runs_per_block: tuple[int, int] = (0, 0)
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        """The printed line: every number and the thread count."""
        threads = f"T={self.threads}"
        if self.kiln_threads and self.kiln_threads != self.threads:
            threads += f" (kiln runs {self.kiln_threads})"
        head = f"{self.model:<13} {threads:<5} ort {self.ort_ms:8.2f} ms " \
               f"{self.ort_gflops:6.1f} GFLOP/s ({self.ort_pct_peak:4.1f}% peak)"
        if math.isnan(self.kiln_ms):
            return f"{head} | kiln FAILED: {'; '.join(self.problems)}"
        flag = "  <<< " + "; ".join(self.problems) if self.problems else ""
        return (f"{head} | kiln {self.kiln_ms:8.2f} ms {self.kiln_gflops:6.1f} GFLOP/s "
                f"({self.kiln_pct_peak:4.1f}% peak) | kiln/ort {self.ratio:6.2f}x "
                f"[{self.ratio_low:.2f}-{self.ratio_high:.2f}] best blocks {self.ratio_best:.2f}x "
                f"| compile cold {self.compile_cold_s:.2f} s "
                f"({self.cc_runs[0]} cc) warm {self.compile_warm_s:.2f} s ({self.cc_runs[1]} cc), "
                f"import {self.import_s:.2f} s, {self.kernels} kernels "
                f"| max|diff| {self.max_abs_diff:.2e} (rel {self.rel_diff:.1e}) | {self.blocks} blocks x "
                f"{self.runs_per_block[0]} kiln / {self.runs_per_block[1]} ort runs{flag}")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated, from {', '.join(MODELS)} (default: all)")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--repeat", type=int, default=10,
                   help="alternating block pairs per (model, threads) (default 10)")
    p.add_argument("--block-seconds", type=float, default=0.2,
                   help="target duration of one block of runs (default 0.2)")
    p.add_argument("--max-seconds", type=float, default=60.0,
                   help="time budget of the timed blocks per (model, threads); fewer blocks "
                        "(at least 3) are run past it (default 60)")
    p.add_argument("--target", default="c", help="Kiln target (default c)")
    _ort_isa.add_option(p)
    p.add_argument("--opt-level", type=int, default=3, help="PassContext opt level (default 3)")
    p.add_argument("--peak-gflops", type=float, default=None,
                   help="one-core FMA peak to use instead of measuring it")
    p.add_argument("--json", default=None, help="also write the table to this JSON file")
    args = p.parse_args(argv)
    _ort_isa.require(p, args.ort_isa)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    args.threads = [int(t) for t in args.threads.split(",") if t.strip()]
    return args


def _kiln_setup(model: onnx.ModelProto, args: argparse.Namespace) -> tuple[KilnBuild | None, str]:
    try:
        return build_kiln(model, target=args.target, opt_level=args.opt_level), ""
    except Exception as e:
        traceback.print_exc(limit=3)
        return None, f"import/build: {type(e).__name__}: {e}"


def _measure(row: Row, build: KilnBuild | None, feeds: dict[str, np.ndarray],
             session: ort.InferenceSession, args: argparse.Namespace, peak: float) -> None:
    ort_run = ort_runner(session, feeds)
    expected = ort_run()
    kiln_run = None
    if build is not None:
        row.import_s, row.compile_cold_s, row.compile_warm_s = (build.import_s, build.cold_s,
                                                                build.warm_s)
        row.kernels = build.kernels
        row.cc_runs = (build.cold_cc_runs, build.warm_cc_runs)
        try:
            kiln_run = KilnRunner(build, feeds, row.threads)
            row.kiln_threads = kiln_run.threads
            kiln_run()
            check: OutputCheck = check_outputs(kiln_run.outputs(), expected)
            row.max_abs_diff, row.rel_diff = check.max_abs, check.rel
            if not check.ok:
                row.problems.append(f"WRONG OUTPUT: {check.problem}")
        except Exception as e:
            traceback.print_exc(limit=3)
            row.problems.append(f"run: {type(e).__name__}: {e}")
            kiln_run = None
    if kiln_run is None:
        times = time_alone(ort_run, args.repeat, args.block_seconds, args.max_seconds)
        row.ort_ms, row.blocks = times.median_ms, len(times.blocks)
        row.runs_per_block = (0, len(times.blocks[0]))
    else:
        result = compare(kiln_run, ort_run, args.repeat, args.block_seconds, args.max_seconds)
        row.ort_ms, row.kiln_ms = result.b.median_ms, result.a.median_ms
        row.ratio = result.ratio
        row.ratio_low, row.ratio_high = result.ratio_spread
        row.ratio_best = result.best_ratio
        row.blocks = result.blocks
        row.runs_per_block = (len(result.a.blocks[0]), len(result.b.blocks[0]))
        row.kiln_gflops = row.gflop / row.kiln_ms * 1e3
        row.kiln_pct_peak = pct(row.kiln_gflops, peak)
    row.ort_gflops = row.gflop / row.ort_ms * 1e3
    row.ort_pct_peak = pct(row.ort_gflops, peak)


def _markdown(rows: list[Row]) -> list[str]:
    lines = ["| model | threads | GFLOP | ORT ms | ORT % peak | Kiln ms | Kiln % peak | Kiln/ORT | "
             "compile cold / warm s | max abs diff |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if math.isnan(r.kiln_ms):
            kiln = ["failed", "-", "-", "-", "-"]
        else:
            kiln = [f"{r.kiln_ms:.1f}", f"{r.kiln_pct_peak:.1f}", f"{r.ratio:.2f}",
                    f"{r.compile_cold_s:.1f} / {r.compile_warm_s:.1f}", f"{r.max_abs_diff:.1e}"]
        cells = [r.model, str(r.threads), f"{r.gflop:.2f}", f"{r.ort_ms:.1f}",
                 f"{r.ort_pct_peak:.1f}", *kiln]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the end-to-end benchmark; returns 1 when any Kiln output was wrong or missing."""
    args = _parse_args(argv)
    info = machine_info()
    for line in machine_lines(info):
        print(line)
    measured = (fma_peak(sorted({1, *args.threads}), avx2=args.ort_isa == "avx2")
                if args.peak_gflops is None
                else {1: args.peak_gflops})
    peaks = peak_table(measured, args.threads)
    for line in peak_lines(measured if args.peak_gflops is None else {}, peaks):
        print(line)
    if args.ort_isa == "avx2" and args.peak_gflops is None:
        print("  (probed with AVX2 vectors, -mno-avx512f: the ISA onnxruntime is held to)")
    print(f"Kiln target {args.target!r}, opt_level {args.opt_level}; blocks of ~{args.block_seconds} s, "
          f"{args.repeat} pairs (budget {args.max_seconds:.0f} s); times are medians, ratio is the "
          "median per-block-pair ratio [min-max]")
    warm_up_compiler(args.target, args.opt_level)
    rows: list[Row] = []
    for name in args.models:
        spec = MODELS[name]
        start = time.perf_counter()
        model = spec.build()
        gflop, ok = check_gflop(spec, model)
        feeds = make_feeds(model)
        print(f"\n{name}: {gflop:.3f} GFLOP (published {spec.gflop}: "
              f"{'matches' if ok else 'DOES NOT MATCH'}), {len(model.graph.node)} ONNX nodes, "
              f"built in {time.perf_counter() - start:.1f} s", flush=True)
        build, error = _kiln_setup(model, args)
        for threads in args.threads:
            row = Row(name, threads, gflop, float("nan"))
            if error:
                row.problems.append(error)
            if not ok:
                row.problems.append(f"GFLOP {gflop:.3f} != published {spec.gflop}")
            _measure(row, build, feeds, ort_session(model, threads), args, peaks[threads])
            rows.append(row)
            print(row.line(), flush=True)
        del build
    print("\n" + "\n".join(_markdown(rows)))
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        write_json(args.json, {"machine": info, "fma_peak_probe": measured, "peak_gflops": peaks,
                               "args": {k: v for k, v in vars(args).items() if k != "json"},
                               "rows": [asdict(r) for r in rows]})
    return 0 if all(not math.isnan(r.kiln_ms) and not r.problems for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
