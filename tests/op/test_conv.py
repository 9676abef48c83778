"""Convolution operators: reference kernels vs onnxruntime Conv/ConvTranspose and NumPy loops."""

from __future__ import annotations

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

# (data shape NCHW, out channels, kernel, strides, pads (top, left, bottom, right), dilation, groups)
CONV2D = [
    ((1, 3, 9, 9), 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((2, 4, 10, 7), 6, (3, 2), (2, 1), (0, 1, 2, 0), (1, 1), 2),
    ((1, 6, 11, 11), 6, (3, 3), (1, 2), (2, 2, 2, 2), (2, 2), 6),  # depthwise, dilated
    ((1, 4, 8, 8), 8, (3, 3), (2, 2), (1, 0, 1, 0), (1, 1), 4),  # depthwise, multiplier 2
    ((1, 2, 7, 9), 3, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((1, 3, 12, 5), 2, (5, 3), (3, 2), (2, 1, 0, 1), (1, 2), 1),
]


def _naive_conv(x: np.ndarray, w: np.ndarray, strides: Seq, pads: Seq, dilation: Seq,
                groups: int) -> np.ndarray:
    """Float64 convolution, one output position at a time (the float64 oracle: onnxruntime has
    no double Conv)."""
    nsp = x.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[i], pads[i + nsp]) for i in range(nsp)])
    kernel = w.shape[2:]
    out_sp = [(xp.shape[2 + i] - (kernel[i] - 1) * dilation[i] - 1) // strides[i] + 1
              for i in range(nsp)]
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    out = np.zeros((x.shape[0], w.shape[0], *out_sp))
    for pos in np.ndindex(*out_sp):
        window = tuple(slice(p * s, p * s + (k - 1) * d + 1, d)
                       for p, s, k, d in zip(pos, strides, kernel, dilation))
        for o in range(w.shape[0]):
            g = o // og
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg), *window)]
            out[(slice(None), o, *pos)] = (patch * w[o].astype(np.float64)).reshape(x.shape[0], -1).sum(1)
    return out


def _naive_conv_transpose(x: np.ndarray, w: np.ndarray, strides: Seq, pads: Seq, out_pad: Seq,
                          dilation: Seq, groups: int) -> np.ndarray:
    """Float64 transposed convolution by scattering every input element (the float64 oracle)."""
    nsp = x.ndim - 2
    kernel = w.shape[2:]
    cg, og = x.shape[1] // groups, w.shape[1]
    full = [(n - 1) * s + (k - 1) * d + 1 + q
            for n, s, k, d, q in zip(x.shape[2:], strides, kernel, dilation, out_pad)]
    buf = np.zeros((x.shape[0], og * groups, *full))
    for pos in np.ndindex(*x.shape[2:]):
        for c in range(x.shape[1]):
            g = c // cg
            for tap in np.ndindex(*kernel):
                at = tuple(p * s + t * d for p, s, t, d in zip(pos, strides, tap, dilation))
                buf[(slice(None), slice(g * og, (g + 1) * og), *at)] += (
                    x[(slice(None), c, *pos)][:, None].astype(np.float64) * w[(c, slice(None), *tap)])
    crop = tuple(slice(pads[i], full[i] - pads[i + nsp]) for i in range(nsp))
    return buf[(slice(None), slice(None), *crop)]


def _onnx_conv(x: np.ndarray, w: np.ndarray, strides: Seq, pads: Seq, dilation: Seq,
               groups: int) -> np.ndarray:
    if x.dtype == np.float64:
        return _naive_conv(x, w, strides, pads, dilation, groups)
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dilation),
             "group": groups}
    return run_onnx("Conv", [x, w], attrs)[0]


