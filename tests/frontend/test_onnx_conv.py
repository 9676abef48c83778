"""Convolution and pooling converters against onnxruntime: every auto_pad mode, groups, dilations,
ConvTranspose output_shape/output_padding, ONNX's ceil_mode rule, LpPool and global pools."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.frontend._onnx_helpers import Const, check_node, run_kiln, run_ort

RNG = np.random.default_rng(2)


def _rand(shape):
    return RNG.standard_normal(shape).astype(np.float32)


CONV_CASES = [
    # (input spatial, kernel, attrs)
    ((7, 7), (3, 3), {"pads": [1, 1, 1, 1]}),
    ((7, 6), (3, 2), {"strides": [2, 1], "pads": [1, 0, 2, 1]}),
    ((8, 8), (3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((7, 7), (2, 2), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ((7, 7), (3, 3), {"auto_pad": "VALID"}),
    ((9, 9), (3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((9,), (3,), {"strides": [2], "pads": [1, 1]}),
    ((5, 5, 5), (3, 3, 3), {"pads": [1, 0, 1, 1, 0, 1]}),
]


@pytest.mark.parametrize("spatial, kernel, attrs", CONV_CASES)
@pytest.mark.parametrize("group, bias", [(1, True), (2, False)])
def test_conv(spatial, kernel, attrs, group, bias):
    cin, cout = 4, 6
    x = _rand((2, cin, *spatial))
    w = Const(_rand((cout, cin // group, *kernel)))
    inputs = [x, w] + ([Const(_rand((cout,)))] if bias else [])
    check_node("Conv", inputs, {**attrs, "group": group}, opset=13, rtol=1e-4, atol=1e-5)


def test_depthwise_conv():
    check_node("Conv", [_rand((1, 6, 8, 8)), Const(_rand((6, 1, 3, 3)))], {"group": 6, "pads": [1, 1, 1, 1]},
               opset=13, rtol=1e-4, atol=1e-5)


CONV_T_CASES = [
    ((3, 3), (3, 3), {}),
    ((3, 3), (3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    ((3, 3), (3, 3), {"strides": [3, 2], "output_padding": [1, 1]}),
    ((3, 3), (3, 3), {"strides": [2, 2], "pads": [1, 2, 2, 1]}),
    ((4, 4), (3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((4, 4), (3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((3, 3), (2, 2), {"dilations": [2, 2]}),
    ((5,), (3,), {"strides": [2], "pads": [1, 0]}),
    ((3, 3, 3), (2, 2, 2), {"strides": [2, 2, 2]}),
]


@pytest.mark.parametrize("spatial, kernel, attrs", CONV_T_CASES)
@pytest.mark.parametrize("group", [1, 2])
def test_conv_transpose(spatial, kernel, attrs, group):
    cin, cout_per_group = 4, 3
    x = _rand((1, cin, *spatial))
    w = Const(_rand((cin, cout_per_group, *kernel)))
    b = Const(_rand((cout_per_group * group,)))
    check_node("ConvTranspose", [x, w, b], {**attrs, "group": group}, opset=13, rtol=1e-4, atol=1e-5)


POOL_CASES = [
    ((6, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((5, 5), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ((5, 7), {"kernel_shape": [3, 2], "strides": [2, 3], "ceil_mode": 1}),
    ((4, 4), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ((5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1], "ceil_mode": 1}),
    ((7, 7), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((7, 7), {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((8, 8), {"kernel_shape": [2, 2], "dilations": [2, 2]}),
    ((9,), {"kernel_shape": [3], "strides": [2]}),
    ((4, 4, 4), {"kernel_shape": [2, 2, 2], "pads": [1, 0, 0, 1, 0, 0]}),
]


@pytest.mark.parametrize("spatial, attrs", POOL_CASES)
def test_max_pool(spatial, attrs):
    check_node("MaxPool", [_rand((1, 3, *spatial))], attrs, opset=12)


@pytest.mark.parametrize("spatial, attrs", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(spatial, attrs, count_include_pad):
    check_node("AveragePool", [_rand((1, 3, *spatial))], {**attrs, "count_include_pad": count_include_pad},
               opset=19, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(p):
    check_node("LpPool", [_rand((1, 2, 6, 6))], {"kernel_shape": [3, 3], "strides": [2, 2], "p": p,
                                                 "pads": [1, 1, 1, 1]}, opset=18, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 3, 3), (1, 2, 2, 3, 4)])
def test_global_pools(op, shape):
    check_node(op, [_rand(shape)], opset=13)


@pytest.mark.parametrize(("op", "relay_op"), [("GlobalAveragePool", "nn.global_avg_pool2d"),
                                               ("GlobalMaxPool", "nn.global_max_pool2d")])
def test_global_pools_of_images_are_pool_ops(op, relay_op):
    """As TVM's frontend writes them: the layout passes block them and the pooling template
    accumulates in registers (a mean over blocked axes fell to the default schedule)."""
    from kiln import relay
    from tests.frontend._onnx_helpers import single_node_model

    model, _ = single_node_model(op, [_rand((1, 16, 7, 7))], opset=13)
    mod, _ = relay.frontend.from_onnx(model)
    text = mod.astext()
    assert f"{relay_op}(" in text and "mean(" not in text and " max(" not in text


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 2]}, {"dilations": [2, 1], "pads": [1, 0, 1, 2]}])
def test_col2im(attrs):
    image, block = [5, 6], [2, 3]
    strides, dilations = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    counts = [(image[i] + pads[i] + pads[2 + i] - ((block[i] - 1) * dilations[i] + 1)) // strides[i] + 1
              for i in range(2)]
    x = _rand((2, 3 * 6, counts[0] * counts[1]))
    check_node("Col2Im", [x, Const(np.array(image, np.int64)), Const(np.array(block, np.int64))], attrs,
               opset=18, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("with_shape", [False, True])
def test_max_unpool_inverts_max_pool(with_shape):
    # values and indices of a MaxPool (run by onnxruntime: Kiln's MaxPool has no Indices output)
    # (an odd-sized image needs output_shape: the default unpooled size is the even one)
    out = [2, 3, 5, 7] if with_shape else [2, 3, 4, 6]
    pool = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2])], "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, out)],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    x = np.random.default_rng(3).standard_normal(out).astype(np.float32)
    p, i = run_ort(helper.make_model(pool, opset_imports=[helper.make_opsetid("", 11)]), {"x": x})
    node = helper.make_node("MaxUnpool", ["p", "i", "shape"] if with_shape else ["p", "i"], ["y"],
                            kernel_shape=[2, 2], strides=[2, 2])
    inits = [numpy_helper.from_array(np.array(out, np.int64), "shape")] if with_shape else []
    graph = helper.make_graph([node], "unpool",
                              [helper.make_tensor_value_info("p", TensorProto.FLOAT, p.shape),
                               helper.make_tensor_value_info("i", TensorProto.INT64, i.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    feeds = {"p": p, "i": i}
    np.testing.assert_array_equal(run_kiln(model, feeds)[0], run_ort(model, feeds)[0])
