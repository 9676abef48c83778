"""Ansor's transform steps: record JSON, application to a loop state and to a schedule.

Each step is a frozen dataclass whose :meth:`~Step.to_record` gives the JSON array TVM writes in
tuning records (SPEC section 11), e.g. ``["SP", 4, 0, 512, [32], 1]``; :func:`parse_step` reads
one back. ``apply_to_state`` updates an Ansor :class:`~kiln.te.loop_state.State` exactly as TVM's
``ApplyToState`` (stage ids shift when cache_read/cache_write/rfactor add stages; iterator ids
shift when split/fuse change a stage's loops); ``apply_to_schedule`` performs the step on a
:class:`~kiln.te.schedule.Schedule` for lowering.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from kiln.errors import TuningLogError
from kiln.te import expr as E
from kiln.te.expr import const
from kiln.te.loop_ir import PREFETCH_NEXT_TILE, UNSWITCH_TILE_GUARDS
from kiln.te.loop_state import (
    AnsorStage,
    ComputeAtKind,
    Iterator,
    IteratorAnnotation,
    IteratorKind,
    State,
)
from kiln.te.schedule import Schedule, ScheduleError, Stage
from kiln.te.tensor import Range

__all__ = [
    "STEP_KINDS",
    "AnnotationStep",
    "CacheReadStep",
    "CacheWriteStep",
    "ComputeAtStep",
    "ComputeInlineStep",
    "ComputeRootStep",
    "FollowFusedSplitStep",
    "FollowSplitStep",
    "FuseStep",
    "PragmaStep",
    "ReorderStep",
    "RfactorStep",
    "SplitStep",
    "Step",
    "StorageAlignStep",
    "parse_step",
]


class Step:
    """Base class of transform steps."""

    prefix: ClassVar[str] = ""
    stage_id: int

    def to_record(self) -> list[Any]:
        """The step as the JSON array of a tuning record."""
        raise TypeError(f"{type(self).__name__} is not a concrete step")

    def apply_to_state(self, state: State, dag: Any) -> Any:
        """Apply to an Ansor loop state (mutated in place); returns what TVM returns."""
        raise TypeError(f"{type(self).__name__} is not a concrete step")

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> Any:
        """Apply to a te schedule; ``steps`` is the whole step list (follow splits read it)."""
        raise TypeError(f"{type(self).__name__} is not a concrete step")


def _stage(state: State, stage_id: int, step: Step) -> AnsorStage:
    if not 0 <= stage_id < len(state.stages):
        raise TuningLogError(f"step {step.to_record()}: stage {stage_id} does not exist "
                             f"(the state has {len(state.stages)} stages)")
    return state.stages[stage_id]


def _compute_stage(state: State, stage_id: int, step: Step) -> AnsorStage:
    stage = _stage(state, stage_id, step)
    if stage.op_type != 1:
        raise TuningLogError(f"step {step.to_record()}: stage {stage_id} ({stage.op.name}) is a "
                             "placeholder, not a compute")
    return stage


def _iter(stage: AnsorStage, iter_id: int, step: Step) -> Iterator:
    if not 0 <= iter_id < len(stage.iters):
        raise TuningLogError(f"step {step.to_record()}: stage {stage.op.name} has "
                             f"{len(stage.iters)} iterators, not {iter_id + 1}")
    return stage.iters[iter_id]


def _sch_stage(sch: Schedule, stage_id: int, step: Step) -> Stage:
    if not 0 <= stage_id < len(sch.stages):
        raise ScheduleError(f"step {step.to_record()}: stage {stage_id} does not exist")
    return sch.stages[stage_id]


def _axis(stage: Stage, iter_id: int, step: Step) -> Any:
    if not 0 <= iter_id < len(stage.leaf_iter_vars):
        raise ScheduleError(f"step {step.to_record()}: stage {stage.name} has "
                            f"{len(stage.leaf_iter_vars)} loops, not {iter_id + 1}")
    return stage.leaf_iter_vars[iter_id]


# --- annotation, fuse, pragma, reorder ---------------------------------------------------------

_SCHEDULE_ANNOTATION = {
    IteratorAnnotation.NONE: "none", IteratorAnnotation.UNROLL: "unroll",
    IteratorAnnotation.VECTORIZE: "vectorize", IteratorAnnotation.PARALLEL: "parallel",
    IteratorAnnotation.VTHREAD: "vthread",
    IteratorAnnotation.BLOCK_X: "blockIdx.x", IteratorAnnotation.THREAD_X: "threadIdx.x",
    IteratorAnnotation.BLOCK_Y: "blockIdx.y", IteratorAnnotation.THREAD_Y: "threadIdx.y",
    IteratorAnnotation.BLOCK_Z: "blockIdx.z", IteratorAnnotation.THREAD_Z: "threadIdx.z",
}


@dataclass(frozen=True)
class AnnotationStep(Step):
    """``["AN", stage, iter, annotation]``: unroll (1), vectorize (2), parallel (3), ..."""

    prefix: ClassVar[str] = "AN"
    stage_id: int
    iter_id: int
    annotation: int

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record`."""
        return [self.prefix, self.stage_id, self.iter_id, self.annotation]

    def apply_to_state(self, state: State, dag: Any) -> Iterator:
        """Set the iterator's annotation (it must have none yet)."""
        stage = _stage(state, self.stage_id, self)
        it = _iter(stage, self.iter_id, self)
        if it.annotation != IteratorAnnotation.NONE:
            raise TuningLogError(f"step {self.to_record()}: iterator {it.name} of "
                                 f"{stage.op.name} is already annotated")
        new_it = Iterator(it.name, it.range, it.iter_kind, self.annotation, it.orig_iters)
        iters = list(stage.iters)
        iters[self.iter_id] = new_it
        state.update_stage(self.stage_id, iters=tuple(iters))
        return new_it

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> None:
        """Annotate the loop (thread bindings lower to GPU grid and block indices; a C target
        refuses them when it generates code); tensorize is refused here."""
        stage = _sch_stage(sch, self.stage_id, self)
        axis = _axis(stage, self.iter_id, self)
        kind = _SCHEDULE_ANNOTATION.get(self.annotation)
        if kind is None:
            raise ScheduleError(f"step {self.to_record()}: annotation {self.annotation} (tensorize) "
                                "is not supported by Kiln's code generators")
        if kind != "none":
            stage.annotate(axis, kind)


