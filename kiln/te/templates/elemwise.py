"""Helpers for element-wise stages that other templates leave at the root of a kernel.

A template that materializes its main stage (a matrix product computed into its own buffer,
a row reduction) still has to schedule the element-wise stages that read it. Those stages are
inlined into the kernel's outputs; each output is then scheduled by
:func:`schedule_pointwise`: the trailing axes that every input reads contiguously (a slice or
a transpose stops them) fused and split by the vector width with the inner part vectorized,
the other loops fused into one run in parallel when there is enough work.
"""

from __future__ import annotations

from math import prod

from kiln.te import expr as E
from kiln.te.bound import resolve_inlined
from kiln.te.dag import ComputeDAG
from kiln.te.loop_state import State
from kiln.te.templates.registry import TargetInfo
from kiln.te.tensor import ComputeOp
from kiln.te.visit import post_order

__all__ = [
    "PARALLEL_MIN_ELEMENTS",
    "contiguous_suffix",
    "has_call",
    "inline_all_but",
    "output_stage_ids",
    "schedule_pointwise",
]

# Fewer elements than this do not pay for a parallel region (it costs microseconds).
PARALLEL_MIN_ELEMENTS = 1 << 14


def has_call(op: ComputeOp) -> bool:
    """Whether ``op``'s body calls a function (``exp``, ``erf``, ``tanh``, ...)."""
    return any(isinstance(n, E.Call) for b in op.body for n in post_order(b))


def output_stage_ids(dag: ComputeDAG) -> list[int]:
    """Ids of the stages that compute the kernel's outputs.

    Parameters
    ----------
    dag : ComputeDAG
        The computation.

    Returns
    -------
    list of int
        Stage ids, in stage order.
    """
    outs = {id(t.op) for t in dag.tensors if isinstance(t.op, ComputeOp)}
    return [i for i, op in enumerate(dag.ops) if id(op) in outs]


def inline_all_but(state: State, dag: ComputeDAG, keep: set[int]) -> bool:
    """Inline every non-output, non-reduction compute stage whose id is not in ``keep``.

    Parameters
    ----------
    state : State
        The state to add ``CI`` steps to (stage ids do not change).
    dag : ComputeDAG
        Its computation.
    keep : set of int
        Stage ids to leave alone.

    Returns
    -------
    bool
        False when a non-output reduction other than those in ``keep`` exists (it cannot be
        inlined, so the caller's pattern does not apply); nothing is inlined then.
    """
    outs = set(output_stage_ids(dag))
    inline: list[int] = []
    for i, op in enumerate(dag.ops):
        if not isinstance(op, ComputeOp) or i in keep or i in outs:
            continue
        if op.is_reduction:
            return False
        inline.append(i)
    for i in inline:
        state.compute_inline(i)
    return True


def _mentions(e: E.PrimExpr, var: E.Var) -> bool:
    return any(node is var for node in post_order(e))


def contiguous_suffix(op: ComputeOp, bodies: tuple[E.PrimExpr, ...]) -> int:
    """How many trailing axes of ``op`` every load reads in step (same trailing indices, same
    extents) or not at all, so that fusing them keeps each load contiguous or uniform.

    Parameters
    ----------
    op : ComputeOp
        The stage.
    bodies : tuple of PrimExpr
        Its bodies with inlined producers substituted.

    Returns
    -------
    int
        The count (0 when even the last axis is read some other way, e.g. sliced or strided).
    """
    axes = [iv.var for iv in op.axis]
    loads = [n for b in bodies for n in post_order(b) if isinstance(n, E.TensorLoad)]
    count = 0
    for d in range(len(axes) - 1, -1, -1):
        pos_from_end = len(axes) - d
        for load in loads:
            users = [i for i, x in enumerate(load.indices) if _mentions(x, axes[d])]
            if not users:
                continue
            pos = len(load.indices) - pos_from_end
            if users != [pos] or load.indices[pos] is not axes[d] \
                    or load.tensor.shape[pos] != op.shape[d]:
                return count
        count += 1
    return count


def schedule_pointwise(state: State, sid: int, target: TargetInfo) -> None:
    """Vectorize and parallelize a root stage without reduction loops.

    The trailing axes that every input reads contiguously are fused and split by the vector
    width (inner part vectorized); the remaining outer loops are fused into one loop, run in
    parallel when the stage is large enough.

    Parameters
    ----------
    state : State
        The state to schedule (steps are appended; the stages it inlines must already be
        inlined).
    sid : int
        The stage: a computed stage at the root whose iterators are all spatial.
    target : TargetInfo
        Vector width and usable cores.
    """
    stage = state.stages[sid]
    op = stage.op
    assert isinstance(op, ComputeOp)
    shape = op.shape
    if not shape:
        return
    assert state.dag is not None
    sch = state.dag.apply_steps(state.transform_steps)
    bodies = resolve_inlined(sch)[id(sch.stages[sid])]
    n = len(shape)
    clean = max(1, contiguous_suffix(op, bodies))
    if clean > 1:
        state.fuse(sid, list(range(n - clean, n)))
    inner = prod(shape[n - clean:])
    lanes = target.lanes(op.output_dtype(0))
    vectorize = lanes > 1 and inner >= lanes
    if vectorize:
        state.split(sid, n - clean, [lanes])
    outer = n - clean + (1 if vectorize else 0)
    if outer > 1:
        state.fuse(sid, list(range(outer)))
    if outer and target.num_threads > 1 and prod(shape) >= PARALLEL_MIN_ELEMENTS:
        state.parallel(sid, 0)
    if vectorize:
        state.vectorize(sid, len(state.stages[sid].iters) - 1)
