"""IRModule behaviour relay scripts rely on."""

from __future__ import annotations

import pytest

import kiln as tvm
from kiln import relay


def test_setitem_by_name_and_globalvar():
    mod = tvm.IRModule()
    x = relay.var("x", shape=(2,))
    mod["main"] = relay.Function([x], relay.exp(x))
    gv = mod.get_global_var("main")
    assert mod[gv] is mod["main"]
    mod[relay.GlobalVar("main")] = relay.Function([x], relay.log(x))
    assert len(mod.functions) == 1 and mod["main"].body.op.name == "log"
    assert "main" in mod and gv in mod


def test_from_expr_wraps_free_vars_and_missing_function_errors():
    x = relay.var("x", shape=(2,))
    mod = tvm.IRModule.from_expr(relay.exp(x))
    assert mod["main"].params == (x,)
    with pytest.raises(KeyError, match="no function named 'nope'"):
        mod["nope"]


def test_nodes_are_immutable():
    x = relay.var("x", shape=(2,))
    call = relay.exp(x)
    with pytest.raises(AttributeError, match="immutable"):
        call.args = ()
    assert call.replace(args=(x,)) is call
    assert call.replace(args=(relay.var("y", shape=(2,)),)) is not call


def test_globalvar_equality_by_name():
    assert relay.GlobalVar("g0") == relay.GlobalVar("g0")
    assert {relay.GlobalVar("g0"): 1}[relay.GlobalVar("g0")] == 1
    assert repr(relay.GlobalVar("g0")) == 'I.GlobalVar("g0")'


def test_with_attr_returns_a_copy_with_the_attribute():
    x = relay.var("x", shape=(2,))
    mod = tvm.IRModule.from_expr(relay.Function([x], x))
    out = mod.with_attr("executor", "aot")
    assert out.get_attr("executor") == "aot" and mod.get_attr("executor") is None
    assert out["main"] is mod["main"]
