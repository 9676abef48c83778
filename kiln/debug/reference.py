"""Reference values of a model's intermediate tensors, keyed by source-model node name.

Two references are available, both without touching the built module:

- :func:`onnx_reference`: onnxruntime on a copy of the source ONNX model in which every node
  output is also a graph output, run once with graph optimisations off;
- :func:`interpreter_reference`: Kiln's reference interpreter on the unoptimised module, every
  call's value captured through its ``on_value`` hook under the call's ``source_names``.

Both return :class:`ReferenceValues`: for each source name, groups of arrays in the order a
comparison should prefer them (an ONNX node's outputs; for the interpreter, the values of the
calls stamped with that name, the last evaluated first, since it is the node's result).
:func:`stamp_source_names` gives provenance to modules written with the relay API, whose calls
carry none, so they can be compared against the interpreter too.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kiln.errors import KilnError

__all__ = [
    "ReferenceGroup",
    "ReferenceValues",
    "interpreter_reference",
    "onnx_node_name",
    "onnx_reference",
    "stamp_source_names",
]


@dataclass
class ReferenceGroup:
    """Values one source node (or one of its calls) produced, with a label per array.

    Attributes
    ----------
    labels : list of str
        What each array is (an ONNX tensor name, or ``"<source>:<op>[.<i>]"``).
    arrays : list of numpy.ndarray
        The values, in output order.
    """

    labels: list[str]
    arrays: list[np.ndarray]


@dataclass
class ReferenceValues:
    """Reference tensors per source-model node name.

    Attributes
    ----------
    kind : str
        ``"onnxruntime"`` or ``"interpreter"``.
    description : str
        What ran (for reports).
    groups : dict of str to list of ReferenceGroup
        Per source name, candidate groups in order of preference.
    layout_preference : tuple of str
        How to bring a built node's blocked layout back: ``"canonical"`` (N, C, then spatial
        axes, as ONNX models are) or ``"primal"`` (the layout's own axis order), tried in order.
    """

    kind: str
    description: str
    groups: dict[str, list[ReferenceGroup]] = field(default_factory=dict)
    layout_preference: tuple[str, ...] = ("canonical", "primal")


def _as_numpy(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy"):
        return np.asarray(value.numpy())
    return np.asarray(value)


def onnx_node_name(node: Any, index: int) -> str:
    """The source name Kiln's ONNX importer gives a top-level node (``<OpType>_<i>`` if unnamed)."""
    return node.name or f"{node.op_type}_{index}"


def onnx_reference(model: str | Path | Any, inputs: Mapping[str, Any]) -> ReferenceValues:
    """Run a source ONNX model with onnxruntime, exposing every node's outputs.

    Parameters
    ----------
    model : str, Path or onnx.ModelProto
        The source model (not modified).
    inputs : mapping of str to array
        Values of the model's graph inputs, by name.

    Returns
    -------
    ReferenceValues
        Per ONNX node name, one group: the node's outputs.

    Raises
    ------
    KilnError
        An input is missing, or onnxruntime cannot load or run the model.
    """
    import onnx

    try:
        import onnxruntime as ort
    except ImportError:
        raise KilnError("comparing against an ONNX model needs onnxruntime; install it or compare "
                        "with reference='interpreter'") from None
    where = str(model) if isinstance(model, (str, Path)) else "the ONNX model"
    proto = onnx.load(str(model)) if isinstance(model, (str, Path)) else copy.deepcopy(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
        typed = {v.name: v for v in inferred.graph.value_info}
    except Exception:  # shape inference is only a help: untyped outputs work too
        typed = {}
    graph = proto.graph
    exposed = {o.name for o in graph.output} | {i.name for i in graph.input}
    for node in graph.node:
        for name in node.output:
            if name and name not in exposed:
                graph.output.append(typed.get(name) or onnx.ValueInfoProto(name=name))
                exposed.add(name)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(proto.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
    except Exception as e:
        raise KilnError(f"onnxruntime cannot load {where} with its intermediate tensors exposed: "
                        f"{e}") from None
    initialized = {t.name for t in graph.initializer}
    feeds = {}
    for i in session.get_inputs():
        if i.name in initialized and i.name not in inputs:
            continue  # a weight listed as a graph input (old exporters): its initializer is used
        if i.name not in inputs:
            raise KilnError(f"onnxruntime reference: no value for input {i.name!r} of {where} "
                            f"(given: {', '.join(inputs) or 'none'})")
        feeds[i.name] = _as_numpy(inputs[i.name])
    try:
        results = session.run(None, feeds)
    except Exception as e:
        raise KilnError(f"onnxruntime failed to run {where}: {e}") from None
    values = {o.name: np.asarray(r) for o, r in zip(session.get_outputs(), results)}
    ref = ReferenceValues("onnxruntime", f"onnxruntime {ort.__version__} on {where}",
                          layout_preference=("canonical", "primal"))
    for idx, node in enumerate(graph.node):
        outs = [o for o in node.output if o and o in values]
        if outs:
            ref.groups[onnx_node_name(node, idx)] = [ReferenceGroup(outs, [values[o] for o in outs])]
    return ref


def _flatten(value: Any) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [a for v in value for a in _flatten(v)]
    return [np.asarray(value)]


def _result_calls(main: Any) -> dict[int, set[str]]:
    """Per call (by id), the source names whose result it is.

    A source node lowered to several calls has as its result the values leaving it: those read
    by a call of another source node, or by the function's output. The others (a gate of an
    LSTM, the mean inside a batch norm) are the node's internals, not what a built node that
    finishes the source node holds.
    """
    from kiln.ir.expr import Call, Let, Tuple, TupleGetItem, Var
    from kiln.ir.visitor import post_order

    order = post_order(main.body, into_functions=False)
    bound = {id(n.var): n.value for n in order if isinstance(n, Let)}

    def producers(expr: Any) -> list[Any]:
        while isinstance(expr, (TupleGetItem, Var, Let)):
            if isinstance(expr, TupleGetItem):
                expr = expr.tuple_value
            elif isinstance(expr, Let):
                expr = expr.body
            elif id(expr) in bound:
                expr = bound[id(expr)]
            else:
                return []
        if isinstance(expr, Tuple):
            return [c for f in expr.fields for c in producers(f)]
        return [expr] if isinstance(expr, Call) else []

    results: dict[int, set[str]] = {}
    for node in order:
        if isinstance(node, Call):
            reader = set(node.source_names)
            for arg in node.args:
                for call in producers(arg):
                    results.setdefault(id(call), set()).update(set(call.source_names) - reader)
    for call in producers(main.body):
        results.setdefault(id(call), set()).update(call.source_names)
    return results


def interpreter_reference(mod: Any, inputs: Mapping[str, Any],
                          params: Mapping[str, Any] | None = None) -> ReferenceValues:
    """Run the unoptimised module with the reference interpreter, capturing every call's value.

    Parameters
    ----------
    mod : IRModule
        The module as imported or written (before ``relay.build``); calls carry source names.
    inputs : mapping of str to array
        Values of ``main``'s inputs.
    params : mapping of str to array, optional
        Values of ``main``'s other parameters (weights not bound into the module).

    Returns
    -------
    ReferenceValues
        Per source name, one group per call stamped with it that computes the source node's
        result (a value read outside the node), the last evaluated first.
    """
    from kiln.interpreter import Interpreter
    from kiln.ir.expr import Call, Expr, Op

    captured: dict[str, list[ReferenceGroup]] = {}
    inner: dict[str, list[ReferenceGroup]] = {}

    def on_value(call: Expr, value: Any) -> None:
        if not isinstance(call, Call) or not call.source_names:
            return
        op = call.op.name if isinstance(call.op, Op) else "function"
        arrays = _flatten(value)
        for source in call.source_names:
            labels = [f"{source}:{op}" + (f".{i}" if len(arrays) > 1 else "")
                      for i in range(len(arrays))]
            kept = captured if source in results.get(id(call), ()) else inner
            kept.setdefault(source, []).append(ReferenceGroup(labels, arrays))

    named = {k: _as_numpy(v) for k, v in {**(params or {}), **inputs}.items()}
    interpreter = Interpreter(mod, on_value=on_value)
    results = _result_calls(interpreter.mod["main"])
    interpreter.run(named)
    for source, groups in inner.items():
        # a source none of whose values leaves it (its readers carry its name too): all of them
        captured.setdefault(source, groups)
    if not captured:
        raise KilnError("interpreter reference: no call of the module carries source names, so no "
                        "built node can be matched; import the model with a frontend, or stamp "
                        "a relay module with kiln.debug.stamp_source_names before building it")
    ref = ReferenceValues("interpreter", "Kiln's reference interpreter on the unoptimised module",
                          layout_preference=("primal", "canonical"))
    ref.groups = {name: list(reversed(groups)) for name, groups in captured.items()}
    return ref


def stamp_source_names(mod: Any) -> Any:
    """Give every call of ``main`` without provenance a stable name, ``<op>_<k>``.

    ``k`` counts calls in evaluation order. Build the stamped module and compare it with
    ``reference="interpreter"`` (passing the stamped module as ``mod``): the names travel through
    the build into the graph JSON's ``source_names``.

    Parameters
    ----------
    mod : IRModule
        A module whose calls may lack ``source_names`` (relay API, ``relay.testing``).

    Returns
    -------
    IRModule
        The same program; calls that had names keep them.
    """
    from kiln.ir.expr import Call, Expr, Op
    from kiln.ir.visitor import rewrite

    counter = [0]

    def stamp(new: Expr, old: Expr) -> Expr | None:
        if not isinstance(new, Call) or new.source_names:
            return None
        op = new.op.name if isinstance(new.op, Op) else "call"
        counter[0] += 1
        return Call(new.op, new.args, new.attrs, source_names=(f"{op}_{counter[0]}",))

    main = mod["main"]
    return mod.with_function("main", rewrite(main, stamp, into_functions=False))
