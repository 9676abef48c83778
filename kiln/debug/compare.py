"""Which layer diverges: a built module compared node by node with a reference run.

:func:`compare` runs the built module one node at a time (fusion untouched), keeping every output
of every node, runs a reference (onnxruntime on the source ONNX model, or Kiln's interpreter on
the unoptimised module; see :mod:`kiln.debug.reference`), and matches each node output with the
source-model tensor it stands for:

- a node stands for the source node of its fused function's last operation (its root), taken
  from the kernel library's fused functions when it has them, else the last name of the graph
  JSON's ``source_names`` attribute;
- when a later node of the graph carries the same source name (layout transforms the build
  inserted do not count), the source node's result is only complete there: this node is
  partial and has no reference;
- a node whose layout the build changed (a ``dst_layout`` / ``out_layout`` / ``layout`` /
  ``data_layout`` attribute, or inherited from its input) is brought back: blocked axes such as
  ``NCHW8c`` are merged, and axes reordered to the reference's order.

Per node output, the report gives the max absolute and relative errors, the elements out of
tolerance (``|built - ref| > atol + rtol * |ref|``, NaN/Inf at different places count too) and
NaN/Inf counts; ``first_divergence`` is the first node in graph order out of tolerance.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kiln.debug.reference import (
    ReferenceValues,
    interpreter_reference,
    onnx_reference,
)
from kiln.errors import KilnError

__all__ = [
    "CompareReport",
    "NodeComparison",
    "compare",
    "compare_outputs",
    "unpack_layout",
]

_LAYOUT_KEYS = ("dst_layout", "out_layout", "layout", "data_layout")
_LAYOUT_ONLY = re.compile(r"(?:tvmgen_\w*?_)?fused_(?:layout_transform_?)+(?:_\d+)?")
_CANONICAL_ORDER = "NCDHW"


@dataclass
class NodeComparison:
    """One output of one built node against its reference tensor.

    Attributes
    ----------
    node_index : int
        Topological index in the graph JSON.
    node : str
        The graph JSON node name.
    output_index : int
        Which output of the node.
    func_name : str
        The node's kernel.
    source_nodes : list of str
        Source-model node names the node came from (its ``source_names``).
    status : str
        ``"ok"``, ``"diverged"`` or ``"no reference"``.
    reason : str
        Why there is no reference, or what was compared.
    reference : str or None
        The reference tensor compared with (an ONNX tensor name, or ``source:op``).
    layout : str or None
        The node's layout when it was converted back before comparing.
    shape : tuple of int
        The node output's shape.
    dtype : str
        Its dtype.
    max_abs_err, max_rel_err : float or None
        Largest absolute error, and largest error relative to ``|ref|`` where ``|ref| > atol``.
    mismatches : int
        Elements out of tolerance.
    nan_count, inf_count : int
        NaN and infinite elements of the node's output.
    ref_nan_count, ref_inf_count : int
        The same in the reference.
    """

    node_index: int
    node: str
    output_index: int
    func_name: str
    source_nodes: list[str]
    status: str = "no reference"
    reason: str = ""
    reference: str | None = None
    layout: str | None = None
    shape: tuple[int, ...] = ()
    dtype: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatches: int = 0
    nan_count: int = 0
    inf_count: int = 0
    ref_nan_count: int = 0
    ref_inf_count: int = 0

    @property
    def diverged(self) -> bool:
        """Whether the output is out of tolerance."""
        return self.status == "diverged"


@dataclass
class CompareReport:
    """The result of :func:`compare`.

    Attributes
    ----------
    reference : str
        What the built module was compared with.
    rtol, atol : float
        The tolerances.
    nodes : list of NodeComparison
        Every operator node output, in graph order.
    """

    reference: str
    rtol: float
    atol: float
    nodes: list[NodeComparison] = field(default_factory=list)

    @property
    def first_divergence(self) -> NodeComparison | None:
        """The first node output (graph order) out of tolerance, or None."""
        return next((n for n in self.nodes if n.diverged), None)

    @property
    def first_nonfinite(self) -> NodeComparison | None:
        """The first node output (graph order) holding a NaN or an infinity, or None."""
        return next((n for n in self.nodes if n.nan_count or n.inf_count), None)

    @property
    def diverged(self) -> list[NodeComparison]:
        """Every node output out of tolerance."""
        return [n for n in self.nodes if n.diverged]

    @property
    def compared(self) -> int:
        """How many node outputs had a reference."""
        return sum(n.status != "no reference" for n in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        first = self.first_divergence
        nonfinite = self.first_nonfinite
        return {"reference": self.reference, "rtol": self.rtol, "atol": self.atol,
                "compared": self.compared, "diverged": len(self.diverged),
                "first_divergence": None if first is None else asdict(first),
                "first_nonfinite": None if nonfinite is None else asdict(nonfinite),
                "nodes": [asdict(n) for n in self.nodes]}

    def to_json(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    def summary(self) -> str:
        """A few lines: what was compared, the first divergence and the first NaN/Inf."""
        lines = [f"compared {self.compared} of {len(self.nodes)} node outputs with "
                 f"{self.reference} (rtol={self.rtol:g}, atol={self.atol:g})"]
        first = self.first_divergence
        if first is None:
            lines.append("no divergence")
        else:
            lines.append(f"FIRST DIVERGENCE: node {first.node_index} {first.node!r} output "
                         f"{first.output_index} (source: {', '.join(first.source_nodes) or '-'}; "
                         f"reference {first.reference}): max abs err {first.max_abs_err:.3g}, "
                         f"max rel err {_fmt(first.max_rel_err)}, {first.mismatches} element(s) out "
                         "of tolerance")
        nonfinite = self.first_nonfinite
        if nonfinite is not None:
            lines.append(f"first NaN/Inf: node {nonfinite.node_index} {nonfinite.node!r} output "
                         f"{nonfinite.output_index}: {nonfinite.nan_count} NaN, "
                         f"{nonfinite.inf_count} Inf")
        return "\n".join(lines)

    def __str__(self) -> str:
        first = self.first_divergence
        header = ("", "#", "Node Name", "Out", "Status", "MaxAbsErr", "MaxRelErr", "NaN/Inf",
                  "Reference", "Source")
        cells = []
        for n in self.nodes:
            mark = ">>" if n is first else ""
            cells.append([mark, str(n.node_index), n.node, str(n.output_index), n.status,
                          _fmt(n.max_abs_err), _fmt(n.max_rel_err), f"{n.nan_count}/{n.inf_count}",
                          n.reference or n.reason or "-", ",".join(n.source_nodes) or "-"])
        widths = [max([len(h)] + [len(c[i]) for c in cells]) + 2 for i, h in enumerate(header)]
        lines = ["".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
        lines += ["".join(x.ljust(w) for x, w in zip(c, widths)).rstrip() for c in cells]
        return "\n".join([*lines, self.summary()])


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


# --- layouts -------------------------------------------------------------------------------------

def _layout_axes(layout: str) -> list[tuple[str, int]] | None:
    from kiln.op.transform_layout import parse_layout

    try:
        return parse_layout(layout, "compare")
    except KilnError:
        return None


def unpack_layout(array: np.ndarray, layout: str) -> tuple[np.ndarray, str] | None:
    """Merge a blocked layout's block axes back into their primal axes.

    Parameters
    ----------
    array : numpy.ndarray
        Data in ``layout`` (e.g. ``NCHW8c``: shape ``(N, C/8, H, W, 8)``).
    layout : str
        Its layout.

    Returns
    -------
    (numpy.ndarray, str) or None
        The data in the primal layout (``NCHW``: shape ``(N, C, H, W)``) and that layout, or
        None when ``layout`` does not describe ``array``.
    """
    axes = _layout_axes(layout)
    if axes is None or len(axes) != array.ndim:
        return None
    primal = [letter for letter, block in axes if block == 0]
    order: list[int] = []
    shape: list[int] = []
    for letter in primal:
        outer = axes.index((letter, 0))
        inner = next((i for i, (a, b) in enumerate(axes) if a == letter and b), None)
        order.append(outer)
        size = array.shape[outer]
        if inner is not None:
            if array.shape[inner] != axes[inner][1]:
                return None
            order.append(inner)
            size *= array.shape[inner]
        shape.append(size)
    return array.transpose(order).reshape(shape), "".join(primal)


def _canonical(array: np.ndarray, primal: str) -> tuple[np.ndarray, str] | None:
    """``array`` (in layout ``primal``) with its axes in N, C, D, H, W order, and that layout."""
    if set(primal) - set(_CANONICAL_ORDER) or "N" not in primal or "C" not in primal:
        return None
    target = "".join(a for a in _CANONICAL_ORDER if a in primal)
    return array.transpose([primal.index(a) for a in target]), target


def _converted(array: np.ndarray, layout: str | None,
               preference: Sequence[str]) -> list[tuple[np.ndarray, str | None]]:
    """Candidate views of a node output in the reference's layout, best first."""
    if layout is None:
        return [(array, None)]
    unpacked = unpack_layout(array, layout)
    if unpacked is None:
        return [(array, None)]
    data, primal = unpacked
    options: list[tuple[np.ndarray, str | None]] = []
    for kind in preference:
        converted = (data, primal) if kind == "primal" else _canonical(data, primal)
        if converted is not None:
            view, name = converted
            options.append((view, None if name == layout else layout))
    return options


