"""Ansor's sketches on CPU: generation rules, random annotation and mutation of states.

A *sketch* is a :class:`~kiln.te.loop_state.State` whose split steps have unknown lengths
(``None``): the loop structure of a schedule without its numbers. :func:`generate_sketches` makes
them with TVM's CPU rules (``sketch_policy_rules.cc``), stage by stage from the output backwards:

* ``always_inline``: a strictly inlineable stage (element-wise, no branch, not an output) is
  inlined (``CI``);
* ``multi_level_tiling_with_fusion``: a stage with data reuse (conv, dense, batch_matmul) whose
  single consumer is element-wise matched is tiled ``SSRSRS`` and computed at the consumer's
  first or second tile level (the consumer follows its splits);
* ``add_cache_write``: the same stage without such a consumer gets a ``local`` cache stage first,
  which is then tiled and fused into the original (now element-wise) stage;
* ``multi_level_tiling``: the stage tiled ``SSRSRS`` on its own;
* ``add_rfactor``: a reduction with a large reduction and small spatial extent is factored;
* ``skip``: nothing (the next stage).

:func:`sample_state` fills a sketch (TVM's init rules): tile sizes (a random factorization of
each extent), compute locations of the remaining stages, parallel outer loops, the
``auto_unroll_max_step`` pragma and the vectorized innermost loop. :func:`mutate` changes a
concrete state (TVM's mutation rules: tile size, auto unroll, compute location, parallel); it
works on any state's step list, so template states and states read from logs mutate too. Every
result is checked by replaying its steps on the DAG (:func:`replay`); invalid ones are dropped.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kiln.te import expr as E
from kiln.te.dag import ComputeDAG
from kiln.te.loop_state import ComputeAtKind, IteratorAnnotation, IteratorKind, State
from kiln.te.steps import (
    AnnotationStep,
    ComputeAtStep,
    FollowFusedSplitStep,
    FollowSplitStep,
    FuseStep,
    PragmaStep,
    ReorderStep,
    RfactorStep,
    SplitStep,
    Step,
    StorageAlignStep,
)
from kiln.te.tensor import ComputeOp
from kiln.te.visit import post_order

__all__ = [
    "AUTO_UNROLL_CONFIGS",
    "MUTATION_WEIGHTS",
    "generate_sketches",
    "mutate",
    "replay",
    "sample_state",
    "state_key",
]

#: The ``auto_unroll_max_step`` values on CPU (TVM's ``auto_unroll_configs``).
AUTO_UNROLL_CONFIGS = (0, 16, 64, 512)
#: Mutation rules and their weights (TVM's ``SketchPolicy`` mutation rule weights).
MUTATION_WEIGHTS = {"tile_size": 0.90, "auto_unroll": 0.04, "compute_location": 0.05,
                    "parallel": 0.01}


def state_key(state: State | Sequence[Step]) -> str:
    """The canonical key of a state: its steps as the JSON of a record (equal steps, equal key)."""
    steps = state.transform_steps if isinstance(state, State) else state
    return json.dumps([s.to_record() for s in steps], separators=(",", ":"))


def replay(dag: ComputeDAG, steps: Sequence[Step]) -> State | None:
    """``dag``'s initial state with ``steps`` applied, or ``None`` when a step does not apply."""
    state = dag.init_state
    try:
        for step in steps:
            state.transform_steps.append(step)
            step.apply_to_state(state, dag)
    except Exception:  # an invalid candidate: the caller drops it
        return None
    return state


# --- analysis of a state's stages -------------------------------------------------------------

def _reads(op: Any, producer: Any) -> list[E.TensorLoad]:
    if not isinstance(op, ComputeOp):
        return []
    return [n for b in op.body for n in post_order(b)
            if isinstance(n, E.TensorLoad) and n.tensor.op is producer]


def _direct_consumers(state: State, sid: int) -> list[int]:
    op = state.stages[sid].op
    return [i for i, s in enumerate(state.stages)
            if isinstance(s.op, ComputeOp) and any(t.op is op for t in s.op.input_tensors())]


