"""Compiled C kernels of element-wise operators against their NumPy reference kernels.

Every element-wise op is built with ``build_native`` (all cases of a group in one library, so
the C compiler runs once per group) and run on random data with special values (zeros, NaN,
infinities, extreme integers); the result must match the op's registered reference kernel (the
project's oracle) and, for a few ops, a NumPy formula written here.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from kiln import relay
from kiln.codegen.native import build_native, float16_supported
from kiln.errors import CompileError
from kiln.ir.module import IRModule
from kiln.ir.types import np_dtype
from kiln.op.elemwise import BINARY_OPS, UNARY_OPS, CastAttrs, ClipAttrs
from kiln.op.registry import get_op_def, make_call
from kiln.transform.infer_type import infer_type

pytestmark = pytest.mark.requires_cc

FLOATS = ("float32", "float64", "float16") if float16_supported() else ("float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8")
KIND_DTYPES = {
    "float": FLOATS,
    "numeric": (*FLOATS, *INTS),
    "int": (*INTS, "bool"),
    "bool": ("bool",),
    "any": (*FLOATS, *INTS, "bool"),
}
TOL = {"float16": (2e-3, 1e-3), "float32": (2e-6, 1e-6), "float64": (1e-12, 1e-12)}


def _function(op: str, types: list[tuple[tuple[int, ...], str]], attrs=None):
    params = [relay.var(f"x{i}", shape=s, dtype=d) for i, (s, d) in enumerate(types)]
    call = make_call(op, params, attrs, source_names=[f"{op}_node"])
    func = relay.Function(params, call).with_attr("Primitive", 1)
    return infer_type(IRModule.from_expr(func))["main"]


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, op: str) -> np.ndarray:
    return np.asarray(_raw_data(rng, shape, dtype, op))


def _raw_data(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, op: str) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("float"):
        x = rng.standard_normal(shape) * 3
        if op in ("log", "log2", "log10", "sqrt", "rsqrt", "acosh"):
            x = np.abs(x) + 0.5
        if op in ("asin", "acos", "atanh"):
            x = np.tanh(x)
        flat = x.reshape(-1)
        specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 88.0, -100.0, 1e-30]
        flat[: min(len(specials), flat.size // 4)] = specials[: min(len(specials), flat.size // 4)]
        return x.astype(dtype)
    info = np.iinfo(dtype)
    if op in ("left_shift", "right_shift"):
        return rng.integers(0, min(int(info.max), 70), shape, dtype=dtype)
    lo, hi = max(int(info.min), -1000), min(int(info.max), 1000)
    x = rng.integers(lo, hi + 1, shape).astype(dtype)
    flat = x.reshape(-1)
    extremes = [0, int(info.min), int(info.max), 1, -1 if info.min < 0 else 2]
    flat[: min(5, flat.size // 3)] = extremes[: min(5, flat.size // 3)]
    return x


def _compare(out: np.ndarray, ref: np.ndarray, dtype: str, what: str) -> None:
    assert out.shape == ref.shape and out.dtype == ref.dtype, what
    if dtype in TOL:
        rtol, atol = TOL[dtype]
        np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=rtol,
                                   atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(out, ref, err_msg=what)


def _run(lib, name: str, func, arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    ty = func.body.checked_type
    out = np.zeros(ty.shape, np_dtype(ty.dtype))
    lib.kernel(name)(*arrays, out)
    op_def = get_op_def(func.body.op.name)
    ref = op_def.reference(arrays, func.body.attrs, ty)
    return out, np.asarray(ref)


# --- unary ops ------------------------------------------------------------------------------

UNARY_SHAPE = (3, 37)  # not a multiple of any vector width
UNARY_CASES = [(op, dt) for op, (_, kind, _) in UNARY_OPS.items() for dt in KIND_DTYPES[kind]]


@pytest.fixture(scope="module")
def unary_lib():
    funcs = {f"u_{op}_{dt}": _function(op, [(UNARY_SHAPE, dt)]) for op, dt in UNARY_CASES}
    return build_native(funcs), funcs


@pytest.mark.parametrize(("op", "dtype"), UNARY_CASES)
def test_unary(unary_lib, op: str, dtype: str) -> None:
    lib, funcs = unary_lib
    name = f"u_{op}_{dtype}"
    x = _data(np.random.default_rng(hash(name) % 2**32), UNARY_SHAPE, dtype, op)
    out, ref = _run(lib, name, funcs[name], [x])
    _compare(out, ref, funcs[name].body.checked_type.dtype, name)


# --- binary ops with broadcasting --------------------------------------------------------------

BROADCAST = ((4, 1, 37), (5, 1))  # -> (4, 5, 37): both operands broadcast
SHAPE_PAIRS = [((3, 37), (3, 37)), ((), (7,)), ((16,), (1,)), ((2, 3, 1), ())]
BINARY_CASES = [(op, dt, BROADCAST) for op, (_, kind, _) in BINARY_OPS.items()
                for dt in KIND_DTYPES[kind]]
BINARY_CASES += [(op, dt, pair) for op, (_, kind, _) in BINARY_OPS.items()
                 for dt in ("float32", "int32") if dt in KIND_DTYPES[kind] for pair in SHAPE_PAIRS]


def _binary_name(op: str, dtype: str, shapes) -> str:
    dims = "_".join("x".join(map(str, s)) or "s" for s in shapes)
    return f"b_{op}_{dtype}_{dims}"


@pytest.fixture(scope="module")
def binary_lib():
    funcs = {_binary_name(op, dt, shapes): _function(op, [(shapes[0], dt), (shapes[1], dt)])
             for op, dt, shapes in BINARY_CASES}
    return build_native(funcs), funcs


@pytest.mark.parametrize(("op", "dtype", "shapes"), BINARY_CASES)
def test_binary(binary_lib, op: str, dtype: str, shapes) -> None:
    lib, funcs = binary_lib
    name = _binary_name(op, dtype, shapes)
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    a = _data(rng, shapes[0], dtype, op)
    b = _data(rng, shapes[1], dtype, op)
    out, ref = _run(lib, name, funcs[name], [a, b])
    if op == "power" and dtype.startswith(("int", "uint")):
        # integers are raised in float64 (as the reference does): past 2**53 the C library's
        # pow and NumPy's may round the last bit differently (207 ** 7: ...144 and ...142)
        big = np.abs(ref.astype(np.float64)) >= 2.0**53
        np.testing.assert_allclose(out[big].astype(np.float64), ref[big].astype(np.float64),
                                   rtol=2.0**-51, err_msg=name)
        out, ref = np.where(big, 0, out), np.where(big, 0, ref)
    _compare(out, ref, funcs[name].body.checked_type.dtype, name)


# --- clip, cast, where ---------------------------------------------------------------------------

CAST_DTYPES = (*FLOATS, *INTS, "bool", "uint16", "uint32")
CAST_CASES = [(src, dst) for src in CAST_DTYPES for dst in CAST_DTYPES]
CLIP_CASES = [(dt, lo, hi) for dt in (*FLOATS, *INTS) for lo, hi in ((-1.5, 2.5), (0.0, 6.0))]


@pytest.fixture(scope="module")
def misc_lib():
    funcs = {}
    for src, dst in CAST_CASES:
        funcs[f"cast_{src}_{dst}"] = _function("cast", [((3, 19), src)], CastAttrs(dtype=dst))
    for dt, lo, hi in CLIP_CASES:
        funcs[f"clip_{dt}_{lo}_{hi}".replace(".", "p").replace("-", "m")] = _function(
            "clip", [((2, 21), dt)], ClipAttrs(a_min=lo, a_max=hi))
    for dt in ("float32", "int8", "bool", *FLOATS[2:]):
        funcs[f"where_{dt}"] = _function("where", [((4, 1, 9), "bool"), ((5, 9), dt), ((9,), dt)])
    return build_native(funcs), funcs


def _cast_input(rng: np.random.Generator, src: str) -> np.ndarray:
    if src.startswith("float"):
        x = rng.uniform(-100, 100, (3, 19))
        x.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, -0.7, 0.7, 255.5]
        return x.astype(src)
    return _data(rng, (3, 19), src, "cast")


@pytest.mark.parametrize(("src", "dst"), CAST_CASES)
def test_cast(misc_lib, src: str, dst: str) -> None:
    lib, funcs = misc_lib
    name = f"cast_{src}_{dst}"
    x = _cast_input(np.random.default_rng(3), src)
    if not src.startswith("float") and np.dtype(dst).kind in "iu":
        pass  # integer wrap-around is defined both in C (our casts) and NumPy
    out, ref = _run(lib, name, funcs[name], [x])
    _compare(out, ref, dst, name)


@pytest.mark.parametrize(("dtype", "lo", "hi"), CLIP_CASES)
def test_clip(misc_lib, dtype: str, lo: float, hi: float) -> None:
    lib, funcs = misc_lib
    name = f"clip_{dtype}_{lo}_{hi}".replace(".", "p").replace("-", "m")
    x = _data(np.random.default_rng(4), (2, 21), dtype, "clip")
    out, ref = _run(lib, name, funcs[name], [x])
    _compare(out, ref, dtype, name)
    if dtype.startswith("float"):  # an independent formula too
        expected = np.minimum(np.maximum(x, np.asarray(lo, dtype)), np.asarray(hi, dtype))
        _compare(out, expected, dtype, name)


@pytest.mark.parametrize("dtype", ["float32", "int8", "bool", *FLOATS[2:]])
def test_where(misc_lib, dtype: str) -> None:
    lib, funcs = misc_lib
    rng = np.random.default_rng(5)
    c = rng.random((4, 1, 9)) < 0.5
    x = _data(rng, (5, 9), dtype, "where")
    y = _data(rng, (9,), dtype, "where")
    out, _ = _run(lib, f"where_{dtype}", funcs[f"where_{dtype}"], [c, x, y])
    np.testing.assert_array_equal(out, np.where(c, x, y))


# --- whole fused functions ------------------------------------------------------------------------

def _typed(params, body):
    func = relay.Function(params, body).with_attr("Primitive", 1)
    return infer_type(IRModule.from_expr(func))["main"]


def test_fused_chain_constants_tuples_and_identity() -> None:
    from kiln.op import elemwise as ew

    x = relay.var("x", shape=(3, 50), dtype="float32")
    y = relay.var("y", shape=(50,), dtype="float32")
    scale = relay.const(np.linspace(-1, 1, 50).astype(np.float32))
    chain = ew.sigmoid(ew.multiply(ew.subtract(x, y), scale))
    gated = ew.where(ew.greater(chain, relay.const(0.5, "float32")), chain, ew.negative(x))
    funcs = {
        "chain": _typed([x, y], ew.clip(ew.add(gated, relay.const(1.0, "float32")), 0.0, 1.4)),
        "two_outputs": _typed([x, y], relay.Tuple([ew.exp(x), ew.add(x, y)])),
        "identity": _typed([x], x),
    }
    t = relay.var("t", relay.TupleType([relay.TensorType((3, 50), "float32"),
                                        relay.TensorType((50,), "float32")]))
    funcs["tuple_param"] = _typed([t], ew.multiply(relay.TupleGetItem(t, 0),
                                                   relay.TupleGetItem(t, 1)))
    lib = build_native(funcs)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 50)).astype(np.float32)
    b = rng.standard_normal(50).astype(np.float32)

    s = 1 / (1 + np.exp(-((a.astype(np.float64) - b) * np.linspace(-1, 1, 50))))
    want = np.clip(np.where(s > 0.5, s, -a) + 1.0, 0.0, 1.4)
    out = np.empty((3, 50), np.float32)
    lib.kernel("chain")(a, b, out)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)

    e, s2 = np.empty((3, 50), np.float32), np.empty((3, 50), np.float32)
    lib.kernel("two_outputs")(a, b, e, s2)
    np.testing.assert_allclose(e, np.exp(a.astype(np.float64)), rtol=1e-6)
    np.testing.assert_array_equal(s2, a + b)

    same = np.empty_like(a)
    lib.kernel("identity")(a, same)
    np.testing.assert_array_equal(same, a)

    prod = np.empty_like(a)
    lib.kernel("tuple_param")(a, b, prod)
    np.testing.assert_array_equal(prod, a * b)
    source = Path(lib.sources[0]).read_text()
    assert "fused ops: subtract, multiply, sigmoid, greater, negative, where, add, clip" in source


def test_zero_d_and_vector_exact_shapes() -> None:
    from kiln.op import elemwise as ew

    cases = {}
    for shape in [(), (1,), (64,), (2, 1, 3), (1000,)]:
        x = relay.var("x", shape=shape, dtype="float32")
        cases["sq_" + "x".join(map(str, shape))] = (shape, _typed([x], ew.tanh(ew.multiply(x, x))))
    lib = build_native({k: f for k, (_, f) in cases.items()})
    for name, (shape, _) in cases.items():
        a = np.asarray(np.random.default_rng(0).standard_normal(shape), dtype=np.float32)
        out = np.zeros(shape, np.float32)
        lib.kernel(name)(a, out)
        np.testing.assert_allclose(out, np.tanh(a.astype(np.float64) ** 2), rtol=3e-7, atol=1e-7)


def test_op_without_compute_is_a_clear_error(monkeypatch) -> None:
    from kiln.op import elemwise as ew

    monkeypatch.setattr(get_op_def("copy"), "compute", None)
    x = relay.var("x", shape=(4,), dtype="float32")
    call = make_call("copy", [ew.exp(x)], source_names=["Identity_7"])
    func = _typed([x], call)
    with pytest.raises(CompileError, match=r"operator copy \(source nodes: Identity_7\) has no "
                                           r"tensor-expression compute.*fused_copy"):
        build_native({"fused_copy": func})


def test_large_module_is_compiled_in_chunks(monkeypatch) -> None:
    from kiln.codegen import native
    from kiln.op import elemwise as ew

    monkeypatch.setattr(native, "KERNELS_PER_CHUNK", 2)
    funcs = {}
    for i in range(5):
        x = relay.var("x", shape=(7, i + 1), dtype="int32")
        funcs[f"chunk_k{i}"] = _typed([x], ew.add(x, relay.const(i, "int32")))
    lib = build_native(funcs)
    assert len(lib.sources) == 4  # 3 chunks of kernels, then the runtime compiled once
    texts = [Path(s).read_text() for s in lib.sources]
    assert ["void kiln_set_num_threads(int32_t n)" in t for t in texts] == [False] * 3 + [True]
    lib.set_num_threads(1)
    for i in range(5):
        a = np.arange(7 * (i + 1), dtype=np.int32).reshape(7, i + 1)
        out = np.empty_like(a)
        lib.kernel(f"chunk_k{i}")(a, out)
        np.testing.assert_array_equal(out, a + i)


def test_kernels_are_split_into_units_by_size(monkeypatch) -> None:
    """Units close at UNIT_BYTES of kernel C (compiled in parallel, each while the next is
    generated); every kernel lands in exactly one unit and the library runs them all."""
    from kiln.codegen import native
    from kiln.op import elemwise as ew

    monkeypatch.setattr(native, "UNIT_BYTES", 1)  # one kernel per unit
    funcs = {}
    for i in range(3):
        x = relay.var("x", shape=(5, i + 2), dtype="float32")
        funcs[f"unit_k{i}"] = _typed([x], ew.multiply(x, relay.const(float(i + 1))))
    lib = build_native(funcs)
    texts = [Path(s).read_text() for s in lib.sources[:-1]]  # the runtime is last
    assert len(texts) == 3
    for i in range(3):
        assert sum(f"int32_t unit_k{i}(" in t for t in texts) == 1
        a = np.arange(5 * (i + 2), dtype=np.float32).reshape(5, i + 2)
        out = np.empty_like(a)
        lib.kernel(f"unit_k{i}")(a, out)
        np.testing.assert_array_equal(out, a * (i + 1))


@pytest.mark.slow
def test_report_fused_chain_speed_and_call_overhead(capsys) -> None:
    """Measurement (printed, not asserted): a fused 5-op chain on 1M floats vs NumPy."""
    from kiln.config import settings
    from kiln.op import elemwise as ew

    n = 1 << 20
    x = relay.var("x", shape=(n,), dtype="float32")
    y = relay.var("y", shape=(n,), dtype="float32")
    body = ew.tanh(ew.add(ew.multiply(ew.exp(ew.negative(x)), y), relay.const(0.5, "float32")))
    tiny = relay.var("t", shape=(4,), dtype="float32")
    lib = build_native({"bench_chain": _typed([x, y], body),
                        "bench_tiny": _typed([tiny], ew.add(tiny, tiny))})
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.empty(n, np.float32)
    call = lib.kernel("bench_chain").bind([a, b, out])

    def numpy_chain() -> np.ndarray:
        return np.tanh(np.exp(-a) * b + np.float32(0.5))

    def best(fn, reps: int = 20) -> float:
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return float(np.median(times))

    for fn in (call, numpy_chain):
        fn()
    lines = []
    for threads in sorted({1, settings.num_threads}):
        lib.set_num_threads(threads)
        kiln_s, numpy_s = best(call), best(numpy_chain)
        lines.append(f"fused chain, 1M float32, {threads} thread(s): kiln {kiln_s * 1e3:.3f} ms, "
                     f"numpy {numpy_s * 1e3:.3f} ms, speed-up {numpy_s / kiln_s:.1f}x")
    t_in, t_out = np.ones(4, np.float32), np.empty(4, np.float32)
    tiny_call = lib.kernel("bench_tiny").bind([t_in, t_out])
    per_call = best(lambda: [tiny_call() for _ in range(10000)], reps=5) / 10000
    lines.append(f"per-kernel call overhead (bound call, 4 elements): {per_call * 1e6:.2f} us")
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def test_integer_data_wraps_inside_fused_expressions() -> None:
    """(a + 1) > a is false at the top of the range: data arithmetic is not simplified as math."""
    from kiln.op import elemwise as ew

    funcs = {}
    for dt in ("int8", "uint8", "int32"):
        a = relay.var("a", shape=(6,), dtype=dt)
        funcs[f"wrap_{dt}"] = _typed([a], ew.greater(ew.add(a, relay.const(1, dt)), a))
        funcs[f"neg_{dt}"] = _typed([a], ew.subtract(relay.const(0, dt), a))
    lib = build_native(funcs)
    for dt in ("int8", "uint8", "int32"):
        info = np.iinfo(dt)
        a = np.array([info.min, -1 if info.min else 1, 0, 1, info.max - 1, info.max], dtype=dt)
        out = np.empty(6, bool)
        lib.kernel(f"wrap_{dt}")(a, out)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(out, (a + np.asarray(1, dt)) > a)
            neg = np.empty_like(a)
            lib.kernel(f"neg_{dt}")(a, neg)
            np.testing.assert_array_equal(neg, np.asarray(0, dt) - a)
