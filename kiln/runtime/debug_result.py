"""What the debug executor collects, and the files and tables it writes in TVM's formats.

:class:`DebugResult` mirrors TVM's ``debug_result.DebugResult``: it rewrites the graph JSON into
``_tvmdbg_graph_dump.json`` (param nodes as ``"op": "param"``, operator nodes named after their
kernel, inputs by name, a ``T`` type attribute and a ``shape`` per node), and after a run writes
``output_tensors.params`` (every output of every node, keys
``<node>____topo-index:<i>____output-num:<j>``) and ``_tvmdbg_execution_trace.json`` (a Chrome
trace). :func:`format_debug_table` prints the table exactly as TVM does; it also offers the
``Start Time`` / ``End Time`` columns of seed 000. :func:`format_fitted_table` is the table
``kiln debug`` prints: fitted to a width, each node named once, with its source-model layers.

This is runtime code, as TVM's debug graph executor is (:mod:`kiln.runtime.debug_executor`);
the profile report and the comparison tools built on it live in :mod:`kiln.debug`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kiln.errors import KilnError
from kiln.runtime.params import save_param_dict
from kiln.runtime.table import (
    Column,
    format_table,
    kernel_differs,
    shorten_kernel,
    strip_kernel_prefix,
)

__all__ = [
    "CHROME_TRACE_FILE_NAME",
    "GRAPH_DUMP_FILE_NAME",
    "OUTPUT_TENSORS_FILE_NAME",
    "DebugResult",
    "TableRow",
    "format_debug_table",
    "format_fitted_table",
    "tensor_key",
]

GRAPH_DUMP_FILE_NAME = "_tvmdbg_graph_dump.json"
CHROME_TRACE_FILE_NAME = "_tvmdbg_execution_trace.json"
OUTPUT_TENSORS_FILE_NAME = "output_tensors.params"

_HEADER = ("Node Name", "Ops", "Time(us)", "Time(%)", "Shape", "Inputs", "Outputs",
           "Measurements(us)")
_TIMESTAMP_HEADER = ("Start Time", "End Time")


def tensor_key(node_name: str, topo_index: int, output_index: int) -> str:
    """The key of one node output in ``output_tensors.params`` (TVM's naming)."""
    return f"{node_name}____topo-index:{topo_index}____output-num:{output_index}"


@dataclass(frozen=True)
class TableRow:
    """One row of the debug table: one output of one operator node.

    Parameters
    ----------
    name : str
        The graph node's name.
    op : str
        Its kernel (``func_name``; ``__nop`` for aliasing reshapes).
    time_us : float
        Mean time per run in microseconds.
    time_percent : float
        Share of the total time.
    shape : tuple of int
        The output's shape.
    inputs, outputs : int
        The node's ``num_inputs`` and ``num_outputs``.
    measurements_us : sequence of float
        One time per repeat, in microseconds.
    start_time, end_time : str
        Wall-clock times of the node's execution (``HH:MM:SS.ffffff``), for the seed-000 columns.
    index : int
        The node's topological index in the graph JSON (-1 when unknown).
    source_names : tuple of str
        Source-model (ONNX) node names the node came from (graph JSON ``source_names``).
    """

    name: str
    op: str
    time_us: float
    time_percent: float
    shape: tuple[int, ...]
    inputs: int
    outputs: int
    measurements_us: tuple[float, ...] = ()
    start_time: str = ""
    end_time: str = ""
    index: int = -1
    source_names: tuple[str, ...] = ()


def _round(value: float) -> float:
    return round(float(value), 3)


def format_debug_table(rows: Sequence[TableRow], total_time_us: float, sort_by_time: bool = True,
                       show_timestamps: bool = False) -> str:
    """The debug executor's table, laid out exactly as TVM's ``get_debug_result``.

    Cells are left-aligned and padded to the column's widest cell (header included) plus two
    spaces; times are rounded to 3 decimals. Sorted by time (stable, slowest first) with a final
    ``Total_time`` row, or in the given (graph) order without it.

    Parameters
    ----------
    rows : sequence of TableRow
        The rows in graph order.
    total_time_us : float
        Sum of every node's mean time, in microseconds (the ``Total_time`` row).
    sort_by_time : bool
        Sort slowest first and add the ``Total_time`` row.
    show_timestamps : bool
        Add seed 000's ``Start Time`` and ``End Time`` columns after ``Time(%)``.

    Returns
    -------
    str
        The table, lines joined by newlines, no trailing newline.
    """
    data: list[list[Any]] = []
    for r in rows:
        cells: list[Any] = [r.name, r.op, _round(r.time_us), _round(r.time_percent)]
        if show_timestamps:
            cells += [r.start_time, r.end_time]
        cells += [str(tuple(r.shape)), str(r.inputs), str(r.outputs),
                  str([_round(m) for m in r.measurements_us])]
        data.append(cells)
    header = list(_HEADER[:4]) + (list(_TIMESTAMP_HEADER) if show_timestamps else []) + \
        list(_HEADER[4:])
    dashes = ["-" * len(h) for h in header]
    if sort_by_time:
        data.sort(key=lambda cells: cells[2], reverse=True)  # stable: ties keep graph order
        data.append(["Total_time", "-", _round(total_time_us)] + ["-"] * (len(header) - 3))
    widths = [max([len(h)] + [len(str(cells[i])) for cells in data]) + 2
              for i, h in enumerate(header)]

    def line(cells: Sequence[Any]) -> str:
        return "".join(str(c).ljust(w) for c, w in zip(cells, widths))

    return "\n".join([line(header), line(dashes)] + [line(cells) for cells in data])


def _keep_end(text: str, width: int) -> str:
    return text[len(text) - width:] if width > 0 else ""


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape) if len(shape) else "()"


