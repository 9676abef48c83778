"""The dataflow pattern language: match, partition and rewrite graphs by pattern (TVM's
``relay.dataflow_pattern``).

A pattern is a small graph of :class:`DFPattern` nodes built with :func:`is_op`,
:func:`wildcard`, :func:`is_constant`, ... and Python operators::

    x, w = wildcard(), wildcard()
    conv = is_op("nn.conv2d")(x, w)
    pat = is_op("nn.relu")(is_op("nn.bias_add")(conv, is_constant())).optional(...)

The matcher follows TVM's ``DFPatternMatcher``:

- a pattern node matched once is memoised: when it occurs twice in a pattern, both occurrences
  must match the same expression (``(x + y) * (x - y)`` needs one ``x`` and one ``y``);
- ``add`` and ``multiply`` call patterns also match with their two arguments swapped;
- ``p1 | p2`` tries ``p1`` first; a failed branch forgets whatever it had matched;
- type patterns (:meth:`DFPattern.has_type`, ``has_dtype``, ``has_shape``) read the checked type,
  inferring it first when the graph is not typed;
- a dominator pattern ``child.dominates(parent, path)`` matches ``child`` whose every input path
  reaches ``parent`` through nodes matching ``path`` only.

:func:`partition` wraps every match in a function (``PartitionedFromPattern`` names the matched
ops in post-order, ``"add_nn.relu_"``) called with the expressions the pattern's leaves matched.
A match is not partitioned when one of its inner results is used outside it, or when it overlaps
a match already taken (matches are taken from the graph's outputs down). :func:`rewrite` calls a
:class:`DFPatternCallback` on every such match, until the graph stops changing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from kiln.errors import KilnError
from kiln.ir.attrs import DictAttrs, freeze_value
from kiln.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    If,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    Var,
)
from kiln.ir.module import IRModule
from kiln.ir.structural import structural_equal
from kiln.ir.types import TensorType, Type
from kiln.ir.visitor import children, post_order, rebuild
from kiln.ir.visitor import rewrite as rewrite_graph

__all__ = [
    "AltPattern",
    "AttrPattern",
    "CallPattern",
    "ConstantPattern",
    "DFPattern",
    "DFPatternCallback",
    "DataTypePattern",
    "DominatorPattern",
    "ExprPattern",
    "FunctionPattern",
    "IfPattern",
    "LetPattern",
    "PatternError",
    "ShapePattern",
    "TupleGetItemPattern",
    "TuplePattern",
    "TypePattern",
    "VarPattern",
    "WildcardPattern",
    "dominates",
    "has_attr",
    "has_dtype",
    "has_shape",
    "has_type",
    "is_constant",
    "is_expr",
    "is_if",
    "is_let",
    "is_op",
    "is_tuple",
    "is_tuple_get_item",
    "is_var",
    "match",
    "match_nodes",
    "partition",
    "rewrite",
    "wildcard",
]

# rewrite() gives up after this many sweeps (TVM's limit): callbacks that keep changing the
# graph conflict with each other
_MAX_REWRITE_SWEEPS = 100


class PatternError(KilnError):
    """A pattern used where it cannot work (a partition of a function pattern, a bad argument)."""


# --- patterns ------------------------------------------------------------------------------------

class DFPattern:
    """Base class of dataflow patterns.

    Patterns compare and hash by identity: one pattern object occurring twice in a pattern graph
    must match one expression.
    """

    __slots__ = ("__weakref__",)

    def _inputs(self) -> tuple[DFPattern, ...]:
        return ()

    def __call__(self, *args: DFPattern) -> CallPattern:
        return CallPattern(self, list(args))

    def __or__(self, other: DFPattern) -> AltPattern:
        return AltPattern(self, other)

    def __add__(self, other: DFPattern) -> CallPattern:
        return is_op("add")(self, other)

    def __sub__(self, other: DFPattern) -> CallPattern:
        return is_op("subtract")(self, other)

    def __mul__(self, other: DFPattern) -> CallPattern:
        return is_op("multiply")(self, other)

    def __truediv__(self, other: DFPattern) -> CallPattern:
        return is_op("divide")(self, other)

    def has_attr(self, attrs: Mapping[str, Any]) -> AttrPattern:
        """This pattern, where the match has the attributes ``attrs``."""
        return has_attr(attrs, self)

    def has_type(self, ttype: Type) -> TypePattern:
        """This pattern, where the match has type ``ttype``."""
        return has_type(ttype, self)

    def has_dtype(self, dtype: str) -> DataTypePattern:
        """This pattern, where the match is a tensor of ``dtype``."""
        return has_dtype(dtype, self)

    def has_shape(self, shape: Sequence[Any]) -> ShapePattern:
        """This pattern, where the match is a tensor of ``shape``."""
        return has_shape(shape, self)

    def match(self, expr: Expr) -> bool:
        """Whether ``expr`` matches this pattern."""
        return match(self, expr)

    def partition(self, expr: Expr, attrs: Mapping[str, Any] | None = None,
                  check: Callable[[Expr], bool] | None = None) -> Expr:
        """:func:`partition` of ``expr`` by this pattern."""
        return partition(self, expr, attrs, check)

    def dominates(self, parent: DFPattern, path: DFPattern | None = None) -> DominatorPattern:
        """A dominator pattern: this pattern as the child, reached from ``parent`` via ``path``."""
        return DominatorPattern(parent, path if path is not None else wildcard(), self)

    def optional(self, option_constructor: Callable[[DFPattern], DFPattern]) -> AltPattern:
        """``option_constructor(self) | self``: this pattern with an optional consumer."""
        return self | option_constructor(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ExprPattern(DFPattern):
    """Matches an expression structurally equal to ``expr`` (an operator for :func:`is_op`)."""

    __slots__ = ("expr",)

    def __init__(self, expr: Expr):
        if not isinstance(expr, Expr):
            raise PatternError(f"ExprPattern needs a relay expression, got {type(expr).__name__}")
        self.expr = expr

    def __repr__(self) -> str:
        return f"ExprPattern({self.expr._short()})"


class VarPattern(DFPattern):
    """Matches a variable (named ``name_hint`` unless that is empty)."""

    __slots__ = ("name",)

    def __init__(self, name_hint: str = "", type_annotation: Any = None):
        self.name = name_hint

    def name_hint(self) -> str:
        """The name a matching variable must have (``""``: any)."""
        return self.name


class ConstantPattern(DFPattern):
    """Matches a constant."""

    __slots__ = ()


class WildcardPattern(DFPattern):
    """Matches any expression."""

    __slots__ = ()


class CallPattern(DFPattern):
    """Matches a call of ``op`` on ``args`` (any arguments when ``args`` is None)."""

    __slots__ = ("args", "op")

    def __init__(self, op: DFPattern, args: Sequence[DFPattern] | None):
        self.op = op
        self.args = None if args is None else [_as_pattern(a) for a in args]

    def _inputs(self) -> tuple[DFPattern, ...]:
        return (self.op, *(self.args or ()))

    def __repr__(self) -> str:
        return f"CallPattern({self.op!r}, {len(self.args or ())} args)"


class FunctionPattern(DFPattern):
    """Matches a function with ``params`` (any when None) and ``body``."""

    __slots__ = ("body", "params")

    def __init__(self, params: Sequence[DFPattern] | None, body: DFPattern):
        self.params = None if params is None else [_as_pattern(p) for p in params]
        self.body = _as_pattern(body)

    def _inputs(self) -> tuple[DFPattern, ...]:
        return (*(self.params or ()), self.body)


class TuplePattern(DFPattern):
    """Matches a tuple of ``fields`` (any fields when None)."""

    __slots__ = ("fields",)

    def __init__(self, fields: Sequence[DFPattern] | None):
        self.fields = None if fields is None else [_as_pattern(f) for f in fields]

    def _inputs(self) -> tuple[DFPattern, ...]:
        return tuple(self.fields or ())

    def __getitem__(self, index: int) -> DFPattern:
        if self.fields is None:
            raise PatternError("TuplePattern(None) has no fields to index")
        return self.fields[index]

    def __len__(self) -> int:
        return len(self.fields or ())

    def astuple(self) -> TuplePattern:
        """The pattern itself (TupleWrapper compatibility)."""
        return self


class TupleGetItemPattern(DFPattern):
    """Matches field ``index`` of a tuple matching ``tuple`` (any field when index is -1)."""

    __slots__ = ("index", "tuple")

    def __init__(self, tuple_value: DFPattern, index: int | None = None):
        self.tuple = _as_pattern(tuple_value)
        self.index = -1 if index is None else int(index)

    def _inputs(self) -> tuple[DFPattern, ...]:
        return (self.tuple,)


class AltPattern(DFPattern):
    """Matches ``left``, else ``right``."""

    __slots__ = ("left", "right")

    def __init__(self, left: DFPattern, right: DFPattern):
        self.left = _as_pattern(left)
        self.right = _as_pattern(right)

    def _inputs(self) -> tuple[DFPattern, ...]:
        return (self.left, self.right)


class TypePattern(DFPattern):
    """Matches what ``pattern`` matches, of type ``type``."""

    __slots__ = ("pattern", "type")

    def __init__(self, pattern: DFPattern, ttype: Type):
        self.pattern = _as_pattern(pattern)
        self.type = ttype

    def _inputs(self) -> tuple[DFPattern, ...]:
        return (self.pattern,)


class ShapePattern(DFPattern):
    """Matches what ``pattern`` matches, a tensor of ``shape``."""

    __slots__ = ("pattern", "shape")

    def __init__(self, pattern: DFPattern, shape: Sequence[Any]):
        self.pattern = _as_pattern(pattern)
        self.shape = tuple(shape)

    def _inputs(self) -> tuple[DFPattern, ...]:
        return (self.pattern,)


class DataTypePattern(DFPattern):
    """Matches what ``pattern`` matches, a tensor of ``dtype``."""

    __slots__ = ("dtype", "pattern")

    def __init__(self, pattern: DFPattern, dtype: str):
        self.pattern = _as_pattern(pattern)
        self.dtype = str(dtype)

    def _inputs(self) -> tuple[DFPattern, ...]:
        return (self.pattern,)


class AttrPattern(DFPattern):
    """Matches what ``pattern`` matches, with attributes ``attrs``.

    An operator's attributes are its registry properties (``TOpPattern``: the fusion pattern);
    a call's are its op attributes; a function's its function attributes.
    """

    __slots__ = ("attrs", "pattern")

    def __init__(self, pattern: DFPattern, attrs: Mapping[str, Any]):
        self.pattern = _as_pattern(pattern)
        self.attrs = DictAttrs(dict(attrs))

    def _inputs(self) -> tuple[DFPattern, ...]:
        return (self.pattern,)


class DominatorPattern(DFPattern):
    """Matches ``child`` whose inputs reach ``parent`` only through nodes matching ``path``."""

    __slots__ = ("child", "parent", "path")

    def __init__(self, parent: DFPattern, path: DFPattern, child: DFPattern):
        self.parent = _as_pattern(parent)
        self.path = _as_pattern(path)
        self.child = _as_pattern(child)

    def _inputs(self) -> tuple[DFPattern, ...]:
        return (self.parent, self.path, self.child)


class IfPattern(DFPattern):
    """Matches ``if (cond) {true_branch} else {false_branch}``."""

    __slots__ = ("cond", "false_branch", "true_branch")

    def __init__(self, cond: DFPattern, true_branch: DFPattern, false_branch: DFPattern):
        self.cond = _as_pattern(cond)
        self.true_branch = _as_pattern(true_branch)
        self.false_branch = _as_pattern(false_branch)

    def _inputs(self) -> tuple[DFPattern, ...]:
        return (self.cond, self.true_branch, self.false_branch)


class LetPattern(DFPattern):
    """Matches ``let var = value; body``."""

    __slots__ = ("body", "value", "var")

    def __init__(self, var: DFPattern, value: DFPattern, body: DFPattern):
        self.var = _as_pattern(var)
        self.value = _as_pattern(value)
        self.body = _as_pattern(body)

    def _inputs(self) -> tuple[DFPattern, ...]:
        return (self.var, self.value, self.body)


def _as_pattern(value: Any) -> DFPattern:
    if isinstance(value, DFPattern):
        return value
    if isinstance(value, Expr):
        return ExprPattern(value)
    raise PatternError(f"expected a DFPattern, got {type(value).__name__} {value!r}")


# --- constructors --------------------------------------------------------------------------------

def is_var(name: str = "") -> VarPattern:
    """A pattern matching a variable named ``name`` (any variable when empty)."""
    return VarPattern(name)


def is_constant() -> ConstantPattern:
    """A pattern matching any constant."""
    return ConstantPattern()


def is_expr(expr: Expr) -> ExprPattern:
    """A pattern matching expressions structurally equal to ``expr``."""
    return ExprPattern(expr)


def is_op(op_name: str) -> ExprPattern:
    """A pattern matching the operator ``op_name``; call it on argument patterns."""
    return ExprPattern(Op.get(op_name))


def is_tuple(fields: Sequence[DFPattern] | None) -> TuplePattern:
    """A pattern matching a tuple of ``fields`` (any tuple when None)."""
    return TuplePattern(fields)


def is_tuple_get_item(tuple_value: DFPattern, index: int | None = None) -> TupleGetItemPattern:
    """A pattern matching ``tuple_value[index]`` (any index when None)."""
    return TupleGetItemPattern(tuple_value, index)


def is_if(cond: DFPattern, true_branch: DFPattern, false_branch: DFPattern) -> IfPattern:
    """A pattern matching an ``If``."""
    return IfPattern(cond, true_branch, false_branch)


def is_let(var: DFPattern, value: DFPattern, body: DFPattern) -> LetPattern:
    """A pattern matching a ``Let``."""
    return LetPattern(var, value, body)


def wildcard() -> WildcardPattern:
    """A pattern matching anything."""
    return WildcardPattern()


def has_type(ttype: Type, pattern: DFPattern | None = None) -> TypePattern:
    """``pattern`` (a wildcard by default) where the match has type ``ttype``."""
    return TypePattern(pattern if pattern is not None else wildcard(), ttype)


def has_dtype(dtype: str, pattern: DFPattern | None = None) -> DataTypePattern:
    """``pattern`` (a wildcard by default) where the match is a tensor of ``dtype``."""
    return DataTypePattern(pattern if pattern is not None else wildcard(), dtype)


def has_shape(shape: Sequence[Any], pattern: DFPattern | None = None) -> ShapePattern:
    """``pattern`` (a wildcard by default) where the match is a tensor of ``shape``."""
    return ShapePattern(pattern if pattern is not None else wildcard(), shape)


def has_attr(attrs: Mapping[str, Any], pattern: DFPattern | None = None) -> AttrPattern:
    """``pattern`` (a wildcard by default) where the match has the attributes ``attrs``."""
    return AttrPattern(pattern if pattern is not None else wildcard(), attrs)


def dominates(parent: DFPattern, path: DFPattern, child: DFPattern) -> DominatorPattern:
    """A dominator pattern (see :meth:`DFPattern.dominates`)."""
    return DominatorPattern(parent, path, child)


# --- the expression graph ---------------------------------------------------------------------

class _Graph:
    """Post-order nodes of an expression with their users and post-dominator tree."""

    def __init__(self, expr: Expr):
        self.order: list[Expr] = post_order(expr, into_functions=True)
        self.index: dict[Expr, int] = {n: i for i, n in enumerate(self.order)}
        self.inputs: list[tuple[Expr, ...]] = [children(n) for n in self.order]
        self.outputs: list[list[int]] = [[] for _ in self.order]
        for i, ins in enumerate(self.inputs):
            for c in dict.fromkeys(ins):
                self.outputs[self.index[c]].append(i)
        # post-dominator tree: a node's parent is the least common ancestor of its users
        n = len(self.order)
        self.dom_parent: list[int | None] = [None] * n
        self.depth = [0] * n
        self.dom_children: list[list[int]] = [[] for _ in range(n)]
        for i in range(n - 1, -1, -1):
            users = self.outputs[i]
            if not users:
                continue
            parent: int | None = users[0]
            for u in users[1:]:
                parent = self._lca(parent, u)
            self.dom_parent[i] = parent
            if parent is not None:
                self.depth[i] = self.depth[parent] + 1
                self.dom_children[parent].append(i)

    def _lca(self, a: int | None, b: int | None) -> int | None:
        while a is not None and b is not None and a != b:
            if self.depth[a] < self.depth[b]:
                b = self.dom_parent[b]
            elif self.depth[a] > self.depth[b]:
                a = self.dom_parent[a]
            else:
                a, b = self.dom_parent[a], self.dom_parent[b]
        return a if a == b else None

    def dominates(self, node: int, other: int) -> bool:
        """Whether ``other`` lies in ``node``'s post-dominator subtree."""
        stack = [node]
        seen: set[int] = set()
        while stack:
            for c in self.dom_children[stack.pop()]:
                if c == other:
                    return True
                if c not in seen:
                    seen.add(c)
                    stack.append(c)
        return False


