"""Node outputs as ``.npy`` files plus a JSON manifest: debug dumps readable without Kiln.

TVM's ``output_tensors.params`` needs TVM (or Kiln) to read. Beside it, Kiln can write one
``.npy`` file per tensor and a ``manifest.json`` listing, per tensor, the graph node, its
topological index and output number, its kernel and the operators fused in it, the source-model
node names, the shape, the dtype and the file; any NumPy reads them. A name filter (glob
patterns or a predicate) and a total size cap keep dumps of big models small; what was left out
is listed in the manifest with the reason.

Manifest format (``"format": "kiln-npy-dump/1"``)::

    {"format": ..., "filter": [...] | null, "max_bytes": N | null, "total_bytes": N,
     "tensors": [{"key", "node", "topo_index", "output_num", "func_name", "fused_ops",
                  "source_names", "shape", "dtype", "nbytes", "file"}, ...],
     "skipped": [{"key", "node", "topo_index", "output_num", "nbytes", "reason"}, ...]}
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kiln.debug.debug_result import GRAPH_DUMP_FILE_NAME, tensor_key
from kiln.errors import KilnError

__all__ = [
    "MANIFEST_FILE_NAME",
    "DumpManifest",
    "TensorRecord",
    "convert_params_dump",
    "fused_ops",
    "read_npy_dump",
    "records_from_graph",
    "write_npy_dump",
]

MANIFEST_FILE_NAME = "manifest.json"
_FORMAT = "kiln-npy-dump/1"
_KERNEL_NAME = re.compile(r"(?:tvmgen_\w*?_)?fused_(?P<ops>.+?)(?:_\d+)?")
_KEY = re.compile(r"(?P<node>.*)____topo-index:(?P<topo>\d+)____output-num:(?P<out>\d+)")

Include = str | Sequence[str] | Callable[["TensorRecord"], bool] | None


@dataclass
class TensorRecord:
    """One output of one graph node, with what it is.

    Attributes
    ----------
    node : str
        The graph node's name.
    topo_index : int
        Its topological index.
    output_index : int
        Which of its outputs.
    func_name : str
        Its kernel (``""`` for inputs and params).
    fused_ops : list of str
        Operators fused in the kernel, in evaluation order.
    source_names : list of str
        Source-model node names it came from.
    array : numpy.ndarray
        The values.
    """

    node: str
    topo_index: int
    output_index: int
    func_name: str
    fused_ops: list[str]
    source_names: list[str]
    array: np.ndarray

    @property
    def key(self) -> str:
        """The tensor's key in ``output_tensors.params``."""
        return tensor_key(self.node, self.topo_index, self.output_index)


@dataclass
class DumpManifest:
    """What :func:`write_npy_dump` wrote (``manifest.json``'s content).

    Attributes
    ----------
    folder : Path
        The dump folder.
    tensors : list of dict
        Written tensors (see the module docstring for the fields).
    skipped : list of dict
        Tensors left out, each with a ``reason`` (``"filter"`` or ``"size cap"``).
    total_bytes : int
        Bytes of array data written.
    max_bytes : int or None
        The size cap.
    filter : list of str or None
        The glob patterns used (None for no filter or a predicate).
    """

    folder: Path
    tensors: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    total_bytes: int = 0
    max_bytes: int | None = None
    filter: list[str] | None = None

    @property
    def path(self) -> Path:
        """The manifest file."""
        return self.folder / MANIFEST_FILE_NAME

    def to_dict(self) -> dict[str, Any]:
        """The manifest as written."""
        return {"format": _FORMAT, "filter": self.filter, "max_bytes": self.max_bytes,
                "total_bytes": self.total_bytes, "tensors": self.tensors, "skipped": self.skipped}


