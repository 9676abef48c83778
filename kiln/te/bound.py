"""Bound inference: which region of each stage must be computed, and the range of every loop.

A stage computed at the root covers its whole domain. A stage computed at a loop of another
stage (``compute_at``) covers the union of the regions its consumers read during one iteration
of that loop: loops enclosing the attach point stay symbolic (the region's minimum is an
expression of them), all other loops range over their extents. A ``shared``-scope stage (GPU
shared memory) is one buffer for all the threads of a block, so the enclosing loops bound to
``threadIdx`` or ``vthread`` range over their extents too (TVM's rule); every other stage
computed inside a thread loop is per thread. Regions have constant extents
(an upper bound when the exact extent varies), so their buffers have static sizes.

:class:`BoundInference` computes, for every computed stage, fresh loop variables, loop extents,
the coordinates of its axes as expressions of its loops, and its region. Stages are processed
consumers first.

Inlining has a size budget: an inlined stage is copied into every expression that reads it, so
chains of stages that read their producer several times (``where``, ``clip``, index arithmetic
of reshapes) grow exponentially. :func:`inline_costs` measures a stage's expression as printed
(a sub-expression used k times counts k times) with its inlined producers expanded, and
:func:`limit_inlining` computes at the root every inlined stage that would exceed
:data:`INLINE_MAX_NODES` (the default schedule applies the same rule when it chooses what to
inline).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kiln.te import expr as E
from kiln.te.expr import PrimExpr, Var, const
from kiln.te.loop_state import clean_name
from kiln.te.schedule import (
    FuseRelation,
    Schedule,
    ScheduleError,
    SplitRelation,
    Stage,
    pass_down_domain,
    pass_up_index,
)
from kiln.te.simplify import Simplifier
from kiln.te.tensor import COMM_REDUCE, ComputeOp, IterVar
from kiln.te.visit import children, post_order, substitute, transform, vars_in

if TYPE_CHECKING:
    from kiln.te.dag import ComputeDAG
    from kiln.te.loop_state import State

__all__ = [
    "INLINE_MAX_NODES",
    "BoundInference",
    "InlineCost",
    "StageBounds",
    "infer_bound_state",
    "inline_costs",
    "is_reduce_leaf",
    "limit_inlining",
    "resolve_inlined",
    "resolve_leaf",
    "sym_bound",
]


@dataclass
class StageBounds:
    """Bound-inference results for one computed stage."""

    stage: Stage
    index: int
    bodies: tuple[PrimExpr, ...]
    loop_vars: dict[int, Var] = field(default_factory=dict)  # id(leaf IterVar) -> loop variable
    extents: dict[int, int] = field(default_factory=dict)  # id(IterVar) -> extent
    coords: dict[int, PrimExpr] = field(default_factory=dict)  # id(root IterVar) -> coordinate
    # id(IterVar) -> offset from its minimum, for every loop and axis (split parents included)
    offsets: dict[int, PrimExpr] = field(default_factory=dict)
    region: list[tuple[PrimExpr, int]] = field(default_factory=list)  # per spatial axis
    enclosing: list[Var] = field(default_factory=list)  # loops around the stage's own nest

    @property
    def op(self) -> ComputeOp:
        """The stage's compute operation."""
        op = self.stage.op
        assert isinstance(op, ComputeOp)
        return op


def resolve_inlined(sch: Schedule) -> dict[int, tuple[PrimExpr, ...]]:
    """Bodies of every compute stage with inlined stages substituted (keyed by ``id(stage)``)."""
    resolved: dict[int, tuple[PrimExpr, ...]] = {}
    inline_of: dict[tuple[int, int], tuple[ComputeOp, int]] = {}
    for stage in sch.stages:
        op = stage.op
        if not isinstance(op, ComputeOp):
            continue

        def expand(node: PrimExpr) -> PrimExpr | None:
            if isinstance(node, E.TensorLoad) and node.tensor.key in inline_of:
                src_op, idx = inline_of[node.tensor.key]
                mapping = {iv.var: i for iv, i in zip(src_op.axis, node.indices)}
                return substitute(resolved[id(src_op)][idx], mapping)
            return None

        bodies = tuple(transform(b, expand) for b in op.body)
        resolved[id(stage)] = bodies
        if stage.attach_type == "inline":
            if op.is_reduction:
                raise ScheduleError(f"stage {op.name} is a reduction and cannot be inlined")
            if stage.is_output:
                raise ScheduleError(f"stage {op.name} is an output and cannot be inlined")
            resolved[id(op)] = bodies
            for i in range(op.num_outputs):
                inline_of[op.output(i).key] = (op, i)
    return resolved


