"""Tensor-expression schedules: TVM's ``te.Schedule`` primitives, the target Ansor steps replay on.

A :class:`Schedule` holds one :class:`Stage` per operation in producer-to-consumer order. A stage
keeps its loop structure as *relations* between iteration variables (splits and fuses), the
order of its leaf loops, their annotations (parallel, vectorize, unroll), pragmas, where it is
computed (at the root, inlined, or at a loop of another stage) and its storage alignment.
``cache_read``, ``cache_write`` and ``rfactor`` rewrite the dataflow by adding stages, exactly
as TVM does (same names, same stage positions), so Ansor's stage ids line up.

Lowering (:mod:`kiln.te.lower`) turns a schedule into loop IR.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kiln.errors import CompileError
from kiln.te import expr as E
from kiln.te.expr import PrimExpr, Var, const
from kiln.te.tensor import (
    COMM_REDUCE,
    DATA_PAR,
    ComputeOp,
    IterVar,
    Operation,
    Range,
    Tensor,
    make_compute_op,
)
from kiln.te.visit import substitute, transform

__all__ = [
    "FuseRelation",
    "Schedule",
    "ScheduleError",
    "SplitRelation",
    "Stage",
    "create_schedule",
    "post_dfs_order",
    "replace_inputs",
]


class ScheduleError(CompileError):
    """A schedule primitive was used in a way that cannot be lowered (names the stage and loop)."""


@dataclass(eq=False)
class SplitRelation:
    """``parent`` split into ``outer`` x ``inner`` by ``factor`` (inner extent) or ``nparts``."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None
    nparts: int | None


