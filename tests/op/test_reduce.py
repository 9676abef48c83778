"""Reductions: reference kernels vs onnxruntime (ReduceX, ArgMax/ArgMin) and NumPy formulas."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle_b import rand, run_kiln, run_onnx
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.errors import KilnTypeError
from kiln.transform.infer_type import infer_expr_type

SHAPES_AXES = [
    ((2, 3, 4), None),
    ((2, 3, 4), 1),
    ((2, 3, 4), (0, 2)),
    ((2, 3, 4), -1),
    ((1, 4, 1, 3), (1, 3)),
    ((5,), 0),
]

REDUCE_ONNX = [("sum", "ReduceSum"), ("mean", "ReduceMean"), ("max", "ReduceMax"),
               ("min", "ReduceMin"), ("prod", "ReduceProd")]


def _onnx_reduce(op_type: str, x: np.ndarray, axis, keepdims: bool) -> np.ndarray:
    inputs = [x]
    if axis is not None:
        inputs.append(np.array(np.atleast_1d(axis), dtype=np.int64))
    return run_onnx(op_type, inputs, [x.dtype.name], keepdims=int(keepdims))[0]


@pytest.mark.parametrize("shape,axis", SHAPES_AXES)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
@pytest.mark.parametrize("name,op_type", REDUCE_ONNX)
def test_reduce_vs_onnxruntime(rng, shape, axis, keepdims, dtype, name, op_type):
    x = rand(rng, shape, dtype, -6, 6) if name == "prod" else rand(rng, shape, dtype)
    got = run_kiln(lambda v: getattr(relay, name)(v, axis=axis, keepdims=keepdims), [x])
    want = _onnx_reduce(op_type, x, axis, keepdims)
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,axis", SHAPES_AXES)
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp_vs_onnxruntime(rng, shape, axis, keepdims):
    x = rand(rng, shape, "float32", -80, 80)
    got = run_kiln(lambda v: relay.logsumexp(v, axis=axis, keepdims=keepdims), [x])
    want = _onnx_reduce("ReduceLogSumExp", x, axis, keepdims)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,axis", [((3, 5), 1), ((3, 5), 0), ((2, 3, 4), -2), ((7,), 0)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("select_last_index", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("name,op_type", [("argmax", "ArgMax"), ("argmin", "ArgMin")])
def test_arg_reduce_vs_onnxruntime(rng, shape, axis, keepdims, select_last_index, dtype, name, op_type):
    x = rand(rng, shape, dtype, -2, 2)  # few distinct values: many ties
    if dtype == "float32":
        x = np.round(x)
    got = run_kiln(lambda v: getattr(relay, name)(v, axis=axis, keepdims=keepdims,
                                                  select_last_index=select_last_index), [x])
    want = run_onnx(op_type, [x], ["int64"], axis=axis, keepdims=int(keepdims),
                    select_last_index=int(select_last_index))[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_argmax_over_several_axes_indexes_the_flattened_block(rng):
    x = rand(rng, (2, 3, 4), "float32")
    got = run_kiln(lambda v: relay.argmax(v, axis=(1, 2)), [x])
    np.testing.assert_array_equal(got, x.reshape(2, 12).argmax(axis=1))
    got = run_kiln(lambda v: relay.argmin(v), [x])
    assert got.shape == () and got == x.argmin()


@pytest.mark.parametrize("axis", [None, 0, (0, 2), -1])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name,fn", [("all", np.all), ("any", np.any)])
def test_all_any_vs_numpy(rng, axis, keepdims, name, fn):
    x = rng.random((3, 4, 5)) > 0.3
    got = run_kiln(lambda v: getattr(relay, name)(v, axis=axis, keepdims=keepdims), [x])
    np.testing.assert_array_equal(got, fn(x, axis=axis, keepdims=keepdims))


@pytest.mark.parametrize("axis", [1, (0, 2), (1, -1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_exclude_reduces_the_other_axes(rng, axis, keepdims):
    x = rand(rng, (2, 3, 4), "float32")
    kept = {a % 3 for a in np.atleast_1d(axis)}
    others = tuple(i for i in range(3) if i not in kept)
    got = run_kiln(lambda v: relay.sum(v, axis=axis, keepdims=keepdims, exclude=True), [x])
    np.testing.assert_allclose(got, x.sum(axis=others, keepdims=keepdims), rtol=1e-5)


@pytest.mark.parametrize("dtype", ["int32", "int64", "int8"])
def test_int_mean_truncates_the_integer_sum(rng, dtype):
    x = rand(rng, (4, 7), dtype, -9, 9)
    got = run_kiln(lambda v: relay.mean(v, axis=1), [x])
    total = x.astype(np.int64).sum(axis=1)
    want = np.sign(total) * (np.abs(total) // 7)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, want)


def test_int_sum_wraps_like_c():
    x = np.array([127, 1, 2], dtype=np.int8)
    got = run_kiln(lambda v: relay.sum(v), [x])
    assert got.dtype == np.int8 and int(got) == -126


def test_empty_axis_list_reduces_everything(rng):
    x = rand(rng, (2, 3), "float32")
    got = run_kiln(lambda v: relay.max(v, axis=[]), [x])
    assert got.shape == () and got == x.max()


@pytest.mark.parametrize("axis", [None, 1, (0, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("unbiased", [False, True])
def test_variance_and_std_vs_numpy(rng, axis, keepdims, unbiased):
    x = rand(rng, (3, 4, 5), "float32")
    ddof = int(unbiased)
    var = run_kiln(lambda v: relay.variance(v, axis=axis, keepdims=keepdims, unbiased=unbiased), [x])
    std = run_kiln(lambda v: relay.std(v, axis=axis, keepdims=keepdims, unbiased=unbiased), [x])
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(var, x64.var(axis=axis, keepdims=keepdims, ddof=ddof), rtol=1e-5)
    np.testing.assert_allclose(std, x64.std(axis=axis, keepdims=keepdims, ddof=ddof), rtol=1e-5)


def test_variance_with_given_mean(rng):
    x = rand(rng, (4, 6), "float32")
    m = np.full((4, 1), 0.5, dtype=np.float32)
    got = run_kiln(lambda v, mv: relay.variance(v, axis=1, with_mean=mv), [x, m])
    np.testing.assert_allclose(got, ((x.astype(np.float64) - 0.5) ** 2).mean(axis=1), rtol=1e-5)


@pytest.mark.parametrize("axis,exclude", [(1, False), ((0, 2), False), (1, True), (None, False)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_mean_variance_and_mean_std(rng, axis, exclude, keepdims):
    x = rand(rng, (1, 3, 4), "float32")  # a size-1 axis that is not reduced in every case
    axes = None if axis is None else tuple(np.atleast_1d(axis))
    if exclude:
        axes = tuple(i for i in range(3) if i not in axes)
    x64 = x.astype(np.float64)
    m, v = run_kiln(lambda t: relay.mean_variance(t, axis=axis, keepdims=keepdims, exclude=exclude), [x])
    m2, s = run_kiln(lambda t: relay.mean_std(t, axis=axis, keepdims=keepdims, exclude=exclude), [x])
    np.testing.assert_allclose(m, x64.mean(axis=axes, keepdims=keepdims), rtol=1e-5)
    np.testing.assert_allclose(m2, x64.mean(axis=axes, keepdims=keepdims), rtol=1e-5)
    np.testing.assert_allclose(v, x64.var(axis=axes, keepdims=keepdims), rtol=1e-5)
    np.testing.assert_allclose(s, x64.std(axis=axes, keepdims=keepdims), rtol=1e-5)


@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data())
@settings(max_examples=40, deadline=None)
def test_reduce_shape_matches_numpy(shape, data):
    ndim = len(shape)
    axes = data.draw(st.lists(st.integers(-ndim, ndim - 1), unique_by=lambda a: a % ndim, max_size=ndim))
    keepdims = data.draw(st.booleans())
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    got = run_kiln(lambda v: relay.sum(v, axis=axes or None, keepdims=keepdims), [x])
    np.testing.assert_allclose(got, x.sum(axis=tuple(axes) or None, keepdims=keepdims))


def _type_error(expr) -> str:
    with pytest.raises(KilnTypeError) as info:
        infer_expr_type(expr)
    return str(info.value)


def test_type_errors_name_the_problem():
    x = relay.var("x", shape=(2, 3), dtype="float32")
    assert "axis 2 is out of range for a 2-d tensor" in _type_error(relay.sum(x, axis=2))
    assert "names the same dimension twice" in _type_error(relay.sum(x, axis=[1, -1]))
    msg = _type_error(relay.all(x))
    assert "all" in msg and "float32" in msg and "bool" in msg
    assert "0-d" in _type_error(relay.argmax(relay.var("s", shape=(), dtype="float32")))
    assert "int32" in _type_error(relay.variance(relay.var("i", shape=(2, 3), dtype="int32"), axis=1))
    assert "empty axis" in _type_error(relay.argmin(relay.var("e", shape=(2, 0)), axis=1))


def test_argmax_attrs_follow_tvm():
    x = relay.var("x", shape=(2, 3))
    call = relay.argmax(x, axis=1)
    assert type(call.attrs).type_key == "relay.attrs.ArgReduceAttrs"
    assert call.attrs.keys() == ["axis", "keepdims", "select_last_index", "exclude"]
    assert call.attrs.axis == (1,)
    assert relay.sum(x).attrs.axis is None