# Largest expression (in nodes, as printed) an inlined stage may expand to; beyond it the stage
# gets its own buffer. Fused chains of real models stay far below (a GELU epilogue is ~20).
INLINE_MAX_NODES = 1024


@dataclass(frozen=True)
class InlineCost:
    """Size of one output expression of a stage with its inlined producers expanded.

    ``size`` counts nodes as printed (shared sub-expressions once per use); ``uses[d]`` is how
    often the ``d``-th spatial axis variable occurs, which is how often an index expression
    replaces it when the stage is inlined.
    """

    size: int
    uses: tuple[int, ...]


def inline_costs(op: ComputeOp, inlined: Mapping[tuple[int, int], InlineCost]) -> list[InlineCost]:
    """The cost of each output expression of ``op`` (see :class:`InlineCost`).

    Parameters
    ----------
    op : ComputeOp
        The stage's operation.
    inlined : mapping
        Costs of the inlined tensors ``op`` may read, by tensor key.

    Returns
    -------
    list of InlineCost
        One per output of ``op``. Sizes are exact Python integers, however large.
    """
    axes = {id(iv.var): k for k, iv in enumerate(op.axis)}
    zero = (0,) * len(op.axis)
    memo: dict[int, tuple[int, tuple[int, ...]]] = {}
    for body in op.body:
        for node in post_order(body):
            if id(node) in memo:
                continue
            kids = [memo[id(k)] for k in children(node)]
            if isinstance(node, Var):
                k = axes.get(id(node))
                memo[id(node)] = (1, zero if k is None else tuple(int(j == k) for j in
                                                                 range(len(zero))))
            elif isinstance(node, E.TensorLoad) and node.tensor.key in inlined:
                cost = inlined[node.tensor.key]
                size = cost.size + sum(n * (kid[0] - 1) for n, kid in zip(cost.uses, kids))
                uses = tuple(sum(n * kid[1][j] for n, kid in zip(cost.uses, kids))
                             for j in range(len(zero)))
                memo[id(node)] = (size, uses)
            else:
                memo[id(node)] = (1 + sum(kid[0] for kid in kids),
                                  tuple(sum(kid[1][j] for kid in kids) for j in range(len(zero))))
    return [InlineCost(*memo[id(body)]) for body in op.body]


def limit_inlining(sch: Schedule, max_nodes: int = INLINE_MAX_NODES) -> list[Stage]:
    """Compute at the root every inlined stage whose expansion exceeds ``max_nodes``.

    Stages are taken producers first, so each decision sees its producers' final placement.

    Returns
    -------
    list of Stage
        The stages that were moved out of line (their schedule is changed in place).
    """
    inlined: dict[tuple[int, int], InlineCost] = {}
    moved = []
    for stage in sch.stages:
        op = stage.op
        if stage.attach_type != "inline" or not isinstance(op, ComputeOp):
            continue
        costs = inline_costs(op, inlined)
        if max(c.size for c in costs) > max_nodes:
            stage.compute_root()
            moved.append(stage)
        else:
            inlined.update({op.output(k).key: c for k, c in enumerate(costs)})
    return moved


