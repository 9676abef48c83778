"""FoldScaleAxis: per-channel scales move into conv/dense weights, forward and backward."""

from __future__ import annotations

import time

import numpy as np
import pytest
from _pass_helpers import apply, assert_same_values, module, run_unchanged_input

from kiln import relay
from kiln.ir import assert_structural_equal, post_order
from kiln.ir.expr import Call, Op
from kiln.transform import (
    BackwardFoldScaleAxis,
    FoldConstant,
    FoldScaleAxis,
    ForwardFoldScaleAxis,
    InferType,
    SimplifyInference,
    bind_params_by_name,
)


def ops(mod) -> list[str]:
    return [n.op.name for n in post_order(mod["main"]) if isinstance(n, Call)]


def const(a):
    return relay.const(np.asarray(a, "float32"))


@pytest.fixture
def conv_case(rng):
    x = relay.var("x", shape=(1, 3, 8, 8))
    w = rng.normal(size=(4, 3, 3, 3)).astype("float32")
    s = rng.uniform(0.5, 2.0, 4).astype("float32")
    return x, w, s


def test_backward_multiply_folds_into_conv_weight(conv_case, rng):
    x, w, s = conv_case
    conv = relay.nn.conv2d(x, const(w), padding=(1, 1), channels=4, kernel_size=(3, 3))
    before = module(relay.multiply(conv, const(s.reshape(4, 1, 1))), [x])
    after = apply(FoldScaleAxis(), before)
    expected = relay.nn.conv2d(x, const(w * s.reshape(4, 1, 1, 1)), padding=(1, 1), channels=4,
                               kernel_size=(3, 3))
    assert_structural_equal(after, module(expected, [x]))
    assert_same_values(before, after, {"x": rng.normal(size=(1, 3, 8, 8)).astype("float32")})


def test_backward_through_bias_add_and_relu(conv_case, rng):
    x, w, s = conv_case
    b = rng.normal(size=4).astype("float32")
    conv = relay.nn.conv2d(x, const(w), channels=4, kernel_size=(3, 3))
    body = relay.multiply(relay.nn.relu(relay.nn.bias_add(conv, const(b))), const(s.reshape(4, 1, 1)))
    before = module(body, [x])
    after = apply(FoldScaleAxis(), before)
    expected = relay.nn.relu(relay.nn.bias_add(
        relay.nn.conv2d(x, const(w * s.reshape(4, 1, 1, 1)), channels=4, kernel_size=(3, 3)),
        const(b * s)))
    assert_structural_equal(after, module(expected, [x]))
    assert_same_values(before, after, {"x": rng.normal(size=(1, 3, 8, 8)).astype("float32")})


def test_negative_scale_does_not_cross_relu(conv_case):
    x, w, s = conv_case
    conv = relay.nn.conv2d(x, const(w), channels=4, kernel_size=(3, 3))
    body = relay.multiply(relay.nn.relu(conv), const(-s.reshape(4, 1, 1)))
    after = apply(FoldScaleAxis(), module(body, [x]))
    assert "multiply" in ops(after)


def test_backward_through_add_of_per_channel_constant(conv_case, rng):
    x, w, s = conv_case
    c = rng.normal(size=(4, 1, 1)).astype("float32")
    conv = relay.nn.conv2d(x, const(w), channels=4, kernel_size=(3, 3))
    before = module(relay.multiply(relay.add(conv, const(c)), const(s.reshape(4, 1, 1))), [x])
    after = apply(FoldScaleAxis(), before)
    assert ops(after) == ["nn.conv2d", "add"]
    assert_same_values(before, after, {"x": rng.normal(size=(1, 3, 8, 8)).astype("float32")})


def test_conv_with_two_users_is_not_scaled(conv_case):
    x, w, s = conv_case
    conv = relay.nn.conv2d(x, const(w), channels=4, kernel_size=(3, 3))
    body = relay.Tuple([relay.multiply(conv, const(s.reshape(4, 1, 1))), conv])
    after = apply(BackwardFoldScaleAxis(), module(body, [x]))
    assert "multiply" in ops(after)


