"""Reading and vetting ONNX models before conversion.

- :func:`load_model` reads a ModelProto, a path or bytes; a corrupt or truncated file is a
  :class:`FrontendError`.
- :func:`check_model` runs ``onnx.checker``: structural corruption is an error, other findings
  are kept as a note for later error messages.
- :func:`find_unsupported` lists every node Kiln cannot convert, grouped by op type, for the one
  :class:`UnsupportedOpError` raised before any conversion work.
- :func:`schema_function` gives the function body ONNX defines for an op without a converter.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from kiln.errors import FrontendError, UnsupportedOpError
from kiln.frontend.onnx_common import (
    CONVERTERS,
    NodeContext,
    parse_attributes,
    resolve_attributes,
    tensor_to_array,
)
from kiln.ir.types import np_dtype
from kiln.op.registry import all_ops

__all__ = [
    "DEFAULT_DOMAINS",
    "LOOP_DETAIL",
    "check_model",
    "converter_key",
    "find_unsupported",
    "function_opset",
    "load_model",
    "model_opset",
    "node_name",
    "schema_function",
    "sparse_to_dense",
]

DEFAULT_DOMAINS = ("", "ai.onnx")
LOOP_DETAIL = ("a Loop is unrolled at import only when its trip count and conditions are known "
               "then (bind the inputs they depend on with const_inputs=)")

# onnx.checker findings that make a graph meaningless; others (a missing output shape, an
# op the checker does not know) are reported only if the import then fails.
_FATAL_CHECKS = ("single static assignment", "topologically sorted", "is not output of any previous",
                 "Duplicate", "must have a name", "ir_version")


def load_model(model: Any) -> onnx.ModelProto:
    """The ModelProto for ``model`` (a ModelProto, a path or serialized bytes)."""
    from google.protobuf.message import DecodeError

    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray)):
        try:
            proto = onnx.load_model_from_string(bytes(model))
        except (DecodeError, ValueError, RuntimeError) as e:
            raise FrontendError(f"cannot parse the ONNX model bytes: the data is corrupt or "
                                f"truncated ({type(e).__name__}: {e})") from None
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise FrontendError(f"ONNX model file {path!r} does not exist")
        try:
            proto = onnx.load(path)
        except (DecodeError, ValueError, RuntimeError, OSError) as e:
            raise FrontendError(f"cannot read ONNX model {path!r}: the file is corrupt or truncated "
                                f"({type(e).__name__}: {e})") from None
    else:
        raise FrontendError(f"from_onnx takes an onnx.ModelProto, a path or bytes, not "
                            f"{type(model).__name__}")
    if not proto.HasField("graph") or not proto.graph.output:
        raise FrontendError("the ONNX model has no graph or no graph outputs; the file is corrupt, "
                            "truncated, or not an ONNX model")
    _check_text(proto.graph, "graph")
    return proto


def _check_text(graph: onnx.GraphProto, where: str) -> None:
    """Raise when a name in ``graph`` (or a subgraph) is not valid UTF-8 text.

    Protobuf hands such string fields to Python as ``bytes``; they only appear in corrupt files.
    """
    def bad(value: object, what: str) -> None:
        if isinstance(value, bytes):
            raise FrontendError(f"the ONNX model is corrupt: {what} in {where} is not valid UTF-8 "
                                f"text ({value!r})")

    for kind, items in (("input", graph.input), ("output", graph.output),
                        ("value_info", graph.value_info), ("initializer", graph.initializer)):
        for i, item in enumerate(items):
            bad(item.name, f"the name of {kind} #{i}")
    for i, node in enumerate(graph.node):
        for field in ("name", "op_type", "domain"):
            bad(getattr(node, field), f"the {field} of node #{i}")
        for j, value in enumerate(node.input):
            bad(value, f"input {j} of node #{i}")
        for j, value in enumerate(node.output):
            bad(value, f"output {j} of node #{i}")
        for attr in node.attribute:
            bad(attr.name, f"an attribute name of node #{i}")
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                _check_text(sub, f"a subgraph of node #{i} ({attr.name!r})")


def model_opset(proto: onnx.ModelProto, override: int | None) -> int:
    """The default-domain opset to convert with: ``override`` or the model's import."""
    if override is not None:
        return int(override)
    for imp in proto.opset_import:
        if imp.domain in DEFAULT_DOMAINS:
            return int(imp.version)
    return 1