@dataclass(frozen=True)
class FuseStep(Step):
    """``["FU", stage, [iters]]``: fuse consecutive iterators."""

    prefix: ClassVar[str] = "FU"
    stage_id: int
    fused_ids: tuple[int, ...]

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record`."""
        return [self.prefix, self.stage_id, list(self.fused_ids)]

    def apply_to_state(self, state: State, dag: Any) -> Iterator:
        """Replace the iterators by one named ``a@b@`` with the product extent."""
        stage = _stage(state, self.stage_id, self)
        old_size = len(stage.iters)
        name = ""
        extent: E.PrimExpr | None = const(1)
        kind = IteratorKind.SPECIAL
        orig: list[Iterator] = []
        for i, fid in enumerate(self.fused_ids):
            if i > 0 and fid != self.fused_ids[i - 1] + 1:
                raise TuningLogError(f"step {self.to_record()}: fused iterators must be "
                                     "consecutive")
            if i != len(self.fused_ids) - 1 and \
                    (self.stage_id, fid) in state.attach_map.iter_to_attached_stages:
                raise TuningLogError(f"step {self.to_record()}: cannot fuse iterators that "
                                     f"other stages are computed at:\n{state}")
            it = _iter(stage, fid, self)
            orig.append(it)
            name += it.name + "@"
            if it.range is not None and extent is not None:
                extent = extent * it.range.extent
            else:
                extent = None
            if i == 0:
                kind = it.iter_kind
            elif kind != it.iter_kind:
                kind = IteratorKind.MIXED
        rng = Range(const(0), extent) if extent is not None else None
        new_it = Iterator(name, rng, kind, IteratorAnnotation.NONE, tuple(orig))
        if not self.fused_ids:
            state.update_stage(self.stage_id, iters=(new_it,))
            return new_it
        begin, end = self.fused_ids[0], self.fused_ids[-1]
        iters = (*stage.iters[:begin], new_it, *stage.iters[end + 1:])
        state.update_stage(self.stage_id, iters=iters)
        src, dst = [], []
        for i in range(begin + 1, old_size):
            src.append((self.stage_id, i))
            dst.append((self.stage_id, begin if i <= end else i - end + begin))
        state.attach_map.update_iters(src, dst)
        return new_it

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> Any:
        """Fuse the loops."""
        stage = _sch_stage(sch, self.stage_id, self)
        return stage.fuse([_axis(stage, i, self) for i in self.fused_ids])


@dataclass(frozen=True)
class PragmaStep(Step):
    """``["PR", stage, iter, "auto_unroll_max_step$64"]``."""

    prefix: ClassVar[str] = "PR"
    stage_id: int
    iter_id: int
    pragma_type: str

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record`."""
        return [self.prefix, self.stage_id, self.iter_id, self.pragma_type]

    def _max_step(self) -> int:
        _, sep, value = self.pragma_type.partition("$")
        if not sep:
            raise TuningLogError(f"step {self.to_record()}: the max step value is missing")
        digits = ""
        for ch in value.strip():
            if not (ch.isdigit() or (ch == "-" and not digits)):
                break
            digits += ch
        try:
            return int(digits)
        except ValueError:
            return 0  # atoi of a non-number

    def apply_to_state(self, state: State, dag: Any) -> None:
        """Record the unroll limit on the stage (or drop a ``debug_skip_region`` attachment);
        Kiln's ``prefetch_next_tile$<rows>`` (see :mod:`kiln.codegen.c_prefetch`) and
        ``unswitch_tile_guards`` (see :mod:`kiln.te.lower`) change nothing in the state."""
        _stage(state, self.stage_id, self)
        if self.pragma_type == "debug_skip_region":
            state.attach_map.delete_stage(self.stage_id)
        elif self.pragma_type.startswith("auto_unroll_max_step"):
            stage = state.stages[self.stage_id]
            attrs = type(stage.attrs)(self._max_step(), stage.attrs.storage_offset)
            state.update_stage(self.stage_id, attrs=attrs)
        elif self.pragma_type.startswith(PREFETCH_NEXT_TILE + "$"):
            if self._max_step() < 1:
                raise TuningLogError(f"step {self.to_record()}: the row count is missing")
        elif self.pragma_type != UNSWITCH_TILE_GUARDS:
            raise TuningLogError(f"step {self.to_record()}: unsupported pragma "
                                 f"{self.pragma_type!r}")

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> None:
        """Attach ``auto_unroll_max_step`` and ``unroll_explicit`` pragmas to the loop."""
        stage = _sch_stage(sch, self.stage_id, self)
        if self.pragma_type.startswith("auto_unroll_max_step"):
            if self.iter_id < len(stage.leaf_iter_vars):
                axis = stage.leaf_iter_vars[self.iter_id]
                stage.pragma(axis, "auto_unroll_max_step", self._max_step())
                stage.pragma(axis, "unroll_explicit", True)
        elif self.pragma_type.startswith(PREFETCH_NEXT_TILE + "$"):
            stage.pragma(_axis(stage, self.iter_id, self), PREFETCH_NEXT_TILE, self._max_step())
        else:
            stage.pragma(_axis(stage, self.iter_id, self), self.pragma_type)


@dataclass(frozen=True)
class ReorderStep(Step):
    """``["RE", stage, [order]]``: the new order of all iterators."""

    prefix: ClassVar[str] = "RE"
    stage_id: int
    after_ids: tuple[int, ...]

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record`."""
        return [self.prefix, self.stage_id, list(self.after_ids)]

    def apply_to_state(self, state: State, dag: Any) -> None:
        """Permute the iterators."""
        stage = _stage(state, self.stage_id, self)
        if sorted(self.after_ids) != list(range(len(stage.iters))):
            raise TuningLogError(f"step {self.to_record()}: the order must be a permutation of "
                                 f"the {len(stage.iters)} iterators of {stage.op.name}")
        state.update_stage(self.stage_id, iters=tuple(stage.iters[i] for i in self.after_ids))

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> None:
        """Reorder the loops."""
        stage = _sch_stage(sch, self.stage_id, self)
        if len(self.after_ids) != len(stage.leaf_iter_vars):
            raise ScheduleError(f"step {self.to_record()}: stage {stage.name} has "
                                f"{len(stage.leaf_iter_vars)} loops")
        stage.reorder([_axis(stage, i, self) for i in self.after_ids])