@dataclass(eq=False)
class FuseRelation:
    """``outer`` and ``inner`` fused into one loop ``fused``."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


Relation = SplitRelation | FuseRelation

ANNOTATIONS = ("none", "unroll", "vectorize", "parallel", "vthread", "blockIdx.x", "threadIdx.x",
               "blockIdx.y", "threadIdx.y", "blockIdx.z", "threadIdx.z")


@dataclass(eq=False)
class Stage:
    """The schedule of one operation."""

    op: Operation
    origin_op: Operation
    all_iter_vars: list[IterVar]
    leaf_iter_vars: list[IterVar]
    relations: list[Relation] = field(default_factory=list)
    attach_type: str = "root"  # "root", "inline" or "scope"
    attach_stage: Stage | None = None
    attach_ivar: IterVar | None = None
    annotations: dict[int, str] = field(default_factory=dict)  # id(IterVar) -> annotation
    pragmas: dict[int, list[tuple[str, Any]]] = field(default_factory=dict)
    storage_align: dict[int, tuple[int, int]] = field(default_factory=dict)  # dim -> factor, offset
    scope: str = ""
    is_output: bool = False

    @staticmethod
    def for_op(op: Operation) -> Stage:
        """A fresh stage whose leaf loops are the operation's axes."""
        roots = root_iter_vars(op)
        return Stage(op, op, list(roots), list(roots))

    @property
    def name(self) -> str:
        """The operation's name."""
        return self.op.name

    # --- loop structure ---------------------------------------------------------------------
    def _leaf_index(self, iv: IterVar, what: str) -> int:
        for i, leaf in enumerate(self.leaf_iter_vars):
            if leaf is iv:
                return i
        raise ScheduleError(f"{what}: {iv.var.name} is not a leaf loop of stage {self.name} "
                            f"(leaves: {[x.var.name for x in self.leaf_iter_vars]})")

    def split(self, parent: IterVar, factor: int | None = None,
              nparts: int | None = None) -> tuple[IterVar, IterVar]:
        """Split a leaf loop by ``factor`` (inner extent) or into ``nparts`` outer iterations."""
        pos = self._leaf_index(parent, "split")
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"split of {parent.var.name} in {self.name}: give exactly one of "
                                "factor and nparts")
        if (factor or nparts or 0) <= 0:
            raise ScheduleError(f"split of {parent.var.name} in {self.name}: the "
                                f"{'factor' if factor else 'nparts'} must be positive")
        outer = IterVar(Var(parent.var.name + ".outer"), None, parent.iter_type)
        inner = IterVar(Var(parent.var.name + ".inner"), None, parent.iter_type)
        self.relations.append(SplitRelation(parent, outer, inner, factor, nparts))
        self.all_iter_vars += [outer, inner]
        self.leaf_iter_vars[pos:pos + 1] = [outer, inner]
        return outer, inner

    def fuse(self, ivs: Sequence[IterVar]) -> IterVar:
        """Fuse consecutive leaf loops (outermost first) into one."""
        if not ivs:
            fused = IterVar(Var("fused"), Range(const(0), const(1)), DATA_PAR)
            self.all_iter_vars.append(fused)
            self.leaf_iter_vars.insert(0, fused)
            return fused
        fused = ivs[0]
        for iv in ivs[1:]:
            pos_o = self._leaf_index(fused, "fuse")
            pos_i = self._leaf_index(iv, "fuse")
            if pos_i != pos_o + 1:
                raise ScheduleError(f"fuse in {self.name}: {fused.var.name} and {iv.var.name} are "
                                    "not adjacent loops")
            itype = COMM_REDUCE if COMM_REDUCE in (fused.iter_type, iv.iter_type) else DATA_PAR
            new = IterVar(Var(f"{fused.var.name}.{iv.var.name}.fused"), None, itype)
            self.relations.append(FuseRelation(fused, iv, new))
            self.all_iter_vars.append(new)
            self.leaf_iter_vars[pos_o:pos_i + 1] = [new]
            fused = new
        return fused

    def reorder(self, order: Sequence[IterVar]) -> None:
        """Permute the given leaf loops among their current positions."""
        positions = sorted(self._leaf_index(iv, "reorder") for iv in order)
        if len(set(positions)) != len(positions):
            raise ScheduleError(f"reorder in {self.name}: a loop is listed twice")
        for pos, iv in zip(positions, order):
            self.leaf_iter_vars[pos] = iv

    def annotate(self, iv: IterVar, annotation: str) -> None:
        """Mark a leaf loop ``"parallel"``, ``"vectorize"``, ``"unroll"``, a GPU thread binding
        (``"blockIdx.x"``, ``"threadIdx.x"``, ... y, z, ``"vthread"``) or ``"none"``."""
        self._leaf_index(iv, annotation)
        if annotation not in ANNOTATIONS:
            raise ScheduleError(f"unknown loop annotation {annotation!r}")
        if annotation == "none":
            self.annotations.pop(id(iv), None)
        else:
            self.annotations[id(iv)] = annotation

    def parallel(self, iv: IterVar) -> None:
        """Run the loop's iterations on several threads."""
        self.annotate(iv, "parallel")

    def vectorize(self, iv: IterVar) -> None:
        """Execute the loop as vector lanes."""
        self.annotate(iv, "vectorize")

    def unroll(self, iv: IterVar) -> None:
        """Unroll the loop."""
        self.annotate(iv, "unroll")

    def pragma(self, iv: IterVar, key: str, value: Any = None) -> None:
        """Attach a pragma (``auto_unroll_max_step``, ``unroll_explicit``) to a loop."""
        self.pragmas.setdefault(id(iv), []).append((key, value))

    def annotation_of(self, iv: IterVar) -> str:
        """The annotation of a leaf loop (``"none"`` when unset)."""
        return self.annotations.get(id(iv), "none")

    def storage_align_axis(self, iv: IterVar, factor: int, offset: int) -> None:
        """Pad the buffer so the stride of ``iv``'s dimension is ``factor * k + offset``."""
        # Like TVM, only an axis of the operation names a buffer dimension; alignment requested on
        # a split or fused loop has no buffer dimension to pad and is ignored.
        for dim, root in enumerate(root_iter_vars(self.op)):
            if root is iv:
                self.storage_align[dim] = (factor, offset)

    # --- placement --------------------------------------------------------------------------
    def compute_at(self, parent: Stage, ivar: IterVar) -> None:
        """Compute this stage inside loop ``ivar`` of ``parent``."""
        parent._leaf_index(ivar, f"compute_at of {self.name}")
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, ivar

    def compute_inline(self) -> None:
        """Substitute this stage's expression into its consumers."""
        if isinstance(self.op, ComputeOp) and self.op.is_reduction:
            raise ScheduleError(f"compute_inline: {self.name} is a reduction and cannot be inlined")
        self.attach_type, self.attach_stage, self.attach_ivar = "inline", None, None

    def compute_root(self) -> None:
        """Compute this stage at the top level."""
        self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None


def root_iter_vars(op: Operation) -> tuple[IterVar, ...]:
    """Spatial then reduction axes of a compute (none for a placeholder)."""
    if isinstance(op, ComputeOp):
        return (*op.axis, *op.reduce_axis)
    return ()


def post_dfs_order(roots: Sequence[Operation]) -> list[Operation]:
    """Operations reachable from ``roots``, producers first (TVM's ``PostDFSOrder``)."""
    order: list[Operation] = []
    visited: set[int] = set()
    for root in roots:
        stack: list[tuple[Operation, bool]] = [(root, False)]
        while stack:
            op, expanded = stack.pop()
            if expanded:
                order.append(op)
                continue
            if id(op) in visited:
                continue
            visited.add(id(op))
            stack.append((op, True))
            for t in reversed(op.input_tensors()):
                if id(t.op) not in visited:
                    stack.append((t.op, False))
    return order


