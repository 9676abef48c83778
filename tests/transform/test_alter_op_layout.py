"""AlterOpLayout: blocked NCHW{c} convolutions, packed dense, layout propagation, build pipeline.

Oracles: the reference interpreter on the module *before* the pass (values), block sizes and
weight packings recomputed in the tests by naive formulas and loops, and the graph JSON, params
and output that TVM 0.19 wrote for the fixtures' small network.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from math import prod
from pathlib import Path

import numpy as np
import pytest
from _pass_helpers import assert_same_values, module, random_inputs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln as tvm
from kiln import relay
from kiln.auto_scheduler import ApplyHistoryBest
from kiln.build_module import build_pipeline, optimize
from kiln.codegen.graph_codegen import graph_codegen
from kiln.contrib import graph_executor
from kiln.interpreter import evaluate
from kiln.ir.expr import Call, Constant, Expr, Function, Op, Var
from kiln.ir.visitor import post_order
from kiln.relay import testing
from kiln.runtime import load_param_dict
from kiln.target import Target
from kiln.te import dispatch as te_dispatch
from kiln.transform import AlterOpLayout, FoldConstant, FoldScaleAxis, InferType, PassContext
from kiln.transform.alter_op_layout import channel_block, conv_padded_channels, dense_block
from kiln.transform.layout_propagation import channel_pad_value

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tvm"
# Targets whose vector register the pass reads: 4, 8 and 16 float32 lanes.
TARGETS = {4: "llvm -mcpu=x86-64", 8: "llvm -mcpu=haswell", 16: "llvm -mcpu=skylake-avx512"}


# --- helpers -------------------------------------------------------------------------------------

def expected_block(channels: int, lanes: int) -> int:
    """The block the task asks for, by enumeration: the largest power-of-two divisor up to
    ``lanes``, or the largest divisor up to ``lanes`` when that is 1."""
    powers = [2 ** i for i in range(8) if 2 ** i <= lanes and channels % 2 ** i == 0]
    if max(powers) > 1:
        return max(powers)
    return max(d for d in range(1, lanes + 1) if channels % d == 0)


def pack_oihw(w: np.ndarray, ic: int, oc: int) -> np.ndarray:
    """``OIHW -> OIHW{ic}i{oc}o`` with a naive loop."""
    o, i, kh, kw = w.shape
    out = np.empty((o // oc, i // ic, kh, kw, ic, oc), w.dtype)
    for a in range(o):
        for b in range(i):
            out[a // oc, b // ic, :, :, b % ic, a % oc] = w[a, b]
    return out


def calls(expr: Expr, name: str) -> list[Call]:
    """Calls of operator ``name`` anywhere in ``expr`` (fused functions included)."""
    return [n for n in post_order(expr)
            if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == name]


def alter(mod: tvm.IRModule, target: str, fold: bool = True) -> tvm.IRModule:
    """AlterOpLayout (then FoldConstant) at opt level 3 under ``target``."""
    with Target(target), PassContext(opt_level=3):
        out = AlterOpLayout()(mod)
        if fold:
            out = FoldConstant()(out)
    return InferType()(out)


def check_equivalent(before: tvm.IRModule, after: tvm.IRModule, rng: np.random.Generator,
                     tol: float = 1e-5) -> None:
    assert before["main"].checked_type == after["main"].checked_type  # edges keep their layouts
    assert_same_values(before, after, random_inputs(before, rng), rtol=tol, atol=tol)


def conv_bn(x: Expr, name: str, c_in: int, c_out: int, rng: np.random.Generator,
            kernel: int = 3, stride: int = 1, groups: int = 1) -> Expr:
    """conv2d (constant weight) + batch norm (constant statistics)."""
    w = rng.standard_normal((c_out, c_in // groups, kernel, kernel)).astype("float32")
    w *= np.float32(np.sqrt(2.0 / (c_in // groups * kernel * kernel)))
    y = relay.nn.conv2d(x, relay.const(w), strides=stride, padding=kernel // 2, groups=groups,
                        channels=c_out, kernel_size=kernel)
    stats = [rng.uniform(0.5, 1.5, c_out), rng.uniform(-0.5, 0.5, c_out),
             rng.uniform(-0.5, 0.5, c_out), rng.uniform(0.5, 2.0, c_out)]
    return relay.nn.batch_norm(y, *[relay.const(s.astype("float32")) for s in stats])[0]


def optimized(mod: tvm.IRModule, target: str, params: dict | None = None,
              **ctx: object) -> tvm.IRModule:
    """The C target's whole opt-level-3 pipeline (no code generation)."""
    with PassContext(opt_level=3, **ctx):  # type: ignore[arg-type]
        out, _ = optimize(mod, target=target, params=params)
    return out


def fused_calls(main: Function) -> list[Call]:
    """The calls of fused functions in ``main``."""
    return [n for n in post_order(main, into_functions=False)
            if isinstance(n, Call) and isinstance(n.op, Function)]


def padded_slices(main: Function) -> int:
    """Fused functions that slice a convolution computed in padded channel blocks back to its
    channels: a ``strided_slice`` after a ``layout_transform`` between two blocked layouts."""
    return sum(1 for call in fused_calls(main)
               if calls(call.op.body, "strided_slice") and any(
                   lt.attrs.src_layout.endswith("c") and lt.attrs.dst_layout.endswith("c")
                   for lt in calls(call.op.body, "layout_transform")))


def activation_transforms(main: Function) -> list[str]:
    """Op lists of the fused functions holding a ``layout_transform``; asserts that none of them
    transforms a constant (weights are packed at build time)."""
    found = []
    for call in fused_calls(main):
        fn = call.op
        args = dict(zip(fn.params, call.args))
        for lt in calls(fn.body, "layout_transform"):
            src = lt.args[0]
            assert not isinstance(src, Constant)
            assert not (isinstance(src, Var) and isinstance(args.get(src), Constant))
            found.append("_".join(c.op.name for c in post_order(fn.body)
                                  if isinstance(c, Call) and isinstance(c.op, Op)))
    return found


def func_names(main: Function) -> Counter[str]:
    """Kernel names of the graph JSON, without the ``_1``, ``_2`` deduplication suffixes."""
    graph = json.loads(graph_codegen(main).graph.to_json())
    return Counter(re.sub(r"_\d+$", "", n["attrs"]["func_name"]) for n in graph["nodes"]
                   if n["op"] == "tvm_op")


