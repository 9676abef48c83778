"""The C code generator: golden snapshots, vector math accuracy, and generated-code structure.

Golden files (``golden_c/*.c``) hold the exact C of three kernels: an element-wise chain, a
vectorized reduction and a convolution with padding, bias and relu. Regenerate them after an
intended change with ``KILN_UPDATE_GOLDEN=1 pytest tests/codegen/test_c_codegen.py`` and review
the diff. The vector approximations of exp/tanh/sigmoid/erf are measured against float64 NumPy
on dense samples of the whole float32 range, including infinities, NaN and the over/underflow
limits.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.special

from kiln import relay, te
from kiln.codegen.c_codegen import CCodegen, c_literal
from kiln.codegen.native import COMPILE_FLAGS, detect_vector_bytes, lower_function
from kiln.ir.module import IRModule
from kiln.op import elemwise as ew
from kiln.te.default_schedule import default_schedule
from kiln.te.loop_ir import Allocate, Buffer, BufferLoad, For, PrimFunc, Store
from kiln.te.lower import lower
from kiln.transform.infer_type import infer_type

GOLDEN = Path(__file__).parent / "golden_c"
needs_cc = pytest.mark.requires_cc


def _compile(funcs: list[PrimFunc], vector_bytes: int = 32):
    from kiln.codegen.native import compile_module
    from kiln.runtime.native import NativeLibrary

    src = CCodegen(vector_bytes).module(funcs)
    return NativeLibrary(compile_module(src, "c_codegen_test"))


# --- the three snapshot kernels -------------------------------------------------------------------

def elementwise_chain() -> PrimFunc:
    """(x + y) -> exp -> * 2 with y broadcast along rows: one fused relay function."""
    x = relay.var("x", shape=(64, 1024), dtype="float32")
    y = relay.var("y", shape=(1024,), dtype="float32")
    body = ew.multiply(ew.exp(ew.add(x, y)), relay.const(2.0, "float32"))
    func = relay.Function([x, y], body).with_attr("Primitive", 1)
    func = infer_type(IRModule.from_expr(func))["main"]
    return lower_function("fused_add_exp_multiply", func, vector_bytes=32, num_threads=2)


def column_sum_of_squares() -> PrimFunc:
    a = te.placeholder((37, 100), name="p0")
    k = te.reduce_axis((0, 37), name="k")
    s = te.compute((100,), lambda j: te.sum(a[k, j] * a[k, j], axis=k), name="T_sum_sq")
    dag = te.ComputeDAG([a, s])
    return lower(dag, default_schedule(dag, 32, 2), name="fused_square_sum",
                 attrs={"fused_ops": ["multiply", "sum"], "source_names": ["Square", "Sum"]})


def conv_bias_relu() -> PrimFunc:
    data = te.placeholder((1, 8, 14, 14), name="p0")
    weight = te.placeholder((16, 8, 3, 3), name="p1")
    bias = te.placeholder((16,), name="p2")
    pad = te.compute((1, 8, 16, 16), lambda n, c, y, x: te.if_then_else(
        te.all(y >= 1, y < 15, x >= 1, x < 15), data[n, c, y - 1, x - 1], te.const(0.0)),
        name="T_pad", tag="injective")
    rc = te.reduce_axis((0, 8), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    conv = te.compute((1, 16, 14, 14), lambda n, o, y, x: te.sum(
        pad[n, rc, y + ry, x + rx] * weight[o, rc, ry, rx], axis=[rc, ry, rx]), name="T_conv2d")
    out = te.compute((1, 16, 14, 14), lambda n, o, y, x: te.max(conv[n, o, y, x] + bias[o],
                                                                  te.const(0.0)),
                     name="T_relu", tag="elemwise")
    dag = te.ComputeDAG([data, weight, bias, out])
    return lower(dag, default_schedule(dag, 32, 2), name="fused_conv2d_add_relu",
                 attrs={"fused_ops": ["nn.conv2d", "add", "nn.relu"],
                        "source_names": ["Conv_0", "Relu_1"]})


SNAPSHOTS = {"elementwise_chain": elementwise_chain, "column_sum": column_sum_of_squares,
             "conv_bias_relu": conv_bias_relu}


@pytest.mark.parametrize("name", sorted(SNAPSHOTS))
def test_golden_c(name: str) -> None:
    text = CCodegen(32).function(SNAPSHOTS[name]())
    path = GOLDEN / f"{name}.c"
    if os.environ.get("KILN_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"generated C for {name} changed; see the module docstring"


def test_generation_is_deterministic() -> None:
    first = CCodegen(32).module([f() for f in SNAPSHOTS.values()])
    second = CCodegen(32).module([f() for f in SNAPSHOTS.values()])
    assert first == second


@needs_cc
def test_snapshot_kernels_compute_correct_values() -> None:
    lib = _compile([f() for f in SNAPSHOTS.values()])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 1024)).astype(np.float32) * 0.5
    y = rng.standard_normal(1024).astype(np.float32) * 0.5
    out = np.empty((64, 1024), np.float32)
    lib.kernel("fused_add_exp_multiply")(x, y, out)
    np.testing.assert_allclose(out, np.exp(x.astype(np.float64) + y) * 2, rtol=3e-7)

    a = rng.standard_normal((37, 100)).astype(np.float32)
    s = np.empty(100, np.float32)
    lib.kernel("fused_square_sum")(a, s)
    np.testing.assert_allclose(s, (a.astype(np.float64) ** 2).sum(0), rtol=1e-5)

    d = rng.standard_normal((1, 8, 14, 14)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    got = np.empty((1, 16, 14, 14), np.float32)
    lib.kernel("fused_conv2d_add_relu")(d, w, b, got)
    p = np.pad(d[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    ref = np.zeros((16, 14, 14))
    for ky in range(3):
        for kx in range(3):
            ref += np.einsum("oc,cyx->oyx", w[:, :, ky, kx], p[:, ky:ky + 14, kx:kx + 14])
    np.testing.assert_allclose(got[0], np.maximum(ref + b[:, None, None], 0), rtol=1e-5,
                               atol=1e-5)


# --- structure of generated code -------------------------------------------------------------

def test_header_abi_and_pragmas() -> None:
    text = CCodegen(32).function(conv_bias_relu())
    assert text.startswith("/* Kiln kernel fused_conv2d_add_relu\n"
                           " * fused ops: nn.conv2d, add, nn.relu\n"
                           " * source nodes: Conv_0, Relu_1\n")
    assert "int32_t fused_conv2d_add_relu(void** args) {" in text
    assert "  const float* restrict p0 = (const float*)args[0];" in text
    assert "  float* restrict T_relu = (float*)args[3];" in text
    # the parallel loop is a chunk function run by the library's pool, not an OpenMP region
    assert ("static void fused_conv2d_add_relu__par0(void* kiln_ctx, int64_t kiln_begin, "
            "int64_t kiln_end) {") in text
    assert "kiln_parallel_for(fused_conv2d_add_relu__par0, &kiln_ctx" in text
    assert "#pragma omp parallel" not in text
    assert text.rstrip().endswith("return 0;\n}")


@pytest.mark.parametrize(("vector_bytes", "lanes"), [(32, 8), (64, 16)])
def test_vector_width_follows_the_target(vector_bytes: int, lanes: int) -> None:
    a = te.placeholder((100,), name="a")
    b = te.compute((100,), lambda i: te.exp(a[i]) + 1.0, name="b")
    dag = te.ComputeDAG([a, b])
    cg = CCodegen(vector_bytes)
    text = cg.module([lower(dag, default_schedule(dag, vector_bytes, 1), name="k")])
    assert f"typedef float kiln_f32x{lanes} __attribute__((vector_size({4 * lanes})));" in text
    assert f"kiln_vexp_f32x{lanes}(" in text


@needs_cc
def test_detected_vector_width_matches_the_compiler_macros() -> None:
    out = subprocess.run(["cc", "-march=native", "-dM", "-E", "-x", "c", "/dev/null"],
                         capture_output=True, text=True, check=True).stdout
    expected = 64 if "__AVX512F__" in out else 32 if "__AVX__" in out else 16
    assert detect_vector_bytes() == expected


def test_unroll_collapse_simd_fallback_and_heap_allocation() -> None:
    i, j, k = te.var("i"), te.var("j"), te.var("k")
    out = Buffer("out", "float32", (8, 8, 6), kind="output")
    big = Buffer("big", "float32", (40000,), kind="temp")
    idx = i * 48 + j * 6 + k
    inner = For(k, 6, "vectorized", Store(out, idx, BufferLoad(big, k, "float32")))
    nest = For(i, 8, "parallel", For(j, 8, "parallel", inner))
    fill = For(k, 4, "unrolled", Store(big, k, te.const(1.5)))
    func = PrimFunc("k", [out], Allocate(big, _seq(fill, nest)))
    text = CCodegen(32).function(func)
    assert "#pragma GCC unroll 4" in text
    # the two parallel loops are flattened into one iteration space of 64
    assert "for (int64_t kiln_i = kiln_begin; kiln_i < kiln_end; ++kiln_i) {" in text
    assert "const int32_t i = (int32_t)(kiln_i / 8);" in text
    assert "const int32_t j = (int32_t)((kiln_i) % 8);" in text
    assert "kiln_parallel_for(k__par0, &kiln_ctx1, 64);" in text
    assert "#pragma omp simd" in text  # 6 lanes is not a power of two
    assert "float* restrict big = (float*)malloc(40000u * sizeof(float));" in text
    assert "if (big == NULL) return -1;" in text and "free(big);" in text


def _seq(*stmts):
    from kiln.te.loop_ir import Seq

    return Seq(tuple(stmts))


@pytest.mark.parametrize("value", [0.1, -2.5e-38, 3.4028234663852886e38, 1e-45, 123456.789,
                                   float("inf"), float("-inf")])
def test_float_literals_are_exact(value: float) -> None:
    v32 = float(np.float32(value))
    text32 = c_literal(v32, "float32")
    if np.isfinite(v32):  # 9 significant digits identify a float32 exactly
        assert np.float32(float(text32.strip("()").rstrip("f"))) == np.float32(v32)
    else:
        assert text32 in ("INFINITY", "(-INFINITY)")
    text64 = c_literal(value, "float64")
    if np.isfinite(value):
        assert float(text64.strip("()")) == value
    assert c_literal(-2147483648, "int32") == "(-2147483647 - 1)"
    assert c_literal(7, "uint64") == "7ull"


@needs_cc
def test_thread_count_does_not_change_results() -> None:
    from kiln.codegen.native import build_native

    x = relay.var("x", shape=(300, 257), dtype="float32")
    func = relay.Function([x], ew.tanh(ew.multiply(x, x))).with_attr("Primitive", 1)
    func = infer_type(IRModule.from_expr(func))["main"]
    lib = build_native({"threads_test": func})
    data = np.random.default_rng(1).standard_normal((300, 257)).astype(np.float32)
    results = []
    for n in (1, 2):
        lib.set_num_threads(n)
        out = np.empty_like(data)
        lib.kernel("threads_test")(data, out)
        results.append(out)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_allclose(results[0], np.tanh(data.astype(np.float64) ** 2), rtol=3e-7,
                               atol=1e-7)


# --- vector math accuracy ----------------------------------------------------------------------

def _ulp_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in units of the float32 spacing at ref (ref in float64)."""
    _, exp = np.frexp(np.abs(ref))
    ulp = np.where(ref == 0, 2.0 ** -149, np.ldexp(1.0, np.maximum(exp - 24, -149)))
    overflow = np.abs(ref) >= 3.4028235677973366e38
    with np.errstate(invalid="ignore"):  # inf - inf where ref overflows: replaced below
        err = np.abs(got.astype(np.float64) - ref) / ulp
    inf_ok = np.isinf(got) & (np.sign(got) == np.sign(ref))
    return np.where(overflow, np.where(inf_ok, 0.0, np.inf), err)


