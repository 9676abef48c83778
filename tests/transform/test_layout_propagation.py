"""The layout engine's TVM behaviours: user layout hooks (FTVMAlterOpLayout/FTVMConvertOpLayout),
TVM's broadcast-operand conversion, and the layout rules of squeeze, l2_normalize, argmax,
instance_norm, upsampling/resize2d and the qnn operators.

Oracles: the expected functions written as TVM writes them (its tests' ``expected()`` style,
compared structurally) and the interpreter on the module before the pass (values).
"""

from __future__ import annotations

import numpy as np
import pytest
from _pass_helpers import assert_same_values, module, random_inputs

import kiln as tvm
from kiln import relay
from kiln.ir import structural_equal
from kiln.relay.testing.temp_op_attr import TempOpAttr
from kiln.transform import (
    AlterOpLayout,
    CanonicalizeOps,
    ConvertLayout,
    InferType,
    PassContext,
    Sequential,
)


def run(expr: relay.Expr, passes: list) -> tvm.IRModule:
    with PassContext(opt_level=3):
        return Sequential([InferType(), *passes])(module(expr))


def typed(expr: relay.Expr) -> tvm.IRModule:
    return InferType()(module(expr))


def to_nchw16c(attrs, inputs, tinfos, out_type):
    data, weight = inputs
    new_attrs = dict(attrs)
    new_attrs["data_layout"] = "NCHW16c"
    return relay.nn.conv2d(data, weight, **new_attrs)


def test_alter_hook_blocks_the_conv_and_converts_broadcast_operands_as_tvm(rng):
    x = relay.var("x", shape=(1, 32, 8, 8))
    w = relay.var("w", shape=(32, 32, 3, 3))
    bias = relay.var("bias", shape=(32,))
    scale = relay.var("scale", shape=(32, 1, 1))

    def before():
        y = relay.nn.conv2d(x, w, channels=32, kernel_size=(3, 3), padding=(1, 1))
        y = relay.nn.bias_add(y, bias)
        y = relay.multiply(scale, y)
        return relay.nn.max_pool2d(relay.nn.relu(y), pool_size=(2, 2))

    def expected():
        xt = relay.layout_transform(x, "NCHW", "NCHW16c")
        b = relay.layout_transform(relay.expand_dims(relay.expand_dims(bias, 1, 2), 0, 1),
                                   "NCHW", "NCHW16c")
        s = relay.layout_transform(relay.expand_dims(scale, 0, 1), "NCHW", "NCHW16c")
        y = relay.nn.conv2d(xt, w, channels=32, kernel_size=(3, 3), padding=(1, 1),
                            data_layout="NCHW16c")
        y = relay.multiply(s, relay.add(y, b))
        y = relay.nn.max_pool2d(relay.nn.relu(y), pool_size=(2, 2), layout="NCHW16c")
        return relay.layout_transform(y, "NCHW16c", "NCHW")

    with TempOpAttr("nn.conv2d", "FTVMAlterOpLayout", to_nchw16c):
        after = run(before(), [CanonicalizeOps(), AlterOpLayout()])
    assert structural_equal(after, typed(expected())), after.astext()
    assert_same_values(typed(before()), after, random_inputs(typed(before()), rng))


def test_alter_hook_is_restored_and_none_keeps_the_call():
    calls = []

    def keep(attrs, inputs, tinfos, out_type):
        calls.append((tuple(t.shape for t in tinfos), out_type))
        return None

    x = relay.var("x", shape=(1, 8, 4, 4))
    with TempOpAttr("nn.global_max_pool2d", "FTVMAlterOpLayout", keep):
        after = run(relay.nn.global_max_pool2d(x), [AlterOpLayout()])
    assert calls == [(((1, 8, 4, 4),), relay.TensorType((1, 8, 1, 1)))]
    assert structural_equal(after, typed(relay.nn.global_max_pool2d(x)))
    from kiln.ir.op_table import get_op_attr
    assert get_op_attr("nn.global_max_pool2d", "FTVMAlterOpLayout") is None


