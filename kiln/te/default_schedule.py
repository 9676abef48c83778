"""The generic schedule used when no tuned record exists, written as Ansor steps.

* Every injective stage that is not an output is inlined into its consumers (``CI``), except a
  conditional one (padding) read by a reduction, which keeps its own buffer, and one whose
  expression, with its own inlined producers expanded, would exceed
  :data:`~kiln.te.bound.INLINE_MAX_NODES` nodes (chains of ``where``/``clip`` that read their
  producer several times grow exponentially when inlined): it is computed into a buffer and
  scheduled like an output.
* An element-wise or injective output: the trailing axes along which every input is read
  contiguously (or not at all: broadcast) are fused into one vector dimension; it is split by the
  vector width (narrower where that keeps a concatenation's source or a blocked index the same
  across lanes) and the inner part vectorized; when the vector loop gathers (a transpose), the
  output axis its gathers step along is blocked just outside it. When the stage has enough work
  for the usable CPUs, the outer loops it needs for that are fused into one parallel loop;
  every other loop stays a loop of its own (a fused index is divided back into each coordinate
  it is made of, per vector: RegNetY's 7x7x440 SE gate multiply took 9.3 us in one fused loop
  and 2 us nested).
* A reduction: when its innermost spatial axis is read contiguously, that axis is split by the
  vector width and its inner part moved inside the reduction loops and vectorized; the outer
  spatial loops are fused and run in parallel when there is enough work.

The result is a :class:`~kiln.te.loop_state.State`, so a default schedule can be printed,
recorded and replayed like a tuned one.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.te import expr as E
from kiln.te.bound import INLINE_MAX_NODES, InlineCost, inline_costs, resolve_inlined
from kiln.te.dag import ComputeDAG
from kiln.te.expr import PrimExpr, Var
from kiln.te.loop_state import State
from kiln.te.simplify import Simplifier
from kiln.te.tensor import ComputeOp
from kiln.te.visit import children, post_order, substitute

__all__ = ["PARALLEL_MIN_WORK", "default_schedule", "inline_injective", "is_output", "vector_lanes"]

# Below this many inner-loop iterations a parallel region costs more than it saves.
PARALLEL_MIN_WORK = 1 << 15


def vector_lanes(dtype: str, vector_bytes: int) -> int:
    """Lanes of a vector register for ``dtype`` (bool counts as one byte)."""
    size = 1 if dtype == "bool" else max(1, E.dtype_bits(dtype) // 8)
    return max(1, vector_bytes // size)


def _clean_suffix(op: ComputeOp, bodies: tuple[PrimExpr, ...]) -> int:
    """How many trailing axes can be fused into one contiguous dimension.

    Every load must read the fused axes either all as its own trailing indices (in order, same
    extents) or not at all (a broadcast), so that each load stays contiguous or uniform.
    """
    axes = [iv.var for iv in op.axis]
    n = len(axes)
    loads = [node for b in bodies for node in post_order(b) if isinstance(node, E.TensorLoad)]
    uses_suffix: dict[int, bool] = {}
    count = 0
    for d in range(n - 1, -1, -1):
        var = axes[d]
        ok = True
        for load in loads:
            uses = [i for i, idx in enumerate(load.indices) if _mentions(idx, var)]
            pos = len(load.indices) - (n - d)
            identity = uses == [pos] and load.indices[pos] is var \
                and load.tensor.shape[pos] == op.shape[d]
            if (uses and not identity) or uses_suffix.get(id(load), bool(uses)) != bool(uses):
                ok = False
                break
        if not ok:
            break
        for load in loads:
            uses_suffix.setdefault(id(load), any(_mentions(i, var) for i in load.indices))
        count += 1
    return count


def _contiguous_in(bodies: tuple[PrimExpr, ...], var: Var) -> bool:
    """Whether every load reads consecutive elements as ``var`` steps (or ignores ``var``)."""
    simp = Simplifier()
    return all(_steps_by_one(simp, list(load.indices), var) for body in bodies
               for load in post_order(body) if isinstance(load, E.TensorLoad))


def _mentions(e: PrimExpr, var: Var) -> bool:
    return any(node is var for node in post_order(e))


def default_schedule(dag: ComputeDAG, vector_bytes: int = 32, num_threads: int = 1) -> State:
    """The default schedule of ``dag``.

    Parameters
    ----------
    dag : ComputeDAG
        The computation.
    vector_bytes : int
        Vector register width of the target (32 for AVX2, 64 for AVX-512).
    num_threads : int
        Usable CPUs; 1 disables parallel loops.

    Returns
    -------
    State
        The scheduled state (its steps replay on ``dag``).
    """
    state = dag.init_state
    inline_injective(dag, state, keep=_materialize)
    sch = dag.apply_steps(state.transform_steps)
    resolved = resolve_inlined(sch)
    sch_stages = sch.stages
    for i, op in enumerate(dag.ops):
        if not isinstance(op, ComputeOp) or state.stages[i].compute_at != 0:
            continue  # placeholders and inlined stages
        bodies = resolved[id(sch_stages[i])]
        if op.is_reduction:
            _schedule_reduction(state, i, op, bodies, vector_bytes, num_threads)
        else:
            _schedule_injective(state, i, op, bodies, vector_bytes, num_threads)
    return state


def inline_injective(dag: ComputeDAG, state: State,
                     keep: Callable[[ComputeDAG, ComputeOp], bool] | None = None) -> None:
    """Inline (``CI``) every injective stage that is not an output into its consumers, except
    those ``keep`` says to compute into a buffer and those whose expanded expression would exceed
    :data:`~kiln.te.bound.INLINE_MAX_NODES` nodes."""
    inlined: dict[tuple[int, int], InlineCost] = {}
    for i, op in enumerate(dag.ops):
        if isinstance(op, ComputeOp) and not op.is_reduction and not is_output(dag, op) \
                and not (keep is not None and keep(dag, op)):
            costs = inline_costs(op, inlined)
            if max(c.size for c in costs) <= INLINE_MAX_NODES:
                state.compute_inline(i)
                inlined.update({op.output(k).key: c for k, c in enumerate(costs)})


def _materialize(dag: ComputeDAG, op: ComputeOp) -> bool:
    """Keep a conditional injective stage (padding) feeding a reduction as its own buffer, so the
    reduction's inner loop reads it without branches."""
    conditional = any(isinstance(n, E.Select) or (isinstance(n, E.Call) and n.name == "if_then_else")
                      for b in op.body for n in post_order(b))
    if not conditional:
        return False
    return any(isinstance(c, ComputeOp) and c.is_reduction
               and any(t.op is op for t in c.input_tensors()) for c in dag.ops)


