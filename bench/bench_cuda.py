"""Kiln's cuda target against PyTorch on the same GPU: outputs, then latency, same process.

Two PyTorch models written here (no downloads, random weights): ``resnet50`` (torchvision's
architecture: bottleneck blocks 3-4-6-3, batch norm, 224x224) and ``bert_base`` (a BERT-base
encoder: embeddings, 12 post-norm layers of hidden 768, 12 heads, GELU FFN 3072, sequence 128).
Each is exported with PyTorch's TorchScript exporter (opset 17), imported by Kiln's ONNX frontend,
built for ``cuda`` and run by the GPU graph executor (params uploaded once, the graph replayed as
one CUDA graph); PyTorch runs the same module eagerly and under ``torch.compile``. TF32 is off in
PyTorch for both the check and the timing (Kiln computes plain float32).

Then the benchmark models of :mod:`bench.models` written node by node (``--onnx-models``): each is
built for ``cuda`` and its outputs are checked against onnxruntime on the CPU.

Timing alternates the engines in blocks in one process (:func:`bench._timing.compare`): the
ratio is Kiln's time / the other's, median over block pairs [min-max].

Usage::

    python bench/bench_cuda.py                           # both models, batch 1 and 16
    python bench/bench_cuda.py --models resnet50 --batch 1 --no-compile
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import kiln  # noqa: E402
from bench._timing import compare, time_alone  # noqa: E402
from bench.models_real import export_torch  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402

SEQ = 128


def _resnet50() -> Any:
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.down = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.bn1(self.conv1(x)))
            y = torch.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    layers: list[Any] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                         nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def _bert_base() -> Any:
    import torch
    from torch import nn

    hidden, heads, ffn = 768, 12, 3072

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.out = nn.Linear(hidden, hidden)
            self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
            self.up = nn.Linear(hidden, ffn)
            self.down = nn.Linear(ffn, hidden)
            self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

        def forward(self, x: Any, bias: Any) -> Any:
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hidden // heads) + bias, -1)
            ctx = (att @ v).transpose(1, 2).reshape(b, s, hidden)
            x = self.ln1(x + self.out(ctx))
            return self.ln2(x + self.down(nn.functional.gelu(self.up(x))))

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.words = nn.Embedding(30522, hidden)
            self.positions = nn.Embedding(512, hidden)
            self.types = nn.Embedding(2, hidden)
            self.ln = nn.LayerNorm(hidden, eps=1e-12)
            self.layers = nn.ModuleList(Layer() for _ in range(12))

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            pos = torch.arange(input_ids.shape[1], device=input_ids.device)
            x = self.ln(self.words(input_ids) + self.positions(pos)[None]
                        + self.types(torch.zeros_like(input_ids)))
            bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for layer in self.layers:
                x = layer(x, bias)
            return x

    return Bert()


def _model(name: str, batch: int) -> tuple[Any, dict[str, np.ndarray]]:
    import torch

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    if name == "resnet50":
        module = _resnet50()
        for m in module.modules():  # non-trivial batch norm statistics
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        feeds = {"input": rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)}
    else:
        module = _bert_base()
        mask = np.ones((batch, SEQ), np.int64)
        mask[:, SEQ * 3 // 4:] = 0
        feeds = {"input_ids": rng.integers(0, 30522, (batch, SEQ)).astype(np.int64),
                 "attention_mask": mask}
    return module.eval(), feeds


def _kiln(model: Any, feeds: dict[str, np.ndarray]) -> tuple[Any, float]:
    start = time.perf_counter()
    mod, params = relay.frontend.from_onnx(model, {k: v.shape for k, v in feeds.items()})
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="cuda", params=params)
    gm = graph_executor.GraphModule(lib["default"](kiln.cuda(0)))
    gm.set_input(**feeds)
    return gm, time.perf_counter() - start


def _row(name: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    module, feeds = _model(name, batch)
    onnx_model = export_torch(module, feeds, ["output"])
    gm, build_s = _kiln(onnx_model, feeds)
    gm.run()
    got = gm.get_output(0).numpy()
    gpu_module = module.cuda()
    targs = [torch.from_numpy(v).cuda() for v in feeds.values()]
    with torch.no_grad():
        want = gpu_module(*targs).float().cpu().numpy()
    err = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-30))
    ok = bool(np.allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.max(np.abs(want)))))
    row: dict[str, Any] = {"model": name, "batch": batch, "kiln_build_s": round(build_s, 2),
                           "max_rel_err": err, "matches": ok}
    print(f"{name} batch {batch}: Kiln built in {build_s:.1f} s; output vs PyTorch: max |err| / "
          f"max |y| = {err:.2e} ({'OK' if ok else 'MISMATCH'})", flush=True)

    def eager() -> None:
        with torch.no_grad():
            gpu_module(*targs)
        torch.cuda.synchronize()

    engines = {"eager": eager}
    if not args.no_compile:
        start = time.perf_counter()
        compiled = torch.compile(gpu_module)
        with torch.no_grad():
            compiled(*targs)
        torch.cuda.synchronize()
        row["torch_compile_s"] = round(time.perf_counter() - start, 1)

        def compiled_run() -> None:
            with torch.no_grad():
                compiled(*targs)
            torch.cuda.synchronize()

        engines["torch.compile"] = compiled_run
    for label, fn in engines.items():
        c = compare(gm.run, fn, blocks=args.repeat, block_s=0.2, max_seconds=args.max_seconds,
                    gap_s=0.0)
        lo, hi = c.ratio_spread
        row[label] = {"kiln_ms": round(c.a.median_ms, 3), "torch_ms": round(c.b.median_ms, 3),
                      "ratio": round(c.ratio, 3), "spread": [round(lo, 3), round(hi, 3)]}
        print(f"  Kiln {c.a.median_ms:8.3f} ms   {label:13s} {c.b.median_ms:8.3f} ms   "
              f"Kiln/{label} {c.ratio:.2f} [{lo:.2f}-{hi:.2f}]", flush=True)
    return row


def _onnx_rows(names: list[str]) -> list[dict[str, Any]]:
    import onnxruntime as ort

    from bench.models import MODELS, make_feeds

    rows = []
    for name in names:
        model = MODELS[name].build()
        feeds = make_feeds(model)
        gm, build_s = _kiln(model, feeds)
        gm.run()
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = sess.run(None, feeds)
        errs = []
        for i, w in enumerate(want):
            g = gm.get_output(i).numpy()
            errs.append(float(np.max(np.abs(g - w)) / (np.max(np.abs(w)) + 1e-30)))
        ok = max(errs) < 1e-3
        kiln_ms = time_alone(gm.run, blocks=3).median_ms
        rows.append({"model": name, "kiln_build_s": round(build_s, 2), "max_rel_err": max(errs),
                     "matches": ok, "kiln_ms": round(kiln_ms, 3)})
        print(f"{name}: built in {build_s:.1f} s, Kiln {kiln_ms:.3f} ms, output vs "
              f"onnxruntime max |err| / max |y| = {max(errs):.2e} ({'OK' if ok else 'MISMATCH'})",
              flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; returns 1 when an output did not match."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "bert_base"],
                        choices=["resnet50", "bert_base"])
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--onnx-models", nargs="*", default=[],
                        help="bench.models names to check against onnxruntime (CPU)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--repeat", type=int, default=5, help="block pairs per comparison")
    parser.add_argument("--max-seconds", type=float, default=20.0)
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    dev = kiln.runtime.cuda_driver.cuda(0)
    print(f"GPU: {dev.name} ({dev.arch}, {dev.multiprocessor_count} SMs)", flush=True)
    rows: list[dict[str, Any]] = []
    for batch in args.batch:
        for name in args.models:
            try:
                rows.append(_row(name, batch, args))
            except Exception as e:  # report it, go on with the next model
                print(f"{name} batch {batch}: FAILED: {type(e).__name__}: {e}", flush=True)
                rows.append({"model": name, "batch": batch, "matches": False, "error": str(e)})
            if args.json:  # after every row, so a run cut short keeps what it measured
                args.json.write_text(json.dumps({"gpu": dev.name, "arch": dev.arch,
                                                 "rows": rows}, indent=1))
    rows += _onnx_rows(args.onnx_models)
    if args.json:
        args.json.write_text(json.dumps({"gpu": dev.name, "arch": dev.arch, "rows": rows}, indent=1))
    return 0 if all(r["matches"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
