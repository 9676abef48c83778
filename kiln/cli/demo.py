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
    parser.add_argument("--repeat", type=int, default=20, help="timed runs of the whole test set")


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

    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        module.run()
        times.append(time.perf_counter() - start)
    median = float(np.median(times))

    print("model      kiln/data/digits_cnn.onnx (conv3x3 -> relu -> maxpool -> dense -> relu -> dense "
          "-> softmax)")
    print(f"import     {(t1 - t0) * 1e3:8.1f} ms   ({len(mod['main'].params)} inputs, "
          f"{len(params)} params)")
    print(f"build      {(t2 - t1) * 1e3:8.1f} ms   target={target} opt_level={args.opt_level}")
    print(f"accuracy   {accuracy:.4f} on {n} held-out test images")
    print(f"latency    {median * 1e3:8.3f} ms per batch of {n} (median of {args.repeat}), "
          f"{median / n * 1e6:.2f} us per image")
    try:
        import onnxruntime as ort
    except ImportError:
        return 0
    sess = ort.InferenceSession(str(data_path("digits_cnn.onnx")), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"image": images})[0]
    print(f"onnxruntime max |difference| {np.abs(ref - probs).max():.2e}, same predictions: "
          f"{bool((ref.argmax(1) == probs.argmax(1)).all())}")
    return 0