def _samples() -> np.ndarray:
    bits = np.arange(0, 1 << 32, 2053, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.7228317, 88.7228394,
                         -103.972084, -103.9721, 1e-30, -1e-30, 0.55, 0.9, 1.0, 4.0, 9.1],
                        np.float32)
    return np.concatenate([x[np.isfinite(x)], specials])


MATH = {
    "exp": (np.exp, 1.1),
    "tanh": (np.tanh, 1.6),
    "sigmoid": (scipy.special.expit, 2.1),
    "erf": (scipy.special.erf, 1.1),
}
# (vector bytes, extra compile flags): every width, and the code paths of machines without
# AVX-512 (AVX2 permutes, two-step scaling) and without AVX2 (portable vector code)
MATH_TARGETS = [(16, ()), (32, ()), (64, ()), (64, ("-mno-avx512f",)),
                (32, ("-mno-avx2", "-mno-avx512f"))]


@pytest.fixture(scope="module", params=MATH_TARGETS, ids=lambda t: f"{t[0]}B{''.join(t[1])}")
def math_lib(request: pytest.FixtureRequest):
    from kiln.codegen.native import compile_module
    from kiln.runtime.native import NativeLibrary

    vector_bytes, flags = request.param
    n = 1 << 16
    funcs = []
    for name in MATH:
        x = te.placeholder((n,), "float32", "x")
        fn = getattr(te, name)
        y = te.compute((n,), lambda i: fn(x[i]), name="y")  # noqa: B023 - used at once
        dag = te.ComputeDAG([x, y])
        funcs.append(lower(dag, default_schedule(dag, vector_bytes, 1), name=f"vmath_{name}"))
    x = te.placeholder((n,), "float32", "x")
    y = te.compute((n,), lambda i: te.exp(x[i], upper=0.0), name="y")
    dag = te.ComputeDAG([x, y])
    funcs.append(lower(dag, default_schedule(dag, vector_bytes, 1), name="vmath_expneg"))
    text = CCodegen(vector_bytes).module(funcs)
    lib = NativeLibrary(compile_module(text, "vmath_test", flags=(*COMPILE_FLAGS, *flags)))
    return n, lib, text, vector_bytes // 4


