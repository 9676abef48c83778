"""``kiln demo``: Kiln's main job on the bundled model.

Imports ``kiln/data/digits_cnn.onnx`` (a small CNN the repository trains on scikit-learn's 8x8
digits, see ``scripts/train_digits.py``), compiles it, runs it on the 360 held-out test images and
prints the accuracy, the latency and, when onnxruntime is installed, the agreement with it and its
latency (without onnxruntime it says that these were skipped and how to install it). Without a
working C compiler it builds with the NumPy reference kernels and says so.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kiln.cli._args import positive_int

if TYPE_CHECKING:
    from kiln.runtime.factory import GraphExecutorFactoryModule

__all__ = ["add_arguments", "data_path", "run"]


def data_path(name: str) -> Path:
    """Path of a file bundled in ``kiln/data``."""
    return Path(str(resources.files("kiln") / "data" / name))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kiln demo``."""
    parser.add_argument("--target", default=None,
                        help="c (native; the default when a C compiler runs) or numpy (reference "
                             "kernels, no compiler)")
    parser.add_argument("--opt-level", type=int, default=3)
    parser.add_argument("--repeat", type=positive_int, default=20,
                        help="timed runs of the whole test set (alternating with onnxruntime)")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="kernel threads, also given to onnxruntime (default: usable CPUs)")


ORT_HINT = 'pip install onnxruntime (or install Kiln with its "[ort]" extra)'
"""How to get onnxruntime, which the demo checks and times Kiln against."""


def _choose_target(requested: str | None) -> str:
    """The target to build for: ``requested``, else ``c`` when the C compiler runs, else numpy
    (saying why on standard error)."""
    from kiln.cli._common import NUMPY_HINT, compiler_problem, require_compiler
    from kiln.target import Target

    if requested is not None:
        if Target(requested).is_native:
            require_compiler()
        return requested
    problem = compiler_problem()
    if problem is None:
        return "c"
    print(f"kiln demo: warning: {problem}: falling back to {NUMPY_HINT}, far slower than native "
          "code", file=sys.stderr)
    return "numpy"


def run(args: argparse.Namespace) -> int:
    """Compile and run the bundled classifier; print accuracy, the check and timing."""
    import kiln
    from kiln import progress, relay
    from kiln.cli._common import pass_context
    from kiln.contrib import graph_executor

    data = np.load(data_path("digits_test.npz"))
    images, labels = data["images"], data["labels"]
    target = _choose_target(args.target)
    n = len(images)

    t0 = time.perf_counter()
    with progress.stage("import"):
        mod, params = relay.frontend.from_onnx(str(data_path("digits_cnn.onnx")),
                                               shape={"image": images.shape})
    t1 = time.perf_counter()
    with progress.stage("build"), pass_context(args.opt_level, getattr(args, "verbose", False)):
        factory = relay.build(mod, target=target, params=params)
    t2 = time.perf_counter()
    module = graph_executor.GraphModule(factory["default"](kiln.cpu()))
    if args.threads is not None:  # (the numpy target's kernels are single-threaded)
        module.set_num_threads(args.threads)
    module.set_input("image", images)
    module.run()
    probs = module.get_output(0).numpy()
    accuracy = float((probs.argmax(1) == labels).mean())

    threads = module.num_threads
    print("model      kiln/data/digits_cnn.onnx (conv3x3 -> relu -> maxpool -> dense -> relu -> dense "
          "-> softmax)")
    print(f"import     {(t1 - t0) * 1e3:8.1f} ms")
    print(f"build      {(t2 - t1) * 1e3:8.1f} ms   target={target} opt_level={args.opt_level}, "
          f"{sum(1 for n in factory.graph.nodes if n.op == 'tvm_op')} kernels"
          + (" (reused from the build cache)" if factory.from_build_cache else ""))
    print(f"accuracy   {accuracy:.4f} on {n} held-out test images")
    sess, missing = _onnxruntime_session(threads)
    if sess is not None:
        ref = sess.run(None, {"image": images})[0]  # type: ignore[attr-defined]
        print(f"check      max |kiln - onnxruntime| {np.abs(ref - probs).max():.2e}, same predictions: "
              f"{bool((ref.argmax(1) == probs.argmax(1)).all())}")
    else:
        print(f"check      skipped (and no onnxruntime timing): {missing}; {ORT_HINT}")
    with progress.stage("timing", total=args.repeat, unit="runs") as st:
        kiln_ms, ort_ms = _alternate(module, sess, images, args.repeat, st.advance)
    line = f"latency    kiln {kiln_ms:.3f} ms per batch of {n} ({kiln_ms / n * 1e3:.2f} us per image)"
    if ort_ms is not None:
        line += f", onnxruntime {ort_ms:.3f} ms: ratio kiln/ort {kiln_ms / ort_ms:.2f}"
        how = f"medians of {args.repeat} alternating runs"
    else:
        how = f"median of {args.repeat} runs"
    print(line + f"  [{threads} thread(s), {how}]")
    with progress.stage("profile"):
        _print_profile(factory, images)
    return 0


def _onnxruntime_session(threads: int) -> tuple[object | None, str]:
    """An onnxruntime session of the bundled model, or None and why there is none."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        return None, ("onnxruntime is not installed" if e.name == "onnxruntime"
                      else f"onnxruntime cannot be imported ({e})")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(data_path("digits_cnn.onnx")), opts,
                                providers=["CPUExecutionProvider"]), ""


def _alternate(module: object, sess: object | None, images: np.ndarray, blocks: int,
               done: Callable[[], None] = lambda: None) -> tuple[float, float | None]:
    """Median ms of Kiln and onnxruntime, measured in alternating runs in this process."""
    kiln_times: list[float] = []
    ort_times: list[float] = []
    for _ in range(blocks):
        done()
        start = time.perf_counter()
        module.run()  # type: ignore[attr-defined]
        kiln_times.append(time.perf_counter() - start)
        if sess is not None:
            start = time.perf_counter()
            sess.run(None, {"image": images})  # type: ignore[attr-defined]
            ort_times.append(time.perf_counter() - start)
    ort_ms = float(np.median(ort_times)) * 1e3 if ort_times else None
    return float(np.median(kiln_times)) * 1e3, ort_ms


def _print_profile(factory: GraphExecutorFactoryModule, images: np.ndarray) -> None:
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
        where = "data in cache, vs the FMA peak" if row.bound == "cache" else f"{row.bound} bound"
        roof = (f"  [{row.gflops:.1f} GFLOP/s, {row.roof_percent:.0f}% of the roofline, {where}]"
                if row.flops and row.roof_percent is not None else "")
        print(f"           {row.mean_us:9.1f} us {row.percent:5.1f}%  {row.func}  "
              f"<- {', '.join(row.source_names) or '-'}{roof}")
    print(f"           {report.reconciliation()}")
    if report.peak is not None:
        print(f"           {report.peak_line()}")
