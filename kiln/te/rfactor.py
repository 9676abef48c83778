"""``Schedule.rfactor``: factor a reduction into a partial-reduction stage and a final one.

For ``C(i, j) = sum_k f(k)`` with ``k`` split into ``k.outer x k.inner``, ``rfactor(C, k.inner)``
makes ``C.rf(i, j, k.inner) = sum_{k.outer} f(k.outer * F + k.inner)`` (the factored loop becomes a
spatial axis at ``factor_axis``) and replaces ``C`` by ``C.repl(ax0, ax1) = sum_{k.inner.v}
C.rf[ax0, ax1, k.inner.v]``, with TVM's names and stage positions.
"""

from __future__ import annotations

from kiln.te import expr as E
from kiln.te.expr import PrimExpr, Var, const
from kiln.te.schedule import (
    Schedule,
    ScheduleError,
    SplitRelation,
    Stage,
    pass_down_domain,
    pass_up_index,
)
from kiln.te.tensor import (
    COMM_REDUCE,
    DATA_PAR,
    ComputeOp,
    IterVar,
    Range,
    Tensor,
    make_compute_op,
)
from kiln.te.visit import substitute

__all__ = ["rfactor"]


def _touched(stage: Stage, axis: IterVar) -> set[int]:
    """Loops related to ``axis`` through splits and fuses (up to the roots, then down)."""
    touched = {id(axis)}
    for rel in reversed(stage.relations):
        if isinstance(rel, SplitRelation):
            if id(rel.outer) in touched or id(rel.inner) in touched:
                touched.add(id(rel.parent))
        elif id(rel.fused) in touched:
            touched.update((id(rel.outer), id(rel.inner)))
    for rel in stage.relations:
        if isinstance(rel, SplitRelation):
            if id(rel.parent) in touched:
                touched.update((id(rel.outer), id(rel.inner)))
        elif id(rel.outer) in touched or id(rel.inner) in touched:
            touched.add(id(rel.fused))
    return touched


def rfactor(sch: Schedule, tensor: Tensor, axis: IterVar, factor_axis: int) -> list[Tensor]:
    """See the module docstring; returns the factored tensors."""
    stage = sch[tensor.op]
    op = stage.op
    if axis.iter_type != COMM_REDUCE:
        raise ScheduleError(f"rfactor of {op.name}: {axis.var.name} is not a reduction loop")
    if not isinstance(op, ComputeOp) or not op.is_reduction:
        raise ScheduleError(f"rfactor: {op.name} is not a reduction")
    stage._leaf_index(axis, "rfactor")
    touched = _touched(stage, axis)
    if any(id(iv) in touched for iv in op.axis):
        raise ScheduleError(f"rfactor of {op.name}: {axis.var.name} touches a spatial axis")

    root_dom: dict[int, tuple[PrimExpr, int]] = {}
    for iv in op.reduce_axis:
        assert iv.dom is not None
        if not isinstance(iv.dom.extent, E.IntImm):
            raise ScheduleError(f"rfactor of {op.name}: {iv.var.name} has a symbolic extent")
        root_dom[id(iv)] = (iv.dom.min, iv.dom.extent.value)
    dom = pass_down_domain(stage, root_dom)
    leaf_values: dict[int, PrimExpr] = {}
    root_ids = {id(iv) for iv in op.reduce_axis}
    for iv in stage.leaf_iter_vars:
        if id(iv) in touched:
            vmin, ext = dom[id(iv)]
            # values are offsets from the root minimums, added back after passing up
            offset = iv.var - vmin if id(iv) in root_ids else iv.var
            leaf_values[id(iv)] = E.const(0) if ext == 1 else offset
    values = pass_up_index(stage, dom, leaf_values)

    # bound checks of every touched split whose parts overrun their parent
    predicates: list[PrimExpr] = []
    for rel in stage.relations:
        if isinstance(rel, SplitRelation) and id(rel.parent) in touched:
            _, pext = dom[id(rel.parent)]
            if dom[id(rel.outer)][1] * dom[id(rel.inner)][1] != pext:
                predicates.append(E._compare("lt", values[id(rel.parent)], pext))
    for iv in op.reduce_axis:
        if id(iv) in touched and id(iv) in values:
            values[id(iv)] = values[id(iv)] + root_dom[id(iv)][0]

    pos = factor_axis if factor_axis >= 0 else len(op.axis) + 1 + factor_axis
    if not 0 <= pos <= len(op.axis):
        raise ScheduleError(f"rfactor of {op.name}: factor_axis {factor_axis} is out of range")
    amin, aext = dom[id(axis)]
    new_iv = IterVar(axis.var, Range(amin, const(aext)), DATA_PAR)
    rf_axis = list(op.axis)
    rf_axis.insert(pos, new_iv)

    reduce0 = op.body[tensor.value_index]
    assert isinstance(reduce0, E.Reduce)
    vsub: dict[Var, PrimExpr] = {}
    rf_reduce: list[IterVar] = []
    for iv in op.reduce_axis:
        if id(iv) in touched:
            vsub[iv.var] = values[id(iv)]
        else:
            rf_reduce.append(iv)
    for iv in stage.leaf_iter_vars:
        if id(iv) in touched and iv is not axis:
            vmin, ext = dom[id(iv)]
            rf_reduce.append(IterVar(iv.var, Range(vmin, const(ext)), COMM_REDUCE))
    cond: PrimExpr = reduce0.condition
    for p in predicates:
        cond = E.logical_and(p, cond)
    source = tuple(substitute(s, vsub) for s in reduce0.source)
    cond = substitute(cond, vsub)
    rf_body = tuple(E.Reduce(reduce0.combiner, source, tuple(rf_reduce), cond, i, (),
                             source[i].dtype) for i in range(len(source)))
    rf_op = ComputeOp(op.name + ".rf", op.tag, op.attrs, tuple(rf_axis), rf_body, tuple(rf_reduce))

    repl_axis = tuple(IterVar(Var(f"ax{i}"), Range(const(0), const(d)), DATA_PAR)
                      for i, d in enumerate(op.shape))
    repl_red = IterVar(Var(axis.var.name + ".v"), Range(amin, const(aext)), COMM_REDUCE)
    indices: list[PrimExpr] = [iv.var for iv in repl_axis]
    indices.insert(pos, repl_red.var)
    init_sub = {iv.var: niv.var for iv, niv in zip(op.axis, repl_axis)}
    new_init = tuple(substitute(x, init_sub) for x in reduce0.init)
    factor_loads = tuple(rf_op.output(i)[tuple(indices)] for i in range(rf_op.num_outputs))
    repl_body = tuple(E.Reduce(reduce0.combiner, factor_loads, (repl_red,), const(True), i,
                               new_init, factor_loads[i].dtype)
                      for i in range(len(factor_loads)))
    repl_op = make_compute_op(op.name + ".repl", op.tag, op.attrs, repl_axis, repl_body)

    rf_stage = Stage.for_op(rf_op)
    sch.stages.insert(sch.stage_index(stage), rf_stage)
    vmap = {op.output(i).key: repl_op.output(i) for i in range(op.num_outputs)}
    sch._replace_dataflow(vmap)
    stage.op = repl_op
    roots = [*repl_op.axis, *repl_op.reduce_axis]
    stage.all_iter_vars, stage.leaf_iter_vars, stage.relations = list(roots), list(roots), []
    stage.annotations, stage.pragmas = {}, {}
    sch.outputs = [repl_op if o is op else o for o in sch.outputs]
    return [rf_op.output(i) for i in range(rf_op.num_outputs)]
