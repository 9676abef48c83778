"""Graph JSON: TVM's files parse and are rewritten byte for byte; what TVM rejects is rejected."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kiln.errors import RuntimeFormatError
from kiln.runtime.graph_json import GraphJSON, Node, NodeEntry, parse_graph_json

GRAPHS = ["small_o3", "small_o0_unbound", "multi_o3", "multi_o0"]


@pytest.mark.parametrize("stem", GRAPHS)
def test_roundtrip_is_byte_identical(fixtures_dir: Path, stem: str) -> None:
    text = (fixtures_dir / f"{stem}.graph.json").read_text()
    assert not text.endswith("\n")
    graph = parse_graph_json(text)
    assert graph.to_json() == text
    assert parse_graph_json(text.encode()).to_json() == text


@pytest.mark.parametrize("stem", GRAPHS)
def test_model_matches_the_file(fixtures_dir: Path, stem: str) -> None:
    raw = json.loads((fixtures_dir / f"{stem}.graph.json").read_text())
    g = parse_graph_json(json.dumps(raw))
    assert len(g.nodes) == len(raw["nodes"])
    assert list(g.node_row_ptr) == raw["node_row_ptr"]
    assert list(g.arg_nodes) == raw["arg_nodes"]
    assert [[h.node_id, h.index, h.version] for h in g.heads] == raw["heads"]
    assert [list(s) for s in g.shapes] == raw["attrs"]["shape"][1]
    assert list(g.dltypes) == raw["attrs"]["dltype"][1]
    assert list(g.storage_ids) == raw["attrs"]["storage_id"][1]
    for node, rn in zip(g.nodes, raw["nodes"]):
        assert node.op == rn["op"] and node.name == rn["name"]
        assert node.attr_dict == rn.get("attrs", {})
        assert [[e.node_id, e.index, e.version] for e in node.inputs] == rn["inputs"]
        expected_outputs = int(rn["attrs"]["num_outputs"]) if rn["op"] == "tvm_op" else 1
        assert node.num_outputs == expected_outputs


def test_multi_output_entries(fixtures_dir: Path) -> None:
    g = parse_graph_json((fixtures_dir / "multi_o3.graph.json").read_text())
    assert g.num_entries == 8
    assert g.entry_id(1, 2) == 3 and g.entry_id(NodeEntry(4, 0)) == 6
    assert g.output_entries == (4, 5, 6, 7)
    assert [g.entry_dtype(e) for e in g.output_entries] == ["float32", "int32", "bool", "float16"]
    assert g.dltypes[6] == "uint1"
    assert g.input_names == ("x",)
    assert g.func_names()[0] == "tvmgen_default_fused_split"


def test_zero_d_shapes(fixtures_dir: Path) -> None:
    g = parse_graph_json((fixtures_dir / "multi_o0.graph.json").read_text())
    assert g.shapes[5] == () and g.shapes[8] == ()


def _load(fixtures_dir: Path) -> dict[str, Any]:
    return json.loads((fixtures_dir / "small_o3.graph.json").read_text())


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


def _delete(path: list[Any]) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        target = doc
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return edit


REJECTIONS = [
    # the two rejections graph_json_loader_checks.txt records from TVM's reader
    (_set(["attrs", "foo"], ["list_str", ["a"] * 11]), "cannot skip graph attr foo"),
    (_set(["extra_top_level"], 1), "key extra_top_level is not supported"),
    # what TVM's reader requires, and the consistency Kiln checks on top
    (_delete(["nodes"]), "missing required key 'nodes'"),
    (_delete(["attrs", "storage_id"]), "'attrs' has no 'storage_id'"),
    (_set(["attrs", "dltype", 0], "list_int"), r"graph attr dltype must be \['list_str'"),
    (_set(["attrs", "shape", 1], [[1]] * 10), "graph attr shape has 10 item"),
    (_set(["attrs", "dltype", 1, 3], "complex64"), "entry 3 has unsupported dltype 'complex64'"),
    (_set(["attrs", "storage_id", 1, 0], -1), "storage_id values must be non-negative"),
    (_set(["attrs", "shape", 1, 0], [1, -3, 16, 16]), "negative dimension"),
    (_set(["node_row_ptr"], [0, 1, 2]), "node_row_ptr must have 12 items"),
    (_set(["node_row_ptr", 5], 4), r"node_row_ptr gives node 4 .* 0 output\(s\), but it has 1"),
    (_set(["nodes", 4, "inputs", 0, 0], 40), r"node 4 .* input 0 refers to node 40"),
    (_set(["nodes", 4, "inputs", 0, 0], 9), r"node 4 .* refers to node 9, which is not an earlier"),
    (_set(["nodes", 4, "inputs", 0, 1], 1), r"refers to output 1 of node 1 .* has 1 output"),
    (_set(["nodes", 4, "inputs", 0], [1]), r"must be \[node_id, index, version\]"),
    (_set(["nodes", 4, "attrs", "num_inputs"], "2"), "declares num_inputs=2 but lists 3"),
    (_set(["nodes", 4, "attrs", "num_outputs"], "x"), "num_outputs must be a non-negative integer"),
    (_delete(["nodes", 4, "attrs", "func_name"]), "attrs lack 'func_name'"),
    (_set(["nodes", 4, "attrs", "hash"], 7), "attribute 'hash' must be a string"),
    (_set(["nodes", 4, "op"], "relu"), "op 'relu' is not supported"),
    (_set(["nodes", 4, "color"], "red"), "key color is not supported"),
    (_delete(["nodes", 4, "name"]), "node 4 has no 'name'"),
    (_set(["arg_nodes"], [0, 2, 3, 7]), r"arg_nodes \[0, 2, 3, 7\] must list exactly"),
    (_set(["arg_nodes"], [0, 2, 3, 7, 8, 9]), "must list exactly the null nodes"),
    (_set(["heads"], []), "'heads' is empty"),
    (_set(["heads", 0, 0], 11), r"head 0 refers to node 11"),
    (_set(["heads", 0, 1], 1), r"head 0 refers to output 1 of node 10"),
    (_set(["nodes", 7, "name"], "data"), "input name.*data.*more than one null node"),
    (_set(["attrs", "device_index", 1, 4], 2), r"storage_id 4 is used on devices \d and \d"),
    (_set(["attrs", "legacy"], ["size_t", "x"]), "size_t must be an integer"),
]


@pytest.mark.parametrize(("edit", "message"), REJECTIONS)
def test_rejections_name_the_problem(fixtures_dir: Path, edit: Callable[[dict[str, Any]], None],
                                     message: str) -> None:
    doc = _load(fixtures_dir)
    edit(doc)
    with pytest.raises(RuntimeFormatError, match=message):
        parse_graph_json(json.dumps(doc))


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", '{"nodes": [], "nodes": []}', "\xff"])
def test_not_json(text: str) -> None:
    with pytest.raises(RuntimeFormatError, match="graph JSON"):
        parse_graph_json(text)
    with pytest.raises(RuntimeFormatError):
        parse_graph_json(b"\xff\xfe")


def test_skippable_attrs_and_metadata_are_kept(fixtures_dir: Path) -> None:
    doc = _load(fixtures_dir)
    doc["attrs"]["dtype"] = ["list_int", [0] * 11]  # NNVM's legacy dtype enum list
    doc["attrs"]["workspace"] = ["size_t", 64]
    doc["metadata"] = {"source": "test"}
    g = parse_graph_json(json.dumps(doc))
    assert ("dtype", "list_int", (0,) * 11) in g.extra_attrs
    again = json.loads(g.to_json())
    assert again["attrs"]["dtype"] == ["list_int", [0] * 11]
    assert again["attrs"]["workspace"] == ["size_t", 64]
    assert again["metadata"] == {"source": "test"}
    assert list(again) == ["nodes", "arg_nodes", "heads", "attrs", "node_row_ptr", "metadata"]


def test_extra_node_attrs_are_preserved(fixtures_dir: Path) -> None:
    doc = _load(fixtures_dir)
    doc["nodes"][4]["attrs"]["source_names"] = '["Conv_0", "Relu_1"]'
    doc["nodes"][4]["attrs"]["note"] = 'quote " backslash \\ tab \t newline \n'
    g = parse_graph_json(json.dumps(doc))
    text = g.to_json()
    again = json.loads(text)
    assert again["nodes"][4]["attrs"] == doc["nodes"][4]["attrs"]
    assert list(again["nodes"][4]["attrs"])[-2:] == ["source_names", "note"]
    assert parse_graph_json(text).to_json() == text


def test_entry_without_version_reads_as_zero(fixtures_dir: Path) -> None:
    doc = _load(fixtures_dir)
    doc["nodes"][1]["inputs"] = [[0, 0]]
    g = parse_graph_json(json.dumps(doc))
    assert g.nodes[1].inputs == (NodeEntry(0, 0, 0),)


def test_create_derives_arg_nodes_and_row_ptr(fixtures_dir: Path) -> None:
    """Rebuilding small_o3 from its parts with GraphJSON.create writes TVM's text."""
    text = (fixtures_dir / "small_o3.graph.json").read_text()
    tvm = parse_graph_json(text)
    rebuilt = GraphJSON.create(
        [Node.input(n.name) if n.is_input else
         Node.kernel(n.name, n.func_name, n.inputs, n.num_outputs,
                     {k: v for k, v in n.attrs or () if k not in
                      ("num_outputs", "num_inputs", "flatten_data", "func_name")})
         for n in tvm.nodes],
        tvm.heads, tvm.shapes, ["bool" if d == "uint1" else d for d in tvm.dltypes],
        tvm.storage_ids)
    assert rebuilt.to_json() == text
    assert rebuilt == tvm
