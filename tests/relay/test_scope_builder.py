"""relay.ScopeBuilder: nested let / if scopes, evaluated by the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import relay
from kiln.errors import KilnError
from kiln.interpreter import evaluate
from kiln.ir import IRModule, structural_equal


def test_lets_and_if_else_build_tvm_expression():
    x = relay.var("x", shape=(), dtype="float32")
    sb = relay.ScopeBuilder()
    y = sb.let("y", relay.add(x, relay.const(1.0)))
    with sb.if_scope(relay.greater(y, relay.const(0.0))):
        z = sb.let(("z", relay.TensorType((), "float32")), relay.multiply(y, relay.const(2.0)))
        sb.ret(z)
    with sb.else_scope():
        sb.ret(relay.negative(y))
    expr = sb.get()
    assert isinstance(expr, relay.Let) and expr.var is y and isinstance(expr.body, relay.If)
    then = expr.body.then_branch
    assert isinstance(then, relay.Let) and then.var.type_annotation == relay.TensorType((), "float32")
    # the same expression written by hand
    y2 = relay.var("y")
    z2 = relay.var("z", relay.TensorType((), "float32"))
    manual = relay.Let(y2, relay.add(x, relay.const(1.0)), relay.If(
        relay.greater(y2, relay.const(0.0)),
        relay.Let(z2, relay.multiply(y2, relay.const(2.0)), z2), relay.negative(y2)))
    assert structural_equal(expr, manual)
    fn = IRModule.from_expr(relay.Function([x], expr))
    assert float(evaluate(fn, [np.float32(1.5)])) == pytest.approx(5.0)
    assert float(evaluate(fn, [np.float32(-3.0)])) == pytest.approx(2.0)


def test_misuse_is_reported():
    sb = relay.ScopeBuilder()
    with pytest.raises(KilnError, match="no result"):
        sb.get()
    with pytest.raises(KilnError, match="else_scope can only follow"):
        sb.else_scope()
    sb.ret(relay.const(1.0))
    with pytest.raises(KilnError, match="already called"):
        sb.ret(relay.const(2.0))
    sb2 = relay.ScopeBuilder()
    with sb2.if_scope(relay.const(True)):
        sb2.ret(relay.const(1.0))
    with pytest.raises(KilnError, match="needs an else_scope"):
        sb2.get()

