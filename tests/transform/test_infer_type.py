"""InferType: types filled everywhere, return types declared, errors naming op/args/shapes."""

from __future__ import annotations

import pytest

import kiln as tvm
from kiln import relay
from kiln.errors import KilnTypeError
from kiln.ir import TensorType, TupleType


def infer(expr):
    return relay.transform.InferType()(tvm.IRModule.from_expr(expr))


def test_types_and_ret_type_filled():
    x = relay.var("x", shape=(2, 3))
    y = relay.var("y", shape=(3,))
    mod = infer(relay.Tuple([x + y, relay.less(x, y)]))
    main = mod["main"]
    assert main.ret_type == TupleType((TensorType((2, 3)), TensorType((2, 3), "bool")))
    assert main.body.fields[0].checked_type == TensorType((2, 3))


def test_input_module_not_modified_structurally():
    x = relay.var("x", shape=(2, 3))
    mod = tvm.IRModule.from_expr(relay.exp(x))
    before = mod["main"]
    out = relay.transform.InferType()(mod)
    assert mod["main"] is before and before.ret_type is None
    assert out["main"].ret_type == TensorType((2, 3))


def test_broadcast_error_names_op_source_and_shapes():
    x = relay.var("x", shape=(2, 3))
    y = relay.var("y", shape=(4,))
    call = relay.Call(relay.op.get("add"), [x, y], source_names=["Add_7"])
    with pytest.raises(KilnTypeError) as err:
        infer(call)
    msg = str(err.value)
    assert "add" in msg and "'Add_7'" in msg
    assert "(2, 3)" in msg and "(4,)" in msg
    assert "Tensor[(2, 3), float32]" in msg and "Tensor[(4), float32]" in msg
    assert "InferType" in msg


def test_dtype_mismatch_error():
    x = relay.var("x", shape=(2,), dtype="float32")
    y = relay.var("y", shape=(2,), dtype="int32")
    with pytest.raises(KilnTypeError, match="operand dtypes differ: lhs is float32, rhs is int32"):
        infer(relay.multiply(x, y))


def test_float_only_op_rejects_ints():
    x = relay.var("x", shape=(2,), dtype="int32")
    with pytest.raises(KilnTypeError, match="exp: dtype int32 is not supported"):
        infer(relay.exp(x))


def test_global_function_argument_mismatch():
    mod = tvm.IRModule()
    a = relay.var("a", shape=(2,))
    mod["f"] = relay.Function([a], relay.exp(a))
    b = relay.var("b", shape=(3,))
    mod["main"] = relay.Function([b], relay.Call(mod.get_global_var("f"), [b]))
    with pytest.raises(KilnTypeError, match=r"argument 0 has type Tensor\[\(3\), float32\] but the "
                       r"parameter expects Tensor\[\(2\), float32\]"):
        relay.transform.InferType()(mod)


def test_untyped_var_error():
    x = relay.var("x")
    with pytest.raises(KilnTypeError, match="%x .* has no type annotation"):
        infer(relay.exp(x))


def test_declared_ret_type_mismatch():
    x = relay.var("x", shape=(2,))
    fn = relay.Function([x], relay.exp(x), ret_type=TensorType((3,)))
    with pytest.raises(KilnTypeError, match="declares return type"):
        relay.transform.InferType()(tvm.IRModule({"main": fn}))


def test_tuple_projection_out_of_range():
    x = relay.var("x", shape=(2,))
    with pytest.raises(KilnTypeError, match="projection .2 out of range"):
        infer(relay.TupleGetItem(relay.Tuple([x, x]), 2))
