"""Structural equality and hashing of expressions, types and modules.

Two graphs are structurally equal when they compute the same thing with the same operators,
attributes and constants, up to renaming of the variables functions bind (alpha-equivalence).
Free variables must be the same object unless ``map_free_vars=True``. Source names (provenance) do
not take part. Both walks use explicit stacks, so deep graphs are fine.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

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
from kiln.ir.ref import RefCreate, RefRead, RefWrite
from kiln.ir.visitor import children, post_order

__all__ = ["assert_structural_equal", "content_digest", "structural_equal", "structural_hash"]


class _Mismatch(Exception):
    pass


def _consts_equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


class _Path:
    """Where a compared pair sits (``root/add.args[0]/...``), spelled out only for a mismatch:
    building every path as a string would cost the graph's depth per node."""

    __slots__ = ("parent", "step")

    def __init__(self, parent: _Path | None, step: str):
        self.parent = parent
        self.step = step

    def __str__(self) -> str:
        steps = []
        node: _Path | None = self
        while node is not None:
            steps.append(node.step)
            node = node.parent
        return "".join(reversed(steps))


def _compare(a: Any, b: Any, map_free_vars: bool) -> None:
    var_map: dict[int, Var] = {}
    done: set[tuple[int, int]] = set()
    keep: list[Any] = []
    stack: list[tuple[Any, Any, _Path]] = [(a, b, _Path(None, "root"))]

    def bind(x: Var, y: Var, path: _Path) -> None:
        if x.type_annotation != y.type_annotation:
            raise _Mismatch(f"{path}: variable types differ: {x.type_annotation} vs {y.type_annotation}")
        var_map[id(x)] = y

    while stack:
        x, y, path = stack.pop()
        if isinstance(x, Expr) or isinstance(y, Expr):
            if (id(x), id(y)) in done:
                continue
            done.add((id(x), id(y)))
            keep.append((x, y))
        if type(x) is not type(y):
            raise _Mismatch(f"{path}: {type(x).__name__} vs {type(y).__name__}")
        if isinstance(x, Var):
            if id(x) in var_map:
                if var_map[id(x)] is not y:
                    raise _Mismatch(f"{path}: variable %{x.name_hint} maps to another variable "
                                    f"than %{y.name_hint}")
            elif x is not y:
                if not map_free_vars:
                    raise _Mismatch(f"{path}: free variables %{x.name_hint} and %{y.name_hint} "
                                    "are different objects")
                bind(x, y, path)
        elif isinstance(x, Constant):
            if not _consts_equal(x.value, y.value):
                raise _Mismatch(f"{path}: constants differ: {x._short()} vs {y._short()}")
        elif isinstance(x, Op):
            if x.name != y.name:
                raise _Mismatch(f"{path}: op {x.name} vs {y.name}")
        elif isinstance(x, GlobalVar):
            if x.name_hint != y.name_hint:
                raise _Mismatch(f"{path}: @{x.name_hint} vs @{y.name_hint}")
        elif isinstance(x, Call):
            if len(x.args) != len(y.args):
                raise _Mismatch(f"{path}: {len(x.args)} vs {len(y.args)} arguments")
            if x.attrs != y.attrs:
                raise _Mismatch(f"{path}: attributes differ: {x.attrs} vs {y.attrs}")
            name = x.op.name if isinstance(x.op, Op) else "call"
            for i in reversed(range(len(x.args))):
                stack.append((x.args[i], y.args[i], _Path(path, f"/{name}.args[{i}]")))
            stack.append((x.op, y.op, _Path(path, f"/{name}.op")))
        elif isinstance(x, Tuple):
            if len(x.fields) != len(y.fields):
                raise _Mismatch(f"{path}: tuples of {len(x.fields)} vs {len(y.fields)} fields")
            for i in reversed(range(len(x.fields))):
                stack.append((x.fields[i], y.fields[i], _Path(path, f"/tuple[{i}]")))
        elif isinstance(x, TupleGetItem):
            if x.index != y.index:
                raise _Mismatch(f"{path}: tuple index {x.index} vs {y.index}")
            stack.append((x.tuple_value, y.tuple_value, _Path(path, f"/.{x.index}")))
        elif isinstance(x, Function):
            if len(x.params) != len(y.params):
                raise _Mismatch(f"{path}: functions of {len(x.params)} vs {len(y.params)} params")
            if x.attrs != y.attrs:
                raise _Mismatch(f"{path}: function attributes differ: {dict(x.attrs)} vs "
                                f"{dict(y.attrs)}")
            if x.ret_type != y.ret_type:
                raise _Mismatch(f"{path}: return types differ: {x.ret_type} vs {y.ret_type}")
            for p, q in zip(x.params, y.params):
                bind(p, q, path)
            stack.append((x.body, y.body, _Path(path, "/body")))
        elif isinstance(x, (If, RefCreate, RefRead, RefWrite)):
            for i, (cx, cy) in enumerate(zip(children(x), children(y))):
                stack.append((cx, cy, _Path(path, f"/if[{i}]")))
        elif isinstance(x, Let):
            bind(x.var, y.var, path)
            stack.append((x.body, y.body, _Path(path, "/let.body")))
            stack.append((x.value, y.value, _Path(path, "/let.value")))
        elif isinstance(x, IRModule):
            names_x = sorted(g.name_hint for g in x.functions)
            names_y = sorted(g.name_hint for g in y.functions)
            if names_x != names_y:
                raise _Mismatch(f"modules hold different functions: {names_x} vs {names_y}")
            for name in reversed(names_x):
                stack.append((x[name], y[name], _Path(None, f"@{name}")))
        elif x != y:
            raise _Mismatch(f"{path}: {x} vs {y}")


