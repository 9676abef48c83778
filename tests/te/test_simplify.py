"""The arithmetic simplifier: property tests against an evaluator written here, plus rules.

Random integer expressions over variables with known ranges must evaluate to the same value
before and after simplification, for random assignments within the ranges; their inferred
bounds must contain every value; conditions the simplifier proves must hold.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import te
from kiln.te import expr as E
from kiln.te.simplify import can_prove, expr_equal, int_bound, simplify

VARS = [te.var("a"), te.var("b"), te.var("c")]
RANGES = {VARS[0]: (0, 31), VARS[1]: (0, 7), VARS[2]: (-5, 5)}


def evaluate(e: E.PrimExpr, env: dict) -> int:
    """A direct evaluator of integer expressions (Python semantics: // and % floor)."""
    if isinstance(e, E.Var):
        return env[e]
    if isinstance(e, E.IntImm):
        return e.value
    if isinstance(e, E.Binary):
        a, b = evaluate(e.a, env), evaluate(e.b, env)
        if e.kind == "add":
            return a + b
        if e.kind == "sub":
            return a - b
        if e.kind == "mul":
            return a * b
        if e.kind == "floordiv":
            return a // b
        if e.kind == "floormod":
            return a % b
        if e.kind == "div":
            q = abs(a) // abs(b)
            return q if (a >= 0) == (b >= 0) else -q
        if e.kind == "mod":
            q = abs(a) // abs(b)
            q = q if (a >= 0) == (b >= 0) else -q
            return a - q * b
        if e.kind == "min":
            return min(a, b)
        return max(a, b)
    if isinstance(e, E.Compare):
        a, b = evaluate(e.a, env), evaluate(e.b, env)
        return int({"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b,
                    "gt": a > b, "ge": a >= b}[e.kind])
    if isinstance(e, E.And):
        return int(bool(evaluate(e.a, env)) and bool(evaluate(e.b, env)))
    if isinstance(e, E.Or):
        return int(bool(evaluate(e.a, env)) or bool(evaluate(e.b, env)))
    if isinstance(e, E.Not):
        return int(not evaluate(e.a, env))
    if isinstance(e, E.Select):
        return evaluate(e.true_value if evaluate(e.condition, env) else e.false_value, env)
    raise TypeError(type(e).__name__)


def _int_exprs() -> st.SearchStrategy:
    leaves = st.one_of(st.sampled_from(VARS), st.integers(-20, 40).map(te.const))

    def extend(children: st.SearchStrategy) -> st.SearchStrategy:
        positive = st.integers(1, 17)
        return st.one_of(
            st.tuples(children, children).map(lambda t: t[0] + t[1]),
            st.tuples(children, children).map(lambda t: t[0] - t[1]),
            st.tuples(children, st.integers(-6, 9)).map(lambda t: t[0] * t[1]),
            st.tuples(children, children).map(lambda t: t[0] * t[1]),
            st.tuples(children, positive).map(lambda t: te.floordiv(t[0], t[1])),
            st.tuples(children, positive).map(lambda t: te.floormod(t[0], t[1])),
            st.tuples(children, positive).map(lambda t: te.truncdiv(t[0], t[1])),
            st.tuples(children, positive).map(lambda t: te.truncmod(t[0], t[1])),
            st.tuples(children, children).map(lambda t: E.binary("min", t[0], t[1])),
            st.tuples(children, children).map(lambda t: E.binary("max", t[0], t[1])),
            st.tuples(children, children, children, children).map(
                lambda t: te.select(t[0] < t[1], t[2], t[3])),
        )

    return st.recursive(leaves, extend, max_leaves=12)


def _assignments() -> st.SearchStrategy:
    return st.lists(st.tuples(*[st.integers(lo, hi) for lo, hi in RANGES.values()]),
                    min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(_int_exprs(), _assignments())
def test_simplify_preserves_values(e: E.PrimExpr, points: list) -> None:
    s = simplify(e, RANGES)
    for point in points:
        env = dict(zip(VARS, point))
        assert evaluate(s, env) == evaluate(e, env), (str(e), str(s), point)


@settings(max_examples=150, deadline=None)
@given(_int_exprs(), _assignments())
def test_bounds_contain_every_value(e: E.PrimExpr, points: list) -> None:
    lo, hi = int_bound(e, RANGES)
    for point in points:
        v = evaluate(e, dict(zip(VARS, point)))
        assert (lo is None or lo <= v) and (hi is None or v <= hi), (str(e), lo, hi, v)


@settings(max_examples=150, deadline=None)
@given(_int_exprs(), _int_exprs(), st.sampled_from(["lt", "le", "ge", "ne"]), _assignments())
def test_proven_conditions_hold(a: E.PrimExpr, b: E.PrimExpr, kind: str, points: list) -> None:
    cond = E.compare(kind, a, b)
    s = simplify(cond, RANGES)
    for point in points:
        env = dict(zip(VARS, point))
        assert evaluate(s, env) == evaluate(cond, env)
    if can_prove(cond, RANGES):
        assert all(evaluate(cond, dict(zip(VARS, p))) for p in points)


def test_rules() -> None:
    a, b, _ = VARS
    assert expr_equal(simplify((a * 8 + b) // 8, RANGES), a)
    assert expr_equal(simplify((a * 8 + b) % 8, RANGES), b)
    x = te.var("x")
    assert expr_equal(simplify(te.floordiv(x, 16) * 16 + te.floormod(x, 16)), x)
    # a fused loop's inner axes read back whole: the row and column of a 160 x 160 plane
    plane = te.floordiv(te.floormod(x, 25600), 160) * 1280 + te.floormod(x, 160) * 8
    assert str(simplify(plane)) == "(floormod(x, 25600)*8)"
    assert str(simplify(plane + te.floordiv(x, 25600) * 204800)) == "(x*8)"
    assert "floordiv" in str(simplify(te.floordiv(te.floormod(x, 100), 16) * 16
                                      + te.floormod(x, 16)))  # 16 does not divide 100
    assert str(simplify((x + 3) - x + x * 2 - x)) == "(x + 3)"
    assert str(simplify(te.floordiv(te.floordiv(x, 4), 8))) == "floordiv(x, 32)"
    assert str(simplify(te.floormod(te.floormod(x, 32), 8))) == "floormod(x, 8)"
    assert str(simplify(te.floordiv(x, 8) < 3)) == "(x < 24)"
    assert str(simplify(te.truncdiv(a, 4), RANGES)) == "floordiv(a, 4)"
    # padding checks vanish in the interior
    y, ry = te.var("y"), te.var("ry")
    interior = {y: (1, 30), ry: (0, 2)}
    check = te.all(y + ry - 1 >= 0, y + ry - 1 < 32)
    assert can_prove(check, interior)
    assert not can_prove(check, {y: (0, 31), ry: (0, 2)})
    assert str(simplify(te.if_then_else(y >= 1, y, 0), interior)) == "y"
    # a variable with a single value is a constant
    z = te.var("z")
    assert str(simplify(z * 4 + a, {z: (0, 0), **RANGES})) == "a"
    assert str(simplify(E.binary("min", a, a + 2), RANGES)) == "a"
    # blocked channels: 8*block + lane with 0 <= lane < 8 splits at multiples of 8
    blk, lane = te.var("blk"), te.var("lane")
    blocked = {blk: (0, 9), lane: (0, 7)}
    assert str(simplify(te.floordiv(blk * 24 + lane, 16), blocked)) == "floordiv((blk*3), 2)"
    assert str(simplify(te.floormod(blk * 24 + lane, 16), blocked)) == \
        "((floormod((blk*3), 2)*8) + lane)"
    assert str(simplify(blk * 16 + lane < 72, blocked)) == "(blk < 5)"
    assert str(simplify(blk * 16 + lane + 8 <= 71, blocked)) == "(blk < 4)"
    assert str(simplify(blk * 16 + lane + 8 > 71, blocked)) == "(blk >= 4)"
    assert "lane" in str(simplify(blk * 16 + lane + 8 <= 72, blocked))  # lane 0 of block 4
    f = te.var("f", "float32")
    assert str(simplify((f + te.const(2.0)) * te.const(1.0))) == "(f + 2f)"
