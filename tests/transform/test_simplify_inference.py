"""SimplifyInference: TVM's arithmetic for batch_norm, dropout and the other normalisations."""

from __future__ import annotations

import numpy as np
import pytest
from _pass_helpers import apply, assert_same_values, module, random_inputs, run_unchanged_input

from kiln import relay
from kiln.interpreter import evaluate
from kiln.ir import assert_structural_equal, post_order
from kiln.ir.expr import Call, Op, TupleGetItem
from kiln.transform import FoldConstant, SimplifyInference, bind_params_by_name


def _bn_vars(c: int, dtype: str = "float32") -> list[relay.Var]:
    return [relay.var(n, shape=(c,), dtype=dtype) for n in ("gamma", "beta", "mean", "var")]


def test_batch_norm_becomes_tvm_scale_and_shift():
    x = relay.var("x", shape=(1, 4, 5, 5))
    g, b, m, v = _bn_vars(4)
    before = module(relay.nn.batch_norm(x, g, b, m, v)[0], [x, g, b, m, v])
    after = apply(SimplifyInference(), before)

    scale = relay.multiply(relay.divide(relay.const(1.0), relay.sqrt(relay.add(v, relay.const(1e-5)))), g)
    shift = relay.add(relay.multiply(relay.negative(m), scale), b)
    body = relay.add(relay.multiply(x, relay.expand_dims(scale, 1, 2)), relay.expand_dims(shift, 1, 2))
    assert_structural_equal(after, module(body, [x, g, b, m, v]))


