"""Measurement: LocalBuilder / LocalRunner in worker processes, error numbers, parallelism.

Faulty candidates are planted among good ones: a kernel that segfaults, one that never returns
and one that returns without computing (all three through a test ``build_func`` that edits the
generated C of workloads whose input is named for the fault), a state whose unrolled loops make
the C compiler run far past the build timeout, and a state whose steps do not replay. The
measurement must record each with its error number and still measure the good candidates; the
oracle for the good ones is NumPy (through the runner's correctness check against the
unscheduled computation, and directly with ``kiln.build``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kiln import auto_scheduler, te
from kiln.auto_scheduler import measure
from kiln.auto_scheduler._worker import WorkerPool
from kiln.auto_scheduler.measure import MeasureErrorNo, MeasureInput
from kiln.codegen.standalone import compile_kernel
from kiln.config import usable_cpus
from kiln.errors import MeasureWorkerError
from kiln.te.steps import parse_step

pytestmark = pytest.mark.requires_cc

KERNEL_HEAD = "int32_t default_function(void** args) {"
FAULTS = {
    "segv": "  { volatile int* volatile kiln_null = 0; *kiln_null = 1; }",
    "hang": "  for (;;) { __asm__ __volatile__(\"\"); }",
    "wrong": "  return 0;",
}


def fault_matmul(n: int, fault: str) -> list[te.Tensor]:
    """A small matmul whose first input's name tells :func:`plant_faults` what to plant."""
    A = te.placeholder((n, n), name=f"A_{fault}")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), name="C")
    return [A, B, C]


auto_scheduler.register_workload(fault_matmul, override=True)


def plant_faults(output: str, sources: list[str], options: list[str] | None) -> None:
    """Test build_func: compile normally, after planting the fault the workload's name asks for."""
    for src in sources:
        text = Path(src).read_text()
        for fault, line in FAULTS.items():
            if f"A_{fault}" in text:
                assert KERNEL_HEAD in text
                text = text.replace(KERNEL_HEAD, KERNEL_HEAD + "\n" + line)
        Path(src).write_text(text)
    compile_kernel(sources, output, options)


def slow_build(output: str, sources: list[str], options: list[str] | None) -> None:
    """Test build_func: a build that takes 0.4 s more than compiling."""
    time.sleep(0.4)
    compile_kernel(sources, output, options)


def _task(n: int, fault: str) -> auto_scheduler.SearchTask:
    return auto_scheduler.SearchTask(func=fault_matmul, args=(n, fault), target="llvm")


def _tiled(task: auto_scheduler.SearchTask, factor: int) -> MeasureInput:
    s = task.compute_dag.init_state
    i, j, k = s.stages[2].iters
    io, ii = s.split(2, i, [factor])
    jo, ji = s.split(2, j, [8])
    s.reorder(2, [io, jo, k, ii, ji])
    s.vectorize(2, ji)
    s.parallel(2, io)
    return MeasureInput(task, s)


def _over_unrolled(task: auto_scheduler.SearchTask) -> MeasureInput:
    """Three nested loops of 64 all unrolled: the C compiler takes minutes on it."""
    s = task.compute_dag.init_state
    i, j, k = s.stages[2].iters
    io, ii = s.split(2, i, [64])
    jo, ji = s.split(2, j, [64])
    ko, ki = s.split(2, k, [64])
    s.reorder(2, [io, jo, ko, ii, ki, ji])
    for it in (ii, ki, ji):
        s.unroll(2, it)
    return MeasureInput(task, s)


def _broken(task: auto_scheduler.SearchTask) -> MeasureInput:
    """A state whose step names a stage the DAG does not have."""
    s = task.compute_dag.init_state
    s.transform_steps.append(parse_step(["SP", 7, 0, 64, [8], 1]))
    return MeasureInput(task, s)


def test_planted_faults_get_their_error_numbers_and_good_candidates_finish(capsys) -> None:
    good = _task(64, "ok")
    inputs = [
        _tiled(good, 4),
        _tiled(_task(64, "segv"), 8),
        _tiled(good, 8),
        _tiled(_task(64, "hang"), 8),
        _over_unrolled(_task(512, "ok")),
        _tiled(_task(64, "wrong"), 8),
        _broken(good),
        _tiled(good, 16),
    ]
    expected = [0, MeasureErrorNo.RUNTIME_DEVICE, 0, MeasureErrorNo.RUN_TIMEOUT,
                MeasureErrorNo.BUILD_TIMEOUT, MeasureErrorNo.WRONG_ANSWER,
                MeasureErrorNo.INSTANTIATION_ERROR, 0]
    builder = auto_scheduler.LocalBuilder(timeout=4, n_parallel=2, build_func=plant_faults)
    runner = auto_scheduler.LocalRunner(timeout=2, number=2, min_repeat_ms=0,
                                        check_correctness=True)
    pid = os.getpid()
    builds = builder.build(inputs)
    assert [b.error_no for b in builds] == [0, 0, 0, 0, MeasureErrorNo.BUILD_TIMEOUT, 0,
                                            MeasureErrorNo.INSTANTIATION_ERROR, 0]
    assert builds[4].time_cost == 4
    assert "stage" in builds[6].error_msg  # the replay error says what is wrong
    results = runner.run(inputs, builds)
    assert [r.error_no for r in results] == expected
    assert os.getpid() == pid  # still the same process: nothing killed the tuner
    for r, want in zip(results, expected):
        assert isinstance(r.timestamp, int) and r.timestamp > 1_600_000_000
        assert r.all_cost > 0
        if want == 0:
            assert len(r.costs) == 1 and 0 < r.costs[0] < 1.0
            assert r.error_msg == ""
        else:
            assert r.costs == [measure.MAX_FLOAT] and r.error_msg
    assert "SIGSEGV" in results[1].error_msg
    assert "differs" in results[5].error_msg
    out = capsys.readouterr().out
    assert out.count(".") == 8 and ".T" in out and out.count(".E") == 1
    assert out.count("*") == 8 and "*T" in out
    # the workers that died or hung were replaced: the next batch measures normally
    again = measure.local_run(inputs[:1], measure.local_builder_build(inputs[:1], 10, 2,
                                                                      verbose=0),
                              verbose=0)
    assert again[0].error_no == 0