def _entry_layouts(graph: Any) -> list[str | None]:
    """Per entry, the layout the build gave it (None: as in the source model)."""
    layouts: list[str | None] = [None] * graph.num_entries
    for nid, node in enumerate(graph.nodes):
        if node.is_input:
            continue
        explicit = next((v for k in _LAYOUT_KEYS if (v := node.attr(k))), None)
        for j in range(node.num_outputs):
            eid = graph.entry_id(nid, j)
            ndim = len(graph.shapes[eid])
            axes = _layout_axes(explicit) if explicit else None
            if axes is not None and len(axes) == ndim:
                layouts[eid] = explicit
                continue
            for src in node.inputs:
                seid = graph.entry_id(src)
                if layouts[seid] is not None and len(graph.shapes[seid]) == ndim:
                    layouts[eid] = layouts[seid]
                    break
    return layouts


# --- which source tensor a node stands for -------------------------------------------------------

def _source_names(node: Any) -> list[str]:
    return [s for s in (node.attr("source_names", "") or "").split(",") if s]


def _root_names(node: Any, functions: Mapping[str, Any] | None) -> list[list[str]]:
    """Per output, the source names of the operation computing it (preferred first)."""
    from kiln.ir.expr import Call, Function, Tuple, TupleGetItem
    from kiln.ir.visitor import post_order

    listed = _source_names(node)
    fn = (functions or {}).get(node.func_name)
    # structurally equal fused functions share one kernel: its Function may be another node's,
    # with other source names; only use it when its names are this node's own
    if isinstance(fn, Function) and {s for n in post_order(fn.body) if isinstance(n, Call)
                                     for s in n.source_names} <= set(listed):
        roots = list(fn.body.fields) if isinstance(fn.body, Tuple) else [fn.body]
        if len(roots) == node.num_outputs:
            names = []
            for root in roots:
                while isinstance(root, TupleGetItem):
                    root = root.tuple_value
                names.append(list(reversed(root.source_names)) if isinstance(root, Call) else [])
            if any(names):
                return names
    return [[listed[-1]] if listed else [] for _ in range(node.num_outputs)]