def fused_ops(func_name: str, functions: Mapping[str, Any] | None = None) -> list[str]:
    """The operators fused in kernel ``func_name``, in evaluation order.

    Parameters
    ----------
    func_name : str
        A kernel name such as ``tvmgen_default_fused_nn_conv2d_add_nn_relu``.
    functions : mapping of str to Function, optional
        The fused functions by kernel name, when the library has them (exact answer).

    Returns
    -------
    list of str
        E.g. ``["nn.conv2d", "add", "nn.relu"]``; read from the name when the functions are not
        known (an unrecognised tail is kept as one item).
    """
    from kiln.ir.expr import Call, Function, Op
    from kiln.ir.visitor import post_order
    from kiln.op.registry import all_ops

    fn = (functions or {}).get(func_name)
    if isinstance(fn, Function):
        return [n.op.name for n in post_order(fn.body)
                if isinstance(n, Call) and isinstance(n.op, Op)]
    if func_name == "__nop":
        return ["reshape"]
    m = _KERNEL_NAME.fullmatch(func_name)
    if m is None:
        return []
    by_symbol = {name.replace(".", "_"): name for name in all_ops()}

    def known(text: str) -> str | None:
        return max((s for s in by_symbol if text == s or text.startswith(s + "_")), key=len,
                   default=None)

    words = m.group("ops").split("_")
    ops: list[str] = []
    unknown: list[str] = []  # words of an operator Kiln does not register, kept as written
    i = 0
    while i < len(words):
        hit = known("_".join(words[i:]))
        if hit is None:
            unknown.append(words[i])
            i += 1
            continue
        if unknown:
            ops.append("_".join(unknown))
            unknown = []
        ops.append(by_symbol[hit])
        i += hit.count("_") + 1
    if unknown:
        ops.append("_".join(unknown))
    return ops


def _functions_of(lib: Any) -> dict[str, Any] | None:
    for module in (lib, *getattr(lib, "imported_modules", ())):
        functions = getattr(module, "functions", None)
        if isinstance(functions, Mapping):
            return dict(functions)
    return None


def records_from_graph(graph: Any, outputs: Sequence[np.ndarray],
                       lib: Any = None) -> list[TensorRecord]:
    """Describe every entry of a graph run.

    Parameters
    ----------
    graph : GraphJSON
        The graph.
    outputs : sequence of numpy.ndarray
        One value per entry, in entry order (``DebugExecutor.run_per_layer``).
    lib : Module, optional
        The kernel library or build result (gives exact fused operator lists when it holds the
        fused functions).

    Returns
    -------
    list of TensorRecord
        In entry order.
    """
    if len(outputs) != graph.num_entries:
        raise KilnError(f"records_from_graph: got {len(outputs)} arrays for a graph with "
                        f"{graph.num_entries} entries")
    functions = _functions_of(lib) if lib is not None else None
    records = []
    for nid, node in enumerate(graph.nodes):
        func = "" if node.is_input else node.func_name
        ops = fused_ops(func, functions) if func else []
        sources = [s for s in (node.attr("source_names", "") or "").split(",") if s]
        for j in range(node.num_outputs):
            records.append(TensorRecord(node.name, nid, j, func, ops, sources,
                                        outputs[graph.entry_id(nid, j)]))
    return records


def _selector(include: Include) -> tuple[Callable[[TensorRecord], bool], list[str] | None]:
    if include is None:
        return (lambda r: True), None
    if callable(include):
        return include, None
    patterns = [include] if isinstance(include, str) else list(include)

    def selected(r: TensorRecord) -> bool:
        names = [r.node, r.func_name, r.key, *r.source_names]
        return any(fnmatch.fnmatchcase(n, p) for p in patterns for n in names if n)

    return selected, patterns


def _file_name(r: TensorRecord) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", r.node)[:100]
    return f"{r.topo_index:05d}_{r.output_index}_{safe}.npy"


