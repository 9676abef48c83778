"""Relay's text form, as TVM's relay-era printer writes it.

The rules follow TVM's ``RelayTextPrinter`` so that ``mod.show()`` output can be diffed against
TVM's:

- variables, constants, ops and global vars are printed inline; every other node gets a ``%n``
  binding the first time a user prints it, except the root of a function body;
- nodes are visited children-first (arguments left to right, then the call), and a binding is
  emitted when its first user is printed, so the numbering matches TVM's even for shared nodes;
- a node's ``/* ty=... */`` comment is printed the first time the node is printed, if its type is
  known; parameter names are made unique across the whole module (``%p0``, ``%p01``, ...);
- the root of a scope (a function body, a branch) and a let's value are printed inline when the
  node has one user (TVM's dependency-graph ``IsUnique``);
- functions of a module are printed in alphabetical order; scalar constants of TVM's simple dtypes
  inline (``1f``, ``2i64``), other constants as ``meta[relay.Constant][k]``, with the table
  appended as a ``#[metadata]`` section (TVM's JSON) when ``show_meta_data`` is set, so that
  :func:`kiln.frontend.relay_text.parse` reads the text back to a structurally equal program;
- floats print as TVM does (6 significant digits) unless that loses bits, then in full.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.ir.attrs import Attrs, DictAttrs
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
from kiln.ir.meta_json import dump_meta_section
from kiln.ir.ref import RefCreate, RefRead, RefWrite
from kiln.ir.types import FuncType, TensorType, TupleType, Type
from kiln.ir.visitor import children

__all__ = ["astext", "format_attr_value", "format_type"]

VERSION_HEADER = '#[version = "0.0.5"]'
_META_NOTE = (
    "/* For debugging purposes the metadata section has been omitted.\n"
    " * If you would like to see the full metadata section you can set the \n"
    " * option to `True` when invoking `astext`. \n"
    " */"
)


def format_type(ty: Type | None) -> str:
    """A type in relay's text form."""
    if ty is None:
        return "?"
    if isinstance(ty, (TensorType, TupleType)):
        return str(ty)
    if isinstance(ty, FuncType):
        args = ", ".join(format_type(a) for a in ty.arg_types)
        return f"fn ({args}) -> {format_type(ty.ret_type)}"
    return str(ty)


def _format_float(value: float, np_type: type = np.float64) -> str:
    """TVM's ``%g`` form when it reads back to the same ``np_type`` value, else the shortest
    exact form."""
    text = f"{value:g}"
    if np_type(float(text)) == np_type(value):
        return text
    return repr(float(value)) if np_type is np.float64 else str(np_type(value))