def random_params(params: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Workload params redrawn so that activations and logits spread (He-scaled weights)."""
    out = {}
    for name, value in params.items():
        shape = value.numpy().shape
        if name.endswith("_var"):
            out[name] = rng.uniform(0.5, 2.0, shape)
        elif name.endswith("_gamma"):
            out[name] = rng.uniform(0.5, 1.5, shape)
        elif len(shape) >= 2:
            out[name] = rng.standard_normal(shape) * np.sqrt(2.0 / prod(shape[1:]))
        else:
            out[name] = rng.uniform(-0.5, 0.5, shape)
        out[name] = out[name].astype("float32")
    return out


# --- vector width and block sizes ---------------------------------------------------------------

@pytest.mark.parametrize(("target", "dtype", "lanes"), [
    ("llvm -mcpu=x86-64", "float32", 4),
    ("llvm -mcpu=haswell", "float32", 8),
    ("llvm -mcpu=znver3", "float64", 4),
    ("llvm -mcpu=sandybridge", "float32", 8),  # AVX without AVX2: 256-bit registers
    ("llvm -mcpu=skylake-avx512", "float32", 16),
    ("llvm -mcpu=znver4", "float16", 32),
    ("llvm -mcpu=cortex-a72 -mtriple=aarch64-linux-gnu", "float32", 4),
    ("c -mcpu=cascadelake", "int8", 64),
    ("llvm -vector-width=256", "float32", 8),
    ("llvm -vector-width=128 -mcpu=skylake-avx512", "float32", 4),  # explicit width wins
    ("llvm -mattr=+avx2,+fma", "float32", 8),
    ("llvm -mattr=+avx512f", "float64", 8),
])
def test_vector_width_of_named_cpus(target, dtype, lanes):
    assert Target(target).vector_width(dtype) == lanes


def test_vector_width_of_this_machine_follows_its_cpu_flags():
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists() or "flags" not in cpuinfo.read_text():
        pytest.skip("no x86 /proc/cpuinfo flags to compare with")
    flags = set(next(line for line in cpuinfo.read_text().splitlines()
                     if line.startswith("flags")).split(":")[1].split())
    lanes = 16 if "avx512f" in flags else 8 if "avx" in flags else 4
    for target in ("c", "llvm", "numpy", "llvm -mcpu=native", "llvm -mcpu=some-future-cpu"):
        assert Target(target).vector_width() == lanes
        assert Target(target).vector_width("float64") == lanes // 2


def test_num_cores():
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert 1 <= Target("c").num_cores <= (affinity or 1)
    assert Target("llvm -num-cores=3").num_cores == 3


@given(st.integers(1, 600), st.integers(1, 40))
def test_channel_block_is_the_wanted_divisor(channels, lanes):
    block = channel_block(channels, lanes)
    assert channels % block == 0 and block <= lanes
    assert block == expected_block(channels, lanes)


@given(st.integers(1, 4096), st.integers(1, 40))
def test_dense_block_divides_and_prefers_whole_vectors(units, lanes):
    n = dense_block(units, lanes)
    assert units % n == 0 and n <= 2 * lanes
    divisors = [d for d in range(1, 2 * lanes + 1) if units % d == 0]
    if any(d % lanes == 0 for d in divisors):
        assert n == max(d for d in divisors if d % lanes == 0)
    elif any(d >= 4 and d & (d - 1) == 0 for d in divisors):
        assert n == max(d for d in divisors if d >= 4 and d & (d - 1) == 0)
    else:
        assert n == max(divisors)


def test_dense_block_of_the_fixture_and_common_heads():
    assert dense_block(10, 4) == 5  # TVM's NC5n for the small network at 4 lanes
    assert dense_block(1000, 8) == 8 and dense_block(512, 8) == 16 and dense_block(1000, 16) == 8


# --- single convolutions ---------------------------------------------------------------------------

# (data shape, out channels, kernel, strides, padding, dilation, groups)
CONVS = {
    "stem-ic3": ((1, 3, 9, 9), 8, 3, 1, 1, 1, 1),
    "odd-channels": ((1, 5, 7, 7), 7, 3, 1, 1, 1, 1),
    "stride2-asym-pad": ((2, 12, 10, 9), 20, 3, 2, (0, 1, 1, 2), 1, 1),
    "dilated": ((1, 16, 11, 11), 24, 3, 1, 2, 2, 1),
    "pointwise": ((1, 32, 6, 6), 16, 1, 1, 0, 1, 1),
    "rect-kernel": ((1, 6, 8, 7), 10, (1, 3), (2, 1), (0, 1), 1, 1),
    "one-channel": ((1, 1, 8, 8), 4, 3, 1, 1, 1, 1),
    "depthwise": ((1, 16, 9, 9), 16, 3, 1, 1, 1, 16),
    "depthwise-odd-stride2": ((1, 6, 8, 8), 6, 3, 2, 1, 1, 6),
    "depthwise-dilated": ((1, 24, 10, 10), 24, 3, 1, 2, 2, 24),
    "grouped-2": ((1, 16, 8, 8), 32, 3, 1, 1, 1, 2),
    "grouped-resnext": ((1, 32, 6, 6), 32, 3, 1, 1, 1, 8),
    "grouped-odd-stride2": ((1, 12, 7, 7), 18, 3, 2, 1, 1, 3),
    "grouped-3-in-dilated": ((1, 9, 9, 9), 6, 3, 1, 2, 2, 3),
    "grouped-pointwise": ((2, 24, 5, 5), 48, 1, 1, 0, 1, 3),
}


def single_conv(case: str, rng: np.random.Generator, const_weight: bool) -> tvm.IRModule:
    shape, c_out, kernel, strides, padding, dilation, groups = CONVS[case]
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    w = rng.standard_normal((c_out, shape[1] // groups, kh, kw)).astype("float32")
    weight = relay.const(w) if const_weight else relay.var("w", shape=w.shape)
    x = relay.var("x", shape=shape)
    y = relay.nn.conv2d(x, weight, strides=strides, padding=padding, dilation=dilation,
                        groups=groups, kernel_size=(kh, kw))
    return module(relay.nn.relu(y))


@pytest.mark.parametrize("lanes", sorted(TARGETS))
@pytest.mark.parametrize("case", sorted(CONVS))
def test_single_conv_is_blocked_and_equivalent(case, lanes, rng):
    before = single_conv(case, rng, const_weight=True)
    after = alter(before, TARGETS[lanes])
    check_equivalent(before, after, rng)
    c_in, c_out, groups = CONVS[case][0][1], CONVS[case][1], CONVS[case][6]
    depthwise = groups == c_in == c_out
    name = "nn.contrib_depthwise_conv2d_NCHWc" if depthwise else "nn.contrib_conv2d_NCHWc"
    (conv,) = calls(after["main"], name)
    assert not calls(after["main"], "nn.conv2d")
    if depthwise:
        ic = oc = expected_block(c_out, lanes)
    else:  # grouped: blocks of one group's channels
        ic, oc = expected_block(c_in // groups, lanes), expected_block(c_out // groups, lanes)
    # more channels than a vector in narrower blocks: computed in whole vectors, sliced back
    padded = -(-c_out // lanes) * lanes if groups == 1 and c_out > lanes and oc < lanes \
        and -(-c_out // lanes) * lanes * oc < c_out * lanes else c_out
    out_bn = oc if padded == c_out else lanes
    assert conv.attrs.groups == groups
    kernel = f"OIHW1i{oc}o" if depthwise else f"OIHW{ic}i{out_bn}o"
    assert (conv.attrs.data_layout, conv.attrs.kernel_layout, conv.attrs.out_layout) == \
        (f"NCHW{ic}c", kernel, f"NCHW{out_bn}c")
    assert conv.attrs.channels == padded
    # the weight was packed at build time, exactly as a naive loop packs it (zero filters pad)
    packed = conv.args[1]
    assert isinstance(packed, Constant)
    original = calls(before["main"], "nn.conv2d")[0].args[1].value
    original = np.pad(original, ((0, padded - c_out), (0, 0), (0, 0), (0, 0)))
    np.testing.assert_array_equal(packed.value,
                                  pack_oihw(original, 1 if depthwise else ic, out_bn))
    # one conversion in (data) and one out (the relu result is the output); a padded result's
    # real channel blocks are converted to the real block and sliced out first
    transforms = [(c.attrs.src_layout, c.attrs.dst_layout)
                  for c in calls(after["main"], "layout_transform")]
    back = [(f"NCHW{out_bn}c", f"NCHW{oc}c")] if padded != c_out else []
    assert sorted(transforms) == sorted([("NCHW", f"NCHW{ic}c"), *back, (f"NCHW{oc}c", "NCHW")])
    assert len(calls(after["main"], "strided_slice")) == (padded != c_out)


@pytest.mark.parametrize(("channels", "lanes", "padded"), [
    (24, 16, 32), (40, 16, 48), (100, 16, 112), (20, 8, 24),  # narrower blocks: padded
    (12, 8, 16), (24, 8, 24), (48, 16, 48), (4, 16, 4), (6, 8, 6)])  # whole vectors, or <= one
def test_narrow_output_blocks_are_padded_to_whole_vectors(channels, lanes, padded, rng):
    """DBNet's 96 -> 24 channel conv on 16 lanes ran its multiply-adds 8 lanes wide (8.5 ms, at
    half the machine's rate); 32 channels in 16-lane blocks, sliced back to 24, took 5.9."""
    assert conv_padded_channels(channels, lanes) == padded
    x = relay.var("x", shape=(1, 16, 6, 6))
    w = relay.const(rng.standard_normal((channels, 16, 3, 3)).astype("float32"))
    before = module(relay.nn.relu(relay.nn.conv2d(x, w, padding=1)))
    target = {16: TARGETS[16], 8: TARGETS[8]}[lanes]
    after = alter(before, target)
    check_equivalent(before, after, rng)
    (conv,) = calls(after["main"], "nn.contrib_conv2d_NCHWc")
    assert conv.attrs.channels == padded


def hardswish(x: Expr) -> Expr:
    return relay.multiply(x, relay.divide(relay.clip(relay.add(x, relay.const(3.0)), 0.0, 6.0),
                                          relay.const(6.0)))


def conv_affine(x: Expr, c_in: int, c_out: int, rng: np.random.Generator, kernel: int = 3,
                groups: int = 1) -> Expr:
    """conv2d, then a per-channel scale and shift (a batch norm as SimplifyInference leaves it)."""
    w = rng.standard_normal((c_out, c_in // groups, kernel, kernel)).astype("float32")
    w *= np.float32(np.sqrt(2.0 / (c_in // groups * kernel * kernel)))
    y = relay.nn.conv2d(x, relay.const(w), padding=kernel // 2, groups=groups, channels=c_out,
                        kernel_size=kernel)
    scale, shift = (relay.const(rng.uniform(lo, hi, (c_out, 1, 1)).astype("float32"))
                    for lo, hi in ((0.5, 1.5), (-0.5, 0.5)))
    return relay.add(relay.multiply(y, scale), shift)


def se_block(rng: np.random.Generator, c_in: int = 24, c_mid: int = 72, c_out: int = 40,
             divide_by: np.ndarray | None = None) -> tvm.IRModule:
    """A MobileNetV3 block (1x1 expand + hard-swish, depthwise + ReLU, squeeze-excitation,
    1x1 project), then a 3x3 conv + ReLU with a residual add: every conv but the squeeze's
    leaves its channels (72, 40) in narrower blocks than 16 lanes."""
    x = relay.var("x", shape=(1, c_in, 8, 8))
    y = hardswish(conv_affine(x, c_in, c_mid, rng, kernel=1))
    y = relay.nn.relu(conv_affine(y, c_mid, c_mid, rng, groups=c_mid))
    s = relay.mean(y, axis=[2, 3], keepdims=True)
    s = relay.nn.relu(conv_affine(s, c_mid, 24, rng, kernel=1))
    s = relay.clip(relay.add(relay.multiply(conv_affine(s, 24, c_mid, rng, kernel=1),
                                            relay.const(1 / 6)), relay.const(0.5)), 0.0, 1.0)
    y = relay.multiply(y, s)
    if divide_by is not None:  # a per-channel divisor: a zero-padded one would give 0 / 0
        y = relay.divide(y, relay.const(divide_by.reshape(-1, 1, 1)))
    y = conv_affine(y, c_mid, c_out, rng, kernel=1)
    return module(relay.add(relay.nn.relu(conv_affine(y, c_out, c_out, rng)), y))


def test_padded_channels_flow_through_epilogues_depthwise_and_squeeze_excitation(rng):
    """A conv padded to whole vectors of channels (72 -> 80 at 16 lanes) stays padded through
    its hard-swish, the depthwise conv (in 16-lane blocks, not 8: MobileNetV3's 72- and
    120-channel ones took 1.4-1.9x onnxruntime's time), the squeeze-excitation's mean and
    scale, into the next conv where its zero input channels cost less than a copy of the real
    ones (``_reads_padded``), where a slice kernel per padded conv did it before."""
    before = se_block(rng)
    after = alter(before, TARGETS[16])
    check_equivalent(before, after, rng, tol=1e-4)
    (dw,) = calls(after["main"], "nn.contrib_depthwise_conv2d_NCHWc")
    assert (dw.attrs.channels, dw.attrs.groups, dw.attrs.data_layout) == (80, 80, "NCHW16c")
    convs = {(c.attrs.channels, c.attrs.kernel_size[0]): c.attrs.data_layout
             for c in calls(after["main"], "nn.contrib_conv2d_NCHWc")}
    # the squeeze reads the padded mean, the projection the padded scaled value (80 channels for
    # 72: 8 more multiply-adds per 40 outputs cost less than copying 72 channels out); the 3x3
    # conv reads the projection's real 40 channels (8 more per 9 x 40 would cost more)
    assert convs == {(80, 1): "NCHW8c", (24, 1): "NCHW16c", (72, 1): "NCHW8c",
                     (48, 1): "NCHW16c", (48, 3): "NCHW8c"}
    # real channels are sliced out twice: the 3x3 conv's input, and the graph's output
    assert len(calls(after["main"], "strided_slice")) == 2
    blocked = [(c.attrs.src_layout, c.attrs.dst_layout) for c in calls(after["main"], "layout_transform")
               if c.attrs.src_layout.endswith("c") and c.attrs.dst_layout.endswith("c")]
    assert blocked == [("NCHW16c", "NCHW8c")] * 2


def test_padding_stops_where_a_padded_channel_would_not_stay_finite(rng):
    """Dividing by a per-channel constant would divide the padded channels by its zero padding:
    the value is sliced back to its real channels first, and the result stays finite."""
    divisor = rng.uniform(0.5, 2.0, 72).astype("float32")
    before = se_block(rng, divide_by=divisor)
    after = alter(before, TARGETS[16])
    check_equivalent(before, after, rng, tol=1e-4)
    divide = [c for c in calls(after["main"], "divide") if isinstance(c.args[1], Constant)
              and c.args[1].value.size > 1]
    assert divide and all(c.args[1].value.size == 72 for c in divide)


@pytest.mark.parametrize(("op", "values", "expected"), [
    (lambda x: relay.nn.relu(x), [0.0], 0.0), (lambda x: relay.sigmoid(x), [0.0], 0.5),
    (lambda x: relay.add(x, x), [1.5, 1.5], 3.0), (lambda x: relay.divide(x, x), [0.0, 0.0], None),
    (lambda x: relay.log(x), [0.0], None), (lambda x: relay.clip(x, -1.0, 1.0), [5.0], 1.0)])
def test_channel_pad_value_is_the_reference_on_the_padded_constants(op, values, expected):
    x = relay.var("x", shape=(1, 16, 2, 2))
    call = InferType()(module(op(x)))["main"].body
    assert channel_pad_value(call, values) == expected


def test_conv_over_one_pixel_is_not_padded(rng):
    """A squeeze-excitation's fc as a 1x1 conv over one pixel is bound by its weights: padding
    it only added a slice kernel (RegNetY's gates, 2 -> 23 us)."""
    x = relay.var("x", shape=(1, 16, 1, 1))
    w = relay.const(rng.standard_normal((24, 16, 1, 1)).astype("float32"))
    before = module(relay.sigmoid(relay.nn.conv2d(x, w)))
    after = alter(before, TARGETS[16])
    check_equivalent(before, after, rng)
    (conv,) = calls(after["main"], "nn.contrib_conv2d_NCHWc")
    assert conv.attrs.channels == 24 and not calls(after["main"], "strided_slice")


@pytest.mark.parametrize("case", ["stem-ic3", "stride2-asym-pad", "depthwise"])
def test_variable_weight_is_transformed_at_run_time(case, rng):
    before = single_conv(case, rng, const_weight=False)
    after = alter(before, TARGETS[8])
    check_equivalent(before, after, rng)
    # packed at run time, zero filters first where the output is computed in whole vectors
    pads = {id(c): c.args[0] for c in calls(after["main"], "nn.pad")}
    weights = [c for c in calls(after["main"], "layout_transform")
               if isinstance(w := pads.get(id(c.args[0]), c.args[0]), Var) and w.name_hint == "w"]
    assert len(weights) == 1 and weights[0].attrs.src_layout == "OIHW"


def test_runtime_scaled_weight_is_padded_like_a_constant_one(rng):
    """FoldScaleAxis moves a squeeze-excitation's scale onto the projection's weight, which is
    then computed at every run: it is padded to whole vectors of output channels (40 -> 48)
    and given zero input channels for the padded input (72 -> 80) all the same, in the kernel
    that rescales it. MobileNetV3's 120 -> 40 projections at 28 x 28 ran 8 lanes wide, at half
    the machine's rate (60 us where a 16-lane conv of that size takes 29)."""
    before = se_block(rng)
    with PassContext(opt_level=3):
        folded = InferType()(FoldScaleAxis()(FoldConstant()(before)))
    (scaled,) = [c for c in calls(folded["main"], "nn.conv2d")
                 if c.attrs.channels == 40 and c.attrs.kernel_size[0] == 1]
    assert not isinstance(scaled.args[1], Constant)  # the weight is the scale's product
    after = alter(folded, TARGETS[16])
    check_equivalent(before, after, rng, tol=1e-4)
    convs = {(c.attrs.channels, c.attrs.kernel_size[0]): c.attrs.data_layout
             for c in calls(after["main"], "nn.contrib_conv2d_NCHWc")}
    assert convs[(48, 1)] == "NCHW16c"  # the projection reads the padded 80 channels


def test_convs_that_stay_nchw(rng):
    x = relay.var("x", shape=(1, 8, 6, 6))
    w_mult = relay.const(rng.standard_normal((16, 1, 3, 3)).astype("float32"))
    multiplier = relay.nn.conv2d(x, w_mult, padding=1, groups=8)
    xh = relay.var("xh", shape=(1, 6, 6, 8))
    w_hwio = relay.const(rng.standard_normal((3, 3, 8, 4)).astype("float32"))
    nhwc = relay.nn.conv2d(xh, w_hwio, padding=1, data_layout="NHWC", kernel_layout="HWIO")
    xi = relay.var("xi", shape=(1, 8, 5, 5), dtype="int8")
    w_int = relay.const(rng.integers(-3, 4, (4, 8, 1, 1)).astype("int8"))
    integer = relay.nn.conv2d(xi, w_int, out_dtype="int32")
    before = module(relay.Tuple([multiplier, nhwc, integer]))
    after = alter(before, TARGETS[8])
    check_equivalent(before, after, rng)
    assert len(calls(after["main"], "nn.conv2d")) == 3
    assert not calls(after["main"], "layout_transform")


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("pool", ["max", "avg"])
def test_pool_of_nchw_input_runs_blocked(pool, lanes, rng):
    """A pool whose input no convolution blocked (a graph input here) is blocked itself: the
    template's windows are channel vectors; the relu after it stays blocked, one conversion
    back at the output."""
    x = relay.var("x", shape=(1, 32, 11, 10))
    op = relay.nn.max_pool2d if pool == "max" else relay.nn.avg_pool2d
    before = module(relay.nn.relu(op(x, (3, 3), (2, 2), padding=(1, 1))), [x])
    after = alter(before, TARGETS[lanes])
    check_equivalent(before, after, rng)
    (call,) = calls(after["main"], f"nn.{pool}_pool2d")
    assert call.attrs.layout == f"NCHW{lanes}c"
    assert transform_pairs(after) == sorted([("NCHW", f"NCHW{lanes}c"), (f"NCHW{lanes}c", "NCHW")])


def test_pool_of_few_channels_stays_nchw(rng):
    x = relay.var("x", shape=(1, 6, 8, 8))  # block 2: no vector to fill
    before = module(relay.nn.max_pool2d(x, (2, 2), (2, 2)), [x])
    after = alter(before, TARGETS[16])
    check_equivalent(before, after, rng)
    assert calls(after["main"], "nn.max_pool2d")[0].attrs.layout == "NCHW"
    assert not calls(after["main"], "layout_transform")


def test_grouped_conv_keeps_tvms_layout_under_a_tuning_log(tmp_path, rng):
    """TVM's auto-scheduler tasks of a grouped convolution are NCHW ``group_conv2d_nchw``: with
    a log entered the convolution is left as it is (its workload key is TVM's)."""
    before = single_conv("grouped-2", rng, const_weight=True)
    log = tmp_path / "empty.json"
    log.write_text("")
    with ApplyHistoryBest(str(log)):
        after = alter(before, TARGETS[8])
    assert len(calls(after["main"], "nn.conv2d")) == 1
    assert not calls(after["main"], "layout_transform")
    assert calls(alter(before, TARGETS[8])["main"], "nn.contrib_conv2d_NCHWc")


@pytest.mark.parametrize(("shape", "c_out", "kwargs", "winograd"), [
    ((1, 16, 20, 20), 32, {}, True),                       # 5 x 5 tiles of 4 x 4 outputs
    ((2, 32, 16, 30), 16, {"padding": (0, 1, 1, 1)}, True),  # batch 2, asymmetric padding
    ((1, 16, 16, 16), 32, {}, False),                      # 4 x 4 tiles: no faster
    ((1, 16, 20, 20), 32, {"strides": 2}, False),
    ((1, 16, 22, 22), 32, {"dilation": 2, "padding": 2}, False),
    ((1, 16, 20, 20), 32, {"groups": 2}, False),
    ((1, 3, 40, 40), 16, {}, False),                       # 3-channel blocks
])
def test_3x3_convolutions_run_as_winograd_where_it_pays(shape, c_out, kwargs, winograd, rng):
    x = relay.var("x", shape=shape)
    groups = kwargs.get("groups", 1)
    w = rng.standard_normal((c_out, shape[1] // groups, 3, 3)).astype("float32")
    args = {"padding": 1, **kwargs}
    before = module(relay.nn.relu(relay.nn.conv2d(x, relay.const(w), **args)), [x])
    after = alter(before, TARGETS[16])
    check_equivalent(before, after, rng, tol=1e-4)
    found = calls(after["main"], "nn.contrib_conv2d_winograd_NCHWc")
    assert bool(found) is winograd
    if winograd:
        (conv,) = found
        assert isinstance(conv.args[1], Constant)  # transformed at build time
        assert conv.args[1].value.shape == (6, 6, c_out // 16, shape[1], 16)
        assert not calls(after["main"], "nn.contrib_conv2d_NCHWc")


def test_winograd_needs_a_constant_weight(rng):
    x, w = relay.var("x", shape=(1, 16, 20, 20)), relay.var("w", shape=(16, 16, 3, 3))
    before = module(relay.nn.conv2d(x, w, padding=1), [x, w])
    after = alter(before, TARGETS[16])
    assert not calls(after["main"], "nn.contrib_conv2d_winograd_NCHWc")
    assert calls(after["main"], "nn.contrib_conv2d_NCHWc")


def test_winograd_of_a_narrow_output_computes_whole_vectors(rng):
    """DBNet's 96 -> 24 channel 3x3 convolutions: 32 channels in 16-lane blocks (zero filters),
    kept padded through the relu, the real 24 sliced out once."""
    x = relay.var("x", shape=(1, 32, 24, 24))
    w = relay.const(rng.standard_normal((24, 32, 3, 3)).astype("float32"))
    before = module(relay.nn.relu(relay.nn.conv2d(x, w, padding=1)), [x])
    after = alter(before, TARGETS[16])
    check_equivalent(before, after, rng, tol=1e-4)
    (conv,) = calls(after["main"], "nn.contrib_conv2d_winograd_NCHWc")
    assert conv.attrs.channels == 32 and conv.attrs.out_layout == "NCHW16c"
    assert len(calls(after["main"], "strided_slice")) == 1


class _HasEveryTvmConvTask:
    """A dispatcher answering that it holds a record for every convolution task in TVM's
    layout (as a log tuned by TVM would)."""

    def query(self, workload_key, dag, func_name, target=None):
        return "record" if func_name == "conv2d_NCHWc" else None


def test_a_log_with_tvms_task_keeps_the_direct_convolution(rng):
    """A convolution whose TVM task the entered log holds keeps TVM's layout (its record
    applies); without one, the tasks Kiln extracts and builds are Winograd's."""
    x = relay.var("x", shape=(1, 16, 20, 20))
    w = relay.const(rng.standard_normal((16, 16, 3, 3)).astype("float32"))
    before = module(relay.nn.conv2d(x, w, padding=1), [x])
    with te_dispatch.using(_HasEveryTvmConvTask()):
        after = alter(before, TARGETS[16])
    assert calls(after["main"], "nn.contrib_conv2d_NCHWc")
    assert not calls(after["main"], "nn.contrib_conv2d_winograd_NCHWc")


# --- propagation -----------------------------------------------------------------------------------

def blocked_chain(rng: np.random.Generator, c: int = 16) -> tuple[Var, Expr]:
    x = relay.var("x", shape=(1, c, 8, 8))
    w = relay.const(rng.standard_normal((c, c, 3, 3)).astype("float32") * np.float32(0.2))
    return x, relay.nn.conv2d(x, w, padding=1)


def transform_pairs(mod: tvm.IRModule) -> list[tuple[str, str]]:
    return sorted((c.attrs.src_layout, c.attrs.dst_layout)
                  for c in calls(mod["main"], "layout_transform"))


EDGES = [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW")]


def _per_channel_ops(y: Expr, rng: np.random.Generator) -> Expr:
    scale = relay.const(rng.uniform(0.5, 1.5, (16, 1, 1)).astype("float32"))
    shift = relay.const(rng.uniform(-1, 1, (1, 16, 1, 1)).astype("float32"))
    bias = relay.const(rng.uniform(-1, 1, (16,)).astype("float32"))
    y = relay.nn.bias_add(relay.add(relay.multiply(y, scale), shift), bias)
    y = relay.clip(relay.sigmoid(y) * relay.const(3.0), 0.1, 2.5)
    spatial = relay.const(rng.uniform(0, 1, (1, 1, 8, 8)).astype("float32"))
    return relay.nn.leaky_relu(relay.maximum(y, spatial), 0.2)


PROPAGATED = {  # body(conv result) -> activation conversions expected beyond the two edges
    "per-channel-constants": (_per_channel_ops, []),
    "pools": (lambda y, rng: relay.nn.global_avg_pool2d(relay.nn.avg_pool2d(
        relay.nn.max_pool2d(y, (3, 3), (2, 2), padding=(1, 1)), (2, 2), count_include_pad=True)),
        []),
    "adaptive-pool": (lambda y, rng: relay.nn.adaptive_max_pool2d(y, (3, 2)), []),
    "pad-hw": (lambda y, rng: relay.nn.pad(y, ((0, 0), (0, 0), (1, 2), (2, 0)), 0.5), []),
    "mean-hw-keepdims": (lambda y, rng: relay.mean(y, axis=(2, 3), keepdims=True) * y, []),
    "concat-channels": (lambda y, rng: relay.concatenate([y, relay.nn.relu(y)], axis=1), []),
    "concat-width": (lambda y, rng: relay.concatenate([y, y], axis=-1), []),
}


def _split_back(parts: relay.TupleWrapper) -> Expr:
    return relay.concatenate([relay.nn.relu(parts[1]), parts[0]], axis=1)


@pytest.mark.parametrize("spec, blocked", [(2, 2), ((8,), (1,)), ((4,), None)])
def test_split_of_whole_channel_blocks_stays_blocked(spec, blocked, rng):
    """A split into whole channel blocks (YOLOv8's C2f halves of NCHW16c) splits the outer block
    axis of the blocked value; a split inside a block gets NCHW."""
    x, y = blocked_chain(rng)
    before = module(_split_back(relay.split(y, spec, axis=1)), [x])
    after = alter(before, TARGETS[8])
    check_equivalent(before, after, rng)
    (split,) = calls(after["main"], "split")
    shape = tuple(split.args[0].checked_type.shape)
    if blocked is None:
        assert shape == (1, 16, 8, 8)
    else:
        assert shape == (1, 2, 8, 8, 8) and split.attrs.indices_or_sections == blocked


@pytest.mark.parametrize("case", sorted(PROPAGATED))
def test_layout_agnostic_consumers_stay_blocked(case, rng):
    body, extra = PROPAGATED[case]
    x, y = blocked_chain(rng)
    before = module(body(y, rng), [x])
    after = alter(before, TARGETS[8])
    check_equivalent(before, after, rng)
    assert transform_pairs(after) == sorted(EDGES + extra)


def test_mean_over_the_split_channel_axis_reduces_its_block_too(rng):
    """TVM's rule: the reduction runs on the blocked value over axes 1 and 4; with keepdims its
    result is held as NCHW1c, converted back once."""
    x, y = blocked_chain(rng)
    before = module(relay.mean(y, axis=1, keepdims=True), [x])
    after = alter(before, TARGETS[8])
    check_equivalent(before, after, rng)
    assert transform_pairs(after) == [("NCHW", "NCHW8c"), ("NCHW1c", "NCHW")]
    assert [tuple(c.attrs.axis) for c in calls(after["main"], "mean")] == [(1, 4)]


CONVERTED = {  # consumers needing NCHW: the conversion sits right in front of them
    "softmax-channels": lambda y: relay.nn.softmax(y, axis=1),
    "transpose": lambda y: relay.transpose(y, (0, 2, 3, 1)),
    "reshape": lambda y: relay.reshape(y, (1, 16, 64)),
    "pad-channels": lambda y: relay.nn.pad(y, ((0, 0), (1, 1), (0, 0), (0, 0))),
    "prelu": lambda y: relay.nn.prelu(y, relay.const(np.full(16, 0.1, "float32"))),
    "nhwc-pool": lambda y: relay.nn.max_pool2d(relay.transpose(y, (0, 2, 3, 1)), (2, 2),
                                               layout="NHWC"),
}


@pytest.mark.parametrize("case", sorted(CONVERTED))
def test_layout_sensitive_consumers_get_nchw(case, rng):
    x, y = blocked_chain(rng)
    before = module(CONVERTED[case](y), [x])
    after = alter(before, TARGETS[8])
    check_equivalent(before, after, rng)
    assert transform_pairs(after) == sorted(EDGES)


@pytest.mark.parametrize("reduce, pool", [(relay.mean, "nn.global_avg_pool2d"),
                                          (relay.max, "nn.global_max_pool2d")])
def test_spatial_reduction_of_a_blocked_image_is_global_pooling(reduce, pool, rng):
    """A squeeze-and-excitation block's ReduceMean over H and W (timm's export) on a blocked
    conv result becomes global pooling in the blocked layout, which the pooling template
    accumulates in registers (the mean over the middle axes had the default schedule)."""
    x, y = blocked_chain(rng)
    before = module(relay.multiply(reduce(y, axis=(2, 3), keepdims=True), y), [x])
    after = alter(before, TARGETS[8])
    check_equivalent(before, after, rng)
    (call,) = calls(after["main"], pool)
    assert call.attrs.layout == "NCHW8c" and tuple(call.checked_type.shape) == (1, 2, 1, 1, 8)
    assert not calls(after["main"], reduce.__name__)
    assert transform_pairs(after) == sorted(EDGES)


def test_mean_over_spatial_axes_reshapes_instead_of_converting(rng):
    x, y = blocked_chain(rng)
    before = module(relay.mean(y, axis=(2, 3)), [x])
    after = alter(before, TARGETS[8])
    check_equivalent(before, after, rng)
    assert transform_pairs(after) == [("NCHW", "NCHW8c")]
    assert calls(after["main"], "reshape")


def test_different_blocks_meeting_are_converted_not_mismatched(rng):
    x = relay.var("x", shape=(1, 4, 6, 6))
    w = [relay.const(rng.standard_normal(s).astype("float32")) for s in
         ((4, 4, 3, 3), (4, 4, 3, 3), (8, 4, 3, 3))]
    a = relay.nn.conv2d(x, w[0], padding=1)  # NCHW4c
    b = relay.nn.conv2d(x, w[1], padding=1)  # NCHW4c
    cat = relay.concatenate([a, b], axis=1)  # 8 channels, still NCHW4c
    c = relay.nn.conv2d(x, w[2], padding=1)  # NCHW8c
    before = module(relay.add(cat, c), [x])
    after = alter(before, TARGETS[8])
    check_equivalent(before, after, rng)
    pairs = transform_pairs(after)
    assert ("NCHW8c", "NCHW4c") in pairs or ("NCHW4c", "NCHW8c") in pairs
    (add,) = calls(after["main"], "add")
    assert add.args[0].checked_type.shape[-1] == add.args[1].checked_type.shape[-1]


def test_residual_add_of_two_blocked_tensors_and_graph_input(rng):
    x, y = blocked_chain(rng)
    other = relay.var("r", shape=(1, 16, 8, 8))
    before = module(relay.nn.relu(relay.add(relay.add(y, x), other)), [x, other])
    after = alter(before, TARGETS[8])
    check_equivalent(before, after, rng)
    # x is converted once (shared by the conv and the add), r once, the result once
    assert transform_pairs(after) == sorted([("NCHW", "NCHW8c"), ("NCHW", "NCHW8c"),
                                             ("NCHW8c", "NCHW")])


def test_provenance_is_kept():
    x = relay.var("x", shape=(1, 8, 5, 5))
    w = relay.const(np.ones((8, 8, 3, 3), "float32"))
    conv = relay.nn.conv2d(x, w, padding=1).replace(source_names=("Conv_0",))
    relu = relay.nn.relu(conv).replace(source_names=("Relu_1",))
    after = alter(module(relay.nn.batch_flatten(relu), [x]), TARGETS[8], fold=False)
    (new_conv,) = calls(after["main"], "nn.contrib_conv2d_NCHWc")
    assert new_conv.source_names == ("Conv_0",)
    assert calls(after["main"], "nn.relu")[0].source_names == ("Relu_1",)
    names = {(c.attrs.src_layout, c.attrs.dst_layout): c.source_names
             for c in calls(after["main"], "layout_transform")}
    assert names[("NCHW", "NCHW8c")] == ("Conv_0",)  # graph input: named after its consumer
    assert names[("NCHW8c", "NCHW")] == ("Relu_1",)  # named after the value it converts
    assert names[("OIHW", "OIHW8i8o")] == ("Conv_0",)


def test_input_module_is_not_modified(rng):
    before = single_conv("stem-ic3", rng, const_weight=True)
    text = before.astext()
    alter(before, TARGETS[8])
    assert before.astext() == text


# --- dense -------------------------------------------------------------------------------------------

def packed_dense(units: int, lanes: int, rows: int, rng: np.random.Generator) -> tuple[np.ndarray, Call]:
    """dense + bias_add with a constant (units, 12) weight through AlterOpLayout: the weight and
    the one ``contrib_dense_pack`` call (the rewrite checked equivalent first)."""
    w = rng.standard_normal((units, 12)).astype("float32")
    x = relay.var("x", shape=(rows, 12))
    before = module(relay.nn.bias_add(relay.nn.dense(x, relay.const(w)),
                                      relay.const(np.arange(units, dtype="float32"))))
    after = alter(before, TARGETS[lanes])
    check_equivalent(before, after, rng)
    (dense,) = calls(after["main"], "nn.contrib_dense_pack")
    return w, dense


@pytest.mark.parametrize(("units", "lanes", "n"), [(10, 4, 5), (24, 8, 8), (32, 8, 16), (7, 4, 7)])
def test_dense_with_constant_weight_is_packed(units, lanes, n, rng):
    w, dense = packed_dense(units, lanes, 4, rng)
    assert dense.attrs.weight_layout == f"NC{n}n" and dense.attrs.units == units
    packed = dense.args[1].value
    for j in range(units):  # packed[j // n, :, j % n] == w[j, :]
        np.testing.assert_array_equal(packed[j // n, :, j % n], w[j])


@pytest.mark.parametrize(("units", "rows", "lanes", "n"),
                         [(512, 1, 16, 128), (512, 3, 8, 32), (24, 1, 8, 24), (1000, 1, 16, 8),
                          (10, 1, 4, 5)])
def test_dense_of_few_rows_gets_one_panel_per_tile(units, rows, lanes, n, rng):
    """A product of at most 3 rows streams its weight: the panel is as wide as the register tile
    where such a width divides the columns (``stream_panel``), else TVM's rule (1000 classes at 16
    lanes: 8; 10 at 4 lanes: 5, as TVM's build of the small network)."""
    w, dense = packed_dense(units, lanes, rows, rng)
    assert dense.attrs.weight_layout == f"NC{n}n" and dense.attrs.units == units
    packed = dense.args[1].value
    for j in range(units):
        np.testing.assert_array_equal(packed[j // n, :, j % n], w[j])


@pytest.mark.parametrize(("units", "lanes", "padded"), [(97, 16, 112), (97, 8, 104), (13, 4, 16)])
def test_dense_with_prime_units_is_padded_to_whole_panels(units, lanes, padded, rng):
    """A prime class count (CRNN's 97) has only 1-column panels, which ran at 2.7 GFLOP/s: the
    weight gets zero rows up to a multiple of the lanes and the product is sliced back."""
    w, dense = packed_dense(units, lanes, 5, rng)
    n = dense_block(padded, lanes)
    assert dense.attrs.units == padded and n % lanes == 0
    packed = dense.args[1].value
    assert packed.shape == (padded // n, 12, n)
    for j in range(padded):
        np.testing.assert_array_equal(packed[j // n, :, j % n], w[j] if j < units else 0)
    assert tuple(dense.checked_type.shape) == (5, padded)  # sliced back to units by the caller


def test_dense_left_alone_without_constant_weight_or_2d_data(rng):
    x, w = relay.var("x", shape=(2, 8)), relay.var("w", shape=(4, 8))
    x3 = relay.var("x3", shape=(2, 3, 8))
    wc = relay.const(rng.standard_normal((4, 8)).astype("float32"))
    b = relay.const(rng.standard_normal((8, 4)).astype("float32"))
    bb = relay.const(rng.standard_normal((1, 4, 8)).astype("float32"))
    before = module(relay.Tuple([relay.nn.dense(x, w), relay.nn.dense(x3, wc),
                                 relay.nn.matmul(x, b), relay.nn.batch_matmul(x3, bb)]))
    after = alter(before, TARGETS[8])
    check_equivalent(before, after, rng)
    assert not calls(after["main"], "nn.contrib_dense_pack")
    assert calls(after["main"], "nn.matmul") and calls(after["main"], "nn.batch_matmul")


# --- blocks and networks through the whole opt-level-3 pipeline -------------------------------

def resnet_block(rng: np.random.Generator) -> tvm.IRModule:
    x = relay.var("data", shape=(1, 16, 10, 10))
    y = relay.nn.relu(conv_bn(x, "a", 16, 16, rng))
    y = conv_bn(y, "b", 16, 16, rng)
    y = relay.nn.relu(relay.add(y, x))  # identity shortcut
    z = relay.nn.relu(conv_bn(y, "c", 16, 32, rng, stride=2))
    z = conv_bn(z, "d", 32, 32, rng)
    short = conv_bn(y, "e", 16, 32, rng, kernel=1, stride=2)  # projection shortcut
    return module(relay.nn.relu(relay.add(z, short)), [x])


def mobilenet_v2_blocks(rng: np.random.Generator) -> tvm.IRModule:
    x = relay.var("data", shape=(1, 16, 8, 8))

    def inverted_residual(y: Expr, c_in: int, c_out: int, stride: int) -> Expr:
        hidden = 6 * c_in
        h = relay.clip(conv_bn(y, "expand", c_in, hidden, rng, kernel=1), 0.0, 6.0)
        h = relay.clip(conv_bn(h, "dw", hidden, hidden, rng, stride=stride, groups=hidden), 0.0, 6.0)
        h = conv_bn(h, "project", hidden, c_out, rng, kernel=1)
        return relay.add(h, y) if stride == 1 and c_in == c_out else h

    y = inverted_residual(x, 16, 16, 1)
    y = inverted_residual(y, 16, 24, 2)
    return module(y, [x])


def conv_pool_dense_head(rng: np.random.Generator) -> tvm.IRModule:
    x = relay.var("data", shape=(1, 3, 12, 12))
    y = relay.nn.relu(conv_bn(x, "c", 3, 16, rng))
    y = relay.nn.batch_flatten(relay.nn.max_pool2d(y, (2, 2), (2, 2)))
    w = relay.const(rng.standard_normal((10, 16 * 36)).astype("float32") * np.float32(0.05))
    y = relay.nn.bias_add(relay.nn.dense(y, w), relay.const(np.linspace(-1, 1, 10, dtype="float32")))
    return module(relay.nn.softmax(y), [x])


NETWORKS = {"resnet-block": resnet_block, "mobilenet-v2-blocks": mobilenet_v2_blocks,
            "conv-pool-dense-head": conv_pool_dense_head}


@pytest.mark.parametrize("lanes", [4, 16])
@pytest.mark.parametrize("net", sorted(NETWORKS))
def test_network_through_the_c_pipeline(net, lanes, rng):
    before = NETWORKS[net](rng)
    after = optimized(before, TARGETS[lanes])
    check_equivalent(before, after, rng, tol=2e-5)
    assert not calls(after["main"], "nn.conv2d") and not calls(after["main"], "nn.dense")
    edges = activation_transforms(after["main"])
    # graph input and output (head: before the flatten), and the unblocking of each conv
    # computed in padded vector-wide blocks before its real channels are sliced out
    assert len(edges) == 2 + padded_slices(after["main"])
    names = func_names(after["main"])
    if net == "conv-pool-dense-head":
        assert set(names) == {"tvmgen_default_fused_layout_transform",
                              "tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add_nn_relu",
                              "tvmgen_default_fused_nn_max_pool2d",
                              "tvmgen_default_fused_layout_transform_nn_batch_flatten",
                              "tvmgen_default_fused_nn_contrib_dense_pack_add",
                              "tvmgen_default_fused_nn_softmax"}
    elif net == "mobilenet-v2-blocks":
        assert any("nn_contrib_depthwise_conv2d_NCHWc_add_clip" in n for n in names)
    else:
        assert any(n.endswith("nn_contrib_conv2d_NCHWc_add_add_nn_relu") for n in names)


def _workload(name: str, rng: np.random.Generator) -> tuple[tvm.IRModule, dict]:
    if name == "resnet18":
        mod, params = testing.resnet.get_workload(num_layers=18, image_shape=(3, 32, 32),
                                                  num_classes=10)
    elif name == "resnet8-cifar":
        mod, params = testing.resnet.get_workload(num_layers=8, image_shape=(3, 16, 16),
                                                  num_classes=10)
    else:
        mod, params = testing.mobilenet.get_workload(image_shape=(3, 32, 32), num_classes=10)
    return mod, random_params(params, rng)


def _check_workload(name: str, rng: np.random.Generator) -> None:
    mod, params = _workload(name, rng)
    after = optimized(mod, TARGETS[8], params)
    x = rng.uniform(-1, 1, mod["main"].params[0].type_annotation.shape).astype("float32")
    with PassContext(opt_level=0):
        want = evaluate(mod, {"data": x, **params})
    got = evaluate(after, {"data": x})
    assert want.std() > 1e-3  # the logits spread: the comparison means something
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["resnet8-cifar", "mobilenet"])
def test_workload_equivalent_after_pipeline(name, rng):
    _check_workload(name, rng)


@pytest.mark.slow
def test_resnet18_equivalent_after_pipeline(rng):
    _check_workload("resnet18", rng)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet"])
def test_workload_structure_after_pipeline(name, rng):
    mod, params = _workload(name, rng)
    after = optimized(mod, TARGETS[8], params)
    edges = activation_transforms(after["main"])
    # ResNet-18: the input (after bn_data's shift) and before batch_flatten; MobileNet likewise
    assert len(edges) == 2
    assert any(e.endswith("batch_flatten") for e in edges)
    names = func_names(after["main"])
    assert not [n for n in names if "nn_conv2d" in n or "nn_dense" in n]
    assert "tvmgen_default_fused_nn_contrib_dense_pack_add" in names
    if name == "resnet18":
        # the 3x3 stride-1 convolutions at 32 x 32 (F(4x4, 3x3)) and at 16 x 16 with 128
        # channels (F(2x2, 3x3)) run as Winograd
        assert names["tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add_nn_relu"] == 6
        assert names["tvmgen_default_fused_nn_contrib_conv2d_winograd_NCHWc_add_nn_relu"] == 3
        assert names["tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add_add_nn_relu"] == 1
        assert names["tvmgen_default_fused_nn_contrib_conv2d_winograd_NCHWc_add_add_nn_relu"] == 2
    else:
        assert names["tvmgen_default_fused_nn_contrib_depthwise_conv2d_NCHWc_add_nn_relu"] == 13


# --- Hypothesis: random channel counts and vector widths ------------------------------------------

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(channels=st.lists(st.integers(1, 36), min_size=3, max_size=3),
       lanes=st.sampled_from([1, 2, 3, 4, 6, 8, 16, 32]), seed=st.integers(0, 2**16))
def test_random_channels_and_widths(channels, lanes, seed):
    rng = np.random.default_rng(seed)
    c0, c1, c2 = channels
    x = relay.var("x", shape=(1, c0, 5, 5))
    y = relay.nn.relu(conv_bn(x, "a", c0, c1, rng))
    y = relay.nn.relu(conv_bn(y, "dw", c1, c1, rng, groups=c1))
    y = conv_bn(y, "b", c1, c2, rng, kernel=1)
    before = module(relay.nn.global_avg_pool2d(y), [x])
    after = optimized(before, f"llvm -vector-width={32 * lanes}")
    check_equivalent(before, after, rng, tol=2e-5)
    blocks = []
    for fn in (c.op for c in fused_calls(after["main"])):
        for conv in calls(fn.body, "nn.contrib_conv2d_NCHWc") + \
                calls(fn.body, "nn.contrib_depthwise_conv2d_NCHWc"):
            data, out = conv.args[0].checked_type.shape, conv.checked_type.shape
            blocks.append((data[1] * data[4], data[4], out[1] * out[4], out[4]))
    assert len(blocks) == 3
    for c_in, ic, c_out, oc in blocks:
        assert ic == expected_block(c_in, lanes) and oc == expected_block(c_out, lanes)
    assert len(activation_transforms(after["main"])) == 2 + padded_slices(after["main"])


# --- the build pipeline ------------------------------------------------------------------------------

def test_pipeline_has_alter_op_layout_for_native_targets_only():
    names = [p.info.name for p in build_pipeline(Target("c"))]
    i = names.index("AlterOpLayout")
    assert names.index("FoldScaleAxis") < names.index("SimplifyExpr") < i
    assert names[i + 1:i + 4] == ["AlterBatchMatmul", "FoldConstant", "FuseOps"]
    assert "AlterOpLayout" in [p.info.name for p in build_pipeline(Target("llvm -mcpu=znver3"))]
    assert "AlterOpLayout" not in [p.info.name for p in build_pipeline(Target("numpy"))]
    with Target("numpy"):
        assert "AlterOpLayout" not in [p.info.name for p in build_pipeline()]


@pytest.mark.parametrize(("target", "opt_level", "disabled", "blocked"), [
    ("c", 3, (), True),
    ("c", 3, ("AlterOpLayout",), False),
    ("c", 2, (), False),
    ("numpy", 3, (), False),
])
def test_build_applies_the_pass_when_enabled(target, opt_level, disabled, blocked, rng):
    before = conv_pool_dense_head(rng)
    with PassContext(opt_level=opt_level, disabled_pass=disabled):
        after, _ = optimize(before, target=target)
    check_equivalent(before, after, rng, tol=2e-5)
    assert bool(calls(after["main"], "nn.contrib_conv2d_NCHWc")) == blocked
    assert bool(calls(after["main"], "nn.contrib_dense_pack")) == blocked


# --- TVM's small network -------------------------------------------------------------------------------

def small_network() -> tvm.IRModule:
    """tests/fixtures/tvm/small_relay.txt."""
    data = relay.var("data", shape=(1, 3, 16, 16))
    w = relay.var("conv_weight", shape=(8, 3, 3, 3))
    bn = [relay.var(f"bn_{n}", shape=(8,)) for n in ("gamma", "beta", "mean", "var")]
    dw, db = relay.var("dense_weight", shape=(10, 512)), relay.var("dense_bias", shape=(10,))
    x = relay.nn.conv2d(data, w, padding=(1, 1), channels=8, kernel_size=(3, 3))
    x = relay.nn.relu(relay.nn.batch_norm(x, *bn)[0])
    x = relay.nn.batch_flatten(relay.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2)))
    x = relay.nn.softmax(relay.nn.bias_add(relay.nn.dense(x, dw), db))
    return tvm.IRModule.from_expr(relay.Function([data, w, *bn, dw, db], x))


def _load(name: str) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in load_param_dict((FIXTURES / name).read_bytes()).items()}


@pytest.mark.requires_cc
@pytest.mark.requires_cc
def test_small_network_c_build_runs_and_matches_tvm_output():
    with PassContext(opt_level=3):
        factory = relay.build(small_network(), target=TARGETS[4],
                              params=_load("small_params_original.params"))
    m = graph_executor.GraphModule(factory["default"](tvm.cpu()))
    m.set_input(data=np.load(FIXTURES / "small_input.npy"))
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), np.load(FIXTURES / "small_o3_output.npy"),
                               rtol=0, atol=1e-6)
    funcs = [n["attrs"]["func_name"] for n in json.loads(factory.get_graph_json())["nodes"]
             if n["op"] == "tvm_op"]
    tvm_funcs = [n["attrs"]["func_name"] for n in
                 json.loads((FIXTURES / "small_o3.graph.json").read_text())["nodes"]
                 if n["op"] == "tvm_op"]
    assert funcs == tvm_funcs


def test_small_network_matches_tvm_opt_level_3_build():
    """TVM built the fixture with plain ``llvm`` (4 float32 lanes): ``-mcpu=x86-64`` gives Kiln the
    same vector width, hence TVM's blocks (ic 3, oc 4, dense panels of 5)."""
    with PassContext(opt_level=3):
        after, _ = optimize(small_network(), target=TARGETS[4],
                            params=_load("small_params_original.params"))
    lowered = graph_codegen(after["main"])
    ours = json.loads(lowered.graph.to_json())
    tvm_graph = json.loads((FIXTURES / "small_o3.graph.json").read_text())
    keys = ("op", "name", "inputs")
    assert [{k: n[k] for k in keys} for n in ours["nodes"]] == \
        [{k: n[k] for k in keys} for n in tvm_graph["nodes"]]
    for a, b in zip(ours["nodes"], tvm_graph["nodes"]):
        if a["op"] == "tvm_op":
            layouts = {k: v for k, v in b["attrs"].items() if k != "hash"}
            assert {k: a["attrs"][k] for k in layouts} == layouts
    assert ours["arg_nodes"] == tvm_graph["arg_nodes"] and ours["heads"] == tvm_graph["heads"]
    # Shapes agree except the dense bias p3: TVM's layout inference expands it to (1, 10) next to
    # the altered dense; Kiln keeps CanonicalizeOps' (10,), which broadcasts the same way.
    tvm_shapes = tvm_graph["attrs"]["shape"][1]
    tvm_shapes[8] = [10]
    assert ours["attrs"]["shape"][1] == tvm_shapes
    # The params are TVM's: packed conv weight with the folded BN scale, blocked BN shift, packed
    # dense weight, dense bias.
    tvm_params = _load("small_o3.params")
    assert sorted(lowered.params) == sorted(tvm_params)
    for name, value in tvm_params.items():
        np.testing.assert_allclose(lowered.params[name].reshape(value.shape), value, rtol=1e-5,
                                   atol=1e-6)
    out = evaluate(after, {"data": np.load(FIXTURES / "small_input.npy")})
    np.testing.assert_allclose(out, np.load(FIXTURES / "small_o3_output.npy"), rtol=0, atol=1e-6)
