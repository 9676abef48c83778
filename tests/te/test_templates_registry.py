"""Schedule-template dispatch: one table from the compute tags of a DAG's reductions to the
template that schedules them (no trial over templates, no dependence on import order).

Oracles: the tags each template's docstring names (and the compute tags the operator layer
gives its stages), and calling the claiming template directly.
"""

from __future__ import annotations

import pytest

from kiln import te
from kiln.te.dag import ComputeDAG
from kiln.te.templates import (
    TargetInfo,
    TemplateError,
    anchor_tags,
    apply_template,
    register_template,
    template_for,
    templates,
)
from kiln.te.templates.dense import schedule_dense
from kiln.te.templates.reduction import schedule_row_reduction

TARGET = TargetInfo(32, 1)


def _dense_and_sum() -> tuple[te.Tensor, te.Tensor, te.Tensor, te.Tensor]:
    a = te.placeholder((4, 8), name="A")
    b = te.placeholder((16, 8), name="B")
    k = te.reduce_axis((0, 8), name="k")
    dense = te.compute((4, 16), lambda i, j: te.sum(a[i, k] * b[j, k], axis=k), name="T_dense",
                       tag="dense")
    r = te.reduce_axis((0, 8), name="r")
    total = te.compute((4,), lambda i: te.sum(a[i, r], axis=r), name="T_sum", tag="comm_reduce")
    return a, b, dense, total


def test_each_tag_is_claimed_by_one_template() -> None:
    table = {tag: t.name for tag, t in templates().items()}
    assert table == {
        "conv2d_NCHWc": "schedule_conv2d_nchwc", "group_conv2d_NCHWc": "schedule_conv2d_nchwc",
        "depthwise_conv2d_NCHWc": "schedule_depthwise_nchwc",
        "pool_max": "schedule_pool_nchwc", "pool_sum": "schedule_pool_nchwc",
        "adaptive_pool_max": "schedule_pool_nchwc", "adaptive_pool_sum": "schedule_pool_nchwc",
        "dense_pack": "schedule_dense_pack",
        "dense": "schedule_dense", "matmul": "schedule_dense",
        "batch_matmul": "schedule_batch_matmul",
        "": "schedule_row_reduction", "comm_reduce": "schedule_row_reduction",
        "winograd_bgemm": "schedule_winograd",
    }


def test_a_tag_claimed_twice_is_an_error() -> None:
    with pytest.raises(TemplateError, match="'dense' is already scheduled by schedule_dense"):
        register_template("dense")(lambda dag, target: None)
    with pytest.raises(TemplateError, match="needs the compute tags"):
        register_template()
    assert templates()["dense"].fn is schedule_dense  # the failed registration changed nothing


def test_the_anchor_tag_picks_the_template() -> None:
    a, b, dense, total = _dense_and_sum()
    epilogue = te.compute((4, 16), lambda i, j: dense[i, j] + 1.0, name="T_add", tag="elemwise")
    dag = ComputeDAG([a, b, epilogue])
    assert anchor_tags(dag) == {"dense"}
    template = template_for(dag)
    assert template is not None and template.fn is schedule_dense
    state = apply_template(dag, TARGET)
    direct = schedule_dense(dag, TARGET)
    assert state is not None and direct is not None
    assert repr(state.transform_steps) == repr(direct.transform_steps)

    sums = ComputeDAG([a, total])
    assert anchor_tags(sums) == {"comm_reduce"}
    found = template_for(sums)
    assert found is not None and found.fn is schedule_row_reduction


def test_dags_no_template_claims_get_none() -> None:
    a, b, dense, total = _dense_and_sum()
    scaled = te.compute((4, 8), lambda i, j: a[i, j] * 2.0, name="T_mul", tag="elemwise")
    assert anchor_tags(ComputeDAG([a, scaled])) == set()  # no reduction: the default schedule
    assert apply_template(ComputeDAG([a, scaled]), TARGET) is None
    mixed = te.compute((4, 16), lambda i, j: dense[i, j] + total[i], name="T_add", tag="broadcast")
    dag = ComputeDAG([a, b, mixed])  # a dense and a row sum: two templates' tags
    assert anchor_tags(dag) == {"dense", "comm_reduce"}
    assert template_for(dag) is None and apply_template(dag, TARGET) is None
    r = te.reduce_axis((0, 8), name="r")
    odd = te.compute((4,), lambda i: te.sum(a[i, r], axis=r), name="T_odd", tag="no_such_tag")
    assert template_for(ComputeDAG([a, odd])) is None