def format_fitted_table(rows: Sequence[TableRow], total_time_us: float, width: int | None,
                        sort_by_time: bool = True, show_timestamps: bool = False) -> str:
    """The per-node table fitted to ``width``: each node named once, with its source layers.

    Columns: ``#`` (topological index), ``Node``, ``Kernel`` (only when some kernel differs from
    its node's name), ``Time(us)``, ``Time(%)``, optionally ``Start`` / ``End`` (wall clock),
    ``Shape`` (``1x8x8``), ``Std(us)`` over the repeats (only with several) and ``Source`` (the
    source-model layers, comma-separated). When the table is too wide, every kernel name loses its
    ``tvmgen_<module>_`` prefix, then long names are shortened in the middle (to 20 characters
    before the shape and times give way); numbers are never cut.

    Parameters
    ----------
    rows : sequence of TableRow
        The rows in graph order (:meth:`DebugResult.table_rows`).
    total_time_us : float
        Sum of every node's mean time, in microseconds.
    width : int or None
        Width to fit (None or 0: no limit, full names).
    sort_by_time : bool
        Slowest first with a final ``Total`` row, else graph order.
    show_timestamps : bool
        Add the ``Start Time`` / ``End Time`` columns.

    Returns
    -------
    str
        The table, lines joined by newlines, no trailing newline.
    """
    with_kernel = any(kernel_differs(r.name, r.op) for r in rows)
    with_measurements = any(len(r.measurements_us) > 1 for r in rows)
    columns = [Column("#", ">"), Column("Node", shrink=1, min_width=10, soft_width=20,
                                        shortener=shorten_kernel)]
    if with_kernel:
        columns.append(Column("Kernel", shrink=1, min_width=10, soft_width=16,
                              shortener=shorten_kernel))
    columns += [Column("Time(us)", ">"), Column("Time(%)", ">")]
    if show_timestamps:
        # last resort: wall-clock times keep their right end (seconds and below)
        columns += [Column(h, shrink=3, min_width=9, shortener=_keep_end)
                    for h in ("Start", "End")]
    columns.append(Column("Shape", shrink=2, min_width=7, soft_width=11))
    if with_measurements:
        columns.append(Column("Std(us)", ">"))
    columns.append(Column("Source", shrink=1, min_width=6, soft_width=16))

    def cells(r: TableRow, name: Callable[[str], str]) -> list[str]:
        out = [str(r.index) if r.index >= 0 else "", name(r.name)]
        if with_kernel:
            out.append(name(r.op) if kernel_differs(r.name, r.op) else "")
        out += [f"{r.time_us:.3f}", f"{r.time_percent:.2f}"]
        if show_timestamps:
            out += [r.start_time, r.end_time]
        out.append(_shape_text(r.shape))
        if with_measurements:
            out.append(f"{float(np.std(r.measurements_us)):.3f}")
        out.append(",".join(r.source_names) or "-")
        return out

    ordered = sorted(rows, key=lambda r: r.time_us, reverse=True) if sort_by_time else list(rows)
    total = ["", "Total"] + [""] * with_kernel + [f"{total_time_us:.3f}",
                                                 "100.00" if rows else "0.00"]
    total += [""] * (len(columns) - len(total))
    data = [cells(r, str) for r in ordered] + ([total] if sort_by_time else [])
    full = format_table(columns, data, None)
    if not width or max(len(line) for line in full.splitlines()) <= width:
        return full
    # too wide: every kernel name loses its tvmgen_<module>_ prefix alike, then names shrink
    data = [cells(r, strip_kernel_prefix) for r in ordered] + ([total] if sort_by_time else [])
    return format_table(columns, data, width)


