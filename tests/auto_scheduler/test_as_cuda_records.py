"""Tuning records written by TVM for CUDA: read, replayed on Kiln's DAG, compiled and run.

The records are the first two of TVM's ``resnet-18-NHWC-B1-cuda.json`` (its tutorials' CI log,
written by TVM's auto-scheduler in 2020): a softmax and a dense + bias of ResNet-18's head. Their
workload keys hash TVM 0.8's printing of the DAG, so a build does not find them by key; the
flow of seed 004 replays them by hand: the record's steps applied to the same computation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.auto_scheduler.measure_record import input_steps, load_records
from kiln.codegen.native import function_to_dag
from kiln.te.interp import run_prim_func
from kiln.te.lower import lower
from tests.codegen._cuda_cases import fused_function

LOG = Path(__file__).parents[1] / "fixtures" / "tvm_cuda" / "resnet-18-NHWC-B1-cuda.head.json"


def _dag(body_of, **shapes):  # type: ignore[no-untyped-def]
    name, fn = fused_function(body_of, **shapes)
    return function_to_dag(fn, name)


def _dense_add():  # type: ignore[no-untyped-def]
    return _dag(lambda x, w, b: relay.nn.bias_add(relay.nn.dense(x, w), b),
                x=(1, 512), w=(1000, 512), b=(1000,))


def _dense_record_build(target: str):  # type: ignore[no-untyped-def]
    fdag = _dense_add()
    inp, _ = list(load_records(LOG))[1]
    return kiln.build(fdag.dag.apply_steps(input_steps(inp)), fdag.args, target=target,
                      name="dense_add")


def test_tvm_cuda_records_load_with_their_gpu_steps() -> None:
    records = list(load_records(LOG))
    assert len(records) == 2
    inp, res = records[1]
    assert str(inp.task.target).startswith("cuda") and "gpu" in inp.task.target.keys
    steps = [s.to_record() for s in input_steps(inp)]
    assert ["AN", 6, 1, 4] in steps and ["CHR", 1, "shared", [2]] in steps  # vthread, shared
    assert res.error_no == 0 and res.costs[0] == pytest.approx(2.25155e-05)


def test_dense_record_replays_to_shared_memory_tiles() -> None:
    fdag = _dense_add()
    inp, _ = list(load_records(LOG))[1]
    sch = fdag.dag.apply_steps(input_steps(inp))
    text = str(lower(sch, args=fdag.args, name="dense_add"))
    assert "for blockIdx.x" in text and "for threadIdx.x" in text
    assert "allocate p0_shared" in text and "allocate p1_shared" in text


def test_softmax_record_replays_as_a_cross_thread_reduction() -> None:
    """The record binds softmax's reduction loops to threadIdx.x (40 threads per row): each
    thread reduces a share, the block combines the shares in shared memory."""
    fdag = _dag(lambda x: relay.nn.softmax(x), x=(1, 1000))
    inp, _ = next(iter(load_records(LOG)))
    prim = lower(fdag.dag.apply_steps(input_steps(inp)), args=fdag.args, name="softmax")
    assert "_shares" in str(prim)
    x = np.random.default_rng(1).standard_normal((1, 1000)).astype("float32") * 4
    out = np.zeros((1, 1000), "float32")
    run_prim_func(prim, [x, out])
    e = np.exp(x - x.max())
    np.testing.assert_allclose(out, e / e.sum(), rtol=1e-5, atol=1e-8)


@pytest.mark.requires_cuda_compiler
def test_dense_record_compiles_for_the_gpu() -> None:
    mod = _dense_record_build("cuda -arch=sm_80")
    assert "__shared__ float p1_shared" in mod.get_source()
    assert ".entry dense_add_kernel0" in mod.get_source("ptx")


@pytest.mark.cuda
def test_dense_record_runs_and_times_on_the_gpu() -> None:
    mod = _dense_record_build("cuda")
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((1, 512), (1000, 512), (1000,)))
    dev = kiln.cuda(0)
    args = [kiln.nd.array(a, dev) for a in (x, w, b)] + [kiln.nd.empty((1, 1000), "float32", dev)]
    mod(*args)
    np.testing.assert_allclose(args[3].numpy(), x @ w.T + b, rtol=1e-4, atol=1e-4)
    result = mod.time_evaluator(mod.entry_name, dev, number=20, repeat=3)(*args)
    assert len(result.results) == 3 and 0 < result.mean < 1e-2


def _measure_input(target: str):  # type: ignore[no-untyped-def]
    """The dense record's steps as a measure input of a Kiln task for ``target``."""
    from kiln.auto_scheduler import ComputeDAG, MeasureInput, SearchTask
    from kiln.auto_scheduler.measure_record import replay_steps

    fdag = _dense_add()
    dag = ComputeDAG(fdag.args)
    task = SearchTask(compute_dag=dag, workload_key=dag.workload_key(), target=target)
    inp, _ = list(load_records(LOG))[1]
    return MeasureInput(task, replay_steps(dag, input_steps(inp)))


@pytest.mark.requires_cuda_compiler
def test_local_builder_builds_a_cuda_candidate() -> None:
    from kiln.auto_scheduler import LocalBuilder
    from kiln.runtime.cuda_library import load_cuda_library

    (result,) = LocalBuilder(n_parallel=1).build([_measure_input("cuda -arch=sm_80")], verbose=0)
    assert result.error_no == 0, result.error_msg
    lib = load_cuda_library(Path(result.filename).read_bytes())
    assert lib.arch == "sm_80" and "default_function" in lib.plans


@pytest.mark.cuda
def test_local_runner_measures_a_cuda_candidate_on_the_gpu() -> None:
    from kiln.auto_scheduler import LocalBuilder, LocalRunner

    inp = _measure_input("cuda")
    builds = LocalBuilder(n_parallel=1).build([inp], verbose=0)
    (res,) = LocalRunner(number=5, repeat=2, min_repeat_ms=0, check_correctness=True).run(
        [inp], builds, verbose=0)
    assert res.error_no == 0, res.error_msg
    assert len(res.costs) == 2 and all(0 < c < 1e-2 for c in res.costs)
