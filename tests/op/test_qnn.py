"""relay.qnn operators: type relations, NumPy semantics, plain-op lowering, onnxruntime.

Oracles: hand-computed values and NumPy formulas written here (TVM's qnn arithmetic: quantize
rounds half away from zero, requantize half up, saturation), the references of the registry (for
the lowering, through the interpreter), and onnxruntime's QLinearConv / QuantizeLinear.
"""

from __future__ import annotations

import numpy as np
import pytest
from _onnx_oracle import run_onnx

import kiln as tvm
from kiln import relay
from kiln.errors import KilnTypeError
from kiln.interpreter import evaluate
from kiln.relay.testing import run_infer_type

F32, I32 = "float32", "int32"


def c(value: object, dtype: str) -> relay.Expr:
    return relay.const(np.asarray(value, dtype=dtype))


def run(expr: relay.Expr, inputs: dict[str, np.ndarray], lowered: bool = False) -> np.ndarray:
    """Evaluate ``expr`` (a function of its free variables) with the interpreter, optionally
    after ``relay.qnn.transform.CanonicalizeOps``; asserts no qnn call is left then."""
    mod = tvm.IRModule.from_expr(expr)
    if lowered:
        mod = relay.qnn.transform.CanonicalizeOps()(mod)
        assert "qnn." not in mod.astext()
    return np.asarray(evaluate(mod, inputs))


def requant_np(q: np.ndarray, s_in: float, z_in: int, s_out: float, z_out: int,
               dtype: str) -> np.ndarray:
    y = (q.astype(np.float64) - z_in) * (np.float64(np.float32(s_in)) / np.float64(np.float32(s_out)))
    info = np.iinfo(dtype)
    return np.clip(np.floor(y + 0.5) + z_out, info.min, info.max).astype(dtype)


# --- values -------------------------------------------------------------------------------------

@pytest.mark.parametrize("lowered", [False, True])
def test_quantize_rounds_half_away_from_zero_and_saturates(lowered):
    x = relay.var("x", shape=(6,))
    y = relay.qnn.op.quantize(x, c(0.5, F32), c(1, I32), out_dtype="int8")
    data = np.array([0.25, -0.25, 0.75, -0.75, 100.0, -100.0], F32)
    # x / 0.5 = 0.5, -0.5, 1.5, -1.5 -> 1, -1, 2, -2 (away from zero); + 1; saturate
    np.testing.assert_array_equal(run(y, {"x": data}, lowered), [2, 0, 3, -1, 127, -128])


@pytest.mark.parametrize("lowered", [False, True])
def test_dequantize_per_channel(lowered):
    x = relay.var("x", shape=(2, 3), dtype="uint8")
    y = relay.qnn.op.dequantize(x, c([0.5, 1.0, 2.0], F32), c([1, 2, 3], I32), axis=1)
    data = np.array([[1, 2, 3], [11, 0, 255]], "uint8")
    expected = (data.astype(np.float32) - [1, 2, 3]) * np.array([0.5, 1.0, 2.0], F32)
    np.testing.assert_allclose(run(y, {"x": data}, lowered), expected)


@pytest.mark.parametrize("lowered", [False, True])
@pytest.mark.parametrize("rounding, expected", [("UPWARD", [2, -1, 0, 127]),
                                                ("TONEAREST", [2, -2, 0, 127])])
def test_requantize_rounding_modes(lowered, rounding, expected):
    x = relay.var("x", shape=(4,), dtype="int32")
    y = relay.qnn.op.requantize(x, c(1.0, F32), c(0, I32), c(2.0, F32), c(0, I32),
                                rounding=rounding, out_dtype="int8")
    # 3/2 = 1.5 -> 2 either way; -3/2 = -1.5 -> -1 (half up) or -2 (away); 1000/2 saturates
    data = np.array([3, -3, 0, 1000], "int32")
    np.testing.assert_array_equal(run(y, {"x": data}, lowered), expected)


@pytest.mark.parametrize("lowered", [False, True])
def test_requantize_matches_numpy_formula(lowered, rng):
    data = rng.integers(-128, 128, size=(3, 5)).astype("int8")
    x = relay.var("x", shape=(3, 5), dtype="int8")
    y = relay.qnn.op.requantize(x, c(0.037, F32), c(-3, I32), c(0.051, F32), c(7, I32),
                                out_dtype="uint8")
    np.testing.assert_array_equal(run(y, {"x": data}, lowered),
                                  requant_np(data, 0.037, -3, 0.051, 7, "uint8"))


@pytest.mark.parametrize("lowered", [False, True])
def test_add_and_mul_match_numpy(lowered, rng):
    a = rng.integers(0, 256, size=(2, 4)).astype("uint8")
    b = rng.integers(0, 256, size=(1, 4)).astype("uint8")
    x, y = relay.var("x", shape=(2, 4), dtype="uint8"), relay.var("y", shape=(1, 4), dtype="uint8")
    params = [c(0.02, F32), c(120, I32), c(0.03, F32), c(130, I32), c(0.04, F32), c(128, I32)]
    added = run(relay.qnn.op.add(x, y, *params), {"x": a, "y": b}, lowered)
    exp_add = np.clip(requant_np(a, 0.02, 120, 0.04, 128, "int32")
                      + requant_np(b, 0.03, 130, 0.04, 128, "int32") - 128, 0, 255)
    np.testing.assert_array_equal(added, exp_add)
    mul = run(relay.qnn.op.mul(x, y, *params), {"x": a, "y": b}, lowered)
    prod = (a.astype(np.int32) - 120) * (b.astype(np.int32) - 130)
    scale = float(np.float32(np.float32(0.02) * np.float32(0.03)))
    np.testing.assert_array_equal(mul, requant_np(prod, scale, 0, 0.04, 128, "uint8"))


