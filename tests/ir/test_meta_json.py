"""The ``#[metadata]`` section: TVM's JSON node graph of constants, written and read back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kiln import relay
from kiln.errors import KilnError
from kiln.ir.meta_json import MetaNode, dump_meta_section, load_meta_section


def test_constants_of_every_dtype_roundtrip() -> None:
    values = [np.arange(6, dtype=d).reshape(2, 3) for d in
              ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8")]
    values += [np.array([True, False]), np.zeros((0, 3), "float32"), np.array(2.5, "float32")]
    text = dump_meta_section([relay.const(v) for v in values])
    doc = json.loads(text)
    assert doc["root"] == 1 and doc["nodes"][1]["keys"] == ["relay.Constant"]
    assert doc["attrs"]["tvm_version"] == "0.14.0"
    assert [n["type_key"] for n in doc["nodes"][3:]] == ["relay.Constant"] * len(values)
    table = load_meta_section(text)
    assert list(table) == ["relay.Constant"]
    for got, want in zip(table["relay.Constant"], values):
        assert got.value.dtype == want.dtype
        np.testing.assert_array_equal(got.value, want)


def test_unknown_node_kinds_load_as_placeholders() -> None:
    doc = {"root": 1, "nodes": [
        {"type_key": ""}, {"type_key": "Map", "keys": ["tir.SizeVar"], "data": [2]},
        {"type_key": "Array", "data": [3]},
        {"type_key": "tir.SizeVar", "attrs": {"name": "4", "dtype": "int32"}},
        {"type_key": "runtime.String", "repr_str": "n"}], "b64ndarrays": []}
    (node,) = load_meta_section(json.dumps(doc))["tir.SizeVar"]
    assert isinstance(node, MetaNode) and node.type_key == "tir.SizeVar"


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"),
    ('{"nodes": []}', "'root'"),
    ('{"root": 5, "nodes": [{"type_key": ""}]}', "node index 5 is out of range"),
    ('{"root": 0, "nodes": [{"type_key": "relay.Constant", "attrs": {"data": "0"}}], '
     '"b64ndarrays": ["AAAA"]}', "truncated while reading magic"),
])
def test_malformed_sections_are_reported(text: str, message: str) -> None:
    with pytest.raises(KilnError, match=message):
        load_meta_section(text)
