"""MergeComposite: expected graphs restated from TVM's test_pass_merge_composite.py."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import relay
from kiln.ir import IRModule, structural_equal
from kiln.transform import InferType, MergeComposite
from kiln.transform.dataflow_pattern import PatternError, TupleGetItemPattern, is_op, wildcard


def _run(fn: relay.Function, table: list) -> relay.Function:
    mod = InferType()(IRModule.from_expr(fn))
    return MergeComposite(table)(mod)["main"]


def _expected(fn: relay.Function) -> relay.Function:
    return InferType()(IRModule.from_expr(fn))["main"]


def _composite(params, body, name, ops):
    return relay.Function(params, body).with_attr("Composite", name).with_attr(
        "PartitionedFromPattern", ops)


def _add_relu():
    return is_op("nn.relu")(wildcard() + wildcard())


def _add_sub_mul():
    x, y = wildcard(), wildcard()
    return (x + y) * (x - y)


def _conv_bias_relu():
    conv = is_op("nn.conv2d")(wildcard(), wildcard())
    return is_op("nn.relu")(is_op("nn.bias_add")(conv, wildcard()))


def test_simple_merge_and_numbers():
    a, b = relay.var("a", shape=(10, 10)), relay.var("b", shape=(10, 10))
    out = _run(relay.Function([a, b], relay.nn.relu(a + b)), [("add_relu", _add_relu())])
    i1, i2 = relay.var("in_1", shape=(10, 10)), relay.var("in_2", shape=(10, 10))
    f = _composite([i1, i2], relay.nn.relu(i1 + i2), "add_relu", "add_nn.relu_")
    a2, b2 = relay.var("a", shape=(10, 10)), relay.var("b", shape=(10, 10))
    expected = _expected(relay.Function([a2, b2], relay.Call(f, [a2, b2])))
    assert structural_equal(out, expected, map_free_vars=True)
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((10, 10)).astype("float32") for _ in range(2))
    run = relay.create_executor("debug", mod=IRModule.from_expr(out)).evaluate()
    np.testing.assert_allclose(run(x, y).numpy(), np.maximum(x + y, 0), rtol=1e-6)


def test_branch_merge_takes_outer_match_first():
    a, b, c = (relay.var(n, shape=(10, 10)) for n in "abc")
    m1 = (a + b) * (a - b)
    m2 = (c + m1) * (c - m1)
    out = _run(relay.Function([a, b, c], relay.nn.relu(m2)), [("add_sub_mul", _add_sub_mul())])

    def comp():
        x, y = relay.var("x", shape=(10, 10)), relay.var("y", shape=(10, 10))
        return _composite([x, y], (x + y) * (x - y), "add_sub_mul", "add_subtract_multiply_")

    a2, b2, c2 = (relay.var(n, shape=(10, 10)) for n in "abc")
    inner = relay.Call(comp(), [a2, b2])
    expected = _expected(relay.Function([a2, b2, c2], relay.nn.relu(relay.Call(comp(), [c2, inner]))))
    assert structural_equal(out, expected, map_free_vars=True)


def test_reuse_call_merge():
    x, y = wildcard(), wildcard()
    add = is_op("add")(x, y)
    pattern = is_op("add")(is_op("add")(x, add), add)
    a, b = relay.var("a", shape=(10, 10)), relay.var("b", shape=(10, 10))
    sub = a - b
    add_node = sub + b
    out = _run(relay.Function([a, b], (sub + add_node) + add_node), [("add_add_add", pattern)])
    i1, i2 = relay.var("in_1", shape=(10, 10)), relay.var("in_2", shape=(10, 10))
    inner = i1 + i2
    f = _composite([i1, i2], (i1 + inner) + inner, "add_add_add", "add_add_add_")
    a2, b2 = relay.var("a", shape=(10, 10)), relay.var("b", shape=(10, 10))
    expected = _expected(relay.Function([a2, b2], relay.Call(f, [a2 - b2, b2])))
    assert structural_equal(out, expected, map_free_vars=True)


def test_tuple_get_item_merge_names_the_item():
    x = relay.var("x", shape=(1, 8))
    params = [relay.var(n, shape=(8,)) for n in ("gamma", "beta", "mean", "var")]
    bn = relay.nn.batch_norm(x, *params)
    bn_pattern = is_op("nn.batch_norm")(*(wildcard() for _ in range(5)))
    pattern = is_op("nn.relu")(TupleGetItemPattern(bn_pattern, 0))
    out = _run(relay.Function([x, *params], relay.nn.relu(bn[0])), [("bn_relu", pattern)])
    composite = out.body.op
    assert composite.attrs["PartitionedFromPattern"] == "nn.batch_norm_TupleGetItem0_nn.relu_"
    assert composite.attrs["Composite"] == "bn_relu"
    assert list(out.body.args) == list(out.params)


def test_check_function_vetoes_and_type_check():
    x = relay.var("x", shape=(1, 10, 10, 10))
    w = relay.var("w", shape=(10, 10, 3, 3))
    b = relay.var("b", shape=(8,))
    conv = relay.nn.conv2d(relu := relay.nn.relu(x + x), w, kernel_size=(3, 3), data_layout="NHWC")
    fn = relay.Function([x, w, b], relay.nn.relu(relay.nn.bias_add(conv, b)))

    def batch_is(n):
        return lambda root: root.args[0].args[0].checked_type.shape[0] == n

    vetoed = _run(fn, [("add_relu", _add_relu()), ("conv_bias_relu", _conv_bias_relu(), batch_is(2))])
    assert isinstance(vetoed.body.op, relay.Op)  # conv chain left alone
    add_relu = vetoed.body.args[0].args[0].args[0]
    assert add_relu.op.attrs["Composite"] == "add_relu"
    assert len(add_relu.op.params) == 1  # add(x, x): one parameter for the repeated input
    taken = _run(fn, [("add_relu", _add_relu()), ("conv_bias_relu", _conv_bias_relu(), batch_is(1))])
    assert taken.body.op.attrs["Composite"] == "conv_bias_relu"
    assert taken.body.args[0].op.attrs["Composite"] == "add_relu"
    assert relu is not None


def test_inner_result_used_outside_is_not_merged():
    a, b = relay.var("a", shape=(4,)), relay.var("b", shape=(4,))
    add = a + b
    fn = relay.Function([a, b], relay.nn.relu(add) * add)
    out = _run(fn, [("add_relu", _add_relu())])
    assert structural_equal(out, _expected(fn))


def test_bad_table_entry():
    with pytest.raises(PatternError, match="pattern table entry"):
        MergeComposite([("name",)])