def write_npy_dump(folder: str | Path, records: Sequence[TensorRecord], include: Include = None,
                   max_bytes: int | None = None) -> DumpManifest:
    """Write records as ``.npy`` files plus ``manifest.json``.

    Parameters
    ----------
    folder : str or Path
        Where to write (created if missing).
    records : sequence of TensorRecord
        The tensors, in graph order.
    include : str, sequence of str or callable, optional
        Glob pattern(s) matched (case-sensitively) against the node name, the kernel name, the
        tensor key and the source names; or a predicate on a record. Default: everything.
    max_bytes : int, optional
        Cap on the total array bytes written; tensors that would exceed it are skipped (later,
        smaller ones may still fit).

    Returns
    -------
    DumpManifest
        What was written and what was skipped, as in ``manifest.json``.
    """
    if max_bytes is not None and max_bytes < 0:
        raise KilnError(f"write_npy_dump: max_bytes must be non-negative, got {max_bytes}")
    selected, patterns = _selector(include)
    manifest = DumpManifest(Path(folder), max_bytes=max_bytes, filter=patterns)
    manifest.folder.mkdir(parents=True, exist_ok=True)
    for r in records:
        array = np.asarray(r.array)
        brief = {"key": r.key, "node": r.node, "topo_index": r.topo_index,
                 "output_num": r.output_index, "nbytes": int(array.nbytes)}
        if not selected(r):
            manifest.skipped.append({**brief, "reason": "filter"})
            continue
        if max_bytes is not None and manifest.total_bytes + array.nbytes > max_bytes:
            manifest.skipped.append({**brief, "reason": "size cap"})
            continue
        name = _file_name(r)
        np.save(manifest.folder / name, array, allow_pickle=False)
        manifest.total_bytes += int(array.nbytes)
        manifest.tensors.append({**brief, "func_name": r.func_name, "fused_ops": r.fused_ops,
                                 "source_names": r.source_names, "shape": list(array.shape),
                                 "dtype": str(array.dtype), "file": name})
    manifest.path.write_text(json.dumps(manifest.to_dict(), indent=2) + "\n")
    return manifest


def read_npy_dump(folder: str | Path) -> dict[str, np.ndarray]:
    """Read a dump written by :func:`write_npy_dump` (what any NumPy user would do).

    Parameters
    ----------
    folder : str or Path
        The dump folder.

    Returns
    -------
    dict of str to numpy.ndarray
        By tensor key, in manifest order.
    """
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST_FILE_NAME).read_text())
    except (OSError, ValueError) as e:
        raise KilnError(f"read_npy_dump: cannot read {folder / MANIFEST_FILE_NAME}: {e}") from None
    if manifest.get("format") != _FORMAT:
        raise KilnError(f"read_npy_dump: {folder / MANIFEST_FILE_NAME} is not a {_FORMAT} manifest")
    return {t["key"]: np.load(folder / t["file"], allow_pickle=False) for t in manifest["tensors"]}


def convert_params_dump(params_file: str | Path, folder: str | Path | None = None,
                        include: Include = None, max_bytes: int | None = None) -> DumpManifest:
    """Turn a debug dump's ``output_tensors.params`` (Kiln's or TVM's) into ``.npy`` files.

    Node kernels and source names come from the ``_tvmdbg_graph_dump.json`` beside the file when
    it is there.

    Parameters
    ----------
    params_file : str or Path
        The ``output_tensors.params`` file.
    folder : str or Path, optional
        Where to write (default: ``npy`` beside the file).
    include, max_bytes
        As for :func:`write_npy_dump`.

    Returns
    -------
    DumpManifest
        What was written.
    """
    from kiln.runtime.params import load_param_dict

    params_file = Path(params_file)
    tensors = load_param_dict(params_file.read_bytes())
    graph_nodes: list[dict[str, Any]] = []
    graph_dump = params_file.parent / GRAPH_DUMP_FILE_NAME
    if graph_dump.is_file():
        graph_nodes = json.loads(graph_dump.read_text()).get("nodes", [])
    records = []
    for key, value in tensors.items():
        m = _KEY.fullmatch(key)
        if m is None:
            raise KilnError(f"convert_params_dump: key {key!r} in {params_file} is not "
                            "'<node>____topo-index:<i>____output-num:<j>'")
        topo = int(m.group("topo"))
        info = graph_nodes[topo] if topo < len(graph_nodes) else {}
        func = info.get("op", "")
        func = "" if func == "param" else func
        sources = [s for s in info.get("attrs", {}).get("source_names", "").split(",") if s]
        records.append(TensorRecord(m.group("node"), topo, int(m.group("out")), func,
                                    fused_ops(func) if func else [], sources, value.numpy()))
    records.sort(key=lambda r: (r.topo_index, r.output_index))
    return write_npy_dump(folder or params_file.parent / "npy", records, include, max_bytes)
