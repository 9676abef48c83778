"""Pooling operators: reference kernels vs onnxruntime MaxPool/AveragePool/Global*Pool and NumPy loops."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from _onnx_oracle import assert_close, rand, run_onnx, run_relay
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.errors import KilnTypeError
from kiln.ir import Expr, IRModule
from kiln.op.registry import OpPattern, get_op_def
from kiln.transform.infer_type import infer_type

Seq = Sequence[int]
POOL = {("max", 1): relay.nn.max_pool1d, ("max", 2): relay.nn.max_pool2d,
        ("max", 3): relay.nn.max_pool3d, ("avg", 1): relay.nn.avg_pool1d,
        ("avg", 2): relay.nn.avg_pool2d, ("avg", 3): relay.nn.avg_pool3d}


def _out_size(n: int, k: int, s: int, d: int, pb: int, pe: int, ceil: bool) -> int:
    span = n + pb + pe - (k - 1) * d - 1
    return (-(-span // s) if ceil else span // s) + 1


def _naive_pool(x: np.ndarray, mode: str, kernel: Seq, strides: Seq, dilation: Seq, pads: Seq,
                ceil_mode: bool, count_include_pad: bool) -> np.ndarray:
    """Pooling one output element at a time, with TVM's rules (see relay's pool type relation):
    windows may reach into the padding; max ignores padding, avg divides by the counted taps."""
    nsp = len(kernel)
    spatial = x.shape[2:]
    outs = [_out_size(n, k, s, d, pads[i], pads[i + nsp], ceil_mode)
            for i, (n, k, s, d) in enumerate(zip(spatial, kernel, strides, dilation))]
    out = np.zeros(x.shape[:2] + tuple(outs), dtype=np.float64)
    for pos in np.ndindex(*outs):
        values, counted = [], 0
        for tap in np.ndindex(*kernel):
            idx = [p * s - pads[i] + t * d for i, (p, s, t, d) in enumerate(zip(pos, strides, tap, dilation))]
            inside = all(0 <= j < n for j, n in zip(idx, spatial))
            in_pad = all(-pads[i] <= j < n + pads[i + nsp] for i, (j, n) in enumerate(zip(idx, spatial)))
            if inside:
                values.append(x[(slice(None), slice(None), *idx)].astype(np.float64))
            if inside or (count_include_pad and in_pad):
                counted += 1
        if mode == "max":
            # a window entirely in the padding gives the padding value, TVM's min_value (lowest finite)
            lowest = np.finfo(x.dtype).min if x.dtype.kind == "f" else np.iinfo(x.dtype).min
            out[(slice(None), slice(None), *pos)] = np.max(values, axis=0) if values else lowest
        else:
            total = np.sum(values, axis=0) if values else 0.0
            out[(slice(None), slice(None), *pos)] = total / max(counted, 1)
    return out


def _ort_keeps_all_windows(shape: Seq, kernel: Seq, strides: Seq, dilation: Seq, pads: Seq,
                           ceil_mode: bool) -> bool:
    """onnxruntime drops a last ceil_mode window that starts in the end padding; TVM keeps it."""
    nsp = len(kernel)
    for i, (n, k, s, d) in enumerate(zip(shape[2:], kernel, strides, dilation)):
        o = _out_size(n, k, s, d, pads[i], pads[i + nsp], ceil_mode)
        if (o - 1) * s >= n + pads[i]:
            return False
    return True


# (shape, kernel, strides, dilation, pads (begins then ends), ceil_mode)
POOL_CASES = [
    ((1, 2, 9), (3,), (2,), (1,), (1, 0), False),
    ((2, 3, 8), (2,), (2,), (2,), (0, 1), True),
    ((1, 2, 7, 7), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), False),
    ((2, 3, 8, 9), (2, 3), (2, 3), (1, 1), (0, 1, 1, 0), True),
    ((1, 1, 10, 6), (3, 2), (3, 1), (2, 1), (2, 0, 1, 1), True),
    ((1, 2, 6, 6), (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), False),
    ((1, 2, 5, 6, 7), (2, 3, 2), (2, 1, 2), (1, 1, 1), (1, 0, 1, 0, 1, 0), True),
    ((1, 1, 4, 5, 6), (3, 2, 2), (1, 2, 3), (1, 2, 1), (0, 1, 0, 2, 0, 1), False),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,kernel,strides,dilation,pads,ceil_mode", POOL_CASES)
def test_max_pool_vs_onnx(rng, dtype, shape, kernel, strides, dilation, pads, ceil_mode):
    x = rand(rng, shape, dtype)
    got = run_relay(POOL["max", len(kernel)], x, pool_size=kernel, strides=strides,
                    dilation=dilation, padding=pads, ceil_mode=ceil_mode)
    assert_close(got, _naive_pool(x, "max", kernel, strides, dilation, pads, ceil_mode, False), dtype)
    if _ort_keeps_all_windows(shape, kernel, strides, dilation, pads, ceil_mode):
        expected = run_onnx("MaxPool", [x], {"kernel_shape": list(kernel), "strides": list(strides),
                                             "dilations": list(dilation), "pads": list(pads),
                                             "ceil_mode": int(ceil_mode)})[0]
        assert_close(got, expected, dtype)


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,kernel,strides,dilation,pads,ceil_mode", POOL_CASES)
def test_avg_pool_vs_onnx(rng, dtype, count_include_pad, shape, kernel, strides, dilation, pads,
                          ceil_mode):
    x = rand(rng, shape, dtype)
    got = run_relay(POOL["avg", len(kernel)], x, pool_size=kernel, strides=strides,
                    dilation=dilation, padding=pads, ceil_mode=ceil_mode,
                    count_include_pad=count_include_pad)
    naive = _naive_pool(x, "avg", kernel, strides, dilation, pads, ceil_mode, count_include_pad)
    assert_close(got, naive, dtype)
    if dtype == "float32" and _ort_keeps_all_windows(shape, kernel, strides, dilation, pads, ceil_mode):
        expected = run_onnx("AveragePool", [x], {
            "kernel_shape": list(kernel), "strides": list(strides), "dilations": list(dilation),
            "pads": list(pads), "ceil_mode": int(ceil_mode),
            "count_include_pad": int(count_include_pad)})[0]
        assert_close(got, expected, dtype)


def test_ceil_mode_window_starting_in_padding_is_kept():
    # in 5, kernel 2, stride 2, end pad 1, ceil: TVM gives ceil((5 + 1 - 2) / 2) + 1 = 3 windows;
    # the last starts at 4 (the last real element): max is that element, avg divides by 1.
    x = np.arange(5, dtype="float32").reshape(1, 1, 5)
    got = run_relay(relay.nn.max_pool1d, x, pool_size=2, strides=2, padding=(0, 1), ceil_mode=True)
    np.testing.assert_array_equal(got.ravel(), [1, 3, 4])
    got = run_relay(relay.nn.avg_pool1d, x, pool_size=3, strides=3, padding=(0, 0), ceil_mode=True)
    np.testing.assert_allclose(got.ravel(), [1.0, 3.5])
    got = run_relay(relay.nn.avg_pool1d, x, pool_size=3, strides=3, padding=(0, 1), ceil_mode=True,
                    count_include_pad=True)
    np.testing.assert_allclose(got.ravel(), [1.0, 7 / 3])  # (3 + 4 + pad 0) / 3, not the ceil pad


@pytest.mark.parametrize("mode,onnx_op", [("max", "MaxPool"), ("avg", "AveragePool")])
def test_pool2d_nhwc(rng, mode, onnx_op):
    x = rand(rng, (2, 3, 7, 8), "float32")
    expected = run_onnx(onnx_op, [x], {"kernel_shape": [3, 2], "strides": [2, 2],
                                       "pads": [1, 0, 1, 1]})[0]
    got = run_relay(POOL[mode, 2], x.transpose(0, 2, 3, 1).copy(), pool_size=(3, 2), strides=2,
                    padding=(1, 0, 1, 1), layout="NHWC")
    assert_close(got, expected.transpose(0, 2, 3, 1))


def test_pool2d_blocked_layout(rng):
    x = rand(rng, (1, 8, 6, 6), "float32")
    expected = run_onnx("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]})[0]
    blocked = x.reshape(1, 2, 4, 6, 6).transpose(0, 1, 3, 4, 2).copy()
    got = run_relay(relay.nn.max_pool2d, blocked, pool_size=2, strides=2, layout="NCHW4c")
    assert_close(got, expected.reshape(1, 2, 4, 3, 3).transpose(0, 1, 3, 4, 2))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
def test_pool_integers(rng, dtype):
    x = rand(rng, (1, 2, 6, 5), dtype, -50 if dtype != "uint8" else 0, 100)
    got = run_relay(relay.nn.max_pool2d, x, pool_size=3, strides=2, padding=1)
    expected = _naive_pool(x, "max", (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), False, False)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, expected.astype(dtype))
    got = run_relay(relay.nn.avg_pool2d, x, pool_size=2, strides=2, padding=(0, 0, 0, 1))
    mean = _naive_pool(x, "avg", (2, 2), (2, 2), (1, 1), (0, 0, 0, 1), False, False)
    np.testing.assert_array_equal(got, np.trunc(mean).astype(dtype))  # TVM's integer division


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_global_pools(rng, dtype, layout):
    x = rand(rng, (2, 3, 5, 4), dtype)
    data = x if layout == "NCHW" else x.transpose(0, 2, 3, 1).copy()
    for builder, onnx_op, formula in ((relay.nn.global_max_pool2d, "GlobalMaxPool", np.max),
                                      (relay.nn.global_avg_pool2d, "GlobalAveragePool", np.mean)):
        got = run_relay(builder, data, layout=layout)
        expected = formula(x.astype(np.float64), axis=(2, 3), keepdims=True)
        if dtype == "float32":
            assert_close(expected, run_onnx(onnx_op, [x])[0], dtype)
        if layout == "NHWC":
            expected = expected.transpose(0, 2, 3, 1)
        assert got.dtype == np.dtype(dtype)
        assert_close(got, expected, dtype)


def _naive_adaptive(x: np.ndarray, out_sizes: Seq, mode: str) -> np.ndarray:
    spatial = x.shape[2:]
    out = np.zeros(x.shape[:2] + tuple(out_sizes))
    for pos in itertools.product(*(range(m) for m in out_sizes)):
        region = tuple(slice(int(np.floor(i * n / m)), int(np.ceil((i + 1) * n / m)))
                       for i, n, m in zip(pos, spatial, out_sizes))
        block = x[(slice(None), slice(None), *region)].astype(np.float64)
        block = block.reshape(x.shape[0], x.shape[1], -1)
        out[(slice(None), slice(None), *pos)] = block.max(-1) if mode == "max" else block.mean(-1)
    return out


@pytest.mark.parametrize("mode", ["max", "avg"])
@pytest.mark.parametrize("shape,output_size", [
    ((1, 2, 10), (4,)), ((2, 3, 7), (7,)), ((1, 2, 9, 7), (4, 3)), ((1, 3, 8, 8), (1, 1)),
    ((1, 2, 5, 6), (7, 8)), ((1, 1, 5, 6, 7), (2, 3, 4)),
])
def test_adaptive_pools(rng, mode, shape, output_size):
    nsp = len(output_size)
    builder = getattr(relay.nn, f"adaptive_{mode}_pool{nsp}d")
    x = rand(rng, shape, "float32")
    got = run_relay(builder, x, output_size=output_size)
    assert_close(got, _naive_adaptive(x, output_size, mode), "float32")


def test_adaptive_pool_output_size_forms(rng):
    x = rand(rng, (1, 2, 6, 4), "float32")
    assert run_relay(relay.nn.adaptive_avg_pool2d, x, output_size=2).shape == (1, 2, 2, 2)
    assert run_relay(relay.nn.adaptive_avg_pool2d, x).shape == (1, 2, 6, 4)
    assert run_relay(relay.nn.adaptive_max_pool2d, x, output_size=(None, 1)).shape == (1, 2, 6, 1)
    got = run_relay(relay.nn.adaptive_avg_pool2d, x.transpose(0, 2, 3, 1).copy(), output_size=(3, 2),
                    layout="NHWC")
    assert_close(got, _naive_adaptive(x, (3, 2), "avg").transpose(0, 2, 3, 1), "float32")


# --- shape relation (Hypothesis) -----------------------------------------------------------------

@st.composite
def _pool_configs(draw: Any) -> tuple:
    nsp = draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(nsp)]
    strides = [draw(st.integers(1, 3)) for _ in range(nsp)]
    dilation = [draw(st.integers(1, 2)) for _ in range(nsp)]
    pads = [draw(st.integers(0, k - 1)) for k in kernel] * 2
    sizes = [draw(st.integers((k - 1) * d + 1, 8)) for k, d in zip(kernel, dilation)]
    return nsp, kernel, strides, dilation, pads, sizes, draw(st.booleans()), draw(st.booleans())


@settings(max_examples=40, deadline=None)
@given(_pool_configs(), st.sampled_from(["max", "avg"]))
def test_pool_shape_relation(config, mode):
    nsp, kernel, strides, dilation, pads, sizes, ceil_mode, include = config
    extra = {"count_include_pad": include} if mode == "avg" else {}
    x = relay.var("x", shape=(1, 2, *sizes))
    call = POOL[mode, nsp](x, pool_size=kernel, strides=strides, dilation=dilation, padding=pads,
                           ceil_mode=ceil_mode, **extra)
    inferred = infer_type(IRModule.from_expr(call))["main"].body.checked_type.shape
    expected = tuple(_out_size(n, k, s, d, pads[i], pads[i + nsp], ceil_mode)
                     for i, (n, k, s, d) in enumerate(zip(sizes, kernel, strides, dilation)))
    assert inferred == (1, 2, *expected)
    data = np.random.default_rng(1).uniform(size=(1, 2, *sizes)).astype("float32")
    out = run_relay(POOL[mode, nsp], data, pool_size=kernel, strides=strides, dilation=dilation,
                    padding=pads, ceil_mode=ceil_mode, **extra)
    assert out.shape == inferred
    assert_close(out, _naive_pool(data, mode, kernel, strides, dilation, pads, ceil_mode, include),
                 "float32")


# --- printing, patterns, errors ------------------------------------------------------------------

def test_pool_printing_matches_tvm():
    text = relay.nn.max_pool2d(relay.var("x", shape=(1, 8, 16, 16)), pool_size=(2, 2),
                               strides=(2, 2)).astext()
    assert "nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2], padding=[0, 0, 0, 0])" in text
    text = relay.nn.avg_pool2d(relay.var("x", shape=(1, 8, 16, 16)), pool_size=3, padding=1,
                               count_include_pad=True, ceil_mode=True).astext()
    assert "pool_size=[3, 3], padding=[1, 1, 1, 1], ceil_mode=True, count_include_pad=True" in text
    text = relay.nn.global_avg_pool2d(relay.var("x", shape=(1, 2, 3, 3))).astext()
    assert "nn.global_avg_pool2d(%x)" in text


def test_pool_patterns():
    # TVM registers every pooling op as kOutEWiseFusable (src/relay/op/nn/pooling.cc)
    names = [f"nn.{m}_pool{n}d" for m in ("max", "avg") for n in (1, 2, 3)]
    names += ["nn.global_max_pool2d", "nn.global_avg_pool2d"]
    names += [f"nn.adaptive_{m}_pool{n}d" for m in ("max", "avg") for n in (1, 2, 3)]
    for name in names:
        assert get_op_def(name).pattern == OpPattern.OUT_ELEMWISE_FUSABLE, name


def _type_error(call: Expr) -> str:
    with pytest.raises(KilnTypeError) as info:
        infer_type(IRModule.from_expr(call))
    return str(info.value)


def test_pool_errors():
    x = relay.var("x", shape=(1, 2, 4, 4))
    msg = _type_error(relay.nn.max_pool2d(x, pool_size=(6, 6)))
    assert "nn.max_pool2d" in msg and "(1, 2, 4, 4)" in msg and "empty" in msg
    assert "unsplit" in _type_error(relay.nn.avg_pool2d(relay.var("b", shape=(1, 2, 4, 4, 2)),
                                                        pool_size=2, layout="NCHW2h"))
    assert "4-d" in _type_error(relay.nn.max_pool2d(relay.var("y", shape=(2, 4, 4)), pool_size=2))
    assert "output_size" in _type_error(relay.nn.adaptive_avg_pool2d(x, output_size=(1, 2, 3)))
