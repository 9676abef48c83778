"""Schedule template of blocked depthwise convolutions (``depthwise_conv2d_NCHWc``), and the
window schedule it shares with pooling.

A depthwise convolution (like a pooling window) works on each channel separately, so the channel
block is the vector and nothing is shared across channel blocks. The schedule, as TVM's x86
``schedule_depthwise_conv2d_NCHWc``:

* the epilogue is inlined into the output stage, whose ``(oh, ow)`` loops are split by a
  register tile of rows x columns and the rows of tiles into bands; ``(n, band, c_chunk)`` (a
  depthwise convolution: one band of rows per thread) or ``(n, c_chunk, band)`` (a pooling:
  :func:`_pad_band`) are fused and run in parallel;
* the result is accumulated in a ``cache_write`` stage computed at the output's ``ow.0`` loop,
  its loops ordered ``kh, kw, tile rows, tile columns, channel block`` with ``kw`` and the tile
  unrolled: every ``(column, kw)`` pair is a constant offset, so the C compiler loads each input
  vector of a row once for all the taps that read it, and the accumulators stay in registers;
* a depthwise convolution, or a strided window, reads its input in place: a tap's load outside
  the input is replaced by the padding value (the code generator hoists each row's bounds test
  out of the tile); a stride-1 pooling makes the padded input rows of a band of output rows at
  the start of the band, into a buffer that stays in cache (:func:`_pad_band`); neither makes a
  padded copy of the whole input.
"""

from __future__ import annotations

import math

from kiln.te.dag import ComputeDAG
from kiln.te.loop_state import State
from kiln.te.templates.conv2d import (
    NCHWcPattern,
    RegisterTile,
    choose_register_tile,
    divisors,
    inline_epilogue,
    match_nchwc,
    reduce_extents,
    register_budget,
    schedule_epilogue_tile,
    strided_window,
)
from kiln.te.templates.registry import L2_RESIDENT_BYTES, TargetInfo, register_template
from kiln.te.tensor import ComputeOp

__all__ = ["DEPTHWISE_NCHWC_TAGS", "UNROLL_WINDOW", "schedule_depthwise_nchwc", "schedule_window"]

# The compute tag of the blocked depthwise convolution (``nn.contrib_depthwise_conv2d_NCHWc``).
DEPTHWISE_NCHWC_TAGS = ("depthwise_conv2d_NCHWc",)

# The innermost window axis is unrolled up to this extent.
UNROLL_WINDOW = 8


