"""The ``#[metadata]`` section of relay's text form, in TVM's JSON node-graph format.

TVM's printer moves what it cannot write inline (non-scalar constants, ...) into a table printed
after the program as ``#[metadata]`` followed by ``tvm.ir.save_json`` of a map from type key to
nodes; the text refers to them as ``meta[relay.Constant][0]``. The JSON is a node graph:
``{"root": i, "nodes": [...], "b64ndarrays": [...], "attrs": {...}}``, each node a dict with a
``type_key`` and, by kind, ``attrs`` (field -> string), ``keys`` or ``data`` (node indices).
Tensors are base64 of TVM's ``NDArray::Save`` record.

:func:`dump_meta_section` writes the section for constants; :func:`load_meta_section` reads one
written by Kiln or by TVM (maps with string keys in both of TVM's layouts). Node kinds Kiln's IR
has no counterpart for (``tir.SizeVar``, ``VirtualDevice``, attrs nodes, ...) load as
:class:`MetaNode` placeholders, which the parser reports when the program uses them.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kiln.errors import KilnError
from kiln.ir.expr import Constant
from kiln.runtime.params import ByteReader, ByteWriter

__all__ = ["MetaNode", "dump_meta_section", "load_meta_section"]

_TVM_VERSION = "0.14.0"


@dataclass(frozen=True)
class MetaNode:
    """A metadata node of a kind Kiln's IR has no counterpart for (kept to report it by name)."""

    type_key: str
    attrs: dict[str, Any] = field(default_factory=dict)


def dump_meta_section(constants: Sequence[Constant]) -> str:
    """The JSON text of a metadata table holding ``constants`` under ``relay.Constant``.

    Parameters
    ----------
    constants : sequence of Constant
        In ``meta[relay.Constant][k]`` order.

    Returns
    -------
    str
        The JSON document (what follows ``#[metadata]``).
    """
    nodes: list[dict[str, Any]] = [
        {"type_key": ""},
        {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
        {"type_key": "Array", "data": list(range(3, 3 + len(constants)))},
    ]
    arrays = []
    for k, c in enumerate(constants):
        writer = ByteWriter()
        writer.tensor(c.value, f"meta[relay.Constant][{k}]")
        arrays.append(base64.b64encode(writer.getvalue()).decode("ascii"))
        nodes.append({"type_key": "relay.Constant",
                      "attrs": {"_checked_type_": "0", "data": str(k), "span": "0",
                                "virtual_device_": "0"}})
    doc = {"root": 1, "nodes": nodes, "b64ndarrays": arrays,
           "attrs": {"tvm_version": _TVM_VERSION}}
    return json.dumps(doc, indent=2)


class _Loader:
    def __init__(self, doc: dict[str, Any]):
        self.nodes: list[dict[str, Any]] = doc.get("nodes", [])
        self.arrays: list[str] = doc.get("b64ndarrays", [])
        self.memo: dict[int, Any] = {}

    def fail(self, msg: str) -> KilnError:
        return KilnError(f"metadata section: {msg}")

    def node(self, index: int) -> Any:
        if index in self.memo:
            return self.memo[index]
        if not 0 <= index < len(self.nodes):
            raise self.fail(f"node index {index} is out of range ({len(self.nodes)} nodes)")
        value = self._decode(self.nodes[index])
        self.memo[index] = value
        return value

    def _decode(self, n: dict[str, Any]) -> Any:
        key = n.get("type_key", "")
        data = [int(d) for d in n.get("data", [])]
        attrs = n.get("attrs", {})
        if key == "":
            return None
        if key == "Map":
            if "keys" in n:
                return {k: self.node(d) for k, d in zip(n["keys"], data)}
            return {self.node(data[i]): self.node(data[i + 1]) for i in range(0, len(data), 2)}
        if key == "Array":
            return [self.node(d) for d in data]
        if key == "runtime.String":
            if "repr_b64" in n:
                return base64.b64decode(n["repr_b64"]).decode("utf-8")
            return n.get("repr_str", "")
        if key == "relay.Constant":
            return Constant(self.array(int(attrs["data"])))
        if key == "IntImm":
            return int(attrs["value"])
        if key == "FloatImm":
            return float(attrs["value"])
        return MetaNode(key, dict(attrs))

    def array(self, index: int) -> Any:
        if not 0 <= index < len(self.arrays):
            raise self.fail(f"tensor index {index} is out of range ({len(self.arrays)} tensors)")
        try:
            raw = base64.b64decode(self.arrays[index], validate=True)
        except binascii.Error as e:
            raise self.fail(f"tensor {index} is not valid base64 ({e})") from None
        return ByteReader(raw, "metadata tensor").tensor(f"b64ndarrays[{index}]")


def load_meta_section(text: str) -> dict[str, list[Any]]:
    """The metadata table of a ``#[metadata]`` section: type key -> nodes.

    Parameters
    ----------
    text : str
        The JSON document.

    Returns
    -------
    dict of str to list
        ``relay.Constant`` entries are :class:`~kiln.ir.expr.Constant` nodes; integers and floats
        are Python numbers; other node kinds are :class:`MetaNode` placeholders.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise KilnError(f"metadata section: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or "root" not in doc:
        raise KilnError("metadata section: expected a JSON object with a 'root' node")
    loader = _Loader(doc)
    table = loader.node(int(doc["root"]))
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise KilnError("metadata section: the root node is not a map from type key to nodes")
    return {str(k): list(v) if isinstance(v, list) else [v] for k, v in table.items()}