def consumers(state: State, sid: int) -> list[int]:
    """Stages reading stage ``sid``, looking through inlined stages (TVM's ``GetConsumers``)."""
    out: list[int] = []
    for c in _direct_consumers(state, sid):
        if state.stages[c].compute_at == ComputeAtKind.INLINED:
            out += [x for x in consumers(state, c) if x not in out]
        elif c not in out:
            out.append(c)
    return out


def _has_reduce(state: State, sid: int) -> bool:
    return any(it.iter_kind == IteratorKind.REDUCTION for it in state.stages[sid].iters)


def _has_branch_or_expensive(op: ComputeOp) -> bool:
    for b in op.body:
        for n in post_order(b):
            if isinstance(n, E.Select) or (isinstance(n, E.Call) and n.name in (
                    "if_then_else", "exp", "log", "tanh", "sigmoid", "pow", "sqrt", "erf")):
                return True
    return False


def _strictly_inlineable(state: State, sid: int) -> bool:
    op = state.stages[sid].op
    return isinstance(op, ComputeOp) and not op.reduce_axis and not _has_branch_or_expensive(op) \
        and bool(_direct_consumers(state, sid))


def _inlineable(state: State, sid: int) -> bool:
    op = state.stages[sid].op
    return isinstance(op, ComputeOp) and not op.reduce_axis and bool(_direct_consumers(state, sid))


def needs_multi_level_tiling(state: State, sid: int) -> bool:
    """A reduction some input of which is not indexed by every spatial axis (data reuse)."""
    op = state.stages[sid].op
    if not isinstance(op, ComputeOp) or not op.reduce_axis:
        return False
    axes = [iv.var for iv in op.axis]
    for t in op.input_tensors():
        for load in _reads(op, t.op):
            used = {id(n) for idx in load.indices for n in post_order(idx) if isinstance(n, E.Var)}
            if sum(id(a) not in used for a in axes) >= 1:
                return True
    return False


def _elementwise_consumer(state: State, sid: int) -> int | None:
    """The single consumer when the path to it is element-wise matched (TVM's
    ``HasSingleElementwiseMatchedConsumer``), else None."""
    op = state.stages[sid].op
    cur = sid
    while True:
        direct = _direct_consumers(state, cur)
        if len(direct) != 1:
            return None
        c = direct[0]
        cop = state.stages[c].op
        if not isinstance(cop, ComputeOp) or cop.reduce_axis \
                or cop.shape != getattr(op, "shape", None):
            return None
        axes = [iv.var for iv in cop.axis]
        loads = _reads(cop, state.stages[cur].op)
        if not loads or any(len(ld.indices) != len(axes)
                            or any(i is not a for i, a in zip(ld.indices, axes)) for ld in loads):
            return None
        if state.stages[c].compute_at != ComputeAtKind.INLINED:
            return c
        cur = c


def _is_tiled(state: State, sid: int) -> bool:
    return any("." in it.name for it in state.stages[sid].iters)


def _has_cache_write(state: State, sid: int) -> bool:
    return sid + 1 < len(state.stages) and state.stages[sid + 1].op.name \
        == state.stages[sid].op.name.removesuffix(".local") \
        and state.stages[sid].op.name.endswith(".local")


def _extents(op: ComputeOp) -> tuple[int, int]:
    def size(axes: Sequence[Any]) -> int:
        out = 1
        for iv in axes:
            ext = iv.dom.extent if iv.dom is not None else None
            out *= ext.value if isinstance(ext, E.IntImm) else 1
        return out

    return size(op.axis), size(op.reduce_axis)


def _needs_rfactor(state: State, sid: int, num_cores: int) -> bool:
    op = state.stages[sid].op
    if not isinstance(op, ComputeOp) or not op.reduce_axis:
        return False
    space, reduce = _extents(op)
    if needs_multi_level_tiling(state, sid):
        return not (space > reduce or space > num_cores * 16)
    return reduce > num_cores and space < reduce


# --- sketch generation ------------------------------------------------------------------------