def test_register_convert_op_layout_hook_is_called_with_desired_layouts():
    from kiln.ir.op_table import get_op_attr, set_op_attr
    from kiln.relay.op import register_convert_op_layout

    seen = []
    old = get_op_attr("nn.upsampling", "FTVMConvertOpLayout")

    def convert(attrs, inputs, tinfos, desired):
        seen.append(list(desired))
        new_attrs = dict(attrs)
        new_attrs["layout"] = desired[0]
        return relay.nn.upsampling(inputs[0], **new_attrs)

    try:
        register_convert_op_layout("nn.upsampling", convert)
        x = relay.var("x", shape=(1, 4, 4, 3))
        after = run(relay.nn.upsampling(x, 2, 2, layout="NHWC"),
                    [ConvertLayout({"nn.upsampling": ["NCHW"]})])
    finally:
        set_op_attr("nn.upsampling", "FTVMConvertOpLayout", old)
    expected = relay.layout_transform(
        relay.nn.upsampling(relay.layout_transform(x, "NHWC", "NCHW"), 2, 2, layout="NCHW"),
        "NCHW", "NHWC")
    assert seen == [["NCHW"]]
    assert structural_equal(after, typed(expected)), after.astext()


def nhwc_conv(x: relay.Expr, w: relay.Expr) -> relay.Expr:
    return relay.nn.conv2d(x, w, channels=8, kernel_size=(3, 3), padding=(1, 1),
                           data_layout="NHWC", kernel_layout="HWIO")


def nchw_conv(x: relay.Expr, w: relay.Expr) -> relay.Expr:
    return relay.nn.conv2d(relay.layout_transform(x, "NHWC", "NCHW"),
                           relay.layout_transform(w, "HWIO", "OIHW"), channels=8,
                           kernel_size=(3, 3), padding=(1, 1))


@pytest.mark.parametrize("tail, expected_tail", [
    # TVM's rules: axes remapped in order; squeeze keeps what is left of the layout
    (lambda y: relay.nn.l2_normalize(y, 1e-3, axis=[2, 3]),
     lambda y: relay.layout_transform(relay.nn.l2_normalize(y, 1e-3, axis=[3, 1]), "NCHW", "NHWC")),
    (lambda y: relay.squeeze(relay.mean(y, axis=[1, 2], keepdims=True), axis=[2]),
     lambda y: relay.layout_transform(relay.squeeze(relay.mean(y, axis=[2, 3], keepdims=True),
                                                    axis=[3]), "NCH", "NHC")),
    (lambda y: relay.argmax(y, axis=[1, 2]),
     lambda y: relay.argmax(y, axis=[2, 3])),
    (lambda y: relay.mean(y, axis=[3], exclude=True),
     lambda y: relay.mean(y, axis=[1], exclude=True)),
    # transpose straight to the original result layout; slices with their bounds permuted
    (lambda y: relay.transpose(y, [0, 3, 1, 2]),
     lambda y: relay.transpose(y, [0, 1, 2, 3])),
    (lambda y: relay.strided_slice(y, begin=[0, 1], end=[1, -1, 5], strides=[1, 1, 2, 1]),
     lambda y: relay.layout_transform(relay.strided_slice(y, begin=[0, 0, 1, 0],
                                                          end=[1, 8, -1, 5], strides=[1, 1, 1, 2]),
                                      "NCHW", "NHWC")),
])
def test_convert_rules_of_axis_ops(tail, expected_tail, rng):
    x = relay.var("x", shape=(1, 6, 6, 4))
    w = relay.var("w", shape=(3, 3, 4, 8))
    before = tail(nhwc_conv(x, w))
    after = run(before, [ConvertLayout({"nn.conv2d": ["NCHW", "default"]})])
    assert structural_equal(after, typed(expected_tail(nchw_conv(x, w)))), after.astext()
    assert_same_values(typed(before), after, random_inputs(typed(before), rng))


