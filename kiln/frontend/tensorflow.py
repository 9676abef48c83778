"""TensorFlow importer: a frozen GraphDef (or a SavedModel, or a ``tf.function``) to relay.

The import runs in three steps:

1. **Load and check**: take a ``GraphDef`` (or its bytes, or a ``.pb`` / ``.pbtxt`` path, or a
   ``tf.Graph``), list every op kind Kiln cannot convert, in the graph and in the functions its
   ``While``/``If``/``PartitionedCall`` nodes call, with node names, in one
   :class:`~kiln.errors.UnsupportedOpError`.
2. **Bind inputs**: ``Placeholder`` nodes become the graph inputs, with the shape of their
   ``shape`` attribute or of the ``shape`` argument (unknown dims must be given there); only the
   nodes the outputs need are imported. A string ``Placeholder``, or a string ``Const`` read by
   ``DecodeJpeg`` (the JPEG bytes ``DecodeJpeg/contents`` of the classic Inception graphs),
   becomes a ``uint8`` input named after the node, its shape taken from ``shape``: the image is
   decoded outside, ``DecodeJpeg`` passes it through, as TVM's frontend does.
3. **Convert** the nodes in topological order with the converters of
   :mod:`kiln.frontend.tensorflow_ops`. After each node the importer stamps the TF node name on
   every new call and folds what is constant, so shape subgraphs (``Shape -> StridedSlice -> Pack
   -> Reshape``) become constants. Functional control flow is resolved at import: ``While`` loops
   whose condition folds to a constant are unrolled (Keras LSTM/GRU under ``tf.function``), ``If``
   with a constant condition is inlined, ``PartitionedCall`` is inlined; ``TensorList`` values
   (Keras RNN's TensorArrays) live as Python lists of relay expressions during the import.

Layouts are kept as the model wrote them (``NHWC`` convolutions with ``HWIO`` kernels); the
optimizer's ``ConvertLayout``/``AlterOpLayout`` choose the fast layouts at build time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kiln.errors import DynamicShapeError, FrontendError, KilnError, UnsupportedOpError
from kiln.frontend.common import ImportState, check_input_shape, require, unsupported_error
from kiln.frontend.tensorflow_ops import (
    CONVERTERS,
    MULTI_OUTPUT,
    NodeContext,
    StringConstant,
    attr_value,
    dtype_name,
)
from kiln.ir.expr import Constant, Expr
from kiln.ir.module import IRModule

__all__ = ["from_saved_model", "from_tensorflow", "from_tf_function", "supported_ops"]

# Most iterations of a While loop unrolled at import.
MAX_UNROLL = 4096

# Nodes the importer itself handles (inputs, constants, functional control flow).
_SPECIAL = ("Placeholder", "PlaceholderWithDefault", "Const", "While", "StatelessWhile", "If",
            "StatelessIf", "PartitionedCall", "StatefulPartitionedCall")

# TF1 control flow (lowered loops and conds): Kiln imports the functional forms only.
_V1_CONTROL_FLOW = {"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond"}


def supported_ops() -> list[str]:
    """TensorFlow op types Kiln converts."""
    return sorted({*CONVERTERS, *_SPECIAL})


def _tf() -> Any:
    return require("tensorflow", "tensorflow", "from_tensorflow")


def _load_graph_def(graph: Any) -> Any:
    """A ``GraphDef`` from a GraphDef, a ``tf.Graph``, serialized bytes or a file path."""
    tf = _tf()
    graph_def_cls = tf.compat.v1.GraphDef
    if isinstance(graph, graph_def_cls):
        return graph
    if isinstance(graph, tf.Graph):
        return graph.as_graph_def()
    if hasattr(graph, "as_graph_def") and callable(graph.as_graph_def):
        return graph.as_graph_def()
    if isinstance(graph, (bytes, bytearray)):
        gd = graph_def_cls()
        try:
            gd.ParseFromString(bytes(graph))
        except Exception as e:  # protobuf raises its own DecodeError
            raise FrontendError(f"the bytes given are not a serialized TensorFlow GraphDef ({e})") from None
        return gd
    if isinstance(graph, (str, os.PathLike)):
        path = os.fspath(graph)
        if not os.path.isfile(path):
            raise FrontendError(f"TensorFlow graph file {path!r} does not exist")
        with open(path, "rb") as f:
            data = f.read()
        gd = graph_def_cls()
        if path.endswith((".pbtxt", ".txt")):
            text_format = require("google.protobuf.text_format", "tensorflow", "from_tensorflow")
            try:
                text_format.Merge(data.decode(), gd)
            except Exception as e:
                raise FrontendError(f"{path!r} is not a text GraphDef ({e})") from None
            return gd
        try:
            gd.ParseFromString(data)
        except Exception as e:
            raise FrontendError(f"{path!r} is not a binary TensorFlow GraphDef ({e}); a SavedModel "
                                "directory goes to from_saved_model") from None
        return gd
    raise FrontendError(f"from_tensorflow takes a GraphDef, a tf.Graph, bytes or a .pb path, not "
                        f"{type(graph).__name__}")


def from_tensorflow(
    graph: Any,
    layout: str | None = "NHWC",
    shape: Mapping[str, Sequence[int]] | None = None,
    outputs: Sequence[str] | None = None,
    freeze_params: bool = True,
) -> tuple[IRModule, dict[str, Any]]:
    """Import a frozen TensorFlow graph.

    Parameters
    ----------
    graph : tf.compat.v1.GraphDef, tf.Graph, bytes or path
        A frozen graph (variables already constants): the proto, its serialized bytes, or a
        ``.pb`` (binary) / ``.pbtxt`` (text) file.
    layout : str
        ``"NHWC"`` (or None): convolutions stay in the layout the model wrote. ``"NCHW"``: after
        the import, ``ConvertLayout`` turns convolutions and pools to NCHW (as TVM's
        ``layout="NCHW"`` does inside its converters).
    shape : dict of str to tuple of int, optional
        Shapes of graph inputs (``Placeholder`` nodes, or a string ``Const`` fed to
        ``DecodeJpeg``); required for every input whose shape the graph leaves unknown.
    outputs : list of str, optional
        Output nodes (``"name"``: its outputs; ``"name:1"``: one tensor). Default: the graph's
        sink nodes, in graph order.
    freeze_params : bool
        True: ``Const`` nodes are embedded as constants and ``params`` is empty. False: every
        non-scalar ``Const`` becomes a parameter of ``main`` named after its node (TVM's
        behaviour), returned in ``params``.

    Returns
    -------
    mod : IRModule
        ``main`` takes the graph inputs (then the params it uses); ``mod.attrs["output_names"]``
        holds the output tensors' names (``"node"`` for output 0, ``"node:i"`` otherwise).
    params : dict of str to NDArray

    Examples
    --------
    >>> mod, params = from_tensorflow("inception.pb", shape={"DecodeJpeg/contents": (299, 299, 3)})
    ... # doctest: +SKIP
    """
    if layout not in (None, "NHWC", "NCHW"):
        raise FrontendError(f"from_tensorflow: layout must be 'NHWC' or 'NCHW', not {layout!r}")
    graph_def = _load_graph_def(graph)
    importer = _Importer(graph_def, shape or {}, freeze_params)
    mod, params = importer.run(list(outputs) if outputs is not None else None)
    if layout == "NCHW":
        mod = _to_nchw(mod)
    return mod, params


def _to_nchw(mod: IRModule) -> IRModule:
    from kiln.transform import ConvertLayout, PassContext

    desired = {"nn.conv2d": ["NCHW", "default"], "nn.conv2d_transpose": ["NCHW", "default"],
               "nn.max_pool2d": ["NCHW"], "nn.avg_pool2d": ["NCHW"]}
    with PassContext(opt_level=3):
        return ConvertLayout(desired)(mod)


def _freeze(concrete: Any) -> Any:
    convert = require("tensorflow.python.framework.convert_to_constants", "tensorflow", "from_tf_function")
    try:
        return convert.convert_variables_to_constants_v2(concrete, lower_control_flow=False)
    except Exception as e:
        raise FrontendError(f"TensorFlow could not freeze the function's variables into constants: "
                            f"{type(e).__name__}: {e}") from None


def _import_frozen(frozen: Any, shape: Mapping[str, Sequence[int]] | None, layout: str | None,
                   freeze_params: bool, output_names: Sequence[str] | None
                   ) -> tuple[IRModule, dict[str, Any]]:
    graph_def = frozen.graph.as_graph_def()
    outs = [t.name[:-2] if t.name.endswith(":0") else t.name for t in frozen.outputs]
    mod, params = from_tensorflow(graph_def, layout=layout, shape=shape, outputs=outs,
                                  freeze_params=freeze_params)
    if output_names is not None and len(output_names) == len(outs):
        mod.attrs["output_names"] = tuple(output_names)
    return mod, params


def from_tf_function(
    function: Any,
    input_signature: Sequence[Any] | None = None,
    shape: Mapping[str, Sequence[int]] | None = None,
    layout: str | None = "NHWC",
    freeze_params: bool = True,
) -> tuple[IRModule, dict[str, Any]]:
    """Import a ``tf.function`` (or one of its concrete functions), freezing its variables.

    Parameters
    ----------
    function : tf.function or ConcreteFunction
        A ``tf.function`` needs an ``input_signature`` (its own or the argument).
    input_signature : list of tf.TensorSpec, optional
        The inputs to trace ``function`` with.
    shape : dict of str to tuple of int, optional
        Shapes of inputs whose spec leaves dims unknown (keys: the placeholder names, the
        function's argument names).
    layout, freeze_params
        As in :func:`from_tensorflow`.
    """
    tf = _tf()
    concrete = function
    if not isinstance(function, tf.types.experimental.ConcreteFunction):
        if not hasattr(function, "get_concrete_function"):
            raise FrontendError("from_tf_function takes a tf.function or a ConcreteFunction, not "
                                f"{type(function).__name__}")
        try:
            concrete = (function.get_concrete_function(*input_signature) if input_signature is not None
                        else function.get_concrete_function())
        except (TypeError, ValueError) as e:
            raise FrontendError(f"could not trace the tf.function ({e}); give input_signature=[tf.TensorSpec"
                                "(shape, dtype), ...]") from None
    return _import_frozen(_freeze(concrete), shape, layout, freeze_params, None)


def from_saved_model(
    path: str | os.PathLike[str],
    signature: str = "serving_default",
    shape: Mapping[str, Sequence[int]] | None = None,
    layout: str | None = "NHWC",
    freeze_params: bool = True,
) -> tuple[IRModule, dict[str, Any]]:
    """Import one signature of a SavedModel directory, freezing its variables.

    ``mod.attrs["output_names"]`` holds the signature's output keys (sorted, the order TF
    flattens them in).
    """
    tf = _tf()
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FrontendError(f"SavedModel directory {path!r} does not exist")
    try:
        loaded = tf.saved_model.load(path)
    except Exception as e:
        raise FrontendError(f"TensorFlow could not load the SavedModel {path!r}: {e}") from None
    sigs = getattr(loaded, "signatures", {})
    if signature not in sigs:
        raise FrontendError(f"SavedModel {path!r} has no signature {signature!r} (it has "
                            f"{sorted(sigs) or 'none'})")
    fn = sigs[signature]
    structured = fn.structured_outputs
    names = sorted(structured) if isinstance(structured, Mapping) else None
    return _import_frozen(_freeze(fn), shape, layout, freeze_params, names)


# --- the importer ---------------------------------------------------------------------------

def _parse_ref(ref: str) -> tuple[str, int]:
    name, _, idx = ref.partition(":")
    return name, int(idx) if idx else 0


def _needed(nodes: Sequence[Any], roots: Sequence[str]) -> list[Any]:
    """The nodes (in the order of ``nodes``) that ``roots`` read, directly or not, as data."""
    by_name = {n.name: n for n in nodes}
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        stack.extend(_parse_ref(r)[0] for r in by_name[name].input if not r.startswith("^"))
    return [n for n in nodes if n.name in seen]


def _topological(nodes: Sequence[Any]) -> list[Any]:
    """``nodes`` ordered so that every node comes after its (data and control) inputs."""
    by_name = {n.name: n for n in nodes}
    done: set[str] = set()
    entered: set[str] = set()  # a TF1 loop's NextIteration -> Merge edge closes a cycle
    order: list[Any] = []
    for root in nodes:
        if root.name in done:
            continue
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                if node.name not in done:
                    done.add(node.name)
                    order.append(node)
                continue
            if node.name in done or node.name in entered:
                continue
            entered.add(node.name)
            stack.append((node, True))
            for ref in reversed(node.input):
                dep = by_name.get(_parse_ref(ref.lstrip("^"))[0])
                if dep is not None and dep.name not in done and dep.name not in entered:
                    stack.append((dep, False))
    return order


class _Importer(ImportState):
    """One TensorFlow import: the state shared by every node conversion."""

    def __init__(self, graph_def: Any, shape: Mapping[str, Sequence[int]], freeze_params: bool):
        super().__init__(freeze_params)
        self.graph_def = graph_def
        self.shape = {k: tuple(int(d) for d in v) for k, v in shape.items()}
        self.library = {f.signature.name: f for f in graph_def.library.function}
        self.function_graphs: dict[str, tuple[Any, dict[str, str]]] = {}
        self.const_cache: dict[tuple[str, str], Any] = {}
        self.input_vars: dict[str, Expr] = {}

    # --- entry -------------------------------------------------------------------------------
    def run(self, outputs: list[str] | None) -> tuple[IRModule, dict[str, Any]]:
        all_nodes = _topological(list(self.graph_def.node))
        wanted = self.output_nodes(all_nodes, outputs)
        nodes = _needed(all_nodes, [name for name, _ in wanted])  # what TF itself would run
        self.check_supported(nodes)
        self.bind_inputs(all_nodes, {n.name for n in nodes})
        env: dict[str, list[Any]] = {}
        self.convert_nodes(nodes, env, "", None)
        values, names = [], []
        for name, idx in wanted:
            for i in range(len(env[name])) if idx is None else [idx]:
                value = self.lookup(env, f"{name}:{i}", f"output {name!r}")
                if not isinstance(value, Expr):
                    raise FrontendError(f"output {name!r}:{i} is a {type(value).__name__}, not a tensor")
                values.append(value)
                names.append(name if i == 0 else f"{name}:{i}")
        if not values:
            raise FrontendError("the TensorFlow graph has no outputs to import")
        return self.module(values, names)

    def check_supported(self, nodes: Sequence[Any]) -> None:
        problems: dict[str, list[str]] = {}
        details: dict[str, str] = {}

        def visit(nodes: Any, where: str) -> None:
            for n in nodes:
                if n.op in CONVERTERS or n.op in _SPECIAL:
                    continue
                problems.setdefault(n.op, []).append(where + n.name)
                if n.op in _V1_CONTROL_FLOW:
                    details[n.op] = ("TF1 control flow; Kiln imports functional While/If: freeze with "
                                     "lower_control_flow=False or use from_tf_function")
        visit(nodes, "")
        for fname, fdef in self.library.items():
            visit(fdef.node_def, f"{fname}/")
        if problems:
            raise unsupported_error([(op, names, details.get(op, "")) for op, names in problems.items()],
                                    framework="TensorFlow")

    def bind_inputs(self, nodes: Sequence[Any], needed: set[str]) -> None:
        """Placeholders (and the string constants DecodeJpeg reads) that the outputs need become
        graph inputs; ``shape`` may name any of them."""
        candidates: list[tuple[Any, str, tuple[int | None, ...] | None]] = []
        decoded = {_parse_ref(r)[0] for n in nodes if n.op == "DecodeJpeg" for r in n.input}
        for n in nodes:
            if n.op == "Placeholder" or (n.op == "PlaceholderWithDefault" and n.name in self.shape):
                dtype = dtype_name(n.attr["dtype"].type)
                sh = n.attr["shape"].shape if "shape" in n.attr else None
                declared = None if sh is None or sh.unknown_rank else tuple(
                    int(d.size) if d.size >= 0 else None for d in sh.dim)
                candidates.append((n, dtype, declared))
            elif n.op == "Const" and n.name in decoded and dtype_name(n.attr["dtype"].type) == "string":
                candidates.append((n, "string", None if n.name in self.shape else ()))
        names = [n.name for n, _, _ in candidates]
        for key in self.shape:
            if key not in names:
                raise FrontendError(f"a shape was given for {key!r}, which is not a graph input (the "
                                    f"graph's inputs are {', '.join(repr(n) for n in names) or 'none'})")
        unbound: list[tuple[str, tuple[int | str | None, ...] | None, tuple[int, ...]]] = []
        for n, dtype, declared in candidates:
            if n.name not in needed:
                continue
            if dtype == "string":
                dtype = "uint8"  # the decoded image fed in place of the encoded bytes (as TVM)
                if n.name not in self.shape:
                    raise FrontendError(f"string input {n.name!r} ({n.op}) needs its decoded shape in "
                                        f"shape=, e.g. shape={{{n.name!r}: (height, width, 3)}}")
                declared = None
            if n.name in self.shape:
                dims = check_input_shape(n.name, declared, self.shape[n.name])
            elif declared is None:
                unbound.append((n.name, None, ()))
                continue
            elif any(d is None for d in declared):
                unbound.append((n.name, declared, tuple(i for i, d in enumerate(declared) if d is None)))
                continue
            else:
                dims = tuple(int(d) for d in declared if d is not None)
            self.input_vars[n.name] = self.add_input(n.name, dims, dtype)
        if unbound:
            raise DynamicShapeError(unbound, frontend="from_tensorflow")

    def output_nodes(self, nodes: Sequence[Any], outputs: list[str] | None) -> list[tuple[str, int | None]]:
        """``(node, output index)`` per requested output (None: every output of a multi-output
        op). Default: the sink nodes, which no other node reads (as data or control input)."""
        by_name = {n.name: n for n in nodes}
        if outputs is None:
            consumed = {_parse_ref(r.lstrip("^"))[0] for n in nodes for r in n.input}
            outputs = [n.name for n in nodes if n.name not in consumed
                       and n.op not in ("NoOp", "Const", "Placeholder", "Assert")]
        refs: list[tuple[str, int | None]] = []
        for out in outputs:
            name, idx = _parse_ref(out)
            if name not in by_name:
                raise FrontendError(f"output {out!r} is not a node of the graph")
            refs.append((name, None if ":" not in out and by_name[name].op in MULTI_OUTPUT else idx))
        return refs

    # --- graphs, functions, nodes ----------------------------------------------------------
    def lookup(self, env: Mapping[str, list[Any]], ref: str, what: str) -> Any:
        name, idx = _parse_ref(ref)
        if name not in env:
            raise FrontendError(f"{what}: input {ref!r} is not produced by any node")
        outs = env[name]
        if idx >= len(outs) or outs[idx] is None:
            raise FrontendError(f"{what}: input {ref!r}: Kiln's converter does not produce output {idx}")
        return outs[idx]

    def convert_nodes(self, nodes: Sequence[Any], env: dict[str, list[Any]], scope: str,
                      feeds: Mapping[str, Any] | None) -> None:
        """Convert ``nodes`` (topologically ordered) into ``env``; ``feeds`` binds a function's
        argument placeholders (None: the main graph)."""
        for node in nodes:
            op = node.op
            if feeds is not None and op == "Placeholder":
                if node.name not in feeds:
                    raise FrontendError(f"function {scope!r}: argument {node.name!r} is not bound")
                env[node.name] = [feeds[node.name]]
                continue
            if feeds is None and node.name in self.input_vars:
                env[node.name] = [self.input_vars[node.name]]
                continue
            if op == "Const":
                env[node.name] = [self.const_node(node, scope)]
                continue
            inputs = [self.lookup(env, r, f"{op} node {node.name!r}") for r in node.input
                      if not r.startswith("^")]
            attrs = {k: attr_value(v) for k, v in node.attr.items()}
            ctx = NodeContext(self, node, node.name, inputs, attrs)
            try:
                outs = self.dispatch(ctx)
            except (UnsupportedOpError, FrontendError):
                raise
            except KilnError as e:
                raise FrontendError(f"{op} node {node.name!r}: {e}; input types "
                                    f"{ctx.describe_inputs()}") from e
            except Exception as e:
                raise FrontendError(f"{op} node {node.name!r} failed to convert: {type(e).__name__}: "
                                    f"{e}; input types {ctx.describe_inputs()}") from e
            env[node.name] = outs

    def dispatch(self, ctx: NodeContext) -> list[Any]:
        op = ctx.op
        if op in ("While", "StatelessWhile"):
            return self.convert_while(ctx)
        if op in ("If", "StatelessIf"):
            cond = ctx.const_input(0, "the If condition")
            branch = ctx.attr("then_branch") if bool(np.asarray(cond).reshape(-1)[0]) else ctx.attr(
                "else_branch")
            return self.call_function(branch, list(ctx.inputs[1:]), ctx.name)
        if op in ("PartitionedCall", "StatefulPartitionedCall"):
            return self.call_function(ctx.attr("f"), list(ctx.inputs), ctx.name)
        if op == "PlaceholderWithDefault":
            return [ctx.inputs[0]]
        convert: Callable[[NodeContext], Sequence[Any]] = CONVERTERS[op]
        raw = list(convert(ctx))
        exprs: list[Expr | None] = [o if isinstance(o, Expr) else None for o in raw]
        done = self.finish(exprs, ctx.name)
        return [d if isinstance(o, Expr) else o for o, d in zip(raw, done)]

    def const_node(self, node: Any, scope: str) -> Any:
        key = (scope, node.name)
        cached = self.const_cache.get(key)
        if cached is not None:
            return cached
        tensor_util = require("tensorflow.python.framework.tensor_util", "tensorflow", "from_tensorflow")
        if dtype_name(node.attr["dtype"].type) == "string":
            # an Assert message, say: fine while nothing computes with it (NodeContext.input refuses)
            return StringConstant(node.name)
        value = np.array(tensor_util.MakeNdarray(node.attr["value"].tensor))
        expr = self.constant(node.name, value) if value.ndim > 0 else self.register(Constant(value))
        self.const_cache[key] = expr
        return expr

    def function_graph(self, fname: str) -> tuple[Any, Any, dict[str, str], list[Any]]:
        if fname not in self.library:
            raise FrontendError(f"function {fname!r} is not in the graph's function library")
        if fname not in self.function_graphs:
            fdg = require("tensorflow.python.framework.function_def_to_graph", "tensorflow",
                          "from_tensorflow")
            gd, mapping = fdg.function_def_to_graph_def(self.library[fname])
            self.function_graphs[fname] = (gd, mapping)
        gd, mapping = self.function_graphs[fname]
        return self.library[fname], gd, mapping, _topological(list(gd.node))

    def call_function(self, fname: str, args: list[Any], caller: str) -> list[Any]:
        """Inline function ``fname`` on ``args``: its outputs."""
        fdef, _, mapping, nodes = self.function_graph(fname)
        arg_names = [a.name for a in fdef.signature.input_arg]
        if len(arg_names) != len(args):
            raise FrontendError(f"node {caller!r} calls {fname!r} with {len(args)} arguments; it takes "
                                f"{len(arg_names)}")
        env: dict[str, list[Any]] = {}
        self.convert_nodes(nodes, env, fname, dict(zip(arg_names, args)))
        outs = []
        for o in fdef.signature.output_arg:
            ref = fdef.ret[o.name]
            outs.append(self.lookup(env, mapping.get(ref, ref), f"function {fname!r} output {o.name!r}"))
        return outs

    def convert_while(self, ctx: NodeContext) -> list[Any]:
        """Unroll a functional While loop whose condition is known at import."""
        cond_fn, body_fn = ctx.attr("cond"), ctx.attr("body")
        loop = list(ctx.inputs)
        for _ in range(MAX_UNROLL + 1):
            c = self.call_function(cond_fn, loop, ctx.name)[0]
            value = self.value_of(c) if isinstance(c, Expr) else None
            if value is None:
                raise unsupported_error(
                    [(ctx.op, [ctx.name], "the loop condition depends on graph inputs; Kiln unrolls "
                      "While loops whose trip count is known at import")], framework="TensorFlow")
            if not bool(np.asarray(value).reshape(-1)[0]):
                return loop
            loop = self.call_function(body_fn, loop, ctx.name)
        raise FrontendError(f"While node {ctx.name!r} runs more than {MAX_UNROLL} iterations; Kiln "
                            "unrolls loops at import")

