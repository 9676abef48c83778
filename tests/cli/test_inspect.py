"""``kiln inspect`` tables through the command line: fitted to the terminal, names once, layers.

Oracles: the ONNX model's own node names (source layers), the graph JSON read back with
``kiln.runtime.graph_json`` (node names and kernels), and the width set through ``COLUMNS``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kiln
from kiln import relay
from kiln.runtime.graph_json import parse_graph_json
from tests.cli._long_names import LAYERS, save_long_names_onnx

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tvm"


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("inspect")
    files = save_long_names_onnx(root)
    mod, params = relay.frontend.from_onnx(str(files["model"]), shape={"x": (1, 3, 8, 8)})
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="numpy", params=params)
    lib.export_library(str(root / "model.so"))
    return root / "model.so"


def _inspect(path: Path, *extra: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kiln", "inspect", str(path), *extra],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": str(columns)})


def _rows(text: str, header: str) -> list[list[str]]:
    """The cells of the table whose header line starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(header))
    rows = []
    for line in lines[start + 2:]:
        cells = re.split(r"  +", line.strip())
        if len(cells) < 2:  # the line after the table
            break
        rows.append(cells)
    return rows


def _matches(shown: str, full: str) -> bool:
    """``shown`` is ``full``, or ``full`` shortened in the middle (kernel prefix maybe dropped)."""
    for candidate in (full, re.sub(r"^tvmgen_.*?_(?=fused_)", "", full)):
        head, sep, tail = shown.partition("...")
        if shown == candidate or (sep and candidate.startswith(head) and candidate.endswith(tail)
                                  and len(head) + len(tail) < len(candidate)):
            return True
    return False


def test_artifact_tables_fit_and_name_each_node_once_with_its_layers(artifact: Path) -> None:
    proc = _inspect(artifact)
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80
    info = json.loads(_inspect(artifact, "--json").stdout)
    nodes = {n["id"]: n for n in info["nodes"]}
    rows = _rows(proc.stdout, "#  Node")
    assert [int(r[0]) for r in rows] == sorted(nodes)
    params = {p["name"] for p in info["params"]}
    for cells in rows:
        node = nodes[int(cells[0])]
        assert _matches(cells[1], node["name"])
        assert not any(_matches(c, node["name"]) for c in cells[2:])  # printed once
        if node["op"] == "null":
            assert cells[-1] == ("(param)" if node["name"] in params else "(input)")
        else:
            assert _matches(cells[-1], ",".join(node["source_names"]))
    # the JSON names every ONNX layer, in full, as lists
    assert {s for n in info["nodes"] for s in n["source_names"]} == set(LAYERS)
    assert [r[0] for r in _rows(proc.stdout, "Name")] == [p["name"] for p in info["params"]]


def test_graph_json_table_fits_a_narrow_terminal_and_width_zero_is_full() -> None:
    path = FIXTURES / "small_o3.graph.json"
    graph = parse_graph_json(path.read_text())
    narrow = _inspect(path, columns=60)
    assert narrow.returncode == 0, narrow.stderr
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 60
    full = _inspect(path, "--width", "0", columns=60).stdout
    names = [cells[1] for cells in _rows(full, "#  Node")]
    assert names == [n.name for n in graph.nodes]
    assert [c[1] for c in _rows(narrow.stdout, "#  Node")] != names  # shortened to fit 60
    assert all(_matches(c[1], n) for c, n in zip(_rows(narrow.stdout, "#  Node"), names))
