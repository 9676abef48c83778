"""Generic traversal of expressions: children, rebuilding, post-order walks and substitution.

Walks are iterative (fused graphs inline long chains of elementwise ops, which makes deep
expression trees) and memoised by node identity, so shared sub-expressions are visited once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from kiln.te.expr import (
    And,
    Binary,
    Call,
    Cast,
    Compare,
    FloatImm,
    IntImm,
    Not,
    Or,
    PrimExpr,
    Reduce,
    Select,
    TensorLoad,
    Var,
)

__all__ = ["children", "fold_up", "post_order", "rebuild", "substitute", "transform", "vars_in"]


_V = TypeVar("_V")


def children(e: PrimExpr) -> tuple[PrimExpr, ...]:
    """The direct sub-expressions of ``e``, in TVM's visiting order."""
    of_type = _CHILDREN.get(type(e))  # the common node types, without a chain of isinstance
    if of_type is not None:
        return of_type(e)
    if isinstance(e, (Binary, Compare, And, Or)):
        return (e.a, e.b)
    if isinstance(e, Not):
        return (e.a,)
    if isinstance(e, Select):
        return (e.condition, e.true_value, e.false_value)
    if isinstance(e, Cast):
        return (e.value,)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, TensorLoad):
        return e.indices
    if isinstance(e, Reduce):
        return (*e.source, *e.init, e.condition)
    kids = getattr(e, "expr_children", None)
    if callable(kids):
        return tuple(kids())
    return ()


def _no_children(e: PrimExpr) -> tuple[PrimExpr, ...]:
    return ()


def _two(e: Any) -> tuple[PrimExpr, ...]:
    return (e.a, e.b)


_CHILDREN: dict[type, Callable[[Any], tuple[PrimExpr, ...]]] = {
    Var: _no_children, IntImm: _no_children, FloatImm: _no_children,
    Binary: _two, Compare: _two, And: _two, Or: _two,
    Cast: lambda e: (e.value,), Call: lambda e: e.args, TensorLoad: lambda e: e.indices,
}


def rebuild(e: PrimExpr, kids: tuple[PrimExpr, ...]) -> PrimExpr:
    """``e`` with its children replaced by ``kids`` (``e`` itself when nothing changed)."""
    old = children(e)
    if len(old) == len(kids) and all(a is b for a, b in zip(old, kids)):
        return e
    if isinstance(e, Binary):
        return Binary(e.kind, kids[0], kids[1], e.dtype)
    if isinstance(e, Compare):
        return Compare(e.kind, kids[0], kids[1])
    if isinstance(e, And):
        return And(kids[0], kids[1])
    if isinstance(e, Or):
        return Or(kids[0], kids[1])
    if isinstance(e, Not):
        return Not(kids[0])
    if isinstance(e, Select):
        return Select(kids[0], kids[1], kids[2], e.dtype)
    if isinstance(e, Cast):
        return Cast(e.dtype, kids[0])
    if isinstance(e, Call):
        return Call(e.name, tuple(kids), e.dtype, e.arg_max)
    if isinstance(e, TensorLoad):
        return TensorLoad(e.tensor, tuple(kids), e.dtype)
    if isinstance(e, Reduce):
        n_src, n_init = len(e.source), len(e.init)
        return Reduce(e.combiner, tuple(kids[:n_src]), e.axis, kids[n_src + n_init],
                      e.value_index, tuple(kids[n_src:n_src + n_init]), e.dtype)
    with_kids = getattr(e, "with_children", None)
    if callable(with_kids):
        result: PrimExpr = with_kids(kids)
        return result
    raise TypeError(f"cannot rebuild expression node {type(e).__name__}")


def post_order(root: PrimExpr) -> Iterator[PrimExpr]:
    """Every distinct node under ``root``, children before parents."""
    seen: set[int] = set()
    stack: list[tuple[PrimExpr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            yield node
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for kid in reversed(children(node)):
            if id(kid) not in seen:
                stack.append((kid, False))


def fold_up(root: PrimExpr, memo: dict[int, tuple[PrimExpr, _V]],
            combine: Callable[[PrimExpr, list[_V]], _V],
            leaf: Callable[[PrimExpr], _V | None] | None = None) -> _V:
    """A value of every node under ``root``, children first, memoised in ``memo``
    (``id(node) -> (node, value)``; keeping the node keeps its id from being reused): a
    subtree judged by an earlier call is not walked again. ``combine(node, child values)``
    gives a node's value; ``leaf(node)``, when given and not None, gives it without visiting
    the children."""
    stack: list[tuple[PrimExpr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        hit = memo.get(id(node))
        if hit is not None and hit[0] is node:
            continue
        early = leaf(node) if leaf is not None and not expanded else None
        if early is not None:
            memo[id(node)] = (node, early)
            continue
        kids = children(node)
        if kids and not expanded:
            stack.append((node, True))
            stack.extend((k, False) for k in kids)
        else:
            memo[id(node)] = (node, combine(node, [memo[id(k)][1] for k in kids]))
    return memo[id(root)][1]


def transform(root: PrimExpr, fn: Callable[[PrimExpr], PrimExpr | None]) -> PrimExpr:
    """Rebuild ``root`` bottom-up; ``fn(node_with_new_children)`` may return a replacement."""
    done: dict[int, PrimExpr] = {}
    for node in post_order(root):
        kids = tuple(done[id(k)] for k in children(node))
        new = rebuild(node, kids)
        replaced = fn(new)
        done[id(node)] = new if replaced is None else replaced
    return done[id(root)]


def substitute(e: PrimExpr, mapping: Mapping[Var, PrimExpr]) -> PrimExpr:
    """``e`` with every variable in ``mapping`` replaced by its value."""
    if not mapping:
        return e
    return transform(e, lambda n: mapping.get(n) if isinstance(n, Var) else None)


def vars_in(e: PrimExpr) -> set[Var]:
    """The variables occurring in ``e``."""
    return {n for n in post_order(e) if isinstance(n, Var)}
