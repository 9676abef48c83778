"""The rule engine: fixed point, non-convergence errors, typing of new nodes, provenance."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import relay
from kiln.errors import PassError
from kiln.ir import assert_structural_equal, structural_hash
from kiln.ir.expr import Call, Constant, Expr, Op
from kiln.transform.rewrite import (
    PatternMatcher,
    Rule,
    ensure_types,
    first_match,
    graph_rewrite,
    scalar_value,
)


def _neg_neg(call: Call) -> Expr | None:
    inner = call.args[0]
    if isinstance(inner, Call) and inner.op.name == "negative":
        return inner.args[0]
    return None


def _exp_to_neg_neg(call: Call) -> Expr | None:
    return relay.negative(relay.negative(relay.log(call.args[0])))


pm_test = [Rule("neg_neg", "negative", _neg_neg)]  # -(-x) -> x


def test_rule_applies_until_fixed_point_in_one_graph():
    x = relay.var("x", shape=(3,))
    expr = relay.negative(relay.negative(relay.negative(relay.negative(x))))
    out = graph_rewrite(expr, pm_test)
    assert out is x


def test_nothing_to_do_returns_the_same_object():
    x = relay.var("x", shape=(3,))
    expr = relay.exp(x)
    assert graph_rewrite(expr, pm_test) is expr


def test_replacements_created_by_rules_are_rewritten_in_later_sweeps():
    x = relay.var("x", shape=(3,))
    rules = [Rule("exp", "exp", _exp_to_neg_neg), Rule("neg_neg", "negative", _neg_neg)]
    out = graph_rewrite(relay.exp(x), rules)
    assert_structural_equal(out, relay.log(x))


def test_new_nodes_are_typed_before_the_next_rule_sees_them():
    seen: list[bool] = []

    def record(call: Call) -> Expr | None:
        seen.append(call.has_type and call.args[0].has_type)
        return None

    x = relay.var("x", shape=(2, 2))
    rules = [Rule("exp", "exp", _exp_to_neg_neg), Rule("record", "log", record)]
    graph_rewrite(relay.exp(x), rules)
    assert seen and all(seen)


def test_cyclic_rules_raise_naming_them():
    def flip(call: Call) -> Expr:  # exp(x) -> -(exp(x))... forever with flop
        return relay.negative(relay.exp(call.args[0]))

    def flop(call: Call) -> Expr | None:
        inner = call.args[0]
        if isinstance(inner, Call) and inner.op.name == "exp":
            return relay.exp(relay.negative(inner.args[0]))
        return None

    x = relay.var("x", shape=(2,))
    with pytest.raises(PassError, match=r"did not converge.*(flip|flop)"):
        graph_rewrite(relay.exp(x), [Rule("flip", "exp", flip), Rule("flop", "negative", flop)],
                      max_sweeps=4, max_per_node=8)


def test_rules_keep_provenance_of_the_calls_they_replace():
    x = relay.var("x", shape=(3,))
    inner = Call(Op.get("negative"), [x], source_names=("neg_a",))
    outer = Call(Op.get("exp"), [inner], source_names=("exp_b",))

    def exp_of_neg(call: Call) -> Expr | None:
        arg = call.args[0]
        if isinstance(arg, Call) and arg.op.name == "negative":
            return relay.divide(relay.const(1.0), relay.exp(arg.args[0]))
        return None

    out = graph_rewrite(outer, [Rule("exp_of_neg", "exp", exp_of_neg)])
    assert out.op.name == "divide"
    assert out.source_names == ("neg_a", "exp_b")
    assert out.args[1].source_names == ("neg_a", "exp_b")


def test_input_graph_is_not_mutated():
    x = relay.var("x", shape=(3,))
    expr = relay.add(relay.negative(relay.negative(x)), relay.const(1.0))
    before = structural_hash(expr)
    graph_rewrite(expr, pm_test)
    assert structural_hash(expr) == before


def test_ensure_types_types_only_the_new_region():
    x = relay.var("x", shape=(4, 5))
    base = relay.exp(x)
    ensure_types(base)
    expr = relay.sum(relay.add(base, relay.const(1.0)), axis=1)
    ensure_types(expr)
    assert expr.checked_type.shape == (4,)


def test_pattern_matcher_indexes_by_op_and_kind():
    pm = PatternMatcher([Rule("a", "exp", _neg_neg), Rule("b", Constant, lambda c: None)])
    x = relay.var("x", shape=(1,))
    assert [r.name for r in pm.candidates(relay.exp(x))] == ["a"]
    assert [r.name for r in pm.candidates(relay.const(1.0))] == ["b"]
    assert pm.candidates(relay.log(x)) == []


def test_first_match_and_scalar_value():
    x = relay.var("x", shape=(2,))
    node = relay.negative(relay.negative(x))
    ensure_types(node)
    assert first_match(pm_test, node).name == "neg_neg"
    assert first_match(pm_test, x) is None
    assert scalar_value(relay.const(np.full((1, 1), 3.0, "float32"))) == 3.0
    assert scalar_value(relay.const(np.ones((2,), "float32"))) is None
