"""Register tiles: intermediate buffers held in vector-typed local variables.

An intermediate buffer (typically a ``cache_write`` accumulator computed at a loop of its
consumer) is held in vector-typed local variables instead of memory when :func:`register_lanes`
accepts it: its size is a multiple of the vector width, and every access lies in a vectorized
loop of that width (or a serial one over the lanes, such as the fold of an ``rfactor``
accumulator, at least one access vectorized), at an index whose lane part is that loop's variable
(coefficient 1) and whose other parts are constants or variables of *unrolled* loops inside the
allocation, all multiples of the width. The code generator then declares ``kiln_f32x16 acc_0, acc_1, ...;``,
expands the unrolled loops that touch the buffer (so every index is a constant) and prints each
access as one of those variables (``acc_3``; ``acc_3[k]`` for a single lane), which the C
compiler keeps in registers. A schedule gets this by computing the accumulator at an outer loop
and ordering its loops ``..., reduction loops, unrolled register-tile loops, vectorized lanes``;
stages computed at the same loop afterwards (bias, activation, residual add) read the variables
and store the result once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiln.errors import CompileError
from kiln.te import expr as E
from kiln.te.expr import PrimExpr, Var
from kiln.te.loop_ir import (
    Allocate,
    BufferLoad,
    For,
    IfThenElse,
    LetStmt,
    Seq,
    Stmt,
    Store,
    own_exprs,
    walk_stmts,
)
from kiln.te.visit import post_order

if TYPE_CHECKING:
    from kiln.codegen.c_codegen import CCodegen

__all__ = [
    "MAX_REGISTER_VECTORS",
    "register_element",
    "register_indices",
    "register_lanes",
    "register_vector",
]

# A buffer held in vector variables has at most this many of them (beyond the machine's
# registers the C compiler spills to the stack, which is still cheaper than an array in memory).
MAX_REGISTER_VECTORS = 64


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
    lanes, vectorized = 0, False
    stack: list[tuple[Stmt, tuple[For, ...]]] = [(alloc.body, ())]
    while stack:
        s, loops = stack.pop()
        accesses = [n.index for e in own_exprs(s) for n in post_order(e)
                    if isinstance(n, BufferLoad) and n.buffer is buf]
        if isinstance(s, Store) and s.buffer is buf:
            accesses.append(s.index)
        for index in accesses:
            lane = _lane_loop(cg, index, loops)
            if lane is None:
                return 0
            vectorized = vectorized or loops[lane].kind == "vectorized"
            width = loops[lane].extent
            if lanes == 0:
                lanes = width
                if lanes < 2 or lanes & (lanes - 1) or lanes > 64 or buf.size % lanes \
                        or buf.size // lanes > MAX_REGISTER_VECTORS:
                    return 0
            if width != lanes or not _tile_index(cg, index, loops, lane, lanes):
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
    return lanes if vectorized else 0


def _lane_loop(cg: CCodegen, index: PrimExpr, loops: tuple[For, ...]) -> int | None:
    """Position in ``loops`` of the loop over the lanes of an access: the innermost loop when it
    is vectorized; else a serial loop stepping ``index`` by 1 with only unrolled loops inside
    it (the fold of an rfactor accumulator, its rows inside it, which
    :mod:`kiln.codegen.c_reduce` turns into one shuffle tree per row; or single lanes,
    ``acc_0[k]``)."""
    if loops and loops[-1].kind == "vectorized":
        return len(loops) - 1
    lin = cg.simp.linear(cg.simp.simplify(index))
    for k in range(len(loops) - 1, -1, -1):
        if loops[k].kind in ("serial", "unrolled") and any(
                atom is loops[k].var and coef == 1 for coef, atom in lin.terms.values()):
            return k
        if loops[k].kind != "unrolled":
            return None
    return None


def _tile_index(cg: CCodegen, index: PrimExpr, loops: tuple[For, ...], lane_at: int,
                lanes: int) -> bool:
    """Whether ``index`` is ``lane + multiples of lanes`` of unrolled loops and constants."""
    lane = loops[lane_at].var
    unrolled = {id(loop.var) for k, loop in enumerate(loops)
                if loop.kind == "unrolled" and k != lane_at}
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
        for e in own_exprs(x):
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
