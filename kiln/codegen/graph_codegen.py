"""Graph codegen: the fused ``main`` function to TVM's graph JSON, params and kernel table.

This mirrors TVM's ``GraphExecutorCodegen`` (plus the kernel naming of its TE compiler), so a
Kiln build writes the graph TVM would:

- one ``null`` node per parameter of ``main`` (named after it), in parameter order;
- constants become params ``p0, p1, ...`` in the order the graph first uses them;
- one ``tvm_op`` node per call of a fused function, in execution order (arguments left to
  right), with TVM's attributes (``num_outputs``, ``num_inputs``, ``flatten_data``,
  ``func_name``), the anchor's ``*layout*`` attributes, a ``hash`` of the fused function, and
  Kiln's ``source_names`` (comma-separated provenance);
- kernels are named ``tvmgen_<mod_name>_fused_<op>_<op>...`` (dots become ``_``; names over 80
  characters are cut and suffixed with a hash as TVM does) and deduplicated with ``_1``, ``_2``;
  structurally equal fused functions share one kernel, as TVM's compile cache does; node names
  are the kernel names, deduplicated again;
- reshape-only functions become ``__nop`` nodes named ``reshape_nop`` aliasing their input;
- tuple results become multi-output nodes, tuple arguments are flattened, and ``heads`` list the
  outputs of ``main`` (several for a tuple result);
- the per-entry ``shape`` / ``dltype`` / ``storage_id`` / ``device_index`` attributes come from the
  types and the :mod:`~kiln.codegen.memory_plan`;
- output names (the ONNX importer's ``mod.attrs["output_names"]``), when given, go in the
  graph's top-level ``metadata`` (``{"output_names": [...]}``, one per head), which TVM's reader
  tolerates.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kiln.codegen.memory_plan import MemoryPlan, flat_tensor_types, plan_memory
from kiln.errors import KilnError
from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, Op, Tuple, TupleGetItem, Var
from kiln.ir.structural import structural_equal, structural_hash
from kiln.ir.types import TensorType, TupleType, Type
from kiln.ir.visitor import post_order
from kiln.runtime.graph_json import GraphJSON, Node, NodeEntry

__all__ = [
    "KernelNamer",
    "LoweredGraph",
    "MAX_FUNC_NAME_LENGTH",
    "NameSupply",
    "fused_name",
    "graph_codegen",
    "head_names",
    "std_string_hash",
]

# TVM's kMaxFuncNameLength: longer fused names are cut and suffixed with their hash.
MAX_FUNC_NAME_LENGTH = 80

_MASK64 = (1 << 64) - 1


def std_string_hash(text: str) -> int:
    """``std::hash<std::string>`` of libstdc++ on 64-bit Linux (``_Hash_bytes``, MurmurHash64A-like).

    TVM appends it, in hex, to fused function names that are too long.
    """
    data = text.encode()
    mul = (0xC6A4A793 << 32) + 0x5BD1E995

    def shift_mix(v: int) -> int:
        return v ^ (v >> 47)

    n = len(data)
    h = (0xC70F6907 ^ (n * mul)) & _MASK64
    aligned = n & ~7
    for i in range(0, aligned, 8):
        word = int.from_bytes(data[i:i + 8], "little")
        h ^= (shift_mix((word * mul) & _MASK64) * mul) & _MASK64
        h = (h * mul) & _MASK64
    if n & 7:
        h ^= int.from_bytes(data[aligned:], "little")
        h = (h * mul) & _MASK64
    h = (shift_mix(h) * mul) & _MASK64
    return shift_mix(h)


def fused_name(fn: Function) -> str:
    """TVM's readable name of a fused function: ``fused_`` + its ops in evaluation order."""
    ops = [n.op.name for n in post_order(fn.body) if isinstance(n, Call) and isinstance(n.op, Op)]
    name = "_".join(["fused", *ops])
    if len(name) > MAX_FUNC_NAME_LENGTH:
        name = f"{name[:MAX_FUNC_NAME_LENGTH]}_{std_string_hash(name):x}_"
    return name


