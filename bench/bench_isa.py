"""Kiln's native build against an AVX2 build of the same model, and both against onnxruntime.

Usage (from the repository root)::

    python bench/bench_isa.py                                   # ResNet-18, 1 and 2 threads
    python bench/bench_isa.py --models resnet18,mobilenet_v2 --threads 1 --repeat 10
    python bench/bench_isa.py --isa-target "llvm -mcpu=znver3"

On an AVX-512 machine the AVX2 build (default target ``llvm -mattr=+avx2,+fma,-avx512f``:
256-bit vectors, 16 registers, no AVX-512 instructions) shows what an AVX2 machine gets from
Kiln, measured on this one. For each (model, threads), in one process: native vs onnxruntime,
AVX2 vs onnxruntime and native vs AVX2, each in alternating blocks (``bench/_timing.py``);
each line gives the engines' median ms, and the median per-block-pair ratio with its lowest and
highest pair in brackets.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _ort_isa  # noqa: E402

if __name__ == "__main__":  # onnxruntime's kernels are chosen before anything imports it
    _ort_isa.select_for_script(sys.argv[1:])

from bench._engines import (  # noqa: E402
    KilnRunner,
    build_kiln,
    check_outputs,
    ort_runner,
    ort_session,
    warm_up_compiler,
)
from bench._report import machine_info, machine_lines  # noqa: E402
from bench._timing import Comparison, compare  # noqa: E402
from bench.models import MODELS, make_feeds  # noqa: E402


def _ratio(c: Comparison) -> str:
    low, high = c.ratio_spread
    return f"{c.ratio:.2f}x [{low:.2f}-{high:.2f}]"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet18", help="comma-separated models (default resnet18)")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--native-target", default="llvm", help="the native build's target (llvm)")
    p.add_argument("--isa-target", default="llvm -mattr=+avx2,+fma,-avx512f",
                   help="the other build's target (default: AVX2 with FMA, no AVX-512)")
    _ort_isa.add_option(p)
    p.add_argument("--repeat", type=int, default=10, help="block pairs per comparison")
    p.add_argument("--block-seconds", type=float, default=0.2, help="seconds per block")
    args = p.parse_args(argv)
    _ort_isa.require(p, args.ort_isa)
    for line in machine_lines(machine_info()):
        print(line)
    print(f"native target {args.native_target!r}, other target {args.isa_target!r}")
    warm_up_compiler(args.native_target)
    status = 0
    for name in args.models.split(","):
        spec = MODELS[name]
        model = spec.build()
        feeds = make_feeds(model)
        native = build_kiln(model, target=args.native_target)
        other = build_kiln(model, target=args.isa_target)
        lib_n, lib_o = native.factory.lib, other.factory.lib
        print(f"{name}: native {lib_n.path.name} ({' '.join(lib_n.compile_flags[2:])}, "
              f"{native.cold_s:.1f} s cold); other {lib_o.path.name} "
              f"({' '.join(lib_o.compile_flags[2:])}, {other.cold_s:.1f} s cold)")
        for threads in (int(t) for t in args.threads.split(",")):
            ort_run = ort_runner(ort_session(model, threads), feeds)
            run_n = KilnRunner(native, feeds, threads)
            run_o = KilnRunner(other, feeds, threads)
            expected = ort_run()
            for label, runner in (("native", run_n), ("other", run_o)):
                check = check_outputs(runner(), expected)
                if not check.ok:
                    print(f"  {label} output WRONG: {check.problem}")
                    status = 1
                else:
                    print(f"  {threads} thread(s): {label} output rel diff {check.rel:.1e}")
            kw = {"blocks": args.repeat, "block_s": args.block_seconds}
            n_vs_ort = compare(run_n, ort_run, **kw)
            o_vs_ort = compare(run_o, ort_run, **kw)
            o_vs_n = compare(run_o, run_n, **kw)
            gflop = spec.gflop
            print(f"  {threads} thread(s): native {n_vs_ort.a.median_ms:.2f} ms "
                  f"({gflop / n_vs_ort.a.median_ms * 1e3:.0f} GFLOP/s) vs ORT "
                  f"{n_vs_ort.b.median_ms:.2f} ms: {_ratio(n_vs_ort)} | other "
                  f"{o_vs_ort.a.median_ms:.2f} ms ({gflop / o_vs_ort.a.median_ms * 1e3:.0f} "
                  f"GFLOP/s) vs ORT {o_vs_ort.b.median_ms:.2f} ms: {_ratio(o_vs_ort)} | "
                  f"other/native {_ratio(o_vs_n)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