@pytest.mark.parametrize("shape,oc,kernel,strides,pads,dilation,groups", CONV2D[:3])
def test_float64_oracles_agree_with_onnxruntime(rng, shape, oc, kernel, strides, pads, dilation,
                                                groups):
    x = rand(rng, shape, "float32")
    w = rand(rng, (oc, shape[1] // groups, *kernel), "float32")
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dilation),
             "group": groups}
    assert_close(_naive_conv(x, w, strides, pads, dilation, groups), run_onnx("Conv", [x, w], attrs)[0],
                 "float32")
    wt = rand(rng, (shape[1], oc // groups, *kernel), "float32")
    out_pad = tuple(s_ - 1 for s_ in strides)
    assert_close(_naive_conv_transpose(x, wt, strides, pads, out_pad, dilation, groups),
                 run_onnx("ConvTranspose", [x, wt], {**attrs, "output_padding": list(out_pad)})[0],
                 "float32")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("shape,oc,kernel,strides,pads,dilation,groups", CONV2D)
def test_conv2d_nchw(rng, dtype, shape, oc, kernel, strides, pads, dilation, groups):
    x = rand(rng, shape, dtype)
    w = rand(rng, (oc, shape[1] // groups, *kernel), dtype)
    got = run_relay(relay.nn.conv2d, x, w, strides=strides, padding=pads, dilation=dilation,
                    groups=groups, channels=oc, kernel_size=kernel)
    if dtype == "float16":  # onnxruntime computes float16 convolutions in float32
        expected = _onnx_conv(x.astype("float32"), w.astype("float32"), strides, pads, dilation,
                              groups).astype("float16")
    else:
        expected = _onnx_conv(x, w, strides, pads, dilation, groups)
    assert got.dtype == np.dtype(dtype)
    assert_close(got, expected, dtype, scale=4.0 if dtype == "float16" else 1.0)


@pytest.mark.parametrize("shape,oc,kernel,strides,pads,dilation,groups", CONV2D[:4])
def test_conv2d_nhwc_hwio(rng, shape, oc, kernel, strides, pads, dilation, groups):
    x = rand(rng, shape, "float32")
    w = rand(rng, (oc, shape[1] // groups, *kernel), "float32")
    expected = _onnx_conv(x, w, strides, pads, dilation, groups).transpose(0, 2, 3, 1)
    got = run_relay(relay.nn.conv2d, x.transpose(0, 2, 3, 1).copy(), w.transpose(2, 3, 1, 0).copy(),
                    strides=strides, padding=pads, dilation=dilation, groups=groups,
                    data_layout="NHWC", kernel_layout="HWIO")
    assert_close(got, expected)


def test_conv2d_nhwc_depthwise_hwoi(rng):
    # TVM's NHWC depthwise kernels are HWOI: (kh, kw, channels, 1)
    x = rand(rng, (1, 8, 8, 5), "float32")
    w = rand(rng, (3, 3, 5, 1), "float32")
    got = run_relay(relay.nn.conv2d, x, w, padding=1, groups=5, channels=5, kernel_size=3,
                    data_layout="NHWC", kernel_layout="HWOI")
    expected = _onnx_conv(x.transpose(0, 3, 1, 2).copy(), w.transpose(2, 3, 0, 1).copy(), (1, 1),
                          (1, 1, 1, 1), (1, 1), 5).transpose(0, 2, 3, 1)
    assert_close(got, expected)


def test_conv2d_out_layout_differs(rng):
    x = rand(rng, (1, 3, 6, 6), "float32")
    w = rand(rng, (4, 3, 3, 3), "float32")
    got = run_relay(relay.nn.conv2d, x, w, padding=1, out_layout="NHWC")
    expected = _onnx_conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1).transpose(0, 2, 3, 1)
    assert_close(got, expected)


def _naive_conv2d(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Direct seven-loop convolution in int64 (independent of the kernel under test)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad), dtype=np.int64)
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), dtype=np.int64)
    for b in range(n):
        for oc in range(o):
            for i in range(oh):
                for j in range(ow):
                    acc = 0
                    for ic in range(c):
                        for p in range(kh):
                            for q in range(kw):
                                acc += int(xp[b, ic, i * stride + p, j * stride + q]) * int(w[oc, ic, p, q])
                    out[b, oc, i, j] = acc
    return out


@pytest.mark.parametrize("dtype,out_dtype", [("int8", "int32"), ("uint8", "int32"), ("int32", "")])
def test_conv2d_integer_out_dtype(rng, dtype, out_dtype):
    x = rand(rng, (1, 2, 5, 5), dtype, -20 if dtype != "uint8" else 0, 20)
    w = rand(rng, (3, 2, 3, 3), "int8" if dtype != "int32" else dtype, -20, 20)
    got = run_relay(relay.nn.conv2d, x, w, strides=2, padding=1, out_dtype=out_dtype)
    expected = _naive_conv2d(x, w, 2, 1)
    assert got.dtype == np.dtype(out_dtype or dtype)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,oc,k,s,pads,d,g", [
    ((2, 4, 17), 6, 3, 2, (1, 2), 1, 2),
    ((1, 3, 10), 3, 4, 1, (0, 0), 2, 3),
    ((1, 2, 8), 5, 1, 3, (2, 2), 1, 1),
])
def test_conv1d(rng, dtype, shape, oc, k, s, pads, d, g):
    x = rand(rng, shape, dtype)
    w = rand(rng, (oc, shape[1] // g, k), dtype)
    got = run_relay(relay.nn.conv1d, x, w, strides=s, padding=pads, dilation=d, groups=g)
    expected = _onnx_conv(x, w, (s,), pads, (d,), g)
    assert_close(got, expected, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,oc,k,s,pads,d,g", [
    ((1, 2, 5, 6, 7), 4, (3, 3, 3), (1, 2, 1), (1, 1, 1, 1, 0, 1), (1, 1, 2), 2),
    ((2, 3, 4, 4, 4), 3, (2, 1, 3), (2, 1, 1), (0, 0, 1, 0, 0, 1), (1, 1, 1), 1),
])
def test_conv3d(rng, dtype, shape, oc, k, s, pads, d, g):
    x = rand(rng, shape, dtype)
    w = rand(rng, (oc, shape[1] // g, *k), dtype)
    got = run_relay(relay.nn.conv3d, x, w, strides=s, padding=pads, dilation=d, groups=g)
    expected = _onnx_conv(x, w, s, pads, d, g)
    assert_close(got, expected, dtype)


# (data shape, out channels per group, kernel, strides, pads, output_padding, dilation, groups)
CONV2D_T = [
    ((1, 4, 5, 5), 3, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 1),
    ((2, 4, 4, 6), 2, (3, 2), (1, 2), (0, 1, 2, 0), (0, 1), (2, 1), 2),
    ((1, 6, 3, 3), 1, (4, 4), (3, 3), (2, 1, 0, 1), (2, 0), (1, 1), 6),
    ((1, 2, 4, 4), 3, (1, 1), (1, 1), (0, 0, 0, 0), (0, 0), (1, 1), 1),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,ocg,kernel,strides,pads,out_pad,dilation,groups", CONV2D_T)
def test_conv2d_transpose(rng, dtype, shape, ocg, kernel, strides, pads, out_pad, dilation, groups):
    x = rand(rng, shape, dtype)
    w = rand(rng, (shape[1], ocg, *kernel), dtype)
    got = run_relay(relay.nn.conv2d_transpose, x, w, strides=strides, padding=pads,
                    dilation=dilation, groups=groups, output_padding=out_pad,
                    channels=ocg * groups, kernel_size=kernel)
    if dtype == "float64":
        expected = _naive_conv_transpose(x, w, strides, pads, out_pad, dilation, groups)
    else:
        expected = run_onnx("ConvTranspose", [x, w], {
            "strides": list(strides), "pads": list(pads), "dilations": list(dilation),
            "group": groups, "output_padding": list(out_pad)})[0]
    assert_close(got, expected, dtype)


@pytest.mark.parametrize("shape,ocg,k,s,pads,out_pad,d,g", [
    ((1, 3, 7), 2, 3, 2, (1, 0), 1, 1, 1),
    ((2, 4, 5), 3, 2, 3, (0, 2), 0, 2, 2),
])
def test_conv1d_transpose(rng, shape, ocg, k, s, pads, out_pad, d, g):
    x = rand(rng, shape, "float32")
    w = rand(rng, (shape[1], ocg, k), "float32")
    got = run_relay(relay.nn.conv1d_transpose, x, w, strides=s, padding=pads, dilation=d, groups=g,
                    output_padding=out_pad)
    expected = run_onnx("ConvTranspose", [x, w], {"strides": [s], "pads": list(pads),
                                                  "dilations": [d], "group": g,
                                                  "output_padding": [out_pad]})[0]
    assert_close(got, expected)


def test_conv3d_transpose(rng):
    x = rand(rng, (1, 2, 3, 4, 3), "float32")
    w = rand(rng, (2, 3, 2, 3, 2), "float32")
    attrs = {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1], "dilations": [1, 2, 1],
             "output_padding": [1, 0, 1]}
    got = run_relay(relay.nn.conv3d_transpose, x, w, strides=(2, 1, 2), padding=(0, 1, 0, 1, 0, 1),
                    dilation=(1, 2, 1), output_padding=(1, 0, 1))
    assert_close(got, run_onnx("ConvTranspose", [x, w], attrs)[0])


def test_conv2d_transpose_nhwc(rng):
    x = rand(rng, (1, 3, 4, 4), "float32")
    w = rand(rng, (3, 2, 3, 3), "float32")
    expected = run_onnx("ConvTranspose", [x, w], {"strides": [2, 2], "pads": [1, 1, 1, 1]})[0]
    got = run_relay(relay.nn.conv2d_transpose, x.transpose(0, 2, 3, 1).copy(),
                    w.transpose(2, 3, 1, 0).copy(), strides=2, padding=1, data_layout="NHWC",
                    kernel_layout="HWOI")
    assert_close(got, expected.transpose(0, 2, 3, 1))


# --- blocked layouts: packing written out in the test --------------------------------------------

def _pack_data(x: np.ndarray, block: int) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2).copy()


def _pack_kernel(w: np.ndarray, ib: int, ob: int) -> np.ndarray:
    o, i, kh, kw = w.shape
    return w.reshape(o // ob, ob, i // ib, ib, kh, kw).transpose(0, 2, 4, 5, 3, 1).copy()


@pytest.mark.parametrize("ic,oc,ib,ob,strides,pads", [
    (8, 16, 4, 8, (1, 1), (1, 1, 1, 1)),
    (6, 4, 3, 2, (2, 1), (0, 1, 2, 0)),
    (4, 4, 4, 4, (1, 1), (0, 0, 0, 0)),
])
def test_contrib_conv2d_nchwc(rng, ic, oc, ib, ob, strides, pads):
    x = rand(rng, (2, ic, 7, 6), "float32")
    w = rand(rng, (oc, ic, 3, 3), "float32")
    expected = _pack_data(_onnx_conv(x, w, strides, pads, (1, 1), 1), ob)
    got = run_relay(relay.nn.contrib_conv2d_nchwc, _pack_data(x, ib), _pack_kernel(w, ib, ob),
                    strides=strides, padding=pads, channels=oc, kernel_size=(3, 3),
                    data_layout=f"NCHW{ib}c", kernel_layout=f"OIHW{ib}i{ob}o",
                    out_layout=f"NCHW{ob}c")
    assert_close(got, expected)


@pytest.mark.parametrize("channels,block,multiplier", [(8, 4, 1), (6, 3, 1), (4, 4, 2)])
def test_contrib_depthwise_conv2d_nchwc(rng, channels, block, multiplier):
    x = rand(rng, (1, channels, 6, 7), "float32")
    oc = channels * multiplier
    w = rand(rng, (oc, 1, 3, 3), "float32")
    expected = _pack_data(_onnx_conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1), channels), block)
    # TVM's depthwise NCHWc kernel: (O // oc_block, 1, KH, KW, 1, oc_block), layout OIHW1i{b}o
    kernel = w.reshape(oc // block, block, 1, 3, 3).transpose(0, 2, 3, 4, 1)[:, :, :, :, None, :]
    got = run_relay(relay.nn.contrib_depthwise_conv2d_nchwc, _pack_data(x, block),
                    np.ascontiguousarray(kernel), padding=1, groups=channels, channels=oc,
                    kernel_size=3, data_layout=f"NCHW{block}c", kernel_layout=f"OIHW1i{block}o",
                    out_layout=f"NCHW{block}c")
    assert_close(got, expected)


# --- shape relation (Hypothesis) -----------------------------------------------------------------

@st.composite
def _conv_configs(draw: Any) -> tuple:
    nsp = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 2, 3]))
    cin = groups * draw(st.integers(1, 2))
    cout = groups * draw(st.integers(1, 2))
    kernel = [draw(st.integers(1, 3)) for _ in range(nsp)]
    dilation = [draw(st.integers(1, 2)) for _ in range(nsp)]
    strides = [draw(st.integers(1, 3)) for _ in range(nsp)]
    pads = [draw(st.integers(0, 2)) for _ in range(2 * nsp)]
    sizes = []
    for i in range(nsp):
        span = (kernel[i] - 1) * dilation[i] + 1
        sizes.append(draw(st.integers(max(1, span - pads[i] - pads[i + nsp]), 7)))
    return nsp, groups, cin, cout, kernel, dilation, strides, pads, sizes


