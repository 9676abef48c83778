"""The debugger's ``GraphModuleDebug``: TVM's debug module plus per-node profiles and dumps.

The debug executor itself (:class:`DebugExecutor`, what ``lib["debug_create"]("default", dev)``
returns) and TVM's ``GraphModuleDebug`` are runtime code, :mod:`kiln.runtime.debug_executor`, as
TVM's debug graph executor is. This module's :class:`GraphModuleDebug` (the one
``tvm.contrib.debugger.debug_executor`` gives, and :func:`create` returns) adds the tools built
over the compiler: :meth:`GraphModuleDebug.profile` returns the per-node profile as data,
reconciled with the end-to-end time and placed on the machine's roofline (measured with the C
compiler), and :meth:`GraphModuleDebug.dump_npy` writes node outputs as ``.npy`` files.

Examples
--------
>>> m = GraphModuleDebug(lib["debug_create"]("default", dev), [dev], lib.graph_json,
...                      dump_root="/tmp/tvmdbg")  # doctest: +SKIP
>>> m.set_input("data", x); report = m.profile()  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from kiln.debug.debug_result import ProfileReport, ProfileRow
from kiln.debug.roofline import machine_peak, roofline, tensor_bytes
from kiln.errors import CompileError, KilnError
from kiln.runtime import debug_executor as _runtime
from kiln.runtime.debug_executor import _DUMP_PATH_PREFIX as _DUMP_PATH_PREFIX  # the command line's
from kiln.runtime.debug_executor import (
    DebugExecutor,
    NodeNotFoundError,
    create_executor,
    create_from_factory,
)
from kiln.runtime.module import Module
from kiln.runtime.ndarray import Device
from kiln.runtime.profiling import time_function

__all__ = [
    "DebugExecutor",
    "GraphModuleDebug",
    "NodeNotFoundError",
    "create",
    "create_executor",
    "create_from_factory",
]


class GraphModuleDebug(_runtime.GraphModuleDebug):
    """TVM's ``GraphModuleDebug`` (:class:`kiln.runtime.debug_executor.GraphModuleDebug`) plus
    :meth:`profile` and :meth:`dump_npy`.

    Parameters
    ----------
    module : DebugExecutor
        ``lib["debug_create"]("default", dev)`` (a plain graph executor is converted).
    device : Device or sequence of Device
        The CPU.
    graph_json_str : str, optional
        The graph JSON (default: the module's graph).
    dump_root : str or Path, optional
        Folder for the dumps; a fresh temporary folder (its path printed) when None.
    """

    def _place_on_roofline(self, rows: list[ProfileRow]) -> dict[str, Any] | None:
        """Fill the roofline columns of ``rows``; the machine limits used. None (columns left
        empty) for graphs without FLOP counts (the ``numpy`` target) or without a C compiler to
        measure the machine with."""
        if not any(r.flops is not None for r in rows):
            return None
        try:
            peak = machine_peak(self.module.num_threads)
        except CompileError:
            return None
        for r in rows:
            place = roofline(r.flops or 0.0, r.bytes, r.mean_us * 1e-6, peak)
            r.gflops, r.gbps = place.gflops, place.gbps
            r.roof_percent, r.bound = place.percent, place.bound
        return asdict(peak)

    # --- beyond TVM ----------------------------------------------------------------------------
    def profile(self, number: int = 10, repeat: int = 3, min_repeat_ms: float = 1,
                roofline: bool = True, **input_dict: Any) -> ProfileReport:
        """Per-node time statistics as data, reconciled with the end-to-end time.

        Each repeat times every node on its own and then the whole graph, one right after the
        other, so that slow drifts of the machine affect both sides of the reconciliation alike.

        Parameters
        ----------
        number, repeat, min_repeat_ms
            Timing settings, used both per node and for the whole graph.
        roofline : bool
            Place every node against the machine's measured FMA peak and memory bandwidth
            (:func:`kiln.debug.roofline.machine_peak`, measured once per machine and cached):
            FLOPs (from the graph's ``flops`` attributes), bytes of its tensors, GFLOP/s, GB/s,
            share of the attainable rate and the bound.
        **input_dict
            Inputs to set first, by name.

        Returns
        -------
        ProfileReport
            Rows per operator node (node, kernel, source names, mean/std/min/max, shapes,
            dtypes) and the gap between the end-to-end time and the sum of node times.
        """
        if repeat < 1:
            raise KilnError(f"profile: repeat must be positive, got {repeat}")
        if input_dict:
            self.set_input(**input_dict)
        ex = self.module
        times: list[list[float]] = [[] for _ in ex.graph.nodes]
        end_to_end: list[float] = []
        for _ in range(repeat):
            for per_node, measured in zip(times, ex.run_individual(number, 1, min_repeat_ms)):
                per_node.extend(measured)
            end_to_end += time_function(ex.run, repeat=1, number=number,
                                        min_repeat_ms=min_repeat_ms).results
        means = [float(np.mean(t)) for t in times]
        total = sum(means)
        rows = []
        for nid, node in enumerate(ex.graph.nodes):
            if node.is_input:
                continue
            us = np.asarray(times[nid]) * 1e6
            eids = ex.node_output_entries(nid)
            sources = node.attr("source_names", "") or ""
            in_eids = [ex.graph.entry_id(e) for e in node.inputs]
            flops = node.attr("flops", "")
            out_bytes = tensor_bytes([ex.graph.shapes[e] for e in eids],
                                     [ex.graph.entry_dtype(e) for e in eids])
            # a kernel that only moves data (slice, gather, transpose) reads what it writes;
            # one that computes reads its inputs whole
            moved = 2 * out_bytes if flops == "0" else out_bytes + tensor_bytes(
                [ex.graph.shapes[e] for e in in_eids], [ex.graph.entry_dtype(e) for e in in_eids])
            rows.append(ProfileRow(
                flops=float(flops) if flops and float(flops) >= 0 else None,
                bytes=moved,
                index=nid, node=node.name, func=node.func_name,
                source_names=[s for s in sources.split(",") if s],
                mean_us=float(us.mean()), std_us=float(us.std()), min_us=float(us.min()),
                max_us=float(us.max()), measurements_us=[float(t) for t in us],
                percent=100.0 * means[nid] / total if total else 0.0,
                shapes=[tuple(ex.graph.shapes[e]) for e in eids],
                dtypes=[ex.graph.entry_dtype(e) for e in eids]))
        peak = self._place_on_roofline(rows) if roofline else None
        node_sums = np.sum(times, axis=0) * 1e6  # per repeat
        return ProfileReport(rows=rows, node_sum_us=total * 1e6, peak=peak,
                             end_to_end_us=float(np.mean(end_to_end)) * 1e6,
                             end_to_end_std_us=float(np.std(end_to_end)) * 1e6,
                             num_threads=ex.num_threads,
                             gaps_us=[float(e * 1e6 - n) for e, n in zip(end_to_end, node_sums)],
                             settings={"number": number, "repeat": repeat,
                                       "min_repeat_ms": min_repeat_ms})

    def dump_npy(self, folder: str | Path | None = None,
                 include: str | Sequence[str] | Callable[[Any], bool] | None = None,
                 max_bytes: int | None = None) -> Any:
        """Write the last run's node outputs as ``.npy`` files plus ``manifest.json``.

        Parameters
        ----------
        folder : str or Path, optional
            Where to write (default ``<dump path>/npy``).
        include : str, sequence of str or callable, optional
            Glob pattern(s) matched against node names, kernel names and source names, or a
            predicate on :class:`kiln.debug.dump.TensorRecord`; default: every tensor.
        max_bytes : int, optional
            Cap on the total size of the written arrays.

        Returns
        -------
        kiln.debug.dump.DumpManifest
            What was written and what was skipped.
        """
        from kiln.debug.dump import records_from_graph, write_npy_dump

        if not self._outputs:
            raise KilnError("dump_npy: no node outputs collected yet; call run() first")
        records = records_from_graph(self.module.graph, self._outputs, self.module.lib)
        return write_npy_dump(folder or self._dump_path / "npy", records, include=include,
                              max_bytes=max_bytes)



def create(graph_json_str: str, libmod: Module, device: Device | Sequence[Device],
           dump_root: str | Path | None = None) -> GraphModuleDebug:
    """``tvm.contrib.debugger.debug_executor.create``: as :func:`kiln.runtime.debug_executor.create`
    (same parameters), returning the module with :meth:`~GraphModuleDebug.profile` and
    :meth:`~GraphModuleDebug.dump_npy`."""
    return GraphModuleDebug(create_executor(graph_json_str, libmod, device), device,
                            graph_json_str, dump_root)
