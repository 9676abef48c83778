"""The debugger's profile report, and TVM's ``debug_result`` names.

:class:`ProfileReport` is the structured per-node profile (beyond TVM) that
``GraphModuleDebug.profile`` returns: time statistics, shapes, dtypes and source-model names per
node, reconciled with the end-to-end time, and each node placed on the machine's roofline.

What the debug executor collects and writes in TVM's formats (:class:`DebugResult`, the dump
files, the tables) is runtime code, :mod:`kiln.runtime.debug_result`; its names are re-exported
here.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from kiln.runtime.debug_result import (
    CHROME_TRACE_FILE_NAME,
    GRAPH_DUMP_FILE_NAME,
    OUTPUT_TENSORS_FILE_NAME,
    DebugResult,
    TableRow,
    format_debug_table,
    format_fitted_table,
    tensor_key,
)
from kiln.runtime.table import Column, format_table, shorten_kernel, strip_kernel_prefix

__all__ = [
    "CHROME_TRACE_FILE_NAME",
    "GRAPH_DUMP_FILE_NAME",
    "OUTPUT_TENSORS_FILE_NAME",
    "DebugResult",
    "ProfileReport",
    "ProfileRow",
    "TableRow",
    "format_debug_table",
    "format_fitted_table",
    "tensor_key",
]


@dataclass
class ProfileRow:
    """Per-node profile of one operator node (``GraphModuleDebug.profile``).

    Attributes
    ----------
    index : int
        The node's topological index in the graph JSON.
    node : str
        The node's name.
    func : str
        Its kernel (``func_name``).
    source_names : list of str
        Source-model node names the fused node came from (graph JSON ``source_names``).
    mean_us, std_us, min_us, max_us : float
        Statistics over the repeats, in microseconds.
    measurements_us : list of float
        One time per repeat.
    percent : float
        Share of the sum of node times.
    shapes : list of tuple of int
        Output shapes.
    dtypes : list of str
        Output dtypes.
    flops : float or None
        FLOPs of one run of the kernel (Ansor's estimate; None when the graph does not say).
    bytes : int
        Bytes of the tensors it reads and writes, each once (the least traffic it can have); a
        kernel without arithmetic (a slice, a gather) counts what it writes twice.
    gflops, gbps : float
        Achieved GFLOP/s and GB/s (from the mean time).
    roof_percent : float or None
        Share of what the machine allows at this kernel's arithmetic intensity,
        ``min(FMA peak, intensity * bandwidth)``, or of the FMA peak for a ``"cache"`` kernel
        (None when not measured).
    bound : str
        ``"compute"`` or ``"memory"``: the limit that applies; ``"cache"`` when the kernel moved
        its bytes faster than the copy bandwidth (its data stayed in cache) ("" when not measured).
    """

    index: int
    node: str
    func: str
    source_names: list[str]
    mean_us: float
    std_us: float
    min_us: float
    max_us: float
    measurements_us: list[float]
    percent: float
    shapes: list[tuple[int, ...]]
    dtypes: list[str]
    flops: float | None = None
    bytes: int = 0
    gflops: float = 0.0
    gbps: float = 0.0
    roof_percent: float | None = None
    bound: str = ""


@dataclass
class ProfileReport:
    """Per-node times reconciled with the end-to-end time of the whole graph.

    Attributes
    ----------
    rows : list of ProfileRow
        Operator nodes in graph order.
    node_sum_us : float
        Sum of the nodes' mean times.
    end_to_end_us : float
        Mean time of one whole ``run()`` (timed with the same settings).
    end_to_end_std_us : float
        Its standard deviation over the repeats.
    num_threads : int
        Threads the kernels ran with.
    gaps_us : list of float
        Per repeat, the end-to-end time minus the sum of that repeat's node times (each repeat
        times the nodes, then the whole graph).
    settings : dict
        ``number``, ``repeat`` and ``min_repeat_ms`` used.
    peak : dict or None
        The machine's measured limits the roofline columns use (``gflops``, ``gbps``,
        ``num_threads``, ``isa``; see :func:`kiln.debug.roofline.machine_peak`).
    """

    rows: list[ProfileRow]
    node_sum_us: float
    end_to_end_us: float
    end_to_end_std_us: float
    num_threads: int
    gaps_us: list[float] = field(default_factory=list)
    settings: dict[str, float] = field(default_factory=dict)
    peak: dict[str, Any] | None = None

    @property
    def gap_us(self) -> float:
        """End-to-end time minus the sum of node times (positive: time outside the kernels)."""
        return self.end_to_end_us - self.node_sum_us

    @property
    def gap_percent(self) -> float:
        """The gap as a percentage of the end-to-end time."""
        return 100.0 * self.gap_us / self.end_to_end_us if self.end_to_end_us else 0.0

    @property
    def gap_std_us(self) -> float:
        """Standard deviation of the per-repeat gaps (0 with one repeat)."""
        return float(np.std(self.gaps_us)) if self.gaps_us else 0.0

    def reconciliation(self) -> str:
        """One line: sum of node times, end-to-end time and the gap."""
        return (f"sum of node times {self.node_sum_us:.3f} us, end-to-end {self.end_to_end_us:.3f} "
                f"us (std {self.end_to_end_std_us:.3f}), gap {self.gap_us:+.3f} us "
                f"({self.gap_percent:+.2f}%, std over repeats {self.gap_std_us:.3f} us), "
                f"{self.num_threads} thread(s)")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (rows, totals, gap, settings)."""
        return {"rows": [asdict(r) for r in self.rows], "node_sum_us": self.node_sum_us,
                "end_to_end_us": self.end_to_end_us, "end_to_end_std_us": self.end_to_end_std_us,
                "gap_us": self.gap_us, "gap_percent": self.gap_percent,
                "gaps_us": list(self.gaps_us), "gap_std_us": self.gap_std_us,
                "num_threads": self.num_threads, "settings": dict(self.settings),
                "peak": self.peak}

    def peak_line(self) -> str:
        """One line: the machine limits the roofline columns are relative to."""
        if self.peak is None:
            return "roofline: not measured"
        busy = self.peak.get("load", 0.0) > (os.cpu_count() or 1) / 2
        return (f"roofline: FMA peak {self.peak['gflops']:.1f} GFLOP/s, copy bandwidth "
                f"{self.peak['gbps']:.1f} GB/s, {self.peak['num_threads']} thread(s) "
                f"({self.peak['isa']})"
                + (f"; measured on a busy machine (load {self.peak['load']:.1f}): "
                   "limits understated" if busy else ""))

    def roofline_table(self, width: int | None = None) -> str:
        """The nodes, slowest first, against the machine's limits, fitted to ``width``.

        Columns: ``#``, ``Node``, ``Mean(us)``, ``MFLOP`` (one run), ``KB`` (tensors read and
        written), ``GFLOP/s``, ``GB/s``, ``Roof(%)`` (share of ``min(FMA peak, intensity x
        bandwidth)``), ``Bound`` and ``Source``; then the machine's limits.
        """
        columns = [Column("#", ">"), Column("Node", shrink=1, min_width=10, soft_width=20,
                                            shortener=shorten_kernel),
                   Column("Mean(us)", ">"), Column("MFLOP", ">"), Column("KB", ">"),
                   Column("GFLOP/s", ">"), Column("GB/s", ">"), Column("Roof(%)", ">"),
                   Column("Bound"), Column("Source", shrink=1, min_width=6, soft_width=16)]
        data = [[str(r.index), strip_kernel_prefix(r.node), f"{r.mean_us:.3f}",
                 f"{r.flops / 1e6:.2f}" if r.flops is not None else "-", f"{r.bytes / 1e3:.1f}",
                 f"{r.gflops:.1f}" if r.flops else "-", f"{r.gbps:.1f}",
                 f"{r.roof_percent:.0f}" if r.roof_percent is not None else "-", r.bound or "-",
                 ",".join(r.source_names) or "-"]
                for r in sorted(self.rows, key=lambda r: r.mean_us, reverse=True)]
        return format_table(columns, data, width or None) + "\n" + self.peak_line()

    def __str__(self) -> str:
        header = ("Node Name", "Ops", "Mean(us)", "Std(us)", "Min(us)", "Max(us)", "Time(%)",
                  "GFLOP/s", "GB/s", "Roof(%)", "Bound", "Shapes", "Source")
        cells = [[r.node, r.func, f"{r.mean_us:.3f}", f"{r.std_us:.3f}", f"{r.min_us:.3f}",
                  f"{r.max_us:.3f}", f"{r.percent:.3f}",
                  f"{r.gflops:.1f}" if r.flops else "-", f"{r.gbps:.1f}",
                  f"{r.roof_percent:.0f}" if r.roof_percent is not None else "-", r.bound or "-",
                  ", ".join(str(s) for s in r.shapes), ",".join(r.source_names) or "-"]
                 for r in self.rows]
        widths = [max([len(h)] + [len(c[i]) for c in cells]) + 2 for i, h in enumerate(header)]
        lines = ["".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
        lines += ["".join(x.ljust(w) for x, w in zip(c, widths)).rstrip() for c in cells]
        return "\n".join([*lines, self.reconciliation(), self.peak_line()])
