"""Ansor's loop state: stages, iterators and attachments, transformed by steps.

A :class:`State` is a light view of a schedule: one :class:`AnsorStage` per operation with its
loop :class:`Iterator` s (name, range, kind, annotation) and where it is computed, plus the list
of transform steps that produced it. Each schedule primitive (``split``, ``fuse``, ``reorder``,
``compute_at``, ``cache_write``, ...) appends one :mod:`~kiln.te.steps` step and applies it, with
stage and iterator ids changing exactly as in TVM's auto_scheduler. ``str(state)`` prints the
loop nest the way TVM does::

    Placeholder: A, B
    parallel i.0@j.0@ (0,1024)
      for k (0,512)
        C = ...
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kiln.errors import TuningLogError
from kiln.te import expr as E
from kiln.te.tensor import ComputeOp, Operation, PlaceholderOp, Range, Tensor

if TYPE_CHECKING:
    from kiln.te.dag import ComputeDAG
    from kiln.te.steps import Step

__all__ = [
    "ANNOTATION_NAMES",
    "AnsorStage",
    "AttachMap",
    "ComputeAtKind",
    "IteratorAnnotation",
    "IteratorKind",
    "Iterator",
    "State",
    "StageAttributes",
    "clean_name",
]


class IteratorKind:
    """Kinds of iterators (``IteratorKind`` in TVM)."""

    SPATIAL = 0
    REDUCTION = 1
    MIXED = 2
    SPECIAL = 3


class IteratorAnnotation:
    """Loop annotations with their record codes (``IteratorAnnotation`` in TVM)."""

    NONE = 0
    UNROLL = 1
    VECTORIZE = 2
    PARALLEL = 3
    VTHREAD = 4
    BLOCK_X = 5
    THREAD_X = 6
    BLOCK_Y = 7
    THREAD_Y = 8
    BLOCK_Z = 9
    THREAD_Z = 10
    TENSORIZE = 11


ANNOTATION_NAMES = ("for", "unroll", "vectorize", "parallel", "vthread", "blockIdx.x",
                    "threadIdx.x", "blockIdx.y", "threadIdx.y", "blockIdx.z", "threadIdx.z",
                    "tensorize")


class ComputeAtKind:
    """Where a stage is computed."""

    ROOT = 0
    INLINED = 1
    ITER = 2


def clean_name(name: str, prefix: str = "") -> str:
    """TVM's ``CleanName``: ``.`` and ``@`` become ``_``, ``outer``/``inner`` become ``o``/``i``."""
    out = name.replace(".", "_").replace("@", "_").replace("outer", "o").replace("inner", "i")
    return f"{prefix}_{out}" if prefix else out


@dataclass(frozen=True)
class Iterator:
    """A loop of a stage: name, range (``None`` before bound inference), kind and annotation."""

    name: str
    range: Range | None
    iter_kind: int
    annotation: int = IteratorAnnotation.NONE
    orig_iters: tuple[Iterator, ...] = ()

    @property
    def extent(self) -> int | None:
        """The constant extent, if known."""
        if self.range is not None and isinstance(self.range.extent, E.IntImm):
            return self.range.extent.value
        return None

    def __str__(self) -> str:
        return f"Iterator({self.name}, {self._range_text()})"

    def _range_text(self) -> str:
        if self.range is None:
            return "(None)"
        return f"({E.legacy_repr(self.range.min)},{E.legacy_repr(self.range.extent)})"


@dataclass(frozen=True)
class StageAttributes:
    """Per-stage settings made by pragma and storage_align steps."""

    auto_unroll_max_step: int = 0
    storage_offset: int = 0


@dataclass(frozen=True)
class AnsorStage:
    """One operation's loops in a :class:`State`."""

    op: Operation
    op_type: int  # 0 placeholder, 1 compute
    iters: tuple[Iterator, ...]
    compute_at: int = ComputeAtKind.ROOT
    attrs: StageAttributes = field(default_factory=StageAttributes)

    @staticmethod
    def from_op(op: Operation) -> AnsorStage:
        """The initial stage of an operation: one iterator per axis, ranges from the axes."""
        if isinstance(op, PlaceholderOp):
            return AnsorStage(op, 0, ())
        assert isinstance(op, ComputeOp)
        iters = [Iterator(clean_name(iv.var.name), iv.dom, IteratorKind.SPATIAL) for iv in op.axis]
        iters += [Iterator(clean_name(iv.var.name), iv.dom, IteratorKind.REDUCTION)
                  for iv in op.reduce_axis]
        return AnsorStage(op, 1, tuple(iters))


IterKey = tuple[int, int]


