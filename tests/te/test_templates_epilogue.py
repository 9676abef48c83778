"""Templates of convolutions and dense layers whose fused epilogue reads the product several times.

Hard-swish ``x * clip(x + 3, 0, 6) / 6``, SiLU ``x * sigmoid(x)``, ``x * hard_sigmoid(x)``, GELU's
tanh form, ``x * x`` and ``x * sigmoid(x) + x`` all read the convolution (or dense) result more
than once, and their activations bring scalar constants that the fused function computes as
0-d stages (``T_const``). The templates must still claim these functions, compute the product
once into their register tile and apply the epilogue there (before, hard-swish fell back to
the default schedule, about 5-10x slower).

Models are written in ONNX the way exporters write them (``HardSwish`` and the spelled-out
``Add``/``Clip``/``Mul``/``Div``, ``Sigmoid`` + ``Mul``, ...). The oracle is onnxruntime; the
structural checks look at the fused functions a build compiles (``lower_to_graph``) and at the
schedule each one gets, for 16 and 32 vector registers.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln import cpu, relay
from kiln.build_module import lower_to_graph
from kiln.codegen.native import (
    build_native,
    function_to_dag,
    generate_module_sources,
    lower_function,
)
from kiln.contrib import graph_executor
from kiln.interpreter import evaluate
from kiln.ir.expr import Function
from kiln.ir.module import IRModule
from kiln.target import Target
from kiln.te.steps import ComputeAtStep
from kiln.te.steps_dataflow import CacheWriteStep
from kiln.te.templates import TargetInfo, apply_template
from kiln.te.templates.conv2d import match_nchwc
from kiln.transform import PassContext
from kiln.transform.infer_type import infer_type

EPILOGUES = ("hardswish", "hardswish_spelled", "silu", "hard_sigmoid_x", "gelu_tanh", "square",
             "three_uses")
# vector registers of 32 bytes (AVX2: 16 registers) and of 64 bytes (AVX-512: 32 registers)
TARGETS = {"avx2": TargetInfo(32, 1), "avx512": TargetInfo(64, 2)}
MAIN_TAGS = {"conv": ("conv2d_NCHWc",), "conv3x3s2": ("conv2d_NCHWc",),
             "depthwise": ("depthwise_conv2d_NCHWc",),
             "dense": ("dense_pack", "dense", "matmul")}

needs_cc = pytest.mark.requires_cc


class _Graph:
    """An ONNX graph under construction: nodes, initializers and fresh names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, value: float) -> str:
        name = self.name("k")
        self.inits.append(numpy_helper.from_array(np.float32(value), name))
        return name

    def weight(self, shape: tuple[int, ...], scale: float) -> str:
        name = self.name("w")
        value = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs: object) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out


def _epilogue(g: _Graph, kind: str, x: str) -> str:
    """The activation ``kind`` applied to ``x``, as exporters write it."""
    if kind == "relu":
        return g.op("Relu", [x])
    if kind == "hardswish":
        return g.op("HardSwish", [x])
    if kind == "hardswish_spelled":  # tf2onnx / older PyTorch exports
        clipped = g.op("Clip", [g.op("Add", [x, g.const(3)]), g.const(0), g.const(6)])
        return g.op("Div", [g.op("Mul", [x, clipped]), g.const(6)])
    if kind == "silu":
        return g.op("Mul", [x, g.op("Sigmoid", [x])])
    if kind == "hard_sigmoid_x":
        return g.op("Mul", [x, g.op("HardSigmoid", [x], alpha=0.2, beta=0.5)])
    if kind == "gelu_tanh":
        cube = g.op("Mul", [g.op("Mul", [x, x]), x])
        inner = g.op("Mul", [g.op("Add", [x, g.op("Mul", [cube, g.const(0.044715)])]),
                             g.const(0.7978845608)])
        return g.op("Mul", [g.op("Mul", [x, g.op("Add", [g.op("Tanh", [inner]), g.const(1)])]),
                            g.const(0.5)])
    if kind == "square":
        return g.op("Mul", [x, x])
    if kind == "three_uses":
        return g.op("Add", [g.op("Mul", [x, g.op("Sigmoid", [x])]), x])
    raise ValueError(kind)


