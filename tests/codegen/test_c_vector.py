"""Vector loops: masked tails, the constant-false end check, and shuffle-tree reductions.

Every kernel is checked against a NumPy formula written here. Outputs sit inside larger arrays
filled with a sentinel, so a masked store that writes past the data is caught; a subprocess also
runs every kernel on arrays that end right before an inaccessible page, so a load or store past
the data crashes it (and fails the test) instead of reading neighbouring memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln import te
from kiln.codegen.c_codegen import CCodegen
from kiln.codegen.native import compile_module
from kiln.runtime.native import NativeLibrary
from kiln.te import expr as E
from kiln.te.default_schedule import default_schedule
from kiln.te.loop_ir import Allocate, Buffer, BufferLoad, For, IfThenElse, PrimFunc, Seq, Store
from kiln.te.lower import lower
from kiln.te.templates import TargetInfo, apply_template

pytestmark = pytest.mark.requires_cc

ROOT = Path(__file__).resolve().parents[2]
WIDTHS = (3, 5, 13, 16, 17, 31, 40, 197)
VECTOR_BYTES = (16, 32, 64)
DTYPES = ("float32", "float64", "int8", "uint8", "int16", "int32", "int64")
ROWS = 3
SENTINEL = 77


@dataclass(frozen=True)
class Case:
    """A kernel of the test library: its inputs' shapes and dtypes and its output's."""

    name: str
    kind: str
    dtype: str
    inputs: tuple[tuple[tuple[int, ...], str], ...]
    output: tuple[tuple[int, ...], str]


def _row_map(dtype: str, width: int, vector_bytes: int) -> tuple[PrimFunc, Case]:
    """y[r, c] = f(x[r, c], b[r]): the per-row operand keeps rows apart, so every row's vector
    loop has its own tail."""
    name = f"map_{dtype}_{width}_{vector_bytes}"
    x = te.placeholder((ROWS, width), dtype, "x")
    b = te.placeholder((ROWS,), dtype, "b")
    if dtype == "float32":
        y = te.compute((ROWS, width), lambda r, c: te.exp(x[r, c] - b[r]) * x[r, c], name="y")
    elif dtype == "float64":
        y = te.compute((ROWS, width), lambda r, c: x[r, c] * b[r] - x[r, c], name="y")
    else:
        y = te.compute((ROWS, width), lambda r, c: x[r, c] * te.const(3, dtype) + b[r], name="y")
    dag = te.ComputeDAG([x, b, y])
    func = lower(dag, default_schedule(dag, vector_bytes, 1), name=name)
    case = Case(name, "map", dtype, (((ROWS, width), dtype), ((ROWS,), dtype)),
                ((ROWS, width), dtype))
    return func, case


def _row_reduce(kind: str, width: int, vector_bytes: int) -> tuple[PrimFunc, Case]:
    """Row max / sum / softmax over the last axis, scheduled by the row-reduction template
    (rfactor lanes, a masked tail, the lanes combined by a shuffle tree)."""
    name = f"{kind}_{width}_{vector_bytes}"
    x = te.placeholder((ROWS, width), "float32", "x")
    k = te.reduce_axis((0, width), name="k")
    if kind == "max":
        out = te.compute((ROWS,), lambda r: te.max(x[r, k], axis=k), name="m")
        shape: tuple[int, ...] = (ROWS,)
    elif kind == "sum":
        out = te.compute((ROWS,), lambda r: te.sum(x[r, k] * x[r, k], axis=k), name="s")
        shape = (ROWS,)
    else:
        m = te.compute((ROWS,), lambda r: te.max(x[r, k], axis=k), name="m")
        e = te.compute((ROWS, width), lambda r, c: te.exp(x[r, c] - m[r]), name="e")
        k2 = te.reduce_axis((0, width), name="k2")
        s = te.compute((ROWS,), lambda r: te.sum(e[r, k2], axis=k2), name="s")
        out = te.compute((ROWS, width), lambda r, c: e[r, c] / s[r], name="y")
        shape = (ROWS, width)
    dag = te.ComputeDAG([x, out])
    state = apply_template(dag, TargetInfo(vector_bytes, 1))
    func = lower(dag, state if state is not None else default_schedule(dag, vector_bytes, 1),
                 name=name)
    return func, Case(name, kind, "float32", (((ROWS, width), "float32"),), (shape, "float32"))


def _dense_k5() -> tuple[PrimFunc, Case]:
    """out[i] = sum_{k<5} x[i, k] * w[k] with the reduction on 16 lanes: the lane check
    ``k < 5`` is true at lane 0 and false at lane 15 whatever the row (the dense 7x40, K=5
    case): every iteration must be masked, none may use the unguarded vector path."""
    i, kv = te.var("i"), te.var("kv")
    x = Buffer("x", "float32", (7, 5), kind="input")
    w = Buffer("w", "float32", (5,), kind="input")
    out = Buffer("out", "float32", (7,), kind="output")
    acc = Buffer("acc", "float32", (16,), kind="temp")
    zero = For(kv, 16, "vectorized", Store(acc, kv, E.const(0.0)))
    update = For(kv, 16, "vectorized", IfThenElse(
        kv < 5, Store(acc, kv, BufferLoad(acc, kv, "float32")
                      + BufferLoad(x, i * 5 + kv, "float32") * BufferLoad(w, kv, "float32"))))
    combine = Seq((Store(out, i, E.const(0.0)),
                   For(kv, 16, "serial", Store(out, i, BufferLoad(out, i, "float32")
                                               + BufferLoad(acc, kv, "float32")))))
    body = For(i, 7, "serial", Allocate(acc, Seq((zero, update, combine))))
    case = Case("dense_k5", "dense_k5", "float32", (((7, 5), "float32"), ((5,), "float32")),
                ((7,), "float32"))
    return PrimFunc("dense_k5", [x, w, out], body), case


def _register_copy() -> tuple[PrimFunc, Case]:
    """A register tile of 2 vectors read by an unrolled loop of 3 copies under ``u < 2``: the
    third copy is decided false once unrolled and must not name a third vector."""
    u, v = te.var("u"), te.var("v")
    x = Buffer("x", "float32", (16,), kind="input")
    out = Buffer("out", "float32", (24,), kind="output")
    acc = Buffer("acc", "float32", (16,), kind="temp")
    fill = For(u, 2, "unrolled", For(v, 8, "vectorized",
                                     Store(acc, u * 8 + v, BufferLoad(x, u * 8 + v, "float32"))))
    copy = For(u, 3, "unrolled", For(v, 8, "vectorized", IfThenElse(
        u < 2, Store(out, u * 8 + v, BufferLoad(acc, u * 8 + v, "float32") * E.const(2.0)),
        Store(out, u * 8 + v, E.const(-1.0)))))
    case = Case("register_copy", "register_copy", "float32", (((16,), "float32"),),
                ((24,), "float32"))
    return PrimFunc("register_copy", [x, out], Allocate(acc, Seq((fill, copy)))), case


def _all_kernels() -> list[tuple[PrimFunc, Case]]:
    kernels = [_dense_k5(), _register_copy()]
    for vb in VECTOR_BYTES:
        for width in WIDTHS:
            kernels += [_row_map(dtype, width, vb) for dtype in DTYPES]
            kernels += [_row_reduce(kind, width, vb) for kind in ("max", "sum", "softmax")]
    return kernels


@pytest.fixture(scope="module")
def vector_lib() -> tuple[NativeLibrary, dict[str, Case], str]:
    kernels = _all_kernels()
    funcs = [f for f, _ in kernels]
    text = CCodegen(64).module(funcs)  # the generator takes any power-of-two vector loop
    lib = NativeLibrary(compile_module(text, "vector_tails_test"))
    return lib, {c.name: c for _, c in kernels}, text


def _inputs(case: Case, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for shape, dtype in case.inputs:
        if dtype.startswith("float"):
            a = rng.standard_normal(shape) * 3
            if case.kind == "max":
                a[rng.random(shape) < 0.05] = np.nan  # NaN wins, as in numpy.max
        else:
            info = np.iinfo(dtype)
            a = rng.integers(info.min, info.max, size=shape, endpoint=True)
        out.append(np.ascontiguousarray(a.astype(dtype)))
    return out


def _expected(case: Case, args: list[np.ndarray]) -> np.ndarray:
    x = args[0]
    if case.kind == "map":
        b = args[1][:, None]
        if case.dtype == "float32":
            x64 = x.astype(np.float64)
            return np.exp(x64 - b) * x64
        if case.dtype == "float64":
            return x * b - x
        return (x * np.array(3, case.dtype) + b).astype(case.dtype)  # wraps, as NumPy does
    x64 = x.astype(np.float64)
    if case.kind == "max":
        return x64.max(axis=1)
    if case.kind == "sum":
        return (x64 * x64).sum(axis=1)
    if case.kind == "softmax":
        e = np.exp(x64 - x64.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if case.kind == "register_copy":
        return np.concatenate([2 * x64, -np.ones(8)])
    return (x64 * args[1].astype(np.float64)).sum(axis=1)  # dense_k5


def _run(lib: NativeLibrary, case: Case, args: list[np.ndarray]) -> np.ndarray:
    shape, dtype = case.output
    n = int(np.prod(shape))
    padded = np.full(n + 64, SENTINEL, dtype)  # 32 sentinels on each side
    out = padded[32:32 + n].reshape(shape)
    lib.kernel(case.name)(*args, out)
    assert (padded[:32] == SENTINEL).all() and (padded[32 + n:] == SENTINEL).all(), \
        f"{case.name} wrote outside its output"
    return out


def _check(case: Case, got: np.ndarray, expected: np.ndarray,
           args: list[np.ndarray] | None = None) -> None:
    if case.dtype.startswith("float"):
        rtol = 1e-12 if case.dtype == "float64" else 3e-6
        atol = 1e-30
        if case.kind == "dense_k5" and args is not None:
            # a dot product's rounding error scales with sum |a*b|, not with the (possibly
            # cancelling) result
            atol = rtol * float(_expected(case, [np.abs(a) for a in args]).max())
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=case.name)
    else:
        np.testing.assert_array_equal(got, expected, err_msg=case.name)


def test_constant_false_end_check_masks_every_iteration(vector_lib) -> None:
    lib, cases, text = vector_lib
    case = cases["dense_k5"]
    body = text[text.index("int32_t dense_k5(void** args)"):]
    body = body[:body.index("\n}\n")]
    assert "kiln_mload_f32x16(" in body and "if (1)" not in body
    rng = np.random.default_rng(0)
    for _ in range(20):
        args = _inputs(case, rng)
        _check(case, _run(lib, case, args), _expected(case, args), args)


def test_unrolled_copies_decided_false_are_dropped(vector_lib) -> None:
    lib, cases, text = vector_lib
    body = text[text.index("int32_t register_copy(void** args)"):]
    body = body[:body.index("\n}\n")]
    assert "acc_1" in body and "acc_2" not in body  # two vector variables, none more
    case = cases["register_copy"]
    args = _inputs(case, np.random.default_rng(1))
    _check(case, _run(lib, case, args), _expected(case, args), args)


def test_tails_are_vector_code(vector_lib) -> None:
    _, _, text = vector_lib
    body = text[text.index("int32_t softmax_197_64(void** args)"):]
    body = body[:body.index("\n}\n")]
    assert "expf(" not in body  # no scalar libm tail
    assert "kiln_vexp_f32x16(" in body and "kiln_mload_f32x16(" in body
    assert "lanes, max tree" in body and "lanes, add tree" in body


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_masked_tails_match_numpy(vector_lib, data: st.DataObject) -> None:
    lib, cases, _ = vector_lib
    name = data.draw(st.sampled_from(sorted(cases)))
    seed = data.draw(st.integers(0, 2**32 - 1))
    case = cases[name]
    args = _inputs(case, np.random.default_rng(seed))
    _check(case, _run(lib, case, args), _expected(case, args), args)


GUARD_SCRIPT = """
import ctypes, json, mmap, sys
import numpy as np
sys.path.insert(0, {root!r})
from kiln.runtime.native import NativeLibrary

