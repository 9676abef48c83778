"""Kernel benchmark: GEMM and conv2d GFLOP/s of Kiln and onnxruntime against the FMA peak.

Usage (from the repository root)::

    python bench/bench_kernels.py                           # every kernel, 1 and 2 threads
    python bench/bench_kernels.py --kernels gemm --threads 1
    python bench/bench_kernels.py --kernels conv_dw,gemm_1024 --json kernels.json

First the FMA peak of this CPU is measured (``bench/_peak.py``). Then each kernel is built
twice: in Kiln as a relay function of one ``nn.dense`` or ``nn.conv2d`` (the weight a param,
bound at build time as a model's weights are) with ``relay.build(..., target="c")`` at opt
level 3 and run through the graph executor, and in onnxruntime as a one-node model (MatMul or
Conv, the weight an initializer). Both run with inputs and outputs bound once, so a run is the
kernel's execution alone (plus any layout conversions Kiln's build inserted: the number of
kernels Kiln calls is printed). They are timed in the same process in alternating blocks; the
line gives both medians, their ratio, GFLOP/s and the share of the peak.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._engines import (  # noqa: E402
    KilnRunner,
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
from bench._timing import compare  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.ir import IRModule  # noqa: E402


@dataclass(frozen=True)
class Gemm:
    """``(M, K) x (K, N)``: Kiln ``nn.dense`` with an ``(N, K)`` weight, ONNX MatMul."""

    name: str
    m: int
    n: int
    k: int

    @property
    def gflop(self) -> float:
        """2 x M x N x K, in GFLOP."""
        return 2 * self.m * self.n * self.k / 1e9

    @property
    def shape(self) -> str:
        """The shape as printed."""
        return f"M={self.m} N={self.n} K={self.k}"

    def arrays(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The input ``(M, K)`` and the weight ``(N, K)``."""
        return (rng.standard_normal((self.m, self.k)).astype(np.float32),
                rng.standard_normal((self.n, self.k)).astype(np.float32))

    def relay_module(self, weight: np.ndarray) -> tuple[IRModule, dict[str, np.ndarray]]:
        """``dense(x, w)`` with ``w`` a param."""
        x = relay.var("x", shape=(self.m, self.k), dtype="float32")
        w = relay.var("w", shape=weight.shape, dtype="float32")
        return IRModule.from_expr(relay.Function([x, w], relay.nn.dense(x, w))), {"w": weight}

    def onnx_model(self, weight: np.ndarray) -> onnx.ModelProto:
        """A MatMul node with the transposed weight as its initializer."""
        node = helper.make_node("MatMul", ["x", "w"], ["y"], name="/MatMul")
        return _one_node(node, (self.m, self.k), (self.m, self.n),
                         numpy_helper.from_array(np.ascontiguousarray(weight.T), "w"))