@settings(max_examples=40, deadline=None)
@given(_conv_configs(), st.booleans())
def test_conv_shape_relation(config, transpose):
    nsp, groups, cin, cout, kernel, dilation, strides, pads, sizes = config
    builders = {1: (relay.nn.conv1d, relay.nn.conv1d_transpose),
                2: (relay.nn.conv2d, relay.nn.conv2d_transpose),
                3: (relay.nn.conv3d, relay.nn.conv3d_transpose)}
    data = np.ones((1, cin, *sizes), "float32")
    if transpose:
        weight = np.ones((cin, cout // groups, *kernel), "float32")
        out_pad = [min(s, d) - 1 for s, d in zip(strides, dilation)]
        expected = [(n - 1) * s + (k - 1) * d + 1 - pads[i] - pads[i + nsp] + q
                    for i, (n, s, k, d, q) in enumerate(zip(sizes, strides, kernel, dilation, out_pad))]
        if min(expected) < 1:
            return
        extra = {"output_padding": out_pad}
    else:
        weight = np.ones((cout, cin // groups, *kernel), "float32")
        expected = [(n + pads[i] + pads[i + nsp] - (k - 1) * d - 1) // s + 1
                    for i, (n, s, k, d) in enumerate(zip(sizes, strides, kernel, dilation))]
        extra = {}
    x = relay.var("x", shape=data.shape)
    w = relay.var("w", shape=weight.shape)
    call = builders[nsp][transpose](x, w, strides=strides, padding=pads, dilation=dilation,
                                    groups=groups, **extra)
    mod = infer_type(IRModule.from_expr(call))
    inferred = mod["main"].body.checked_type.shape
    assert inferred == (1, cout, *expected)
    out = run_relay(builders[nsp][transpose], data, weight, strides=strides, padding=pads,
                    dilation=dilation, groups=groups, **extra)
    assert out.shape == inferred


# --- builders, printing, patterns, errors --------------------------------------------------------

@pytest.mark.parametrize("padding,expected", [
    (1, (1, 1, 1, 1)), ((1, 2), (1, 2, 1, 2)), ((1, 2, 3, 4), (1, 2, 3, 4)), ([0], (0, 0, 0, 0))])
def test_conv2d_builder_padding(padding, expected):
    call = relay.nn.conv2d(relay.var("x", shape=(1, 1, 8, 8)), relay.var("w", shape=(1, 1, 3, 3)),
                           padding=padding, kernel_size=3, strides=2)
    assert call.attrs.padding == expected
    assert call.attrs.kernel_size == (3, 3) and call.attrs.strides == (2, 2)


def test_conv_printing_matches_tvm():
    x = relay.var("data", shape=(1, 3, 16, 16))
    w = relay.var("conv_weight", shape=(8, 3, 3, 3))
    text = relay.nn.conv2d(x, w, padding=(1, 1), channels=8, kernel_size=(3, 3)).astext()
    assert "nn.conv2d(%data, %conv_weight, padding=[1, 1, 1, 1], channels=8, kernel_size=[3, 3])" in text
    text = relay.nn.conv2d(x, w, data_layout="NHWC", kernel_layout="HWIO", out_dtype="float32").astext()
    assert 'data_layout="NHWC", kernel_layout="HWIO", out_dtype="float32"' in text


@pytest.mark.parametrize("name", ["nn.conv1d", "nn.conv2d", "nn.conv3d", "nn.conv1d_transpose",
                                  "nn.conv2d_transpose", "nn.conv3d_transpose",
                                  "nn.contrib_conv2d_NCHWc", "nn.contrib_depthwise_conv2d_NCHWc"])
def test_conv_patterns(name):
    # TVM registers every convolution as kOutEWiseFusable (src/relay/op/nn/convolution.cc)
    assert get_op_def(name).pattern == OpPattern.OUT_ELEMWISE_FUSABLE
    assert get_op_def(name).attrs_type.type_key.startswith("relay.attrs.Conv")


def _type_error(call: Expr) -> str:
    with pytest.raises(KilnTypeError) as info:
        infer_type(IRModule.from_expr(call))
    return str(info.value)


def test_conv2d_channel_mismatch_names_both_shapes():
    msg = _type_error(relay.nn.conv2d(relay.var("x", shape=(1, 3, 8, 8)),
                                      relay.var("w", shape=(4, 5, 3, 3))))
    assert "nn.conv2d" in msg and "(1, 3, 8, 8)" in msg and "(4, 5, 3, 3)" in msg
    assert "3 input channels" in msg


def test_conv2d_other_errors():
    x = relay.var("x", shape=(1, 4, 8, 8))
    w = relay.var("w", shape=(6, 2, 3, 3))
    assert "groups=3" in _type_error(relay.nn.conv2d(x, w, groups=3))
    assert "kernel_size=(5, 5)" in _type_error(relay.nn.conv2d(x, w, groups=2, kernel_size=5))
    assert "channels=4" in _type_error(relay.nn.conv2d(x, w, groups=2, channels=4))
    assert "not convertible" in _type_error(relay.nn.conv2d(x, w, groups=2, data_layout="NCDH"))
    assert "empty" in _type_error(relay.nn.conv2d(x, relay.var("k", shape=(6, 4, 9, 9))))
    w64 = relay.var("w64", shape=(6, 4, 3, 3), dtype="float64")
    msg = _type_error(relay.nn.conv2d(x, w64))
    assert "float32" in msg and "float64" in msg
    msg = _type_error(relay.nn.conv2d_transpose(x, relay.var("t", shape=(3, 2, 3, 3))))
    assert "(1, 4, 8, 8)" in msg and "(3, 2, 3, 3)" in msg
    blocked = relay.var("b", shape=(1, 2, 8, 8, 3))
    assert "size 4" in _type_error(relay.nn.contrib_conv2d_nchwc(blocked, w, data_layout="NCHW4c",
                                                                 kernel_layout="OIHW"))
