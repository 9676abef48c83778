"""``kiln.build`` (TVM's ``tvm.build``): schedules to callable kernels, checked against NumPy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.errors import CompileError
from kiln.te.lower import lower
from kiln.te.steps import parse_step

pytestmark = pytest.mark.requires_cc

LOG = Path(__file__).parent / "fixtures" / "tvm" / "ansor_manual_steps_log.json"


def matmul(n: int, m: int, k: int) -> list[te.Tensor]:
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=[r]), name="C")
    return [A, B, C]


def _arrays(n: int, m: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return (rng.standard_normal((n, k)).astype("float32"),
            rng.standard_normal((k, m)).astype("float32"))


def test_build_a_state_and_call_it_on_ndarrays() -> None:
    dag = te.ComputeDAG(matmul(40, 24, 12))
    state = dag.init_state
    i, j, _ = state.stages[2].iters
    io, _ = state.split(2, i, [8])
    state.parallel(2, io)
    _, ji = state.split(2, j, [8])
    state.vectorize(2, ji)
    sch, args = dag.apply_steps_from_state(state)
    mod = kiln.build(sch, args, target="llvm")
    a, b = _arrays(40, 24, 12)
    out = kiln.nd.empty((40, 24), "float32")
    mod(kiln.nd.array(a), kiln.nd.array(b), out)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-5)
    out2 = np.zeros((40, 24), "float32")
    mod[mod.entry_name](a, b, out2)  # NumPy arrays work too
    np.testing.assert_allclose(out2, a @ b, rtol=1e-5, atol=1e-5)
    assert mod.entry_name == "default_function"
    assert "int32_t default_function(void** args)" in mod.get_source()
    timer = mod.time_evaluator(mod.entry_name, kiln.cpu(), number=2, repeat=3)
    res = timer(kiln.nd.array(a), kiln.nd.array(b), out)
    assert len(res.results) == 3 and all(t > 0 for t in res.results) and res.mean > 0


def test_replayed_fixture_state_computes_the_product() -> None:
    # TVM's rfactor record, replayed on the 512^3 matmul it was written for
    steps = [parse_step(s) for s in json.loads(LOG.read_text().splitlines()[2])["i"][1][1]]
    dag = te.ComputeDAG(matmul(512, 512, 512))
    sch = dag.apply_steps(steps)
    mod = kiln.build(sch, dag.tensors, name="matmul_rfactor")
    a, b = _arrays(512, 512, 512)
    c = np.full((512, 512), np.nan, "float32")
    mod["matmul_rfactor"](a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_build_a_lowered_function_and_export_it(tmp_path: Path) -> None:
    dag = te.ComputeDAG(matmul(8, 8, 8))
    func = lower(dag, [], name="mm8")
    mod = kiln.build(func)
    assert mod.entry_name == "mm8"
    path = tmp_path / "mm8.so"
    mod.export_library(path)
    loaded = kiln.runtime.load_module(path)
    a, b = _arrays(8, 8, 8)
    c = np.zeros((8, 8), "float32")
    loaded["mm8"](a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_build_errors_name_the_problem() -> None:
    dag = te.ComputeDAG(matmul(4, 4, 4))
    sch = dag.apply_steps([])
    with pytest.raises(CompileError, match="args"):
        kiln.build(sch)
    with pytest.raises(CompileError, match="not a C identifier"):
        kiln.build(sch, dag.tensors, name="bad name")
    with pytest.raises(CompileError, match="Schedule"):
        kiln.build("not a schedule", dag.tensors)
    with pytest.raises(kiln.target.TargetError, match="neither a C/LLVM nor a cuda target"):
        kiln.build(sch, dag.tensors, target="numpy")
    mod = kiln.build(sch, dag.tensors)
    with pytest.raises(kiln.runtime.module.KernelError, match="argument"):
        mod(np.zeros((4, 4), "float32"), np.zeros((4, 4), "float32"),
            np.zeros((5, 4), "float32"))
