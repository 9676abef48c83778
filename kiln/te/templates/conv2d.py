"""Schedule template of blocked convolutions (``conv2d_NCHWc``), in the spirit of TVM's x86
``_schedule_conv_NCHWc``.

The fused function is ``[pad_temp ->] conv2d_NCHWc [-> element-wise epilogue ...]`` with data
``NCHW{ic_bn}c``, kernel ``OIHW{ic_bn}i{oc_bn}o`` and output ``NCHW{oc_bn}c``. The schedule:

* the epilogue stages (bias add, activation, residual add, ...) are inlined into the last one,
  the output stage, and so are the stages only the epilogue reads (the scalar constants of
  hard-swish and GELU are 0-d stages); the epilogue may read the convolution any number of
  times (``x * sigmoid(x)``): every read is of the same registers;
* the output's ``(oc_chunk, oh, ow)`` loops are split by a register tile ``(oc_t, oh_t, ow_t)``
  (at most ~28 accumulators with 32 vector registers; with 16, 12 or 14 that fill them with
  their weight vectors and broadcast, or ~10 where the window is read in place), the outer parts
  fused and run in parallel, the tile loops unrolled and ``oc_block`` vectorized;
* the convolution is computed into a ``cache_write`` accumulator at the output's ``ow`` tile
  loop, its loops ordered ``ic_chunk, kh, kw, ic_block, oh_t, ow_t, oc_t, oc_block`` (the tile
  innermost, so the accumulator lives in vector registers: see :mod:`kiln.codegen.c_vector`;
  pixel-major, so each broadcast pixel is used at once by its ``oc_t`` multiply-adds and only
  the weight vectors stay live: with 16 registers a 10-accumulator tile then keeps its weights
  in registers even when the compiler holds an epilogue constant across the loop);
  the epilogue then reads the registers and stores each output vector once;
* zero padding is materialised once per call by its own parallel, vectorized loop nest; a
  strided (or dilated) convolution reads its input in place instead, a load outside the input
  replaced by zero;
* a grouped convolution (``group_conv2d_NCHWc``, its blocks inside the groups) reads its group's
  input blocks only, and its tile's channel blocks stay within one group.

The helpers shared with the depthwise and pooling templates (pattern matching of the fused
function, register tile choice, padding schedule) live here too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kiln.te import expr as E
from kiln.te.dag import ComputeDAG
from kiln.te.default_schedule import PARALLEL_MIN_WORK
from kiln.te.loop_ir import PREFETCH_NEXT_TILE
from kiln.te.loop_state import State
from kiln.te.templates.registry import L2_RESIDENT_BYTES, TargetInfo, register_template
from kiln.te.tensor import ComputeOp, Operation, PlaceholderOp
from kiln.te.visit import post_order

__all__ = [
    "CONV2D_NCHWC_TAGS",
    "NCHWcPattern",
    "RegisterTile",
    "choose_register_tile",
    "divisors",
    "elementwise_epilogue",
    "inline_epilogue",
    "match_nchwc",
    "register_budget",
    "schedule_conv2d_nchwc",
    "schedule_epilogue_tile",
    "reduce_extents",
    "schedule_pad",
    "strided_window",
]

# The compute tags of the blocked convolution stage (``nn.contrib_conv2d_NCHWc``; grouped, with
# blocks inside the groups: TVM's ``group_conv2d_NCHWc``).
CONV2D_NCHWC_TAGS = ("conv2d_NCHWc", "group_conv2d_NCHWc")


@dataclass(frozen=True)
class NCHWcPattern:
    """Stage ids of a fused blocked-layout function: ``[pad ->] main [-> epilogue...]``.

    ``epilogue`` lists the element-wise stages after ``main`` (the last one is the output; empty
    when ``main`` is the output). ``side`` lists the stages that read neither ``main`` nor the
    padding and that only the epilogue reads: the scalar constants of an activation (the ``3``
    and ``6`` of hard-swish, ``T_const`` stages), or an element-wise function of the other
    inputs. They are inlined where the epilogue reads them.
    """

    main: int
    pad: int | None
    epilogue: tuple[int, ...]
    side: tuple[int, ...] = ()

    @property
    def output(self) -> int:
        """Stage id of the function's output."""
        return self.epilogue[-1] if self.epilogue else self.main


def _reads(op: Operation, producer: Operation) -> list[E.TensorLoad]:
    if not isinstance(op, ComputeOp):
        return []
    return [n for b in op.body for n in post_order(b)
            if isinstance(n, E.TensorLoad) and n.tensor.op is producer]


