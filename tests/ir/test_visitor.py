"""Traversal: post order, rewrite, visitors and mutators; no recursion on deep graphs."""

from __future__ import annotations

import numpy as np

from kiln import relay
from kiln.interpreter import evaluate
from kiln.ir import ExprMutator, ExprVisitor, Var, free_vars, post_order, rewrite
from kiln.ir.expr import Call


def test_post_order_visits_shared_nodes_once_children_first():
    x = relay.var("x", shape=(2,))
    e = relay.exp(x)
    out = e + e
    order = post_order(out)
    assert order.index(x) < order.index(e) < order.index(out)
    assert sum(1 for n in order if n is e) == 1


def test_rewrite_replaces_and_keeps_provenance():
    x = relay.var("x", shape=(3,))
    inner = relay.Call(relay.op.get("exp"), [x], source_names=["exp_node"])
    outer = relay.Call(relay.op.get("negative"), [inner], source_names=["neg_node"])

    def swap(new, old):
        if isinstance(new, Call) and new.op.name == "exp":
            return relay.Call(relay.op.get("log"), new.args, source_names=new.source_names)
        return None

    out = rewrite(outer, swap)
    assert out.op.name == "negative" and out.args[0].op.name == "log"
    assert out.source_names == ("neg_node",)
    assert out.args[0].source_names == ("exp_node",)
    assert outer.args[0].op.name == "exp"  # input untouched


def test_rewrite_returns_same_graph_when_nothing_changes():
    x = relay.var("x", shape=(3,))
    e = relay.exp(x) * relay.exp(x)
    assert rewrite(e, lambda new, old: None) is e


def test_visitor_and_mutator_on_a_deep_chain():
    x = relay.var("x", shape=(4,))
    y = x
    for _ in range(3000):
        y = relay.negative(y)

    class Count(ExprVisitor):
        def __init__(self) -> None:
            self.calls = 0

        def visit_call(self, call):
            self.calls += 1

    c = Count()
    c.visit(y)
    assert c.calls == 3000

    class NegToCopy(ExprMutator):
        def visit_call(self, call):
            return relay.copy(call.args[0]) if call.op.name == "negative" else call

    z = NegToCopy().visit(y)
    data = np.arange(4, dtype="float32")
    np.testing.assert_array_equal(evaluate(relay.Function([x], z), [data]), data)
    np.testing.assert_array_equal(evaluate(relay.Function([x], y), [data]), data)


def test_free_vars_in_order():
    a, b, c = (relay.var(n, shape=(1,)) for n in "abc")
    f = relay.Function([b], a + b)
    expr = relay.Call(f, [c]) * a
    assert [v.name_hint for v in free_vars(expr)] == ["a", "c"]
    assert all(isinstance(v, Var) for v in free_vars(expr))