def test_forward_scale_through_relu_folds_into_input_channels(rng):
    x = relay.var("x", shape=(1, 3, 8, 8))
    w = rng.normal(size=(4, 3, 3, 3)).astype("float32")
    s = rng.uniform(0.5, 2.0, 3).astype("float32")
    scaled = relay.nn.relu(relay.multiply(x, const(s.reshape(3, 1, 1))))
    before = module(relay.nn.conv2d(scaled, const(w), channels=4, kernel_size=(3, 3)), [x])
    after = apply(FoldScaleAxis(), before)
    expected = relay.nn.conv2d(relay.nn.relu(x), const(w * s.reshape(3, 1, 1)), channels=4,
                               kernel_size=(3, 3))
    assert_structural_equal(after, module(expected, [x]))
    assert_same_values(before, after, {"x": rng.normal(size=(1, 3, 8, 8)).astype("float32")})
    negative = relay.nn.relu(relay.multiply(x, const(-s.reshape(3, 1, 1))))
    after = apply(ForwardFoldScaleAxis(), module(relay.nn.conv2d(negative, const(w)), [x]))
    assert "multiply" in ops(after)


def test_forward_scale_through_per_channel_add(rng):
    x = relay.var("x", shape=(1, 3, 6, 6))
    w = rng.normal(size=(2, 3, 1, 1)).astype("float32")
    s = rng.uniform(0.5, 2.0, (3, 1, 1)).astype("float32")
    b = rng.normal(size=(3, 1, 1)).astype("float32")
    data = relay.add(relay.multiply(x, const(s)), const(b))
    before = module(relay.nn.conv2d(data, const(w), channels=2, kernel_size=(1, 1)), [x])
    after = apply(FoldScaleAxis(), before)
    assert ops(after) == ["add", "nn.conv2d"]
    assert_same_values(before, after, {"x": rng.normal(size=(1, 3, 6, 6)).astype("float32")})


def test_forward_scale_with_another_user_is_kept(rng):
    x = relay.var("x", shape=(1, 3, 6, 6))
    y = relay.multiply(x, const(rng.uniform(0.5, 2, (3, 1, 1))))
    w = const(rng.normal(size=(2, 3, 1, 1)))
    after = apply(ForwardFoldScaleAxis(), module(relay.Tuple([relay.nn.conv2d(y, w), relay.exp(y)]), [x]))
    assert "multiply" in ops(after)


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_dense(direction, rng):
    x = relay.var("x", shape=(2, 5))
    w = rng.normal(size=(3, 5)).astype("float32")
    if direction == "forward":
        body = relay.nn.dense(relay.multiply(x, const(rng.uniform(0.5, 2, 5))), const(w))
    else:
        body = relay.multiply(relay.nn.dense(x, const(w)), const(rng.uniform(0.5, 2, 3)))
    before = module(body, [x])
    after = apply(FoldScaleAxis(), before)
    assert ops(after) == ["nn.dense"]
    assert_same_values(before, after, {"x": rng.normal(size=(2, 5)).astype("float32")})


def test_nhwc_and_depthwise_layouts(rng):
    x = relay.var("x", shape=(1, 6, 6, 4))
    w = const(rng.normal(size=(3, 3, 4, 8)))
    s = const(rng.uniform(0.5, 2, 8))
    conv = relay.nn.conv2d(x, w, channels=8, kernel_size=(3, 3), data_layout="NHWC",
                           kernel_layout="HWIO")
    before = module(relay.multiply(conv, s), [x])
    after = apply(FoldScaleAxis(), before)
    assert ops(after) == ["nn.conv2d"]
    assert_same_values(before, after, {"x": rng.normal(size=(1, 6, 6, 4)).astype("float32")})

    y = relay.var("y", shape=(1, 4, 6, 6))
    dw = const(rng.normal(size=(4, 1, 3, 3)))
    scaled = relay.multiply(y, const(rng.uniform(0.5, 2, (4, 1, 1))))
    before = module(relay.nn.conv2d(scaled, dw, groups=4, channels=4, kernel_size=(3, 3)), [y])
    after = apply(FoldScaleAxis(), before)
    assert ops(after) == ["nn.conv2d"]
    assert_same_values(before, after, {"y": rng.normal(size=(1, 4, 6, 6)).astype("float32")})


def test_grouped_conv_is_left_alone(rng):
    x = relay.var("x", shape=(1, 4, 6, 6))
    w = const(rng.normal(size=(4, 2, 3, 3)))
    conv = relay.nn.conv2d(x, w, groups=2, channels=4, kernel_size=(3, 3))
    after = apply(FoldScaleAxis(), module(relay.multiply(conv, const(rng.uniform(1, 2, (4, 1, 1)))), [x]))
    assert "multiply" in ops(after)