def _identity_reads(op: ComputeOp, producer: Operation) -> bool:
    axes = [iv.var for iv in op.axis]
    return all(len(ld.indices) == len(axes) and all(i is a for i, a in zip(ld.indices, axes))
               for ld in _reads(op, producer))


def match_nchwc(dag: ComputeDAG, tags: Sequence[str], dtype: str = "float32") -> NCHWcPattern | None:
    """Recognise ``[pad_temp ->] <tag> [-> element-wise epilogue]`` with one output.

    The epilogue may read the main stage (and the stages after it) any number of times, as
    hard-swish ``x * clip(x + 3, 0, 6) / 6`` or SiLU ``x * sigmoid(x)`` do: the schedules
    compute the main stage once into registers and apply the whole epilogue there. Stages that
    do not depend on the main stage and only feed the epilogue (scalar constants, element-wise
    functions of the other inputs) are accepted as ``side`` stages.

    Parameters
    ----------
    dag : ComputeDAG
        The fused function.
    tags : sequence of str
        Accepted tags of the main stage (``conv2d_NCHWc``, ``pool_max``, ...).
    dtype : str
        The dtype every compute stage must have.

    Returns
    -------
    NCHWcPattern or None
        The stage ids, or ``None`` when the DAG has another shape: several reductions or
        outputs, a producer of the main stage other than the padding, an epilogue stage that
        changes the shape or reads the main stage at other indices, a side stage that reduces,
        or another dtype.
    """
    ops = dag.ops
    computes = [i for i, op in enumerate(ops) if isinstance(op, ComputeOp)]
    mains = [i for i in computes if ops[i].tag in tags]
    if len(mains) != 1:
        return None
    main = mains[0]
    main_op = ops[main]
    assert isinstance(main_op, ComputeOp)
    outputs = [t for t in dag.tensors if not isinstance(t.op, PlaceholderOp)]
    if len(outputs) != 1 or outputs[0].op is not ops[computes[-1]]:
        return None
    if any(op.output_dtype(0) != dtype for op in (ops[i] for i in computes)
           if isinstance(op, ComputeOp)):
        return None
    epilogue = elementwise_epilogue(dag, main)
    if epilogue is None:
        return None
    after = {id(main_op), *(id(ops[i]) for i in epilogue)}
    feeds_main = {id(t.op) for t in main_op.input_tensors()}
    pad: int | None = None
    side: list[int] = []
    for i in computes:
        op = ops[i]
        assert isinstance(op, ComputeOp)  # computes lists the compute stages
        if i == main or id(op) in after:
            continue
        if id(op) in feeds_main:
            if pad is not None or op.name not in ("pad_temp", "data_pad") or op.is_reduction \
                    or any(_reads(ops[j], op) for j in computes if j != main):
                return None
            pad = i
        elif op.is_reduction:
            return None
        else:
            side.append(i)
    if pad is not None and any(_reads(ops[pad], ops[s]) for s in side):
        return None  # a side stage feeding the padding
    return NCHWcPattern(main, pad, epilogue, tuple(side))


def elementwise_epilogue(dag: ComputeDAG, main: int) -> tuple[int, ...] | None:
    """The stages after stage ``main`` in data flow (stages are in topological order), when
    each is element-wise on the main stage's shape and reads it and the stages before it at
    their own indices; None otherwise.

    Parameters
    ----------
    dag : ComputeDAG
        The fused function.
    main : int
        Stage id of the anchor (a convolution, a pooling window, a Winograd output).

    Returns
    -------
    tuple of int or None
        The epilogue's stage ids, in order (the last one the output when not empty).
    """
    ops = dag.ops
    main_op = ops[main]
    assert isinstance(main_op, ComputeOp)
    after = {id(main_op)}
    chain: list[Operation] = [main_op]
    epilogue: list[int] = []
    for i, op in enumerate(ops):
        if i <= main or not isinstance(op, ComputeOp) \
                or not any(id(t.op) in after for t in op.input_tensors()):
            continue
        if op.is_reduction or tuple(op.shape) != tuple(main_op.shape) \
                or not all(_identity_reads(op, p) for p in chain):
            return None
        after.add(id(op))
        chain.append(op)
        epilogue.append(i)
    return tuple(epilogue)


