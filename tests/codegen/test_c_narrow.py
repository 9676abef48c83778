"""Compiled narrow dtypes (bfloat16, float8, float4, int4/int2): kernels legalized by
``kiln.codegen.c_narrow`` against ``ml_dtypes``' conversions, bit for bit."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.codegen.c_narrow import legalize_narrow, uses_narrow
from kiln.contrib import graph_executor
from kiln.runtime.dtype import NARROW_FLOATS, NARROW_INTS, storage_dtype

pytestmark = pytest.mark.requires_cc

FLOATS = sorted(NARROW_FLOATS)
INTS = sorted(NARROW_INTS)
# edge values: NaN, infinities, signed zeros, subnormals of every format, halfway cases, overflow
EDGES = np.array(
    [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.5, 0.3, 448.0, 460.0, 464.0, 500.0,
     240.0, 248.0, 57344.0, 61440.0, 1e6, -1e6, 6.0, 7.0, 5.0, 0.25, 0.75, 1.25, 2.0 ** -7,
     2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -10, 2.0 ** -16, 2.0 ** -17, 2.0 ** -18, -2.0 ** -20,
     1e-7, -1e-7, 1.00390625, 1.01171875, 3.4e38, -3.4e38, 1e-40, 65504.0, 2.7],
    dtype=np.float32)


def _run(func: relay.Function, *inputs: np.ndarray, target: str = "llvm") -> np.ndarray:
    mod = kiln.IRModule.from_expr(func)
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    for i, value in enumerate(inputs):
        gm.set_input(f"x{i}", value)
    gm.run()
    return gm.get_output(0).numpy()


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint8)


@pytest.mark.parametrize("target", ["llvm", "c"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_float32_to_narrow_float_bits_match_ml_dtypes(dtype: str, target: str) -> None:
    x = relay.var("x0", shape=EDGES.shape, dtype="float32")
    out = _run(relay.Function([x], relay.cast(x, dtype)), EDGES, target=target)
    expected = EDGES.astype(getattr(ml_dtypes, dtype))
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(_bits(out), _bits(expected))


@pytest.mark.parametrize("dtype", FLOATS)
def test_float64_and_float16_sources_convert_like_ml_dtypes(dtype: str) -> None:
    wide = EDGES.astype(np.float64) * (1 + 2.0 ** -30)  # ml_dtypes rounds to float32 first
    x = relay.var("x0", shape=wide.shape, dtype="float64")
    out = _run(relay.Function([x], relay.cast(x, dtype)), wide)
    np.testing.assert_array_equal(_bits(out), _bits(wide.astype(getattr(ml_dtypes, dtype))))
    with np.errstate(over="ignore"):
        half = EDGES.astype(np.float16)
    h = relay.var("x0", shape=half.shape, dtype="float16")
    out = _run(relay.Function([h], relay.cast(h, dtype)), half)
    np.testing.assert_array_equal(_bits(out), _bits(half.astype(getattr(ml_dtypes, dtype))))


@pytest.mark.parametrize("dtype", FLOATS)
def test_every_narrow_float_code_decodes_exactly(dtype: str) -> None:
    npt = np.dtype(getattr(ml_dtypes, dtype))
    codes = np.arange(1 << (8 * npt.itemsize), dtype=storage_dtype(dtype))
    if npt.itemsize == 2:
        codes = codes[::97]  # a spread of bfloat16 codes, every exponent
    values = codes.view(npt) if dtype != "float4_e2m1fn" else (codes & 15).astype(np.uint8).view(npt)
    x = relay.var("x0", shape=values.shape, dtype=dtype)
    out = _run(relay.Function([x], relay.cast(x, "float32")), values)
    np.testing.assert_array_equal(out, values.astype(np.float32))  # NaNs compare equal
    assert np.array_equal(np.signbit(out), np.signbit(values.astype(np.float32)))


def test_bfloat16_arithmetic_computes_in_float32_and_rounds_at_the_store() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(300).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal(300).astype(ml_dtypes.bfloat16)
    x0 = relay.var("x0", shape=a.shape, dtype="bfloat16")
    x1 = relay.var("x1", shape=b.shape, dtype="bfloat16")
    body = relay.nn.relu(relay.exp(relay.multiply(x0, x1)) - x1)
    out = _run(relay.Function([x0, x1], body), a, b)
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    expected = np.maximum(np.exp(af * bf) - bf, 0).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), rtol=2 ** -7)


def test_bfloat16_reduction() -> None:
    a = (np.arange(4 * 37, dtype=np.float32).reshape(4, 37) / 8).astype(ml_dtypes.bfloat16)
    x = relay.var("x0", shape=a.shape, dtype="bfloat16")
    out = _run(relay.Function([x], relay.sum(relay.cast(x, "float32"), axis=1)), a)
    np.testing.assert_allclose(out, a.astype(np.float32).sum(axis=1), rtol=1e-6)


@pytest.mark.parametrize("dtype", INTS)
def test_sub_byte_integers_wrap_like_ml_dtypes(dtype: str) -> None:
    npt = getattr(ml_dtypes, dtype)
    src = np.arange(-20, 21, dtype=np.float32) + 0.7
    x = relay.var("x0", shape=src.shape, dtype="float32")
    out = _run(relay.Function([x], relay.cast(x, dtype)), src)
    np.testing.assert_array_equal(out.view(np.uint8), src.astype(npt).view(np.uint8))
    ints = np.arange(-20, 21, dtype=np.int32)
    y = relay.var("x0", shape=ints.shape, dtype="int32")
    back = relay.cast(relay.add(relay.cast(y, dtype), relay.cast(y, dtype)), "int32")
    out = _run(relay.Function([y], back), ints)
    twice = ints.astype(npt)
    np.testing.assert_array_equal(out, (twice + twice).astype(np.int32))


def test_legalized_kernels_are_scalar_and_use_storage_types() -> None:
    from kiln import te
    from kiln.te.loop_ir import BufferLoad, For, Store, walk_stmts
    from kiln.te.lower import lower
    from kiln.te.visit import post_order

    a = te.placeholder((64,), dtype="bfloat16", name="a")
    b = te.compute((64,), lambda i: a[i] + a[i], name="b")
    s = te.create_schedule(b.op)
    s[b].vectorize(b.op.axis[0])
    func = lower(s, args=[a, b], name="double")
    assert uses_narrow(func)
    legal = legalize_narrow(func)
    assert [p.dtype for p in legal.params] == ["uint16", "uint16"]
    assert not uses_narrow(legal)
    loops = [s for s in walk_stmts(legal.body) if isinstance(s, For)]
    assert loops and all(f.kind != "vectorized" for f in loops)
    loads = [n for st in walk_stmts(legal.body) if isinstance(st, Store)
             for n in post_order(st.value) if isinstance(n, BufferLoad)]
    assert loads and all(n.dtype == "uint16" for n in loads)


def test_constants_with_equal_bytes_but_different_narrow_dtypes_stay_apart() -> None:
    raw = np.array([1, 2, 3, 9], np.uint8)
    f8 = raw.view(ml_dtypes.float8_e4m3fn)
    i4 = raw.view(ml_dtypes.int4)
    x = relay.var("x0", shape=(4,), dtype="float32")
    mod = kiln.IRModule.from_expr(
        relay.Function([x], relay.Tuple([relay.const(f8), relay.const(i4), x])))
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    gm.set_input("x0", np.zeros(4, np.float32))
    gm.run()
    _same = np.testing.assert_array_equal
    out0, out1 = gm.get_output(0).numpy(), gm.get_output(1).numpy()
    assert (out0.dtype, out1.dtype) == (f8.dtype, i4.dtype)
    _same(out0.astype(np.float32), f8.astype(np.float32))
    _same(out1.astype(np.int32), i4.astype(np.int32))


def test_exported_library_keeps_narrow_graph_types(tmp_path: object) -> None:
    from pathlib import Path

    a = np.array([0.5, -2.25, 300.0, np.nan], np.float32)
    x = relay.var("x0", shape=a.shape, dtype="bfloat16")
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.cast(x * x, "float8_e5m2")))
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    path = Path(str(tmp_path)) / "narrow.so"
    lib.export_library(str(path))
    loaded = kiln.runtime.load_module(str(path))
    gm = graph_executor.GraphModule(loaded["default"](kiln.cpu()))
    gm.set_input("x0", kiln.nd.empty(a.shape, "bfloat16").copyfrom(a))
    gm.run()
    out = gm.get_output(0).numpy()
    b = a.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(_bits(out), _bits((b * b).astype(ml_dtypes.float8_e5m2)))


@pytest.mark.parametrize(("src", "dst"), [("bfloat16", "int16"), ("uint16", "bfloat16"),
                                          ("float8_e5m2", "uint8"), ("int8", "float8_e4m3fn"),
                                          ("float16", "bfloat16")])
def test_reinterpret_keeps_the_bits(src: str, dst: str) -> None:
    from kiln.runtime.dtype import np_dtype

    a = (np.arange(-3, 5, dtype=np.float32) * 1.5).astype(np_dtype(src))
    x = relay.var("x0", shape=a.shape, dtype=src)
    out = _run(relay.Function([x], relay.reinterpret(x, dst)), a)
    assert out.dtype == np_dtype(dst)
    np.testing.assert_array_equal(out.view(np.uint8), a.view(np.uint8))