# --- splits -----------------------------------------------------------------------------------


def apply_split_to_state(state: State, step: Step, stage_id: int, iter_id: int,
                         lengths: Sequence[int | None], inner_to_outer: bool) -> list[Iterator]:
    """TVM's ``ApplySplitToState``: new iterators ``name.0 ... name.n`` with their ranges."""
    stage = _stage(state, stage_id, step)
    it = _iter(stage, iter_id, step)
    old_size = len(stage.iters)
    concrete = True
    tmin = it.range.min if it.range is not None else None
    text = it.range.extent if it.range is not None else None
    outs: list[Iterator] = []
    n = len(lengths)
    for i in range(n):
        if inner_to_outer:
            length, name = lengths[n - i - 1], f"{it.name}.{n - i}"
        else:
            length, name = lengths[i], f"{it.name}.{i}"
        if length is not None and tmin is not None and text is not None:
            outs.append(Iterator(name, Range(tmin, const(length)), it.iter_kind))
            tmin = const(0)
            text = E.binary("floordiv", text + (length - 1), length)
        else:
            outs.append(Iterator(name, None, it.iter_kind))
            tmin = text = None
            if length is None:
                concrete = False
    rng = Range(tmin, text) if tmin is not None and text is not None else None
    if inner_to_outer:
        outs.append(Iterator(f"{it.name}.0", rng, it.iter_kind))
        outs.reverse()
    else:
        outs.append(Iterator(f"{it.name}.{n}", rng, it.iter_kind))
    iters = (*stage.iters[:iter_id], *outs, *stage.iters[iter_id + 1:])
    state.update_stage(stage_id, iters=iters)
    state.concrete = state.concrete and concrete
    src = [(stage_id, i) for i in range(iter_id, old_size)]
    dst = [(stage_id, i + n) for i in range(iter_id, old_size)]
    state.attach_map.update_iters(src, dst)
    return outs