def structural_equal(lhs: Any, rhs: Any, map_free_vars: bool = False) -> bool:
    """Whether two expressions, types or modules are structurally equal.

    Parameters
    ----------
    lhs, rhs : Expr, Type or IRModule
        What to compare.
    map_free_vars : bool
        Treat free variables as equal when they are used in the same places.
    """
    try:
        _compare(lhs, rhs, map_free_vars)
    except _Mismatch:
        return False
    return True


def assert_structural_equal(lhs: Any, rhs: Any, map_free_vars: bool = False) -> None:
    """Raise ``ValueError`` naming the first difference when ``lhs`` and ``rhs`` differ."""
    try:
        _compare(lhs, rhs, map_free_vars)
    except _Mismatch as e:
        raise ValueError(f"structural mismatch at {e}\n--- lhs ---\n{lhs}\n--- rhs ---\n{rhs}") from None


def _h(*parts: Any) -> int:
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def structural_hash(node: Any, map_free_vars: bool = False) -> int:
    """A hash consistent with :func:`structural_equal` (variables hashed by binding order)."""
    if isinstance(node, IRModule):
        return _h("mod", *[(g.name_hint, structural_hash(node[g])) for g in
                            sorted(node.functions, key=lambda g: g.name_hint)])
    if not isinstance(node, Expr):
        return _h("value", node)
    hashes: dict[int, int] = {}
    var_index: dict[int, int] = {}
    for n in post_order(node):
        if isinstance(n, Var):
            var_index.setdefault(id(n), len(var_index))
            hashes[id(n)] = _h("var", var_index[id(n)], n.type_annotation)
            continue
        kid = tuple(hashes.get(id(c), 0) for c in children(n))
        if isinstance(n, Constant):
            value = n.value
            hashes[id(n)] = _h("const", value.dtype.str, value.shape,
                               hashlib.blake2b(np.ascontiguousarray(value).tobytes()).hexdigest())
        elif isinstance(n, Call):
            op = n.op.name if isinstance(n.op, Op) else (
                n.op.name_hint if isinstance(n.op, GlobalVar) else "fn")
            hashes[id(n)] = _h("call", op, n.attrs, kid)
        elif isinstance(n, Function):
            hashes[id(n)] = _h("fn", tuple(sorted(n.attrs.items(), key=lambda kv: kv[0])),
                               n.ret_type, kid)
        elif isinstance(n, TupleGetItem):
            hashes[id(n)] = _h("tgi", n.index, kid)
        else:
            hashes[id(n)] = _h(type(n).__name__, kid)
    return hashes[id(node)]


def content_digest(node: IRModule | Expr) -> str:
    """A SHA-256 (hex) of everything a build reads from ``node``: unlike :func:`structural_hash`
    it also covers variable names, source names (provenance) and module attributes, so equal
    digests mean the same graph JSON, kernel names and code headers (the build cache's key)."""
    h = hashlib.sha256()
    if isinstance(node, IRModule):
        h.update(repr(sorted((k, repr(v)) for k, v in node.attrs.items())).encode())
        for gv in sorted(node.functions, key=lambda g: g.name_hint):
            h.update(f"@{gv.name_hint}={content_digest(node[gv])}\n".encode())
        return h.hexdigest()
    index: dict[int, int] = {}

    def ref(e: Expr) -> int:
        return index.setdefault(id(e), len(index))

    for n in post_order(node):
        kids = [ref(c) for c in children(n)]
        if isinstance(n, Var):
            line = f"var {n.name_hint!r} {n.type_annotation!r}"
        elif isinstance(n, Constant):
            value = np.ascontiguousarray(n.value)
            h.update(value.reshape(-1).view(np.uint8).data)
            line = f"const {value.dtype.str} {value.shape}"
        elif isinstance(n, Call):
            op = n.op
            callee = (op.name if isinstance(op, Op) else f"@{op.name_hint}"
                      if isinstance(op, GlobalVar) else f"%{ref(op)}" if isinstance(op, Var) else "fn")
            line = f"call {callee} {n.attrs!r} {n.source_names!r}"
        elif isinstance(n, Function):
            line = f"fn {sorted((k, repr(v)) for k, v in n.attrs.items())!r} {n.ret_type!r}"
        elif isinstance(n, TupleGetItem):
            line = f"tgi {n.index}"
        elif isinstance(n, GlobalVar):
            line = f"gv {n.name_hint}"
        else:
            line = type(n).__name__
        h.update(f"{ref(n)} {line} {kids}\n".encode())
    return h.hexdigest()
