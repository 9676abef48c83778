"""Schedule template of Winograd convolutions (``nn.contrib_conv2d_winograd_NCHWc``).

The fused function is ``data_pad -> data_pack_left -> data_pack -> bgemm -> inverse_right ->
conv2d_winograd_NCHWc [-> element-wise epilogue ...]`` (:mod:`kiln.op.nn_winograd`). The
transformed inputs and the products of a whole image would not stay in cache (36 values per tile
and channel: 7 MB each for 64 channels at 112 x 112, where every call then ran 2.3 times the
direct convolution's time), so the work goes by blocks of tiles (:func:`_tile_block`: whole rows
of tiles while a block's transformed inputs and products fit in L2 together), the blocks in
parallel. For each block:

* ``data_pack_left`` / ``data_pack`` (``B^T d``, then ``(B^T d) B``): a tile and channel block
  at a time, one tile position unrolled at each step (its select chain folds to the few
  non-zero terms) and the channel block vectorized;
* ``bgemm``, the ``a * a`` products over the input channels: a register tile of ``k_t`` output
  channel blocks x ``r_t x c_t`` tiles accumulates in vector registers
  (:func:`~kiln.te.templates.conv2d.register_budget`), as the direct convolution's tile does
  over its taps;
* ``inverse_right`` / the output (``M A``, then ``A^T (M A)`` with the epilogue inlined): a tile's
  ``m x m`` outputs of one channel block, unrolled by position and vectorized; an epilogue that
  reads the result more than once (SiLU) reads the same vector.

``data_pad`` is materialised once (:func:`~kiln.te.templates.conv2d.schedule_pad`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kiln.te.dag import ComputeDAG
from kiln.te.default_schedule import PARALLEL_MIN_WORK
from kiln.te.loop_state import State
from kiln.te.templates.conv2d import (
    divisors,
    elementwise_epilogue,
    register_budget,
    schedule_pad,
)
from kiln.te.templates.registry import L2_RESIDENT_BYTES, TargetInfo, register_template
from kiln.te.tensor import ComputeOp, PlaceholderOp

__all__ = ["WINOGRAD_TAGS", "WinogradPattern", "match_winograd", "schedule_winograd",
           "winograd_tile"]

# the compute tag of the batched product, the function's only reduction
WINOGRAD_TAGS = ("winograd_bgemm",)
# fewest tiles (of m x m outputs) for which the transforms and the products pay
_MIN_TILES = 25
# largest transformed filter bank: a x a values per filter (36 for F(4x4, 3x3), four times the
# 3x3 one) are read once per block of tiles; 512 -> 512 channels at 14 x 14 (16.8 MB of F(2x2),
# 37.7 MB of F(4x4) filters) ran 1.6-1.9 times the direct convolution's time, 256 -> 256 at
# 28 x 28 (9.4 MB) 0.29
_MAX_WEIGHT_BYTES = 12 << 20
# F(2x2, 3x3) instead where F(4x4)'s tiles are too few: from this many input and output channels
# (the products outweigh its costlier transforms per output)
_SMALL_TILE_CHANNELS = 128


def winograd_tile(c_in: int, c_out: int, oh: int, ow: int, in_block: int) -> int | None:
    """The output tile ``m`` of the Winograd ``F(m x m, 3 x 3)`` that runs a 3x3 stride-1
    convolution of ``c_in`` -> ``c_out`` channels with an ``oh x ow`` output faster than the
    direct template, or None when neither does.

    4 where the output has at least :data:`_MIN_TILES` tiles of 4 x 4; else 2 where it has that
    many tiles of 2 x 2 and at least :data:`_SMALL_TILE_CHANNELS` channels in and out. Input
    channel blocks of at least 8 (the input transform is vectorized over the block), a
    transformed weight of at most :data:`_MAX_WEIGHT_BYTES`.

    Measured on one Zen 5 core, kernel (with bias + relu) against the direct template:
    F(4x4): ResNet's 64 x 56 x 56 and 128 x 28 x 28 layers 0.34-0.36 of its time, 256 x 28 x 28
    0.29, CRNN's 128 x 8 x 80 0.34, DBNet's 96 -> 24 (computed as 32) at 160 x 160 0.35-0.48,
    16 x 80 x 80 0.54, 32 -> 64 at 32 x 32 0.72. F(2x2) at 14 x 14 (ResNet's third stage): 256
    channels 0.53 (F(4x4): 0.56), 128 channels 0.52 (0.92); at 16 x 16 with 64 channels 1.18
    (F(4x4): 0.86), and 256 x 7 x 7 1.55 (0.96).
    """
    for m, least in ((4, 1), (2, _SMALL_TILE_CHANNELS)):
        a = m + 2
        tiles = -(-oh // m) * -(-ow // m)
        if tiles >= _MIN_TILES and min(c_in, c_out) >= least and in_block >= 8 \
                and a * a * c_in * c_out * 4 <= _MAX_WEIGHT_BYTES:
            return m
    return None


@dataclass(frozen=True)
class WinogradPattern:
    """Stage ids of a fused Winograd convolution (:mod:`kiln.op.nn_winograd`); ``epilogue``
    and ``side`` as in :class:`~kiln.te.templates.conv2d.NCHWcPattern`."""

    pad: int
    left: int
    pack: int
    bgemm: int
    right: int
    main: int
    epilogue: tuple[int, ...]
    side: tuple[int, ...]


_STAGES = ("data_pad", "data_pack_left", "data_pack", "bgemm", "inverse_right",
           "conv2d_winograd_NCHWc")


def match_winograd(dag: ComputeDAG) -> WinogradPattern | None:
    """Recognise the stages of :data:`_STAGES` followed by an element-wise epilogue, with one
    float32 output; None for any other DAG."""
    ops = dag.ops
    computes = [i for i, op in enumerate(ops) if isinstance(op, ComputeOp)]
    by_name = {ops[i].name: i for i in computes}
    found = [by_name.get(n) for n in _STAGES]
    outputs = [t for t in dag.tensors if not isinstance(t.op, PlaceholderOp)]
    if None in found or len(outputs) != 1 or outputs[0].op is not ops[computes[-1]] \
            or any(ops[i].output_dtype(0) != "float32" for i in computes):
        return None
    pad, left, pack, bgemm, right, main = (i for i in found if i is not None)
    epilogue = elementwise_epilogue(dag, main)
    if epilogue is None:
        return None
    side = [i for i in computes if i not in (pad, left, pack, bgemm, right, main, *epilogue)]
    if any(getattr(ops[i], "is_reduction", False) for i in side):
        return None
    return WinogradPattern(pad, left, pack, bgemm, right, main, epilogue, tuple(side))


def _gemm_tile(k_blocks: int, rows: int, cols: int, budget: int) -> tuple[int, int, int]:
    """``(k_t, r_t, c_t)``: output channel blocks x rows x columns of tiles accumulated
    together (each dividing its extent). Per input channel the tile loads ``k_t`` weight vectors
    and broadcasts ``r_t * c_t`` values for ``k_t * r_t * c_t`` multiply-adds: the most
    accumulators within the budget (up to 24), then the fewest loads per multiply-add."""
    best: tuple[tuple[float, ...], tuple[int, int, int]] | None = None
    for k_t in (d for d in divisors(k_blocks) if d <= 4):
        for r_t in divisors(rows):
            for c_t in divisors(cols):
                size = k_t * r_t * c_t
                if size > budget - (k_t - 1):
                    continue
                key = (min(size, 24), -(k_t + r_t * c_t) / size, -r_t)
                if best is None or key > best[0]:
                    best = (key, (k_t, r_t, c_t))
    assert best is not None
    return best[1]


def _tile_block(nh: int, nw: int, a: int, c_in: int, c_out: int,
                num_threads: int = 1) -> tuple[int, int]:
    """``(rows, cols)`` of the block of tiles transformed, multiplied and transformed back
    together: whole rows of tiles while their transformed inputs and products (``a * a`` values
    per tile and channel, in and out) fit in L2 together, else part of one row. Of the row
    counts that fit, the largest whose blocks share evenly among ``num_threads`` threads (the
    blocks run in parallel), if any."""
    per_tile = a * a * 4 * (c_in + c_out)
    rows = [d for d in divisors(nh) if d * nw * per_tile <= L2_RESIDENT_BYTES]
    if rows:
        # ResNet-50's 64-channel 3x3 convs at 56 x 56 (14 x 14 tiles of 4 x 4): 2 rows of tiles a
        # block made 7 blocks, 4 on one thread and 3 on the other; 1 row, 14 blocks, 7 each:
        # the model 2.3% faster at two threads (same process, alternating, Zen 5)
        even = [d for d in rows if (nh // d) % num_threads == 0]
        return (even or rows)[-1], nw
    cols = [d for d in divisors(nw) if d * per_tile <= L2_RESIDENT_BYTES]
    return 1, cols[-1] if cols else 1


def _tile_loops(state: State, sid: int, unrolled: tuple[int, ...], vector: int) -> None:
    """Unroll iterators ``unrolled`` of stage ``sid`` and vectorize iterator ``vector``."""
    for it in unrolled:
        state.unroll(sid, it)
    state.vectorize(sid, vector)


@register_template(*WINOGRAD_TAGS)
def schedule_winograd(dag: ComputeDAG, target: TargetInfo) -> State | None:
    """The schedule of a fused Winograd convolution (see the module docstring); None for other
    DAGs.

    Parameters
    ----------
    dag : ComputeDAG
        The fused function.
    target : TargetInfo
        Vector registers and usable cores.

    Returns
    -------
    State or None
        The schedule.
    """
    pattern = match_winograd(dag)
    if pattern is None:
        return None
    bgemm_op, main_op, pack_op = (dag.ops[i] for i in (pattern.bgemm, pattern.main, pattern.pack))
    assert isinstance(bgemm_op, ComputeOp) and isinstance(main_op, ComputeOp) \
        and isinstance(pack_op, ComputeOp)
    a, _, _, nh, nw, k_blocks, block = bgemm_op.shape
    c_in = pack_op.shape[5] * pack_op.shape[6]
    m = a - 2
    parallel = target.num_threads > 1 and math.prod(main_op.shape) * a * a >= PARALLEL_MIN_WORK
    state = dag.init_state
    for sid in (*pattern.side, *pattern.epilogue[:-1]):
        state.compute_inline(sid)
    if pattern.epilogue:
        state.compute_inline(pattern.main)
    gemm = state.cache_write(pattern.bgemm, "local") + 1  # shifts the ids after it by one
    out = (pattern.epilogue[-1] if pattern.epilogue else pattern.main) + 1
    pack, left, right = pattern.pack, pattern.left, pattern.right + 1
    # the output: blocks of tiles in parallel; in a block a tile's m x m outputs of one channel
    # block together (A^T (M A), the selects folded), the epilogue applied there
    rows, cols = _tile_block(nh, nw, a, c_in, k_blocks * block, target.num_threads)
    n, k, y, x, kv = state.stages[out].iters
    y0, y1 = state.split(out, y, [m])
    x0, x1 = state.split(out, x, [m])
    y0o, y0i = state.split(out, y0, [rows])
    x0o, x0i = state.split(out, x0, [cols])
    state.reorder(out, [n, y0o, x0o, k, y0i, x0i, y1, x1, kv])
    fused = state.fuse(out, [n, y0o, x0o])
    if parallel:
        state.parallel(out, fused)
    _tile_loops(state, out, (4,), 6)
    # the block's input transform, a tile and channel block at a time: B^T d into a small stack
    # buffer, then (B^T d) B stored, each step one tile position per unrolled copy
    state.compute_at(pack, out, 0)
    xi, nu, i, th, tw, c, ci = state.stages[pack].iters
    state.reorder(pack, [i, th, tw, c, xi, nu, ci])
    _tile_loops(state, pack, (5,), 6)
    state.compute_at(left, pack, 3)
    xi, s, *rest = state.stages[left].iters
    state.reorder(left, [s, xi, *rest])
    _tile_loops(state, left, (1,), 6)
    # the block's products: a register tile of k_t channel blocks x r_t x c_t tiles accumulates
    # over the input channels
    k_t, r_t, c_t = _gemm_tile(k_blocks, rows, cols, register_budget(target))
    state.compute_at(gemm, out, 0)
    xi, nu, i, th, tw, kk, kv = state.stages[gemm].iters
    th0, th1 = state.split(gemm, th, [r_t])
    tw0, tw1 = state.split(gemm, tw, [c_t])
    k0, k1 = state.split(gemm, kk, [k_t])
    state.reorder(gemm, [xi, nu, i, k0, th0, tw0, k1, th1, tw1, kv])
    _tile_loops(state, gemm, (6, 7, 8), 9)
    state.compute_at(gemm - 1, gemm, 5)
    xi, nu, i, th, tw, kk, kv, rc, ri = state.stages[gemm - 1].iters
    state.reorder(gemm - 1, [xi, nu, i, rc, ri, th, tw, kk, kv])
    _tile_loops(state, gemm - 1, (5, 6, 7), 8)
    # M A of one tile and channel block, one tile position per unrolled copy
    state.compute_at(right, out, 3)
    _tile_loops(state, right, (1,), 6)
    schedule_pad(state, pattern.pad, target)
    return state