def _bn(x, c: int, prefix: str):
    names = [f"{prefix}_{n}" for n in ("gamma", "beta", "mean", "var")]
    return relay.nn.batch_norm(x, *[relay.var(n, shape=(c,)) for n in names])[0]


def test_resnet_stage_shape_folds_every_batch_norm(rng):
    """A pre-activation ResNet unit at ResNet-18's first-stage shape (1x64x56x56)."""
    c = 64
    data = relay.var("data", shape=(1, c, 56, 56))
    w1, w2 = relay.var("conv1_weight", shape=(c, c, 3, 3)), relay.var("conv2_weight", shape=(c, c, 3, 3))
    y = relay.nn.relu(_bn(data, c, "bn1"))
    y = relay.nn.conv2d(y, w1, padding=(1, 1), channels=c, kernel_size=(3, 3))
    y = relay.nn.relu(_bn(y, c, "bn2"))
    y = relay.nn.conv2d(y, w2, padding=(1, 1), channels=c, kernel_size=(3, 3))
    y = _bn(y, c, "bn3")
    mod = InferType()(module(relay.add(y, data)))
    params = {}
    for p in mod["main"].params[1:]:
        shape = p.checked_type.shape
        if p.name_hint.endswith("_var") or p.name_hint.endswith("_gamma"):
            params[p.name_hint] = rng.uniform(0.5, 1.5, shape).astype("float32")
        else:
            params[p.name_hint] = (rng.normal(size=shape) * 0.1).astype("float32")
    bound = module(bind_params_by_name(mod["main"], params).body, [mod["main"].params[0]])
    simplified = apply(FoldConstant(), apply(SimplifyInference(), bound))
    start = time.perf_counter()
    after = apply(FoldScaleAxis(), simplified)
    assert time.perf_counter() - start < 5
    # bn1's scale moves forward into conv1 (through relu: it is positive), bn2's and bn3's
    # backward into conv1 and conv2: the three shifts, the residual add and the relus remain.
    assert sorted(ops(after)) == ["add"] * 4 + ["nn.conv2d"] * 2 + ["nn.relu"] * 2
    x = rng.normal(size=(1, c, 56, 56)).astype("float32")
    assert_same_values(bound, after, {"data": x}, rtol=1e-4, atol=1e-4)


def test_input_module_is_not_mutated(conv_case):
    x, w, s = conv_case
    conv = relay.nn.conv2d(x, const(w), channels=4, kernel_size=(3, 3))
    run_unchanged_input(FoldScaleAxis(), module(relay.multiply(conv, const(s.reshape(4, 1, 1))), [x]))


def test_folded_multiply_names_move_to_the_conv(conv_case):
    x, w, s = conv_case
    conv = Call(Op.get("nn.conv2d"), [x, const(w)],
                relay.nn.conv2d(x, const(w), channels=4, kernel_size=(3, 3)).attrs,
                source_names=("Conv_0",))
    mul = Call(Op.get("multiply"), [conv, const(s.reshape(4, 1, 1))], source_names=("BN_1",))
    after = apply(FoldScaleAxis(), module(mul, [x]))
    assert after["main"].body.op.name == "nn.conv2d"
    assert after["main"].body.source_names == ("Conv_0", "BN_1")


def test_forward_folded_multiply_names_move_to_the_conv(rng):
    x = relay.var("x", shape=(1, 3, 6, 6))
    w = const(rng.normal(size=(2, 3, 1, 1)))
    mul = Call(Op.get("multiply"), [x, const(rng.uniform(0.5, 2, (3, 1, 1)))], source_names=("Mul_0",))
    conv = Call(Op.get("nn.conv2d"), [mul, w], relay.nn.conv2d(x, w).attrs, source_names=("Conv_1",))
    after = apply(FoldScaleAxis(), module(conv, [x]))
    assert after["main"].body.source_names == ("Mul_0", "Conv_1")


# --- blocked layouts (NCHW{c}c data, OIHW{i}i{o}o kernels), as TVM folds them ---------------------

