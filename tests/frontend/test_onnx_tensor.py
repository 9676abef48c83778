"""Shape and data-movement converters against onnxruntime (one-node models).

Shape-deciding inputs (Reshape targets, Slice bounds, ...) are initializers, as exporters write
them; Slice and Reshape are also checked on random valid arguments with Hypothesis.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.frontend._onnx_helpers import Const, check_node, run_kiln, single_node_model

RNG = np.random.default_rng(1)


def _rand(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _i64(values):
    return Const(np.array(values, np.int64))


@pytest.mark.parametrize("shape, target, allowzero", [
    ((2, 3, 4), [4, -1], 0), ((2, 3, 4), [0, 12], 0), ((2, 3, 4), [-1], 0), ((2, 3, 4), [0, 0, 2, 2], 0),
    ((0, 3, 4), [3, 4, 0], 1), ((6,), [1, 2, 1, 3], 0),
])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_reshape(shape, target, allowzero, dtype):
    check_node("Reshape", [_rand(shape).astype(dtype), _i64(target)], {"allowzero": allowzero}, opset=14)


@st.composite
def _reshape_case(draw):
    dims = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    target = list(dims)
    draw(st.randoms()).shuffle(target)
    merged = []
    while target:
        take = draw(st.integers(1, len(target)))
        merged.append(int(np.prod(target[:take])))
        target = target[take:]
    if draw(st.booleans()):
        merged[draw(st.integers(0, len(merged) - 1))] = -1
    return dims, merged


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_reshape_case())
def test_reshape_random_targets(case):
    dims, target = case
    check_node("Reshape", [_rand(dims), _i64(target)], opset=13)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, 3])
def test_flatten(axis):
    check_node("Flatten", [_rand((2, 3, 4))], {"axis": axis}, opset=13)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axes", [None, [0], [2, -4]])
def test_squeeze(opset, axes):
    x = _rand((1, 3, 1, 2))
    if axes is None:
        check_node("Squeeze", [x], opset=opset)
    elif opset < 13:
        check_node("Squeeze", [x], {"axes": axes}, opset=opset)
    else:
        check_node("Squeeze", [x, _i64(axes)], opset=opset)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axes", [[0], [1, 3], [-1], [0, -1]])
def test_unsqueeze(opset, axes):
    x = _rand((3, 2))
    if opset < 13:
        check_node("Unsqueeze", [x], {"axes": axes}, opset=opset)
    else:
        check_node("Unsqueeze", [x, _i64(axes)], opset=opset)


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1], [0, 1, 2]])
def test_transpose(perm):
    check_node("Transpose", [_rand((2, 3, 4))], {} if perm is None else {"perm": perm}, opset=13)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    check_node("Concat", [_rand(s) for s in shapes], {"axis": axis}, opset=13)
    check_node("Concat", [_rand((2, 0, 4)), _rand((2, 3, 4))], {"axis": 1}, opset=13)  # empty part


@pytest.mark.parametrize("case", ["equal", "attr", "input", "uneven18", "zero"])
def test_split(case):
    x = _rand((7, 4)) if case == "uneven18" else _rand((6, 4))
    if case == "equal":
        check_node("Split", [x], {"axis": 0}, opset=13, n_outputs=3)
    elif case == "attr":
        check_node("Split", [x], {"axis": 0, "split": [1, 2, 3]}, opset=11, n_outputs=3)
    elif case == "input":
        check_node("Split", [x, _i64([2, 2])], {"axis": 1}, opset=13, n_outputs=2)
    elif case == "uneven18":
        check_node("Split", [x], {"axis": 0, "num_outputs": 3}, opset=18, n_outputs=3)
    else:
        check_node("Split", [x, _i64([2, 0, 4])], {"axis": 0}, opset=13, n_outputs=3)


@st.composite
def _slice_case(draw):
    shape = draw(st.lists(st.integers(0, 6), min_size=1, max_size=3))
    axes = draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=len(shape),
                         unique_by=lambda a: a % len(shape)))
    big = st.sampled_from([2**62, -(2**62), 2**31 - 1])
    bound = st.one_of(st.integers(-8, 8), big)
    starts = [draw(bound) for _ in axes]
    ends = [draw(bound) for _ in axes]
    steps = [draw(st.sampled_from([1, 2, 3, -1, -2, -3])) for _ in axes]
    return shape, starts, ends, axes, steps


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_slice_case())
def test_slice_random_bounds(case):
    # Oracle: NumPy basic slicing, which is ONNX's definition (onnxruntime differs for an end of
    # INT_MAX with a negative step, taking it as "to the beginning").
    shape, starts, ends, axes, steps = case
    x = _rand(shape)
    model, feeds = single_node_model("Slice", [x, _i64(starts), _i64(ends), _i64(axes), _i64(steps)],
                                     opset=13)
    index = [slice(None)] * len(shape)
    for a, b, e, st_ in zip(axes, starts, ends, steps):
        index[a] = slice(b, e, st_)
    expected = x[tuple(index)]
    (actual,) = run_kiln(model, feeds)
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("starts, ends, steps", [([-1], [-(2**63)], [-1]), ([1], [2**63 - 1], [2]),
                                                 ([-100], [100], [1]), ([4], [0], [-2])])
def test_slice_exporter_idioms(starts, ends, steps):
    check_node("Slice", [_rand((5, 3)), _i64(starts), _i64(ends), _i64([0]), _i64(steps)], opset=13)


def test_slice_opset9_attributes():
    check_node("Slice", [_rand((4, 5))], {"starts": [1, -3], "ends": [3, 100], "axes": [0, 1]}, opset=9)


@pytest.mark.parametrize("shape, target", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((2, 3), (3,)),
                                           ((4, 1, 2), (1, 3, 1))])
def test_expand(shape, target):
    check_node("Expand", [_rand(shape), _i64(target)], opset=13)


def test_tile():
    check_node("Tile", [_rand((2, 3)), _i64([2, 3])], opset=13)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("indices", [[0, -1, 2], [[1, 0], [-2, 2]], 1])
def test_gather(axis, indices):
    check_node("Gather", [_rand((3, 4, 3)), np.array(indices, np.int64)], {"axis": axis}, opset=13)
    check_node("Gather", [_rand((3, 4, 3)), Const(np.array(indices, np.int32))], {"axis": axis}, opset=13)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis):
    data = _rand((3, 4))
    idx = RNG.integers(-3, 3, size=(3, 4)).astype(np.int64)
    check_node("GatherElements", [data, idx], {"axis": axis}, opset=13)


@pytest.mark.parametrize("batch_dims, data_shape, idx", [
    (0, (2, 2), [[0, 0], [1, 1]]), (0, (2, 2, 3), [[1], [0]]), (1, (2, 2, 2), [[1], [0]]),
    (0, (3, 4), [[[-1, 2]], [[0, -4]]]),
])
def test_gather_nd(batch_dims, data_shape, idx):
    check_node("GatherND", [_rand(data_shape), np.array(idx, np.int64)], {"batch_dims": batch_dims}, opset=13)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "min", "max"])
def test_scatter_elements(reduction):
    data = _rand((3, 4))
    idx = np.array([[1, 0, 2, -1], [0, 2, 1, 0]], np.int64)
    check_node("ScatterElements", [data, idx, _rand((2, 4))], {"axis": 0, "reduction": reduction}, opset=18)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "min", "max"])
@pytest.mark.parametrize("idx", [[[0], [2]], [[1, 0], [2, 3]]])
def test_scatter_nd(reduction, idx):
    idx = np.array(idx, np.int64)
    data = _rand((3, 4))
    updates = _rand(idx.shape[:-1] + data.shape[idx.shape[-1]:])
    check_node("ScatterND", [data, idx, updates], {"reduction": reduction}, opset=18)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize("pads", [[0, 1, 1, 2], [1, 0, 0, 1], [-1, 1, 0, -1]])
def test_pad(mode, pads):
    x = _rand((3, 4))
    check_node("Pad", [x, _i64(pads), Const(np.float32(1.5))], {"mode": mode}, opset=19)


def test_pad_axes_and_old_opsets():
    check_node("Pad", [_rand((2, 3, 4)), _i64([1, 2, 0, 1]), None, _i64([0, -1])], opset=18)
    check_node("Pad", [_rand((2, 3))], {"pads": [0, 1, 1, 0], "value": 2.0}, opset=2)
    check_node("Pad", [_rand((2, 3)), _i64([1, 1, 1, 1]), np.float32(3.0)], opset=13)  # value as input


@pytest.mark.parametrize("start, end", [(None, None), (1, None), (0, -1), (-2, None), (5, 7)])
def test_shape_and_size(start, end):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    check_node("Shape", [_rand((2, 3, 4))], attrs, opset=15)
    check_node("Size", [_rand((2, 3, 4))], opset=13)


@pytest.mark.parametrize("value", [None, np.array([3], np.int32), np.array([1.5], np.float64)])
def test_constant_of_shape(value):
    from onnx import numpy_helper

    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    check_node("ConstantOfShape", [_i64([2, 3])], attrs, opset=13)


@pytest.mark.parametrize("start, limit, delta, dtype", [(0, 5, 1, np.int64), (10, 2, -3, np.int32),
                                                        (0.5, 2.0, 0.3, np.float32), (3, 3, 1, np.int64)])
def test_range(start, limit, delta, dtype):
    check_node("Range", [Const(np.array(v, dtype)) for v in (start, limit, delta)], opset=13)


@pytest.mark.parametrize("k, dtype", [(0, None), (1, 7), (-2, 1)])
def test_eye_like(k, dtype):
    attrs = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
    check_node("EyeLike", [_rand((3, 5))], attrs, opset=13)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    indices = np.array([[0, 2], [-1, 3]], np.int64)
    check_node("OneHot", [indices, Const(np.array(4, np.int64)), Const(np.array([0.5, 3.0], np.float32))],
               {"axis": axis}, opset=11)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 1, -2])
def test_trilu(upper, k):
    inputs = [_rand((2, 4, 5))] + ([] if k is None else [_i64(k)])
    check_node("Trilu", inputs, {"upper": upper}, opset=14)


@pytest.mark.parametrize("block, mode", [(2, "DCR"), (2, "CRD")])
def test_depth_space(block, mode):
    check_node("DepthToSpace", [_rand((1, 8, 2, 3))], {"blocksize": block, "mode": mode}, opset=13)
    check_node("SpaceToDepth", [_rand((1, 2, 4, 6))], {"blocksize": block}, opset=13)


def test_reverse_sequence():
    check_node("ReverseSequence", [_rand((4, 3, 2)), np.array([4, 1, 3], np.int64)],
               {"time_axis": 0, "batch_axis": 1}, opset=10)


def test_identity_and_dropout_inference():
    x = _rand((2, 3))
    check_node("Identity", [x], opset=16)
    check_node("Dropout", [x], opset=13, n_outputs=2)
    check_node("Dropout", [x, Const(np.float32(0.3)), Const(np.array(False))], opset=13, n_outputs=2)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 1])
def test_tensor_scatter(mode, axis):
    cache = _rand((2, 6, 3) if axis == 1 else (2, 2, 6, 3))
    update = _rand((2, 3, 3) if axis == 1 else (2, 2, 3, 3))
    start = np.array([1, 4] if mode == "circular" else [0, 2], np.int64)
    check_node("TensorScatter", [cache, update, start], {"mode": mode, "axis": axis}, opset=24)