@pytest.mark.parametrize("shape,axis", [((2, 3, 4, 4), 1), ((2, 4, 4, 3), 3), ((2, 3, 4, 4), -3),
                                        ((5, 6), 1)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("center,scale", [(True, True), (False, True), (True, False)])
def test_batch_norm_matches_numpy(shape, axis, dtype, center, scale, rng):
    c = shape[axis]
    x = relay.var("x", shape=shape, dtype=dtype)
    g, b, m, v = _bn_vars(c, dtype)
    eps = 1e-3
    before = module(relay.nn.batch_norm(x, g, b, m, v, axis=axis, epsilon=eps, center=center,
                                        scale=scale)[0], [x, g, b, m, v])
    after = apply(SimplifyInference(), before)
    assert not any(isinstance(n, Call) and n.op.name == "nn.batch_norm" for n in post_order(after["main"]))
    inputs = random_inputs(after, rng)
    inputs["var"] = np.abs(inputs["var"]) + 0.1
    bshape = [1] * len(shape)
    bshape[axis] = c
    xv, gv, bv, mv, vv = (inputs[n] for n in ("x", "gamma", "beta", "mean", "var"))
    expected = (xv - mv.reshape(bshape)) / np.sqrt(vv.reshape(bshape) + eps)
    if scale:
        expected = expected * gv.reshape(bshape)
    if center:
        expected = expected + bv.reshape(bshape)
    np.testing.assert_allclose(evaluate(after, inputs), expected.astype(dtype), rtol=1e-5, atol=1e-5)


def test_folded_batch_norm_leaves_one_multiply_and_one_add(rng):
    x = relay.var("x", shape=(1, 8, 6, 6))
    g, b, m, v = _bn_vars(8)
    mod = module(relay.nn.batch_norm(x, g, b, m, v)[0], [x, g, b, m, v])
    params = {"gamma": rng.uniform(0.5, 1.5, 8).astype("float32"),
              "beta": rng.normal(size=8).astype("float32"),
              "mean": rng.normal(size=8).astype("float32"),
              "var": rng.uniform(0.5, 2, 8).astype("float32")}
    bound = module(bind_params_by_name(mod["main"], params).body, [x])
    out = apply(FoldConstant(), apply(SimplifyInference(), bound))
    ops = sorted(n.op.name for n in post_order(out["main"]) if isinstance(n, Call))
    assert ops == ["add", "multiply"]
    assert_same_values(bound, out, {"x": rng.normal(size=(1, 8, 6, 6)).astype("float32")})


def test_dropout_is_identity():
    x = relay.var("x", shape=(3, 4))
    after = apply(SimplifyInference(), module(relay.nn.relu(relay.nn.dropout(x, 0.3)), [x]))
    assert_structural_equal(after, module(relay.nn.relu(x), [x]))


def test_other_batch_norm_outputs_are_kept():
    x = relay.var("x", shape=(1, 2, 3, 3))
    g, b, m, v = _bn_vars(2)
    bn = relay.nn.batch_norm(x, g, b, m, v)
    before = module(relay.Tuple([bn[0], bn[1]]), [x, g, b, m, v])
    after = apply(SimplifyInference(), before)
    assert any(isinstance(n, Call) and n.op.name == "nn.batch_norm" for n in post_order(after["main"]))


def _moments(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    x64 = x.astype(np.float64)
    return x64.mean(axis=axes, keepdims=True), x64.var(axis=axes, keepdims=True)


@pytest.mark.parametrize("shape,axis", [((2, 5, 6), -1), ((3, 4, 2), 1)])
def test_layer_norm_matches_numpy(shape, axis, rng):
    x = relay.var("x", shape=shape)
    c = shape[axis]
    g, b = relay.var("g", shape=(c,)), relay.var("b", shape=(c,))
    after = apply(SimplifyInference(), module(relay.nn.layer_norm(x, g, b, axis=axis, epsilon=1e-4),
                                              [x, g, b]))
    inputs = random_inputs(after, rng)
    mean, var = _moments(inputs["x"], (axis,))
    bshape = [1] * len(shape)
    bshape[axis] = c
    expected = (inputs["x"] - mean) / np.sqrt(var + 1e-4) * inputs["g"].reshape(bshape) \
        + inputs["b"].reshape(bshape)
    np.testing.assert_allclose(evaluate(after, inputs), expected, rtol=1e-4, atol=1e-5)


def test_instance_norm_matches_numpy(rng):
    x = relay.var("x", shape=(2, 3, 4, 5))
    g, b = relay.var("g", shape=(3,)), relay.var("b", shape=(3,))
    after = apply(SimplifyInference(), module(relay.nn.instance_norm(x, g, b), [x, g, b]))
    inputs = random_inputs(after, rng)
    mean, var = _moments(inputs["x"], (2, 3))
    expected = (inputs["x"] - mean) / np.sqrt(var + 1e-5) * inputs["g"].reshape(1, 3, 1, 1) \
        + inputs["b"].reshape(1, 3, 1, 1)
    np.testing.assert_allclose(evaluate(after, inputs), expected, rtol=1e-4, atol=1e-5)


def test_group_norm_matches_numpy(rng):
    x = relay.var("x", shape=(2, 6, 3, 3))
    g, b = relay.var("g", shape=(6,)), relay.var("b", shape=(6,))
    after = apply(SimplifyInference(), module(relay.nn.group_norm(x, g, b, num_groups=3), [x, g, b]))
    inputs = random_inputs(after, rng)
    grouped = inputs["x"].reshape(2, 3, 2, 3, 3)
    mean, var = _moments(grouped, (2, 3, 4))
    expected = ((grouped - mean) / np.sqrt(var + 1e-5)).reshape(2, 6, 3, 3) \
        * inputs["g"].reshape(1, 6, 1, 1) + inputs["b"].reshape(1, 6, 1, 1)
    np.testing.assert_allclose(evaluate(after, inputs), expected, rtol=1e-4, atol=1e-5)


def test_l2_normalize_matches_numpy(rng):
    x = relay.var("x", shape=(3, 4))
    after = apply(SimplifyInference(), module(relay.nn.l2_normalize(x, 1e-6, axis=[1]), [x]))
    xv = rng.normal(size=(3, 4)).astype("float32")
    expected = xv / np.sqrt(np.maximum((xv.astype(np.float64) ** 2).sum(1, keepdims=True), 1e-6))
    np.testing.assert_allclose(evaluate(after, {"x": xv}), expected, rtol=1e-5)


def test_input_module_is_not_mutated():
    x = relay.var("x", shape=(1, 2, 3, 3))
    g, b, m, v = _bn_vars(2)
    mod = module(relay.nn.batch_norm(x, g, b, m, v)[0], [x, g, b, m, v])
    run_unchanged_input(SimplifyInference(), mod, opt_level=0)


def test_arithmetic_keeps_the_batch_norm_provenance():
    x = relay.var("x", shape=(1, 2, 3, 3))
    g, b, m, v = _bn_vars(2)
    bn = Call(Op.get("nn.batch_norm"), [x, g, b, m, v],
              relay.nn.batch_norm(x, g, b, m, v).astuple().attrs, source_names=("bn_1",))
    after = apply(SimplifyInference(), module(TupleGetItem(bn, 0), [x, g, b, m, v]))
    calls = [n for n in post_order(after["main"]) if isinstance(n, Call)]
    assert calls and all(c.source_names == ("bn_1",) for c in calls)
