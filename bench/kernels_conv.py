"""Per-layer benchmark of Kiln's convolution kernels: ResNet-18/50 and MobileNetV2 layer shapes.

Usage (from the repository root)::

    python bench/kernels_conv.py                        # every layer, 1 and 2 threads
    python bench/kernels_conv.py --layers r18_,mv2_dw --threads 1 --default

Each layer is the fused kernel a network runs: a blocked convolution (``conv2d_NCHWc`` or
``depthwise_conv2d_NCHWc`` in the layout AlterOpLayout picks for this machine's vector width)
plus bias and relu (relu6 for MobileNetV2), with the activations already blocked, so a run is
the kernel alone. All layers are compiled into one library with the schedule templates
(``kiln.te.templates``), and with ``--default`` a second time with the generic default schedule.
onnxruntime runs the same layer as a one-node ``Conv`` (bias input) followed by ``Relu`` /
``Clip`` on NCHW tensors, so its time includes whatever layout conversions it does inside.

Timing: per (layer, threads), both engines are warmed up, then run in alternating blocks of
about ``--block-seconds``; the reported time is each engine's **minimum** over all runs (the
least disturbed run on a shared machine). GFLOP counts 2 x multiply-adds; % of peak uses
threads x the measured one-core FMA peak. Outputs are checked against onnxruntime.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._engines import ort_session  # noqa: E402
from bench._peak import fma_peak  # noqa: E402
from bench._report import (  # noqa: E402
    machine_info,
    machine_lines,
    pct,
    peak_lines,
    peak_table,
    write_json,
)
from kiln import relay  # noqa: E402
from kiln.codegen.native import build_native, detect_vector_bytes  # noqa: E402
from kiln.config import settings  # noqa: E402
from kiln.ir.expr import Function  # noqa: E402
from kiln.ir.module import IRModule  # noqa: E402
from kiln.te.default_schedule import default_schedule  # noqa: E402
from kiln.transform.alter_op_layout import channel_block  # noqa: E402
from kiln.transform.infer_type import infer_type  # noqa: E402


@dataclass(frozen=True)
class Layer:
    """A conv layer, batch 1, "same" padding, followed by bias and an activation."""

    name: str
    cin: int
    size: int
    cout: int
    kernel: int
    stride: int = 1
    depthwise: bool = False
    relu6: bool = False

    @property
    def out_size(self) -> int:
        """Output height and width."""
        pad = self.kernel // 2
        return (self.size + 2 * pad - self.kernel) // self.stride + 1

    @property
    def gflop(self) -> float:
        """2 x multiply-adds, in GFLOP."""
        per_out = (1 if self.depthwise else self.cin) * self.kernel ** 2
        return 2 * self.cout * self.out_size ** 2 * per_out / 1e9

    @property
    def shape(self) -> str:
        """The shape as printed."""
        kind = " dw" if self.depthwise else ""
        return (f"{self.cin}x{self.size}^2->{self.cout} {self.kernel}x{self.kernel}/"
                f"{self.stride}{kind}")


def _layers() -> tuple[Layer, ...]:
    r18 = [("stem", 3, 224, 64, 7, 2), ("64x56_3x3", 64, 56, 64, 3, 1),
           ("64x56_3x3_s2", 64, 56, 128, 3, 2), ("64x56_1x1_s2", 64, 56, 128, 1, 2),
           ("128x28_3x3", 128, 28, 128, 3, 1), ("128x28_3x3_s2", 128, 28, 256, 3, 2),
           ("256x14_3x3", 256, 14, 256, 3, 1), ("256x14_3x3_s2", 256, 14, 512, 3, 2),
           ("512x7_3x3", 512, 7, 512, 3, 1)]
    r50 = [("64x56_1x1", 64, 56, 64, 1, 1), ("64x56_1x1_256", 64, 56, 256, 1, 1),
           ("256x56_1x1", 256, 56, 64, 1, 1), ("128x56_3x3_s2", 128, 56, 128, 3, 2),
           ("256x56_1x1_s2", 256, 56, 512, 1, 2), ("512x28_1x1", 512, 28, 128, 1, 1),
           ("128x28_1x1", 128, 28, 512, 1, 1), ("1024x14_1x1", 1024, 14, 256, 1, 1),
           ("256x14_1x1", 256, 14, 1024, 1, 1), ("1024x14_1x1_s2", 1024, 14, 2048, 1, 2),
           ("2048x7_1x1", 2048, 7, 512, 1, 1), ("512x7_1x1", 512, 7, 2048, 1, 1)]
    dw = [(32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (192, 28, 2),
          (384, 14, 1), (576, 14, 1), (576, 14, 2), (960, 7, 1)]
    pw = [(32, 112, 16), (16, 112, 96), (96, 56, 24), (24, 56, 144), (144, 56, 24),
          (144, 28, 32), (32, 28, 192), (192, 28, 32), (384, 14, 64), (64, 14, 384),
          (576, 14, 96), (96, 14, 576), (576, 7, 160), (960, 7, 160), (160, 7, 960),
          (960, 7, 320), (320, 7, 1280)]
    out = [Layer(f"r18_{n}", *a) for n, *a in r18]
    out += [Layer(f"r50_{n}", *a) for n, *a in r50]
    out.append(Layer("mv2_stem", 3, 224, 32, 3, 2, relu6=True))
    out += [Layer(f"mv2_dw_{c}x{s}" + ("_s2" if st == 2 else ""), c, s, c, 3, st, True, True)
            for c, s, st in dw]
    out += [Layer(f"mv2_pw_{c}x{s}_{o}", c, s, o, 1, 1, relu6=True) for c, s, o in pw]
    return tuple(out)


LAYERS = _layers()


def blocked_function(layer: Layer, lanes: int) -> tuple[Function, int, int]:
    """The fused blocked kernel of ``layer`` and its input / output channel blocks."""
    ic = 1 if layer.depthwise else channel_block(layer.cin, lanes)
    oc = channel_block(layer.cout, lanes)
    if layer.depthwise:
        ic = oc
    k, pad = layer.kernel, layer.kernel // 2
    data = relay.var("data", shape=(1, layer.cin // ic, layer.size, layer.size, ic))
    bias = relay.var("bias", shape=(1, layer.cout // oc, 1, 1, oc))
    if layer.depthwise:
        weight = relay.var("weight", shape=(layer.cout // oc, 1, k, k, 1, oc))
        y = relay.nn.contrib_depthwise_conv2d_nchwc(
            data, weight, strides=layer.stride, padding=pad, groups=layer.cin,
            channels=layer.cout, kernel_size=k, data_layout=f"NCHW{ic}c",
            kernel_layout=f"OIHW1i{oc}o", out_layout=f"NCHW{oc}c")
    else:
        weight = relay.var("weight", shape=(layer.cout // oc, layer.cin // ic, k, k, ic, oc))
        y = relay.nn.contrib_conv2d_nchwc(
            data, weight, strides=layer.stride, padding=pad, channels=layer.cout,
            kernel_size=k, data_layout=f"NCHW{ic}c", kernel_layout=f"OIHW{ic}i{oc}o",
            out_layout=f"NCHW{oc}c")
    y = relay.add(y, bias)
    y = relay.clip(y, 0.0, 6.0) if layer.relu6 else relay.nn.relu(y)
    func = relay.Function([data, weight, bias], y).with_attr("Primitive", 1)
    return infer_type(IRModule.from_expr(func))["main"], ic, oc


def _to_blocked(x: np.ndarray, block: int) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def _from_blocked(y: np.ndarray) -> np.ndarray:
    n, cc, h, w, b = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cc * b, h, w)


def _pack_weight(w: np.ndarray, ic: int, oc: int) -> np.ndarray:
    o, i, kh, kw = w.shape
    packed = w.reshape(o // oc, oc, i // ic, ic, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    return np.ascontiguousarray(packed)


def onnx_layer(layer: Layer, weight: np.ndarray, bias: np.ndarray) -> onnx.ModelProto:
    """One Conv (bias input) then Relu or Clip(0, 6), NCHW."""
    k, pad = layer.kernel, layer.kernel // 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], pads=[pad] * 4,
                              strides=[layer.stride] * 2,
                              group=layer.cin if layer.depthwise else 1)]
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")]
    if layer.relu6:
        inits += [numpy_helper.from_array(np.float32(0), "lo"),
                  numpy_helper.from_array(np.float32(6), "hi")]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    else:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    out = (1, layer.cout, layer.out_size, layer.out_size)
    graph = helper.make_graph(
        nodes, layer.name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, layer.cin, layer.size,
                                                                 layer.size))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 8)
    return model


def min_time(fns: list[Callable[[], object]], seconds: float, blocks: int) -> list[float]:
    """Minimum seconds per call of each function, over alternating blocks after a warm-up."""
    best = [math.inf] * len(fns)
    per_call = []
    for fn in fns:
        fn()
        start = time.perf_counter()
        count = 0
        while count < 3 or time.perf_counter() - start < 0.1:
            fn()
            count += 1
        per_call.append((time.perf_counter() - start) / count)
    runs = [max(1, round(seconds / max(p, 1e-9))) for p in per_call]
    for b in range(blocks):
        order = range(len(fns)) if b % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            for _ in range(runs[i]):
                start = time.perf_counter()
                fns[i]()
                best[i] = min(best[i], time.perf_counter() - start)
    return best


@dataclass
class Row:
    """One (layer, threads) measurement, milliseconds and GFLOP/s."""

    layer: str
    shape: str
    threads: int
    gflop: float
    kiln_ms: float
    ort_ms: float
    default_ms: float
    kiln_gflops: float
    kiln_pct_peak: float
    ort_gflops: float
    rel_diff: float

    def line(self) -> str:
        """The printed line."""
        default = f" | default {self.default_ms:8.3f} ms" if not math.isnan(self.default_ms) \
            else ""
        return (f"{self.layer:<22} {self.shape:<26} T={self.threads} kiln {self.kiln_ms:8.3f} ms "
                f"{self.kiln_gflops:6.1f} GFLOP/s ({self.kiln_pct_peak:5.1f}% peak) | ort "
                f"{self.ort_ms:8.3f} ms {self.ort_gflops:6.1f} GFLOP/s | kiln/ort "
                f"{self.kiln_ms / self.ort_ms:5.2f}x{default} | rel diff {self.rel_diff:.1e}")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", default="", help="comma-separated name prefixes (default: all)")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--blocks", type=int, default=6, help="alternating blocks (default 6)")
    p.add_argument("--block-seconds", type=float, default=0.1,
                   help="seconds of runs per block and engine (default 0.1)")
    p.add_argument("--default", action="store_true",
                   help="also time the default schedule (no templates)")
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = p.parse_args(argv)
    prefixes = [s for s in args.layers.split(",") if s]
    args.cases = [x for x in LAYERS if not prefixes or any(x.name.startswith(q) for q in prefixes)]
    if not args.cases:
        p.error(f"no layer starts with {prefixes}; names: {', '.join(x.name for x in LAYERS)}")
    args.threads = [int(t) for t in args.threads.split(",") if t]
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 1 when an output differs from onnxruntime's."""
    args = _parse_args(argv)
    info = machine_info()
    for line in machine_lines(info):
        print(line)
    measured = fma_peak(sorted({1, *args.threads}))
    peaks = peak_table(measured, args.threads)
    for line in peak_lines(measured, peaks):
        print(line)
    lanes = detect_vector_bytes() // 4
    threads_built = max(settings.num_threads, *args.threads)
    funcs, blocks = {}, {}
    for layer in args.cases:
        funcs[layer.name], ic, oc = blocked_function(layer, lanes)
        blocks[layer.name] = (ic, oc)
    start = time.perf_counter()
    lib = build_native(funcs)
    print(f"built {len(funcs)} kernels in {time.perf_counter() - start:.1f} s")
    default_lib = None
    if args.default:
        vb = detect_vector_bytes()
        default_lib = build_native(
            {f"d_{k}": f for k, f in funcs.items()},
            schedule_lookup=lambda dag, _: default_schedule(dag, vb, threads_built))
    rows: list[Row] = []
    rng = np.random.default_rng(0)
    for layer in args.cases:
        ic, oc = blocks[layer.name]
        x = rng.standard_normal((1, layer.cin, layer.size, layer.size)).astype(np.float32)
        w = (rng.standard_normal((layer.cout, 1 if layer.depthwise else layer.cin, layer.kernel,
                                  layer.kernel)) * 0.1).astype(np.float32)
        b = rng.standard_normal(layer.cout).astype(np.float32)
        wb = _pack_weight(w, 1 if layer.depthwise else ic, oc)
        bb = np.ascontiguousarray(b.reshape(1, layer.cout // oc, 1, 1, oc))
        xb = _to_blocked(x, ic)
        out = np.zeros((1, layer.cout // oc, layer.out_size, layer.out_size, oc), np.float32)
        kiln_call = lib.kernel(layer.name).bind([xb, wb, bb, out])
        fns: list[Callable[[], object]] = [kiln_call]
        if default_lib is not None:
            out_d = np.zeros_like(out)
            fns.append(default_lib.kernel(f"d_{layer.name}").bind([xb, wb, bb, out_d]))
        model = onnx_layer(layer, w, b)
        for t in args.threads:
            lib.set_num_threads(t)
            if default_lib is not None:
                default_lib.set_num_threads(t)
            sess = ort_session(model, t)
            ort_call = lambda s=sess, feed={"x": x}: s.run(None, feed)  # noqa: E731
            ref = ort_call()[0]
            kiln_call()
            rel = float(np.abs(_from_blocked(out) - ref).max() / max(np.abs(ref).max(), 1e-30))
            best = min_time([*fns, ort_call], args.block_seconds, args.blocks)
            kiln_s, ort_s = best[0], best[-1]
            default_s = best[1] if default_lib is not None else math.nan
            row = Row(layer.name, layer.shape, t, layer.gflop, kiln_s * 1e3, ort_s * 1e3,
                      default_s * 1e3, layer.gflop / kiln_s, pct(layer.gflop / kiln_s, peaks[t]),
                      layer.gflop / ort_s, rel)
            rows.append(row)
            print(row.line(), flush=True)
    print(f"load average at the end: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print("\n| layer | shape | threads | Kiln ms | Kiln GFLOP/s | % peak | ORT ms | Kiln/ORT |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r.layer} | {r.shape} | {r.threads} | {r.kiln_ms:.3f} | {r.kiln_gflops:.1f} | "
              f"{r.kiln_pct_peak:.1f} | {r.ort_ms:.3f} | {r.kiln_ms / r.ort_ms:.2f} |")
    if args.json:
        write_json(args.json, {"machine": info, "fma_peak_probe": measured, "peak_gflops": peaks,
                               "rows": [asdict(r) for r in rows]})
    return 0 if all(r.rel_diff < 1e-4 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