class NameSupply:
    """Unique names with numeric suffixes (TVM's ``NameSupply``: ``x``, ``x_1``, ``x_2``, ...).

    Parameters
    ----------
    prefix : str
        Prepended as ``prefix_name`` when ``fresh`` is asked to.
    """

    def __init__(self, prefix: str = ""):
        self.prefix = prefix
        self.counters: dict[str, int] = {}

    def fresh(self, name: str, add_prefix: bool = False) -> str:
        """A name not handed out before, based on ``name`` (dots become underscores)."""
        if add_prefix and self.prefix:
            name = f"{self.prefix}_{name}"
        name = name.replace(".", "_")
        if name not in self.counters:
            self.counters[name] = 0
            return name
        while True:
            self.counters[name] += 1
            candidate = f"{name}_{self.counters[name]}"
            if candidate not in self.counters:
                self.counters[candidate] = 0
                return candidate


class KernelNamer:
    """Kernel symbols for fused functions; structurally equal functions share one.

    Parameters
    ----------
    mod_name : str
        The module name (``tvmgen_<mod_name>_`` prefix).
    """

    def __init__(self, mod_name: str = "default"):
        self.supply = NameSupply(f"tvmgen_{mod_name}" if mod_name else "tvmgen")
        self.cache: dict[int, list[tuple[Function, str]]] = {}

    def name(self, fn: Function) -> str:
        """The symbol of ``fn``'s kernel (allocated on first sight)."""
        bucket = self.cache.setdefault(structural_hash(fn), [])
        for other, symbol in bucket:
            if structural_equal(fn, other):
                return symbol
        symbol = self.supply.fresh(fused_name(fn), add_prefix=True)
        bucket.append((fn, symbol))
        return symbol


@dataclass
class LoweredGraph:
    """What graph codegen produces.

    Attributes
    ----------
    graph : GraphJSON
        The graph (``graph.to_json()`` is TVM's text).
    params : dict of str to numpy.ndarray
        The constants lifted to params ``p0, p1, ...``.
    functions : dict of str to Function
        The fused functions by kernel symbol (``__nop`` ones excluded).
    memory_plan : MemoryPlan
        The storage plan.
    """

    graph: GraphJSON
    params: dict[str, np.ndarray] = field(default_factory=dict)
    functions: dict[str, Function] = field(default_factory=dict)
    memory_plan: MemoryPlan = field(default_factory=MemoryPlan)

    @property
    def graph_json(self) -> str:
        """The graph JSON text."""
        return self.graph.to_json()


def _node_attrs(fn: Function, call: Call) -> dict[str, str]:
    """The anchor's layout attributes, the function hash, and the provenance."""
    attrs: dict[str, str] = {}
    for node in post_order(fn.body):
        if isinstance(node, Call) and node.attrs is not None and hasattr(node.attrs, "items"):
            for key, value in node.attrs.items():
                if "layout" in key and isinstance(value, str):
                    attrs[key] = value
    attrs["hash"] = f"{structural_hash(fn) & _MASK64:016x}"
    names: list[str] = []
    for node in post_order(fn.body):
        if isinstance(node, Call):
            names.extend(n for n in node.source_names if n not in names)
    names.extend(n for n in call.source_names if n not in names)
    if names:
        attrs["source_names"] = ",".join(names)
    return attrs


