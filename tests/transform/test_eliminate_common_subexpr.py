"""EliminateCommonSubexpr: equal calls and projections are computed once."""

from __future__ import annotations

from _pass_helpers import apply, assert_same_values, module, random_inputs, run_unchanged_input

from kiln import relay
from kiln.ir import assert_structural_equal, post_order
from kiln.ir.expr import Call, Op
from kiln.transform import EliminateCommonSubexpr


def test_equal_calls_are_merged(rng):
    x = relay.var("x", shape=(2, 3))
    a = relay.exp(relay.add(x, relay.const(1.0)))
    b = relay.exp(relay.add(x, relay.const(1.0)))  # equal scalar constants count as the same
    before = module(relay.multiply(a, b), [x])
    after = apply(EliminateCommonSubexpr(), before)
    shared = relay.exp(relay.add(x, relay.const(1.0)))
    assert_structural_equal(after, module(relay.multiply(shared, shared), [x]))
    body = after["main"].body
    assert body.args[0] is body.args[1]
    assert_same_values(before, after, random_inputs(before, rng))


def test_different_attrs_or_args_are_kept():
    x = relay.var("x", shape=(2, 3))
    body = relay.Tuple([relay.sum(x, axis=0), relay.sum(x, axis=1), relay.exp(x), relay.exp(relay.exp(x))])
    after = apply(EliminateCommonSubexpr(), module(body, [x]))
    calls = [n for n in post_order(after["main"]) if isinstance(n, Call)]
    assert len(calls) == 4  # exp(x) is shared by fields 2 and 3 already


def test_projections_and_tuple_arguments():
    x = relay.var("x", shape=(6,))
    s1 = relay.split(x, 2)
    s2 = relay.split(x, 2)
    body = relay.add(s1[0], s2[0])
    after = apply(EliminateCommonSubexpr(), module(body, [x]))
    assert after["main"].body.args[0] is after["main"].body.args[1]
    c1 = relay.concatenate([x, x], axis=0)
    c2 = relay.concatenate([x, x], axis=0)
    after = apply(EliminateCommonSubexpr(), module(relay.add(c1, c2), [x]))
    assert after["main"].body.args[0] is after["main"].body.args[1]


def test_merged_call_carries_all_source_names():
    x = relay.var("x", shape=(2,))
    a = Call(Op.get("exp"), [x], source_names=("node_a",))
    b = Call(Op.get("exp"), [x], source_names=("node_b",))
    after = apply(EliminateCommonSubexpr(), module(relay.add(a, b), [x]))
    assert after["main"].body.args[0].source_names == ("node_a", "node_b")


def test_fskip_and_stateful_ops_are_respected():
    x = relay.var("x", shape=(2,))
    body = relay.add(relay.exp(x), relay.exp(x))
    skip = EliminateCommonSubexpr(fskip=lambda call: call.op.name == "exp")
    after = apply(skip, module(body, [x]))
    assert after["main"].body.args[0] is not after["main"].body.args[1]
    d = relay.add(relay.nn.dropout(x), relay.nn.dropout(x))
    after = apply(EliminateCommonSubexpr(), module(d, [x]))
    assert after["main"].body.args[0].tuple_value is not after["main"].body.args[1].tuple_value


def test_input_module_is_not_mutated():
    x = relay.var("x", shape=(2,))
    run_unchanged_input(EliminateCommonSubexpr(), module(relay.add(relay.exp(x), relay.exp(x)), [x]))
