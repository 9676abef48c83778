"""Schedule template of pooling in the blocked ``NCHW{c}c`` layout (max and average windows,
adaptive and global pooling).

Pooling reduces a window of each channel separately, so it uses the window schedule of
:mod:`kiln.te.templates.depthwise`: the channel block is the vector, a register tile of output
pixels (and, when the output has few pixels, of several channel blocks, so that the reductions
are independent chains) is accumulated in registers, the window is unrolled, the outer loops run
in parallel and the epilogue (the average's division, a following bias add or activation) is
applied to the registers before the one store. Pooling in the plain ``NCHW`` layout is left to
the default schedule.
"""

from __future__ import annotations

from kiln.te.dag import ComputeDAG
from kiln.te.loop_state import State
from kiln.te.templates.conv2d import match_nchwc
from kiln.te.templates.depthwise import schedule_window
from kiln.te.templates.registry import TargetInfo, register_template

__all__ = ["POOL_TAGS", "schedule_pool_nchwc"]

POOL_TAGS = ("pool_max", "pool_sum", "adaptive_pool_max", "adaptive_pool_sum")

# Channel blocks a pooling tile may span.
_MAX_BLOCKS = 8


@register_template(*POOL_TAGS)
def schedule_pool_nchwc(dag: ComputeDAG, target: TargetInfo) -> State | None:
    """The schedule of a fused pooling function in a blocked layout; ``None`` for other DAGs.

    Parameters
    ----------
    dag : ComputeDAG
        The fused function.
    target : TargetInfo
        Vector registers and usable cores.

    Returns
    -------
    State or None
        The schedule (see the module docstring).
    """
    pattern = match_nchwc(dag, POOL_TAGS)
    if pattern is None:
        return None
    return schedule_window(dag, pattern, target, max_oc_t=_MAX_BLOCKS)
