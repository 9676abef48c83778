"""nn operators: reference kernels vs onnxruntime one-node models, NumPy formulas and TVM's files."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from _onnx_oracle import assert_close, rand, run_onnx, run_relay
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.errors import KilnTypeError
from kiln.interpreter import evaluate
from kiln.ir import Expr, IRModule, TupleType
from kiln.op.registry import OpPattern, get_op_def
from kiln.transform.infer_type import infer_type

FLOATS = ["float32", "float64"]


def _type_error(expr: Expr) -> str:
    with pytest.raises(KilnTypeError) as info:
        infer_type(IRModule.from_expr(expr))
    return str(info.value)


# --- dense / matmul / batch_matmul --------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("m,k,n", [(1, 512, 10), (4, 7, 3), (3, 1, 5)])
def test_dense_vs_gemm(rng, dtype, m, k, n):
    x, w = rand(rng, (m, k), dtype), rand(rng, (n, k), dtype)
    got = run_relay(relay.nn.dense, x, w, units=n)
    assert_close(got, run_onnx("Gemm", [x, w], {"transB": 1})[0], dtype, scale=10)


@pytest.mark.parametrize("shape", [(2, 3, 6), (2, 1, 4, 6)])
def test_dense_batched_data(rng, shape):
    x, w = rand(rng, shape, "float32"), rand(rng, (5, shape[-1]), "float32")
    assert_close(run_relay(relay.nn.dense, x, w), run_onnx("MatMul", [x, w.T.copy()])[0])


@pytest.mark.parametrize("dtype,out_dtype", [("int8", "int32"), ("int32", ""), ("uint8", "int32")])
def test_dense_integers(rng, dtype, out_dtype):
    x, w = rand(rng, (3, 6), dtype, -50, 50), rand(rng, (4, 6), dtype, -50, 50)
    got = run_relay(relay.nn.dense, x, w, out_dtype=out_dtype)
    assert got.dtype == np.dtype(out_dtype or dtype)
    expected = np.array([[sum(int(x[i, t]) * int(w[j, t]) for t in range(6)) for j in range(4)]
                         for i in range(3)])
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (True, True), (False, True)])
def test_matmul_vs_gemm(rng, dtype, ta, tb):
    a = rand(rng, (5, 3) if ta else (3, 5), dtype)
    b = rand(rng, (4, 5) if tb else (5, 4), dtype)
    got = run_relay(relay.nn.matmul, a, b, transpose_a=ta, transpose_b=tb)
    expected = run_onnx("Gemm", [a, b], {"transA": int(ta), "transB": int(tb)})[0]
    assert_close(got, expected, dtype)


def test_matmul_builds_dense_like_tvm():
    a, b = relay.var("a", shape=(2, 3)), relay.var("b", shape=(4, 3))
    assert relay.nn.matmul(a, b, transpose_b=True).op.name == "nn.dense"
    assert relay.nn.matmul(a, relay.var("c", shape=(3, 4))).op.name == "nn.matmul"


def test_matmul_batched_transpose_a(rng):
    a, b = rand(rng, (2, 6, 3), "float32"), rand(rng, (6, 4), "float32")
    got = run_relay(relay.nn.matmul, a, b, transpose_a=True)
    assert_close(got, run_onnx("MatMul", [a.transpose(0, 2, 1).copy(), b])[0])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("ta,tb", [(False, True), (False, False), (True, False), (True, True)])
@pytest.mark.parametrize("ba,bb", [(3, 3), (1, 3), (3, 1)])
def test_batch_matmul_vs_onnx(rng, dtype, ta, tb, ba, bb):
    a = rand(rng, (ba, 5, 4) if ta else (ba, 4, 5), dtype, -9, 9)
    b = rand(rng, (bb, 6, 5) if tb else (bb, 5, 6), dtype, -9, 9)
    got = run_relay(relay.nn.batch_matmul, a, b, transpose_a=ta, transpose_b=tb)
    lhs = a.transpose(0, 2, 1).copy() if ta else a
    rhs = b.transpose(0, 2, 1).copy() if tb else b
    assert got.shape == (max(ba, bb), 4, 6)
    assert_close(got, run_onnx("MatMul", [lhs, rhs])[0], dtype)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.integers(1, 4),
       st.booleans(), st.booleans())
def test_matmul_shape_relation(batch, m, k, n, ta, tb):
    a = np.ones((batch, k, m) if ta else (batch, m, k), "float32")
    b = np.ones((batch, n, k) if tb else (batch, k, n), "float32")
    out = run_relay(relay.nn.batch_matmul, a, b, transpose_a=ta, transpose_b=tb)
    assert out.shape == (batch, m, n) and np.all(out == k)
    out = run_relay(relay.nn.matmul, a, b[0], transpose_a=ta, transpose_b=tb)
    assert out.shape == (batch, m, n) and np.all(out == k)


def test_dense_errors():
    x = relay.var("x", shape=(2, 8))
    msg = _type_error(relay.nn.dense(x, relay.var("w", shape=(4, 7))))
    assert "nn.dense" in msg and "(2, 8)" in msg and "(4, 7)" in msg
    assert "units=3" in _type_error(relay.nn.dense(x, relay.var("w", shape=(4, 8)), units=3))
    msg = _type_error(relay.nn.batch_matmul(relay.var("a", shape=(2, 3, 4)),
                                            relay.var("b", shape=(3, 5, 4))))
    assert "batch dimensions" in msg and "(2, 3, 4)" in msg and "(3, 5, 4)" in msg


# --- bias_add and activations --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("shape,axis", [((2, 3, 4, 5), 1), ((2, 3, 4, 5), -1), ((6, 7), 1), ((4,), 0)])
def test_bias_add(rng, dtype, shape, axis):
    x, b = rand(rng, shape, dtype, -9, 9), rand(rng, (shape[axis],), dtype, -9, 9)
    bshape = [1] * len(shape)
    bshape[axis] = -1
    assert_close(run_relay(relay.nn.bias_add, x, b, axis=axis), x + b.reshape(bshape), dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
def test_relu(rng, dtype):
    x = rand(rng, (3, 4, 5), dtype, -9, 9)
    assert_close(run_relay(relay.nn.relu, x), run_onnx("Relu", [x])[0], dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("alpha", [0.01, 0.2, 1.5])
def test_leaky_relu(rng, dtype, alpha):
    alpha = float(np.float32(alpha))  # ONNX float attributes are float32
    x = rand(rng, (3, 4, 5), dtype)
    got = run_relay(relay.nn.leaky_relu, x, alpha=alpha)
    assert_close(got, run_onnx("LeakyRelu", [x], {"alpha": alpha})[0], dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,axis", [((2, 3, 4, 5), 1), ((2, 4, 5, 3), 3), ((5, 6), 1)])
def test_prelu(rng, dtype, shape, axis):
    x, alpha = rand(rng, shape, dtype), rand(rng, (shape[axis],), dtype)
    slope_shape = [1] * (len(shape) - 1 - axis)
    slope = alpha.reshape((-1, *slope_shape))  # ONNX broadcasts the slope from the right
    got = run_relay(relay.nn.prelu, x, alpha, axis=axis)
    assert_close(got, run_onnx("PRelu", [x, slope])[0], dtype)


def test_activation_errors():
    x = relay.var("x", shape=(2, 3, 4))
    assert "float" in _type_error(relay.nn.leaky_relu(relay.var("i", shape=(2,), dtype="int32")))
    msg = _type_error(relay.nn.prelu(x, relay.var("a", shape=(4,))))
    assert "alpha" in msg and "(3)" in msg and "(4,)" in msg
    msg = _type_error(relay.nn.bias_add(x, relay.var("b", shape=(3,)), axis=5))
    assert "axis 5" in msg
    assert "bias" in _type_error(relay.nn.bias_add(x, relay.var("b", shape=(2,))))


# --- softmax family ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("name,onnx_op", [("softmax", "Softmax"), ("fast_softmax", "Softmax"),
                                          ("log_softmax", "LogSoftmax")])
def test_softmax_family(rng, dtype, axis, name, onnx_op):
    x = rand(rng, (3, 4, 5), dtype, -4, 4)
    got = run_relay(getattr(relay.nn, name), x, axis=axis)
    assert_close(got, run_onnx(onnx_op, [x], {"axis": axis}, opset=13)[0], dtype)


def test_softmax_large_inputs_are_stable():
    x = np.array([[1000.0, 1001.0, 1002.0]], "float32")
    got = run_relay(relay.nn.softmax, x)
    e = np.exp(np.array([-2.0, -1.0, 0.0]))
    np.testing.assert_allclose(got.ravel(), e / e.sum(), rtol=1e-6)
    np.testing.assert_allclose(run_relay(relay.nn.log_softmax, x).ravel(),
                               np.log(e / e.sum()), rtol=1e-6)


# --- normalisations ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3), (1, 3, 2, 2, 2)])
@pytest.mark.parametrize("epsilon", [1e-5, 1e-2])
def test_batch_norm_vs_onnx(rng, dtype, shape, epsilon):
    epsilon = float(np.float32(epsilon))  # ONNX float attributes are float32
    c = shape[1]
    x = rand(rng, shape, dtype)
    gamma, beta, mean = rand(rng, (c,), dtype), rand(rng, (c,), dtype), rand(rng, (c,), dtype)
    var = rand(rng, (c,), dtype, 0.1, 2.0)
    out, mean_out, var_out = run_relay(relay.nn.batch_norm, x, gamma, beta, mean, var, epsilon=epsilon)
    expected = run_onnx("BatchNormalization", [x, gamma, beta, mean, var], {"epsilon": epsilon},
                        opset=15)[0]
    assert_close(out, expected, dtype)
    np.testing.assert_array_equal(mean_out, mean)
    np.testing.assert_array_equal(var_out, var)


@pytest.mark.parametrize("center,scale", [(False, True), (True, False), (False, False)])
def test_batch_norm_center_scale_and_axis(rng, center, scale):
    x = rand(rng, (2, 5, 4, 3), "float64")
    g, b, m = rand(rng, (3,), "float64"), rand(rng, (3,), "float64"), rand(rng, (3,), "float64")
    v = rand(rng, (3,), "float64", 0.5, 1.5)
    out = run_relay(relay.nn.batch_norm, x, g, b, m, v, axis=3, epsilon=1e-3, center=center,
                    scale=scale)[0]
    expected = (x - m) / np.sqrt(v + 1e-3) * (g if scale else 1) + (b if center else 0)
    assert_close(out, expected, "float64")


def test_batch_norm_builder_and_types():
    x = relay.var("x", shape=(1, 8, 4, 4))
    params = [relay.var(n, shape=(8,)) for n in ("g", "b", "m", "v")]
    bn = relay.nn.batch_norm(x, *params)
    assert len(bn) == 3 and bn[0].index == 0
    ty = infer_type(IRModule.from_expr(bn.astuple()))["main"].body.checked_type
    assert isinstance(ty, TupleType) and [f.shape for f in ty.fields] == [(1, 8, 4, 4), (8,), (8,)]
    msg = _type_error(relay.nn.batch_norm(x, relay.var("g", shape=(4,)), *params[1:])[0])
    assert "gamma must be Tensor[(8), float32]" in msg and "got Tensor[(4), float32]" in msg


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(2, 3, 8), (4, 16), (2, 2, 3, 5)])
def test_layer_norm_vs_onnx(rng, dtype, shape):
    x = rand(rng, shape, dtype)
    g, b = rand(rng, shape[-1:], dtype), rand(rng, shape[-1:], dtype)
    eps = float(np.float32(1e-5))  # ONNX float attributes are float32
    got = run_relay(relay.nn.layer_norm, x, g, b, epsilon=eps)
    expected = run_onnx("LayerNormalization", [x, g, b], {"axis": -1, "epsilon": eps}, opset=17)[0]
    assert_close(got, expected, dtype, scale=10)


def test_layer_norm_middle_axis(rng):
    x = rand(rng, (2, 5, 3), "float64")
    g, b = rand(rng, (5,), "float64"), rand(rng, (5,), "float64")
    got = run_relay(relay.nn.layer_norm, x, g, b, axis=1, epsilon=1e-3, center=False)
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    assert_close(got, (x - mean) / np.sqrt(var + 1e-3) * g[:, None], "float64")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 4, 3, 5), (1, 2, 3, 2, 4)])
def test_instance_norm_vs_onnx(rng, dtype, shape):
    x = rand(rng, shape, dtype)
    g, b = rand(rng, shape[1:2], dtype), rand(rng, shape[1:2], dtype)
    eps = float(np.float32(1e-4))  # ONNX float attributes are float32
    got = run_relay(relay.nn.instance_norm, x, g, b, epsilon=eps)
    expected = run_onnx("InstanceNormalization", [x, g, b], {"epsilon": eps})[0]
    assert_close(got, expected, dtype, scale=10)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape,groups", [((2, 6, 4, 3), 3), ((1, 8, 5), 2), ((2, 4, 3, 3), 4),
                                          ((2, 4, 3, 3), 1)])
def test_group_norm_vs_onnx(rng, dtype, shape, groups):
    x = rand(rng, shape, dtype)
    g, b = rand(rng, shape[1:2], dtype), rand(rng, shape[1:2], dtype)
    got = run_relay(relay.nn.group_norm, x, g, b, num_groups=groups, epsilon=1e-5)
    if dtype == "float32":
        expected = run_onnx("GroupNormalization", [x, g, b], {"num_groups": groups, "epsilon": 1e-5},
                            opset=21)[0]
    else:  # onnxruntime has no double GroupNormalization: the formula
        grouped = x.reshape(shape[0], groups, -1)
        normed = (grouped - grouped.mean(-1, keepdims=True)) / np.sqrt(grouped.var(-1, keepdims=True) + 1e-5)
        bshape = (1, -1) + (1,) * (len(shape) - 2)
        expected = normed.reshape(shape) * g.reshape(bshape) + b.reshape(bshape)
    assert_close(got, expected, dtype, scale=10)


def test_group_norm_channels_last(rng):
    x = rand(rng, (2, 3, 4, 6), "float64")
    g, b = rand(rng, (6,), "float64"), rand(rng, (6,), "float64")
    got = run_relay(relay.nn.group_norm, x, g, b, num_groups=2, axis=3)
    channels_first = run_relay(relay.nn.group_norm, x.transpose(0, 3, 1, 2).copy(), g, b, num_groups=2)
    assert_close(got, channels_first.transpose(0, 2, 3, 1), "float64")


def test_norm_errors():
    x = relay.var("x", shape=(2, 6, 4))
    gb = [relay.var("g", shape=(6,)), relay.var("b", shape=(6,))]
    assert "num_groups=4" in _type_error(relay.nn.group_norm(x, *gb, num_groups=4))
    assert "at least 3 axes" in _type_error(
        relay.nn.instance_norm(relay.var("y", shape=(2, 6)), *gb))
    assert "beta" in _type_error(relay.nn.layer_norm(relay.var("z", shape=(2, 6)), gb[0],
                                                     relay.var("b", shape=(5,))))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("size,bias,alpha,beta", [(5, 2.0, 1e-4, 0.75), (3, 1.0, 0.5, 0.6),
                                                  (1, 1.5, 0.2, 1.0), (4, 1.0, 0.1, 0.5)])
def test_lrn_vs_onnx(rng, dtype, size, bias, alpha, beta):
    x = rand(rng, (2, 7, 3, 4), dtype, -2, 2)
    got = run_relay(relay.nn.lrn, x, size=size, bias=bias, alpha=alpha, beta=beta)
    if dtype == "float32" and size % 2:
        expected = run_onnx("LRN", [x], {"size": size, "bias": bias, "alpha": alpha, "beta": beta})[0]
    else:  # onnxruntime has no double LRN and takes odd sizes only: ONNX's formula, written out
        sq = np.pad(x * x, [(0, 0), ((size - 1) // 2, size // 2), (0, 0), (0, 0)])
        window = np.stack([sq[:, c:c + size].sum(axis=1) for c in range(7)], axis=1)
        expected = x / (bias + alpha / size * window) ** beta
    assert_close(got, expected, dtype)


def test_lrn_channels_last(rng):
    x = rand(rng, (1, 3, 4, 6), "float32")
    expected = run_onnx("LRN", [x.transpose(0, 3, 1, 2).copy()], {"size": 3})[0]
    got = run_relay(relay.nn.lrn, x, size=3, axis=3, alpha=1e-4, bias=1.0)
    assert_close(got, expected.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis", [None, 1, (1, 2), -1])
@pytest.mark.parametrize("eps", [1e-12, 10.0])
def test_l2_normalize(rng, dtype, axis, eps):
    x = rand(rng, (2, 3, 4), dtype)
    got = run_relay(relay.nn.l2_normalize, x, eps=eps, axis=axis)
    axes = None if axis is None else axis
    norm = np.sqrt(np.maximum((x.astype(np.float64) ** 2).sum(axis=axes, keepdims=True), eps))
    assert_close(got, x / norm, dtype)
    if axis == 1 and eps < 1 and dtype == "float32":  # LpNormalization has no eps
        assert_close(got, run_onnx("LpNormalization", [x], {"axis": 1, "p": 2})[0], dtype)


# --- dropout, batch_flatten ----------------------------------------------------------------------

def test_dropout_is_identity_at_inference(rng):
    x = rand(rng, (2, 3, 4), "float32")
    got = run_relay(relay.nn.dropout, x, rate=0.3)
    np.testing.assert_array_equal(got, run_onnx("Dropout", [x])[0])
    out, mask = run_relay(relay.nn.dropout_raw, x, rate=0.3)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(mask, np.ones_like(x))
    assert "nn.dropout(%x, rate=0.3f)" in relay.nn.dropout(relay.var("x", shape=(2,)), 0.3).astext()


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (3, 7), (4,), (2, 0, 3)])
def test_batch_flatten(rng, shape):
    x = rand(rng, shape, "float32")
    got = run_relay(relay.nn.batch_flatten, x)
    if 0 in shape or len(shape) == 1:
        np.testing.assert_array_equal(got, x.reshape(shape[0], -1))
    else:
        np.testing.assert_array_equal(got, run_onnx("Flatten", [x], {"axis": 1})[0])


# --- pad -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int8"])
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
@pytest.mark.parametrize("pad_width", [((0, 0), (1, 2), (2, 1)), ((1, 0), (0, 0), (3, 3)),
                                       ((0, 1), (-1, 2), (2, -2))])
def test_pad_vs_onnx(rng, dtype, mode, pad_width):
    x = rand(rng, (2, 4, 5), dtype, -9, 9)
    value = np.array(3, dtype=dtype)
    got = run_relay(lambda d, v: relay.nn.pad(d, pad_width, v, mode), x, value)
    pads = np.array([p[0] for p in pad_width] + [p[1] for p in pad_width], "int64")
    expected = run_onnx("Pad", [x, value] if mode == "constant" else [x],
                        {"mode": mode}, constants={1: pads}, opset=19)[0]
    np.testing.assert_array_equal(got, expected)


def test_pad_builder_and_printing():
    x = relay.var("x", shape=(1, 2, 3, 3), dtype="float16")
    call = relay.nn.pad(x, [[0, 0], [0, 0], [1, 1], [2, 0]])
    assert call.args[1].value.dtype == np.float32  # relay.const(0.0), cast when padding
    assert "nn.pad(%x, 0f, pad_width=[[0, 0], [0, 0], [1, 1], [2, 0]])" in call.astext()
    out = evaluate(call, {"x": np.ones((1, 2, 3, 3), "float16")})
    assert out.dtype == np.float16 and out.shape == (1, 2, 5, 5) and out[0, 0, 0, 0] == 0
    assert 'pad_mode="reflect"' in relay.nn.pad(x, [[0, 0]] * 4, 0.0, "reflect").astext()


def test_pad_errors():
    x = relay.var("x", shape=(2, 3))
    assert "pair per axis" in _type_error(relay.nn.pad(x, [(1, 1)]))
    assert "below size 0" in _type_error(relay.nn.pad(x, [(0, 0), (-2, -2)]))
    assert "reflect padding of 3" in _type_error(relay.nn.pad(x, [(0, 0), (3, 0)], 0, "reflect"))
    assert "unknown pad_mode" in _type_error(relay.nn.pad(x, [(0, 0), (1, 0)], 0, "wrap"))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(-1, 3), st.integers(-1, 3)), min_size=1,
                max_size=4))
def test_pad_shape_relation(axes):
    shape = tuple(d for d, _, _ in axes)
    widths = [(a, b) for _, a, b in axes]
    if any(d + a + b < 0 for d, a, b in axes):
        return
    out = run_relay(lambda d: relay.nn.pad(d, widths, 7.0), np.zeros(shape, "float32"))
    assert out.shape == tuple(d + a + b for d, a, b in axes)
    assert out.sum() == 7.0 * (out.size - np.prod([d + min(a, 0) + min(b, 0) for d, a, b in axes]))


# --- depth_to_space / space_to_depth / upsampling ------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("shape,bs", [((1, 8, 2, 3), 2), ((2, 18, 3, 2), 3), ((1, 4, 1, 1), 1)])
def test_depth_to_space_vs_onnx(rng, dtype, mode, shape, bs):
    x = rand(rng, shape, dtype, -9, 9)
    expected = run_onnx("DepthToSpace", [x], {"blocksize": bs, "mode": mode})[0]
    np.testing.assert_array_equal(run_relay(relay.nn.depth_to_space, x, block_size=bs, mode=mode),
                                  expected)
    got = run_relay(relay.nn.depth_to_space, x.transpose(0, 2, 3, 1).copy(), block_size=bs,
                    mode=mode, layout="NHWC")
    np.testing.assert_array_equal(got, expected.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("shape,bs", [((1, 2, 4, 6), 2), ((2, 3, 6, 3), 3)])
def test_space_to_depth_vs_onnx(rng, shape, bs):
    x = rand(rng, shape, "float32")
    expected = run_onnx("SpaceToDepth", [x], {"blocksize": bs})[0]
    np.testing.assert_array_equal(run_relay(relay.nn.space_to_depth, x, block_size=bs), expected)
    got = run_relay(relay.nn.space_to_depth, x.transpose(0, 2, 3, 1).copy(), block_size=bs,
                    layout="NHWC")
    np.testing.assert_array_equal(got, expected.transpose(0, 2, 3, 1))


def test_subpixel_errors():
    x = relay.var("x", shape=(1, 6, 4, 4))
    assert "block_size^2 = 4" in _type_error(relay.nn.depth_to_space(x, 2))
    assert "divide by block_size 3" in _type_error(relay.nn.space_to_depth(x, 3))
    assert "'DCR' or 'CRD'" in _type_error(relay.nn.depth_to_space(x, 1, mode="XYZ"))


def _onnx_upsample(x: np.ndarray, sizes: tuple[int, ...], mode: str, coord: str) -> np.ndarray:
    return run_onnx("Resize", [x], {"mode": mode, "coordinate_transformation_mode": coord,
                                    "nearest_mode": "floor", "cubic_coeff_a": -0.5},
                    constants={1: np.array([], "float32"), 2: np.array([], "float32"),
                               3: np.array([*x.shape[:2], *sizes], "int64")}, opset=19)[0]


@pytest.mark.parametrize("scales", [(2.0, 2.0), (1.5, 3.0), (0.5, 1.0)])
@pytest.mark.parametrize("method,align", [("nearest_neighbor", False), ("bilinear", False),
                                          ("bilinear", True), ("bicubic", False),
                                          ("bicubic", True)])
def test_upsampling_vs_onnx_resize(rng, scales, method, align):
    x = rand(rng, (1, 2, 4, 6), "float32")
    sizes = (int(np.floor(4 * scales[0] + 0.5)), int(np.floor(6 * scales[1] + 0.5)))
    onnx_mode = {"nearest_neighbor": "nearest", "bilinear": "linear", "bicubic": "cubic"}[method]
    coord = "align_corners" if align else "asymmetric"
    # TVM: nearest rounds down (asymmetric) or to nearest (align_corners); bicubic uses a = -0.5
    expected = _onnx_upsample(x, sizes, onnx_mode, coord)
    got = run_relay(relay.nn.upsampling, x, scale_h=scales[0], scale_w=scales[1], method=method,
                    align_corners=align)
    assert_close(got, expected, "float32")
    got = run_relay(relay.nn.upsampling, x.transpose(0, 2, 3, 1).copy(), scale_h=scales[0],
                    scale_w=scales[1], method=method, align_corners=align, layout="NHWC")
    assert_close(got, expected.transpose(0, 2, 3, 1), "float32")


@pytest.mark.parametrize("method,coord", [("nearest_neighbor", "asymmetric"),
                                          ("trilinear", "half_pixel"), ("trilinear", "align_corners")])
def test_upsampling3d_vs_onnx_resize(rng, method, coord):
    x = rand(rng, (1, 2, 2, 3, 4), "float32")
    expected = _onnx_upsample(x, (4, 3, 6), "nearest" if method == "nearest_neighbor" else "linear",
                              coord)
    got = run_relay(relay.nn.upsampling3d, x, scale_d=2.0, scale_h=1.0, scale_w=1.5, method=method,
                    coordinate_transformation_mode=coord)
    assert_close(got, expected, "float32")


def test_upsampling_printing():
    text = relay.nn.upsampling(relay.var("x", shape=(1, 1, 2, 2)), 2, 2).astext()
    assert "nn.upsampling(%x, scale_h=2f, scale_w=2f)" in text


# --- fusion patterns (TVM's TOpPattern registrations) ---------------------------------------------

TVM_PATTERNS = {
    "nn.dense": OpPattern.OUT_ELEMWISE_FUSABLE, "nn.matmul": OpPattern.OUT_ELEMWISE_FUSABLE,
    "nn.batch_matmul": OpPattern.OUT_ELEMWISE_FUSABLE, "nn.bias_add": OpPattern.BROADCAST,
    "nn.relu": OpPattern.ELEMWISE, "nn.leaky_relu": OpPattern.ELEMWISE,
    "nn.prelu": OpPattern.BROADCAST, "nn.softmax": OpPattern.OUT_ELEMWISE_FUSABLE,
    "nn.fast_softmax": OpPattern.OUT_ELEMWISE_FUSABLE,
    "nn.log_softmax": OpPattern.OUT_ELEMWISE_FUSABLE,
    "nn.batch_norm": OpPattern.OUT_ELEMWISE_FUSABLE, "nn.dropout": OpPattern.OPAQUE,
    "nn.batch_flatten": OpPattern.INJECTIVE, "nn.lrn": OpPattern.OPAQUE,
    "nn.pad": OpPattern.INJECTIVE, "nn.depth_to_space": OpPattern.INJECTIVE,
    "nn.space_to_depth": OpPattern.INJECTIVE, "nn.upsampling": OpPattern.INJECTIVE,
    "nn.upsampling3d": OpPattern.INJECTIVE,
    # registered without a pattern in TVM, which FuseOps treats as opaque
    "nn.layer_norm": OpPattern.OPAQUE, "nn.instance_norm": OpPattern.OPAQUE,
    "nn.group_norm": OpPattern.OPAQUE, "nn.l2_normalize": OpPattern.OPAQUE,
}


@pytest.mark.parametrize("name", sorted(TVM_PATTERNS))
def test_patterns_match_tvm(name):
    assert get_op_def(name).pattern == TVM_PATTERNS[name]


# --- the TVM-built small network (fixtures written by TVM 0.19) ----------------------------------

def _read_tvm_params(path: Path) -> dict[str, np.ndarray]:
    """Parse TVM's params bytes (SPEC section 6) directly."""
    data = path.read_bytes()
    pos = 16
    (count,) = struct.unpack_from("<Q", data, pos)
    pos += 8
    names = []
    for _ in range(count):
        (length,) = struct.unpack_from("<Q", data, pos)
        names.append(data[pos + 8:pos + 8 + length].decode())
        pos += 8 + length
    pos += 8
    arrays = {}
    codes = {(2, 32): "float32", (2, 64): "float64", (0, 32): "int32"}
    for name in names:
        _, _, _, _, ndim = struct.unpack_from("<QQiii", data, pos)
        pos += 28
        code, bits, _ = struct.unpack_from("<BBH", data, pos)
        pos += 4
        shape = struct.unpack_from(f"<{ndim}q", data, pos)
        pos += 8 * ndim
        (nbytes,) = struct.unpack_from("<q", data, pos)
        pos += 8
        arrays[name] = np.frombuffer(data[pos:pos + nbytes], codes[code, bits]).reshape(shape)
        pos += nbytes
    return arrays


