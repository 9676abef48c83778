"""CanonicalizeOps: bias_add becomes an add of the bias expanded along its axis."""

from __future__ import annotations

import numpy as np
import pytest
from _pass_helpers import apply, assert_same_values, module, random_inputs, run_unchanged_input

from kiln import relay
from kiln.interpreter import evaluate
from kiln.ir import assert_structural_equal
from kiln.ir.expr import Call, Op
from kiln.transform import CanonicalizeOps


@pytest.mark.parametrize("shape,axis,expanded", [
    ((1, 4, 5, 5), 1, lambda b: relay.expand_dims(b, 1, 2)),
    ((2, 5, 5, 4), 3, lambda b: b),
    ((2, 5, 5, 4), -1, lambda b: b),
    ((3, 4), 1, lambda b: b),
    ((4, 3), 0, lambda b: relay.expand_dims(b, 1, 1)),
])
def test_bias_add_becomes_add(shape, axis, expanded, rng):
    x = relay.var("x", shape=shape)
    b = relay.var("b", shape=(shape[axis],))
    before = module(relay.nn.bias_add(x, b, axis=axis), [x, b])
    after = apply(CanonicalizeOps(), before)
    assert_structural_equal(after, module(relay.add(x, expanded(b)), [x, b]))
    assert_same_values(before, after, random_inputs(before, rng))


def test_bias_add_matches_numpy_broadcast(rng):
    x = relay.var("x", shape=(2, 3, 4))
    b = relay.var("b", shape=(3,))
    after = apply(CanonicalizeOps(), module(relay.nn.bias_add(x, b, axis=1), [x, b]))
    xv = rng.normal(size=(2, 3, 4)).astype("float32")
    bv = rng.normal(size=3).astype("float32")
    np.testing.assert_allclose(evaluate(after, {"x": xv, "b": bv}), xv + bv[:, None], rtol=1e-6)


def test_input_module_is_not_mutated():
    x = relay.var("x", shape=(1, 4, 2, 2))
    b = relay.var("b", shape=(4,))
    run_unchanged_input(CanonicalizeOps(), module(relay.nn.bias_add(x, b), [x, b]))


def test_add_keeps_the_bias_add_provenance():
    x = relay.var("x", shape=(1, 4, 2, 2))
    b = relay.var("b", shape=(4,))
    call = Call(Op.get("nn.bias_add"), [x, b], relay.nn.bias_add(x, b).attrs, source_names=("Add_7",))
    after = apply(CanonicalizeOps(), module(call, [x, b]))
    assert after["main"].body.source_names == ("Add_7",)
    assert after["main"].body.args[1].source_names == ("Add_7",)
