"""Which layer diverges: a built module compared node by node with a reference run.

:func:`compare` runs the built module one node at a time (fusion untouched), keeping every output
of every node, runs a reference (onnxruntime on the source ONNX model, or Kiln's interpreter on
the unoptimised module; see :mod:`kiln.debug.reference`), and matches each node output with the
source-model tensor it stands for:

- a node output holds the value of the operation computing it, found in the node's fused
  function (the kernel library keeps them for builds made in this process): from the function's
  output, walk down the operations that only move data (reshape, squeeze, expand_dims,
  batch_flatten, copy, transpose, layout_transform), across ``__nop`` nodes and into the input
  node when the whole function is such a tail; the output stands for that operation's source
  node, and is compared after undoing the tail (the built value brought back to the producing
  operation's shape, order and layout). A kernel ending in a reshape of a ReLU is compared with
  the ReLU's tensor, whatever name the reshape carries;
- the reference tensor is the source node's output of the same shape, or failing that of the
  same size (a reshape the build moved); an output of a multi-output operation takes the
  output of the same index; when several different outputs of the source node fit (an LSTM's
  ``Y_h`` and ``Y_c``), the match is ambiguous and there is no reference rather than a guess;
- without the fused functions (a loaded artifact), the last name of the graph JSON's
  ``source_names`` stands for the node when its kernel name shows it ends in an operation
  that computes something; a kernel ending in a tail operation, whose name is truncated, or
  computing part of a source node that continues in a later node has no reference;
- when a later node of the graph carries the same source name (layout transforms the build
  inserted do not count), the source node's result is only complete there: this node is
  partial and has no reference;
- a value whose layout the build changed (a ``dst_layout`` / ``out_layout`` / ``layout`` /
  ``data_layout`` attribute, or inherited from an argument) is brought back: blocked axes such
  as ``NCHW8c`` are merged, and axes reordered to the reference's order; a channel-blocked value
  with more channels than the reference (a convolution padded to whole vectors of channels) is
  compared on its first channels.

Per node output, the report gives the max absolute and relative errors, the elements out of
tolerance (``|built - ref| > atol + rtol * |ref|``, NaN/Inf at different places count too) and
NaN/Inf counts; ``first_divergence`` is the first node in graph order out of tolerance.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
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
from kiln.runtime.table import Column, format_table, shorten_kernel

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
        return self.format(None)

    def format(self, width: int | None) -> str:
        """The per-node table and the summary, fitted to ``width`` characters (None: no limit).

        Node names and reference/source names are shortened in the middle to fit; numbers never.
        """
        first = self.first_divergence
        columns = [Column(""), Column("#", align=">"),
                   Column("Node", shrink=1, min_width=10, soft_width=24, shortener=shorten_kernel),
                   Column("Out", align=">"), Column("Status"), Column("MaxAbsErr", align=">"),
                   Column("MaxRelErr", align=">"), Column("NaN/Inf", align=">"),
                   Column("Reference", shrink=2, min_width=8, soft_width=20),
                   Column("Source", shrink=2, min_width=8, soft_width=20)]
        rows = [[">>" if n is first else "", str(n.node_index), n.node, str(n.output_index),
                 n.status, _fmt(n.max_abs_err), _fmt(n.max_rel_err), f"{n.nan_count}/{n.inf_count}",
                 n.reference or n.reason or "-", ",".join(n.source_nodes) or "-"] for n in self.nodes]
        # columns that say nothing on this model (every output 0, no NaN/Inf) give their room away
        keep = [i for i, c in enumerate(columns)
                if not (c.header in ("Out", "NaN/Inf") and all(r[i] in ("0", "0/0") for r in rows))]
        columns = [columns[i] for i in keep]
        rows = [[r[i] for i in keep] for r in rows]
        table = format_table(columns, rows, width)
        if width and max(map(len, table.splitlines())) > width - 20:
            # narrow: the source layers are in the timing table by node index; the room goes
            # to the node and reference names
            table = format_table(columns[:-1], [r[:-1] for r in rows], width)
        summary = self.summary()
        if width:
            summary = "\n".join(textwrap.fill(line, width, subsequent_indent="  ")
                                for line in summary.splitlines())
        return "\n".join([table, summary])


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

# operations that move data without changing it: a node output that ends in them holds the value of
# the operation below them, in another shape or order
_RESHAPE_OPS = frozenset({"reshape", "reshape_like", "squeeze", "expand_dims", "nn.batch_flatten",
                          "copy"})
_TAIL_OPS = _RESHAPE_OPS | {"transpose", "layout_transform"}


def _source_names(node: Any) -> list[str]:
    return [s for s in (node.attr("source_names", "") or "").split(",") if s]


def _carried_names(node: Any) -> list[str]:
    """The source names a node computes a part of, for deciding which node finishes a source node.

    Layout transforms inserted by the build inherit the names of the node they serve without
    computing any of it, and so do the reshapes of a value held in a blocked layout: a node of
    data movement only (layout transforms, reshapes, transposes) carries nothing, and a node that
    starts with data movement does not carry its first name.
    """
    from kiln.debug.dump import fused_ops

    names = _source_names(node)
    if node.is_input or node.func_name == "__nop" or _LAYOUT_ONLY.fullmatch(node.func_name):
        return []
    ops = fused_ops(node.func_name)
    if ops and all(op in _TAIL_OPS for op in ops):
        return []  # it only moves the value of the node below it (a squeeze held blocked, ...)
    return names[1:] if ops and ops[0] in _TAIL_OPS else names


def _last_carriers(graph: Any) -> dict[str, int]:
    """Per source name, the last node computing a part of it."""
    last: dict[str, int] = {}
    for nid, node in enumerate(graph.nodes):
        for name in _carried_names(node):
            last[name] = nid
    return last


_Step = Callable[[np.ndarray], "np.ndarray | None"]


@dataclass
class _Producer:
    """What one node output holds: the value of one operation, moved by value-preserving steps.

    ``steps`` undo the tail (outermost first): applied to the node output they give the
    producer's value, in ``layout`` (None: as in the source model). ``index`` / ``arity``: which
    output of a multi-output operation it is. ``names`` is empty when no operation could be
    identified; ``reason`` then says why.
    """

    names: list[str]
    nid: int
    steps: list[_Step] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    index: int | None = None
    arity: int = 1
    layout: str | None = None
    reason: str = ""

    def through(self, ops: list[str], steps: list[_Step]) -> _Producer:
        return _Producer(self.names, self.nid, [*steps, *self.steps], [*ops, *self.tail],
                         self.index, self.arity, self.layout, self.reason)


def _shape(expr: Any) -> tuple[int, ...] | None:
    from kiln.ir.types import TensorType

    ty = expr.checked_type if expr.has_type else None
    if isinstance(ty, TensorType) and all(isinstance(d, int) for d in ty.shape):
        return tuple(ty.shape)
    return None


def _undo(call: Any) -> _Step | None:
    """How to get a tail operation's input back from its output, or None (not invertible)."""
    from dataclasses import replace

    from kiln.op.registry import get_op_def

    name = call.op.name
    src, out = _shape(call.args[0]), _shape(call)
    if src is None or out is None or int(np.prod(src)) != int(np.prod(out)):
        return None  # a padded layout transform, or unknown shapes
    if name in _RESHAPE_OPS:
        return lambda a: a.reshape(src) if a.size == int(np.prod(src)) else None
    if name == "transpose":
        axes = getattr(call.attrs, "axes", None)
        order = list(range(len(src)))[::-1] if axes is None else [a % len(src) for a in axes]
        inverse = [int(i) for i in np.argsort(order)]
        return lambda a: a.transpose(inverse) if a.ndim == len(inverse) else None
    if name == "layout_transform":
        attrs = replace(call.attrs, src_layout=call.attrs.dst_layout,
                        dst_layout=call.attrs.src_layout)
        ref = get_op_def("layout_transform").reference

        def undo(a: np.ndarray) -> np.ndarray | None:
            back = np.asarray(ref([a], attrs, call.args[0].checked_type))
            return back if back.shape == src else None
        return undo
    return None