@dataclass
class AttachMap:
    """Which stages are computed at which ``(stage_id, iter_id)``, both ways."""

    stage_to_attach_iter: dict[int, IterKey] = field(default_factory=dict)
    iter_to_attached_stages: dict[IterKey, list[int]] = field(default_factory=dict)

    def copy(self) -> AttachMap:
        """An independent copy."""
        return AttachMap(dict(self.stage_to_attach_iter),
                         {k: list(v) for k, v in self.iter_to_attached_stages.items()})

    def set_compute_at_iter(self, stage_id: int, target_stage_id: int, target_iter_id: int) -> None:
        """Attach ``stage_id`` at iterator ``target_iter_id`` of ``target_stage_id``."""
        self.delete_stage(stage_id)
        key = (target_stage_id, target_iter_id)
        self.stage_to_attach_iter[stage_id] = key
        self.iter_to_attached_stages.setdefault(key, []).append(stage_id)

    def delete_stage(self, stage_id: int) -> None:
        """Forget the attachment of ``stage_id``."""
        key = self.stage_to_attach_iter.pop(stage_id, None)
        if key is not None:
            stages = self.iter_to_attached_stages[key]
            stages.remove(stage_id)
            if not stages:
                del self.iter_to_attached_stages[key]

    def update_iters(self, original: Sequence[IterKey], new: Sequence[IterKey]) -> None:
        """Move attachments from ``original`` iterators to ``new`` ones (after split/fuse)."""
        moved: dict[IterKey, list[int]] = {}
        for old_key, new_key in zip(original, new):
            stages = self.iter_to_attached_stages.pop(old_key, None)
            if stages is None:
                continue
            for s in stages:
                self.stage_to_attach_iter[s] = new_key
            moved[new_key] = stages
        self.iter_to_attached_stages.update(moved)

    def apply_stage_id_offset(self, start_id: int, offset: int = 1) -> AttachMap:
        """Shift stage ids ``>= start_id`` by ``offset`` (a stage was inserted)."""
        def shift(x: int) -> int:
            return x + offset if x >= start_id else x

        out = AttachMap()
        for s, (ts, ti) in self.stage_to_attach_iter.items():
            out.stage_to_attach_iter[shift(s)] = (shift(ts), ti)
        for (ts, ti), stages in self.iter_to_attached_stages.items():
            out.iter_to_attached_stages[(shift(ts), ti)] = [shift(s) for s in stages]
        return out