def _multi_level_tiling(state: State, sid: int, structure: str) -> list[int]:
    """Tile stage ``sid`` as ``structure`` (e.g. ``SSRSRS``); returns the spatial split step ids."""
    n_space, n_reduce = structure.count("S"), structure.count("R")
    space_levels: list[list[Any]] = [[] for _ in range(n_space)]
    reduce_levels: list[list[Any]] = [[] for _ in range(n_reduce)]
    split_ids: list[int] = []
    for it in list(state.stages[sid].iters):
        if it.iter_kind == IteratorKind.SPATIAL:
            parts = state.split(sid, it, [None] * (n_space - 1))
            split_ids.append(len(state.transform_steps) - 1)
            for k, p in enumerate(parts):
                space_levels[k].append(p)
        elif it.iter_kind == IteratorKind.REDUCTION:
            parts = state.split(sid, it, [None] * (n_reduce - 1))
            for k, p in enumerate(parts):
                reduce_levels[k].append(p)
    order: list[Any] = []
    s_k = r_k = 0
    for ch in structure:
        if ch == "S":
            order += space_levels[s_k]
            s_k += 1
        else:
            order += reduce_levels[r_k]
            r_k += 1
    state.reorder(sid, order)
    return split_ids


def _follow_tiling(state: State, sid: int, split_ids: Sequence[int], n_split: int) -> None:
    """Split the consumer's spatial loops like the producer's first ``n_split`` levels."""
    levels: list[list[Any]] = [[] for _ in range(n_split + 1)]
    its = [it for it in state.stages[sid].iters if it.iter_kind == IteratorKind.SPATIAL]
    for it, src in zip(its, split_ids):
        parts = state.follow_split(sid, it, src, n_split)
        for k, p in enumerate(parts):
            levels[k].append(p)
    rest = [it for it in state.stages[sid].iters if it.iter_kind != IteratorKind.SPATIAL]
    state.reorder(sid, [it for lv in levels for it in lv] + rest)


def _apply_rules(state: State, sid: int, params: dict[str, Any],
                 num_cores: int) -> list[tuple[State, int]]:
    """The states the first applicable rules make of stage ``sid``, with the next stage id."""
    stage = state.stages[sid]
    structure = str(params.get("cpu_multi_level_tiling_structure", "SSRSRS"))
    if stage.op_type == 0 or stage.compute_at != ComputeAtKind.ROOT:
        return [(state, sid - 1)]
    out: list[tuple[State, int]] = []
    if _strictly_inlineable(state, sid):  # always_inline: apply and skip the rest
        s = state.copy()
        s.compute_inline(sid)
        return [(s, sid - 1)]
    tiling = needs_multi_level_tiling(state, sid)
    consumer = _elementwise_consumer(state, sid) if tiling else None
    if tiling and consumer is not None:  # multi_level_tiling_with_fusion
        for level in (1, 2):
            if structure[level - 1] != "S":
                continue
            s = state.copy()
            split_ids = _multi_level_tiling(s, sid, structure)
            _follow_tiling(s, consumer, split_ids, level)
            at = level * len(split_ids) - 1
            s.compute_at(sid, consumer, at)
            out.append((s, sid - 1))
        if _has_cache_write(state, sid):
            return out
    if tiling and consumer is None:  # add_cache_write: the same stage is visited again
        s = state.copy()
        s.cache_write(sid, "local")
        out.append((s, sid))
    if _needs_rfactor(state, sid, num_cores) and not _has_cache_write(state, sid):
        out += _rfactor(state, sid)
    if tiling:  # multi_level_tiling: apply and skip the rest
        s = state.copy()
        _multi_level_tiling(s, sid, structure)
        out.append((s, sid - 1))
        return out
    out.append((state, sid - 1))  # skip
    return out


def _rfactor(state: State, sid: int) -> list[tuple[State, int]]:
    base = state.copy()
    n_space = sum(it.iter_kind == IteratorKind.SPATIAL for it in base.stages[sid].iters)
    red = [i for i, it in enumerate(base.stages[sid].iters) if it.iter_kind == IteratorKind.REDUCTION]
    if red != list(range(n_space, n_space + len(red))):
        return []
    if len(red) > 1:
        base.fuse(sid, red)
    out: list[tuple[State, int]] = []
    for which in (0, 1):
        s = base.copy()
        parts = s.split(sid, n_space, [1])  # a placeholder length, filled at sampling
        rid = s.rfactor(sid, parts[which], n_space)
        if which == 1:
            iters = s.stages[rid].iters
            order = [i for i in range(len(iters)) if i != n_space] + [n_space]
            s.reorder(rid, order)
        out.append((s, rid - 1))
    return out