def test_convert_resize2d_when_asked_and_nchwc_conv(rng):
    x = relay.var("x", shape=(1, 3, 4, 4))
    after = run(relay.image.resize2d(x, (8, 8)), [ConvertLayout({"image.resize2d": ["NHWC"]})])
    expected = relay.layout_transform(
        relay.image.resize2d(relay.layout_transform(x, "NCHW", "NHWC"), (8, 8), layout="NHWC"),
        "NHWC", "NCHW")
    assert structural_equal(after, typed(expected)), after.astext()

    d = relay.var("d", shape=(1, 8, 6, 6))
    w = relay.var("w", shape=(8, 8, 3, 3))
    before = relay.nn.relu(relay.nn.conv2d(d, w, channels=8, kernel_size=(3, 3), padding=(1, 1)))
    after = run(before, [ConvertLayout({"nn.conv2d": ["NCHW4c", "OIHW4i4o"]})])
    conv = relay.nn.contrib_conv2d_nchwc(relay.layout_transform(d, "NCHW", "NCHW4c"),
                                         relay.layout_transform(w, "OIHW", "OIHW4i4o"),
                                         channels=8, kernel_size=(3, 3), padding=(1, 1),
                                         data_layout="NCHW4c", kernel_layout="OIHW4i4o")
    expected = relay.layout_transform(relay.nn.relu(conv), "NCHW4c", "NCHW")
    assert structural_equal(after, typed(expected)), after.astext()
    assert_same_values(typed(before), after, random_inputs(typed(before), rng))


def test_convert_qnn_conv_requantize(rng):
    def c(v, dtype):
        return relay.const(np.asarray(v, dtype))

    x = relay.var("x", shape=(1, 5, 5, 4), dtype="int8")
    w = relay.var("w", shape=(3, 3, 4, 8), dtype="int8")

    def graph(data, weight, layout, kernel_layout, axis):
        y = relay.qnn.op.conv2d(data, weight, c(1, "int32"), c(0, "int32"), c(0.5, "float32"),
                                c(0.5, "float32"), channels=8, kernel_size=(3, 3),
                                padding=(1, 1), data_layout=layout, kernel_layout=kernel_layout)
        y = relay.qnn.op.requantize(y, c(0.25, "float32"), c(0, "int32"), c(2.0, "float32"),
                                    c(3, "int32"), axis=axis, out_dtype="int8")
        return relay.nn.relu(y)

    before = graph(x, w, "NHWC", "HWIO", -1)
    after = run(before, [ConvertLayout({"qnn.conv2d": ["NCHW", "default"]})])
    expected = relay.layout_transform(
        graph(relay.layout_transform(x, "NHWC", "NCHW"), relay.layout_transform(w, "HWIO", "OIHW"),
              "NCHW", "OIHW", 1), "NCHW", "NHWC")
    assert structural_equal(after, typed(expected)), after.astext()
    inputs = {"x": rng.integers(-128, 128, (1, 5, 5, 4)).astype("int8"),
              "w": rng.integers(-128, 128, (3, 3, 4, 8)).astype("int8")}
    assert_same_values(typed(before), after, inputs)


def test_convert_deformable_conv_moves_data_offsets_and_weight(rng):
    x = relay.var("x", shape=(1, 6, 6, 3))
    off = relay.var("off", shape=(1, 4, 4, 18))
    w = relay.var("w", shape=(3, 3, 3, 4))

    def conv(data, offset, weight, layout, kernel_layout):
        return relay.nn.deformable_conv2d(data, offset, weight, kernel_size=(3, 3), channels=4,
                                          data_layout=layout, kernel_layout=kernel_layout)

    before = relay.nn.relu(conv(x, off, w, "NHWC", "HWIO"))
    after = run(before, [ConvertLayout({"nn.deformable_conv2d": ["NCHW", "default"]})])
    expected = relay.layout_transform(relay.nn.relu(conv(
        relay.layout_transform(x, "NHWC", "NCHW"), relay.layout_transform(off, "NHWC", "NCHW"),
        relay.layout_transform(w, "HWIO", "OIHW"), "NCHW", "OIHW")), "NCHW", "NHWC")
    assert structural_equal(after, typed(expected)), after.astext()
    assert_same_values(typed(before), after, random_inputs(typed(before), rng))


