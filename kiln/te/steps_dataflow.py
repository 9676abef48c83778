"""Transform steps that add stages: cache_read (``CHR``), cache_write (``CHW``), rfactor (``RF``).

Applying one to a loop state replays every stage-changing step so far on a fresh schedule of the
original DAG (TVM's ``ReplayAndGetDAG``), takes the new operations from it, and shifts the ids of
the stages after the insertion point (attachments included), exactly as Ansor does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from kiln.errors import TuningLogError
from kiln.te.loop_state import AnsorStage, State
from kiln.te.schedule import Schedule
from kiln.te.steps import FuseStep, SplitStep, Step, _axis, _sch_stage, _stage

__all__ = ["CacheReadStep", "CacheWriteStep", "RfactorStep", "former_stage_modifiable_steps"]


def former_stage_modifiable_steps(current: Step, steps: Sequence[Step]) -> list[Step]:
    """The steps up to ``current`` that change the DAG (TVM's ``GetFormerStageModifiableSteps``)."""
    out: list[Step] = []
    for i, step in enumerate(steps):
        if isinstance(step, (CacheReadStep, CacheWriteStep)):
            out.append(step)
        elif isinstance(step, RfactorStep):
            if i >= 2 and isinstance(steps[i - 2], FuseStep) \
                    and steps[i - 2].stage_id == step.stage_id:
                out.append(steps[i - 2])
            if i < 1 or not isinstance(steps[i - 1], SplitStep) \
                    or steps[i - 1].stage_id != step.stage_id:
                raise TuningLogError(f"step {step.to_record()}: rfactor must directly follow a "
                                     "split of the same stage")
            out += [steps[i - 1], step]
        if step is current:
            break
    return out


def _refresh_ops(state: State, current_dag: Any, start: int) -> None:
    for i in range(start, len(state.stages)):
        state.update_stage(i, op=current_dag.ops[i])


@dataclass(frozen=True)
class CacheReadStep(Step):
    """``["CHR", stage, "scope", [reader_stages]]``."""

    prefix: ClassVar[str] = "CHR"
    stage_id: int
    scope_name: str
    reader_stage_ids: tuple[int, ...]

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record`."""
        return [self.prefix, self.stage_id, self.scope_name, list(self.reader_stage_ids)]

    def apply_to_state(self, state: State, dag: Any) -> int:
        """Insert the cache stage after the read stage; returns its id."""
        _stage(state, self.stage_id, self)
        cur = dag.replay_and_get_dag(former_stage_modifiable_steps(self, state.transform_steps))
        added = self.stage_id + 1
        state.update_stage(self.stage_id, op=cur.ops[self.stage_id])
        state.stages.insert(added, AnsorStage.from_op(cur.ops[added]))
        _refresh_ops(state, cur, added + 1)
        state.attach_map = state.attach_map.apply_stage_id_offset(added)
        state.current_compute_dag = cur
        return added

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> Any:
        """``s.cache_read(tensor, scope, readers)``."""
        stage = _sch_stage(sch, self.stage_id, self)
        readers = [_sch_stage(sch, i, self).op for i in self.reader_stage_ids]
        return sch.cache_read(stage.op.output(0), self.scope_name, readers)


@dataclass(frozen=True)
class CacheWriteStep(Step):
    """``["CHW", stage, "scope"]``."""

    prefix: ClassVar[str] = "CHW"
    stage_id: int
    scope_name: str

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record`."""
        return [self.prefix, self.stage_id, self.scope_name]

    def apply_to_state(self, state: State, dag: Any) -> int:
        """Insert the cache stage before the written stage; returns its id."""
        _stage(state, self.stage_id, self)
        last_size = len(state.current_compute_dag.ops) if state.current_compute_dag is not None \
            else len(dag.ops)
        cur = dag.replay_and_get_dag(former_stage_modifiable_steps(self, state.transform_steps))
        added_ops = len(cur.ops) - last_size
        if added_ops < 1:
            raise TuningLogError(f"step {self.to_record()}: cache_write added no stage")
        sid = self.stage_id
        state.stages.insert(sid, AnsorStage.from_op(cur.ops[sid]))
        state.set_stage(sid + 1, AnsorStage.from_op(cur.ops[sid + 1]))
        next_id = sid + 2
        if added_ops == 2:
            state.stages.insert(next_id, AnsorStage.from_op(cur.ops[next_id]))
            next_id += 1
        _refresh_ops(state, cur, next_id)
        state.attach_map = state.attach_map.apply_stage_id_offset(sid, added_ops)
        state.current_compute_dag = cur
        return sid

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> Any:
        """``s.cache_write([tensors], scope)``."""
        stage = _sch_stage(sch, self.stage_id, self)
        tensors = [stage.op.output(i) for i in range(stage.op.num_outputs)]
        return sch.cache_write(tensors, self.scope_name)


@dataclass(frozen=True)
class RfactorStep(Step):
    """``["RF", stage, iter, factor_iter]``."""

    prefix: ClassVar[str] = "RF"
    stage_id: int
    iter_id: int
    factor_iter_id: int

    def to_record(self) -> list[Any]:
        """See :meth:`Step.to_record`."""
        return [self.prefix, self.stage_id, self.iter_id, self.factor_iter_id]

    def apply_to_state(self, state: State, dag: Any) -> int:
        """Insert the factored stage before the reduction; returns its id."""
        stage = _stage(state, self.stage_id, self)
        cur = dag.replay_and_get_dag(former_stage_modifiable_steps(self, state.transform_steps))
        sid = self.stage_id
        state.stages.insert(sid, AnsorStage.from_op(cur.ops[sid]))
        target = AnsorStage.from_op(cur.ops[sid + 1])
        state.set_stage(sid + 1, AnsorStage(target.op, target.op_type, target.iters,
                                            stage.compute_at, target.attrs))
        _refresh_ops(state, cur, sid + 2)
        state.attach_map = state.attach_map.apply_stage_id_offset(sid)
        state.current_compute_dag = cur
        return sid

    def apply_to_schedule(self, sch: Schedule, steps: Sequence[Step]) -> Any:
        """``s.rfactor(tensor, loop, factor_axis)``."""
        stage = _sch_stage(sch, self.stage_id, self)
        return sch.rfactor(stage.op.output(0), _axis(stage, self.iter_id, self),
                           self.factor_iter_id)