class State:
    """A schedule as Ansor sees it: stages, their loops, attachments and the steps so far."""

    def __init__(self, stages: list[AnsorStage], dag: ComputeDAG | None = None):
        self.stages = stages
        self.transform_steps: list[Step] = []
        self.attach_map = AttachMap()
        self.current_compute_dag: ComputeDAG | None = None
        self.concrete = True
        self.dag = dag

    @staticmethod
    def from_ops(ops: Sequence[Operation], dag: ComputeDAG | None = None) -> State:
        """The initial state of a list of operations."""
        return State([AnsorStage.from_op(op) for op in ops], dag)

    def copy(self) -> State:
        """An independent copy (steps and stages are immutable and shared)."""
        new = copy.copy(self)
        new.stages = list(self.stages)
        new.transform_steps = list(self.transform_steps)
        new.attach_map = self.attach_map.copy()
        return new

    # --- lookups -----------------------------------------------------------------------------
    def stage_id(self, stage: int | Operation | Tensor | AnsorStage) -> int:
        """Index of a stage given as an index, an operation, a tensor or an AnsorStage."""
        if isinstance(stage, int):
            if not 0 <= stage < len(self.stages):
                raise TuningLogError(f"stage id {stage} is out of range "
                                     f"(the state has {len(self.stages)} stages)")
            return stage
        if isinstance(stage, AnsorStage):
            stage = stage.op
        op = stage.op if isinstance(stage, Tensor) else stage
        for i, s in enumerate(self.stages):
            if s.op is op:
                return i
        for i, s in enumerate(self.stages):
            if s.op.name == op.name:
                return i
        raise TuningLogError(f"operation {op.name} is not a stage of this state")

    def iter_id(self, stage_id: int, it: Iterator | int) -> int:
        """Index of an iterator of a stage."""
        iters = self.stages[stage_id].iters
        if isinstance(it, int):
            if not 0 <= it < len(iters):
                raise TuningLogError(f"iterator id {it} is out of range for stage "
                                     f"{self.stages[stage_id].op.name} ({len(iters)} iterators)")
            return it
        for i, x in enumerate(iters):
            if x is it:
                return i
        for i, x in enumerate(iters):
            if x == it:
                return i
        raise TuningLogError(f"{it} is not an iterator of stage {self.stages[stage_id].op.name}")

    def __getitem__(self, key: int | Operation | Tensor) -> AnsorStage:
        return self.stages[self.stage_id(key)]

    def set_stage(self, stage_id: int, stage: AnsorStage) -> None:
        """Replace one stage."""
        self.stages[stage_id] = stage

    def update_stage(self, stage_id: int, **changes: Any) -> AnsorStage:
        """Replace fields of one stage; returns the new stage."""
        new = replace(self.stages[stage_id], **changes)
        self.stages[stage_id] = new
        return new

    # --- schedule primitives (each appends a step and applies it) ----------------------------
    def _do(self, step: Step) -> Any:
        self.transform_steps.append(step)
        return step.apply_to_state(self, self._dag())

    def _dag(self) -> ComputeDAG:
        if self.dag is None:
            raise TuningLogError("this state has no ComputeDAG; build it from dag.init_state")
        return self.dag

    def split(self, stage: Any, iterator: Iterator | int, lengths: Sequence[int | None],
              inner_to_outer: bool = True) -> list[Iterator]:
        """Split an iterator into ``len(lengths) + 1`` iterators (``SP``)."""
        from kiln.te.steps import SplitStep

        sid = self.stage_id(stage)
        iid = self.iter_id(sid, iterator)
        extent = self.stages[sid].iters[iid].extent
        result: list[Iterator] = self._do(SplitStep(sid, iid, extent, tuple(lengths),
                                                    inner_to_outer))
        return result

    def follow_split(self, stage: Any, iterator: Iterator | int, src_step_id: int,
                     n_split: int) -> list[Iterator]:
        """Split like an earlier split step (``FSP``)."""
        from kiln.te.steps import FollowSplitStep

        sid = self.stage_id(stage)
        result: list[Iterator] = self._do(
            FollowSplitStep(sid, self.iter_id(sid, iterator), src_step_id, n_split))
        return result

    def follow_fused_split(self, stage: Any, iterator: Iterator | int, src_step_ids: Sequence[int],
                           level: int, factor_or_nparts: bool) -> list[Iterator]:
        """Split by the product of one level of several earlier splits (``FFSP``)."""
        from kiln.te.steps import FollowFusedSplitStep

        sid = self.stage_id(stage)
        result: list[Iterator] = self._do(FollowFusedSplitStep(
            sid, self.iter_id(sid, iterator), tuple(src_step_ids), level, factor_or_nparts))
        return result

    def fuse(self, stage: Any, iters: Sequence[Iterator | int]) -> Iterator:
        """Fuse consecutive iterators into one (``FU``)."""
        from kiln.te.steps import FuseStep

        sid = self.stage_id(stage)
        result: Iterator = self._do(FuseStep(sid, tuple(self.iter_id(sid, i) for i in iters)))
        return result

    def reorder(self, stage: Any, order: Sequence[Iterator | int]) -> None:
        """Reorder all iterators of a stage (``RE``)."""
        from kiln.te.steps import ReorderStep

        sid = self.stage_id(stage)
        if len(order) != len(self.stages[sid].iters):
            raise TuningLogError(f"reorder of {self.stages[sid].op.name}: give all "
                                 f"{len(self.stages[sid].iters)} iterators, got {len(order)}")
        self._do(ReorderStep(sid, tuple(self.iter_id(sid, i) for i in order)))

    def _annotate(self, stage: Any, iterator: Iterator | int, annotation: int) -> Iterator:
        from kiln.te.steps import AnnotationStep

        sid = self.stage_id(stage)
        result: Iterator = self._do(AnnotationStep(sid, self.iter_id(sid, iterator), annotation))
        return result

    def bind(self, stage: Any, iterator: Iterator | int, thread_name: str) -> Iterator:
        """Bind an iterator to a GPU index (``AN`` 4-10): ``"blockIdx.x"``, ``"threadIdx.y"``,
        ``"vthread"``, ... (TVM's ``State.bind``)."""
        names = ANNOTATION_NAMES[IteratorAnnotation.VTHREAD:IteratorAnnotation.TENSORIZE]
        if thread_name not in names:
            raise TuningLogError(f"bind: {thread_name!r} is not a thread name ({', '.join(names)})")
        return self._annotate(stage, iterator, ANNOTATION_NAMES.index(thread_name))

    def parallel(self, stage: Any, iterator: Iterator | int) -> Iterator:
        """Run an iterator's iterations in parallel (``AN`` 3)."""
        return self._annotate(stage, iterator, IteratorAnnotation.PARALLEL)

    def vectorize(self, stage: Any, iterator: Iterator | int) -> Iterator:
        """Vectorize an iterator (``AN`` 2)."""
        return self._annotate(stage, iterator, IteratorAnnotation.VECTORIZE)

    def unroll(self, stage: Any, iterator: Iterator | int, max_unroll: int | None = None) -> Iterator:
        """Unroll an iterator (``AN`` 1); skipped when its extent exceeds ``max_unroll``."""
        sid = self.stage_id(stage)
        it = self.stages[sid].iters[self.iter_id(sid, iterator)]
        if max_unroll is not None and it.extent is not None and it.extent > max_unroll:
            return it
        return self._annotate(sid, iterator, IteratorAnnotation.UNROLL)

    def pragma(self, stage: Any, iterator: Iterator | int, pragma_type: str) -> None:
        """Add a pragma such as ``auto_unroll_max_step$64`` (``PR``)."""
        from kiln.te.steps import PragmaStep

        sid = self.stage_id(stage)
        self._do(PragmaStep(sid, self.iter_id(sid, iterator), pragma_type))

    def storage_align(self, stage: Any, iterator: Iterator | int, factor: int, offset: int) -> None:
        """Align the buffer stride of an iterator's dimension (``SA``)."""
        from kiln.te.steps import StorageAlignStep

        sid = self.stage_id(stage)
        self._do(StorageAlignStep(sid, self.iter_id(sid, iterator), factor, offset))

    def compute_at(self, stage: Any, target_stage: Any, target_iter: Iterator | int) -> None:
        """Compute a stage inside an iterator of another (``CA``)."""
        from kiln.te.steps import ComputeAtStep

        sid, tid = self.stage_id(stage), self.stage_id(target_stage)
        self._do(ComputeAtStep(sid, tid, self.iter_id(tid, target_iter)))

    def compute_inline(self, stage: Any) -> None:
        """Inline a stage into its consumers (``CI``)."""
        from kiln.te.steps import ComputeInlineStep

        self._do(ComputeInlineStep(self.stage_id(stage)))

    def compute_root(self, stage: Any) -> None:
        """Compute a stage at the root (``CR``)."""
        from kiln.te.steps import ComputeRootStep

        self._do(ComputeRootStep(self.stage_id(stage)))

    def cache_read(self, stage: Any, scope_name: str, reader_stages: Sequence[Any]) -> int:
        """Add a stage reading ``stage`` into ``scope_name`` for the readers (``CHR``)."""
        from kiln.te.steps import CacheReadStep

        readers = tuple(self.stage_id(r) for r in reader_stages)
        result: int = self._do(CacheReadStep(self.stage_id(stage), scope_name, readers))
        return result

    def cache_write(self, stage: Any, scope_name: str) -> int:
        """Add a stage computing ``stage`` into ``scope_name`` first (``CHW``)."""
        from kiln.te.steps import CacheWriteStep

        result: int = self._do(CacheWriteStep(self.stage_id(stage), scope_name))
        return result

    def rfactor(self, stage: Any, iterator: Iterator | int, factor_iter_id: int) -> int:
        """Factor a reduction iterator into a new stage (``RF``)."""
        from kiln.te.steps import RfactorStep

        sid = self.stage_id(stage)
        result: int = self._do(RfactorStep(sid, self.iter_id(sid, iterator), factor_iter_id))
        return result

    # --- printing ------------------------------------------------------------------------------
    def to_str(self, delete_trivial_loop: bool = True) -> str:
        """The loop nest in TVM's text form."""
        lines: list[str] = []
        names = [s.op.name for s in self.stages if s.op_type == 0]
        lines.append("Placeholder: " + ", ".join(names))
        for i, stage in enumerate(self.stages):
            if stage.op_type == 1 and stage.compute_at == ComputeAtKind.ROOT:
                self._print_stage(lines, i, 0, delete_trivial_loop)
        return "".join(line + "\n" for line in lines)

    def _print_stage(self, lines: list[str], stage_id: int, base: int, delete_trivial: bool) -> None:
        stage = self.stages[stage_id]
        pad = " " * base
        if stage.attrs.auto_unroll_max_step != 0:
            lines.append(f"{pad}{stage.op.name} auto_unroll: {stage.attrs.auto_unroll_max_step}")
        if stage.attrs.storage_offset != 0:
            lines.append(f"{pad}{stage.op.name} storage_offset: {stage.attrs.storage_offset}")
        indent = 0
        for i, it in enumerate(stage.iters):
            if not (delete_trivial and it.extent == 1):
                lines.append(" " * (base + indent) + f"{ANNOTATION_NAMES[it.annotation]} "
                             f"{it.name} {it._range_text()}")
                indent += 2
            for attached in self.attach_map.iter_to_attached_stages.get((stage_id, i), []):
                self._print_stage(lines, attached, base + indent, delete_trivial)
        lines.append(" " * (base + indent) + f"{stage.op.name} = ...")

    def __str__(self) -> str:
        return self.to_str(True)

    def __repr__(self) -> str:
        return self.to_str(True)

