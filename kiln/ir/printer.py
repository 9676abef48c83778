"""Relay's text form, as TVM's relay-era printer writes it.

The rules follow TVM's ``RelayTextPrinter`` so that ``mod.show()`` output can be diffed against
TVM's:

- variables, constants, ops and global vars are printed inline; every other node gets a ``%n``
  binding the first time a user prints it, except the root of a function body;
- nodes are visited children-first (arguments left to right, then the call), and a binding is
  emitted when its first user is printed, so the numbering matches TVM's even for shared nodes;
- a node's ``/* ty=... */`` comment is printed the first time the node is printed, if its type is
  known; parameter names are made unique across the whole module (``%p0``, ``%p01``, ...);
- functions of a module are printed in alphabetical order; scalar constants inline (``1f``,
  ``2i64``), other constants as ``meta[relay.Constant][k]``.
"""

from __future__ import annotations

from typing import Any

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
from kiln.ir.types import FuncType, TensorType, TupleType, Type

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


def _format_float(value: float) -> str:
    return f"{value:g}"


def format_attr_value(value: Any) -> str:
    """An attribute value as TVM prints it (lists in brackets, strings quoted, floats with f)."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
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


_SCALAR_SUFFIX = {"float32": "f", "float64": "f64", "float16": "f16", "int32": "",
                  "int64": "i64", "int16": "i16", "int8": "i8"}


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
        return _format_float(float(v)) + _SCALAR_SUFFIX[dtype]
    return str(int(v)) + _SCALAR_SUFFIX[dtype]


def _indent(text: str, n: int = 2) -> str:
    return text.replace("\n", "\n" + " " * n)


class _Printer:
    def __init__(self) -> None:
        self.memo: dict[int, str] = {}
        self.result_memo: dict[int, str] = {}
        self.var_memo: set[int] = set()
        self.opt_info_done: set[int] = set()
        self.names: dict[str, int] = {}
        self.scopes: list[list[str]] = [[]]
        self.temp = 0
        self.meta: dict[int, int] = {}
        self.keep: list[Expr] = []

    # --- expressions -----------------------------------------------------------------------
    def print_expr(self, expr: Expr, try_inline: bool = False) -> str:
        self.keep.append(expr)
        inline = isinstance(expr, (GlobalVar, Constant, Op, Var)) or try_inline
        printed = self.visit(expr) + self.opt_info(expr)
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
                index = self.meta.setdefault(id(node), len(self.meta))
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
        if isinstance(node, If):
            cond = self.print_expr(node.cond)
            return (f"if ({cond}) {self.print_body(node.then_branch)} else "
                    f"{self.print_body(node.else_branch)}")
        if isinstance(node, Let):
            value = self.print_expr(node.value, try_inline=True)
            line = f"let {self.alloc_var(node.var)} = {value};"
            return "(\n  " + _indent(line + "\n" + self.print_scope(node.body)) + "\n)"
        raise TypeError(f"cannot print {type(node).__name__}")

    def opt_info(self, expr: Expr) -> str:
        if id(expr) in self.opt_info_done:
            return ""
        self.opt_info_done.add(id(expr))
        if isinstance(expr, (Constant, Call, Var, Function, Tuple, TupleGetItem)) and expr.has_type:
            return f" /* ty={format_type(expr.checked_type)} */"
        return ""

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


def astext(obj: Any, header: bool = True) -> str:
    """Relay text of an :class:`~kiln.ir.module.IRModule` or an expression.

    Parameters
    ----------
    obj : IRModule or Expr
        What to print.
    header : bool
        Whether to start with TVM's ``#[version = "0.0.5"]`` line.
    """
    from kiln.ir.module import IRModule

    printer = _Printer()
    if isinstance(obj, IRModule):
        parts = []
        for gv in sorted(obj.functions, key=lambda g: g.name_hint):
            parts.append(printer.print_func(f"def @{gv.name_hint}", obj[gv]) + "\n")
        text = "\n".join(parts)
    elif isinstance(obj, Expr):
        text = printer.print_scope(obj)
    elif isinstance(obj, Type):
        return format_type(obj)
    else:
        raise TypeError(f"cannot print {type(obj).__name__} as relay text")
    if printer.meta:
        text = text.rstrip("\n") + "\n" + _META_NOTE
    return (VERSION_HEADER + "\n" if header else "") + text

