"""SimplifyExpr: each rule's before/expected, and random chains that must keep their values."""

from __future__ import annotations

import numpy as np
import pytest
from _pass_helpers import apply, assert_same_values, module, random_inputs, run_unchanged_input
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.ir import assert_structural_equal, post_order
from kiln.ir.expr import Call
from kiln.transform import SimplifyExpr
from kiln.transform.rewrite import ensure_types


def simplified(body, params):
    return apply(SimplifyExpr(), module(body, params), opt_level=0)


def assert_simplifies_to(body, expected, params):
    assert_structural_equal(simplified(body, params), module(expected, params))


X = relay.var("x", shape=(2, 3))
Y = relay.var("y", shape=(2, 3))


def test_add_self_becomes_times_two():
    assert_simplifies_to(relay.add(X, X), relay.multiply(X, relay.const(2.0)), [X])


def test_division_by_sqrt_becomes_rsqrt():
    body = relay.divide(X, relay.sqrt(Y))
    assert_simplifies_to(body, relay.multiply(X, relay.rsqrt(Y)), [X, Y])


@pytest.mark.parametrize("build", [
    lambda x: relay.add(x, relay.const(0.0)),
    lambda x: relay.add(relay.const(0.0), x),
    lambda x: relay.subtract(x, relay.const(0.0)),
    lambda x: relay.multiply(x, relay.const(1.0)),
    lambda x: relay.multiply(relay.const(np.ones((1, 1), "float32")), x),
    lambda x: relay.divide(x, relay.const(1.0)),
    lambda x: relay.add(x, relay.zeros_like(x)),
    lambda x: relay.multiply(relay.ones((2, 3), "float32"), x),
], ids=["x+0", "0+x", "x-0", "x*1", "1*x", "x/1", "x+zeros_like", "ones*x"])
def test_identities_disappear(build):
    assert_simplifies_to(relay.exp(build(X)), relay.exp(X), [X])


def test_identity_that_broadcasts_is_kept():
    x = relay.var("x", shape=(3,))
    body = relay.add(x, relay.zeros((2, 3), "float32"))
    out = simplified(body, [x])
    assert out["main"].body.checked_type.shape == (2, 3)
    assert out["main"].body.op.name == "add"


def test_reshape_chains_collapse_and_noops_vanish():
    x = relay.var("x", shape=(2, 3, 4))
    body = relay.reshape(relay.expand_dims(relay.reshape(x, (6, 4)), 0), (4, 6))
    assert_simplifies_to(body, relay.reshape(x, (4, 6)), [x])
    assert_simplifies_to(relay.exp(relay.reshape(x, (2, 3, 4))), relay.exp(x), [x])
    assert_simplifies_to(relay.exp(relay.squeeze(relay.expand_dims(x, 1))),
                         relay.exp(relay.squeeze(relay.expand_dims(x, 1))), [x])


def test_transposes_compose_and_cancel(rng):
    x = relay.var("x", shape=(2, 3, 4))
    twice = relay.transpose(relay.transpose(x, (1, 0, 2)), (2, 0, 1))
    out = simplified(twice, [x])
    assert [n.op.name for n in post_order(out["main"]) if isinstance(n, Call)] == ["transpose"]
    assert_same_values(module(twice, [x]), out, random_inputs(out, rng))
    inverse = relay.transpose(relay.transpose(x, (2, 0, 1)), (1, 2, 0))
    assert_simplifies_to(relay.exp(inverse), relay.exp(x), [x])
    assert_simplifies_to(relay.exp(relay.transpose(x, (0, 1, 2))), relay.exp(x), [x])


def test_casts():
    x16 = relay.var("h", shape=(4,), dtype="float16")
    widening = relay.cast(relay.cast(x16, "float32"), "float64")
    assert_simplifies_to(widening, relay.cast(x16, "float64"), [x16])
    narrowing = relay.cast(relay.cast(X, "int8"), "float32")
    assert_simplifies_to(narrowing, narrowing, [X])
    assert_simplifies_to(relay.exp(relay.cast(X, "float32")), relay.exp(X), [X])
    i = relay.var("i", shape=(1,), dtype="int32")
    assert_simplifies_to(relay.cast_like(X, i), relay.cast(X, "int32"), [X, i])


def test_like_ops_become_static():
    assert_simplifies_to(relay.zeros_like(X), relay.zeros((2, 3), "float32"), [X])
    assert_simplifies_to(relay.ones_like(X), relay.ones((2, 3), "float32"), [X])
    assert_simplifies_to(relay.full_like(X, relay.const(7.0)),
                         relay.full(relay.const(7.0), (2, 3), "float32"), [X])
    v = relay.var("v", shape=(6,))
    assert_simplifies_to(relay.reshape_like(v, X), relay.reshape(v, (2, 3)), [v, X])
    r = relay.var("r", shape=(3,))
    assert_simplifies_to(relay.broadcast_to_like(r, X), relay.broadcast_to(r, (2, 3)), [r, X])


