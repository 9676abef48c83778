"""FuseOps: TVM's groupings (anchors, elementwise chains, reductions, diamonds, tuples, depth cap)."""

from __future__ import annotations

import numpy as np
import pytest
from _pass_helpers import apply, assert_same_values, module, random_inputs, run_unchanged_input
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.ir import assert_structural_equal, post_order
from kiln.ir.expr import Call, Function, Op
from kiln.transform import DefuseOps, FuseOps, SimplifyExpr


def fused(params, body, reshape_only: bool = False) -> Function:
    attrs = {"Primitive": 1, **({"relay.reshape_only": 1} if reshape_only else {})}
    return relay.Function(params, body, attrs=attrs)


def groups(mod) -> list[list[str]]:
    """The op names of each fused function, in evaluation order."""
    out = []
    for node in post_order(mod["main"], into_functions=False):
        if isinstance(node, Call) and isinstance(node.op, Function):
            out.append([n.op.name for n in post_order(node.op.body) if isinstance(n, Call)])
    return out


def fuse(body, params, opt_level: int = 2, **config):
    before = module(body, params)
    return before, apply(FuseOps(), before, opt_level=opt_level, **config)


def test_conv_bias_relu_is_one_function():
    x = relay.var("x", shape=(1, 3, 8, 8))
    w = relay.var("w", shape=(4, 3, 3, 3))
    b = relay.var("b", shape=(4,))
    body = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w, kernel_size=(3, 3), channels=4), b))
    _, after = fuse(body, [x, w, b])
    p0, p1, p2 = (relay.var(f"p{i}", t.checked_type) for i, t in enumerate([x, w, b]))
    fn = fused([p0, p1, p2], relay.nn.relu(relay.nn.bias_add(
        relay.nn.conv2d(p0, p1, kernel_size=(3, 3), channels=4), p2)))
    assert_structural_equal(after, module(relay.Call(fn, [x, w, b]), [x, w, b]))


def test_elementwise_chain_keeps_scalar_constants_inline():
    x = relay.var("x", shape=(2, 3))
    y = relay.var("y", shape=(2, 3))
    body = relay.multiply(relay.tanh(relay.add(relay.exp(x), relay.const(1.0))), y)
    _, after = fuse(body, [x, y])
    p0, p1 = relay.var("p0", shape=(2, 3)), relay.var("p1", shape=(2, 3))
    fn = fused([p0, p1], relay.multiply(relay.tanh(relay.add(relay.exp(p0), relay.const(1.0))), p1))
    assert_structural_equal(after, module(relay.Call(fn, [x, y]), [x, y]))


def test_reduction_absorbs_elementwise_producers_only(rng):
    x = relay.var("x", shape=(4, 6))
    body = relay.sqrt(relay.sum(relay.exp(x), axis=1))
    before, after = fuse(body, [x])
    assert groups(after) == [["exp", "sum"], ["sqrt"]]
    assert_same_values(before, after, random_inputs(before, rng))
    body = relay.sum(relay.exp(relay.transpose(x)), axis=0)
    assert groups(fuse(body, [x])[1]) == [["transpose"], ["exp", "sum"]]


def test_injective_ops_fuse_with_injective_and_elementwise():
    x = relay.var("x", shape=(4, 6))
    body = relay.exp(relay.transpose(relay.reshape(relay.negative(x), (6, 4))))
    assert groups(fuse(body, [x])[1]) == [["negative", "reshape", "transpose", "exp"]]


def test_diamond_fuses_into_the_post_dominator(rng):
    x = relay.var("x", shape=(1, 3, 6, 6))
    w = relay.var("w", shape=(3, 3, 1, 1))
    conv = relay.nn.conv2d(x, w, kernel_size=(1, 1), channels=3)
    body = relay.nn.relu(relay.add(relay.tanh(conv), relay.sigmoid(conv)))
    before, after = fuse(body, [x, w])
    assert groups(after) == [["nn.conv2d", "tanh", "sigmoid", "add", "nn.relu"]]
    assert_same_values(before, after, random_inputs(before, rng))


