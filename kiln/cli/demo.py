"""``kiln demo``: Kiln's main job on the bundled model.

Imports ``kiln/data/digits_cnn.onnx`` (a small CNN the repository trains on scikit-learn's 8x8
digits, see ``scripts/train_digits.py``), compiles it, runs it on the 360 held-out test images and
prints the accuracy, the latency and, when onnxruntime is installed, the agreement with it.
"""

from __future__ import annotations

import argparse
import shutil
import time
from importlib import resources
from pathlib import Path

import numpy as np

__all__ = ["add_arguments", "data_path", "run"]


def data_path(name: str) -> Path:
    """Path of a file bundled in ``kiln/data``."""
    return Path(str(resources.files("kiln") / "data" / name))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kiln demo``."""
    parser.add_argument("--target", default=None,
                        help="c (native, default when a C compiler is present) or numpy")
    parser.add_argument("--opt-level", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20,
                        help="timed runs of the whole test set (alternating with onnxruntime)")


def _default_target() -> str:
    from kiln.config import settings

    return "c" if shutil.which(settings.cc.split()[0]) else "numpy"


def run(args: argparse.Namespace) -> int:
    """Compile and run the bundled classifier; print accuracy and timing."""
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor

    data = np.load(data_path("digits_test.npz"))
    images, labels = data["images"], data["labels"]
    target = args.target or _default_target()
    n = len(images)

    t0 = time.perf_counter()
    mod, params = relay.frontend.from_onnx(str(data_path("digits_cnn.onnx")),
                                           shape={"image": images.shape})
    t1 = time.perf_counter()
    with kiln.transform.PassContext(opt_level=args.opt_level):
        factory = relay.build(mod, target=target, params=params)
    t2 = time.perf_counter()
    module = graph_executor.GraphModule(factory["default"](kiln.cpu()))
    module.set_input("image", images)
    module.run()
    probs = module.get_output(0).numpy()
    accuracy = float((probs.argmax(1) == labels).mean())

    threads = module.num_threads
    print("model      kiln/data/digits_cnn.onnx (conv3x3 -> relu -> maxpool -> dense -> relu -> dense "
          "-> softmax)")
    print(f"import     {(t1 - t0) * 1e3:8.1f} ms")
    print(f"build      {(t2 - t1) * 1e3:8.1f} ms   target={target} opt_level={args.opt_level}, "
          f"{sum(1 for n in factory.graph.nodes if n.op == 'tvm_op')} kernels")
    print(f"accuracy   {accuracy:.4f} on {n} held-out test images")
    sess = _onnxruntime_session(threads)
    if sess is not None:
        ref = sess.run(None, {"image": images})[0]
        print(f"check      max |kiln - onnxruntime| {np.abs(ref - probs).max():.2e}, same predictions: "
              f"{bool((ref.argmax(1) == probs.argmax(1)).all())}")
    kiln_ms, ort_ms = _alternate(module, sess, images, args.repeat)
    line = f"latency    kiln {kiln_ms:.3f} ms per batch of {n} ({kiln_ms / n * 1e3:.2f} us per image)"
    if ort_ms is not None:
        line += f", onnxruntime {ort_ms:.3f} ms: ratio kiln/ort {kiln_ms / ort_ms:.2f}"
    print(line + f"  [{threads} thread(s), medians of {args.repeat} alternating blocks]")
    _print_profile(factory, images)
    return 0


def _onnxruntime_session(threads: int) -> object | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(data_path("digits_cnn.onnx")), opts,
                                providers=["CPUExecutionProvider"])


def _alternate(module: object, sess: object | None, images: np.ndarray,
               blocks: int) -> tuple[float, float | None]:
    """Median ms of Kiln and onnxruntime, measured in alternating blocks in this process."""
    kiln_times: list[float] = []
    ort_times: list[float] = []
    for _ in range(blocks):
        start = time.perf_counter()
        module.run()  # type: ignore[attr-defined]
        kiln_times.append(time.perf_counter() - start)
        if sess is not None:
            start = time.perf_counter()
            sess.run(None, {"image": images})  # type: ignore[attr-defined]
            ort_times.append(time.perf_counter() - start)
    ort_ms = float(np.median(ort_times)) * 1e3 if ort_times else None
    return float(np.median(kiln_times)) * 1e3, ort_ms


def _print_profile(factory: object, images: np.ndarray) -> None:
    """The three most expensive kernels, from the debug executor's per-node profile."""
    import tempfile

    import kiln
    from kiln.contrib.debugger import debug_executor

    with tempfile.TemporaryDirectory() as dump_root:
        debug = debug_executor.create(factory.graph_json, factory, kiln.cpu(), dump_root=dump_root)
        debug.set_input("image", images)
        report = debug.profile(number=3, repeat=3)
    print("profile    top kernels (debug executor, per-node times):")
    for row in sorted(report.rows, key=lambda r: -r.mean_us)[:3]:
        print(f"           {row.mean_us:9.1f} us {row.percent:5.1f}%  {row.func}  "
              f"<- {', '.join(row.source_names) or '-'}")
    print(f"           {report.reconciliation()}")
