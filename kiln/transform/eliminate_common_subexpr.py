"""EliminateCommonSubexpr: share calls that compute the same thing (TVM's pass, opt level 3).

Two calls of the same operator with equal attributes and the same arguments (the same nodes,
equal scalar constants, or tuples of such) are one computation; so are two projections of the same
tuple at the same index. The first occurrence (in evaluation order) stays and carries the source
names of all the calls it replaces. Stateful operators and calls of functions are never merged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.ir.expr import Call, Constant, Expr, Function, Op, Tuple, TupleGetItem
from kiln.ir.module import IRModule
from kiln.ir.visitor import post_order, rewrite
from kiln.op.registry import get_op_def
from kiln.transform.pass_infra import FunctionPass, PassContext, PassInfo

__all__ = ["EliminateCommonSubexpr", "eliminate_common_subexpr"]

SkipFn = Callable[[Expr], bool]


class _Classes:
    """Equivalence classes of the nodes of one graph (representative = first occurrence)."""

    def __init__(self, fskip: SkipFn | None):
        self.fskip = fskip
        self.rep: dict[int, Expr] = {}
        self.names: dict[int, list[str]] = {}
        self.table: dict[Any, Expr] = {}

    def arg_key(self, arg: Expr) -> Any:
        if isinstance(arg, Constant) and arg.value.ndim == 0:
            return ("scalar", arg.value.dtype.str, arg.value.tobytes())
        if isinstance(arg, Tuple):
            return ("tuple", tuple(self.arg_key(f) for f in arg.fields))
        return id(self.rep.get(id(arg), arg))

    def key(self, node: Expr) -> Any:
        if isinstance(node, Call):
            if not isinstance(node.op, Op) or not node.args or get_op_def(node.op.name).stateful:
                return None
            if self.fskip is not None and self.fskip(node):
                return None
            return ("call", node.op.name, node.attrs, tuple(self.arg_key(a) for a in node.args))
        if isinstance(node, TupleGetItem):
            return ("getitem", id(self.rep.get(id(node.tuple_value), node.tuple_value)), node.index)
        return None

    def build(self, expr: Expr) -> None:
        for node in post_order(expr, into_functions=False):
            key = self.key(node)
            if key is None:
                continue
            first = self.table.setdefault(key, node)
            if first is not node:
                self.rep[id(node)] = first
                if isinstance(node, Call) and isinstance(first, Call):  # equal keys: both calls
                    names = self.names.setdefault(id(first), list(first.source_names))
                    names.extend(n for n in node.source_names if n not in names)


def eliminate_common_subexpr(expr: Expr, fskip: SkipFn | None = None) -> Expr:
    """Merge the equivalent calls of ``expr`` (not modified).

    Parameters
    ----------
    expr : Expr
        A function or expression.
    fskip : callable, optional
        ``fskip(call) -> bool``: calls for which it returns True are never merged.

    Returns
    -------
    Expr
        The graph with each computation once.
    """
    classes = _Classes(fskip)
    classes.build(expr)
    if not classes.rep:
        return expr
    memo: dict[int, Expr] = {}

    def visit(new: Expr, old: Expr) -> Expr | None:
        first = classes.rep.get(id(old))
        if first is not None:
            return memo[id(first)]
        names = classes.names.get(id(old))
        if names is not None and isinstance(new, Call):
            return Call(new.op, new.args, new.attrs, source_names=names)
        return None

    return rewrite(expr, visit, into_functions=False, memo=memo)


def EliminateCommonSubexpr(fskip: SkipFn | None = None) -> FunctionPass:
    """The common-subexpression elimination pass (opt level 3).

    Parameters
    ----------
    fskip : callable, optional
        ``fskip(call) -> bool`` marks calls that must stay separate.
    """

    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out = eliminate_common_subexpr(fn, fskip)
        assert isinstance(out, Function)
        return out

    return FunctionPass(run, PassInfo(3, "EliminateCommonSubexpr", ("InferType",)))