def test_anchor_does_not_fuse_through_injective_paths(rng):
    x = relay.var("x", shape=(1, 4, 4, 4))
    w = relay.var("w", shape=(4, 4, 1, 1))
    conv = relay.nn.conv2d(x, w, kernel_size=(1, 1), channels=4)
    flipped = relay.reshape(relay.reshape(conv, (4, 16)), (1, 4, 4, 4))
    body = relay.add(relay.exp(conv), flipped)
    before, after = fuse(body, [x, w])
    assert groups(after)[0] == ["nn.conv2d"]
    assert sorted(op for g in groups(after)[1:] for op in g) == ["add", "exp", "reshape", "reshape"]
    assert_same_values(before, after, random_inputs(before, rng))


def test_two_anchors_are_never_merged():
    x = relay.var("x", shape=(1, 8))
    w1, w2 = relay.var("w1", shape=(8, 8)), relay.var("w2", shape=(4, 8))
    body = relay.nn.dense(relay.nn.relu(relay.nn.dense(x, w1)), w2)
    assert groups(fuse(body, [x, w1, w2])[1]) == [["nn.dense", "nn.relu"], ["nn.dense"]]


def test_split_outputs_fuse_into_their_users_like_tvm(rng):
    x = relay.var("x", shape=(2, 6))
    s = relay.split(x, 3, axis=1)
    out = relay.Tuple([relay.nn.relu(s[0]), relay.cast(relay.multiply(s[1], relay.const(10.0)), "int32"),
                       relay.greater(s[2], relay.const(0.0)), relay.cast(x, "float16")])
    before, after = fuse(out, [x], opt_level=3)
    assert groups(after) == [["split"], ["nn.relu"], ["multiply", "cast"], ["greater"], ["cast"]]
    relu_call = after["main"].body.fields[0]
    assert len(relu_call.args) == 1 and relu_call.op.params[0].checked_type == relu_call.args[0].checked_type
    assert_same_values(before, after, random_inputs(before, rng))


def test_concatenate_takes_its_tuple_and_elementwise_inputs(rng):
    x, y = relay.var("x", shape=(2, 3)), relay.var("y", shape=(2, 3))
    body = relay.concatenate([relay.exp(x), relay.negative(y)], axis=1)
    before, after = fuse(body, [x, y])
    assert groups(after) == [["exp", "negative", "concatenate"]]
    assert_same_values(before, after, random_inputs(before, rng))


def test_opaque_ops_stay_alone():
    x = relay.var("x", shape=(2, 5))
    body = relay.exp(relay.argsort(relay.exp(x)).astype("float32"))
    assert groups(fuse(body, [x])[1]) == [["exp"], ["argsort"], ["cast", "exp"]]


def test_max_depth_cuts_long_chains():
    x = relay.var("x", shape=(3,))
    body = x
    for _ in range(10):
        body = relay.negative(body)
    _, after = fuse(body, [x], **{"relay.FuseOps.max_depth": 3})
    assert [len(g) for g in groups(after)] == [3, 3, 3, 1]
    assert [len(g) for g in groups(fuse(body, [x])[1])] == [10]


def test_opt_level_zero_makes_one_function_per_op():
    x = relay.var("x", shape=(4,))
    body = relay.exp(relay.add(relay.reshape(x, (2, 2)), relay.const(1.0)))
    _, after = fuse(body, [x], opt_level=0)
    assert groups(after) == [["reshape"], ["add"], ["exp"]]
    add = after["main"].body.args[0]
    assert isinstance(add.args[1], relay.Constant)  # the scalar became an argument
    reshape_fn = add.args[0].op
    assert reshape_fn.attrs["relay.reshape_only"] == 1


