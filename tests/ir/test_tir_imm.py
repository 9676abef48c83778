"""``kiln.tir`` immediates (TVM's ``tvm.tir.IntImm`` and friends) and ``Call.type_args``."""

from __future__ import annotations

import pickle

import pytest

import kiln as tvm
from kiln import relay
from kiln.ir import IRModule, assert_structural_equal
from kiln.transform import FuseOps, InferType


def test_int_imm_is_its_int_with_a_dtype() -> None:
    one = tvm.tir.IntImm("int64", 1)
    assert one.dtype == "int64" and one.value == 1 and type(one.value) is int
    assert one == 1 and hash(one) == hash(1) and int(one) + 1 == 2
    assert {one: "a"}[1] == "a"
    back = pickle.loads(pickle.dumps(one))
    assert back == 1 and back.dtype == "int64"
    with pytest.raises(ValueError, match="IntImm"):
        tvm.tir.IntImm("float32", 1)
    with pytest.raises(ValueError, match="not an integer"):
        tvm.tir.IntImm("int32", 1.5)


def test_float_and_string_imm_and_const() -> None:
    half = tvm.tir.FloatImm("float64", 0.5)
    assert half == 0.5 and half.dtype == "float64" and half.value == 0.5
    name = tvm.tir.StringImm("nchw")
    assert name == "nchw" and name.value == "nchw" and hash(name) == hash("nchw")
    assert tvm.tir.const(2.0, "float64").dtype == "float64"
    assert tvm.tir.const(3).dtype == "int32" and tvm.tir.const(3) == 3
    assert tvm.tir.const(True).dtype == "bool"
    assert tvm.tir.const(10, "int64").dtype == "int64"
    assert isinstance(tvm.tir.const("s"), tvm.tir.StringImm)


def test_shapes_of_int_imms_are_ints() -> None:
    x = relay.var("x", shape=[tvm.tir.IntImm("int64", d) for d in (2, 3)], dtype="float32")
    assert x.type_annotation.shape == (2, 3)
    assert all(type(d) is int for d in x.type_annotation.shape)
    assert x.type_annotation == relay.TensorType((2, 3), "float32")


def test_primitive_attr_as_int_imm_matches_fuse_ops() -> None:
    x = relay.var("x", shape=(2, 3))
    mod = IRModule.from_expr(relay.Function([x], relay.exp(relay.negative(x))))
    fused = FuseOps()(InferType()(mod))
    p = relay.var("p0", shape=(2, 3))
    inner = relay.Function([p], relay.exp(relay.negative(p)))
    inner = inner.with_attr("Primitive", tvm.tir.IntImm("int32", 1))
    y = relay.var("x", shape=(2, 3))
    expected = IRModule.from_expr(relay.Function([y], relay.Call(inner, [y])))
    # FuseOps keeps the type-checked return type, as TVM's mutator does
    assert_structural_equal(fused["main"], InferType()(expected)["main"])


def test_call_type_args_are_the_argument_types_after_inference() -> None:
    x = relay.var("x", shape=(10, 10))
    y = relay.var("y", shape=(1, 10))
    z = relay.add(x, y)
    assert z.type_args == []
    body = InferType()(IRModule.from_expr(z))["main"].body
    assert body.type_args == [relay.TensorType((10, 10), "float32"),
                              relay.TensorType((1, 10), "float32")]
    again = relay.Call(body.op, body.args, body.attrs, body.type_args, None)
    assert_structural_equal(again, body)