class DebugResult:
    """The debug data of one graph: its dump folder, node times and node outputs (TVM's class).

    Creating it writes ``_tvmdbg_graph_dump.json`` into ``dump_path``.

    Parameters
    ----------
    graph_json : str
        The graph JSON text.
    dump_path : str or Path
        The device folder (``<dump_root>/_tvmdbg_device_CPU_0``); it must exist.
    """

    def __init__(self, graph_json: str, dump_path: str | Path):
        self.dump_path = Path(dump_path)
        self.time_list: list[list[float]] = []
        self.timestamps: list[tuple[str, str]] = []
        self._output_tensor_list: list[np.ndarray] = []
        graph = self._parse_graph(graph_json)
        self._dump_graph_json(graph)

    # --- the graph -----------------------------------------------------------------------------
    def _parse_graph(self, graph_json: str) -> dict[str, Any]:
        try:
            graph = json.loads(graph_json)
            self._nodes_list: list[dict[str, Any]] = graph["nodes"]
            self._shapes_list: list[Any] = graph["attrs"]["shape"]
            self._dtype_list: list[Any] = graph["attrs"]["dltype"]
        except (ValueError, KeyError, TypeError) as e:
            raise KilnError(f"debug executor: cannot read the graph JSON ({type(e).__name__}: "
                            f"{e})") from None
        self._update_graph_json()
        return graph

    def _update_graph_json(self) -> None:
        """Rewrite the nodes the way TVM's dump shows them (kept in file key order)."""
        eid = 0
        nodes = self._nodes_list
        for nid, node in enumerate(nodes):
            if node["op"] == "null":
                node["attrs"] = {}
                node["op"] = "param"
                inputs: list[str] = []
                num_outputs = 1
            elif node["op"] == "tvm_op":
                inputs = [nodes[entry[0]]["name"] for entry in node["inputs"]]
                node["op"] = node["attrs"]["func_name"]
                num_outputs = int(node["attrs"]["num_outputs"])
            else:
                raise KilnError(f"debug executor: graph node {nid} ({node.get('name')!r}) has op "
                                f"{node['op']!r}; expected 'null' or 'tvm_op'")
            node["inputs"] = inputs
            node["attrs"]["T"] = "type: " + self._dtype_list[1][eid]
            node["shape"] = self._shapes_list[1][eid]
            eid += num_outputs

    def _dump_graph_json(self, graph: dict[str, Any]) -> None:
        with open(self.dump_path / GRAPH_DUMP_FILE_NAME, "w") as f:
            json.dump(graph, f, indent=4, sort_keys=False)

    def get_graph_nodes(self) -> list[dict[str, Any]]:
        """The nodes as dumped (``op`` is the kernel name or ``"param"``)."""
        return self._nodes_list

    def get_graph_node_shapes(self) -> list[Any]:
        """The graph's ``shape`` attribute (``["list_shape", [...]]``)."""
        return self._shapes_list

    def get_graph_node_dtypes(self) -> list[Any]:
        """The graph's ``dltype`` attribute (``["list_str", [...]]``)."""
        return self._dtype_list

    @staticmethod
    def get_graph_node_output_num(node: dict[str, Any]) -> int:
        """Number of outputs of a (dumped) node."""
        return 1 if node["op"] == "param" else int(node["attrs"]["num_outputs"])

    def entry_shape(self, eid: int) -> tuple[int, ...]:
        """Shape of entry ``eid`` from the graph's attributes."""
        return tuple(self._shapes_list[1][eid])

    # --- collected data ------------------------------------------------------------------------
    def update_output_tensors(self, tensors: Sequence[np.ndarray]) -> None:
        """Replace the collected outputs: one array per entry (every output of every node)."""
        self._output_tensor_list = [np.asarray(t) for t in tensors]

    def set_times(self, time_list: Sequence[Sequence[float]],
                  timestamps: Sequence[tuple[str, str]] = ()) -> None:
        """Set per-node times (seconds, one list of repeats per node) and wall-clock stamps."""
        if len(time_list) != len(self._nodes_list):
            raise KilnError(f"debug executor: got times for {len(time_list)} nodes, the graph has "
                            f"{len(self._nodes_list)}")
        self.time_list = [[float(t) for t in times] for times in time_list]
        self.timestamps = list(timestamps)

    def get_output_tensors(self) -> dict[str, np.ndarray]:
        """Every output of every node, keyed ``<node>____topo-index:<i>____output-num:<j>``."""
        eid = 0
        tensors: dict[str, np.ndarray] = {}
        for i, node in enumerate(self._nodes_list):
            for j in range(self.get_graph_node_output_num(node)):
                tensors[tensor_key(node["name"], i, j)] = self._output_tensor_list[eid]
                eid += 1
        return tensors

    def dump_output_tensor(self) -> Path:
        """Write ``output_tensors.params`` (TVM's params bytes); its path."""
        if not self._output_tensor_list:
            raise KilnError("debug executor: no node outputs collected yet; call run() first")
        path = self.dump_path / OUTPUT_TENSORS_FILE_NAME
        path.write_bytes(save_param_dict(self.get_output_tensors()))
        return path

    def _mean_times(self) -> list[float]:
        return [float(np.mean(t)) if t else 0.0 for t in self.time_list]

    def dump_chrome_trace(self, path: str | Path | None = None) -> Path:
        """Write ``_tvmdbg_execution_trace.json``: a B/E event pair per node, times in us.

        Parameters
        ----------
        path : str or Path, optional
            Where to write instead (default: the dump folder).

        Returns
        -------
        Path
            The file written.
        """
        if not self.time_list:
            raise KilnError("debug executor: no node times collected yet; call run() first")
        events: list[dict[str, Any]] = []
        start = 0.0
        for node, mean in zip(self._nodes_list, self._mean_times()):
            for ts, ph in ((start, "B"), (start + mean, "E")):
                events.append({"ts": ts * 1e6, "tid": 1, "pid": 1, "name": node["name"], "ph": ph})
            start += mean
        path = Path(path) if path is not None else self.dump_path / CHROME_TRACE_FILE_NAME
        with open(path, "w") as f:
            json.dump({"displayTimeUnit": "ns", "traceEvents": events}, f)
        return path

    # --- the table -----------------------------------------------------------------------------
    def table_rows(self) -> list[TableRow]:
        """The table's rows in graph order (param nodes skipped, one row per output)."""
        means = self._mean_times()
        total = sum(means)
        rows: list[TableRow] = []
        eid = 0
        for nid, (node, times, mean) in enumerate(zip(self._nodes_list, self.time_list, means)):
            for _ in range(self.get_graph_node_output_num(node)):
                if node["op"] == "param":
                    eid += 1
                    continue
                shape = (self._output_tensor_list[eid].shape if self._output_tensor_list
                         else self.entry_shape(eid))
                start, end = self.timestamps[nid] if self.timestamps else ("", "")
                sources = str(node["attrs"].get("source_names", "") or "")
                rows.append(TableRow(
                    name=node["name"], op=node["op"], time_us=mean * 1e6,
                    time_percent=mean / total * 100 if total else 0.0, shape=tuple(shape),
                    inputs=int(node["attrs"]["num_inputs"]),
                    outputs=int(node["attrs"]["num_outputs"]),
                    measurements_us=tuple(t * 1e6 for t in times), start_time=start,
                    end_time=end, index=nid,
                    source_names=tuple(s for s in sources.split(",") if s)))
                eid += 1
        return rows

    def _check_table(self, show_timestamps: bool) -> None:
        if not self.time_list:
            raise KilnError("debug executor: no node times collected yet; call run() first")
        if show_timestamps and not self.timestamps:
            raise KilnError("debug executor: no start/end times were recorded for this run")

    def total_time_us(self) -> float:
        """Sum of every node's mean time, in microseconds (the table's total)."""
        return sum(self._mean_times()) * 1e6

    def get_debug_result(self, sort_by_time: bool = True, show_timestamps: bool = False) -> str:
        """The table as TVM prints it (see :func:`format_debug_table`)."""
        self._check_table(show_timestamps)
        return format_debug_table(self.table_rows(), self.total_time_us(), sort_by_time,
                                  show_timestamps)

    def get_fitted_result(self, width: int | None = None, sort_by_time: bool = True,
                          show_timestamps: bool = False) -> str:
        """The table fitted to ``width``, with source layers (see :func:`format_fitted_table`).

        Parameters
        ----------
        width : int, optional
            Width to fit (None or 0: no limit).
        sort_by_time, show_timestamps : bool
            As for :meth:`get_debug_result`.

        Returns
        -------
        str
            The table.
        """
        self._check_table(show_timestamps)
        return format_fitted_table(self.table_rows(), self.total_time_us(), width, sort_by_time,
                                   show_timestamps)

    def display_debug_result(self, sort_by_time: bool = True, show_timestamps: bool = False) -> None:
        """Print the table."""
        print(self.get_debug_result(sort_by_time, show_timestamps))
