"""DeadCodeElimination and ToGraphNormalForm on let-bound programs."""

from __future__ import annotations

from _pass_helpers import apply, assert_same_values, module, random_inputs, run_unchanged_input

from kiln import relay
from kiln.ir import assert_structural_equal, post_order
from kiln.ir.expr import Let
from kiln.transform import DeadCodeElimination, ToGraphNormalForm


def _lets():
    x = relay.var("x", shape=(3,))
    a, b, c = (relay.var(n, shape=(3,)) for n in "abc")
    body = relay.Let(a, relay.exp(x),
                     relay.Let(b, relay.negative(x),  # unused
                               relay.Let(c, relay.add(a, a), relay.multiply(c, x))))
    return x, body


def test_unused_bindings_are_dropped(rng):
    x, body = _lets()
    before = module(body, [x])
    after = apply(DeadCodeElimination(), before)
    lets = [n.var.name_hint for n in post_order(after["main"]) if isinstance(n, Let)]
    assert sorted(lets) == ["a", "c"]
    assert_same_values(before, after, random_inputs(before, rng))


def test_inline_once_substitutes_single_use_bindings(rng):
    x, body = _lets()
    before = module(body, [x])
    after = apply(DeadCodeElimination(inline_once=True), before)
    lets = [n.var.name_hint for n in post_order(after["main"]) if isinstance(n, Let)]
    assert lets == ["a"]  # a is used twice
    assert_same_values(before, after, random_inputs(before, rng))


def test_graph_normal_form_has_no_lets(rng):
    x, body = _lets()
    before = module(body, [x])
    after = apply(ToGraphNormalForm(), before)
    e = relay.exp(x)
    assert_structural_equal(after, module(relay.multiply(relay.add(e, e), x), [x]))
    assert_same_values(before, after, random_inputs(before, rng))


def test_inputs_are_not_mutated():
    x, body = _lets()
    run_unchanged_input(DeadCodeElimination(), module(body, [x]))
    run_unchanged_input(ToGraphNormalForm(), module(body, [x]))


def test_a_binding_whose_body_is_its_variable_is_kept(rng):
    # ``let %c = exp(%x); %c``: the body reads %c (it used to count as unused and leave %c free)
    x, c = relay.var("x", shape=(3,)), relay.var("c", shape=(3,))
    before = module(relay.Let(c, relay.exp(x), c), [x])
    after = apply(DeadCodeElimination(), before)
    assert [n.var.name_hint for n in post_order(after["main"]) if isinstance(n, Let)] == ["c"]
    assert_same_values(before, after, random_inputs(before, rng))
    identity = module(x, [x])  # a function whose body is its parameter
    assert_structural_equal(apply(DeadCodeElimination(inline_once=True), identity), identity)


def test_called_and_captured_bindings_stay_bound():
    # %f is only ever a callee, and %x is read inside %f: neither is a single graph use
    before = relay.parse("""
    #[version = "0.0.5"]
    def @main(%a: Tensor[(3), float32]) {
        let %x = exp(%a);
        let %f = fn (%y: Tensor[(3), float32]) -> Tensor[(3), float32] {
          let %z = add(%y, %y);
          add(%x, %z)
        };
        (%f(%a), %f(%x))
    }
    """)
    expected = relay.parse("""
    #[version = "0.0.5"]
    def @main(%a: Tensor[(3), float32]) {
        let %x = exp(%a);
        let %f = fn (%y: Tensor[(3), float32]) -> Tensor[(3), float32] {
          add(%x, add(%y, %y))
        };
        (%f(%a), %f(%x))
    }
    """)
    after = apply(DeadCodeElimination(inline_once=True), before)
    assert_structural_equal(after, apply(relay.transform.InferType(), expected), map_free_vars=True)
