"""Save and load IR (expressions, functions, modules) as JSON text.

The document lists every node once, children before users, and refers to nodes by their position,
so shared sub-graphs and variables keep their identity and deep graphs need no recursion. Types
and type annotations, call attributes (by their ``type_key``), function attributes and call
provenance (``source_names``) are kept; constants are stored as base64 of their row-major bytes.
Inferred types (``checked_type``) are not stored: run ``InferType`` after loading.

This is the format of the fused functions in Kiln's portable ``numpy`` container.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from kiln.errors import RuntimeFormatError
from kiln.ir.attrs import Attrs, DictAttrs, attrs_class_for
from kiln.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    Var,
)
from kiln.ir.module import IRModule
from kiln.ir.types import FuncType, TensorType, TupleType, Type, np_dtype
from kiln.ir.visitor import post_order

__all__ = ["FORMAT_VERSION", "load_json", "save_json"]

FORMAT_VERSION = 1


def _error(message: str) -> RuntimeFormatError:
    return RuntimeFormatError(f"IR JSON: {message}")


# --- types and attribute values ----------------------------------------------------------------

def _enc_type(ty: Type | None) -> Any:
    if ty is None:
        return None
    if isinstance(ty, TensorType):
        return {"Tensor": [list(ty.shape), ty.dtype]}
    if isinstance(ty, TupleType):
        return {"Tuple": [_enc_type(f) for f in ty.fields]}
    if isinstance(ty, FuncType):
        return {"Func": [[_enc_type(a) for a in ty.arg_types], _enc_type(ty.ret_type)]}
    raise _error(f"cannot save type {ty!r} ({type(ty).__name__})")


def _dec_type(raw: Any) -> Type | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or len(raw) != 1:
        raise _error(f"bad type {raw!r}")
    ((kind, value),) = raw.items()
    try:
        if kind == "Tensor":
            return TensorType(tuple(value[0]), value[1])
        if kind == "Tuple":
            return TupleType(tuple(_dec_type(f) for f in value))  # type: ignore[misc]
        if kind == "Func":
            return FuncType(tuple(_dec_type(a) for a in value[0]), _dec_type(value[1]))  # type: ignore[misc,arg-type]
    except (TypeError, ValueError, IndexError) as e:
        raise _error(f"bad {kind} type {value!r}: {e}") from None
    raise _error(f"unknown type kind {kind!r}")


def _enc_value(v: Any, where: str) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (tuple, list)):
        return [_enc_value(x, where) for x in v]
    if isinstance(v, Type):
        return {"$type": _enc_type(v)}
    if isinstance(v, Mapping):
        return {"$map": [[str(k), _enc_value(x, where)] for k, x in v.items()]}
    raise _error(f"cannot save {where}: value {v!r} of type {type(v).__name__}")


def _dec_value(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_dec_value(x) for x in v)
    if isinstance(v, dict):
        if "$type" in v:
            return _dec_type(v["$type"])
        if "$map" in v:
            return {k: _dec_value(x) for k, x in v["$map"]}
        raise _error(f"bad attribute value {v!r}")
    return v


def _enc_attrs(attrs: Any, where: str) -> Any:
    if attrs is None:
        return None
    if isinstance(attrs, DictAttrs):
        return {"type_key": "DictAttrs", "fields": _enc_value(dict(attrs), where)}
    if isinstance(attrs, Attrs):
        return {"type_key": attrs.type_key,
                "fields": {k: _enc_value(v, f"{where} attribute {k}") for k, v in attrs.items()}}
    raise _error(f"cannot save {where}: attrs of type {type(attrs).__name__}")


def _dec_attrs(raw: Any) -> Any:
    if raw is None:
        return None
    key, fields = raw.get("type_key"), raw.get("fields")
    if key == "DictAttrs":
        return DictAttrs(_dec_value(fields))
    cls = attrs_class_for(key) if isinstance(key, str) else None
    if cls is None:
        raise _error(f"unknown attrs type key {key!r}")
    try:
        return cls(**{k: _dec_value(v) for k, v in fields.items()})
    except TypeError as e:
        raise _error(f"cannot rebuild {key}: {e}") from None


# --- expressions -------------------------------------------------------------------------------

class _Encoder:
    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.index: dict[int, int] = {}

    def ref(self, node: Expr) -> int:
        if id(node) not in self.index:  # a variable or global met only as a callee
            self.add(node)
        return self.index[id(node)]

    def callee(self, op: Expr) -> Any:
        if isinstance(op, Op):
            return {"Op": op.name}
        if isinstance(op, GlobalVar):
            return {"GlobalVar": op.name_hint}
        return self.ref(op)

    def add(self, node: Expr) -> None:
        if isinstance(node, Var):
            rec = {"t": "Var", "name": node.name_hint, "type": _enc_type(node.type_annotation)}
        elif isinstance(node, Constant):
            value = node.value
            data = value.astype(np.uint8) if value.dtype == np.bool_ else value
            rec = {"t": "Constant", "dtype": str(node.tensor_type.dtype), "shape": list(value.shape),
                   "data": base64.b64encode(np.ascontiguousarray(data).tobytes()).decode("ascii")}
        elif isinstance(node, Call):
            rec = {"t": "Call", "op": self.callee(node.op),
                   "args": [self.ref(a) for a in node.args],
                   "attrs": _enc_attrs(node.attrs, node._short()),
                   "source_names": list(node.source_names)}
        elif isinstance(node, Tuple):
            rec = {"t": "Tuple", "fields": [self.ref(f) for f in node.fields]}
        elif isinstance(node, TupleGetItem):
            rec = {"t": "TupleGetItem", "value": self.ref(node.tuple_value), "index": node.index}
        elif isinstance(node, Function):
            rec = {"t": "Function", "params": [self.ref(p) for p in node.params],
                   "body": self.ref(node.body), "ret_type": _enc_type(node.ret_type),
                   "attrs": _enc_value(dict(node.attrs), "function attributes")}
        elif isinstance(node, GlobalVar):
            rec = {"t": "GlobalVar", "name": node.name_hint}
        elif isinstance(node, Op):
            rec = {"t": "Op", "name": node.name}
        elif isinstance(node, If):
            rec = {"t": "If", "cond": self.ref(node.cond), "then": self.ref(node.then_branch),
                   "else": self.ref(node.else_branch)}
        elif isinstance(node, Let):
            rec = {"t": "Let", "var": self.ref(node.var), "value": self.ref(node.value),
                   "body": self.ref(node.body)}
        else:
            raise _error(f"cannot save a {type(node).__name__}")
        self.index[id(node)] = len(self.nodes)
        self.nodes.append(rec)

    def expr(self, root: Expr) -> int:
        for node in post_order(root):
            if id(node) not in self.index:
                self.add(node)
        return self.index[id(root)]


class _Decoder:
    def __init__(self, records: list[Any]):
        self.records = records
        self.built: list[Expr] = []

    def get(self, i: Any, at: int) -> Expr:
        if not isinstance(i, int) or not 0 <= i < len(self.built):
            raise _error(f"node {at} refers to node {i!r}, which is not an earlier node")
        return self.built[i]

    def build_all(self) -> None:
        for at, rec in enumerate(self.records):
            try:
                self.built.append(self.build(rec, at))
            except (KeyError, TypeError, ValueError) as e:
                raise _error(f"node {at} ({str(rec)[:80]}) is malformed: "
                             f"{type(e).__name__}: {e}") from None

    def build(self, rec: dict[str, Any], at: int) -> Expr:
        kind = rec["t"]
        if kind == "Var":
            return Var(rec["name"], _dec_type(rec["type"]))
        if kind == "Constant":
            dtype = np_dtype(rec["dtype"])
            raw = base64.b64decode(rec["data"], validate=True)
            store = np.dtype(np.uint8) if dtype == np.bool_ else dtype
            shape = tuple(rec["shape"])
            if len(raw) != store.itemsize * int(np.prod(shape, dtype=np.int64)):
                raise _error(f"node {at}: constant of shape {shape} {dtype} has {len(raw)} bytes")
            arr = np.frombuffer(raw, dtype=store).reshape(shape)
            return Constant(arr.astype(np.bool_) if dtype == np.bool_ else arr)
        if kind == "Call":
            op = rec["op"]
            if isinstance(op, dict) and "Op" in op:
                callee: Expr = Op.get(op["Op"])
            elif isinstance(op, dict) and "GlobalVar" in op:
                callee = GlobalVar(op["GlobalVar"])
            else:
                callee = self.get(op, at)
            attrs = _dec_attrs(rec["attrs"])
            return Call(callee, [self.get(a, at) for a in rec["args"]], attrs,
                        source_names=tuple(rec["source_names"]))
        if kind == "Tuple":
            return Tuple([self.get(f, at) for f in rec["fields"]])
        if kind == "TupleGetItem":
            return TupleGetItem(self.get(rec["value"], at), rec["index"])
        if kind == "Function":
            params = [self.get(p, at) for p in rec["params"]]
            return Function(params, self.get(rec["body"], at), _dec_type(rec["ret_type"]),  # type: ignore[arg-type]
                            attrs=_dec_value(rec["attrs"]))
        if kind == "GlobalVar":
            return GlobalVar(rec["name"])
        if kind == "Op":
            return Op.get(rec["name"])
        if kind == "If":
            return If(self.get(rec["cond"], at), self.get(rec["then"], at), self.get(rec["else"], at))
        if kind == "Let":
            return Let(self.get(rec["var"], at), self.get(rec["value"], at),  # type: ignore[arg-type]
                       self.get(rec["body"], at))
        raise _error(f"node {at} has unknown kind {kind!r}")


def save_json(node: Expr | IRModule) -> str:
    """Serialize an expression, a function or a module to JSON text.

    Parameters
    ----------
    node : Expr or IRModule
        What to save.

    Returns
    -------
    str
        The document; :func:`load_json` rebuilds a structurally equal object.

    Examples
    --------
    >>> x = var("x", shape=(2,))
    >>> text = save_json(Function([x], x))
    >>> structural_equal(load_json(text), Function([x], x), map_free_vars=True)  # doctest: +SKIP
    True
    """
    enc = _Encoder()
    doc: dict[str, Any] = {"kiln_ir": FORMAT_VERSION}
    if isinstance(node, IRModule):
        functions = [[gv.name_hint, enc.expr(fn)] for gv, fn in node.items()]
        doc.update(kind="IRModule", functions=functions,
                   attrs=_enc_value(dict(node.attrs), "module attributes"))
    elif isinstance(node, Expr):
        doc.update(kind="Expr", root=enc.expr(node))
    else:
        raise _error(f"save_json takes an Expr or IRModule, got {type(node).__name__}")
    doc["nodes"] = enc.nodes
    return json.dumps(doc, separators=(",", ":"))


def load_json(text: str | bytes) -> Expr | IRModule:
    """Rebuild what :func:`save_json` wrote.

    Parameters
    ----------
    text : str or bytes
        The document.

    Returns
    -------
    Expr or IRModule
        A fresh graph (new variables), structurally equal to the saved one.

    Raises
    ------
    RuntimeFormatError
        The text is not a Kiln IR document or is inconsistent.
    """
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _error(f"not valid JSON ({e})") from None
    if not isinstance(doc, dict) or "kiln_ir" not in doc:
        raise _error("not a Kiln IR document (no 'kiln_ir' key)")
    if doc["kiln_ir"] != FORMAT_VERSION:
        raise _error(f"format version {doc['kiln_ir']!r} is not supported (this Kiln reads "
                     f"{FORMAT_VERSION})")
    records = doc.get("nodes")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise _error("'nodes' must be a list of objects")
    dec = _Decoder(records)
    dec.build_all()
    kind = doc.get("kind")
    if kind == "Expr":
        return dec.get(doc.get("root"), -1)
    if kind == "IRModule":
        mod = IRModule(attrs=_dec_value(doc.get("attrs", {"$map": []})))
        for name, idx in doc.get("functions", []):
            fn = dec.get(idx, -1)
            if not isinstance(fn, Function):
                raise _error(f"module function {name!r} is a {type(fn).__name__}")
            mod[name] = fn
        return mod
    raise _error(f"unknown document kind {kind!r}")
