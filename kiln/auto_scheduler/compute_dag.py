"""``ComputeDAG`` and ``LayoutRewriteOption`` with TVM's auto_scheduler signatures.

Kiln's DAG (:class:`kiln.te.dag.ComputeDAG`) takes tensors; TVM's also takes a workload key or a
schedule. The class here accepts all three and adds TVM's method names (``get_init_state``,
``apply_steps_from_state``, ``infer_bound_from_state``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kiln.te.dag import ComputeDAG as _TeComputeDAG
from kiln.te.schedule import Schedule
from kiln.te.tensor import Tensor
from kiln.te.workload import workload_key_to_tensors

if TYPE_CHECKING:
    from kiln.te.loop_state import State

__all__ = ["ComputeDAG", "LayoutRewriteOption"]


class LayoutRewriteOption:
    """How a task's placeholders may be rewritten to the layout its schedule reads best.

    NO_REWRITE and INSERT_TRANSFORM_STAGE are for standalone operators, REWRITE_FOR_PRE_TRANSFORMED
    for operators inside a network (weights transformed ahead of time). Kiln records the option
    (it is part of a record) but compiles every option as NO_REWRITE.
    """

    NO_REWRITE = 0
    INSERT_TRANSFORM_STAGE = 1
    REWRITE_FOR_PRE_TRANSFORMED = 2

    @staticmethod
    def get_target_default(target: Any, in_relay_integration: bool = False) -> int:
        """TVM's default for a target: a rewrite on ``llvm``, none elsewhere.

        Parameters
        ----------
        target : Target
            The compilation target.
        in_relay_integration : bool
            Whether the task comes from a network (then REWRITE_FOR_PRE_TRANSFORMED).

        Returns
        -------
        int
            The option.
        """
        if getattr(getattr(target, "kind", None), "name", None) == "llvm":
            return (LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED if in_relay_integration
                    else LayoutRewriteOption.INSERT_TRANSFORM_STAGE)
        return LayoutRewriteOption.NO_REWRITE


class ComputeDAG(_TeComputeDAG):
    """The computation of a task (TVM's ``auto_scheduler.ComputeDAG``).

    Parameters
    ----------
    compute_or_sche : list of Tensor, str or Schedule
        The input and output tensors, a registered workload key, or a schedule.
    """

    def __init__(self, compute_or_sche: Sequence[Tensor] | str | Schedule):
        if isinstance(compute_or_sche, str):
            super().__init__(workload_key_to_tensors(compute_or_sche))
        elif isinstance(compute_or_sche, Schedule):
            other = _TeComputeDAG.from_schedule(compute_or_sche)
            self.__dict__.update(other.__dict__)
        else:
            items = list(compute_or_sche)
            for item in items:
                if not isinstance(item, Tensor):
                    raise TypeError("ComputeDAG takes a list of tensors, a workload key or a "
                                    f"schedule; got a list holding {type(item).__name__}")
            super().__init__(items)

    def get_init_state(self) -> State:
        """The loop state before any step (TVM's name for :attr:`init_state`)."""
        return self.init_state

    def apply_steps_from_state(self, state: State,  # type: ignore[override]
                               layout_rewrite: int = LayoutRewriteOption.NO_REWRITE
                               ) -> tuple[Schedule, list[Tensor]]:
        """The schedule a state's steps describe, and the kernel's tensors.

        Parameters
        ----------
        state : State
            A state of this DAG.
        layout_rewrite : int
            A :class:`LayoutRewriteOption` (accepted; Kiln does not rewrite layouts).

        Returns
        -------
        (Schedule, list of Tensor)
            For :func:`kiln.te.lower` or :func:`kiln.build`.
        """
        return super().apply_steps_from_state(state)

    def infer_bound_from_state(self, state: State) -> State:
        """A copy of ``state`` with every iterator's range filled in."""
        return self.infer_bound(state)
