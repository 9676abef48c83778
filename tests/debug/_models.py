"""A small ResNet-style ONNX model built with onnx.helper, shared by the debugger tests.

Stem conv-bn-relu, one identity residual block, one downsampling block (stride 2 with a 1x1
projection shortcut), global average pooling, flatten, a Gemm classifier and softmax. Every node
is named, so the importer's source names are the ONNX node names.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["INPUT_SHAPE", "make_resnet_onnx", "native_available", "save_resnet_onnx"]

INPUT_SHAPE = (1, 3, 16, 16)


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.RandomState(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def weight(self, name: str, shape: tuple[int, ...], scale: float = 0.2) -> str:
        value = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def conv_bn(self, x: str, name: str, cin: int, cout: int, k: int, stride: int,
                relu: bool) -> str:
        w = self.weight(f"{name}_w", (cout, cin, k, k), scale=1.0 / np.sqrt(cin * k * k))
        self.nodes.append(helper.make_node("Conv", [x, w], [f"{name}_out"], name=name,
                                           kernel_shape=[k, k], strides=[stride, stride],
                                           pads=[k // 2] * 4))
        bn = f"{name}_bn"
        gamma = self.weight(f"{bn}_gamma", (cout,))
        self.inits[-1] = numpy_helper.from_array(
            (1.0 + self.rng.uniform(-0.2, 0.2, cout)).astype(np.float32), gamma)
        beta = self.weight(f"{bn}_beta", (cout,), 0.1)
        mean = self.weight(f"{bn}_mean", (cout,), 0.1)
        var = f"{bn}_var"
        self.inits.append(numpy_helper.from_array(
            self.rng.uniform(0.5, 1.5, cout).astype(np.float32), var))
        self.nodes.append(helper.make_node("BatchNormalization",
                                           [f"{name}_out", gamma, beta, mean, var],
                                           [f"{bn}_out"], name=bn, epsilon=1e-5))
        if not relu:
            return f"{bn}_out"
        self.nodes.append(helper.make_node("Relu", [f"{bn}_out"], [f"{name}_relu_out"],
                                           name=f"{name}_relu"))
        return f"{name}_relu_out"

    def block(self, x: str, name: str, cin: int, cout: int, stride: int) -> str:
        y = self.conv_bn(x, f"{name}_conv1", cin, cout, 3, stride, relu=True)
        y = self.conv_bn(y, f"{name}_conv2", cout, cout, 3, 1, relu=False)
        shortcut = x if cin == cout and stride == 1 else \
            self.conv_bn(x, f"{name}_down", cin, cout, 1, stride, relu=False)
        self.nodes.append(helper.make_node("Add", [y, shortcut], [f"{name}_add_out"],
                                           name=f"{name}_add"))
        self.nodes.append(helper.make_node("Relu", [f"{name}_add_out"], [f"{name}_out"],
                                           name=f"{name}_relu"))
        return f"{name}_out"


def make_resnet_onnx(seed: int = 0, num_classes: int = 10) -> onnx.ModelProto:
    """The model (opset 13), input ``data`` of shape ``INPUT_SHAPE``, output ``prob``."""
    b = _Builder(seed)
    x = b.conv_bn("data", "stem", 3, 8, 3, 1, relu=True)
    x = b.block(x, "block1", 8, 8, 1)
    x = b.block(x, "block2", 8, 16, 2)
    b.nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap_out"], name="gap"))
    b.nodes.append(helper.make_node("Flatten", ["gap_out"], ["flat_out"], name="flatten", axis=1))
    w = b.weight("fc_w", (num_classes, 16))
    bias = b.weight("fc_b", (num_classes,), 0.1)
    b.nodes.append(helper.make_node("Gemm", ["flat_out", w, bias], ["fc_out"], name="fc",
                                    transB=1))
    b.nodes.append(helper.make_node("Softmax", ["fc_out"], ["prob"], name="softmax", axis=1))
    graph = helper.make_graph(
        b.nodes, "small_resnet",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, num_classes])],
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def save_resnet_onnx(path: Path, seed: int = 0) -> Path:
    """Write :func:`make_resnet_onnx` to ``path``; returns it."""
    onnx.save(make_resnet_onnx(seed), str(path))
    return path


def native_available() -> bool:
    """Whether ``relay.build(..., target="c")`` can run here (a C compiler is found)."""
    from tests._toolchain import have_cc

    return have_cc()