def sym_bound(e: PrimExpr, relaxed: set[Var], simp: Simplifier) -> tuple[PrimExpr, PrimExpr] | None:
    """Lower and upper bounds of ``e`` over the relaxed variables' ranges (others stay symbolic).

    ``simp.ranges`` must hold the range of every relaxed variable; ``None`` if no bound is found.
    """
    lin = simp.linear(simp.simplify(e))
    lo: PrimExpr = const(lin.const, e.dtype)
    hi: PrimExpr = const(lin.const, e.dtype)
    for coef, atom in lin.terms.values():
        if not (vars_in(atom) & relaxed):
            part: tuple[PrimExpr, PrimExpr] | None = (atom, atom)
        elif isinstance(atom, Var):
            r = simp.ranges[atom]
            part = (const(r[0], e.dtype), const(r[1], e.dtype))
        else:
            part = _atom_bound(atom, relaxed, simp)
        if part is None:
            return None
        a, b = part if coef > 0 else (part[1], part[0])
        lo = lo + a * coef
        hi = hi + b * coef
    return simp.simplify(lo), simp.simplify(hi)


def _atom_bound(atom: PrimExpr, relaxed: set[Var],
                simp: Simplifier) -> tuple[PrimExpr, PrimExpr] | None:
    if isinstance(atom, E.Binary) and isinstance(atom.b, E.IntImm) and atom.b.value > 0 \
            and atom.kind in ("floordiv", "floormod"):
        inner = sym_bound(atom.a, relaxed, simp)
        c = atom.b.value
        if inner is not None:
            xl, xh = inner
            if atom.kind == "floordiv":
                return (simp.simplify(E.binary("floordiv", xl, c)),
                        simp.simplify(E.binary("floordiv", xh, c)))
            same = simp.simplify(E.binary("floordiv", xh, c) - E.binary("floordiv", xl, c))
            if isinstance(same, E.IntImm) and same.value == 0:
                return (simp.simplify(E.binary("floormod", xl, c)),
                        simp.simplify(E.binary("floormod", xh, c)))
            return const(0, atom.dtype), const(c - 1, atom.dtype)
    if isinstance(atom, E.Binary) and atom.kind in ("min", "max"):
        a = sym_bound(atom.a, relaxed, simp)
        b = sym_bound(atom.b, relaxed, simp)
        if a is not None and b is not None:
            return (simp.simplify(E.binary(atom.kind, a[0], b[0])),
                    simp.simplify(E.binary(atom.kind, a[1], b[1])))
    lo, hi = simp.bound(atom)
    if lo is None or hi is None:
        return None
    return const(lo, atom.dtype), const(hi, atom.dtype)


