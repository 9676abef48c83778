"""Vectorized loops as GCC vector-extension code.

A loop marked ``vectorized`` whose extent ``L`` is a power of two becomes straight-line code on
``L``-lane vectors (``typedef float kiln_f32x8 __attribute__((vector_size(32)))``): stores must
be contiguous in the loop variable; loads are contiguous (one vector load), uniform (a scalar
broadcast) or gathered lane by lane; arithmetic, comparisons (as lane masks), selects and casts
map to vector operations; float32 ``exp``/``tanh``/``sigmoid``/``erf`` use the vector
approximations of :mod:`kiln.codegen.c_prelude`; other operations run lane by lane. A loop whose
body is guarded by bounds checks that are linear in the loop variable (the tail of a split that
does not divide) runs the plain vector code when the check holds at the first and last lane
(then it holds at every lane), and otherwise the same vector code under a lane mask: masked
loads and stores (:mod:`kiln.codegen.c_masked`) touch only the lanes inside the data, register
tiles keep their old value in the other lanes, and lane-by-lane operations skip them. A check
that is false at a lane whatever the outer loops (more lanes than the data has) makes every
iteration masked. Anything else (nested loops, float16, stores that do not move with the loop)
falls back to a scalar loop.

Buffers held in vector variables (register tiles, :mod:`kiln.codegen.c_registers`) are read
and written as whole vectors; :mod:`kiln.codegen.c_reduce` reuses :class:`VectorBody` for the
lane combine of reductions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kiln.codegen.c_registers import register_vector
from kiln.codegen.c_types import MASK_INT, c_type, vector_type_name
from kiln.codegen.c_types import bits as element_bits
from kiln.te import expr as E
from kiln.te.expr import PrimExpr, Var, const
from kiln.te.loop_ir import (
    Allocate,
    BufferLoad,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    Seq,
    Stmt,
    Store,
    own_exprs,
    walk_stmts,
)
from kiln.te.visit import children, post_order, rebuild, substitute, vars_in

if TYPE_CHECKING:
    from kiln.codegen.c_codegen import CCodegen

__all__ = ["VectorBody", "emit_vector_loop", "linear_coef", "vector_supported"]

_VECTOR_MATH = ("exp", "tanh", "sigmoid", "erf")


@dataclass
class _VVal:
    """A value in vector code: ``s`` scalar, ``v`` vector of ``dtype``, ``m`` lane mask."""

    code: str
    kind: str
    dtype: str
    bits: int = 0


def _is_const(e: PrimExpr, value: bool) -> bool:
    return isinstance(e, E.IntImm) and bool(e.value) == value


def _all_of(conds: list[PrimExpr]) -> PrimExpr:
    out = conds[0]
    for c in conds[1:]:
        out = E.logical_and(out, c)
    return out


def emit_vector_loop(cg: CCodegen, loop: For) -> bool:
    """Emit ``loop`` as vector code; ``False`` (nothing emitted) when it does not qualify."""
    lanes = loop.extent
    if lanes < 2 or lanes & (lanes - 1) or lanes > 64:
        return False
    guard, body = _peel_guard(cg, loop)
    if not vector_supported(cg, loop, body, lanes):
        return _split_by_value_condition(cg, loop, guard, body)
    v = loop.var
    name = cg.var_name(v)
    # a single assignment (a register tile update, say) needs no block of its own
    with cg.block(f"{{  /* {name}: {lanes} lanes */", collapse=True):
        if guard is None:
            VectorBody(cg, v, lanes).emit(body)
        else:
            _guarded(cg, v, lanes, guard, body)
    return True


def _split_by_value_condition(cg: CCodegen, loop: For, guard: PrimExpr | None,
                              body: Stmt) -> bool:
    """A store of ``cond ? a : b`` whose condition varies across the lanes (zero padding read
    through: ``0 <= w - 1 < W ? x[w - 1] : 0``) cannot load ``a`` as a vector where ``cond``
    fails. When ``cond`` holds on an interval of lanes (linear comparisons), the vector stores
    ``a`` wherever it holds at both ends (the interior of a padded row), and the loop runs as
    scalar code elsewhere (its edges). False, with nothing emitted, for other bodies."""
    if not isinstance(body, Store):
        return False
    parts = E.choice_parts(body.value)
    if parts is None:
        return False
    cond, taken, _ = parts
    v, lanes = loop.var, loop.extent
    if v not in cg.facts.vars(cond) or not _convex_in(cg, cond, v):
        return False
    inner = Store(body.buffer, body.index, taken)
    if not vector_supported(cg, loop, inner, lanes):
        return False
    ends = [cg.simp.simplify(substitute(cond, {v: const(k)})) for k in (0, lanes - 1)]
    if any(_is_const(c, False) for c in ends):
        return False
    checks = [f"({cg.cond(c)})" for c in ends if not isinstance(c, E.IntImm)]
    if not checks:  # holds on every lane
        return False
    name = cg.var_name(v)
    with cg.block(f"if ({' && '.join(checks)}) {{  /* {name}: {lanes} lanes where "
                  "the condition holds on all */", closing=None):
        if guard is None:
            VectorBody(cg, v, lanes).emit(inner)
        else:
            _guarded(cg, v, lanes, guard, inner)
    with cg.block("} else {"):
        cg.plain_for(loop)
    return True


def _guarded(cg: CCodegen, v: Var, lanes: int, guard: PrimExpr, body: Stmt) -> None:
    """A guarded vector body: plain vector code when every lane passes the check, else masked."""
    uniform = [c for c in E.conjuncts(guard) if v not in cg.facts.vars(c)
               and not _is_const(c, True)]
    varying = _all_of([c for c in E.conjuncts(guard) if v in cg.facts.vars(c)])
    if any(_is_const(c, False) for c in uniform):
        return  # never runs (a copy of an unrolled loop past the data)
    if uniform:
        with cg.block(f"if ({cg.cond(_all_of(uniform))}) {{"):
            _lane_checked(cg, v, lanes, varying, body)
    else:
        _lane_checked(cg, v, lanes, varying, body)


def _lane_checked(cg: CCodegen, v: Var, lanes: int, varying: PrimExpr, body: Stmt) -> None:
    """The vector body, masked by the lane check ``varying`` where it can fail."""
    # the lane check is linear in v: it holds at every lane iff it holds at both ends
    ends = [cg.simp.simplify(substitute(varying, {v: const(k)})) for k in (0, lanes - 1)]
    if any(_is_const(c, False) for c in ends):
        VectorBody(cg, v, lanes, varying).emit(body)
    elif all(_is_const(c, True) for c in ends):
        VectorBody(cg, v, lanes).emit(body)
    else:
        checks = [f"({cg.cond(c)})" for c in ends if not isinstance(c, E.IntImm)]
        with cg.block(f"if ({' && '.join(checks)}) {{", closing=None):
            VectorBody(cg, v, lanes).emit(body)
        with cg.block("} else {"):
            VectorBody(cg, v, lanes, varying).emit(body)


def _peel_guard(cg: CCodegen, loop: For) -> tuple[PrimExpr | None, Stmt]:
    """A bounds check around the whole body that holds on an interval of lanes."""
    body = loop.body
    if isinstance(body, IfThenElse) and body.else_case is None \
            and loop.var in cg.facts.vars(body.condition) and _convex_in(cg, body.condition, loop.var):
        return body.condition, body.then_case
    return None, body


def _convex_in(cg: CCodegen, cond: PrimExpr, v: Var) -> bool:
    """Whether ``cond`` is a conjunction of comparisons linear in ``v`` (true on an interval)."""
    if isinstance(cond, E.And):
        return _convex_in(cg, cond.a, v) and _convex_in(cg, cond.b, v)
    if v not in cg.facts.vars(cond):
        return True
    if not isinstance(cond, E.Compare) or cond.kind in ("eq", "ne"):
        return False
    lin = cg.simp.linear(cg.simp.simplify(cond.a - cond.b))
    return all(atom is v or v not in cg.facts.vars(atom) for _, atom in lin.terms.values())


def _number(e: PrimExpr) -> bool:
    """Whether ``e`` is a literal that is not NaN."""
    return isinstance(e, E.IntImm) or (isinstance(e, E.FloatImm) and e.value == e.value)


def linear_coef(cg: CCodegen, index: PrimExpr, v: Var) -> int | None:
    """The coefficient of ``v`` in a linear index (None when ``v`` appears non-linearly)."""
    lin = cg.simp.linear(cg.simp.simplify(index))
    coef = 0
    for c, atom in lin.terms.values():
        if atom is v:
            coef = c
        elif v in cg.facts.vars(atom):
            return None
    return coef


_VECTOR_CALLS = ("fabs", "isnan", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not")


def _scalar_only(cg: CCodegen, n: PrimExpr, v: Var) -> bool:
    """Operations with no vector form: vector code would run them lane by lane anyway (a lazy
    ``if_then_else`` whose condition varies across lanes loads lane by lane too), so the loop is
    better left to the compiler as scalar code (shorter, and just as fast)."""
    if isinstance(n, E.Call) and n.name == "if_then_else":
        return v in cg.facts.vars(n.args[0])
    if isinstance(n, E.Binary):
        return n.kind in ("mod", "floordiv", "floormod") or (n.kind == "div"
                                                             and not E.is_float_dtype(n.dtype))
    if isinstance(n, E.Cast):
        return E.is_float_dtype(n.value.dtype) and not E.is_float_dtype(n.dtype) \
            and n.dtype != "bool"
    if isinstance(n, E.Call):
        return n.name not in _VECTOR_CALLS and not (n.dtype == "float32"
                                                    and n.name in _VECTOR_MATH)
    return False


def _value_nodes(cg: CCodegen, e: PrimExpr, v: Var) -> list[PrimExpr]:
    """Nodes of a value that vary with ``v``, not looking into load indices (a load that is not
    contiguous is gathered lane by lane whatever its index computes)."""
    out: list[PrimExpr] = []
    stack = [e]
    while stack:
        n = stack.pop()
        if v not in cg.facts.vars(n):
            continue
        out.append(n)
        if not isinstance(n, BufferLoad):
            stack.extend(children(n))
    return out


def vector_supported(cg: CCodegen, loop: For, body: Stmt, lanes: int) -> bool:
    """Whether ``body`` (of ``loop``, minus its peeled guard) can be emitted as vector code."""
    v = loop.var
    stores: dict[int, list[PrimExpr]] = {}
    exprs: list[PrimExpr] = []
    values: list[PrimExpr] = []
    for s in walk_stmts(body):
        if isinstance(s, (For, Evaluate, Allocate)):
            return False
        if isinstance(s, Store):
            if s.buffer.dtype == "float16" or linear_coef(cg, s.index, v) != 1:
                return False
            stores.setdefault(id(s.buffer), []).append(s.index)
            exprs += [s.index, s.value]
            values.append(s.value)
        elif isinstance(s, LetStmt):
            exprs.append(s.value)
            values.append(s.value)
        elif isinstance(s, IfThenElse):
            if v in cg.facts.vars(s.condition):
                return False
            exprs.append(s.condition)
    for e in exprs:  # no float16 (no vector form), and every value fits a 256-byte vector
        for n in post_order(e):
            if n.dtype == "float16" or element_bits(n.dtype) * lanes > 8 * 256:
                return False
    for e in values:
        for n in _value_nodes(cg, e, v):
            if _scalar_only(cg, n, v):
                return False
            if isinstance(n, BufferLoad) and id(n.buffer) in stores:
                key = cg.simp.key(cg.simp.simplify(n.index))
                if all(cg.simp.key(cg.simp.simplify(i)) != key for i in stores[id(n.buffer)]):
                    return False  # reads another lane's element of a buffer the loop writes
    return True


class VectorBody:
    """Emits the statements of a vector loop body (under a lane mask when ``mask`` is given:
    a condition true at the lanes to compute).

    Parameters
    ----------
    cg : CCodegen
        The generator, positioned where the code goes.
    v : Var
        The lane variable.
    lanes : int
        The vector length (a power of two).
    mask : PrimExpr, optional
        A condition linear in ``v``: lanes where it is false are neither loaded nor stored.
    """

    def __init__(self, cg: CCodegen, v: Var, lanes: int, mask: PrimExpr | None = None):
        self.cg = cg
        self.v = v
        self.lanes = lanes
        self.env: dict[int, _VVal] = {}
        self.memo: dict[object, tuple[PrimExpr, _VVal]] = {}
        self.mask = mask
        self.masks: dict[int, str] = {}  # element bits -> mask variable

    def emit(self, body: Stmt) -> None:
        """Emit ``body`` (after the lane masks it needs, when masked)."""
        if self.mask is None:
            self.stmt(body)
            return
        val = self.expr(self.mask)
        # every buffer's width, register tiles included: their masked updates blend by lane
        widths = {32} | {element_bits(b.dtype) for b in _memory_buffers(body, {})}
        for bits in sorted(widths):  # declared up front: branches inside must see them
            code = self.as_mask(val, bits)
            self.masks[bits] = code if code.isidentifier() else self.temp(self.mtype(bits), code)
        if not _reads_uniform_memory(body, self.v, self.cg.registers):
            self.stmt(body)
            return
        # a load that does not move with the lanes runs only if some lane is inside
        any_lane = self.cg.temp_name("any")
        self.cg.emit(f"int32_t {any_lane} = 0;")
        self.cg.emit(f"for (int k = 0; k < {self.lanes}; ++k) {any_lane} |= ({self.masks[32]}[k] "
                     "!= 0);")
        with self.cg.block(f"if ({any_lane}) {{"):
            self.stmt(body)

    def mask_of(self, dtype: str) -> str:
        """The lane mask variable for elements of ``dtype`` (masked bodies only)."""
        return self.masks[element_bits(dtype)]

    def masked_suffix(self, dtype: str) -> str:
        """The suffix of the masked load/store helpers for ``dtype`` vectors (registers them)."""
        # bool data is uint8: one set of helpers for both
        self.cg.masked_types.add(("uint8" if dtype == "bool" else dtype, self.lanes))
        return self.vtype(dtype)[len("kiln_"):]

    # --- types and temporaries --------------------------------------------------------------
    def vtype(self, dtype: str) -> str:

        self.cg.vector_types.add((dtype, self.lanes))
        return vector_type_name(dtype, self.lanes)

    def mtype(self, bits: int) -> str:
        return self.vtype(MASK_INT[bits])

    def temp(self, ctype: str, code: str) -> str:
        name = self.cg.temp_name("v")
        self.cg.emit(f"{ctype} {name} = {code};")
        return name

    # --- statements -------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        cg = self.cg
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, Store):
            base_index = substitute(s.index, {self.v: const(0)})
            dt = s.buffer.dtype
            value = self.as_vec(self.expr(s.value), dt)
            if id(s.buffer) in cg.registers:
                reg = register_vector(cg, s.buffer, base_index)
                if self.mask is not None:  # lanes outside keep their value
                    value = self.blend(self.mask_of(dt), value, reg, dt)
                cg.emit(f"{reg} = {value};")
            elif self.mask is not None:
                base = cg.expr(cg.simp.simplify(base_index))
                cg.emit(f"kiln_mstore_{self.masked_suffix(dt)}(&{s.buffer.name}[{base}], "
                        f"{self.mask_of(dt)}, {value});")
            else:
                base = cg.expr(cg.simp.simplify(base_index))
                cg.emit(f"*({self.vtype(dt)}u*)&{s.buffer.name}[{base}] = {value};")
            self._forget_loads_of(s.buffer)
        elif isinstance(s, LetStmt):
            val = self.expr(s.value)
            if val.kind == "s":

                cg.emit(f"const {c_type(s.var.dtype)} {cg.var_name(s.var)} = {val.code};")
            else:
                self.env[id(s.var)] = val
            self.stmt(s.body)
        elif isinstance(s, IfThenElse):
            cg.branch(s, self.stmt)

    # --- conversions --------------------------------------------------------------------------
    def as_vec(self, val: _VVal, dtype: str) -> str:
        """``val`` as a vector of ``dtype`` (bool as 0/1 bytes)."""
        vt = self.vtype(dtype)
        if val.kind == "s":

            scalar = val.code if val.dtype == dtype else f"({c_type(dtype)})({val.code})"
            return f"KILN_SPLAT({vt}, {scalar})"
        if val.kind == "m":
            bytemask = self.convert_mask(val, 8)
            return f"(({vt})({bytemask} & 1))"
        return val.code

    def convert_mask(self, val: _VVal, bits: int) -> str:
        if val.bits == bits:
            return val.code
        return f"__builtin_convertvector({val.code}, {self.mtype(bits)})"

    def as_mask(self, val: _VVal, bits: int) -> str:
        """``val`` (a bool) as a lane mask of ``bits``-wide integers (-1 true, 0 false)."""
        mt = self.mtype(bits)
        if val.kind == "s":
            return f"(({mt}){{}} + (int{bits}_t)(({val.code}) ? -1 : 0))"
        if val.kind == "m":
            return self.convert_mask(val, bits)
        nonzero = _VVal(f"({val.code} != 0)", "m", "bool", element_bits(val.dtype))
        return self.convert_mask(nonzero, bits)

    def blend(self, mask: str, a: str, b: str, dtype: str) -> str:
        """``a`` where the lanes of ``mask`` are set, else ``b``."""
        vt = self.vtype(dtype)
        it = self.mtype(element_bits(dtype))
        if not mask.isidentifier():
            mask = self.temp(it, mask)
        return f"KILN_SELECT({vt}, {it}, {mask}, {a}, {b})"

    # --- expressions --------------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> _VVal:
        key = self.cg.simp.key(e)  # structurally equal sub-expressions are computed once
        hit = self.memo.get(key)
        if hit is not None:
            return hit[1]
        out = self._expr(e)
        self.memo[key] = (e, out)
        return out

    def _forget_loads_of(self, buffer: object) -> None:
        """A store invalidates remembered values that read the stored buffer."""
        for key, (e, _) in list(self.memo.items()):
            if id(buffer) in self.cg.facts.buffers(e):
                del self.memo[key]

    def _uniform(self, e: PrimExpr) -> bool:
        return not any(n is self.v or id(n) in self.env for n in self.cg.facts.vars(e))

    def _expr(self, e: PrimExpr) -> _VVal:
        cg = self.cg
        if self._uniform(e):
            return _VVal(cg.expr(e), "s", e.dtype)
        if isinstance(e, Var):
            if e is self.v:
                vt = self.vtype(e.dtype)
                lanes = ", ".join(str(k) for k in range(self.lanes))
                return _VVal(self.temp(vt, f"({vt}){{{lanes}}}"), "v", e.dtype)
            return self.env[id(e)]
        if isinstance(e, BufferLoad):
            return self._load(e)
        if isinstance(e, E.Binary):
            return self._binary(e)
        if isinstance(e, E.Compare):
            dt = e.a.dtype
            a = self.as_vec(self.expr(e.a), dt)
            b = self.as_vec(self.expr(e.b), dt)
            op = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[e.kind]
            bits = element_bits(dt)
            return _VVal(self.temp(self.mtype(bits), f"{a} {op} {b}"), "m", "bool", bits)
        if isinstance(e, (E.And, E.Or)):
            lhs = self.expr(e.a)
            bits = lhs.bits if lhs.kind == "m" else 32
            op = "&" if isinstance(e, E.And) else "|"
            code = f"{self.as_mask(lhs, bits)} {op} {self.as_mask(self.expr(e.b), bits)}"
            return _VVal(self.temp(self.mtype(bits), code), "m", "bool", bits)
        if isinstance(e, E.Not):
            arg = self.expr(e.a)
            bits = arg.bits if arg.kind == "m" else 8
            return _VVal(self.temp(self.mtype(bits), f"~{self.as_mask(arg, bits)}"), "m", "bool",
                         bits)
        if isinstance(e, E.Select):
            return self._select(e.condition, e.true_value, e.false_value, e.dtype)
        if isinstance(e, E.Cast):
            return self._cast(e)
        if isinstance(e, E.Call):
            return self._call(e)
        return self._lanewise(e)

    def _load(self, e: BufferLoad) -> _VVal:
        cg = self.cg
        coef = linear_coef(cg, e.index, self.v)
        vt = self.vtype(e.dtype)
        if coef == 1 and id(e.buffer) in cg.registers:
            base = substitute(e.index, {self.v: const(0)})
            return _VVal(register_vector(cg, e.buffer, base), "v", e.dtype)
        if coef == 1:
            offset = cg.expr(cg.simp.simplify(substitute(e.index, {self.v: const(0)})))
            if self.mask is not None:
                code = (f"kiln_mload_{self.masked_suffix(e.dtype)}(&{e.buffer.name}[{offset}], "
                        f"{self.mask_of(e.dtype)})")
            else:
                code = f"*(const {vt}u*)&{e.buffer.name}[{offset}]"
            return _VVal(self.temp(vt, code), "v", e.dtype)
        window = self._window(e) if self.mask is None and id(e.buffer) not in cg.registers \
            else None
        return window if window is not None else self._lanewise(e)

    def _window(self, e: BufferLoad) -> _VVal | None:
        """Lanes reading constant offsets ``0 <= d < 2 * lanes`` from lane 0's element, the last
        one read at least ``lanes - 1`` (a blocked depth-to-space reads pairs: 0, 1, 4, 5, ...):
        one or two vector loads within the elements read and a shuffle, instead of a scalar
        load per lane. None for other patterns."""
        cg = self.cg
        n = self.lanes
        base = cg.simp.simplify(substitute(e.index, {self.v: const(0)}))
        offsets: list[int] = []
        for k in range(n):
            d = cg.simp.simplify(substitute(e.index, {self.v: const(k)}) - base)
            if not isinstance(d, E.IntImm):
                return None
            offsets.append(d.value)
        last = max(offsets)
        if min(offsets) < 0 or not n - 1 <= last < 2 * n:
            return None
        vt = self.vtype(e.dtype)
        start = cg.expr(base)
        lo = self.temp(vt, f"*(const {vt}u*)&{e.buffer.name}[{start}]")
        hi, shift = lo, 0
        if last >= n:  # the second vector ends at the last element read
            shift = last - n + 1
            hi = self.temp(vt, f"*(const {vt}u*)&{e.buffer.name}[({start}) + {shift}]")
        picks = ", ".join(str(d if d < n else n + d - shift) for d in offsets)
        return _VVal(self.temp(vt, f"__builtin_shufflevector({lo}, {hi}, {picks})"), "v", e.dtype)

    def _binary(self, e: E.Binary) -> _VVal:
        dt = e.dtype
        vt = self.vtype(dt)
        if e.kind in ("add", "sub", "mul") or (e.kind == "div" and E.is_float_dtype(dt)):
            a = self.as_vec(self.expr(e.a), dt)
            b = self.as_vec(self.expr(e.b), dt)
            op = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[e.kind]
            if E.is_int_dtype(dt):
                ut = self.vtype("u" + dt)
                return _VVal(self.temp(vt, f"({vt})(({ut}){a} {op} ({ut}){b})"), "v", dt)
            return _VVal(self.temp(vt, f"{a} {op} {b}"), "v", dt)
        if e.kind in ("min", "max"):
            x, y = e.a, e.b
            if _number(x) and not _number(y):
                x, y = y, x
            a = self.as_vec(self.expr(x), dt)
            b = self.as_vec(self.expr(y), dt)
            op = "<" if e.kind == "min" else ">"
            if E.is_float_dtype(dt) and _number(y):
                # y is not NaN: take it where it wins, else x (NaN included) in one comparison
                return _VVal(self.temp(vt, self.blend(f"({b} {op} {a})", b, a, dt)), "v", dt)
            if E.is_float_dtype(dt):  # NaN propagates, as numpy.maximum / numpy.minimum
                it = self.mtype(element_bits(dt))
                return _VVal(self.temp(vt, f"KILN_{e.kind.upper()}({vt}, {it}, {a}, {b})"), "v", dt)
            return _VVal(self.temp(vt, self.blend(f"({a} {op} {b})", a, b, dt)), "v", dt)
        return self._lanewise(e)

    def _select(self, cond: PrimExpr, t: PrimExpr, f: PrimExpr, dt: str) -> _VVal:
        mask = self.as_mask(self.expr(cond), element_bits(dt))
        a = self.as_vec(self.expr(t), dt)
        b = self.as_vec(self.expr(f), dt)
        return _VVal(self.temp(self.vtype(dt), self.blend(mask, a, b, dt)), "v", dt)

    def _cast(self, e: E.Cast) -> _VVal:
        src, dst = e.value.dtype, e.dtype
        val = self.expr(e.value)
        if dst == "bool":
            bits = element_bits(src)
            if val.kind == "m":
                return val
            zero = f"(({self.vtype(src)}){{}})"
            return _VVal(self.temp(self.mtype(bits), f"{self.as_vec(val, src)} != {zero}"),
                         "m", "bool", bits)
        vt = self.vtype(dst)
        if src == "bool":
            if val.kind == "m":
                conv = f"__builtin_convertvector({val.code}, {vt})"
                return _VVal(self.temp(vt, f"-{conv}" if E.is_float_dtype(dst)
                                       else f"({vt})(-{conv})"), "v", dst)
            return _VVal(self.temp(vt, f"__builtin_convertvector({val.code}, {vt})"), "v", dst)
        if E.is_float_dtype(src) and not E.is_float_dtype(dst):
            return self._lanewise(e)
        return _VVal(self.temp(vt, f"__builtin_convertvector({self.as_vec(val, src)}, {vt})"),
                     "v", dst)

    def _call(self, e: E.Call) -> _VVal:
        dt = e.dtype
        if e.name == "if_then_else":
            if self._uniform(e.args[0]):
                return self._branch(e.args[0], e.args[1], e.args[2], dt)
            return self._lanewise(e)
        if dt == "float32" and e.name in _VECTOR_MATH:
            a = self.as_vec(self.expr(e.args[0]), dt)
            self.cg.vector_math.add(self.lanes)
            name = "expneg" if e.name == "exp" and e.arg_max is not None and e.arg_max <= 0 \
                else e.name  # no overflow to handle
            fn = f"kiln_v{name}_f32x{self.lanes}"
            return _VVal(self.temp(self.vtype(dt), f"{fn}({a})"), "v", dt)
        if e.name == "fabs" and dt in ("float32", "float64"):
            a = self.as_vec(self.expr(e.args[0]), dt)
            it = self.mtype(element_bits(dt))
            lit = "0x7fffffff" if dt == "float32" else "0x7fffffffffffffffll"
            return _VVal(self.temp(self.vtype(dt), f"({self.vtype(dt)})(({it}){a} & {lit})"),
                         "v", dt)
        if e.name == "isnan":
            a = self.as_vec(self.expr(e.args[0]), e.args[0].dtype)
            bits = element_bits(e.args[0].dtype)
            return _VVal(self.temp(self.mtype(bits), f"{a} != {a}"), "m", "bool", bits)
        if e.name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            a = self.as_vec(self.expr(e.args[0]), dt)
            b = self.as_vec(self.expr(e.args[1]), dt)
            op = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}[e.name]
            return _VVal(self.temp(self.vtype(dt), f"{a} {op} {b}"), "v", dt)
        if e.name == "bitwise_not":
            a = self.as_vec(self.expr(e.args[0]), dt)
            return _VVal(self.temp(self.vtype(dt), f"~{a}"), "v", dt)
        return self._lanewise(e)

    def _branch(self, cond: PrimExpr, t: PrimExpr, f: PrimExpr, dt: str) -> _VVal:
        """A lazy choice on a condition that is the same for every lane: one ``if``."""
        cg = self.cg
        vt = self.vtype(dt)
        name = cg.temp_name("v")
        cg.emit(f"{vt} {name};")
        for opening, closing, branch in ((f"if ({cg.cond(cond)}) {{", None, t), ("} else {", "}", f)):
            with cg.block(opening, closing):
                saved = dict(self.memo)  # values computed in a branch do not exist after it
                cg.emit(f"{name} = {self.as_vec(self.expr(branch), dt)};")
                self.memo = saved
        return _VVal(name, "v", dt)

    def _lanewise(self, e: PrimExpr) -> _VVal:
        """Each lane computed by scalar code on vector operands (lazy branches stay lazy)."""
        lazy = isinstance(e, (BufferLoad, E.Select)) or \
            (isinstance(e, E.Call) and e.name == "if_then_else")
        if not lazy:
            kids = []
            for child in children(e):
                val = self.expr(child)
                if val.kind == "s":
                    kids.append(child)
                    continue
                operand = Var(self.cg.temp_name("lane"), child.dtype)
                if val.kind == "v":
                    self.env[id(operand)] = val
                else:  # a mask: lanes of 0 / 1
                    code = self.as_vec(val, "bool")
                    self.env[id(operand)] = _VVal(self.temp(self.vtype("bool"), code), "v",
                                                  "bool")
                kids.append(operand)
            e = rebuild(e, tuple(kids))
        return self._lanes(e)

    def _lanes(self, e: PrimExpr) -> _VVal:
        cg = self.cg
        vectors = [n for n in post_order(e) if isinstance(n, Var) and id(n) in self.env]
        names = cg.state.var_names
        saved = {id(var): names.get(id(var)) for var in vectors}
        lanes = []
        for k in range(self.lanes):
            for var in vectors:  # a vector let variable reads as its lane
                names[id(var)] = f"{self.env[id(var)].code}[{k}]"
            lane = cg.simp.simplify(substitute(e, {self.v: const(k)}))
            text = cg.expr(lane)
            if self.mask is not None:  # a lane outside the data computes (and loads) nothing
                text = f"({self.masks[32]}[{k}] ? {text} : 0)"
            lanes.append(text)
        for key, old in saved.items():
            if old is None:
                names.pop(key, None)
            else:
                names[key] = old
        dt = e.dtype
        vt = self.vtype(dt)
        return _VVal(self.temp(vt, f"({vt}){{{', '.join(lanes)}}}"), "v", dt)



def _memory_buffers(body: Stmt, registers: dict[int, tuple[int, str]]) -> list:
    """Buffers in memory (not register tiles) that ``body`` loads or stores."""
    found: dict[int, object] = {}
    for s in walk_stmts(body):
        if isinstance(s, Store) and id(s.buffer) not in registers:
            found[id(s.buffer)] = s.buffer
        for e in own_exprs(s):
            for n in post_order(e):
                if isinstance(n, BufferLoad) and id(n.buffer) not in registers:
                    found[id(n.buffer)] = n.buffer
    return list(found.values())


def _reads_uniform_memory(body: Stmt, v: Var, registers: dict[int, tuple[int, str]]) -> bool:
    """Whether ``body`` loads a kernel argument at an index that does not depend on the lane
    (intermediate buffers cover every index their loop nest can form, guarded or not)."""
    for s in walk_stmts(body):
        for e in own_exprs(s):
            for n in post_order(e):
                if isinstance(n, BufferLoad) and id(n.buffer) not in registers \
                        and n.buffer.kind in ("input", "output") and v not in vars_in(n.index):
                    return True
    return False
