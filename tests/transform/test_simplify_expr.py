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
from kiln.target import Target
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


# --- powers and constant divisors -------------------------------------------------------------

@pytest.mark.parametrize("exponent,expected", [
    (2.0, lambda x: relay.multiply(x, x)),
    (0.5, relay.sqrt),
    (-0.5, relay.rsqrt),
    (1.0, lambda x: x),
])
def test_powers_by_a_constant_become_cheaper_ops(exponent, expected):
    assert_simplifies_to(relay.exp(relay.power(X, relay.const(exponent))), relay.exp(expected(X)), [X])


@pytest.mark.parametrize("build", [
    lambda x: relay.power(x, relay.const(3.0)),
    lambda x: relay.power(x, relay.const(np.array([2.0, 2.0, 2.0], "float32"))),
    lambda x: relay.power(x, relay.const(np.full((4, 2, 3), 2.0, "float32"))),  # widens the result
    lambda x: relay.power(relay.const(2.0), x),
    lambda x: relay.power(x, relay.var("e", shape=())),
], ids=["cube", "vector exponent", "broadcasting exponent", "constant base", "variable exponent"])
def test_other_powers_stay(build):
    body = build(X)
    assert_simplifies_to(body, body, None)


def test_integer_square_becomes_a_product_but_roots_do_not():
    i = relay.var("i", shape=(4,), dtype="int32")
    assert_simplifies_to(relay.power(i, relay.const(2, "int32")), relay.multiply(i, i), [i])


@settings(max_examples=50, deadline=None)
@given(st.floats(-8.0, 8.0).filter(lambda e: abs(e) > 0.1), st.sampled_from([2.0, 0.5, -0.5, 1.0]),
       st.sampled_from(["float32", "float64"]), st.integers(0, 2**16))
def test_power_rewrites_keep_values(scale, exponent, dtype, seed):
    x = relay.var("x", shape=(3, 5), dtype=dtype)
    before = module(relay.power(x, relay.const(exponent, dtype)), [x])
    after = apply(SimplifyExpr(), before, opt_level=0)
    assert not any(isinstance(n, Call) and n.op.name == "power" for n in post_order(after["main"]))
    xv = np.abs(np.random.default_rng(seed).uniform(0.01, 1.0, (3, 5)) * scale).astype(dtype)
    assert_same_values(before, after, {"x": xv}, rtol=1e-6, atol=0)