class BoundInference:
    """Loop variables, extents, coordinates and regions of every computed stage of a schedule."""

    def __init__(self, sch: Schedule):
        self.sch = sch
        self.resolved = resolve_inlined(sch)
        self.info: dict[int, StageBounds] = {}
        self.ranges: dict[Var, tuple[int, int]] = {}
        self.block_threads: set[Var] = set()  # loop variables bound to threadIdx.* or vthread
        self._names: dict[str, int] = {}
        computed = [(i, s) for i, s in enumerate(sch.stages)
                    if isinstance(s.op, ComputeOp) and s.attach_type != "inline"]
        for i, stage in computed:
            self.info[id(stage)] = StageBounds(stage, i, self.resolved[id(stage)])
        self.consumers = self._consumers(computed)
        for _, stage in reversed(computed):
            self._infer(self.info[id(stage)])

    def _consumers(self, computed: Sequence[tuple[int, Stage]]) -> dict[int, list[StageBounds]]:
        producer_of: dict[tuple[int, int], Stage] = {}
        for _, stage in computed:
            for k in range(stage.op.num_outputs):
                producer_of[stage.op.output(k).key] = stage
        out: dict[int, list[StageBounds]] = {}
        for _, stage in computed:
            seen: set[int] = set()
            for body in self.resolved[id(stage)]:
                for node in post_order(body):
                    if isinstance(node, E.TensorLoad) and node.tensor.key in producer_of:
                        prod = producer_of[node.tensor.key]
                        if id(prod) not in seen and prod is not stage:
                            seen.add(id(prod))
                            out.setdefault(id(prod), []).append(self.info[id(stage)])
        return out

    def fresh_var(self, name: str) -> Var:
        """A loop variable with a name unique in the kernel."""
        base = clean_name(name)
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return Var(base if n == 0 else f"{base}_{n}", "int32")

    # --- per stage --------------------------------------------------------------------------
    def _infer(self, info: StageBounds) -> None:
        stage, op = info.stage, info.op
        info.enclosing = self.enclosing_vars(stage.attach_stage, stage.attach_ivar) \
            if stage.attach_type == "scope" else []
        full = [(iv.dom.min if iv.dom is not None else const(0), op.shape[d])
                for d, iv in enumerate(op.axis)]
        if stage.attach_type == "scope" and not stage.is_output:
            info.region = self._region(info, full)
        else:
            if stage.attach_type == "scope":
                raise ScheduleError(f"output stage {op.name} cannot be computed at another stage")
            info.region = full
        root_dom: dict[int, tuple[PrimExpr, int]] = {}
        for iv, (lo, ext) in zip(op.axis, info.region):
            root_dom[id(iv)] = (lo, ext)
        for iv in op.reduce_axis:
            assert iv.dom is not None
            if not isinstance(iv.dom.extent, E.IntImm):
                raise ScheduleError(f"stage {op.name}: reduction axis {iv.var.name} has a "
                                    "non-constant extent")
            root_dom[id(iv)] = (iv.dom.min, iv.dom.extent.value)
        dom = pass_down_domain(stage, root_dom)
        info.extents = {k: v[1] for k, v in dom.items()}
        values: dict[int, PrimExpr] = {}
        for iv in stage.leaf_iter_vars:
            var = self.fresh_var(iv.var.name)
            info.loop_vars[id(iv)] = var
            ext = dom[id(iv)][1]
            self.ranges[var] = (0, max(ext - 1, 0))
            if stage.annotation_of(iv).startswith(("threadIdx", "vthread")):
                self.block_threads.add(var)
            values[id(iv)] = var
        rel = pass_up_index(stage, dom, values)
        info.offsets = dict(rel)
        for iv in (*op.axis, *op.reduce_axis):
            if id(iv) not in rel:
                raise ScheduleError(f"stage {op.name}: axis {iv.var.name} is not reached by its "
                                    "loops (a split or fuse lost it)")
            info.coords[id(iv)] = rel[id(iv)] + root_dom[id(iv)][0]

    def enclosing_vars(self, target: Stage | None, ivar: IterVar | None) -> list[Var]:
        """Loop variables around attach point ``ivar`` of ``target`` (outermost first)."""
        if target is None or ivar is None:
            return []
        tinfo = self.info.get(id(target))
        if tinfo is None:
            raise ScheduleError(f"stage {target.name} is computed inline or is a placeholder; "
                                "nothing can be computed at its loops")
        ivar = resolve_leaf(target, ivar)
        outer = self.enclosing_vars(target.attach_stage, target.attach_ivar) \
            if target.attach_type == "scope" else []
        loops = []
        for leaf in target.leaf_iter_vars:
            var = tinfo.loop_vars.get(id(leaf))
            if var is None:
                raise ScheduleError(f"stage {target.name} is computed before its producers' "
                                    "bounds are known; compute_at targets must be consumers")
            loops.append(var)
            if leaf is ivar:
                return outer + loops
        raise ScheduleError(f"{ivar.var.name} is not a loop of stage {target.name}")

    def _region(self, info: StageBounds,
                full: list[tuple[PrimExpr, int]]) -> list[tuple[PrimExpr, int]]:
        op = info.op
        consumers = self.consumers.get(id(info.stage), [])
        if not consumers:
            raise ScheduleError(f"stage {op.name} is computed at {_attach_name(info)} "
                                "but nothing reads it")
        fixed = set(info.enclosing)
        if info.stage.scope == "shared":  # one buffer for the block: every thread's region
            fixed -= self.block_threads
        relaxed = {v for v in self.ranges if v not in fixed}
        simp = Simplifier(self.ranges)
        per_dim: list[list[tuple[PrimExpr, PrimExpr]]] = [[] for _ in op.axis]
        outputs = {op.output(k).key for k in range(op.num_outputs)}
        for cons in consumers:
            self._check_visible(info, cons)
            mapping = {iv.var: cons.coords[id(iv)] for iv in (*cons.op.axis, *cons.op.reduce_axis)}
            for body in cons.bodies:
                for node in post_order(body):
                    if not (isinstance(node, E.TensorLoad) and node.tensor.key in outputs):
                        continue
                    for d, idx in enumerate(node.indices):
                        b = sym_bound(substitute(idx, mapping), relaxed, simp)
                        if b is None:
                            per_dim[d].append((full[d][0], full[d][0] + (full[d][1] - 1)))
                        else:
                            per_dim[d].append(b)
        return [self._union(cands, full[d], simp) for d, cands in enumerate(per_dim)]

    def _check_visible(self, info: StageBounds, cons: StageBounds) -> None:
        """The consumer must run inside the producer's attach loop."""
        if not set(info.enclosing) <= set(cons.enclosing) | set(cons.loop_vars.values()):
            raise ScheduleError(f"stage {info.op.name} is computed at "
                                f"{_attach_name(info)} but {cons.op.name} reads it "
                                "outside that loop")

    @staticmethod
    def _union(cands: list[tuple[PrimExpr, PrimExpr]], full: tuple[PrimExpr, int],
               simp: Simplifier) -> tuple[PrimExpr, int]:
        if not cands:
            return full
        lows = [c[0] for c in cands]
        lo = None
        for a in lows:
            if all(_nonneg(simp, b, a) for b in lows):
                lo = a
                break
        if lo is None:
            lo = lows[0]
            for b in lows[1:]:
                lo = simp.simplify(E.binary("min", lo, b))
        ext = 0
        for _, h in cands:
            bound = simp.bound(simp.simplify(h - lo))[1]
            if bound is None:
                return full
            ext = max(ext, bound + 1)
        if ext >= full[1]:
            return full
        return lo, max(ext, 1)


