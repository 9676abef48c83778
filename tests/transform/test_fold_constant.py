"""FoldConstant: constant subgraphs collapse to constants computed like NumPy computes them."""

from __future__ import annotations

import numpy as np
import pytest
from _pass_helpers import apply, assert_same_values, module, run_unchanged_input
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.ir import assert_structural_equal, post_order
from kiln.ir.expr import Call, Constant, Function
from kiln.transform import FoldConstant
from kiln.transform.fold_constant import fold_constant


def test_constant_arithmetic_folds_to_numpy_value():
    x = relay.var("x", shape=(3,))
    c1 = np.array([1.0, 2.0, 3.0], "float32")
    c2 = np.array([0.5, -1.0, 4.0], "float32")
    body = relay.multiply(x, relay.exp(relay.add(relay.const(c1), relay.const(c2))))
    after = apply(FoldConstant(), module(body, [x]), opt_level=2)
    expected = relay.multiply(x, relay.const(np.exp((c1 + c2).astype(np.float64)).astype("float32")))
    assert_structural_equal(after, module(expected, [x]))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_deep_constant_chain_becomes_one_constant(dtype):
    a = np.arange(12).reshape(3, 4).astype(dtype)
    expr = relay.const(a)
    for i in range(50):
        expr = relay.add(relay.multiply(expr, relay.const(np.array(2, dtype))),
                         relay.const(np.array(i % 3, dtype)))
    expr = relay.transpose(relay.reshape(expr, (4, 3)))
    out = fold_constant(expr)
    assert isinstance(out, Constant)
    expected = a.astype(np.int64 if dtype.startswith("int") else np.float64)
    for i in range(50):
        expected = expected * 2 + i % 3
    np.testing.assert_allclose(out.value, expected.reshape(4, 3).T.astype(dtype), rtol=1e-6)


def test_shape_of_and_ndarray_size_fold_from_types():
    x = relay.var("x", shape=(2, 5, 7))
    body = relay.Tuple([relay.shape_of(x), relay.ndarray_size(x, dtype="int64")])
    after = apply(FoldConstant(), module(body, [x]), opt_level=2)
    shape, size = after["main"].body.fields
    np.testing.assert_array_equal(shape.value, np.array([2, 5, 7], "int32"))
    assert size.value.dtype == np.int64 and int(size.value) == 70


def test_projection_of_tuple_and_constant_if():
    x = relay.var("x", shape=(2,))
    y = relay.var("y", shape=(2,))
    pick = relay.TupleGetItem(relay.Tuple([x, y]), 1)
    body = relay.If(relay.const(False), relay.exp(x), pick)
    after = apply(FoldConstant(), module(body, [x, y]), opt_level=2)
    assert after["main"].body is after["main"].params[1]


def test_calls_without_arguments_and_stateful_ops_are_kept():
    x = relay.var("x", shape=(2, 2))
    body = relay.add(x, relay.zeros((2, 2), "float32"))
    after = apply(FoldConstant(), module(body, [x]), opt_level=2)
    assert [n.op.name for n in post_order(after["main"]) if isinstance(n, Call)] == ["zeros", "add"]
    drop = relay.nn.dropout(relay.const(np.ones((2,), "float32")), 0.5)
    after = apply(FoldConstant(), module(drop, []), opt_level=2)
    assert any(isinstance(n, Call) and n.op.name == "nn.dropout" for n in post_order(after["main"]))


def test_fused_functions_are_left_alone():
    p = relay.var("p", shape=(2,))
    inner = relay.Function([p], relay.add(p, relay.add(relay.const(1.0), relay.const(2.0))))
    inner = inner.with_attr("Primitive", 1)
    x = relay.var("x", shape=(2,))
    mod = module(relay.Call(inner, [x]), [x])
    after = apply(FoldConstant(), mod, opt_level=2)
    fn = after["main"].body.op
    assert isinstance(fn, Function)
    assert sum(isinstance(n, Call) for n in post_order(fn.body)) == 2


def test_input_module_is_not_mutated():
    x = relay.var("x", shape=(3,))
    body = relay.add(x, relay.multiply(relay.const(2.0), relay.const(3.0)))
    run_unchanged_input(FoldConstant(), module(body, [x]), opt_level=2)


# --- property: random elementwise graphs keep their values ----------------------------------

_SHAPES = [(), (3,), (2, 3)]
_UNARY = ["negative", "tanh", "sigmoid", "abs"]
_BINARY = ["add", "subtract", "multiply", "maximum", "minimum"]


def _expressions(x: relay.Var) -> st.SearchStrategy:
    consts = st.tuples(st.sampled_from(_SHAPES), st.integers(0, 2**16)).map(
        lambda t: relay.const(np.random.default_rng(t[1]).uniform(-1, 1, t[0]).astype("float32")))
    leaves = st.one_of(st.just(x), consts)

    def extend(children: st.SearchStrategy) -> st.SearchStrategy:
        unary = st.tuples(st.sampled_from(_UNARY), children).map(
            lambda t: getattr(relay, t[0])(t[1]))
        binary = st.tuples(st.sampled_from(_BINARY), children, children).map(
            lambda t: getattr(relay, t[0])(t[1], t[2]))
        return st.one_of(unary, binary)

    return st.recursive(leaves, extend, max_leaves=12)


_X = relay.var("x", shape=(2, 3))


@settings(max_examples=40, deadline=None)
@given(_expressions(_X), st.integers(0, 2**16))
def test_folding_random_elementwise_graphs_keeps_values(expr, seed):
    body = relay.add(expr, _X)  # always depends on x
    before = module(body, [_X])
    after = apply(FoldConstant(), before, opt_level=2)
    for node in post_order(after["main"]):
        if isinstance(node, Call):
            assert not all(isinstance(a, Constant) for a in node.args), "a constant call survived"
    xv = np.random.default_rng(seed).uniform(-2, 2, (2, 3)).astype("float32")
    assert_same_values(before, after, {"x": xv}, rtol=1e-5, atol=1e-6)


def test_let_bound_constants_are_inlined_and_folded():
    # TVM's test_fold_let: the lets of constants go, their uses fold
    x = relay.var("x", relay.TensorType([1], "float32"))
    c = np.array(1, "float32")
    sb = relay.ScopeBuilder()
    t1 = sb.let("t1", relay.const(c))
    t2 = sb.let("t2", relay.add(t1, t1))
    t3 = sb.let("t3", relay.add(t2, x))
    sb.ret(t3)
    before = module(sb.get(), [x])
    after = apply(FoldConstant(), before)
    sb = relay.ScopeBuilder()
    t3 = sb.let("t3", relay.add(relay.const(c + c), x))
    sb.ret(t3)
    assert_structural_equal(after, module(sb.get(), [x]))
    assert_same_values(before, after, {"x": np.array([0.5], "float32")})


def test_qnn_calls_fold_only_with_fold_qnn():
    # TVM's test_fold_quantize
    t = relay.TensorType([1, 2, 3], "int8")
    x = relay.var("x", t)
    q = relay.qnn.op.quantize(relay.const(np.array([1.0, 2.0, 3.0], "float32")),
                              output_scale=relay.const(0.5), output_zero_point=relay.const(0))
    before = module(relay.subtract(x, q), [x])
    assert_structural_equal(apply(FoldConstant(), before), before)
    folded = apply(FoldConstant(fold_qnn=True), before)
    assert_structural_equal(folded, module(relay.subtract(x, relay.const(np.array([2, 4, 6], "int8"))), [x]))