def is_output(dag: ComputeDAG, op: ComputeOp) -> bool:
    """Whether ``op`` computes one of the DAG's outputs."""
    return any(t.op is op for t in dag.tensors)


def _schedule_injective(state: State, sid: int, op: ComputeOp, bodies: tuple[PrimExpr, ...],
                        vector_bytes: int, num_threads: int) -> None:
    n = len(op.axis)
    if n == 0:
        return
    size = 1
    for d in op.shape:
        size *= d
    clean = max(1, _clean_suffix(op, bodies))
    splits = _division_splits(op, bodies, n - clean)
    for d in sorted(splits, reverse=True):  # later axes first: earlier indices stay put
        state.split(sid, d, [splits[d]])
    n += len(splits)
    if clean > 1:
        state.fuse(sid, list(range(n - clean, n)))
    inner_pos = n - clean
    inner_ext = 1
    for d in op.shape[n - clean:]:
        inner_ext *= d
    lanes = _injective_lanes(op, bodies, clean, vector_lanes(op.output_dtype(0), vector_bytes))
    vectorized = lanes > 1
    if vectorized:
        state.split(sid, inner_pos, [lanes])
    tile = _transpose_tile(op, bodies, clean, lanes) if vectorized else None
    if tile is not None:  # ..., d.o, v.o, d.i (serial), v.i (vector)
        d, block = tile
        state.split(sid, d, [block])
        rest = [i for i in range(inner_pos + 1) if i not in (d, d + 1)]
        state.reorder(sid, [*rest, d, inner_pos + 1, d + 1, inner_pos + 2])
    outer = list(range(inner_pos + (1 if vectorized else 0)))
    if num_threads > 1 and size >= PARALLEL_MIN_WORK and outer:
        outer = _parallel_prefix(state, sid, len(outer), num_threads)
        if len(outer) > 1:
            state.fuse(sid, outer)
        state.parallel(sid, 0)
    if vectorized:
        state.vectorize(sid, len(state.stages[sid].iters) - 1)