def _explicit_layout(call: Any, ndim: int) -> str | None:
    for key in _LAYOUT_KEYS:
        value = getattr(call.attrs, key, None) if call.attrs is not None else None
        axes = _layout_axes(value) if isinstance(value, str) and value else None
        if axes is not None and len(axes) == ndim:
            return value
    return None


class _FunctionView:
    """The producers of a fused function's outputs, and the layout of each value in it."""

    def __init__(self, fn: Any, param_producers: list[_Producer], param_layouts: list[str | None]):
        self.fn = fn
        self.params = {id(p): i for i, p in enumerate(fn.params)}
        self.param_producers = param_producers
        self.param_layouts = param_layouts
        self._layouts: dict[int, str | None] = {}

    def layout(self, expr: Any) -> str | None:
        """The layout a value of the function is in (an attribute of its operation, or inherited
        from an argument of the same rank), None when it is the source model's."""
        from kiln.ir.expr import Call, Tuple, TupleGetItem, Var

        key = id(expr)
        if key in self._layouts:
            return self._layouts[key]
        result: str | None = None
        if isinstance(expr, Var) and key in self.params:
            result = self.param_layouts[self.params[key]]
        elif isinstance(expr, TupleGetItem):
            result = self.layout(expr.tuple_value)
        elif isinstance(expr, Call):
            shape = _shape(expr)
            ndim = len(shape) if shape is not None else -1
            result = _explicit_layout(expr, ndim)
            if result is None:
                # a concatenate's fields are arguments too
                args = [f for a in expr.args for f in (a.fields if isinstance(a, Tuple) else (a,))]
                for arg in args:
                    arg_shape = _shape(arg)
                    if arg_shape is not None and len(arg_shape) == ndim:
                        result = self.layout(arg)
                        if result is not None:
                            break
        self._layouts[key] = result
        return result

    def producer(self, expr: Any, nid: int) -> _Producer:
        """Walk down value-preserving operations from ``expr`` to the operation computing it."""
        from kiln.ir.expr import Call, Op, Tuple, TupleGetItem, Var

        ops: list[str] = []
        steps: list[_Step] = []
        while isinstance(expr, Call) and isinstance(expr.op, Op) and expr.op.name in _TAIL_OPS:
            step = _undo(expr)
            if step is None:
                break
            ops.append(expr.op.name)
            steps.append(step)
            expr = expr.args[0]
        if isinstance(expr, Var) and id(expr) in self.params:
            # the whole output is the input moved: it holds what the input node holds
            return self.param_producers[self.params[id(expr)]].through(ops, steps)
        index, arity = None, 1
        if isinstance(expr, TupleGetItem) and isinstance(expr.tuple_value, Call):
            index = expr.index
            ty = expr.tuple_value.checked_type if expr.tuple_value.has_type else None
            arity = len(getattr(ty, "fields", ())) or 1
            expr = expr.tuple_value
        if not isinstance(expr, Call):
            kind = "a tuple" if isinstance(expr, Tuple) else type(expr).__name__
            return _Producer([], nid, steps, ops, reason=f"its value is {kind}, not an operation's")
        names = list(reversed(expr.source_names))
        return _Producer(names, nid, steps, ops, index, arity, self.layout(expr),
                         "" if names else "the operation computing it has no source names")


