"""Arithmetic simplification of index expressions, using the known ranges of loop variables.

:func:`simplify` rewrites an expression into an equal, simpler one:

* constant folding (``2*3`` → ``6``);
* canonical linear forms of integer arithmetic: like terms are collected, so
  ``(i*4 + j) - i*4`` → ``j`` and ``floordiv(x, 8)*8 + floormod(x, 8)`` → ``x``;
* ``floordiv``/``floormod`` by a positive constant split off multiples of the divisor and vanish
  when the rest is known to lie within one period (``floordiv(i_o*32 + i_i, 32)`` → ``i_o`` when
  ``0 <= i_i < 32``); truncating ``/`` and ``%`` of provably non-negative operands become the floor
  forms;
* comparisons, ``min``/``max`` and selects decided by the variables' ranges fold (a padding check
  ``y + ry >= 1`` disappears in the interior where ``y >= 1``).

Ranges are inclusive integer intervals ``{var: (lo, hi)}``. :func:`int_bound` returns the interval
of an integer expression; :func:`can_prove` decides a condition; :func:`expr_equal` compares two
expressions structurally.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kiln.te import expr as E
from kiln.te.expr import PrimExpr, Var, const
from kiln.te.visit import children, fold_up, rebuild

__all__ = ["Simplifier", "can_prove", "expr_equal", "int_bound", "simplify", "struct_key"]

Bound = tuple[int | None, int | None]
Ranges = Mapping[Var, tuple[int, int]]


def struct_key(e: PrimExpr, memo: dict[int, Any] | None = None) -> Any:
    """A hashable key equal for structurally equal expressions (variables by identity)."""
    memo = {} if memo is None else memo
    cached = memo.get(id(e))
    if cached is not None and cached[0] is e:
        return cached[1]
    if isinstance(e, Var):
        key: Any = ("var", id(e))
    elif isinstance(e, (E.IntImm, E.FloatImm)):
        key = (type(e).__name__, e.value, e.dtype)
    else:
        extra: Any = ()
        if isinstance(e, (E.Binary, E.Compare)):
            extra = (e.kind,)
        elif isinstance(e, E.Call):
            extra = (e.name,)
        elif isinstance(e, E.TensorLoad):
            extra = (e.tensor.key,)
        elif isinstance(e, E.Reduce):
            extra = (id(e.combiner), tuple(id(a) for a in e.axis), e.value_index)
        else:
            token = getattr(e, "struct_token", None)
            extra = (token(),) if callable(token) else (id(e),)
        kind = "Compare" if isinstance(e, E.Compare) else type(e).__name__
        key = (kind, e.dtype, extra, tuple(struct_key(c, memo) for c in children(e)))
    memo[id(e)] = (e, key)  # the node is kept alive so its id cannot be reused
    return key


def expr_equal(a: PrimExpr, b: PrimExpr) -> bool:
    """Whether two expressions are structurally identical."""
    memo: dict[int, Any] = {}
    return bool(struct_key(a, memo) == struct_key(b, memo))


def _is_int(e: PrimExpr) -> bool:
    return E.is_int_dtype(e.dtype) or E.is_uint_dtype(e.dtype)


_INDEX_NODES = (Var, E.IntImm, E.Binary, E.Compare, E.And, E.Or, E.Not, E.Select)


@dataclass
class _Linear:
    """``sum(coef * atom) + const`` with atoms keyed structurally, in first-seen order."""

    terms: dict[Any, list[Any]] = field(default_factory=dict)  # key -> [coef, atom]
    const: int = 0

    def add_term(self, key: Any, coef: int, atom: PrimExpr) -> None:
        if coef == 0:
            return
        slot = self.terms.get(key)
        if slot is None:
            self.terms[key] = [coef, atom]
        else:
            slot[0] += coef
            if slot[0] == 0:
                del self.terms[key]

    def scaled(self, k: int) -> _Linear:
        out = _Linear(const=self.const * k)
        if k:
            for key, (c, a) in self.terms.items():
                out.terms[key] = [c * k, a]
        return out

    def plus(self, other: _Linear, sign: int = 1) -> _Linear:
        out = _Linear({k: list(v) for k, v in self.terms.items()}, self.const + sign * other.const)
        for key, (c, a) in other.terms.items():
            out.add_term(key, sign * c, a)
        return out

    def gcd(self) -> int:
        g = 0
        for c, _ in self.terms.values():
            g = math.gcd(g, c)
        return g


class Simplifier:
    """Simplifies expressions given inclusive ranges of variables.

    Parameters
    ----------
    ranges : mapping of Var to (lo, hi), optional
        Known values of variables (loop ranges).
    """

    def __init__(self, ranges: Ranges | None = None):
        self.ranges: dict[Var, tuple[int, int]] = dict(ranges or {})
        self._keys: dict[int, Any] = {}
        self._memo: dict[int, tuple[PrimExpr, PrimExpr]] = {}
        self._index_memo: dict[int, tuple[PrimExpr, bool]] = {}

    def key(self, e: PrimExpr) -> Any:
        """Structural key of ``e``."""
        return struct_key(e, self._keys)

    def _index(self, e: PrimExpr) -> bool:
        """Whether ``e`` is index arithmetic: int32/int64 built from variables and constants only.

        Only such expressions are treated as mathematical integers (canonical forms, decisions
        by bounds); arithmetic on tensor data wraps around at its width, so it is only folded.
        Memoised per node: simplification asks it at every level of an expression.
        """
        def not_index(n: PrimExpr) -> bool | None:
            ok = n.dtype in ("int32", "int64", "bool") and isinstance(n, _INDEX_NODES)
            return None if ok else False

        return fold_up(e, self._index_memo, lambda _, kids: all(kids), not_index)

    # --- bounds --------------------------------------------------------------------------------
    def bound(self, e: PrimExpr) -> Bound:
        """Inclusive interval of an integer expression (``None`` for an unknown side)."""
        if isinstance(e, E.IntImm):
            return e.value, e.value
        if isinstance(e, Var):
            r = self.ranges.get(e)
            return (r[0], r[1]) if r is not None else _dtype_bound(e.dtype)
        if isinstance(e, E.Binary):
            return self._binary_bound(e)
        if isinstance(e, E.Cast) and _is_int(e) and _is_int(e.value):
            lo, hi = self.bound(e.value)
            dlo, dhi = _dtype_bound(e.dtype)
            if lo is not None and hi is not None and dlo is not None and dhi is not None \
                    and dlo <= lo and hi <= dhi:
                return lo, hi
            return dlo, dhi
        if isinstance(e, E.Select) or (isinstance(e, E.Call) and e.name == "if_then_else"):
            t, f = (e.true_value, e.false_value) if isinstance(e, E.Select) else e.args[1:]
            (a, b), (c, d) = self.bound(t), self.bound(f)
            return (None if a is None or c is None else min(a, c),
                    None if b is None or d is None else max(b, d))
        if e.dtype == "bool":
            return 0, 1
        return _dtype_bound(e.dtype)

    def _binary_bound(self, e: E.Binary) -> Bound:
        if e.kind in ("add", "sub"):
            return self._linear_bound(self.linear(e))
        if e.kind == "mul":
            la, lb = self.linear(e.a), self.linear(e.b)
            if not la.terms or not lb.terms:
                return self._linear_bound(la.scaled(lb.const) if not lb.terms
                                          else lb.scaled(la.const))
            return _mul_bound(self._linear_bound(la), self._linear_bound(lb))
        alo, ahi = self.bound(e.a)
        blo, bhi = self.bound(e.b)
        if e.kind == "min":
            known_hi = [x for x in (ahi, bhi) if x is not None]
            lo = None if alo is None or blo is None else min(alo, blo)
            return lo, (min(known_hi) if known_hi else None)
        if e.kind == "max":
            known_lo = [x for x in (alo, blo) if x is not None]
            hi = None if ahi is None or bhi is None else max(ahi, bhi)
            return (max(known_lo) if known_lo else None), hi
        if isinstance(e.b, E.IntImm) and e.b.value > 0:
            c = e.b.value
            nonneg = alo is not None and alo >= 0
            if e.kind == "floordiv" or (e.kind == "div" and nonneg):
                return (None if alo is None else alo // c,
                        None if ahi is None else ahi // c)
            if e.kind == "floormod" or (e.kind == "mod" and nonneg):
                if alo is not None and ahi is not None and alo // c == ahi // c:
                    return alo % c, ahi % c
                return 0, c - 1
            if e.kind == "mod":
                return -(c - 1), c - 1
        return _dtype_bound(e.dtype)

    def _linear_bound(self, lin: _Linear) -> Bound:
        lo: int | None = lin.const
        hi: int | None = lin.const
        for coef, atom in lin.terms.values():
            alo, ahi = self.bound(atom)
            if coef < 0:
                alo, ahi = ahi, alo
            lo = None if lo is None or alo is None else lo + coef * alo
            hi = None if hi is None or ahi is None else hi + coef * ahi
        return lo, hi

    # --- linear forms --------------------------------------------------------------------------
    def linear(self, e: PrimExpr) -> _Linear:
        """The canonical linear form of an integer expression (sub-atoms simplified)."""
        if isinstance(e, E.IntImm):
            return _Linear(const=e.value)
        if isinstance(e, E.Binary) and e.kind in ("add", "sub"):
            lin = self.linear(e.a).plus(self.linear(e.b), 1 if e.kind == "add" else -1)
            return self._merge_div_mod(lin)
        if isinstance(e, E.Binary) and e.kind == "mul":
            la, lb = self.linear(e.a), self.linear(e.b)
            if not lb.terms:
                return la.scaled(lb.const)
            if not la.terms:
                return lb.scaled(la.const)
            atom: PrimExpr = E.Binary("mul", self.from_linear(la, e.dtype),
                                      self.from_linear(lb, e.dtype), e.dtype)
            out = _Linear()
            out.add_term(self.key(atom), 1, atom)
            return out
        atom = self.simplify(e)
        if isinstance(atom, E.IntImm):
            return _Linear(const=atom.value)
        if isinstance(atom, E.Binary) and atom.kind in ("add", "sub", "mul"):
            return self.linear(atom)
        out = _Linear()
        out.add_term(self.key(atom), 1, atom)
        return out

    def _merge_div_mod(self, lin: _Linear) -> _Linear:
        """``k*c*floordiv(x, c) + k*floormod(x, c)`` → ``k*x``, and
        ``k*c*floordiv(floormod(x, a), c) + k*floormod(x, c)`` → ``k*floormod(x, a)`` when ``c``
        divides ``a`` (the inner axes of a fused loop, read back whole)."""
        changed = True
        while changed:
            changed = False
            for key, (coef, atom) in list(lin.terms.items()):
                if not (isinstance(atom, E.Binary) and atom.kind == "floormod"
                        and isinstance(atom.b, E.IntImm) and atom.b.value > 0):
                    continue
                c = atom.b.value
                whole = self._div_of_mod(lin, atom.a, c, coef * c)
                if whole is None:
                    continue
                dkey, merged = whole
                del lin.terms[key]
                del lin.terms[dkey]
                lin = lin.plus(self.linear(merged).scaled(coef))
                changed = True
                break
        return lin

    def _div_of_mod(self, lin: _Linear, x: PrimExpr, c: int,
                    coef: int) -> tuple[Any, PrimExpr] | None:
        """A term ``coef * floordiv(x, c)`` or ``coef * floordiv(floormod(x, a), c)`` (``c``
        dividing ``a``) of ``lin``: its key and ``x`` or ``floormod(x, a)``."""
        xkey = self.key(x)
        for dkey, (dcoef, datom) in lin.terms.items():
            if dcoef != coef or not (isinstance(datom, E.Binary) and datom.kind == "floordiv"
                                     and isinstance(datom.b, E.IntImm) and datom.b.value == c):
                continue
            inner = datom.a
            if self.key(inner) == xkey:
                return dkey, inner
            if isinstance(inner, E.Binary) and inner.kind == "floormod" \
                    and isinstance(inner.b, E.IntImm) and inner.b.value % c == 0 \
                    and self.key(inner.a) == xkey:
                return dkey, inner
        return None

    def from_linear(self, lin: _Linear, dtype: str) -> PrimExpr:
        """An expression for a linear form (terms in first-seen order, constant last)."""
        out: PrimExpr | None = None
        # larger strides first (outer loops before inner ones), then first-seen order
        terms = sorted(lin.terms.values(), key=lambda t: -abs(t[0]))
        for coef, atom in terms:
            if out is None:
                out = atom if coef == 1 else E.Binary("mul", atom, const(coef, dtype), dtype)
            elif coef > 0:
                term = atom if coef == 1 else E.Binary("mul", atom, const(coef, dtype), dtype)
                out = E.Binary("add", out, term, dtype)
            else:
                term = atom if coef == -1 else E.Binary("mul", atom, const(-coef, dtype), dtype)
                out = E.Binary("sub", out, term, dtype)
        if out is None:
            return const(lin.const, dtype)
        if lin.const > 0:
            out = E.Binary("add", out, const(lin.const, dtype), dtype)
        elif lin.const < 0:
            out = E.Binary("sub", out, const(-lin.const, dtype), dtype)
        return out

    # --- simplification ------------------------------------------------------------------------
    def simplify(self, e: PrimExpr) -> PrimExpr:
        """An equal, simpler expression."""
        cached = self._memo.get(id(e))
        if cached is not None and cached[0] is e:
            return cached[1]
        out = self._simplify(e)
        self._memo[id(e)] = (e, out)  # the node is kept alive so its id cannot be reused
        return out

    def _simplify(self, e: PrimExpr) -> PrimExpr:
        if isinstance(e, Var):
            r = self.ranges.get(e)
            return const(r[0], e.dtype) if r is not None and r[0] == r[1] else e
        if isinstance(e, (E.IntImm, E.FloatImm)):
            return e
        if isinstance(e, E.Binary) and _is_int(e) and self._index(e):
            return self._int_binary(e)
        kids = tuple(self.simplify(c) for c in children(e))
        node = rebuild(e, kids)
        if isinstance(node, E.Binary):
            folded = E._fold(node.kind, node.a, node.b)
            return folded if folded is not None else node
        if isinstance(node, E.Compare):
            return self._compare(node)
        if isinstance(node, (E.And, E.Or)):
            return self._logic(node)
        if isinstance(node, E.Not):
            if isinstance(node.a, E.IntImm):
                return const(not node.a.value)
            if isinstance(node.a, E.Not):
                return node.a.a
            return node
        if isinstance(node, E.Select):
            return self._choose(node.condition, node.true_value, node.false_value, node)
        if isinstance(node, E.Call) and node.name == "if_then_else":
            return self._choose(node.args[0], node.args[1], node.args[2], node)
        if isinstance(node, E.Cast):
            return E.cast(node.value, node.dtype)
        return node

    def _choose(self, cond: PrimExpr, t: PrimExpr, f: PrimExpr, node: PrimExpr) -> PrimExpr:
        if isinstance(cond, E.IntImm):
            return t if cond.value else f
        return node

    def _int_binary(self, e: E.Binary) -> PrimExpr:
        if e.kind in ("add", "sub", "mul"):
            return self.from_linear(self.linear(e), e.dtype)
        a, b = self.simplify(e.a), self.simplify(e.b)
        if e.kind in ("min", "max"):
            return self._min_max(e.kind, a, b, e.dtype)
        if e.kind in ("div", "mod"):
            alo, _ = self.bound(a)
            blo, _ = self.bound(b)
            if alo is not None and alo >= 0 and blo is not None and blo > 0:
                return self._div_mod("floordiv" if e.kind == "div" else "floormod", a, b, e.dtype)
            folded = E._fold(e.kind, a, b)
            return folded if folded is not None else E.Binary(e.kind, a, b, e.dtype)
        return self._div_mod(e.kind, a, b, e.dtype)

    def _div_mod(self, kind: str, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr:
        folded = E._fold(kind, a, b)
        if folded is not None:
            return folded
        if not (isinstance(b, E.IntImm) and b.value > 0):
            return E.Binary(kind, a, b, dtype)
        c = b.value
        lin = self.linear(a)
        # floordiv(floordiv(x, p), q) -> floordiv(x, p*q)
        if kind == "floordiv" and not lin.const and len(lin.terms) == 1:
            coef, atom = next(iter(lin.terms.values()))
            if coef == 1 and isinstance(atom, E.Binary) and atom.kind == "floordiv" \
                    and isinstance(atom.b, E.IntImm) and atom.b.value > 0:
                return self._div_mod("floordiv", atom.a, const(atom.b.value * c, dtype), dtype)
        if kind == "floormod" and not lin.const and len(lin.terms) == 1:
            coef, atom = next(iter(lin.terms.values()))
            if coef == 1 and isinstance(atom, E.Binary) and atom.kind == "floormod" \
                    and isinstance(atom.b, E.IntImm) and atom.b.value % c == 0:
                return self._div_mod("floormod", atom.a, b, dtype)
        quotient = _Linear()
        rest = _Linear(const=lin.const % c)
        quotient.const = lin.const // c
        for key, (coef, atom) in lin.terms.items():
            if coef % c == 0:
                quotient.add_term(key, coef // c, atom)
            else:
                rest.add_term(key, coef, atom)
        lo, hi = self._linear_bound(rest)
        if lo is not None and hi is not None and lo // c == hi // c:
            period = lo // c
            if kind == "floordiv":
                quotient.const += period
                return self.from_linear(quotient, dtype)
            rest.const -= period * c
            return self.from_linear(rest, dtype)
        # floordiv(g*y + r, c) = floordiv(y, c/g) when g divides c and 0 <= r < g
        g = math.gcd(rest.gcd(), c)
        if g > 1 and 0 <= rest.const < g:
            small = _exact_div(rest, g)
            small.const = 0
            reduced = self._div_mod(kind, self.from_linear(small, dtype), const(c // g, dtype),
                                    dtype)
            if kind == "floormod":
                return self.from_linear(self.linear(reduced).scaled(g).plus(
                    _Linear(const=rest.const)), dtype)
            quotient = quotient.plus(self.linear(reduced))
            return self.from_linear(quotient, dtype)
        # floordiv(g*y + r, c) = floordiv(y, c/g) also when r is a sum of terms (not only a
        # constant) known to lie in [0, g): blocked layouts index channels as
        # `floormod(8*block + lane, 16)` with 0 <= lane < 8
        split = self._split_small(rest, c)
        if split is not None:
            g, big, small = split
            reduced = self._div_mod(kind, self.from_linear(big, dtype), const(c // g, dtype),
                                    dtype)
            if kind == "floormod":
                return self.from_linear(self.linear(reduced).scaled(g).plus(small), dtype)
            return self.from_linear(quotient.plus(self.linear(reduced)), dtype)
        part = E.Binary(kind, self.from_linear(rest, dtype), b, dtype)
        if kind == "floormod":
            return part
        quotient.add_term(self.key(part), 1, part)
        return self.from_linear(quotient, dtype)

    def _split_small(self, lin: _Linear, c: int) -> tuple[int, _Linear, _Linear] | None:
        """``(g, big, small)`` with ``lin = g*big + small``, ``g`` a divisor of ``c`` (> 1) and
        ``0 <= small < g``: the terms whose coefficients ``g`` divides, divided by ``g``, and the
        rest (the constant split between both). None when no divisor of ``c`` splits ``lin``
        so, or when one side would hold no variable (the rules before it decide those)."""
        for g in sorted({math.gcd(coef, c) for coef, _ in lin.terms.values()} - {1},
                        reverse=True):
            big, small = _Linear(const=lin.const // g), _Linear(const=lin.const % g)
            for key, (coef, atom) in lin.terms.items():
                if coef % g == 0:
                    big.add_term(key, coef // g, atom)
                else:
                    small.add_term(key, coef, atom)
            if not big.terms or not small.terms:
                continue
            lo, hi = self._linear_bound(small)
            if lo is not None and hi is not None and lo >= 0 and hi < g:
                return g, big, small
        return None

    def _min_max(self, kind: str, a: PrimExpr, b: PrimExpr, dtype: str) -> PrimExpr:
        folded = E._fold(kind, a, b)
        if folded is not None:
            return folded
        lo, hi = self._linear_bound(self.linear(a).plus(self.linear(b), -1))
        if hi is not None and hi <= 0:
            return a if kind == "min" else b
        if lo is not None and lo >= 0:
            return b if kind == "min" else a
        return E.Binary(kind, a, b, dtype)

    def _compare(self, node: E.Compare) -> PrimExpr:
        a, b = node.a, node.b
        if not (_is_int(a) and _is_int(b) and self._index(a) and self._index(b)):
            folded = E._compare(node.kind, a, b)
            return folded if isinstance(folded, E.IntImm) else node
        diff = self.linear(a).plus(self.linear(b), -1)
        lo, hi = self._linear_bound(diff)
        decided = _decide(node.kind, lo, hi)
        if decided is not None:
            return const(decided)
        split = self._compare_split(node, diff)
        return split if split is not None else self._compare_floordiv(node)

    def _compare_split(self, node: E.Compare, d: _Linear) -> PrimExpr | None:
        """``g*y + r < 0`` → ``y < 0`` when ``0 <= r < g`` (``r`` holding variables): a bounds
        check on a blocked index (``16*block + 8*half + lane < 72``, ``0 <= lane < 8``) no
        longer depends on the lane. ``d`` is ``node.a - node.b`` (changed here)."""
        if node.kind not in ("lt", "le", "gt", "ge"):
            return None
        if node.kind in ("le", "gt"):  # d <= 0 <=> d - 1 < 0;  d > 0 <=> d - 1 >= 0
            d.const -= 1
        coefs = [abs(c) for c, _ in d.terms.values()]
        split = self._split_small(d, math.prod(coefs) if coefs else 1)
        if split is None:
            return None
        big = split[1]
        bound = const(-big.const, node.a.dtype)
        big.const = 0
        kind = "lt" if node.kind in ("lt", "le") else "ge"
        return self._compare(E.Compare(kind, self.from_linear(big, node.a.dtype), bound))

    def _compare_floordiv(self, node: E.Compare) -> PrimExpr:
        """``floordiv(x, c) < k`` → ``x < k*c`` (and the other orders), for constants c > 0, k."""
        a, b, kind = node.a, node.b, node.kind
        if isinstance(a, E.IntImm) and not isinstance(b, E.IntImm):
            a, b = b, a
            kind = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}.get(kind, kind)
        if not (isinstance(a, E.Binary) and a.kind == "floordiv" and isinstance(a.b, E.IntImm)
                and a.b.value > 0 and isinstance(b, E.IntImm)) or kind in ("eq", "ne"):
            return node
        c, k, x = a.b.value, b.value, a.a
        if kind == "lt":  # floordiv(x, c) < k  <=>  x < k*c
            return self._compare(E.Compare("lt", x, const(k * c, x.dtype)))
        if kind == "le":
            return self._compare(E.Compare("lt", x, const((k + 1) * c, x.dtype)))
        if kind == "gt":
            return self._compare(E.Compare("ge", x, const((k + 1) * c, x.dtype)))
        return self._compare(E.Compare("ge", x, const(k * c, x.dtype)))

    def _logic(self, node: E.And | E.Or) -> PrimExpr:
        a, b = node.a, node.b
        if isinstance(node, E.And):
            return E.logical_and(a, b)
        return E.logical_or(a, b)


def _mul_bound(a: Bound, b: Bound) -> Bound:
    """Interval product (unknown when either side is unbounded)."""
    if None in a or None in b:
        return None, None
    products = [x * y for x in a for y in b]  # type: ignore[operator]
    return min(products), max(products)


def _exact_div(lin: _Linear, g: int) -> _Linear:
    out = _Linear(const=lin.const // g)
    for key, (c, a) in lin.terms.items():
        out.terms[key] = [c // g, a]
    return out


def _decide(kind: str, lo: int | None, hi: int | None) -> bool | None:
    """The truth of ``d <kind> 0`` when ``lo <= d <= hi``, if it is decided."""
    if kind == "lt":
        if hi is not None and hi < 0:
            return True
        if lo is not None and lo >= 0:
            return False
    elif kind == "le":
        if hi is not None and hi <= 0:
            return True
        if lo is not None and lo > 0:
            return False
    elif kind == "gt":
        if lo is not None and lo > 0:
            return True
        if hi is not None and hi <= 0:
            return False
    elif kind == "ge":
        if lo is not None and lo >= 0:
            return True
        if hi is not None and hi < 0:
            return False
    elif kind == "eq":
        if lo == 0 and hi == 0:
            return True
        if (lo is not None and lo > 0) or (hi is not None and hi < 0):
            return False
    elif kind == "ne":
        if lo == 0 and hi == 0:
            return False
        if (lo is not None and lo > 0) or (hi is not None and hi < 0):
            return True
    return None


def _dtype_bound(dtype: str) -> Bound:
    if dtype == "bool":
        return 0, 1
    if E.is_uint_dtype(dtype):
        return 0, (1 << E.dtype_bits(dtype)) - 1
    if E.is_int_dtype(dtype):
        bits = E.dtype_bits(dtype)
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return None, None


def simplify(e: PrimExpr, ranges: Ranges | None = None) -> PrimExpr:
    """``e`` simplified with the given inclusive variable ranges (see the module docstring)."""
    return Simplifier(ranges).simplify(e)


def int_bound(e: PrimExpr, ranges: Ranges | None = None) -> Bound:
    """Inclusive interval of an integer expression given variable ranges."""
    s = Simplifier(ranges)
    return s.bound(s.simplify(e))


def can_prove(cond: PrimExpr, ranges: Ranges | None = None) -> bool:
    """Whether ``cond`` holds for every value of the variables in their ranges."""
    out = simplify(cond, ranges)
    return isinstance(out, E.IntImm) and bool(out.value)
