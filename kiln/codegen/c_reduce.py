"""Horizontal reductions: the lanes of a vector accumulator folded by a shuffle tree.

A serial (or unrolled) loop of a power-of-two extent that folds vectorizable values into one
element with ``+``, ``*``, ``max`` or ``min`` (the lane combine of an ``rfactor``, possibly for
several rows at once) becomes one vector of those values, halved ``log2(extent)`` times with
``__builtin_shufflevector`` (``op`` of the low and high halves), and a single scalar update::

    kiln_f32x16 v11 = *(const kiln_f32x16u*)&acc[0];
    kiln_f32x8 lo = __builtin_shufflevector(v11, v11, 0, ..., 7), hi = ...(v11, v11, 8, ..., 15);
    kiln_f32x8 h = lo + hi;
    ...
    out[0] = (out[0] + fold);
"""

from __future__ import annotations

import contextlib
import itertools
from typing import TYPE_CHECKING

from kiln.codegen.c_registers import register_indices
from kiln.codegen.c_types import MASK_INT, c_type, vector_type_name
from kiln.codegen.c_vector import VectorBody, vector_supported
from kiln.te import expr as E
from kiln.te.expr import PrimExpr, Var, const
from kiln.te.loop_ir import Buffer, BufferLoad, For, Store
from kiln.te.visit import post_order, substitute, vars_in

if TYPE_CHECKING:
    from kiln.codegen.c_codegen import CCodegen

__all__ = ["emit_horizontal_reduction"]

_TREE_KINDS = ("add", "mul", "max", "min")


def _fold_of(cg: CCodegen, loop: For) -> tuple[list[For], Store, PrimExpr, bool] | None:
    """``(inner loops, store, src, old_first)`` when ``loop`` is ``x[i] = x[i] op src(v)``,
    possibly inside short loops over other elements (``old_first``: the old value is the left
    operand), else None."""
    inner: list[For] = []
    st = loop.body
    while isinstance(st, For) and st.kind in ("serial", "unrolled") and len(inner) < 2:
        inner.append(st)
        st = st.body
    v = loop.var
    if not isinstance(st, Store) or st.buffer.dtype not in ("float32", "float64") \
            or v in vars_in(st.index):
        return None
    val = st.value
    if not isinstance(val, E.Binary) or val.kind not in _TREE_KINDS:
        return None
    key = cg.simp.key(cg.simp.simplify(st.index))

    def is_old(e: PrimExpr) -> bool:
        return isinstance(e, BufferLoad) and e.buffer is st.buffer \
            and cg.simp.key(cg.simp.simplify(e.index)) == key

    if is_old(val.a):
        src, old_first = val.b, True
    elif is_old(val.b):
        src, old_first = val.a, False
    else:
        return None
    if v not in vars_in(src) or any(isinstance(n, BufferLoad) and n.buffer is st.buffer
                                  for n in post_order(src)):
        return None
    return inner, st, src, old_first


