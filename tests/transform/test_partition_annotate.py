"""AnnotateTarget and the external-target registry.

Expected graphs are written by hand following TVM's AnnotateTarget rules (the cases come from
TVM's own ``test_pass_annotate_target.py``): every supported call gets ``compiler_begin`` on its
inputs and ``compiler_end`` on its output, unsupported calls get ``"default"`` annotations, tuples
follow their fields.
"""

from __future__ import annotations

import pytest
from _pass_helpers import module

import kiln as tvm
from kiln import relay
from kiln.ir import assert_structural_equal, structural_hash
from kiln.relay.op.contrib import external_targets, register_op_attr, supported_ops
from kiln.transform import AnnotateTarget, InferType
from kiln.transform.annotation import compiler_begin, compiler_end
from kiln.transform.external_target import (
    ExternalTargetError,
    ExternalTargetUnavailable,
    check_targets,
    op_supported,
)

# Targets declared for these tests only (names no other test uses).
register_op_attr("nn.relu", "target.ta_relu", lambda call: True)
register_op_attr("concatenate", "target.ta_relu", lambda call: True)
register_op_attr("abs", "target.ta_abs")(lambda call: True)
register_op_attr("add", "target.ta_add", lambda attrs, args: True)  # TVM's older signature
register_op_attr("clip", "target.ta_clip",
                 lambda call: call.attrs.a_max <= 100.0)  # an attribute condition
for _op in ("equal", "tanh", "sigmoid", "erf"):
    register_op_attr(_op, "target.ta_if", True)


def typed(body: tvm.ir.Expr, params: list[relay.Var]) -> tvm.IRModule:
    return InferType()(tvm.IRModule.from_expr(relay.Function(params, body)))


@pytest.mark.parametrize("include_non_call_ops", [True, False])
def test_tuple_between_supported_calls(include_non_call_ops):
    x = relay.var("x", shape=(10, 5))
    y = relay.var("y", shape=(10, 5))
    before = module(relay.concatenate([relay.nn.relu(x), relay.nn.relu(y)], axis=1), [x, y])
    t = "ta_relu"

    ex, ey = relay.var("x", shape=(10, 5)), relay.var("y", shape=(10, 5))
    e1 = compiler_end(relay.nn.relu(compiler_begin(ex, t)), t)
    e2 = compiler_end(relay.nn.relu(compiler_begin(ey, t)), t)
    if include_non_call_ops:
        tup = compiler_end(relay.Tuple([compiler_begin(e1, t), compiler_begin(e2, t)]), t)
    else:
        tup = relay.Tuple([e1, e2])
    body = compiler_end(relay.concatenate(compiler_begin(tup, t), axis=1), t)
    expected = typed(body, [ex, ey])

    got = AnnotateTarget(t, include_non_call_ops)(before)
    assert_structural_equal(got, expected, map_free_vars=True)


def test_unsupported_calls_get_default_annotations():
    data = relay.var("data", shape=(10, 10))
    a = relay.abs(data)
    before = module(relay.Tuple([relay.nn.relu(a), relay.tanh(a)]), [data])
    t, d = "ta_abs", "default"

    e = relay.var("data", shape=(10, 10))
    ab = relay.abs(compiler_begin(e, t))
    relu = compiler_end(relay.nn.relu(compiler_begin(compiler_end(ab, t), d)), d)
    tanh = compiler_end(relay.tanh(compiler_begin(compiler_end(ab, t), d)), d)
    tup = relay.Tuple([compiler_begin(relu, d), compiler_begin(tanh, d)])
    expected = typed(compiler_end(tup, d), [e])

    got = AnnotateTarget([t])(before)
    assert_structural_equal(got, expected, map_free_vars=True)
    assert 'annotation.compiler_begin(%data, compiler="ta_abs")' in got.astext()


@pytest.mark.parametrize("include_non_call_ops", [True, False])
def test_if_branches_are_closed_and_reopened(include_non_call_ops):
    t = "ta_if"
    data = relay.var("data", shape=(1, 32))
    e1 = relay.var("e1", shape=(), dtype="float32")
    e2 = relay.var("e2", shape=(), dtype="float32")
    ife = relay.If(relay.equal(e1, e2), relay.tanh(data), relay.sigmoid(data))
    before = module(relay.erf(ife), [data, e1, e2])

    d_, a_, b_ = (relay.var("data", shape=(1, 32)), relay.var("e1", shape=(), dtype="float32"),
                  relay.var("e2", shape=(), dtype="float32"))
    cond = compiler_end(relay.equal(compiler_begin(a_, t), compiler_begin(b_, t)), t)
    then = compiler_end(relay.tanh(compiler_begin(d_, t)), t)
    other = compiler_end(relay.sigmoid(compiler_begin(d_, t)), t)
    out = compiler_end(relay.erf(compiler_begin(relay.If(cond, then, other), t)), t)
    expected = typed(out, [d_, a_, b_])

    got = AnnotateTarget(t, include_non_call_ops)(before)
    assert_structural_equal(got, expected, map_free_vars=True)


