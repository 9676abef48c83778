"""Compile one-op relay functions to native C and compare them with the reference interpreter.

Shared by the ``test_compute_*`` files. Each case is a relay expression over named variables plus
input arrays; all cases of a test file become fused (``Primitive=1``) functions of one library,
built once with :func:`kiln.codegen.native.build_native`, so a file pays for one compilation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln import relay
from kiln.codegen.native import build_native
from kiln.interpreter import evaluate
from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, TupleType, np_dtype
from kiln.transform import InferType


@dataclass
class Case:
    """One compiled function: ``build()`` makes the expression, ``inputs`` feed its variables."""

    build: Callable[[], Expr]
    inputs: Mapping[str, np.ndarray]
    rtol: float = 1e-5
    atol: float = 1e-6
    outputs: list[np.ndarray] = field(default_factory=list)
    expected: list[np.ndarray] = field(default_factory=list)


def var(name: str, x: np.ndarray) -> Expr:
    """A relay variable typed like ``x``."""
    dtype = "bool" if x.dtype == np.bool_ else str(x.dtype)
    return relay.var(name, shape=x.shape, dtype=dtype)


def _typed(expr: Expr) -> Function:
    params = free_vars(expr)
    return InferType()(IRModule.from_expr(Function(params, expr)))["main"]


def _flat_types(ty: Any) -> list[TensorType]:
    return [t for f in ty.fields for t in _flat_types(f)] if isinstance(ty, TupleType) else [ty]


def _flat_values(value: Any) -> list[np.ndarray]:
    if isinstance(value, (tuple, list)):
        return [v for item in value for v in _flat_values(item)]
    return [np.asarray(value)]


def run_cases(cases: Mapping[str, Case]) -> Mapping[str, Case]:
    """Compile every case into one library, run it, and fill ``outputs`` and ``expected``."""
    funcs = {name: _typed(case.build()) for name, case in cases.items()}
    symbols = {name: f"kernel{i}" for i, name in enumerate(funcs)}  # C identifiers
    lib = build_native({symbols[name]: f.with_attr("Primitive", 1) for name, f in funcs.items()})
    for name, case in cases.items():
        fn = funcs[name]
        args = [np.array(case.inputs[p.name_hint], order="C") for p in fn.params]
        case.outputs = [np.empty(t.shape, np_dtype(t.dtype)) for t in _flat_types(fn.ret_type)]
        kernel = lib.kernel(symbols[name])
        assert kernel is not None, name
        kernel.bind(args + case.outputs)()
        case.expected = _flat_values(evaluate(IRModule.from_expr(fn), dict(case.inputs)))
    return cases


def check_case(case: Case) -> None:
    """Compiled outputs equal the reference: exactly for integers and bools, else within tolerance."""
    assert len(case.outputs) == len(case.expected)
    for got, want in zip(case.outputs, case.expected):
        assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
        if got.dtype.kind in "iub":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol, equal_nan=True)


def random_array(rng: np.random.Generator, shape: Sequence[int], dtype: str,
                 low: int = -20, high: int = 20) -> np.ndarray:
    """Random data of ``dtype``: normal floats, integers in ``[low, high)``, fair bools."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(low, info.min), min(high, info.max), size=shape).astype(dtype)
