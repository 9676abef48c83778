"""Schedule templates of blocked convolutions, depthwise convolutions and pooling.

Every case is a fused relay function (``Primitive=1``) in the blocked ``NCHW{c}c`` layout, the way
AlterOpLayout and FuseOps leave them: the convolution or pooling plus an element-wise epilogue
(bias add, relu, clip, residual add, scale). The oracle is the reference interpreter (the ops'
NumPy kernels); each case is also built with the default schedule, which must agree too. All the
kernels of a group are compiled into one library so that the C compiler runs a few times only.
The templates must also replay from their serialised steps (tuning-record JSON) and pick register
tiles that fit the vector registers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.codegen.native import build_native, detect_vector_bytes, function_to_dag
from kiln.config import usable_cpus
from kiln.interpreter import evaluate
from kiln.ir.expr import Function
from kiln.ir.module import IRModule
from kiln.te import parse_step
from kiln.te.default_schedule import default_schedule
from kiln.te.lower import lower
from kiln.te.templates import TargetInfo, apply_template
from kiln.te.templates.conv2d import RegisterTile, _issue_bound_widths, choose_register_tile
from kiln.transform.infer_type import infer_type

pytestmark = pytest.mark.requires_cc

VECTOR_BYTES = detect_vector_bytes()
TARGET = TargetInfo(VECTOR_BYTES, max(2, usable_cpus()))

Epilogue = Callable[[relay.Expr, list[relay.Var], int, tuple[int, ...]], relay.Expr]


def _bias(x: relay.Expr, params: list[relay.Var], block: int, shape: tuple[int, ...]) -> relay.Expr:
    b = relay.var(f"bias{len(params)}", shape=(1, shape[1], 1, 1, block), dtype="float32")
    params.append(b)
    return relay.add(x, b)


def _epilogue(kind: str) -> Epilogue:
    """``none``, ``bias_relu``, ``bias_clip`` (relu6), ``bias_residual_relu`` (residual add) or
    ``scale_shift_relu`` (bias, then multiply and add by per-channel constants)."""
    def build(x: relay.Expr, params: list[relay.Var], block: int,
              shape: tuple[int, ...]) -> relay.Expr:
        if kind == "none":
            return x
        x = _bias(x, params, block, shape)
        if kind == "bias_clip":
            return relay.clip(x, 0.0, 6.0)
        if kind == "bias_residual_relu":
            r = relay.var("residual", shape=shape, dtype="float32")
            params.append(r)
            x = relay.add(x, r)
        if kind == "scale_shift_relu":
            s = relay.var("scale", shape=(1, shape[1], 1, 1, block), dtype="float32")
            params.append(s)
            x = _bias(relay.multiply(x, s), params, block, shape)
        return relay.nn.relu(x)

    return build


def _typed(params: list[relay.Var], body: relay.Expr) -> Function:
    func = relay.Function(params, body).with_attr("Primitive", 1)
    return infer_type(IRModule.from_expr(func))["main"]


@dataclass(frozen=True)
class ConvCase:
    """A blocked convolution: NCHW sizes, kernel, stride, padding, dilation, blocks, epilogue."""

    n: int
    c: int
    h: int
    w: int
    oc: int
    k: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[int, int, int, int]
    dilation: tuple[int, int]
    ic_bn: int
    oc_bn: int
    epilogue: str
    groups: int = 1

    @property
    def name(self) -> str:
        dims = [self.n, self.c, self.h, self.w, self.oc, *self.k, *self.stride, *self.pad,
                *self.dilation, self.ic_bn, self.oc_bn]
        grouped = f"_g{self.groups}" if self.groups > 1 else ""
        return "conv_" + "_".join(map(str, dims)) + grouped + "_" + self.epilogue

    def function(self) -> Function:
        data = relay.var("data", shape=(self.n, self.c // self.ic_bn, self.h, self.w, self.ic_bn),
                         dtype="float32")
        weight = relay.var("weight", shape=(self.oc // self.oc_bn,
                                            self.c // self.groups // self.ic_bn, *self.k,
                                            self.ic_bn, self.oc_bn), dtype="float32")
        conv = relay.nn.contrib_conv2d_nchwc(
            data, weight, strides=self.stride, padding=self.pad, dilation=self.dilation,
            groups=self.groups,
            channels=self.oc, kernel_size=self.k, data_layout=f"NCHW{self.ic_bn}c",
            kernel_layout=f"OIHW{self.ic_bn}i{self.oc_bn}o", out_layout=f"NCHW{self.oc_bn}c")
        params = [data, weight]
        shape = tuple(_typed(params, conv).body.checked_type.shape)
        body = _epilogue(self.epilogue)(conv, params, self.oc_bn, shape)
        return _typed(params, body)


def _case(n: int, c: int, hw: tuple[int, int], oc: int, k: int, stride: int, pad: int | tuple,
          dilation: int, ic_bn: int, oc_bn: int, epilogue: str, groups: int = 1) -> ConvCase:
    pads = (pad,) * 4 if isinstance(pad, int) else pad
    return ConvCase(n, c, hw[0], hw[1], oc, (k, k), (stride, stride), pads,
                    (dilation, dilation), ic_bn, oc_bn, epilogue, groups)


CONV_CASES = [
    _case(1, 32, (14, 14), 32, 3, 1, 1, 1, 16, 16, "bias_relu"),        # ResNet 3x3 body
    _case(1, 32, (14, 14), 64, 3, 2, 1, 1, 16, 16, "bias_relu"),        # strided 3x3
    _case(1, 32, (14, 14), 64, 1, 2, 0, 1, 16, 16, "none"),             # 1x1 downsample
    _case(1, 64, (7, 7), 128, 1, 1, 0, 1, 16, 16, "bias_residual_relu"),  # ResNet-50 1x1
    _case(1, 3, (32, 32), 16, 7, 2, 3, 1, 3, 16, "bias_relu"),          # stem, ic_bn 3
    _case(1, 16, (13, 13), 32, 3, 1, 1, 1, 8, 16, "bias_clip"),         # prime OW, ic_bn 8
    _case(1, 16, (11, 31), 16, 3, 1, 1, 1, 16, 16, "bias_relu"),        # prime OW above the tile
    _case(1, 16, (15, 17), 16, 3, 1, 2, 2, 16, 16, "bias_relu"),        # dilation 2
    _case(2, 16, (9, 9), 32, 3, 1, 1, 1, 16, 8, "bias_residual_relu"),  # batch 2, oc_bn 8
    _case(1, 24, (10, 12), 24, 3, 1, 0, 1, 8, 8, "scale_shift_relu"),   # no padding, 8 blocks
    _case(1, 16, (12, 12), 16, 3, 1, (0, 1, 1, 0), 1, 16, 16, "none"),  # asymmetric padding
    _case(1, 16, (5, 5), 32, 5, 1, 2, 1, 16, 16, "bias_relu"),          # 5x5 kernel
    _case(1, 12, (7, 7), 12, 3, 1, 1, 1, 3, 3, "bias_relu"),            # blocks of 3 (scalar)
    _case(1, 16, (7, 7), 128, 3, 1, 1, 1, 8, 8, "bias_relu"),           # AVX2: 2 blocks x column
    _case(1, 16, (6, 20), 24, 3, 1, 1, 1, 8, 8, "bias_relu"),           # AVX2: 3 blocks, 1 x 10
    # weights beyond L2 (2.4 MB, 0.9 MB): channel tiles outside rows, next tile prefetched
    _case(1, 256, (7, 7), 256, 3, 1, 1, 1, 16, 16, "bias_residual_relu"),
    _case(2, 160, (5, 5), 160, 3, 1, 1, 1, 16, 16, "bias_relu"),        # prefetch across batch
    # grouped (group_conv2d_NCHWc): blocks inside the groups
    _case(1, 32, (14, 14), 64, 3, 1, 1, 1, 16, 16, "bias_relu", groups=2),
    _case(1, 32, (9, 9), 32, 3, 2, 1, 1, 4, 4, "bias_relu", groups=8),  # ResNeXt: 4 per group
    _case(1, 48, (7, 7), 48, 1, 1, 0, 1, 8, 8, "bias_residual_relu", groups=3),
    _case(2, 18, (8, 8), 36, 3, 1, 1, 2, 2, 4, "bias_clip", groups=3),  # 3 out blocks a group
]


@dataclass(frozen=True)
class WindowCase:
    """A depthwise convolution or a pooling in ``NCHW{block}c``."""

    kind: str  # depthwise, max, avg, global_avg, global_max, adaptive_avg
    n: int
    c: int
    h: int
    w: int
    k: int
    stride: int
    pad: int
    dilation: int
    block: int
    epilogue: str

    @property
    def name(self) -> str:
        dims = [self.n, self.c, self.h, self.w, self.k, self.stride, self.pad, self.dilation,
                self.block]
        return f"{self.kind}_" + "_".join(map(str, dims)) + "_" + self.epilogue

    def function(self) -> Function:
        b = self.block
        data = relay.var("data", shape=(self.n, self.c // b, self.h, self.w, b), dtype="float32")
        params = [data]
        layout = f"NCHW{b}c"
        if self.kind == "depthwise":
            weight = relay.var("weight", shape=(self.c // b, 1, self.k, self.k, 1, b),
                               dtype="float32")
            params.append(weight)
            x = relay.nn.contrib_depthwise_conv2d_nchwc(
                data, weight, strides=self.stride, padding=self.pad, dilation=self.dilation,
                groups=self.c, channels=self.c, kernel_size=(self.k, self.k), data_layout=layout,
                kernel_layout=f"OIHW1i{b}o", out_layout=layout)
        elif self.kind == "max":
            x = relay.nn.max_pool2d(data, self.k, self.stride, self.dilation, self.pad, layout)
        elif self.kind == "avg":
            x = relay.nn.avg_pool2d(data, self.k, self.stride, self.dilation, self.pad, layout)
        elif self.kind == "global_avg":
            x = relay.nn.global_avg_pool2d(data, layout)
        elif self.kind == "global_max":
            x = relay.nn.global_max_pool2d(data, layout)
        else:
            x = relay.nn.adaptive_avg_pool2d(data, (3, 3), layout)
        shape = tuple(_typed(params, x).body.checked_type.shape)
        return _typed(params, _epilogue(self.epilogue)(x, params, b, shape))


WINDOW_CASES = [
    WindowCase("depthwise", 1, 32, 15, 15, 3, 1, 1, 1, 16, "bias_relu"),
    WindowCase("depthwise", 1, 32, 16, 16, 3, 2, 1, 1, 16, "bias_clip"),
    WindowCase("depthwise", 2, 16, 9, 11, 5, 1, 2, 1, 8, "bias_residual_relu"),
    WindowCase("depthwise", 1, 16, 13, 13, 3, 1, 2, 2, 16, "none"),
    WindowCase("depthwise", 1, 16, 37, 37, 3, 1, 1, 1, 16, "bias_relu"),
    WindowCase("depthwise", 2, 32, 28, 28, 3, 1, 1, 1, 16, "bias_clip"),  # bands of rows
    WindowCase("max", 1, 16, 12, 12, 3, 1, 1, 1, 16, "none"),
    WindowCase("max", 1, 32, 16, 16, 3, 2, 1, 1, 16, "bias_relu"),
    WindowCase("max", 2, 16, 11, 11, 2, 2, 0, 1, 8, "none"),
    WindowCase("avg", 1, 16, 13, 13, 3, 1, 1, 1, 16, "none"),
    WindowCase("avg", 1, 16, 14, 14, 3, 2, 1, 1, 16, "bias_relu"),
    WindowCase("global_avg", 1, 64, 7, 7, 0, 0, 0, 0, 16, "none"),
    WindowCase("global_avg", 2, 16, 5, 5, 0, 0, 0, 0, 8, "bias_relu"),
    WindowCase("global_max", 1, 32, 6, 6, 0, 0, 0, 0, 16, "none"),
    WindowCase("adaptive_avg", 1, 16, 7, 8, 0, 0, 0, 0, 16, "none"),
]

ALL_CASES: dict[str, ConvCase | WindowCase] = {c.name: c for c in (*CONV_CASES, *WINDOW_CASES)}


def _inputs(func: Function, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(p.checked_type.shape)).astype("float32")
            for p in func.params]


def _run(lib, name: str, func: Function, arrays: list[np.ndarray]) -> np.ndarray:
    out = np.full(tuple(func.body.checked_type.shape), np.nan, dtype="float32")
    lib.kernel(name)(*arrays, out)
    return out


@pytest.fixture(scope="module")
def built():
    """Every case built twice: with the templates (the normal path) and the default schedule."""
    funcs = {name: case.function() for name, case in ALL_CASES.items()}
    templated = build_native(funcs)
    defaults = build_native(
        {f"d_{name}": f for name, f in funcs.items()},
        schedule_lookup=lambda dag, _: default_schedule(dag, VECTOR_BYTES, TARGET.num_threads))
    return funcs, templated, defaults


@pytest.mark.parametrize("name", list(ALL_CASES))
def test_template_matches_interpreter_and_default(built, name: str) -> None:
    funcs, templated, defaults = built
    func = funcs[name]
    assert apply_template(function_to_dag(func, name).dag, TARGET) is not None, \
        f"{name}: no template applies"
    arrays = _inputs(func, abs(hash(name)) % 2**32)
    ref = np.asarray(evaluate(IRModule.from_expr(func), arrays))
    out = _run(templated, name, func, arrays)
    default = _run(defaults, f"d_{name}", func, arrays)
    scale = max(float(np.abs(ref).max()), 1.0)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * scale, err_msg=name)
    np.testing.assert_allclose(out, default, rtol=1e-5, atol=1e-5 * scale, err_msg=name)


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(built, threads: int) -> None:
    funcs, templated, _ = built
    name = CONV_CASES[0].name
    arrays = _inputs(funcs[name], 7)
    ref = np.asarray(evaluate(IRModule.from_expr(funcs[name]), arrays))
    templated.set_num_threads(threads)
    try:
        out = _run(templated, name, funcs[name], arrays)
    finally:
        templated.set_num_threads(TARGET.num_threads)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


REPLAY = [CONV_CASES[0].name, CONV_CASES[4].name, CONV_CASES[6].name, WINDOW_CASES[0].name,
          WINDOW_CASES[5].name, WINDOW_CASES[9].name]


def test_templates_replay_from_serialised_steps() -> None:
    """Steps written as tuning-record JSON, read back and replayed, give the same loop nest and
    the same results."""
    funcs = {}
    for name in REPLAY:
        func = ALL_CASES[name].function()
        dag = function_to_dag(func, name).dag
        state = apply_template(dag, TARGET)
        assert state is not None
        text = json.dumps([s.to_record() for s in state.transform_steps])
        steps = [parse_step(r) for r in json.loads(text)]
        assert [s.to_record() for s in steps] == json.loads(text)
        replayed = dag.init_state
        for step in steps:
            replayed.transform_steps.append(step)
            step.apply_to_state(replayed, dag)
        assert str(replayed) == str(state)
        assert str(lower(dag, steps, name=name)) == str(lower(dag, state, name=name))
        funcs[f"r_{name}"] = (func, steps)
    lib = build_native({k: f for k, (f, _) in funcs.items()},
                       schedule_lookup=lambda dag, name: funcs[name][1])
    for key, (func, _) in funcs.items():
        arrays = _inputs(func, 3)
        ref = np.asarray(evaluate(IRModule.from_expr(func), arrays))
        out = _run(lib, key, func, arrays)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


AVX2_CASES = [CONV_CASES[8].name, CONV_CASES[9].name, CONV_CASES[13].name, CONV_CASES[14].name,
              WINDOW_CASES[2].name, WINDOW_CASES[6].name, WINDOW_CASES[10].name]


def test_templates_for_16_vector_registers() -> None:
    """Blocks of 8 scheduled for AVX2 (32-byte vectors, 16 registers: smaller tiles)."""
    from kiln.codegen.c_codegen import CCodegen
    from kiln.codegen.native import compile_module
    from kiln.runtime.native import NativeLibrary

    avx2 = TargetInfo(vector_bytes=32, num_threads=2)
    prims, funcs = [], {}
    for name in AVX2_CASES:
        func = ALL_CASES[name].function()
        fdag = function_to_dag(func, f"avx2_{name}")
        state = apply_template(fdag.dag, avx2)
        assert state is not None
        prims.append(lower(fdag.dag, state, args=fdag.args, name=f"avx2_{name}"))
        funcs[f"avx2_{name}"] = func
    source = CCodegen(32).module(prims)
    assert "kiln_f32x8 conv2d_NCHWc_local_0, " in source
    assert "conv2d_NCHWc_local in 14 vector variables" in source  # 2 blocks x a 7-row column
    assert "conv2d_NCHWc_local in 10 vector variables" in source  # 1 block x 10 columns
    lib = NativeLibrary(compile_module(source, "templates_avx2"))
    for key, func in funcs.items():
        arrays = _inputs(func, 11)
        ref = np.asarray(evaluate(IRModule.from_expr(func), arrays))
        out = _run(lib, key, func, arrays)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()),
                                   err_msg=key)


@pytest.mark.parametrize("k, width, vector_bytes, accumulators", [
    (3, 112, 64, 14),  # 32 registers: 14 accumulators + 16 inputs + a weight, not 28
    (5, 56, 64, 8),    # (32 - 5) // 2 = 13 allowed; 8 divides the row
    (3, 12, 32, 12),   # 16 registers: inputs are memory operands, every accumulator is used
])
def test_window_tile_leaves_room_for_its_inputs(k: int, width: int, vector_bytes: int,
                                                accumulators: int) -> None:
    """With 32 vector registers the depthwise tile is sized so that the C compiler can keep
    the tile row's input vectors for every tap without spilling them."""
    from kiln.codegen.c_codegen import CCodegen

    block = vector_bytes // 4
    case = WindowCase("depthwise", 1, block, width, width, k, 1, k // 2, 1, block, "bias_relu")
    fdag = function_to_dag(case.function(), "dw")
    state = apply_template(fdag.dag, TargetInfo(vector_bytes, 2))
    assert state is not None
    source = CCodegen(vector_bytes).function(lower(fdag.dag, state, args=fdag.args, name="dw"))
    assert f"depthwise_conv2d_NCHWc_local in {accumulators} vector variables" in source


@pytest.mark.parametrize("kind, stride, threads, rows", [
    ("max", 1, 1, 16),  # 14 rows of tiles a band (56 / 14 = 4 parallel chunks) + the window's 2
    ("max", 1, 2, 9),   # 8 chunks for 2 threads: bands of 7 rows
    ("max", 2, 1, 0),   # strided: read in place
    ("depthwise", 1, 1, 0),  # read in place
])
def test_padding_is_read_in_place_or_made_per_band(kind: str, stride: int, threads: int,
                                                   rows: int) -> None:
    """A depthwise convolution or a strided window reads its input in place, a stride-1 pooling
    makes the padded input rows of a band of output rows at once (each input row copied about
    once, not three times as per output row)."""
    from kiln.codegen.c_codegen import CCodegen

    case = WindowCase(kind, 1, 16, 56 * stride, 56 * stride, 3, stride, 1, 1, 16, "bias_relu")
    fdag = function_to_dag(case.function(), "window")
    state = apply_template(fdag.dag, TargetInfo(64, threads))
    assert state is not None
    source = CCodegen(64).function(lower(fdag.dag, state, args=fdag.args, name="window"))
    if rows:
        assert f"float pad_temp[{rows * 58 * 16}]" in source
    else:
        assert "pad_temp" not in source


@pytest.mark.parametrize("threads, bands", [(1, 1), (2, 2), (4, 4)])
def test_depthwise_threads_split_the_rows(threads: int, bands: int) -> None:
    """The depthwise template's parallel loop is (batch, band of rows, channel block), one band
    of rows per thread, as the convolutions around it split their rows: each thread reads what
    its core wrote."""
    case = WindowCase("depthwise", 1, 32, 56, 56, 3, 1, 1, 1, 16, "bias_relu")
    state = apply_template(function_to_dag(case.function(), "dw").dag, TargetInfo(64, threads))
    assert state is not None
    lines = str(state).splitlines()
    outer = "parallel ax0@ax2.0.0@ax1.0@" if threads > 1 else "for ax0@ax2.0.0@ax1.0@"
    assert lines[1] == f"{outer} (0,{bands * 2})"  # 2 channel blocks
    assert lines[2] == f"  for ax2.0.1 (0,{56 // bands})"


@pytest.mark.parametrize("case, copied", [
    (CONV_CASES[0], True),    # stride 1: the padded input is made once
    (CONV_CASES[1], False),   # stride 2: read in place
    (CONV_CASES[4], False),   # the 7x7 stride-2 stem (3-channel blocks)
    (CONV_CASES[7], False),   # dilation 2
])
def test_strided_convs_read_their_input_in_place(case, copied: bool) -> None:
    """A strided (or dilated) convolution reads its input in place, a load outside it replaced
    by zero, as strided windows do; a stride-1 one reads a padded copy made once per call."""
    from kiln.codegen.c_codegen import CCodegen

    fdag = function_to_dag(case.function(), "conv")
    state = apply_template(fdag.dag, TargetInfo(64, 2))
    assert state is not None
    source = CCodegen(64).function(lower(fdag.dag, state, args=fdag.args, name="conv"))
    assert ("pad_temp" in source or "data_pad" in source) == copied


def test_conv_template_shape() -> None:
    """The conv schedule: cache_write accumulator at the output's column tile, padding kept as
    its own parallel stage, the tile loops unrolled and the channel block vectorized."""
    func = CONV_CASES[0].function()
    dag = function_to_dag(func, "c").dag
    state = apply_template(dag, TargetInfo(64, 2))
    assert state is not None
    kinds = [s.to_record()[0] for s in state.transform_steps]
    assert kinds.count("CHW") == 1 and kinds.count("CA") == 1
    text = str(state)
    assert "conv2d_NCHWc.local" in text and "vectorize" in text and "unroll" in text
    assert text.index("parallel") < text.index("conv2d_NCHWc.local")


@pytest.mark.parametrize(("channels", "rows_outer"), [(64, True), (512, False)])
def test_rows_run_outside_channel_tiles_when_the_weights_stay_in_l2(channels: int,
                                                                     rows_outer: bool) -> None:
    """144 KB of 3x3 weights stay in L2 while the rows are swept: the parallel loop is rows
    outside channel tiles, so each input row is read once for all of them; 9 MB of weights
    keep the channel tiles outside."""
    x = relay.var("x", shape=(1, channels // 16, 14, 14, 16), dtype="float32")
    w = relay.var("w", shape=(channels // 16, channels // 16, 3, 3, 16, 16), dtype="float32")
    func = _typed([x, w], relay.nn.contrib_conv2d_nchwc(
        x, w, padding=1, channels=channels, kernel_size=3, data_layout="NCHW16c",
        kernel_layout="OIHW16i16o", out_layout="NCHW16c"))
    dag = function_to_dag(func, "c").dag
    state = apply_template(dag, TargetInfo(64, 2))
    assert state is not None
    fused = "n@oh.0@oc_chunk.0@" if rows_outer else "n@oc_chunk.0@oh.0@"
    assert f"parallel {fused} " in str(state)
    # channel tiles outside: each row chunk of a tile (14 rows in tiles of oh_t) prefetches its
    # share of the next tile's weights
    prefetch = [step.to_record()[3] for step in state.transform_steps
                if step.to_record()[0] == "PR" and "prefetch" in step.to_record()[3]]
    row_chunks = [f"prefetch_next_tile${14 // oh_t}" for oh_t in (1, 2, 7, 14)]
    assert prefetch == [] if rows_outer else (len(prefetch) == 1 and prefetch[0] in row_chunks)
    if rows_outer:
        return
    lib = build_native({"conv512": func})
    source = "".join(Path(s).read_text() for s in lib.sources)
    assert "__builtin_prefetch" in source and "the next channel tile's weights" in source


@pytest.mark.parametrize("groups", [1, 8, 16])
def test_grouped_conv_tile_stays_in_its_group(groups: int) -> None:
    """A tile's channel blocks share their broadcast inputs, so they lie in one group: 256
    channels in blocks of 16 take 2 blocks a tile ungrouped, and 1 with 16 groups."""
    x = relay.var("x", shape=(1, 16, 7, 7, 16), dtype="float32")
    w = relay.var("w", shape=(16, 16 // groups, 3, 3, 16, 16), dtype="float32")
    func = _typed([x, w], relay.nn.contrib_conv2d_nchwc(
        x, w, padding=1, groups=groups, channels=256, kernel_size=3, data_layout="NCHW16c",
        kernel_layout="OIHW16i16o", out_layout="NCHW16c"))
    dag = function_to_dag(func, "c").dag
    state = apply_template(dag, TargetInfo(64, 2))
    assert state is not None
    stage = "group_conv2d_NCHWc" if groups > 1 else "conv2d_NCHWc"
    assert f"{stage}.local" in str(state)
    splits = [s.to_record() for s in state.transform_steps if s.to_record()[0] == "SP"]
    (oc_t,) = next(r for r in splits if r[2] == 1)[4]  # the output stage's oc_chunk axis
    assert (16 // groups) % oc_t == 0
    assert oc_t == (2 if groups == 1 else 16 // groups)


def test_grouped_conv_reads_its_groups_blocks_by_loop_variables() -> None:
    """TVM's ``group_conv2d_NCHWc``: the input block of output block ``i1`` is its group's first
    (``floordiv(i1, 4) * 2``, 4 output and 2 input blocks a group) plus ``rc``'s block, with no
    division of the vector lane ``i4``, so the template's split of ``rc`` leaves loop variables."""
    x = relay.var("x", shape=(1, 4, 7, 7, 16), dtype="float32")
    w = relay.var("w", shape=(8, 2, 3, 3, 16, 16), dtype="float32")
    func = _typed([x, w], relay.nn.contrib_conv2d_nchwc(
        x, w, padding=1, groups=2, channels=128, kernel_size=3, data_layout="NCHW16c",
        kernel_layout="OIHW16i16o", out_layout="NCHW16c"))
    text = str(function_to_dag(func, "c").dag)
    assert ("group_conv2d_NCHWc(i0, i1, i2, i3, i4) += (pad_temp[i0, ((floordiv(i1, 4)*2) + "
            "floordiv(rc, 16)), (i2 + ry), (i3 + rx), floormod(rc, 16)]*p1[i1, floordiv(rc, 16), "
            "ry, rx, floormod(rc, 16), i4])") in text


def test_other_patterns_are_left_to_the_default_schedule() -> None:
    x = relay.var("x", shape=(1, 8, 10, 10), dtype="float32")
    w = relay.var("w", shape=(8, 8, 3, 3), dtype="float32")
    func = _typed([x, w], relay.nn.conv2d(x, w, padding=1))  # plain NCHW
    assert apply_template(function_to_dag(func, "f").dag, TARGET) is None
    xi = relay.var("x", shape=(1, 2, 10, 10, 8), dtype="float64")
    func = _typed([xi], relay.nn.max_pool2d(xi, 3, 1, 1, 1, "NCHW8c"))  # float64
    assert apply_template(function_to_dag(func, "g").dag, TARGET) is None


@settings(max_examples=200, deadline=None)
@given(oc=st.integers(1, 64), oh=st.integers(1, 120), ow=st.integers(1, 120),
       registers=st.sampled_from([16, 32]), batch=st.integers(1, 4),
       threads=st.integers(1, 8), max_oc_t=st.sampled_from([1, 4, 8]),
       load_bound=st.sampled_from([None, True, False]), issue_bound=st.booleans(),
       fill_registers=st.booleans())
def test_register_tile_fits(oc: int, oh: int, ow: int, registers: int, batch: int,
                            threads: int, max_oc_t: int, load_bound: bool | None,
                            issue_bound: bool, fill_registers: bool) -> None:
    budget = registers - 4
    tile = choose_register_tile(oc, oh, ow, budget, batch, threads, max_oc_t, load_bound,
                                issue_bound, fill_registers)
    small = budget == 12 and tile == RegisterTile(2, oh, 1) and max(oh, ow) <= 7
    # 16 registers filled: the accumulators, a weight vector per block and a broadcast
    filled = tile.size + tile.oc_t + 1 <= 16 and tile.oc_t <= 2
    fill = fill_registers and budget == 12 and load_bound is not False
    assert tile.size + tile.oc_t - 1 <= budget or small or (fill and filled)
    assert oc % tile.oc_t == 0 and oh % tile.oh_t == 0 and tile.oc_t <= max_oc_t
    assert 1 <= tile.ow_t <= ow
    issue_rule = issue_bound and not (budget <= 12 if load_bound is None else load_bound)
    if issue_rule and ow % tile.ow_t:
        # a partial last tile: at least half a tile in a row of 3 tiles or more, 7/8 in a row
        # of 2
        last, tiles = ow % tile.ow_t, -(-ow // tile.ow_t)
        assert (tiles >= 3 and 2 * last >= tile.ow_t) or (tiles == 2 and 8 * last >= 7 * tile.ow_t)
    elif ow <= budget and ow % tile.ow_t:
        raise AssertionError(f"a width {ow} within the budget must be tiled exactly: {tile}")
    # never a needlessly small tile: a whole row when it fits, else at least half the budget
    # (or the widest the issue rule allows: 5 of 13 columns for 12 accumulators, where 7 + 6
    # would leave too short a last tile)
    least = min(ow, budget // 2)
    if issue_rule:
        least = min(least, max(_issue_bound_widths(ow, budget)))
    assert tile.size >= least


@pytest.mark.parametrize(("oc_chunks", "width", "tile"), [
    (8, 56, RegisterTile(2, 1, 5)), (16, 28, RegisterTile(2, 1, 5)), (32, 14, RegisterTile(2, 1, 5)),
    (64, 7, RegisterTile(2, 7, 1)), (3, 160, RegisterTile(1, 1, 10)),
    (15, 14, RegisterTile(1, 1, 7)), (9, 52, RegisterTile(3, 1, 3))])
def test_sixteen_register_tiles_are_load_bound(oc_chunks: int, width: int, tile) -> None:
    """AVX2 (16 registers, 12 accumulators): ResNet-18's 3x3 layers get 2 channel blocks x 5
    columns (a partial last tile at widths 56, 28, 14), measured 94-101 GFLOP/s on Zen 4 where
    the divisor-only 2 x 4 ran at 67-85; at 7 x 7 a partial tile would waste 3 of 10 columns:
    2 blocks x the whole column (14 accumulators) ran at 101 GFLOP/s where 1 x 7 ran at 68
    (ResNet-50's 3x3 512-channel conv). With 3 or 15 channel blocks, 3 blocks x 3 columns would read each
    weight vector for 3 multiply-adds only: one block as wide as fits (120 -> 120 at 14 x 14: 92
    GFLOP/s against 81), narrower where that tiles the row exactly (DBNet's 96 -> 24 conv at
    160 x 160: 1 x 10 81 GFLOP/s against 69), else the 3 blocks (YOLOv8's 72-channel conv + SiLU
    at 52 x 52: 1 x 11 columns with a partial last tile ran 1.8 times as long)."""
    assert choose_register_tile(oc_chunks, width, width, 12, 1, 1) == tile


@pytest.mark.parametrize(("oc_chunks", "height", "width", "tile"), [
    (9, 56, 56, RegisterTile(1, 1, 14)),   # MobileNetV3's 24 -> 72 1x1: 124 -> 105 us
    (15, 28, 28, RegisterTile(1, 1, 14)),  # its 40 -> 120 1x1: 89 -> 74 us
    (8, 56, 56, RegisterTile(2, 2, 3)),    # ResNet's 64 -> 64 at 56 x 56 (3x3: 2027 -> 1823 us)
    (16, 28, 28, RegisterTile(2, 1, 6)),   # 128 -> 128 at 28 x 28 (3x3: 1951 -> 1756 us)
    (32, 14, 14, RegisterTile(2, 2, 3)),   # 256 -> 1024 at 14 x 14 (1x1: 857 -> 798 us)
    (12, 26, 26, RegisterTile(2, 2, 3)),   # 96 -> 96 at 26 x 26 (3x3: 1126 -> 863 us)
    (3, 160, 160, RegisterTile(1, 2, 7)),  # DBNet's 96 -> 24 at 160 x 160 (9682 -> 9342 us)
    (4, 40, 40, RegisterTile(2, 1, 6)),    # a tie in idle slots: one row
    (64, 7, 7, RegisterTile(2, 7, 1)),     # small outputs keep 2 blocks x a column
    (4, 1, 100, RegisterTile(2, 1, 5)),    # too few parallel chunks: the load-bound rule
])
def test_sixteen_registers_are_filled(oc_chunks: int, height: int, width: int, tile) -> None:
    """AVX2 convolutions reading a padded copy or no padding (one Zen 5 core, AVX2 build, the
    load-bound rule's time first): 2 channel blocks x 12 accumulators or 1 block x 14."""
    assert choose_register_tile(oc_chunks, height, width, 12, 1, 2,
                                fill_registers=True) == tile


@pytest.mark.parametrize(("stride", "pad", "accumulators"), [
    (1, 1, 12),  # a padded copy: 2 blocks x 2 rows x 3 columns
    (1, 0, 12),  # no padding: the same
    (2, 1, 10),  # a strided window read in place: the load-bound 2 blocks x 5 columns
])
def test_avx2_convolutions_fill_the_registers_unless_read_in_place(stride: int, pad: int,
                                                                   accumulators: int) -> None:
    """The bound tests of a window read in place made a register-filling tile's speed depend
    on code alignment (ResNet-18's stride-2 128 -> 256 conv, AVX2 build: 0.95-1.27 ms)."""
    from kiln.codegen.c_codegen import CCodegen

    size = 56 * stride
    case = ConvCase(1, 64, size, size, 64, (3, 3), (stride, stride), (pad,) * 4, (1, 1), 8, 8,
                    "bias_relu")
    fdag = function_to_dag(case.function(), "conv")
    state = apply_template(fdag.dag, TargetInfo(vector_bytes=32, num_threads=2))
    assert state is not None
    source = CCodegen(32).function(lower(fdag.dag, state, args=fdag.args, name="conv"))
    assert f"conv2d_NCHWc_local in {accumulators} vector variables" in source


def test_narrow_blocks_on_wide_vectors_are_load_bound() -> None:
    """8-lane channel blocks on an AVX-512 machine: two multiply-adds a cycle need their loads,
    so each broadcast feeds 3 channel blocks (DBNet's 96 -> 24 conv: 88 GFLOP/s against 71 for
    the general rule's 1 x 5 x 5)."""
    assert choose_register_tile(3, 160, 160, 28, 1, 1) == RegisterTile(1, 5, 5)
    assert choose_register_tile(3, 160, 160, 28, 1, 1, load_bound=True) == RegisterTile(3, 1, 8)


@pytest.mark.parametrize(("oc_chunks", "width"), [(4, 112), (4, 56), (8, 28), (16, 14), (32, 7),
                                                  (6, 14), (2, 112)])
def test_wide_vector_tiles_keep_both_multiply_add_pipes_busy(oc_chunks: int, width: int) -> None:
    """32 registers, 16-lane blocks (ResNet and MobileNetV2 layer shapes): each reduction step
    issues at least as many multiply-adds as loads and enough of them to cover the latency, so
    neither the load pipes nor a dependency chain bounds the tile. On one Zen 5 core the
    general rule's 1 x 28 columns (29 loads for 28 multiply-adds) ran ResNet-18's 64-channel
    3x3 conv at 56 x 56 at 237-243 GFLOP/s, these tiles at 259-267."""
    tile = choose_register_tile(oc_chunks, width, width, 28, 1, 1, issue_bound=True)
    loads = tile.oc_t + tile.oh_t * tile.ow_t
    assert tile.size >= loads and tile.size >= 12, tile
    old = choose_register_tile(oc_chunks, width, width, 28, 1, 1)
    assert old.size < old.oc_t + old.oh_t * old.ow_t or tile == old


@pytest.mark.parametrize(("oc_chunks", "width"), [(4, 64), (8, 32), (16, 16), (32, 8)])
def test_power_of_two_widths_do_not_take_four_blocks_by_four_columns(oc_chunks: int,
                                                                     width: int) -> None:
    """ResNet-34 at 256 x 256: the size-first rule's 4 blocks x 4 columns (four weight streams,
    each vector used 4 times) ran its 3x3 convs at 230-235 GFLOP/s on two Zen 5 cores; the
    issue-bound tiles (2 x 8 to 2 x 13, 4 x 6) at 480-527."""
    assert choose_register_tile(oc_chunks, width, width, 28, 1, 2) == RegisterTile(4, 1, 4)
    tile = choose_register_tile(oc_chunks, width, width, 28, 1, 2, issue_bound=True)
    assert tile.ow_t >= 6, tile


def test_streamed_weights_are_read_once_per_row_of_seven() -> None:
    """At 7 x 7 a partial tile (5 + 2 columns) reads the weights twice per row: ResNet-18's
    512-channel 3x3 conv (9.4 MB of weights) took 1.16-1.28 ms with 4 x 5 against 0.82-0.84 with
    2 x 7 on one Zen 5 core."""
    assert choose_register_tile(32, 7, 7, 28, 1, 1, issue_bound=True) == RegisterTile(2, 1, 7)


def test_thirty_two_register_tiles_keep_the_general_rule() -> None:
    """AVX-512's choice does not change: widths are still tiled by divisors there."""
    tile = choose_register_tile(4, 56, 56, 28, 1, 1)
    assert 56 % tile.ow_t == 0