def generate_sketches(dag: ComputeDAG, params: dict[str, Any] | None = None,
                      num_cores: int = 1) -> list[State]:
    """The sketches of ``dag`` (TVM's ``GenerateSketches`` with the CPU rules).

    Parameters
    ----------
    dag : ComputeDAG
        The task's computation.
    params : dict, optional
        Search parameters (``cpu_multi_level_tiling_structure``).
    num_cores : int
        Cores of the target (the rfactor rule's condition).

    Returns
    -------
    list of State
        Distinct sketches (split lengths unknown), in generation order.
    """
    params = params or {}
    stack: list[tuple[State, int]] = [(dag.init_state, len(dag.ops) - 1)]
    done: list[State] = []
    seen: set[str] = set()
    while stack:
        state, sid = stack.pop()
        if sid < 0:
            key = _sketch_key(state)
            if key not in seen:
                seen.add(key)
                done.append(state)
            continue
        for nxt in reversed(_apply_rules(state, sid, params, num_cores)):
            stack.append(nxt)
    return done


def _sketch_key(state: State) -> str:
    return json.dumps([[str(x) for x in _record(s)] for s in state.transform_steps])


def _record(step: Step) -> list[Any]:
    if isinstance(step, SplitStep):
        return ["SP", step.stage_id, step.iter_id, step.extent, list(step.lengths)]
    return step.to_record()


# --- random annotation (TVM's init population rules) ------------------------------------------

