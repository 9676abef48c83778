"""``kiln inspect graph.json|model.so|x.params``: what an artifact holds, without running it."""

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
    parser.add_argument("--json", action="store_true", help="print the description as JSON")


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
            "source_names": node.attr("source_names", "") or "",
        })
    from kiln.ir.types import np_dtype

    sizes: dict[int, int] = {}
    for eid, sid in enumerate(graph.storage_ids):
        nbytes = int(np.prod(graph.shapes[eid], dtype=np.int64)) * np_dtype(graph.entry_dtype(eid)).itemsize
        sizes[sid] = max(sizes.get(sid, 0), nbytes)
    return {"nodes": nodes, "num_storage": len(sizes), "storage_bytes": sum(sizes.values())}


def describe(path: Path) -> dict[str, Any]:
    """A JSON-able description of a graph JSON file, an exported artifact or a params file."""
    from kiln.runtime.graph_json import parse_graph_json
    from kiln.runtime.module import load_module
    from kiln.runtime.params import load_param_dict

    data = path.read_bytes()
    if path.suffix == ".params" or data[:8] == (0xF7E58D4F05049CB7).to_bytes(8, "little"):
        return {"kind": "params", "params": _params_table(load_param_dict(data))}
    if data.lstrip()[:1] == b"{":
        return {"kind": "graph", **_graph_description(parse_graph_json(data.decode()))}
    lib = load_module(path)
    graph = getattr(lib, "graph", None)
    if graph is None:
        raise KilnError(f"{path} holds no graph (a bare kernel library)")
    return {"kind": "artifact", "metadata": getattr(lib, "metadata", {}),
            **_graph_description(graph), "params": _params_table(lib.get_params())}


def _print_text(info: dict[str, Any]) -> None:
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
        width = max(len(n["name"]) for n in info["nodes"])
        for n in info["nodes"]:
            what = n["func"] or n["op"]
            print(f"  {n['id']:>4}  {n['name']:<{width}}  {what:<40} {tuple(n['shape'])!s:<20} "
                  f"{n['dtype']:<8} sid={n['storage_id']}  {n['source_names']}")
    if "params" in info:
        total = sum(p["bytes"] for p in info["params"])
        print(f"{len(info['params'])} params, {total / 1e6:.3f} MB")
        for p in info["params"]:
            print(f"  {p['name']:<32} {tuple(p['shape'])!s:<24} {p['dtype']:<8} {p['bytes']} bytes")


def run(args: argparse.Namespace) -> int:
    """Print what ``args.path`` holds."""
    info = describe(args.path)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        _print_text(info)
    return 0