def test_reshape_only_groups_are_marked():
    x = relay.var("x", shape=(2, 3, 4))
    body = relay.nn.batch_flatten(relay.expand_dims(x, 0))
    _, after = fuse(relay.sum(body, axis=1), [x])
    flat = after["main"].body.args[0].op
    assert flat.attrs["relay.reshape_only"] == 1


def test_fusing_twice_changes_nothing_and_defuse_restores(rng):
    x = relay.var("x", shape=(1, 3, 6, 6))
    w = relay.var("w", shape=(4, 3, 3, 3))
    body = relay.nn.max_pool2d(relay.nn.relu(relay.nn.conv2d(x, w, kernel_size=(3, 3), channels=4)),
                               pool_size=(2, 2), strides=(2, 2))
    before, once = fuse(body, [x, w])
    twice = apply(FuseOps(), once)
    assert_structural_equal(once, twice)
    assert_structural_equal(apply(DefuseOps(), once), before)


def test_fused_calls_carry_the_provenance_of_their_ops():
    x = relay.var("x", shape=(2,))
    a = Call(Op.get("exp"), [x], source_names=("Exp_0",))
    b = Call(Op.get("tanh"), [a], source_names=("Tanh_1",))
    _, after = fuse(b, [x])
    call = after["main"].body
    assert call.source_names == ("Exp_0", "Tanh_1")
    assert [n.source_names for n in post_order(call.op.body) if isinstance(n, Call)] == [
        ("Exp_0",), ("Tanh_1",)]


def test_input_module_is_not_mutated():
    x = relay.var("x", shape=(2, 3))
    run_unchanged_input(FuseOps(), module(relay.exp(relay.add(x, x)), [x]))


# --- property: random graphs keep their values after fusion ------------------------------------

_OPS = ["exp_tanh", "add_const", "mul_self", "reshape", "transpose", "sum_keep", "relu",
        "broadcast_add", "concat_self_split"]


def _build(x, steps):
    expr = x
    for step in steps:
        if step == "exp_tanh":
            expr = relay.exp(relay.tanh(expr))
        elif step == "add_const":
            expr = relay.add(expr, relay.const(0.5))
        elif step == "mul_self":
            expr = relay.multiply(expr, relay.negative(expr))
        elif step == "reshape":
            expr = relay.reshape(expr, (6, 4))
            expr = relay.reshape(expr, (4, 6))
        elif step == "transpose":
            expr = relay.transpose(relay.transpose(expr))
        elif step == "sum_keep":
            expr = relay.add(expr, relay.sum(expr, axis=1, keepdims=True))
        elif step == "relu":
            expr = relay.nn.relu(expr)
        elif step == "broadcast_add":
            expr = relay.add(expr, relay.const(np.linspace(-1, 1, 6, dtype="float32")))
        elif step == "concat_self_split":
            expr = relay.split(relay.concatenate([expr, relay.exp(expr)], axis=0), 2, axis=0)[1]
    return expr


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(_OPS), min_size=1, max_size=8), st.integers(0, 3),
       st.integers(0, 2**16))
def test_random_graphs_keep_values_after_fusion(steps, opt_level, seed):
    x = relay.var("x", shape=(4, 6))
    before = module(_build(x, steps), [x])
    after = apply(FuseOps(), before, opt_level=opt_level)
    for node in post_order(after["main"], into_functions=False):
        if isinstance(node, Call):
            assert isinstance(node.op, Function) and node.op.attrs["Primitive"] == 1
    xv = np.random.default_rng(seed).uniform(-1, 1, (4, 6)).astype("float32")
    assert_same_values(before, after, {"x": xv})


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_depth_cap_holds_for_any_cap(depth):
    x = relay.var("x", shape=(3,))
    body = x
    for i in range(12):
        body = relay.add(relay.exp(body), relay.const(float(i)))
    _, after = fuse(body, [x], **{"relay.FuseOps.max_depth": depth})
    assert max(len(g) for g in groups(after)) <= depth


