"""Elementwise operators: reference kernels vs onnxruntime (one-node models) and NumPy."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from kiln import relay
from kiln.errors import KilnTypeError
from kiln.interpreter import evaluate
from kiln.ir import TensorType
from kiln.op.registry import broadcast_shapes

ONNX_TYPES = {"float32": onnx.TensorProto.FLOAT, "float64": onnx.TensorProto.DOUBLE,
              "float16": onnx.TensorProto.FLOAT16, "int32": onnx.TensorProto.INT32,
              "int64": onnx.TensorProto.INT64, "int8": onnx.TensorProto.INT8,
              "uint8": onnx.TensorProto.UINT8, "bool": onnx.TensorProto.BOOL}


def run_onnx(op_type: str, inputs: list[np.ndarray], out_dtype: str, **attrs) -> np.ndarray:
    names = [f"in{i}" for i in range(len(inputs))]
    node = helper.make_node(op_type, names, ["out"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, ONNX_TYPES[a.dtype.name], a.shape) for n, a in zip(names, inputs)],
        [helper.make_tensor_value_info("out", ONNX_TYPES[out_dtype], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, inputs)))[0]


def run_kiln(build, inputs: list[np.ndarray]) -> np.ndarray:
    vars_ = [relay.var(f"in{i}", shape=a.shape, dtype=a.dtype.name) for i, a in enumerate(inputs)]
    return evaluate(relay.Function(vars_, build(*vars_)), inputs)


def rand(rng, shape, dtype, low=-3.0, high=3.0):
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype.startswith(("int", "uint")):
        lo = 0 if dtype.startswith("uint") else int(low * 10)
        return rng.integers(lo, int(high * 10) + 1, shape).astype(dtype)
    return rng.uniform(low, high, shape).astype(dtype)


SHAPES = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((1, 3, 1), (2, 1, 5)), ((), (3,)), ((5,), ())]

BINARY = [("add", "Add", {}), ("subtract", "Sub", {}), ("multiply", "Mul", {}),
          ("maximum", "Max", {}), ("minimum", "Min", {})]


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("name,onnx_op,attrs", BINARY)
def test_binary_vs_onnxruntime(rng, shapes, dtype, name, onnx_op, attrs):
    a, b = rand(rng, shapes[0], dtype), rand(rng, shapes[1], dtype)
    got = run_kiln(getattr(relay, name), [a, b])
    np.testing.assert_allclose(got, run_onnx(onnx_op, [a, b], dtype, **attrs), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
def test_divide_truncates_like_onnx(rng, dtype):
    a = rand(rng, (4, 5), dtype)
    b = rand(rng, (5,), dtype, 1.0, 3.0)
    if dtype != "float32":
        b = np.where(b == 0, 1, b).astype(dtype)
        a = np.concatenate([a, -a])
        b = np.concatenate([b])
    got = run_kiln(relay.divide, [a, b])
    np.testing.assert_allclose(got, run_onnx("Div", [a, b], dtype), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32"])
def test_mod_variants(rng, dtype):
    a = rand(rng, (6, 7), dtype)
    b = rand(rng, (7,), dtype, 1.0, 3.0)
    b = np.where(b == 0, 2, b).astype(dtype)
    np.testing.assert_allclose(run_kiln(relay.mod, [a, b]), run_onnx("Mod", [a, b], dtype, fmod=1))
    if dtype != "float32":
        np.testing.assert_allclose(run_kiln(relay.floor_mod, [a, b]), run_onnx("Mod", [a, b], dtype))


def test_power(rng):
    a = rand(rng, (3, 4), "float32", 0.1, 3.0)
    b = rand(rng, (4,), "float32", -2.0, 2.0)
    np.testing.assert_allclose(run_kiln(relay.power, [a, b]), run_onnx("Pow", [a, b], "float32"), rtol=1e-5)


UNARY = [("negative", "Neg"), ("abs", "Abs"), ("exp", "Exp"), ("log", "Log"), ("sqrt", "Sqrt"),
         ("tanh", "Tanh"), ("sigmoid", "Sigmoid"), ("erf", "Erf"), ("floor", "Floor"), ("ceil", "Ceil"),
         ("round", "Round"), ("sign", "Sign"), ("sin", "Sin"), ("cos", "Cos"), ("tan", "Tan"),
         ("asin", "Asin"), ("acos", "Acos"), ("atan", "Atan"), ("sinh", "Sinh"), ("cosh", "Cosh"),
         ("asinh", "Asinh"), ("acosh", "Acosh"), ("atanh", "Atanh")]
DOMAIN = {"log": (0.01, 5.0), "sqrt": (0.0, 5.0), "asin": (-0.99, 0.99), "acos": (-0.99, 0.99),
          "atanh": (-0.99, 0.99), "acosh": (1.01, 5.0)}


@pytest.mark.parametrize("shape", [(2, 3, 5), (7,), ()])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,onnx_op", UNARY)
def test_unary_vs_onnxruntime(rng, shape, dtype, name, onnx_op):
    if dtype == "float64" and onnx_op in {"Erf", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Asin",
                                          "Acos", "Atan", "Tan"}:
        pytest.skip("onnxruntime has no double kernel for this op")
    lo, hi = DOMAIN.get(name, (-3.0, 3.0))
    a = rand(rng, shape, dtype, lo, hi)
    got = run_kiln(getattr(relay, name), [a])
    want = run_onnx(onnx_op, [a], dtype)
    np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == "float32" else 1e-12, atol=1e-6)


def test_rsqrt_and_predicates_vs_numpy(rng):
    a = np.array([0.25, 4.0, np.inf, -np.inf, np.nan, 1.0], "float32")
    np.testing.assert_array_equal(run_kiln(relay.isnan, [a]), np.isnan(a))
    np.testing.assert_array_equal(run_kiln(relay.isinf, [a]), np.isinf(a))
    np.testing.assert_array_equal(run_kiln(relay.isfinite, [a]), np.isfinite(a))
    b = rand(rng, (10,), "float32", 0.1, 9.0)
    np.testing.assert_allclose(run_kiln(relay.rsqrt, [b]), 1 / np.sqrt(b), rtol=1e-6)


def test_round_half_to_even_like_onnx():
    a = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49], "float32")
    np.testing.assert_array_equal(run_kiln(relay.round, [a]), run_onnx("Round", [a], "float32"))


COMPARE = [("equal", "Equal"), ("less", "Less"), ("greater", "Greater"),
           ("less_equal", "LessOrEqual"), ("greater_equal", "GreaterOrEqual")]


@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("name,onnx_op", COMPARE)
def test_comparisons(rng, dtype, name, onnx_op):
    a, b = rand(rng, (3, 4), dtype), rand(rng, (4,), dtype)
    b[0] = a[0, 0]
    np.testing.assert_array_equal(run_kiln(getattr(relay, name), [a, b]), run_onnx(onnx_op, [a, b], "bool"))
    np.testing.assert_array_equal(run_kiln(relay.not_equal, [a, b]), a != b)


LOGICAL = [("logical_and", "And"), ("logical_or", "Or"), ("logical_xor", "Xor")]


@pytest.mark.parametrize("name,onnx_op", LOGICAL)
def test_logical(rng, name, onnx_op):
    a, b = rand(rng, (3, 4), "bool"), rand(rng, (3, 1), "bool")
    np.testing.assert_array_equal(run_kiln(getattr(relay, name), [a, b]), run_onnx(onnx_op, [a, b], "bool"))
    np.testing.assert_array_equal(run_kiln(relay.logical_not, [a]), run_onnx("Not", [a], "bool"))


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_bitwise(rng, dtype):
    a, b = rand(rng, (8,), dtype), rand(rng, (8,), dtype)
    pairs = [("bitwise_and", "BitwiseAnd"), ("bitwise_or", "BitwiseOr"), ("bitwise_xor", "BitwiseXor")]
    for name, onnx_op in pairs:
        want = run_onnx(onnx_op, [a, b], dtype)
        np.testing.assert_array_equal(run_kiln(getattr(relay, name), [a, b]), want)
    np.testing.assert_array_equal(run_kiln(relay.bitwise_not, [a]), run_onnx("BitwiseNot", [a], dtype))
    if dtype == "uint8":
        s = (b % 4).astype(dtype)
        np.testing.assert_array_equal(run_kiln(relay.left_shift, [a, s]),
                                      run_onnx("BitShift", [a, s], dtype, direction="LEFT"))
        np.testing.assert_array_equal(run_kiln(relay.right_shift, [a, s]),
                                      run_onnx("BitShift", [a, s], dtype, direction="RIGHT"))


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_clip(rng, dtype):
    a = rand(rng, (4, 6), dtype)
    lo, hi = np.array(-1, dtype), np.array(1.5 if dtype == "float32" else 12, dtype)
    got = run_kiln(lambda x: relay.clip(x, float(lo), float(hi)), [a])
    np.testing.assert_array_equal(got, run_onnx("Clip", [a, lo, hi], dtype))


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("float32", "int8"), ("float32", "float16"),
                                     ("int64", "float32"), ("float32", "bool"), ("bool", "float32"),
                                     ("int32", "uint8"), ("float64", "int64")])
def test_cast(rng, src, dst):
    a = rand(rng, (3, 5), src, -100.0, 100.0) if src != "bool" else rand(rng, (3, 5), "bool")
    if dst in ("uint8", "int8") and src == "int32":
        a = np.abs(a) % 200
    if dst == "int8":
        a = np.clip(a, -120, 120).astype(src)
    got = run_kiln(lambda x: relay.cast(x, dst), [a])
    want = run_onnx("Cast", [a], dst, to=ONNX_TYPES[dst])
    np.testing.assert_array_equal(got, want)


def test_cast_like_and_where(rng):
    a = rand(rng, (2, 3), "float32")
    like = np.zeros((1,), "int64")
    got = run_kiln(relay.cast_like, [a, like])
    np.testing.assert_array_equal(got, run_onnx("CastLike", [a, like], "int64"))
    cond = rand(rng, (2, 1), "bool")
    x, y = rand(rng, (2, 3), "float32"), rand(rng, (3,), "float32")
    np.testing.assert_array_equal(run_kiln(relay.where, [cond, x, y]),
                                  run_onnx("Where", [cond, x, y], "float32"))


def test_float16_arithmetic_stays_float16(rng):
    a, b = rand(rng, (8,), "float16"), rand(rng, (8,), "float16")
    got = run_kiln(relay.add, [a, b])
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, run_onnx("Add", [a, b], "float16"))


def test_python_operators_build_the_same_calls(rng):
    x = relay.var("x", shape=(3,))
    expr = (x + 1.0) * 2.0 - x / 4.0
    assert [expr.op.name, expr.args[0].op.name, expr.args[1].op.name] == ["subtract", "multiply", "divide"]
    data = rand(rng, (3,), "float32")
    np.testing.assert_allclose(evaluate(relay.Function([x], -expr), [data]),
                               -((data + 1) * 2 - data / 4), rtol=1e-6)


dims = st.lists(st.integers(1, 4), min_size=0, max_size=4)


@settings(max_examples=200, deadline=None)
@given(a=dims, b=dims, mask_a=st.lists(st.booleans(), min_size=4, max_size=4),
       mask_b=st.lists(st.booleans(), min_size=4, max_size=4))
def test_broadcast_relation_matches_numpy(a, b, mask_a, mask_b):
    a = [1 if m else d for d, m in zip(a, mask_a)]
    b = [1 if m else d for d, m in zip(b, mask_b)]
    try:
        want = np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        with pytest.raises(KilnTypeError, match="do not broadcast"):
            broadcast_shapes(tuple(a), tuple(b), "add")
        return
    x = relay.var("x", shape=a)
    y = relay.var("y", shape=b)
    mod = relay.transform.InferType()(relay.IRModule.from_expr(x + y))
    assert mod["main"].ret_type == TensorType(want)


# --- reinterpret (ONNX BitCast) ------------------------------------------------------------------

_REINTERPRET = [("float32", "int32"), ("int32", "float32"), ("float64", "int64"),
                ("uint16", "int16"), ("int8", "uint8"), ("bool", "uint8"), ("float16", "uint16")]


def _bits_input(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(7)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("float"):
        return (rng.standard_normal(shape) * 1e3).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


@pytest.fixture(scope="module")
def reinterpret_compiled() -> dict:
    from tests.op._compute_native import Case, run_cases, var

    cases = {}
    for src, dst in _REINTERPRET:
        for shape in ((), (7,), (3, 5)):
            x = _bits_input(src, shape)
            cases[f"{src}-{dst}-{len(shape)}"] = Case(
                lambda x=x, dst=dst: relay.reinterpret(var("x", x), dst), {"x": x})
    return dict(run_cases(cases))


@pytest.mark.parametrize("src,dst", _REINTERPRET)
@pytest.mark.parametrize("ndim", [0, 1, 2])
def test_reinterpret_keeps_the_bits(reinterpret_compiled, src, dst, ndim):
    case = reinterpret_compiled[f"{src}-{dst}-{ndim}"]
    x = case.inputs["x"]
    want = x.reshape(-1).view(np.uint8)  # the input's bytes
    for got in (case.expected[0], case.outputs[0]):  # reference kernel, compiled C
        assert got.dtype == np.dtype(dst) and got.shape == x.shape
        np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), want)


@pytest.mark.parametrize("src,dst", [("float32", "int16"), ("int32", "bool"), ("float64", "float32")])
def test_reinterpret_needs_equal_widths(src, dst):
    x = relay.var("x", shape=(2,), dtype=src)
    with pytest.raises(KilnTypeError, match=f"cannot reinterpret {src} as {dst}"):
        evaluate(relay.Function([x], relay.reinterpret(x, dst)), {"x": np.zeros(2, src)})


_WIDTHS = {"int8": 8, "uint8": 8, "bool": 8, "int16": 16, "uint16": 16, "float16": 16, "int32": 32,
           "uint32": 32, "float32": 32, "int64": 64, "uint64": 64, "float64": 64}


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(0, 5), max_size=4), src=st.sampled_from(sorted(_WIDTHS)),
       dst=st.sampled_from(sorted(_WIDTHS)))
def test_reinterpret_relation(shape, src, dst):
    """Same shape and the new dtype when the widths match (bool only as a source), else an error
    naming both dtypes; NumPy's view of the bytes is the oracle for the rule."""
    x = relay.var("x", shape=tuple(shape), dtype=src)
    mod = relay.IRModule.from_expr(relay.reinterpret(x, dst))
    if _WIDTHS[src] == _WIDTHS[dst] and dst != "bool":
        ty = relay.transform.InferType()(mod)["main"].ret_type
        assert tuple(ty.shape) == tuple(shape) and ty.dtype == dst
        assert np.zeros(shape, src).view(dst).shape == tuple(shape)
    else:
        with pytest.raises(KilnTypeError, match=f"cannot reinterpret {src} as {dst}"):
            relay.transform.InferType()(mod)