def _attach_name(info: StageBounds) -> str:
    """The name of the stage ``info``'s stage is computed at (for messages)."""
    at = info.stage.attach_stage
    return at.name if at is not None else "<root>"


def _nonneg(simp: Simplifier, b: PrimExpr, a: PrimExpr) -> bool:
    lo = simp.bound(simp.simplify(b - a))[0]
    return lo is not None and lo >= 0


def resolve_leaf(stage: Stage, ivar: IterVar) -> IterVar:
    """The leaf loop standing for ``ivar`` after later splits (innermost part) or fuses."""
    while not any(leaf is ivar for leaf in stage.leaf_iter_vars):
        nxt = None
        for rel in stage.relations:
            if isinstance(rel, SplitRelation) and rel.parent is ivar:
                nxt = rel.inner
            elif isinstance(rel, FuseRelation) and ivar in (rel.outer, rel.inner):
                nxt = rel.fused
        if nxt is None:
            raise ScheduleError(f"{ivar.var.name} is not a loop of stage {stage.name}")
        ivar = nxt
    return ivar


def is_reduce_leaf(iv: IterVar) -> bool:
    """Whether a loop iterates over (part of) a reduction."""
    return iv.iter_type == COMM_REDUCE


def infer_bound_state(dag: ComputeDAG, state: State) -> State:
    """A copy of ``state`` with every iterator's range filled in (ranges start at 0)."""
    from kiln.te.loop_state import ComputeAtKind, Iterator
    from kiln.te.tensor import Range

    sch = dag.apply_steps(state.transform_steps)
    bounds = BoundInference(sch)
    out = state.copy()
    for i, st in enumerate(out.stages):
        if st.op_type == 0 or st.compute_at == ComputeAtKind.INLINED:
            continue
        info = bounds.info.get(id(sch.stages[i]))
        if info is None:
            continue
        iters = []
        for it, leaf in zip(st.iters, sch.stages[i].leaf_iter_vars):
            ext = info.extents[id(leaf)]
            iters.append(Iterator(it.name, Range(const(0), const(ext)), it.iter_kind,
                                  it.annotation, it.orig_iters))
        out.set_stage(i, type(st)(st.op, st.op_type, tuple(iters), st.compute_at, st.attrs))
    return out