def check_model(proto: onnx.ModelProto) -> str:
    """Run onnx.checker: raise on structural corruption; return any other finding (or "")."""
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if any(p in str(e) for p in _FATAL_CHECKS):
            raise FrontendError(f"the ONNX model is corrupt or malformed (onnx.checker: {text})") from None
        return text
    except ValueError:  # models over 2 GiB cannot be checked in memory
        return ""
    return ""


def node_name(node: onnx.NodeProto, index: int, prefix: str) -> str:
    """The node's name, or ``<OpType>_<index>`` when it has none (stable for the model)."""
    return prefix + (node.name or f"{node.op_type}_{index}")


def converter_key(node: onnx.NodeProto) -> str:
    """The key of ``node``'s converter: its op type, domain-qualified outside the default domain
    (``com.microsoft.Gelu``)."""
    return node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"


def function_opset(fn: onnx.FunctionProto, default: int) -> int:
    """The default-domain opset a function body is written against."""
    for imp in fn.opset_import:
        if imp.domain in DEFAULT_DOMAINS:
            return int(imp.version)
    return default


def sparse_to_dense(sparse: onnx.SparseTensorProto, what: str) -> np.ndarray:
    """The dense array of a sparse initializer or Constant value."""
    values = tensor_to_array(sparse.values, what)
    indices = tensor_to_array(sparse.indices, what).astype(np.int64)
    dims = tuple(int(d) for d in sparse.dims)
    dense = np.zeros(dims, dtype=values.dtype)
    flat = dense.reshape(-1)
    if indices.ndim == 1:
        flat[indices] = values
    else:
        flat[np.ravel_multi_index(tuple(indices.T), dims)] = values
    return dense


# --- ONNX's own function definitions -------------------------------------------------------------

def domain_versions(proto: onnx.ModelProto) -> dict[str, int]:
    """The opset version the model imports for each domain other than the default one."""
    return {imp.domain: int(imp.version) for imp in proto.opset_import
            if imp.domain not in DEFAULT_DOMAINS}


def _schema(op_type: str, opset: int, domain: str = "") -> Any:
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except Exception:  # onnx.defs.SchemaError: no such op at this opset
        return None


def _function_version(versions: Sequence[int], opset: int) -> int | None:
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def _has_schema_function(op_type: str, opset: int, domain: str = "") -> bool:
    schema = _schema(op_type, opset, domain)
    if schema is None:
        return False
    return (_function_version(schema.function_opset_versions, opset) is not None
            or _function_version(schema.context_dependent_function_opset_versions, opset) is not None)


def _with_schema_defaults(fn: onnx.FunctionProto, schema: Any) -> onnx.FunctionProto:
    """``fn`` with the schema's attribute defaults added where the function declares none."""
    declared = {a.name for a in fn.attribute_proto}
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if name in declared or default.type == onnx.AttributeProto.UNDEFINED:
            continue
        value = onnx.AttributeProto()
        value.CopyFrom(default)
        value.name = name
        fn.attribute_proto.append(value)
    return fn