def apply_split_to_schedule(sch: Schedule, step: Step, stage_id: int, iter_id: int,
                            lengths: Sequence[int | None], inner_to_outer: bool) -> list[Any]:
    """TVM's ``ApplySplitToSchedule``: repeated factor (or nparts) splits."""
    stage = _sch_stage(sch, stage_id, step)
    if any(length is None for length in lengths):
        raise ScheduleError(f"step {step.to_record()}: split lengths must all be known to lower")
    outs = []
    if inner_to_outer:
        outer = _axis(stage, iter_id, step)
        for length in reversed(lengths):
            outer, inner = stage.split(outer, factor=length)
            outs.append(inner)
        outs.append(outer)
    else:
        inner = _axis(stage, iter_id, step)
        for length in lengths:
            outer, inner = stage.split(inner, nparts=length)
            outs.append(outer)
        outs.append(inner)
    return outs


@dataclass(frozen=True)
class SplitStep(Step):
    """``["SP", stage, iter, extent, [lengths], inner_to_outer]``."""

    prefix: ClassVar[str] = "SP"
    stage_id: int
    iter_id: int
    extent: int | None
    lengths: tuple[int | None, ...]
    inner_to_outer: bool

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record` (an unknown extent is written as 0)."""
        if any(length is None for length in self.lengths):
            raise TuningLogError(f"split step on stage {self.stage_id}: cannot write a record "
                                 f"with unknown lengths {list(self.lengths)}")
        return [self.prefix, self.stage_id, self.iter_id, self.extent or 0, list(self.lengths),
                int(self.inner_to_outer)]

    def apply_to_state(self, state: State, dag: Any) -> list[Iterator]:
        """See :func:`apply_split_to_state`."""
        return apply_split_to_state(state, self, self.stage_id, self.iter_id, self.lengths,
                                    self.inner_to_outer)

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> list[Any]:
        """See :func:`apply_split_to_schedule`."""
        return apply_split_to_schedule(sch, self, self.stage_id, self.iter_id, self.lengths,
                                       self.inner_to_outer)


def _split_source(steps: Sequence[Step], src: int, step: Step) -> SplitStep:
    if not 0 <= src < len(steps) or not isinstance(steps[src], SplitStep):
        raise TuningLogError(f"step {step.to_record()}: step {src} is not a split step")
    source = steps[src]
    assert isinstance(source, SplitStep)
    return source


@dataclass(frozen=True)
class FollowSplitStep(Step):
    """``["FSP", stage, iter, src_step, n_split]``: split like an earlier split step."""

    prefix: ClassVar[str] = "FSP"
    stage_id: int
    iter_id: int
    src_step_id: int
    n_split: int

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record`."""
        return [self.prefix, self.stage_id, self.iter_id, self.src_step_id, self.n_split]

    def lengths(self, steps: Sequence[Step]) -> list[int | None]:
        """The first ``n_split - 1`` lengths of the source, then the product of the rest."""
        src = _split_source(steps, self.src_step_id, self)
        if self.n_split > len(src.lengths) + 1:
            raise TuningLogError(f"step {self.to_record()}: n_split exceeds the source's parts")
        out: list[int | None] = list(src.lengths[:self.n_split - 1])
        last: int | None = 1
        for length in src.lengths[self.n_split - 1:]:
            if length is None or last is None:
                last = None
                break
            last *= length
        out.append(last)
        return out

    def apply_to_state(self, state: State, dag: Any) -> list[Iterator]:
        """Split with the followed lengths, inner to outer."""
        return apply_split_to_state(state, self, self.stage_id, self.iter_id,
                                    self.lengths(state.transform_steps), True)

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> list[Any]:
        """Split with the followed lengths, inner to outer."""
        return apply_split_to_schedule(sch, self, self.stage_id, self.iter_id,
                                       self.lengths(steps), True)


@dataclass(frozen=True)
class FollowFusedSplitStep(Step):
    """``["FFSP", stage, iter, [src_steps], level, factor_or_nparts]``."""

    prefix: ClassVar[str] = "FFSP"
    stage_id: int
    iter_id: int
    src_step_ids: tuple[int, ...]
    level: int
    factor_or_nparts: bool

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record`."""
        return [self.prefix, self.stage_id, self.iter_id, list(self.src_step_ids), self.level,
                int(self.factor_or_nparts)]

    def length(self, steps: Sequence[Step]) -> int | None:
        """Product of the sources' lengths at ``level``."""
        total = 1
        for src_id in self.src_step_ids:
            src = _split_source(steps, src_id, self)
            if not 0 <= self.level < len(src.lengths):
                raise TuningLogError(f"step {self.to_record()}: level {self.level} is out of "
                                     f"range for step {src_id}")
            value = src.lengths[self.level]
            if value is None:
                return None
            total *= value
        return total

    def apply_to_state(self, state: State, dag: Any) -> list[Iterator]:
        """Split once by the fused length."""
        return apply_split_to_state(state, self, self.stage_id, self.iter_id,
                                    [self.length(state.transform_steps)], self.factor_or_nparts)

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> list[Any]:
        """Split once by the fused length."""
        return apply_split_to_schedule(sch, self, self.stage_id, self.iter_id,
                                       [self.length(steps)], self.factor_or_nparts)