@pytest.mark.parametrize("include_non_call_ops", [True, False])
def test_running_twice_changes_nothing(include_non_call_ops):
    x = relay.var("x", shape=(10, 5))
    before = module(relay.nn.relu(x), [x])
    once = AnnotateTarget("ta_relu", include_non_call_ops)(before)
    twice = AnnotateTarget("ta_relu", include_non_call_ops)(once)
    assert structural_hash(once) == structural_hash(twice)
    assert_structural_equal(once, twice)


@pytest.mark.parametrize("include_non_call_ops", [True, False])
def test_two_targets_in_one_run_equal_two_runs(include_non_call_ops):
    x = relay.var("x", shape=(10, 5))
    r = relay.nn.relu(x)
    before = module(relay.add(relay.abs(r), relay.nn.relu(r)), [x])
    sequential = AnnotateTarget("ta_relu", include_non_call_ops)(before)
    sequential = AnnotateTarget("ta_add", include_non_call_ops)(sequential)
    together = AnnotateTarget(["ta_relu", "ta_add"], include_non_call_ops)(before)
    assert_structural_equal(sequential, together)


def test_target_priority_follows_the_list_order():
    x = relay.var("x", shape=(4,))
    before = module(relay.abs(x), [x])
    register_op_attr("abs", "target.ta_abs2", True)
    first = AnnotateTarget(["ta_abs2", "ta_abs"])(before).astext()
    assert 'compiler="ta_abs2"' in first and 'compiler="ta_abs"' not in first


@pytest.mark.parametrize("a_max,expected", [(6.0, "ta_clip"), (255.0, "default")])
def test_attribute_conditions_decide(a_max, expected):
    x = relay.var("x", shape=(2, 3))
    before = module(relay.clip(x, 0.0, a_max), [x])
    text = AnnotateTarget("ta_clip")(before).astext()
    assert f'annotation.compiler_begin(%x, compiler="{expected}")' in text


@pytest.mark.parametrize("dtype,supported", [("float32", True), ("int32", False), ("float16", False)])
def test_kiln_c_takes_float32_only(dtype, supported):
    x = relay.var("x", shape=(3, 4), dtype=dtype)
    mod = module(relay.add(x, x), [x])
    assert op_supported(mod["main"].body, "kiln_c") is supported


def test_kiln_c_conv2d_layout_condition():
    x = relay.var("x", shape=(1, 4, 6, 6))
    w = relay.var("w", shape=(3, 3, 4, 8))
    y = relay.var("y", shape=(1, 6, 6, 4))
    nhwc = module(relay.nn.conv2d(y, w, kernel_size=(3, 3), data_layout="NHWC",
                                  kernel_layout="HWIO"), [y, w])
    assert not op_supported(nhwc["main"].body, "kiln_c")
    w2 = relay.var("w2", shape=(8, 4, 3, 3))
    nchw = module(relay.nn.conv2d(x, w2, kernel_size=(3, 3), padding=(1, 1)), [x, w2])
    assert op_supported(nchw["main"].body, "kiln_c")


def test_kiln_c_declares_the_mobilenet_ops():
    ops = supported_ops("kiln_c")
    for name in ("nn.conv2d", "nn.batch_norm", "nn.relu", "nn.global_avg_pool2d",
                 "nn.batch_flatten", "nn.dense", "nn.bias_add", "nn.softmax"):
        assert name in ops
    # TVM's example target name is declared too; its operators are declared by scripts
    assert "ccompiler" in external_targets()


@pytest.mark.parametrize("name", ["dnnl", "tensorrt", "cmsis-nn"])
def test_tvm_only_targets_are_not_available(name):
    x = relay.var("x", shape=(4,))
    mod = module(relay.nn.relu(x), [x])
    with pytest.raises(ExternalTargetUnavailable, match=f"'{name}' is not available in Kiln"):
        AnnotateTarget([name])(mod)


def test_dnnl_module_import_is_a_clear_error():
    with pytest.raises(ImportError, match="'dnnl' is not available in Kiln.*kiln_c"):
        from kiln.relay.op.contrib import dnnl  # noqa: F401


def test_unknown_target_names_the_fix():
    with pytest.raises(ExternalTargetError, match="unknown external target 'no_such_npu'.*kiln_c"):
        check_targets(["no_such_npu"], "AnnotateTarget")
    with pytest.raises(ExternalTargetError, match="no target given"):
        check_targets([], "AnnotateTarget")


def test_register_op_attr_refuses_other_attributes():
    with pytest.raises(ExternalTargetError, match="only takes 'target.<name>'"):
        register_op_attr("nn.relu", "FTVMStrategy", lambda call: True)


def test_input_module_is_not_modified():
    x = relay.var("x", shape=(10, 5))
    mod = module(relay.tanh(relay.nn.relu(x)), [x])
    before, text = structural_hash(mod), mod.astext()
    AnnotateTarget(["ta_relu"])(mod)
    assert structural_hash(mod) == before and mod.astext() == text


def test_external_functions_are_left_alone():
    x0 = relay.var("x0", shape=(4,))
    ext = relay.Function([x0], relay.nn.relu(x0)).with_attr("Compiler", "someone_else")
    x = relay.var("x", shape=(4,))
    mod = tvm.IRModule()
    mod["ext"] = ext
    mod["main"] = relay.Function([x], relay.Call(relay.GlobalVar("ext"), [x]))
    out = AnnotateTarget(["ta_relu"])(InferType()(mod))
    assert "annotation" not in out.astext().split("def @main")[0]
