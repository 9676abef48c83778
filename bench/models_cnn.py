"""ONNX builders for the convolutional benchmark models: ResNet-18/50 and MobileNetV2.

The graphs follow torchvision's modules as ``torch.onnx.export`` writes them in eval mode,
without constant folding of batch norm into the convolutions: Conv (no bias) and
BatchNormalization per conv layer, Relu (or ``Clip(0, 6)`` as ReLU6), residual Add,
GlobalAveragePool, Flatten and a Gemm classifier. Weights are seeded random values scaled so
activations stay in a moderate range through the residual chain (He-normal convolutions, and a
small scale on the batch norm that closes each residual branch).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from bench.onnx_graph import GraphBuilder, param_name

__all__ = ["mobilenet_v2", "resnet"]

# blocks per stage and block kind of the torchvision ResNets
_RESNET_STAGES = {18: ((2, 2, 2, 2), False), 34: ((3, 4, 6, 3), False),
                  50: ((3, 4, 6, 3), True), 101: ((3, 4, 23, 3), True)}
# MobileNetV2 inverted-residual settings: expansion t, output channels c, repeats n, stride s
_MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                 (6, 160, 3, 2), (6, 320, 1, 1))


def _conv(b: GraphBuilder, x: str, cin: int, cout: int, k: int, stride: int, scope: str,
          groups: int = 1) -> str:
    fan_in = cin // groups * k * k
    w = b.normal(f"{param_name(scope)}.weight", (cout, cin // groups, k, k), math.sqrt(2.0 / fan_in))
    return b.node("Conv", [x, w], scope, dilations=[1, 1], group=groups, kernel_shape=[k, k],
                  pads=[k // 2] * 4, strides=[stride, stride])


def _bn(b: GraphBuilder, x: str, c: int, scope: str, gamma: float = 1.0) -> str:
    name = param_name(scope)
    scale = b.uniform(f"{name}.weight", (c,), 0.8 * gamma, 1.2 * gamma)
    bias = b.normal(f"{name}.bias", (c,), 0.1)
    mean = b.normal(f"{name}.running_mean", (c,), 0.1)
    var = b.uniform(f"{name}.running_var", (c,), 0.5, 1.5)
    return b.node("BatchNormalization", [x, scale, bias, mean, var], scope, epsilon=1e-5,
                  momentum=0.9)


def _conv_bn(b: GraphBuilder, x: str, cin: int, cout: int, k: int, stride: int, scope: str,
             index: str, groups: int = 1, gamma: float = 1.0) -> str:
    y = _conv(b, x, cin, cout, k, stride, f"{scope}/conv{index}", groups)
    return _bn(b, y, cout, f"{scope}/bn{index}", gamma)


def _classifier(b: GraphBuilder, x: str, channels: int, num_classes: int, scope: str) -> str:
    pooled = b.node("GlobalAveragePool", [x], "/avgpool")
    flat = b.node("Flatten", [pooled], "", axis=1)
    w = b.normal(f"{param_name(scope)}.weight", (num_classes, channels), 1.0 / math.sqrt(channels))
    bias = b.normal(f"{param_name(scope)}.bias", (num_classes,), 0.01)
    return b.node("Gemm", [flat, w, bias], scope, alpha=1.0, beta=1.0, transB=1)


def _basic_block(b: GraphBuilder, x: str, cin: int, width: int, stride: int, scope: str) -> str:
    y = b.node("Relu", [_conv_bn(b, x, cin, width, 3, stride, scope, "1")], f"{scope}/relu")
    y = _conv_bn(b, y, width, width, 3, 1, scope, "2", gamma=0.2)
    short = x
    if stride != 1 or cin != width:
        short = _conv(b, x, cin, width, 1, stride, f"{scope}/downsample/downsample.0")
        short = _bn(b, short, width, f"{scope}/downsample/downsample.1")
    return b.node("Relu", [b.node("Add", [y, short], scope)], f"{scope}/relu_1")


def _bottleneck(b: GraphBuilder, x: str, cin: int, width: int, stride: int, scope: str) -> str:
    cout = width * 4
    y = b.node("Relu", [_conv_bn(b, x, cin, width, 1, 1, scope, "1")], f"{scope}/relu")
    y = b.node("Relu", [_conv_bn(b, y, width, width, 3, stride, scope, "2")], f"{scope}/relu_1")
    y = _conv_bn(b, y, width, cout, 1, 1, scope, "3", gamma=0.2)
    short = x
    if stride != 1 or cin != cout:
        short = _conv(b, x, cin, cout, 1, stride, f"{scope}/downsample/downsample.0")
        short = _bn(b, short, cout, f"{scope}/downsample/downsample.1")
    return b.node("Relu", [b.node("Add", [y, short], scope)], f"{scope}/relu_2")


def resnet(depth: int = 18, image_size: int = 224, num_classes: int = 1000, width: int = 64,
           seed: int = 0) -> onnx.ModelProto:
    """A torchvision-structured ResNet as ONNX (opset 13), batch 1, float32.

    Parameters
    ----------
    depth : {18, 34, 50, 101}
        Basic blocks for 18/34, bottleneck blocks for 50/101.
    image_size : int
        Height and width of the ``input`` image, ``(1, 3, image_size, image_size)``.
    num_classes : int
        Outputs of the final Gemm.
    width : int
        Channels of the stem and of the first stage (64 in the real networks).
    seed : int
        Seed of the random weights.

    Returns
    -------
    onnx.ModelProto
        Input ``input`` float32, output ``output`` ``(1, num_classes)``.
    """
    if depth not in _RESNET_STAGES:
        raise ValueError(f"resnet: depth {depth} is not one of {sorted(_RESNET_STAGES)}")
    stages, bottleneck = _RESNET_STAGES[depth]
    b = GraphBuilder(f"resnet{depth}", seed)
    x = b.input("input", TensorProto.FLOAT, (1, 3, image_size, image_size))
    x = b.node("Relu", [_conv_bn(b, x, 3, width, 7, 2, "", "1")], "/relu")
    x = b.node("MaxPool", [x], "/maxpool", ceil_mode=0, dilations=[1, 1], kernel_shape=[3, 3],
               pads=[1, 1, 1, 1], strides=[2, 2])
    channels = width
    block = _bottleneck if bottleneck else _basic_block
    for s, repeats in enumerate(stages):
        stage_width = width * 2 ** s
        for i in range(repeats):
            stride = 2 if s > 0 and i == 0 else 1
            x = block(b, x, channels, stage_width, stride, f"/layer{s + 1}/layer{s + 1}.{i}")
            channels = stage_width * 4 if bottleneck else stage_width
    b.output(_classifier(b, x, channels, num_classes, "/fc"), "output", (1, num_classes))
    return b.model(opset=13)


def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's channel rounding: to a multiple of ``divisor``, never below 90% of ``v``."""
    rounded = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * v else rounded


