"""Structural equality and hashing: alpha-equivalence, constants, attrs, provenance ignored."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import relay
from kiln.ir import assert_structural_equal, structural_equal, structural_hash


def make_fn(name_x: str = "x", scale: float = 2.0) -> relay.Function:
    x = relay.var(name_x, shape=(2, 3))
    return relay.Function([x], relay.exp(x * relay.const(scale)))


def test_alpha_equivalent_functions_are_equal_and_hash_equal():
    a, b = make_fn("x"), make_fn("y")
    assert structural_equal(a, b)
    assert structural_hash(a) == structural_hash(b)
    assert a is not b and a != b  # node equality is identity


def test_different_constant_or_op_is_unequal():
    assert not structural_equal(make_fn(scale=2.0), make_fn(scale=3.0))
    x = relay.var("x", shape=(2, 3))
    y = relay.var("x", shape=(2, 3))
    assert not structural_equal(relay.Function([x], relay.exp(x)), relay.Function([y], relay.log(y)))
    assert structural_hash(make_fn(scale=2.0)) != structural_hash(make_fn(scale=3.0))


def test_free_vars_need_identity_unless_mapped():
    x, y = relay.var("x", shape=(2,)), relay.var("x", shape=(2,))
    assert not structural_equal(relay.exp(x), relay.exp(y))
    assert structural_equal(relay.exp(x), relay.exp(y), map_free_vars=True)
    assert structural_equal(relay.exp(x), relay.exp(x))


def test_var_types_must_match():
    x, y = relay.var("x", shape=(2,)), relay.var("x", shape=(3,))
    assert not structural_equal(relay.Function([x], x), relay.Function([y], y))


def test_source_names_do_not_matter():
    x = relay.var("x", shape=(2,))
    a = relay.Call(relay.op.get("exp"), [x], source_names=["node_a"])
    b = relay.Call(relay.op.get("exp"), [x], source_names=["node_b"])
    assert structural_equal(a, b)


def test_function_attrs_matter():
    assert not structural_equal(make_fn(), make_fn().with_attr("Primitive", 1))


def test_assert_structural_equal_names_the_difference():
    with pytest.raises(ValueError, match="constants differ"):
        assert_structural_equal(make_fn(scale=1.0), make_fn(scale=5.0))


def test_nan_constants_compare_equal():
    a = relay.const(np.array([np.nan], "float32"))
    b = relay.const(np.array([np.nan], "float32"))
    assert structural_equal(a, b)


def test_deep_chain_does_not_recurse():
    x = relay.var("x", shape=(1,))
    y = x
    for _ in range(5000):
        y = relay.negative(y)
    z = relay.var("z", shape=(1,))
    w = z
    for _ in range(5000):
        w = relay.negative(w)
    assert structural_equal(relay.Function([x], y), relay.Function([z], w))
    assert structural_hash(relay.Function([x], y)) == structural_hash(relay.Function([z], w))
