"""``nn.contrib_dense_pack``: reference kernel, type relation, builder and C compute.

Oracles: a NumPy formula on the unpacked weight (and a naive loop over the packed one), and the
plain ``nn.dense`` of the same weight.
"""

from __future__ import annotations

import shlex
import shutil

import numpy as np
import pytest

from kiln import relay
from kiln.config import settings
from kiln.errors import KilnTypeError
from kiln.interpreter import evaluate
from kiln.ir.expr import Function
from kiln.ir.module import IRModule
from kiln.op.nn_pack import DensePackAttrs, contrib_dense_pack, packed_block
from kiln.transform import InferType

# (M, K, N, n): panels that divide N evenly, single panels, one-column panels, odd widths
SHAPES = [(1, 16, 8, 8), (3, 5, 12, 4), (4, 33, 10, 5), (2, 7, 6, 1), (5, 64, 48, 16), (1, 9, 7, 7)]
DTYPES = ["float32", "float64", "float16", "int32"]


def pack(weight: np.ndarray, n: int) -> np.ndarray:
    """``weight (N, K)`` packed as TVM's ``NC{n}n``: ``packed[j // n, k, j % n] = weight[j, k]``,
    written as a naive loop."""
    units, k = weight.shape
    packed = np.empty((units // n, k, n), weight.dtype)
    for j in range(units):
        packed[j // n, :, j % n] = weight[j, :]
    return packed


def random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype.startswith("int"):
        return rng.integers(-9, 10, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


TOLERANCE = {"float16": 2e-3, "float32": 1e-5, "float64": 1e-12, "int32": 0.0}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("m", "k", "units", "n"), SHAPES)
def test_reference_matches_numpy(rng, m, k, units, n, dtype):
    x, w = random(rng, (m, k), dtype), random(rng, (units, k), dtype)
    data = relay.var("x", shape=(m, k), dtype=dtype)
    packed = relay.var("w", shape=(units // n, k, n), dtype=dtype)
    out = evaluate(contrib_dense_pack(data, packed, f"NC{n}n", units=units),
                   {"x": x, "w": pack(w, n)})
    expected = (x.astype(np.float64) @ w.astype(np.float64).T).astype(dtype)
    assert out.shape == (m, units) and out.dtype == np.dtype(dtype)
    np.testing.assert_allclose(out, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize(("m", "k", "units", "n"), SHAPES)
def test_layout_transformed_weight_matches_unpacked_dense(rng, m, k, units, n):
    x, w = random(rng, (m, k), "float32"), random(rng, (units, k), "float32")
    data, weight = relay.var("x", shape=(m, k)), relay.var("w", shape=(units, k))
    packed = relay.layout_transform(weight, "NC", f"NC{n}n")
    got = evaluate(contrib_dense_pack(data, packed, f"NC{n}n"), {"x": x, "w": w})
    want = evaluate(relay.nn.dense(data, weight), {"x": x, "w": w})
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.astype(np.float64).T, rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize(("dtype", "out_dtype"), [("int8", "int32"), ("float16", "float32"),
                                                  ("float32", "float64")])
def test_out_dtype(rng, dtype, out_dtype):
    x, w = random(rng, (3, 20), dtype), random(rng, (8, 20), dtype)
    y = contrib_dense_pack(relay.var("x", shape=(3, 20), dtype=dtype),
                           relay.var("w", shape=(2, 20, 4), dtype=dtype), "NC4n", 8, out_dtype)
    out = evaluate(y, {"x": x, "w": pack(w, 4)})
    assert out.dtype == np.dtype(out_dtype)
    expected = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3)


def test_type_relation_and_printing():
    y = contrib_dense_pack(relay.var("x", shape=(2, 512)), relay.var("w", shape=(2, 512, 5)),
                           "NC5n")
    mod = InferType()(IRModule.from_expr(Function([*y.args], y)))
    assert tuple(mod["main"].body.checked_type.shape) == (2, 10)
    assert mod["main"].body.checked_type.dtype == "float32"
    text = mod.astext()
    assert 'nn.contrib_dense_pack(%x, %w, units=None, weight_layout="NC5n")' in text
    assert isinstance(y.attrs, DensePackAttrs) and y.attrs.weight_layout == "NC5n"
    assert packed_block("NC16n") == 16


@pytest.mark.parametrize(("x_shape", "w_shape", "layout", "units", "message"), [
    ((2, 8), (2, 8, 4), "NC", None, "weight_layout 'NC' for weight (2, 8, 4) (float32) is not a packed"),
    ((2, 8), (2, 8, 4), "NC8n", None, "packs 8 columns but the weight's last axis has 4"),
    ((2, 9), (2, 8, 4), "NC4n", None, "data gives K=9, weight gives K=8"),
    ((2, 8), (2, 8, 4), "NC4n", 10, "units=10 but the packed weight gives 2 x 4 = 8"),
    ((1, 2, 8), (2, 8, 4), "NC4n", None, "needs 2-d data (M, K)"),
    ((2, 8), (16, 8), "NC4n", None, "weight (16, 8) (float32)"),
])
def test_type_errors_name_shapes(x_shape, w_shape, layout, units, message):
    y = contrib_dense_pack(relay.var("x", shape=x_shape), relay.var("w", shape=w_shape), layout,
                           units)
    with pytest.raises(KilnTypeError, match="nn.contrib_dense_pack") as info:
        InferType()(IRModule.from_expr(Function([*y.args], y)))
    assert message in str(info.value)


def test_mixed_dtypes_rejected():
    y = contrib_dense_pack(relay.var("x", shape=(2, 8)),
                           relay.var("w", shape=(2, 8, 4), dtype="float16"), "NC4n")
    with pytest.raises(KilnTypeError, match="data dtype float32 and weight dtype float16 differ"):
        InferType()(IRModule.from_expr(Function([*y.args], y)))


def _have_cc() -> bool:
    return shutil.which(shlex.split(settings.cc)[0]) is not None


@pytest.mark.requires_cc
@pytest.mark.skipif(not _have_cc(), reason="no C compiler")
def test_compiled_kernel_matches_numpy(rng):
    from kiln.codegen.native import build_native

    cases = [(3, 37, 24, 8, "float32"), (1, 512, 10, 5, "float32"), (2, 9, 6, 3, "float64")]
    funcs, inputs = {}, {}
    for i, (m, k, units, n, dtype) in enumerate(cases):
        x, w = random(rng, (m, k), dtype), random(rng, (units, k), dtype)
        y = contrib_dense_pack(relay.var("x", shape=(m, k), dtype=dtype),
                               relay.var("w", shape=(units // n, k, n), dtype=dtype), f"NC{n}n")
        fn = InferType()(IRModule.from_expr(Function([*y.args], y)))["main"]
        funcs[f"kernel{i}"] = fn.with_attr("Primitive", 1)
        inputs[f"kernel{i}"] = (x, pack(w, n), x.astype(np.float64) @ w.astype(np.float64).T)
    lib = build_native(funcs)
    for name, (x, packed, expected) in inputs.items():
        out = np.empty(expected.shape, x.dtype)
        lib.kernel(name).bind([x, packed, out])()
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