def format_attr_value(value: Any) -> str:
    """An attribute value as TVM prints it (lists in brackets, strings quoted, floats with f)."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return ("-inff" if value < 0 else "inff") if math.isinf(value) else "nanf"
        return _format_float(value) + "f"
    if isinstance(value, str):
        return _str_literal(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(format_attr_value(v) for v in value) + "]"
    if isinstance(value, GlobalVar):
        return f"'{value.name_hint}'"
    if isinstance(value, Attrs):
        return "{" + ", ".join(f"{k}={format_attr_value(v)}" for k, v in value.non_default_items()) + "}"
    return str(value)


def _str_literal(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


# TVM's "simple scalar" dtypes, printed inline with these suffixes (support::IsSimpleScalar)
_SCALAR_SUFFIX = {"float32": "f", "float64": "f64", "float16": "f16", "int32": "",
                  "int64": "i64", "int16": "i16"}


def _scalar_text(c: Constant) -> str | None:
    v = c.value
    if v.ndim != 0:
        return None
    dtype = v.dtype.name
    if dtype == "bool":
        return "True" if bool(v) else "False"
    if dtype not in _SCALAR_SUFFIX:
        return None
    if dtype.startswith("float"):
        f = float(v)
        if math.isinf(f) and dtype == "float32":
            return "-inff" if f < 0 else "inff"
        if not math.isfinite(f):
            return None  # no literal for it: the metadata section carries it
        return _format_float(f, v.dtype.type) + _SCALAR_SUFFIX[dtype]
    return str(int(v)) + _SCALAR_SUFFIX[dtype]


def _dependents(roots: list[Expr]) -> dict[int, int]:
    """How many users each node has (edges of TVM's ``DependencyGraph``)."""
    counts: dict[int, int] = {}
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for child in _edges(node):
            counts[id(child)] = counts.get(id(child), 0) + 1
            if id(child) not in seen:
                stack.append(child)
    return counts


def _edges(node: Expr) -> tuple[Expr, ...]:
    if isinstance(node, Call):
        return (node.op, *node.args)
    if isinstance(node, Tuple):
        return node.fields
    if isinstance(node, TupleGetItem):
        return (node.tuple_value,)
    if isinstance(node, Function):
        return (*node.params, node.body)
    if isinstance(node, Let):
        return (node.var, node.value, node.body)
    if isinstance(node, If):
        return (node.cond, node.then_branch, node.else_branch)
    if isinstance(node, (RefCreate, RefRead, RefWrite)):
        return children(node)
    return ()


def _indent(text: str, n: int = 2) -> str:
    return text.replace("\n", "\n" + " " * n)


Annotate = Callable[[Expr], str]


class _Printer:
    def __init__(self, annotate: Annotate | None = None) -> None:
        self.annotate = annotate
        self.users: dict[int, int] = {}
        self.memo: dict[int, str] = {}
        self.result_memo: dict[int, str] = {}
        self.var_memo: set[int] = set()
        self.opt_info_done: set[int] = set()
        self.names: dict[str, int] = {}
        self.scopes: list[list[str]] = [[]]
        self.temp = 0
        self.meta: dict[int, int] = {}
        self.meta_nodes: list[Constant] = []
        self.keep: list[Expr] = []

    # --- expressions -----------------------------------------------------------------------
    def print_expr(self, expr: Expr, try_inline: bool = False) -> str:
        self.keep.append(expr)
        inline = isinstance(expr, (GlobalVar, Constant, Op, Var)) or (
            try_inline and self.users.get(id(expr), 0) <= 1)
        printed = self.visit(expr)
        if isinstance(expr, Let) and not inline:
            printed = "(\n  " + _indent(printed) + "\n)"
        printed += self.opt_info(expr)
        if isinstance(expr, Var):
            first = id(expr) not in self.var_memo
            self.var_memo.add(id(expr))
            if first and id(expr) in self.result_memo:
                self.scopes[-1].append(f"free_var {self.result_memo[id(expr)]};")
            return self.memo[id(expr)]
        if inline:
            self.memo[id(expr)] = printed
            return printed
        if id(expr) in self.var_memo:
            return self.memo[id(expr)]
        self.var_memo.add(id(expr))
        temp = f"%{self.temp}"
        self.temp += 1
        self.memo[id(expr)] = temp
        self.scopes[-1].append(f"{temp} = {printed};")
        return temp

    def visit(self, expr: Expr) -> str:
        if id(expr) not in self.memo:
            self._expand_dataflow(expr)
        return self.memo[id(expr)]

    def _expand_dataflow(self, expr: Expr) -> None:
        stack: list[list[Any]] = [[expr, False]]
        while stack:
            top = stack[-1]
            node = top[0]
            if id(node) in self.memo:
                stack.pop()
            elif top[1]:
                self._visit_leaf(node)
                stack.pop()
            else:
                top[1] = True
                for child in _expand(node):
                    if id(child) not in self.memo:
                        stack.append([child, False])

    def _visit_leaf(self, node: Expr) -> None:
        self.keep.append(node)
        result = self._visit_node(node)
        if id(node) not in self.memo:
            self.memo[id(node)] = result
        else:
            self.result_memo[id(node)] = result

    def _visit_node(self, node: Expr) -> str:
        if isinstance(node, Var):
            return self.alloc_var(node)
        if isinstance(node, Constant):
            text = _scalar_text(node)
            if text is None:
                if id(node) not in self.meta:
                    self.meta[id(node)] = len(self.meta)
                    self.meta_nodes.append(node)
                index = self.meta[id(node)]
                text = f"meta[relay.Constant][{index}]"
            return text
        if isinstance(node, Tuple):
            fields = [self.print_expr(f) for f in node.fields]
            return "(" + ", ".join(fields) + ("," if len(fields) == 1 else "") + ")"
        if isinstance(node, TupleGetItem):
            return f"{self.print_expr(node.tuple_value)}.{node.index}"
        if isinstance(node, Call):
            args = [self.print_expr(a) for a in node.args]
            if node.attrs is not None:
                args += [f"{k}={format_attr_value(v)}" for k, v in node.attrs.non_default_items()]
            return f"{self.print_expr(node.op)}({', '.join(args)})"
        if isinstance(node, Function):
            return self.print_func("fn ", node)
        if isinstance(node, GlobalVar):
            return f"@{node.name_hint}"
        if isinstance(node, Op):
            return node.name
        if isinstance(node, RefCreate):
            return f"ref({self.print_expr(node.value)})"
        if isinstance(node, RefRead):  # TVM's spelling, which the text parser reads back
            return f"ref_read({self.print_expr(node.ref)})"
        if isinstance(node, RefWrite):
            return f"ref_write({self.print_expr(node.ref)}, {self.print_expr(node.value)})"
        if isinstance(node, If):
            cond = self.print_expr(node.cond)
            return (f"if ({cond}) {self.print_body(node.then_branch)} else "
                    f"{self.print_body(node.else_branch)}")
        if isinstance(node, Let):
            # TVM's let chain: each value's bindings go after the previous let line
            n = 0
            body: Expr = node
            while isinstance(body, Let):
                value = self.print_expr(body.value, try_inline=True)
                self.scopes.append([f"let {self.alloc_var(body.var)} = {value};"])
                body = body.body
                n += 1
            last = self.print_scope(body)
            lines = [line for scope in self.scopes[-n:] for line in scope]
            del self.scopes[-n:]
            return "\n".join([*lines, last])
        raise TypeError(f"cannot print {type(node).__name__}")

    def opt_info(self, expr: Expr) -> str:
        if id(expr) in self.opt_info_done:
            return ""
        self.opt_info_done.add(id(expr))
        if self.annotate is not None:
            return str(self.annotate(expr) or "")
        if not isinstance(expr, (Constant, Call, Var, Function, Tuple, TupleGetItem)):
            return ""
        span = getattr(expr, "span", None)
        if not expr.has_type and span is None:
            return ""
        info = f" ty={format_type(expr.checked_type)}" if expr.has_type else ""
        if span is not None:
            info += f" span={span}"
        return f" /*{info} */"

    def unique_name(self, prefix: str) -> str:
        name = prefix
        if prefix in self.names:
            while True:
                self.names[prefix] += 1
                candidate = f"{prefix}{self.names[prefix]}"
                if candidate not in self.names:
                    name = candidate
                    break
        self.names[name] = 0
        return name

    def alloc_var(self, var: Var) -> str:
        self.keep.append(var)
        name = var.name_hint
        if not name or not (name[0].isascii() and name[0].isalpha()):
            name = "v" + name
        text = self.unique_name("%" + name)
        self.memo[id(var)] = text
        if var.type_annotation is not None:
            text += ": " + format_type(var.type_annotation)
        return text + self.opt_info(var)

    # --- functions and scopes --------------------------------------------------------------
    def print_scope(self, body: Expr) -> str:
        self.scopes.append([])
        root = self.print_expr(body, try_inline=True)
        lines = self.scopes.pop()
        return "\n".join([*lines, root])

    def print_body(self, body: Expr) -> str:
        return "{\n  " + _indent(self.print_scope(body)) + "\n}"

    def print_func(self, prefix: str, fn: Function) -> str:
        params = [self.alloc_var(p) for p in fn.params]
        params += [f"{k}={format_attr_value(v)}" for k, v in _dict_items(fn.attrs)]
        text = prefix + "(" + ", ".join(params) + ") "
        if fn.ret_type is not None:
            text += f"-> {format_type(fn.ret_type)} "
        return text + self.print_body(fn.body)


def _dict_items(attrs: DictAttrs) -> list[tuple[str, Any]]:
    return list(attrs.items())


def _expand(node: Expr) -> list[Expr]:
    # Order of TVM's ExpandDataflow: pushed reversed, so the first argument is visited first.
    if isinstance(node, Call):
        return [*reversed(node.args), node.op]
    if isinstance(node, Tuple):
        return list(reversed(node.fields))
    if isinstance(node, TupleGetItem):
        return [node.tuple_value]
    return []


def astext(obj: Any, header: bool = True, show_meta_data: bool = False,
           annotate: Annotate | None = None) -> str:
    """Relay text of an :class:`~kiln.ir.module.IRModule` or an expression.

    Parameters
    ----------
    obj : IRModule or Expr
        What to print.
    header : bool
        Whether to start with TVM's ``#[version = "0.0.5"]`` line.
    show_meta_data : bool
        Append the ``#[metadata]`` section (non-scalar constants, TVM's JSON) that
        ``meta[relay.Constant][k]`` refers to; without it a note says it was omitted.
    annotate : callable, optional
        ``annotate(expr) -> str`` replaces the ``/* ty=... */`` comments (TVM's ``annotate``).
    """
    from kiln.ir.module import IRModule

    printer = _Printer(annotate)
    if isinstance(obj, IRModule):
        printer.users = _dependents([obj[gv] for gv in obj.functions])
        parts = []
        for gv in sorted(obj.functions, key=lambda g: g.name_hint):
            parts.append(printer.print_func(f"def @{gv.name_hint}", obj[gv]) + "\n")
        text = "\n".join(parts)
    elif isinstance(obj, Expr):
        printer.users = _dependents([obj])
        text = printer.print_scope(obj)
    elif isinstance(obj, Type):
        return format_type(obj)
    else:
        raise TypeError(f"cannot print {type(obj).__name__} as relay text")
    if printer.meta and show_meta_data:
        table = dump_meta_section(printer.meta_nodes)
        text = text.rstrip("\n") + "\n#[metadata]\n" + table
    elif printer.meta:
        text = text.rstrip("\n") + "\n" + _META_NOTE
    return (VERSION_HEADER + "\n" if header else "") + text

