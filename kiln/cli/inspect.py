"""``kiln inspect graph.json|model.so|x.params``: what an artifact holds, without running it.

The node and params tables fit the terminal's width (``--width``): each node is named once (its
kernel is shown only where it is more than the name says) with the source-model (ONNX) layers it
came from; long names are shortened in the middle. ``--json`` prints everything, untruncated.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from kiln.errors import KilnError

__all__ = ["add_arguments", "describe", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kiln inspect``."""
    parser.add_argument("path", type=Path, help="graph JSON, exported artifact (.so) or params file")
    parser.add_argument("--json", action="store_true",
                        help="print the description as JSON (full names, source layers)")
    parser.add_argument("--width", type=int, default=None, metavar="N",
                        help="table width in characters (default: the terminal's, 100 when output "
                             "is not a terminal; 0: no limit, full names)")


def _params_table(params: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name, value in params.items():
        arr = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
        rows.append({"name": name, "shape": list(arr.shape), "dtype": arr.dtype.name if arr.dtype != bool
                     else "bool", "bytes": int(arr.nbytes)})
    return rows


def _graph_description(graph: Any) -> dict[str, Any]:
    nodes = []
    for nid, node in enumerate(graph.nodes):
        eid = graph.entry_id(nid, 0) if node.num_outputs else None
        nodes.append({
            "id": nid, "name": node.name, "op": node.op,
            "func": node.func_name,
            "inputs": [graph.nodes[e.node_id].name for e in node.inputs],
            "shape": list(graph.shapes[eid]) if eid is not None else [],
            "dtype": graph.entry_dtype(eid) if eid is not None else "",
            "storage_id": graph.storage_ids[eid] if eid is not None else None,
            "source_names": [s for s in (node.attr("source_names", "") or "").split(",") if s],
        })
    from kiln.ir.types import np_dtype

    sizes: dict[int, int] = {}
    for eid, sid in enumerate(graph.storage_ids):
        nbytes = int(np.prod(graph.shapes[eid], dtype=np.int64)) * np_dtype(graph.entry_dtype(eid)).itemsize
        sizes[sid] = max(sizes.get(sid, 0), nbytes)
    return {"nodes": nodes, "num_storage": len(sizes), "storage_bytes": sum(sizes.values())}


def describe(path: Path) -> dict[str, Any]:
    """A JSON-able description of a graph JSON file, an exported artifact or a params file."""
    from kiln.runtime.factory import GraphExecutorFactoryModule
    from kiln.runtime.graph_json import parse_graph_json
    from kiln.runtime.module import load_module
    from kiln.runtime.params import load_param_dict

    data = path.read_bytes()
    if path.suffix == ".params" or data[:8] == (0xF7E58D4F05049CB7).to_bytes(8, "little"):
        return {"kind": "params", "params": _params_table(load_param_dict(data))}
    if data.lstrip()[:1] == b"{":
        return {"kind": "graph", **_graph_description(parse_graph_json(data.decode()))}
    lib = load_module(path)
    if not isinstance(lib, GraphExecutorFactoryModule):  # a library without a graph
        raise KilnError(f"{path} holds no graph (a bare kernel library)")
    return {"kind": "artifact", "metadata": getattr(lib, "metadata", {}),
            **_graph_description(lib.graph), "params": _params_table(lib.get_params())}


def _shape_text(shape: list[int]) -> str:
    return "x".join(str(d) for d in shape) if shape else "()"


def _node_table(nodes: list[dict[str, Any]], params: set[str], width: int) -> str:
    from kiln.runtime.table import (
        Column,
        format_table,
        kernel_differs,
        shorten_kernel,
        strip_kernel_prefix,
    )

    with_kernel = any(n["func"] and kernel_differs(n["name"], n["func"]) for n in nodes)
    columns = [Column("#", ">"), Column("Node", shrink=1, min_width=12, shortener=shorten_kernel)]
    if with_kernel:
        columns.append(Column("Kernel", shrink=1, min_width=10, shortener=shorten_kernel))
    columns += [Column("Shape", shrink=2, min_width=7), Column("Dtype"), Column("SID", ">"),
                Column("Source", shrink=1, min_width=8)]

    def rows(name: Any) -> list[list[str]]:
        out = []
        for n in nodes:
            cells = [str(n["id"]), name(n["name"])]
            if with_kernel:
                cells.append(name(n["func"]) if n["func"] and kernel_differs(n["name"], n["func"])
                             else "")
            if n["op"] == "null":  # no source layer: say what it is
                kind = "(param)" if n["name"] in params else "(input)"
            else:
                kind = ",".join(n["source_names"]) or "-"
            cells += [_shape_text(n["shape"]), n["dtype"],
                      "" if n["storage_id"] is None else str(n["storage_id"]), kind]
            out.append(cells)
        return out

    full = format_table(columns, rows(str), None)
    if not width or max(len(line) for line in full.splitlines()) <= width:
        return full
    # too wide: every kernel name loses its tvmgen_<module>_ prefix alike, then names shrink
    return format_table(columns, rows(strip_kernel_prefix), width)


def _params_text(params: list[dict[str, Any]], width: int) -> str:
    from kiln.runtime.table import Column, format_table

    columns = [Column("Name", shrink=1, min_width=12), Column("Shape", shrink=2, min_width=7),
               Column("Dtype"), Column("Bytes", ">")]
    return format_table(columns, [[p["name"], _shape_text(p["shape"]), p["dtype"], str(p["bytes"])]
                                  for p in params], width)


def _print_text(info: dict[str, Any], width: int) -> None:
    if "metadata" in info:
        meta = info["metadata"]
        for key in ("target", "opt_level", "kiln_version", "created"):
            if key in meta:
                print(f"{key}: {meta[key]}")
        for kind in ("inputs", "outputs"):
            for item in meta.get(kind, []):
                print(f"{kind[:-1]}: {item['name']} {tuple(item['shape'])} {item['dtype']}")
    if "nodes" in info:
        print(f"{len(info['nodes'])} nodes, {info['num_storage']} storage slots, "
              f"{info['storage_bytes'] / 1e6:.3f} MB planned")
        print(_node_table(info["nodes"], {p["name"] for p in info.get("params", [])}, width))
    if "params" in info:
        total = sum(p["bytes"] for p in info["params"])
        print(f"{len(info['params'])} params, {total / 1e6:.3f} MB")
        if info["params"]:
            print(_params_text(info["params"], width))


def run(args: argparse.Namespace) -> int:
    """Print what ``args.path`` holds."""
    from kiln.runtime.table import terminal_width

    if args.width is not None and args.width < 0:
        raise KilnError(f"--width must be 0 (no limit) or positive, got {args.width}")
    info = describe(args.path)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        _print_text(info, terminal_width() if args.width is None else args.width)
    return 0
