"""Ansor steps and loop states against the records and printouts TVM wrote (fixtures).

Each fixture record's steps are parsed, written back byte-identically, replayed on the DAG they
were recorded for, and the resulting loop nest must print exactly as TVM printed it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiln import te
from kiln.errors import TuningLogError
from kiln.te.steps import STEP_KINDS, parse_step
from kiln.testing.auto_scheduler import matmul_auto_scheduler_test

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tvm"


def _records() -> list[tuple[str, dict]]:
    lines = (FIXTURES / "ansor_manual_steps_log.json").read_text().splitlines()
    return [(line, json.loads(line)) for line in lines if line.strip()]


def _expected_prints() -> list[str]:
    """The three state printouts in ansor_manual_stdout.txt (between the titles)."""
    text = (FIXTURES / "ansor_manual_stdout.txt").read_text()
    blocks = []
    for title in ("cache_rw_split_fuse_annotate_pragma_fsp_ca_cr_sa \n",
                  "follow_fused_split \n", "rfactor \n"):
        start = text.index(title) + len(title)
        body = text[start:text.index(" \n\n", start)]
        assert body.startswith(" Placeholder:")  # print() put a space after the title
        blocks.append(body[1:])
    return blocks


def matmul_relu_relu(n: int) -> list[te.Tensor]:
    A, B, C = matmul_auto_scheduler_test(n, n, n)
    D = te.compute(C.shape, lambda i0, i1: te.max(C[i0, i1], te.const(0.0, "float32")))
    F = te.compute(D.shape, lambda i0, i1: te.max(D[i0, i1], te.const(0.0, "float32")))
    return [A, B, F]


def _dag_for(key: str) -> te.ComputeDAG:
    parsed = json.loads(key)
    if parsed[0] == "matmul_auto_scheduler_test":
        return te.workload_key_to_dag(key)
    dag = te.ComputeDAG(matmul_relu_relu(512))
    assert dag.workload_key() == key
    return dag


def test_every_step_kind_but_inline_appears_in_the_fixture() -> None:
    kinds = {s[0] for _, rec in _records() for s in rec["i"][1][1]}
    assert kinds == set(STEP_KINDS) - {"CI"}


def test_compute_inline_step() -> None:
    dag = te.ComputeDAG(matmul_relu_relu(8))
    s = dag.init_state
    s.compute_inline(3)
    assert [st.compute_at for st in s.stages] == [0, 0, 0, 1, 0]
    assert s.transform_steps[-1].to_record() == ["CI", 3]
    assert "compute = ..." in str(s) and str(s).count("compute = ...") == 1
    with pytest.raises(TuningLogError, match="cannot be inlined"):
        s.compute_at(3, 2, 0)
        s.compute_inline(2)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_record_round_trips_byte_identically(index: int) -> None:
    line, rec = _records()[index]
    steps = [parse_step(s) for s in rec["i"][1][1]]
    rec["i"][1][1] = [s.to_record() for s in steps]
    assert json.dumps(rec) == line


@pytest.mark.parametrize("index", [0, 1, 2])
def test_replay_prints_like_tvm(index: int) -> None:
    _, rec = _records()[index]
    dag = _dag_for(rec["i"][0][0])
    state = dag.init_state
    for raw in rec["i"][1][1]:
        step = parse_step(raw)
        state.transform_steps.append(step)
        step.apply_to_state(state, dag)
    assert str(state) == _expected_prints()[index]


def test_state_api_writes_the_same_steps_as_tvm() -> None:
    """The first record, rebuilt through the State methods (stage ids shift with CHR/CHW)."""
    dag = te.workload_key_to_dag('["matmul_auto_scheduler_test", 512, 512, 512]')
    s = dag.init_state
    s.cache_read(1, "shared", [2])
    s.cache_write(3, "global")
    assert [st.op.name for st in s.stages] == ["A", "B", "B.shared", "C.global", "C"]
    i_o, i_i = s.split(4, 0, [32])
    j_o, j_i = s.split(4, 2, [8])
    assert (i_o.name, i_i.name, j_o.name) == ("i.0", "i.1", "j.0")
    s.reorder(4, [i_o, j_o, i_i, j_i])
    fused = s.fuse(4, [0, 1])
    assert fused.name == "i.0@j.0@" and fused.extent == 1024
    s.parallel(4, fused)
    s.vectorize(4, 2)
    s.unroll(4, 1)
    s.pragma(4, 0, "auto_unroll_max_step$64")
    s.follow_split(3, 0, 2, 1)
    s.compute_at(3, 4, 0)
    s.compute_root(3)
    s.compute_at(2, 3, 0)
    s.storage_align(2, 1, 8, 4)
    _, rec = _records()[0]
    assert [st.to_record() for st in s.transform_steps] == rec["i"][1][1]
    assert str(s) == _expected_prints()[0]


def test_rfactor_and_follow_fused_split_through_the_api() -> None:
    dag = te.workload_key_to_dag('["matmul_auto_scheduler_test", 512, 512, 512]')
    s = dag.init_state
    s.split(2, 2, [16])
    new_id = s.rfactor(2, 3, 2)
    assert new_id == 2 and [st.op.name for st in s.stages][2:] == ["C.rf", "C.repl"]
    assert [it.name for it in s.stages[2].iters] == ["i", "j", "k_i", "k_o"]
    assert str(s) == _expected_prints()[2]


@pytest.mark.parametrize("bad", [
    ["XX", 1], ["SP", 1, 0], ["SP", "a", 0, 512, [4], 1], [], "SP", ["CHR", 1, 2, [3]],
    ["FU", 1, [0, "x"]],
])
def test_malformed_steps_are_clear_errors(bad) -> None:
    with pytest.raises(TuningLogError):
        parse_step(bad)


def test_invalid_replays_name_the_step() -> None:
    dag = te.workload_key_to_dag('["matmul_auto_scheduler_test", 16, 16, 16]')
    s = dag.init_state
    with pytest.raises(TuningLogError, match="stage 7 does not exist"):
        parse_step(["AN", 7, 0, 3]).apply_to_state(s, dag)
    with pytest.raises(TuningLogError, match="consecutive"):
        s.fuse(2, [0, 2])
    s.parallel(2, 0)
    with pytest.raises(TuningLogError, match="already annotated"):
        s.vectorize(2, 0)
    with pytest.raises(TuningLogError, match="rfactor must directly follow a split"):
        s.rfactor(2, 2, 0)


def test_workload_registry() -> None:
    key = te.make_workload_key("matmul_auto_scheduler_test", (4, 5, 6))
    assert key == '["matmul_auto_scheduler_test", 4, 5, 6]'
    tensors = te.workload_key_to_tensors(key)
    assert [t.shape for t in tensors] == [(4, 6), (6, 5), (4, 5)]
    with pytest.raises(TuningLogError, match="not registered"):
        te.workload_key_to_tensors('["no_such_workload", 1]')
    with pytest.raises(TuningLogError, match="already registered"):
        te.register_workload("matmul_auto_scheduler_test", matmul_relu_relu)
    dag = te.ComputeDAG(matmul_relu_relu(8))
    te.register_workload_tensors(dag.workload_key(), dag.tensors)
    assert te.workload_key_to_dag(dag.workload_key()).print_dag() == dag.print_dag()
