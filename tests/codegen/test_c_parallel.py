"""Parallel loops on the library's own thread pool: outlining, results, threads, nesting, fork.

Oracles are NumPy formulas written here; the pool itself is also driven directly from C (a
chunk function that starts a nested parallel loop) in a subprocess, so a deadlock fails the
test by timeout instead of hanging the suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from kiln import te
from kiln.codegen.c_codegen import CCodegen
from kiln.codegen.c_prelude import SCALAR_PRELUDE
from kiln.codegen.c_runtime import RUNTIME_DECLS, RUNTIME_SOURCE
from kiln.codegen.native import compile_module
from kiln.runtime.native import NativeLibrary
from kiln.te import expr as E
from kiln.te.default_schedule import default_schedule
from kiln.te.loop_ir import Buffer, BufferLoad, For, PrimFunc, Store
from kiln.te.lower import lower

pytestmark = pytest.mark.requires_cc

ROOT = Path(__file__).resolve().parents[2]


def _grid_kernel(name: str, rows: int, cols: int, inner: str = "serial") -> PrimFunc:
    """out[i, j] = 2 * x[i, j] + i - j over a (rows, cols) grid, the i loop parallel; with
    ``inner="parallel"`` both loops are parallel (flattened into one iteration space)."""
    i, j = te.var("i"), te.var("j")
    x = Buffer("x", "float32", (rows, cols), kind="input")
    out = Buffer("out", "float32", (rows, cols), kind="output")
    value = BufferLoad(x, i * cols + j, "float32") * E.const(2.0) \
        + E.Cast("float32", i - j)
    body = For(j, cols, inner, Store(out, i * cols + j, value))
    return PrimFunc(name, [x, out], For(i, rows, "parallel", body))


def _grid_oracle(x: np.ndarray) -> np.ndarray:
    rows, cols = x.shape
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return (2 * x.astype(np.float64) + (i - j)).astype(np.float32)


def _row_softmax(name: str, rows: int, cols: int) -> PrimFunc:
    """A parallel, vectorized row reduction (max, exp, sum, divide) from the default schedule."""
    x = te.placeholder((rows, cols), name="x")
    k = te.reduce_axis((0, cols), name="k")
    m = te.compute((rows,), lambda r: te.max(x[r, k], axis=k), name="m")
    e = te.compute((rows, cols), lambda r, c: te.exp(x[r, c] - m[r]), name="e")
    k2 = te.reduce_axis((0, cols), name="k2")
    s = te.compute((rows,), lambda r: te.sum(e[r, k2], axis=k2), name="s")
    y = te.compute((rows, cols), lambda r, c: e[r, c] / s[r], name="y")
    dag = te.ComputeDAG([x, y])
    return lower(dag, default_schedule(dag, 32, 2), name=name)


def _library(funcs: list[PrimFunc], hint: str) -> tuple[NativeLibrary, str]:
    text = CCodegen(32).module(funcs)
    return NativeLibrary(compile_module(text, hint)), text


@pytest.fixture(scope="module")
def pool_lib() -> tuple[NativeLibrary, str]:
    return _library([_grid_kernel("grid", 37, 19), _grid_kernel("grid2", 7, 13, "parallel"),
                     _row_softmax("softmax_rows", 301, 45)], "pool_test")


def test_parallel_loops_are_outlined_chunk_functions(pool_lib: tuple[NativeLibrary, str]) -> None:
    _, text = pool_lib
    assert "#pragma omp parallel" not in text and "omp.h" not in text
    assert "static void grid__par0(void* kiln_ctx, int64_t kiln_begin, int64_t kiln_end) {" in text
    assert "kiln_parallel_for(grid__par0, &kiln_ctx1, 37);" in text
    # both parallel loops of grid2 in one iteration space of 7 * 13
    assert "kiln_parallel_for(grid2__par0, &kiln_ctx1, 91);" in text
    assert "const int32_t j = (int32_t)((kiln_i) % 13);" in text


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs readelf")
def test_libraries_do_not_link_an_openmp_runtime(pool_lib: tuple[NativeLibrary, str]) -> None:
    lib, _ = pool_lib
    dynamic = subprocess.run(["readelf", "-d", str(lib.path)], capture_output=True, text=True,
                             check=True).stdout
    needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert needed and not any("gomp" in line or "omp" in line.split()[-1] for line in needed)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_results_do_not_depend_on_the_thread_count(pool_lib: tuple[NativeLibrary, str],
                                                   threads: int) -> None:
    lib, _ = pool_lib
    lib.set_num_threads(threads)
    rng = np.random.default_rng(threads)
    for name, shape in (("grid", (37, 19)), ("grid2", (7, 13))):
        x = rng.standard_normal(shape).astype(np.float32)
        out = np.full(shape, np.nan, np.float32)
        lib.kernel(name)(x, out)
        np.testing.assert_array_equal(out, _grid_oracle(x))
    x = (rng.standard_normal((301, 45)) * 4).astype(np.float32)
    out = np.empty_like(x)
    lib.kernel("softmax_rows")(x, out)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=2e-6, atol=1e-9)


def _count_kernel(name: str, n: int) -> PrimFunc:
    """out[i] += 1 over a parallel loop of n iterations: an iteration run twice or never shows."""
    i = te.var("i")
    out = Buffer("out", "float32", (n,), kind="output")
    return PrimFunc(name, [out], For(i, n, "parallel",
                                     Store(out, i, BufferLoad(out, i, "float32") + E.const(1.0))))


def test_every_iteration_runs_once_whatever_the_split() -> None:
    """The pool gives each thread a home range of n / threads iterations (one more for some)
    in up to 4 chunks and lets idle threads take the others' chunks: with fewer iterations
    than threads, uneven shares and many threads, each iteration still runs exactly once."""
    sizes = (2, 3, 5, 7, 8, 9, 28, 37, 1001)
    lib, _ = _library([_count_kernel(f"count{n}", n) for n in sizes], "pool_count_test")
    for threads in (2, 3, 8):
        lib.set_num_threads(threads)
        for n in sizes:
            out = np.zeros(n, np.float32)
            for _ in range(5):
                lib.kernel(f"count{n}")(out)
            np.testing.assert_array_equal(out, np.full(n, 5.0, np.float32))


def test_thread_count_setter_and_default(pool_lib: tuple[NativeLibrary, str]) -> None:
    import ctypes

    lib, _ = pool_lib
    get = lib._lib.kiln_get_num_threads
    get.restype = ctypes.c_int32
    lib.set_num_threads(3)
    assert get() == 3
    lib.set_num_threads(0)  # the default: the CPUs of the affinity mask
    assert get() == len(os.sched_getaffinity(0))


def test_concurrent_callers_get_correct_results(pool_lib: tuple[NativeLibrary, str]) -> None:
    lib, _ = pool_lib
    lib.set_num_threads(2)
    kernel = lib.kernel("grid")
    errors: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(40):
            x = rng.standard_normal((37, 19)).astype(np.float32)
            out = np.empty_like(x)
            kernel(x, out)  # ctypes releases the GIL: the callers really run at once
            if not np.array_equal(out, _grid_oracle(x)):
                errors.append(f"caller {seed} got a wrong result")

    callers = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert errors == []


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_workers_start_lazily_once_per_library() -> None:
    # a library of its own (its source differs from every other test's)
    lib, _ = _library([_grid_kernel("lazy_grid", 64, 33)], "pool_lazy_test")
    x = np.ones((64, 33), np.float32)
    out = np.empty_like(x)

    def tasks() -> set[str]:
        return set(os.listdir("/proc/self/task"))

    def started() -> set[str]:  # threads that did not exist before: this library's workers
        return tasks() - before

    lib.set_num_threads(3)
    before = tasks()
    assert not started()  # loading and setting the count starts nothing
    lib.kernel("lazy_grid")(x, out)
    workers = started()
    assert len(workers) == 2  # two workers join the calling thread
    for _ in range(5):
        lib.kernel("lazy_grid")(x, out)
    lib.set_num_threads(2)
    lib.kernel("lazy_grid")(x, out)
    assert started() == workers  # reused, never restarted
    lib.set_num_threads(4)
    lib.kernel("lazy_grid")(x, out)
    # a worker descheduled during the calls above (3 threads on a small machine) puts the pool
    # in its serial back-off for up to 250 ms, and serial calls start no worker: call again
    deadline = time.monotonic() + 2.0
    while len(started()) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
        lib.kernel("lazy_grid")(x, out)
    assert len(started()) == 3 and workers < started()
    np.testing.assert_array_equal(out, _grid_oracle(x))


NESTED_C = r"""
#include <stdio.h>
static int32_t kiln_test_inner_calls;
static int32_t kiln_test_inner_whole;