@dataclass(frozen=True)
class StorageAlignStep(Step):
    """``["SA", stage, iter, factor, offset]``."""

    prefix: ClassVar[str] = "SA"
    stage_id: int
    iter_id: int
    factor: int
    offset: int

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record`."""
        return [self.prefix, self.stage_id, self.iter_id, self.factor, self.offset]

    def apply_to_state(self, state: State, dag: Any) -> None:
        """Record the offset on the stage."""
        stage = _stage(state, self.stage_id, self)
        attrs = type(stage.attrs)(stage.attrs.auto_unroll_max_step, self.offset)
        state.update_stage(self.stage_id, attrs=attrs)

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> None:
        """Align the buffer dimension of the loop."""
        stage = _sch_stage(sch, self.stage_id, self)
        stage.storage_align_axis(_axis(stage, self.iter_id, self), self.factor, self.offset)


# --- compute location -------------------------------------------------------------------------


def _reset_ranges(stage: AnsorStage) -> tuple[Iterator, ...]:
    return tuple(Iterator(it.name, None, it.iter_kind, it.annotation, it.orig_iters)
                 for it in stage.iters)


@dataclass(frozen=True)
class ComputeAtStep(Step):
    """``["CA", stage, target_stage, target_iter]``."""

    prefix: ClassVar[str] = "CA"
    stage_id: int
    target_stage_id: int
    target_iter_id: int

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record`."""
        return [self.prefix, self.stage_id, self.target_stage_id, self.target_iter_id]

    def apply_to_state(self, state: State, dag: Any) -> None:
        """Attach the stage; its ranges are unknown until bound inference."""
        stage = _compute_stage(state, self.stage_id, self)
        _iter(_stage(state, self.target_stage_id, self), self.target_iter_id, self)
        state.update_stage(self.stage_id, iters=_reset_ranges(stage), compute_at=ComputeAtKind.ITER)
        state.attach_map.set_compute_at_iter(self.stage_id, self.target_stage_id,
                                             self.target_iter_id)

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> None:
        """``s[stage].compute_at(s[target], loop)``."""
        stage = _sch_stage(sch, self.stage_id, self)
        target = _sch_stage(sch, self.target_stage_id, self)
        stage.compute_at(target, _axis(target, self.target_iter_id, self))


@dataclass(frozen=True)
class ComputeInlineStep(Step):
    """``["CI", stage]``."""

    prefix: ClassVar[str] = "CI"
    stage_id: int

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record`."""
        return [self.prefix, self.stage_id]

    def apply_to_state(self, state: State, dag: Any) -> None:
        """Mark the stage inlined (nothing may be attached to it)."""
        stage = _compute_stage(state, self.stage_id, self)
        for i in range(len(stage.iters)):
            if (self.stage_id, i) in state.attach_map.iter_to_attached_stages:
                raise TuningLogError(f"step {self.to_record()}: other stages are computed at "
                                     f"{stage.op.name}, so it cannot be inlined")
        state.update_stage(self.stage_id, compute_at=ComputeAtKind.INLINED)
        state.attach_map.delete_stage(self.stage_id)

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> None:
        """``s[stage].compute_inline()``."""
        _sch_stage(sch, self.stage_id, self).compute_inline()


