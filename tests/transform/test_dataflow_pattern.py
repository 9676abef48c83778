"""The dataflow pattern language: matching, partitioning and rewriting (TVM's semantics)."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import relay
from kiln.ir import IRModule, TensorType, structural_equal
from kiln.op.registry import OpPattern
from kiln.transform import InferType
from kiln.transform.dataflow_pattern import (
    CallPattern,
    DFPatternCallback,
    FunctionPattern,
    PatternError,
    TupleGetItemPattern,
    TuplePattern,
    dominates,
    has_dtype,
    has_shape,
    has_type,
    is_constant,
    is_expr,
    is_if,
    is_let,
    is_op,
    is_tuple,
    is_tuple_get_item,
    is_var,
    partition,
    rewrite,
    wildcard,
)


def _typed(expr: relay.Expr) -> relay.Expr:
    fn = expr if isinstance(expr, relay.Function) else relay.Function(relay.analysis.free_vars(expr), expr)
    out = InferType()(IRModule.from_expr(fn))["main"]
    return out if isinstance(expr, relay.Function) else out.body


# --- matching ------------------------------------------------------------------------------

def test_match_op_and_leaves():
    x, y = relay.var("x"), relay.var("y")
    assert is_op("add")(wildcard(), wildcard()).match(x + y)
    assert not is_op("add")(wildcard(), wildcard()).match(x - y)
    assert not is_op("add")(wildcard()).match(x + y)  # arity
    assert is_var("x").match(x) and not is_var("x").match(y) and is_var().match(y)
    assert is_constant().match(relay.const(1.0)) and not is_constant().match(x)
    assert is_expr(x).match(x) and not is_expr(x).match(y)
    assert is_op("nn.relu")(is_var("x") + is_constant()).match(relay.nn.relu(x + relay.const(1.0)))


def test_same_pattern_node_must_match_same_expr():
    x, y, z = (relay.var(n) for n in "xyz")
    a, b = wildcard(), wildcard()
    pat = (a + b) * (a - b)
    assert pat.match((x + y) * (x - y))
    assert not pat.match((x + y) * (x - z))


def test_commutative_add_multiply_only():
    x, c = relay.var("x"), relay.const(2.0)
    assert (is_constant() + is_var()).match(x + c)
    assert (is_constant() * is_var()).match(x * c)
    assert not (is_constant() - is_var()).match(x - c)


def test_alternatives_and_optional():
    x = relay.var("x")
    pat = is_op("nn.relu")(wildcard()) | is_op("tanh")(wildcard())
    assert pat.match(relay.nn.relu(x)) and pat.match(relay.tanh(x)) and not pat.match(relay.exp(x))
    conv = is_op("exp")(wildcard())
    opt = conv.optional(lambda p: is_op("nn.relu")(p))
    assert opt.match(relay.exp(x)) and opt.match(relay.nn.relu(relay.exp(x)))
    assert not opt.match(relay.nn.relu(x))


def test_tuples_and_items():
    x, y = relay.var("x"), relay.var("y")
    t = relay.Tuple([x, y])
    assert is_tuple([is_var("x"), is_var("y")]).match(t)
    assert not is_tuple([is_var("y"), is_var("x")]).match(t)
    assert TuplePattern(None).match(t)
    assert is_tuple_get_item(wildcard(), 1).match(relay.TupleGetItem(t, 1))
    assert not TupleGetItemPattern(wildcard(), 0).match(relay.TupleGetItem(t, 1))
    assert is_tuple_get_item(wildcard()).match(relay.TupleGetItem(t, 1))


def test_call_pattern_without_args_matches_any_args():
    x, y = relay.var("x"), relay.var("y")
    pat = CallPattern(is_op("add"), None)
    assert pat.match(x + y) and not pat.match(x - y)


def test_type_patterns_infer_types():
    x = relay.var("x", shape=(2, 3), dtype="float32")
    expr = relay.nn.relu(x)
    assert has_dtype("float32").match(expr)
    assert not has_dtype("int8").match(expr)
    assert has_shape((2, 3)).match(expr) and not has_shape((3, 2)).match(expr)
    assert has_type(TensorType((2, 3), "float32")).match(expr)
    assert is_op("nn.relu")(wildcard()).has_dtype("float32").match(expr)


def test_attribute_patterns():
    x, w = relay.var("x", shape=(1, 3, 8, 8)), relay.var("w", shape=(4, 3, 3, 3))
    conv = relay.nn.conv2d(x, w, kernel_size=(3, 3), padding=(1, 1))
    pat = is_op("nn.conv2d")(wildcard(), wildcard())
    assert pat.has_attr({"kernel_size": [3, 3], "padding": [1, 1, 1, 1]}).match(conv)
    assert not pat.has_attr({"kernel_size": [1, 1]}).match(conv)
    assert not pat.has_attr({"no_such_attr": 1}).match(conv)
    # an operator's attribute: its fusion pattern (TVM's TOpPattern)
    elemwise = wildcard().has_attr({"TOpPattern": int(OpPattern.ELEMWISE)})
    assert elemwise(wildcard()).match(relay.nn.relu(x))
    assert not elemwise(wildcard(), wildcard()).match(conv)
    fn = relay.Function([x], x).with_attr("Composite", "c")
    assert FunctionPattern(None, wildcard()).has_attr({"Composite": "c"}).match(fn)
    assert not FunctionPattern(None, wildcard()).has_attr({"Composite": "d"}).match(fn)


def test_if_let_function_patterns():
    c, x, y = relay.var("c", dtype="bool"), relay.var("x"), relay.var("y")
    assert is_if(is_var("c"), is_var("x"), is_var("y")).match(relay.If(c, x, y))
    assert not is_if(is_var("c"), is_var("y"), is_var("x")).match(relay.If(c, x, y))
    v = relay.var("v")
    assert is_let(is_var("v"), wildcard(), is_var("v")).match(relay.Let(v, x, v))
    fn = relay.Function([x, y], x + y)
    assert FunctionPattern([wildcard(), wildcard()], wildcard() + wildcard()).match(fn)
    assert not FunctionPattern([wildcard()], wildcard()).match(fn)


def test_dominator_pattern():
    # TVM's diamond: conv2d -> relu -> {add, add} -> add is dominated by conv2d via elementwise
    i, w = relay.var("input"), relay.var("weight")
    conv = relay.nn.conv2d(i, w)
    relu = relay.nn.relu(conv)
    leaky = relay.nn.leaky_relu(conv, alpha=0)
    out = relu + leaky
    is_conv = is_op("nn.conv2d")(wildcard(), wildcard())
    elemwise = wildcard().has_attr({"TOpPattern": int(OpPattern.ELEMWISE)})(wildcard())
    reduction = is_op("add")(wildcard(), wildcard())
    pat = dominates(is_conv, elemwise, reduction)
    assert pat.match(out)
    # a path through a non-elementwise op breaks it
    bad = relu + relay.nn.max_pool2d(conv)
    assert not pat.match(bad)


# --- partition ---------------------------------------------------------------------------------

def test_partition_wraps_match_with_inputs_in_pattern_order():
    a, b = relay.var("a", shape=(4,)), relay.var("b", shape=(4,))
    expr = relay.nn.relu(a + b)
    out = (is_op("nn.relu")(wildcard() + wildcard())).partition(expr, {"Composite": "add_relu"})
    assert isinstance(out, relay.Call) and isinstance(out.op, relay.Function)
    assert out.args == (a, b)
    fn = out.op
    assert dict(fn.attrs) == {"PartitionedFromPattern": "add_nn.relu_", "Composite": "add_relu"}
    x, y = relay.var("x"), relay.var("y")
    expect = relay.Function([x, y], relay.nn.relu(x + y))
    assert structural_equal(fn.without_attr("PartitionedFromPattern").without_attr("Composite"),
                            expect)


def test_partition_refuses_matches_with_outside_uses_and_overlaps():
    a, b = relay.var("a"), relay.var("b")
    add = a + b
    expr = relay.Tuple([relay.nn.relu(add), add])  # the add is also used outside the match
    pat = is_op("nn.relu")(wildcard() + wildcard())
    assert partition(pat, expr) is expr
    # two relu(add) chains sharing nothing: both partitioned; the check can veto one
    e1, e2 = relay.nn.relu(a + b), relay.nn.relu(b + a)
    both = relay.Tuple([e1, e2])
    out = partition(pat, both)
    assert all(isinstance(f, relay.Call) and isinstance(f.op, relay.Function) for f in out.fields)
    vetoed = partition(pat, both, check=lambda root: root is e1)
    assert isinstance(vetoed.fields[0].op, relay.Function) and vetoed.fields[1] is e2


def test_partition_embeds_constants_matched_by_constant_patterns():
    x = relay.var("x")
    c = relay.const(np.ones(3, "float32"))
    out = partition(is_op("add")(wildcard(), is_constant()), x + c)
    assert out.args == (x,)
    assert any(isinstance(a, relay.Constant) for a in out.op.body.args)
    out2 = partition(is_op("add")(wildcard(), wildcard()), x + c)
    assert out2.args == (x, c)


def test_partition_skips_pre_partitioned_functions():
    a, b = relay.var("a"), relay.var("b")
    pat = is_op("add")(wildcard(), wildcard())
    once = partition(pat, a + b, {"Composite": "add"})
    assert structural_equal(partition(pat, once), once)


def test_partition_of_function_pattern_is_refused_quietly():
    x = relay.var("x")
    fn = relay.Function([x], x)
    assert partition(FunctionPattern(None, wildcard()), fn) is fn


# --- rewrite -----------------------------------------------------------------------------------

class _AddToSubtract(DFPatternCallback):
    def __init__(self) -> None:
        super().__init__()
        self.x, self.y = wildcard(), wildcard()
        self.pattern = self.x + self.y

    def callback(self, pre, post, node_map):
        return relay.subtract(node_map[self.x][0], node_map[self.y][0])


def test_rewrite_callback_to_fixed_point():
    x, y, z = (relay.var(n) for n in "xyz")
    out = rewrite(_AddToSubtract(), x + y + z)
    assert structural_equal(out, relay.subtract(relay.subtract(x, y), z))


def test_rewrite_require_type_and_numeric_result():
    class _MulOneToIdentity(DFPatternCallback):
        def __init__(self) -> None:
            super().__init__(require_type=True)
            self.x = wildcard()
            self.pattern = is_op("multiply")(self.x, is_expr(relay.const(1.0))).has_dtype("float32")

        def callback(self, pre, post, node_map):
            return node_map[self.x][0]

    x = relay.var("x", shape=(3,))
    out = rewrite(_MulOneToIdentity(), relay.exp(x * relay.const(1.0)))
    assert structural_equal(out, relay.exp(x))
    data = np.arange(3, dtype="float32")
    got = relay.create_executor("debug", mod=IRModule.from_expr(relay.Function([x], out))).evaluate()(data)
    np.testing.assert_allclose(got.numpy(), np.exp(data), rtol=1e-6)


def test_rewrite_that_never_settles_raises():
    class _Grow(DFPatternCallback):
        def __init__(self) -> None:
            super().__init__()
            self.x, self.y = wildcard(), wildcard()
            self.pattern = self.x + self.y

        def callback(self, pre, post, node_map):
            return relay.add(relay.nn.relu(node_map[self.x][0]), node_map[self.y][0])

    x, y = relay.var("x"), relay.var("y")
    with pytest.raises(PatternError, match="still changed"):
        rewrite(_Grow(), x + y)
    once = _Grow()
    once.rewrite_once = True
    assert structural_equal(rewrite(once, x + y), relay.nn.relu(x) + y)


def test_rewrite_undoing_callbacks_stop_when_graph_repeats():
    class _SubToAdd(DFPatternCallback):
        def __init__(self) -> None:
            super().__init__()
            self.x, self.y = wildcard(), wildcard()
            self.pattern = self.x - self.y

        def callback(self, pre, post, node_map):
            return relay.add(node_map[self.x][0], node_map[self.y][0])

    x, y = relay.var("x"), relay.var("y")
    assert structural_equal(rewrite([_AddToSubtract(), _SubToAdd()], x + y), x + y)


def test_is_op_unknown_operator():
    with pytest.raises(KeyError):
        is_op("no_such_op")


def test_pattern_arithmetic_builds_calls():
    x, y = wildcard(), wildcard()
    for pat, op in ((x + y, "add"), (x - y, "subtract"), (x * y, "multiply"), (x / y, "divide")):
        a, b = relay.var("a"), relay.var("b")
        assert pat.match(relay.Call(relay.Op.get(op), [a, b]))
    assert _typed(relay.var("q", shape=(1,))) is not None


def test_match_nodes_reports_what_each_pattern_node_matched():
    from kiln.transform.dataflow_pattern import match_nodes

    a, b = relay.var("a"), relay.var("b")
    x, y = wildcard(), wildcard()
    left = is_op("nn.relu")(x)
    pat = (left | is_op("tanh")(x)) + y
    found = match_nodes(pat, relay.tanh(a) + b)
    assert found is not None and found[x] == [a] and found[y] == [b]
    assert left not in found  # the alternative not taken leaves nothing behind
    assert match_nodes(pat, relay.exp(a) + b) is None
