"""Operators on narrow dtypes (bfloat16, float8, int4, ...): the reference kernels compute in
float32 / int32 and round each result once (``kiln.op.narrow_ref``); the numpy and C targets
agree with them; passes keep the roundings (clip and cast on narrow dtypes are not no-ops)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.interpreter import evaluate

RNG = np.random.default_rng(11)
A32 = (RNG.standard_normal((4, 6)) * 3).astype(np.float32)
B32 = (RNG.standard_normal((4, 6)) + 4).astype(np.float32)


def _cases(x: relay.Var, y: relay.Var) -> dict[str, tuple[relay.Expr, object]]:
    """relay body, NumPy float32 oracle on the widened inputs."""
    return {
        "divide": (x / y, lambda a, b: a / b),
        "mean": (relay.mean(x, axis=1), lambda a, b: a.mean(axis=1)),
        "dense": (relay.nn.dense(x, y), lambda a, b: a @ b.T),
        "clip": (relay.clip(x, -1.0, 1.0), lambda a, b: np.clip(a, -1, 1)),
        "max": (relay.max(x, axis=1), lambda a, b: a.max(axis=1)),
        "min": (relay.min(-x, axis=0), lambda a, b: (-a).min(axis=0)),
        "argmax": (relay.argmax(x, axis=1), lambda a, b: a.argmax(axis=1)),
        "softmax": (relay.nn.softmax(x), lambda a, b: np.exp(a) / np.exp(a).sum(1, keepdims=True)),
    }


def _build_run(func: relay.Function, target: str, *args: np.ndarray) -> np.ndarray:
    mod = kiln.IRModule.from_expr(func)
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    for p, a in zip(func.params, args):
        gm.set_input(p.name_hint, a)
    gm.run()
    return gm.get_output(0).numpy()


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2fnuz"])
@pytest.mark.parametrize("case", ["divide", "mean", "dense", "clip", "max", "min", "argmax",
                                  "softmax"])
def test_interpreter_numpy_and_c_on_narrow_floats(dtype: str, case: str) -> None:
    npt = getattr(ml_dtypes, dtype)
    a, b = A32.astype(npt), B32.astype(npt)
    x = relay.var("x", shape=a.shape, dtype=dtype)
    y = relay.var("y", shape=b.shape, dtype=dtype)
    body, oracle = _cases(x, y)[case]
    func = relay.Function([x, y], body)
    want = np.asarray(oracle(a.astype(np.float32), b.astype(np.float32)))  # type: ignore[operator]
    got = np.asarray(evaluate(kiln.IRModule.from_expr(func), {"x": a, "y": b}))
    if want.dtype.kind == "f":
        want = want.astype(npt)  # one rounding of the exact float32 result
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
    eps = float(ml_dtypes.finfo(npt).eps)
    for target in ("numpy", "llvm"):
        out = _build_run(func, target, a, b)
        assert out.dtype == got.dtype
        # fused or split kernels round intermediates at other places than the single reference op
        np.testing.assert_allclose(out.astype(np.float64), got.astype(np.float64),
                                   rtol=2 * eps, atol=2 * eps * float(np.abs(want.astype(np.float64)).max()))


@pytest.mark.parametrize("dtype", ["int4", "uint4", "int2"])
def test_sub_byte_integer_sums_and_means_do_not_wrap_early(dtype: str) -> None:
    npt = getattr(ml_dtypes, dtype)
    lo, hi = int(ml_dtypes.iinfo(npt).min), int(ml_dtypes.iinfo(npt).max)
    a = RNG.integers(lo, hi + 1, size=(3, 9)).astype(npt)
    x = relay.var("x", shape=a.shape, dtype=dtype)
    func = relay.Function([x], relay.mean(x, axis=1))
    want = (a.astype(np.int64).sum(axis=1) // 9).astype(npt)  # NumPy: mean of ints, truncated
    got = np.asarray(evaluate(kiln.IRModule.from_expr(func), {"x": a}))
    np.testing.assert_array_equal(got.astype(np.int64), a.astype(np.float64).mean(axis=1)
                                  .astype(np.int64).astype(npt).astype(np.int64))
    out = _build_run(func, "llvm", a)
    np.testing.assert_array_equal(out.astype(np.int64), got.astype(np.int64))
    assert want.shape == out.shape


def test_passes_keep_narrow_roundings() -> None:
    x = relay.var("x", shape=(5,), dtype="float32")
    body = relay.cast(relay.clip(relay.cast(x, "bfloat16"), -1.0, 1.0), "float32")
    body = relay.cast(relay.cast(body, "float8_e4m3fn"), "float32")
    func = relay.Function([x], body)
    a = np.array([0.1, -3.0, 0.33, 1.0e-3, 2.0], np.float32)
    want = np.clip(a.astype(ml_dtypes.bfloat16), -1, 1).astype(ml_dtypes.float8_e4m3fn)
    for target in ("numpy", "llvm"):
        np.testing.assert_array_equal(_build_run(func, target, a), want.astype(np.float32))
