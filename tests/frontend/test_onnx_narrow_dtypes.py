"""ONNX models with narrow element types (BFLOAT16, FLOAT8*, FLOAT4E2M1, INT4/UINT4, INT2/UINT2):
Cast/CastLike with ``saturate``, Quantize/DequantizeLinear with float8 and int4 zero points and
blocks, narrow graph inputs, outputs and initializers. Oracle: ``onnx.reference`` (which converts
with ``ml_dtypes``); Kiln runs both the interpreter and the compiled C."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import kiln
from kiln.frontend.onnx import from_onnx
from kiln.interpreter import evaluate
from tests.frontend._compiled import run_compiled

F8 = {"FLOAT8E4M3FN": ml_dtypes.float8_e4m3fn, "FLOAT8E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
      "FLOAT8E5M2": ml_dtypes.float8_e5m2, "FLOAT8E5M2FNUZ": ml_dtypes.float8_e5m2fnuz}
EDGES = np.array([0.47892547, 0.48033667, 1e6, -1e6, 1e-7, -1e-7, np.nan, np.inf, -np.inf, 0.0, -0.0,
                  448.0, 460.0, 470.0, 57344.0, 60000.0, 2.0 ** -9, 2.0 ** -10, 2.0 ** -17,
                  240.0, 250.0, -300.0, 3.25, -7.5], dtype=np.float32)


def _model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[tuple[str, int, Sequence[int]]],
           outputs: Sequence[tuple[str, int, Sequence[int]]],
           initializers: Sequence[onnx.TensorProto] = (), opset: int = 25) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes), "narrow", [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(*o) for o in outputs], list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 11
    return model


def _kiln(model: onnx.ModelProto, feeds: dict[str, np.ndarray], compiled: bool) -> list[np.ndarray]:
    mod, params = from_onnx(model, shape={k: v.shape for k, v in feeds.items()})
    if not compiled:
        out = evaluate(mod, feeds, params=params)
        return [np.asarray(o) for o in (out if isinstance(out, tuple) else [out])]
    return run_compiled(mod, params, feeds)


def _same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    view = {1: np.uint8, 2: np.uint16, 4: np.uint32}[expected.dtype.itemsize]
    np.testing.assert_array_equal(np.ascontiguousarray(actual).view(view),
                                  np.ascontiguousarray(expected).view(view))


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], **tol: Any) -> None:
    expected = ReferenceEvaluator(model).run(None, feeds)
    for compiled in (False, True):
        for got, want in zip(_kiln(model, feeds, compiled), expected):
            want = np.asarray(want)
            if tol and compiled:  # fused kernels round once, the reference after every node
                np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), **tol)
            else:
                _same_bits(got, want)


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("target", sorted(F8))
def test_cast_float_to_float8_saturate(target: str, saturate: int) -> None:
    to = getattr(TensorProto, target)
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=to, saturate=saturate)],
                   [("x", TensorProto.FLOAT, EDGES.shape)], [("y", to, EDGES.shape)])
    _check(model, {"x": EDGES})


@pytest.mark.parametrize("source", ["FLOAT16", "BFLOAT16"])
def test_castlike_to_float8_from_other_floats(source: str) -> None:
    elem = getattr(TensorProto, source)
    npt = np.float16 if source == "FLOAT16" else ml_dtypes.bfloat16
    with np.errstate(over="ignore"):
        x = EDGES.astype(npt)
    like = np.zeros(1, ml_dtypes.float8_e5m2)
    model = _model([helper.make_node("CastLike", ["x", "like"], ["y"], saturate=1)],
                   [("x", elem, x.shape), ("like", TensorProto.FLOAT8E5M2, like.shape)],
                   [("y", TensorProto.FLOAT8E5M2, x.shape)])
    _check(model, {"x": x, "like": like})


@pytest.mark.parametrize("source", [*sorted(F8), "BFLOAT16", "FLOAT4E2M1"])
def test_cast_narrow_float_inputs_to_float(source: str) -> None:
    npt = F8.get(source) or {"BFLOAT16": ml_dtypes.bfloat16,
                             "FLOAT4E2M1": ml_dtypes.float4_e2m1fn}[source]
    x = EDGES.astype(npt)  # every NaN/zero/subnormal encoding the type has
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)],
                   [("x", getattr(TensorProto, source), x.shape)],
                   [("y", TensorProto.FLOAT, x.shape)])
    _check(model, {"x": x})


@pytest.mark.parametrize("target", ["INT4", "UINT4", "INT2", "UINT2", "FLOAT4E2M1", "BFLOAT16"])
def test_cast_to_other_narrow_types(target: str) -> None:
    to = getattr(TensorProto, target)
    x = np.concatenate([np.arange(-9, 16, dtype=np.float32), EDGES[:6]])
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=to),
                    helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)],
                   [("x", TensorProto.FLOAT, x.shape)],
                   [("y", to, x.shape), ("z", TensorProto.FLOAT, x.shape)])
    _check(model, {"x": x})


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("zp_type", ["FLOAT8E4M3FN", "FLOAT8E5M2", "INT4", "UINT4", "INT2"])
def test_quantize_dequantize_per_axis(zp_type: str, saturate: int) -> None:
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((3, 4)) * 40).astype(np.float32)
    x[0, 0], x[1, 1] = np.float32(1e5), np.float32(-1e5)
    elem = getattr(TensorProto, zp_type)
    npt = numpy_helper.helper.tensor_dtype_to_np_dtype(elem)
    zp_values = [0, 0, 0, 0] if "FLOAT8" in zp_type else [1, 0, -1, 1] if zp_type != "UINT4" \
        else [1, 0, 3, 2]
    inits = [numpy_helper.from_array(np.array([2.0, 0.5, 3.0, 8.0], np.float32), "scale"),
             numpy_helper.from_array(np.array(zp_values).astype(npt), "zp")]
    attrs = {"saturate": saturate} if "FLOAT8" in zp_type else {}
    model = _model([helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], axis=1, **attrs),
                    helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], axis=1)],
                   [("x", TensorProto.FLOAT, x.shape)],
                   [("q", elem, x.shape), ("y", TensorProto.FLOAT, x.shape)], inits)
    _check(model, {"x": x})


def test_blocked_int4_quantization_with_a_short_last_block() -> None:
    x = np.linspace(-30, 30, 2 * 7, dtype=np.float32).reshape(2, 7)
    scale = np.array([[1.5, 2.0, 4.0], [0.5, 3.0, 1.0]], np.float32)
    zp = np.array([[1, -2, 0], [3, 0, -1]]).astype(ml_dtypes.int4)
    inits = [numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(zp, "zp")]
    model = _model([helper.make_node("QuantizeLinear", ["x", "scale", "zp"], ["q"], axis=1,
                                     block_size=3),
                    helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["y"], axis=1,
                                     block_size=3)],
                   [("x", TensorProto.FLOAT, x.shape)],
                   [("q", TensorProto.INT4, x.shape), ("y", TensorProto.FLOAT, x.shape)], inits)
    _check(model, {"x": x})


def test_bfloat16_graph_with_arithmetic_matches_the_reference_to_one_rounding() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5)).astype(ml_dtypes.bfloat16)
    w = numpy_helper.from_array(rng.standard_normal((2, 5)).astype(ml_dtypes.bfloat16), "w")
    model = _model([helper.make_node("Mul", ["x", "w"], ["m"]),
                    helper.make_node("Relu", ["m"], ["r"]),
                    helper.make_node("Add", ["r", "x"], ["y"])],
                   [("x", TensorProto.BFLOAT16, x.shape)], [("y", TensorProto.BFLOAT16, x.shape)],
                   [w])
    _check(model, {"x": x}, rtol=2 ** -7, atol=2 ** -7)


def test_narrow_element_types_in_the_error_message_of_an_unsupported_one() -> None:
    model = _model([helper.make_node("Identity", ["x"], ["y"])],
                   [("x", TensorProto.STRING, (2,))], [("y", TensorProto.STRING, (2,))])
    with pytest.raises(kiln.errors.FrontendError, match="bfloat16, float8"):
        from_onnx(model, shape={"x": (2,)})


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("mid", [*sorted(F8), "BFLOAT16", "INT4", "UINT4"])
def test_cast_round_trip_matches_onnxruntime(mid: str, saturate: int) -> None:
    ort = pytest.importorskip("onnxruntime")
    elem = getattr(TensorProto, mid)
    x = np.concatenate([EDGES, np.arange(-9, 16, dtype=np.float32) + 0.25])
    if mid.startswith(("INT", "UINT")):
        # whole numbers only: Kiln truncates fractions like NumPy, ml_dtypes and ONNX's reference
        # (the spec leaves it open), onnxruntime rounds them to nearest even
        x = np.arange(-20, 21, dtype=np.float32)
    attrs = {"saturate": saturate} if mid in F8 else {}
    model = _model([helper.make_node("Cast", ["x"], ["m"], to=elem, **attrs),
                    helper.make_node("Cast", ["m"], ["y"], to=TensorProto.FLOAT)],
                   [("x", TensorProto.FLOAT, x.shape)], [("y", TensorProto.FLOAT, x.shape)],
                   opset=21)
    model.ir_version = 10
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    expected = sess.run(None, {"x": x})[0]
    (got,) = _kiln(model, {"x": x}, compiled=True)
    np.testing.assert_array_equal(got, expected)


def test_conformance_comparison_allows_one_rounding_step_of_a_narrow_output() -> None:
    from kiln.frontend.onnx_conformance import compare_outputs

    ref = np.array([0.4453125, -1.5546875, 3.0], np.float32).astype(ml_dtypes.bfloat16)
    one_step = np.array([0.443359375, -1.5546875, 3.0], np.float32).astype(ml_dtypes.bfloat16)
    far = np.array([0.5, -1.5546875, 3.0], np.float32).astype(ml_dtypes.bfloat16)
    assert compare_outputs([ref], [one_step], rtol=1e-3, atol=1e-7) is None
    assert "values differ" in str(compare_outputs([ref], [far], rtol=1e-3, atol=1e-7))
    assert "dtype" in str(compare_outputs([ref], [ref.astype(np.float32)], rtol=1e-3, atol=1e-7))
