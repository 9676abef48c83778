"""Register-tiled schedules for matrix products: ``dense_pack``, ``dense`` and ``matmul``.

A product stage ``C[..., i, j] = sum_k A[..., i, k] * B[..., k, j]`` (any operand layout the
computes of :mod:`kiln.op.compute_nn` and :mod:`kiln.op.nn_pack` produce) is scheduled in one of
two ways, as plain Ansor steps (so the schedule prints, is recorded and replays like a tuned one):

**Broadcast-A** when ``B`` is contiguous along the output columns ``j`` (packed dense ``NC{n}n``,
``matmul``/``batch_matmul`` with an untransposed right operand). The output is cut into
``rows x (vectors x lanes)`` register tiles. The product is computed at the tile loop of the
output stage (directly when element-wise stages follow it, else through a ``cache_write``
stage), with its loops ordered ``k.outer, k.inner, rows, vectors, lanes``: ``k.inner``, the rows
and the vectors unrolled, the lanes vectorized. Each step of ``k`` thus loads ``vectors``
vectors of ``B``, broadcasts ``rows`` scalars of ``A`` and issues ``rows x vectors`` fused
multiply-adds into accumulators that the C compiler keeps in registers (the tile buffer is
small, local and only indexed by constants). The epilogue (bias, activation, residual add: the
element-wise stages after the product, inlined into the output stage) then reads the tile once,
vectorized, and stores each output element once. Tiles run column panel outer, rows inner, so
that a panel of ``B`` stays in cache while ``A`` streams, and the tile loops (with any batch
axes) are fused into one parallel loop.

**Dot** when both operands are contiguous along ``k`` (``dense`` with an unpacked weight,
``matmul`` with a transposed right operand). ``k`` is split by the vector width and factored
(``rfactor``) into a stage of per-lane partial sums computed at the output tile: ``rows x cols``
vector accumulators, loaded ``rows + cols`` vectors per step; the lanes are summed once per
output element at the end.

Tile sizes come from :func:`choose_gemm_tile`: the row count that wastes the fewest padded rows
(a row count that does not divide ``M`` is handled by bound checks), enough accumulators to
hide the multiply-add latency and no more than the register file holds. When element-wise
stages after the product read it other than element by element (a reshape, a transpose), the
product is materialized at the root with the same register tiling and the rest is scheduled by
:func:`~kiln.te.templates.elemwise.schedule_pointwise`.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from kiln.te import expr as E
from kiln.te.dag import ComputeDAG
from kiln.te.loop_ir import UNSWITCH_TILE_GUARDS
from kiln.te.loop_state import State
from kiln.te.templates.elemwise import (
    has_call,
    inline_all_but,
    output_stage_ids,
    schedule_pointwise,
)
from kiln.te.templates.registry import TargetInfo, register_template
from kiln.te.tensor import ComputeOp
from kiln.te.visit import post_order

__all__ = [
    "DENSE_PACK_TAGS",
    "DENSE_TAGS",
    "Contraction",
    "GemmTile",
    "choose_gemm_tile",
    "epilogue_is_elementwise",
    "find_contraction",
    "schedule_contraction",
    "schedule_dense",
    "schedule_dense_pack",
    "stream_panel",
]

# Compute tags of the products: ``nn.contrib_dense_pack``; ``nn.dense`` and ``nn.matmul``.
DENSE_PACK_TAGS = ("dense_pack",)
DENSE_TAGS = ("dense", "matmul")
# Dtypes the register-tiled schedules handle (the C generator vectorizes them).
_FLOAT_DTYPES = ("float32", "float64")
# Independent multiply-add chains needed to keep the FMA units busy (latency x throughput).
# With 16 vector registers (AVX2) a tile needs the whole accumulator budget, 12: the loads of
# ``A`` and ``B`` per multiply-add also count (AVX2 build, Zen 5: a 6 x 2-vector tile 5% faster
# than 5 x 2 on MiniLM's products and attention, though it pads 128 rows to 132).
_MIN_CHAINS = 10
# Fewer multiply-adds than this run in one thread (a parallel region costs microseconds).
_PARALLEL_MIN_MACS = 1 << 16
# Bytes of ``B`` one unrolled iteration of ``k`` may load. A 128 x 512 matrix-vector product from
# L2 (Zen 5) took 1.1 us with 1 KB per iteration (one 128-column panel, ``k`` by 2) and 1.9 us
# with 2 KB (by 4). GEMM tiles (2 vectors, 512 B by 4) keep their unroll.
_MAX_UNROLLED_BYTES = 1024


@dataclass(frozen=True)
class Contraction:
    """A matrix-product stage and how its operands are laid out.

    Attributes
    ----------
    stage_id : int
        Id of the product stage in the DAG.
    op : ComputeOp
        The product: spatial axes ``(*batch, i, j)``, one reduction axis ``k``.
    kind : str
        ``"broadcast"`` (``B`` contiguous along ``j``) or ``"dot"`` (both contiguous along ``k``).
    panel : int
        Columns of ``B`` stored contiguously (the packed panel width, else the column count).
    """

    stage_id: int
    op: ComputeOp
    kind: str
    panel: int

    @property
    def rows(self) -> int:
        """``M``: extent of the row axis."""
        return self.op.shape[-2]

    @property
    def cols(self) -> int:
        """``N``: extent of the column axis."""
        return self.op.shape[-1]

    @property
    def depth(self) -> int:
        """``K``: extent of the reduction axis."""
        dom = self.op.reduce_axis[0].dom
        assert dom is not None and isinstance(dom.extent, E.IntImm)
        return dom.extent.value

    @property
    def batch_axes(self) -> int:
        """Number of leading (batch) axes before ``i, j``."""
        return len(self.op.shape) - 2


@dataclass(frozen=True)
class GemmTile:
    """A register tile: ``rows x (vectors x lanes)`` outputs, ``k`` unrolled by ``k_unroll``."""

    rows: int
    vectors: int
    lanes: int
    k_unroll: int

    @property
    def cols(self) -> int:
        """Columns of the tile."""
        return self.vectors * self.lanes


def _mentions(e: E.PrimExpr, var: E.Var) -> bool:
    return any(node is var for node in post_order(e))


def _operand_loads(op: ComputeOp) -> tuple[E.TensorLoad, E.TensorLoad] | None:
    """The two loads of ``sum_k cast(a) * cast(b)``, or None for another body."""
    body = op.body[0]
    if len(op.body) != 1 or not isinstance(body, E.Reduce) or len(body.source) != 1:
        return None
    combiner = body.combiner.result[0]
    if not (isinstance(combiner, E.Binary) and combiner.kind == "add"):
        return None
    if not (isinstance(body.condition, E.IntImm) and body.condition.value) or body.init:
        return None
    src = body.source[0]
    if not (isinstance(src, E.Binary) and src.kind == "mul"):
        return None
    loads = []
    for side in (src.a, src.b):
        while isinstance(side, E.Cast):
            side = side.value
        if not isinstance(side, E.TensorLoad):
            return None
        loads.append(side)
    return loads[0], loads[1]


def _last_is(load: E.TensorLoad, var: E.Var) -> bool:
    """Whether ``var`` indexes ``load`` exactly as its last index, and nowhere else."""
    if not load.indices:
        return False  # a 0-d tensor has no last index
    *outer, last = load.indices
    return last is var and not any(_mentions(i, var) for i in outer)


def _packed_panel(load: E.TensorLoad, var: E.Var) -> int | None:
    """``n`` when ``load`` reads ``[..., floordiv(var, n), ..., floormod(var, n)]``."""
    if not load.indices:
        return None  # a 0-d tensor has no last index
    *outer, last = load.indices
    if not (isinstance(last, E.Binary) and last.kind == "floormod" and last.a is var
            and isinstance(last.b, E.IntImm)):
        return None
    n = last.b.value
    uses = [i for i in outer if _mentions(i, var)]
    if len(uses) != 1:
        return None
    div = uses[0]
    if not (isinstance(div, E.Binary) and div.kind == "floordiv" and div.a is var
            and isinstance(div.b, E.IntImm) and div.b.value == n):
        return None
    return n


def find_contraction(dag: ComputeDAG, tags: tuple[str, ...]) -> Contraction | None:
    """The single matrix-product stage of ``dag`` with one of ``tags``, if the DAG has one.

    Parameters
    ----------
    dag : ComputeDAG
        The computation.
    tags : tuple of str
        Stage tags to look for (``"dense_pack"``, ``"dense"``, ``"matmul"``, ``"batch_matmul"``).

    Returns
    -------
    Contraction or None
        None when there is no such stage, more than one, or its operands cannot be tiled
        (dtype other than float32/float64, an operand read along neither ``j`` nor ``k``
        contiguously).
    """
    found = [(i, op) for i, op in enumerate(dag.ops)
             if isinstance(op, ComputeOp) and op.tag in tags and op.is_reduction]
    if len(found) != 1:
        return None
    sid, op = found[0]
    if len(op.shape) < 2 or len(op.reduce_axis) != 1 or op.output_dtype(0) not in _FLOAT_DTYPES:
        return None
    dom = op.reduce_axis[0].dom
    if 0 in op.shape or dom is None or not isinstance(dom.extent, E.IntImm) \
            or dom.extent.value < 1:
        return None  # an empty product: nothing to tile
    loads = _operand_loads(op)
    if loads is None or any(ld.dtype != op.output_dtype(0) for ld in loads):
        return None
    i, j = op.axis[-2].var, op.axis[-1].var
    k = op.reduce_axis[0].var
    for a, b in (loads, loads[::-1]):
        if any(_mentions(x, j) for x in a.indices) or any(_mentions(x, i) for x in b.indices):
            continue
        if _last_is(b, j):
            return Contraction(sid, op, "broadcast", op.shape[-1])
        panel = _packed_panel(b, j)
        if panel is not None:
            return Contraction(sid, op, "broadcast", panel)
        if _last_is(a, k) and _last_is(b, k):
            return Contraction(sid, op, "dot", op.shape[-1])
    return None


def _pow2_divisor(n: int, limit: int) -> int:
    """The largest power of two dividing ``n`` and at most ``limit``."""
    v = 1
    while v * 2 <= limit and n % (v * 2) == 0:
        v *= 2
    return v


def _pow2_floor(n: int) -> int:
    """The largest power of two at most ``n`` (``n >= 1``)."""
    return 1 << (n.bit_length() - 1)


def choose_gemm_tile(rows: int, cols: int, depth: int, panel: int, dtype: str,
                     target: TargetInfo) -> GemmTile:
    """The register tile of a broadcast-A product.

    Parameters
    ----------
    rows, cols, depth : int
        ``M``, ``N`` and ``K``.
    panel : int
        Columns of ``B`` stored contiguously: the panel width of a packed weight (a tile's
        vectors must then divide it, or each vector be a whole panel), or ``N``.
    dtype : str
        Accumulator dtype.
    target : TargetInfo
        Vector width and register count.

    Returns
    -------
    GemmTile
        Vectors of the register width (of the largest power of two dividing a packed panel).
        Among tiles of at most ``registers - 8`` (AVX-512: 24) or ``registers - 4`` (AVX2: 12)
        accumulators, and, for more than 3 rows (a product bound by its multiply-adds, not by
        streaming ``B``), with a register left for each of its ``B`` vectors and for ``A``'s
        broadcast (AVX2: 6 x 2 vectors, not 3 x 4, which spills: MiniLM's 128 x 384 x 1536
        product 1321 -> 1141 us, attention's 128 x 128 x 32 177 -> 96 us), the one with the
        least padding (rows and columns past the matrix are skipped by bound checks) and enough
        independent accumulators (``_MIN_CHAINS``) wins; ties prefer, for a
        product of up to 3 rows, a tile of one whole panel (one contiguous stream of ``B``), then
        two vectors per row (the measured best shape), then more rows (fewer loads of ``B``).
    """
    packed = panel != cols
    width = target.lanes(dtype)
    itemsize = target.vector_bytes // width
    lanes = _pow2_divisor(panel, width) if packed else min(width, _pow2_floor(cols))
    budget = _register_budget(target)
    min_chains = _MIN_CHAINS if target.vector_registers >= 32 else budget
    best: tuple[tuple[float, bool, int, int], GemmTile] | None = None
    for vectors in range(1, 9):
        tile_cols = vectors * lanes
        if packed and (cols % tile_cols or (panel % tile_cols and tile_cols % panel)):
            continue  # a tile within a panel, or whole panels
        padded_cols = -(-cols // tile_cols) * tile_cols
        for mr in range(1, min(rows, budget // vectors) + 1):
            if rows > 3 and mr > 1 and mr * vectors + vectors + 1 > target.vector_registers:
                continue  # the B vectors every row reuses and A's broadcast do not fit beside it
            padded = -(-rows // mr) * mr
            chains = min(1.0, mr * vectors / min_chains)
            whole = rows <= 3 and tile_cols == panel  # a streamed panel (``stream_panel``)
            score = (round(rows / padded * cols / padded_cols * chains, 3), whole,
                     -abs(vectors - 2), mr)
            if best is None or score > best[0]:
                best = (score, GemmTile(mr, vectors, lanes, _k_unroll(depth, vectors * lanes * itemsize)))
    assert best is not None  # one vector per row always qualifies
    return best[1]


def _k_unroll(depth: int, step_bytes: int) -> int:
    """Steps of ``k`` unrolled: 4, 2 or 1 (dividing ``depth``), at most ``_MAX_UNROLLED_BYTES`` of
    ``B`` loaded per unrolled iteration (``step_bytes`` per step)."""
    for unroll in (4, 2):
        if depth % unroll == 0 and unroll * step_bytes <= _MAX_UNROLLED_BYTES:
            return unroll
    return 1


def stream_panel(units: int, rows: int, lanes: int, vector_bytes: int) -> int | None:
    """The panel width of the packed weight of a product of at most 3 rows (a layer at batch 1,
    a recurrent step), or None when no width below suits.

    Such a product reads each weight once from the cache or memory, so its speed is that of the
    stream: a register tile that spans one panel reads one contiguous block, where a tile over
    several narrow panels reads one strided stream per panel. On Zen 5, a 128 x 512 float32
    product from L2 took 1.0-1.1 us with one 128-column panel per tile against 1.9-2.0 us with
    four 32-column panels (AVX2 code: 1.1 against 1.9 us with 64- and 16-column panels).

    The panel holds one tile's columns: the most vectors, up to 8 and to what the register budget
    allows for ``rows`` rows, whose columns divide ``units``, and at least half that bound.

    Parameters
    ----------
    units, rows : int
        Output columns ``N`` and rows ``M`` of the product.
    lanes : int
        Lanes of the dtype in one vector register.
    vector_bytes : int
        Bytes of a vector register (the register budget follows from it).

    Examples
    --------
    >>> stream_panel(512, 1, 16, 64), stream_panel(112, 1, 16, 64), stream_panel(512, 3, 8, 32)
    (128, 112, 32)
    >>> stream_panel(1000, 1, 16, 64), stream_panel(512, 4, 16, 64), stream_panel(10, 1, 4, 16)
    (None, None, None)
    """
    if rows > 3:
        return None
    most = min(8, _register_budget(TargetInfo(vector_bytes)) // rows, units // lanes)
    for vectors in range(most, (most + 1) // 2 - 1, -1):
        if vectors >= 2 and units % (vectors * lanes) == 0:
            return vectors * lanes
    return None


def _register_budget(target: TargetInfo) -> int:
    """Accumulator registers of a broadcast-A tile: all but 8 of 32, all but 4 of 16."""
    return target.vector_registers - (8 if target.vector_registers >= 32 else 4)


def _dot_tile(rows: int, cols: int, target: TargetInfo) -> tuple[int, int]:
    """Rows and columns of a dot-product tile (one vector accumulator per output)."""
    mr = min(rows, 3)
    nc = min(cols, 4 if target.vector_registers >= 32 else 3)
    return mr, nc


def _parallel_ok(op: ComputeOp, depth: int, chunks: int, target: TargetInfo) -> bool:
    return target.num_threads > 1 and chunks >= 2 and prod(op.shape) * depth >= _PARALLEL_MIN_MACS


def _readers_of(dag: ComputeDAG, op: ComputeOp) -> list[ComputeOp]:
    """Compute stages that read ``op``, directly or through other stages."""
    found: list[ComputeOp] = []
    reached = {id(op)}
    for x in dag.ops:  # stages are in topological order
        if isinstance(x, ComputeOp) and any(id(t.op) in reached for t in x.input_tensors()):
            reached.add(id(x))
            found.append(x)
    return found


def epilogue_is_elementwise(dag: ComputeDAG, acc: ComputeOp) -> bool:
    """Whether every stage after the product has its shape and reads the product and the stages
    after it only element by element (so a tile of the output needs exactly the same tile of the
    product); other inputs (bias, residual, constants) may be read anyhow."""
    readers = _readers_of(dag, acc)
    tiled = {id(acc), *(id(op) for op in readers)}
    for op in readers:
        if op.shape != acc.shape or op.is_reduction:
            return False
        axes = [iv.var for iv in op.axis]
        for body in op.body:
            for node in post_order(body):
                if not (isinstance(node, E.TensorLoad) and id(node.tensor.op) in tiled):
                    continue
                if len(node.indices) != len(axes) or any(
                        x is not v for x, v in zip(node.indices, axes)):
                    return False
    return True


def _tile_output(state: State, out: int, p: int, mr: int, col_split: list[int]) -> None:
    """Split the output's row and column axes, order them ``(batch..., col.outer, row.outer,
    row.inner, column inner parts...)`` and fuse the outer loops into one."""
    state.split(out, p, [mr])
    state.split(out, p + 2, col_split)
    iters = len(state.stages[out].iters)
    # batch..., io, ii, jo, j inner..., [the lane reduction of a factored product]
    order = [*range(p), p + 2, p, p + 1, *range(p + 3, iters)]
    state.reorder(out, order)
    state.fuse(out, list(range(p + 2)))


def _schedule_broadcast(state: State, acc: int, out: int, c: Contraction, tile: GemmTile,
                        target: TargetInfo, calls: bool) -> None:
    """The broadcast-A register tiling of the product ``acc`` computed at the tile of ``out``
    (``calls``: its fused epilogue calls vector math)."""
    p = c.batch_axes
    if c.cols % tile.lanes:  # accumulator rows start on vector boundaries: they fit registers
        state.storage_align(acc, p, tile.lanes, 0)
    _tile_output(state, out, p, tile.rows, [tile.vectors, tile.lanes])
    chunks = prod(c.op.shape[:p]) * -(-c.rows // tile.rows) * -(-c.cols // tile.cols)
    if _parallel_ok(c.op, c.depth, chunks, target):
        state.parallel(out, 0)
    if c.rows % tile.rows and calls:
        # whole tiles run without the last one's row checks, where the epilogue calls vector
        # math (GELU's erf, SiLU's exp): a 100-row product's GELU kernel built for AVX2 took
        # 834 us with the checks in every tile, 446 us without (BERT at 100 tokens: 22%
        # faster); with plain epilogues it changed nothing but the compile time
        state.pragma(out, 0, UNSWITCH_TILE_GUARDS)
    state.unroll(out, 1)
    state.unroll(out, 2)
    if tile.lanes > 1:
        state.vectorize(out, 3)
    state.compute_at(acc, out, 0)
    # the product at the tile: batch..., i, j, k -> batch..., i, j.o, j.i, k
    state.split(acc, p + 1, [tile.lanes])
    k_pos = p + 3
    if tile.k_unroll > 1:
        state.split(acc, k_pos, [tile.k_unroll])
        state.reorder(acc, [*range(p), k_pos, k_pos + 1, p, p + 1, p + 2])
        state.unroll(acc, p + 1)
        first = p + 2
    else:
        state.reorder(acc, [*range(p), k_pos, p, p + 1, p + 2])
        first = p + 1
    state.unroll(acc, first)
    state.unroll(acc, first + 1)
    if tile.lanes > 1:
        state.vectorize(acc, first + 2)


def _schedule_dot(state: State, acc: int, out: int, c: Contraction, target: TargetInfo) -> int:
    """The dot-product tiling: ``k`` split by the vector width and factored into per-lane sums
    computed at the tile of ``out`` (the product itself or its element-wise consumer); returns
    the tiled stage's id after the factoring."""
    p = c.batch_axes
    lanes = min(target.lanes(c.op.output_dtype(0)), _pow2_floor(c.depth))
    state.split(acc, p + 2, [lanes])
    rf = state.rfactor(acc, p + 3, p + 2)
    repl, out = rf + 1, out + 1
    mr, nc = _dot_tile(c.rows, c.cols, target)
    _tile_output(state, out, p, mr, [nc])
    chunks = prod(c.op.shape[:p]) * -(-c.rows // mr) * -(-c.cols // nc)
    if _parallel_ok(c.op, c.depth, chunks, target):
        state.parallel(out, 0)
    state.unroll(out, 1)
    state.unroll(out, 2)
    if repl != out:
        state.compute_at(repl, out, 0)
    state.compute_at(rf, out, 0)
    # batch..., i, j, k.inner, k.outer -> batch..., k.outer, i, j, k.inner
    state.reorder(rf, [*range(p), p + 3, p, p + 1, p + 2])
    state.unroll(rf, p + 1)
    state.unroll(rf, p + 2)
    state.vectorize(rf, p + 3)
    return out


def schedule_contraction(dag: ComputeDAG, c: Contraction, target: TargetInfo,
                         tile: GemmTile | None = None) -> State | None:
    """Schedule a DAG made of one matrix product and element-wise stages.

    Parameters
    ----------
    dag : ComputeDAG
        The computation.
    c : Contraction
        Its product stage (from :func:`find_contraction`).
    target : TargetInfo
        Vector width and usable cores.
    tile : GemmTile, optional
        The register tile of a broadcast-A product (default: :func:`choose_gemm_tile`).

    Returns
    -------
    State or None
        The schedule; None when the DAG has another reduction besides the product.
    """
    state = dag.init_state
    outs = output_stage_ids(dag)
    if not inline_all_but(state, dag, {c.stage_id}):
        return None
    acc = c.stage_id
    fused = len(outs) == 1 and acc not in outs and epilogue_is_elementwise(dag, c.op)
    if c.kind == "broadcast":
        if fused:
            out = outs[0]
        else:  # the product into a local accumulator stage, computed at the product's tile
            acc = state.cache_write(acc, "local")
            out = acc + 1
            outs = [o + 1 if o >= acc else o for o in outs]
        tile = tile or choose_gemm_tile(c.rows, c.cols, c.depth, c.panel, c.op.output_dtype(0),
                                        target)
        calls = any(isinstance(op, ComputeOp) and has_call(op) for op in dag.ops)
        _schedule_broadcast(state, acc, out, c, tile, target, calls)
    else:
        out = _schedule_dot(state, acc, outs[0] if fused else acc, c, target)
        outs = [o + 1 if o >= acc else o for o in outs]
    for o in outs:
        if o != out:
            schedule_pointwise(state, o, target)
    return state


@register_template(*DENSE_PACK_TAGS)
def schedule_dense_pack(dag: ComputeDAG, target: TargetInfo) -> State | None:
    """Template for ``nn.contrib_dense_pack`` (tag ``dense_pack``) and its fused epilogue.

    Parameters
    ----------
    dag : ComputeDAG
        One fused function.
    target : TargetInfo
        Vector width and usable cores.

    Returns
    -------
    State or None
        The broadcast-A register tiling (see the module docstring), or None when the DAG has
        no packed dense stage.
    """
    c = find_contraction(dag, DENSE_PACK_TAGS)
    return schedule_contraction(dag, c, target) if c is not None else None


@register_template(*DENSE_TAGS)
def schedule_dense(dag: ComputeDAG, target: TargetInfo) -> State | None:
    """Template for ``nn.dense`` and ``nn.matmul`` (tags ``dense``, ``matmul``).

    Parameters
    ----------
    dag : ComputeDAG
        One fused function.
    target : TargetInfo
        Vector width and usable cores.

    Returns
    -------
    State or None
        Broadcast-A tiling when the right operand is contiguous along the output columns, dot
        tiling when both operands are contiguous along the reduction, else None.
    """
    c = find_contraction(dag, DENSE_TAGS)
    return schedule_contraction(dag, c, target) if c is not None else None
