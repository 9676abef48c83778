"""Tensor-expression computes of the convolution operators (``kiln.op.conv``), and the helpers
the other neural-network computes share (accumulation dtypes, layout index mapping).

One generic compute serves every convolution: it works out the geometry with the type relation's
:func:`~kiln.op.conv.conv_plan`, so layouts (``NCHW``, ``NHWC``/``HWIO``, blocked ``NCHW8c`` /
``OIHW8i8o``, ...), groups (depthwise included), strides, dilation and asymmetric padding follow
the reference exactly. The output is computed directly in the output layout: each output index is
mapped to primal coordinates (``N, C, spatial``), and the data and weight are read through the
inverse mapping. A coordinate that came from a blocked axis keeps its ``(outer, inner)`` parts, so
a blocked output read from a blocked weight or data with the same factor indexes them with the
loop variables themselves (no division, contiguous inner loads).

As in TVM's topi, zero padding is a separate injective stage (``pad_temp``, inlined by the default
schedule) and the convolution is one reduction over the input channels of the group and the kernel
taps, named like TVM's (``conv2d_nchw``, ``conv2d_nhwc``, ``group_conv2d_nchw``,
``depthwise_conv2d_nchw``, ``conv2d_NCHWc``, ``depthwise_conv2d_NCHWc``, ``conv2d_transpose_nchw``,
...). Transposed convolutions gather rather than scatter: output position ``y`` takes input
``x = (y + pad_begin - tap * dilation) / stride`` when that division is exact and ``x`` is inside
the input.

Accumulation follows the reference's value semantics: floats accumulate in float32 (float64 when
an operand or the result is float64, or the result is an integer), integers in the result's integer
dtype (wrapping arithmetic gives the same bits as the reference's int64 sum cast down) or in int64
for a non-integer result; a final ``T_cast`` stage converts to ``out_dtype`` when they differ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kiln import te
from kiln.errors import CompileError
from kiln.ir.types import TensorType, Type
from kiln.op.compute_elemwise import named_compute
from kiln.op.conv import ConvPlan, conv_plan
from kiln.op.nn_common import Layout
from kiln.op.registry import get_op_def
from kiln.te import expr as E
from kiln.te.expr import PrimExpr

__all__ = [
    "Coord",
    "accumulate_dtype",
    "cast_output",
    "compute_dtype",
    "layout_coords",
    "layout_index",
    "tensor_type",
]

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}
_REDUCE_NAMES = {"D": "rd", "H": "ry", "W": "rx"}

ComputeFn = Callable[[list[te.Tensor], Any, Type], Any]


# --- shared helpers ------------------------------------------------------------------------------

def tensor_type(out_type: Type, op: str) -> TensorType:
    """``out_type`` as a :class:`TensorType`.

    Parameters
    ----------
    out_type : Type
        The call's inferred type.
    op : str
        Operator named in the error.

    Returns
    -------
    TensorType
        The same type; a :class:`CompileError` when it is a tuple.
    """
    if not isinstance(out_type, TensorType):
        raise CompileError(f"{op}: expected a tensor result, got {out_type}")
    return out_type


def compute_dtype(dtype: str) -> str:
    """The dtype element-wise float math runs in: float32 for float16 (the reference computes in
    float64 and rounds once, so rounding float16 after every operation would drift), else
    ``dtype``.

    Parameters
    ----------
    dtype : str
        A tensor dtype.

    Returns
    -------
    str
        ``"float32"`` for ``"float16"``, otherwise ``dtype``.
    """
    return "float32" if dtype == "float16" else dtype


def accumulate_dtype(in_dtypes: Sequence[str], out_dtype: str) -> str:
    """Accumulation dtype of a contraction (dense, matmul, convolution).

    Parameters
    ----------
    in_dtypes : sequence of str
        Operand dtypes.
    out_dtype : str
        Result dtype.

    Returns
    -------
    str
        float32 or float64 for float operands (float64 when any operand or the result is float64,
        or the result is not a float); for integer operands the result dtype when it is an
        integer (wrapping sums agree with the reference's int64 sum cast down), else int64.
    """
    if any(E.is_float_dtype(d) for d in in_dtypes):
        if "float64" in (*in_dtypes, out_dtype) or not E.is_float_dtype(out_dtype):
            return "float64"
        return "float32"
    if E.is_int_dtype(out_dtype) or E.is_uint_dtype(out_dtype):
        return out_dtype
    return "int64"


class Coord:
    """A primal coordinate (``N``, ``C``, ``H`` ...) of a tensor element.

    Parameters
    ----------
    value : PrimExpr
        The coordinate.
    outer, inner : PrimExpr, optional
        When the coordinate is known as ``outer * factor + inner`` (it came from a blocked axis),
        its two parts; a layout blocked by the same factor then uses them directly.
    factor : int
        The block factor of ``outer``/``inner`` (0 when not split).
    """

    __slots__ = ("factor", "inner", "outer", "value")

    def __init__(self, value: PrimExpr, outer: PrimExpr | None = None,
                 inner: PrimExpr | None = None, factor: int = 0) -> None:
        self.value = value
        self.outer = outer
        self.inner = inner
        self.factor = factor

    @staticmethod
    def split(outer: PrimExpr, inner: PrimExpr, factor: int) -> Coord:
        """The coordinate ``outer * factor + inner``."""
        return Coord(outer * factor + inner, outer, inner, factor)


def layout_coords(layout: Layout, primal: str, index: Sequence[PrimExpr]) -> dict[str, Coord]:
    """Primal coordinates of the element at ``index`` of a tensor in ``layout``.

    Parameters
    ----------
    layout : Layout
        The tensor's layout (``NCHW8c``, ``OIHW8i8o``, ...).
    primal : str
        Its primal axes (``NCHW``).
    index : sequence of PrimExpr
        One index per axis of ``layout``.

    Returns
    -------
    dict of str to Coord
        The coordinate of every primal axis.
    """
    coords: dict[str, Coord] = {}
    for p in primal:
        v = index[layout.index(p)]
        if layout.is_split(p):
            coords[p] = Coord.split(v, index[layout.index(p.lower())], layout.factor(p))
        else:
            coords[p] = Coord(v)
    return coords


def layout_index(layout: Layout, coords: Mapping[str, Coord]) -> tuple[PrimExpr, ...]:
    """The index, in ``layout``, of the element at primal ``coords`` (inverse of
    :func:`layout_coords`).

    Parameters
    ----------
    layout : Layout
        The tensor's layout.
    coords : mapping of str to Coord
        One coordinate per primal axis of ``layout``.

    Returns
    -------
    tuple of PrimExpr
        One index per axis of ``layout``.
    """
    out: list[PrimExpr] = []
    for letter, factor in layout.axes:
        if letter.islower():
            c = coords[letter.upper()]
            out.append(c.inner if c.factor == factor and c.inner is not None
                       else te.floormod(c.value, factor))
        elif layout.is_split(letter):
            c = coords[letter]
            f = layout.factor(letter)
            out.append(c.outer if c.factor == f and c.outer is not None
                       else te.floordiv(c.value, f))
        else:
            out.append(coords[letter].value)
    return tuple(out)


def cast_output(result: te.Tensor, dtype: str, name: str) -> te.Tensor:
    """``result`` converted to ``dtype`` by an element-wise ``T_cast`` stage (itself when the
    dtypes already agree).

    Parameters
    ----------
    result : Tensor
        A computed tensor.
    dtype : str
        The wanted dtype.
    name : str
        Name of the producing stage (for the cast stage's name).

    Returns
    -------
    Tensor
        A tensor of ``dtype``.
    """
    if result.dtype == dtype:
        return result
    return te.compute(result.shape, lambda *i: E.cast(result(*i), dtype), name=f"{name}_cast",
                      tag="elemwise")


# --- convolution ---------------------------------------------------------------------------------

def _stage_name(op: str, plan: ConvPlan) -> str:
    """TVM's name of the convolution stage (``conv2d_nchw``, ``depthwise_conv2d_nhwc``, ...)."""
    if op == "nn.contrib_conv2d_NCHWc":
        return "group_conv2d_NCHWc" if plan.groups > 1 else "conv2d_NCHWc"
    if op == "nn.contrib_depthwise_conv2d_NCHWc":
        return "depthwise_conv2d_NCHWc"
    base = op.removeprefix("nn.")
    if plan.groups > 1 and base == "conv2d":
        depthwise = plan.groups == plan.data_shape[1] and plan.weight_shape[1] == 1
        base = "depthwise_conv2d" if depthwise else "group_conv2d"
    return f"{base}_{plan.data_layout.name.lower()}"


def _inside(index: PrimExpr, begin: int, end: int, size: int,
            both: bool = False) -> list[PrimExpr]:
    """Conditions for padded position ``index`` (``begin`` before, ``end`` after) to be data.

    ``both``: TOPI's Python ``pad`` (``python/tvm/topi/nn/pad.py``) tests both bounds of an axis
    padded on either side; C++ ``topi::pad`` tests only the padded sides.
    """
    if both and (begin or end):
        return [index >= begin, index < begin + size]
    conds = []
    if begin:
        conds.append(index >= begin)
    if end:
        conds.append(index < begin + size)
    return conds


def _padded_reader(data: te.Tensor, layout: Layout, primal: str,
                   pads: Sequence[tuple[int, int]], name: str = "pad_temp",
                   topi_pad: bool = False) -> Callable[[dict[str, Coord]], PrimExpr]:
    """A function reading ``data`` at primal coordinates of its zero-padded version.

    Spatial coordinates are positions in the padded data. Without padding the data is read
    directly; otherwise a ``name`` stage is built, in the data's own layout when its spatial
    axes are not blocked (in primal coordinates otherwise). ``topi_pad``: the stage is TOPI's
    Python ``pad`` (both bounds tested on a padded axis), built even without padding for the
    generic ``conv2d_nchw``/``conv2d_nhwc`` (TOPI's ``nn.conv`` always pads).
    """
    spatial = primal[2:]
    always = topi_pad and name == "pad_temp"
    if not any(a or b for a, b in pads) and not always:
        return lambda coords: data[layout_index(layout, coords)]
    zero = E.const(0, data.dtype)
    if not any(layout.is_split(s) for s in spatial):
        positions = [layout.index(s) for s in spatial]
        shape = list(data.shape)
        for pos, (a, b) in zip(positions, pads):
            shape[pos] += a + b

        def padded(*i: PrimExpr) -> PrimExpr:
            inside: list[PrimExpr] = []
            src = list(i)
            for pos, (a, b) in zip(positions, pads):
                inside += _inside(i[pos], a, b, data.shape[pos], topi_pad)
                src[pos] = i[pos] - a if a else i[pos]
            if not inside:
                return data[tuple(src)]
            return te.if_then_else(te.all(*inside), data[tuple(src)], zero)

        pad = te.compute(tuple(shape), padded, name=name, tag="injective")
        return lambda coords: pad[layout_index(layout, coords)]
    sizes = dict(zip(primal, layout.forward_shape(data.shape, primal, "conv", "data")))
    pshape = [sizes[p] for p in primal]
    for k, (a, b) in enumerate(pads):
        pshape[2 + k] += a + b

    def padded_primal(*i: PrimExpr) -> PrimExpr:
        coords = {p: Coord(i[k]) for k, p in enumerate(primal)}
        inside: list[PrimExpr] = []
        for k, (s, (a, b)) in enumerate(zip(spatial, pads)):
            inside += _inside(i[2 + k], a, b, sizes[s], topi_pad)
            coords[s] = Coord(i[2 + k] - a if a else i[2 + k])
        if not inside:
            return data[layout_index(layout, coords)]
        return te.if_then_else(te.all(*inside), data[layout_index(layout, coords)], zero)

    pad = te.compute(tuple(pshape), padded_primal, name=name, tag="injective")
    return lambda coords: pad[tuple(coords[p].value for p in primal)]


ElementFn = Callable[[dict[str, Coord]], PrimExpr]


@dataclass(frozen=True)
class _TopiNames:
    """TOPI's stage and iterator names of one convolution (they are part of the DAG print, so
    of the auto-scheduler's workload keys: TVM's tuning logs match Kiln's tasks only with them).
    """

    axes: tuple[str, ...] = ()  # output iterators; () keeps te.compute's i0, i1, ...
    rc: str = "rc"
    taps: dict[str, str] = field(default_factory=dict)
    pad: str = "pad_temp"
    topi_pad: bool = False  # TOPI's Python pad (both bounds; always built for nn.conv)
    channel_last_reduce: bool = False


def _topi_names(stage: str, plan: ConvPlan, transpose: bool) -> _TopiNames:
    """TOPI's names for the convolutions TVM's x86 auto-scheduler tunes.

    - ``conv2d_NCHWc`` (``python/tvm/topi/nn/conv2d.py: conv2d_NCHWc``): iterators
      ``n, oc_chunk, oh, ow, oc_block``, reductions ``ic, kh, kw``, padding stage ``data_pad``
      (only when padded);
    - ``conv2d_nchw`` / ``conv2d_nhwc`` (``nn.conv``, TVM 0.15+): iterators ``nn, ff, yy, xx`` in
      the data layout's order, reductions ``rc, ry, rx`` (``ry, rx, rc`` for NHWC), ``pad_temp``
      always built.
    """
    if transpose or plan.groups != 1:
        return _TopiNames()
    if stage == "conv2d_NCHWc" and [a for a, _ in plan.out_layout.axes] == list("NCHWc") \
            and [a for a, _ in plan.data_layout.axes] == list("NCHWc"):
        return _TopiNames(("n", "oc_chunk", "oh", "ow", "oc_block"), "ic", {"H": "kh", "W": "kw"},
                          "data_pad", True)
    if stage in ("conv2d_nchw", "conv2d_nhwc"):
        letters = {"N": "nn", "C": "ff", "H": "yy", "W": "xx"}
        axes = tuple(letters[a] for a, _ in plan.out_layout.axes)
        return _TopiNames(axes, "rc", {}, "pad_temp", True, stage == "conv2d_nhwc")
    return _TopiNames()


BodyFn = Callable[[te.Tensor, te.Tensor, ConvPlan, PrimExpr, list[PrimExpr], str, _TopiNames],
                  ElementFn]


def _conv_compute(name: str, nsp: int, transpose: bool) -> ComputeFn:
    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        data, weight = inputs
        out = tensor_type(out_type, name)
        plan = conv_plan(name, nsp, transpose, TensorType(data.shape, data.dtype),
                         TensorType(weight.shape, weight.dtype), attrs)
        acc = accumulate_dtype((data.dtype, weight.dtype), out.dtype)
        cg = plan.data_shape[1] // plan.groups
        stage = _stage_name(name, plan)
        names = _topi_names(stage, plan, transpose)
        rc = te.reduce_axis((0, cg), name=names.rc)
        taps = [te.reduce_axis((0, k), name=names.taps.get(s, _REDUCE_NAMES[s]))
                for k, s in zip(plan.weight_shape[2:], _SPATIAL[nsp])]
        body: BodyFn = _transposed_body if transpose else _direct_body
        element = body(data, weight, plan, rc.var, [t.var for t in taps], acc, names)
        # NHWC reduces over (ry, rx, rc) in TOPI's nn.conv, the channel-first layouts (rc, ry, rx)
        red = [*taps, rc] if names.channel_last_reduce else [rc, *taps]

        def conv(*i: PrimExpr) -> PrimExpr:
            return te.sum(element(layout_coords(plan.out_layout, plan.data_primal, i)), axis=red)

        if names.axes:
            result = named_compute(out.shape, conv, names.axes, name=stage, tag=stage)
        else:
            result = te.compute(out.shape, conv, name=stage, tag=stage)
        return cast_output(result, out.dtype, stage)

    return compute


def _channel_coords(plan: ConvPlan, o: Coord, rc: PrimExpr) -> tuple[Coord, Coord]:
    """For output channel ``o`` and reduction index ``rc``: the input channel read, and the
    output channel's position inside its group."""
    if plan.groups == 1:
        return Coord(rc), o
    cg = plan.data_shape[1] // plan.groups
    og = plan.out_primal_shape[1] // plan.groups
    if og == 1:  # one output channel per group (depthwise with multiplier 1 when cg == 1)
        return (o if cg == 1 else Coord(o.value * cg + rc)), Coord(E.const(0))
    within = Coord(te.floormod(o.value, og))
    ib = plan.data_layout.factor("C") if plan.data_layout.is_split("C") else 0
    if o.outer is None or o.inner is None or og % o.factor or not ib or cg % ib:
        return Coord(te.floordiv(o.value, og) * cg + rc), within
    # blocks inside the groups (TVM's group_conv2d_NCHWc): the output block's group from its
    # outer index, and the input channel as (group's first block + rc // ib, rc % ib), which
    # the template's split of rc by ib turns into plain loop variables
    group = te.floordiv(o.outer, og // o.factor)
    return Coord(group * cg + rc, group * (cg // ib) + te.floordiv(rc, ib),
                 te.floormod(rc, ib), ib), within


def _direct_body(data: te.Tensor, weight: te.Tensor, plan: ConvPlan, rc: PrimExpr,
                 taps: list[PrimExpr], acc: str, names: _TopiNames) -> ElementFn:
    spatial = plan.data_primal[2:]
    read = _padded_reader(data, plan.data_layout, plan.data_primal, plan.padding, names.pad,
                          names.topi_pad)

    def element(coords: dict[str, Coord]) -> PrimExpr:
        c_in, _ = _channel_coords(plan, coords["C"], rc)
        dcoords = {"N": coords["N"], "C": c_in}
        wcoords = {"O": coords["C"], "I": Coord(rc)}
        for s, t, stride, dil in zip(spatial, taps, plan.strides, plan.dilation):
            dcoords[s] = Coord(coords[s].value * stride + t * dil)
            wcoords[s] = Coord(t)
        x = E.cast(read(dcoords), acc)
        return x * E.cast(weight[layout_index(plan.kernel_layout, wcoords)], acc)

    return element


def _transposed_body(data: te.Tensor, weight: te.Tensor, plan: ConvPlan, rc: PrimExpr,
                     taps: list[PrimExpr], acc: str, names: _TopiNames) -> ElementFn:
    spatial = plan.data_primal[2:]
    zero = E.const(0, acc)

    def element(coords: dict[str, Coord]) -> PrimExpr:
        c_in, within = _channel_coords(plan, coords["C"], rc)
        dcoords = {"N": coords["N"], "C": c_in}
        wcoords = {"I": c_in, "O": within}
        valid: list[PrimExpr] = []
        for s, t, size, stride, dil, (pad, _) in zip(spatial, taps, plan.data_shape[2:],
                                                      plan.strides, plan.dilation, plan.padding):
            pos = coords[s].value + pad - t * dil
            if stride > 1:
                valid.append(te.equal(te.floormod(pos, stride), 0))
                pos = te.floordiv(pos, stride)
            valid += [pos >= 0, pos < size]
            dcoords[s] = Coord(pos)
            wcoords[s] = Coord(t)
        x = E.cast(data[layout_index(plan.data_layout, dcoords)], acc)
        w = E.cast(weight[layout_index(plan.kernel_layout, wcoords)], acc)
        return te.if_then_else(te.all(*valid), x, zero) * w

    return element


def _register() -> None:
    for name, nsp, transpose in (
        ("nn.conv1d", 1, False), ("nn.conv2d", 2, False), ("nn.conv3d", 3, False),
        ("nn.conv1d_transpose", 1, True), ("nn.conv2d_transpose", 2, True),
        ("nn.conv3d_transpose", 3, True), ("nn.contrib_conv2d_NCHWc", 2, False),
        ("nn.contrib_depthwise_conv2d_NCHWc", 2, False),
    ):
        get_op_def(name).compute = _conv_compute(name, nsp, transpose)


_register()
