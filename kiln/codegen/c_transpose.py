"""Transposes through vector registers.

A transpose kernel writes a square tile whose store runs along its inner loop and whose load
runs along the outer one (ViT's key transpose ``T[h, d, t] = K[t, h, d]``, padded ``t``)::

    for (u = 0; u < 16; ++u)
      for (v = 0; v < 16; ++v)
        out[... + u * 208 + v] = (t0 + v < 197) ? in[... + v * 576 + u] : 0.0f;

Vectorizing ``v`` gathers 16 elements 576 apart per store; it ran at a fifth of the memory
speed of the other data movement. Here the tile is read as 16 contiguous rows (one vector per
``v``, along ``u``), transposed in registers (``log2(16)`` rounds of two-input shuffles that
trade one bit of the row index with the same bit of the lane index), and written as 16
contiguous vectors (one per ``u``)::

    kiln_f32x16 rows[16];
    for (v = 0; v < 16; ++v) {
      if (t0 + v < 197) rows[v] = *(const kiln_f32x16u*)&in[... + v * 576];
      else rows[v] = KILN_SPLAT(kiln_f32x16, 0.0f);
    }
    kiln_transpose_f32x16(rows);
    for (u = 0; u < 16; ++u) *(kiln_f32x16u*)&out[... + u * 208] = rows[u];

A row may also compute float arithmetic of such loads and of loads that do not move along
``u`` (broadcasts): a 1x1 conv weight packed to ``OIHW16i16o`` at run time while it is scaled
by a squeeze-excitation gate, ``W[o, i] * s[i]``, is one vector load and one multiply per row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kiln.codegen.c_types import c_literal, vector_type_name
from kiln.codegen.c_vector import VectorBody, linear_coef
from kiln.te import expr as E
from kiln.te.expr import PrimExpr, const
from kiln.te.loop_ir import BufferLoad, For, Store
from kiln.te.visit import substitute

if TYPE_CHECKING:
    from kiln.codegen.c_codegen import CCodegen

__all__ = ["emit_register_transpose", "transpose_helper"]

_DTYPES = {"float32": "int32", "int32": "int32"}  # element dtype -> its shuffle index dtype


# arithmetic a row computes as vectors along the tile's outer loop (a weight scaled per input
# channel while it is packed: ``W[o, i] * s[i]``)
_ROW_ARITH = ("add", "sub", "mul", "div", "min", "max")


def _row_leaves(cg: CCodegen, value: PrimExpr, st: Store, u: E.Var) -> list[BufferLoad] | None:
    """The loads of a tile's value when each row (one ``v``) computes as vectors along ``u``:
    loads contiguous along ``u`` (or not reading along it: a broadcast), constants, float
    arithmetic of the stored type on such values, and choices between them by conditions that
    do not depend on ``u`` (a padded or concatenated tile); None when the value is anything
    else."""
    choice = E.choice_parts(value)
    if choice is not None:
        cond, a, b = choice
        if u in cg.facts.vars(cond):
            return None
        left, right = _row_leaves(cg, a, st, u), _row_leaves(cg, b, st, u)
        return None if left is None or right is None else left + right
    if isinstance(value, (E.IntImm, E.FloatImm)):
        return []
    if isinstance(value, E.Binary):
        if value.kind not in _ROW_ARITH or not E.is_float_dtype(value.dtype) \
                or value.dtype != st.buffer.dtype:
            return None
        left, right = _row_leaves(cg, value.a, st, u), _row_leaves(cg, value.b, st, u)
        return None if left is None or right is None else left + right
    if not isinstance(value, BufferLoad) or value.dtype != st.buffer.dtype \
            or id(value.buffer) in cg.state.registers or value.buffer is st.buffer \
            or linear_coef(cg, value.index, u) not in (0, 1):
        return None
    return [value]


def _tile(cg: CCodegen, outer: For) -> tuple[For, Store] | None:
    """The inner loop and store of a transpose tile."""
    inner = outer.body
    n = outer.extent
    if not isinstance(inner, For) or inner.extent != n or inner.kind == "parallel" \
            or not isinstance(inner.body, Store):
        return None
    st = inner.body
    if st.buffer.dtype not in _DTYPES or not 4 <= n <= cg.vector_bytes // 4 \
            or id(st.buffer) in cg.state.registers:
        return None
    u, v = outer.var, inner.var
    if linear_coef(cg, st.index, v) != 1:
        return None
    loads = _row_leaves(cg, st.value, st, u)
    if loads is None or all(linear_coef(cg, ld.index, v) in (0, 1) for ld in loads):
        return None  # nothing gathered across the rows: the vector loop reads it as it is
    return inner, st


def _emit_row(cg: CCodegen, value: PrimExpr, row: str, u: E.Var, vt: str, lanes: int
              ) -> None:
    """``row = value`` for one ``v``, its loads as vectors along ``u``."""
    choice = E.choice_parts(value)
    if choice is not None:
        cond, a, b = choice
        with cg.block(f"if ({cg.cond(cond)}) {{", closing=None):
            _emit_row(cg, a, row, u, vt, lanes)
        with cg.block("} else {"):
            _emit_row(cg, b, row, u, vt, lanes)
    elif isinstance(value, BufferLoad) and linear_coef(cg, value.index, u) == 1:
        offset = cg.expr(cg.simp.simplify(substitute(value.index, {u: const(0, u.dtype)})))
        cg.emit(f"{row} = *(const {vt}u*)&{value.buffer.name}[{offset}];")
    elif isinstance(value, (E.IntImm, E.FloatImm)):
        cg.emit(f"{row} = KILN_SPLAT({vt}, {c_literal(value.value, value.dtype)});")
    else:  # arithmetic, or a broadcast: the vector loop's expression code along u
        body = VectorBody(cg, u, lanes)
        cg.emit(f"{row} = {body.as_vec(body.expr(value), value.dtype)};")


def emit_register_transpose(cg: CCodegen, outer: For) -> bool:
    """Emit ``outer`` (a serial or unrolled loop) as a transpose through registers when it is
    a square tile of 4 lanes up to the vector width whose store is contiguous along the inner
    loop and whose loads are contiguous along ``outer`` (see the module docstring); False, with
    nothing emitted, otherwise."""
    if outer.kind not in ("serial", "unrolled"):
        return False
    tile = _tile(cg, outer)
    if tile is None:
        return False
    inner, st = tile
    n, dt = outer.extent, st.buffer.dtype
    vt = vector_type_name(dt, n)
    cg.vector_types.update({(dt, n), (_DTYPES[dt], n)})
    cg.transposes.add((dt, n))
    rows = cg.temp_name("rows")
    it = cg.index_type
    u, v = outer.var, inner.var
    cg.emit(f"{vt} {rows}[{n}];  /* {n}x{n} transpose through registers */")
    vn = cg.var_name(v)
    cg.state.var_types[id(v)] = it
    with cg.block(f"for ({it} {vn} = 0; {vn} < {n}; ++{vn}) {{"):
        _emit_row(cg, st.value, f"{rows}[{vn}]", u, vt, n)
    cg.emit(f"kiln_transpose_{vt[len('kiln_'):]}({rows});")
    un = cg.var_name(u)
    cg.state.var_types[id(u)] = it
    with cg.block(f"for ({it} {un} = 0; {un} < {n}; ++{un}) {{"):
        offset = cg.expr(cg.simp.simplify(substitute(st.index, {v: const(0, v.dtype)})))
        cg.emit(f"*({vt}u*)&{st.buffer.name}[{offset}] = {rows}[{un}];")
    return True


def transpose_helper(dtype: str, lanes: int) -> str:
    """``kiln_transpose_<t>x<lanes>(rows)``: transposes ``lanes`` vectors in place.

    Round ``b`` (``lanes/2``, ..., 2, 1) pairs rows ``i`` and ``j = i + b`` (``i & b == 0``) and
    swaps their off-diagonal ``b``-blocks, which trades bit ``b`` of every element's row index
    with the same bit of its lane index; after every bit has been traded, element ``(i, l)``
    is at ``(l, i)``.
    """
    vt = vector_type_name(dtype, lanes)
    lines = [f"static inline void kiln_transpose_{vt[len('kiln_'):]}({vt}* r) {{",
             f"  {vt} a, b;"]
    b = lanes // 2
    while b >= 1:
        low = [(lanes + k - b) if k & b else k for k in range(lanes)]
        high = [(lanes + k) if k & b else (k + b) for k in range(lanes)]
        for i in range(lanes):
            if i & b:
                continue
            j = i + b
            lines.append(f"  a = r[{i}]; b = r[{j}];")
            lines.append(f"  r[{i}] = __builtin_shufflevector(a, b, {', '.join(map(str, low))});")
            lines.append(f"  r[{j}] = __builtin_shufflevector(a, b, {', '.join(map(str, high))});")
        b //= 2
    lines.append("}")
    return "\n".join(lines) + "\n"