def head_names(ret_type: Type, names: Sequence[str]) -> list[str]:
    """One distinct name per graph head, from one name per output of ``main``.

    An output that is itself a tuple (an ONNX sequence) flattens to several heads named
    ``name_0``, ``name_1``, ...; a name used twice gets ``_1``, ``_2``, ... suffixes.

    Parameters
    ----------
    ret_type : Type
        ``main``'s return type.
    names : sequence of str
        One name per output: per field of a tuple result (when there are several names), or for
        the whole result (one name).

    Raises
    ------
    KilnError
        The number of names is not the number of outputs.
    """
    names = [str(n) for n in names]
    if len(names) == 1:
        outputs: Sequence[Type] = (ret_type,)
    elif isinstance(ret_type, TupleType):
        outputs = ret_type.fields
    else:
        outputs = (ret_type,)
    if len(outputs) != len(names):
        raise KilnError(f"graph codegen: {len(names)} output names ({', '.join(names)}) for a main "
                        f"function with {len(outputs)} output(s)")
    out: list[str] = []

    def unique(name: str) -> str:  # names stay as given (ONNX names hold dots and slashes)
        candidate, n = name, 0
        while candidate in out:
            n += 1
            candidate = f"{name}_{n}"
        return candidate

    for name, ty in zip(names, outputs):
        if isinstance(ty, TupleType):
            out.extend(unique(f"{name}_{i}") for i in range(len(flat_tensor_types(ty))))
        else:
            out.append(unique(name))
    return out


class _GraphBuilder:
    def __init__(self, main: Function, mod_name: str):
        self.main = main
        self.namer = KernelNamer(mod_name)
        self.node_names = NameSupply()
        self.nodes: list[Node] = []
        self.entry_types: list[TensorType] = []
        self.entry_storage: list[int] = []
        self.refs: dict[int, list[NodeEntry]] = {}
        self.params: dict[str, np.ndarray] = {}
        self.const_refs: dict[tuple[str, tuple[int, ...], bytes], list[NodeEntry]] = {}
        self.functions: dict[str, Function] = {}
        self.plan = plan_memory(main)

    def add_node(self, node: Node, expr: Expr) -> list[NodeEntry]:
        nid = len(self.nodes)
        types = flat_tensor_types(expr.checked_type)
        self.nodes.append(node)
        self.entry_types.extend(types)
        self.entry_storage.extend(self.plan.of(expr))
        return [NodeEntry(nid, i) for i in range(len(types))]

    def visit(self, expr: Expr) -> None:
        if isinstance(expr, Constant):
            # equal constants (a weight repacked once per unrolled step of an RNN) are one param
            value = np.asarray(expr.value)
            data = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
            # (the dtype's name too: ml_dtypes' bfloat16/float8/int4 all have a "|V" str)
            key = (f"{value.dtype.name}{value.dtype.str}", value.shape,
                   hashlib.sha1(data.data).digest())
            if key not in self.const_refs:
                name = f"p{len(self.params)}"
                self.params[name] = np.array(value)
                self.const_refs[key] = self.add_node(Node.input(name), expr)
            self.refs[id(expr)] = self.const_refs[key]
        elif isinstance(expr, Tuple):
            self.refs[id(expr)] = [r for f in expr.fields for r in self.refs[id(f)]]
        elif isinstance(expr, TupleGetItem):
            ty = expr.tuple_value.checked_type
            assert isinstance(ty, TupleType)
            sizes = [len(flat_tensor_types(f)) for f in ty.fields]
            start = sum(sizes[:expr.index])
            self.refs[id(expr)] = self.refs[id(expr.tuple_value)][start:start + sizes[expr.index]]
        elif isinstance(expr, Call):
            self.visit_call(expr)
        elif not isinstance(expr, Var):
            raise KilnError(f"graph codegen: the graph executor cannot run {type(expr).__name__} "
                            "nodes (control flow and closures need the interpreter)")

    def visit_call(self, call: Call) -> None:
        fn = call.op
        if isinstance(fn, Function) and fn.attrs.get("Compiler"):
            # an external function (kiln.codegen.external.lower_external): its kernel is the
            # function's global_symbol in a library the build imports
            symbol = str(fn.attrs["global_symbol"])
            inputs = [r for a in call.args for r in self.refs[id(a)]]
            node = Node.kernel(self.node_names.fresh(symbol), symbol, inputs,
                               len(flat_tensor_types(call.checked_type)), _node_attrs(fn, call))
            self.refs[id(call)] = self.add_node(node, call)
            return
        if isinstance(fn, GlobalVar):
            raise KilnError(f"graph codegen: main calls global function @{fn.name_hint}; the graph "
                            "executor runs fused functions only (inline it with Inline=1; external "
                            "compilers are not supported)")
        if not (isinstance(fn, Function) and fn.attrs.get("Primitive")):
            raise KilnError(f"graph codegen: {call._short()} is not a call of a fused primitive "
                            "function; run FuseOps before graph codegen")
        inputs = [r for a in call.args for r in self.refs[id(a)]]
        num_outputs = len(flat_tensor_types(call.checked_type))
        symbol = self.namer.name(fn)
        attrs = _node_attrs(fn, call)
        if fn.attrs.get("relay.reshape_only"):
            node = Node.kernel("reshape_nop", "__nop", inputs, num_outputs, attrs)
        else:
            self.functions.setdefault(symbol, fn)
            node = Node.kernel(self.node_names.fresh(symbol), symbol, inputs, num_outputs, attrs)
        self.refs[id(call)] = self.add_node(node, call)

    def build(self, output_names: Sequence[str] | None = None) -> LoweredGraph:
        taken: set[str] = set()
        for p in self.main.params:
            if not isinstance(p.checked_type, TensorType):
                raise KilnError(f"graph codegen: input %{p.name_hint} has type {p.checked_type}; "
                                "graph executor inputs must be tensors")
            # distinct variables sharing a name (relay allows it) become name, name_1, ...
            name, k = p.name_hint, 0
            while name in taken:
                k += 1
                name = f"{p.name_hint}_{k}"
            taken.add(name)
            self.refs[id(p)] = self.add_node(Node.input(name), p)
        for node in post_order(self.main.body, into_functions=False):
            if isinstance(node, (Op, GlobalVar, Function)) or id(node) in self.refs:
                continue
            self.visit(node)
        names = (head_names(self.main.body.checked_type, output_names)
                 if output_names is not None else None)
        graph = GraphJSON.create(
            self.nodes, self.refs[id(self.main.body)], [t.shape for t in self.entry_types],
            [t.dtype for t in self.entry_types], self.entry_storage, output_names=names)
        return LoweredGraph(graph, self.params, self.functions, self.plan)