@dataclass(frozen=True)
class Conv:
    """NCHW conv2d, batch 1, "same" padding: Kiln ``nn.conv2d``, ONNX Conv."""

    name: str
    cin: int
    size: int
    cout: int
    kernel: int
    stride: int = 1
    groups: int = 1

    @property
    def out_size(self) -> int:
        """Output height (and width)."""
        return (self.size + 2 * (self.kernel // 2) - self.kernel) // self.stride + 1

    @property
    def gflop(self) -> float:
        """2 x output elements x (input channels / groups) x kernel area, in GFLOP."""
        macs = self.cout * self.out_size ** 2 * (self.cin // self.groups) * self.kernel ** 2
        return 2 * macs / 1e9

    @property
    def shape(self) -> str:
        """The shape as printed."""
        dw = f" groups={self.groups}" if self.groups > 1 else ""
        return (f"{self.cin}x{self.size}x{self.size} -> {self.cout}, {self.kernel}x{self.kernel}"
                f"/{self.stride}{dw}")

    def arrays(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """The input ``(1, C, H, W)`` and the weight ``(O, C / groups, k, k)``."""
        k = self.kernel
        return (rng.standard_normal((1, self.cin, self.size, self.size)).astype(np.float32),
                rng.standard_normal((self.cout, self.cin // self.groups, k, k)).astype(np.float32))

    def relay_module(self, weight: np.ndarray) -> tuple[IRModule, dict[str, np.ndarray]]:
        """``conv2d(x, w)`` with ``w`` a param."""
        x = relay.var("x", shape=(1, self.cin, self.size, self.size), dtype="float32")
        w = relay.var("w", shape=weight.shape, dtype="float32")
        pad = self.kernel // 2
        y = relay.nn.conv2d(x, w, strides=(self.stride, self.stride), padding=(pad, pad),
                            groups=self.groups, channels=self.cout,
                            kernel_size=(self.kernel, self.kernel))
        return IRModule.from_expr(relay.Function([x, w], y)), {"w": weight}

    def onnx_model(self, weight: np.ndarray) -> onnx.ModelProto:
        """A Conv node with the weight as its initializer."""
        k, pad = self.kernel, self.kernel // 2
        node = helper.make_node("Conv", ["x", "w"], ["y"], name="/Conv", kernel_shape=[k, k],
                                pads=[pad] * 4, strides=[self.stride] * 2, group=self.groups)
        out = (1, self.cout, self.out_size, self.out_size)
        return _one_node(node, (1, self.cin, self.size, self.size), out,
                         numpy_helper.from_array(weight, "w"))


def _one_node(node: onnx.NodeProto, in_shape: tuple[int, ...], out_shape: tuple[int, ...],
              weight: onnx.TensorProto) -> onnx.ModelProto:
    graph = helper.make_graph([node], "kernel",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 8)
    return model


KERNELS: tuple[Gemm | Conv, ...] = (
    Gemm("gemm_512", 512, 512, 512),
    Gemm("gemm_1024", 1024, 1024, 1024),
    Gemm("gemm_bert_qkv", 128, 384, 384),
    Gemm("gemm_bert_ffn1", 128, 1536, 384),
    Gemm("gemm_bert_ffn2", 128, 384, 1536),
    Gemm("gemm_head_n10", 360, 10, 64),  # a 10-class head: N below one vector
    Conv("conv_r18_64x56_3x3", 64, 56, 64, 3),
    Conv("conv_r18_128x28_3x3", 128, 28, 128, 3),
    Conv("conv_r18_256x14_3x3", 256, 14, 256, 3),
    Conv("conv_r50_256x14_1x1", 256, 14, 1024, 1),
    Conv("conv_r18_512x7_3x3", 512, 7, 512, 3),
    Conv("conv_dw_144x56_3x3", 144, 56, 144, 3, groups=144),
)


@dataclass
class KernelRow:
    """One (kernel, threads) measurement; NaN where not measured."""

    kernel: str
    shape: str
    threads: int
    gflop: float
    ort_ms: float = float("nan")
    kiln_ms: float = float("nan")
    ratio: float = float("nan")
    ratio_low: float = float("nan")
    ratio_high: float = float("nan")
    ort_gflops: float = float("nan")
    kiln_gflops: float = float("nan")
    ort_pct_peak: float = float("nan")
    kiln_pct_peak: float = float("nan")
    kiln_threads: int = 0
    kiln_kernels: int = 0
    compile_cold_s: float = float("nan")
    max_abs_diff: float = float("nan")
    rel_diff: float = float("nan")
    blocks: int = 0
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        """The printed line: every number and the thread count."""
        threads = f"T={self.threads}"
        if self.kiln_threads and self.kiln_threads != self.threads:
            threads += f" (kiln runs {self.kiln_threads})"
        head = f"{self.kernel:<20} {self.shape:<28} {threads:<5}"
        if math.isnan(self.kiln_ms):
            return f"{head} FAILED: {'; '.join(self.problems)}"
        flag = "  <<< " + "; ".join(self.problems) if self.problems else ""
        return (f"{head} ort {self.ort_ms:8.3f} ms {self.ort_gflops:6.1f} GFLOP/s "
                f"({self.ort_pct_peak:4.1f}%) | kiln {self.kiln_ms:8.3f} ms "
                f"{self.kiln_gflops:6.1f} GFLOP/s ({self.kiln_pct_peak:4.1f}%), "
                f"{self.kiln_kernels} kernel(s) | kiln/ort {self.ratio:6.2f}x "
                f"[{self.ratio_low:.2f}-{self.ratio_high:.2f}] | max|diff| "
                f"{self.max_abs_diff:.1e} (rel {self.rel_diff:.1e}) | {self.blocks} blocks{flag}")


def _measure(case: Gemm | Conv, threads_list: list[int], args: argparse.Namespace,
             peaks: dict[int, float]) -> list[KernelRow]:
    data, weight = case.arrays(np.random.default_rng(0))
    rows = [KernelRow(case.name, case.shape, t, case.gflop) for t in threads_list]
    try:
        mod, params = case.relay_module(weight)
        build = build_kiln(mod, target=args.target, opt_level=args.opt_level, params=params)
    except Exception as e:
        traceback.print_exc(limit=3)
        for row in rows:
            row.problems.append(f"build: {type(e).__name__}: {e}")
        return rows
    model = case.onnx_model(weight)
    for row in rows:
        row.compile_cold_s, row.kiln_kernels = build.cold_s, build.kernels
        ort_run = ort_runner(ort_session(model, row.threads), {"x": data}, copy_io=False)
        try:
            kiln_run = KilnRunner(build, {"x": data}, row.threads, copy_io=False)
            row.kiln_threads = kiln_run.threads
            kiln_run()
            check = check_outputs(kiln_run.outputs(), [o.copy() for o in ort_run()])
        except Exception as e:
            traceback.print_exc(limit=3)
            row.problems.append(f"run: {type(e).__name__}: {e}")
            continue
        row.max_abs_diff, row.rel_diff = check.max_abs, check.rel
        if not check.ok:
            row.problems.append(f"WRONG OUTPUT: {check.problem}")
        result = compare(kiln_run, ort_run, args.repeat, args.block_seconds, args.max_seconds)
        row.kiln_ms, row.ort_ms, row.ratio = result.a.median_ms, result.b.median_ms, result.ratio
        row.ratio_low, row.ratio_high = result.ratio_spread
        row.blocks = result.blocks
        row.kiln_gflops = row.gflop / row.kiln_ms * 1e3
        row.ort_gflops = row.gflop / row.ort_ms * 1e3
        row.kiln_pct_peak = pct(row.kiln_gflops, peaks[row.threads])
        row.ort_pct_peak = pct(row.ort_gflops, peaks[row.threads])
    return rows


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    names = [k.name for k in KERNELS]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernels", default="",
                   help="comma-separated name prefixes, e.g. gemm,conv_dw (default: all of "
                        f"{', '.join(names)})")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--repeat", type=int, default=10,
                   help="alternating block pairs per (kernel, threads) (default 10)")
    p.add_argument("--block-seconds", type=float, default=0.2,
                   help="target duration of one block of runs (default 0.2)")
    p.add_argument("--max-seconds", type=float, default=20.0,
                   help="time budget of the timed blocks per (kernel, threads) (default 20)")
    p.add_argument("--target", default="c", help="Kiln target (default c)")
    p.add_argument("--opt-level", type=int, default=3, help="PassContext opt level (default 3)")
    p.add_argument("--json", default=None, help="also write the table to this JSON file")
    args = p.parse_args(argv)
    prefixes = [s.strip() for s in args.kernels.split(",") if s.strip()]
    args.cases = [k for k in KERNELS if not prefixes or any(k.name.startswith(p) for p in prefixes)]
    if not args.cases:
        p.error(f"no kernel name starts with {', '.join(prefixes)}; names: {', '.join(names)}")
    args.threads = [int(t) for t in args.threads.split(",") if t.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the kernel benchmark; returns 1 when any Kiln output was wrong or missing."""
    args = _parse_args(argv)
    info = machine_info()
    for line in machine_lines(info):
        print(line)
    measured = fma_peak(sorted({1, *args.threads}))
    peaks = peak_table(measured, args.threads)
    for line in peak_lines(measured, peaks):
        print(line)
    warm_up_compiler(args.target, args.opt_level)
    rows: list[KernelRow] = []
    for case in args.cases:
        for row in _measure(case, args.threads, args, peaks):
            rows.append(row)
            print(row.line(), flush=True)
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        write_json(args.json, {"machine": info, "fma_peak_probe": measured, "peak_gflops": peaks,
                               "rows": [asdict(r) for r in rows]})
    return 0 if all(not math.isnan(r.kiln_ms) and not r.problems for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
