"""RayBuilder / RayRunner on a local Ray instance (2 CPUs) started by the test.

Among good candidates sit two that kill their Ray worker: one whose build calls ``os._exit`` the
first time only (Ray must run it again on a fresh worker, and it then measures fine) and one
whose kernel segfaults every time (after the retries it must be recorded as RUNTIME_DEVICE with
a message saying the worker died). Every other candidate must be measured, each result must say
which worker measured it and with what hardware params, and the good kernels must compute what
the unscheduled computation computes (the runner's correctness check).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kiln import auto_scheduler, te
from kiln.auto_scheduler.measure import LocalBuilder, MeasureErrorNo, MeasureInput
from kiln.codegen.standalone import compile_kernel

ray = pytest.importorskip("ray", reason="Ray is not installed (the optional extra kiln[ray])")

from kiln.auto_scheduler.ray_measure import (  # noqa: E402  (after the skip)
    RayBuilder,
    RayRunner,
    ray_hardware_params,
)

pytestmark = pytest.mark.requires_cc

KERNEL_HEAD = "int32_t default_function(void** args) {"
MARKER_ENV = "KILN_TEST_RAY_MARKER"


def ray_matmul(n: int, fault: str) -> list[te.Tensor]:
    """A small matmul; the first input's name tells :func:`faulty_build` what to do."""
    A = te.placeholder((n, n), name=f"A_{fault}")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    return [A, B, te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), name="C")]


auto_scheduler.register_workload(ray_matmul, override=True)


def faulty_build(output: str, sources: list[str], options: list[str] | None) -> None:
    """Test build_func: ``A_once`` kills the build worker the first time (a marker file remembers),
    ``A_segv`` plants a segfault in the kernel; anything else compiles normally."""
    for src in sources:
        text = Path(src).read_text()
        if "A_once" in text:
            marker = Path(os.environ[MARKER_ENV])
            if not marker.exists():
                marker.write_text(str(os.getpid()))
                os._exit(1)  # the worker dies mid-build
        if "A_segv" in text:
            text = text.replace(KERNEL_HEAD, KERNEL_HEAD + "\n  { volatile int* volatile p = 0; *p = 1; }")
            Path(src).write_text(text)
    compile_kernel(sources, output, options)


@pytest.fixture
def local_ray(tmp_path: Path):
    marker = tmp_path / "died-once"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {MARKER_ENV: str(marker)}})
    try:
        yield marker
    finally:
        ray.shutdown()


def _input(fault: str, factor: int) -> MeasureInput:
    task = auto_scheduler.SearchTask(func=ray_matmul, args=(16, fault), target="llvm")
    s = task.compute_dag.init_state
    s.split(2, s.stages[2].iters[0], [factor])
    return MeasureInput(task, s)


def test_a_dead_worker_is_retried_or_recorded_and_the_rest_complete(local_ray: Path) -> None:
    # one test (one Ray start, ~10 s): the hardware report, then the measurement
    hw = ray_hardware_params()
    assert len(hw) == 1  # the local instance is one node
    (params,) = hw.values()
    assert params.num_cores >= 1 and params.vector_unit_bytes in (16, 32, 64)

    inputs = [_input("ok", 2), _input("once", 4), _input("segv", 2), _input("ok", 8)]
    builder = RayBuilder(timeout=60, build_func=faulty_build, max_retries=1)
    runner = RayRunner(timeout=60, number=1, min_repeat_ms=0, check_correctness=True, max_retries=1)
    builds = builder.build(inputs, verbose=0)
    assert local_ray.exists()  # the "once" build did kill a worker
    assert [b.error_no for b in builds] == [0, 0, 0, 0], [b.error_msg for b in builds]
    assert all(b.worker["pid"] != os.getpid() for b in builds)
    results = runner.run(inputs, builds, verbose=0)
    assert len(results) == 4
    errors = [r.error_no for r in results]
    assert errors == [0, 0, MeasureErrorNo.RUNTIME_DEVICE, 0], [r.error_msg for r in results]
    assert "Ray worker died" in results[2].error_msg and "2 times" in results[2].error_msg
    for r in (results[0], results[1], results[3]):
        assert 0 < r.costs[0] < 1
        assert r.worker["hardware"] == params.to_list()
        assert r.worker["pid"] != os.getpid()

    # a library built here travels to the worker too (and its local folder is removed)
    local = LocalBuilder(timeout=60).build([inputs[0]], verbose=0)
    assert local[0].error_no == 0 and Path(local[0].filename).is_file()
    (res,) = runner.run([inputs[0]], local, verbose=0)
    assert res.error_no == 0, res.error_msg
    assert not Path(local[0].filename).exists()
