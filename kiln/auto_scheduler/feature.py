"""Features of a schedule for the cost model, from Kiln's lowered loop IR (Ansor's, simplified).

A state is lowered (:func:`kiln.te.lower.lower`) and every innermost statement (a
:class:`~kiln.te.loop_ir.Store`) becomes one row of :data:`FEATURE_NAMES` values, after Ansor's
per-statement features (``src/auto_scheduler/feature.cc``):

* arithmetic: float and integer add/sub, mul, div/mod, comparisons/min/max, math calls,
  select/cast counts, times the iterations of the loops around the statement;
* loops: vectorized, unrolled and parallel extents (product, count, position of the innermost
  one), the ``auto_unroll_max_step`` in effect, the number of enclosing loops and iterations;
* up to :data:`MAX_BUFFERS` buffer accesses (sorted by bytes): read/write, bytes, unique bytes,
  cache lines, reuse type (loop / serial / none), reuse distance (iterations, bytes), reuse
  count, innermost stride; plus the statement's arithmetic intensity.

Counts are stored as ``log2(1 + x)`` as Ansor does. Strides come from evaluating each flat index
at a loop variable's 0 and 1 (exact for affine indices), so extraction is a few milliseconds per
state in pure Python; lowering dominates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.te import expr as E
from kiln.te.loop_ir import Allocate, BufferLoad, For, IfThenElse, LetStmt, PrimFunc, Seq, Stmt, Store
from kiln.te.visit import post_order

__all__ = [
    "FEATURE_NAMES",
    "MAX_BUFFERS",
    "get_per_store_features_from_states",
    "prim_func_features",
    "state_features",
]

MAX_BUFFERS = 5
CACHE_LINE = 64

_COMPUTE = ["float_addsub", "float_mul", "float_divmod", "float_cmp", "float_math", "float_other",
            "int_addsub", "int_mul", "int_divmod", "int_cmp", "bool_op"]
_LOOPS = ["vec_len", "vec_prod", "vec_num", "vec_pos_inner", "vec_pos_middle", "vec_pos_outer",
          "vec_pos_none", "unroll_prod", "unroll_num", "auto_unroll_max_step", "parallel_prod",
          "parallel_num", "parallel_pos_outer", "num_loops", "iterations", "in_temp_buffer",
          "arith_intensity", "total_bytes", "total_unique_bytes"]
_BUFFER = ["is_read", "is_write", "bytes", "unique_bytes", "lines", "reuse_loop", "reuse_serial",
           "reuse_none", "reuse_dis_iter", "reuse_dis_bytes", "reuse_ct", "stride",
           "min_stride", "bytes_per_reuse", "unique_bytes_per_line"]
#: The name of each column of a feature row.
FEATURE_NAMES: tuple[str, ...] = tuple(
    _COMPUTE + _LOOPS + [f"B{k}.{n}" for k in range(MAX_BUFFERS) for n in _BUFFER])


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


def _eval(e: E.PrimExpr, env: dict[int, int]) -> int:
    """An integer index at the loop values ``env`` (by ``id`` of the variable; others are 0)."""
    if isinstance(e, E.IntImm):
        return e.value
    if isinstance(e, E.Var):
        return env.get(id(e), 0)
    if isinstance(e, E.Binary):
        a, b = _eval(e.a, env), _eval(e.b, env)
        k = e.kind
        if k == "add":
            return a + b
        if k == "sub":
            return a - b
        if k == "mul":
            return a * b
        if k in ("floordiv", "div"):
            return a // b if b else 0
        if k in ("floormod", "mod"):
            return a % b if b else 0
        if k == "min":
            return min(a, b)
        if k == "max":
            return max(a, b)
        return 0
    if isinstance(e, E.Cast):
        return _eval(e.value, env)
    return 0


def _count_ops(e: E.PrimExpr, counts: list[float]) -> None:
    for n in post_order(e):
        if isinstance(n, BufferLoad):
            continue
        is_float = E.is_float_dtype(n.dtype)
        if isinstance(n, E.Binary):
            base = 0 if is_float else 6
            if n.kind in ("add", "sub"):
                counts[base] += 1
            elif n.kind == "mul":
                counts[base + 1] += 1
            elif n.kind in ("div", "mod", "floordiv", "floormod"):
                counts[base + 2] += 1
            else:
                counts[3 if is_float else 9] += 1
        elif isinstance(n, E.Compare):
            counts[3 if E.is_float_dtype(n.a.dtype) else 9] += 1
        elif isinstance(n, (E.And, E.Or, E.Not)):
            counts[10] += 1
        elif isinstance(n, E.Call):
            if n.name == "if_then_else":
                counts[5] += 1
            else:
                counts[4] += 1
        elif isinstance(n, (E.Select, E.Cast)):
            counts[5] += 1


def _loads(e: E.PrimExpr) -> list[BufferLoad]:
    return [n for n in post_order(e) if isinstance(n, BufferLoad)]


_Loop = tuple[E.Var, int, str, int]  # var, extent, kind, auto_unroll_max_step


def _store_row(store: Store, loops: Sequence[_Loop], temps: set[int]) -> list[float]:
    iters = 1
    for _, ext, _, _ in loops:
        iters *= ext
    counts = [0.0] * len(_COMPUTE)
    _count_ops(store.value, counts)
    _count_ops(store.index, counts)
    compute = [_log(c * iters) for c in counts]
    flops = sum(counts[:6]) * iters
    # loops
    kinds = [k for _, _, k, _ in loops]
    exts = [x for _, x, _, _ in loops]
    vec = [i for i, k in enumerate(kinds) if k == "vectorized"]
    unr = [i for i, k in enumerate(kinds) if k == "unrolled"]
    par = [i for i, k in enumerate(kinds) if k == "parallel"]
    n = len(loops)
    vec_pos = [0.0] * 4
    if not vec:
        vec_pos[3] = 1
    elif vec[-1] == n - 1:
        vec_pos[0] = 1
    elif vec[-1] == 0:
        vec_pos[2] = 1
    else:
        vec_pos[1] = 1
    auto_unroll = loops[-1][3] if loops else 0
    # buffer accesses: (buffer, index, is_write)
    accesses: list[tuple[Any, E.PrimExpr, bool]] = [(store.buffer, store.index, True)]
    accesses += [(ld.buffer, ld.index, False) for ld in _loads(store.value)]
    merged: dict[tuple[int, bool], tuple[Any, E.PrimExpr, int, bool]] = {}
    for buf, idx, w in accesses:
        key = (id(buf), w)
        merged[key] = (buf, idx, merged[key][2] + 1 if key in merged else 1, w)
    rows: list[tuple[float, list[float]]] = []
    total_bytes = total_unique = 0.0
    for buf, idx, count, w in merged.values():
        elem = max(1, E.dtype_bits(buf.dtype) // 8)
        base = _eval(idx, {})
        strides = [_eval(idx, {id(v): 1}) - base for v, _, _, _ in loops]
        unique = 1
        for s, x in zip(strides, exts):
            if s != 0:
                unique *= x
        unique = min(unique, max(1, buf.size))
        nz = [abs(s) for s in strides if s != 0]
        min_stride = min(nz) if nz else 0
        per_line = max(1, CACHE_LINE // (min_stride * elem)) if min_stride else CACHE_LINE // elem
        lines = max(1.0, unique / per_line)
        nbytes = iters * count * elem
        reuse = [0.0, 0.0, 0.0]
        dis_iter = dis_bytes = reuse_ct = 0.0
        inner = 1
        for i in range(n - 1, -1, -1):
            if strides[i] == 0 and exts[i] > 1:
                reuse[0] = 1
                reuse_ct = exts[i]
                dis_iter = inner
                inner_unique = 1
                for s, x in zip(strides[i + 1:], exts[i + 1:]):
                    if s != 0:
                        inner_unique *= x
                dis_bytes = inner_unique * elem
                break
            inner *= exts[i]
        if not reuse[0]:
            if count > 1:
                reuse[1] = 1
                reuse_ct = count
            else:
                reuse[2] = 1
        stride = strides[-1] if strides else 0
        total_bytes += nbytes
        total_unique += unique * elem
        feats = [0.0 if w else 1.0, 1.0 if w else 0.0, _log(nbytes), _log(unique * elem), _log(lines),
                 *reuse, _log(dis_iter), _log(dis_bytes), _log(reuse_ct), _log(abs(stride)),
                 _log(min_stride), _log(nbytes / max(1.0, reuse_ct)), _log(unique * elem / lines)]
        rows.append((nbytes, feats))
    rows.sort(key=lambda r: -r[0])
    buffers: list[float] = []
    for k in range(MAX_BUFFERS):
        buffers += rows[k][1] if k < len(rows) else [0.0] * len(_BUFFER)
    loop_feats = [
        _log(exts[vec[-1]] if vec else 0), _log(math.prod(exts[i] for i in vec) if vec else 0),
        float(len(vec)), *vec_pos,
        _log(math.prod(exts[i] for i in unr) if unr else 0), float(len(unr)), _log(auto_unroll),
        _log(math.prod(exts[i] for i in par) if par else 0), float(len(par)),
        1.0 if par and par[0] == 0 else 0.0, float(n), _log(iters),
        1.0 if id(store.buffer) in temps else 0.0,
        _log(flops / max(1.0, total_unique)), _log(total_bytes), _log(total_unique)]
    return compute + loop_feats + buffers


def prim_func_features(func: PrimFunc) -> np.ndarray:
    """One row of :data:`FEATURE_NAMES` per store of ``func`` (``(n_stores, n_features)``)."""
    rows: list[list[float]] = []
    temps: set[int] = set()

    def walk(s: Stmt, loops: list[_Loop], unroll: int) -> None:
        if isinstance(s, For):
            for key, value in s.pragmas:
                if key == "auto_unroll_max_step":
                    unroll = int(value)
            loops.append((s.var, s.extent, s.kind, unroll))
            walk(s.body, loops, unroll)
            loops.pop()
        elif isinstance(s, Store):
            rows.append(_store_row(s, loops, temps))
        elif isinstance(s, Seq):
            for x in s.stmts:
                walk(x, loops, unroll)
        elif isinstance(s, IfThenElse):
            walk(s.then_case, loops, unroll)
            if s.else_case is not None:
                walk(s.else_case, loops, unroll)
        elif isinstance(s, Allocate):
            temps.add(id(s.buffer))
            walk(s.body, loops, unroll)
        elif isinstance(s, LetStmt):
            walk(s.body, loops, unroll)

    walk(func.body, [], 0)
    if not rows:
        return np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32)
    return np.asarray(rows, dtype=np.float32)


def state_features(dag: Any, state: Any) -> np.ndarray | None:
    """The feature rows of one state of ``dag`` (None when it does not lower)."""
    from kiln.te.lower import lower

    try:
        func = lower(dag, state, name="kiln_features")
    except Exception:  # an invalid state: the cost model scores it -inf
        return None
    return prim_func_features(func)


def get_per_store_features_from_states(states: Sequence[Any], task: Any) -> list[np.ndarray | None]:
    """Feature rows of each state of ``task`` (TVM's ``get_per_store_features_from_states``)."""
    dag = task.require_dag() if hasattr(task, "require_dag") else task.compute_dag
    return [state_features(dag, s) for s in states]