def emit_horizontal_reduction(cg: CCodegen, loop: For) -> bool:
    """Emit a loop folding its lanes into one element as a vector and a shuffle tree.

    Parameters
    ----------
    cg : CCodegen
        The generator.
    loop : For
        A serial or unrolled loop of power-of-two extent whose body is ``x[i] = x[i] op src``
        with ``op`` one of ``+ * max min`` (float), ``i`` independent of the loop variable and
        ``src`` vectorizable in it (e.g. the lanes of an ``rfactor`` accumulator), directly or
        inside up to two loops over other elements (several rows reduced together), which are
        then moved outside: each element gets its own tree.

    Returns
    -------
    bool
        False, with nothing emitted, when the loop is not of that form. Otherwise the values of
        ``src`` are computed as one vector and halved ``log2(extent)`` times (``op`` of the low
        and high halves; ``max``/``min`` keep NumPy's NaN propagation), and the result combined
        with ``x[i]`` once. Sums and products are reassociated (like any vectorized reduction).
    """

    lanes = loop.extent
    if lanes < 2 or lanes & (lanes - 1) or lanes > 64:
        return False
    fold = _fold_of(cg, loop)
    if fold is None:
        return False
    inner, st, src, old_first = fold
    v, dt = loop.var, st.buffer.dtype
    probe = Store(Buffer("kiln_probe", dt, (lanes,)), v, src)
    if not vector_supported(cg, For(v, lanes, "vectorized", probe), probe, lanes):
        return False
    assert isinstance(st.value, E.Binary)
    kind = st.value.kind
    if inner and register_indices(loop, cg.registers) is not None:
        # the accumulator is held in vector variables: one tree per element, constant indices
        for values in itertools.product(*(range(x.extent) for x in inner)):
            subst = {x.var: const(k, x.var.dtype) for x, k in zip(inner, values)}

            def bind(e: PrimExpr, subst: dict = subst) -> PrimExpr:
                return cg.simp.simplify(substitute(e, subst))

            with cg.block(f"{{  /* {cg.var_name(v)}: {lanes} lanes, {kind} tree */"):
                _emit_tree(cg, Store(st.buffer, bind(st.index), bind(st.value)), v, lanes, kind,
                           bind(src), dt, old_first)
        return True
    with contextlib.ExitStack() as blocks:
        for x in inner:
            if x.kind == "unrolled":
                cg.emit(f"#pragma GCC unroll {min(x.extent, 64)}")
            name = cg.var_name(x.var)
            cg.state.var_types[id(x.var)] = cg.index_type
            blocks.enter_context(
                cg.block(f"for ({cg.index_type} {name} = 0; {name} < {x.extent}; ++{name}) {{"))
        blocks.enter_context(cg.block(f"{{  /* {cg.var_name(v)}: {lanes} lanes, {kind} tree */"))
        _emit_tree(cg, st, v, lanes, kind, src, dt, old_first)
    return True


def _emit_tree(cg: CCodegen, st: Store, v: Var, lanes: int, kind: str, src: PrimExpr, dt: str,
               old_first: bool) -> None:
    """The tree reduction of ``src`` over ``lanes`` lanes of ``v`` into ``st``'s element."""
    body = VectorBody(cg, v, lanes)
    cur = body.as_vec(body.expr(src), dt)
    if not cur.isidentifier():
        cur = body.temp(body.vtype(dt), cur)
    width = lanes
    while width > 2:
        half = width // 2
        vt = vector_type_name(dt, half)
        cg.vector_types.add((dt, half))
        lo = f"__builtin_shufflevector({cur}, {cur}, {', '.join(map(str, range(half)))})"
        hi = (f"__builtin_shufflevector({cur}, {cur}, "
              f"{', '.join(map(str, range(half, width)))})")
        a, b = cg.temp_name("lo"), cg.temp_name("hi")
        cg.emit(f"{vt} {a} = {lo}, {b} = {hi};")
        if kind in ("add", "mul"):
            code = f"{a} {'+' if kind == 'add' else '*'} {b}"
        else:
            it = vector_type_name(MASK_INT[E.dtype_bits(dt)], half)
            cg.vector_types.add((MASK_INT[E.dtype_bits(dt)], half))
            m = cg.temp_name("m")
            cg.emit(f"{it} {m} = ({a} {'>' if kind == 'max' else '<'} {b}) | ({a} != {a});")
            code = f"({vt})((({it}){a} & {m}) | (({it}){b} & ~{m}))"
        cur = cg.temp_name("h")
        cg.emit(f"{vt} {cur} = {code};")
        width = half
    total = Var(cg.temp_name("fold"), dt)
    lane0, lane1 = f"{cur}[0]", f"{cur}[1]"
    cg.emit(f"const {c_type(dt)} {cg.var_name(total)} = "
            f"{cg.float_binary(kind, lane0, lane1, dt)};")
    old = BufferLoad(st.buffer, st.index, dt)
    pair = (old, total) if old_first else (total, old)
    cg.stmt(Store(st.buffer, st.index, E.Binary(kind, pair[0], pair[1], dt)))
