"""``relay.expr_functor``: visitors and mutators, with TVM's calling convention.

TVM's ``ExprMutator`` is top-down: ``visit_call(call)`` receives the *original* call, and its
default visits the callee and arguments through ``self.visit`` (memoized, so a shared node is
rewritten once) and rebuilds the call only when something changed. Scripts written for TVM keep
state across that recursion (``relay.testing.byoc.CcompilerAnnotator``), so the facade's mutator
follows it. Kiln's own passes use the bottom-up :class:`kiln.ir.visitor.ExprMutator`, whose
``visit_<kind>`` receives the node already rebuilt on its children.
"""

from __future__ import annotations

import sys

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
from kiln.ir.visitor import ExprVisitor, post_order_visit

__all__ = ["ExprMutator", "ExprVisitor", "post_order_visit"]

_METHOD = {Call: "visit_call", Function: "visit_function", Let: "visit_let", Var: "visit_var",
           GlobalVar: "visit_global_var", If: "visit_if", Tuple: "visit_tuple",
           TupleGetItem: "visit_tuple_getitem", Constant: "visit_constant", Op: "visit_op"}
_MIN_RECURSION = 20000  # a chain of N calls recurses about 2N frames


class ExprMutator:
    """A memoizing, top-down expression mutator (TVM's ``relay.ExprMutator``).

    Override ``visit_<kind>(node)``; call ``self.visit(child)`` (or the ``super()`` method) to
    recurse. ``self.memo_map`` maps ``id(node)`` of each visited node to ``(node, replacement)``
    (by identity, as TVM's memo is).
    """

    def __init__(self) -> None:
        self.memo_map: dict[int, tuple[Expr, Expr]] = {}

    def visit(self, expr: Expr) -> Expr:
        """The replacement of ``expr`` (computed once per node)."""
        if id(expr) in self.memo_map:
            return self.memo_map[id(expr)][1]
        method = next((name for kind, name in _METHOD.items() if isinstance(expr, kind)), None)
        if method is None:
            raise TypeError(f"ExprMutator: cannot visit a {type(expr).__name__}")
        if sys.getrecursionlimit() < _MIN_RECURSION:
            sys.setrecursionlimit(_MIN_RECURSION)
        new = getattr(self, method)(expr)
        self.memo_map[id(expr)] = (expr, new)
        return new

    def visit_function(self, fn: Function) -> Expr:
        """Visit the parameters and body; rebuild the function if one changed."""
        params = [self.visit(p) for p in fn.params]
        body = self.visit(fn.body)
        if body is fn.body and all(a is b for a, b in zip(params, fn.params, strict=True)):
            return fn
        return Function(params, body, fn.ret_type, attrs=fn.attrs)  # type: ignore[arg-type]

    def visit_let(self, let: Let) -> Expr:
        """Visit the variable, value and body; rebuild the let."""
        return Let(self.visit(let.var), self.visit(let.value), self.visit(let.body))  # type: ignore[arg-type]

    def visit_call(self, call: Call) -> Expr:
        """Visit the callee and the arguments; rebuild the call if one changed."""
        op = self.visit(call.op)
        args = [self.visit(a) for a in call.args]
        if op is call.op and all(a is b for a, b in zip(args, call.args, strict=True)):
            return call
        return Call(op, args, call.attrs, source_names=call.source_names)

    def visit_var(self, var: Var) -> Expr:
        """A variable stays itself."""
        return var

    def visit_global_var(self, gv: GlobalVar) -> Expr:
        """A global variable stays itself."""
        return gv

    def visit_if(self, node: If) -> Expr:
        """Visit the condition and branches; rebuild the if."""
        return If(self.visit(node.cond), self.visit(node.then_branch), self.visit(node.else_branch))

    def visit_tuple(self, tup: Tuple) -> Expr:
        """Visit the fields; rebuild the tuple if one changed."""
        fields = [self.visit(f) for f in tup.fields]
        if all(a is b for a, b in zip(fields, tup.fields, strict=True)):
            return tup
        return Tuple(fields)

    def visit_tuple_getitem(self, op: TupleGetItem) -> Expr:
        """Visit the tuple; rebuild the projection if it changed."""
        value = self.visit(op.tuple_value)
        return op if value is op.tuple_value else TupleGetItem(value, op.index)

    def visit_constant(self, const: Constant) -> Expr:
        """A constant stays itself."""
        return const

    def visit_op(self, op: Op) -> Expr:
        """An operator stays itself."""
        return op
