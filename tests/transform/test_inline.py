"""Inline and RemoveUnusedFunctions on modules with several global functions."""

from __future__ import annotations

from _pass_helpers import apply, assert_same_values, random_inputs

import kiln as tvm
from kiln import relay
from kiln.ir import assert_structural_equal, structural_hash
from kiln.transform import InferType, Inline, RemoveUnusedFunctions


def _module() -> tvm.IRModule:
    mod = tvm.IRModule()
    a = relay.var("a", shape=(2,))
    mod["square"] = relay.Function([a], relay.multiply(a, a)).with_attr("Inline", 1)
    b = relay.var("b", shape=(2,))
    mod["plus_square"] = relay.Function(
        [b], relay.add(b, relay.Call(mod.get_global_var("square"), [b]))).with_attr("Inline", 1)
    c = relay.var("c", shape=(2,))
    mod["kept"] = relay.Function([c], relay.exp(c))
    d = relay.var("d", shape=(2,))
    mod["unused"] = relay.Function([d], relay.negative(d))
    x = relay.var("x", shape=(2,))
    body = relay.Call(mod.get_global_var("kept"),
                      [relay.Call(mod.get_global_var("plus_square"), [x])])
    mod["main"] = relay.Function([x], body)
    return InferType()(mod)


def test_inline_substitutes_marked_functions_transitively(rng):
    mod = _module()
    out = apply(Inline(), mod)
    assert sorted(g.name_hint for g in out.get_global_vars()) == ["kept", "main", "unused"]
    x = relay.var("x", shape=(2,))
    expected = relay.Call(out.get_global_var("kept"), [relay.add(x, relay.multiply(x, x))])
    assert_structural_equal(out["main"], InferType()(tvm.IRModule.from_expr(
        relay.Function([x], expected), {"kept": out["kept"]}))["main"])
    assert_same_values(mod, out, random_inputs(mod, rng))


def test_remove_unused_functions_keeps_what_main_reaches():
    out = apply(RemoveUnusedFunctions(), _module())
    assert sorted(g.name_hint for g in out.get_global_vars()) == [
        "kept", "main", "plus_square", "square"]
    out = apply(RemoveUnusedFunctions(["kept"]), _module())
    assert [g.name_hint for g in out.get_global_vars()] == ["kept"]


def test_functions_for_external_compilers_are_not_inlined():
    mod = _module()
    mod["square"] = mod["square"].with_attr("Compiler", "ext")
    out = apply(Inline(), mod)
    assert "square" in out


def test_inputs_are_not_mutated():
    mod = _module()
    before = structural_hash(mod)
    apply(Inline(), mod)
    apply(RemoveUnusedFunctions(), mod)
    assert structural_hash(mod) == before
