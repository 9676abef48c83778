"""ONNX importer: an ONNX model to a relay :class:`~kiln.ir.IRModule` plus a params dict.

The import runs in three steps:

1. **Load and check**: read the file (a corrupt or truncated one is a :class:`FrontendError`),
   list every operator Kiln cannot convert (with node names, attribute values it rejects and the
   opset) in one :class:`UnsupportedOpError`, and run ``onnx.checker``.
2. **Bind inputs**: graph inputs become variables with static shapes (symbolic dims must be bound
   with ``shape=``), initializers and Constant nodes become constants (``freeze_params=True``) or
   named params.
3. **Convert** the nodes in order with the converters of the ``onnx_*`` family modules. After each
   node the importer stamps the node's name on every new call (``Call.source_names``) and folds
   the outputs whose inputs are all constant, so shape arithmetic (Shape -> Gather -> Concat ->
   Reshape, ConstantOfShape, Range, ...) becomes constants. ``If`` with a constant condition is
   inlined; ops without a converter that ONNX defines as functions are expanded from their
   function body.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

import kiln.op as K
from kiln.errors import (
    DynamicShapeError,
    FrontendError,
    KilnError,
    KilnTypeError,
    UnknownInputError,
    UnsupportedOpError,
)
from kiln.frontend import (  # noqa: F401  (importing a family registers its converters)
    onnx_contrib,
    onnx_conv,
    onnx_deform,
    onnx_image,
    onnx_math,
    onnx_nn,
    onnx_quant,
    onnx_reduce,
    onnx_rnn,
    onnx_sequence,
    onnx_signal,
    onnx_tensor,
)
from kiln.frontend.common import ImportState, check_input_shape
from kiln.frontend.onnx_common import (
    CONVERTERS,
    DynamicValueError,
    InputDependentError,
    NodeContext,
    const,
    onnx_dtype,
    resolve_attributes,
    tensor_to_array,
)
from kiln.frontend.onnx_model import (
    LOOP_DETAIL,
    check_model,
    converter_key,
    domain_versions,
    find_unsupported,
    function_opset,
    load_model,
    model_opset,
    node_name,
    schema_function,
    sparse_to_dense,
)
from kiln.ir.expr import Constant, Expr, Function, TupleWrapper, Var
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, np_dtype
from kiln.op.dyn import SpecializedImport, specialized_import

__all__ = ["from_onnx", "supported_ops"]

# Most iterations of a Loop or steps of a Scan unrolled at import.
MAX_UNROLL = 4096



def supported_ops() -> list[str]:
    """ONNX op types (default domain) with a converter; others may still import via their
    ONNX function definition."""
    return sorted({*CONVERTERS, "Constant", "If", "Loop", "Scan"})


def from_onnx(
    model: onnx.ModelProto | str | os.PathLike[str] | bytes,
    shape: Mapping[str, Sequence[int]] | None = None,
    dtype: str | Mapping[str, str] = "float32",
    opset: int | None = None,
    freeze_params: bool = True,
    convert_config: Mapping[str, Any] | None = None,
    export_node_renamed_model_path: str | os.PathLike[str] | None = None,
    const_inputs: Mapping[str, Any] | None = None,
) -> tuple[IRModule, dict[str, Any]]:
    """Import an ONNX model.

    Parameters
    ----------
    model : onnx.ModelProto, path or bytes
        The model, or the path of an ``.onnx`` file, or its serialized bytes.
    shape : dict of str to tuple of int, optional
        Static shapes of graph inputs; required for every input with a symbolic or unknown dim.
        A shape must keep the rank and the static dims the model declares
        (:class:`~kiln.errors.InputShapeError` names the input and dim otherwise).
    dtype : str or dict of str to str
        Dtype of inputs whose element type the model leaves undefined (a dict overrides per
        input, as TVM does).
    opset : int, optional
        Convert as this default-domain opset instead of the model's.
    freeze_params : bool
        True: initializers and Constant nodes are embedded as constants and ``params`` is empty.
        False: they become function parameters named after them, returned in ``params``.
    convert_config : dict, optional
        TVM's conversion options. ``use_nt_batch_matmul`` (default True): an N-d MatMul becomes
        ``transpose(b)`` + ``nn.batch_matmul(transpose_b=True)`` (TVM's preferred NT form) rather
        than ``nn.batch_matmul(transpose_b=False)``; both compute the same values.
    export_node_renamed_model_path : str or path, optional
        A folder to save the model in (``tvm_exported_model_<graph name>.onnx``) with its unnamed
        nodes named as the import names them (``<OpType>_<n>``, counted per op type).
    const_inputs : dict of str to array-like, optional
        Graph inputs to bind to constant values (they disappear from the function's parameters),
        so that graphs whose control flow or shapes depend on them import statically.

    Returns
    -------
    mod : IRModule
        ``main`` takes the graph inputs (then the used params) and returns the graph outputs
        (a tuple when there are several); ``mod.attrs["output_names"]`` holds their ONNX names.
        When shapes or an ``If`` depend on the values of inputs not in ``const_inputs`` and the
        model declares static output types, ``main`` is one ``dyn.specialized_import`` call
        that the executors (``relay.create_executor``, the VM) import and build again per set
        of those values; ``relay.build`` refuses it (:mod:`kiln.op.dyn`).
    params : dict of str to NDArray
        The params ``main`` takes besides the inputs (empty when ``freeze_params``, and for a
        value-specialized ``main``, whose initializers stay in the model).

    Examples
    --------
    >>> mod, params = from_onnx("resnet18.onnx", shape={"data": (1, 3, 224, 224)})  # doctest: +SKIP
    """
    proto = load_model(model)
    config = _convert_config(convert_config)
    if export_node_renamed_model_path is not None:
        proto = _export_renamed(proto, export_node_renamed_model_path)
    importer = _Importer(proto, shape or {}, dtype, opset, freeze_params, const_inputs or {})
    importer.convert_config = config
    try:
        return importer.run()
    except (DynamicValueError, InputDependentError) as err:
        deferred = _value_specialized(proto, shape or {}, dtype, opset, config, const_inputs or {},
                                      err.inputs)
        if deferred is None:
            raise
        return deferred, {}


def _value_specialized(proto: onnx.ModelProto, shape: Mapping[str, Sequence[int]],
                       dtype: str | Mapping[str, str], opset: int | None,
                       config: dict[str, Any], const_inputs: Mapping[str, Any],
                       value_inputs: list[str]) -> IRModule | None:
    """``main`` as one ``dyn.specialized_import`` of the model, typed by its declared outputs,
    for a model whose shapes depend on the values of ``value_inputs``; None when an output's
    declared type is not static (Kiln's types have no ``?`` dims).

    Its executors import the model again with those inputs bound (``const_inputs``) for each
    distinct set of their values; initializers stay constants in those imports.
    """
    out_types = []
    for vi in proto.graph.output:
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        if vi.type.WhichOneof("value") != "tensor_type" or not tt.elem_type \
                or not tt.HasField("shape") or min(dims, default=0) < 0:
            return None
        out_types.append(TensorType(tuple(dims), onnx_dtype(tt.elem_type, f"graph output {vi.name!r}")))
    binder = _Importer(proto, shape, dtype, opset, True, const_inputs)
    binder.bind_inputs(proto.graph, _Scope())
    names = [v.name_hint for v in binder.inputs]
    digest = hashlib.sha256(proto.SerializeToString(deterministic=True))
    digest.update(repr((sorted(shape.items()), dtype, opset, sorted(config.items()),
                        sorted((k, np.asarray(v).tobytes()) for k, v in const_inputs.items()))).encode())
    label = f"onnx model {proto.graph.name!r} (sha256 {digest.hexdigest()[:8]})"

    def specialize(values: Mapping[str, np.ndarray], bound: frozenset[str]
                   ) -> tuple[IRModule, frozenset[str]]:
        while True:
            importer = _Importer(proto, shape, dtype, opset, True,
                                 {**const_inputs, **{n: values[n] for n in bound}})
            importer.convert_config = config
            try:
                return importer.run()[0], bound
            except (DynamicValueError, InputDependentError) as err:
                more = frozenset(err.inputs) - bound
                if not more or not more <= set(values):
                    raise
                bound |= more

    model = SpecializedImport(digest.hexdigest(), label, specialize)
    call = specialized_import(list(binder.inputs), model, names,
                              [n for n in value_inputs if n in names], out_types)
    attrs = {"output_names": tuple(vi.name for vi in proto.graph.output)}
    return IRModule({"main": Function(list(binder.inputs), call)}, attrs=attrs)


# TVM's ``convert_config`` keys and their defaults.
CONVERT_CONFIG_DEFAULTS: dict[str, Any] = {"use_nt_batch_matmul": True}


def _convert_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(CONVERT_CONFIG_DEFAULTS)
    for key, value in (config or {}).items():
        if key not in CONVERT_CONFIG_DEFAULTS:
            raise FrontendError(f"unknown convert_config key {key!r}; the ONNX importer knows "
                                f"{', '.join(sorted(CONVERT_CONFIG_DEFAULTS))}")
        out[key] = value
    return out


def _export_renamed(proto: onnx.ModelProto, folder: str | os.PathLike[str]) -> onnx.ModelProto:
    """A copy of ``proto`` whose unnamed nodes are named ``<OpType>_<n>`` (``n`` counts per op
    type, as TVM names them), also saved in ``folder``."""
    renamed = onnx.ModelProto()
    renamed.CopyFrom(proto)
    counts: dict[str, int] = {}
    for node in renamed.graph.node:
        if not node.name:
            counts[node.op_type] = counts.get(node.op_type, -1) + 1
            node.name = f"{node.op_type}_{counts[node.op_type]}"
    os.makedirs(folder, exist_ok=True)
    onnx.save(renamed, os.path.join(os.fspath(folder), f"tvm_exported_model_{renamed.graph.name}.onnx"))
    return renamed


def _read_names(graph: onnx.GraphProto) -> set[str]:
    """Every value name a node of ``graph`` (or of its subgraphs) reads, and the graph outputs."""
    names = {o.name for o in graph.output}
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            subgraphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for sub in subgraphs:
                names |= _read_names(sub)
    return names


class _Scope:
    """Names visible while converting one graph: its own values, then its parent's."""

    def __init__(self, parent: _Scope | None = None):
        self.parent = parent
        self.values: dict[str, Expr] = {}

    def lookup(self, name: str) -> Expr | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            scope = scope.parent
        return None


class _Importer(ImportState):
    """One ONNX import: the state shared by every node conversion."""

    def __init__(self, proto: onnx.ModelProto, shape: Mapping[str, Sequence[int]],
                 dtype: str | Mapping[str, str], opset: int | None, freeze_params: bool,
                 const_inputs: Mapping[str, Any]):
        super().__init__(freeze_params)
        self.proto = proto
        self.shape = {k: tuple(int(d) for d in v) for k, v in shape.items()}
        self.dtype = dtype
        self.opset = model_opset(proto, opset)
        self.const_inputs = dict(const_inputs)
        self.functions = {(f.domain, f.name): f for f in proto.functions}
        self.domains = domain_versions(proto)
        self.checker_note = ""
        self.convert_config: dict[str, Any] = dict(CONVERT_CONFIG_DEFAULTS)

    # --- entry -------------------------------------------------------------------------------
    def run(self) -> tuple[IRModule, dict[str, Any]]:
        graph = self.proto.graph
        self.checker_note = check_model(self.proto)
        unsupported = find_unsupported(self.proto, self.opset, self.functions)
        if unsupported is not None:
            raise unsupported
        scope = _Scope()
        self.bind_inputs(graph, scope)
        outputs = self.convert_graph(graph, scope, prefix="")
        # the graph's output names travel with the module through relay.build (graph JSON,
        # exported metadata, GraphModule.get_output(name))
        return self.module(outputs, [vi.name for vi in graph.output])

    # --- inputs, initializers, constants -----------------------------------------------------
    def bind_inputs(self, graph: onnx.GraphProto, scope: _Scope) -> None:
        initializers = {t.name for t in graph.initializer} | {s.values.name for s in graph.sparse_initializer}
        names = [vi.name for vi in graph.input if vi.name not in initializers]
        dtype_keys = list(self.dtype) if isinstance(self.dtype, Mapping) else []
        for what, keys in (("a shape was given for", self.shape),
                           ("const_inputs names", self.const_inputs), ("dtype names", dtype_keys)):
            for key in keys:
                if key not in names:
                    raise UnknownInputError(f"{what} {key!r}, which is not a graph input (the graph's "
                                            f"inputs are {', '.join(repr(n) for n in names) or 'none'})")
        unbound: list[tuple[str, tuple[int | str | None, ...] | None, tuple[int, ...]]] = []
        for vi in graph.input:
            if vi.name in initializers:
                continue
            ty, problem = self.input_type(vi)
            if problem is not None:
                unbound.append(problem)
                continue
            assert ty is not None
            self.used_names.add(vi.name)
            if vi.name in self.const_inputs:
                value = np.asarray(self.const_inputs[vi.name], dtype=np_dtype(ty.dtype))
                if value.shape != ty.shape and ty.shape:
                    value = value.reshape(ty.shape) if value.size == ty.size else value
                scope.values[vi.name] = self.register(const(value))
                continue
            v = Var(vi.name, ty)
            self.inputs.append(v)
            scope.values[vi.name] = self.register(v)
        if unbound:
            raise DynamicShapeError(unbound)

    def _shape_cannot_conflict(self, name: str, declared: tuple[int | str | None, ...],
                               given: tuple[int, ...]) -> bool:
        """Whether a given shape that differs from the declared one is still safe to take: both
        hold one element (a scalar fed as ``(1,)``, which onnxruntime accepts too), or no node
        reads the input."""
        static = [d for d in declared if isinstance(d, int)]
        if len(static) == len(declared) and \
                int(np.prod(static, dtype=np.int64)) == 1 == int(np.prod(given, dtype=np.int64)):
            return True
        return name not in _read_names(self.proto.graph)

    def input_type(self, vi: onnx.ValueInfoProto) -> tuple[
            TensorType | None, tuple[str, tuple[int | str | None, ...] | None, tuple[int, ...]] | None]:
        """The static type of graph input ``vi``, or (name, declared dims, unbound dim indices).

        A shape given with ``shape=`` must keep the model's rank and its static dims; only
        symbolic (``dim_param``) and unknown dims take the given sizes. Exceptions, where the
        given shape cannot contradict the model: one element given for a one-element input,
        and any shape for an input no node reads.
        """
        kind = vi.type.WhichOneof("value")
        tt = vi.type.tensor_type
        if kind == "optional_type" and vi.type.optional_type.elem_type.HasField("tensor_type"):
            tt = vi.type.optional_type.elem_type.tensor_type  # fed with a value: that tensor
        elif kind not in (None, "tensor_type"):
            raise FrontendError(f"graph input {vi.name!r} is a {kind}; Kiln takes tensor inputs "
                                "(or optional tensors given a value) only")
        if isinstance(self.dtype, Mapping) and vi.name in self.dtype:
            dtype = str(self.dtype[vi.name])
        elif tt.elem_type:
            dtype = onnx_dtype(tt.elem_type, f"graph input {vi.name!r}")
        else:
            dtype = self.dtype if isinstance(self.dtype, str) else "float32"
        declared = None if not tt.HasField("shape") else tuple(
            int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0
            else (d.dim_param or None) for d in tt.shape.dim)
        if vi.name in self.shape:
            given = tuple(int(d) for d in self.shape[vi.name])
            if declared is not None and self._shape_cannot_conflict(vi.name, declared, given):
                declared = None  # taken as given, as TVM takes every given shape
            return TensorType(check_input_shape(vi.name, declared, given), dtype), None
        if vi.name in self.const_inputs:
            return TensorType(np.shape(self.const_inputs[vi.name]), dtype), None
        if declared is None:
            return None, (vi.name, None, ())
        unknown = tuple(i for i, d in enumerate(declared) if not isinstance(d, int))
        if unknown:
            return None, (vi.name, declared, unknown)
        return TensorType(tuple(d for d in declared if isinstance(d, int)), dtype), None

    def bind_initializers(self, graph: onnx.GraphProto, scope: _Scope) -> None:
        for t in graph.initializer:
            if not t.name:
                raise FrontendError("an initializer has no name; the model is malformed")
            value = tensor_to_array(t, f"initializer {t.name!r}")
            scope.values[t.name] = self.constant(t.name, value)
        for s in graph.sparse_initializer:
            value = sparse_to_dense(s, f"sparse initializer {s.values.name!r}")
            scope.values[s.values.name] = self.constant(s.values.name, value)

    # --- graphs and nodes ----------------------------------------------------------------------
    def convert_graph(self, graph: onnx.GraphProto, scope: _Scope, prefix: str,
                      opset: int | None = None, source: str | None = None,
                      caller_attrs: dict[str, onnx.AttributeProto] | None = None,
                      bind: bool = True) -> list[Expr]:
        """Convert every node of ``graph`` into ``scope``; the graph's outputs. ``bind=False``:
        its initializers are already in ``scope`` (a Scan body converted once per step)."""
        opset = self.opset if opset is None else opset
        if bind:
            self.bind_initializers(graph, scope)
        for idx, node in enumerate(graph.node):
            name = node_name(node, idx, prefix)
            self.convert_node(node, scope, name, opset, source or name, caller_attrs)
        outputs = []
        for vi in graph.output:
            value = scope.lookup(vi.name)
            if value is None:
                raise FrontendError(f"graph output {vi.name!r} is not produced by any node, "
                                    "initializer or input")
            outputs.append(value)
        return outputs

    def convert_node(self, node: onnx.NodeProto, scope: _Scope, name: str, opset: int, source: str,
                     caller_attrs: dict[str, onnx.AttributeProto] | None) -> None:
        inputs: list[Expr | None] = []
        for i, iname in enumerate(node.input):
            if not iname:
                inputs.append(None)
                continue
            value = scope.lookup(iname)
            if value is None:
                raise FrontendError(f"{node.op_type} node {name!r}: input {i} ({iname!r}) is not "
                                    "produced by any earlier node, initializer or graph input")
            inputs.append(value)
        ctx: NodeContext | None = None
        try:
            ctx = NodeContext(self, node, name, opset, resolve_attributes(node, caller_attrs), inputs,
                              in_function=caller_attrs is not None)
            outs = self.dispatch(ctx, scope, source)
            outs = self.finish(outs, source)
        except (UnsupportedOpError, FrontendError):
            raise
        except (KilnTypeError, KilnError) as e:
            detail = ctx.describe_inputs() if ctx is not None else ""
            raise FrontendError(f"{node.op_type} node {name!r} (opset {opset}): {e}; input types "
                                f"{detail}") from e
        except Exception as e:
            detail = ctx.describe_inputs() if ctx is not None else ""
            note = f" (the model also fails onnx.checker: {self.checker_note})" if self.checker_note else ""
            raise FrontendError(f"{node.op_type} node {name!r} (opset {opset}) failed to convert: "
                                f"{type(e).__name__}: {e}; input types {detail}{note}") from e
        for i, oname in enumerate(node.output):
            if not oname:
                continue
            if i >= len(outs) or outs[i] is None:
                raise FrontendError(f"{node.op_type} node {name!r}: output {i} ({oname!r}) is "
                                    "requested but Kiln's converter does not produce it")
            scope.values[oname] = outs[i]  # type: ignore[assignment]

    def dispatch(self, ctx: NodeContext, scope: _Scope, source: str) -> list[Expr | None]:
        node = ctx.node
        key = (node.domain, node.op_type)
        if key in self.functions:
            return self.expand_function(self.functions[key], ctx, source)
        if node.op_type == "Constant":
            return [self.constant_node(ctx)]
        if node.op_type == "If":
            return self.convert_if(ctx, scope, source)
        if node.op_type == "Scan":
            return self.convert_scan(ctx, scope, source)
        if node.op_type == "Loop":
            return self.convert_loop(ctx, scope)
        spec = CONVERTERS.get(converter_key(node))
        if spec is not None:
            if spec.check is not None:
                reason = spec.check(ctx.attrs, ctx.opset)
                if reason:
                    raise ctx.unsupported(reason)
            result = spec.fn(ctx)
            if isinstance(result, TupleWrapper):
                return list(result)
            if isinstance(result, Expr):
                return [result]
            return list(result)
        body = schema_function(ctx, self.domains.get(node.domain))
        if body is None:
            raise ctx.unsupported("no converter and no ONNX function definition")
        return self.expand_function(body, ctx, source)

    def constant_node(self, ctx: NodeContext) -> Expr:
        attrs = ctx.attrs
        if "value" in attrs:
            value = attrs["value"]
        elif "sparse_value" in attrs:
            value = attrs["sparse_value"]
        elif "value_float" in attrs:
            value = np.array(attrs["value_float"], dtype=np.float32)
        elif "value_floats" in attrs:
            value = np.array(attrs["value_floats"], dtype=np.float32)
        elif "value_int" in attrs:
            value = np.array(attrs["value_int"], dtype=np.int64)
        elif "value_ints" in attrs:
            value = np.array(attrs["value_ints"], dtype=np.int64)
        else:
            raise ctx.unsupported(f"Constant with attribute(s) {', '.join(attrs) or 'none'} "
                                  "(string constants are not supported)")
        if isinstance(value, onnx.SparseTensorProto):
            value = sparse_to_dense(value, f"Constant node {ctx.name!r}")
        value = np.array(value, order="C")
        if ctx.in_function:  # a function body's constants are not model weights: embed them
            return self.register(Constant(value))
        return self.constant(ctx.node.output[0], value)

    def convert_if(self, ctx: NodeContext, scope: _Scope, source: str) -> list[Expr | None]:
        cond = ctx.value(0)
        if cond is None:
            selected, why = self.select_if(ctx, scope)
            if selected is not None:
                return selected
            names = self.inputs_of(ctx.input(0))
            raise InputDependentError(
                ctx.op_type, ctx.name, "If whose condition depends on graph input(s) "
                + ", ".join(repr(n) for n in names) + f" and whose branches {why}; only such an If "
                "with a condition known at import is inlined (bind those inputs with const_inputs=)",
                ctx.opset, names)
        branch = "then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"
        graph = ctx.attrs[branch]
        outputs = self.convert_graph(graph, _Scope(scope), f"{ctx.name}/{branch}/", ctx.opset)
        if len(outputs) != ctx.num_outputs:
            raise ctx.error(f"{branch} has {len(outputs)} outputs, the node declares {ctx.num_outputs}")
        return list(outputs)

    def select_if(self, ctx: NodeContext, scope: _Scope) -> tuple[list[Expr | None] | None, str]:
        """An If whose condition is known only at run time, as ``where(cond, then, else)`` per
        output when both branches import with the same static tensor types (branches are pure,
        so computing both and selecting is exact); else (None, why not)."""
        cond = ctx.input(0)
        if int(np.prod(ctx.shape(cond), dtype=np.int64)) != 1:
            return None, "have a condition of more than one element"
        branches = []
        for branch in ("then_branch", "else_branch"):
            try:
                outs = self.convert_graph(ctx.attrs[branch], _Scope(scope), f"{ctx.name}/{branch}/",
                                          ctx.opset)
            except (FrontendError, KilnTypeError) as e:
                return None, f"cannot both be imported ({branch}: {e})"
            if len(outs) != ctx.num_outputs:
                raise ctx.error(f"{branch} has {len(outs)} outputs, the node declares {ctx.num_outputs}")
            branches.append(outs)
        flag = K.reshape(cond, newshape=()) if ctx.shape(cond) != () else cond
        if ctx.dtype(cond) != "bool":
            flag = K.cast(flag, "bool")
        selected: list[Expr | None] = []
        for then_out, else_out in zip(*branches):
            then_ty, else_ty = self.type_of(then_out), self.type_of(else_out)
            if not (isinstance(then_ty, TensorType) and then_ty == else_ty):
                return None, "produce values of different types"
            selected.append(K.where(flag, then_out, else_out))
        return selected, ""

    def convert_scan(self, ctx: NodeContext, scope: _Scope, source: str) -> list[Expr | None]:
        """Unroll a Scan over its (static) scan length: one copy of the body per step.

        Opset 9 and later: inputs are ``N`` initial states then ``M`` scan inputs, each sliced
        along its ``scan_input_axes`` entry (from the end for direction 1); the body maps
        ``(states, slices)`` to ``(states, scan output slices)``, which are stacked along
        ``scan_output_axes`` (in reverse order for direction 1). Opset 8 adds a leading batch
        axis to every input and output (scan axis 1) and an optional ``sequence_lens``, which
        must be absent: each batch row is scanned on its own and the rows are stacked again.
        """
        body: onnx.GraphProto = ctx.attrs["body"]
        m = int(ctx.attrs["num_scan_inputs"])
        batched = ctx.opset < 9
        given = list(ctx.inputs)
        if batched:
            if given and given[0] is not None:
                raise ctx.unsupported("Scan-8 with sequence_lens (per-row lengths are dynamic)")
            given = given[1:]
        n = len(given) - m
        k = len(body.output) - n
        if n < 0 or k < 0 or len(body.input) != n + m or any(x is None for x in given):
            raise ctx.error(f"Scan with {len(given)} inputs, num_scan_inputs={m} and a body of "
                            f"{len(body.input)} inputs and {len(body.output)} outputs is malformed")
        inputs = [x for x in given if x is not None]  # all of them (checked above)
        body_scope = _Scope(scope)
        self.bind_initializers(body, body_scope)

        def scan(states: list[Expr], scans: list[Expr], prefix: str) -> list[Expr]:
            in_axes = [a + self._rank(x) if a < 0 else a for a, x in zip(
                ctx.attrs.get("scan_input_axes", [0] * m), scans)]
            in_dirs = ctx.attrs.get("scan_input_directions", [0] * m)
            lengths = {self.shape_of(x)[a] for x, a in zip(scans, in_axes)}
            if len(lengths) != 1 or 0 in lengths:
                raise ctx.error(f"scan inputs have scan lengths {sorted(lengths)}; Kiln unrolls "
                                "one common, non-zero length")
            steps = lengths.pop()
            collected: list[list[Expr]] = [[] for _ in range(k)]
            for t in range(steps):
                slices = [K.take(x, Constant(np.array(steps - 1 - t if d else t, np.int64)), axis=a)
                          for x, a, d in zip(scans, in_axes, in_dirs)]
                step_scope = _Scope(body_scope)
                for vi, value in zip(body.input, [*states, *self.finish(slices, source)]):
                    assert value is not None  # finish keeps every (present) slice
                    step_scope.values[vi.name] = value
                outs = self.convert_graph(body, step_scope, f"{prefix}step{t}/", ctx.opset,
                                          bind=False)
                states = outs[:n]
                for j in range(k):
                    collected[j].append(outs[n + j])
            out_axes = ctx.attrs.get("scan_output_axes", [0] * k)
            out_dirs = ctx.attrs.get("scan_output_directions", [0] * k)
            stacked = []
            for parts, a, d in zip(collected, out_axes, out_dirs):
                parts = parts[::-1] if d else parts
                stacked.append(K.stack(parts, axis=a + self._rank(parts[0]) + 1 if a < 0 else a))
            return [*states, *stacked]

        if not batched:
            return list(scan(inputs[:n], inputs[n:], f"{ctx.name}/"))
        rows = {self.shape_of(x)[0] for x in inputs}
        if len(rows) != 1:
            raise ctx.error(f"Scan-8 inputs have batch sizes {sorted(rows)}")
        per_row = [scan([K.take(x, Constant(np.array(b, np.int64)), axis=0) for x in inputs[:n]],
                        [K.take(x, Constant(np.array(b, np.int64)), axis=0) for x in inputs[n:]],
                        f"{ctx.name}/row{b}/") for b in range(rows.pop())]
        return [K.stack([row[j] for row in per_row], axis=0) for j in range(n + k)]

    def convert_loop(self, ctx: NodeContext, scope: _Scope) -> list[Expr | None]:
        """Unroll a Loop whose trip count and every condition are known at import.

        Each iteration converts the body with the iteration number and the condition as
        constants; the loop stops after ``M`` iterations or after the first iteration whose
        ``cond`` output is false, and its scan outputs are stacked along a new first axis.
        A trip count or condition that depends on graph inputs cannot be unrolled: bind those
        inputs with ``const_inputs=`` or the import fails with the reason.
        """
        body: onnx.GraphProto = ctx.attrs["body"]
        trip = ctx.value(0) if ctx.has_input(0) else None
        cond = ctx.value(1) if ctx.has_input(1) else np.array(True)
        if (ctx.has_input(0) and trip is None) or cond is None:
            unknown = [ctx.input(i) for i in (0, 1) if ctx.has_input(i) and ctx.value(i) is None]
            names = sorted({n for x in unknown for n in self.inputs_of(x)})
            raise InputDependentError(
                ctx.op_type, ctx.name, "Loop whose trip count or condition depends on graph "
                "input(s) " + ", ".join(repr(n) for n in names) + "; " + LOOP_DETAIL,
                ctx.opset, names)
        limit = int(np.asarray(trip).reshape(-1)[0]) if trip is not None else None
        if limit is not None and limit > MAX_UNROLL:
            raise ctx.unsupported(f"Loop of {limit} iterations (Kiln unrolls at most {MAX_UNROLL})")
        carried = list(ctx.inputs[2:])
        n = len(carried)
        k = len(body.output) - 1 - n
        if k < 0 or len(body.input) != 2 + n or any(x is None for x in carried):
            raise ctx.error(f"Loop with {n} carried values and a body of {len(body.input)} inputs "
                            f"and {len(body.output)} outputs is malformed")
        states = [x for x in carried if x is not None]  # all of them (checked above)
        body_scope = _Scope(scope)
        self.bind_initializers(body, body_scope)
        collected: list[list[Expr]] = [[] for _ in range(k)]
        i = 0
        while bool(np.asarray(cond).reshape(-1)[0]) and (limit is None or i < limit):
            if i >= MAX_UNROLL:
                raise ctx.unsupported(f"Loop runs more than {MAX_UNROLL} iterations")
            step_scope = _Scope(body_scope)
            for vi, value in zip(body.input, [Constant(np.array(i, np.int64)),
                                              Constant(np.asarray(cond, np.bool_).reshape(())),
                                              *states]):
                step_scope.values[vi.name] = value
            outs = self.convert_graph(body, step_scope, f"{ctx.name}/iter{i}/", ctx.opset,
                                      bind=False)
            cond = self.value_of(outs[0])
            if cond is None:
                names = self.inputs_of(outs[0])
                raise InputDependentError(
                    ctx.op_type, ctx.name, f"Loop whose condition (iteration {i}) depends on "
                    "graph input(s) " + ", ".join(repr(n) for n in names) + "; " + LOOP_DETAIL,
                    ctx.opset, names)
            states = outs[1:1 + n]
            for j in range(k):
                collected[j].append(outs[1 + n + j])
            i += 1
        if i == 0 and any(ctx.wants_output(n + j) for j in range(k)):
            raise ctx.unsupported("Loop of zero iterations with scan outputs (their shape is unknown)")
        return [*states, *(K.stack(parts, axis=0) if parts else None for parts in collected)]

    def _rank(self, expr: Expr) -> int:
        return len(self.shape_of(expr))

    # --- function expansion ------------------------------------------------------------------
    def expand_function(self, fn: onnx.FunctionProto, ctx: NodeContext,
                        source: str) -> list[Expr | None]:
        """Convert a function body in place of the node calling it."""
        scope = _Scope()
        for formal, actual in zip(fn.input, ctx.inputs):
            if actual is not None:
                scope.values[formal] = actual
        attrs = {a.name: a for a in fn.attribute_proto}
        attrs.update(ctx.raw_attrs)
        opset = function_opset(fn, ctx.opset)
        graph = onnx.GraphProto(node=fn.node)
        for idx, node in enumerate(graph.node):
            name = node_name(node, idx, f"{ctx.name}/")
            self.convert_node(node, scope, name, opset, source, attrs)
        return [scope.lookup(o) for o in fn.output]

