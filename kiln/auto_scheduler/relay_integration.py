"""Tuning tasks of a relay model (TVM's ``auto_scheduler.relay_integration``).

:func:`extract_tasks` runs the pipeline ``relay.build`` runs (the same passes, AlterOpLayout's
blocked layouts included, and graph lowering) and makes one :class:`SearchTask` per distinct
fused function the build would compile: its compute DAG is the one the native build schedules
(:func:`kiln.codegen.native.function_to_dag`), so a record tuned for the task replays in
``with ApplyHistoryBest(log): relay.build(...)``. Functions with the same DAG (the same workload
key) are one task whose weight is how many times the graph calls them.

Which tasks are kept by default follows TVM: a task is worth tuning when one of its computations
is a reduction (convolution, dense, batch_matmul, pooling, softmax, mean, ...); element-wise and
injective functions (add + relu, layout transforms, reshapes) are left to the default schedule
unless ``include_simple_tasks=True``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kiln.auto_scheduler.compute_dag import ComputeDAG, LayoutRewriteOption
from kiln.auto_scheduler.search_task import HardwareParams, SearchTask
from kiln.build_module import lower_to_graph
from kiln.codegen.native import function_to_dag
from kiln.ir.expr import Function
from kiln.ir.module import IRModule
from kiln.target import Target
from kiln.te.dispatch import has_complex_op
from kiln.te.workload import register_workload_tensors
from kiln.transform import PassContext

__all__ = ["extract_tasks"]

# Source layers named in a task's description, at most (the rest are counted).
_DESC_SOURCES = 3


def _describe(func_names: Sequence[str], sources: Sequence[str]) -> str:
    text = ",".join(func_names)
    if sources:
        shown = ", ".join(sources[:_DESC_SOURCES])
        more = len(sources) - _DESC_SOURCES
        text += f" [{shown}{f', +{more} more' if more > 0 else ''}]"
    return text


def extract_tasks(
    mod: IRModule | Function,
    params: Mapping[str, Any] | None,
    target: Any,
    target_host: Any = None,
    hardware_params: HardwareParams | None = None,
    include_simple_tasks: bool = False,
    dump_workload_to_dag_log: str | None = None,
    opt_level: int = 3,
    other_targets: Sequence[Any] | None = None,
) -> tuple[list[SearchTask], list[int]]:
    """The tuning tasks of a model: one per distinct fused function ``relay.build`` compiles.

    Parameters
    ----------
    mod : IRModule or Function
        The model (not modified); a relay Function (``mod["main"]``) as TVM's tutorials pass it.
    params : dict of str to array, optional
        Weights bound by name (folded as the build folds them).
    target : str or Target
        The C target (``"llvm"``, ``"c"``, ``"llvm -mcpu=..."``); the tasks' DAGs depend on it
        through the layouts AlterOpLayout picks.
    target_host : str or Target, optional
        Kept on the tasks (CPU targets are their own host).
    hardware_params : HardwareParams, optional
        Kept on the tasks (default: this machine's).
    include_simple_tasks : bool
        Also make tasks of functions without a reduction (see the module docstring).
    dump_workload_to_dag_log : str, optional
        Write ``{workload_key: DAG text}`` of the tasks to this JSON file.
    opt_level : int
        The PassContext opt level the pipeline runs at (the build's must match for the keys to
        agree).
    other_targets : list, optional
        Accepted for TVM compatibility (Kiln builds for one CPU target).

    Returns
    -------
    (list of SearchTask, list of int)
        The tasks, in the order the graph first calls them, and their weights (how many times
        the graph calls each).

    Examples
    --------
    >>> tasks, weights = extract_tasks(mod, params, "llvm")  # doctest: +SKIP
    >>> [t.desc for t in tasks][:1]  # doctest: +SKIP
    ['tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add_nn_relu']
    """
    del other_targets  # one CPU target: nothing else to extract for
    if isinstance(mod, Function):  # TVM's tutorials pass mod["main"]
        mod = IRModule.from_expr(mod)
    if not isinstance(mod, IRModule):
        raise TypeError(f"extract_tasks: expected an IRModule, got {type(mod).__name__}")
    tgt = Target(target)
    if target_host is not None:
        tgt = Target(tgt, host=target_host)
    with PassContext(opt_level=opt_level):
        lowered, _ = lower_to_graph(mod, tgt, params)
    calls: dict[str, int] = {}
    for node in lowered.graph.nodes:
        if node.op == "tvm_op" and node.func_name in lowered.functions:
            calls[node.func_name] = calls.get(node.func_name, 0) + 1
    found: dict[str, dict[str, Any]] = {}  # workload key -> dag, tensors, weight, names, sources
    for name in calls:
        fdag = function_to_dag(lowered.functions[name], name)
        if not include_simple_tasks and not has_complex_op(fdag.dag):
            continue
        key = fdag.dag.workload_key()
        entry = found.setdefault(key, {"fdag": fdag, "weight": 0, "names": [], "sources": []})
        entry["weight"] += calls[name]
        entry["names"].append(name)
        entry["sources"] += [s for s in fdag.source_names if s not in entry["sources"]]
    tasks: list[SearchTask] = []
    weights: list[int] = []
    for key, entry in found.items():
        fdag = entry["fdag"]
        register_workload_tensors(key, fdag.dag.tensors)
        tasks.append(SearchTask(compute_dag=ComputeDAG(fdag.dag.tensors), workload_key=key, target=tgt,
                                target_host=target_host, hardware_params=hardware_params,
                                layout_rewrite_option=LayoutRewriteOption.NO_REWRITE,
                                desc=_describe(entry["names"], entry["sources"])))
        weights.append(int(entry["weight"]))
    if dump_workload_to_dag_log is not None:
        with open(dump_workload_to_dag_log, "w", encoding="utf-8") as f:
            json.dump({t.workload_key: str(t.compute_dag) for t in tasks}, f)
    return tasks, weights
