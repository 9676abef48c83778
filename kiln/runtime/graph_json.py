"""A typed, validated model of TVM's graph JSON, with a writer that reproduces TVM's exact text.

:func:`parse_graph_json` accepts what TVM's graph executor accepts and rejects the rest with an
error naming the key or node: the top-level keys ``nodes``, ``arg_nodes``, ``heads``, ``attrs``,
``node_row_ptr`` (plus ``metadata``); per-entry attributes ``dltype`` / ``storage_id`` / ``shape``
(required) and ``device_index`` (optional); other ``list_int`` / ``size_t`` attributes are kept
but otherwise ignored (the legacy NNVM ``dtype`` enum list), any other attribute is an error.
Kiln also checks what TVM leaves to crash at run time: ``node_row_ptr`` against the nodes' output
counts, input references, ``num_inputs``, ``arg_nodes`` against the null nodes, and the heads.

Output names travel in the top-level ``metadata`` object (``{"output_names": [...]}``, one name
per head), the one place TVM's reader tolerates extra data (it rejects unknown ``list_str``
graph attrs); a graph without them names its outputs ``output_0``, ``output_1``, ...

:meth:`GraphJSON.to_json` writes the text the way TVM's (dmlc) JSON writer does: 2-space indent,
``", "`` separators, integer lists on one line up to 10 items, no trailing newline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from kiln.errors import RuntimeFormatError
from kiln.runtime.dmlc_json import DmlcWriter
from kiln.runtime.dtype import as_dtype

__all__ = ["GraphJSON", "Node", "NodeEntry", "parse_graph_json"]

_TOP_KEYS = ("nodes", "arg_nodes", "heads", "attrs", "node_row_ptr")
_NODE_KEYS = {"op", "name", "inputs", "attrs", "attr", "control_deps"}
_REQUIRED_OP_ATTRS = ("num_outputs", "num_inputs", "flatten_data", "func_name")
_DEFAULT_ATTR_ORDER = ("dltype", "device_index", "storage_id", "shape")
_ATTR_TYPES = {"dltype": "list_str", "storage_id": "list_int", "shape": "list_shape",
               "device_index": "list_int"}
_SKIPPABLE_TYPES = ("list_int", "size_t")


def _error(message: str) -> RuntimeFormatError:
    return RuntimeFormatError(f"graph JSON: {message}")


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """A reference to output ``index`` of node ``node_id`` (``[nid, index, version]``)."""

    node_id: int
    index: int = 0
    version: int = 0


@dataclass(frozen=True)
class Node:
    """One graph node: an input (``op == "null"``) or a kernel call (``op == "tvm_op"``).

    Parameters
    ----------
    op : str
        ``"null"`` for inputs and params, ``"tvm_op"`` for kernel calls.
    name : str
        The node's name (inputs: the name ``set_input`` takes).
    inputs : tuple of NodeEntry
        What the node reads.
    attrs : tuple of (str, str) pairs, or None
        String attributes in file order (``num_outputs``, ``num_inputs``, ``flatten_data``,
        ``func_name``, then extras such as ``hash`` or Kiln's ``source_names``); ``None`` when the
        node has no ``attrs`` key.
    control_deps : tuple of int, or None
        NNVM's control dependencies (kept, never used).
    """

    op: str
    name: str
    inputs: tuple[NodeEntry, ...] = ()
    attrs: tuple[tuple[str, str], ...] | None = None
    control_deps: tuple[int, ...] | None = None

    @staticmethod
    def input(name: str) -> Node:
        """An input or param node."""
        return Node("null", name)

    @staticmethod
    def kernel(
        name: str,
        func_name: str,
        inputs: Sequence[NodeEntry],
        num_outputs: int = 1,
        extra_attrs: Mapping[str, str] | None = None,
    ) -> Node:
        """A ``tvm_op`` node calling ``func_name`` with the attributes TVM writes first."""
        attrs = [("num_outputs", str(num_outputs)), ("num_inputs", str(len(inputs))),
                 ("flatten_data", "0"), ("func_name", func_name)]
        attrs += [(k, str(v)) for k, v in (extra_attrs or {}).items()]
        return Node("tvm_op", name, tuple(inputs), tuple(attrs))

    @property
    def is_input(self) -> bool:
        """True for ``null`` nodes (graph inputs and params)."""
        return self.op == "null"

    @property
    def attr_dict(self) -> dict[str, str]:
        """The attributes as a dict (empty when there are none)."""
        return dict(self.attrs or ())

    def attr(self, key: str, default: str | None = None) -> str | None:
        """One attribute, or ``default``."""
        for k, v in self.attrs or ():
            if k == key:
                return v
        return default

    @property
    def func_name(self) -> str:
        """The kernel symbol (``""`` for input nodes)."""
        return self.attr("func_name", "") or ""

    @property
    def num_outputs(self) -> int:
        """Number of outputs (1 for input nodes)."""
        return 1 if self.is_input else int(self.attr("num_outputs", "1") or 1)

    @property
    def num_inputs(self) -> int:
        """The declared number of inputs."""
        return int(self.attr("num_inputs", str(len(self.inputs))) or 0)


@dataclass(frozen=True)
class GraphJSON:
    """A graph executor graph: nodes, inputs, outputs and the per-entry memory plan.

    Entries are node outputs, numbered ``node_row_ptr[nid] + index``; ``shapes``, ``dltypes``,
    ``storage_ids`` and ``device_index`` are indexed by entry. Construction validates everything
    (see the module docstring); use :meth:`create` to build one from nodes and a storage plan.

    Attributes
    ----------
    nodes : tuple of Node
        In execution order.
    arg_nodes : tuple of int
        The input (null) nodes; their order is the input index order.
    heads : tuple of NodeEntry
        The graph outputs.
    node_row_ptr : tuple of int
        Prefix sums of per-node output counts.
    shapes, dltypes, storage_ids : tuples
        Per entry: shape, dtype name as written (``"uint1"`` for bool), storage slot.
    device_index : tuple of int, or None
        Per entry device type (1 = CPU), when the file has it.
    attrs_order : tuple of str
        Order of the keys under ``"attrs"`` (kept for writing).
    extra_attrs : tuple of (key, type, value)
        Skippable attributes kept as read (e.g. the legacy ``dtype`` enum list).
    metadata : any JSON value, or None
        The optional top-level ``metadata`` value; Kiln keeps the output names there
        (``{"output_names": [...]}``, see :attr:`output_names`).
    """

    nodes: tuple[Node, ...]
    arg_nodes: tuple[int, ...]
    heads: tuple[NodeEntry, ...]
    node_row_ptr: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]
    dltypes: tuple[str, ...]
    storage_ids: tuple[int, ...]
    device_index: tuple[int, ...] | None = None
    attrs_order: tuple[str, ...] = _DEFAULT_ATTR_ORDER
    extra_attrs: tuple[tuple[str, str, Any], ...] = ()
    metadata: Any = field(default=None)

    def __post_init__(self) -> None:
        _validate(self)

    # --- construction ----------------------------------------------------------------------
    @staticmethod
    def create(
        nodes: Sequence[Node],
        heads: Sequence[NodeEntry],
        shapes: Sequence[Sequence[int]],
        dltypes: Sequence[str],
        storage_ids: Sequence[int],
        device_index: Sequence[int] | None = None,
        output_names: Sequence[str] | None = None,
    ) -> GraphJSON:
        """A graph from its nodes and per-entry plan; ``arg_nodes`` and ``node_row_ptr`` are derived.

        Parameters
        ----------
        nodes : sequence of Node
            In execution order.
        heads : sequence of NodeEntry
            The outputs.
        shapes, dltypes, storage_ids : sequences
            Per entry (``dltypes`` as TVM writes them: ``"uint1"`` for bool).
        device_index : sequence of int, optional
            Per entry device type; defaults to 1 (CPU) everywhere, as TVM writes it.
        output_names : sequence of str, optional
            One distinct name per head, kept in ``metadata`` (default: none are written and the
            outputs are called ``output_0``, ``output_1``, ...).
        """
        row = [0]
        for n in nodes:
            row.append(row[-1] + n.num_outputs)
        num_entries = row[-1]
        return GraphJSON(
            nodes=tuple(nodes),
            arg_nodes=tuple(i for i, n in enumerate(nodes) if n.is_input),
            heads=tuple(heads),
            node_row_ptr=tuple(row),
            shapes=tuple(tuple(int(d) for d in s) for s in shapes),
            dltypes=tuple("uint1" if as_dtype(d) == "bool" else str(d) for d in dltypes),
            storage_ids=tuple(int(s) for s in storage_ids),
            device_index=tuple(device_index) if device_index is not None else (1,) * num_entries,
            metadata=None if output_names is None else {"output_names": [str(n) for n in output_names]},
        )

    # --- derived structure -------------------------------------------------------------------
    @property
    def num_entries(self) -> int:
        """Number of node outputs."""
        return self.node_row_ptr[-1]

    def entry_id(self, node_id: int | NodeEntry, index: int = 0) -> int:
        """The entry number of output ``index`` of node ``node_id`` (or of a NodeEntry)."""
        if isinstance(node_id, NodeEntry):
            return self.node_row_ptr[node_id.node_id] + node_id.index
        return self.node_row_ptr[node_id] + index

    def entry_dtype(self, eid: int) -> str:
        """The relay dtype name of entry ``eid`` (``"bool"`` for ``uint1``)."""
        return as_dtype(self.dltypes[eid])

    @cached_property
    def input_names(self) -> tuple[str, ...]:
        """Names of the arg nodes, in input-index order."""
        return tuple(self.nodes[i].name for i in self.arg_nodes)

    @cached_property
    def output_names(self) -> tuple[str, ...]:
        """One name per head: the model's output names when the graph carries them (in
        ``metadata``), else ``output_0``, ``output_1``, ..."""
        names = self.metadata.get("output_names") if isinstance(self.metadata, dict) else None
        if names is None:
            return tuple(f"output_{i}" for i in range(len(self.heads)))
        return tuple(names)

    @cached_property
    def output_entries(self) -> tuple[int, ...]:
        """Entry ids of the heads."""
        return tuple(self.entry_id(h) for h in self.heads)

    def func_names(self) -> list[str]:
        """Distinct kernel symbols the graph calls (``__nop`` excluded), in first-use order."""
        seen: dict[str, None] = {}
        for n in self.nodes:
            if not n.is_input and n.func_name != "__nop":
                seen.setdefault(n.func_name, None)
        return list(seen)

    def kernel_signatures(self) -> dict[str, tuple[tuple[tuple[int, ...], str], ...]]:
        """Per kernel symbol, the (shape, dtype) of each argument, inputs then outputs.

        Raises
        ------
        RuntimeFormatError
            Two nodes call one symbol with different argument types.
        """
        sigs: dict[str, tuple[tuple[tuple[int, ...], str], ...]] = {}
        for nid, node in enumerate(self.nodes):
            if node.is_input or node.func_name == "__nop":
                continue
            eids = [self.entry_id(e) for e in node.inputs]
            eids += [self.entry_id(nid, k) for k in range(node.num_outputs)]
            sig = tuple((self.shapes[e], self.entry_dtype(e)) for e in eids)
            if sigs.setdefault(node.func_name, sig) != sig:
                raise _error(f"node {nid} ({node.name!r}) calls {node.func_name} with arguments "
                             f"{list(sig)}, but an earlier node with {list(sigs[node.func_name])}")
        return sigs

    # --- text ----------------------------------------------------------------------------------
    def to_json(self) -> str:
        """The graph as TVM writes it (byte-identical for graphs TVM produced)."""
        w = DmlcWriter()
        w.begin("{", True)
        w.key("nodes")
        w.begin("[", True)
        for node in self.nodes:
            w.item()
            _write_node(w, node)
        w.end("]")
        w.key("arg_nodes")
        w.int_list(self.arg_nodes)
        w.key("heads")
        w.begin("[", True)
        for h in self.heads:
            w.item()
            w.int_list((h.node_id, h.index, h.version), multi=True)
        w.end("]")
        w.key("attrs")
        self._write_attrs(w)
        w.key("node_row_ptr")
        w.int_list(self.node_row_ptr)
        if self.metadata is not None:
            w.key("metadata")
            w.value(self.metadata)
        w.end("}")
        return w.text()

    def _write_attrs(self, w: DmlcWriter) -> None:
        extras = {k: (t, v) for k, t, v in self.extra_attrs}
        w.begin("{", len(self.attrs_order) > 1)
        for key in self.attrs_order:
            w.key(key)
            w.begin("[", True)
            w.item()
            if key in extras:
                kind, value = extras[key]
                w.string(kind)
                w.item()
                if kind == "size_t":
                    w.value(value)
                else:
                    w.int_list(value)
                w.end("]")
                continue
            w.string(_ATTR_TYPES[key])
            w.item()
            if key == "dltype":
                w.begin("[", True)
                for d in self.dltypes:
                    w.item()
                    w.string(d)
                w.end("]")
            elif key == "shape":
                w.begin("[", True)
                for s in self.shapes:
                    w.item()
                    w.int_list(s)
                w.end("]")
            elif key == "storage_id":
                w.int_list(self.storage_ids)
            else:
                w.int_list(self.device_index or ())
            w.end("]")
        w.end("}")


def _write_node(w: DmlcWriter, node: Node) -> None:
    w.begin("{", True)
    w.key("op")
    w.string(node.op)
    w.key("name")
    w.string(node.name)
    if node.attrs is not None:
        w.key("attrs")
        w.begin("{", len(node.attrs) > 1)
        for k, v in node.attrs:
            w.key(k)
            w.string(v)
        w.end("}")
    w.key("inputs")
    w.begin("[", True)
    for e in node.inputs:
        w.item()
        w.int_list((e.node_id, e.index, e.version), multi=True)
    w.end("]")
    if node.control_deps is not None:
        w.key("control_deps")
        w.int_list(node.control_deps)
    w.end("}")


# --- parsing -----------------------------------------------------------------------------------

def _pairs_no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _error(f"key {k!r} appears twice in one object")
        out[k] = v
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_list(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(_is_int(v) for v in value):
        raise _error(f"{what} must be a list of integers, got {_brief(value)}")
    return tuple(value)


def _brief(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _parse_entry(value: Any, what: str) -> NodeEntry:
    if (not isinstance(value, list) or len(value) not in (2, 3)
            or not all(_is_int(v) for v in value)):
        raise _error(f"{what} must be [node_id, index, version], got {_brief(value)}")
    return NodeEntry(*value)


def _parse_node(i: int, raw: Any) -> Node:
    if not isinstance(raw, dict):
        raise _error(f"node {i} must be an object, got {_brief(raw)}")
    unknown = [k for k in raw if k not in _NODE_KEYS]
    if unknown:
        raise _error(f"node {i} ({raw.get('name', '?')!r}): key {unknown[0]} is not supported")
    for key in ("op", "name", "inputs"):
        if key not in raw:
            raise _error(f"node {i} has no {key!r}")
    op, name = raw["op"], raw["name"]
    if not isinstance(op, str) or not isinstance(name, str):
        raise _error(f"node {i}: 'op' and 'name' must be strings")
    label = f"node {i} ({name!r})"
    if op not in ("null", "tvm_op"):
        raise _error(f"{label}: op {op!r} is not supported (only 'null' and 'tvm_op')")
    if not isinstance(raw["inputs"], list):
        raise _error(f"{label}: 'inputs' must be a list")
    inputs = tuple(_parse_entry(e, f"{label} input {j}") for j, e in enumerate(raw["inputs"]))
    if "attrs" in raw and "attr" in raw:
        raise _error(f"{label} has both 'attrs' and 'attr'")
    raw_attrs = raw.get("attrs", raw.get("attr"))
    attrs = None
    if raw_attrs is not None:
        if not isinstance(raw_attrs, dict):
            raise _error(f"{label}: 'attrs' must be an object")
        for k, v in raw_attrs.items():
            if not isinstance(v, str):
                raise _error(f"{label}: attribute {k!r} must be a string, got {_brief(v)}")
        attrs = tuple(raw_attrs.items())
    control = raw.get("control_deps")
    control_deps = _int_list(control, f"{label} control_deps") if control is not None else None
    return Node(op, name, inputs, attrs, control_deps)


def _parse_attrs(raw: Any, num_entries: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _error(f"'attrs' must be an object, got {_brief(raw)}")
    out: dict[str, Any] = {"order": tuple(raw), "extra": []}
    for key, value in raw.items():
        if not isinstance(value, list) or not value or not isinstance(value[0], str):
            raise _error(f"graph attr {key} must be [type, value], got {_brief(value)}")
        kind = value[0]
        if key not in _ATTR_TYPES:
            if kind not in _SKIPPABLE_TYPES:
                raise _error(f"cannot skip graph attr {key} (of type {kind!r}; only list_int and "
                             "size_t attrs are skipped)")
            if len(value) != 2:
                raise _error(f"graph attr {key} must be [type, value]")
            if kind == "list_int":
                _int_list(value[1], f"graph attr {key}")
            elif not _is_int(value[1]):
                raise _error(f"graph attr {key} of type size_t must be an integer")
            out["extra"].append((key, kind, tuple(value[1]) if kind == "list_int" else value[1]))
            continue
        if kind != _ATTR_TYPES[key] or len(value) != 2:
            raise _error(f"graph attr {key} must be [{_ATTR_TYPES[key]!r}, [...]], got "
                         f"{_brief(value)}")
        items = value[1]
        if not isinstance(items, list):
            raise _error(f"graph attr {key} must hold a list")
        if len(items) != num_entries:
            raise _error(f"graph attr {key} has {len(items)} item(s), but node_row_ptr gives "
                         f"{num_entries} entries")
        if key == "dltype":
            if not all(isinstance(d, str) for d in items):
                raise _error("graph attr dltype must hold strings")
            out[key] = tuple(items)
        elif key == "shape":
            out[key] = tuple(_int_list(s, f"shape of entry {j}") for j, s in enumerate(items))
        else:
            out[key] = _int_list(items, f"graph attr {key}")
    for key in ("dltype", "storage_id", "shape"):
        if key not in out:
            raise _error(f"'attrs' has no {key!r} (it needs dltype, storage_id and shape)")
    return out


def parse_graph_json(text: str | bytes) -> GraphJSON:
    """Parse and validate a graph JSON document.

    Parameters
    ----------
    text : str or bytes
        The document (``factory.get_graph_json()``, a ``.graph.json`` file, ...).

    Returns
    -------
    GraphJSON
        The validated graph.

    Raises
    ------
    RuntimeFormatError
        The text is not JSON, has keys TVM's reader does not support, or is inconsistent; the
        message names the key or node.
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise _error(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        raw = json.loads(text, object_pairs_hook=_pairs_no_duplicates)
    except json.JSONDecodeError as e:
        raise _error(f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(raw, dict):
        raise _error(f"the document must be an object, got {_brief(raw)}")
    for key in raw:
        if key not in _TOP_KEYS and key != "metadata":
            raise _error(f"key {key} is not supported (TVM reads nodes, arg_nodes, heads, attrs, "
                         "node_row_ptr and metadata)")
    for key in _TOP_KEYS:
        if key not in raw:
            raise _error(f"missing required key {key!r}")
    if not isinstance(raw["nodes"], list):
        raise _error("'nodes' must be a list")
    nodes = tuple(_parse_node(i, n) for i, n in enumerate(raw["nodes"]))
    row_ptr = _int_list(raw["node_row_ptr"], "node_row_ptr")
    if len(row_ptr) != len(nodes) + 1:
        raise _error(f"node_row_ptr must have {len(nodes) + 1} items (one more than the "
                     f"{len(nodes)} nodes), got {len(row_ptr)}")
    num_entries = row_ptr[-1]
    attrs = _parse_attrs(raw["attrs"], num_entries)
    if not isinstance(raw["heads"], list):
        raise _error("'heads' must be a list")
    heads = tuple(_parse_entry(h, f"head {j}") for j, h in enumerate(raw["heads"]))
    return GraphJSON(
        nodes=nodes,
        arg_nodes=_int_list(raw["arg_nodes"], "arg_nodes"),
        heads=heads,
        node_row_ptr=row_ptr,
        shapes=attrs["shape"],
        dltypes=attrs["dltype"],
        storage_ids=attrs["storage_id"],
        device_index=attrs.get("device_index"),
        attrs_order=attrs["order"],
        extra_attrs=tuple(attrs["extra"]),
        metadata=raw.get("metadata"),
    )


def _check_op_attrs(i: int, node: Node) -> None:
    label = f"node {i} ({node.name!r})"
    if node.attrs is None:
        raise _error(f"{label} is a tvm_op without 'attrs'")
    attrs = node.attr_dict
    for key in _REQUIRED_OP_ATTRS:
        if key not in attrs:
            raise _error(f"{label}: attrs lack {key!r} (tvm_op nodes need "
                         f"{', '.join(_REQUIRED_OP_ATTRS)})")
    for key in ("num_outputs", "num_inputs", "flatten_data"):
        if not attrs[key].isdigit():
            raise _error(f"{label}: attribute {key} must be a non-negative integer string, got "
                         f"{attrs[key]!r}")


def _validate(g: GraphJSON) -> None:
    n_nodes = len(g.nodes)
    for i, node in enumerate(g.nodes):
        if not node.is_input:
            _check_op_attrs(i, node)
    if len(g.node_row_ptr) != n_nodes + 1 or (g.node_row_ptr and g.node_row_ptr[0] != 0):
        raise _error(f"node_row_ptr must have {n_nodes + 1} items starting at 0 (one more than "
                     f"the {n_nodes} nodes), got {len(g.node_row_ptr)}")
    for i, node in enumerate(g.nodes):
        span = g.node_row_ptr[i + 1] - g.node_row_ptr[i]
        if span != node.num_outputs:
            raise _error(f"node_row_ptr gives node {i} ({node.name!r}) {span} output(s), but it "
                         f"has {node.num_outputs}")
        if node.is_input and node.inputs:
            raise _error(f"node {i} ({node.name!r}) is an input but has inputs")
        if not node.is_input and node.num_inputs != len(node.inputs):
            raise _error(f"node {i} ({node.name!r}) declares num_inputs={node.num_inputs} but "
                         f"lists {len(node.inputs)} input(s)")
        for j, e in enumerate(node.inputs):
            _check_entry(g, e, f"node {i} ({node.name!r}) input {j}", before=i)
    null_nodes = [i for i, n in enumerate(g.nodes) if n.is_input]
    if sorted(g.arg_nodes) != null_nodes:
        raise _error(f"arg_nodes {list(g.arg_nodes)} must list exactly the null nodes "
                     f"{null_nodes}")
    names = [g.nodes[i].name for i in g.arg_nodes]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise _error(f"input name(s) {', '.join(dup)} are used by more than one null node")
    if not g.heads:
        raise _error("'heads' is empty: the graph has no outputs")
    for j, h in enumerate(g.heads):
        _check_entry(g, h, f"head {j}", before=n_nodes)
    out_names = g.metadata.get("output_names") if isinstance(g.metadata, dict) else None
    if out_names is not None and (
            not isinstance(out_names, list) or not all(isinstance(n, str) for n in out_names)
            or len(out_names) != len(g.heads) or len(set(out_names)) != len(out_names)):
        raise _error(f"metadata output_names must list {len(g.heads)} distinct strings (one per "
                     f"head), got {_brief(out_names)}")
    n = g.node_row_ptr[-1]
    for what, values in (("shape", g.shapes), ("dltype", g.dltypes), ("storage_id", g.storage_ids),
                         ("device_index", g.device_index)):
        if values is not None and len(values) != n:
            raise _error(f"graph attr {what} has {len(values)} item(s) for {n} entries")
    for eid, d in enumerate(g.dltypes):
        try:
            as_dtype(d)
        except ValueError:
            raise _error(f"entry {eid} has unsupported dltype {d!r}") from None
    for eid, s in enumerate(g.shapes):
        if any(x < 0 for x in s):
            raise _error(f"entry {eid} has a negative dimension in shape {list(s)}")
    if any(s < 0 for s in g.storage_ids):
        raise _error("storage_id values must be non-negative (dynamic shapes are not supported)")
    if g.device_index is not None:
        devices: dict[int, int] = {}
        for eid, (sid, dev) in enumerate(zip(g.storage_ids, g.device_index)):
            if devices.setdefault(sid, dev) != dev:
                raise _error(f"storage_id {sid} is used on devices {devices[sid]} and {dev} "
                             f"(entry {eid})")
    expected_order = set(_ATTR_TYPES if g.device_index is not None else
                         ("dltype", "storage_id", "shape")) | {k for k, _, _ in g.extra_attrs}
    if set(g.attrs_order) != expected_order or len(g.attrs_order) != len(expected_order):
        raise _error(f"attrs_order {list(g.attrs_order)} does not match the attributes present")


def _check_entry(g: GraphJSON, e: NodeEntry, what: str, before: int) -> None:
    if not 0 <= e.node_id < before:
        limit = "an earlier node" if before < len(g.nodes) else "a node"
        raise _error(f"{what} refers to node {e.node_id}, which is not {limit} (0..{before - 1})")
    src = g.nodes[e.node_id]
    if not 0 <= e.index < src.num_outputs:
        raise _error(f"{what} refers to output {e.index} of node {e.node_id} ({src.name!r}), "
                     f"which has {src.num_outputs} output(s)")