def _division_splits(op: ComputeOp, bodies: tuple[PrimExpr, ...], count: int) -> dict[int, int]:
    """``{axis: f}`` for those of the first ``count`` axes that the stage reads only through
    ``floordiv(axis, f)`` and ``floormod(axis, f)`` (a depth-to-space's decomposition of an
    output coordinate): split by ``f``, its loop variables are those two values and no index
    divides (DBNet's blocked depth-to-space, 9.8 MB: 478 -> 320 us). Nothing where the innermost
    axis gathers: a transpose gets its tile from :func:`_transpose_tile` instead."""
    out: dict[int, int] = {}
    simp = Simplifier({iv.var: (0, int(d) - 1) for iv, d in zip(op.axis, op.shape)})
    if not all(_steps_by_one(simp, list(ld.indices), op.axis[-1].var) for b in bodies
               for ld in post_order(b) if isinstance(ld, E.TensorLoad)):
        return out
    nodes = [n for b in bodies for n in post_order(b)]
    for d in range(count):
        var, extent = op.axis[d].var, int(op.shape[d])
        factors: set[int] = set()
        plain = any(b is var for b in bodies)
        for node in nodes:
            if isinstance(node, E.Binary) and node.kind in ("floordiv", "floormod") \
                    and node.a is var and isinstance(node.b, E.IntImm):
                factors.add(node.b.value)
            else:
                plain = plain or any(c is var for c in children(node))
        if len(factors) == 1 and not plain:
            f = factors.pop()
            if 1 < f < extent and extent % f == 0:
                out[d] = f
    return out


# Chunks of the parallel loop per usable CPU that balance the work well enough.
_CHUNKS_PER_THREAD = 16


def _parallel_prefix(state: State, sid: int, count: int, num_threads: int) -> list[int]:
    """The loops to fuse into the parallel loop: the first ``count`` loops of a stage, less the
    inner ones it does not need for :data:`_CHUNKS_PER_THREAD` chunks per CPU. Those stay loops
    of their own, whose indices are cheap to compute (a fused index is divided and reduced back
    into every coordinate it is made of: DBNet's 9.8 MB blocked depth-to-space, AVX2 build, took
    1.5 ms with one fused loop and 0.44 ms with its last row loop apart)."""
    iters = state.stages[sid].iters
    keep, chunks = 0, 1
    while keep < count and chunks < _CHUNKS_PER_THREAD * max(num_threads, 1):
        chunks *= iters[keep].extent or 1
        keep += 1
    return list(range(keep))