def test_full_operand_of_broadcast_op_becomes_scalar():
    body = relay.maximum(X, relay.full(relay.const(0.5), (2, 3), "float32"))
    assert_simplifies_to(body, relay.maximum(X, relay.const(0.5)), [X])


def test_constants_regroup_for_folding():
    c1, c2 = relay.const(np.array([1.0, 2.0, 3.0], "float32")), relay.const(3.0)
    out = simplified(relay.multiply(relay.add(X, c1), c2), [X])
    expected = relay.add(relay.multiply(X, c2), relay.const(np.array([3.0, 6.0, 9.0], "float32")))
    assert_structural_equal(out, module(expected, [X]))
    out = simplified(relay.multiply(relay.multiply(X, c1), c2), [X])
    assert_structural_equal(out, module(relay.multiply(X, relay.const(
        np.array([3.0, 6.0, 9.0], "float32"))), [X]))
    out = simplified(relay.add(relay.add(c2, X), c1), [X])
    assert_structural_equal(out, module(relay.add(X, relay.const(
        np.array([4.0, 5.0, 6.0], "float32"))), [X]))


def test_clip_covering_the_dtype_range_is_removed():
    as_u8 = relay.cast(X, "uint8")
    assert_simplifies_to(relay.clip(as_u8, 0.0, 255.0), as_u8, [X])
    assert_simplifies_to(relay.clip(as_u8, 0.0, 100.0), relay.clip(as_u8, 0.0, 100.0), [X])


def test_input_module_is_not_mutated():
    body = relay.reshape(relay.reshape(relay.add(X, X), (6,)), (3, 2))
    run_unchanged_input(SimplifyExpr(), module(body, [X]), opt_level=0)


# --- property: random elementwise / reshape chains keep their values --------------------------

_STEPS = st.sampled_from(["add0", "mul1", "addself", "neg", "reshape", "transpose", "expand",
                          "squeeze", "cast64", "mulc", "addc", "divsqrt"])


def _chain(x, steps: list[str]):
    expr = x
    for step in steps:
        shape = ensure_types(expr).checked_type.shape
        if step == "add0":
            expr = relay.add(expr, relay.const(0.0, expr.checked_type.dtype))
        elif step == "mul1":
            expr = relay.multiply(relay.const(1.0, expr.checked_type.dtype), expr)
        elif step == "addself":
            expr = relay.add(expr, expr)
        elif step == "neg":
            expr = relay.negative(expr)
        elif step == "reshape":
            expr = relay.reshape(expr, (-1,) if len(shape) > 1 else (2, -1))
        elif step == "transpose":
            expr = relay.transpose(expr)
        elif step == "expand":
            expr = relay.expand_dims(expr, 0)
        elif step == "squeeze":
            expr = relay.squeeze(expr)
        elif step == "cast64":
            expr = relay.cast(relay.cast(expr, "float64"), expr.checked_type.dtype)
        elif step == "mulc":
            expr = relay.multiply(expr, relay.const(1.5, expr.checked_type.dtype))
        elif step == "addc":
            expr = relay.add(expr, relay.const(-0.25, expr.checked_type.dtype))
        elif step == "divsqrt":
            expr = relay.divide(expr, relay.sqrt(relay.add(relay.abs(expr),
                                                           relay.const(1.0, expr.checked_type.dtype))))
    return expr


@settings(max_examples=60, deadline=None)
@given(st.lists(_STEPS, min_size=1, max_size=10), st.integers(0, 2**16))
def test_random_chains_keep_values(steps, seed):
    x = relay.var("x", shape=(2, 6))
    before = module(_chain(x, steps), [x])
    after = apply(SimplifyExpr(), before, opt_level=0)
    xv = np.random.default_rng(seed).uniform(-2, 2, (2, 6)).astype("float32")
    assert_same_values(before, after, {"x": xv}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("src,mid,removable", [
    ("float16", "float32", True), ("int8", "int16", True), ("uint8", "int16", True),
    ("int8", "float16", True), ("int16", "float32", True), ("bool", "int8", True),
    ("int8", "uint8", False), ("int32", "float32", False), ("float32", "int32", False),
    ("uint16", "int16", False), ("float64", "float32", False),
])
def test_double_casts_drop_only_exact_intermediates(src, mid, removable, rng):
    x = relay.var("x", shape=(64,), dtype=src)
    body = relay.cast(relay.cast(x, mid), "float64")
    out = simplified(body, [x])
    casts = [n for n in post_order(out["main"]) if isinstance(n, Call)]
    assert len(casts) == (1 if removable else 2)
    if src == "bool":
        xv = rng.integers(0, 2, 64).astype(bool)
    elif src.startswith(("int", "uint")):
        info = np.iinfo(src)
        xv = rng.integers(info.min, info.max, 64, endpoint=True).astype(src)
    else:
        xv = (rng.normal(size=64) * 1000).astype(src)
    assert_same_values(module(body, [x]), out, {"x": xv}, rtol=0, atol=0)