def test_forward_and_backward_fold_through_blocked_layouts(rng):
    x = relay.var("x", shape=(1, 2, 5, 5, 2))  # NCHW2c, 4 channels
    w = rng.normal(size=(2, 2, 3, 3, 2, 4)).astype("float32")  # OIHW2i4o: 8 out, 4 in
    s_in = rng.uniform(0.5, 2.0, (1, 2, 1, 1, 2)).astype("float32")
    s_out = rng.uniform(0.5, 2.0, (1, 2, 1, 1, 4)).astype("float32")
    conv_kw = dict(channels=8, kernel_size=(3, 3), padding=(1, 1), data_layout="NCHW2c",
                   kernel_layout="OIHW2i4o", out_layout="NCHW4c")
    body = relay.nn.conv2d(relay.nn.relu(relay.multiply(x, const(s_in))), const(w), **conv_kw)
    before = module(relay.multiply(body, const(s_out)), [x])
    after = apply(FoldScaleAxis(), before)
    assert ops(after) == ["nn.relu", "nn.conv2d"]  # both scales are in the weight now
    # the input scale along (I, i) = axes 1, 4; the output scale along (O, o) = axes 0, 5
    folded = w * s_in.reshape(1, 2, 1, 1, 2, 1) * s_out.reshape(2, 1, 1, 1, 1, 4)
    expected = relay.nn.conv2d(relay.nn.relu(x), const(folded), **conv_kw)
    np.testing.assert_allclose(after["main"].body.args[1].data.numpy(), folded, rtol=1e-6)
    assert ops(module(expected, [x])) == ops(after)
    assert_same_values(before, after, {"x": rng.normal(size=(1, 2, 5, 5, 2)).astype("float32")})


def test_blocked_data_with_a_plain_kernel_is_left_alone(rng):
    x = relay.var("x", shape=(1, 2, 5, 5, 2))
    w = const(rng.normal(size=(4, 4, 3, 3)).astype("float32"))
    body = relay.nn.conv2d(relay.multiply(x, const(np.full((1, 2, 1, 1, 2), 2.0))), w, channels=4,
                           kernel_size=(3, 3), data_layout="NCHW2c", kernel_layout="OIHW")
    before = module(body, [x])
    assert "multiply" in ops(apply(ForwardFoldScaleAxis(), before))


def multiply_shapes(mod) -> list[tuple[int, ...]]:
    return [tuple(n.checked_type.shape) for n in post_order(mod["main"])
            if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == "multiply"]


@pytest.mark.parametrize("direction", ["backward", "forward"])
def test_run_time_scale_folds_only_into_weights_no_larger_than_its_value(direction, rng):
    """A scale computed from the input (an SE gate, a GRU reset gate) scales the weights at every
    run: a GRU step's gate on a (1, 128) dense output must not rescale the 128 x 128 weight
    (16384 multiplies and a repacking per step instead of 128), while an SE gate on a
    (1, 16, 8, 8) activation is folded into the 16 x 16 1x1 weight next to it."""
    h = relay.var("h", shape=(1, 128))
    w = const(rng.normal(size=(128, 128)))
    if direction == "backward":
        gate = relay.sigmoid(relay.nn.dense(h, const(rng.normal(size=(128, 128)))))
        body = relay.multiply(relay.nn.dense(h, w), gate)
    else:
        gate = relay.sigmoid(relay.sum(h, axis=0, keepdims=True))
        body = relay.nn.dense(relay.multiply(h, gate), w)
    before = module(body, [h])
    after = apply(FoldScaleAxis(), before)
    assert multiply_shapes(after) == [(1, 128)]  # kept on the (1, 128) value
    assert_same_values(before, after, {"h": rng.normal(size=(1, 128)).astype("float32")})

    x = relay.var("x", shape=(1, 16, 8, 8))
    se = relay.sigmoid(relay.mean(x, axis=(2, 3), keepdims=True))
    w1 = const(rng.normal(size=(16, 16, 1, 1)))
    if direction == "backward":
        body = relay.multiply(relay.nn.conv2d(x, w1, channels=16, kernel_size=(1, 1)), se)
    else:
        body = relay.nn.conv2d(relay.multiply(x, se), w1, channels=16, kernel_size=(1, 1))
    before = module(body, [x])
    after = apply(FoldScaleAxis(), before)
    assert (1, 16, 8, 8) not in multiply_shapes(after)  # the gate scales the weight instead
    assert_same_values(before, after, {"x": rng.normal(size=(1, 16, 8, 8)).astype("float32")})