typedef struct { float* out; int64_t cols; int64_t row; } inner_ctx;
static void inner(void* p, int64_t begin, int64_t end) {
  inner_ctx* c = (inner_ctx*)p;
  __atomic_add_fetch(&kiln_test_inner_calls, 1, __ATOMIC_RELAXED);
  if (begin == 0 && end == c->cols) __atomic_add_fetch(&kiln_test_inner_whole, 1, __ATOMIC_RELAXED);
  for (int64_t j = begin; j < end; ++j) c->out[c->row * c->cols + j] = (float)(c->row * 1000 + j);
}
typedef struct { float* out; int64_t cols; } outer_ctx;
static void outer(void* p, int64_t begin, int64_t end) {
  outer_ctx* c = (outer_ctx*)p;
  for (int64_t i = begin; i < end; ++i) {
    inner_ctx ic = {c->out, c->cols, i};
    kiln_parallel_for(inner, &ic, c->cols);  /* nested: must run serially, here */
  }
}
int main(void) {
  enum { ROWS = 64, COLS = 50 };
  static float out[ROWS * COLS];
  kiln_set_num_threads(4);
  for (int rep = 0; rep < 200; ++rep) {
    outer_ctx c = {out, COLS};
    kiln_parallel_for(outer, &c, ROWS);
  }
  for (int i = 0; i < ROWS; ++i)
    for (int j = 0; j < COLS; ++j)
      if (out[i * COLS + j] != (float)(i * 1000 + j)) { printf("wrong %d %d\n", i, j); return 1; }
  printf("%d %d\n", kiln_test_inner_calls, kiln_test_inner_whole);
  return 0;
}
"""


def test_nested_parallel_loops_run_serially_without_deadlock(tmp_path: Path) -> None:
    src = tmp_path / "nested.c"
    src.write_text(SCALAR_PRELUDE + RUNTIME_DECLS + RUNTIME_SOURCE + NESTED_C)
    exe = tmp_path / "nested"
    subprocess.run(["cc", "-O2", "-std=c99", "-pthread", str(src), "-o", str(exe), "-lm"],
                   check=True, capture_output=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    calls, whole = map(int, run.stdout.split())
    assert calls == whole == 200 * 64  # every nested loop ran as one serial call


FORK_SCRIPT = """
import os, sys
import numpy as np
sys.path.insert(0, {root!r})
from kiln.runtime.native import NativeLibrary
lib = NativeLibrary({path!r})
lib.set_num_threads(2)
x = np.arange(37 * 19, dtype=np.float32).reshape(37, 19)
i, j = np.meshgrid(np.arange(37), np.arange(19), indexing="ij")
expected = (2 * x + (i - j)).astype(np.float32)
out = np.empty_like(x)
lib.kernel("grid")(x, out)  # the parent's pool has a worker now
pid = os.fork()
if pid == 0:
    child = np.empty_like(x)
    for _ in range(20):
        lib.kernel("grid")(x, child)  # no workers exist in the child: it must not wait for them
    os._exit(0 if np.array_equal(child, expected) else 3)
_, status = os.waitpid(pid, 0)
lib.kernel("grid")(x, out)
print(os.waitstatus_to_exitcode(status), int(np.array_equal(out, expected)))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_parallel_loops_work_after_fork(pool_lib: tuple[NativeLibrary, str]) -> None:
    lib, _ = pool_lib
    script = FORK_SCRIPT.format(root=str(ROOT), path=str(lib.path))
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["0", "1"]