def _layer(g: _Graph, family: str, x: str, cin: int, cout: int) -> str:
    """A conv 1x1, a conv 3x3 of stride 2 (padded), a depthwise 3x3 (``cin == cout``) or a
    dense layer with bias on ``x``."""
    bias = g.weight((cout,), 0.1)
    if family == "conv3x3s2":
        return g.op("Conv", [x, g.weight((cout, cin, 3, 3), (9 * cin) ** -0.5), bias],
                    kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    if family == "conv":
        return g.op("Conv", [x, g.weight((cout, cin, 1, 1), cin ** -0.5), bias],
                    kernel_shape=[1, 1])
    if family == "depthwise":
        return g.op("Conv", [x, g.weight((cout, 1, 3, 3), 0.3), bias], kernel_shape=[3, 3],
                    pads=[1, 1, 1, 1], group=cin)
    return g.op("Gemm", [x, g.weight((cout, cin), cin ** -0.5), bias], transB=1)


def _model(family: str, channels: int, size: int, epilogues: tuple[str, ...],
           out_channels: int | None = None) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One input and one layer per epilogue (separate weights), each its own output.

    ``size`` is the image height and width (``conv``, ``depthwise``) or the rows (``dense``).
    """
    g = _Graph(seed=len(family) * 1000 + channels * 10 + size)
    cout = out_channels or channels
    shape = (size, channels) if family == "dense" else (1, channels, size, size)
    outs = [_epilogue(g, kind, _layer(g, family, "x", channels, cout)) for kind in epilogues]
    graph = helper.make_graph(
        g.nodes, f"{family}_epilogues", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 8)
    x = g.rng.standard_normal(shape).astype(np.float32)
    return model, {"x": x}


def _fused_functions(model: onnx.ModelProto) -> dict[str, Function]:
    """The fused functions a ``c`` build of ``model`` compiles, by kernel name."""
    mod, params = relay.frontend.from_onnx(model, freeze_params=False)
    with PassContext(opt_level=3):  # the blocked layouts come with AlterOpLayout (level 3)
        lowered, _ = lower_to_graph(mod, Target("c"), params)
    return lowered.functions


def _main_functions(functions: dict[str, Function], family: str) -> dict[str, Function]:
    """The functions holding the family's product stage."""
    tags = MAIN_TAGS[family]
    found = {}
    for name, func in functions.items():
        dag = function_to_dag(func, name).dag
        if any(getattr(op, "tag", "") in tags for op in dag.ops):
            found[name] = func
    return found


def _product_computed_once(family: str, steps: list) -> bool:
    """Whether the schedule computes the product in its own stage at the register tile: a
    ``cache_write`` (convolutions), or the product computed at the output's tile (dense)."""
    if family == "dense":
        return any(isinstance(s, ComputeAtStep) for s in steps)
    return any(isinstance(s, CacheWriteStep) for s in steps) \
        and any(isinstance(s, ComputeAtStep) for s in steps)


# -- structure: the template claims every epilogue (no compiler needed) --------------------------

_SHAPES = {"conv": (32, 14), "conv3x3s2": (16, 15), "depthwise": (24, 14), "dense": (64, 12)}


@pytest.fixture(scope="module")
def fused_by_family() -> dict[str, dict[str, Function]]:
    """Per family, the product functions of one model with a layer per epilogue."""
    out = {}
    for family, (channels, size) in _SHAPES.items():
        model, _ = _model(family, channels, size, ("relu", *EPILOGUES))
        found = _main_functions(_fused_functions(model), family)
        assert len(found) == 1 + len(EPILOGUES), f"{family}: fused functions {sorted(found)}"
        out[family] = found
    return out


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("family", sorted(_SHAPES))
def test_template_claims_multi_use_epilogues(fused_by_family, family: str, target: str) -> None:
    for name, func in fused_by_family[family].items():
        dag = function_to_dag(func, name).dag
        state = apply_template(dag, TARGETS[target])
        ops = " -> ".join(getattr(op, "name", "?") for op in dag.ops)
        assert state is not None, f"{family} {name}: no template for {ops}"
        assert _product_computed_once(family, state.transform_steps), \
            f"{family} {name}: the template does not compute the product at its tile"


def _weight_loads(func: Function, name: str, vector_bytes: int) -> int:
    """How often the generated C reads the convolution's weight (the 6-D parameter)."""
    prim = lower_function(name, func, vector_bytes, 1)
    source = generate_module_sources([prim], vector_bytes)[0]
    body = source[source.index(f"{name}("):]
    weights = [b.name for b in prim.params if len(b.shape) == 6]
    assert weights, f"{name}: no weight parameter in {[b.shape for b in prim.params]}"
    return body.count(f"{weights[0]}[")


@pytest.mark.parametrize("family", ["conv", "conv3x3s2", "depthwise"])
def test_generated_code_reads_weights_as_often_as_with_relu(fused_by_family, family: str) -> None:
    """The product is computed once whatever the epilogue: the kernel has exactly as many
    weight loads as the ReLU one (a duplicated product would have twice as many)."""
    functions = fused_by_family[family]
    counts = {}
    for name, func in functions.items():
        dag = function_to_dag(func, name).dag
        kinds = "+".join(sorted({getattr(op, "tag", "") for op in dag.ops}))
        counts[name] = (_weight_loads(func, name, 32), kinds)
    values = {c for c, _ in counts.values()}
    assert len(values) == 1, f"{family}: weight loads per kernel differ: {counts}"


# -- numbers: compiled kernels against onnxruntime -----------------------------------------------

def _run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    return list(sess.run(None, feeds))


def _run_kiln(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    mod, params = relay.frontend.from_onnx(model, freeze_params=False)
    with PassContext(opt_level=3):
        factory = relay.build(mod, target="c", params=params)
    module = graph_executor.GraphModule(factory["default"](cpu()))
    module.set_input(**feeds)
    module.run()
    return [module.get_output(i).numpy() for i in range(module.get_num_outputs())]


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], what: str) -> None:
    expected = _run_ort(model, feeds)
    actual = _run_kiln(model, feeds)
    assert len(actual) == len(expected)
    names = [o.name for o in model.graph.output]
    for name, a, e in zip(names, actual, expected):
        assert a.shape == e.shape, f"{what} {name}: shape {a.shape}, expected {e.shape}"
        scale = max(1.0, float(np.abs(e).max()))
        err = float(np.abs(a - e).max()) / scale
        assert err < 2e-5, f"{what} output {name}: max |diff| / scale {err:.2e}"