def test_fused_size_count_stops_past_the_cap():
    """The count of a group-to-be stops once it passes the cap: the walk from a node to a far
    post-dominator would otherwise cross the rest of the graph for every node."""
    from kiln.transform.graph_partitioner import GraphPartitioner, build_forward_graph

    x = relay.var("x", shape=(3,))
    body = x
    for i in range(40):
        body = relay.add(relay.exp(body), relay.const(float(i)))
    graph = build_forward_graph(module(body, [x])["main"])
    part = GraphPartitioner(opt_level=0, max_fuse_depth=256)
    part.partition(graph)
    order = graph.post_dfs_order
    first, last = order[1], order[-1]
    assert part.count_fused_nodes(first, last, limit=10**6) == 80  # 40 exp + 40 add
    assert 5 < part.count_fused_nodes(first, last, limit=5) <= 6


# --- cases from TVM's own FuseOps tests (tests/python/relay/test_pass_fuse_ops.py) -------------
# The expected structures below are TVM's expected results for the same inputs.

def _call(params, body, args, **kw):
    return relay.Call(fused(params, body, **kw), args)


def test_tvm_conv2d_fuse():
    dshape = (1, 16, 64, 64)
    x = relay.var("x", shape=dshape)
    w1, w2, w3 = (relay.var(f"w{i}", shape=(16, 16, k, k)) for i, k in ((1, 3), (2, 1), (3, 3)))
    y = relay.nn.conv2d(relay.add(x, relay.const(1.0)), w1, kernel_size=(3, 3), padding=(1, 1),
                        channels=16)
    y = relay.add(y, relay.add(relay.const(1.0), y))
    z2 = relay.nn.conv2d(y, w2, kernel_size=(1, 1), padding=(0, 0), channels=16)
    z3 = relay.nn.conv2d(y, w3, kernel_size=(3, 3), padding=(1, 1), channels=16)
    _, after = fuse(relay.add(z2, z3), [x, w1, w2, w3])

    def p(name, shape):
        return relay.var(name, shape=shape)

    a = p("p0", dshape)
    f0 = _call([a], relay.add(a, relay.const(1.0)), [x])
    a, b = p("p0", dshape), p("p1", (16, 16, 3, 3))
    conv = relay.nn.conv2d(a, b, kernel_size=(3, 3), padding=(1, 1), channels=16)
    f1 = _call([a, b], relay.add(conv, relay.add(relay.const(1.0), conv)), [f0, w1])
    a, b = p("p0", dshape), p("p1", (16, 16, 3, 3))
    f2 = _call([a, b], relay.nn.conv2d(a, b, kernel_size=(3, 3), padding=(1, 1), channels=16), [f1, w3])
    a, b, c = p("p0", dshape), p("p1", (16, 16, 1, 1)), p("p2", dshape)
    f3 = _call([a, b, c], relay.add(relay.nn.conv2d(a, b, kernel_size=(1, 1), padding=(0, 0),
                                                    channels=16), c), [f1, w2, f2])
    assert_structural_equal(after, module(f3, [x, w1, w2, w3]))


def test_tvm_concatenate_and_tuple_root():
    dshape = (1, 16, 64, 64)
    half = (1, 16, 32, 32)
    x = relay.var("x", shape=dshape)
    pooled = relay.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2), padding=(0, 0))
    upsampled = relay.nn.upsampling(pooled, scale_h=2, scale_w=2, layout="NCHW")
    out = relay.add(relay.concatenate((upsampled, x), axis=1), relay.const(1.0))
    _, after = fuse(out, [x])
    a = relay.var("p0", shape=dshape)
    f0 = _call([a], relay.nn.max_pool2d(a, pool_size=(2, 2), strides=(2, 2), padding=(0, 0)), [x])
    b, c = relay.var("p0", shape=half), relay.var("p1", shape=dshape)
    up = relay.nn.upsampling(b, scale_h=2, scale_w=2, layout="NCHW")
    f1 = _call([b, c], relay.add(relay.concatenate((up, c), axis=1), relay.const(1.0)), [f0, x])
    assert_structural_equal(after, module(f1, [x]))

    _, after = fuse(relay.Tuple((upsampled, x)), [x])
    a = relay.var("p0", shape=dshape)
    f0 = _call([a], relay.nn.max_pool2d(a, pool_size=(2, 2), strides=(2, 2), padding=(0, 0)), [x])
    b = relay.var("p0", shape=half)
    f1 = _call([b], relay.nn.upsampling(b, scale_h=2, scale_w=2, layout="NCHW"), [f0])
    assert_structural_equal(after, module(relay.Tuple((f1, x)), [x]))