def _injective_lanes(op: ComputeOp, bodies: tuple[PrimExpr, ...], clean: int, lanes: int) -> int:
    """Vector length for the fused trailing ``clean`` axes of an injective stage (1: scalar).

    The target's full width unless a narrower power of two (down to 4 lanes) makes every
    condition the stage tests (a concatenation's source, a padding check) the same across the
    lanes and every load contiguous or uniform, where the full width would not: then the vector
    code needs no lane-by-lane selects or gathers (a concatenation of 8-channel blocks into
    16-channel ones, a depth-to-space of blocked channels). The trailing extent must hold at
    least one vector.
    """
    n = len(op.axis)
    extents = [int(d) for d in op.shape[n - clean:]]
    inner_ext = 1
    for d in extents:
        inner_ext *= d
    widths = [w for w in (lanes >> k for k in range(lanes.bit_length())) if 4 <= w <= inner_ext]
    if lanes <= 1 or not widths:
        return lanes if 1 < lanes <= inner_ext else 1
    suffix = [iv.var for iv in op.axis[n - clean:]]
    conds = [c for b in bodies for c in _conditions(b) if any(_mentions(c, v) for v in suffix)]
    loads = [ld for b in bodies for ld in post_order(b)
             if isinstance(ld, E.TensorLoad) and any(_mentions(i, v) for i in ld.indices
                                                     for v in suffix)]
    ranges = {iv.var: (0, int(d) - 1) for iv, d in zip(op.axis, op.shape)}

    def score(width: int) -> int:
        o, i = Var("vec_o", "int32"), Var("vec_i", "int32")
        simp = Simplifier({**ranges, o: (0, (inner_ext + width - 1) // width - 1), i: (0, width - 1)})
        fused = o * width + i
        mapping: dict[Var, PrimExpr] = {}
        stride = inner_ext
        for var, ext in zip(suffix, extents):
            stride //= ext
            mapping[var] = simp.simplify((fused // stride) % ext) if clean > 1 else fused
        if any(_mentions(simp.simplify(substitute(c, mapping)), i) for c in conds):
            return 0
        return 2 if all(_steps_by_one(simp, [substitute(x, mapping) for x in ld.indices], i)
                        for ld in loads) else 1

    if lanes > inner_ext:  # the full width does not fit: narrower only where it is clean
        return next((w for w in widths if score(w) == 2), 1)
    full = score(lanes)
    if full == 2:
        return lanes
    narrower = [(score(w), w) for w in widths[1:]]
    best = max(narrower, default=(0, lanes))
    return best[1] if best[0] > full else lanes


def _transpose_tile(op: ComputeOp, bodies: tuple[PrimExpr, ...], clean: int,
                    lanes: int) -> tuple[int, int] | None:
    """``(axis, block)`` when the vector loop gathers (a transpose: NCHWc to NCHW, attention's
    K transpose) and an outer output axis ``axis`` reads consecutive elements of every gathered
    load: that axis is then blocked by ``block`` just outside the vector loop, so the cache lines
    one vector gathers serve the next ``block`` vectors too. None when nothing gathers or no
    such axis divides by a block of 4 to ``lanes``."""
    if clean != 1:
        return None
    n = len(op.axis)
    v = op.axis[-1].var
    extents = [int(d) for d in op.shape]
    ranges = {iv.var: (0, ext - 1) for iv, ext in zip(op.axis, extents)}
    simp = Simplifier(ranges)
    gathers = [ld for b in bodies for ld in post_order(b) if isinstance(ld, E.TensorLoad)
               and not _steps_by_one(simp, list(ld.indices), v)]
    if not gathers:
        return None
    for d in range(n - 2, -1, -1):
        var = op.axis[d].var
        for block in (b for b in (lanes, 16, 8, 4) if b <= lanes and extents[d] % b == 0):
            o, i = Var("blk_o", "int32"), Var("blk_i", "int32")
            split = Simplifier({**ranges, o: (0, extents[d] // block - 1), i: (0, block - 1)})
            sub = {var: o * block + i}
            if all(_steps_by_one(split, [substitute(x, sub) for x in ld.indices], i)
                   and _mentions(split.simplify(substitute(ld.indices[-1], sub)), i)
                   for ld in gathers):
                return d, block
    return None


def _conditions(e: PrimExpr) -> list[PrimExpr]:
    return [n.condition if isinstance(n, E.Select) else n.args[0] for n in post_order(e)
            if isinstance(n, E.Select) or (isinstance(n, E.Call) and n.name == "if_then_else")]


def _steps_by_one(simp: Simplifier, indices: list[PrimExpr], var: Var) -> bool:
    """Whether a load at ``indices`` reads consecutive elements as ``var`` steps (or one)."""
    if not indices:
        return True
    *outer, last = (simp.simplify(x) for x in indices)
    if any(_mentions(x, var) for x in outer):
        return False
    if not _mentions(last, var):
        return True
    lin = simp.linear(last)
    return [c for c, atom in lin.terms.values() if atom is var] == [1] \
        and not any(atom is not var and _mentions(atom, var) for _, atom in lin.terms.values())


def _schedule_reduction(state: State, sid: int, op: ComputeOp, bodies: tuple[PrimExpr, ...],
                        vector_bytes: int, num_threads: int) -> None:
    n, r = len(op.axis), len(op.reduce_axis)
    spatial = 1
    for d in op.shape:
        spatial *= d
    work = spatial
    for iv in op.reduce_axis:
        assert iv.dom is not None and isinstance(iv.dom.extent, E.IntImm)
        work *= iv.dom.extent.value
    lanes = vector_lanes(op.output_dtype(0), vector_bytes)
    vectorized = n > 0 and lanes > 1 and op.shape[-1] >= lanes \
        and _contiguous_in(bodies, op.axis[-1].var)
    if vectorized:
        state.split(sid, n - 1, [lanes])
        # spatial..., s.outer, s.inner, reduce...  ->  spatial..., s.outer, reduce..., s.inner
        order = [*range(n), *range(n + 1, n + 1 + r), n]
        state.reorder(sid, order)
    if n > 1:  # the spatial loops outside the reduction (with s.outer when split)
        state.fuse(sid, list(range(n)))
    if n and num_threads > 1 and work >= PARALLEL_MIN_WORK and spatial >= 2 * num_threads:
        state.parallel(sid, 0)
    if vectorized:
        state.vectorize(sid, len(state.stages[sid].iters) - 1)
