"""The Winograd convolution template (``kiln.te.templates.winograd``).

Every case is a fused relay function (``Primitive=1``) the way AlterOpLayout and FuseOps leave a
3x3 stride-1 convolution: ``nn.contrib_conv2d_winograd_NCHWc`` and an element-wise epilogue. The
oracle is NumPy: the direct convolution (``conv_nd``) of the original filters and the epilogue;
the kernels are compiled natively and for an AVX2 target. The schedule must replay from its
serialised steps, its register tile fit the vector registers, and its block of tiles fit L2.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln import relay
from kiln.codegen.native import build_native, detect_vector_bytes, function_to_dag
from kiln.config import usable_cpus
from kiln.ir.expr import Function
from kiln.ir.module import IRModule
from kiln.op.conv_ref import conv_nd
from kiln.op.nn_winograd import winograd_weight
from kiln.te import parse_step
from kiln.te.lower import lower
from kiln.te.templates import TargetInfo, apply_template
from kiln.te.templates.registry import L2_RESIDENT_BYTES
from kiln.te.templates.winograd import _gemm_tile, _tile_block, winograd_tile
from kiln.transform.infer_type import infer_type

pytestmark = pytest.mark.requires_cc

TARGET = TargetInfo(detect_vector_bytes(), max(2, usable_cpus()))
AVX2 = "llvm -mcpu=znver3"


@dataclass(frozen=True)
class Case:
    """A Winograd convolution: NCHW sizes, output channels, padding (top, left, bottom, right),
    tile size, data and output channel blocks, epilogue."""

    n: int
    c: int
    h: int
    w: int
    k: int
    pads: tuple[int, int, int, int]
    m: int
    x: int
    y: int
    epilogue: str

    @property
    def name(self) -> str:
        dims = [self.n, self.c, self.h, self.w, self.k, *self.pads, self.m, self.x, self.y]
        return "wino_" + "_".join(map(str, dims)) + "_" + self.epilogue

    @property
    def out_hw(self) -> tuple[int, int]:
        t, left, b, r = self.pads
        return self.h + t + b - 2, self.w + left + r - 2

    def arrays(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(abs(hash(self.name)) % 2**32)
        oh, ow = self.out_hw
        return {"data": rng.standard_normal((self.n, self.c, self.h, self.w)).astype("float32"),
                "weight": rng.standard_normal((self.k, self.c, 3, 3)).astype("float32"),
                "bias": rng.standard_normal(self.k).astype("float32"),
                "residual": rng.standard_normal((self.n, self.k, oh, ow)).astype("float32")}

    def function(self) -> Function:
        oh, ow = self.out_hw
        data = relay.var("data", shape=(self.n, self.c // self.x, self.h, self.w, self.x))
        weight = relay.var("weight", shape=(self.m + 2, self.m + 2, self.k // self.y, self.c,
                                            self.y))
        params = [data, weight]
        out = relay.nn.contrib_conv2d_winograd_nchwc(
            data, weight, tile_size=self.m, padding=self.pads, channels=self.k,
            data_layout=f"NCHW{self.x}c", out_layout=f"NCHW{self.y}c")
        if self.epilogue != "none":
            bias = relay.var("bias", shape=(1, self.k // self.y, 1, 1, self.y))
            params.append(bias)
            out = relay.add(out, bias)
        if self.epilogue == "bias_residual_relu":
            residual = relay.var("residual", shape=(self.n, self.k // self.y, oh, ow, self.y))
            params.append(residual)
            out = relay.nn.relu(relay.add(out, residual))
        elif self.epilogue == "bias_relu":
            out = relay.nn.relu(out)
        elif self.epilogue == "bias_silu":  # the result read twice
            out = relay.multiply(out, relay.sigmoid(out))
        func = relay.Function(params, out).with_attr("Primitive", 1)
        return infer_type(IRModule.from_expr(func))["main"]

    def kernel_args(self) -> list[np.ndarray]:
        a = self.arrays()
        args = [_blocked(a["data"], self.x),
                np.ascontiguousarray(winograd_weight(a["weight"], self.m, self.y))]
        if self.epilogue != "none":
            args.append(np.ascontiguousarray(a["bias"].reshape(1, -1, 1, 1, self.y)))
        if self.epilogue == "bias_residual_relu":
            args.append(_blocked(a["residual"], self.y))
        return args

    def expected(self) -> np.ndarray:
        a = self.arrays()
        t, left, b, r = self.pads
        out = conv_nd(a["data"], a["weight"], (1, 1), ((t, b), (left, r)), (1, 1), 1,
                      self.out_hw, np.dtype("float64"))
        if self.epilogue != "none":
            out = out + a["bias"][None, :, None, None]
        if self.epilogue == "bias_residual_relu":
            out = np.maximum(out + a["residual"], 0)
        elif self.epilogue == "bias_relu":
            out = np.maximum(out, 0)
        elif self.epilogue == "bias_silu":
            out = out / (1 + np.exp(-out))
        return _blocked(out, self.y)


def _blocked(x: np.ndarray, block: int) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(
        x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2).astype("float32"))


CASES = [
    Case(1, 32, 12, 12, 32, (1, 1, 1, 1), 4, 16, 16, "bias_relu"),      # 3 x 3 tiles
    Case(1, 16, 13, 17, 32, (1, 1, 1, 1), 4, 16, 16, "none"),           # partial tiles
    Case(2, 16, 10, 9, 16, (0, 1, 2, 1), 4, 8, 8, "bias_residual_relu"),  # batch 2, asymmetric
    Case(1, 24, 20, 20, 24, (1, 1, 1, 1), 4, 8, 8, "bias_silu"),        # 8-lane blocks, SiLU
    Case(1, 16, 14, 14, 16, (0, 0, 0, 0), 4, 16, 16, "bias_relu"),      # no padding
    Case(1, 16, 9, 9, 32, (1, 1, 1, 1), 2, 16, 16, "bias_relu"),        # F(2x2, 3x3)
    # a row of 16 tiles of 128 -> 128 channels is over L2: blocks of part of a row
    Case(1, 128, 8, 64, 128, (1, 1, 1, 1), 4, 16, 16, "bias_relu"),
]


@pytest.fixture(scope="module")
def built():
    funcs = {case.name: case.function() for case in CASES}
    return funcs, build_native(funcs), build_native({f"avx2_{k}": f for k, f in funcs.items()},
                                                    target=AVX2)


def _run(lib, name: str, case: Case) -> np.ndarray:
    out = np.full(case.expected().shape, np.nan, dtype="float32")
    lib.kernel(name)(*case.kernel_args(), out)
    return out


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_compiled_matches_the_direct_convolution(built, case: Case) -> None:
    funcs, native, avx2 = built
    assert apply_template(function_to_dag(funcs[case.name], case.name).dag, TARGET) is not None
    ref = case.expected()
    tol = 2e-5 * max(1.0, float(np.abs(ref).max()))
    for lib, name in ((native, case.name), (avx2, f"avx2_{case.name}")):
        np.testing.assert_allclose(_run(lib, name, case), ref, rtol=1e-4, atol=tol, err_msg=name)


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts_agree(built, threads: int) -> None:
    _, native, _ = built
    case = CASES[2]
    native.set_num_threads(threads)
    try:
        out = _run(native, case.name, case)
    finally:
        native.set_num_threads(TARGET.num_threads)
    ref = case.expected()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=2e-5 * float(np.abs(ref).max()))


def test_selects_fold_in_the_generated_code(built) -> None:
    """The transforms pick a tile position's coefficients with selects on unrolled loops; each
    copy written out keeps its branch, so no select on a tile position reaches the C."""
    _, native, _ = built
    source = native.get_source()
    start = source.index(f"Kiln kernel {CASES[0].name}")
    kernel = source[start:source.index("\n}\n", source.index(f"int32_t {CASES[0].name}("))]
    assert " ? " not in kernel


def test_template_replays_from_serialised_steps() -> None:
    case = CASES[3]
    func = case.function()
    dag = function_to_dag(func, case.name).dag
    state = apply_template(dag, TARGET)
    assert state is not None
    records = json.loads(json.dumps([s.to_record() for s in state.transform_steps]))
    steps = [parse_step(r) for r in records]
    replayed = dag.init_state
    for step in steps:
        replayed.transform_steps.append(step)
        step.apply_to_state(replayed, dag)
    assert str(replayed) == str(state)
    assert str(lower(dag, steps, name="r")) == str(lower(dag, state, name="r"))


@given(k_blocks=st.integers(1, 16), rows=st.integers(1, 20), cols=st.integers(1, 40),
       budget=st.sampled_from([12, 28]))
def test_gemm_tile_divides_and_fits_the_registers(k_blocks, rows, cols, budget) -> None:
    k_t, r_t, c_t = _gemm_tile(k_blocks, rows, cols, budget)
    assert k_blocks % k_t == 0 and rows % r_t == 0 and cols % c_t == 0
    assert k_t * r_t * c_t <= budget - (k_t - 1)


@given(nh=st.integers(1, 60), nw=st.integers(1, 60), a=st.sampled_from([4, 6]),
       c_in=st.sampled_from([8, 16, 64, 256]), c_out=st.sampled_from([8, 24, 128, 512]),
       threads=st.integers(1, 4))
def test_tile_block_is_whole_rows_or_part_of_one_within_l2(nh, nw, a, c_in, c_out,
                                                           threads) -> None:
    rows, cols = _tile_block(nh, nw, a, c_in, c_out, threads)
    assert nh % rows == 0 and nw % cols == 0
    assert cols == nw or rows == 1
    per_tile = a * a * 4 * (c_in + c_out)
    assert rows * cols * per_tile <= L2_RESIDENT_BYTES or (rows, cols) == (1, 1)
    if cols == nw and (nh // rows) % threads:
        # uneven blocks only where no row count that fits shares evenly
        assert all((nh // d) % threads or d * nw * per_tile > L2_RESIDENT_BYTES
                   for d in range(1, nh + 1) if nh % d == 0)


def test_tile_blocks_share_evenly_among_threads() -> None:
    """ResNet's 64-channel 3x3 conv at 56 x 56, F(4x4): 14 rows of tiles, 2 fit a block; at
    two threads blocks of 1 row (14 blocks, 7 each) instead of 7 blocks (4 and 3)."""
    assert _tile_block(14, 14, 6, 64, 64, 1) == (2, 14)
    assert _tile_block(14, 14, 6, 64, 64, 2) == (1, 14)


@pytest.mark.parametrize(("shape", "tile"), [
    ((64, 64, 56, 56, 16), 4), ((128, 128, 28, 28, 16), 4), ((96, 24, 160, 160, 16), 4),
    ((128, 128, 8, 80, 16), 4), ((128, 128, 20, 20, 16), 4),
    ((256, 256, 14, 14, 16), 2),   # 16 tiles of 4 x 4, 49 of 2 x 2
    ((128, 128, 14, 14, 16), 2),
    ((64, 64, 16, 16, 16), None),  # F(2x2)'s costlier transforms with few channels
    ((256, 256, 7, 7, 16), None),  # too few tiles of either size
    ((3, 32, 224, 224, 3), None),  # 3-channel blocks: a scalar input transform
    ((512, 512, 14, 14, 16), None),  # 16.8 MB of F(2x2) filters, 37.7 MB of F(4x4)
])
def test_winograd_tile_where_measured_faster(shape, tile) -> None:
    assert winograd_tile(*shape) == tile