def schema_function(ctx: NodeContext, domain_opset: int | None = None) -> onnx.FunctionProto | None:
    """The function body ONNX defines for ``ctx``'s op at its opset, if any.

    Context-dependent bodies (whose nodes depend on input types and attribute values) are built
    by ONNX from the node, with references to a calling function's attributes resolved. An op of
    another ONNX domain (``ai.onnx.preview``, ...) is looked up at ``domain_opset``, the version
    the model imports for that domain.
    """
    domain = "" if ctx.node.domain in DEFAULT_DOMAINS else ctx.node.domain
    if domain and domain_opset is None:
        return None
    opset = domain_opset if domain and domain_opset is not None else ctx.opset
    schema = _schema(ctx.op_type, opset, domain)
    if schema is None:
        return None
    version = _function_version(schema.function_opset_versions, opset)
    fn = onnx.FunctionProto()
    if version is not None:
        fn.ParseFromString(schema.get_function_with_opset_version(version))
        return _with_schema_defaults(fn, schema)
    version = _function_version(schema.context_dependent_function_opset_versions, opset)
    if version is None:
        return None
    input_types = []
    for x in ctx.inputs:
        tp = onnx.TypeProto()
        if x is not None:
            ty = ctx.tensor_type(x)
            elem = onnx.helper.np_dtype_to_tensor_dtype(np_dtype(ty.dtype))
            tp = onnx.helper.make_tensor_type_proto(elem, list(ty.shape))
        input_types.append(tp.SerializeToString())
    resolved = onnx.NodeProto()
    resolved.CopyFrom(ctx.node)
    del resolved.attribute[:]
    resolved.attribute.extend(ctx.raw_attrs.values())
    try:
        data = schema.get_context_dependent_function_with_opset_version(
            version, resolved.SerializeToString(), input_types)
    except Exception as e:  # ONNX's builders raise assorted errors for inputs they reject
        raise ctx.unsupported(f"ONNX could not build its function body ({e})") from None
    if not data:
        return None
    fn.ParseFromString(data)
    return _with_schema_defaults(fn, schema)


# --- the unsupported-op report -------------------------------------------------------------------

def find_unsupported(proto: onnx.ModelProto, opset: int,
                     functions: Mapping[tuple[str, str], onnx.FunctionProto]) -> UnsupportedOpError | None:
    """One error listing every op of ``proto`` Kiln cannot import (with node names), or None."""
    registered = set(all_ops())
    domains = domain_versions(proto)
    problems: dict[tuple[str, str], list[str]] = {}
    seen: set[tuple[str, str]] = set()

    def visit(graph: onnx.GraphProto, prefix: str) -> None:
        for idx, node in enumerate(graph.node):
            name = node_name(node, idx, prefix)
            detail = _node_problem(node, opset, registered, functions, seen, domains)
            if detail is not None:
                key = (node.op_type if node.domain in DEFAULT_DOMAINS
                       else f"{node.domain}.{node.op_type}", detail)
                problems.setdefault(key, []).append(name)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH and node.op_type in ("If", "Loop", "Scan"):
                    visit(attr.g, f"{name}/{attr.name}/")

    visit(proto.graph, "")
    if not problems:
        return None
    grouped: dict[str, tuple[list[str], list[str]]] = {}
    for (op_type, detail), names in problems.items():
        entry = grouped.setdefault(op_type, ([], []))
        entry[0].extend(names)
        if detail:
            entry[1].append(detail)
    return UnsupportedOpError([(op, names, "; ".join(details))
                               for op, (names, details) in sorted(grouped.items())], opset)


def _node_problem(node: onnx.NodeProto, opset: int, registered: set[str],
                  functions: Mapping[tuple[str, str], onnx.FunctionProto],
                  seen: set[tuple[str, str]], domains: Mapping[str, int]) -> str | None:
    """Why ``node`` cannot be converted (empty string: no converter at all), or None."""
    key = (node.domain, node.op_type)
    if key in functions:
        if key in seen:
            return None
        seen.add(key)
        fn = functions[key]
        for inner in fn.node:
            detail = _node_problem(inner, function_opset(fn, opset), registered, functions, seen,
                                   domains)
            if detail is not None:
                return f"its function body uses {inner.op_type}" + (f" ({detail})" if detail else "")
        return None
    op_type = converter_key(node)
    if node.domain not in DEFAULT_DOMAINS and op_type not in CONVERTERS:
        version = domains.get(node.domain)
        if version is not None and _has_schema_function(node.op_type, version, node.domain):
            return None  # expanded from the function body ONNX defines for it
        return f"domain {node.domain!r} is not supported"
    if op_type in ("Constant", "If", "Loop", "Scan"):
        return None
    spec = CONVERTERS.get(op_type)
    if spec is None:
        return None if _has_schema_function(op_type, opset) else ""
    missing = [n for n in spec.needs if n not in registered]
    if missing:
        return f"Kiln lacks the relay operator(s) {', '.join(missing)}"
    if spec.check is not None:
        try:
            attrs = parse_attributes(resolve_attributes(node), op_type)
        except FrontendError as e:
            return str(e)
        return spec.check(attrs, opset)
    return None
