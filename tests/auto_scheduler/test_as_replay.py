"""Seed 004's replay flow, verbatim with ``import kiln as tvm``, on the log TVM wrote.

The fixture's records are for two workloads: ``matmul_auto_scheduler_test`` (registered here as
TVM's ``tvm/testing/auto_scheduler.py`` registers it) and the DAG-hash key of matmul + relu +
relu (built as in ``tests/te/test_dag.py`` and registered under TVM's key). Every state must
build and run on this machine with error 0, and the kernels the states describe must compute
what NumPy computes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kiln as tvm
from kiln import auto_scheduler, te

pytestmark = pytest.mark.requires_cc

LOG = Path(__file__).parents[1] / "fixtures" / "tvm" / "ansor_manual_steps_log.json"
RELU_KEY = '["29e25072f17c5958ebb33297f879aa32", [512, 512], [512, 512], [512, 512]]'


def matmul_auto_scheduler_test(N, M, K):
    A = te.placeholder((N, K), name="A")
    B = te.placeholder((K, M), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute(
        (N, M),
        lambda i, j: te.sum(A[i][k] * B[k][j], axis=[k]),
        name="C",
        attrs={"layout_free_placeholders": [B]},
    )
    return [A, B, C]


def matmul_relu_relu() -> list[te.Tensor]:
    A, B, C = matmul_auto_scheduler_test(512, 512, 512)
    D = te.compute(C.shape, lambda i0, i1: te.max(C[i0, i1], te.const(0.0, "float32")))
    F = te.compute(D.shape, lambda i0, i1: te.max(D[i0, i1], te.const(0.0, "float32")))
    return [A, B, F]


@pytest.fixture(autouse=True)
def _workloads() -> None:
    auto_scheduler.register_workload(matmul_auto_scheduler_test, override=True)
    dag = te.ComputeDAG(matmul_relu_relu())
    assert dag.workload_key() == RELU_KEY
    from kiln.te.workload import register_workload_tensors

    register_workload_tensors(RELU_KEY, dag.tensors)


def test_seed_004_replay_flow_gives_fresh_results() -> None:
    logs_list = LOG.read_text().splitlines()
    timeout = 15

    # --- seed 004, last section, verbatim ---
    inputs = []
    for log_string in logs_list:
        measure_input, old_result = tvm.auto_scheduler.measure_record.load_record_from_string(
            log_string)
        inputs.append(measure_input)
        assert old_result.error_no == 0

    n_parallel = 2
    build_results = tvm.auto_scheduler.measure.local_builder_build(inputs, timeout, n_parallel)

    number = 3
    repeat = 1
    min_repeat_ms = 100

    results = tvm.auto_scheduler.measure.local_run(inputs, build_results, timeout, number, repeat,
                                                   min_repeat_ms)
    # --- end of the seed's code ---
    assert [b.error_no for b in build_results] == [0, 0, 0], [b.error_msg for b in build_results]
    assert [r.error_no for r in results] == [0, 0, 0], [r.error_msg for r in results]
    for r in results:
        assert len(r.costs) == repeat and 0 < r.costs[0] < 10  # fresh, not the log's 0.1
        assert r.costs[0] != 0.1 and isinstance(r.timestamp, int) and r.timestamp > 1
    # the fresh results go back into records TVM reads
    line = tvm.auto_scheduler.measure_record.dump_record_to_string(inputs[0], results[0])
    assert line.startswith('{"i": [["[\\"matmul_auto_scheduler_test\\", 512, 512, 512]"')


def test_replayed_states_compute_what_numpy_computes() -> None:
    rng = np.random.default_rng(4)
    a = rng.uniform(-1, 1, (512, 512)).astype("float32")
    b = rng.uniform(-1, 1, (512, 512)).astype("float32")
    product = a.astype(np.float64) @ b.astype(np.float64)
    for line, want in zip(LOG.read_text().splitlines(),
                          [product, np.maximum(product, 0), product]):
        inp, _ = auto_scheduler.measure_record.load_record_from_string(line)
        sch, args = inp.task.compute_dag.apply_steps_from_state(inp.state)
        mod = tvm.build(sch, args, target=str(inp.task.target))
        out = tvm.nd.empty((512, 512), "float32")
        mod(tvm.nd.array(a), tvm.nd.array(b), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_replay_with_the_reference_check() -> None:
    inputs = [auto_scheduler.measure_record.load_record_from_string(line)[0]
              for line in LOG.read_text().splitlines()]
    builds = auto_scheduler.LocalBuilder(timeout=30, n_parallel=2).build(inputs, verbose=0)
    runner = auto_scheduler.LocalRunner(number=1, min_repeat_ms=0, check_correctness=True)
    assert [r.error_no for r in runner.run(inputs, builds, verbose=0)] == [0, 0, 0]
