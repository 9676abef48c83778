"""Quantization converters against onnxruntime: QuantizeLinear/DequantizeLinear (scalar and
per-axis), QLinearMatMul, MatMulInteger, ConvInteger and QLinearConv."""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontend._onnx_helpers import Const, check_node

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_dequantize(dtype, per_axis):
    x = (RNG.standard_normal((2, 3, 4)) * 4).astype(np.float32)
    x[0, 0, :3] = [0.5, 1.5, -2.5]  # ties round to even
    scale = Const(np.array([0.5, 0.25, 1.0], np.float32) if per_axis else np.float32(0.5))
    zp = Const(np.array([3, 0, -2] if dtype == np.int8 else [3, 0, 2], dtype) if per_axis else dtype(2))
    check_node("QuantizeLinear", [x, scale, zp], {"axis": 1}, opset=13)
    q = RNG.integers(0, 100, size=(2, 3, 4)).astype(dtype)
    check_node("DequantizeLinear", [q, scale, zp], {"axis": 1}, opset=13)


def test_quantize_default_zero_point_and_saturation():
    x = np.array([-300.0, -1.0, 0.0, 2.7, 300.0], np.float32)
    check_node("QuantizeLinear", [x, Const(np.float32(1.0))], opset=13)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("a_shape, b_shape", [((2, 4), (4, 3)), ((2, 2, 4), (4, 3))])
def test_qlinear_matmul(dtype, a_shape, b_shape):
    lo, hi = (0, 255) if dtype == np.uint8 else (-128, 127)
    a = RNG.integers(lo, hi, size=a_shape).astype(dtype)
    b = RNG.integers(lo, hi, size=b_shape).astype(dtype)
    inputs = [a, Const(np.float32(0.05)), Const(dtype(3)), Const(b), Const(np.float32(0.02)),
              Const(dtype(-2 if lo else 2)), Const(np.float32(0.5)), Const(dtype(10))]
    check_node("QLinearMatMul", inputs, opset=13)


def test_matmul_integer():
    a = RNG.integers(0, 255, size=(3, 4)).astype(np.uint8)
    b = RNG.integers(0, 255, size=(4, 2)).astype(np.uint8)
    check_node("MatMulInteger", [a, b, Const(np.uint8(12)), Const(np.uint8(7))], opset=10)


def test_conv_integer_and_qlinear_conv():
    x = RNG.integers(0, 255, size=(1, 2, 5, 5)).astype(np.uint8)
    w = RNG.integers(0, 255, size=(3, 2, 3, 3)).astype(np.uint8)
    check_node("ConvInteger", [x, Const(w), Const(np.uint8(5)), Const(np.uint8(9))], {"pads": [1, 1, 1, 1]},
               opset=10)
    inputs = [x, Const(np.float32(0.02)), Const(np.uint8(5)), Const(w), Const(np.float32(0.01)),
              Const(np.uint8(9)), Const(np.float32(0.3)), Const(np.uint8(4)),
              Const(np.array([10, -20, 30], np.int32))]
    check_node("QLinearConv", inputs, {"pads": [1, 1, 1, 1]}, opset=10)