@dataclass(frozen=True)
class ComputeRootStep(Step):
    """``["CR", stage]``."""

    prefix: ClassVar[str] = "CR"
    stage_id: int

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record`."""
        return [self.prefix, self.stage_id]

    def apply_to_state(self, state: State, dag: Any) -> None:
        """Move the stage to the root; its ranges are unknown until bound inference."""
        stage = _stage(state, self.stage_id, self)
        state.update_stage(self.stage_id, iters=_reset_ranges(stage), compute_at=ComputeAtKind.ROOT)
        state.attach_map.delete_stage(self.stage_id)

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> None:
        """``s[stage].compute_root()``."""
        _sch_stage(sch, self.stage_id, self).compute_root()


# --- records ----------------------------------------------------------------------------------

# The steps that add stages live in their own module (imported here, after the base classes they
# build on, so that this module stays the one place listing every step kind).
from kiln.te.steps_dataflow import (  # noqa: E402
    CacheReadStep,
    CacheWriteStep,
    RfactorStep,
)

STEP_KINDS: dict[str, type[Step]] = {
    cls.prefix: cls for cls in (
        AnnotationStep, FuseStep, PragmaStep, ReorderStep, SplitStep, FollowSplitStep,
        FollowFusedSplitStep, StorageAlignStep, ComputeAtStep, ComputeInlineStep,
        ComputeRootStep, CacheReadStep, CacheWriteStep, RfactorStep)
}

# Field layout of each record kind: "i" int, "s" string, "l" list of ints, "b" 0/1 flag.
_LAYOUT = {
    "AN": "iii", "FU": "il", "PR": "iis", "RE": "il", "SP": "iiilb", "FSP": "iiii",
    "FFSP": "iilib", "SA": "iiii", "CA": "iii", "CI": "i", "CR": "i", "CHR": "isl", "CHW": "is",
    "RF": "iii",
}


_FIELD_NAMES = {"i": "an int", "b": "a 0/1 flag", "s": "a string", "l": "a list of ints"}


def _check_field(kind: str, value: Any, code: str, record: Any) -> Any:
    ok = {
        "i": isinstance(value, int) and not isinstance(value, bool),
        "b": isinstance(value, (int, bool)),
        "s": isinstance(value, str),
        "l": isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool)
                                             for v in value),
    }[code]
    if not ok:
        raise TuningLogError(f"malformed {kind} step {record!r}: field {value!r} is not "
                             f"{_FIELD_NAMES[code]}")
    if code == "l":
        return tuple(value)
    if code == "b":
        return bool(value)
    return value


def parse_step(record: Sequence[Any]) -> Step:
    """A step from its JSON array (raises :class:`~kiln.errors.TuningLogError` when malformed)."""
    if not isinstance(record, (list, tuple)) or not record or not isinstance(record[0], str):
        raise TuningLogError(f"malformed step {record!r}: expected [\"KIND\", ...]")
    kind = record[0]
    if kind not in STEP_KINDS:
        raise TuningLogError(f"unknown step kind {kind!r} in {record!r}; known kinds: "
                             f"{', '.join(STEP_KINDS)}")
    layout = _LAYOUT[kind]
    if len(record) != len(layout) + 1:
        raise TuningLogError(f"malformed {kind} step {record!r}: expected {len(layout)} fields")
    values = [_check_field(kind, v, c, record) for v, c in zip(record[1:], layout)]
    if kind == "SP":
        stage_id, iter_id, extent, lengths, inner = values
        return SplitStep(stage_id, iter_id, extent or None, lengths, inner)
    return STEP_KINDS[kind](*values)