# --- the matcher -------------------------------------------------------------------------------

def _type_of(expr: Expr) -> Type:
    if not expr.has_type:
        from kiln.transform.infer_type import infer_expr_type

        infer_expr_type(expr)
    return expr.checked_type


def _dim_equal(a: Any, b: Any) -> bool:
    try:
        return int(a) == int(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _value_equal(want: Any, have: Any) -> bool:
    """Whether an attribute value given in a pattern equals the node's value."""
    want, have = freeze_value(want), freeze_value(have)
    if isinstance(want, tuple) or isinstance(have, tuple):
        if not (isinstance(want, tuple) and isinstance(have, tuple)) or len(want) != len(have):
            return False
        return all(_value_equal(w, h) for w, h in zip(want, have))
    if isinstance(want, (Expr, Type)) or isinstance(have, (Expr, Type)):
        return structural_equal(want, have)
    if isinstance(want, str) or isinstance(have, str):
        return str(want) == str(have)
    try:
        return bool(np.all(want == have))
    except Exception:  # values of unrelated kinds
        return False


def _op_attr(op: Op, name: str) -> tuple[bool, Any]:
    """TVM's per-op attribute maps that Kiln knows: ``TOpPattern`` (the fusion pattern) and the
    operator attribute table (``target.<compiler>``)."""
    from kiln.ir import op_table
    from kiln.op.registry import get_op_def

    if name == "TOpPattern":
        return True, int(get_op_def(op.name).pattern)
    table = op_table.op_attr_map(name)
    if op.name in table:
        return True, table[op.name]
    return False, None


class _Matcher:
    """TVM's DFPatternMatcher over one expression graph."""

    def __init__(self, graph: _Graph | None = None):
        self.graph = graph
        self.memo: dict[DFPattern, list[Expr]] = {}
        self.matched: list[DFPattern] = []
        self.memoize = True

    def match(self, pattern: DFPattern, expr: Expr) -> bool:
        self.memo = {}
        self.matched = []
        return self.visit(pattern, expr)

    def _clear(self, watermark: int) -> None:
        for p in self.matched[watermark:]:
            self.memo.pop(p, None)
        del self.matched[watermark:]

    def visit(self, pattern: DFPattern, expr: Expr) -> bool:
        if self.memoize and pattern in self.memo:
            return self.memo[pattern][0] is expr
        watermark = len(self.matched)
        out = self._dispatch(pattern, expr)
        if out:
            self.memo.setdefault(pattern, []).append(expr)
            self.matched.append(pattern)
        else:
            self._clear(watermark)
        return out

    def _dispatch(self, p: DFPattern, expr: Expr) -> bool:
        if isinstance(p, WildcardPattern):
            return True
        if isinstance(p, ExprPattern):
            return p.expr is expr or structural_equal(p.expr, expr)
        if isinstance(p, VarPattern):
            return isinstance(expr, Var) and (not p.name or p.name == expr.name_hint)
        if isinstance(p, ConstantPattern):
            return isinstance(expr, Constant)
        if isinstance(p, CallPattern):
            return self._call(p, expr)
        if isinstance(p, AltPattern):
            return self.visit(p.left, expr) or self.visit(p.right, expr)
        if isinstance(p, TuplePattern):
            if not isinstance(expr, Tuple):
                return False
            return p.fields is None or self._all(p.fields, expr.fields)
        if isinstance(p, TupleGetItemPattern):
            return isinstance(expr, TupleGetItem) and p.index in (-1, expr.index) \
                and self.visit(p.tuple, expr.tuple_value)
        if isinstance(p, FunctionPattern):
            if not isinstance(expr, Function):
                return False
            if p.params is not None and not self._all(p.params, expr.params):
                return False
            return self.visit(p.body, expr.body)
        if isinstance(p, AttrPattern):
            return self.visit(p.pattern, expr) and self._attrs(p, expr)
        if isinstance(p, TypePattern):
            return structural_equal(p.type, _type_of(expr)) and self.visit(p.pattern, expr)
        if isinstance(p, ShapePattern):
            ty = _type_of(expr)
            return isinstance(ty, TensorType) and len(ty.shape) == len(p.shape) \
                and all(_dim_equal(a, b) for a, b in zip(p.shape, ty.shape)) \
                and self.visit(p.pattern, expr)
        if isinstance(p, DataTypePattern):
            ty = _type_of(expr)
            return isinstance(ty, TensorType) and ty.dtype == p.dtype and self.visit(p.pattern, expr)
        if isinstance(p, DominatorPattern):
            return self._dominator(p, expr)
        if isinstance(p, IfPattern):
            return isinstance(expr, If) and self.visit(p.cond, expr.cond) \
                and self.visit(p.true_branch, expr.then_branch) \
                and self.visit(p.false_branch, expr.else_branch)
        if isinstance(p, LetPattern):
            return isinstance(expr, Let) and self.visit(p.var, expr.var) \
                and self.visit(p.value, expr.value) and self.visit(p.body, expr.body)
        raise PatternError(f"unknown pattern node {type(p).__name__}")

    def _all(self, patterns: Sequence[DFPattern], exprs: Sequence[Expr]) -> bool:
        if len(patterns) != len(exprs):
            return False
        return all(self.visit(p, e) for p, e in zip(patterns, exprs))

    def _call(self, p: CallPattern, expr: Expr) -> bool:
        if not isinstance(expr, Call):
            return False
        watermark = len(self.matched)
        if not self.visit(p.op, expr.op):
            self._clear(watermark)
            return self._associative(p, expr)
        if p.args is None:
            return True
        watermark2 = len(self.matched)
        if self._all(p.args, expr.args):
            return True
        self._clear(watermark2)
        if _pattern_op(p) in ("add", "multiply") and len(p.args) == 2:
            if self._all(p.args[::-1], expr.args):
                return True
            self._clear(watermark2)
        return False

    def _associative(self, p: CallPattern, expr: Call) -> bool:
        """``(a * b) / c`` matching ``a * (b / c)`` and the reverse (TVM's rule)."""
        name = _pattern_op(p)
        if name == "divide" and p.args is not None and isinstance(p.args[0], CallPattern):
            inner = p.args[0]
            if _pattern_op(inner) == "multiply" and inner.args is not None \
                    and _expr_op(expr) == "multiply" \
                    and any(_expr_op(a) == "divide" for a in expr.args):
                watermark = len(self.matched)
                for i in range(2):
                    div = CallPattern(p.op, [inner.args[i], p.args[1]])
                    mul = CallPattern(inner.op, [inner.args[1 - i], div])
                    if self.visit(mul, expr):
                        return True
                    self._clear(watermark)
                return False
        if name == "multiply" and p.args is not None:
            for i in range(2):
                arg = p.args[i]
                if isinstance(arg, CallPattern) and _pattern_op(arg) == "divide" \
                        and arg.args is not None and _expr_op(expr) == "divide" \
                        and any(_expr_op(a) == "multiply" for a in expr.args):
                    mul = CallPattern(p.op, [arg.args[0], p.args[1 - i]])
                    return self.visit(CallPattern(arg.op, [mul, arg.args[1]]), expr)
        return False

    def _attrs(self, p: AttrPattern, expr: Expr) -> bool:
        if isinstance(expr, Op):
            for k, v in p.attrs.items():
                known, value = _op_attr(expr, k)
                if not known or not _value_equal(v, value):
                    return False
            return True
        if isinstance(expr, Call):
            attrs = expr.attrs
            for k, v in p.attrs.items():
                if attrs is None or k not in attrs or not _value_equal(v, attrs[k]):
                    return False
            return True
        if isinstance(expr, Function):
            return all(k in expr.attrs and _value_equal(v, expr.attrs[k])
                       for k, v in p.attrs.items())
        return False

    # dominator patterns need the graph's users and post-dominators
    def _graph(self, expr: Expr) -> _Graph:
        if self.graph is None or expr not in self.graph.index:
            self.graph = _Graph(expr)
        return self.graph

    def _matches_path(self, p: DominatorPattern, expr: Expr, graph: _Graph) -> bool:
        stack = [expr]
        seen: set[int] = set()
        while stack:
            node = stack.pop()
            skip = node.op if isinstance(node, Call) and isinstance(node.op, Function) else None
            for c in graph.inputs[graph.index[node]]:
                if c is skip:
                    continue
                self.memoize = True
                if self.visit(p.parent, c):
                    continue
                self.memoize = False
                if not self.visit(p.path, c):
                    return False
                if id(c) not in seen:
                    seen.add(id(c))
                    stack.append(c)
        return True

    def _dominator(self, p: DominatorPattern, expr: Expr) -> bool:
        if not self.visit(p.child, expr):
            return False
        graph = self._graph(expr)
        ok = self._matches_path(p, expr, graph)
        self.memoize = True
        if not ok:
            return False
        # the parent must be post-dominated by the child somewhere below it
        stack = [graph.index[expr]]
        seen: set[int] = set()
        while stack:
            for c in graph.dom_children[stack.pop()]:
                if c in seen:
                    continue
                seen.add(c)
                if self.visit(p.parent, graph.order[c]):
                    return True
                stack.append(c)
        return False


def _pattern_op(p: CallPattern) -> str | None:
    if isinstance(p.op, ExprPattern) and isinstance(p.op.expr, Op):
        return p.op.expr.name
    return None


def _expr_op(expr: Expr) -> str | None:
    if isinstance(expr, Call) and isinstance(expr.op, Op):
        return expr.op.name
    return None


def match(pattern: DFPattern, expr: Expr) -> bool:
    """Whether ``expr`` matches ``pattern``.

    Parameters
    ----------
    pattern : DFPattern
        The pattern.
    expr : Expr
        The expression (its root is matched against the pattern's root).

    Returns
    -------
    bool
    """
    return _Matcher().match(_as_pattern(pattern), expr)


def match_nodes(pattern: DFPattern, expr: Expr) -> dict[DFPattern, list[Expr]] | None:
    """What each node of ``pattern`` matched in ``expr``, or None when ``expr`` does not match.

    The map is the one :class:`DFPatternCallback` receives (pattern node to expressions); pattern
    nodes of an alternative not taken are absent.
    """
    matcher = _Matcher()
    if not matcher.match(_as_pattern(pattern), expr):
        return None
    return {p: list(v) for p, v in matcher.memo.items()}


# --- grouping matches ----------------------------------------------------------------------------

def _pattern_order(pattern: DFPattern) -> list[DFPattern]:
    """The pattern graph's nodes in post-order (inputs before users, first inputs first)."""
    out: list[DFPattern] = []
    seen: set[DFPattern] = set()
    stack: list[tuple[DFPattern, bool]] = [(pattern, False)]
    while stack:
        node, done = stack.pop()
        if done:
            out.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        for c in reversed(node._inputs()):
            if c not in seen:
                stack.append((c, False))
    return out


class _Group:
    """One match taken for partitioning or rewriting."""

    def __init__(self, root: Expr, matched: dict[DFPattern, list[Expr]], args: list[Expr],
                 function: Function, name: str):
        self.root = root
        self.matched = matched
        self.args = args
        self.function = function
        self.name = name


_NAME_OF_KIND = {Tuple: "Tuple_", Function: "Function", Let: "Let_", If: "If_"}


def _extract(root: Expr, inputs: Mapping[Expr, Var]) -> tuple[Expr, dict[Expr, Expr], str]:
    """Rebuild ``root`` with ``inputs`` replaced by variables: ``(body, memo, name)``.

    The memo maps every node rebuilt (inputs excluded) to its copy; the name lists the matched
    nodes in post-order, as TVM's ``MatchExtractor`` does.
    """
    memo: dict[Expr, Expr] = {}
    name: list[str] = []
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if node in memo or node in inputs:
            continue
        kids = children(node)
        if not done:
            stack.append((node, True))
            for c in reversed(kids):
                if c not in memo and c not in inputs:
                    stack.append((c, False))
            continue
        new = rebuild(node, tuple(inputs[c] if c in inputs else memo[c] for c in kids))
        memo[node] = new
        if isinstance(node, Call):
            name.append(f"{node.op.name}_" if isinstance(node.op, Op) else "Call_")
        elif isinstance(node, TupleGetItem):
            name.append(f"TupleGetItem{node.index}_")
        else:
            name.append(_NAME_OF_KIND.get(type(node), ""))
    body = inputs[root] if root in inputs else memo[root]
    return body, memo, "".join(name)


class _Grouper:
    """TVM's PatternGrouper: the non-overlapping, self-contained matches of a pattern."""

    def __init__(self, pattern: DFPattern, expr: Expr, typed_params: bool = False):
        self.pattern = pattern
        self.pattern_order = _pattern_order(pattern)
        self.graph = _Graph(expr)
        self.matcher = _Matcher(self.graph)
        self.typed_params = typed_params
        self.groups: list[_Group] = []
        self.gid: dict[Expr, int] = {}
        self._group_all()

    def _group_all(self) -> None:
        pre_partitioned: set[Expr] = set()
        for node in reversed(self.graph.order):
            if node in self.gid:
                continue
            if isinstance(node, Function) and "PartitionedFromPattern" in node.attrs:
                pre_partitioned.add(node)
                pre_partitioned.update(post_order(node.body))
            if node not in pre_partitioned and self.matcher.match(self.pattern, node):
                self._create(node)

    def _embed_const(self, expr: Expr, pattern: DFPattern) -> bool:
        if not isinstance(expr, Constant):
            return False
        if isinstance(pattern, ConstantPattern):
            return True
        if isinstance(pattern, ExprPattern):
            return isinstance(pattern.expr, Constant)
        if isinstance(pattern, AltPattern):
            side = pattern.left if _Matcher(self.graph).match(pattern.left, expr) else pattern.right
            return self._embed_const(expr, side)
        return False

    def _create(self, root: Expr) -> None:
        node_map = {p: list(v) for p, v in self.matcher.memo.items()}
        fuzzy: set[Expr] = set()
        for p in self.pattern_order:
            if isinstance(p, DominatorPattern):
                for sub in (p.parent, p.path):
                    fuzzy.update(node_map.get(sub, ()))
            if isinstance(p, FunctionPattern):
                for fn in node_map.get(p, ()):
                    assert isinstance(fn, Function)
                    fuzzy.update(post_order(fn.body))
        inputs: dict[Expr, Var] = {}
        args: list[Expr] = []
        number = len(self.groups)

        def make_input(value: Expr, p: DFPattern) -> None:
            if value in fuzzy or value in inputs or isinstance(value, (Op, Function)) \
                    or self._embed_const(value, p):
                return
            ty = value._checked_type if self.typed_params else None
            inputs[value] = Var(f"FunctionVar_{number}_{len(args)}", ty)
            args.append(value)

        for p in self.pattern_order:
            if isinstance(p, TuplePattern) and p.fields is None:
                for t in node_map.get(p, ()):
                    assert isinstance(t, Tuple)
                    for f in t.fields:
                        make_input(f, p)
            elif isinstance(p, CallPattern) and p.args is None:
                for c in node_map.get(p, ()):
                    assert isinstance(c, Call)
                    for a in c.args:
                        make_input(a, p)
            elif not p._inputs():
                for m in node_map.get(p, ()):
                    make_input(m, p)
        body, memo, name = _extract(root, inputs)
        root_index = self.graph.index[root]
        for node in memo:
            if isinstance(node, (Op, Function, Constant)):
                continue
            if node in self.gid:
                return  # overlaps a match already taken
            if node is not root:
                for user in self.graph.outputs[self.graph.index[node]]:
                    if self.graph.order[user] not in memo \
                            and not self.graph.dominates(root_index, user):
                        return  # an inner result is used outside the match
        group = _Group(root, node_map, args, Function(list(inputs.values()), body), name)
        self.groups.append(group)
        for node in memo:
            self.gid[node] = len(self.groups) - 1


def _partition(pattern: DFPattern, expr: Expr, attrs: Mapping[str, Any] | None,
               check: Callable[[Expr], bool] | None, typed_params: bool = False) -> Expr:
    pattern = _as_pattern(pattern)
    if isinstance(pattern, FunctionPattern):
        return expr  # a function that is not called cannot be partitioned out (TVM skips it)
    grouper = _Grouper(pattern, expr, typed_params)
    roots = {id(g.root): g for g in grouper.groups}
    if not roots:
        return expr
    memo: dict[int, Expr] = {}

    def replace(new: Expr, old: Expr) -> Expr | None:
        group = roots.get(id(old))
        if group is None or grouper.groups[grouper.gid[old]] is not group:
            return None
        if check is not None and not check(old):
            return None
        fn = group.function.with_attr("PartitionedFromPattern", group.name)
        for k, v in (attrs or {}).items():
            fn = fn.with_attr(k, v)
        return Call(fn, [memo.get(id(a), a) for a in group.args])

    return rewrite_graph(expr, replace, into_functions=True, memo=memo)


def partition(pattern: DFPattern, expr: Expr, attrs: Mapping[str, Any] | None = None,
              check: Callable[[Expr], bool] | None = None) -> Expr:
    """Wrap every match of ``pattern`` in ``expr`` in a function called in its place.

    Parameters
    ----------
    pattern : DFPattern
        The pattern.
    expr : Expr
        The graph (not modified).
    attrs : dict, optional
        Attributes added to every new function (after ``PartitionedFromPattern``).
    check : callable, optional
        ``check(matched_root) -> bool``; a match is wrapped only when it returns True.

    Returns
    -------
    Expr
        The partitioned graph: each match becomes ``fn(FunctionVar_i_j, ...) {...}(inputs)``.
    """
    return _partition(pattern, expr, attrs, check)


# --- rewriting -------------------------------------------------------------------------------

class DFPatternCallback:
    """A pattern and what to do with its matches (subclass it and set ``self.pattern``).

    Parameters
    ----------
    require_type : bool
        Type the graph before each matching sweep (for type patterns and callbacks reading
        ``checked_type``).
    rewrite_once : bool
        Run one sweep only instead of rewriting until the graph stops changing.
    """

    pattern: DFPattern

    def __init__(self, require_type: bool = False, rewrite_once: bool = False):
        self.require_type = require_type
        self.rewrite_once = rewrite_once

    def callback(self, pre: Expr, post: Expr, node_map: Mapping[DFPattern, list[Expr]]) -> Expr:
        """The replacement of a match.

        Parameters
        ----------
        pre : Expr
            The matched root in the graph before this sweep.
        post : Expr
            The root rebuilt on its rewritten inputs.
        node_map : dict
            Every pattern node to the (rewritten) expressions it matched.
        """
        raise NotImplementedError("DFPatternCallback subclasses define callback()")

    def rewrite(self, expr: Expr) -> Expr:
        """:func:`rewrite` of ``expr`` with this callback."""
        return rewrite(self, expr)


def _typed(expr: Expr, mod: IRModule | None) -> Expr:
    from kiln.ir.analysis import free_vars
    from kiln.transform.infer_type import infer_type

    base = IRModule(dict(mod.functions)) if mod is not None else IRModule()
    name = "_tmp"
    while name in base:
        name += "_"
    fn = expr if isinstance(expr, Function) else Function(free_vars(expr), expr)
    base[name] = fn
    out = infer_type(base)[name]
    return out if isinstance(expr, Function) else out.body


def _sweep(callback: DFPatternCallback, expr: Expr) -> Expr:
    grouper = _Grouper(_as_pattern(callback.pattern), expr)
    roots = {id(g.root): g for g in grouper.groups}
    if not roots:
        return expr
    memo: dict[int, Expr] = {}

    def replace(new: Expr, old: Expr) -> Expr | None:
        group = roots.get(id(old))
        if group is None:
            return None
        node_map = {p: [memo.get(id(e), e) for e in es] for p, es in group.matched.items()}
        return callback.callback(old, new, node_map)

    return rewrite_graph(expr, replace, into_functions=True, memo=memo)


def rewrite(callbacks: DFPatternCallback | Iterable[DFPatternCallback], expr: Expr,
            mod: IRModule | None = None) -> Expr:
    """Rewrite ``expr`` with callbacks until it stops changing.

    Each sweep runs every callback once, in order: the matches of its pattern (taken as
    :func:`partition` takes them) are replaced by what ``callback`` returns.

    Parameters
    ----------
    callbacks : DFPatternCallback or list of them
        The rewrites.
    expr : Expr
        The graph (not modified).
    mod : IRModule, optional
        Resolves global calls when a callback requires types.

    Returns
    -------
    Expr
        The rewritten graph.
    """
    todo = [callbacks] if isinstance(callbacks, DFPatternCallback) else list(callbacks)
    post = expr
    for _ in range(_MAX_REWRITE_SWEEPS):
        last = post
        for cb in todo:
            if cb.require_type:
                post = _typed(post, mod)
            post = _sweep(cb, post)
        if all(cb.rewrite_once for cb in todo) or structural_equal(last, post, map_free_vars=True):
            return post
    raise PatternError(f"rewrite: the graph still changed after {_MAX_REWRITE_SWEEPS} sweeps; "
                       "do the callbacks undo each other?")