def graph_codegen(main: Function, mod_name: str = "default",
                  output_names: Sequence[str] | None = None) -> LoweredGraph:
    """Lower a fused, typed ``main`` to a graph executor graph.

    Parameters
    ----------
    main : Function
        The function after FuseOps and InferType: calls of ``Primitive=1`` function literals,
        tuples, projections, constants and its parameters.
    mod_name : str
        Module name used in kernel symbols (``tvmgen_<mod_name>_fused_...``).
    output_names : sequence of str, optional
        One name per output of ``main`` (see :func:`head_names`), written into the graph's
        ``metadata``; without them the outputs are ``output_0``, ``output_1``, ...

    Returns
    -------
    LoweredGraph
        Graph, params, kernels and memory plan.

    Raises
    ------
    KilnError
        For graphs the graph executor cannot run (calls of non-fused functions, control flow).
    """
    return _GraphBuilder(main, mod_name).build(output_names)


def with_kernel_flops(lowered: LoweredGraph, flops: Mapping[str, float]) -> LoweredGraph:
    """``lowered`` whose kernel nodes carry a ``flops`` attribute (the estimate of one run of
    their kernel, which the debug executor's roofline profile reads); kernels without a count
    (or with an unknown one, -1) get none."""
    nodes = []
    for node in lowered.graph.nodes:
        count = flops.get(node.func_name, -1.0) if node.op == "tvm_op" else -1.0
        if count >= 0:
            node = dataclasses.replace(node, attrs=(*(node.attrs or ()), ("flops", str(int(count)))))
        nodes.append(node)
    return dataclasses.replace(lowered, graph=dataclasses.replace(lowered.graph, nodes=tuple(nodes)))
