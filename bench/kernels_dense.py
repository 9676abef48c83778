"""Transformer kernels: dense/GEMM, attention batch_matmul, softmax and layer norm rows.

Usage (from the repository root)::

    python bench/kernels_dense.py                        # every case, 1 and 2 threads
    python bench/kernels_dense.py --cases bert --threads 1 --blocks 20
    python bench/kernels_dense.py --cases qk,pv,softmax

Each case is built in Kiln as a one-operator relay function with ``relay.build(..., "c")`` at opt
level 3 (a dense weight is a param bound at build, so it is packed to ``NC{n}n`` and scheduled by
the ``dense_pack`` template; batched products first go through ``AlterBatchMatmul``, as the
encoders' builds do) and run through the graph executor with its inputs set once; onnxruntime
runs the matching one-node model (MatMul with an initializer, batched MatMul, Softmax,
LayerNormalization) with inputs and outputs bound once. Both are timed in the same process in
alternating blocks after a warm-up; the line gives each engine's **minimum** time over all runs
(the least disturbed by other processes on a shared machine), GFLOP/s (2 x multiply-adds; rows
kernels print GB/s of the tensor read and written instead) and Kiln's share of the FMA peak.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._engines import KilnRunner, build_kiln, ort_runner, ort_session  # noqa: E402
from bench._peak import fma_peak  # noqa: E402
from bench._report import machine_info, machine_lines  # noqa: E402
from bench._timing import compare  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.ir import IRModule  # noqa: E402
from kiln.target import Target  # noqa: E402
from kiln.transform import InferType, PassContext  # noqa: E402
from kiln.transform.alter_batch_matmul import AlterBatchMatmul  # noqa: E402

OPSET = 17


@dataclass(frozen=True)
class Case:
    """One kernel: ``kind`` is ``dense`` (M, N, K), ``bmm`` (B, M, N, K), ``softmax`` or
    ``layernorm`` (the input shape)."""

    name: str
    group: str
    kind: str
    dims: tuple[int, ...]

    @property
    def gflop(self) -> float:
        """2 x multiply-adds (0 for the row kernels)."""
        if self.kind == "dense":
            m, n, k = self.dims
            return 2 * m * n * k / 1e9
        if self.kind == "bmm":
            b, m, n, k = self.dims
            return 2 * b * m * n * k / 1e9
        return 0.0

    @property
    def gbytes(self) -> float:
        """Bytes a row kernel reads and writes once (float32)."""
        return 2 * 4 * int(np.prod(self.dims)) / 1e9


CASES = [
    Case("bert_qkv", "bert", "dense", (128, 384, 384)),
    Case("bert_ffn_up", "bert", "dense", (128, 1536, 384)),
    Case("bert_ffn_down", "bert", "dense", (128, 384, 1536)),
    Case("vit_qkv", "vit", "dense", (197, 576, 192)),
    Case("vit_proj", "vit", "dense", (197, 192, 192)),
    Case("vit_ffn_up", "vit", "dense", (197, 768, 192)),
    Case("vit_ffn_down", "vit", "dense", (197, 192, 768)),
    Case("resnet_fc", "gemv", "dense", (1, 1000, 2048)),
    Case("bert_qk", "qk", "bmm", (12, 128, 128, 32)),
    Case("bert_pv", "pv", "bmm", (12, 128, 32, 128)),
    Case("vit_qk", "qk", "bmm", (3, 197, 197, 64)),
    Case("vit_pv", "pv", "bmm", (3, 197, 64, 197)),
    Case("bert_softmax", "softmax", "softmax", (1, 12, 128, 128)),
    Case("vit_softmax", "softmax", "softmax", (1, 3, 197, 197)),
    Case("bert_layernorm", "layernorm", "layernorm", (1, 128, 384)),
    Case("vit_layernorm", "layernorm", "layernorm", (1, 197, 192)),
]


def _inputs(case: Case, rng: np.random.Generator) -> tuple[dict[str, np.ndarray],
                                                            dict[str, np.ndarray]]:
    """Graph inputs and params (weights)."""
    def rand(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    if case.kind == "dense":
        m, n, k = case.dims
        return {"x": rand(m, k)}, {"w": rand(n, k)}
    if case.kind == "bmm":
        b, m, n, k = case.dims
        return {"a": rand(b, m, k), "b": rand(b, k, n)}, {}
    if case.kind == "softmax":
        return {"x": rand(*case.dims)}, {}
    c = case.dims[-1]
    return {"x": rand(*case.dims)}, {"g": rand(c), "beta": rand(c)}


def _relay(case: Case, feeds: dict[str, np.ndarray], params: dict[str, np.ndarray]) -> IRModule:
    vs = {n: relay.var(n, shape=a.shape) for n, a in {**feeds, **params}.items()}
    if case.kind == "dense":
        body = relay.nn.dense(vs["x"], vs["w"])
    elif case.kind == "bmm":
        body = relay.nn.batch_matmul(vs["a"], vs["b"], transpose_b=False)
    elif case.kind == "softmax":
        body = relay.nn.softmax(vs["x"], axis=-1)
    else:
        body = relay.nn.layer_norm(vs["x"], vs["g"], vs["beta"], axis=-1, epsilon=1e-5)
    mod = InferType()(IRModule.from_expr(relay.Function(list(vs.values()), body)))
    if case.kind == "bmm":
        with Target("c"), PassContext(opt_level=3):
            mod = InferType()(AlterBatchMatmul()(mod))
    return mod


def _onnx(case: Case, feeds: dict[str, np.ndarray], params: dict[str, np.ndarray],
          out_shape: tuple[int, ...]) -> onnx.ModelProto:
    inits = []
    if case.kind == "dense":
        inits = [numpy_helper.from_array(np.ascontiguousarray(params["w"].T), "w")]
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
    elif case.kind == "bmm":
        node = helper.make_node("MatMul", ["a", "b"], ["y"])
    elif case.kind == "softmax":
        node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    else:
        inits = [numpy_helper.from_array(params["g"], "g"),
                 numpy_helper.from_array(params["beta"], "beta")]
        node = helper.make_node("LayerNormalization", ["x", "g", "beta"], ["y"], axis=-1,
                                epsilon=1e-5)
    graph = helper.make_graph(
        [node], case.name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)


def _measure(case: Case, threads: list[int], blocks: int, peak: float) -> list[str]:
    rng = np.random.default_rng(0)
    feeds, params = _inputs(case, rng)
    build = build_kiln(_relay(case, feeds, params), params=params)
    lines = []
    for t in threads:
        kiln_run = KilnRunner(build, feeds, t, copy_io=False)
        kiln_run()
        out = kiln_run.outputs()[0]
        session = ort_session(_onnx(case, feeds, params, out.shape), t)
        ort_run = ort_runner(session, feeds, copy_io=False)
        want = session.run(None, feeds)[0]
        err = float(np.abs(out - want).max() / max(1e-30, np.abs(want).max()))
        cmp = compare(kiln_run, ort_run, blocks=blocks, block_s=0.1, max_seconds=20)
        k_s = min(min(b) for b in cmp.a.blocks)
        o_s = min(min(b) for b in cmp.b.blocks)
        if case.gflop:
            rate = (f"kiln {case.gflop / k_s:7.1f} GFLOP/s ({100 * case.gflop / k_s / (t * peak):4.1f}% "
                    f"peak) | ort {case.gflop / o_s:7.1f} GFLOP/s")
        else:
            rate = f"kiln {case.gbytes / k_s:6.1f} GB/s | ort {case.gbytes / o_s:6.1f} GB/s"
        dims = "x".join(str(d) for d in case.dims)
        lines.append(f"{case.name:15s} {dims:15s} T={t}  kiln {k_s * 1e3:8.3f} ms  ort "
                     f"{o_s * 1e3:8.3f} ms  kiln/ort {k_s / o_s:5.2f} | {rate} | "
                     f"{build.kernels} kernel(s), rel err {err:.1e}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated case names or groups "
                        f"({', '.join(sorted({c.group for c in CASES}))}); default: all")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--blocks", type=int, default=10, help="alternating block pairs")
    parser.add_argument("--peak-gflops", type=float, default=0.0,
                        help="one-core FMA peak to use instead of measuring it")
    args = parser.parse_args(argv)
    wanted = {s for s in args.cases.split(",") if s}
    cases = [c for c in CASES if not wanted or c.name in wanted or c.group in wanted]
    threads = [int(t) for t in args.threads.split(",")]
    for line in machine_lines(machine_info()):
        print(line)
    peak = args.peak_gflops or fma_peak([1])[1]
    print(f"FMA peak, one core: {peak:.1f} GFLOP/s; times are minimums over all runs")
    for case in cases:
        for line in _measure(case, threads, args.blocks, peak):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