@pytest.mark.parametrize("lowered", [False, True])
def test_concatenate_requantizes_each_input(lowered, rng):
    a = rng.integers(-128, 128, size=(2, 3)).astype("int8")
    b = rng.integers(-128, 128, size=(2, 2)).astype("int8")
    x, y = relay.var("x", shape=(2, 3), dtype="int8"), relay.var("y", shape=(2, 2), dtype="int8")
    out = relay.qnn.op.concatenate([x, y], [c(0.5, F32), c(0.25, F32)], [c(1, I32), c(-2, I32)],
                                   c(0.5, F32), c(0, I32), axis=1)
    expected = np.concatenate([requant_np(a, 0.5, 1, 0.5, 0, "int8"),
                               requant_np(b, 0.25, -2, 0.5, 0, "int8")], axis=1)
    np.testing.assert_array_equal(run(out, {"x": a, "y": b}, lowered), expected)


@pytest.mark.parametrize("lowered", [False, True])
def test_conv2d_and_dense_accumulate_centred_int32(lowered, rng):
    d = rng.integers(0, 256, size=(1, 3, 5, 5)).astype("uint8")
    w = rng.integers(-128, 128, size=(4, 3, 3, 3)).astype("int8")
    x = relay.var("x", shape=d.shape, dtype="uint8")
    conv = relay.qnn.op.conv2d(x, relay.const(w), c(128, I32), c(3, I32), c(0.1, F32),
                               c(0.2, F32), kernel_size=(3, 3), channels=4, padding=(1, 1))
    assert run_infer_type(conv).checked_type == relay.TensorType((1, 4, 5, 5), "int32")
    xc = np.pad(d.astype(np.int64) - 128, ((0, 0), (0, 0), (1, 1), (1, 1)))
    wc = w.astype(np.int64) - 3
    expected = np.zeros((1, 4, 5, 5), np.int64)
    for i in range(5):
        for j in range(5):
            expected[0, :, i, j] = np.einsum("chw,ochw->o", xc[0, :, i:i + 3, j:j + 3], wc)
    np.testing.assert_array_equal(run(conv, {"x": d}, lowered), expected)
    v = relay.var("v", shape=(2, 3), dtype="int8")
    wd = rng.integers(-128, 128, size=(5, 3)).astype("int8")
    vd = rng.integers(-128, 128, size=(2, 3)).astype("int8")
    dense = relay.qnn.op.dense(v, relay.const(wd), c(-1, I32), c(2, I32), c(0.1, F32), c(0.1, F32),
                               units=5)
    np.testing.assert_array_equal(run(dense, {"v": vd}, lowered),
                                  (vd.astype(np.int64) + 1) @ (wd.astype(np.int64) - 2).T)


# --- against onnxruntime ------------------------------------------------------------------------

def test_conv2d_requantize_matches_onnxruntime_qlinearconv(rng):
    d = rng.integers(0, 256, size=(1, 4, 6, 6)).astype("uint8")
    w = rng.integers(-100, 100, size=(8, 4, 3, 3)).astype("int8")
    xs, xz, ws, wz, ys, yz = 0.02, 120, 0.01, 0, 0.05, 100
    a = np.asarray
    expected = run_onnx("QLinearConv", [d, a(xs, F32), a(xz, "uint8"), w, a(ws, F32), a(wz, "int8"),
                                        a(ys, F32), a(yz, "uint8")],
                        {"pads": [1, 1, 1, 1]}, out_dtypes=[np.uint8])[0]
    x = relay.var("x", shape=d.shape, dtype="uint8")
    acc = relay.qnn.op.conv2d(x, relay.const(w), c(xz, I32), c(wz, I32), c(xs, F32), c(ws, F32),
                              kernel_size=(3, 3), channels=8, padding=(1, 1))
    out = relay.qnn.op.requantize(acc, c(np.float32(xs) * np.float32(ws), F32), c(0, I32),
                                  c(ys, F32), c(yz, I32), out_dtype="uint8")
    got = run(out, {"x": d}, lowered=True)
    diff = np.abs(got.astype(np.int32) - np.asarray(expected).astype(np.int32))
    assert diff.max() <= 1  # ONNX rounds ties to even, TVM's requantize rounds them up
    assert (diff == 0).mean() > 0.95


def test_quantize_matches_onnxruntime_quantize_linear(rng):
    data = rng.uniform(-3, 3, size=(4, 7)).astype(F32)
    expected = run_onnx("QuantizeLinear", [data, np.asarray(0.03, F32), np.asarray(5, "int8")],
                        out_dtypes=[np.int8])[0]
    x = relay.var("x", shape=data.shape)
    got = run(relay.qnn.op.quantize(x, c(0.03, F32), c(5, I32)), {"x": data}, lowered=True)
    np.testing.assert_array_equal(got, expected)  # no exact ties in random data


# --- type relations -----------------------------------------------------------------------------

def test_type_errors_name_the_op_and_parameter():
    x = relay.var("x", shape=(2, 3), dtype="int8")
    with pytest.raises(KilnTypeError, match="qnn.requantize: input_scale must be float32"):
        run_infer_type(relay.qnn.op.requantize(x, c(1, I32), c(0, I32), c(1.0, F32), c(0, I32)))
    with pytest.raises(KilnTypeError, match="qnn.dequantize: a per-channel parameter has 4"):
        run_infer_type(relay.qnn.op.dequantize(x, c([1.0] * 4, F32), c(0, I32), axis=1))
    with pytest.raises(KilnTypeError, match="qnn.quantize: data must be float"):
        run_infer_type(relay.qnn.op.quantize(x, c(1.0, F32), c(0, I32)))