def test_tvm_tuple_get_elemwise_and_tuple_get_root():
    dim = 10
    x, w = relay.var("X", shape=(1, dim)), relay.var("W", shape=(3 * dim, dim))
    s = relay.split(relay.nn.dense(x, w), indices_or_sections=3, axis=1)
    out = relay.add(relay.sigmoid(s[0]), relay.multiply(relay.tanh(s[1]), relay.exp(s[2])))
    _, after = fuse(out, [x, w])
    a, b = relay.var("p0", shape=(1, dim)), relay.var("p1", shape=(3 * dim, dim))
    f0 = _call([a, b], relay.nn.dense(a, b), [x, w])
    c = relay.var("p0", shape=(1, 3 * dim))
    t = relay.split(c, indices_or_sections=3, axis=1)
    f1 = _call([c], relay.add(relay.sigmoid(t[0]), relay.multiply(relay.tanh(t[1]), relay.exp(t[2]))),
               [f0])
    assert_structural_equal(after, module(f1, [x, w]))

    x, w = relay.var("X", shape=(1, 3 * dim)), relay.var("W", shape=(dim, dim))
    _, after = fuse(relay.nn.dense(relay.split(x, 3, axis=1)[0], w), [x, w])
    a = relay.var("p0", shape=(1, 3 * dim))
    f0 = _call([a], relay.split(a, 3, axis=1)[0], [x])
    b, c = relay.var("p0", shape=(1, dim)), relay.var("p1", shape=(dim, dim))
    assert_structural_equal(after, module(_call([b, c], relay.nn.dense(b, c), [f0, w]), [x, w]))


def _intermediate_tuple(x):
    ys = [relay.add(x, relay.const(1.0)) for _ in range(3)]
    return relay.add(relay.concatenate(ys, axis=1), relay.const(1.0))


def test_tvm_tuple_intermediate_and_consecutive():
    dshape = (1, 16, 64, 64)

    def intermediate(x):
        inj = relay.squeeze(x)
        y1 = relay.add(inj, relay.const(1.0))
        y2 = relay.add(relay.add(relay.squeeze(inj), relay.const(1.0)), relay.const(1.0))
        y3 = relay.add(inj, relay.const(1.0))
        return relay.add(relay.squeeze(relay.concatenate((y1, y2, y3), axis=1)), relay.const(1.0))

    x = relay.var("x", shape=dshape)
    _, after = fuse(intermediate(x), [x])
    p = relay.var("p0", shape=dshape)
    assert_structural_equal(after, module(_call([p], intermediate(p), [x]), [x]))

    def consecutive(x):
        return relay.concatenate([_intermediate_tuple(x) for _ in range(3)], axis=1)

    x = relay.var("x", shape=(1, 4, 8, 8))
    pooled = relay.nn.max_pool2d(consecutive(x), pool_size=(2, 2), strides=(2, 2), padding=(0, 0))
    out = relay.add(pooled, relay.const(1.0))
    _, after = fuse(relay.Tuple((out, relay.add(out, relay.const(1.0)))), [x])
    a = relay.var("p0", shape=(1, 4, 8, 8))
    f0 = _call([a], consecutive(a), [x])
    b = relay.var("p0", shape=(1, 36, 8, 8))
    f1 = _call([b], relay.add(relay.nn.max_pool2d(b, pool_size=(2, 2), strides=(2, 2),
                                                  padding=(0, 0)), relay.const(1.0)), [f0])
    c = relay.var("p0", shape=(1, 36, 4, 4))
    f2 = _call([c], relay.add(c, relay.const(1.0)), [f1])
    assert_structural_equal(after, module(relay.Tuple((f1, f2)), [x]))


