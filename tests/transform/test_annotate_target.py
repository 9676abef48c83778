"""AnnotateTarget: TVM's behaviour for targets without rules, empty tuples and references
(expected graphs restated from TVM's test_pass_annotate_target.py)."""

from __future__ import annotations

import pytest

import kiln as tvm
from kiln import relay
from kiln.ir import assert_structural_equal
from kiln.ir.ref import RefCreate, RefRead, RefWrite
from kiln.relay.op.contrib import register_op_attr
from kiln.transform import AnnotateTarget, InferType
from kiln.transform.annotation import compiler_begin, compiler_end
from kiln.transform.external_target import ExternalTargetUnavailable


@pytest.mark.parametrize("include_non_call_ops", [True, False])
def test_target_without_rules_annotates_nothing_here(include_non_call_ops):
    for body in (relay.zeros(shape=(0,), dtype="float32"), relay.Tuple([])):
        before = tvm.IRModule.from_expr(relay.Function([], body))
        out = AnnotateTarget("no_rules_for_this_target", include_non_call_ops)(before)
        assert_structural_equal(out, InferType()(before))


def test_tvm_codegens_kiln_lacks_still_raise():
    x = relay.var("x", shape=(2,))
    with pytest.raises(ExternalTargetUnavailable):
        AnnotateTarget("dnnl")(tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(x))))


@pytest.mark.parametrize("include_non_call_ops", [True, False])
def test_references_are_annotated_like_tvm(include_non_call_ops):
    target = "kiln_test_ref_relu"
    register_op_attr("nn.relu", "target." + target, lambda expr: True)

    ref = RefCreate(relay.const(1.0))
    before = tvm.IRModule.from_expr(RefWrite(ref, relay.nn.relu(RefRead(ref))))

    co = relay.const(1.0)
    if include_non_call_ops:
        co = compiler_begin(co, "default")
    ref = RefCreate(co)
    ref1 = ref
    if include_non_call_ops:
        ref = compiler_begin(compiler_end(ref, "default"), "default")
        ref1 = compiler_begin(compiler_end(ref1, "default"), "default")
    read = RefRead(ref1)
    if include_non_call_ops:
        read = compiler_end(read, "default")
    end = compiler_end(relay.nn.relu(compiler_begin(read, target)), target)
    if include_non_call_ops:
        end = compiler_begin(end, "default")
    out = RefWrite(ref, end)
    if include_non_call_ops:
        out = compiler_end(out, "default")
    expected = InferType()(tvm.IRModule.from_expr(out))
    assert_structural_equal(AnnotateTarget(target, include_non_call_ops)(before), expected)
