"""Kernels that read 0-d tensors (issue 18, point 11) and other loads with few or no indices.

A vectorized reduction that reads a 0-d tensor which was not folded in as a constant (a scalar
initializer shared by two nodes, or a scalar computed by another kernel) used to crash the
default schedule (``_contiguous_in`` unpacked the indices of a 0-d load). The graphs here are
the ones from the report; each is built for the ``c`` target at opt levels 0 and 3 (and
``numpy``) and compared with onnxruntime and the reference interpreter.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln import relay
from kiln.codegen.native import build_native, function_to_dag
from kiln.interpreter import evaluate
from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function
from kiln.ir.module import IRModule
from kiln.te.default_schedule import default_schedule
from kiln.transform import InferType
from tests.fuzz._harness import c_available, check_model

N = helper.make_node
F32 = np.float32
needs_cc = pytest.mark.skipif(not c_available(), reason="needs the C backend and a C compiler")


def _model(nodes, inputs: dict[str, list[int]], outputs: list[str], inits: dict[str, np.ndarray]):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_shared_zero_d_initializer_read_by_a_vectorized_reduction(rng):
    """X [4,16]; r 0-d, used by two nodes (so it stays a parameter, not a folded constant):
    ReduceSum(Add(X, r), axes=[0]) and Mul(X, r)."""
    model = _model([N("Add", ["X", "r"], ["A"]), N("ReduceSum", ["A", "axes"], ["Y"]),
                    N("Mul", ["X", "r"], ["Z"])], {"X": [4, 16]}, ["Y", "Z"],
                   {"r": np.array(0.5, F32), "axes": np.array([0], np.int64)})
    check_model(model, {"X": rng.standard_normal((4, 16)).astype(F32)})


@pytest.mark.parametrize("keepdims", [0, 1])
def test_computed_zero_d_value_read_by_a_vectorized_reduction(rng, keepdims):
    """S = ReduceSum(X, keepdims) (0-d when keepdims=0), Y = ReduceMean(Mul(X, S), axes=[0])."""
    model = _model([N("ReduceSum", ["X"], ["S"], keepdims=keepdims), N("Mul", ["X", "S"], ["M"]),
                    N("ReduceMean", ["M"], ["Y"], axes=[0])], {"X": [4, 16]}, ["Y"], {})
    check_model(model, {"X": rng.standard_normal((4, 16)).astype(F32)})


def _hswish(x: str, out: str, prefix: str) -> list:
    return [N("Add", [x, "three"], [prefix + "0"]), N("Clip", [prefix + "0", "zero", "six"], [prefix + "1"]),
            N("Mul", [prefix + "1", "r"], [prefix + "2"]), N("Mul", [x, prefix + "2"], [out])]


def test_keras_mobilenet_v3_block(rng):
    """The 17-node reduction of MobileNetV3Small (tf2onnx): hard-swish blocks sharing 0-d
    initializers around a padded depthwise conv, then ReduceMean (smaller spatial size here)."""
    c, hw = 16, 12
    init = {"pads": np.array([0, 1, 1, 0, 0, 2, 2, 0], np.int64),
            "w": rng.random((c, 1, 5, 5)).astype(F32), "s": rng.random(c).astype(F32),
            "b": rng.random(c).astype(F32), "b1": rng.random(c).astype(F32),
            "three": np.array(3, F32), "zero": np.array(0, F32), "six": np.array(6, F32),
            "r": np.array(1 / 6, F32)}
    nodes = [N("Transpose", ["X"], ["X1"], perm=[0, 2, 3, 1]), N("Add", ["X1", "b1"], ["A1"]),
             *_hswish("A1", "G", "g"),
             N("Pad", ["G", "pads"], ["P"]), N("Transpose", ["P"], ["T0"], perm=[0, 3, 1, 2]),
             N("Conv", ["T0", "w"], ["C0"], group=c, kernel_shape=[5, 5], strides=[2, 2]),
             N("Transpose", ["C0"], ["T1"], perm=[0, 2, 3, 1]), N("Mul", ["T1", "s"], ["B0"]),
             N("Add", ["B0", "b"], ["A"]),
             *_hswish("A", "M", "h"),
             N("ReduceMean", ["M"], ["Y"], axes=[1, 2], keepdims=1)]
    model = _model(nodes, {"X": [1, c, hw, hw]}, ["Y"], init)
    check_model(model, {"X": rng.standard_normal((1, c, hw, hw)).astype(F32)})


def _typed(expr: Expr) -> Function:
    return InferType()(IRModule.from_expr(Function(free_vars(expr), expr)))["main"]


@pytest.mark.parametrize("scalar_shape", [(), (1,), (1, 1)], ids=["0-d", "[1]", "[1,1]"])
@pytest.mark.parametrize("axis", [0, 1])
def test_default_schedule_of_a_reduction_reading_a_scalar(scalar_shape, axis, rng):
    """A fused reduction reading a 0-d (or one-element) parameter: the default schedule
    vectorizes the innermost spatial axis (it reads the scalar as a uniform value) and the
    kernel equals the interpreter."""
    x = relay.var("x", shape=(4, 16))
    s = relay.var("s", shape=scalar_shape)
    func = _typed(relay.sum(relay.multiply(x, s), axis=[axis]))
    fdag = function_to_dag(func, "k")
    state = default_schedule(fdag.dag, 32, 1)
    if axis == 0:  # the spatial axis (16) is read contiguously by x and uniformly by s
        assert "vectorize" in str(state)
    if not c_available():
        return
    lib = build_native({"k": func.with_attr("Primitive", 1)},
                       schedule_lookup=lambda dag, name: default_schedule(dag, 32, 1))
    inputs = {"x": rng.standard_normal((4, 16)).astype(F32),
              "s": np.asarray(rng.standard_normal(scalar_shape), F32)}
    out = np.empty(func.ret_type.shape, F32)
    lib.kernel("k").bind([inputs[p.name_hint] for p in func.params] + [out])()
    want = np.asarray(evaluate(IRModule.from_expr(func), inputs))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@needs_cc
def test_zero_d_output_of_a_reduction_fed_to_an_elementwise_kernel(rng):
    """A 0-d reduction output, scheduled as its own kernel, then broadcast into a vector loop."""
    model = _model([N("ReduceMax", ["X"], ["S"], keepdims=0), N("Sub", ["X", "S"], ["D"]),
                    N("Relu", ["D"], ["Y"])], {"X": [3, 16]}, ["Y", "S"], {})
    check_model(model, {"X": rng.standard_normal((3, 16)).astype(F32)})


def test_load_analyses_accept_a_load_without_indices():
    """The contiguity checks of the default schedule and the dense template take a 0-d load as
    uniform (it ignores every loop variable) instead of unpacking its missing last index."""
    from kiln import te
    from kiln.te.default_schedule import _contiguous_in
    from kiln.te.templates.dense import _last_is, _packed_panel

    s = te.placeholder((), "float32", "s")
    x = te.placeholder((4, 16), "float32", "x")
    j = te.var("j")
    scalar, row = s(), x(0, j)
    assert scalar.indices == ()
    assert _contiguous_in((scalar * row,), j)
    assert not _last_is(scalar, j) and _packed_panel(scalar, j) is None
    assert _last_is(row, j)