def test_tvm_inception_like():
    dshape = (1, 4, 8, 8)
    ws = [relay.var(f"w{i}", shape=(4, 4 if i < 2 else 8, 3, 3)) for i in range(4)]

    def conv(data, w):
        return relay.nn.relu(relay.nn.conv2d(data, w, kernel_size=(3, 3), padding=(1, 1), channels=4))

    x = relay.var("x", shape=dshape)
    in1 = relay.concatenate((conv(x, ws[0]), conv(x, ws[1])), axis=1)
    in2 = relay.concatenate((conv(in1, ws[2]), conv(in1, ws[3])), axis=1)
    _, after = fuse(in2, [x, *ws])

    def conv_call(data, w, shape):
        a, b = relay.var("p0", shape=shape), relay.var("p1", w.checked_type)
        return _call([a, b], conv(a, b), [data, w])

    def concat_call(c1, c2):
        a, b = relay.var("p0", shape=dshape), relay.var("p1", shape=dshape)
        return _call([a, b], relay.concatenate((a, b), axis=1), [c1, c2])

    wide = (1, 8, 8, 8)
    concat1 = concat_call(conv_call(x, ws[0], dshape), conv_call(x, ws[1], dshape))
    out = concat_call(conv_call(concat1, ws[2], wide), conv_call(concat1, ws[3], wide))
    assert_structural_equal(after, module(out, [x, *ws]))


def test_tvm_parallel_injective_and_reduce_of_scalar():
    x = relay.var("x", shape=(10, 20))
    y = relay.add(x, relay.const(1.0))
    body = relay.maximum(relay.squeeze(y), relay.transpose(y, axes=[0, 1]))
    _, after = fuse(body, [x])
    p = relay.var("p0", shape=(10, 20))
    q = relay.add(p, relay.const(1.0))
    expected = _call([p], relay.maximum(relay.squeeze(q), relay.transpose(q, axes=[0, 1])), [x])
    assert_structural_equal(after, module(expected, [x]))

    s = relay.var("x", shape=(), dtype="int32")
    _, after = fuse(relay.min(relay.less(s, relay.const(10, "int32"))), [s])
    p = relay.var("p0", shape=(), dtype="int32")
    expected = _call([p], relay.min(relay.less(p, relay.const(10, "int32"))), [s])
    assert_structural_equal(after, module(expected, [s]))


def test_tvm_fuse_max_diamond_and_softmax():
    def diamond(x, n):
        a, b = x, x
        for _ in range(n):
            a, b = relay.exp(a), relay.exp(b)
        return relay.add(a, b)

    x = relay.var("x", shape=(10, 20))
    out = x
    for _ in range(3):
        out = diamond(out, 5)
    _, after = fuse(out, [x], **{"relay.FuseOps.max_depth": 11})
    expected = x
    for _ in range(3):
        p = relay.var("p", shape=(10, 20))
        expected = _call([p], diamond(p, 5), [expected])
    assert_structural_equal(after, module(expected, [x]))

    x = relay.var("x", shape=(16, 16))
    _, after = fuse(relay.cast(relay.nn.softmax(x), "float16"), [x])
    p = relay.var("p0", shape=(16, 16))
    assert_structural_equal(after, module(_call([p], relay.cast(relay.nn.softmax(p), "float16"), [x]),
                                          [x]))


def test_defuse_does_not_mutate_its_input():
    x = relay.var("x", shape=(2, 3))
    _, fused_mod = fuse(relay.exp(relay.add(x, relay.const(1.0))), [x])
    run_unchanged_input(DefuseOps(), fused_mod)