def replace_inputs(op: Operation, vmap: dict[tuple[int, int], Tensor]) -> Operation:
    """``op`` reading ``vmap[t]`` instead of each tensor ``t`` in the map (``op`` if none is read)."""
    if not isinstance(op, ComputeOp):
        return op
    changed = False

    def swap(node: PrimExpr) -> PrimExpr | None:
        nonlocal changed
        if isinstance(node, E.TensorLoad) and node.tensor.key in vmap:
            changed = True
            new_t = vmap[node.tensor.key]
            return E.TensorLoad(new_t, node.indices, new_t.dtype)
        return None

    body = tuple(transform(b, swap) for b in op.body)
    if not changed:
        return op
    return ComputeOp(op.name, op.tag, op.attrs, op.axis, body, op.reduce_axis)


class Schedule:
    """Stages of every operation needed by ``outputs``, producers first."""

    def __init__(self, outputs: Sequence[Operation]):
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        for op in post_dfs_order(self.outputs):
            stage = Stage.for_op(op)
            stage.is_output = any(op is o for o in self.outputs)
            self.stages.append(stage)

    def __getitem__(self, key: Operation | Tensor) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        for stage in self.stages:
            if stage.op is op or stage.origin_op is op:
                return stage
        raise ScheduleError(f"operation {op.name} is not part of this schedule")

    def stage_index(self, stage: Stage) -> int:
        """Position of ``stage`` in :attr:`stages`."""
        for i, s in enumerate(self.stages):
            if s is stage:
                return i
        raise ScheduleError(f"stage {stage.name} is not part of this schedule")

    def _replace_dataflow(self, vmap: dict[tuple[int, int], Tensor]) -> None:
        """Make every stage read the replacement tensors (TVM's ``ReplaceDataFlow``)."""
        for stage in self.stages:
            new_op = replace_inputs(stage.op, vmap)
            if new_op is not stage.op:
                for i in range(new_op.num_outputs):
                    vmap[stage.op.output(i).key] = new_op.output(i)
                stage.op = new_op
        self.outputs = [self._current(o) for o in self.outputs]

    def _current(self, op: Operation) -> Operation:
        for stage in self.stages:
            if stage.origin_op is op or stage.op is op:
                return stage.op
        return op

    # --- dataflow rewrites --------------------------------------------------------------------
    def cache_read(self, tensor: Tensor, scope: str, readers: Sequence[Operation]) -> Tensor:
        """A stage copying ``tensor`` into ``scope`` that ``readers`` read instead."""
        name = tensor.op.name if tensor.op.num_outputs == 1 else \
            f"{tensor.op.name}.v{tensor.value_index}"
        while any(s.op.name == f"{name}.{scope}" for s in self.stages):
            name += ".d"
        src_stage = self[tensor.op]
        src = src_stage.op.output(tensor.value_index)
        axis = tuple(IterVar(Var(f"ax{i}"), Range(const(0), const(d)), DATA_PAR)
                     for i, d in enumerate(src.shape))
        body = (src[tuple(iv.var for iv in axis)],)
        cache_op = make_compute_op(f"{name}.{scope}", "", {}, axis, body)
        cache = cache_op.output(0)
        vsub = {src.key: cache}
        vmap: dict[tuple[int, int], Tensor] = {}
        for reader in readers:
            stage = self[reader]
            new_op = replace_inputs(stage.op, vsub)
            if new_op is stage.op:
                raise ScheduleError(f"cache_read: {reader.name} does not read {tensor.name}")
            vmap[stage.op.output(0).key] = new_op.output(0)
            stage.op = new_op
        self._replace_dataflow(vmap)
        pos = self.stage_index(src_stage)
        new_stage = Stage.for_op(cache_op)
        new_stage.scope = scope
        self.stages.insert(pos + 1, new_stage)
        return cache

    def cache_write(self, tensors: Sequence[Tensor], scope: str) -> list[Tensor]:
        """Compute ``tensors`` into a ``scope`` stage first, then copy them to the original."""
        stage = self[tensors[0].op]
        op = stage.op
        if not isinstance(op, ComputeOp):
            raise ScheduleError(f"cache_write: {op.name} is not a compute")
        if stage.relations:
            raise ScheduleError(f"cache_write of {op.name}: the stage was already split or fused; "
                                "cache_write must come before loop transformations")
        new_axis = tuple(IterVar(Var(iv.var.name + ".c"), iv.dom, iv.iter_type) for iv in op.axis)
        vsub: dict[Var, PrimExpr] = {iv.var: niv.var for iv, niv in zip(op.axis, new_axis)}
        bodies: list[PrimExpr] = []
        for body in op.body:
            if isinstance(body, E.Reduce):
                src = tuple(substitute(s, vsub) for s in body.source)
                cond = substitute(body.condition, vsub)
                init = tuple(substitute(s, vsub) for s in body.init)
                bodies.append(E.Reduce(body.combiner, src, body.axis, cond, body.value_index,
                                       init, body.dtype))
            else:
                bodies.append(substitute(body, vsub))
        cache_op = ComputeOp(f"{op.name}.{scope}", op.tag, op.attrs, new_axis, tuple(bodies),
                             op.reduce_axis)
        args = tuple(iv.var for iv in op.axis)
        new_body = tuple(cache_op.output(i)[args] for i in range(op.num_outputs))
        orig_new = ComputeOp(op.name, op.tag, op.attrs, op.axis, new_body, ())
        vmap = {op.output(i).key: orig_new.output(i) for i in range(op.num_outputs)}
        pos = self.stage_index(stage)
        stage.op = orig_new
        roots = list(root_iter_vars(orig_new))
        stage.all_iter_vars, stage.leaf_iter_vars, stage.relations = list(roots), list(roots), []
        self._replace_dataflow(vmap)
        new_stage = Stage.for_op(cache_op)
        new_stage.scope = scope
        self.stages.insert(pos, new_stage)
        return [cache_op.output(i) for i in range(cache_op.num_outputs)]

    def rfactor(self, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> list[Tensor]:
        """Factor the reduction over leaf loop ``axis`` into a new stage (``s.rfactor``)."""
        from kiln.te.rfactor import rfactor

        return rfactor(self, tensor, axis, factor_axis)


def pass_down_domain(stage: Stage,
                     root_dom: dict[int, tuple[PrimExpr, int]]) -> dict[int, tuple[PrimExpr, int]]:
    """Ranges ``(min, extent)`` of every loop of ``stage`` from the ranges of its root axes.

    Split and fused loops start at 0; the parent's minimum is added back by
    :func:`pass_up_index`. The inner loop of a split by a factor larger than its parent's extent
    (a stage computed at a loop of another needs fewer elements than its splits were made for)
    runs the parent's extent only, as TVM's ``PassDownDomain`` tightens it, unless a loop derived
    from it is bound to a GPU thread (its extent is the block's shape) or vectorized.
    """
    dom = dict(root_dom)
    for rel in stage.relations:
        if isinstance(rel, SplitRelation):
            _, ext = dom[id(rel.parent)]
            factor = split_factor(rel, ext)
            if ext < factor and not _fixed_extent(stage, rel.inner):
                factor = max(ext, 1)
            dom[id(rel.inner)] = (const(0), factor)
            dom[id(rel.outer)] = (const(0), rel.nparts if rel.nparts else -(-ext // factor))
        else:
            dom[id(rel.fused)] = (const(0), dom[id(rel.outer)][1] * dom[id(rel.inner)][1])
    return dom


def _fixed_extent(stage: Stage, iv: IterVar) -> bool:
    """Whether a loop derived from ``iv`` is vectorized or bound to a GPU index."""
    derived = {id(iv)}
    for rel in stage.relations:
        parents = [rel.parent] if isinstance(rel, SplitRelation) else [rel.outer, rel.inner]
        if any(id(p) in derived for p in parents):
            children = [rel.outer, rel.inner] if isinstance(rel, SplitRelation) else [rel.fused]
            derived.update(id(c) for c in children)
    return any(stage.annotations.get(i, "none") not in ("none", "unroll", "parallel")
               for i in derived)


def split_factor(rel: SplitRelation, parent_extent: int) -> int:
    """The inner extent of a split of a loop of ``parent_extent`` iterations."""
    if rel.factor is not None:
        return rel.factor
    assert rel.nparts is not None
    return max(1, -(-parent_extent // rel.nparts))


def pass_up_index(stage: Stage, dom: dict[int, tuple[PrimExpr, int]],
                  values: dict[int, PrimExpr]) -> dict[int, PrimExpr]:
    """Offsets of the root axes from their minimums given the leaf loops' values (``PassUpIndex``).

    Values are relative: add a root's minimum to get its coordinate.
    """
    out = dict(values)
    for rel in reversed(stage.relations):
        if isinstance(rel, SplitRelation):
            factor = split_factor(rel, dom[id(rel.parent)][1])
            out[id(rel.parent)] = out[id(rel.outer)] * factor + out[id(rel.inner)]
        else:
            iext = dom[id(rel.inner)][1]
            fused = out[id(rel.fused)]
            out[id(rel.outer)] = E.binary("floordiv", fused, iext)
            out[id(rel.inner)] = E.binary("floormod", fused, iext)
    return out


def create_schedule(ops: Operation | Sequence[Operation]) -> Schedule:
    """A default schedule (every stage at the root, loops as declared) for output ``ops``."""
    if isinstance(ops, (Operation, Tensor)):
        ops = [ops]
    return Schedule([o.op if isinstance(o, Tensor) else o for o in ops])

