"""Reduction, ArgMax/ArgMin, TopK, CumSum/CumProd and Einsum converters against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontend._onnx_helpers import Const, check_node

RNG = np.random.default_rng(4)

REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def _data(op, shape, dtype=np.float32):
    x = RNG.uniform(0.5, 2.0, size=shape) if op == "ReduceLogSum" else RNG.standard_normal(shape)
    return x.astype(dtype)


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("axes", [None, [1], [0, -1]])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("opset", [13, 18])
def test_reductions(op, axes, keepdims, opset):
    x = _data(op, (2, 3, 4))
    axes_from_input = opset >= 18 or (op == "ReduceSum" and opset >= 13)
    attrs = {"keepdims": keepdims}
    inputs = [x]
    if axes is not None and axes_from_input:
        inputs.append(Const(np.array(axes, np.int64)))
    elif axes is not None:
        attrs["axes"] = axes
    check_node(op, inputs, attrs, opset=opset, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceSumSquare", "ReduceL1"])
def test_noop_with_empty_axes(op):
    check_node(op, [_data(op, (2, 3)), Const(np.zeros((0,), np.int64))], {"noop_with_empty_axes": 1},
               opset=18)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_reductions(op, dtype):
    x = RNG.integers(-4, 5, size=(3, 4)).astype(dtype)
    check_node(op, [x], {"axes": [1], "keepdims": 0}, opset=13 if op != "ReduceSum" else 11)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2"])
def test_reduction_over_empty_axis(op):
    check_node(op, [np.zeros((2, 0, 3), np.float32), Const(np.array([1], np.int64))], {"keepdims": 1},
               opset=18)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis, keepdims, last", [(0, 1, 0), (1, 0, 0), (-1, 1, 1)])
def test_arg_reductions(op, axis, keepdims, last):
    x = RNG.integers(0, 3, size=(3, 4)).astype(np.float32)  # ties exercise select_last_index
    check_node(op, [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last}, opset=13)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [-1, 0])
def test_topk(largest, axis):
    x = RNG.permutation(24).reshape(4, 6).astype(np.float32)
    check_node("TopK", [x, Const(np.array([3], np.int64))], {"axis": axis, "largest": largest}, opset=11,
               n_outputs=2)


@pytest.mark.parametrize("op", ["CumSum"])
@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumulative(op, exclusive, reverse, axis):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    check_node(op, [x, Const(np.array(axis, np.int64))], {"exclusive": exclusive, "reverse": reverse},
               opset=14, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("equation, shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("ij->ji", [(3, 4)]), ("i,i->", [(5,), (5,)]), ("ij,j->i", [(3, 4), (4,)]),
])
def test_einsum(equation, shapes):
    check_node("Einsum", [RNG.standard_normal(s).astype(np.float32) for s in shapes], {"equation": equation},
               opset=12, rtol=1e-5, atol=1e-5)