def _producers(graph: Any, functions: Mapping[str, Any] | None, layouts: list[str | None],
               last: dict[str, int]) -> list[_Producer]:
    """Per graph entry, what it holds (see :class:`_Producer`)."""
    from kiln.debug.dump import fused_ops
    from kiln.ir.expr import Call, Function, Tuple
    from kiln.ir.visitor import post_order
    from kiln.op.registry import all_ops

    known = all_ops()
    result: list[_Producer] = []
    for nid, node in enumerate(graph.nodes):
        if node.is_input:
            for _ in range(node.num_outputs):
                result.append(_Producer([], nid, reason=f"it holds graph input {node.name!r}"))
            continue
        listed = _source_names(node)
        inputs = [result[graph.entry_id(e)] for e in node.inputs]
        if node.func_name == "__nop" and len(inputs) == 1:
            src_shape = tuple(graph.shapes[graph.entry_id(node.inputs[0])])

            def back(a: np.ndarray, s: tuple[int, ...] = src_shape) -> np.ndarray | None:
                return a.reshape(s) if a.size == int(np.prod(s)) else None
            result.append(inputs[0].through(["reshape"], [back]))
            continue
        fn = (functions or {}).get(node.func_name)
        own = isinstance(fn, Function) and {
            s for n in post_order(fn.body) if isinstance(n, Call) for s in n.source_names
        } <= set(listed)
        if isinstance(fn, Function) and own:
            # structurally equal fused functions share one kernel: its Function may be another
            # node's, with other source names; it is used only when its names are this node's
            param_layouts = [layouts[graph.entry_id(e)] for e in node.inputs]
            view = _FunctionView(fn, inputs, param_layouts)
            roots = list(fn.body.fields) if isinstance(fn.body, Tuple) else [fn.body]
            if len(roots) == node.num_outputs and len(fn.params) == len(inputs):
                result.extend(view.producer(root, nid) for root in roots)
                continue
        # no fused function: the graph JSON's names are in evaluation order, and the last one is
        # the root operation's when that operation computes something (a kernel ending in a
        # reshape or a transpose holds the value of an operation the names do not point at)
        ops = fused_ops(node.func_name)
        last_op = ops[-1] if ops else ""
        unfinished = [n for n in _carried_names(node) if last.get(n, nid) > nid]
        for j in range(node.num_outputs):
            eid = graph.entry_id(nid, j)
            if not listed:
                result.append(_Producer([], nid, reason="no source names"))
            elif unfinished:
                # the last name may be another source node's, fused into this part of the
                # unfinished one (an LSTM cell reading a Gather of its state)
                why = (f"partial: {unfinished[0]} continues in node {last[unfinished[0]]}, and "
                       "without its fused function the operation computing this output is unknown")
                result.append(_Producer([], nid, reason=why))
            elif last_op in _TAIL_OPS:
                why = (f"the kernel ends in {last_op} and its fused function is not available "
                       "(an exported library keeps none): the operation producing its value is "
                       "unknown")
                result.append(_Producer([], nid, reason=why))
            elif last_op not in known:
                why = ("its kernel name does not say which operation computes its output, and its "
                       "fused function is not available")
                result.append(_Producer([], nid, reason=why))
            else:
                multi = node.num_outputs > 1  # outputs in order, as the source node's
                result.append(_Producer([listed[-1]], nid, layout=layouts[eid],
                                        index=j if multi else None, arity=node.num_outputs))
    return result


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
    view: np.ndarray  # the built output brought to the reference's shape, layout and order
    value: np.ndarray  # the reference tensor
    label: str
    layout: str | None  # the layout converted from, if any
    via: str  # the tail undone, if any ("reshape, transpose")