def test_build_timeout_counts_from_the_start_of_each_build() -> None:
    # one builder, five builds of at least 0.4 s each: together past the timeout, each within it
    task = _task(32, "ok")
    inputs = [_tiled(task, f) for f in (1, 2, 4, 8, 16)]
    start = time.monotonic()
    builds = measure.local_builder_build(inputs, 1.5, 1, build_func=slow_build, verbose=0)
    assert time.monotonic() - start > 2.0
    assert [b.error_no for b in builds] == [0] * 5
    results = measure.local_run(inputs, builds, verbose=0, check_correctness=True)
    assert [r.error_no for r in results] == [0] * 5
    assert not any(Path(b.filename).exists() for b in builds)  # the runner cleaned up


def test_compile_error_is_error_2_with_the_compiler_message() -> None:
    task = _task(16, "ok")
    inputs = [_tiled(task, 4)]
    builds = measure.local_builder_build(inputs, 10, 1, build_func=failing_build, verbose=0)
    assert builds[0].error_no == MeasureErrorNo.COMPILE_HOST
    assert "no such compiler" in builds[0].error_msg
    results = measure.local_run(inputs, builds, verbose=0)
    assert results[0].error_no == MeasureErrorNo.COMPILE_HOST
    assert results[0].costs == [measure.MAX_FLOAT]


def failing_build(output: str, sources: list[str], options: list[str] | None) -> None:
    """Test build_func: the compiler fails."""
    raise RuntimeError("no such compiler")


def test_measured_candidates_compute_the_product() -> None:
    task = _task(48, "ok")
    inp = _tiled(task, 5)  # 5 does not divide 48: the split overhangs
    builds = measure.local_builder_build([inp], 10, 1, verbose=0)
    assert builds[0].error_no == 0
    assert [tuple(t.shape) for t in builds[0].args] == [(48, 48)] * 3
    # the library the builder made is a kernel of the product (checked before the runner
    # removes it)
    import kiln
    sch, args = task.compute_dag.apply_steps_from_state(inp.state)
    mod = kiln.build(sch, args)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((48, 48)).astype("float32") for _ in range(2))
    c = np.zeros((48, 48), "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    results = measure.local_run([inp], builds, verbose=0, check_correctness=True)
    assert results[0].error_no == 0
    # with the caches flushed before every run: one run per measurement, one cost per repeat
    builds = measure.local_builder_build([inp], 10, 1, verbose=0)
    flushed = auto_scheduler.LocalRunner(repeat=3, enable_cpu_cache_flush=True).run(
        [inp], builds, verbose=0)
    assert flushed[0].error_no == 0 and len(flushed[0].costs) == 3


def test_a_worker_that_cannot_start_is_reported() -> None:
    pool = WorkerPool(1, preload=["kiln_no_such_module_for_this_test"])
    try:
        with pytest.raises(MeasureWorkerError, match="kiln_no_such_module_for_this_test"):
            pool.map("builtins:len", [("abc",)], timeout=10)
    finally:
        pool.close()


def test_builder_defaults() -> None:
    builder = auto_scheduler.LocalBuilder()
    assert builder.timeout == 15 and builder.n_parallel == usable_cpus()
    runner = auto_scheduler.LocalRunner()
    assert (runner.timeout, runner.number, runner.repeat, runner.min_repeat_ms) == (10, 3, 1, 100)
    flush = auto_scheduler.LocalRunner(number=5, min_repeat_ms=50, enable_cpu_cache_flush=True)
    assert (flush.number, flush.min_repeat_ms) == (1, 0)
    with pytest.raises(ValueError, match="module-level"):
        auto_scheduler.LocalBuilder(build_func=lambda o, s, p: None)
    with pytest.raises(ValueError, match="ndk"):
        auto_scheduler.LocalBuilder(build_func="ndk")


def test_n_parallel_under_taskset_is_one(tmp_path: Path) -> None:
    code = ("from kiln.auto_scheduler.measure import LocalBuilder; "
            "print(LocalBuilder().n_parallel)")
    first = min(os.sched_getaffinity(0))
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", str(first), sys.executable, "-c", code]
    else:
        cmd = [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{first}}}); {code}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "1"
