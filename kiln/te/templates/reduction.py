"""Schedule template for row-wise reductions: softmax, layer norm, mean, variance, sums.

A fused function qualifies when every reduction in it reduces over the *trailing* axes of the
tensors it reads (a row of contiguous elements per output element), all over the same number
of elements, and it has a single output: softmax over the last axis (max, exp-sum, divide),
``nn.layer_norm`` (sum, sum of squared deviations, normalize), the decomposed
``ReduceMean/Sub/Pow/ReduceMean`` chains of exported encoders after fusion (``mean``,
``power_mean``, ``variance``), ``sum``/``max``/``min`` over trailing axes.

The schedule, as Ansor steps, runs one parallel loop over the rows (the output's leading axes,
fused) and computes everything a row needs inside it:

* each reduction's axes are fused, split by the vector width and factored (``rfactor``) into a
  stage of per-lane partial results whose lane loop is vectorized, then combined across the
  lanes once per row; its element-wise producers (``power``, ``subtract``, a cast) are inlined
  into the vectorized loop;
* an element-wise intermediate with the output's shape that holds a transcendental and feeds a
  reduction and the output (softmax's ``exp``) is computed once per row into a row buffer on
  the stack, vectorized, instead of being recomputed by each reader;
* the output's row (its trailing axes, fused) is then written with vector stores.

The vector exponential, ``tanh`` and ``erf`` of :mod:`kiln.codegen.c_prelude` serve the
vectorized loops. Reductions over leading axes (a softmax over channels in ``NCHW``), argmax-like
tuple reductions and several outputs are left to the default schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from kiln.te import expr as E
from kiln.te.bound import resolve_inlined
from kiln.te.dag import ComputeDAG
from kiln.te.loop_state import State
from kiln.te.templates.elemwise import PARALLEL_MIN_ELEMENTS, has_call, output_stage_ids
from kiln.te.templates.registry import TargetInfo, register_template
from kiln.te.tensor import ComputeOp, Operation
from kiln.te.visit import post_order

__all__ = ["ROWS_PER_STEP", "ROW_TAGS", "schedule_row_reduction"]

# Tags of the reductions this template schedules: untagged ones (softmax, layer norm) and relay's
# reduce ops (other tagged reductions have their own templates).
ROW_TAGS = ("", "comm_reduce")
_COMBINERS = ("add", "max", "min")
# Rows handled together in one step of the parallel loop (their reduction chains interleave),
# split off the innermost row axis; a last partial step skips the missing rows by bound checks
# (ViT's 197-row softmax, AVX2 build on Zen 5: 66 -> 59 us as steps of 4 rows instead of 1, its
# layer norm 9.0 -> 6.8 us).
ROWS_PER_STEP = 4


def _mentions(e: E.PrimExpr, var: E.Var) -> bool:
    return any(node is var for node in post_order(e))


def _simple_reduction(op: ComputeOp) -> bool:
    """One ``sum``/``max``/``min`` with no condition and no explicit initial value."""
    if len(op.body) != 1 or op.tag not in ROW_TAGS:
        return False
    body = op.body[0]
    if not isinstance(body, E.Reduce) or len(body.source) != 1 or body.init:
        return False
    combiner = body.combiner.result[0]
    return isinstance(combiner, E.Binary) and combiner.kind in _COMBINERS \
        and isinstance(body.condition, E.IntImm) and bool(body.condition.value)


def _reads_rows(op: ComputeOp, bodies: tuple[E.PrimExpr, ...]) -> bool:
    """Whether every load that depends on the reduction axes reads them as its trailing indices,
    in order and over the whole trailing extent (so the reduced elements are contiguous)."""
    red = [iv.var for iv in op.reduce_axis]
    extents = _extents(op)
    if len(extents) != len(red):
        return False
    for body in bodies:
        for load in (n for n in post_order(body) if isinstance(n, E.TensorLoad)):
            if not any(_mentions(i, v) for i in load.indices for v in red):
                continue
            n = len(red)
            if len(load.indices) < n:
                return False
            head, tail = load.indices[:-n], load.indices[-n:]
            if any(t is not v for t, v in zip(tail, red)) \
                    or any(_mentions(i, v) for i in head for v in red) \
                    or tuple(load.tensor.shape[-n:]) != tuple(extents):
                return False
    return True


def _row_split(shape: tuple[int, ...], row_elements: int) -> int | None:
    """How many trailing axes of ``shape`` make one row of ``row_elements`` elements (0 when the
    output has one element per row), or None when the shape does not split that way."""
    for n in range(len(shape) + 1):
        if prod(shape[len(shape) - n:]) == row_elements:
            return n
    return None


def _pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def _readers(dag: ComputeDAG, op: Operation) -> int:
    return sum(1 for x in dag.ops if isinstance(x, ComputeOp)
               and any(t.op is op for t in x.input_tensors()))


@dataclass(frozen=True)
class _RowPlan:
    """What the template found: stage ids of the reductions, of the element-wise stages kept
    as per-row buffers and of the output; the output's trailing axes that make up a row
    (0: one output element per row) and the elements each reduction combines per row."""

    reductions: tuple[int, ...]
    kept: tuple[int, ...]
    out: int
    inner: int
    row_size: int


def _plan(dag: ComputeDAG) -> _RowPlan | None:
    """The row structure of ``dag``, or None when it is not a row reduction (see the module
    docstring); checks everything except the operand layout."""
    outs = output_stage_ids(dag)
    reductions = tuple(i for i, op in enumerate(dag.ops)
                       if isinstance(op, ComputeOp) and op.is_reduction)
    if len(outs) != 1 or not reductions:
        return None
    out = outs[0]
    out_op = dag.ops[out]
    red_ops = [dag.ops[i] for i in reductions]
    if not isinstance(out_op, ComputeOp) or not all(
            isinstance(op, ComputeOp) and _simple_reduction(op) for op in red_ops):
        return None
    sizes = {prod(_extents(op)) for op in red_ops if isinstance(op, ComputeOp)}
    rows = {prod(op.output_shape(0)) for op in red_ops}
    if len(sizes) != 1 or len(rows) != 1:
        return None
    row_size, n_rows = sizes.pop(), rows.pop()
    if row_size < 1 or 0 in out_op.shape:
        return None  # empty rows or an empty output: nothing to schedule
    inner = 0 if prod(out_op.shape) == n_rows else _row_split(out_op.shape, row_size)
    if inner is None or inner == len(out_op.shape):
        return None  # not row-shaped, or a single row (nothing to run in parallel)
    kept = tuple(i for i, op in enumerate(dag.ops)
                 if isinstance(op, ComputeOp) and not op.is_reduction and i != out and inner
                 and op.shape == out_op.shape and has_call(op) and _readers(dag, op) > 1)
    return _RowPlan(reductions, kept, out, inner, row_size)


def _extents(op: ComputeOp) -> list[int]:
    return [iv.dom.extent.value for iv in op.reduce_axis
            if iv.dom is not None and isinstance(iv.dom.extent, E.IntImm)]


@register_template(*ROW_TAGS)
def schedule_row_reduction(dag: ComputeDAG, target: TargetInfo) -> State | None:
    """Template for fused functions built around reductions over trailing axes.

    Parameters
    ----------
    dag : ComputeDAG
        One fused function.
    target : TargetInfo
        Vector width and usable cores.

    Returns
    -------
    State or None
        The row-parallel, vectorized schedule of the module docstring, or None when the DAG is
        not of that form.
    """
    plan = _plan(dag)
    if plan is None:
        return None
    state = dag.init_state
    for i, op in enumerate(dag.ops):
        if isinstance(op, ComputeOp) and not op.is_reduction and i != plan.out \
                and i not in plan.kept:
            state.compute_inline(i)
    sch = dag.apply_steps(state.transform_steps)
    resolved = resolve_inlined(sch)
    for i in plan.reductions:
        op = dag.ops[i]
        assert isinstance(op, ComputeOp)
        if not _reads_rows(op, resolved[id(sch.stages[i])]):
            return None
    _schedule(state, dag, plan, target)
    return state


def _schedule(state: State, dag: ComputeDAG, plan: _RowPlan, target: TargetInfo) -> None:
    ops = dag.ops
    # factor every reduction, last first so that the ids of earlier stages do not move
    for sid in sorted(plan.reductions, reverse=True):
        op = ops[sid]
        assert isinstance(op, ComputeOp)
        n_sp, n_red = len(op.axis), len(op.reduce_axis)
        if n_red > 1:
            state.fuse(sid, list(range(n_sp, n_sp + n_red)))
        lanes = min(target.lanes(op.output_dtype(0)), _pow2_floor(plan.row_size))
        state.split(sid, n_sp, [lanes])
        state.rfactor(sid, n_sp + 1, n_sp)

    def new_id(orig: int) -> int:
        return orig + sum(1 for r in plan.reductions if r <= orig)

    anchor = new_id(plan.out)
    out_op = ops[plan.out]
    assert isinstance(out_op, ComputeOp)
    n_axes = len(out_op.shape)
    n_outer = n_axes - plan.inner
    rows = prod(out_op.shape[:n_outer])
    # rows per step: whole steps of the innermost row axis, so that a step's rows stay one box
    # for bound inference (split off the fused rows when it divides, else off that axis)
    step = min(ROWS_PER_STEP, out_op.shape[n_outer - 1])
    whole = out_op.shape[n_outer - 1] % step == 0
    if step > 1 and not whole:
        state.split(anchor, n_outer - 1, [step])
    if n_outer > 1:
        state.fuse(anchor, list(range(n_outer)))
    if step > 1 and whole:
        state.split(anchor, 0, [step])
    pos = 2 if step > 1 else 1
    if plan.inner:
        if plan.inner > 1:
            state.fuse(anchor, list(range(pos, pos + plan.inner)))
        lanes = min(target.lanes(out_op.output_dtype(0)), _pow2_floor(plan.row_size))
        state.split(anchor, pos, [lanes])
        state.vectorize(anchor, pos + 1)
    if target.num_threads > 1 and rows >= 2 * target.num_threads \
            and rows * plan.row_size >= PARALLEL_MIN_ELEMENTS:
        state.parallel(anchor, 0)
    for orig in sorted(plan.reductions + plan.kept):
        if orig in plan.reductions:
            _attach_reduction(state, new_id(orig) - 1, anchor, step)
        else:
            sid = new_id(orig)
            state.compute_at(sid, anchor, 0)
            if plan.inner > 1:
                state.fuse(sid, list(range(n_outer, n_axes)))
            lanes = min(target.lanes(ops[orig].output_dtype(0)), _pow2_floor(plan.row_size))
            state.split(sid, n_outer, [lanes])
            state.vectorize(sid, n_outer + 1)


def _attach_reduction(state: State, rf: int, anchor: int, step: int) -> None:
    """Compute a factored reduction (``rf``, then its lane combination at ``rf + 1``) at the
    row loop of ``anchor``: the lane loop vectorized, the rows of a step interleaved."""
    repl = rf + 1
    if repl != anchor:
        state.compute_at(repl, anchor, 0)
    state.compute_at(rf, anchor, 0)
    n_sp = len(state.stages[rf].iters) - 2  # spatial..., lanes, k.outer
    # k.outer, spatial..., lanes
    state.reorder(rf, [n_sp + 1, *range(n_sp), n_sp])
    state.vectorize(rf, n_sp + 1)
    if step == 1:
        return
    for it in range(1, n_sp + 1):
        state.unroll(rf, it)
    if repl != anchor:
        n_rs = len(state.stages[repl].iters) - 1  # spatial..., lanes (reduced)
        state.reorder(repl, [n_rs, *range(n_rs)])
        for it in range(1, n_rs + 1):
            state.unroll(repl, it)
