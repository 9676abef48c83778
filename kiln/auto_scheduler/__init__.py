"""Kiln's auto-scheduler with TVM's ``tvm.auto_scheduler`` names (part 1: records, measurement,
replay and ``ApplyHistoryBest``; part 2: the search, the cost model and the task scheduler).

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

# The search, the cost model, the task scheduler, Ray measurement and plotting load on first use
# (``auto_scheduler.SketchPolicy``): importing the package stays cheap, and a module that is
# missing fails only the names it provides.
_LAZY: dict[str, str] = {
    "CostModel": "cost_model",
    "LGBModel": "cost_model",
    "RandomModel": "cost_model",
    "XGBModel": "cost_model",
    "MeasureCallback": "measurer",
    "ProgramMeasurer": "measurer",
    "EmptyPolicy": "search_policy",
    "PreloadMeasuredStates": "search_policy",
    "SearchCallback": "search_policy",
    "SearchPolicy": "search_policy",
    "SketchPolicy": "search_policy",
    "LogEstimatedLatency": "task_scheduler",
    "PrintTableInfo": "task_scheduler",
    "TaskScheduler": "task_scheduler",
    "TaskSchedulerCallback": "task_scheduler",
    "TuningProgress": "task_scheduler",
    "TuningOptions": "tuning",
    "auto_schedule": "tuning",
    "tune_task": "tuning",
    "tune_tasks": "tuning",
    "RayBuilder": "ray_measure",
    "RayRunner": "ray_measure",
    "plot_tuning_progress": "plot",
}
_LAZY_MODULES = ("cost_model", "feature", "measurer", "plot", "ray_measure", "search_policy", "sketch",
                 "task_scheduler", "tuning")


def __getattr__(name: str) -> object:
    import importlib

    if name in _LAZY_MODULES:
        return importlib.import_module(f"kiln.auto_scheduler.{name}")
    if name in _LAZY:
        return getattr(importlib.import_module(f"kiln.auto_scheduler.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'kiln.auto_scheduler' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_LAZY_MODULES))


__all__ = [
    *_LAZY,
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

