"""Kiln's auto-scheduler with TVM's ``tvm.auto_scheduler`` names (part 1: records, measurement,
replay and ``ApplyHistoryBest``; the search itself is part 2).

``import kiln as tvm`` then ``tvm.auto_scheduler.SearchTask(...)``, ``load_records(log)``,
``ApplyHistoryBest(log)``, ... work as in relay-era TVM. Tuning logs are TVM's JSON lines
(:mod:`~kiln.auto_scheduler.measure_record`): TVM's logs load here and Kiln's load in TVM.
"""

from __future__ import annotations

from kiln.auto_scheduler import (
    compute_dag,
    dispatcher,
    measure,
    measure_record,
    relay_integration,
    search_task,
    workload_registry,
)
from kiln.auto_scheduler.compute_dag import ComputeDAG, LayoutRewriteOption
from kiln.auto_scheduler.dispatcher import ApplyHistoryBest, DispatchContext
from kiln.auto_scheduler.measure import (
    BuildResult,
    LocalBuilder,
    LocalRunner,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
)
from kiln.auto_scheduler.measure_record import (
    RecordReader,
    RecordToFile,
    load_best_record,
    load_records,
    save_records,
)
from kiln.auto_scheduler.relay_integration import extract_tasks
from kiln.auto_scheduler.search_task import HardwareParams, SearchTask
from kiln.auto_scheduler.workload_registry import make_workload_key, register_workload

__all__ = [
    "ApplyHistoryBest",
    "BuildResult",
    "ComputeDAG",
    "DispatchContext",
    "HardwareParams",
    "LayoutRewriteOption",
    "LocalBuilder",
    "LocalRunner",
    "MeasureErrorNo",
    "MeasureInput",
    "MeasureResult",
    "RecordReader",
    "RecordToFile",
    "SearchTask",
    "compute_dag",
    "dispatcher",
    "extract_tasks",
    "load_best_record",
    "load_records",
    "make_workload_key",
    "measure",
    "measure_record",
    "register_workload",
    "relay_integration",
    "save_records",
    "search_task",
    "workload_registry",
]