def _distinct(candidates: list[tuple[str, np.ndarray]]) -> bool:
    first = candidates[0][1].ravel()
    return any(c.size != first.size or not np.array_equal(c.ravel(), first, equal_nan=True)
               for _, c in candidates[1:])


def _padded_channels(view: np.ndarray, array: np.ndarray, layout: str | None) -> bool:
    """Whether ``view`` is ``array`` with channels appended: the value of a convolution the build
    padded to whole vectors of channels (held channel-blocked, ``NCHW16c``), back in ``NCHW``."""
    axes = _layout_axes(layout) if layout else None
    return (axes is not None and any(letter == "C" and block for letter, block in axes)
            and view.ndim >= 2 and array.ndim >= 2 and view.shape[0] == array.shape[0]
            and array.shape[1] < view.shape[1]
            and [d for d in view.shape[2:] if d != 1] == [d for d in array.shape[2:] if d != 1])


def _match_one(built: np.ndarray, prod: _Producer, last: dict[str, int], ref: ReferenceValues,
               used: set[int]) -> _Match | str:
    """The reference tensor one node output stands for, or why there is none.

    The output's tail is undone first (the producer's value), its layout brought back to the
    reference's; then, per source name of the producer: a reference array of the same shape, or
    failing that of the same size (the same elements in a reshaped tensor). Several reference
    arrays of a multi-output source node that fit and differ make the match ambiguous: no
    reference rather than a guess.
    """
    if not prod.names:
        return prod.reason or "no source names"
    value: np.ndarray | None = built
    for step in prod.steps:
        value = step(value) if value is not None else None
    if value is None:
        return f"its {', '.join(prod.tail)} tail cannot be undone"
    options = _converted(value, prod.layout, ref.layout_preference)
    via = ", ".join(reversed(prod.tail))
    reasons = []
    for name in prod.names:
        if last.get(name, prod.nid) > prod.nid:
            reasons.append(f"partial: {name} continues in node {last[name]}")
            continue
        groups = ref.groups.get(name)
        if not groups:
            reasons.append(f"{name} has no {ref.kind} value")
            continue
        arrays = [(label, array) for group in groups
                  for label, array in zip(group.labels, group.arrays)
                  if array.dtype == built.dtype and id(array) not in used]
        if prod.index is not None:
            same_arity = [g for g in groups if len(g.arrays) == prod.arity]
            if same_arity:
                arrays = [(g.labels[prod.index], g.arrays[prod.index]) for g in same_arity
                          if g.arrays[prod.index].dtype == built.dtype]
        for fits in (lambda v, a: v.shape == a.shape,
                     lambda v, a: v.size == a.size and (not prod.layout or [
                         d for d in v.shape if d != 1] == [d for d in a.shape if d != 1]),
                     lambda v, a: _padded_channels(v, a, prod.layout)):
            found = [(label, array, view, converted) for view, converted in options
                     for label, array in arrays if fits(view, array)]
            if not found:
                continue
            first_view = found[0][2]
            candidates = [(label, array) for label, array, view, _ in found if view is first_view]
            if len(candidates) > 1 and _distinct(candidates):
                labels = ", ".join(label for label, _ in candidates)
                return (f"ambiguous: {len(candidates)} different values of {name} fit ({labels}); "
                        "which one this output is is unknown")
            label, array, view, converted = found[0]
            used.add(id(array))
            if view.size != array.size:  # the real channels of a channel-padded value
                view = view[:, :array.shape[1]]
            return _Match(view.reshape(array.shape), array, label, converted, via)
        reasons.append(f"no {name} value of shape {value.shape} {built.dtype}")
    return "; ".join(reasons)


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
        The fused functions by kernel name (to find the operation computing each node output).
    rtol, atol : float
        Tolerances.

    Returns
    -------
    list of NodeComparison
        Every operator node output in graph order.
    """
    layouts = _entry_layouts(graph)
    last = _last_carriers(graph)
    producers = _producers(graph, functions, layouts, last)
    result: list[NodeComparison] = []
    for nid, node in enumerate(graph.nodes):
        if node.is_input:
            continue
        used: set[int] = set()
        for j in range(node.num_outputs):
            eid = graph.entry_id(nid, j)
            built = outputs[eid]
            cmp = NodeComparison(nid, node.name, j, node.func_name, _source_names(node),
                                 shape=tuple(built.shape), dtype=str(built.dtype))
            if built.dtype.kind in "fc":
                cmp.nan_count = int(np.isnan(built).sum())
                cmp.inf_count = int(np.isinf(built).sum())
            match = _match_one(built, producers[eid], last, ref, used)
            if isinstance(match, str):
                cmp.reason = match
            else:
                cmp.reference, cmp.layout = match.label, match.layout
                if match.via:
                    cmp.reason = f"through {match.via}"
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
    from kiln.debug.debug_executor import create_from_factory

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
