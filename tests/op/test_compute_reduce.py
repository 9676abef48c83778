"""Compiled reductions (``kiln.op.compute_reduce``) against the reference interpreter.

Integer and bool results must match bit for bit, float32 ones within rtol 1e-5 (both sides sum in
float64 and round once; only the summation order differs). float16 cases use rtol 1e-3: one
float16 ulp, the rounding of the final conversion.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from _compute_native import Case, check_case, random_array, run_cases, var

from kiln import relay
from kiln.op.registry import all_ops

# (shape, axis, keepdims, exclude)
AXES = [
    ((7,), None, False, False),
    ((3, 37), 1, False, False),
    ((3, 37), 0, True, False),
    ((2, 5, 9), (0, 2), False, False),
    ((2, 5, 9), (-1,), True, False),
    ((2, 5, 9), (1,), False, True),
    ((4, 3, 2, 17), None, True, False),
    ((), None, False, False),
    ((3, 0, 4), 1, False, False),
]
DTYPES = {
    "sum": ("float32", "int32", "int8"),
    "mean": ("float32", "int32", "int64"),
    "prod": ("float32", "int32"),
    "max": ("float32", "int32", "uint8", "bool"),
    "min": ("float32", "int16", "bool"),
    "all": ("bool",),
    "any": ("bool",),
}
ARG_AXES = [
    ((9,), None, False),
    ((3, 37), 1, False),
    ((3, 37), 0, True),
    ((2, 5, 9), (0, 2), False),
    ((2, 5, 9), (-1,), True),
]


def _cases() -> dict[str, Case]:
    rng = np.random.default_rng(0)
    cases: dict[str, Case] = {}
    for op, dtypes in DTYPES.items():
        for dtype in dtypes:
            for n, (shape, axis, keep, excl) in enumerate(AXES):
                if 0 in shape and op == "prod" and dtype == "int32":
                    continue
                low, high = (1, 3) if op == "prod" else (-20, 20)
                x = random_array(rng, shape, dtype, low, high)
                fn = getattr(relay, op)
                cases[f"{op}-{dtype}-{n}"] = Case(
                    lambda fn=fn, x=x, axis=axis, keep=keep, excl=excl: fn(
                        var("x", x), axis=axis, keepdims=keep, exclude=excl),
                    {"x": x})
    for op in ("argmax", "argmin"):
        for dtype in ("float32", "int32", "bool"):
            for n, (shape, axis, keep) in enumerate(ARG_AXES):
                for last in (False, True):
                    x = random_array(rng, shape, dtype, -3, 3)  # small range: many ties
                    fn = getattr(relay, op)
                    cases[f"{op}-{dtype}-{n}-{last}"] = Case(
                        lambda fn=fn, x=x, axis=axis, keep=keep, last=last: fn(
                            var("x", x), axis=axis, keepdims=keep, select_last_index=last),
                        {"x": x})
    nan = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 2.0, -1.0, -1.0]], dtype="float32")
    for op in ("argmax", "argmin", "max", "min"):
        cases[f"{op}-nan"] = Case(lambda op=op: getattr(relay, op)(var("x", nan), axis=1),
                                  {"x": nan})
    for n, (shape, axis, keep, excl) in enumerate(AXES[:7]):
        for unbiased in (False, True):
            x = random_array(rng, shape, "float32")
            cases[f"variance-{n}-{unbiased}"] = Case(
                lambda x=x, axis=axis, keep=keep, excl=excl, unbiased=unbiased: relay.variance(
                    var("x", x), axis=axis, keepdims=keep, exclude=excl, unbiased=unbiased),
                {"x": x})
    x16 = random_array(rng, (4, 33), "float16")
    cases["sum-float16"] = Case(lambda: relay.sum(var("x", x16), axis=1), {"x": x16}, rtol=1e-3)
    cases["mean-float16"] = Case(lambda: relay.mean(var("x", x16), axis=0), {"x": x16}, rtol=1e-3)
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def compiled() -> dict[str, Case]:
    return dict(run_cases(CASES))


@pytest.mark.parametrize("name", sorted(CASES))
def test_reduction_matches_reference(compiled: dict[str, Case], name: str) -> None:
    check_case(compiled[name])


def test_every_reduction_has_a_compute() -> None:
    family = [name for name, op in all_ops().items()
              if inspect.getmodule(op.reference).__name__ == "kiln.op.reduce"]
    assert {"sum", "mean", "argmax", "variance"} <= set(family)
    assert [name for name in family if all_ops()[name].compute is None] == []
