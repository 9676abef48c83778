"""The default GPU schedule, written as Ansor steps with thread bindings (TVM's record codes).

One GPU thread computes one output element:

* Injective stages that are not outputs are inlined into their readers (padding included: the
  reduction then tests its bounds in registers instead of reading a padded copy).
* A reduction (other than a row reduction, below) whose only reader is one stage that reads it
  element for element at its own coordinates (a convolution or matrix product under its bias,
  activation and residual add) is computed at that reader's thread loop (``CA``): its
  accumulator is a one-element local buffer, a register, and the epilogue is applied before the
  single store.
* Every other stage (the outputs, reductions read across elements such as softmax's maximum and
  sum) is computed at the root: its spatial loops are fused (``FU``), split by the block size
  (``SP``) and bound to ``blockIdx.x`` / ``threadIdx.x`` (``AN`` 5 and 6); its reduction loops run
  in each thread. A reduction over at least :data:`ROW_REDUCTION_MIN` elements into at most
  :data:`ROW_REDUCTION_MAX_OUTPUTS` outputs (a layer norm's or a softmax's rows) instead gets a
  block per output, whose threads split the reduction between them and combine their results in
  shared memory (its reduction loop bound to ``threadIdx.x``). Each such stage becomes one kernel
  launch; the code generator keeps the buffers between them in device memory.

Consecutive threads take consecutive output elements (the last axis is innermost in the fused
loop), so stores and the reads that follow the output coalesce.

Matrix products (``nn.dense``, ``nn.matmul``, ``nn.batch_matmul``) under an element-wise epilogue
get the tiled schedule of Ansor's GPU sketches instead (:func:`schedule_gpu_contraction`): a block
computes a ``(TY*RM) x (TX*RN)`` tile of the output, each of its ``TY*TX`` threads an ``RM x RN``
register tile, accumulating over chunks of ``KT`` of the reduction that the block first copies
into shared memory, all threads together (``CHR`` shared, ``CA``, ``FU``/``SP``/``AN``
threadIdx.x); the shared rows are padded by one element (``SA``) so that the threads of a warp
read at most two to a bank.

Convolutions (``conv2d_nchw``, one group) under an element-wise epilogue are tiled the same way
(:func:`schedule_gpu_conv2d`): a block computes ``TF*RF`` output channels of a ``TY x (TX*RX)``
patch of one image, each thread ``RF`` channels of ``RX`` neighbouring pixels; per chunk of
``RCT`` input channels the block copies the padded input window and the weights it needs into
shared memory (the padding computed by the copy: ``CHR`` of ``pad_temp``, then ``CI``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

from kiln.te import expr as E
from kiln.te.bound import resolve_inlined
from kiln.te.dag import ComputeDAG
from kiln.te.default_schedule import inline_injective, is_output
from kiln.te.loop_state import IteratorAnnotation, State
from kiln.te.schedule import Schedule
from kiln.te.simplify import Simplifier
from kiln.te.templates.dense import DENSE_TAGS, epilogue_is_elementwise, find_contraction
from kiln.te.tensor import ComputeOp
from kiln.te.visit import post_order, substitute

__all__ = ["ConvBlockTile", "GemmBlockTile", "MAX_BLOCK_THREADS", "block_threads",
           "choose_conv_block_tile", "choose_gemm_block_tile", "gpu_schedule",
           "schedule_gpu_contraction", "schedule_gpu_conv2d"]

_CONTRACTION_TAGS = (*DENSE_TAGS, "batch_matmul")
#: Outputs below which a convolution keeps one thread per output: on an H200, ResNet-50 at batch 1
#: (every layer under 2^20 outputs) ran in 4.97 ms that way and 8.3 ms tiled; at batch 16 in
#: 29.0 ms that way and 17.9 ms tiled.
CONV_TILE_MIN_OUTPUTS = 1 << 20
#: Shared memory a tiled convolution's block may take (of the 48 KiB every GPU has).
SHARED_BUDGET_BYTES = 40 << 10

#: Threads per block of the default schedule when the stage has enough elements.
MAX_BLOCK_THREADS = 256
# Blocks wanted before the block size grows to MAX_BLOCK_THREADS: enough to give every
# multiprocessor of a large GPU (132 on an H100) a block.
_MIN_BLOCKS = 128
#: Reduction extent from which a reduction computed at the root gives each output (row) a block
#: of threads (a row of BERT's layer norm: 768).
ROW_REDUCTION_MIN = 64
#: ... and up to this many outputs (a convolution's outputs keep a thread each: BERT-base at
#: batch 16 has 24576 softmax rows, ResNet-50's smallest layer at batch 1 100352 outputs).
ROW_REDUCTION_MAX_OUTPUTS = 1 << 15
#: Blocks a tiled schedule should give the GPU: two per multiprocessor of a large one.
WAVE_BLOCKS = 2 * _MIN_BLOCKS
_WARP = 32


def block_threads(elements: int) -> int:
    """Threads per block for a stage of ``elements`` outputs: a whole number of warps, as many as
    leave :data:`_MIN_BLOCKS` blocks, between one warp and :data:`MAX_BLOCK_THREADS`."""
    per_block = max(1, elements // _MIN_BLOCKS)
    threads = _WARP
    while threads * 2 <= min(per_block, MAX_BLOCK_THREADS):
        threads *= 2
    return threads


def gpu_schedule(dag: ComputeDAG) -> State:
    """The default GPU schedule of ``dag`` (see the module docstring).

    Returns
    -------
    State
        The scheduled state; its steps replay on ``dag`` and print as a TVM tuning record.
    """
    tiled = schedule_gpu_contraction(dag) or schedule_gpu_conv2d(dag)
    if tiled is not None:
        return tiled
    state = dag.init_state
    inline_injective(dag, state)
    sch = dag.apply_steps(state.transform_steps)
    bodies = resolve_inlined(sch)
    computed = [i for i, op in enumerate(dag.ops)
                if isinstance(op, ComputeOp) and state.stages[i].compute_at == 0]
    attach: dict[int, int] = {}
    for i in computed:
        op = dag.ops[i]
        assert isinstance(op, ComputeOp)
        if op.is_reduction and op.num_outputs == 1 and not is_output(dag, op) \
                and not _row_reduction(op):
            reader = _sole_elementwise_reader(dag, computed, bodies, sch, i)
            if reader is not None and reader not in attach:
                attach[i] = reader
    for i in computed:
        if i not in attach:
            _bind_threads(state, i)
    for i, reader in attach.items():
        if len(state.stages[reader].iters) > 1 and _bound(state, reader):
            state.compute_at(i, reader, 1)
        else:
            _bind_threads(state, i)
    return state


def _bound(state: State, sid: int) -> bool:
    return state.stages[sid].iters[1].annotation == IteratorAnnotation.THREAD_X


def _bind_threads(state: State, sid: int) -> None:
    stage = state.stages[sid]
    op = stage.op
    assert isinstance(op, ComputeOp)
    n = len(op.axis)
    if _row_reduction(op):
        _bind_row_reduction(state, sid, op)
        return
    if n == 0:
        return  # a scalar: one thread
    elements = 1
    for d in op.shape:
        elements *= int(d)
    if n > 1:
        state.fuse(sid, list(range(n)))
    threads = block_threads(elements)
    state.split(sid, 0, [threads])
    state.bind(sid, 0, "blockIdx.x")
    state.bind(sid, 1, "threadIdx.x")


def _row_reduction(op: ComputeOp) -> bool:
    """Whether a reduction has few enough outputs, each long enough, for a block per output."""
    outputs = 1
    for d in op.shape:
        outputs *= int(d)
    return _reduce_extent(op) >= ROW_REDUCTION_MIN and outputs <= ROW_REDUCTION_MAX_OUTPUTS


def _reduce_extent(op: ComputeOp) -> int:
    """Iterations of a reduction of one value (0 for another stage)."""
    body = op.body[0]
    if len(op.body) != 1 or not isinstance(body, E.Reduce) or len(body.source) != 1:
        return 0
    extent = 1
    for iv in op.reduce_axis:
        if iv.dom is None or not isinstance(iv.dom.extent, E.IntImm):
            return 0
        extent *= iv.dom.extent.value
    return extent


def _bind_row_reduction(state: State, sid: int, op: ComputeOp) -> None:
    """One block per output element (row): its threads take every ``T``-th element of the
    reduction and combine their partial results in shared memory (``AN`` threadIdx.x on a
    reduction loop: a cross-thread reduction)."""
    n, extent = len(op.axis), _reduce_extent(op)
    threads = _WARP
    while threads * 2 <= min(MAX_BLOCK_THREADS, extent // 4):
        threads *= 2
    if n > 1:
        state.fuse(sid, list(range(n)))
    rows = min(n, 1)
    if len(op.reduce_axis) > 1:
        state.fuse(sid, list(range(rows, rows + len(op.reduce_axis))))
    state.split(sid, rows, [threads])
    if rows:
        state.bind(sid, 0, "blockIdx.x")
    state.bind(sid, rows + 1, "threadIdx.x")


def _sole_elementwise_reader(dag: ComputeDAG, computed: list[int],
                             bodies: dict[int, tuple[E.PrimExpr, ...]], sch: Schedule,
                             producer: int) -> int | None:
    """The one computed stage that reads stage ``producer``, when it reads it only at its own
    coordinates (same shape, indices its axis variables in order); else None."""
    prod_op = dag.ops[producer]
    key = prod_op.output(0).key
    stages = sch.stages
    reader: int | None = None
    for i in computed:
        if i == producer:
            continue
        op = dag.ops[i]
        assert isinstance(op, ComputeOp)
        loads = [n for b in bodies[id(stages[i])] for n in post_order(b)
                 if isinstance(n, E.TensorLoad) and n.tensor.key == key]
        if not loads:
            continue
        if reader is not None or tuple(op.shape) != tuple(prod_op.output(0).shape):
            return None
        axes = [iv.var for iv in op.axis]
        if any(len(ld.indices) != len(axes) or any(x is not v for x, v in zip(ld.indices, axes))
               for ld in loads):
            return None
        reader = i
    return reader


@dataclass(frozen=True)
class GemmBlockTile:
    """A block's tile of a matrix product: ``ty x tx`` threads, each ``rm x rn`` outputs, over
    reduction chunks of ``kt``."""

    ty: int
    rm: int
    tx: int
    rn: int
    kt: int

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.ty * self.tx


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def choose_gemm_block_tile(rows: int, cols: int, depth: int, batch: int = 1) -> GemmBlockTile:
    """The block tile for ``batch`` products of ``rows x cols`` over ``depth``: 4 x 4 outputs per
    thread and 16 x 16 threads (a 64 x 64 tile) where the product is that large, fewer along a
    short side; the register tile shrinks (to 1 x 1) while that leaves fewer than
    :data:`WAVE_BLOCKS` blocks (BERT-base at batch 1: 128 x 768 is 24 blocks of 64 x 64)."""
    rn = 4 if cols >= 64 else 1
    rm = 4 if rows >= 64 else 2 if rows >= 16 else 1
    tx = min(16 if rows > 1 else 64, _pow2_at_least(-(-cols // rn)))
    ty = min(MAX_BLOCK_THREADS // tx, 16, _pow2_at_least(-(-rows // rm)))
    while batch * -(-rows // (ty * rm)) * -(-cols // (tx * rn)) < WAVE_BLOCKS and rm * rn > 1:
        if rn >= rm:
            rn //= 2
        else:
            rm //= 2
    return GemmBlockTile(ty, rm, tx, rn, min(16, depth))


def schedule_gpu_contraction(dag: ComputeDAG) -> State | None:
    """The tiled GPU schedule of a matrix product whose readers are element-wise (see the
    module docstring), or None for another DAG."""
    c = find_contraction(dag, _CONTRACTION_TAGS)
    if c is None or c.op.output_dtype(0) != "float32":
        return None
    outputs = [i for i, op in enumerate(dag.ops) if isinstance(op, ComputeOp) and is_output(dag, op)]
    if len(outputs) != 1 or not epilogue_is_elementwise(dag, c.op):
        return None
    state = dag.init_state
    inline_injective(dag, state)
    acc_name = c.op.name
    operands = [i for i, op in enumerate(dag.ops) if not isinstance(op, ComputeOp)
                and any(t.op is op for t in c.op.input_tensors())]
    if len(operands) != 2:
        return None
    names = [dag.ops[sid].name for sid in operands]
    for name in names:
        state.cache_read(_stage_named(state, name), "shared", [_stage_named(state, acc_name)])
    acc, out = _accumulator_and_output(state, dag, c.op, outputs[0] + len(names))
    tile = choose_gemm_block_tile(c.rows, c.cols, c.depth, prod(c.op.shape[:-2]))
    nb = c.batch_axes
    # output: (*batch, i, j) -> (*batch, io, ty, ri, jo, tx, rj) -> (block, thread, ri, rj)
    state.split(out, nb, [tile.ty, tile.rm])
    state.split(out, nb + 3, [tile.tx, tile.rn])
    io, ty, ri, jo, tx, rj = range(nb, nb + 6)
    state.reorder(out, [*range(nb), io, jo, ty, tx, ri, rj])
    state.fuse(out, list(range(nb + 2)))
    state.fuse(out, [1, 2])
    state.bind(out, 0, "blockIdx.x")
    state.bind(out, 1, "threadIdx.x")
    state.unroll(out, 2)
    state.unroll(out, 3)
    state.compute_at(acc, out, 1)
    # the product at each thread: (*batch, i, j, k) -> (ko, ki, *batch, i, j)
    state.split(acc, nb + 2, [tile.kt])
    state.reorder(acc, [nb + 2, nb + 3, *range(nb + 2)])
    for k in range(1, nb + 4):  # the chunk's steps and the thread's tile, written out
        state.unroll(acc, k)
    for name in names:
        _cooperative_copy(state, _stage_named(state, f"{name}.shared"), acc, tile.threads,
                          pad_rows=True)
    return state


def _accumulator_and_output(state: State, dag: ComputeDAG, anchor: ComputeOp,
                            output: int) -> tuple[int, int]:
    """The stage accumulating a tiled anchor (in registers) and the output stage written from
    it: a local cache of the anchor when the anchor is the output (``CHW``), else the anchor and
    ``output`` (the output's stage id after the shared copies were inserted)."""
    if is_output(dag, anchor):
        state.cache_write(_stage_named(state, anchor.name), "local")
        return _stage_named(state, f"{anchor.name}.local"), _stage_named(state, anchor.name)
    return _stage_named(state, anchor.name), output


def _cooperative_copy(state: State, shared: int, acc: int, threads: int,
                      pad_rows: bool = False) -> None:
    """A shared-memory copy computed at the accumulator's outer reduction loop, its elements
    spread over the block's ``threads`` (``CA``, ``FU``, ``SP``, ``AN`` threadIdx.x); with
    ``pad_rows`` its rows one element longer than a multiple of 16 (``SA``: fewer bank
    conflicts when threads read down a column)."""
    state.compute_at(shared, acc, 0)
    axes = len(state.stages[shared].iters)
    if pad_rows:
        state.storage_align(shared, axes - 2, 16, 1)
    state.fuse(shared, list(range(axes)))
    state.split(shared, 0, [threads])
    state.bind(shared, 1, "threadIdx.x")


def _stage_named(state: State, name: str) -> int:
    return next(i for i, st in enumerate(state.stages) if st.op.name == name)


@dataclass(frozen=True)
class ConvBlockTile:
    """A block's tile of a convolution: ``tf x ty x tx`` threads, each ``rf`` output channels of
    ``rx`` pixels of a row, over input-channel chunks of ``rct``."""

    tf: int
    rf: int
    ty: int
    tx: int
    rx: int
    rct: int

    @property
    def threads(self) -> int:
        """Threads per block."""
        return self.tf * self.ty * self.tx


def _largest_divisor(n: int, limit: int) -> int:
    return max(d for d in range(1, max(1, min(n, limit)) + 1) if n % d == 0)


def choose_conv_block_tile(channels: int, height: int, width: int, depth: int,
                           window: tuple[int, int, int, int, int, int] = (1, 1, 1, 1, 1, 1),
                           batch: int = 1) -> ConvBlockTile | None:
    """The block tile of a convolution with ``channels`` outputs of ``height x width`` over
    ``depth`` input channels: up to 8 channels x 4 pixels per thread where the layer is that
    large (on an H200, ResNet-50 at batch 16 took 18.2 ms with it, 19.8 ms with 4 x 2), the
    block's pixels a divisor of the row where one is close to 16 wide; then made smaller
    until its shared copies fit :data:`SHARED_BUDGET_BYTES`, and its channels per thread fewer
    while that leaves under :data:`WAVE_BLOCKS` blocks. ``window`` is ``(kh, kw, stride_h,
    stride_w, dilation_h, dilation_w)``. None when even the smallest tile does not fit."""
    rf = 8 if channels >= 128 else 4 if channels >= 64 else 2 if channels >= 16 else 1
    tf = min(8, max(1, channels // rf))
    rx = 4 if width >= 28 else 2 if width >= 14 else 1
    cols = -(-width // rx)
    tx = _largest_divisor(cols, 16)
    if tx < 7:
        tx = min(16, cols)
    ty = min(height, max(1, MAX_BLOCK_THREADS // (tf * tx)))
    if height % ty:
        ty = max(_largest_divisor(height, ty), (ty + 1) // 2)
    tile = ConvBlockTile(tf, rf, ty, tx, rx, min(8, depth))
    while _conv_shared_bytes(tile, window) > SHARED_BUDGET_BYTES:
        if tile.rct > 1:
            tile = replace(tile, rct=(tile.rct + 1) // 2)
        elif tile.ty > 1:
            tile = replace(tile, ty=tile.ty // 2)
        elif tile.rx > 1:
            tile = replace(tile, rx=1)
        elif tile.tx > 1:
            tile = replace(tile, tx=tile.tx // 2)
        elif tile.rf > 1:
            tile = replace(tile, rf=tile.rf // 2)
        elif tile.tf > 1:
            tile = replace(tile, tf=tile.tf // 2)
        else:
            return None

    def blocks(t: ConvBlockTile) -> int:
        return batch * -(-channels // (t.tf * t.rf)) * -(-height // t.ty) \
            * -(-width // (t.tx * t.rx))

    while blocks(tile) < WAVE_BLOCKS and tile.rf > 1:
        tile = replace(tile, rf=tile.rf // 2)
    return tile


def _conv_shared_bytes(tile: ConvBlockTile, window: tuple[int, int, int, int, int, int]) -> int:
    kh, kw, sh, sw, dh, dw = window
    rows = (tile.ty - 1) * sh + (kh - 1) * dh + 1
    cols = (tile.tx * tile.rx - 1) * sw + (kw - 1) * dw + 1
    return 4 * tile.rct * (rows * cols + tile.tf * tile.rf * kh * kw)


def _conv_window(conv: ComputeOp, pad: ComputeOp) -> tuple[int, int, int, int, int, int] | None:
    """``(kh, kw, stride_h, stride_w, dilation_h, dilation_w)`` read off the convolution's load of
    its padded input: each index's step per output pixel and per kernel tap."""
    loads = [n for b in conv.body for n in post_order(b)
             if isinstance(n, E.TensorLoad) and n.tensor.op is pad]
    if len(loads) != 1 or len(loads[0].indices) != 4:
        return None
    zero = {iv.var: E.const(0) for iv in (*conv.axis, *conv.reduce_axis)}
    simp = Simplifier()

    def step(index: E.PrimExpr, var: E.Var) -> int | None:
        at = [simp.simplify(substitute(index, {**zero, var: E.const(v)})) for v in (0, 1)]
        if not (isinstance(at[0], E.IntImm) and isinstance(at[1], E.IntImm)):
            return None
        return int(at[1].value) - int(at[0].value)

    _, _, y, x = (iv.var for iv in conv.axis)
    _, ry, rx = conv.reduce_axis
    found = [step(loads[0].indices[2], y), step(loads[0].indices[3], x),
             step(loads[0].indices[2], ry.var), step(loads[0].indices[3], rx.var)]
    if any(f is None or f < 1 for f in found) or ry.dom is None or rx.dom is None \
            or not isinstance(ry.dom.extent, E.IntImm) or not isinstance(rx.dom.extent, E.IntImm):
        return None
    sh, sw, dh, dw = (int(f) for f in found)  # type: ignore[arg-type]
    return ry.dom.extent.value, rx.dom.extent.value, sh, sw, dh, dw


def schedule_gpu_conv2d(dag: ComputeDAG, min_outputs: int = CONV_TILE_MIN_OUTPUTS) -> State | None:
    """The tiled GPU schedule of a one-group NCHW convolution of at least ``min_outputs`` outputs
    whose readers are element-wise (see the module docstring), or None for another DAG."""
    convs = [op for op in dag.ops if isinstance(op, ComputeOp) and op.tag == "conv2d_nchw"
             and op.is_reduction]
    if len(convs) != 1:
        return None
    conv = convs[0]
    outputs = [i for i, op in enumerate(dag.ops) if isinstance(op, ComputeOp) and is_output(dag, op)]
    if conv.output_dtype(0) != "float32" or len(conv.axis) != 4 or len(conv.reduce_axis) != 3 \
            or len(outputs) != 1 or not epilogue_is_elementwise(dag, conv):
        return None
    inputs = [t.op for t in conv.input_tensors()]
    pads = [op for op in inputs if isinstance(op, ComputeOp)]
    weights = [op for op in inputs if not isinstance(op, ComputeOp)]
    if len(pads) != 1 or len(weights) != 1 or pads[0].is_reduction:
        return None
    pad, weight = pads[0], weights[0]
    batch, channels, height, width = (int(d) for d in conv.shape)
    if batch * channels * height * width < min_outputs:
        return None
    dom = conv.reduce_axis[0].dom
    assert dom is not None and isinstance(dom.extent, E.IntImm)
    window = _conv_window(conv, pad)
    tile = None if window is None else choose_conv_block_tile(channels, height, width,
                                                              dom.extent.value, window, batch)
    if tile is None:
        return None
    state = dag.init_state
    inline_injective(dag, state, keep=lambda _, op: op is pad)
    state.cache_read(_stage_named(state, pad.name), "shared", [_stage_named(state, conv.name)])
    state.compute_inline(_stage_named(state, pad.name))  # the shared copy pads
    state.cache_read(_stage_named(state, weight.name), "shared", [_stage_named(state, conv.name)])
    acc, out = _accumulator_and_output(state, dag, conv, outputs[0] + 2)
    # output (n, f, y, x) -> (n, fo, tf, rf, yo, ty, xo, tx, rx) -> (block, thread, rf, rx)
    state.split(out, 1, [tile.tf, tile.rf])
    state.split(out, 4, [tile.ty])
    state.split(out, 6, [tile.tx, tile.rx])
    state.reorder(out, [0, 1, 4, 6, 2, 5, 7, 3, 8])
    state.fuse(out, [0, 1, 2, 3])
    state.fuse(out, [1, 2, 3])
    state.bind(out, 0, "blockIdx.x")
    state.bind(out, 1, "threadIdx.x")
    state.unroll(out, 2)
    state.unroll(out, 3)
    state.compute_at(acc, out, 1)
    # the convolution at each thread: (n, f, y, x, rc, ry, rx) -> (rco, rci, ry, rx, n, f, y, x)
    state.split(acc, 4, [tile.rct])
    state.reorder(acc, [4, 5, 6, 7, 0, 1, 2, 3])
    for k in range(2, 8):
        state.unroll(acc, k)
    for name in (f"{pad.name}.shared", f"{weight.name}.shared"):
        _cooperative_copy(state, _stage_named(state, name), acc, tile.threads)
    return state