# (family, channels, size[, out channels]): the second of each family has vector remainders
# (channel blocks smaller than a vector, widths that leave partial register tiles, dense columns
# that are not a multiple of the vector width)
NUMERIC_CASES = [("conv", 32, 14, 32), ("conv", 20, 13, 36), ("conv3x3s2", 16, 15, 24),
                 ("depthwise", 48, 14, 48),
                 ("depthwise", 20, 11, 20), ("dense", 64, 12, 64), ("dense", 40, 7, 50)]


@needs_cc
@pytest.mark.parametrize("case", NUMERIC_CASES, ids=lambda c: "_".join(map(str, c)))
def test_compiled_epilogues_match_onnxruntime(case: tuple[str, int, int, int]) -> None:
    family, channels, size, cout = case
    model, feeds = _model(family, channels, size, EPILOGUES, out_channels=cout)
    for name, func in _main_functions(_fused_functions(model), family).items():
        dag = function_to_dag(func, name).dag
        assert apply_template(dag, TARGETS["avx512"]) is not None, f"{case} {name}: no template"
    _check(model, feeds, str(case))


def _mobilenet_v3_block(channels: int, expand: int, size: int,
                        spelled: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Expand 1x1 + hard-swish, depthwise 3x3 + hard-swish, project 1x1, residual add."""
    g = _Graph(seed=7)
    act = "hardswish_spelled" if spelled else "hardswish"
    h = _epilogue(g, act, _layer(g, "conv", "x", channels, expand))
    h = _epilogue(g, act, _layer(g, "depthwise", h, expand, expand))
    y = g.op("Add", ["x", _layer(g, "conv", h, expand, channels)])
    graph = helper.make_graph(
        g.nodes, "mbv3_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, channels, size, size))],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 8)
    return model, {"x": g.rng.standard_normal((1, channels, size, size)).astype(np.float32)}


@needs_cc
@pytest.mark.parametrize("spelled", [False, True], ids=["HardSwish", "spelled"])
def test_mobilenet_v3_block(spelled: bool) -> None:
    model, feeds = _mobilenet_v3_block(24, 72, 10, spelled)
    functions = _fused_functions(model)
    for family in ("conv", "depthwise"):
        found = _main_functions(functions, family)
        assert found, f"no {family} function"
        for name, func in found.items():
            assert apply_template(function_to_dag(func, name).dag, TARGETS["avx2"]) is not None, \
                f"{family} {name}: no template"
    _check(model, feeds, "mobilenet_v3 block")


# -- side stages: what the epilogue reads besides the product ------------------------------------

def _blocked_conv(block: int = 8, channels: int = 16, size: int = 9,
                  weight_scale: relay.Expr | None = None) -> tuple[list[relay.Var], relay.Expr]:
    data = relay.var("data", shape=(1, channels // block, size, size, block), dtype="float32")
    weight = relay.var("weight", shape=(channels // block, channels // block, 3, 3, block, block),
                       dtype="float32")
    w: relay.Expr = weight if weight_scale is None else relay.multiply(weight, weight_scale)
    conv = relay.nn.contrib_conv2d_nchwc(
        data, w, padding=(1, 1), channels=channels, kernel_size=(3, 3),
        data_layout=f"NCHW{block}c", kernel_layout=f"OIHW{block}i{block}o",
        out_layout=f"NCHW{block}c")
    return [data, weight], conv


def _typed(params: list[relay.Var], body: relay.Expr) -> Function:
    func = relay.Function(params, body).with_attr("Primitive", 1)
    return infer_type(IRModule.from_expr(func))["main"]


@needs_cc
def test_side_stages_are_inlined_into_the_epilogue() -> None:
    """An epilogue reading an element-wise function of another input (a per-channel scale
    computed in the kernel) and scalar constants: the template claims it and agrees with the
    interpreter."""
    params, conv = _blocked_conv()
    scale = relay.var("scale", shape=(1, 2, 1, 1, 8), dtype="float32")
    gate = relay.sigmoid(relay.multiply(scale, relay.const(2.0)))  # a 5-D side stage
    y = relay.multiply(relay.add(conv, gate), relay.clip(relay.add(conv, relay.const(3.0)), 0.0, 6.0))
    func = _typed([*params, scale], y)
    dag = function_to_dag(func, "side").dag
    for target in TARGETS.values():
        assert apply_template(dag, target) is not None
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(tuple(p.checked_type.shape)).astype(np.float32)
              for p in func.params]
    lib = build_native({"side_stage_conv": func})
    out = np.full(tuple(func.body.checked_type.shape), np.nan, dtype=np.float32)
    lib.kernel("side_stage_conv")(*arrays, out)
    ref = np.asarray(evaluate(IRModule.from_expr(func), arrays))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


def test_stage_feeding_the_convolution_is_not_a_side_stage() -> None:
    """A weight computed inside the kernel is not the padding: the pattern does not apply."""
    params, conv = _blocked_conv(weight_scale=relay.const(0.5))
    func = _typed(params, relay.nn.relu(conv))
    assert match_nchwc(function_to_dag(func, "scaled_weight").dag, ("conv2d_NCHWc",)) is None


@needs_cc
def test_dense_dot_tiling_with_multi_use_epilogues() -> None:
    """``nn.dense`` with a weight given at run time (not packed: the dot-product tiling) and
    hard-swish / SiLU epilogues, odd sizes: template claimed, results as the interpreter's."""
    functions = {}
    for act in ("hardswish", "silu"):
        x = relay.var("x", shape=(7, 40), dtype="float32")
        w = relay.var("w", shape=(50, 40), dtype="float32")
        b = relay.var("b", shape=(50,), dtype="float32")
        d = relay.add(relay.nn.dense(x, w), b)
        if act == "hardswish":
            gate = relay.clip(relay.add(relay.multiply(d, relay.const(1 / 6)), relay.const(0.5)),
                              0.0, 1.0)
        else:
            gate = relay.sigmoid(d)
        functions[f"dot_{act}"] = _typed([x, w, b], relay.multiply(d, gate))
    for name, func in functions.items():
        dag = function_to_dag(func, name).dag
        for target in TARGETS.values():
            state = apply_template(dag, target)
            assert state is not None and _product_computed_once("dense", state.transform_steps)
    lib = build_native(functions)
    rng = np.random.default_rng(5)
    for name, func in functions.items():
        arrays = [rng.standard_normal(tuple(p.checked_type.shape)).astype(np.float32)
                  for p in func.params]
        out = np.full((7, 50), np.nan, dtype=np.float32)
        lib.kernel(name)(*arrays, out)
        ref = np.asarray(evaluate(IRModule.from_expr(func), arrays))
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()),
                                   err_msg=name)