def test_reshape_of_an_inline_constant_is_a_real_kernel():
    x = relay.var("x", shape=(2,))
    body = relay.Tuple([relay.exp(x), relay.expand_dims(relay.const(1.0), 0)])
    _, after = fuse(body, [x], opt_level=1)
    fn = after["main"].body.fields[1].op
    assert "relay.reshape_only" not in fn.attrs and fn.params == ()


# --- Kiln's rule: a last-axis softmax absorbs its element-wise producers ----------------------

def test_softmax_absorbs_the_attention_scale_and_mask(rng):
    s = relay.var("s", shape=(1, 2, 4, 4))
    m = relay.var("m", shape=(1, 1, 1, 4))
    body = relay.nn.softmax(relay.add(relay.multiply(s, relay.const(0.5)), m), axis=-1)
    before, after = fuse(body, [s, m], opt_level=3)
    p0, p1 = relay.var("p0", shape=(1, 2, 4, 4)), relay.var("p1", shape=(1, 1, 1, 4))
    expected = _call([p0, p1], relay.nn.softmax(
        relay.add(relay.multiply(p0, relay.const(0.5)), p1), axis=-1), [s, m])
    assert_structural_equal(after, module(expected, [s, m]))
    assert_same_values(before, after, random_inputs(before, rng))


@pytest.mark.parametrize("op", [relay.nn.softmax, relay.nn.log_softmax, relay.nn.fast_softmax])
def test_softmax_family_takes_a_diamond_of_producers_and_its_consumers(op, rng):
    x = relay.var("x", shape=(3, 8))
    e = relay.exp(x)
    body = relay.cast(op(relay.add(relay.tanh(e), relay.sigmoid(e)), axis=1), "float16")
    before, after = fuse(body, [x])
    name = op(x).op.name
    assert groups(after) == [["exp", "tanh", "sigmoid", "add", name, "cast"]]
    assert_same_values(before, after, random_inputs(before, rng), rtol=1e-3, atol=1e-3)


def test_softmax_rule_leaves_anchor_epilogues_injective_producers_and_other_axes(rng):
    a = relay.var("a", shape=(2, 4, 8))
    b = relay.var("b", shape=(2, 8, 4))
    scores = relay.multiply(relay.nn.batch_matmul(a, b, transpose_b=False), relay.const(0.5))
    # TVM's rule comes first: the scale is the product's epilogue
    assert groups(fuse(relay.nn.softmax(scores), [a, b])[1]) == \
        [["nn.batch_matmul", "multiply"], ["nn.softmax"]]
    x = relay.var("x", shape=(4, 6))
    # an injective producer (the template reads rows; a transpose would not be one)
    assert groups(fuse(relay.nn.softmax(relay.transpose(relay.exp(x))), [x])[1]) == \
        [["exp", "transpose"], ["nn.softmax"]]
    # a softmax over a leading axis keeps TVM's grouping
    assert groups(fuse(relay.nn.softmax(relay.exp(x), axis=0), [x])[1]) == \
        [["exp"], ["nn.softmax"]]
    # a producer that is also used elsewhere stays where TVM puts it
    e = relay.exp(x)
    before, after = fuse(relay.Tuple([relay.nn.softmax(e), relay.negative(e)]), [x])
    assert groups(after) == [["exp"], ["nn.softmax"], ["negative"]]
    assert_same_values(before, after, random_inputs(before, rng))


def test_softmax_rule_respects_the_depth_cap():
    x = relay.var("x", shape=(2, 5))
    body = x
    for _ in range(4):
        body = relay.exp(body)
    _, after = fuse(relay.nn.softmax(body), [x], **{"relay.FuseOps.max_depth": 3})
    assert max(len(g) for g in groups(after)) <= 3


# --- after SimplifyExpr: exported dense / batch_matmul epilogues are one kernel each ---------

