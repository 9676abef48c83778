"""Simple graph analyses: free and bound variables."""

from __future__ import annotations

from kiln.ir.expr import Expr, Function, Let, Var
from kiln.ir.visitor import post_order

__all__ = ["all_vars", "bound_vars", "free_vars"]


def bound_vars(expr: Expr) -> list[Var]:
    """Variables bound by functions and lets inside ``expr``, in post-DFS order."""
    out: list[Var] = []
    for node in post_order(expr):
        if isinstance(node, Function):
            out.extend(node.params)
        elif isinstance(node, Let):
            out.append(node.var)
    return out


def all_vars(expr: Expr) -> list[Var]:
    """Every variable in ``expr``, in post-DFS order."""
    return [n for n in post_order(expr) if isinstance(n, Var)]


def free_vars(expr: Expr) -> list[Var]:
    """Variables used in ``expr`` but not bound inside it, in post-DFS order.

    Examples
    --------
    >>> x, y = var("x", shape=(2,)), var("y", shape=(2,))
    >>> [v.name_hint for v in free_vars(x + y)]
    ['x', 'y']
    """
    bound = {id(v) for v in bound_vars(expr)}
    return [v for v in all_vars(expr) if id(v) not in bound]
