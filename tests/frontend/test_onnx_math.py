"""Elementwise, logic, cast, clip and activation converters against onnxruntime (one-node models)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontend._onnx_helpers import Const, check_node

RNG = np.random.default_rng(0)


def _rand(shape, dtype=np.float32, lo=-3.0, hi=3.0):
    if np.issubdtype(np.dtype(dtype), np.integer):
        return RNG.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


SHAPE_PAIRS = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 2)),
               ((1, 4, 1), (3, 1, 2))]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shapes", SHAPE_PAIRS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_arithmetic_broadcasts(op, shapes, dtype):
    a = _rand(shapes[0], dtype, -9, 9)
    b = _rand(shapes[1], dtype, 1, 6) * np.where(_rand(shapes[1], np.int32, 0, 1) > 0, 1, -1).astype(dtype)
    check_node(op, [a, b])  # integer Div truncates toward zero, as onnxruntime does


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_comparisons(op, dtype):
    a, b = _rand((3, 4), dtype, -2, 2), _rand((4,), dtype, -2, 2)
    check_node(op, [a, b], opset=16)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic(op):
    check_node(op, [_rand((2, 3), np.int32, 0, 1).astype(bool), _rand((3,), np.int32, 0, 1).astype(bool)])
    check_node("Not", [_rand((2, 3), np.int32, 0, 1).astype(bool)])


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32])
def test_mod_sign_conventions(fmod, dtype):
    if fmod == 0 and dtype == np.float32:
        pytest.skip("onnxruntime requires fmod=1 for floats")
    a = _rand((4, 5), dtype, -20, 20)
    b = _rand((5,), dtype, 2, 7) * np.array([1, -1, 1, -1, 1], dtype=dtype)
    check_node("Mod", [a, b], {"fmod": fmod}, opset=13)


@pytest.mark.parametrize("base, exponent", [(np.float32, np.float32), (np.float32, np.int64),
                                            (np.int32, np.float32), (np.int64, np.int64),
                                            (np.float64, np.int32)])
def test_pow_mixed_types(base, exponent):
    a = _rand((3, 4), base, 1, 4)
    b = _rand((4,), exponent, 0, 3)
    check_node("Pow", [a, b], opset=15)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64])
def test_bitshift(direction, dtype):
    a = RNG.integers(0, 200, size=(3, 4)).astype(dtype)
    b = RNG.integers(0, 4, size=(4,)).astype(dtype)
    check_node("BitShift", [a, b], {"direction": direction}, opset=11)


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_variadic(op, count):
    shapes = [(2, 3), (3,), (1, 3)][:count]
    check_node(op, [_rand(s) for s in shapes], opset=13)


UNARY = ["Abs", "Neg", "Exp", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Tan", "Atan", "Sinh",
         "Cosh", "Asinh", "Erf", "Sigmoid", "Tanh", "Relu", "Reciprocal", "Softsign", "Softplus"]


# onnxruntime has no float64 kernel for the others.
FLOAT64_UNARY = ["Abs", "Neg", "Exp", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Sigmoid", "Tanh",
                 "Relu", "Reciprocal"]


@pytest.mark.parametrize("op, dtype", [(op, np.float32) for op in UNARY]
                         + [(op, np.float64) for op in FLOAT64_UNARY])
def test_unary(op, dtype):
    x = _rand((3, 5), dtype, -2.5, 2.5)
    if op == "Round":
        x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, -0.6], dtype=dtype)  # half to even
    check_node(op, [x], opset=13)


@pytest.mark.parametrize("op, domain", [("Log", (0.1, 5)), ("Sqrt", (0, 5)), ("Asin", (-1, 1)),
                                        ("Acos", (-1, 1)), ("Acosh", (1, 5)), ("Atanh", (-0.9, 0.9))])
def test_unary_restricted_domain(op, domain):
    check_node(op, [_rand((4, 3), np.float32, *domain)], opset=13)


@pytest.mark.parametrize("op, attrs", [
    ("Elu", {}), ("Elu", {"alpha": 0.5}), ("Selu", {}), ("Selu", {"alpha": 2.0, "gamma": 3.0}),
    ("Celu", {"alpha": 2.0}), ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("HardSwish", {}), ("Mish", {}), ("ThresholdedRelu", {"alpha": 0.5}), ("LeakyRelu", {"alpha": 0.2}),
    ("Shrink", {"bias": 0.3, "lambd": 0.8}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"}),
])
def test_activations(op, attrs):
    x = _rand((2, 3, 4), np.float32, -4, 4)
    check_node(op, [x], attrs, opset=20)


@pytest.mark.parametrize("slope_shape", [(3, 1, 1), (1,), (5,), (4, 5), (2, 3, 4, 5)])
def test_prelu_slopes(slope_shape):
    check_node("PRelu", [_rand((2, 3, 4, 5)), Const(_rand(slope_shape, lo=0, hi=1))], opset=16)


@pytest.mark.parametrize("pos, neg", [(1, 1), (1, 0), (0, 1)])
def test_isinf(pos, neg):
    x = np.array([1.0, np.inf, -np.inf, np.nan, -2.0], np.float32)
    check_node("IsInf", [x], {"detect_positive": pos, "detect_negative": neg}, opset=10)
    check_node("IsNaN", [x], opset=13)


@pytest.mark.parametrize("opset", [6, 13])
@pytest.mark.parametrize("bounds", [(-1.0, 1.0), (None, 0.5), (-0.5, None), (None, None), (1.0, -1.0)])
def test_clip_float(opset, bounds):
    x = _rand((3, 4))
    lo, hi = bounds
    if opset < 11 and lo is not None and hi is not None and lo > hi:
        pytest.skip("onnxruntime rejects min > max before opset 11")
    if opset < 11:
        attrs = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        check_node("Clip", [x], attrs, opset=opset)
    else:
        bound = [None if v is None else Const(np.float32(v)) for v in (lo, hi)]
        check_node("Clip", [x, *bound], opset=opset)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_clip_integers_and_dynamic_bounds(dtype):
    x = _rand((3, 4), dtype, 0, 50)
    check_node("Clip", [x, Const(np.array(5, dtype)), Const(np.array(30, dtype))], opset=13)
    check_node("Clip", [_rand((5,)), np.float32(-0.5), np.float32(0.7)], opset=13)  # bounds as inputs


@pytest.mark.parametrize("src, dst", [(np.float32, np.int32), (np.float32, np.float16),
                                      (np.int64, np.float32), (np.float64, np.int8), (np.int32, np.bool_),
                                      (np.bool_, np.float32), (np.float32, np.uint8), (np.int64, np.int64)])
def test_cast(src, dst):
    from onnx import helper

    x = _rand((3, 4), src, 0, 100) if src != np.bool_ else _rand((3, 4), np.int32, 0, 1).astype(bool)
    check_node("Cast", [x], {"to": helper.np_dtype_to_tensor_dtype(np.dtype(dst))}, opset=13)
    check_node("CastLike", [x, Const(np.zeros(1, dst))], opset=15)


def test_where_broadcasts():
    cond = _rand((3, 1), np.int32, 0, 1).astype(bool)
    check_node("Where", [cond, _rand((1, 4)), _rand((3, 4))], opset=16)