@needs_cc
@pytest.mark.parametrize("name", sorted(MATH))
def test_vector_math_error_bound(math_lib, name: str) -> None:
    n, lib, text, lanes = math_lib
    assert f"kiln_v{name}_f32x{lanes}(" in text  # the vector approximation, not libm
    ref_fn, bound = MATH[name]
    xs = _samples()
    worst = 0.0
    for start in range(0, xs.size, n):
        chunk = xs[start:start + n]
        buf = np.zeros(n, np.float32)
        buf[:chunk.size] = chunk
        out = np.empty(n, np.float32)
        lib.kernel(f"vmath_{name}")(buf, out)
        got = out[:chunk.size]
        with np.errstate(all="ignore"):
            ref = ref_fn(chunk.astype(np.float64))
        assert np.array_equal(np.isnan(got), np.isnan(ref)), name
        ok = ~np.isnan(ref)
        worst = max(worst, float(_ulp_error(got[ok], ref[ok]).max()))
    assert worst <= bound, f"{name}: max error {worst:.3f} ulp"


@needs_cc
def test_exp_of_a_non_positive_argument_is_the_same_exp(math_lib) -> None:
    """``te.exp(x, upper=0)`` (softmax's exp) takes the vector code without overflow handling,
    and it returns exactly what the general exp does on its domain (NaN included)."""
    n, lib, text, lanes = math_lib
    assert f"kiln_vexpneg_f32x{lanes}(" in text
    xs = _samples()
    xs = xs[~(xs > 0)]
    for start in range(0, xs.size, n):
        buf = np.zeros(n, np.float32)
        buf[:min(n, xs.size - start)] = xs[start:start + n]
        general, nonpositive = np.empty(n, np.float32), np.empty(n, np.float32)
        lib.kernel("vmath_exp")(buf, general)
        lib.kernel("vmath_expneg")(buf, nonpositive)
        np.testing.assert_array_equal(nonpositive.view(np.uint32), general.view(np.uint32))


