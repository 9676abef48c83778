"""Compiled sorting and scans (``kiln.op.compute_algorithm``) against the reference interpreter.

Data come from a small integer range so that rows hold many equal values: the compiled stable
order must match the reference's tie-breaking exactly. Sorted values and indices are compared bit
for bit; float scans within rtol 1e-5.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
from _compute_native import Case, check_case, random_array, run_cases, var
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay, te
from kiln.op.compute_algorithm import sort_order
from kiln.op.registry import all_ops
from kiln.te.dag import ComputeDAG
from kiln.te.interp import run_prim_func
from kiln.te.lower import lower

rng = np.random.default_rng(0)
CASES: dict[str, Case] = {}

# (shape, axis)
SORT_AXES = [((9,), 0), ((3, 17), -1), ((4, 6, 5), 1), ((2, 7, 3), 0), ((1, 1), 1)]


def _data(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype.startswith("float"):  # few distinct values: plenty of ties
        return rng.integers(-3, 4, size=shape).astype(dtype) / 2
    return random_array(rng, shape, dtype, -4, 4)


def _sorting_cases() -> None:
    for dtype in ("float32", "int32", "int8", "bool", "float16"):
        for n, (shape, axis) in enumerate(SORT_AXES):
            for ascend in (True, False):
                x = _data(shape, dtype)
                tag = f"{dtype}-{n}-{ascend}"
                CASES[f"sort-{tag}"] = Case(
                    lambda x=x, axis=axis, a=ascend: relay.sort(var("x", x), axis, a), {"x": x},
                    rtol=0.0, atol=0.0)
                CASES[f"argsort-{tag}"] = Case(
                    lambda x=x, axis=axis, a=ascend: relay.argsort(var("x", x), axis, a, "int64"),
                    {"x": x})
                k = min(3, shape[axis])
                CASES[f"topk-{tag}"] = Case(
                    lambda x=x, axis=axis, a=ascend, k=k: relay.topk(
                        var("x", x), k, axis, "both", a).astuple(), {"x": x}, rtol=0.0, atol=0.0)
    nan = np.array([[2.0, np.nan, -1.0, np.nan, 2.0, 0.0, -0.0]], "float32")
    for ascend in (True, False):
        CASES[f"argsort-nan-{ascend}"] = Case(
            lambda a=ascend: relay.argsort(var("x", nan), -1, a), {"x": nan})
        CASES[f"sort-nan-{ascend}"] = Case(lambda a=ascend: relay.sort(var("x", nan), -1, a),
                                           {"x": nan}, rtol=0.0, atol=0.0)
    x = _data((3, 8), "float32")
    for ret in ("values", "indices"):
        CASES[f"topk-{ret}"] = Case(lambda r=ret: relay.topk(var("x", x), 4, ret_type=r,
                                                             dtype="int64"), {"x": x})
    CASES["topk-all"] = Case(lambda: relay.topk(var("x", x), 0, axis=1).astuple(), {"x": x})


def _scan_cases() -> None:
    for op in ("cumsum", "cumprod"):
        for dtype, out_dtype in (("float32", None), ("int32", None), ("int8", "int32"),
                                 ("float32", "int64"), ("int32", "float64"), ("float16", None)):
            for axis, shape in ((None, (3, 5)), (0, (6, 4)), (-1, (2, 3, 33)), (1, (2, 1, 3))):
                for exclusive in (False, True):
                    low, high = (-2, 3) if op == "cumprod" else (-50, 50)
                    x = random_array(rng, shape, dtype, low, high)
                    if op == "cumprod" and dtype.startswith("float"):
                        x = (1 + x / 4).astype(dtype)  # keep products near 1
                    name = f"{op}-{dtype}-{out_dtype}-{axis}-{exclusive}"
                    CASES[name] = Case(
                        lambda x=x, op=op, axis=axis, t=out_dtype, e=exclusive: getattr(relay, op)(
                            var("x", x), axis=axis, dtype=t, exclusive=e), {"x": x})


_sorting_cases()
_scan_cases()


@pytest.fixture(scope="module")
def compiled() -> dict[str, Case]:
    return dict(run_cases(CASES))


@pytest.mark.parametrize("name", sorted(CASES))
def test_algorithm_matches_reference(compiled: dict[str, Case], name: str) -> None:
    check_case(compiled[name])


def test_every_algorithm_op_has_a_compute() -> None:
    family = [name for name, op in all_ops().items()
              if inspect.getmodule(op.reference).__name__ == "kiln.op.algorithm"]
    assert {"argsort", "cumprod", "cumsum", "sort", "topk"} <= set(family)
    assert [name for name in family if all_ops()[name].compute is None] == []


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 2.0, math.nan]), min_size=1, max_size=7),
       st.booleans())
def test_sort_order_is_stable_with_nan_last(values: list[float], ascend: bool) -> None:
    # The rank-based order, run by the loop-IR interpreter, against Python's stable sort with
    # NaN as the largest key.
    x = te.placeholder((len(values),), "float32", "x")
    order = sort_order(x, 0, ascend, len(values))
    out = np.zeros(len(values), "int32")
    run_prim_func(lower(ComputeDAG([x, order]), args=[x, order]),
                  [np.array(values, "float32"), out])

    def key(i: int) -> tuple[bool, float]:
        v = values[i]
        nan_rank = math.isnan(v) if ascend else not math.isnan(v)
        return (nan_rank, 0.0 if math.isnan(v) else (v if ascend else -v))

    assert out.tolist() == sorted(range(len(values)), key=key)
