"""Operators declared from Python (``relay.op.op.register``): type checking with named and
Python type relations, fusion patterns, and clear errors where Kiln has no kernel."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.errors import KilnError, KilnTypeError, PassError
from kiln.ir.op_table import unregister_op_def
from kiln.relay.op import op as reg

_names = (f"test_py_op_{i}" for i in itertools.count())


@pytest.fixture
def op_name():
    name = next(_names)
    yield name
    unregister_op_def(name)


def _infer(expr):
    return relay.transform.InferType()(tvm.IRModule.from_expr(expr))["main"]


def test_identity_relation_types_a_let_chain(op_name):
    reg.register(op_name, "log of a tensor")
    op = reg.get(op_name)
    op.set_num_inputs(1)
    op.add_argument("data", "Tensor", "the input")
    op.add_type_rel("Identity")
    reg.register_pattern(op_name, reg.OpPattern.ELEMWISE)
    tp = relay.TensorType((10, 4), "float32")
    x = relay.var("x", tp)
    sb = relay.ScopeBuilder()
    t1 = sb.let("t1", relay.Call(op, [x]))
    sb.ret(sb.let("t2", relay.add(t1, x)))
    fn = _infer(relay.Function([x], sb.get()))
    assert fn.checked_type == relay.FuncType([tp], tp)
    assert op.op_def.arguments == (("data", "Tensor", "the input"),)
    assert op.op_def.pattern == reg.OpPattern.ELEMWISE


def test_broadcast_and_python_relations(op_name):
    reg.register(op_name)
    op = reg.get(op_name)
    op.set_num_inputs(2)
    op.add_type_rel("Broadcast")
    a, b = relay.var("a", shape=(3, 1)), relay.var("b", shape=(1, 5))
    assert _infer(relay.Function([a, b], relay.Call(op, [a, b]))).ret_type == \
        relay.TensorType((3, 5), "float32")

    def first_row(arg_types, attrs):
        assert arg_types[1].shape[0] == 1, "type relation shape mismatch!"
        return relay.TensorType(arg_types[0].shape[1:], arg_types[0].dtype)

    op.add_type_rel("first_row", first_row)
    assert _infer(relay.Function([a, b], relay.Call(op, [a, b]))).ret_type == \
        relay.TensorType((1,), "float32")
    with pytest.raises(PassError, match="AssertionError: type relation shape mismatch"):
        _infer(relay.Function([a, b], relay.Call(op, [b, a])))
    op.add_type_rel("none", lambda types, attrs: None)
    with pytest.raises(KilnTypeError, match=f"'none' of {op_name} returned no type"):
        _infer(relay.Function([a, b], relay.Call(op, [a, b])))


def test_registering_twice_and_running_are_errors(op_name):
    reg.register(op_name)
    with pytest.raises(tvm.error.TVMError, match=f"Operator {op_name} is registered before"):
        reg.register(op_name)
    op = reg.get(op_name)
    op.set_num_inputs(1)
    x = relay.var("x", shape=(2,))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.Call(op, [x])))
    with pytest.raises(KilnTypeError, match="no type relation yet"):
        relay.transform.InferType()(mod)
    op.add_type_rel("Identity")
    with pytest.raises(KilnError, match="declared in Python without a kernel"):
        relay.create_executor("debug", mod=mod).evaluate()(np.zeros(2, np.float32))
