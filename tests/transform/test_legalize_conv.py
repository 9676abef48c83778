"""LegalizeConv: conv1d, conv3d and conv{1,2}d_transpose become conv2d (H = 1, the depth folded
into the batch, or sub-pixel phases).

Two oracles: the reference interpreter on the module before the pass (fast, many attribute
combinations, no compiler), and onnxruntime on compiled builds over the ONNX Conv /
ConvTranspose attribute space with fused epilogues. Every case also checks the rewrite happened:
no conv1d / transposed convolution is left, and compiled builds run blocked ``conv2d_NCHWc``
kernels (or depthwise ones) with the epilogue fused into them.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.interpreter import Interpreter
from kiln.ir.expr import Call, Constant, Op
from kiln.ir.module import IRModule
from kiln.ir.visitor import post_order
from kiln.transform import InferType, PassContext
from kiln.transform.legalize_conv import LegalizeConv, transpose_phases

RNG = np.random.default_rng(17)
_OLD_OPS = {"nn.conv1d", "nn.conv1d_transpose", "nn.conv2d_transpose", "nn.conv3d"}


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _ops(mod: IRModule) -> set[str]:
    return {n.op.name for n in post_order(mod["main"]) if isinstance(n, Call)
            and isinstance(n.op, Op)}


# --- the phase arithmetic -----------------------------------------------------------------------

@pytest.mark.parametrize("stride", [1, 2, 3])
@pytest.mark.parametrize("kernel", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("dilation", [1, 2, 3])
@pytest.mark.parametrize("pad", [0, 1, 2])
def test_phases_cover_every_tap_once(stride, kernel, dilation, pad):
    phases = transpose_phases(stride, kernel, dilation, pad)
    assert sorted(t for p in phases for t in p.taps) == list(range(kernel))
    for r, p in enumerate(phases):  # tap t of phase r reads input q + (r + pad - t * d) / s
        for m, t in enumerate(p.taps):
            assert p.offset + m * p.dilation == (r + pad - t * dilation) // stride
            assert (r + pad - t * dilation) % stride == 0


# --- the pass against the interpreter -----------------------------------------------------------

def _check_pass(body_fn, x: np.ndarray) -> IRModule:
    xv = relay.var("x", shape=x.shape, dtype="float32")
    mod = InferType()(IRModule.from_expr(relay.Function([xv], body_fn(xv))))
    with PassContext(opt_level=3):
        out = LegalizeConv()(mod)
    assert not _ops(out) & _OLD_OPS, _ops(out)
    assert "nn.conv2d" in _ops(out)
    want = Interpreter(mod).run([x])
    got = Interpreter(out).run([x])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return out


T2D = [  # (c_in, c_out per group, kernel, strides, padding (t, l, b, r), output_padding, dilation)
    (4, 3, (2, 2), (2, 2), (0, 0, 0, 0), (0, 0), (1, 1)),
    (4, 3, (4, 4), (2, 2), (1, 1, 1, 1), (0, 0), (1, 1)),
    (4, 3, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1)),
    (4, 3, (3, 3), (1, 1), (1, 1, 1, 1), (0, 0), (1, 1)),
    (4, 2, (3, 2), (3, 2), (0, 1, 2, 0), (2, 1), (1, 1)),
    (4, 2, (3, 3), (2, 3), (2, 0, 1, 3), (0, 0), (2, 1)),
    (4, 2, (2, 3), (3, 3), (0, 0, 0, 0), (0, 0), (3, 2)),
    (4, 3, (2, 2), (3, 3), (0, 0, 0, 0), (0, 0), (1, 1)),  # k < s: phases without taps
    (4, 3, (5, 5), (2, 2), (4, 4, 4, 4), (1, 0), (1, 1)),  # large pads: phases start late
]


@pytest.mark.parametrize("case", T2D)
@pytest.mark.parametrize("groups", [1, 2, 4])
def test_conv2d_transpose_matches_interpreter(case, groups):
    c_in, c_out_g, kernel, strides, padding, out_pad, dil = case
    w = relay.const(_rand(c_in, c_out_g, *kernel))
    b = relay.const(_rand(c_out_g * groups))

    def body(x):
        y = relay.nn.conv2d_transpose(x, w, strides=strides, padding=padding,
                                      output_padding=out_pad, dilation=dil, groups=groups,
                                      kernel_size=kernel)
        return relay.nn.relu(relay.nn.bias_add(y, b))

    _check_pass(body, _rand(1, c_in, 5, 6))


@pytest.mark.parametrize("strides, kernel, pad, out_pad, dil, groups", [
    (1, 3, (1, 1), 0, 1, 1), (2, 2, (0, 0), 0, 1, 1), (2, 4, (1, 1), 1, 1, 2),
    (3, 3, (0, 2), 2, 2, 1), (2, 3, (1, 0), 0, 1, 4),
])
def test_conv1d_transpose_matches_interpreter(strides, kernel, pad, out_pad, dil, groups):
    w = relay.const(_rand(4, 3, kernel))

    def body(x):
        y = relay.nn.conv1d_transpose(x, w, strides=strides, padding=pad, output_padding=out_pad,
                                      dilation=dil, groups=groups)
        return relay.sigmoid(y)

    _check_pass(body, _rand(1, 4, 7))


@pytest.mark.parametrize("kernel, strides, pad, dil, groups, c_out", [
    (3, 1, (1, 1), 1, 1, 8), (5, 2, (2, 1), 1, 1, 6), (3, 1, (2, 2), 2, 1, 8),
    (3, 1, (1, 1), 1, 2, 8), (5, 1, (4, 4), 2, 8, 8), (3, 3, (0, 2), 3, 8, 16),
])
def test_conv1d_chain_matches_interpreter(kernel, strides, pad, dil, groups, c_out):
    w1 = relay.const(_rand(c_out, 8 // groups, kernel))
    b1 = relay.const(_rand(c_out))
    w2 = relay.const(_rand(4, c_out, 1))
    scale = relay.const(np.abs(_rand(c_out, 1)))

    def body(x):
        y = relay.nn.conv1d(x, w1, strides=strides, padding=pad, dilation=dil, groups=groups)
        y = relay.nn.relu(relay.multiply(relay.nn.bias_add(y, b1), scale))
        return relay.nn.conv1d(y, w2)

    out = _check_pass(body, _rand(1, 8, 19))
    # the second conv1d reads the first one's 4-d result: one squeeze, at the end
    assert sum(1 for n in post_order(out["main"]) if isinstance(n, Call)
               and isinstance(n.op, Op) and n.op.name == "squeeze") == 1


def test_conv1d_residual_block_stays_4d():
    w1, w2 = relay.const(_rand(8, 8, 3)), relay.const(_rand(8, 8, 3))

    def body(x):
        y = relay.nn.relu(relay.nn.conv1d(x, w1, padding=(1, 1)))
        z = relay.add(relay.nn.conv1d(y, w2, padding=(1, 1)), y)
        return relay.Tuple([relay.nn.relu(z), y])

    out = _check_pass(body, _rand(1, 8, 11))
    ops = [n.op.name for n in post_order(out["main"]) if isinstance(n, Call)
           and isinstance(n.op, Op) and not isinstance(n.args[0], Constant)]
    assert ops.count("expand_dims") == 1 and ops.count("squeeze") == 2, ops  # data in; 2 out


@pytest.mark.parametrize("kernel, strides, pad, dil, groups", [
    ((3, 3, 3), 1, 1, 1, 1), ((3, 3, 3), (2, 1, 2), (1, 0, 1, 2, 1, 0), 1, 1),
    ((1, 3, 3), 1, (0, 1, 1), 1, 2), ((3, 1, 1), 2, (1, 0, 0), 1, 1),
    ((2, 3, 2), 1, (1, 1, 0, 0, 1, 1), (2, 1, 2), 4), ((1, 1, 1), 1, 0, 1, 1),
])
def test_conv3d_chain_matches_interpreter(kernel, strides, pad, dil, groups):
    w1 = relay.const(_rand(8, 8 // groups, *kernel))
    b1 = relay.const(_rand(8))
    scale = relay.const(np.abs(_rand(8, 1, 1, 1)))
    w2 = relay.const(_rand(4, 8, 3, 1, 1))

    def body(x):
        y = relay.nn.conv3d(x, w1, strides=strides, padding=pad, dilation=dil, groups=groups)
        y = relay.nn.relu(relay.multiply(relay.nn.bias_add(y, b1), scale))
        return relay.nn.conv3d(y, w2, padding=(1, 0, 0))

    out = _check_pass(body, _rand(2, 8, 7, 6, 5))
    # the second conv3d reads the first one's depth-major result: one transpose in, one out
    assert sum(1 for n in post_order(out["main"]) if isinstance(n, Call)
               and isinstance(n.op, Op) and n.op.name == "transpose"
               and not isinstance(n.args[0], Constant)) == 2


@pytest.mark.parametrize("mult, strides, dil", [(2, 1, 1), (3, 2, 1), (4, 1, 2)])
def test_depthwise_multiplier_becomes_depthwise_of_repeated_channels(mult, strides, dil):
    w = relay.const(_rand(6 * mult, 1, 3, 3))
    b = relay.const(_rand(6 * mult))

    def body(x):
        y = relay.nn.conv2d(x, w, strides=strides, padding=dil, dilation=dil, groups=6)
        return relay.nn.relu(relay.nn.bias_add(y, b))

    out = _check_pass(body, _rand(2, 6, 9, 8))
    (conv,) = [n for n in post_order(out["main"]) if isinstance(n, Call)
               and isinstance(n.op, Op) and n.op.name == "nn.conv2d"]
    assert conv.attrs.groups == 6 * mult and conv.args[0].op.name == "repeat"


@pytest.mark.parametrize("kernel, strides, pad, dil", [
    ((3, 3, 3), 1, 1, 1), ((3, 5, 5), (2, 1, 2), (1, 2, 2), 1), ((2, 3, 3), 1, (1, 1, 1, 0, 1, 1), 2),
])
def test_depthwise_conv3d_sums_depthwise_conv2d(kernel, strides, pad, dil):
    w = relay.const(_rand(6, 1, *kernel))
    b = relay.const(_rand(6))

    def body(x):
        y = relay.nn.conv3d(x, w, strides=strides, padding=pad, dilation=dil, groups=6)
        return relay.nn.relu(relay.nn.bias_add(y, b))

    out = _check_pass(body, _rand(1, 6, 7, 9, 8))
    convs = [n for n in post_order(out["main"]) if isinstance(n, Call)
             and isinstance(n.op, Op) and n.op.name == "nn.conv2d"]
    assert len(convs) == kernel[0] and all(c.attrs.groups == 6 for c in convs)


def test_conv3d_channel_multiplier_is_left_alone():
    xv = relay.var("x", shape=(1, 4, 5, 5, 5))
    y = relay.nn.conv3d(xv, relay.const(_rand(8, 1, 3, 3, 3)), padding=1, groups=4)
    mod = InferType()(IRModule.from_expr(relay.Function([xv], y)))
    with PassContext(opt_level=3):
        assert "nn.conv3d" in _ops(LegalizeConv()(mod))


def test_two_users_keep_epilogue_after_interleave():
    w = relay.const(_rand(4, 3, 2, 2))

    def body(x):
        y = relay.nn.conv2d_transpose(x, w, strides=(2, 2), kernel_size=(2, 2))
        return relay.add(relay.nn.relu(y), relay.sigmoid(y))

    _check_pass(body, _rand(1, 4, 3, 3))


# --- compiled against onnxruntime -----------------------------------------------------------------

def _onnx_model(op: str, x_shape, w: np.ndarray, attrs: dict, post: str):
    from onnx import TensorProto, helper, numpy_helper

    c_out = w.shape[1] * attrs.get("group", 1) if op == "ConvTranspose" else w.shape[0]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(_rand(c_out), "b")]
    nodes = [helper.make_node(op, ["x", "w", "b"], ["y"], **attrs)]
    if post == "BatchNormalization+Relu":
        inits += [numpy_helper.from_array(v, n) for n, v in [
            ("g", np.abs(_rand(c_out)) + 0.5), ("beta", _rand(c_out)), ("mu", _rand(c_out)),
            ("var", np.abs(_rand(c_out)) + 0.5)]]
        nodes += [helper.make_node("BatchNormalization", ["y", "g", "beta", "mu", "var"], ["bn"]),
                  helper.make_node("Relu", ["bn"], ["z"])]
    elif post:
        nodes.append(helper.make_node(post, ["y"], ["z"]))
    out = "z" if post else "y"
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _compiled_vs_ort(op: str, x_shape, w: np.ndarray, attrs: dict, post: str) -> list[str]:
    ort = pytest.importorskip("onnxruntime")
    model = _onnx_model(op, x_shape, w, attrs, post)
    x = _rand(*x_shape)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod, params = relay.frontend.from_onnx(model, freeze_params=False)
    with PassContext(opt_level=3):
        lib = relay.build(mod, target="c", params=params)
    m = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    m.set_input(x=x)
    m.run()
    got = m.get_output(0).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    kernels = [n.func_name for n in lib.graph.nodes if not n.is_input]
    assert not any("transpose_add" in k or "conv1d" in k or "conv2d_transpose" in k
                   or "conv3d" in k for k in kernels), kernels
    return kernels


CT_CASES = [  # (x shape, w shape, attrs, post)
    ((1, 16, 6, 7), (16, 8, 2, 2), {"strides": [2, 2]}, "BatchNormalization+Relu"),
    ((1, 16, 6, 7), (16, 8, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, "Relu"),
    ((1, 16, 5, 6), (16, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                    "output_padding": [1, 1]}, "Sigmoid"),
    ((1, 16, 5, 6), (16, 8, 3, 3), {"strides": [1, 1], "pads": [1, 1, 1, 1]}, ""),
    ((1, 16, 5, 5), (16, 8, 2, 2), {"strides": [3, 3]}, "Sigmoid"),
    ((1, 16, 5, 6), (16, 4, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2], "group": 2,
                                    "dilations": [2, 1]}, "Relu"),
    ((1, 16, 5, 6), (16, 1, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 16}, ""),
    ((1, 16, 9), (16, 8, 4), {"strides": [2], "pads": [1, 1]}, "Relu"),
    ((1, 16, 6, 5), (16, 32, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, "Relu"),
    ((1, 16, 6, 5), (16, 32, 3, 3), {"strides": [2, 2], "pads": [1, 2, 1, 0],
                                     "output_padding": [0, 1]}, "Sigmoid"),
]


@pytest.mark.requires_cc
@pytest.mark.parametrize("x_shape, w_shape, attrs, post", CT_CASES)
def test_conv_transpose_compiled_vs_onnxruntime(x_shape, w_shape, attrs, post):
    kernels = _compiled_vs_ort("ConvTranspose", x_shape, _rand(*w_shape), attrs, post)
    if attrs.get("group", 1) < x_shape[1]:  # grouped too (group_conv2d_NCHWc)
        fused = [k for k in kernels if "conv2d_NCHWc" in k]
        assert fused, kernels
        if post:  # the epilogue runs inside the convolution kernels
            tail = "relu" if "Relu" in post else "sigmoid"
            assert all(tail in k for k in fused), kernels


C1_CASES = [  # (x shape, w shape, attrs, post)
    ((1, 16, 40), (32, 16, 3), {"pads": [1, 1]}, "Relu"),
    ((1, 16, 40), (32, 16, 5), {"pads": [2, 2], "strides": [2]}, ""),
    ((1, 16, 40), (32, 16, 3), {"pads": [2, 2], "dilations": [2]}, "Relu"),
    ((1, 16, 40), (16, 1, 5), {"pads": [4, 4], "dilations": [2], "group": 16}, "Relu"),
    ((1, 16, 40), (32, 8, 3), {"pads": [1, 1], "group": 2}, "Sigmoid"),
    ((1, 16, 12, 10), (32, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 16}, "Relu"),  # multiplier
    ((1, 8, 12, 10), (24, 1, 5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 2], "group": 8}, ""),
    ((1, 16, 6, 9, 8), (32, 16, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}, "Relu"),
    ((2, 16, 7, 8, 8), (16, 8, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1], "strides": [2, 2, 2],
                                          "group": 2}, "Sigmoid"),
    ((1, 16, 6, 8, 8), (16, 16, 1, 3, 3), {"pads": [0, 2, 2, 0, 2, 2], "dilations": [1, 2, 2]},
     ""),
    ((1, 16, 6, 8, 8), (16, 1, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1], "group": 16}, "Relu"),
]


@pytest.mark.requires_cc
@pytest.mark.parametrize("x_shape, w_shape, attrs, post", C1_CASES)
def test_conv1d_and_conv3d_compiled_vs_onnxruntime(x_shape, w_shape, attrs, post):
    kernels = _compiled_vs_ort("Conv", x_shape, _rand(*w_shape), attrs, post)
    blocked = [k for k in kernels if "conv2d_NCHWc" in k]  # grouped ones too
    assert blocked, kernels
    if post:  # a depthwise conv3d's taps are summed: the last one carries the epilogue
        summed = len(x_shape) == 5 and attrs.get("group", 1) == x_shape[1]
        assert (any if summed else all)(post.lower() in k for k in blocked), kernels


@pytest.mark.requires_cc
def test_upsampling_chain_stays_blocked():
    """Two k2s2 transposed convolutions and a 3x3 conv: the interleave runs on blocked tensors
    (no depth_to_space kernel, no layout conversion between the convolutions)."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(v, n) for n, v in [
        ("w1", _rand(32, 16, 2, 2)), ("w2", _rand(16, 16, 2, 2)), ("w3", _rand(16, 16, 3, 3))]]
    nodes = [helper.make_node("ConvTranspose", ["x", "w1"], ["a"], strides=[2, 2]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("ConvTranspose", ["b", "w2"], ["c"], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["d"]),
             helper.make_node("Conv", ["d", "w3"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 5, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = _rand(1, 32, 5, 4)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod, params = relay.frontend.from_onnx(model, freeze_params=False)
    with PassContext(opt_level=3):
        lib = relay.build(mod, target="c", params=params)
    m = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    m.set_input(x=x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4,
                               atol=1e-4 * float(np.abs(want).max()))
    kernels = [n.func_name for n in lib.graph.nodes if not n.is_input and n.func_name != "__nop"]
    assert not any("depth_to_space" in k or "conv2d_transpose" in k for k in kernels), kernels
    # one conversion in, one out; the two shuffles; three convolutions
    assert sum("layout_transform" in k for k in kernels) == 2, kernels
