"""``SearchTask``, ``HardwareParams``, the auto_scheduler ``ComputeDAG`` and the package's names."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import kiln
from kiln import auto_scheduler, te
from kiln.auto_scheduler import measure_record as mr
from kiln.auto_scheduler.workload_registry import (
    WORKLOAD_FUNC_REGISTRY,
    calc_workload_dis_factor,
    decode_workload_key,
)
from kiln.config import usable_cpus
from kiln.errors import TuningLogError
from kiln.target import Target
from kiln.testing.auto_scheduler import matmul_auto_scheduler_test

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tvm"
LOG = FIXTURES / "ansor_manual_steps_log.json"
MATMUL_KEY = '["matmul_auto_scheduler_test", 512, 512, 512]'

TVM_NAMES = ("SearchTask", "ComputeDAG", "LayoutRewriteOption", "register_workload",
             "make_workload_key", "HardwareParams", "MeasureInput", "MeasureResult", "BuildResult",
             "MeasureErrorNo", "load_records", "save_records", "load_best_record", "RecordToFile",
             "RecordReader", "LocalBuilder", "LocalRunner", "ApplyHistoryBest", "DispatchContext",
             "extract_tasks", "measure", "measure_record", "search_task", "compute_dag",
             "workload_registry", "dispatcher", "relay_integration")


def _expected_prints() -> list[str]:
    text = (FIXTURES / "ansor_manual_stdout.txt").read_text()
    blocks = []
    for title in ("cache_rw_split_fuse_annotate_pragma_fsp_ca_cr_sa \n",
                  "follow_fused_split \n", "rfactor \n"):
        start = text.index(title) + len(title)
        blocks.append(text[start:text.index(" \n\n", start)][1:])
    return blocks


@pytest.mark.parametrize("name", TVM_NAMES)
def test_tvm_names_are_exported(name: str) -> None:
    assert getattr(kiln.auto_scheduler, name) is not None
    assert name in auto_scheduler.__all__


def test_importing_kiln_does_not_import_the_auto_scheduler() -> None:
    code = ("import sys, kiln; assert 'kiln.auto_scheduler' not in sys.modules; "
            "kiln.auto_scheduler.SearchTask; assert 'kiln.auto_scheduler' in sys.modules")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_hardware_params_defaults_are_this_machines() -> None:
    hw = auto_scheduler.HardwareParams()
    values = hw.to_list()
    assert len(values) == 8 and all(type(v) is int for v in values)
    assert values[0] == usable_cpus()
    assert values[2:] == [64, 0, 0, 0, 0, 0]
    assert auto_scheduler.HardwareParams(target="llvm -mcpu=skylake-avx512").vector_unit_bytes == 64
    assert auto_scheduler.HardwareParams(target="llvm -mcpu=haswell").vector_unit_bytes == 32
    given = auto_scheduler.HardwareParams(4, 16, 32, 1, 2, 3, 4, 5)
    assert given.to_list() == [4, 16, 32, 1, 2, 3, 4, 5]
    assert auto_scheduler.HardwareParams.from_list(given.to_list()) == given


def test_search_task_from_a_function_and_from_a_key() -> None:
    task = auto_scheduler.SearchTask(func=matmul_auto_scheduler_test, args=(512, 512, 512),
                                     target="llvm")
    assert task.workload_key == MATMUL_KEY
    assert isinstance(task.target, Target) and task.target.kind.name == "llvm"
    assert task.target_host is None and task.target_host_text == ""
    assert task.layout_rewrite_option == auto_scheduler.LayoutRewriteOption.INSERT_TRANSFORM_STAGE
    assert task.compute_dag.print_dag() == "A = PLACEHOLDER [512, 512]\nB = PLACEHOLDER [512, 512]\n" \
        "C(i, j) += (A[i, k]*B[k, j])\n"
    again = auto_scheduler.SearchTask(workload_key=MATMUL_KEY, target="llvm", desc="mm",
                                      layout_rewrite_option=0, task_inputs=["A"])
    assert again.compute_dag.print_dag() == task.compute_dag.print_dag()
    assert (again.desc, again.layout_rewrite_option, again.task_input_names) == ("mm", 0, ["A"])
    with pytest.raises(TuningLogError, match="target"):
        auto_scheduler.SearchTask(workload_key=MATMUL_KEY)
    with pytest.raises(TuningLogError, match="workload"):
        auto_scheduler.SearchTask(target="llvm")


def test_compute_dag_takes_tensors_a_key_or_a_schedule() -> None:
    tensors = matmul_auto_scheduler_test(8, 8, 8)
    by_tensors = auto_scheduler.ComputeDAG(tensors)
    by_key = auto_scheduler.ComputeDAG('["matmul_auto_scheduler_test", 8, 8, 8]')
    by_schedule = auto_scheduler.ComputeDAG(te.create_schedule([tensors[2].op]))
    assert by_tensors.print_dag() == by_key.print_dag() == by_schedule.print_dag()
    assert by_tensors.workload_key() == by_key.workload_key()
    assert str(by_key.get_init_state()) == str(by_key.init_state)
    with pytest.raises(TypeError, match="tensors"):
        auto_scheduler.ComputeDAG([1, 2])


def test_apply_best_and_print_best_use_the_best_valid_record(tmp_path: Path, capsys) -> None:
    lines = LOG.read_text().splitlines()
    recs = [json.loads(lines[0]), json.loads(lines[2])]
    recs[0]["r"][0] = [0.5]
    recs[1]["r"][0] = [0.25]                     # the rfactor record is the best
    log = tmp_path / "mm.json"
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    task = auto_scheduler.SearchTask(workload_key=MATMUL_KEY, target="llvm")
    text = task.print_best(log)
    assert text == _expected_prints()[2]
    assert _expected_prints()[2] in capsys.readouterr().out
    sch, args = task.apply_best(log)
    assert [t.op.name for t in args] == ["A", "B", "C"]
    assert [s.op.name for s in sch.stages] == [
        s.op.name for s in task.compute_dag.apply_steps(mr.input_steps(
            auto_scheduler.load_best_record(log, MATMUL_KEY)[0])).stages]
    assert "C.rf" in [s.op.name for s in sch.stages]
    other = auto_scheduler.SearchTask(func=matmul_auto_scheduler_test, args=(64, 64, 64),
                                      target="llvm")
    with pytest.raises(TuningLogError, match="no valid record"):
        other.apply_best(log)


def test_pickled_task_registers_its_dag_workload() -> None:
    tensors = matmul_auto_scheduler_test(4, 6, 8)
    dag = auto_scheduler.ComputeDAG(tensors)
    task = auto_scheduler.SearchTask(compute_dag=dag, workload_key=dag.workload_key(),
                                     target="llvm")
    blob = pickle.dumps(task)
    WORKLOAD_FUNC_REGISTRY.pop(dag.workload_key(), None)
    copy = pickle.loads(blob)
    assert copy.compute_dag.print_dag() == dag.print_dag()
    assert te.workload_key_to_dag(dag.workload_key()).print_dag() == dag.print_dag()


def test_workload_key_helpers() -> None:
    assert decode_workload_key('["abc", [1, 2], 3]') == ("abc", (1, 2, 3))
    assert decode_workload_key("not json") == ("not json", None)
    assert calc_workload_dis_factor(("f", (512, 8)), ("f", (256, 8))) == 2
    assert calc_workload_dis_factor(("f", (512,)), ("f", (384,))) == float("inf")
    assert calc_workload_dis_factor(("f", (512,)), ("g", (512,))) == float("inf")
    assert calc_workload_dis_factor(("f", ("x", 0)), ("f", ("x", 0))) == 1
