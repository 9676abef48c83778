"""Lowering: a schedule (or a DAG plus Ansor steps) to a loop-IR :class:`~kiln.te.loop_ir.PrimFunc`.

Every computed stage becomes a loop nest over its leaf loops (in schedule order, each loop
starting at 0), storing each element of its region; a reduction first stores its initial value
at the level of its outermost reduction loop, then combines into it. Inlined stages are
substituted into their readers, except those whose expansion would exceed the size budget of
:func:`~kiln.te.bound.limit_inlining`, which are computed at the root instead; a stage computed
at a loop of another stage is emitted at the start of that loop's body, with its buffer
allocated there; bound checks guard coordinates that a non-dividing split or an enlarged region
would push out of range. All indices and conditions are simplified with the loops' ranges, so
checks that always hold disappear.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln.te import expr as E
from kiln.te.bound import BoundInference, StageBounds, limit_inlining, resolve_leaf
from kiln.te.expr import PrimExpr, Var, const
from kiln.te.loop_ir import (
    THREAD_KINDS,
    UNSWITCH_TILE_GUARDS,
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    LetStmt,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    map_child_stmts,
    map_stmt_exprs,
    walk_stmts,
)
from kiln.te.schedule import FuseRelation, Schedule, ScheduleError, SplitRelation, Stage
from kiln.te.simplify import Simplifier
from kiln.te.tensor import COMM_REDUCE, CommReducer, ComputeOp, IterVar, PlaceholderOp, Tensor
from kiln.te.visit import post_order, substitute, transform, vars_in

__all__ = ["lower", "lower_schedule"]

_KIND = {"parallel": "parallel", "vectorize": "vectorized", "unroll": "unrolled",
         "vthread": "vthread", **{tag: tag for tag in THREAD_KINDS}}


def lower(target: Any, steps: Any = None, *, args: Sequence[Tensor] | None = None,
          name: str = "main", attrs: dict[str, Any] | None = None) -> PrimFunc:
    """Lower a schedule to loop IR.

    Parameters
    ----------
    target : ComputeDAG or Schedule
        A DAG (scheduled by ``steps``) or an already built schedule.
    steps : State or list of Step, optional
        For a DAG: the Ansor state or step list to apply (none: the default nests).
    args : list of Tensor, optional
        Kernel parameters, inputs then outputs (default: the DAG's tensors).
    name : str
        Kernel name.
    attrs : dict, optional
        Attributes for the function (``"fused_ops"``, ``"source_names"``).

    Returns
    -------
    PrimFunc
    """
    from kiln.te.dag import ComputeDAG

    if isinstance(target, ComputeDAG):
        step_list = getattr(steps, "transform_steps", steps) or []
        sch = target.apply_steps(step_list)
        tensors = list(args) if args is not None else target.tensors
    elif isinstance(target, Schedule):
        sch = target
        if args is None:
            raise ScheduleError("lower(schedule) needs args= (the kernel's input and output tensors)")
        tensors = list(args)
    else:
        raise TypeError(f"lower takes a ComputeDAG or a Schedule, not {type(target).__name__}")
    return lower_schedule(sch, tensors, name, attrs or {})


def lower_schedule(sch: Schedule, args: Sequence[Tensor], name: str,
                   attrs: dict[str, Any]) -> PrimFunc:
    """See :func:`lower`."""
    limit_inlining(sch)
    return _Lowering(sch, args).run(name, attrs)


def c_identifier(name: str) -> str:
    """``name`` made into a C identifier."""
    out = re.sub(r"[^0-9A-Za-z_]", "_", name.replace(".", "_"))
    return out if out and not out[0].isdigit() else "t_" + out


class _Lowering:
    def __init__(self, sch: Schedule, args: Sequence[Tensor]):
        self.sch = sch
        self.bounds = BoundInference(sch)
        self.simp = Simplifier(self.bounds.ranges)
        self.names: set[str] = set()
        # tensor key -> (buffer, region minimums)
        self.storage: dict[tuple[int, int], tuple[Buffer, tuple[PrimExpr, ...]]] = {}
        self.params: list[Buffer] = []
        self.temps: dict[int, list[Buffer]] = {}  # id(stage) -> buffers to allocate
        self.attached: dict[tuple[int, int], list[StageBounds]] = {}
        self._bind_params(args)
        self._bind_temps()

    # --- buffers ------------------------------------------------------------------------------
    def _unique(self, name: str) -> str:
        base = c_identifier(name)
        out, n = base, 1
        while out in self.names:
            out = f"{base}_{n}"
            n += 1
        self.names.add(out)
        return out

    def _current(self, t: Tensor) -> Tensor:
        if isinstance(t.op, PlaceholderOp) and not any(s.op is t.op for s in self.sch.stages):
            return t  # an input nothing reads: still a kernel argument
        stage = self.sch[t.op]
        return stage.op.output(t.value_index)

    def _bind_params(self, args: Sequence[Tensor]) -> None:
        for t in args:
            cur = self._current(t)
            kind = "input" if isinstance(cur.op, PlaceholderOp) else "output"
            if cur.key in self.storage:
                raise ScheduleError(f"tensor {t.name} is passed twice to the kernel")
            buf = Buffer(self._unique(t.name), cur.dtype, cur.shape, kind=kind)
            self.params.append(buf)
            self.storage[cur.key] = (buf, tuple(const(0) for _ in cur.shape))

    def _bind_temps(self) -> None:
        for info in self.bounds.info.values():
            stage, op = info.stage, info.op
            for k in range(op.num_outputs):
                t = op.output(k)
                if t.key in self.storage:
                    continue
                if stage.is_output:
                    raise ScheduleError(f"output {t.name} is not among the kernel's arguments")
                shape = tuple(ext for _, ext in info.region)
                buf = Buffer(self._unique(t.name), t.dtype, shape, _aligned_strides(stage, shape),
                             kind="temp", scope=stage.scope or "global")
                self.temps.setdefault(id(stage), []).append(buf)
                self.storage[t.key] = (buf, tuple(lo for lo, _ in info.region))
            if stage.attach_type == "scope":
                assert stage.attach_stage is not None and stage.attach_ivar is not None
                leaf = resolve_leaf(stage.attach_stage, stage.attach_ivar)
                key = (id(stage.attach_stage), id(leaf))
                self.attached.setdefault(key, []).append(info)
        for stage in self.sch.stages:
            src = stage.op
            if isinstance(src, PlaceholderOp) and src.output(0).key not in self.storage:
                value = src.attrs.get("value")
                if value is None:
                    raise ScheduleError(f"input {src.name} is read but not among the kernel's "
                                        "arguments")
                data = np.ascontiguousarray(np.asarray(value).reshape(src.shape))
                buf = Buffer(self._unique(src.name), src.dtype, src.shape, kind="const", data=data)
                self.storage[src.output(0).key] = (buf, tuple(const(0) for _ in src.shape))

    # --- expressions --------------------------------------------------------------------------
    def _to_buffers(self, e: PrimExpr) -> PrimExpr:
        def convert(node: PrimExpr) -> PrimExpr | None:
            if isinstance(node, E.TensorLoad):
                entry = self.storage.get(node.tensor.key)
                if entry is None:
                    raise ScheduleError(f"tensor {node.tensor.name} has no storage (is it computed "
                                        "inline inside a reduction it feeds?)")
                buf, mins = entry
                return BufferLoad(buf, buf.flat_index(node.indices, mins), node.dtype)
            return None

        return transform(e, convert)

    def _coords(self, info: StageBounds) -> dict[Var, PrimExpr]:
        op = info.op
        return {iv.var: info.coords[id(iv)] for iv in (*op.axis, *op.reduce_axis)}

    def _store_index(self, info: StageBounds, k: int) -> tuple[Buffer, PrimExpr]:
        op = info.op
        buf, mins = self.storage[op.output(k).key]
        return buf, buf.flat_index(tuple(info.coords[id(iv)] for iv in op.axis), mins)

    # --- statements ---------------------------------------------------------------------------
    def run(self, name: str, attrs: dict[str, Any]) -> PrimFunc:
        parts: list[Stmt] = []
        for stage in self.sch.stages:
            info = self.bounds.info.get(id(stage))
            if info is not None and stage.attach_type == "root":
                parts.append(self._stage_stmt(info))
        body: Stmt = Seq(tuple(parts))
        for info in reversed(list(self.bounds.info.values())):
            if info.stage.attach_type == "root":
                for buf in reversed(self.temps.get(id(info.stage), [])):
                    body = Allocate(buf, body)
        body = _auto_unroll(_unswitch_guards(_simplify_stmt(body, self.simp), self.simp))
        return PrimFunc(name, self.params, body, dict(attrs))

    def _guard(self, conds: list[PrimExpr], body: Stmt) -> Stmt | None:
        keep: list[PrimExpr] = []
        seen: set[Any] = set()
        for c in conds:
            s = self.simp.simplify(c)
            if isinstance(s, E.IntImm):
                if not s.value:
                    return None
                continue
            key = self.simp.key(s)
            if key not in seen:
                seen.add(key)
                keep.append(s)
        if not keep:
            return body
        cond = keep[0]
        for c in keep[1:]:
            cond = E.logical_and(cond, c)
        return IfThenElse(cond, body)

    def _stage_stmt(self, info: StageBounds) -> Stmt:
        stage, op = info.stage, info.op
        leaves = stage.leaf_iter_vars
        coords = self._coords(info)
        spatial_guard: list[PrimExpr] = []
        for d, iv in enumerate(op.axis):
            ext = info.region[d][1]
            spatial_guard.append(info.offsets[id(iv)] < ext)
            if stage.attach_type == "scope":
                full_lo = iv.dom.min if iv.dom is not None else const(0)
                spatial_guard.append(info.coords[id(iv)] >= full_lo)
                spatial_guard.append(info.coords[id(iv)] < full_lo + op.shape[d])
        inner_reduce_guard: list[PrimExpr] = []
        roots = {id(iv) for iv in (*op.axis, *op.reduce_axis)}
        for rel in stage.relations:  # a split parent inside another split may overrun too
            if isinstance(rel, SplitRelation) and id(rel.parent) not in roots:
                check = info.offsets[id(rel.parent)] < info.extents[id(rel.parent)]
                if rel.parent.iter_type == COMM_REDUCE:
                    inner_reduce_guard.append(check)
                else:
                    spatial_guard.append(check)
        if not op.is_reduction:
            stores = []
            for k, body in enumerate(info.bodies):
                buf, idx = self._store_index(info, k)
                stores.append(Store(buf, idx, self._to_buffers(substitute(body, coords))))
            inner = self._guard(spatial_guard, Seq(tuple(stores)))
            return self._nest(info, 0, len(leaves), inner or Seq(()))
        first_red = next((i for i, iv in enumerate(leaves) if iv.iter_type == COMM_REDUCE),
                         len(leaves))
        self._check_reduce_leaves(stage, leaves[first_red:])
        init, update = self._reduce_stmts(info, coords)
        reduce_guard = [info.offsets[id(iv)] < info.extents[id(iv)] for iv in op.reduce_axis]
        reduce_guard += inner_reduce_guard
        where = [self._to_buffers(substitute(b.condition, coords)) for b in info.bodies[:1]
                 if isinstance(b, E.Reduce)]
        thread_leaves = [iv for iv in leaves[first_red:]
                         if stage.annotation_of(iv).startswith("threadIdx")]
        if thread_leaves:
            return self._nest(info, 0, first_red, self._thread_reduction(
                info, coords, first_red, thread_leaves, spatial_guard,
                reduce_guard + where))
        init_stmt = self._guard(spatial_guard, init)
        update_stmt = self._guard(spatial_guard + reduce_guard + where, update)
        parts: list[Stmt] = []
        if init_stmt is not None:
            for iv in reversed([x for x in leaves[first_red:] if x.iter_type != COMM_REDUCE]):
                init_stmt = self._loop(info, iv, init_stmt)
            parts.append(init_stmt)
        skips = self._padding_skips(info, coords, first_red)
        parts.append(self._nest(info, first_red, len(leaves), update_stmt or Seq(()), skips))
        return self._nest(info, 0, first_red, Seq(tuple(parts)))

    def _thread_reduction(self, info: StageBounds, coords: dict[Var, PrimExpr], first_red: int,
                          thread_leaves: list[IterVar], spatial_guard: list[PrimExpr],
                          reduce_guard: list[PrimExpr]) -> Stmt:
        """A reduction whose loop over one of its axes is bound to a GPU thread index: each
        thread of the block reduces its share into a register, the block combines the shares
        in shared memory (a tree, halving the active threads each step), and thread 0 stores.

        Every step is its own loop over the thread index, so read in order (as the loop-IR
        evaluator does) it computes the same as the threads do together; the CUDA generator
        fences each step's shared stores with barriers (TVM's cross-thread ``allreduce``).
        """
        stage, op = info.stage, info.op
        leaves = stage.leaf_iter_vars
        reduces = [b for b in info.bodies if isinstance(b, E.Reduce)]
        if len(thread_leaves) != 1 or len(reduces) != 1 or len(reduces[0].source) != 1 \
                or any(iv.iter_type != COMM_REDUCE for iv in leaves[first_red:]):
            raise ScheduleError(f"stage {stage.name}: Kiln lowers a cross-thread reduction only "
                                "for one reduction of one value, with one reduction loop bound "
                                "to a thread index and no spatial loop inside its reduction loops")
        leaf = thread_leaves[0]
        kind, extent = stage.annotation_of(leaf), info.extents[id(leaf)]
        combiner = reduces[0].combiner
        dtype = op.output_dtype(0)

        def combine(a: PrimExpr, b: PrimExpr) -> PrimExpr:
            return substitute(combiner.result[0], {combiner.lhs[0]: a, combiner.rhs[0]: b})

        def thread_loop(name: str, body_of: Callable[[Var], Stmt]) -> For:
            var = Var(self._unique(f"{name}_{kind.replace('.', '_')}"), "int32")
            self.simp.ranges[var] = (0, extent - 1)
            return For(var, extent, kind, body_of(var))

        partial = Buffer(self._unique(f"{op.name}_partial"), dtype, (1,), kind="temp",
                         scope="local")
        shares = Buffer(self._unique(f"{op.name}_shares"), dtype, (extent,), kind="temp",
                        scope="shared")
        mine = BufferLoad(partial, const(0), dtype)
        source = self._to_buffers(substitute(reduces[0].source[0], coords))
        body: Stmt = self._guard(spatial_guard + reduce_guard,
                                 Store(partial, const(0), combine(mine, source))) or Seq(())
        for iv in reversed(leaves[first_red:]):
            if iv is not leaf:
                body = self._loop(info, iv, body)
        own = info.loop_vars[id(leaf)]
        fill = For(own, extent, kind, Allocate(partial, Seq((
            Store(partial, const(0), combiner.identity[0]), body, Store(shares, own, mine)))))
        strides = [1 << k for k in range((extent - 1).bit_length() - 1, -1, -1)]  # ..., 4, 2, 1

        def step(t: Var, s: int) -> Stmt:
            cond = t < s if s * 2 <= extent else E.logical_and(t < s, t + s < extent)
            return IfThenElse(cond, Store(shares, t, combine(BufferLoad(shares, t, dtype),
                                                             BufferLoad(shares, t + s, dtype))))

        steps = [thread_loop("step", functools.partial(step, s=s)) for s in strides]
        buf, idx = self._store_index(info, 0)
        first = reduces[0].init[0] if reduces[0].init else combiner.identity[0]
        result = combine(self._to_buffers(substitute(first, coords)),
                         BufferLoad(shares, const(0), dtype))

        def store(t: Var) -> Stmt:
            return self._guard([E.compare("eq", t, 0), *spatial_guard],
                               Store(buf, idx, result)) or Seq(())

        return Allocate(shares, Seq((fill, *steps, thread_loop("store", store))))

    def _padding_skips(self, info: StageBounds, coords: dict[Var, PrimExpr],
                       first_red: int) -> dict[int, list[PrimExpr]]:
        """Conditions under which a sum's term can be nonzero, by the reduction loop whose body
        they guard (see the module docstring).

        A factor of the term that reads ``if_then_else(inside, x, 0)`` (a padding stage, or the
        same expression inlined) is zero unless ``inside`` holds; each conjunct of ``inside``
        that depends on a reduction loop and on no loop inside it guards that loop's body.
        """
        first = info.bodies[0]
        if not isinstance(first, E.Reduce) or len(first.source) != 1 \
                or not _is_sum(first.combiner):
            return {}
        level = {info.loop_vars[id(iv)]: k for k, iv in enumerate(info.stage.leaf_iter_vars)}
        skips: dict[int, list[PrimExpr]] = {}
        for inside in _zero_unless(first.source[0]):
            for conjunct in E.conjuncts(self.simp.simplify(substitute(inside, coords))):
                deepest = max((level.get(v, -1) for v in vars_in(conjunct)), default=-1)
                leaf = info.stage.leaf_iter_vars[deepest] if deepest >= first_red else None
                if leaf is not None and leaf.iter_type == COMM_REDUCE \
                        and info.stage.annotation_of(leaf) != "vectorize" \
                        and not self.attached.get((id(info.stage), id(leaf))):
                    skips.setdefault(deepest, []).append(conjunct)
        return skips

    def _reduce_stmts(self, info: StageBounds, coords: dict[Var, PrimExpr]) -> tuple[Stmt, Stmt]:
        reduces = [b for b in info.bodies if isinstance(b, E.Reduce)]
        first = reduces[0]
        combiner = first.combiner
        targets = [self._store_index(info, k) for k in range(len(reduces))]
        inits = [substitute(r.init[k], coords) if r.init else combiner.identity[k]
                 for k, r in enumerate(reduces)]
        init = Seq(tuple(Store(buf, idx, self._to_buffers(v))
                         for (buf, idx), v in zip(targets, inits)))
        sources = [self._to_buffers(substitute(s, coords)) for s in first.source]
        if len(reduces) == 1:
            buf, idx = targets[0]
            old = BufferLoad(buf, idx, buf.dtype)
            value = substitute(combiner.result[0], {combiner.lhs[0]: old, combiner.rhs[0]: sources[0]})
            return init, Store(buf, idx, value)
        olds = [Var(f"{buf.name}_prev", buf.dtype) for buf, _ in targets]
        mapping: dict[Var, PrimExpr] = dict(zip(combiner.lhs, olds))
        mapping.update(zip(combiner.rhs, sources))
        update: Stmt = Seq(tuple(Store(buf, idx, substitute(r, mapping))
                                 for (buf, idx), r in zip(targets, combiner.result)))
        for var, (buf, idx) in reversed(list(zip(olds, targets))):
            update = LetStmt(var, BufferLoad(buf, idx, buf.dtype), update)
        return init, update

    def _check_reduce_leaves(self, stage: Stage, leaves: Sequence[IterVar]) -> None:
        spatial_roots = {id(iv) for iv in stage.op.axis} if isinstance(stage.op, ComputeOp) \
            else set()
        for leaf in leaves:
            if leaf.iter_type == COMM_REDUCE and _derives_from(stage, leaf) & spatial_roots:
                raise ScheduleError(f"stage {stage.name}: loop {leaf.var.name} fuses spatial and "
                                    "reduction axes, which cannot be lowered")
            if leaf.iter_type == COMM_REDUCE and stage.annotation_of(leaf).startswith("blockIdx"):
                raise ScheduleError(f"stage {stage.name}: reduction loop {leaf.var.name} is bound "
                                    f"to {stage.annotation_of(leaf)}; blocks cannot combine "
                                    "their results")

    def _loop(self, info: StageBounds, iv: IterVar, body: Stmt) -> Stmt:
        stage = info.stage
        kind = _KIND.get(stage.annotation_of(iv), "serial")
        pragmas = tuple(stage.pragmas.get(id(iv), ()))
        return For(info.loop_vars[id(iv)], info.extents[id(iv)], kind, body, pragmas)

    def _nest(self, info: StageBounds, start: int, end: int, body: Stmt,
              guards: dict[int, list[PrimExpr]] | None = None) -> Stmt:
        leaves = info.stage.leaf_iter_vars
        for level in range(end - 1, start - 1, -1):
            iv = leaves[level]
            inner = body
            if guards and level in guards:
                inner = self._guard(guards[level], inner) or Seq(())
            attached = self.attached.get((id(info.stage), id(iv)), [])
            if attached:
                inner = Seq((*[self._stage_stmt(a) for a in attached], inner))
                for a in reversed(attached):
                    for buf in reversed(self.temps.get(id(a.stage), [])):
                        inner = Allocate(buf, inner)
            body = self._loop(info, iv, inner)
        return body


def _is_sum(combiner: CommReducer) -> bool:
    """Whether a reducer is ``x + y`` starting at 0."""
    result, identity = combiner.result, combiner.identity
    if len(result) != 1 or not isinstance(result[0], E.Binary) or result[0].kind != "add":
        return False
    operands = {id(result[0].a), id(result[0].b)}
    return operands == {id(combiner.lhs[0]), id(combiner.rhs[0])} \
        and isinstance(identity[0], (E.IntImm, E.FloatImm)) and identity[0].value == 0


def _is_zero(e: PrimExpr) -> bool:
    while isinstance(e, E.Cast):
        e = e.value
    return isinstance(e, (E.IntImm, E.FloatImm)) and e.value == 0


def _zero_unless(term: PrimExpr) -> list[PrimExpr]:
    """Conditions (in the term's variables) outside which a product ``term`` is zero: those of
    its factors that are ``if_then_else(c, x, 0)``, written out or read from a padding stage."""
    while isinstance(term, E.Cast):
        term = term.value
    if isinstance(term, E.Binary) and term.kind == "mul":
        return _zero_unless(term.a) + _zero_unless(term.b)
    if isinstance(term, E.TensorLoad) and isinstance(term.tensor.op, ComputeOp) \
            and not term.tensor.op.is_reduction:
        op = term.tensor.op
        body = op.body[term.tensor.value_index]
        if isinstance(body, E.Call) and body.name == "if_then_else" and _is_zero(body.args[2]):
            return [substitute(body.args[0], {iv.var: i for iv, i in zip(op.axis, term.indices)})]
        return []
    if isinstance(term, E.Call) and term.name == "if_then_else" and _is_zero(term.args[2]):
        return [term.args[0]]
    return []


def _derives_from(stage: Stage, leaf: IterVar) -> set[int]:
    """Root axes a loop is made of."""
    found = {id(leaf)}
    for rel in reversed(stage.relations):
        if isinstance(rel, SplitRelation) and (id(rel.outer) in found or id(rel.inner) in found):
            found.add(id(rel.parent))
        elif isinstance(rel, FuseRelation) and id(rel.fused) in found:
            found.update((id(rel.outer), id(rel.inner)))
    return found


def _aligned_strides(stage: Stage, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides, padded where ``storage_align`` asks (TVM's rule)."""
    strides: list[int] = []
    stride = 1
    for dim in range(len(shape) - 1, -1, -1):
        if dim in stage.storage_align:
            factor, offset = stage.storage_align[dim]
            if factor:
                stride += (factor + offset - stride % factor) % factor
        strides.append(stride)
        stride *= shape[dim]
    return tuple(reversed(strides))


def _simplify_stmt(s: Stmt, simp: Simplifier) -> Stmt:
    """Simplify every expression; drop branches decided by the loop ranges, and empty loops."""
    s = map_stmt_exprs(s, simp.simplify)
    return _prune(s)


def _prune(s: Stmt) -> Stmt:
    if isinstance(s, IfThenElse):
        then = _prune(s.then_case)
        other = _prune(s.else_case) if s.else_case is not None else None
        if isinstance(s.condition, E.IntImm):
            chosen = then if s.condition.value else other
            return chosen if chosen is not None else Seq(())
        return IfThenElse(s.condition, then, other)
    if isinstance(s, Seq):
        flat: list[Stmt] = []
        for x in s.stmts:
            p = _prune(x)
            if isinstance(p, Seq):
                flat.extend(p.stmts)
            else:
                flat.append(p)
        return flat[0] if len(flat) == 1 else Seq(tuple(flat))
    if isinstance(s, For):
        body = _prune(s.body)
        if s.extent == 0 or (isinstance(body, Seq) and not body.stmts):
            return Seq(())
        if s.extent == 1:  # its variable was simplified to 0 everywhere
            return body
        return For(s.var, s.extent, s.kind, body, s.pragmas)
    if isinstance(s, LetStmt):
        return LetStmt(s.var, s.value, _prune(s.body))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _prune(s.body))
    return s


