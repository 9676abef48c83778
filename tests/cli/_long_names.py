"""A small ONNX model whose node names are long, PyTorch-export-style paths (for table widths).

conv -> relu -> flatten -> gemm -> softmax on a 1x3x8x8 input ``x``; tables have to shorten
these names to fit 80 columns, and must still show them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["LAYERS", "save_long_names_onnx"]

LAYERS = ("/model/backbone/stage_0/block_0/conv/Conv", "/model/backbone/stage_0/block_0/act/Relu",
          "/model/head/flatten/Flatten", "/model/head/classifier/fc/Gemm",
          "/model/head/classifier/act/Softmax")
"""The ONNX node names, in graph order."""


def save_long_names_onnx(root: Path) -> dict[str, Path]:
    """Write ``model.onnx`` and ``x.npz`` (input ``x``) into ``root``; their paths."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.RandomState(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w", (6, 3, 3, 3)), ("b", (6,)), ("fw", (5, 6 * 8 * 8)), ("fb", (5,)))]
    conv, relu, flat, fc, soft = LAYERS
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name=conv, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name=relu),
             helper.make_node("Flatten", ["r"], ["f"], name=flat),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["g"], name=fc, transB=1),
             helper.make_node("Softmax", ["g"], ["y"], name=soft, axis=1)]
    graph = helper.make_graph(nodes, "long_names",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(root / "model.onnx"))
    np.savez(root / "x.npz", x=rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
    return {"model": root / "model.onnx", "inputs": root / "x.npz"}
