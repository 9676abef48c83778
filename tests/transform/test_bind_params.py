"""bind_params_by_name: weights become constants, checked against the declared types."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.errors import KilnTypeError
from kiln.interpreter import evaluate
from kiln.ir import structural_hash
from kiln.ir.expr import Constant
from kiln.runtime import NDArray
from kiln.transform import bind_params_by_name


def _fn():
    x = relay.var("x", shape=(2, 3))
    w = relay.var("w", shape=(3,))
    b = relay.var("b", shape=(3,), dtype="float32")
    return relay.Function([x, w, b], relay.add(relay.multiply(x, w), b))


@pytest.mark.parametrize("wrap", [np.asarray, NDArray, relay.const])
def test_bound_params_become_constants(wrap, rng):
    fn = _fn()
    w = rng.normal(size=3).astype("float32")
    b = rng.normal(size=3).astype("float32")
    out = bind_params_by_name(fn, {"w": wrap(w), "b": wrap(b), "not_a_param": np.zeros(1)})
    assert [p.name_hint for p in out.params] == ["x"]
    consts = [a for a in (out.body.args[0].args[1], out.body.args[1])]
    assert all(isinstance(c, Constant) for c in consts)
    x = rng.normal(size=(2, 3)).astype("float32")
    np.testing.assert_allclose(evaluate(tvm.IRModule.from_expr(out), {"x": x}), x * w + b, rtol=1e-6)


def test_wrong_shape_or_dtype_is_a_clear_error():
    with pytest.raises(KilnTypeError, match=r"%w .*\(3\).*shape \(4,\)"):
        bind_params_by_name(_fn(), {"w": np.zeros(4, "float32")})
    with pytest.raises(KilnTypeError, match="dtype float64"):
        bind_params_by_name(_fn(), {"w": np.zeros(3, "float64")})


def test_ambiguous_names_are_rejected():
    a, b = relay.var("w", shape=(1,)), relay.var("w", shape=(1,))
    with pytest.raises(KilnTypeError, match="2 parameters are named 'w'"):
        bind_params_by_name(relay.Function([a, b], relay.add(a, b)), {"w": np.zeros(1, "float32")})


def test_input_is_not_mutated_and_no_params_is_identity():
    fn = _fn()
    before = structural_hash(fn)
    bind_params_by_name(fn, {"w": np.ones(3, "float32")})
    assert structural_hash(fn) == before
    assert bind_params_by_name(fn, None) is fn
    assert bind_params_by_name(fn, {"zzz": 1}) is fn
