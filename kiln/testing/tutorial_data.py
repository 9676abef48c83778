"""Local stand-ins for the files TVM's tutorials download (models, an image, label lists).

The conformance runner replaces each tutorial's ``download_testdata`` import with
:func:`download_testdata` from here (a mechanical edit): instead of fetching ``url`` it builds the
file named ``relpath`` in ``./testdata`` (the tutorial's working folder), deterministically.
The models have the architecture of the downloaded ones and seeded random weights, so a tutorial
runs end to end; its printed predictions are not meaningful.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = ["LOCAL_FILES", "download_testdata"]


def _super_resolution_onnx(path: Path) -> None:
    """The PyTorch super-resolution example (upscale 3) as ONNX: input ``"1"`` of (1, 1, 224, 224)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    convs = [(64, 1, 5, 2), (64, 64, 3, 1), (32, 64, 3, 1), (9, 32, 3, 1)]
    nodes, inits = [], []
    x = "1"
    for i, (co, ci, k, pad) in enumerate(convs):
        w = (rng.standard_normal((co, ci, k, k)) * np.sqrt(2.0 / (ci * k * k))).astype("float32")
        b = np.zeros(co, "float32")
        inits += [numpy_helper.from_array(w, f"conv{i}.weight"), numpy_helper.from_array(b, f"conv{i}.bias")]
        y = f"conv{i}"
        nodes.append(helper.make_node("Conv", [x, f"conv{i}.weight", f"conv{i}.bias"], [y],
                                      kernel_shape=[k, k], pads=[pad] * 4, strides=[1, 1]))
        if i < len(convs) - 1:
            nodes.append(helper.make_node("Relu", [y], [f"relu{i}"]))
            y = f"relu{i}"
        x = y
    inits += [numpy_helper.from_array(np.array([1, 1, 3, 3, 224, 224], "int64"), "shape1"),
              numpy_helper.from_array(np.array([1, 1, 672, 672], "int64"), "shape2")]
    nodes += [helper.make_node("Reshape", [x, "shape1"], ["r1"]),
              helper.make_node("Transpose", ["r1"], ["t1"], perm=[0, 1, 4, 2, 5, 3]),
              helper.make_node("Reshape", ["t1", "shape2"], ["out"])]
    graph = helper.make_graph(nodes, "super_resolution",
                              [helper.make_tensor_value_info("1", TensorProto.FLOAT, [1, 1, 224, 224])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 1, 672, 672])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    onnx.save(model, str(path))


def _cat_png(path: Path) -> None:
    """A 256x256 RGB image (smooth colour gradients)."""
    from PIL import Image

    yy, xx = np.mgrid[0:256, 0:256]
    rgb = np.stack([xx, yy, (xx + yy) // 2], axis=-1).astype("uint8")
    Image.fromarray(rgb, "RGB").save(path)


def _labels(prefix: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_text("\n".join(f"n{i:08d} {prefix} {i}" for i in range(1000)) + "\n")
    return write


def _class_keys(path: Path) -> None:
    """Class id -> synset key, one a line (as ``imagenet_classes.txt``)."""
    path.write_text("\n".join(f"n{i:08d}" for i in range(1000)) + "\n")


#: relpath -> builder of the local file.
LOCAL_FILES: dict[str, Callable[[Path], None]] = {
    "super_resolution.onnx": _super_resolution_onnx,
    "cat.png": _cat_png,
    "imagenet_synsets.txt": _labels("synset"),
    "imagenet_classes.txt": _class_keys,
}


def download_testdata(url: str, relpath: str, module: str | list[str] | None = None,
                      overwrite: bool = False) -> str:
    """The path of a locally built ``relpath`` in ``./testdata`` (``url`` is not fetched).

    Raises
    ------
    FileNotFoundError
        No local stand-in is known for ``relpath``.
    """
    builder = LOCAL_FILES.get(relpath)
    if builder is None:
        raise FileNotFoundError(f"no local stand-in for the tutorial download {relpath!r} ({url}); "
                                f"known: {', '.join(sorted(LOCAL_FILES))}")
    path = Path("testdata") / relpath
    if overwrite or not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        builder(path)
    return str(path)