libc = ctypes.CDLL(None)
keep = []

def at_page_end(a):
    # a copy of `a` ending exactly where an inaccessible page begins
    page = mmap.PAGESIZE
    pages = (a.nbytes + page - 1) // page + 1
    buf = mmap.mmap(-1, pages * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(ctypes.c_void_p(base + (pages - 1) * page), page, 0) == 0
    out = np.frombuffer(buf, a.dtype, a.size, (pages - 1) * page - a.nbytes).reshape(a.shape)
    out[...] = a
    keep.append(buf)
    return out

lib = NativeLibrary({path!r})
for name, inputs, (shape, dtype) in json.loads({cases!r}):
    args = [at_page_end(np.ones(s, d)) for s, d in inputs]
    out = at_page_end(np.zeros(shape, dtype))
    lib.kernel(name)(*args, out)
print("ok")
"""


def test_no_access_past_the_data(vector_lib) -> None:
    lib, cases, _ = vector_lib
    spec = json.dumps([[c.name, [[list(s), d] for s, d in c.inputs], [list(c.output[0]),
                                                                      c.output[1]]]
                       for c in cases.values()])
    script = GUARD_SCRIPT.format(root=str(ROOT), path=str(lib.path), cases=spec)
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]


@pytest.mark.parametrize("target", ["c", "llvm -mcpu=znver3"])
def test_stem_padding_copies_row_interiors_as_vectors(target: str) -> None:
    """A stem's zero padding of 3-channel rows (NCHW3c): the interior of each padded row is
    copied as whole vectors (the value's lane-varying condition holds on all lanes there), its
    edges element by element. (Stride 1: a strided stem reads its input in place.)"""
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.ir.module import IRModule
    from kiln.transform import PassContext

    rng = np.random.default_rng(2)
    wn = rng.standard_normal((16, 3, 3, 3)).astype("float32")
    a = rng.standard_normal((1, 3, 37, 45)).astype("float32")
    x = relay.var("x", shape=a.shape, dtype="float32")
    mod = IRModule.from_expr(relay.Function([x], relay.nn.conv2d(
        x, relay.const(wn), strides=(1, 1), padding=(1, 1), channels=16, kernel_size=(3, 3))))
    with PassContext(opt_level=3):
        factory = relay.build(mod, target=target)
    sources = factory.get_lib().sources
    assert any("where the condition holds on all" in Path(s).read_text() for s in sources)
    m = graph_executor.GraphModule(factory["default"](kiln.cpu()))
    m.set_input(0, a)
    m.run()
    xp = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    want = np.einsum("nchwij,ocij->nohw", windows, wn)
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.requires_cc
@pytest.mark.parametrize("target", ["c", "llvm -mcpu=znver3"])
def test_softmax_exp_takes_the_non_positive_exp(target: str) -> None:
    """Softmax's ``exp(x - max)`` carries its bound through fusion and lowering to the vector
    code, which then skips the overflow handling; large, tiny and infinite inputs stay exact."""
    import scipy.special

    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.ir.module import IRModule
    from kiln.transform import PassContext

    rng = np.random.default_rng(3)
    a = (rng.standard_normal((6, 203)) * 40).astype("float32")
    a[0, 5], a[1, :] = -np.inf, 80.0
    x = relay.var("x", shape=a.shape, dtype="float32")
    mod = IRModule.from_expr(relay.Function([x], relay.nn.softmax(relay.multiply(
        x, relay.const(np.float32(1.5))), axis=-1)))
    with PassContext(opt_level=3):
        factory = relay.build(mod, target=target)
    kernels = [Path(s).read_text().partition("int32_t tvmgen_default_fused")[2]
               for s in factory.get_lib().sources]
    assert any("kiln_vexpneg_f32x" in k for k in kernels)
    m = graph_executor.GraphModule(factory["default"](kiln.cpu()))
    m.set_input(0, a)
    m.run()
    want = scipy.special.softmax(a.astype(np.float64) * 1.5, axis=-1)
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=2e-6, atol=1e-30)


@pytest.mark.requires_cc
@pytest.mark.parametrize("target", ["c", "llvm -mcpu=znver3"])
@pytest.mark.parametrize(("shape", "vectors"), [((2, 5, 37), 4), ((3, 4, 64), 4), ((2, 3, 37), 3)])
def test_row_reduction_partials_live_in_vector_variables(target: str, shape: tuple[int, ...],
                                                         vectors: int) -> None:
    """The lanes of a row reduction's ``rfactor`` accumulator (softmax's max and sum) are vector
    variables (one per row of a step of up to 4 rows of the innermost row axis, the rows of a
    last partial step skipped by bound checks), updated in the row loop
    (a partial last vector through a blend) and folded by one shuffle tree per row, instead of a
    stack array stored and reloaded every step; NaN rows stay NaN and tails are exact."""
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.ir.module import IRModule
    from kiln.transform import PassContext

    rng = np.random.default_rng(5)
    a = (rng.standard_normal(shape) * 4).astype("float32")
    a[0, 1, -1], a[1, 2, 3] = np.nan, np.inf
    x = relay.var("x", shape=a.shape, dtype="float32")
    mod = IRModule.from_expr(relay.Function([x], relay.Tuple([
        relay.nn.softmax(x, axis=-1), relay.max(x, axis=-1)])))
    with PassContext(opt_level=3):
        factory = relay.build(mod, target=target)
    text = "".join(Path(s).read_text() for s in factory.get_lib().sources)
    for acc in ("T_softmax_maxelem_rf", "T_softmax_expsum_rf"):
        assert f"buffer {acc} in {vectors} vector variables" in text, acc
        assert f"{acc}[" not in text, acc  # no array left
    m = graph_executor.GraphModule(factory["default"](kiln.cpu()))
    m.set_input(0, a)
    m.run()
    e = np.exp(a.astype(np.float64) - a.max(axis=-1, keepdims=True))
    with np.errstate(invalid="ignore"):
        want = e / e.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=2e-6, atol=1e-30)
    np.testing.assert_array_equal(m.get_output(1).numpy(), a.max(axis=-1))


_MXCSR_SOURCE = """
unsigned kiln_test_mxcsr(int clear) {
  unsigned csr = __builtin_ia32_stmxcsr();
  if (clear) __builtin_ia32_ldmxcsr(csr & ~0x3fu);
  return csr;
}
"""


@pytest.fixture(scope="module")
def mxcsr(tmp_path_factory: pytest.TempPathFactory):
    """``mxcsr(clear)``: this thread's SSE status flags (cleared after reading when asked)."""
    import ctypes
    import platform
    import shlex

    from kiln.config import settings

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("MXCSR is x86's")
    src = tmp_path_factory.mktemp("mxcsr") / "mxcsr.c"
    src.write_text(_MXCSR_SOURCE)
    lib = src.with_suffix(".so")
    subprocess.run([*shlex.split(settings.cc), "-O2", "-shared", "-fPIC", str(src), "-o", str(lib)],
                   check=True)
    fn = ctypes.CDLL(str(lib)).kiln_test_mxcsr
    fn.restype, fn.argtypes = ctypes.c_uint, [ctypes.c_int]
    return fn


@pytest.mark.requires_cc
@pytest.mark.parametrize("target", ["llvm -mcpu=znver3", "llvm -mattr=-avx,-avx2,-avx512f"])
@pytest.mark.parametrize("op", ["sigmoid", "softmax"])
def test_exp_makes_subnormal_results_without_underflowing(mxcsr, target: str, op: str) -> None:
    """AVX2 and SSE builds: the non-positive exp behind a sigmoid and a softmax makes results that
    are subnormal or 0 (x below -87: masked attention scores, a sigmoid's far tail) exactly, and
    without a multiply into the subnormals: such a multiply raises the underflow flag and costs
    x86 a microcode assist (an AVX2 softmax whose exps underflow: 210 us instead of 120)."""
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.ir.module import IRModule
    from kiln.transform import PassContext

    a = np.linspace(-110.0, -86.0, 64 * 37, dtype=np.float32).reshape(64, 37)
    a[:, 0] = 0.0  # each softmax row's max, so its sum is exactly 1 and its quotients exact
    x = relay.var("x", shape=a.shape, dtype="float32")
    body = relay.sigmoid(x) if op == "sigmoid" else relay.nn.softmax(x, axis=-1)
    with PassContext(opt_level=3):
        factory = relay.build(IRModule.from_expr(relay.Function([x], body)), target=target)
    m = graph_executor.GraphModule(factory["default"](kiln.cpu()))
    m.set_num_threads(1)  # the kernel runs in this thread, whose flags mxcsr reads
    m.set_input(0, a)
    m.run()
    mxcsr(1)
    m.run()
    flags = mxcsr(1)
    a64 = a.astype(np.float64)
    want = (1.0 / (1.0 + np.exp(-a64)) if op == "sigmoid"
            else np.exp(a64) / np.exp(a64).sum(axis=-1, keepdims=True))
    got = m.get_output(0).numpy().astype(np.float64)
    # within two units in the last place of the float32 result, subnormals (2^-149) included
    assert np.all(np.abs(got - want) <= 2 * np.spacing(want.astype(np.float32)))
    assert np.any((got != 0) & (got < np.finfo(np.float32).tiny)) and np.any(got == 0)
    assert not flags & 0x10, f"underflow flag raised (MXCSR {flags:#x})"