def test_convert_split_topk_and_roi_align_follow_tvm(rng):
    x = relay.var("x", shape=(1, 6, 6, 4))
    w = relay.var("w", shape=(3, 3, 4, 8))
    to_nchw = [ConvertLayout({"nn.conv2d": ["NCHW", "default"]})]

    def back(e):
        return relay.layout_transform(e, "NCHW", "NHWC")

    parts = relay.split(nhwc_conv(x, w), indices_or_sections=(3,), axis=-1).astuple()
    before = relay.Tuple([relay.TupleGetItem(parts, 0), relay.TupleGetItem(parts, 1)])
    parts_new = relay.split(nchw_conv(x, w), indices_or_sections=(3,), axis=1).astuple()
    expected = relay.Tuple([back(relay.TupleGetItem(parts_new, 0)),
                            back(relay.TupleGetItem(parts_new, 1))])
    after = run(before, to_nchw)
    assert structural_equal(after, typed(expected)), after.astext()
    assert_same_values(typed(before), after, random_inputs(typed(before), rng))

    top = relay.topk(nhwc_conv(x, w), k=2, axis=2).astuple()
    top_new = relay.topk(nchw_conv(x, w), k=2, axis=3).astuple()
    after = run(relay.TupleGetItem(top, 0), to_nchw)
    assert structural_equal(after, typed(back(relay.TupleGetItem(top_new, 0)))), after.astext()

    d = relay.var("d", shape=(1, 8, 10, 10))
    rois = relay.var("rois", shape=(3, 5))
    before = relay.vision.roi_align(d, rois, pooled_size=(2, 2), spatial_scale=0.5, sample_ratio=2)
    after = run(before, [ConvertLayout({"vision.roi_align": ["NHWC", "default"]})])
    expected = relay.layout_transform(relay.vision.roi_align(
        relay.layout_transform(d, "NCHW", "NHWC"), rois, pooled_size=(2, 2), spatial_scale=0.5,
        sample_ratio=2, layout="NHWC"), "NHWC", "NCHW")
    assert structural_equal(after, typed(expected)), after.astext()


def test_slice_of_a_blocked_channel_axis_runs_on_its_outer_part(rng):
    x = relay.var("x", shape=(1, 8, 6, 6))
    w = relay.var("w", shape=(16, 8, 3, 3))

    def blocked(attrs, inputs, tinfos, out_type):
        new_attrs = dict(attrs)
        new_attrs["data_layout"] = "NCHW4c"
        return relay.nn.conv2d(*inputs, **new_attrs)

    conv = relay.nn.conv2d(x, w, channels=16, kernel_size=(3, 3), padding=(1, 1))
    before = relay.strided_slice(conv, begin=[0, 4], end=[1, 12], strides=[1, 1])
    with TempOpAttr("nn.conv2d", "FTVMAlterOpLayout", blocked):
        after = run(before, [AlterOpLayout()])
    conv_new = relay.nn.conv2d(relay.layout_transform(x, "NCHW", "NCHW4c"), w, channels=16,
                               kernel_size=(3, 3), padding=(1, 1), data_layout="NCHW4c")
    expected = relay.layout_transform(
        relay.strided_slice(conv_new, begin=[0, 1, 0, 0, 0], end=[1, 3, 6, 6, 4],
                            strides=[1, 1, 1, 1, 1]), "NCHW4c", "NCHW")
    assert structural_equal(after, typed(expected)), after.astext()
