"""The bytes of exported modules: TVM's module blob, and Kiln's portable ``numpy`` container.

**Module blob** (the contents of the ``__tvm_dev_mblob`` symbol of an exported shared library)::

    u64 payload size, then the payload:
    u64 entry count, then per entry: u64-length type key, then the entry's bytes
      "GraphExecutorFactory": graph JSON (u64-length string), u64 param count, the names
                              (u64 count + u64-length strings), the tensors (params records),
                              the module name (u64-length string)        -- as TVM writes it
      "kiln_metadata":        one u64-length JSON string: target, opt_level, kiln version,
                              inputs and outputs (name, shape, dtype), creation time, and
                              isa_features: the CPU features (/proc/cpuinfo names) the
                              compiled code needs; load_module refuses it on a CPU without them

**Container** (``export_library`` of a build whose kernels are not compiled code, e.g. the
``numpy`` target's)::

    8 bytes "KILNPKG\\0", u32 format version (1 or 2), u32 reserved
    version 2 only: u64-length string: the library kind (its ``type_key``)
    u64 size + the module blob symbol contents (as above, size-prefixed)
    u64 size + the library's payload, written and read by its kind
    32 bytes: SHA-256 of everything before

Version 1 names no kind: it holds a ``numpy`` library (payload: the fused functions as Kiln IR
JSON), and ``numpy`` containers are still written as version 1. Library kinds are registered with
:func:`kiln.runtime.module.register_library_kind`; the runtime itself knows none of their formats.

Every read is bounds-checked; problems raise :class:`~kiln.errors.RuntimeFormatError` saying what
was wrong and where.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kiln.errors import RuntimeFormatError
from kiln.runtime.graph_json import GraphJSON, parse_graph_json
from kiln.runtime.ndarray import NDArray
from kiln.runtime.params import ByteReader, ByteWriter, as_numpy

__all__ = [
    "BLOB_SYMBOL",
    "CONTAINER_MAGIC",
    "Container",
    "FACTORY_KEY",
    "METADATA_KEY",
    "ModuleBlob",
    "decode_module_blob",
    "default_metadata",
    "encode_module_blob",
    "read_container",
    "write_container",
]

BLOB_SYMBOL = "__tvm_dev_mblob"
FACTORY_KEY = "GraphExecutorFactory"
METADATA_KEY = "kiln_metadata"
CONTAINER_MAGIC = b"KILNPKG\x00"
CONTAINER_VERSION = 2  # the newest version this Kiln reads and writes
_V1_KIND = "numpy"  # the kind of every version 1 container


@dataclass(frozen=True)
class ModuleBlob:
    """What an exported module carries besides its kernels."""

    graph_json: str
    params: dict[str, NDArray]
    module_name: str = "default"
    metadata: dict[str, Any] = field(default_factory=dict)


def default_metadata(graph: GraphJSON, params: Mapping[str, Any],
                     given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Build metadata: inputs and outputs from the graph, Kiln's version, time; ``given`` wins.

    Parameters
    ----------
    graph : GraphJSON
        The graph (inputs are its arg nodes that are not params).
    params : mapping
        The bound params (their names are not inputs).
    given : mapping, optional
        Keys set by the build (``target``, ``opt_level``, ...); ``output_names`` overrides the
        graph's own (:attr:`GraphJSON.output_names`: the model's names, else ``output_<i>``).
    """
    from kiln._version import __version__

    given = dict(given or {})
    inputs = []
    for nid in graph.arg_nodes:
        name = graph.nodes[nid].name
        if name in params:
            continue
        eid = graph.entry_id(nid, 0)
        inputs.append({"name": name, "shape": list(graph.shapes[eid]),
                       "dtype": graph.entry_dtype(eid)})
    names = given.pop("output_names", None) or graph.output_names
    outputs = [{"name": str(n), "shape": list(graph.shapes[eid]), "dtype": graph.entry_dtype(eid)}
               for n, eid in zip(names, graph.output_entries)]
    meta: dict[str, Any] = {"target": None, "opt_level": None, "kiln_version": __version__,
                            "inputs": inputs, "outputs": outputs,
                            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    meta.update(given)
    return meta


def encode_module_blob(blob: ModuleBlob) -> bytes:
    """The ``__tvm_dev_mblob`` symbol contents (size prefix included) for ``blob``."""
    w = ByteWriter()
    w.u64(2)
    w.string(FACTORY_KEY)
    w.string(blob.graph_json)
    names = list(blob.params)
    w.u64(len(names))
    w.strings(names)
    for name in names:
        w.tensor(as_numpy(blob.params[name], name), name)
    w.string(blob.module_name)
    w.string(METADATA_KEY)
    w.string(json.dumps(blob.metadata, sort_keys=True, default=str))
    payload = w.getvalue()
    return struct.pack("<Q", len(payload)) + payload


def decode_module_blob(data: bytes | memoryview, what: str = "module blob") -> ModuleBlob:
    """Parse ``__tvm_dev_mblob`` contents (size prefix included).

    Parameters
    ----------
    data : bytes-like
        The symbol contents.
    what : str
        How errors name the data (e.g. the file it came from).

    Raises
    ------
    RuntimeFormatError
        Truncated or inconsistent data, or an entry kind Kiln does not know.
    """
    r = ByteReader(data, what, RuntimeFormatError)
    size = r.u64("payload size")
    if size != r.remaining:
        raise r.fail(f"declares a payload of {size} bytes but {r.remaining} follow", 0)
    n_entries = r.count("number of entries", 8)
    graph_json: str | None = None
    params: dict[str, NDArray] = {}
    module_name = "default"
    metadata: dict[str, Any] = {}
    for i in range(n_entries):
        key = r.string(f"type key of entry {i}")
        if key == FACTORY_KEY:
            graph_json = r.string("graph JSON")
            count_at = r.offset
            count = r.u64("number of params")
            names = r.strings("param names")
            if count != len(names) or len(set(names)) != len(names):
                raise r.fail(f"declares {count} params but names {len(names)} distinct ones",
                             count_at)
            params = {n: NDArray(r.tensor(n), copy=False) for n in names}
            module_name = r.string("module name")
        elif key == METADATA_KEY:
            at = r.offset
            text = r.string("metadata")
            try:
                metadata = json.loads(text)
            except json.JSONDecodeError as e:
                raise r.fail(f"metadata is not valid JSON ({e.msg})", at) from None
        else:
            raise r.fail(f"entry {i} has type key {key!r}, which Kiln cannot read")
    if r.remaining:
        raise r.fail(f"{r.remaining} unexpected byte(s) after the last entry")
    if graph_json is None:
        raise RuntimeFormatError(f"{what}: has no {FACTORY_KEY} entry (no graph to run)")
    parse_graph_json(graph_json)  # reject a corrupt graph at load time, not at first run
    return ModuleBlob(graph_json, params, module_name, metadata)


class Container(NamedTuple):
    """The parts of a container: the library kind, the module blob and the library's payload."""

    kind: str
    blob: bytes
    payload: bytes


def write_container(blob_symbol: bytes, payload: bytes, kind: str = _V1_KIND) -> bytes:
    """The portable container holding a module blob and a kernel library's payload.

    Parameters
    ----------
    blob_symbol : bytes
        :func:`encode_module_blob` output.
    payload : bytes
        The library, as its kind writes it.
    kind : str
        The library kind (its ``type_key``); ``numpy`` libraries are written as version 1, the
        format every Kiln reads.
    """
    if kind == _V1_KIND:
        head = CONTAINER_MAGIC + struct.pack("<II", 1, 0)
    else:
        w = ByteWriter()
        w.string(kind)
        head = CONTAINER_MAGIC + struct.pack("<II", CONTAINER_VERSION, 0) + w.getvalue()
    body = (head + struct.pack("<Q", len(blob_symbol)) + blob_symbol
            + struct.pack("<Q", len(payload)) + payload)
    return body + hashlib.sha256(body).digest()


def read_container(data: bytes, what: str = "container") -> Container:
    """Split a container into its library kind, module blob symbol contents and payload.

    Raises
    ------
    RuntimeFormatError
        Wrong magic or version, truncation or a checksum mismatch.
    """
    r = ByteReader(data, what, RuntimeFormatError)
    magic = bytes(r.raw(8, "magic"))
    if magic != CONTAINER_MAGIC:
        raise r.fail(f"not a Kiln container (magic {magic!r})", 0)
    r.need(8, "format version")
    version, _ = struct.unpack_from("<II", r.data, r.offset)
    if version not in (1, CONTAINER_VERSION):
        raise r.fail(f"format version {version} is not supported (this Kiln reads versions 1 "
                     f"to {CONTAINER_VERSION})")
    r.offset += 8
    kind = _V1_KIND if version == 1 else r.string("library kind")
    blob = bytes(r.raw(r.count("module blob size", 1), "module blob"))
    payload = bytes(r.raw(r.count("payload size", 1), "library payload"))
    body_end = r.offset
    digest = bytes(r.raw(32, "checksum"))
    if r.remaining:
        raise r.fail(f"{r.remaining} unexpected byte(s) after the checksum")
    if hashlib.sha256(data[:body_end]).digest() != digest:
        raise RuntimeFormatError(f"{what}: checksum mismatch: the file is corrupt")
    return Container(kind, blob, payload)
