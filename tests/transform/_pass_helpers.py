"""Helpers for pass tests: run a pass, check it kept the meaning, check it did not mutate its input.

The oracle of every equivalence check is Kiln's reference interpreter run on the module *before*
the pass (itself checked against NumPy and onnxruntime in the op tests), or a NumPy formula.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import kiln as tvm
from kiln.interpreter import evaluate
from kiln.ir import structural_hash
from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function, Var
from kiln.ir.types import TensorType, np_dtype
from kiln.transform import InferType, Pass, PassContext

__all__ = ["apply", "assert_same_values", "module", "random_inputs", "run_unchanged_input"]


def module(body: Expr, params: list[Var] | None = None) -> tvm.IRModule:
    """A typed module whose ``main`` returns ``body`` (parameters: ``params`` or the free vars)."""
    fn = Function(params if params is not None else free_vars(body), body)
    return InferType()(tvm.IRModule.from_expr(fn))


def apply(p: Pass, mod: tvm.IRModule, opt_level: int = 3, **config: Any) -> tvm.IRModule:
    """``p(mod)`` under a PassContext, then InferType."""
    with PassContext(opt_level=opt_level, config=config or None):
        out = p(mod)
    return InferType()(out)


def random_inputs(mod: tvm.IRModule, rng: np.random.Generator, low: float = -2.0,
                  high: float = 2.0) -> dict[str, np.ndarray]:
    """Random values for ``main``'s parameters (integers for int types, bools for bool)."""
    out: dict[str, np.ndarray] = {}
    for p in mod["main"].params:
        ty = p.checked_type
        assert isinstance(ty, TensorType)
        dt = np_dtype(ty.dtype)
        if dt.kind == "f":
            out[p.name_hint] = rng.uniform(low, high, ty.shape).astype(dt)
        elif dt.kind == "b":
            out[p.name_hint] = rng.integers(0, 2, ty.shape).astype(bool)
        else:
            out[p.name_hint] = rng.integers(-5, 6, ty.shape).astype(dt)
    return out


def _flat(value: Any) -> list[np.ndarray]:
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _flat(v)]
    return [np.asarray(value)]


def assert_same_values(before: tvm.IRModule, after: tvm.IRModule,
                       inputs: Mapping[str, np.ndarray], rtol: float = 1e-5,
                       atol: float = 1e-5) -> None:
    """``before`` and ``after`` compute the same outputs on ``inputs`` (interpreter)."""
    names = {p.name_hint for p in after["main"].params}
    expected = _flat(evaluate(before, dict(inputs)))
    got = _flat(evaluate(after, {k: v for k, v in inputs.items() if k in names}))
    assert len(expected) == len(got)
    for e, g in zip(expected, got):
        assert e.shape == g.shape and e.dtype == g.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def run_unchanged_input(p: Pass, mod: tvm.IRModule, opt_level: int = 3) -> tvm.IRModule:
    """Run ``p`` and assert that the input module is structurally unchanged afterwards."""
    before = structural_hash(mod)
    text = mod.astext()
    out = apply(p, mod, opt_level)
    assert structural_hash(mod) == before
    assert mod.astext() == text
    return out