def inline_epilogue(state: State, pattern: NCHWcPattern) -> None:
    """Inline the side stages and every epilogue stage but the output (``CI`` steps; stage ids
    do not change).

    Parameters
    ----------
    state : State
        The state to extend (before any step that adds stages).
    pattern : NCHWcPattern
        The matched function.
    """
    for sid in (*pattern.side, *pattern.epilogue[:-1]):
        state.compute_inline(sid)


def strided_window(dag: ComputeDAG, pattern: NCHWcPattern, window_rows: int) -> bool:
    """Whether the main stage's window moves by more than one row or is dilated: its padded
    input has more rows than the output's plus ``window_rows - 1``.

    Parameters
    ----------
    dag : ComputeDAG
        The fused function.
    pattern : NCHWcPattern
        Its stages (with a padding stage).
    window_rows : int
        Rows of the window (the kernel's height).

    Returns
    -------
    bool
        True for a strided or dilated window.
    """
    assert pattern.pad is not None
    pad, main = dag.ops[pattern.pad], dag.ops[pattern.main]
    assert isinstance(pad, ComputeOp) and isinstance(main, ComputeOp)
    return pad.shape[2] > main.shape[2] + window_rows - 1


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order."""
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class RegisterTile:
    """Output elements computed together in registers: ``oc_t`` channel blocks x ``oh_t`` rows x
    ``ow_t`` columns (``oc_t`` and ``oh_t`` divide their extents; ``ow_t`` may not, then the last
    tile of a row is partial)."""

    oc_t: int
    oh_t: int
    ow_t: int

    @property
    def size(self) -> int:
        """Accumulators in the tile."""
        return self.oc_t * self.oh_t * self.ow_t


def register_budget(target: TargetInfo) -> int:
    """Accumulator registers a tile may use (the rest hold weights and broadcasts)."""
    return target.vector_registers - 4


def choose_register_tile(oc_chunks: int, oh: int, ow: int, budget: int, outer: int,
                         num_threads: int, max_oc_t: int = 4,
                         load_bound: bool | None = None, issue_bound: bool = False,
                         fill_registers: bool = False) -> RegisterTile:
    """The register tile of a blocked convolution's output.

    Parameters
    ----------
    oc_chunks, oh, ow : int
        Output channel blocks, rows and columns.
    budget : int
        Accumulator registers available.
    outer : int
        Iterations of the loops outside the tile's loops that run in parallel too (batch).
    num_threads : int
        Usable CPUs: the parallel loop should keep at least ``4 * num_threads`` chunks.
    max_oc_t : int
        Largest number of channel blocks per tile (1 when the weights are not shared across
        channel blocks, as in depthwise convolutions).
    load_bound : bool, optional
        Whether loads bind as much as multiply-adds (see :func:`_load_bound_tile`); by default
        with 16 vector registers. The convolution template asks for it too when its channel
        block is narrower than the machine's vectors (8 lanes with AVX-512: two multiply-adds
        a cycle, each wanting its loads).
    issue_bound : bool
        Whether the tile's multiply-adds each use one broadcast input and share weight vectors
        (a convolution, not a depthwise one) on a machine with 32 vector registers: then the
        tile is chosen by its issue rate (see :func:`_issue_bound_tile`).
    fill_registers : bool
        With 16 vector registers, take :func:`_register_filling_tile`'s tile where it has one
        (a convolution, not a depthwise one, whose window is not read in place).

    Returns
    -------
    RegisterTile
        Every accumulator of the tile shares its loads: one weight vector per channel block,
        one broadcast input per pixel. The largest tile within the budget wins, then the one
        with fewer loads per multiply-add, then the widest.
    """
    if (budget <= _SIXTEEN_REGISTER_BUDGET) if load_bound is None else load_bound:
        tile = None
        if fill_registers and budget == _SIXTEEN_REGISTER_BUDGET:
            tile = _register_filling_tile(oc_chunks, oh, ow, outer, num_threads, max_oc_t)
        if tile is None:
            tile = _load_bound_tile(oc_chunks, oh, ow, budget, outer, num_threads, max_oc_t)
        if tile is not None:
            return tile
    elif issue_bound:
        return _issue_bound_tile(oc_chunks, oh, ow, budget, outer, num_threads, max_oc_t)
    best: tuple[tuple[float, ...], RegisterTile] | None = None
    ow_cands = [d for d in divisors(ow) if d <= budget]
    if ow > budget and max(ow_cands) * 2 <= budget:
        # no good divisor (e.g. a prime width): a tile that leaves one partial tile per row
        parts = -(-ow // budget)
        ow_cands.append(-(-ow // parts))
    for oc_t in (d for d in divisors(oc_chunks) if d <= max_oc_t):
        for oh_t in divisors(oh):
            for ow_t in ow_cands:
                tile = RegisterTile(oc_t, oh_t, ow_t)
                if tile.size > budget - (oc_t - 1):
                    continue
                chunks = outer * (oc_chunks // oc_t) * (oh // oh_t)
                enough = min(chunks, 4 * num_threads)
                loads = oc_t + oh_t * ow_t
                key = (enough, tile.size, tile.size / loads, ow_t, -oh_t)
                if best is None or key > best[0]:
                    best = (key, tile)
    assert best is not None
    return best[1]


# Accumulator budget of a machine with 16 vector registers (AVX2), where loads bind.
_SIXTEEN_REGISTER_BUDGET = 12
# Fewest columns of a one-block load-bound tile taken narrower than it could be, to tile its row
# exactly (see _load_bound_tile).
_MIN_EXACT_COLUMNS = 10
# Largest output side whose whole column, twice, is a 16-register tile (see _load_bound_tile).
_SMALL_OUTPUT = 7
# Weights up to L2_RESIDENT_BYTES stay in a core's L2 cache while the convolution sweeps its
# rows: the rows then run outside the channel tiles. Measured on ResNet-50's 1x1 convolutions at
# 56 x 56 and 28 x 28 (AVX2 build): 256 -> 64 channels 78 -> 86 GFLOP/s, 512 -> 128 84 -> 93;
# layers with megabytes of weights (512 -> 2048 at 7 x 7) keep the channel tiles outside.


def _load_bound_tile(oc_chunks: int, oh: int, ow: int, budget: int, outer: int,
                     num_threads: int, max_oc_t: int) -> RegisterTile | None:
    """With 16 vector registers a tile is limited by its loads (an AVX2 broadcast is its own
    instruction) as much as by its accumulators: the tile with the most accumulators doing
    useful work among those that load at most one vector (weights and broadcast pixels) per
    multiply-add, one output row high, whose last partial tile of a row wastes under 1/8 of the
    row (none when the row fits the budget). Measured on ResNet-18's 3x3 convolutions with
    8-lane vectors (Zen 4, AVX2 build): 2 channel blocks x 5 columns (60 useful accumulators per
    64 slots at width 56) ran at 94-101 GFLOP/s where the divisor-only choice 2 x 4 ran at 67-85
    and 1 x 12 or 4 x 3 rows at 83-88.

    When that tile would use each weight vector for under 4 columns (3 channel blocks leave
    room for 3 columns only), the weights, read again for every tile, come from L2: one channel
    block as wide as the budget allows (one load more than it has multiply-adds) is taken then,
    or, where that leaves a partial last tile, the widest of at least :data:`_MIN_EXACT_COLUMNS`
    columns that tiles the row exactly, else the channel blocks' tile.
    Measured on DBNet's 96 -> 24 channel 3x3 convolution at 160 x 160 (AVX2 build): 1 x 10
    columns 81 GFLOP/s, 3 x 3 69. With a partial last tile the C compiler's code for the checked
    tile slowed every tile where the epilogue calls vector math (YOLOv8's 40 -> 72 channel
    stride-2 conv + SiLU at 52 x 52, AVX2 build: 1 x 11 columns 2.3 ms, 3 x 3 1.3 ms; with a
    clip epilogue 1.3 and 1.2 ms).

    Outputs of at most 7 x 7 with an even number of channel blocks, which no load-bound tile
    fits within 12 accumulators, take 2 blocks x a whole column (where the column is at least
    as tall as the row is wide): 14 accumulators, the compiler reading one weight vector from
    memory. Measured on ResNet-50's 7 x 7 layers (AVX2 build):
    the 3x3 512-channel conv 101 GFLOP/s, the stride-2 1x1 downsample 82, where the general
    rule's 1 x 7 ran at 68 and 62.
    None when no tile qualifies (the general rule decides then)."""
    best = _widest_load_bound(oc_chunks, oh, ow, budget, outer, num_threads, max_oc_t, 0)
    if (best is None or best.oc_t == 1) and budget == _SIXTEEN_REGISTER_BUDGET \
            and max_oc_t >= 2 and oc_chunks % 2 == 0 and ow <= oh <= _SMALL_OUTPUT \
            and outer * (oc_chunks // 2) >= 4 * num_threads:  # still enough parallel chunks
        return RegisterTile(2, oh, 1)
    if best is not None and best.ow_t < min(4, ow) and max_oc_t > 1:
        single = _widest_load_bound(oc_chunks, oh, ow, budget, outer, num_threads, 1, 1)
        if single is not None and single.ow_t > best.ow_t:
            if ow % single.ow_t == 0:
                return single
            # a partial last tile: a narrower block tiling the row exactly, if it is wide
            width = max((w for w in range(_MIN_EXACT_COLUMNS, single.ow_t) if ow % w == 0),
                        default=0)
            if width:
                return RegisterTile(1, 1, width)
    return best


# Vector registers of an AVX2 machine, all of which a convolution's tile may use.
_SIXTEEN_REGISTERS = 16
# How much more useful work per tile slot a two-row tile needs to be taken over a one-row tile
# (see _register_filling_tile).
_TWO_ROW_MARGIN = 1.04


def _register_filling_tile(oc_chunks: int, oh: int, ow: int, outer: int, num_threads: int,
                           max_oc_t: int) -> RegisterTile | None:
    """A convolution's tile with 16 vector registers, filling them: 2 channel blocks x 12
    accumulators (with 2 weight vectors and a broadcast input: 15 registers) where the channel
    blocks pair up, else one block x 14 (16 registers); never 3 or more blocks, whose shorter
    rows of columns lost. Of those shapes, one row x up to 6 (or 14) columns or two rows x half
    as many, whichever leaves fewer accumulators idle in a row's last partial tile; two rows
    must idle 4% fewer to be taken (the one-row tile reads its weight vectors for more
    columns); at equal idling a row tiled exactly wins. Outputs of at most 7 x 7 keep
    :func:`_load_bound_tile`'s whole-column tile, rows of at most 12 its exact tiling.

    Measured on one Zen 5 core, AVX2 build, against the load-bound rule (which kept a spare
    register or two and at most one load per multiply-add): 1x1 convolutions, whose short
    reduction makes a tile's fixed work (zeroing, epilogue, stores) weigh more, MobileNetV3's
    24 -> 72 channels at 56 x 56 (3 blocks x 3 columns) 124 -> 105 us, 40 -> 120 at 28 x 28 89
    -> 74, MobileNetV2's 144 -> 24 at 56 x 56 238 -> 193, ResNet-50's 64 -> 256 at 56 x 56 (2 x
    5) 859 -> 783; 3x3 convolutions, ResNet-18's 64 channels at 56 x 56 2027 -> 1823 (2 rows
    x 3), 128 at 28 x 28 1951 -> 1756 (1 row x 6), 96 channels at 26 x 26 (3 x 3) 1126 -> 863,
    DBNet's 96 -> 24 at 160 x 160 (1 x 10) 9682 -> 9342 (2 rows x 7).
    None for small outputs and where the tile leaves under ``4 * num_threads`` parallel
    chunks."""
    if max(oh, ow) <= _SMALL_OUTPUT or ow <= _SIXTEEN_REGISTER_BUDGET:
        return None
    oc_t = 2 if max_oc_t >= 2 and oc_chunks % 2 == 0 else 1
    best: tuple[tuple[float, ...], RegisterTile] | None = None
    for oh_t in (d for d in (1, 2) if oh % d == 0):
        if outer * (oc_chunks // oc_t) * (oh // oh_t) < 4 * num_threads:
            continue
        for ow_t in range(1, ow + 1):
            tile = RegisterTile(oc_t, oh_t, ow_t)
            if tile.size + oc_t + 1 > _SIXTEEN_REGISTERS:
                break
            useful = tile.size * ow / (-(-ow // ow_t) * ow_t)
            key = (round(useful * (_TWO_ROW_MARGIN if oh_t == 1 else 1.0), 6), ow % ow_t == 0,
                   tile.size)
            if best is None or key > best[0]:
                best = (key, tile)
    return None if best is None else best[1]


# A core with 32 vector registers issues two vector multiply-adds and two vector loads a cycle
# (Zen 4 issues one 512-bit multiply-add a cycle: the model then only overestimates the loads).
_FMA_PIPES = 2
# Multiply-adds a step of the reduction needs to keep those pipes busy: two per pipe and cycle of
# the 4-cycle latency, with slack (tiles of 8 accumulators measured far below the peak).
_MIN_STEP_FMAS = 12
# Issue slots a tile's reduction step spends per input row beyond its loads and multiply-adds
# (loop and address arithmetic, a row's padding test): more, narrower tiles cost more, and so do
# taller ones (CRNN's 3x3 convs over 4 x 80 outputs: 2 rows x 3 columns x 4 blocks 10-18% slower
# than 1 x 5 x 4, one Zen 5 core).
_STEP_OVERHEAD = 2


def _issue_bound_widths(ow: int, budget: int) -> list[int]:
    """Tile widths of the issue-bound rule: the divisors of the row, and widths leaving a last
    partial tile of at least half a tile in a row of at least 3 tiles, or of 7/8 of a tile in a
    row of 2 (15 + 14 columns). With fewer tiles, or a sliver left, the partial tile ran far
    below its share: 4 + 3 columns of MobileNetV2's 7 x 7 1x1 convs took 2.6 times as long as
    7, 5 + 2 of ResNet-18's 512-channel 3x3 conv 1.4 times."""
    def partial_ok(w: int) -> bool:
        last, tiles = ow % w, -(-ow // w)
        return (tiles >= 3 and 2 * last >= w) or (tiles == 2 and 8 * last >= 7 * w)

    return [w for w in range(1, min(ow, budget) + 1) if ow % w == 0 or partial_ok(w)]


def _issue_bound_tile(oc_chunks: int, oh: int, ow: int, budget: int, outer: int,
                      num_threads: int, max_oc_t: int) -> RegisterTile:
    """The tile that keeps both multiply-add pipes busiest. Per step of the reduction a tile of
    ``c`` columns issues ``oc_t * oh_t * c`` multiply-adds and ``oc_t + oh_t * c`` loads
    (weight vectors and broadcast pixels), :data:`_FMA_PIPES` of each a cycle, and takes at
    least the time of :data:`_MIN_STEP_FMAS` multiply-adds (each accumulator depends on its
    previous step); a row's last tile computes its valid columns only. Useful multiply-adds
    over those cycles rank the tiles; ties go to the one of fewer rows, then to the largest
    (fewer tiles, less loop and epilogue work per output: a stem's 3-channel steps are short),
    then to the one reusing each weight vector for the most pixels.

    Measured on one Zen 5 core: ResNet-18's 64-channel 3x3 convolution at 56 x 56 ran at 243
    GFLOP/s with 1 x 28 columns (29 loads for 28 multiply-adds), 259-267 with 2 channel blocks
    x 8 or 12 columns (96-99% of the FMA peak); its 7x7 stem 245, 231 and 264. At 256 x 256
    (power-of-two widths) the size-first rule took 4 blocks x 4 columns, which ran ResNet-34's
    3x3 convs at 230-235 GFLOP/s on two cores, these tiles at 480-527."""
    best: tuple[tuple[float, ...], RegisterTile] | None = None
    for oc_t in (d for d in divisors(oc_chunks) if d <= max_oc_t):
        for oh_t in divisors(oh):
            for ow_t in _issue_bound_widths(ow, budget):
                tile = RegisterTile(oc_t, oh_t, ow_t)
                if tile.size > budget - (oc_t - 1):
                    continue
                # issue slots (1 / _FMA_PIPES cycle each) of one reduction step over a row
                slots = 0
                for start in range(0, ow, ow_t):
                    cols = oh_t * min(ow_t, ow - start)
                    slots += max(oc_t * cols, oc_t + cols, _MIN_STEP_FMAS) \
                        + _STEP_OVERHEAD * oh_t
                rate = round(oc_t * oh_t * ow / slots, 3)
                chunks = outer * (oc_chunks // oc_t) * (oh // oh_t)
                key = (min(chunks, 4 * num_threads), rate, -oh_t, tile.size, oh_t * ow_t)
                if best is None or key > best[0]:
                    best = (key, tile)
    assert best is not None
    return best[1]


def _widest_load_bound(oc_chunks: int, oh: int, ow: int, budget: int, outer: int,
                       num_threads: int, max_oc_t: int, extra_loads: int) -> RegisterTile | None:
    """:func:`_load_bound_tile`'s choice among tiles loading at most ``extra_loads`` vectors
    more than they have multiply-adds."""
    best: tuple[tuple[float, ...], RegisterTile] | None = None
    for oc_t in (d for d in divisors(oc_chunks) if d <= max_oc_t):
        for ow_t in range(1, min(ow, budget) + 1):
            tile = RegisterTile(oc_t, 1, ow_t)
            loads = oc_t + ow_t
            slots = -(-ow // ow_t) * ow_t
            if tile.size > budget - (oc_t - 1) or loads > tile.size + extra_loads \
                    or (slots - ow) * 8 >= ow \
                    or (ow <= budget and slots != ow):  # a row that fits is tiled exactly
                continue
            chunks = outer * (oc_chunks // oc_t) * oh
            key = (min(chunks, 4 * num_threads), tile.size * ow / slots, tile.size / loads, ow_t)
            if best is None or key > best[0]:
                best = (key, tile)
    return None if best is None else best[1]


def schedule_pad(state: State, sid: int, target: TargetInfo) -> None:
    """Padding materialised once: ``(n, c, h)`` fused and parallel, the channel block vectorized.

    Parameters
    ----------
    state : State
        The state to extend.
    sid : int
        Stage id of the 5-D ``pad_temp`` stage.
    target : TargetInfo
        Usable cores.
    """
    n, c, h, w, cb = state.stages[sid].iters
    fused = state.fuse(sid, [n, c, h])
    size = 1
    for d in state.stages[sid].op.output_shape(0):
        size *= d
    if target.num_threads > 1 and size >= PARALLEL_MIN_WORK:
        state.parallel(sid, fused)
    block = cb.extent or 1
    if block > 1 and block & (block - 1) == 0:
        state.vectorize(sid, len(state.stages[sid].iters) - 1)
        return
    # a channel block that is not a vector (the 3 colour channels of a stem): each padded row
    # is one run of w * block elements, vectorized as such (its interior as plain vectors);
    # element by element, the padding of a 640x640 image took as long as the stem conv after it
    lanes = target.lanes(state.stages[sid].op.output_dtype(0))
    row = state.fuse(sid, [w, cb])
    if (row.extent or 0) >= 4 * lanes:
        _, inner = state.split(sid, row, [lanes])
        state.vectorize(sid, inner)


def schedule_epilogue_tile(state: State, out: int, tile: RegisterTile, work: int,
                           target: TargetInfo, rows_outer: bool = False, band: int = 1) -> int:
    """Tile the 5-D output stage and return the loop to compute the accumulator at.

    The output's loops ``(n, oc_chunk, oh, ow, oc_block)`` become ``(n@oc.0@oh.0 [parallel],
    ow.0, oc.1, oh.1, ow.1 [unrolled], oc_block [vectorized])``; with ``rows_outer`` the
    parallel loop is ``n@oh.0@oc.0`` (each input row is read for every channel tile while it is
    in cache, the weights cycling instead). With ``band > 1``, ``oh.0`` is split by ``band``
    and its inner part runs between the parallel loop and ``ow.0``.

    Parameters
    ----------
    state : State
        The state to extend.
    out : int
        Stage id of the output stage.
    tile : RegisterTile
        The register tile.
    work : int
        Multiply-adds of the whole function (decides whether the loop runs in parallel).
    target : TargetInfo
        Usable cores.
    rows_outer : bool
        Rows outside the channel tiles in the parallel loop.
    band : int
        Rows of tiles per iteration of the parallel loop (a divisor of ``oh / oh_t``).

    Returns
    -------
    int
        The iterator id of ``ow.0`` in the output stage.
    """
    n, oc, oh, ow, ocb = state.stages[out].iters
    oc0, oc1 = state.split(out, oc, [tile.oc_t])
    oh0, oh1 = state.split(out, oh, [tile.oh_t])
    ow0, ow1 = state.split(out, ow, [tile.ow_t])
    rows = [oh0]
    if band > 1:
        rows = list(state.split(out, oh0, [band]))
    outer = [n, rows[0], oc0] if rows_outer else [n, oc0, rows[0]]
    state.reorder(out, [*outer, *rows[1:], ow0, oc1, oh1, ow1, ocb])
    fused = state.fuse(out, outer)
    if target.num_threads > 1 and work >= PARALLEL_MIN_WORK:
        state.parallel(out, fused)
    at = len(rows)
    for it in (at + 1, at + 2, at + 3):
        state.unroll(out, it)
    block = ocb.extent or 1
    if block > 1 and block & (block - 1) == 0:
        state.vectorize(out, at + 4)
    return at


def reduce_extents(op: ComputeOp) -> list[int]:
    """The extents of ``op``'s reduction axes (constant in a template's DAG)."""
    extents = []
    for iv in op.reduce_axis:
        assert iv.dom is not None and isinstance(iv.dom.extent, E.IntImm)
        extents.append(iv.dom.extent.value)
    return extents


@register_template(*CONV2D_NCHWC_TAGS)
def schedule_conv2d_nchwc(dag: ComputeDAG, target: TargetInfo) -> State | None:
    """The register-tiled schedule of a fused ``conv2d_NCHWc`` function (see the module
    docstring); ``None`` for other DAGs.

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
    pattern = match_nchwc(dag, CONV2D_NCHWC_TAGS)
    if pattern is None:
        return None
    conv = dag.ops[pattern.main]
    assert isinstance(conv, ComputeOp)
    weights = [t for t in conv.input_tensors() if len(t.shape) == 6]
    if len(conv.shape) != 5 or len(weights) != 1 or len(conv.reduce_axis) != 3:
        return None
    ic_bn = weights[0].shape[4]
    batch, oc_chunks, oh, ow, block = conv.shape
    budget = register_budget(target)
    narrow = block < target.lanes("float32")  # 8 lanes with AVX-512
    data_chunks = max(t.shape[1] for t in conv.input_tensors() if len(t.shape) == 5)
    groups = max(1, data_chunks // weights[0].shape[1])
    # a tile's channel blocks share their broadcast inputs only within one group
    per_group = [d for d in divisors(oc_chunks // groups) if d <= 4]
    # a strided (or dilated) window is read in place, each load outside the input replaced by
    # zero (see the end): the bound tests in the reduction made the speed of a tile filling the
    # 16 registers depend on where its loops fell in the code (ResNet-18's 128 -> 256 channel
    # stride-2 3x3 conv, AVX2 build: 0.95-1.27 ms by code alignment alone, the load-bound tile
    # 0.92)
    in_place = pattern.pad is not None and strided_window(dag, pattern, reduce_extents(conv)[1])
    tile = choose_register_tile(oc_chunks, oh, ow, budget, batch, target.num_threads,
                                max_oc_t=max(per_group),
                                load_bound=budget <= _SIXTEEN_REGISTER_BUDGET or narrow,
                                issue_bound=True, fill_registers=not in_place)
    work = math.prod(conv.shape) * math.prod(reduce_extents(conv))
    state = dag.init_state
    inline_epilogue(state, pattern)
    local = state.cache_write(pattern.main, "local")
    out = pattern.output + 1
    if pattern.epilogue:
        state.compute_inline(local + 1)
    # weights that stay in L2 across rows: better read each input row once for all channels
    rows_outer = math.prod(weights[0].shape) * 4 <= L2_RESIDENT_BYTES
    at = schedule_epilogue_tile(state, out, tile, work, target, rows_outer)
    state.compute_at(local, out, at)
    n, oc, y, x, ocb, rc, ry, rx = state.stages[local].iters
    rc0, rc1 = state.split(local, rc, [ic_bn])
    state.reorder(local, [n, rc0, ry, rx, rc1, y, x, oc, ocb])
    if not rows_outer and oc_chunks > tile.oc_t:
        # weights beyond L2, read from memory once per channel tile: each row of a tile streams
        # its share of the next tile's into L2 while it computes (ResNet-18's 512-channel 3x3
        # convs at 7 x 7 in a whole-model run, one Zen 5 core: 1.41 -> 0.97 ms)
        state.pragma(local, 1, f"{PREFETCH_NEXT_TILE}${oh // tile.oh_t}")
    for it in (5, 6, 7):
        state.unroll(local, it)
    if block > 1 and block & (block - 1) == 0:
        state.vectorize(local, 8)
    if pattern.pad is not None:
        if in_place:
            # a strided (or dilated) convolution reads its input in place, each load outside
            # the input replaced by zero, as strided windows do
            # (:mod:`kiln.te.templates.depthwise`): same process, alternating, one Zen 5 core,
            # ResNet-18 1.6% faster, YOLOv8n 2.7%, MobileNetV2 1.4% (its 3x3 stride-2 stem 129 ->
            # 111 us), two cores 3-3.5%. At stride 1 the padded copy stays: reading in place,
            # CRNN's 3x3 convolutions over a few rows took 4% longer.
            state.compute_inline(pattern.pad)
        else:
            schedule_pad(state, pattern.pad, target)
    return state