def test_exp_upper_bound_is_not_part_of_the_dag() -> None:
    x = te.placeholder((4, 8), "float32", "x")

    def dag(upper: float | None) -> te.ComputeDAG:
        return te.ComputeDAG([x, te.compute((4, 8), lambda i, j: te.exp(x[i, j], upper=upper),
                                            name="y")])

    dags = [dag(None), dag(0.0)]
    assert dags[0].workload_key() == dags[1].workload_key()
    assert str(dags[0]) == str(dags[1])


def test_prelude_documents_the_measured_bounds() -> None:
    from kiln.codegen import c_prelude

    table = re.findall(r"^(exp|tanh|sigmoid|erf)\s.*?([\d.]+) ulp$", c_prelude.__doc__ or "",
                       flags=re.M)
    assert {name: float(v) <= MATH[name][1] for name, v in table} == {n: True for n in MATH}


def test_expr_facts_agree_with_a_fresh_walk_on_shared_subtrees() -> None:
    """ExprFacts memoises per node; the answers must be those of walking each tree afresh,
    also for subtrees shared between expressions and asked about in any order."""
    from kiln.codegen.c_codegen import ExprFacts
    from kiln.te import expr as E
    from kiln.te.visit import post_order, vars_in

    rng = np.random.default_rng(3)
    i, j, k = (E.Var(n, "int32") for n in "ijk")
    bufs = [Buffer(f"b{n}", "float32", (64,), kind="input") for n in range(3)]
    pool: list = [i, j, k, E.const(2, "int32")]
    for _ in range(200):
        kind = rng.integers(3)
        a, b = (pool[int(rng.integers(len(pool)))] for _ in range(2))
        if kind == 0 and a.dtype == b.dtype:
            pool.append(E.Binary("add", a, b, a.dtype))
        elif kind == 1 and a.dtype == "int32":
            pool.append(BufferLoad(bufs[int(rng.integers(3))], a, "float32"))
        elif a.dtype == "float32" and b.dtype == "float32":
            pool.append(E.Binary("mul", a, b, "float32"))
    facts = ExprFacts()
    for e in reversed(pool):  # parents before their (shared) children
        assert facts.vars(e) == vars_in(e)
        assert facts.buffers(e) == {id(n.buffer) for n in post_order(e)
                                    if isinstance(n, BufferLoad)}