def test_exported_encoder_epilogues_fuse_into_their_products(rng):
    """MatMul on (1, T, C) inputs as exporters write them (flatten, dense, reshape back, bias,
    erf GELU, residual add) and attention scores (batch_matmul, reshape to 4-d, scale, mask)."""
    x = relay.var("x", shape=(1, 6, 4))
    w = relay.var("w", shape=(8, 4))
    b = relay.const(np.linspace(-1, 1, 8, dtype="float32"))
    r = relay.var("r", shape=(1, 6, 8))
    h = relay.add(relay.reshape(relay.nn.dense(relay.reshape(x, (6, 4)), w), (1, 6, 8)), b)
    gelu = relay.multiply(relay.multiply(h, relay.add(relay.erf(relay.multiply(
        h, relay.const(0.7071))), relay.const(1.0))), relay.const(0.5))
    q = relay.var("q", shape=(2, 6, 3))
    k = relay.var("k", shape=(2, 3, 6))
    mask = relay.var("mask", shape=(1, 1, 1, 6))
    scores = relay.add(relay.multiply(relay.reshape(relay.nn.batch_matmul(q, k, transpose_b=False),
                                                    (1, 2, 6, 6)), relay.const(0.5)), mask)
    body = relay.Tuple([relay.add(gelu, r), relay.nn.softmax(scores)])
    before = module(body, [x, w, r, q, k, mask])
    simplified = apply(SimplifyExpr(), before, opt_level=3)
    after = apply(FuseOps(), simplified, opt_level=3)
    found = groups(after)
    dense = next(g for g in found if "nn.dense" in g)
    assert dense[0] == "nn.dense" and {"erf", "add", "multiply"} <= set(dense)
    assert "reshape" not in dense
    bmm = next(g for g in found if "nn.batch_matmul" in g)
    assert bmm == ["nn.batch_matmul", "multiply", "add"]
    assert ["nn.softmax"] in found
    assert_same_values(before, after, random_inputs(before, rng), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("link_params", [False, True])
def test_link_params_keeps_constants_inside_groups(link_params):
    # TVM's test_fuse_take: constants become parameters unless relay.FuseOps.link_params
    x = relay.var("x", shape=(10, 1))
    c = relay.const(np.array([0], "int64"))
    before = module(relay.take(relay.concatenate([x, x], axis=-1), c), [x])
    after = apply(FuseOps(), before, opt_level=2, **{"relay.FuseOps.link_params": link_params})
    p0 = relay.var("p0", shape=(10, 1))
    p1 = relay.var("p1", shape=(1,), dtype="int64")
    body = relay.take(relay.concatenate([p0, p0], axis=-1), c if link_params else p1)
    fn = fused([p0] if link_params else [p0, p1], body)
    x2 = relay.var("x", shape=(10, 1))
    expected = module(relay.Call(fn, [x2] if link_params else [x2, c]), [x2])
    assert_structural_equal(after, expected)
    assert_same_values(before, after, {"x": np.arange(10, dtype="float32").reshape(10, 1)})


def test_call_of_a_computed_function_keeps_its_callee():
    # TVM's test_fuse_myia_regression: the callee is an `if` choosing between two functions
    def build(fuse: bool):
        x = relay.var("x", shape=(), dtype="int64")
        y = relay.var("y", shape=(), dtype="int64")
        if fuse:
            p1 = relay.var("p1", shape=(), dtype="int64")
            p2 = relay.var("p2", shape=(), dtype="int64")
            cond = relay.Call(fused([p1, p2], relay.greater(p1, p2)), [x, y])
        else:
            cond = relay.greater(x, y)
        sb = relay.ScopeBuilder()
        with sb.if_scope(cond):
            sb.ret(relay.Function([], x))
        with sb.else_scope():
            sb.ret(relay.Function([], y))
        return module(relay.Call(sb.get(), []), [x, y])

    before = build(False)
    assert isinstance(before["main"].body.op, relay.If)
    assert_structural_equal(apply(FuseOps(), before), build(True))