def _carried_names(node: Any) -> list[str]:
    """The source names a node computes a part of, for deciding which node finishes a source node.

    Layout transforms inserted by the build inherit the names of the node they serve without
    computing any of it: a node of layout transforms only carries nothing, and a node that starts
    with one does not carry its first name.
    """
    from kiln.debug.dump import fused_ops

    names = _source_names(node)
    if node.is_input or _LAYOUT_ONLY.fullmatch(node.func_name):
        return []
    ops = fused_ops(node.func_name)
    return names[1:] if ops and ops[0] == "layout_transform" else names


def _last_carriers(graph: Any) -> dict[str, int]:
    """Per source name, the last node computing a part of it."""
    last: dict[str, int] = {}
    for nid, node in enumerate(graph.nodes):
        for name in _carried_names(node):
            last[name] = nid
    return last


def _errors(built: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> dict[str, Any]:
    a = built.astype(np.float64)
    b = ref.astype(np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    diff = np.zeros_like(a)
    np.abs(np.subtract(a, b, where=finite, out=diff), where=finite, out=diff)
    bad = finite & (diff > atol + rtol * np.abs(b))
    same_nonfinite = ~finite & ((np.isnan(a) & np.isnan(b)) | (a == b))
    mismatches = int(bad.sum()) + int((~finite & ~same_nonfinite).sum())
    scale = np.abs(b) > atol
    rel = np.divide(diff, np.abs(b), where=finite & scale, out=np.zeros_like(a))
    return {"max_abs_err": float(diff.max()) if diff.size else 0.0,
            "max_rel_err": float(rel.max()) if rel.size else 0.0,
            "mismatches": mismatches,
            "ref_nan_count": int(np.isnan(b).sum()), "ref_inf_count": int(np.isinf(b).sum())}


@dataclass
class _Match:
    view: np.ndarray  # the built output in the reference's layout
    value: np.ndarray  # the reference tensor
    label: str
    layout: str | None  # the layout converted from, if any


def _match_one(built: np.ndarray, layout: str | None, roots: list[str], nid: int,
               last: dict[str, int], ref: ReferenceValues, used: set[int]) -> _Match | str:
    """The reference tensor one node output stands for, or why there is none."""
    if not roots:
        return "no source names"
    reasons = []
    options = _converted(built, layout, ref.layout_preference)
    for name in roots:
        if last.get(name, nid) > nid:
            reasons.append(f"partial: {name} continues in node {last[name]}")
            continue
        groups = ref.groups.get(name)
        if not groups:
            reasons.append(f"{name} has no {ref.kind} value")
            continue
        for group in groups:
            for label, value in zip(group.labels, group.arrays):
                if id(value) in used or value.dtype != built.dtype:
                    continue
                for view, converted in options:
                    if view.shape == value.shape:
                        used.add(id(value))
                        return _Match(view, value, label, converted)
        reasons.append(f"no {name} value of shape {built.shape} {built.dtype}")
    return "; ".join(reasons)


def _match_group(built: list[np.ndarray], layouts: list[str | None], names: list[str],
                 ref: ReferenceValues) -> list[_Match] | None:
    """A multi-output node's outputs against one reference group of the same arity, in order."""
    for name in names:
        for group in ref.groups.get(name, []):
            if len(group.arrays) != len(built):
                continue
            matches = []
            for b, layout, label, value in zip(built, layouts, group.labels, group.arrays):
                found = next(((v, c) for v, c in _converted(b, layout, ref.layout_preference)
                              if v.shape == value.shape), None)
                if found is None or value.dtype != b.dtype:
                    break
                matches.append(_Match(found[0], value, label, found[1]))
            else:
                return matches
    return None


def compare_outputs(graph: Any, outputs: Sequence[np.ndarray], ref: ReferenceValues,
                    functions: Mapping[str, Any] | None = None, rtol: float = 1e-3,
                    atol: float = 1e-4) -> list[NodeComparison]:
    """Compare collected node outputs (one array per entry) with reference values.

    Parameters
    ----------
    graph : GraphJSON
        The built graph.
    outputs : sequence of numpy.ndarray
        Every entry's value, in entry order (``DebugExecutor.run_per_layer``).
    ref : ReferenceValues
        The reference tensors by source name.
    functions : mapping of str to Function, optional
        The fused functions by kernel name (to find each node's root operation).
    rtol, atol : float
        Tolerances.

    Returns
    -------
    list of NodeComparison
        Every operator node output in graph order.
    """
    layouts = _entry_layouts(graph)
    last = _last_carriers(graph)
    result: list[NodeComparison] = []
    for nid, node in enumerate(graph.nodes):
        if node.is_input:
            continue
        eids = [graph.entry_id(nid, j) for j in range(node.num_outputs)]
        roots = _root_names(node, functions)
        group = None
        if node.num_outputs > 1 and all(r == roots[0] for r in roots):
            names = [n for n in roots[0] if last.get(n, nid) <= nid]
            group = _match_group([outputs[e] for e in eids], [layouts[e] for e in eids], names, ref)
        used: set[int] = set()
        for j, eid in enumerate(eids):
            built = outputs[eid]
            cmp = NodeComparison(nid, node.name, j, node.func_name, _source_names(node),
                                 shape=tuple(built.shape), dtype=str(built.dtype))
            if built.dtype.kind in "fc":
                cmp.nan_count = int(np.isnan(built).sum())
                cmp.inf_count = int(np.isinf(built).sum())
            match = group[j] if group is not None else _match_one(
                built, layouts[eid], roots[j], nid, last, ref, used)
            if isinstance(match, str):
                cmp.reason = match
            else:
                cmp.reference, cmp.layout = match.label, match.layout
                for key, value in _errors(match.view, match.value, rtol, atol).items():
                    setattr(cmp, key, value)
                cmp.status = "diverged" if cmp.mismatches else "ok"
            result.append(cmp)
    return result


def _as_factory(lib: Any) -> Any:
    if isinstance(lib, (str, Path)):
        from kiln.runtime.module import load_module

        lib = load_module(lib)
    if not (hasattr(lib, "graph") and callable(getattr(lib, "get_params", None))):
        raise TypeError("compare takes what relay.build returns (or load_module loads, or its "
                        f"path), got {type(lib).__name__}")
    return lib


def _reference(reference: Any, inputs: Mapping[str, Any], mod: Any,
               reference_params: Mapping[str, Any] | None) -> ReferenceValues:
    from kiln.ir.module import IRModule

    if isinstance(reference, ReferenceValues):
        return reference
    if isinstance(reference, IRModule):
        return interpreter_reference(reference, inputs, reference_params)
    if isinstance(reference, str) and reference in ("interpreter", "reference"):
        if mod is None:
            raise KilnError("compare(reference='interpreter') runs the unoptimised module: pass it "
                            "as mod= (the module given to relay.build)")
        return interpreter_reference(mod, inputs, reference_params)
    if isinstance(reference, (str, Path)):
        if not Path(reference).is_file():
            raise KilnError(f"compare: reference {str(reference)!r} is neither 'interpreter' nor "
                            "an existing ONNX file")
        return onnx_reference(reference, inputs)
    if type(reference).__name__ == "ModelProto":
        return onnx_reference(reference, inputs)
    raise TypeError(f"compare: reference must be an ONNX path, 'interpreter', an IRModule or "
                    f"ReferenceValues, got {type(reference).__name__}")


def compare(lib: Any, reference: Any, inputs: Mapping[str, Any],
            params: Mapping[str, Any] | None = None, rtol: float = 1e-3, atol: float = 1e-4, *,
            mod: Any = None, reference_params: Mapping[str, Any] | None = None) -> CompareReport:
    """Run a built module node by node and find the first node that diverges from a reference.

    Parameters
    ----------
    lib : GraphExecutorFactoryModule, str or Path
        What ``relay.build`` returned, a loaded artifact, or the path of an exported one.
    reference : str, Path, onnx.ModelProto, IRModule or ReferenceValues
        The path of the source ONNX model (run by onnxruntime with its intermediate tensors
        exposed), ``"interpreter"`` (Kiln's interpreter on ``mod``), or a module to interpret.
    inputs : mapping of str to array
        The model inputs by name (the same values feed both runs).
    params : mapping of str to array, optional
        Replacements for built params (``p0``, ...): new weights tested against the reference.
    rtol, atol : float
        An element diverges when ``|built - ref| > atol + rtol * |ref|``.
    mod : IRModule, optional
        The unoptimised module, for ``reference="interpreter"``.
    reference_params : mapping of str to array, optional
        Values of ``mod``'s parameters that are not model inputs (unbound weights).

    Returns
    -------
    CompareReport
        Per node output: errors, NaN/Inf counts, source names; ``first_divergence`` is the first
        node in graph order out of tolerance (None when there is none).

    Examples
    --------
    >>> report = compare(lib, "model.onnx", {"data": x}, params={"p3": new_weight})  # doctest: +SKIP
    >>> report.first_divergence.node, report.first_divergence.source_nodes  # doctest: +SKIP
    """
    from kiln.contrib.debugger.debug_executor import create_from_factory

    factory = _as_factory(lib)
    executor = create_from_factory(factory)
    for name, value in (params or {}).items():
        if executor.get_input_index(name) < 0 or name not in executor.param_names:
            raise KilnError(f"compare: the build has no param {name!r}; its params are "
                            f"{', '.join(sorted(executor.param_names)) or 'none'}")
        executor.set_input(name, value)
    executor.set_input(**dict(inputs))
    outputs, _ = executor.run_per_layer()
    ref = _reference(reference, inputs, mod, reference_params)
    functions = getattr(factory.get_lib(), "functions", None)
    nodes = compare_outputs(executor.graph, outputs, ref, functions, rtol, atol)
    return CompareReport(ref.description, rtol, atol, nodes)
