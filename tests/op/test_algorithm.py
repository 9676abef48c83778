"""Sorting and scans: reference kernels vs onnxruntime (TopK, CumSum) and NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle_b import rand, run_kiln, run_onnx
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.errors import KilnTypeError
from kiln.transform.infer_type import infer_expr_type


@pytest.mark.parametrize("shape,k,axis", [((10,), 3, 0), ((3, 8), 8, 1), ((4, 5, 6), 2, 1), ((4, 5), 1, 0)])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_topk_vs_onnxruntime(rng, shape, k, axis, largest, dtype):
    x = rand(rng, shape, dtype, -3, 3)  # many ties: ONNX wants the lower index first
    if dtype == "float32":
        x = np.round(x * 2).astype(np.float32)
    values, indices = run_kiln(lambda v: relay.topk(v, k, axis, is_ascend=not largest, dtype="int64"), [x])
    want_v, want_i = run_onnx("TopK", [x, np.array([k], np.int64)], [dtype, "int64"], axis=axis,
                              largest=int(largest), sorted=1)
    np.testing.assert_array_equal(values, want_v)
    np.testing.assert_array_equal(indices, want_i)


def test_topk_ret_types_and_k_below_one(rng):
    x = rand(rng, (2, 6), "float32")
    only_values = run_kiln(lambda v: relay.topk(v, 2, ret_type="values"), [x])
    np.testing.assert_array_equal(only_values, -np.sort(-x, axis=-1)[:, :2])
    only_indices = run_kiln(lambda v: relay.topk(v, 2, ret_type="indices"), [x])
    assert only_indices.dtype == np.int32
    everything, order = run_kiln(lambda v: relay.topk(v, 0, is_ascend=True), [x])
    np.testing.assert_array_equal(everything, np.sort(x, axis=-1))
    np.testing.assert_array_equal(order, np.argsort(x, axis=-1, kind="stable"))
    k_const = run_kiln(lambda v: relay.topk(v, relay.const(1), ret_type="values"), [x])
    np.testing.assert_array_equal(k_const, x.max(axis=-1, keepdims=True))


def _stable_descending(x: np.ndarray, axis: int) -> np.ndarray:
    # naive oracle: order each line by (-value, index)
    moved = np.moveaxis(x, axis, -1)
    out = np.empty(moved.shape, dtype=np.int64)
    for pos in np.ndindex(moved.shape[:-1]):
        row = moved[pos]
        out[pos] = sorted(range(len(row)), key=lambda i: (-float(row[i]), i))
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 5), 0), ((3, 5), -1), ((2, 3, 4), 1)])
@pytest.mark.parametrize("is_ascend", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_sort_and_argsort_are_stable(rng, shape, axis, is_ascend, dtype):
    x = rand(rng, shape, dtype, -2, 2)
    order = run_kiln(lambda v: relay.argsort(v, axis, is_ascend, dtype="int64"), [x])
    want = (np.argsort(x, axis=axis, kind="stable") if is_ascend
            else _stable_descending(x.astype(np.float64), axis))
    np.testing.assert_array_equal(order, want)
    values = run_kiln(lambda v: relay.sort(v, axis, is_ascend), [x])
    np.testing.assert_array_equal(values, np.take_along_axis(x, want, axis=axis))


@given(values=st.lists(st.integers(-3, 3), min_size=1, max_size=12), k=st.integers(1, 12))
@settings(max_examples=60, deadline=None)
def test_topk_ties_take_the_lower_index_first(values, k):
    x = np.array(values, dtype=np.int32)
    k = min(k, len(values))
    got_v, got_i = run_kiln(lambda v: relay.topk(v, k), [x])
    want_i = sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_v, x[want_i])


@pytest.mark.parametrize("shape,axis", [((5,), 0), ((3, 4), 1), ((3, 4), 0), ((2, 3, 4), -2)])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_cumsum_vs_onnxruntime(rng, shape, axis, exclusive, dtype):
    x = rand(rng, shape, dtype)
    got = run_kiln(lambda v: relay.cumsum(v, axis, exclusive=exclusive), [x])
    want = run_onnx("CumSum", [x, np.array(axis, np.int64)], [dtype], exclusive=int(exclusive))[0]
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("exclusive", [False, True])
def test_cumprod_vs_numpy(rng, axis, exclusive):
    x = rand(rng, (3, 4), "float32", -8, 8)
    got = run_kiln(lambda v: relay.cumprod(v, axis, exclusive=exclusive), [x])
    flat = x.reshape(-1) if axis is None else x
    ax = 0 if axis is None else axis
    want = np.cumprod(flat.astype(np.float64), axis=ax)
    if exclusive:
        ones = np.ones_like(np.take(want, [0], axis=ax))
        want = np.concatenate([ones, np.delete(want, -1, axis=ax)], axis=ax)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_cumsum_flattens_and_casts(rng):
    x = rand(rng, (2, 3), "int32")
    got = run_kiln(lambda v: relay.cumsum(v, dtype="float32"), [x])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.cumsum(x.reshape(-1)).astype(np.float32))
    wrapped = run_kiln(lambda v: relay.cumsum(v), [np.array([100, 100], np.int8)])
    np.testing.assert_array_equal(wrapped, np.array([100, -56], np.int8))


def test_type_errors():
    x = relay.var("x", shape=(2, 3))
    with pytest.raises(KilnTypeError, match="k=4 is larger than axis -1"):
        infer_expr_type(relay.topk(x, 4).astuple())
    with pytest.raises(KilnTypeError, match="axis 2 is out of range"):
        infer_expr_type(relay.sort(x, axis=2))
    with pytest.raises(KilnTypeError, match="topk: k must be a constant"):
        relay.topk(x, relay.shape_of(x))
    call = relay.topk(x, 2).astuple()
    assert call.attrs.keys() == ["k", "axis", "ret_type", "is_ascend", "dtype"]
    assert type(call.attrs).type_key == "relay.attrs.TopkAttrs"
