"""Let-binding clean-ups: DeadCodeElimination and ToGraphNormalForm.

Kiln graphs are normally in graph form already (a value used twice is one shared node), so these
passes only matter for modules written with ``let``: DeadCodeElimination drops bindings nobody uses
(and, with ``inline_once``, substitutes bindings used exactly once); ToGraphNormalForm substitutes
every binding. Unused graph nodes need no elimination: nothing reachable refers to them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from kiln.ir.analysis import free_vars
from kiln.ir.expr import Call, Expr, Function, Let, Var
from kiln.ir.module import IRModule
from kiln.ir.visitor import children, post_order, rewrite
from kiln.transform.pass_infra import FunctionPass, PassContext, PassInfo

__all__ = [
    "DeadCodeElimination",
    "ToGraphNormalForm",
    "dead_code_elimination",
    "to_graph_normal_form",
    "var_uses",
]


def var_uses(expr: Expr) -> Counter[int]:
    """How many times each variable (by ``id``) is read in ``expr`` (bindings do not count)."""
    uses: Counter[int] = Counter()
    for node in post_order(expr):
        read = children(node)
        if isinstance(node, Let):
            read = read[1:]  # the bound variable; the value and body may read it (e.g. ``%c``)
        elif isinstance(node, Function):
            read = read[len(node.params):]  # the parameters; the body may be one of them
        if isinstance(node, Call) and isinstance(node.op, Var):
            read = (node.op, *read)  # a call through a variable (not a child: a callee)
        for c in read:
            if isinstance(c, Var):
                uses[id(c)] += 1
    return uses


def _rewrite_lets(expr: Expr, drop: Callable[[Let], bool], substitute: Callable[[Let], bool]) -> Expr:
    """Remove the lets ``drop`` selects, and substitute (then remove) those ``substitute`` selects."""
    lets = [n for n in post_order(expr) if isinstance(n, Let)]
    inlined: dict[int, list[Var]] = {}
    removed: set[int] = set()
    for let in lets:
        if substitute(let):
            inlined.setdefault(id(let.value), []).append(let.var)
            removed.add(id(let))
        elif drop(let):
            removed.add(id(let))
    if not removed:
        return expr
    memo: dict[int, Expr] = {}

    def visit(new: Expr, old: Expr) -> Expr | None:
        for var in inlined.get(id(old), ()):
            memo[id(var)] = new  # later uses of the variable read the value itself
        if id(old) in removed:
            assert isinstance(new, Let)
            return new.body
        return None

    return rewrite(expr, visit, memo=memo)


def dead_code_elimination(expr: Expr, inline_once: bool = False) -> Expr:
    """Drop unused let bindings of ``expr`` (not modified) until none is left.

    Parameters
    ----------
    expr : Expr
        A function or expression.
    inline_once : bool
        Also substitute bindings used exactly once.

    Returns
    -------
    Expr
        The cleaned expression.
    """
    while True:
        out = _rewrite_lets(expr, *_use_predicates(var_uses(expr), _captured(expr), inline_once))
        if out is expr:
            return out
        expr = out


def _captured(expr: Expr) -> set[int]:
    """Variables (by ``id``) a function literal inside ``expr`` reads from outside itself, and
    variables called as functions: their bindings are not substituted (a use inside a function
    may run many times; a callee is not a graph value)."""
    out: set[int] = set()
    for node in post_order(expr):
        if isinstance(node, Function) and node is not expr:
            out.update(id(v) for v in free_vars(node))
        elif isinstance(node, Call) and isinstance(node.op, Var):
            out.add(id(node.op))
    return out


def _use_predicates(uses: Counter[int], captured: set[int], inline_once: bool
                    ) -> tuple[Callable[[Let], bool], Callable[[Let], bool]]:
    def unused(let: Let) -> bool:
        return uses[id(let.var)] == 0

    def used_once(let: Let) -> bool:
        return inline_once and uses[id(let.var)] == 1 and id(let.var) not in captured

    return unused, used_once


def to_graph_normal_form(expr: Expr) -> Expr:
    """Substitute every let binding of ``expr`` (not modified): the pure dataflow graph."""
    return _rewrite_lets(expr, drop=lambda let: False, substitute=lambda let: True)


def DeadCodeElimination(inline_once: bool = False, ignore_impurity: bool = False) -> FunctionPass:
    """The dead-code elimination pass (opt level 1).

    Parameters
    ----------
    inline_once : bool
        Also substitute let bindings used exactly once.
    ignore_impurity : bool
        Accepted for TVM compatibility: Kiln's operators are pure.
    """

    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out = dead_code_elimination(fn, inline_once)
        assert isinstance(out, Function)
        return out

    return FunctionPass(run, PassInfo(1, "DeadCodeElimination", ("InferType",)))


def ToGraphNormalForm() -> FunctionPass:
    """The pass substituting every let binding (opt level 1)."""

    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out = to_graph_normal_form(fn)
        assert isinstance(out, Function)
        return out

    return FunctionPass(run, PassInfo(1, "ToGraphNormalForm"))
