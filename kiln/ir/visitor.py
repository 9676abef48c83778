"""Traversal of expression graphs without recursion.

Models have thousands of nodes in a chain, far past Python's recursion limit, so every traversal
here is an explicit-stack post-order walk that visits each shared node once.

- :func:`post_order` lists the nodes of a graph, children before parents.
- :func:`rewrite` rebuilds a graph bottom-up: each node is first rebuilt on its rewritten children,
  then handed to a callback that may return a replacement (TVM's ``PostOrderRewrite``).
- :class:`ExprVisitor` and :class:`ExprMutator` dispatch per node kind on top of those two.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
from kiln.ir.ref import RefCreate, RefRead, RefWrite

__all__ = [
    "ExprMutator",
    "ExprVisitor",
    "children",
    "post_order",
    "post_order_visit",
    "rebuild",
    "rewrite",
]


def children(expr: Expr) -> tuple[Expr, ...]:
    """The sub-expressions of ``expr`` that are graph values, in evaluation order."""
    if isinstance(expr, Call):
        if not isinstance(expr.op, (Op, GlobalVar, Var)):  # a function literal or a computed callee
            return (expr.op, *expr.args)
        return expr.args
    if isinstance(expr, Tuple):
        return expr.fields
    if isinstance(expr, TupleGetItem):
        return (expr.tuple_value,)
    if isinstance(expr, Function):
        return (*expr.params, expr.body)
    if isinstance(expr, If):
        return (expr.cond, expr.then_branch, expr.else_branch)
    if isinstance(expr, Let):
        return (expr.var, expr.value, expr.body)
    if isinstance(expr, (RefCreate, RefRead, RefWrite)):
        return _ref_children(expr)
    return ()


def _ref_children(expr: RefCreate | RefRead | RefWrite) -> tuple[Expr, ...]:
    if isinstance(expr, RefCreate):
        return (expr.value,)
    if isinstance(expr, RefRead):
        return (expr.ref,)
    return (expr.ref, expr.value)


def post_order(expr: Expr, into_functions: bool = True) -> list[Expr]:
    """Every node reachable from ``expr``, each once, children before their users.

    Parameters
    ----------
    expr : Expr
        The root.
    into_functions : bool
        Whether to descend into function literals (fused functions called from the graph).
    """
    order: list[Expr] = []
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        if isinstance(node, Function) and not into_functions and node is not expr:
            continue
        kids = children(node)
        for child in reversed(kids):
            if id(child) not in seen:
                stack.append((child, False))
    return order


def post_order_visit(expr: Expr, fvisit: Callable[[Expr], Any]) -> None:
    """Call ``fvisit`` on every node, children first (TVM's ``relay.analysis.post_order_visit``)."""
    for node in post_order(expr):
        fvisit(node)


def rebuild(node: Expr, new_children: tuple[Expr, ...]) -> Expr:
    """``node`` with its children replaced; ``node`` itself when none changed.

    Calls keep their attributes and source names; a function whose body changed drops its
    declared return type (InferType fills it again).
    """
    old = children(node)
    if len(old) == len(new_children) and all(a is b for a, b in zip(old, new_children)):
        return node
    new = _rebuild(node, new_children)
    # Like TVM's copy-on-write rebuilds, keep the known type, but only when it cannot have
    # changed: every child has the same type as the child it replaces.
    if node._checked_type is not None and all(
            a._checked_type is not None and a._checked_type == b._checked_type
            for a, b in zip(old, new_children)):
        new._set_checked_type(node._checked_type)
    return new


def _rebuild(node: Expr, new_children: tuple[Expr, ...]) -> Expr:
    if isinstance(node, Call):
        if not isinstance(node.op, (Op, GlobalVar, Var)):
            op, args = new_children[0], new_children[1:]
        else:
            op, args = node.op, new_children
        return Call(op, args, node.attrs, source_names=node.source_names)
    if isinstance(node, Tuple):
        return Tuple(new_children)
    if isinstance(node, TupleGetItem):
        return TupleGetItem(new_children[0], node.index)
    if isinstance(node, Function):
        *params, body = new_children
        same = body is node.body or (body._checked_type is not None
                                     and body._checked_type == node.body._checked_type)
        ret = node.ret_type if same else None
        return Function(params, body, ret, attrs=node.attrs)  # type: ignore[arg-type]
    if isinstance(node, If):
        return If(*new_children)
    if isinstance(node, Let):
        return Let(new_children[0], new_children[1], new_children[2])  # type: ignore[arg-type]
    if isinstance(node, (RefCreate, RefRead, RefWrite)):
        return type(node)(*new_children)
    raise TypeError(f"{type(node).__name__} has no children to replace")


def rewrite(
    expr: Expr,
    fn: Callable[[Expr, Expr], Expr | None],
    into_functions: bool = True,
    memo: dict[int, Expr] | None = None,
) -> Expr:
    """Rebuild ``expr`` bottom-up, letting ``fn`` replace nodes.

    For every node, children first, the node is rebuilt on its rewritten children (``new``) and
    ``fn(new, old)`` is called; a non-``None`` result replaces it.

    Parameters
    ----------
    expr : Expr
        The root.
    fn : callable
        ``fn(new_node, original_node) -> Expr | None``.
    into_functions : bool
        Whether to rewrite inside function literals other than the root.
    memo : dict, optional
        ``id(original) -> replacement``; pre-seed it to substitute nodes (e.g. variables).
    """
    memo = {} if memo is None else memo
    keep: list[Expr] = []  # keeps originals alive so their ids stay unique during the walk
    for node in post_order(expr, into_functions):
        if id(node) in memo:
            continue
        keep.append(node)
        if isinstance(node, Function) and not into_functions and node is not expr:
            memo[id(node)] = node
            continue
        new = rebuild(node, tuple(memo.get(id(c), c) for c in children(node)))
        out = fn(new, node)
        memo[id(node)] = new if out is None else out
    return memo[id(expr)]


class ExprVisitor:
    """Visit every node once, children first, dispatching on the node kind.

    Override ``visit_call``, ``visit_var``, ... ; each receives the node after all of its children
    were visited. Unlike TVM's recursive visitor, handlers must not visit children themselves.
    """

    def visit(self, expr: Expr) -> None:
        """Visit the graph rooted at ``expr``."""
        for node in post_order(expr):
            self._dispatch(node)

    def _dispatch(self, node: Expr) -> Any:
        return getattr(self, _METHOD[type(node)])(node)

    def visit_call(self, call: Call) -> None:
        pass

    def visit_var(self, var: Var) -> None:
        pass

    def visit_constant(self, const: Constant) -> None:
        pass

    def visit_tuple(self, tup: Tuple) -> None:
        pass

    def visit_tuple_getitem(self, t: TupleGetItem) -> None:
        pass

    def visit_function(self, fn: Function) -> None:
        pass

    def visit_global_var(self, gv: GlobalVar) -> None:
        pass

    def visit_op(self, op: Op) -> None:
        pass

    def visit_if(self, node: If) -> None:
        pass

    def visit_let(self, node: Let) -> None:
        pass

    def visit_ref_create(self, node: RefCreate) -> None:
        pass

    def visit_ref_read(self, node: RefRead) -> None:
        pass

    def visit_ref_write(self, node: RefWrite) -> None:
        pass


class ExprMutator:
    """Rebuild a graph bottom-up, dispatching on the node kind.

    Each ``visit_<kind>(node)`` receives the node already rebuilt on its mutated children and
    returns its replacement (default: the node). ``visit(expr)`` returns the new root.
    """

    def visit(self, expr: Expr) -> Expr:
        """Mutate the graph rooted at ``expr``."""
        return rewrite(expr, lambda new, old: getattr(self, _METHOD[type(new)])(new))

    def visit_call(self, call: Call) -> Expr:
        return call

    def visit_var(self, var: Var) -> Expr:
        return var

    def visit_constant(self, const: Constant) -> Expr:
        return const

    def visit_tuple(self, tup: Tuple) -> Expr:
        return tup

    def visit_tuple_getitem(self, t: TupleGetItem) -> Expr:
        return t

    def visit_function(self, fn: Function) -> Expr:
        return fn

    def visit_global_var(self, gv: GlobalVar) -> Expr:
        return gv

    def visit_op(self, op: Op) -> Expr:
        return op

    def visit_if(self, node: If) -> Expr:
        return node

    def visit_let(self, node: Let) -> Expr:
        return node

    def visit_ref_create(self, node: RefCreate) -> Expr:
        return node

    def visit_ref_read(self, node: RefRead) -> Expr:
        return node

    def visit_ref_write(self, node: RefWrite) -> Expr:
        return node


_METHOD: dict[type, str] = {
    Call: "visit_call",
    Var: "visit_var",
    Constant: "visit_constant",
    Tuple: "visit_tuple",
    TupleGetItem: "visit_tuple_getitem",
    Function: "visit_function",
    GlobalVar: "visit_global_var",
    Op: "visit_op",
    If: "visit_if",
    Let: "visit_let",
    RefCreate: "visit_ref_create",
    RefRead: "visit_ref_read",
    RefWrite: "visit_ref_write",
}