_FACTOR_CACHE: dict[tuple[int, int, int], list[tuple[int, ...]]] = {}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def factorizations(extent: int, n: int, max_innermost: int) -> list[tuple[int, ...]]:
    """All ``n`` split lengths (outer to inner) whose product divides ``extent``, the innermost at
    most ``max_innermost`` (TVM's ``SplitFactorizationMemo``)."""
    key = (extent, n, max_innermost)
    if key not in _FACTOR_CACHE:
        out: list[tuple[int, ...]] = []

        def rec(rest: int, prefix: tuple[int, ...]) -> None:
            if len(prefix) == n:
                if not prefix or prefix[-1] <= max_innermost:
                    out.append(prefix)
                return
            for d in _divisors(rest):
                rec(rest // d, (*prefix, d))

        rec(max(1, extent), ())
        _FACTOR_CACHE[key] = out
    return _FACTOR_CACHE[key]


def _fill_tile_sizes(dag: ComputeDAG, sketch: State, rng: random.Random,
                     max_innermost: int) -> list[Step]:
    steps = list(sketch.transform_steps)
    for k, step in enumerate(steps):
        before_rfactor = k + 1 < len(steps) and isinstance(steps[k + 1], RfactorStep) \
            and step.stage_id == steps[k + 1].stage_id
        if isinstance(step, SplitStep) and (any(x is None for x in step.lengths) or before_rfactor):
            extent = step.extent
            if extent is None:
                return []
            choices = factorizations(extent, len(step.lengths), max_innermost)
            steps[k] = replace(step, lengths=rng.choice(choices))
    return steps


def _bounded(dag: ComputeDAG, state: State) -> State:
    try:
        return dag.infer_bound(state)
    except Exception:  # bound inference failed: ranges stay unknown
        return state


def _extent(it: Any) -> int:
    ext = it.extent
    return ext if ext is not None else 1


def compute_location_candidates(dag: ComputeDAG, state: State, sid: int) -> list[tuple[int, int]]:
    """Where stage ``sid`` may be computed: loops of its single consumer (TVM's
    ``GetComputeLocationCandidates``)."""
    cons = consumers(state, sid)
    if len(cons) != 1:
        return []
    target = cons[0]
    bounded = _bounded(dag, state)
    tstage = bounded.stages[target]
    tiled = _is_tiled(state, target)
    at_other = tstage.compute_at == ComputeAtKind.ITER
    out: list[tuple[int, int]] = []
    visited_reduce = False
    for i, it in enumerate(tstage.iters):
        if it.iter_kind == IteratorKind.REDUCTION:
            visited_reduce = True
            if not tiled:
                break
        elif it.iter_kind == IteratorKind.SPATIAL and visited_reduce:
            break
        if it.annotation in (IteratorAnnotation.VECTORIZE, IteratorAnnotation.UNROLL):
            break
        if _extent(it) == 1:
            continue
        if at_other and it.iter_kind == IteratorKind.SPATIAL and it.name.endswith(".0"):
            continue
        out.append((target, i))
        if (target, i) in state.attach_map.iter_to_attached_stages:
            break
    return out


def _change_compute_location(dag: ComputeDAG, state: State, rng: random.Random) -> State:
    for sid in range(len(state.stages) - 1, -1, -1):
        stage = state.stages[sid]
        if stage.op_type == 0 or stage.compute_at != ComputeAtKind.ROOT:
            continue
        if _is_tiled(state, sid) or needs_multi_level_tiling(state, sid) \
                or not _direct_consumers(state, sid):
            continue
        if state.attach_map.iter_to_attached_stages and any(
                k[0] == sid for k in state.attach_map.iter_to_attached_stages):
            continue
        cands = compute_location_candidates(dag, state, sid)
        choice = rng.randrange(len(cands) + 2)
        if choice == 0:
            continue  # stay at the root
        if choice == 1:
            if _inlineable(state, sid):
                state.compute_inline(sid)
            continue
        target, it = cands[choice - 2]
        state.compute_at(sid, target, it)
    return state


def _annotate_parallel(state: State, sid: int, offset: int, num_cores: int,
                       bounded: State) -> None:
    iters = bounded.stages[sid].iters
    degree = 1
    i = offset
    to_fuse: list[int] = []
    while i < len(iters):
        it = iters[i]
        if it.iter_kind == IteratorKind.REDUCTION or it.annotation != IteratorAnnotation.NONE:
            break
        to_fuse.append(i)
        degree *= _extent(it)
        if degree > num_cores * 16:
            break
        if (sid, i) in state.attach_map.iter_to_attached_stages:
            break
        i += 1
    if degree == 1:
        attached = state.attach_map.iter_to_attached_stages.get((sid, i), [])
        for a in list(attached):
            _annotate_parallel(state, a, 0, num_cores, bounded)
        return
    if len(to_fuse) > 1:
        state.fuse(sid, to_fuse)
    state.parallel(sid, to_fuse[0])


def _init_parallel(dag: ComputeDAG, state: State, num_cores: int) -> None:
    if num_cores <= 1:
        return
    bounded = _bounded(dag, state)
    for sid, stage in enumerate(state.stages):
        if stage.op_type == 1 and stage.compute_at == ComputeAtKind.ROOT:
            _annotate_parallel(state, sid, 0, num_cores, bounded)


def _init_unroll(state: State, rng: random.Random) -> None:
    for sid, stage in enumerate(state.stages):
        if stage.op_type == 0 or stage.compute_at == ComputeAtKind.INLINED or not stage.iters:
            continue
        if _has_reduce(state, sid):
            value = rng.choice(AUTO_UNROLL_CONFIGS)
            state.pragma(sid, 0, f"auto_unroll_max_step${value}")


def _init_vectorize(dag: ComputeDAG, state: State, rng: random.Random, max_size: int) -> None:
    bounded = _bounded(dag, state)
    for sid, stage in enumerate(state.stages):
        if stage.op_type == 0 or stage.compute_at == ComputeAtKind.INLINED:
            continue
        iters = bounded.stages[sid].iters
        tiled = _is_tiled(state, sid)
        prod, n = 1, 0
        while n < len(iters):
            i = len(iters) - 1 - n
            it = iters[i]
            if (sid, i) in state.attach_map.iter_to_attached_stages:
                break
            if it.iter_kind != IteratorKind.SPATIAL or it.annotation != IteratorAnnotation.NONE:
                break
            if tiled and n != 0:
                break
            prod *= _extent(it)
            if prod > max_size:
                break
            n += 1
        if n > 1:
            n = 1 + rng.randrange(n - 1)
        if n == 1:
            state.vectorize(sid, len(iters) - 1)
        elif n > 1:
            state.fuse(sid, list(range(len(iters) - n, len(iters))))
            state.vectorize(sid, len(state.stages[sid].iters) - 1)


def sample_state(dag: ComputeDAG, sketch: State, rng: random.Random, params: dict[str, Any],
                 num_cores: int) -> State | None:
    """A random concrete state of ``sketch`` (TVM's init population rules), or None if invalid.

    Parameters
    ----------
    dag : ComputeDAG
        The task's computation.
    sketch : State
        A sketch from :func:`generate_sketches`.
    rng : random.Random
        The random source.
    params : dict
        ``max_innermost_split_factor``, ``max_vectorize_size``,
        ``disable_change_compute_location``.
    num_cores : int
        Cores to parallelize for.

    Returns
    -------
    State or None
    """
    steps = _fill_tile_sizes(dag, sketch, rng, int(params.get("max_innermost_split_factor", 64)))
    state = replay(dag, steps) if steps or not sketch.transform_steps else None
    if state is None:
        return None
    try:
        if not params.get("disable_change_compute_location", 0):
            _change_compute_location(dag, state, rng)
        _init_parallel(dag, state, num_cores)
        _init_unroll(state, rng)
        _init_vectorize(dag, state, rng, int(params.get("max_vectorize_size", 16)))
    except Exception:  # a rule met a structure it cannot annotate: drop the sample
        return None
    return replay(dag, state.transform_steps)


# --- mutation -----------------------------------------------------------------------------------

def _mutate_tile_size(dag: ComputeDAG, steps: list[Step], rng: random.Random,
                      max_innermost: int) -> list[Step] | None:
    cands = [k for k, s in enumerate(steps) if isinstance(s, SplitStep) and s.extent
             and s.extent > 1 and all(x is not None for x in s.lengths)]
    if not cands:
        return None
    k = rng.choice(cands)
    step = steps[k]
    assert isinstance(step, SplitStep) and step.extent is not None
    lengths = [int(x) for x in step.lengths if x is not None]
    outer = step.extent
    for x in lengths:
        outer //= max(1, x)
    levels = [outer, *lengths]  # level 0 is the implicit outer part
    src_levels = [i for i, x in enumerate(levels) if x > 1]
    if not src_levels:
        return None
    src = rng.choice(src_levels)
    divs = [d for d in _divisors(levels[src]) if d > 1]
    factor = rng.choice(divs)
    dst = rng.choice([i for i in range(len(levels)) if i != src])
    levels[src] //= factor
    levels[dst] *= factor
    if levels[-1] > max_innermost:
        return None
    new = list(steps)
    new[k] = replace(step, lengths=tuple(levels[1:]))
    return new


def _mutate_auto_unroll(steps: list[Step], rng: random.Random) -> list[Step] | None:
    cands = [k for k, s in enumerate(steps)
             if isinstance(s, PragmaStep) and s.pragma_type.startswith("auto_unroll_max_step")]
    if not cands:
        return None
    k = rng.choice(cands)
    step = steps[k]
    assert isinstance(step, PragmaStep)
    values = [v for v in AUTO_UNROLL_CONFIGS if f"${v}" != step.pragma_type[len("auto_unroll_max_step"):]]
    new = list(steps)
    new[k] = PragmaStep(step.stage_id, step.iter_id, f"auto_unroll_max_step${rng.choice(values)}")
    return new


def _mutate_compute_location(dag: ComputeDAG, steps: list[Step],
                             rng: random.Random) -> list[Step] | None:
    cands = [k for k, s in enumerate(steps) if isinstance(s, ComputeAtStep)]
    rng.shuffle(cands)
    for k in cands[:3]:
        step = steps[k]
        assert isinstance(step, ComputeAtStep)
        prefix = replay(dag, steps[:k])
        if prefix is None or _is_tiled(prefix, step.stage_id):
            continue
        locs = [c for c in compute_location_candidates(dag, prefix, step.stage_id)
                if c != (step.target_stage_id, step.target_iter_id)]
        if not locs:
            continue
        target, it = rng.choice(locs)
        new = list(steps)
        new[k] = ComputeAtStep(step.stage_id, target, it)
        return new
    return None


def _shift_iter(step: Step, sid: int, start: int, delta: int) -> Step | None:
    """``step`` with the iterator ids ``>= start`` of stage ``sid`` shifted by ``delta``."""
    def sh(i: int) -> int:
        return i + delta if i >= start else i

    if isinstance(step, ComputeAtStep):
        return replace(step, target_iter_id=sh(step.target_iter_id)) \
            if step.target_stage_id == sid else step
    if getattr(step, "stage_id", None) != sid:
        return step
    if isinstance(step, (AnnotationStep, PragmaStep, SplitStep, StorageAlignStep, FollowSplitStep,
                         FollowFusedSplitStep)):
        return replace(step, iter_id=sh(step.iter_id))
    if isinstance(step, FuseStep):
        return replace(step, fused_ids=tuple(sh(i) for i in step.fused_ids))
    return None  # reorder, rfactor, ...: not shifted


def _mutate_parallel(dag: ComputeDAG, steps: list[Step], rng: random.Random) -> list[Step] | None:
    cands = [k for k, s in enumerate(steps) if isinstance(s, AnnotationStep)
             and s.annotation == IteratorAnnotation.PARALLEL and s.iter_id == 0]
    if not cands:
        return None
    k = rng.choice(cands)
    sid = steps[k].stage_id
    fuse_k = k - 1 if k > 0 and isinstance(steps[k - 1], FuseStep) \
        and steps[k - 1].stage_id == sid else None
    old_n = len(steps[fuse_k].fused_ids) if fuse_k is not None else 1  # type: ignore[attr-defined]
    at = fuse_k if fuse_k is not None else k
    prefix = replay(dag, steps[:at])
    if prefix is None:
        return None
    iters = prefix.stages[sid].iters
    max_n = 0
    for i, it in enumerate(iters):
        if it.iter_kind != IteratorKind.SPATIAL or it.annotation != IteratorAnnotation.NONE:
            break
        max_n = i + 1
        if (sid, i) in prefix.attach_map.iter_to_attached_stages:
            break
    choices = [n for n in range(1, max_n + 1) if n != old_n]
    if not choices:
        return None
    n = rng.choice(choices)
    new = list(steps[:at])
    if n > 1:
        new.append(FuseStep(sid, tuple(range(n))))
    new.append(AnnotationStep(sid, 0, IteratorAnnotation.PARALLEL))
    delta = old_n - n  # iterator ids after the fused ones move by this much
    for s in steps[k + 1:]:
        if isinstance(s, ReorderStep) and s.stage_id == sid:
            return None
        shifted = _shift_iter(s, sid, old_n, -delta) if delta else s
        if shifted is None:
            return None
        new.append(shifted)
    return new


def mutate(dag: ComputeDAG, state: State, rng: random.Random, params: dict[str, Any]) -> State | None:
    """A mutant of ``state`` by one random rule (weights :data:`MUTATION_WEIGHTS`), or None when
    the rule does not apply or the mutant does not replay.

    Parameters
    ----------
    dag : ComputeDAG
        The task's computation.
    state : State
        A concrete state (its steps are mutated; the state is not changed).
    rng : random.Random
        The random source.
    params : dict
        ``max_innermost_split_factor`` and ``disable_change_compute_location``.

    Returns
    -------
    State or None
    """
    steps = list(state.transform_steps)
    rules = list(MUTATION_WEIGHTS)
    if params.get("disable_change_compute_location", 0):
        rules.remove("compute_location")
    rule = rng.choices(rules, weights=[MUTATION_WEIGHTS[r] for r in rules])[0]
    if rule == "tile_size":
        new = _mutate_tile_size(dag, steps, rng, int(params.get("max_innermost_split_factor", 64)))
    elif rule == "auto_unroll":
        new = _mutate_auto_unroll(steps, rng)
    elif rule == "compute_location":
        new = _mutate_compute_location(dag, steps, rng)
    else:
        new = _mutate_parallel(dag, steps, rng)
    if new is None:
        return None
    return replay(dag, new)