def _small_network() -> IRModule:
    x = relay.var("data", shape=(1, 3, 16, 16))
    w = relay.var("conv_weight", shape=(8, 3, 3, 3))
    bn = [relay.var(f"bn_{n}", shape=(8,)) for n in ("gamma", "beta", "mean", "var")]
    dw, db = relay.var("dense_weight", shape=(10, 512)), relay.var("dense_bias", shape=(10,))
    y = relay.nn.conv2d(x, w, padding=(1, 1), channels=8, kernel_size=(3, 3))
    y = relay.nn.relu(relay.nn.batch_norm(y, *bn)[0])
    y = relay.nn.batch_flatten(relay.nn.max_pool2d(y, pool_size=(2, 2), strides=(2, 2)))
    y = relay.nn.softmax(relay.nn.bias_add(relay.nn.dense(y, dw), db))
    return IRModule.from_expr(relay.Function([x, w, *bn, dw, db], y))


def test_small_network_prints_like_tvm(fixtures_dir):
    expected = (fixtures_dir / "small_relay.txt").read_text().strip()
    assert _small_network().astext().strip() == expected


def test_small_network_matches_tvm_reference(fixtures_dir):
    params = _read_tvm_params(fixtures_dir / "small_params_original.params")
    data = np.load(fixtures_dir / "small_input.npy")
    out = evaluate(_small_network(), {"data": data, **params})
    expected = np.load(fixtures_dir / "small_reference_numpy_f64.npy")
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(out, np.load(fixtures_dir / "small_o0_unbound_output.npy"), atol=2e-7)
