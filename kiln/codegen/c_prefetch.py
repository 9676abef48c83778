"""Software prefetch of the next channel tile's weights (the ``prefetch_next_tile`` pragma).

A blocked convolution whose weights do not fit in L2 runs its parallel loop over ``(channel
tile, row)`` chunks, rows inside: the first row of a tile reads that tile's weights from
memory, the other rows from L2. In a whole-model run nothing else brings those weights closer,
and the first row waits on memory: ResNet-18's 512-channel 3x3 convolutions at 7 x 7 (9.4 MB of
weights) took 1.41 ms in a model run against 0.82 ms timed alone, on one Zen 5 core.

The template marks the convolution's outermost reduction loop (over input channel blocks) with
the number of row chunks a tile has, ``R``. Each iteration then prefetches into L2 (locality
hint 1) this row's ``1/R`` share of what the same iteration reads from the weights in chunk
``V + R``, the same row of the next tile::

    for (int32_t ic_o = 0; ic_o < 32; ++ic_o) {
      if (V + 7 < 112) {  /* the next channel tile's weights: this row's share, into L2 */
        const float* pf = &p1[... + ic_o * 2304] + (V % 7) * 336;
        for (int32_t k = 0; k < 336; k += 16) __builtin_prefetch(pf + k, 0, 1);
      }
      ...

so the tile's rows together have streamed the next tile's weights by the time it starts (the
same layers: 0.97 ms). ``V`` is the loop variable the weight index divides by ``R``. Loops
between the chunk loop and the marked one (a row's blocks of output columns) split the share
further, each iteration prefetching its part: prefetching the whole share in every column block
of CRNN's 256-channel convs had made them 14-28% slower even with warm weights.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from kiln.codegen.c_vector import linear_coef
from kiln.te import expr as E
from kiln.te.expr import PrimExpr, Var, const
from kiln.te.loop_ir import PREFETCH_NEXT_TILE, BufferLoad, For, own_exprs, walk_stmts
from kiln.te.visit import post_order, substitute

if TYPE_CHECKING:
    from kiln.codegen.c_codegen import CCodegen

__all__ = ["emit_next_tile_prefetch", "prefetch_rows"]

_LINE_BYTES = 64


def prefetch_rows(loop: For) -> int | None:
    """The row chunks per tile of a loop marked ``prefetch_next_tile`` (None when unmarked)."""
    return next((int(v) for k, v in loop.pragmas if k == PREFETCH_NEXT_TILE), None)


def _tile_var(index: PrimExpr, rows: int) -> Var | None:
    """The variable ``V`` of a ``floordiv(V, rows)`` in ``index``."""
    for node in post_order(index):
        if isinstance(node, E.Binary) and node.kind == "floordiv" and isinstance(node.a, Var) \
                and isinstance(node.b, E.IntImm) and node.b.value == rows:
            return node.a
    return None


def emit_next_tile_prefetch(cg: CCodegen, loop: For, rows: int) -> None:
    """Emit, at the top of one iteration of ``loop``, the prefetches of this row's share of
    what the same iteration reads in the chunk ``rows`` ahead (see the module docstring).
    Loads whose index is not linear in the loops inside ``loop`` are left out."""
    inner = [s for s in walk_stmts(loop.body) if isinstance(s, For)]
    unrolled = [s for s in inner if s.kind == "unrolled"]
    linear = [s for s in inner if s.kind != "unrolled"]
    loads = {id(n): n for s in walk_stmts(loop.body) for e in own_exprs(s)
             for n in post_order(e) if isinstance(n, BufferLoad)}
    enclosing = [v for v, _ in cg.state.loops]
    blocks: dict[tuple[str, object], tuple[BufferLoad, PrimExpr, int, Var]] = {}
    for load in loads.values():
        var = _tile_var(load.index, rows)
        if var is None or var not in enclosing or id(load.buffer) in cg.state.registers:
            continue
        ahead = substitute(load.index, {var: var + rows})
        used = [s for s in unrolled if s.var in cg.facts.vars(ahead)]
        for values in itertools.product(*(range(s.extent) for s in used)):
            index = substitute(ahead, {s.var: const(k, s.var.dtype) for s, k in zip(used, values)})
            coefs = [linear_coef(cg, index, s.var) for s in linear]
            if any(c is None or c < 0 for c in coefs):
                break
            span = 1 + sum(c * (s.extent - 1) for c, s in zip(coefs, linear) if c)
            start = cg.simp.simplify(substitute(index, {s.var: const(0, s.var.dtype)
                                                        for s in linear}))
            key = (load.buffer.name, cg.simp.key(start))
            if key not in blocks or blocks[key][2] < span:
                blocks[key] = (load, start, span, var)
    for load, start, span, var in blocks.values():
        # the chunk's share is spread over the loops between the chunk loop and this one too
        # (the output tile's column blocks): each of their iterations prefetches its part
        k = enclosing.index(var)
        v = cg.var_name(var)
        part, parts = f"({v} % {rows})", rows
        for w, extent in cg.state.loops[k + 1:]:
            part, parts = f"({part} * {extent} + {cg.var_name(w)})", parts * extent
        per_line = max(1, _LINE_BYTES // max(1, E.dtype_bits(load.dtype) // 8))
        share = math.ceil(math.ceil(span / parts) / per_line) * per_line
        it = cg.index_type
        ctype = cg.c_type_of(load.buffer)
        with cg.block(f"if ({v} + {rows} < {cg.state.loops[k][1]}) {{  /* the next "
                      "channel tile's weights: this row's share, into L2 */"):
            pf = cg.temp_name("pf")
            cg.emit(f"const {ctype}* {pf} = &{load.buffer.name}[{cg.expr(start)}] + "
                    f"{part} * {share};")
            cg.emit(f"for ({it} k = 0; k < {share}; k += {per_line}) "
                    f"__builtin_prefetch({pf} + k, 0, 1);")