@pytest.mark.parametrize("divisor,exact", [(4.0, True), (0.125, True), (-2.0, True), (3.0, False),
                                           (np.sqrt(2.0), False), (7e-3, False)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_division_by_a_constant_becomes_a_product(divisor, exact, dtype, rng):
    x = relay.var("x", shape=(64,), dtype=dtype)
    c = np.asarray(divisor, dtype)
    before = module(relay.divide(x, relay.const(c)), [x])
    assert_structural_equal(apply(SimplifyExpr(), before, opt_level=0), before)  # exact: TVM's
    with Target("c"):  # compiling: the division becomes a product
        after = apply(SimplifyExpr(), before, opt_level=0)
    recip = np.asarray(1.0 / c.astype(np.float64), dtype)
    assert_structural_equal(after, module(relay.multiply(x, relay.const(recip)), [x]))
    xv = (rng.normal(size=64) * 100).astype(dtype)
    # the documented bound: within 3 roundings of the dtype of the correctly rounded quotient
    bound = 0.0 if exact else 3 * np.finfo(dtype).eps / 2
    assert_same_values(before, after, {"x": xv}, rtol=bound, atol=0)


def test_division_by_a_constant_vector_uses_elementwise_reciprocals(rng):
    c = np.array([0.5, 3.0, -10.0], "float32")
    with Target("c"):
        out = simplified(relay.divide(X, relay.const(c)), [X])
    assert_structural_equal(out, module(relay.multiply(X, relay.const((1 / c).astype("float32"))), [X]))


@pytest.mark.parametrize("build", [
    lambda x: relay.divide(x, relay.const(0.0)),
    lambda x: relay.divide(x, relay.const(np.array([1.0, 0.0, 2.0], "float32"))),
    lambda x: relay.divide(x, relay.const(np.float32(1e39 / 1e1))),  # reciprocal underflows
    lambda x: relay.divide(x, relay.const(np.float32(np.inf))),
    lambda x: relay.divide(relay.const(3.0), x),
    lambda x: relay.divide(x, relay.var("d", shape=())),
], ids=["zero", "zero element", "reciprocal subnormal", "infinity", "constant dividend", "variable"])
def test_division_stays_when_the_reciprocal_is_not_a_normal_number(build):
    body = build(X)
    with Target("c"):
        assert_simplifies_to(body, body, None)


def test_integer_division_stays():
    i = relay.var("i", shape=(4,), dtype="int32")
    body = relay.divide(i, relay.const(2, "int32"))
    assert_simplifies_to(body, body, [i])


# --- reshapes that add axes move below element-wise consumers ---------------------------------

Y2 = relay.var("y2", shape=(6, 8))  # a dense output, reshaped back to (1, 6, 8) by exporters


def up(y):
    return relay.reshape(y, (1, 6, 8))


def test_unary_ops_move_below_an_axis_adding_reshape():
    assert_simplifies_to(relay.erf(up(Y2)), up(relay.erf(Y2)), [Y2])
    assert_simplifies_to(relay.nn.relu(relay.expand_dims(Y2, 0)), up(relay.nn.relu(Y2)), [Y2])
    assert_simplifies_to(relay.cast(up(Y2), "float16"), up(relay.cast(Y2, "float16")), [Y2])


def test_reshapes_that_drop_axes_stay_where_they_are():
    x = relay.var("x", shape=(1, 6, 8))
    body = relay.erf(relay.reshape(x, (6, 8)))
    assert_simplifies_to(body, body, [x])
    b = relay.var("b", shape=(8,))
    body = relay.add(relay.reshape(x, (6, 8)), b)
    assert_simplifies_to(body, body, [x, b])


def test_bias_on_kept_trailing_axes_moves_into_the_product():
    b = relay.var("b", shape=(8,))
    assert_simplifies_to(relay.add(up(Y2), b), up(relay.add(Y2, b)), [Y2, b])
    c = np.arange(8, dtype="float32").reshape(1, 1, 8)  # leading unit axes dropped, folded
    assert_simplifies_to(relay.multiply(relay.const(c), up(Y2)),
                         up(relay.multiply(relay.const(c.reshape(8)), Y2)), [Y2])
    assert_simplifies_to(relay.maximum(up(Y2), relay.const(0.5)),
                         up(relay.maximum(Y2, relay.const(0.5))), [Y2])


def test_attention_mask_moves_into_the_scores():
    s = relay.var("s", shape=(12, 16, 16))  # batch_matmul scores -> (1, 12, 16, 16)
    m = relay.var("m", shape=(1, 1, 1, 16))
    body = relay.add(relay.multiply(relay.reshape(s, (1, 12, 16, 16)), relay.const(0.25)), m)
    expected = relay.reshape(relay.add(relay.multiply(s, relay.const(0.25)), relay.reshape(m, (16,))),
                             (1, 12, 16, 16))
    assert_simplifies_to(body, expected, [s, m])


def test_residual_of_the_full_shape_is_reshaped_to_meet_the_product():
    r = relay.var("r", shape=(1, 6, 8))
    assert_simplifies_to(relay.add(r, up(Y2)), up(relay.add(relay.reshape(r, (6, 8)), Y2)), [Y2, r])
    z = relay.var("z", shape=(6, 8))
    assert_simplifies_to(relay.subtract(up(Y2), up(z)), up(relay.subtract(Y2, z)), [Y2, z])


@pytest.mark.parametrize("build", [
    # the bias varies along an axis the reshape creates (6 -> 2 x 3)
    lambda: relay.add(relay.reshape(Y2, (1, 2, 3, 8)), relay.var("b", shape=(3, 1))),
    # the reshaped operand is broadcast up by the other one
    lambda: relay.add(relay.reshape(Y2, (1, 6, 8)), relay.var("w", shape=(2, 6, 8))),
    # a reshape that keeps the rank
    lambda: relay.add(relay.reshape(Y2, (8, 6)), relay.var("b", shape=(6,))),
    # an op with an axis attribute
    lambda: relay.nn.bias_add(relay.reshape(Y2, (1, 6, 8)), relay.var("b", shape=(6,))),
], ids=["bias on a split axis", "widening operand", "same rank", "bias_add"])
def test_reshape_stays_above_ops_it_cannot_cross(build):
    body = build()
    assert_simplifies_to(body, body, None)


def test_operands_reshaped_from_different_shapes_meet_at_the_lower_rank(rng):
    v = relay.var("v", shape=(48,))
    before = module(relay.add(up(Y2), relay.reshape(v, (1, 6, 8))), [Y2, v])
    after = apply(SimplifyExpr(), before, opt_level=0)
    expected = up(relay.add(relay.reshape(Y2, (48,)), v))
    assert_structural_equal(after, module(expected, [Y2, v]))
    assert_same_values(before, after, random_inputs(before, rng), rtol=0, atol=0)


def test_exported_dense_epilogue_ends_up_on_the_product():
    """MatMul on a 3-d input as exporters write it: flatten, dense, reshape back, then bias, erf
    GELU and a residual add; after the rules only the reshape back is left at the end."""
    x = relay.var("x", shape=(1, 6, 4))
    r = relay.var("r", shape=(1, 6, 8))
    w = relay.var("w", shape=(8, 4))
    b = relay.const(np.linspace(-1, 1, 8, dtype="float32"))
    h = relay.add(relay.reshape(relay.nn.dense(relay.reshape(x, (6, 4)), w), (1, 6, 8)), b)
    gelu = relay.multiply(relay.multiply(h, relay.add(relay.erf(relay.divide(
        h, relay.const(np.float32(np.sqrt(2.0))))), relay.const(1.0))), relay.const(0.5))
    before = module(relay.add(gelu, r), [x, r, w])
    with Target("c"):
        after = apply(SimplifyExpr(), before, opt_level=0)
    body = after["main"].body
    assert body.op.name == "reshape" and body.args[0].op.name == "add"
    ops = [n.op.name for n in post_order(body.args[0]) if isinstance(n, Call)]
    assert ops.count("reshape") == 2  # the flattening of x and of the residual r
    assert "divide" not in ops
    assert_same_values(before, after, random_inputs(before, np.random.default_rng(3)))


# --- splits of transposes ---------------------------------------------------------------------

def test_split_of_a_transpose_slices_before_transposing(rng):
    x = relay.var("x", shape=(4, 3, 6))
    parts = relay.split(relay.transpose(x, (2, 0, 1)), [2, 5], axis=0)
    body = relay.Tuple([relay.exp(parts[0]), relay.negative(parts[2])])
    before = module(body, [x])
    after = apply(SimplifyExpr(), before, opt_level=0)
    expected = relay.Tuple([
        relay.exp(relay.transpose(relay.strided_slice(x, [0, 0, 0], [4, 3, 2]), (2, 0, 1))),
        relay.negative(relay.transpose(relay.strided_slice(x, [0, 0, 5], [4, 3, 6]), (2, 0, 1)))])
    assert_structural_equal(after, module(expected, [x]))
    assert_same_values(before, after, random_inputs(before, rng), rtol=0, atol=0)


def test_split_of_anything_else_stays_like_tvm():
    x = relay.var("x", shape=(4, 6))
    body = relay.Tuple([relay.exp(relay.split(relay.exp(x), 2, axis=1)[0])])
    assert_simplifies_to(body, body, [x])


def test_projection_of_a_tuple_literal_is_its_field():
    body = relay.exp(relay.TupleGetItem(relay.Tuple([X, relay.negative(Y)]), 1))
    assert_simplifies_to(body, relay.exp(relay.negative(Y)), [X, Y])


# --- property: random element-wise epilogues after an axis-adding reshape keep their values -----

_EPILOGUE = st.sampled_from(["bias", "scale", "div", "erf", "relu", "residual", "mask", "pow2",
                             "sqrt", "square_of_reshape"])


@settings(max_examples=60, deadline=None)
@given(st.lists(_EPILOGUE, min_size=1, max_size=8), st.integers(0, 2**16))
def test_random_epilogues_after_a_reshape_keep_values(steps, seed):
    y = relay.var("y", shape=(12, 16))
    r = relay.var("r", shape=(1, 3, 4, 16))
    m = relay.var("m", shape=(1, 1, 1, 16))
    expr = relay.reshape(y, (1, 3, 4, 16))
    for step in steps:
        if step == "bias":
            expr = relay.add(expr, relay.const(np.linspace(-1, 1, 16, dtype="float32")))
        elif step == "scale":
            expr = relay.multiply(relay.const(0.3), expr)
        elif step == "div":
            expr = relay.divide(expr, relay.const(np.float32(1.7)))
        elif step == "erf":
            expr = relay.erf(expr)
        elif step == "relu":
            expr = relay.nn.relu(expr)
        elif step == "residual":
            expr = relay.add(r, expr)
        elif step == "mask":
            expr = relay.add(expr, m)
        elif step == "pow2":
            expr = relay.power(expr, relay.const(2.0))
        elif step == "sqrt":
            expr = relay.sqrt(relay.add(relay.abs(expr), relay.const(1.0)))
        else:
            expr = relay.multiply(expr, relay.reshape(y, (1, 3, 4, 16)))
    before = module(expr, [y, r, m])
    after = apply(SimplifyExpr(), before, opt_level=0)
    main = after["main"]
    # the only reshapes left: the final one and the flattening of r and m
    adds_axes = [n for n in post_order(main) if isinstance(n, Call) and n.op.name == "reshape"
                 and len(n.checked_type.shape) > len(n.args[0].checked_type.shape)]
    assert adds_axes in ([], [main.body])
    rng = np.random.default_rng(seed)
    inputs = {"y": rng.uniform(-2, 2, (12, 16)).astype("float32"),
              "r": rng.uniform(-2, 2, (1, 3, 4, 16)).astype("float32"),
              "m": rng.uniform(-2, 2, (1, 1, 1, 16)).astype("float32")}
    # x / c -> x * (1 / c) moves a result by up to 3 float32 roundings (1.8e-7 relative); every
    # later squaring doubles a relative difference
    squarings = sum(s in ("pow2", "square_of_reshape") for s in steps)
    assert_same_values(before, after, inputs, rtol=2e-6 * 2 ** squarings, atol=1e-6)


# --- TVM's SimplifyTranspose, SimplifyClipAndConsecutiveCast, *_like concretization -------------

NCHW = relay.var("x", shape=(1, 8, 6, 6))
NHWC = relay.var("x", shape=(1, 6, 6, 8))


@pytest.mark.parametrize("before,expected,x", [
    # transpose -> layout_transform -> transpose: one transpose
    (lambda x: relay.transpose(relay.layout_transform(relay.transpose(x, [0, 2, 3, 1]), "NHWC",
                                                      "HWCN"), [3, 0, 1, 2]),
     lambda x: relay.transpose(x, [0, 2, 3, 1]), NCHW),
    # transposes cancelling, default (reversing) and negative axes
    (lambda x: relay.transpose(relay.transpose(relay.transpose(relay.transpose(relay.transpose(
        relay.nn.relu(x))), [0, 2, -1, 1]))),
     lambda x: relay.transpose(relay.nn.relu(x), [0, 2, 3, 1]), NCHW),
    # a rank-increasing layout_transform absorbs the transpose before it (and the reverse)
    (lambda x: relay.transpose(relay.layout_transform(relay.nn.relu(relay.layout_transform(
        relay.transpose(x, [0, 3, 1, 2]), "NCHW", "NCHW4c")), "NCHW4c", "NCHW"), [0, 2, 3, 1]),
     lambda x: relay.layout_transform(relay.nn.relu(relay.layout_transform(x, "NHWC", "NCHW4c")),
                                      "NCHW4c", "NHWC"), NHWC),
    # same-rank layout_transforms become a transpose; inverse pairs vanish
    (lambda x: relay.nn.relu(relay.layout_transform(relay.layout_transform(x, "NCHW", "NHWC"),
                                                    "NHWC", "CHWN")),
     lambda x: relay.nn.relu(relay.transpose(x, [1, 2, 3, 0])), NCHW),
    (lambda x: relay.nn.relu(relay.layout_transform(relay.layout_transform(x, "NCHW", "NCHW4c"),
                                                    "NCHW4c", "NCHW")),
     lambda x: relay.nn.relu(x), NCHW),
    (lambda x: relay.layout_transform(relay.nn.relu(x), "NCHW", "NCHW"),
     lambda x: relay.nn.relu(x), NCHW),
], ids=["transpose-lt-transpose", "reversing", "rank-changing", "lt-to-transpose", "lt-inverse",
        "noop-lt"])
def test_transpose_and_layout_chains_follow_tvm(before, expected, x):
    b = before(x)
    assert_simplifies_to(b, expected(x), [x])
    mod = module(b, [x])
    assert_same_values(mod, apply(SimplifyExpr(), mod, opt_level=0),
                       random_inputs(mod, np.random.default_rng(0)))


@pytest.mark.parametrize("src,casts,expected", [
    ("int32", ["uint8", "int32"], []),
    ("int32", ["uint8", "int16", "int32"], []),
    ("float32", ["uint8", "int16", "int32"], ["int32"]),
    ("float32", ["int8", "int16", "int32"], ["int8", "int32"]),
])
def test_casts_after_a_clip_that_fit_its_range_go(src, casts, expected):
    x = relay.var("x", shape=(4, 8), dtype=src)
    body = relay.clip(x, 0.0, 255.0)
    want = body
    for d in casts:
        body = relay.cast(body, d)
    for d in expected:
        want = relay.cast(want, d)
    assert_simplifies_to(body, want, [x])
    mod = module(body, [x])
    data = {"x": np.linspace(-300, 300, 32).reshape(4, 8).astype(src)}
    assert_same_values(mod, apply(SimplifyExpr(), mod, opt_level=0), data)


def test_collapse_sum_like_becomes_collapse_sum_to():
    data = relay.var("data", shape=(3, 3, 3))
    like = relay.var("like", shape=(3,))
    assert_simplifies_to(relay.collapse_sum_like(data, like), relay.collapse_sum_to(data, (3,)),
                         [data, like])


def test_reverse_reshape_after_reshape_becomes_one_reshape():
    x = relay.var("x", shape=(1, 32, 16, 16))
    body = relay.reverse_reshape(relay.reshape(relay.reshape(x, (1, 16, -1)), (4, 8, -1, 16)),
                                 (32, 0, -1))
    assert_simplifies_to(body, relay.reshape(x, (32, 16, 16)), [x])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_binomial_factors_like_tvm(dtype):
    x = relay.var("x", shape=(5,), dtype=dtype)
    y = relay.var("y", shape=(5,), dtype=dtype)

    def c(v):
        return relay.const(v, dtype)

    # 6*x*x + 5*x*y + y*y = (y + 3x)(y + 2x)  (TVM swaps x and y when c == 1 and a > 1)
    body = c(6) * x * x + c(5) * x * y + y * y
    expected = relay.multiply(relay.add(y, relay.multiply(x, c(3))),
                              relay.add(y, relay.multiply(x, c(2))))
    assert_simplifies_to(body, expected, [x, y])
    mod = module(body, [x, y])
    data = {"x": np.arange(-2, 3).astype(dtype), "y": np.arange(1, 6).astype(dtype)}
    assert_same_values(mod, apply(SimplifyExpr(), mod, opt_level=0), data, rtol=1e-6)
    # a negative discriminant, or integer tensors with irrational roots: unchanged
    assert_simplifies_to(x * x + y * y + x * y, x * x + y * y + x * y, [x, y])
    if dtype == "int32":
        assert_simplifies_to(x * x + c(3) * x * y + y * y, x * x + c(3) * x * y + y * y, [x, y])


@pytest.mark.parametrize("op", ["argmax", "argmin", "argsort"])
def test_order_ops_read_through_dequantize(op):
    x = relay.var("x", shape=(4, 32, 1, 1), dtype="int8")
    build = getattr(relay, op)
    body = build(relay.qnn.op.dequantize(x, relay.const(2.0), relay.const(0)), axis=1)
    assert_simplifies_to(body, build(x, axis=1), [x])
    negative = build(relay.qnn.op.dequantize(x, relay.const(-2.0), relay.const(0)), axis=1)
    assert_simplifies_to(negative, negative, [x])  # a negative scale reverses the order
    mod = module(body, [x])
    data = {"x": np.random.default_rng(0).integers(-128, 127, (4, 32, 1, 1)).astype("int8")}
    assert_same_values(mod, apply(SimplifyExpr(), mod, opt_level=0), data)
