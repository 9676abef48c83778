"""Vectorized loops as GCC vector-extension code.

A loop marked ``vectorized`` whose extent ``L`` is a power of two becomes straight-line code on
``L``-lane vectors (``typedef float kiln_f32x8 __attribute__((vector_size(32)))``): stores must
be contiguous in the loop variable; loads are contiguous (one vector load), uniform (a scalar
broadcast) or gathered lane by lane; arithmetic, comparisons (as lane masks), selects and casts
map to vector operations; float32 ``exp``/``tanh``/``sigmoid``/``erf`` use the vector
approximations of :mod:`kiln.codegen.c_prelude`; other operations run lane by lane. A loop whose
body is guarded by bounds checks that are linear in the loop variable (the tail of a split that
does not divide) runs the vector code when the check holds at the first and last lane and a
scalar loop otherwise. Anything else (nested loops, float16, stores that do not move with the
loop) falls back to a scalar loop.

Register tiles
--------------
An intermediate buffer (typically a ``cache_write`` accumulator computed at a loop of its
consumer) is held in vector-typed local variables instead of memory when :func:`register_lanes`
accepts it: its size is a multiple of the vector width, and every access lies in a vectorized
loop of that width, at an index whose lane part is the vector loop variable (coefficient 1) and
whose other parts are constants or variables of *unrolled* loops inside the allocation, all
multiples of the width. The code generator then declares ``kiln_f32x16 acc_0, acc_1, ...;``,
expands the unrolled loops that touch the buffer (so every index is a constant) and prints each
access as one of those variables (``acc_3``; ``acc_3[k]`` for a single lane), which the C
compiler keeps in registers. A schedule gets this by computing the accumulator at an outer loop
and ordering its loops ``..., reduction loops, unrolled register-tile loops, vectorized lanes``;
stages computed at the same loop afterwards (bias, activation, residual add) read the variables
and store the result once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kiln.errors import CompileError
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
    walk_stmts,
)
from kiln.te.visit import children, post_order, rebuild, substitute

if TYPE_CHECKING:
    from kiln.codegen.c_codegen import CCodegen

__all__ = [
    "MAX_REGISTER_VECTORS",
    "emit_vector_loop",
    "register_element",
    "register_lanes",
    "register_indices",
    "register_vector",
]

# A buffer held in vector variables has at most this many of them (beyond the machine's
# registers the C compiler spills to the stack, which is still cheaper than an array in memory).
MAX_REGISTER_VECTORS = 64

_VECTOR_MATH = ("exp", "tanh", "sigmoid", "erf")
_MASK_DTYPE = {8: "int8", 16: "int16", 32: "int32", 64: "int64"}


@dataclass
class _VVal:
    """A value in vector code: ``s`` scalar, ``v`` vector of ``dtype``, ``m`` lane mask."""

    code: str
    kind: str
    dtype: str
    bits: int = 0


def _bits(dtype: str) -> int:
    return 8 if dtype == "bool" else E.dtype_bits(dtype)


def emit_vector_loop(cg: CCodegen, loop: For) -> bool:
    """Emit ``loop`` as vector code; ``False`` (nothing emitted) when it does not qualify."""
    lanes = loop.extent
    if lanes < 2 or lanes & (lanes - 1) or lanes > 64:
        return False
    guard, body = _peel_guard(cg, loop)
    if not _supported(cg, loop, body, lanes):
        return False
    v = loop.var
    name = cg.var_name(v)
    start = len(cg._f.lines)
    cg.emit(f"{{  /* {name}: {lanes} lanes */")
    cg._f.indent += 1
    if guard is not None:
        ends = [cg.simp.simplify(substitute(guard, {v: const(k)})) for k in (0, lanes - 1)]
        checks = [f"({cg.cond(c)})" for c in ends if not isinstance(c, E.IntImm)]
        cg.emit(f"if ({' && '.join(checks) or '1'}) {{")
        cg._f.indent += 1
    _VectorBody(cg, v, lanes).stmt(body)
    if guard is not None:
        cg._f.indent -= 1
        cg.emit("} else {")
        cg._f.indent += 1
        cg.stmt(For(v, lanes, "serial", loop.body))
        cg._f.indent -= 1
        cg.emit("}")
    cg._f.indent -= 1
    cg.emit("}")
    lines = cg._f.lines
    if len(lines) == start + 3 and not lines[start + 1].lstrip().startswith(("kiln_", "if")):
        # a single assignment (a register tile update, say) needs no block of its own
        lines[start:] = [lines[start + 1][2:]]
    return True


def _peel_guard(cg: CCodegen, loop: For) -> tuple[PrimExpr | None, Stmt]:
    """A bounds check around the whole body that holds on an interval of lanes."""
    body = loop.body
    if isinstance(body, IfThenElse) and body.else_case is None \
            and loop.var in _vars(body.condition) and _convex_in(cg, body.condition, loop.var):
        return body.condition, body.then_case
    return None, body


def _convex_in(cg: CCodegen, cond: PrimExpr, v: Var) -> bool:
    """Whether ``cond`` is a conjunction of comparisons linear in ``v`` (true on an interval)."""
    if isinstance(cond, E.And):
        return _convex_in(cg, cond.a, v) and _convex_in(cg, cond.b, v)
    if v not in _vars(cond):
        return True
    if not isinstance(cond, E.Compare) or cond.kind in ("eq", "ne"):
        return False
    lin = cg.simp.linear(cg.simp.simplify(cond.a - cond.b))
    return all(atom is v or v not in _vars(atom) for _, atom in lin.terms.values())


def _number(e: PrimExpr) -> bool:
    """Whether ``e`` is a literal that is not NaN."""
    return isinstance(e, E.IntImm) or (isinstance(e, E.FloatImm) and e.value == e.value)


def _vars(e: PrimExpr) -> set[Var]:
    return {n for n in post_order(e) if isinstance(n, Var)}


def _coef(cg: CCodegen, index: PrimExpr, v: Var) -> int | None:
    """The coefficient of ``v`` in a linear index (None when ``v`` appears non-linearly)."""
    lin = cg.simp.linear(cg.simp.simplify(index))
    coef = 0
    for c, atom in lin.terms.values():
        if atom is v:
            coef = c
        elif v in _vars(atom):
            return None
    return coef


_VECTOR_CALLS = ("fabs", "isnan", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not")


def _scalar_only(n: PrimExpr, v: Var) -> bool:
    """Operations with no vector form: vector code would run them lane by lane anyway (a lazy
    ``if_then_else`` whose condition varies across lanes loads lane by lane too), so the loop is
    better left to the compiler as scalar code (shorter, and just as fast)."""
    if isinstance(n, E.Call) and n.name == "if_then_else":
        return v in _vars(n.args[0])
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


def _value_nodes(e: PrimExpr, v: Var) -> list[PrimExpr]:
    """Nodes of a value that vary with ``v``, not looking into load indices (a load that is not
    contiguous is gathered lane by lane whatever its index computes)."""
    out: list[PrimExpr] = []
    stack = [e]
    while stack:
        n = stack.pop()
        if v not in _vars(n):
            continue
        out.append(n)
        if not isinstance(n, BufferLoad):
            stack.extend(children(n))
    return out


def _supported(cg: CCodegen, loop: For, body: Stmt, lanes: int) -> bool:
    v = loop.var
    stores: dict[int, list[PrimExpr]] = {}
    exprs: list[PrimExpr] = []
    values: list[PrimExpr] = []
    for s in walk_stmts(body):
        if isinstance(s, (For, Evaluate, Allocate)):
            return False
        if isinstance(s, Store):
            if s.buffer.dtype == "float16" or _coef(cg, s.index, v) != 1:
                return False
            stores.setdefault(id(s.buffer), []).append(s.index)
            exprs += [s.index, s.value]
            values.append(s.value)
        elif isinstance(s, LetStmt):
            exprs.append(s.value)
            values.append(s.value)
        elif isinstance(s, IfThenElse):
            if v in _vars(s.condition):
                return False
            exprs.append(s.condition)
    for e in exprs:
        for n in post_order(e):
            if n.dtype == "float16":
                return False
    for e in values:
        for n in _value_nodes(e, v):
            if _scalar_only(n, v):
                return False
            if isinstance(n, BufferLoad) and id(n.buffer) in stores:
                key = cg.simp.key(cg.simp.simplify(n.index))
                if all(cg.simp.key(cg.simp.simplify(i)) != key for i in stores[id(n.buffer)]):
                    return False  # reads another lane's element of a buffer the loop writes
    return all(_bits(n.dtype) * lanes <= 8 * 256 for e in exprs for n in post_order(e))


class _VectorBody:
    """Emits the statements of a vector loop body."""

    def __init__(self, cg: CCodegen, v: Var, lanes: int):
        self.cg = cg
        self.v = v
        self.lanes = lanes
        self.env: dict[int, _VVal] = {}
        self.memo: dict[object, tuple[PrimExpr, _VVal]] = {}

    # --- types and temporaries --------------------------------------------------------------
    def vtype(self, dtype: str) -> str:
        from kiln.codegen.c_codegen import vector_type_name

        self.cg.vector_types.add((dtype, self.lanes))
        return vector_type_name(dtype, self.lanes)

    def mtype(self, bits: int) -> str:
        return self.vtype(_MASK_DTYPE[bits])

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
            value = self.as_vec(self.expr(s.value), s.buffer.dtype)
            if id(s.buffer) in cg.registers:
                cg.emit(f"{register_vector(cg, s.buffer, base_index)} = {value};")
            else:
                base = cg.expr(cg.simp.simplify(base_index))
                cg.emit(f"*({self.vtype(s.buffer.dtype)}u*)&{s.buffer.name}[{base}] = {value};")
            self._forget_loads_of(s.buffer)
        elif isinstance(s, LetStmt):
            val = self.expr(s.value)
            if val.kind == "s":
                from kiln.codegen.c_codegen import c_type

                cg.emit(f"const {c_type(s.var.dtype)} {cg.var_name(s.var)} = {val.code};")
            else:
                self.env[id(s.var)] = val
            self.stmt(s.body)
        elif isinstance(s, IfThenElse):
            cg.emit(f"if ({cg.cond(s.condition)}) {{")
            cg._f.indent += 1
            self.stmt(s.then_case)
            cg._f.indent -= 1
            if s.else_case is not None:
                cg.emit("} else {")
                cg._f.indent += 1
                self.stmt(s.else_case)
                cg._f.indent -= 1
            cg.emit("}")

    # --- conversions --------------------------------------------------------------------------
    def as_vec(self, val: _VVal, dtype: str) -> str:
        """``val`` as a vector of ``dtype`` (bool as 0/1 bytes)."""
        vt = self.vtype(dtype)
        if val.kind == "s":
            from kiln.codegen.c_codegen import c_type

            scalar = val.code if val.dtype == dtype else f"({c_type(dtype)})({val.code})"
            # scalar - 0 broadcasts the scalar and is exact for every value (-0.0 included);
            # the compiler folds the subtraction away
            return f"({scalar} - ({vt}){{}})"
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
            return f"(({mt}){{}} + (({val.code}) ? -1 : 0))"
        if val.kind == "m":
            return self.convert_mask(val, bits)
        nonzero = _VVal(f"({val.code} != 0)", "m", "bool", _bits(val.dtype))
        return self.convert_mask(nonzero, bits)

    def blend(self, mask: str, a: str, b: str, dtype: str) -> str:
        vt = self.vtype(dtype)
        it = self.mtype(_bits(dtype))
        if not mask.isidentifier():
            mask = self.temp(it, mask)
        return f"({vt})((({it}){a} & {mask}) | (({it}){b} & ~{mask}))"

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
            if any(isinstance(n, BufferLoad) and n.buffer is buffer for n in post_order(e)):
                del self.memo[key]

    def _uniform(self, e: PrimExpr) -> bool:
        return not any((isinstance(n, Var) and (n is self.v or id(n) in self.env))
                       for n in post_order(e))

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
            bits = _bits(dt)
            return _VVal(self.temp(self.mtype(bits), f"{a} {op} {b}"), "m", "bool", bits)
        if isinstance(e, (E.And, E.Or)):
            a = self.expr(e.a)
            bits = a.bits if a.kind == "m" else 32
            op = "&" if isinstance(e, E.And) else "|"
            code = f"{self.as_mask(a, bits)} {op} {self.as_mask(self.expr(e.b), bits)}"
            return _VVal(self.temp(self.mtype(bits), code), "m", "bool", bits)
        if isinstance(e, E.Not):
            a = self.expr(e.a)
            bits = a.bits if a.kind == "m" else 8
            return _VVal(self.temp(self.mtype(bits), f"~{self.as_mask(a, bits)}"), "m", "bool",
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
        coef = _coef(cg, e.index, self.v)
        vt = self.vtype(e.dtype)
        if coef == 1 and id(e.buffer) in cg.registers:
            base = substitute(e.index, {self.v: const(0)})
            return _VVal(register_vector(cg, e.buffer, base), "v", e.dtype)
        if coef == 1:
            base = cg.expr(cg.simp.simplify(substitute(e.index, {self.v: const(0)})))
            return _VVal(self.temp(vt, f"*(const {vt}u*)&{e.buffer.name}[{base}]"), "v", e.dtype)
        return self._lanewise(e)

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
            mask = f"({a} {op} {b})"
            if E.is_float_dtype(dt):
                mask = f"({mask} | ({a} != {a}))"
            return _VVal(self.temp(vt, self.blend(mask, a, b, dt)), "v", dt)
        return self._lanewise(e)

    def _select(self, cond: PrimExpr, t: PrimExpr, f: PrimExpr, dt: str) -> _VVal:
        mask = self.as_mask(self.expr(cond), _bits(dt))
        a = self.as_vec(self.expr(t), dt)
        b = self.as_vec(self.expr(f), dt)
        return _VVal(self.temp(self.vtype(dt), self.blend(mask, a, b, dt)), "v", dt)

    def _cast(self, e: E.Cast) -> _VVal:
        src, dst = e.value.dtype, e.dtype
        val = self.expr(e.value)
        if dst == "bool":
            bits = _bits(src)
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
            fn = f"kiln_v{e.name}_f32x{self.lanes}"
            return _VVal(self.temp(self.vtype(dt), f"{fn}({a})"), "v", dt)
        if e.name == "fabs" and dt in ("float32", "float64"):
            a = self.as_vec(self.expr(e.args[0]), dt)
            it = self.mtype(_bits(dt))
            lit = "0x7fffffff" if dt == "float32" else "0x7fffffffffffffffll"
            return _VVal(self.temp(self.vtype(dt), f"({self.vtype(dt)})(({it}){a} & {lit})"),
                         "v", dt)
        if e.name == "isnan":
            a = self.as_vec(self.expr(e.args[0]), e.args[0].dtype)
            bits = _bits(e.args[0].dtype)
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
        cg.emit(f"if ({cg.cond(cond)}) {{")
        for k, branch in enumerate((t, f)):
            if k:
                cg.emit("} else {")
            cg._f.indent += 1
            saved = dict(self.memo)  # values computed in a branch do not exist after it
            cg.emit(f"{name} = {self.as_vec(self.expr(branch), dt)};")
            self.memo = saved
            cg._f.indent -= 1
        cg.emit("}")
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
        names = cg._f.var_names
        saved = {id(var): names.get(id(var)) for var in vectors}
        lanes = []
        for k in range(self.lanes):
            for var in vectors:  # a vector let variable reads as its lane
                names[id(var)] = f"{self.env[id(var)].code}[{k}]"
            lane = cg.simp.simplify(substitute(e, {self.v: const(k)}))
            lanes.append(cg.expr(lane))
        for key, old in saved.items():
            if old is None:
                names.pop(key, None)
            else:
                names[key] = old
        dt = e.dtype
        vt = self.vtype(dt)
        return _VVal(self.temp(vt, f"({vt}){{{', '.join(lanes)}}}"), "v", dt)



# --- register tiles ------------------------------------------------------------------------------

def register_lanes(alloc: Allocate, cg: CCodegen) -> int:
    """Lanes per vector variable if ``alloc``'s buffer can live in vector variables, else 0.

    Parameters
    ----------
    alloc : Allocate
        The allocation (its body holds every access to the buffer).
    cg : CCodegen
        The generator (its simplifier knows the loop ranges).

    Returns
    -------
    int
        The extent of the vectorized loops around the accesses (a power of two), or 0 when some
        access does not fit the pattern described in the module docstring.
    """
    buf = alloc.buffer
    if buf.kind != "temp" or buf.dtype in ("float16", "bool") or buf.size == 0:
        return 0
    lanes = 0
    stack: list[tuple[Stmt, tuple[For, ...]]] = [(alloc.body, ())]
    while stack:
        s, loops = stack.pop()
        accesses = [n.index for e in _own_exprs(s) for n in post_order(e)
                    if isinstance(n, BufferLoad) and n.buffer is buf]
        if isinstance(s, Store) and s.buffer is buf:
            accesses.append(s.index)
        for index in accesses:
            if not loops or loops[-1].kind != "vectorized":
                return 0
            width = loops[-1].extent
            if lanes == 0:
                lanes = width
                if lanes < 2 or lanes & (lanes - 1) or lanes > 64 or buf.size % lanes \
                        or buf.size // lanes > MAX_REGISTER_VECTORS:
                    return 0
            if width != lanes or not _tile_index(cg, index, loops, lanes):
                return 0
        if isinstance(s, For):
            stack.append((s.body, (*loops, s)))
        elif isinstance(s, (LetStmt, Allocate)):
            stack.append((s.body, loops))
        elif isinstance(s, IfThenElse):
            stack.append((s.then_case, loops))
            if s.else_case is not None:
                stack.append((s.else_case, loops))
        elif isinstance(s, Seq):
            stack.extend((x, loops) for x in s.stmts)
    return lanes


def _own_exprs(s: Stmt) -> list[PrimExpr]:
    """Expressions of ``s`` itself (not of the statements it contains)."""
    if isinstance(s, Store):
        return [s.index, s.value]
    if isinstance(s, (LetStmt, Evaluate)):
        return [s.value]
    if isinstance(s, IfThenElse):
        return [s.condition]
    return []


def _tile_index(cg: CCodegen, index: PrimExpr, loops: tuple[For, ...], lanes: int) -> bool:
    """Whether ``index`` is ``lane + multiples of lanes`` of unrolled loops and constants."""
    lane = loops[-1].var
    unrolled = {id(loop.var) for loop in loops[:-1] if loop.kind == "unrolled"}
    lin = cg.simp.linear(cg.simp.simplify(index))
    if lin.const % lanes:
        return False
    has_lane = False
    for coef, atom in lin.terms.values():
        if atom is lane and coef == 1:
            has_lane = True
        elif not (isinstance(atom, Var) and id(atom) in unrolled and coef % lanes == 0):
            return False
    return has_lane


def register_indices(s: Stmt, registers: dict[int, tuple[int, str]]) -> list[PrimExpr] | None:
    """The indices at which ``s`` reads or writes buffers held in vector variables (``None``
    when it touches none)."""
    found: list[PrimExpr] = []
    touched = False
    for x in walk_stmts(s):
        if isinstance(x, Store) and id(x.buffer) in registers:
            touched = True
            found.append(x.index)
        for e in _own_exprs(x):
            for n in post_order(e):
                if isinstance(n, BufferLoad) and id(n.buffer) in registers:
                    touched = True
                    found.append(n.index)
    return found if touched else None


def _register_split(cg: CCodegen, buffer: object, index: PrimExpr) -> tuple[str, PrimExpr]:
    lanes, name = cg.registers[id(buffer)]
    idx = cg.simp.simplify(index)
    block = cg.simp.linear(idx).const // lanes
    return f"{name}_{block}", cg.simp.simplify(idx - block * lanes)


def register_vector(cg: CCodegen, buffer: object, base: PrimExpr) -> str:
    """The vector variable holding the lanes that start at ``base`` (a constant index)."""
    name, rest = _register_split(cg, buffer, base)
    if not (isinstance(rest, E.IntImm) and rest.value == 0):
        raise CompileError(f"register tile {name}: index {base} is not a constant multiple of "
                           "the vector width (unroll the loops that index it)")
    return name


def register_element(cg: CCodegen, buffer: object, index: PrimExpr) -> str:
    """One lane of a vector variable: ``name_k[lane]`` for element ``index``."""
    name, rest = _register_split(cg, buffer, index)
    return f"{name}[{cg.expr(rest)}]"
