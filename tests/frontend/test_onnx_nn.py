"""Gemm, MatMul, normalization, softmax-family and LRN converters against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontend._onnx_helpers import Const, check_node

RNG = np.random.default_rng(3)


def _rand(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("alpha, beta", [(1.0, 1.0), (0.5, 2.0), (1.0, 0.0)])
@pytest.mark.parametrize("c_shape", [None, (5,), (1, 5), (3, 5), ()])
def test_gemm(trans_a, trans_b, alpha, beta, c_shape):
    a = _rand((4, 3) if trans_a else (3, 4))
    b = _rand((5, 4) if trans_b else (4, 5))
    inputs = [a, b] + ([] if c_shape is None else [_rand(c_shape)])
    check_node("Gemm", inputs, {"transA": trans_a, "transB": trans_b, "alpha": alpha, "beta": beta},
               opset=13, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
    ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)),
])
@pytest.mark.parametrize("weight_const", [False, True])
def test_matmul_shapes(a_shape, b_shape, weight_const):
    b = _rand(b_shape)
    check_node("MatMul", [_rand(a_shape), Const(b) if weight_const else b], opset=13, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_matmul_dtypes(dtype):
    a = RNG.integers(-5, 5, size=(2, 3, 4)).astype(dtype)
    b = RNG.integers(-5, 5, size=(4, 2)).astype(dtype)
    check_node("MatMul", [a, b], opset=13)


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4, 5)])
def test_batch_norm(shape):
    c = shape[1]
    params = [Const(_rand((c,))), Const(_rand((c,))), Const(_rand((c,))), Const(np.abs(_rand((c,))) + 0.5)]
    check_node("BatchNormalization", [_rand(shape), *params], {"epsilon": 1e-3}, opset=15, rtol=1e-5,
               atol=1e-5)


def test_instance_norm():
    check_node("InstanceNormalization", [_rand((2, 3, 4, 5)), Const(_rand((3,))), Const(_rand((3,)))],
               {"epsilon": 1e-4}, opset=13, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, 1, -2])
@pytest.mark.parametrize("outputs", [1, 3])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm(axis, outputs, bias):
    shape = (2, 3, 4)
    norm_shape = shape[axis:]
    inputs = [_rand(shape), Const(_rand(norm_shape))] + ([Const(_rand(norm_shape))] if bias else [])
    check_node("LayerNormalization", inputs, {"axis": axis, "epsilon": 1e-5}, opset=17, n_outputs=outputs,
               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset, per_group", [(18, True), (21, False)])
def test_group_norm(opset, per_group):
    groups, c = 2, 6
    pshape = (groups,) if per_group else (c,)
    check_node("GroupNormalization", [_rand((2, c, 3, 3)), Const(_rand(pshape)), Const(_rand(pshape))],
               {"num_groups": groups, "epsilon": 1e-5}, opset=opset, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_family_both_axis_semantics(op, opset, axis):
    x = _rand((2, 3, 4))
    if op == "Hardmax":
        x[0, 0, :2] = 5.0  # ties: the first index wins
    check_node(op, [x], {"axis": axis}, opset=opset, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(size):
    attrs = {"size": size, "alpha": 1e-3, "beta": 0.8, "bias": 2.0}
    check_node("LRN", [_rand((1, 5, 3, 3))], attrs, opset=13,
               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, -1])
def test_lp_normalization(p, axis):
    check_node("LpNormalization", [_rand((3, 4))], {"p": p, "axis": axis}, opset=13)


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1]])
def test_mean_variance_normalization(axes):
    attrs = {} if axes is None else {"axes": axes}
    check_node("MeanVarianceNormalization", [_rand((2, 3, 4, 5))], attrs, opset=13, rtol=1e-4, atol=1e-5)
