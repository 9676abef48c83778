"""PyTorch importer: ``torch.export`` programs and TorchScript modules to a relay module.

Two entry points share one converter table keyed by ATen operator name
(:data:`kiln.frontend.pytorch_ops.CONVERTERS`):

* :func:`from_torch_export` reads an :class:`torch.export.ExportedProgram`: its graph signature
  says which placeholders are parameters, buffers, constants or user inputs; the user inputs'
  static shapes come from their ``meta["val"]``. The program is converted as given (the training
  IR keeps ``conv2d``, ``linear``, ``lstm``, ...); when some operator has no converter, the program
  is decomposed to core ATen (``run_decompositions()``) and tried again.
* :func:`from_pytorch` (TVM's signature) reads a traced (or control-flow free scripted)
  :class:`torch.jit.ScriptModule`; ``input_infos`` names and shapes its inputs, and parameters
  are named after their ``state_dict`` names.

Every ATen call is normalised to the full argument list of its schema (defaults filled in, with
the schema's argument names), so one converter serves both graph kinds. Provenance: each call
is stamped ``<module path>/<node name>`` (e.g. ``layer1.0.conv1/conv2d``), from the FX node's
``nn_module_stack`` or the TorchScript node's scope.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from kiln.errors import FrontendError, KilnError, UnsupportedOpError
from kiln.frontend.common import ImportState, require, unsupported_error
from kiln.frontend.pytorch_ops import CONVERTERS, PASSTHROUGH, Args, Cx, dtype_name
from kiln.ir.expr import Constant, Expr, TupleGetItem
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType

__all__ = ["from_pytorch", "from_torch_export", "supported_ops"]

CustomMap = Mapping[str, Callable[..., Any]]

# TorchScript's own (prim::) nodes the importer evaluates itself.
_PRIM_KINDS = {"prim::Constant", "prim::ListConstruct", "prim::TupleConstruct", "prim::ListUnpack",
               "prim::TupleUnpack", "prim::GetAttr", "prim::NumToTensor", "prim::TupleIndex",
               "prim::device", "prim::dtype", "prim::unchecked_cast", "prim::RaiseException",
               "prim::Uninitialized", "prim::min", "prim::max", "prim::shape", "prim::layout",
               "prim::requires_grad", "prim::is_cuda"}


def supported_ops() -> list[str]:
    """The ATen operator names with a converter (both entry points), sorted."""
    return sorted(CONVERTERS)


def _torch(entry: str) -> Any:
    return require("torch", "torch", entry)


def _to_numpy(t: Any) -> np.ndarray:
    """A torch tensor as a NumPy array (bfloat16 widened to float32)."""
    import torch

    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return np.array(t.contiguous().numpy(), copy=True)


def _custom(custom: CustomMap | None) -> dict[str, Callable[..., Any]]:
    """The custom converters keyed by bare ATen name (``aten::foo`` and ``foo`` both accepted)."""
    out: dict[str, Callable[..., Any]] = {}
    for key, fn in (custom or {}).items():
        out[key[len("aten::"):] if key.startswith("aten::") else key] = fn
    return out


class _Importer(ImportState):
    """What both entry points share: the converter dispatch, provenance and dtype repair."""

    framework = "PyTorch"

    def __init__(self, freeze_params: bool, custom: CustomMap | None):
        super().__init__(freeze_params)
        self.custom = _custom(custom)
        self.weights: dict[str, Expr] = {}

    def weight(self, name: str, tensor: Any) -> Expr:
        """A parameter or buffer, converted once per name."""
        if name not in self.weights:
            self.weights[name] = self.constant(name, _to_numpy(tensor))
        return self.weights[name]

    def has_converter(self, op: str) -> bool:
        return op in CONVERTERS or op in PASSTHROUGH or op in self.custom

    def convert(self, op: str, args: Args, node: str, source: str,
                expected: Sequence[str | None]) -> Any:
        """Convert one ATen call; the result (an Expr, a Python value or a tuple of them)."""
        cx = Cx(self, op, node)
        try:
            if op in self.custom:
                types = [self.dtype_of(v) if isinstance(v, Expr) else type(v).__name__
                         for v in args.values]
                result = self.custom[op](list(args.values), types)
            elif op in PASSTHROUGH:
                result = PASSTHROUGH[op](cx, args)
            else:
                result = CONVERTERS[op](cx, args)
            result = self._repair(result, expected)
            flat = [r for r in _flatten(result) if isinstance(r, Expr)]
            done = dict(zip(map(id, flat), self.finish(flat, source)))
            return _rebuild(result, done)
        except (UnsupportedOpError, FrontendError):
            raise
        except (KilnError, TypeError, ValueError, IndexError, KeyError, ZeroDivisionError, AttributeError,
                AssertionError) as e:
            shown = ", ".join(_describe(self, v) for v in args.values)
            kind = op if "::" in op else f"aten::{op}"
            raise FrontendError(f"PyTorch node {node!r} ({kind}) failed to convert: "
                                f"{type(e).__name__}: {e}; arguments ({shown})") from e

    def _repair(self, result: Any, expected: Sequence[str | None]) -> Any:
        """Cast tensor results whose dtype differs from the one PyTorch recorded."""
        import kiln.op as K

        def fix(value: Any, want: str | None) -> Any:
            if (isinstance(value, Expr) and want is not None
                    and isinstance(self.type_of(value), TensorType) and self.dtype_of(value) != want):
                return K.cast(value, want)
            return value

        if isinstance(result, (tuple, list)):
            if len(expected) == len(result):
                return type(result)(fix(r, w) for r, w in zip(result, expected))
            return result
        return fix(result, expected[0] if len(expected) == 1 else None)


def _flatten(value: Any) -> Iterable[Any]:
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _flatten(v)
    else:
        yield value


def _rebuild(value: Any, done: Mapping[int, Any]) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_rebuild(v, done) for v in value)
    if isinstance(value, Expr):
        return done.get(id(value), value)
    return value


def _describe(state: ImportState, value: Any) -> str:
    if isinstance(value, Expr):
        try:
            return f"Tensor[{list(state.shape_of(value))}, {state.dtype_of(value)}]"
        except KilnError:
            return type(value).__name__
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_describe(state, v) for v in value) + "]"
    return repr(value)


def _output_exprs(state: ImportState, values: Iterable[Any], what: str) -> list[Expr]:
    outs: list[Expr] = []
    for v in _flatten(list(values)):
        if isinstance(v, Expr):
            outs.append(v)
        elif isinstance(v, (bool, int, float, np.ndarray)):
            outs.append(state.register(Constant(np.asarray(v))))
        elif v is not None:
            raise FrontendError(f"{what}: an output is a {type(v).__name__}, not a tensor")
    return outs


# --- torch.export ----------------------------------------------------------------------------------
def _fx_op(node: Any) -> str | None:
    """The bare ATen name of an FX ``call_function`` node (``None`` for getitem)."""
    if node.target is operator.getitem:
        return None
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return f"{getattr(node.target, '__module__', '')}.{getattr(node.target, '__name__', node.target)}"
    name = str(schema.name)
    return name[len("aten::"):] if name.startswith("aten::") else name


def _fx_unsupported(ep: Any, importer: _Importer) -> dict[str, list[str]]:
    problems: dict[str, list[str]] = {}
    for node in ep.graph.nodes:
        if node.op == "call_function":
            op = _fx_op(node)
            if op is not None and not importer.has_converter(op):
                problems.setdefault(op if "::" in op or "." in op else f"aten::{op}", []).append(node.name)
        elif node.op in ("call_module", "call_method"):
            problems.setdefault(f"{node.op} {node.target}", []).append(node.name)
    return problems


def _module_path(node: Any) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = str(list(stack.values())[-1][0])
    for prefix in ("L['self'].", "L__self__."):
        if path.startswith(prefix):
            path = path[len(prefix):]
    return path


def _fx_dtypes(node: Any) -> list[str | None]:
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    out: list[str | None] = []
    for v in vals:
        dt = getattr(v, "dtype", None)
        out.append(dtype_name(dt) if dt is not None and hasattr(v, "shape") else None)
    return out


def from_torch_export(exported_program: Any, freeze_params: bool = True,
                      custom_convert_map: CustomMap | None = None,
                      decompose: bool | None = None) -> tuple[IRModule, dict[str, Any]]:
    """Import a :class:`torch.export.ExportedProgram`.

    Parameters
    ----------
    exported_program : torch.export.ExportedProgram
        The result of ``torch.export.export(model.eval(), example_inputs)``.
    freeze_params : bool
        True: weights are embedded as constants. False: they become params named after their
        ``state_dict`` names (``layer1.0.conv1.weight``).
    custom_convert_map : dict, optional
        ``{"aten::op": fn}``; ``fn(inputs, input_types)`` returns a relay expression (TVM's
        convention: ``inputs`` are the schema's arguments, tensors as relay expressions).
    decompose : bool, optional
        True: always run ``run_decompositions()`` first; False: never; ``None`` (default): only
        when some operator has no converter.

    Returns
    -------
    mod : IRModule
        ``main`` takes the user inputs (named after their placeholders), then any params.
    params : dict of str to NDArray
        The weights when ``freeze_params=False``, else empty.
    """
    torch = _torch("from_torch_export")
    if not isinstance(exported_program, torch.export.ExportedProgram):
        raise FrontendError("from_torch_export expects a torch.export.ExportedProgram (from "
                            f"torch.export.export), got {type(exported_program).__name__}")
    ep = exported_program
    imp = _Importer(freeze_params, custom_convert_map)
    if decompose:
        ep = ep.run_decompositions()
    problems = _fx_unsupported(ep, imp)
    if problems and decompose is None:
        try:
            decomposed = ep.run_decompositions()
        except Exception:  # a failed decomposition: report the original operators
            decomposed = None
        if decomposed is not None:
            ep = decomposed
            problems = _fx_unsupported(ep, imp)
    if problems:
        raise unsupported_error(problems, framework="PyTorch")
    return _FXImport(imp, ep).run()


class _FXImport:
    def __init__(self, imp: _Importer, ep: Any):
        self.imp, self.ep = imp, ep
        self.env: dict[Any, Any] = {}

    def placeholder(self, node: Any, spec: Any) -> Any:
        from torch.export.graph_signature import InputKind

        if spec is None or spec.kind == InputKind.USER_INPUT:
            val = node.meta.get("val")
            if val is None or not hasattr(val, "shape"):
                if isinstance(val, (bool, int, float)):
                    return val
                raise FrontendError(f"torch.export input {node.name!r} is not a tensor ({val!r})")
            shape = []
            for i, d in enumerate(val.shape):
                if not isinstance(d, int):
                    raise FrontendError(f"torch.export input {node.name!r} has a dynamic dim {i} ({d}); "
                                        "Kiln compiles static shapes: export without dynamic_shapes")
                shape.append(d)
            return self.imp.add_input(node.name, shape, dtype_name(val.dtype))
        target = spec.target
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            tensor = self.ep.state_dict.get(target)
            if tensor is None:
                tensor = self.ep.constants.get(target)
            if tensor is None:
                raise FrontendError(f"torch.export {spec.kind.name.lower()} {target!r} has no value "
                                    "in the program's state_dict or constants")
            return self.imp.weight(target, tensor)
        raise UnsupportedOpError([(f"input kind {spec.kind.name}", [node.name], "")], framework="PyTorch")

    def arg(self, value: Any) -> Any:
        import torch.fx

        if isinstance(value, torch.fx.Node):
            if value not in self.env:
                raise FrontendError(f"torch.export node {value.name!r} is used before it is defined")
            return self.env[value]
        if isinstance(value, (list, tuple)):
            return type(value)(self.arg(v) for v in value)
        return value

    def check_shapes(self, node: Any, op: str, result: Any) -> None:
        """The converted shapes must be those PyTorch recorded (``meta["val"]``)."""
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        results = result if isinstance(result, (list, tuple)) else [result]
        for v, res in zip(vals, results):
            if not isinstance(res, Expr) or not hasattr(v, "shape"):
                continue
            want = tuple(v.shape)
            if not all(isinstance(d, int) for d in want):
                continue
            ty = self.imp.type_of(res)
            if isinstance(ty, TensorType) and tuple(int(d) for d in ty.shape) != want:
                raise FrontendError(f"PyTorch node {node.name!r} (aten::{op}): converted to shape "
                                    f"{[int(d) for d in ty.shape]}, PyTorch's is {list(want)}")

    def run(self) -> tuple[IRModule, dict[str, Any]]:
        import torch.fx

        specs = {s.arg.name: s for s in self.ep.graph_signature.input_specs
                 if hasattr(s.arg, "name")}
        outputs: list[Any] = []
        names: list[str] = []
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                self.env[node] = self.placeholder(node, specs.get(node.name))
            elif node.op == "get_attr":
                self.env[node] = self.imp.weight(str(node.target),
                                                 getattr(self.ep.graph_module, str(node.target)))
            elif node.op == "call_function":
                op = _fx_op(node)
                if op is None:
                    seq = self.arg(node.args[0])
                    self.env[node] = seq[node.args[1]]
                    continue
                schema = node.target._schema
                names_, values = [], []
                for i, a in enumerate(schema.arguments):
                    if i < len(node.args):
                        v = node.args[i]
                    elif a.name in node.kwargs:
                        v = node.kwargs[a.name]
                    else:
                        v = a.default_value if a.has_default_value() else None
                    names_.append(a.name)
                    values.append(self.arg(v))
                path = _module_path(node)
                source = f"{path}/{node.name}" if path else node.name
                self.env[node] = self.imp.convert(op, Args(names_, values, node.name), node.name,
                                                  source, _fx_dtypes(node))
                self.check_shapes(node, op, self.env[node])
            elif node.op == "output":
                from torch.export.graph_signature import OutputKind

                results = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
                specs_out = self.ep.graph_signature.output_specs
                for spec, r in zip(specs_out, results):
                    if spec.kind != OutputKind.USER_OUTPUT:
                        continue
                    value = self.arg(r) if isinstance(r, torch.fx.Node) else r
                    outputs.append(value)
                    names.append(getattr(spec.arg, "name", f"output_{len(names)}"))
        exprs = _output_exprs(self.imp, outputs, "torch.export program")
        if len(exprs) != len(names):
            names = [f"output_{i}" for i in range(len(exprs))]
        return self.imp.module(exprs, names)


# --- TorchScript ------------------------------------------------------------------------------------
class _ModuleRef:
    """A (sub)module reached through ``prim::GetAttr``: the object and its dotted path."""

    def __init__(self, obj: Any, path: str):
        self.obj, self.path = obj, path


def _jit_op(node: Any) -> str:
    """The converter key of a TorchScript node: the bare name for ``aten::``, else the full kind."""
    kind = str(node.kind())
    return kind[len("aten::"):] if kind.startswith("aten::") else kind


def _jit_dtypes(node: Any) -> list[str | None]:
    out: list[str | None] = []
    for o in node.outputs():
        dt = None
        ty = o.type()
        try:
            raw = ty.dtype() if hasattr(ty, "dtype") else None
            dt = dtype_name(raw) if raw is not None else None
        except (RuntimeError, FrontendError):
            dt = None
        out.append(dt)
    return out


def _scope_path(node: Any) -> str:
    scope = str(node.scopeName() or "")
    if not scope:
        return ""
    last = scope.split("/")[-1]
    return last[len("__module."):] if last.startswith("__module.") else ""


def _parse_input_infos(input_infos: Any, n: int, default_dtype: str,
                       graph_names: Sequence[str]) -> list[tuple[str, tuple[int, ...], str]]:
    if input_infos is None or isinstance(input_infos, (str, bytes)) or not isinstance(
            input_infos, (list, tuple)):
        raise FrontendError("from_pytorch: input_infos must be a list of (name, shape) or "
                            f"(name, (shape, dtype)) pairs, one per graph input {list(graph_names)}; "
                            f"got {input_infos!r}")
    if len(input_infos) != n:
        raise FrontendError(f"from_pytorch: the module takes {n} input(s) {list(graph_names)} but "
                            f"input_infos gives {len(input_infos)}")
    out = []
    for i, info in enumerate(input_infos):
        if not isinstance(info, (list, tuple)) or len(info) != 2 or not isinstance(info[0], str):
            raise FrontendError(f"from_pytorch: input_infos[{i}] must be (name, shape) or "
                                f"(name, (shape, dtype)), got {info!r}")
        name, spec = info
        dtype = default_dtype
        if (isinstance(spec, (list, tuple)) and len(spec) == 2 and isinstance(spec[1], str)
                and isinstance(spec[0], (list, tuple))):
            spec, dtype = spec
        try:
            shape = tuple(int(d) for d in spec)
        except (TypeError, ValueError):
            raise FrontendError(f"from_pytorch: the shape of input {name!r} must be a list of ints, "
                                f"got {spec!r}") from None
        if any(d < 0 for d in shape):
            raise FrontendError(f"from_pytorch: the shape of input {name!r}, {list(shape)}, has a "
                                "negative dim (Kiln compiles static shapes)")
        out.append((name, shape, str(dtype)))
    return out


def from_pytorch(script_module: Any, input_infos: Any, custom_convert_map: CustomMap | None = None,
                 default_dtype: str = "float32", use_parser_friendly_name: bool = False,
                 keep_quantized_weight: bool = False, export_renamed_c_graph_path: str | None = None,
                 preserve_pytorch_scopes: bool = False, freeze_params: bool = False,
                 ) -> tuple[IRModule, dict[str, Any]]:
    """Import a TorchScript module (``torch.jit.trace``, or scripted without control flow).

    Parameters
    ----------
    script_module : torch.jit.ScriptModule
        The traced module (``torch.jit.trace(model.eval(), example_inputs)``).
    input_infos : list of (str, shape) or (str, (shape, dtype))
        One entry per graph input, in order: its name in ``main`` and static shape.
    custom_convert_map : dict, optional
        ``{"aten::op": fn}``; ``fn(inputs, input_types)`` returns a relay expression.
    default_dtype : str
        The dtype of inputs given without one.
    use_parser_friendly_name : bool
        Replace ``.`` by ``_`` in param names (as TVM).
    keep_quantized_weight, export_renamed_c_graph_path : optional
        Accepted for TVM compatibility; quantized models are not supported.
    preserve_pytorch_scopes : bool
        Accepted for TVM compatibility: calls always carry ``<module path>/<node>`` source names.
    freeze_params : bool
        False (TVM's behaviour): weights are params named after their ``state_dict`` names.

    Returns
    -------
    mod : IRModule
    params : dict of str to NDArray
    """
    torch = _torch("from_pytorch")
    if not isinstance(script_module, (torch.jit.ScriptModule, torch.jit.ScriptFunction)):
        raise FrontendError("from_pytorch expects a TorchScript module (torch.jit.trace or "
                            f"torch.jit.script), got {type(script_module).__name__}; for an "
                            "nn.Module use torch.jit.trace(model.eval(), example) or from_torch_export")
    graph = script_module.graph.copy()
    torch._C._jit_pass_inline(graph)
    imp = _Importer(freeze_params, custom_convert_map)
    return _JitImport(imp, graph, script_module, use_parser_friendly_name).run(input_infos, default_dtype)


class _JitImport:
    def __init__(self, imp: _Importer, graph: Any, module: Any, friendly: bool):
        self.imp, self.graph, self.module, self.friendly = imp, graph, module, friendly
        self.env: dict[Any, Any] = {}
        self.counts: dict[str, int] = {}

    def unsupported(self) -> dict[str, list[str]]:
        problems: dict[str, list[str]] = {}
        for node in self.graph.nodes():
            kind = str(node.kind())
            if kind in _PRIM_KINDS:
                continue
            if self.imp.has_converter(_jit_op(node)):
                continue
            what = " (control flow: trace the model instead)" if kind in ("prim::If", "prim::Loop") else ""
            name = self.node_name(node, count=False)
            problems.setdefault(kind + what, []).append(name)
        return problems

    def node_name(self, node: Any, count: bool = True) -> str:
        op = _jit_op(node)
        outs = list(node.outputs())
        if not count:
            return outs[0].debugName() if outs else op
        k = self.counts.get(op, 0)
        self.counts[op] = k + 1
        return f"{op}_{k}"

    def value(self, v: Any) -> Any:
        if v not in self.env:
            raise FrontendError(f"TorchScript value %{v.debugName()} is used before it is defined")
        return self.env[v]

    def run(self, input_infos: Any, default_dtype: str) -> tuple[IRModule, dict[str, Any]]:
        inputs = list(self.graph.inputs())
        if inputs and inputs[0].type().kind() == "ClassType":
            self.env[inputs[0]] = _ModuleRef(self.module, "")
            inputs = inputs[1:]
        infos = _parse_input_infos(input_infos, len(inputs), default_dtype,
                                   [i.debugName() for i in inputs])
        problems = self.unsupported()
        if problems:
            raise unsupported_error(problems, framework="PyTorch")
        for v, (name, shape, dtype) in zip(inputs, infos):
            self.env[v] = self.imp.add_input(name, shape, dtype)
        for node in self.graph.nodes():
            self.convert(node)
        outs = [self.value(v) for v in self.graph.outputs()]
        exprs = _output_exprs(self.imp, outs, "TorchScript module")
        return self.imp.module(exprs, [f"output_{i}" for i in range(len(exprs))])

    def set_outputs(self, node: Any, values: Sequence[Any]) -> None:
        outs = list(node.outputs())
        if len(values) < len(outs):
            raise FrontendError(f"TorchScript node {node.kind()} produced {len(values)} values for "
                                f"{len(outs)} outputs")
        for o, val in zip(outs, values):
            self.env[o] = val

    def convert(self, node: Any) -> None:
        kind = str(node.kind())
        ins: list[Any] = [self.value(i) if i in self.env else None for i in node.inputs()]
        if kind == "prim::Constant":
            out = node.output()
            val = out.toIValue()
            import torch

            if isinstance(val, torch.Tensor):
                val = self.imp.register(Constant(_to_numpy(val)))
            self.env[out] = val
        elif kind in ("prim::ListConstruct",):
            self.env[node.output()] = list(ins)
        elif kind == "prim::TupleConstruct":
            self.env[node.output()] = tuple(ins)
        elif kind in ("prim::ListUnpack", "prim::TupleUnpack"):
            self.set_outputs(node, list(ins[0]))
        elif kind == "prim::TupleIndex":
            self.env[node.output()] = ins[0][int(ins[1])]
        elif kind == "prim::GetAttr":
            self.env[node.output()] = self.get_attr(node, ins[0])
        elif kind in ("prim::NumToTensor", "prim::unchecked_cast"):
            self.env[node.output()] = ins[0]
        elif kind in ("prim::min", "prim::max"):
            fn = min if kind == "prim::min" else max
            self.env[node.output()] = fn(ins[0]) if len(ins) == 1 else fn(ins)
        elif kind in ("prim::device", "prim::layout", "prim::requires_grad", "prim::is_cuda",
                      "prim::RaiseException", "prim::Uninitialized"):
            self.env[node.output()] = None if kind != "prim::is_cuda" else False
        elif kind == "prim::dtype":
            self.env[node.output()] = self.imp.dtype_of(ins[0])
        elif kind == "prim::shape":
            self.env[node.output()] = list(self.imp.shape_of(ins[0]))
        else:
            self.aten(node, ins)

    def get_attr(self, node: Any, ref: Any) -> Any:
        import torch

        name = node.s("name")
        if not isinstance(ref, _ModuleRef):
            raise FrontendError(f"prim::GetAttr {name!r} on a non-module value")
        obj = getattr(ref.obj, name)
        path = f"{ref.path}.{name}" if ref.path else name
        if isinstance(obj, torch.Tensor):
            pname = path.replace(".", "_") if self.friendly else path
            return self.imp.weight(pname, obj)
        if isinstance(obj, (torch.nn.Module, torch.jit.ScriptModule)) or hasattr(obj, "_c"):
            return _ModuleRef(obj, path)
        return obj

    def aten(self, node: Any, ins: list[Any]) -> None:
        import torch

        op = _jit_op(node)
        names = [f"arg{i}" for i in range(len(ins))]
        try:
            schema = node.schema()
            if schema and schema != "(no schema)":
                args = torch._C.parse_schema(schema).arguments
                names = [a.name for a in args][:len(ins)] + names[len(args):]
        except RuntimeError:
            pass
        name = self.node_name(node)
        path = _scope_path(node)
        source = f"{path}/{name}" if path else name
        result = self.imp.convert(op, Args(names, ins, name), name, source, _jit_dtypes(node))
        outs = list(node.outputs())
        if len(outs) == 1:
            self.env[outs[0]] = result
        else:
            self.set_outputs(node, list(result))
        # an in-place op (relu_, add_, ...) also rebinds the value it mutated
        if op.endswith("_") and not op.endswith("__") and ins and isinstance(ins[0], Expr):
            first = next(iter(node.inputs()))
            if isinstance(result, Expr) and not isinstance(result, TupleGetItem):
                self.env[first] = result