# --- auto unroll ---------------------------------------------------------------------------------

def _steps(s: Stmt) -> int:
    if isinstance(s, For):
        return s.extent * _steps(s.body)
    if isinstance(s, Seq):
        return sum(_steps(x) for x in s.stmts)
    if isinstance(s, IfThenElse):
        return _steps(s.then_case) + (_steps(s.else_case) if s.else_case is not None else 0)
    if isinstance(s, (LetStmt, Allocate)):
        return _steps(s.body)
    return 1


# Most instances of a guard over the variables of the unrolled loops it is in that unswitching
# tests (a register tile's rows x columns).
_UNSWITCH_MAX_INSTANCES = 64


def _invariant_guards(body: Stmt, simp: Simplifier) -> dict[Any, list[PrimExpr]]:
    """The guards (``if`` without ``else``) of ``body`` that nothing in ``body`` changes but its
    unrolled loops (whose every value is known): their conditions by structural key, each mapped
    to its instances for every value of those loops."""
    unrolled: dict[Var, int] = {}
    inner: set[Var] = set()
    for n in walk_stmts(body):
        if isinstance(n, For) and n.kind == "unrolled":
            unrolled[n.var] = max(n.extent, unrolled.get(n.var, 0))
        elif isinstance(n, (For, LetStmt)):
            inner.add(n.var)
    unrolled = {v: e for v, e in unrolled.items() if v not in inner}
    found: dict[Any, list[PrimExpr]] = {}
    for node in walk_stmts(body):
        if not isinstance(node, IfThenElse) or node.else_case is not None:
            continue
        cond = node.condition
        names = vars_in(cond)
        if names & inner or any(isinstance(n, (BufferLoad, E.TensorLoad)) for n in post_order(cond)):
            continue
        key = simp.key(cond)
        if key in found:
            continue
        loops = [v for v in names if v in unrolled]
        if not loops or np.prod([unrolled[v] for v in loops]) > _UNSWITCH_MAX_INSTANCES:
            continue  # only a register tile's bound checks
        found[key] = [simp.simplify(substitute(cond, {v: const(int(x), v.dtype)
                                                      for v, x in zip(loops, values)}))
                      for values in np.ndindex(*[unrolled[v] for v in loops])]
    return found


