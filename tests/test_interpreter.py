"""The reference interpreter: global calls, tuples, projections, input checks, kernel checks."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.interpreter import Interpreter, InterpreterError, evaluate
from kiln.ir import TensorType, op_table
from kiln.op.registry import OpPattern, register_op


def test_global_calls_tuples_and_projections():
    mod = tvm.IRModule()
    a, b = relay.var("a", shape=(2, 2)), relay.var("b", shape=(2, 2))
    mod["pair"] = relay.Function([a, b], relay.Tuple([a + b, a * b]))
    x, y = relay.var("x", shape=(2, 2)), relay.var("y", shape=(2, 2))
    pair = relay.Call(mod.get_global_var("pair"), [x, y])
    mod["main"] = relay.Function([x, y], relay.TupleGetItem(pair, 1) - relay.TupleGetItem(pair, 0))
    xv = np.arange(4, dtype="float32").reshape(2, 2)
    yv = np.full((2, 2), 3, "float32")
    out = evaluate(mod, {"x": xv, "y": yv})
    np.testing.assert_array_equal(out, xv * yv - (xv + yv))


def test_function_literal_call_and_ndarray_inputs():
    p = relay.var("p", shape=(3,))
    fused = relay.Function([p], relay.sigmoid(p)).with_attr("Primitive", 1)
    x = relay.var("x", shape=(3,))
    data = np.array([-1.0, 0.0, 2.0], "float32")
    out = evaluate(relay.Function([x], relay.Call(fused, [x])), [tvm.nd.array(data)])
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-data)), rtol=1e-6)


def test_input_errors_are_clear():
    x = relay.var("x", shape=(2,))
    mod = tvm.IRModule.from_expr(relay.exp(x))
    with pytest.raises(InterpreterError, match="missing input"):
        evaluate(mod, {})
    with pytest.raises(InterpreterError, match=r"shape \(3,\), expected \(2,\)"):
        evaluate(mod, {"x": np.zeros(3, "float32")})
    with pytest.raises(InterpreterError, match="dtype float64, expected float32"):
        evaluate(mod, {"x": np.zeros(2)})
    with pytest.raises(InterpreterError, match="no parameter"):
        evaluate(mod, {"x": np.zeros(2, "float32"), "w": 1})


@pytest.fixture
def bad_op():
    register_op("test.bad_kernel", num_inputs=1, type_rel=lambda t, a: t[0],
                reference=lambda args, attrs, out: args[0].astype("float64"),
                pattern=OpPattern.OPAQUE)
    yield relay.op.get("test.bad_kernel")
    op_table.unregister_op_def("test.bad_kernel")


def test_misbehaving_reference_kernel_is_caught(bad_op):
    x = relay.var("x", shape=(2,))
    with pytest.raises(InterpreterError, match="dtype float64, but its type is"):
        evaluate(relay.Function([x], relay.Call(bad_op, [x])), [np.zeros(2, "float32")])


def test_counts_calls_and_reports_values():
    x = relay.var("x", shape=(2,))
    mod = tvm.IRModule.from_expr(relay.exp(relay.negative(x)))
    seen = []
    interp = Interpreter(mod, on_value=lambda node, value: seen.append(node.op.name))
    interp.run({"x": np.ones(2, "float32")})
    assert seen == ["negative", "exp"] and interp.calls_evaluated == 2


def test_if_and_let():
    c = relay.var("c", shape=(), dtype="bool")
    x = relay.var("x", shape=(2,))
    v = relay.var("v", TensorType((2,)))
    body = relay.Let(v, relay.exp(x), relay.If(c, v, relay.negative(v)))
    f = relay.Function([c, x], body)
    xv = np.ones(2, "float32")
    np.testing.assert_allclose(evaluate(f, [np.array(True), xv]), np.exp(xv), rtol=1e-6)
    np.testing.assert_allclose(evaluate(f, [np.array(False), xv]), -np.exp(xv), rtol=1e-6)