def schedule_window(dag: ComputeDAG, pattern: NCHWcPattern, target: TargetInfo,
                    max_oc_t: int, weighted: bool = False) -> State | None:
    """Register-tiled schedule of a per-channel window reduction in ``NCHW{c}c`` layout.

    Parameters
    ----------
    dag : ComputeDAG
        The fused function.
    pattern : NCHWcPattern
        Its stages (main: a 5-D reduction over window axes).
    target : TargetInfo
        Vector registers and usable cores.
    max_oc_t : int
        Channel blocks a register tile may span (more independent accumulators when the
        output has few pixels, as global pooling).
    weighted : bool
        Each tap multiplies by a weight vector (a depthwise convolution, not a pooling).

    Returns
    -------
    State or None
        The schedule; ``None`` when the main stage is not 5-D.
    """
    main = dag.ops[pattern.main]
    assert isinstance(main, ComputeOp)
    if len(main.shape) != 5:
        return None
    batch, chunks, oh, ow, _ = main.shape
    extents = reduce_extents(main)
    budget = register_budget(target)
    unroll_window = bool(extents) and extents[-1] <= UNROLL_WINDOW
    if weighted and unroll_window and target.vector_registers >= 32:
        # with 32 registers the C compiler keeps a tile row's input vectors for all the kw
        # taps that read them: tile + (tile + kw - 1) + a weight must fit, or it spills them
        # (MobileNetV2's depthwise kernels: 1076 -> 911 us, 14 accumulators instead of 28).
        # With 16 it reads them as memory operands, and the tile uses every accumulator; a
        # pooling's taps (no weights) gained in some models and lost in others, and keep it.
        budget = min(budget, (target.vector_registers - extents[-1]) // 2)
    tile = choose_register_tile(chunks, oh, ow, budget, batch, target.num_threads, max_oc_t)
    work = math.prod(extents) * math.prod(main.shape)
    state = dag.init_state
    inline_epilogue(state, pattern)
    local = state.cache_write(pattern.main, "local")
    out = pattern.output + 1
    if pattern.epilogue:
        state.compute_inline(local + 1)
    # a depthwise convolution, or a strided window, reads its input in place, each load outside
    # the input replaced by the padding value (one Zen 5 core, against padded rows made per band:
    # 3x3 depthwise over 72 channels at 56 x 56 49 -> 38 us, 576 at 14 x 14 12.7 -> 8.7; strided,
    # against rows made per output row: 64 channels at 112 x 112 -> 56 x 56 50 -> 35 us,
    # ResNet's max pooling 94 -> 76 us); a stride-1 pooling makes its padded rows per band
    in_place = pattern.pad is not None \
        and (weighted or strided_window(dag, pattern, extents[-2]))
    if weighted:
        # the parallel loop splits the rows, as the convolutions around it do (``rows_outer``
        # of :func:`~kiln.te.templates.conv2d.schedule_epilogue_tile`): each thread reads the
        # rows its core wrote, where splitting the channel blocks had it read every row
        # (MobileNetV2 at two threads, same process, alternating: 15-17% faster in a noisy
        # phase of the machine, the same in a quiet one). One band of rows per thread, each
        # channel block's rows of a band together: at one thread, every channel block per row
        # took 2% longer over MobileNetV2, bands no longer.
        rows = oh // tile.oh_t
        band = max(d for d in divisors(rows) if rows // d >= min(rows, target.num_threads))
    elif pattern.pad is not None and not in_place:
        band = _pad_band(dag, pattern, tile, extents, target)
    else:
        band = 1
    at = schedule_epilogue_tile(state, out, tile, work, target, rows_outer=weighted, band=band)
    state.compute_at(local, out, at)
    n, oc, y, x, cb, *reduce = state.stages[local].iters
    state.reorder(local, [n, *reduce, oc, y, x, cb])
    first_tile = 1 + len(reduce)
    if unroll_window:
        state.unroll(local, first_tile - 1)
    for it in range(first_tile, first_tile + 3):
        state.unroll(local, it)
    block = main.shape[4]
    if block > 1 and block & (block - 1) == 0:
        state.vectorize(local, first_tile + 3)
    if in_place:
        state.compute_inline(pattern.pad)
    elif pattern.pad is not None:
        # padded rows are made per band of output rows, where the window reads them (a
        # buffer that stays in cache), instead of a padded copy of the whole input
        state.compute_at(pattern.pad, out, 0)
        if block > 1 and block & (block - 1) == 0:
            state.vectorize(pattern.pad, 4)
    return state


def _pad_band(dag: ComputeDAG, pattern: NCHWcPattern, tile: RegisterTile,
              window: list[int], target: TargetInfo) -> int:
    """Rows of register tiles whose padded input rows a stride-1 pooling makes together (see
    :func:`schedule_window`): the most rows whose padded input stays under half of
    :data:`L2_RESIDENT_BYTES` while the parallel loop keeps at least ``4 * num_threads``
    chunks.

    Made per row of tiles, the padded rows of a 3-row window were copied three times. A 3x3 max
    pooling of 16 channels at 56 x 56 (one Zen 5 core) took 16 us with bands, 20 reading its
    input in place (which depthwise convolutions and strided windows do)."""
    pad, main = dag.ops[pattern.pad] if pattern.pad is not None else None, dag.ops[pattern.main]
    assert isinstance(pad, ComputeOp) and isinstance(main, ComputeOp) and len(window) >= 2
    batch, chunks, oh, _, _ = main.shape
    padded_w, block = pad.shape[3], pad.shape[4]
    rows = oh // tile.oh_t
    best = 1
    for band in divisors(rows):
        buffer = (band * tile.oh_t + window[-2] - 1) * padded_w * block * 4
        if buffer <= L2_RESIDENT_BYTES // 2 \
                and batch * chunks * (rows // band) >= 4 * target.num_threads:
            best = band
    return best


@register_template(*DEPTHWISE_NCHWC_TAGS)
def schedule_depthwise_nchwc(dag: ComputeDAG, target: TargetInfo) -> State | None:
    """The schedule of a fused ``depthwise_conv2d_NCHWc`` function; ``None`` for other DAGs.

    Parameters
    ----------
    dag : ComputeDAG
        The fused function.
    target : TargetInfo
        Vector registers and usable cores.

    Returns
    -------
    State or None
        The schedule (see the module docstring).
    """
    pattern = match_nchwc(dag, DEPTHWISE_NCHWC_TAGS)
    if pattern is None:
        return None
    return schedule_window(dag, pattern, target, max_oc_t=1, weighted=True)
