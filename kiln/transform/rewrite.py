"""The local-rewrite engine: declarative rule tables applied to a fixed point.

A :class:`Rule` says where it applies (calls of a named operator, or a node kind) and how to
rewrite a matching node: ``fn(node) -> replacement | None``. Rule tables are plain lists named
``pm_<purpose>``, one line per rule with a ``# before -> after`` comment.

:func:`graph_rewrite` walks a graph children-first. Every node is rebuilt on its rewritten
children, typed, and offered to the rules that may match it; a replacement is offered again
(``x*1*1`` collapses in one visit). Whole sweeps repeat until one changes nothing, so rules may
create nodes that other rules simplify later. When the sweep limit is reached the driver raises a
:class:`~kiln.errors.PassError` naming the rules that were still firing: a rule table that does not
converge is a bug to report, not something to silently truncate.

Two invariants hold for every rule, whatever it does:

- **types**: nodes reaching a rule are typed (``checked_type`` is filled), and so is every node a
  rule creates, before the next rule sees it;
- **provenance**: calls a rule creates without source names inherit the source names of the calls
  the rule replaced (the matched call and the calls it consumed from its arguments).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.errors import PassError
from kiln.ir.attrs import Attrs
from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, Op, Tuple, TupleGetItem
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.ir.visitor import children, rewrite
from kiln.transform.infer_type import infer_node_type

__all__ = [
    "PatternMatcher",
    "Rule",
    "call_attrs",
    "const_array",
    "ensure_types",
    "first_match",
    "graph_rewrite",
    "is_op",
    "op_name",
    "scalar_value",
    "tensor_type",
]

# the node a rule sees is of the kind its ``match`` names (a Call for an op name)
RewriteFn = Callable[[Any], Expr | None]

# How far below a matched call the driver looks for consumed calls whose names it carries over.
_PROVENANCE_DEPTH = 3


@dataclass(frozen=True)
class Rule:
    """One local rewrite.

    Parameters
    ----------
    name : str
        Name used in error messages and statistics (``"reshape_reshape"``).
    match : str or type
        An operator name (the rule sees calls of that op), ``Call`` (every call), or a node class
        (``TupleGetItem``, ``If``, ...).
    fn : callable
        ``fn(node) -> Expr | None``; ``None`` (or ``node`` itself) means "does not apply".
    """

    name: str
    match: str | type
    fn: RewriteFn


class PatternMatcher:
    """An indexed rule table: finds the rules that may apply to a node in O(1).

    Parameters
    ----------
    rules : sequence of Rule
        The rules, tried in this order.
    """

    def __init__(self, rules: Sequence[Rule]):
        self.rules = tuple(rules)
        self._by_op: dict[str, list[Rule]] = {}
        self._by_kind: dict[type, list[Rule]] = {}
        for rule in self.rules:
            if isinstance(rule.match, str):
                self._by_op.setdefault(rule.match, []).append(rule)
            else:
                self._by_kind.setdefault(rule.match, []).append(rule)

    def candidates(self, node: Expr) -> list[Rule]:
        """The rules that may rewrite ``node``, in table order."""
        out: list[Rule] = []
        if isinstance(node, Call) and isinstance(node.op, Op):
            out.extend(self._by_op.get(node.op.name, ()))
        out.extend(self._by_kind.get(type(node), ()))
        return out


# --- small matching helpers -----------------------------------------------------------------

def op_name(expr: Expr) -> str | None:
    """The operator name of a call of a primitive op, else ``None``."""
    if isinstance(expr, Call) and isinstance(expr.op, Op):
        return expr.op.name
    return None


def is_op(expr: Expr, *names: str) -> bool:
    """Whether ``expr`` is a call of one of the operators ``names``."""
    return op_name(expr) in names


def call_attrs(call: Call) -> Attrs:
    """The attributes of a call of an op that always has them (every op with an attrs type).

    Narrows ``Call.attrs`` (``Attrs | None``) for the checker; a call without attributes here is a
    malformed graph.
    """
    attrs = call.attrs
    assert attrs is not None, f"a call of {op_name(call)} without attrs"
    return attrs


def const_array(expr: Expr) -> np.ndarray | None:
    """The value of a constant, else ``None``."""
    return expr.value if isinstance(expr, Constant) else None


def scalar_value(expr: Expr) -> float | None:
    """The value of a constant holding a single element (any shape of size 1), else ``None``."""
    value = const_array(expr)
    if value is None or value.size != 1 or value.dtype.kind not in "biuf":
        return None
    return float(value.reshape(-1)[0])


def tensor_type(expr: Expr) -> TensorType | None:
    """The checked type of ``expr`` when it is a tensor, else ``None``."""
    ty = expr.checked_type
    return ty if isinstance(ty, TensorType) else None


# --- typing of new nodes --------------------------------------------------------------------

def ensure_types(expr: Expr, mod: IRModule | None = None) -> Expr:
    """Type every untyped node of ``expr`` whose children are (or become) typed; returns ``expr``.

    Only the untyped region is walked, so typing a node built on a large typed graph costs as much
    as the new nodes, not the graph.
    """
    if expr.has_type:
        return expr
    order: list[Expr] = []
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen or node.has_type or isinstance(node, (Op, GlobalVar)):
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(children(node)))
    for node in order:
        infer_node_type(node, mod)
    return expr


# --- provenance -----------------------------------------------------------------------------

def _consumed_names(matched: Expr, kept: set[int]) -> tuple[str, ...]:
    """Source names of ``matched`` and of the calls below it that the replacement no longer uses.

    The walk goes through calls, tuples and projections (a batch norm is matched at its ``.0``)
    down to the nodes the replacement kept, at most ``_PROVENANCE_DEPTH`` levels deep.
    """
    names: list[str] = []
    frontier: list[tuple[Expr, int]] = [(matched, 0)]
    visited: set[int] = set()
    calls: list[Call] = []
    while frontier:
        node, depth = frontier.pop()
        if id(node) in visited or id(node) in kept:
            continue
        visited.add(id(node))
        if isinstance(node, Call):
            calls.append(node)
        if depth < _PROVENANCE_DEPTH and isinstance(node, (Call, Tuple, TupleGetItem)):
            frontier.extend((c, depth + 1) for c in children(node) if not isinstance(c, Function))
    for call in reversed(calls):  # innermost first, like the source graph's order
        for n in call.source_names:
            if n not in names:
                names.append(n)
    return tuple(names)


def _stamp_provenance(replacement: Expr, matched: Expr) -> None:
    """Give the calls a rule just created (untyped, unnamed) the names of what they replaced.

    Untyped nodes are ones the rule built moments ago (every node of the graph is typed before a
    rule sees it), so nothing else holds them yet: setting their names finishes their
    construction rather than mutating a shared node.
    """
    unnamed: list[Call] = []
    kept: set[int] = set()
    seen: set[int] = set()
    stack = [replacement]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.has_type or isinstance(node, (Op, GlobalVar)):
            kept.add(id(node))
            continue
        if isinstance(node, Call) and not node.source_names:
            unnamed.append(node)
        stack.extend(children(node))
    if not unnamed:
        return
    names = _consumed_names(matched, kept)
    for call in unnamed:
        object.__setattr__(call, "source_names", names)


# --- the driver -----------------------------------------------------------------------------

def graph_rewrite(
    expr: Expr,
    rules: PatternMatcher | Sequence[Rule],
    *,
    what: str = "rewrite",
    mod: IRModule | None = None,
    max_sweeps: int = 32,
    max_per_node: int = 64,
) -> Expr:
    """Apply ``rules`` everywhere in ``expr`` until none applies.

    Function literals nested in ``expr`` (fused primitive functions, closures) are left alone.

    Parameters
    ----------
    expr : Expr
        The graph (a function or any expression); it is not modified.
    rules : PatternMatcher or sequence of Rule
        The rule table.
    what : str
        Name of the pass, for error messages.
    mod : IRModule, optional
        Module used to type calls of global functions.
    max_sweeps : int
        Whole-graph sweeps allowed before giving up.
    max_per_node : int
        Successive rewrites of one node allowed within a sweep.

    Returns
    -------
    Expr
        The rewritten graph (``expr`` itself when no rule applied).

    Raises
    ------
    PassError
        When the rules do not reach a fixed point within the limits.
    """
    pm = rules if isinstance(rules, PatternMatcher) else PatternMatcher(rules)
    total: Counter[str] = Counter()
    fired: Counter[str] = Counter()
    for _ in range(max_sweeps):
        sweep = _Sweep(pm, what, mod, max_per_node)
        out = rewrite(expr, sweep.visit, into_functions=False)
        fired = sweep.fired
        if not fired:
            return out
        total.update(fired)
        expr = out
    raise PassError(f"{what}: rewrite did not converge after {max_sweeps} sweeps; rules still "
                    f"firing in the last sweep: {_describe(fired)} (all: {_describe(total)})")


class _Sweep:
    """One bottom-up pass of the rules over a graph, counting the rules that fired."""

    def __init__(self, pm: PatternMatcher, what: str, mod: IRModule | None, max_per_node: int):
        self.pm = pm
        self.what = what
        self.mod = mod
        self.max_per_node = max_per_node
        self.fired: Counter[str] = Counter()

    def visit(self, new: Expr, old: Expr) -> Expr:
        node = ensure_types(new, self.mod)
        for _step in range(self.max_per_node):
            for rule in self.pm.candidates(node):
                out = rule.fn(node)
                if out is not None and out is not node:
                    _stamp_provenance(out, node)
                    node = ensure_types(out, self.mod)
                    self.fired[rule.name] += 1
                    break
            else:
                return node
        raise PassError(f"{self.what}: rewrite did not converge on one node after "
                        f"{self.max_per_node} steps; rules firing: {_describe(self.fired)}")


def _describe(counts: Counter[str]) -> str:
    return ", ".join(f"{name} x{n}" for name, n in counts.most_common()) or "none"


def first_match(rules: Iterable[Rule], node: Expr) -> Rule | None:
    """The first rule of ``rules`` that rewrites ``node`` (``node`` must be typed)."""
    for rule in PatternMatcher(list(rules)).candidates(node):
        out = rule.fn(node)
        if out is not None and out is not node:
            return rule
    return None
