"""Grouped convolutions as exporters write them (ResNeXt, RegNet and ShuffleNet blocks), compiled
by ``relay.build`` for 16-, 8- and 4-lane vectors, against onnxruntime.

AlterOpLayout blocks a grouped convolution inside its groups (``group_conv2d_NCHWc``) and the
convolution template schedules it: no kernel may be left on the default schedule's NCHW grouped
convolution, which ran 4 to 100 times slower than onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln import relay
from kiln.codegen.native import function_to_dag
from kiln.contrib import graph_executor
from kiln.te.templates import TargetInfo, apply_template
from kiln.transform import PassContext

pytestmark = pytest.mark.requires_cc
ort = pytest.importorskip("onnxruntime")

TARGETS = ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell", "llvm -mcpu=x86-64"]
RNG = np.random.default_rng(7)


def _rand(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


class _Graph:
    """A small ONNX graph under construction: nodes and initializers."""

    def __init__(self) -> None:
        self.nodes: list = []
        self.inits: list = []

    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def conv(self, x: str, cin: int, cout: int, k: int, name: str, groups: int = 1,
             stride: int = 1, dilation: int = 1, act: str = "Relu") -> str:
        w = self.const(f"{name}_w", _rand(cout, cin // groups, k, k,
                                          scale=(2.0 / (cin // groups * k * k)) ** 0.5))
        b = self.const(f"{name}_b", _rand(cout, scale=0.1))
        pad = dilation * (k // 2)
        self.nodes.append(helper.make_node(
            "Conv", [x, w, b], [f"{name}_c"], kernel_shape=[k, k], group=groups,
            strides=[stride, stride], dilations=[dilation, dilation], pads=[pad] * 4))
        out = f"{name}_c"
        if act == "Relu":
            self.nodes.append(helper.make_node("Relu", [out], [f"{name}_y"]))
            out = f"{name}_y"
        elif act == "SiLU":
            self.nodes += [helper.make_node("Sigmoid", [out], [f"{name}_s"]),
                           helper.make_node("Mul", [out, f"{name}_s"], [f"{name}_y"])]
            out = f"{name}_y"
        return out

    def model(self, x_shape: tuple[int, ...], out: str):
        graph = helper.make_graph(
            self.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return model


def resnext_block():
    """1x1 reduce, 3x3 with 32 groups of 4 channels, 1x1 expand, residual add + ReLU."""
    g = _Graph()
    y = g.conv("x", 64, 128, 1, "a")
    y = g.conv(y, 128, 128, 3, "b", groups=32)
    y = g.conv(y, 128, 64, 1, "c", act="")
    g.nodes += [helper.make_node("Add", [y, "x"], ["sum"]), helper.make_node("Relu", ["sum"], ["out"])]
    return g.model((1, 64, 14, 14), "out")


def regnet_block():
    """Groups of 8 and 24 channels (RegNet's group widths), stride 2, SiLU epilogues."""
    g = _Graph()
    y = g.conv("x", 48, 48, 3, "a", groups=6, stride=2, act="SiLU")
    y = g.conv(y, 48, 96, 3, "b", groups=2, dilation=2, act="SiLU")
    return g.model((1, 48, 15, 15), y)


def shufflenet_block():
    """ShuffleNet v1: grouped 1x1 (3 groups of 80), channel shuffle, grouped 1x1 back."""
    g = _Graph()
    y = g.conv("x", 240, 240, 1, "a", groups=3)
    shape = g.const("shape5", np.array([1, 3, 80, 7, 7], np.int64))
    back = g.const("shape4", np.array([1, 240, 7, 7], np.int64))
    g.nodes += [helper.make_node("Reshape", [y, shape], ["r5"]),
                helper.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
                helper.make_node("Reshape", ["t5", back], ["shuffled"])]
    y = g.conv("shuffled", 240, 120, 1, "b", groups=3, act="")
    return g.model((1, 240, 7, 7), y)


MODELS = {"resnext": resnext_block, "regnet": regnet_block, "shufflenet": shufflenet_block}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(MODELS))
def test_grouped_blocks_compiled_vs_onnxruntime(name: str, target: str) -> None:
    model = MODELS[name]()
    x_shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = _rand(*x_shape)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod, params = relay.frontend.from_onnx(model)
    with PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    m = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    m.set_input(x=x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4,
                               atol=1e-4 * float(np.abs(want).max()))
    kernels = {n.func_name for n in lib.graph.nodes if not n.is_input}
    convs = sorted(k for k in kernels if "conv2d" in k)
    assert convs and all("conv2d_NCHWc" in k for k in convs), convs


@pytest.mark.parametrize("vector_bytes", [64, 32])
def test_grouped_kernels_take_the_conv_template(vector_bytes: int) -> None:
    mod, params = relay.frontend.from_onnx(regnet_block())
    with PassContext(opt_level=3):
        lib = relay.build(mod, target=TARGETS[0 if vector_bytes == 64 else 1], params=params)
    dags = [function_to_dag(f, n).dag for n, f in lib.get_lib().functions.items()]
    grouped = [d for d in dags if any(op.name == "group_conv2d_NCHWc" for op in d.ops)]
    assert len(grouped) == 2
    for dag in grouped:
        state = apply_template(dag, TargetInfo(vector_bytes, 2))
        assert state is not None and "group_conv2d_NCHWc.local" in str(state)