def _unswitch_guards(s: Stmt, simp: Simplifier) -> Stmt:
    """Loop unswitching of a register tile's bound checks: the body of a loop marked
    ``unswitch_tile_guards`` whose guards test only what the body does not change but its
    unrolled loops (the rows of a tile past the matrix) runs as ``if (every such guard holds for
    every row) {body without them} else {body}``, so that whole tiles run code without the checks
    and only the last, partial one pays for them. GCC unswitches only small innermost loops: a
    6-row tile of a 100-row product with a GELU epilogue, 2 rows checked in the last tile, made
    its code for every tile slow (AVX2 build: 834 us, against 446 us for 102 rows). Marked by
    the GEMM template only: unswitching convolution tiles made ResNet-50 4-9% slower and its
    C code 60% larger."""
    if isinstance(s, For) and any(key == UNSWITCH_TILE_GUARDS for key, _ in s.pragmas):
        guards = _invariant_guards(s.body, simp)
        if guards:
            # the unchecked copy: the guards' conditions taken as true, then pruned away
            true = const(True, "bool")
            fast = _prune(map_stmt_exprs(s.body, lambda e: true if simp.key(e) in guards else e))
            tests = {simp.key(c): c for instances in guards.values() for c in instances}
            cond = functools.reduce(E.logical_and, tests.values())
            return For(s.var, s.extent, s.kind, IfThenElse(cond, fast, s.body), s.pragmas)
    return map_child_stmts(s, lambda x: _unswitch_guards(x, simp))


def _auto_unroll(s: Stmt, limit: int = 0) -> Stmt:
    """Unroll serial loops whose whole nest takes at most ``auto_unroll_max_step`` steps."""
    if isinstance(s, For):
        for key, value in s.pragmas:
            if key == "auto_unroll_max_step":
                limit = int(value)
        body = _auto_unroll(s.body, limit)
        kind = s.kind
        if kind == "serial" and limit > 0 and s.extent * _steps(body) <= limit:
            kind = "unrolled"
        return For(s.var, s.extent, kind, body, s.pragmas)
    return map_child_stmts(s, lambda x: _auto_unroll(x, limit))
