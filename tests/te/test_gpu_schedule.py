"""The GPU schedules: their loop IR computes the reference, their tiles fit the hardware.

The loop IR is run by the loop-IR evaluator (thread loops as loops, each thread's copy into shared
memory done by every thread in turn, which gives the same values), so this needs no GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln import relay
from kiln.codegen.cuda_codegen import MAX_SHARED_BYTES, CudaCodegen, launch_limits
from kiln.codegen.native import function_to_dag
from kiln.codegen.numpy_library import NumpyLibrary
from kiln.te.gpu_schedule import (
    MAX_BLOCK_THREADS,
    ROW_REDUCTION_MIN,
    SHARED_BUDGET_BYTES,
    WAVE_BLOCKS,
    _conv_shared_bytes,
    choose_conv_block_tile,
    choose_gemm_block_tile,
    gpu_schedule,
    schedule_gpu_contraction,
    schedule_gpu_conv2d,
)
from kiln.te.interp import run_prim_func
from kiln.te.loop_ir import Allocate, walk_stmts
from kiln.te.lower import lower
from tests.codegen._cuda_cases import fused_function


def _check(name, fn, state):  # type: ignore[no-untyped-def]
    fdag = function_to_dag(fn, name)
    prim = lower(fdag.dag, state(fdag.dag), args=fdag.args, name=name)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(b.shape).astype(b.dtype) if b.kind == "input"
            else np.zeros(b.shape, b.dtype) for b in prim.params]
    expected = [a.copy() for a in args]
    NumpyLibrary({name: fn}).kernel(name).bind(expected)()  # type: ignore[union-attr]
    run_prim_func(prim, args)
    for got, want, buf in zip(args, expected, prim.params):
        if buf.kind == "output":
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    return prim


@pytest.mark.parametrize("strides,padding", [((1, 1), (1, 1)), ((2, 2), (0, 0))])
def test_tiled_conv2d_computes_the_convolution(strides: tuple[int, int],
                                                padding: tuple[int, int]) -> None:
    name, fn = fused_function(lambda x, w, b: relay.nn.relu(relay.nn.bias_add(
        relay.nn.conv2d(x, w, strides=strides, padding=padding), b)),
        x=(2, 5, 8, 7), w=(4, 5, 3, 3), b=(4,))
    prim = _check(name, fn, lambda dag: schedule_gpu_conv2d(dag, min_outputs=0))
    shared = [n.buffer for n in walk_stmts(prim.body)
              if isinstance(n, Allocate) and n.buffer.scope == "shared"]
    assert len(shared) == 2 and "pad_temp_shared" in {b.name for b in shared}
    launch_limits(prim.name, prim.body)


def test_tiled_conv2d_as_the_output_accumulates_in_registers() -> None:
    name, fn = fused_function(lambda x, w: relay.nn.conv2d(x, w), x=(1, 3, 6, 6), w=(8, 3, 1, 1))
    _check(name, fn, lambda dag: schedule_gpu_conv2d(dag, min_outputs=0))


def test_small_convolutions_keep_one_thread_per_output() -> None:
    name, fn = fused_function(lambda x, w: relay.nn.conv2d(x, w), x=(1, 3, 6, 6), w=(8, 3, 1, 1))
    assert schedule_gpu_conv2d(function_to_dag(fn, name).dag) is None


@pytest.mark.parametrize("rows,cols,depth", [(12, 20, 24), (5, 33, 17), (1, 100, 8)])
def test_tiled_dense_computes_the_product(rows: int, cols: int, depth: int) -> None:
    name, fn = fused_function(lambda x, w: relay.nn.dense(x, w), x=(rows, depth), w=(cols, depth))
    prim = _check(name, fn, schedule_gpu_contraction)
    launch_limits(prim.name, prim.body)


@pytest.mark.parametrize("axis_len", [50, 700])
def test_softmax_rows_reduce_across_threads_when_long(axis_len: int) -> None:
    """Rows of 64 elements or more get a block each, whose threads combine partial results in
    shared memory; shorter rows keep a thread each. Either way: max, sum, normalize."""
    name, fn = fused_function(lambda x: relay.nn.softmax(x), x=(3, axis_len))
    prim = _check(name, fn, gpu_schedule)
    cg = CudaCodegen()
    cg.module([prim])
    assert len(cg.plans[name].launches) == 3
    assert ("_shares" in str(prim)) == (axis_len >= ROW_REDUCTION_MIN)
    assert all(k.block[0] <= MAX_BLOCK_THREADS for k in cg.plans[name].launches)


def test_mean_over_several_axes_reduces_across_threads() -> None:
    name, fn = fused_function(lambda x: relay.mean(x, axis=[1, 2]), x=(2, 9, 13, 3))
    prim = _check(name, fn, gpu_schedule)
    assert "_shares" in str(prim)


@given(st.integers(1, 64), st.integers(1, 4096), st.integers(1, 4096), st.integers(1, 4096))
def test_gemm_tiles_fit_a_block(batch: int, rows: int, cols: int, depth: int) -> None:
    t = choose_gemm_block_tile(rows, cols, depth, batch)
    assert 1 <= t.threads <= MAX_BLOCK_THREADS and t.kt <= depth
    assert 4 * (t.ty * t.rm + t.tx * t.rn) * (t.kt + 1) <= MAX_SHARED_BYTES  # rows padded by one
    blocks = batch * -(-rows // (t.ty * t.rm)) * -(-cols // (t.tx * t.rn))
    assert blocks >= WAVE_BLOCKS or t.rm * t.rn == 1


@given(st.integers(1, 2048), st.integers(1, 256), st.integers(1, 256), st.integers(1, 1024),
       st.sampled_from([(1, 1, 1, 1, 1, 1), (3, 3, 1, 1, 1, 1), (3, 3, 2, 2, 1, 1),
                        (7, 7, 2, 2, 1, 1), (16, 16, 16, 16, 1, 1), (3, 3, 1, 1, 4, 4)]),
       st.integers(1, 32))
def test_conv_tiles_fit_shared_memory(channels: int, height: int, width: int, depth: int,
                                      window: tuple[int, int, int, int, int, int],
                                      batch: int) -> None:
    t = choose_conv_block_tile(channels, height, width, depth, window, batch)
    if t is None:
        return
    assert 1 <= t.threads <= MAX_BLOCK_THREADS and 1 <= t.rct <= min(8, depth)
    assert _conv_shared_bytes(t, window) <= SHARED_BUDGET_BYTES