def _relu6(b: GraphBuilder, x: str, scope: str) -> str:
    low = b.const(f"{param_name(scope)}.min", np.float32(0.0))
    high = b.const(f"{param_name(scope)}.max", np.float32(6.0))
    return b.node("Clip", [x, low, high], scope)


def _conv_bn_relu6(b: GraphBuilder, x: str, cin: int, cout: int, k: int, stride: int, scope: str,
                   groups: int = 1) -> str:
    y = _conv(b, x, cin, cout, k, stride, f"{scope}/{scope.rsplit('/', 1)[-1]}.0", groups)
    y = _bn(b, y, cout, f"{scope}/{scope.rsplit('/', 1)[-1]}.1")
    return _relu6(b, y, f"{scope}/{scope.rsplit('/', 1)[-1]}.2/Clip")


def _inverted_residual(b: GraphBuilder, x: str, cin: int, cout: int, stride: int, expand: int,
                       scope: str) -> str:
    hidden = cin * expand
    y = x
    k = 0
    if expand != 1:
        y = _conv_bn_relu6(b, y, cin, hidden, 1, 1, f"{scope}/conv/conv.{k}")
        k += 1
    y = _conv_bn_relu6(b, y, hidden, hidden, 3, stride, f"{scope}/conv/conv.{k}", groups=hidden)
    y = _conv(b, y, hidden, cout, 1, 1, f"{scope}/conv/conv.{k + 1}")
    gamma = 0.2 if stride == 1 and cin == cout else 1.0
    y = _bn(b, y, cout, f"{scope}/conv/conv.{k + 2}", gamma)
    if stride == 1 and cin == cout:
        y = b.node("Add", [x, y], scope)
    return y


def mobilenet_v2(image_size: int = 224, num_classes: int = 1000, width_mult: float = 1.0,
                 seed: int = 0) -> onnx.ModelProto:
    """torchvision's MobileNetV2 as ONNX (opset 13), batch 1, float32.

    Inverted residual blocks (1x1 expand, 3x3 depthwise, 1x1 project, each with batch norm,
    ReLU6 as ``Clip(0, 6)`` after the first two), a 1x1 conv to 1280 channels, global average
    pooling and a Gemm classifier (dropout is the identity in eval mode and is not exported).

    Parameters
    ----------
    image_size : int
        Height and width of the ``input`` image.
    num_classes : int
        Outputs of the classifier.
    width_mult : float
        torchvision's width multiplier (1.0 is the standard network).
    seed : int
        Seed of the random weights.

    Returns
    -------
    onnx.ModelProto
        Input ``input`` ``(1, 3, image_size, image_size)``, output ``output`` ``(1, num_classes)``.
    """
    b = GraphBuilder("mobilenet_v2", seed)
    x = b.input("input", TensorProto.FLOAT, (1, 3, image_size, image_size))
    channels = _make_divisible(32 * width_mult)
    last = _make_divisible(1280 * max(1.0, width_mult))
    x = _conv_bn_relu6(b, x, 3, channels, 3, 2, "/features/features.0")
    index = 1
    for expand, c, repeats, stride in _MOBILENET_V2:
        cout = _make_divisible(c * width_mult)
        for i in range(repeats):
            x = _inverted_residual(b, x, channels, cout, stride if i == 0 else 1, expand,
                                   f"/features/features.{index}")
            channels = cout
            index += 1
    x = _conv_bn_relu6(b, x, channels, last, 1, 1, f"/features/features.{index}")
    b.output(_classifier(b, x, last, num_classes, "/classifier/classifier.1"), "output",
             (1, num_classes))
    return b.model(opset=13)
