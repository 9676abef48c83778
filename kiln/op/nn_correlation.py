"""``nn.correlation`` (FlowNet's correlation layer) and ``nn.bitpack`` (bit-serial packing).

``nn.correlation(data1, data2)`` compares, for every output position, a ``kernel_size`` patch of
``data1`` with patches of ``data2`` displaced over a ``(2r + 1)^2`` grid (``r = max_displacement //
stride2``, step ``stride2``), by product (``is_multiply``) or absolute difference, averaged over the
patch and the channels; both inputs are zero-padded by ``padding``. Output channel ``q`` is the
displacement ``((q // (2r+1)) - r, (q % (2r+1)) - r) * stride2`` (dy, dx). The output size follows
TVM's type relation: ``ceil((padded - 2 * border) / stride1)`` with ``border = max_displacement +
(kernel_size - 1) // 2``. NCHW only, as TVM.

``nn.bitpack(data)`` packs bit planes of integer data into words of ``pack_type``: the ``pack_axis``
shrinks by the word width and a new axis of ``bits`` planes is inserted at ``bit_axis``; plane
``b`` of a word holds bit ``b`` of its ``width`` consecutive elements, the first element in the
most significant bit (TVM's ``topi.nn.bitpack``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln import te
from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr
from kiln.ir.types import TensorType, Type, as_dtype, is_float, is_int
from kiln.op.compute_conv import compute_dtype
from kiln.op.nn_common import to_out
from kiln.op.registry import OpPattern, get_op_def, make_call, register_op, tensor_arg
from kiln.te import expr as E

__all__ = ["BitPackAttrs", "CorrelationAttrs", "bitpack", "correlation"]


@attrs_class("relay.attrs.CorrelationAttrs")
class CorrelationAttrs(Attrs):
    """Attributes of ``nn.correlation`` (TVM's field order and defaults)."""

    kernel_size: int = 1
    max_displacement: int = 1
    stride1: int = 1
    stride2: int = 1
    padding: tuple[int, ...] = (0, 0)
    is_multiply: bool = True
    layout: str = "NCHW"


@attrs_class("relay.attrs.BitPackAttrs")
class BitPackAttrs(Attrs):
    """Attributes of ``nn.bitpack`` (TVM's field order and defaults)."""

    bits: int = 1
    pack_axis: int = 1
    bit_axis: int = -1
    pack_type: str = "uint32"
    name: str = "BitPack"


# --- correlation -------------------------------------------------------------------------------

class _Geometry:
    """Sizes of a correlation: padded input, border, grid and output."""

    def __init__(self, shape: tuple[int, ...], attrs: CorrelationAttrs) -> None:
        _, _, h, w = shape
        pad_h, pad_w = attrs.padding[0], attrs.padding[-1]
        self.pad_h, self.pad_w = pad_h, pad_w
        border = attrs.max_displacement + (attrs.kernel_size - 1) // 2
        s1 = attrs.stride1
        self.out_h = (h + 2 * pad_h - 2 * border + s1 - 1) // s1
        self.out_w = (w + 2 * pad_w - 2 * border + s1 - 1) // s1
        self.radius = attrs.max_displacement // attrs.stride2
        self.grid = 2 * self.radius + 1


def _correlation_rel(types: list[Type], attrs: CorrelationAttrs) -> Type:
    op = "nn.correlation"
    a = tensor_arg(types, 0, op, "data1")
    b = tensor_arg(types, 1, op, "data2")
    if attrs.layout != "NCHW":
        raise KilnTypeError(f"{op}: only layout NCHW is supported (as TVM), got {attrs.layout!r}")
    if a.ndim != 4 or a.shape != b.shape or a.dtype != b.dtype:
        raise KilnTypeError(f"{op}: data1 and data2 must be 4-d NCHW tensors of one shape and dtype, "
                            f"got {a} and {b}")
    if attrs.kernel_size < 1 or attrs.kernel_size % 2 == 0:
        raise KilnTypeError(f"{op}: kernel_size must be odd and positive, got {attrs.kernel_size}")
    if min(attrs.stride1, attrs.stride2) < 1 or attrs.max_displacement < 0:
        raise KilnTypeError(f"{op}: strides must be positive and max_displacement non-negative, got "
                            f"stride1={attrs.stride1}, stride2={attrs.stride2}, "
                            f"max_displacement={attrs.max_displacement}")
    g = _Geometry(a.shape, attrs)
    if g.out_h < 1 or g.out_w < 1:
        raise KilnTypeError(f"{op}: input {a.shape} padded by {attrs.padding} is smaller than the "
                            f"border of max_displacement + kernel radius on each side")
    return TensorType((a.shape[0], g.grid * g.grid, g.out_h, g.out_w), a.dtype)


def _correlation_ref(args: list[np.ndarray], attrs: CorrelationAttrs, out_type: Type) -> np.ndarray:
    a, b = args
    g = _Geometry(a.shape, attrs)
    pad = [(0, 0), (0, 0), (g.pad_h, g.pad_h), (g.pad_w, g.pad_w)]
    p1, p2 = np.pad(a.astype(np.float64), pad), np.pad(b.astype(np.float64), pad)
    k, md, s1, s2 = attrs.kernel_size, attrs.max_displacement, attrs.stride1, attrs.stride2
    out = np.zeros((a.shape[0], g.grid * g.grid, g.out_h, g.out_w))
    for q in range(g.grid * g.grid):
        dy, dx = (q // g.grid - g.radius) * s2, (q % g.grid - g.radius) * s2
        for h in range(k):
            for w in range(k):
                y0, x0 = md + h, md + w
                x1 = p1[:, :, y0:y0 + (g.out_h - 1) * s1 + 1:s1, x0:x0 + (g.out_w - 1) * s1 + 1:s1]
                x2 = p2[:, :, y0 + dy:y0 + dy + (g.out_h - 1) * s1 + 1:s1,
                        x0 + dx:x0 + dx + (g.out_w - 1) * s1 + 1:s1]
                out[:, q] += (x1 * x2 if attrs.is_multiply else np.abs(x1 - x2)).sum(axis=1)
    return to_out(out / float(k * k * a.shape[1]), out_type)


register_op("nn.correlation", num_inputs=2, type_rel=_correlation_rel, reference=_correlation_ref,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=CorrelationAttrs,
            doc="FlowNet correlation of two NCHW tensors over a grid of displacements")


def _correlation_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    a, b = inputs
    g = _Geometry(tuple(int(d) for d in a.shape), attrs)
    cd = compute_dtype(a.dtype)
    n, c, h, w = (int(d) for d in a.shape)
    ph, pw = h + 2 * g.pad_h, w + 2 * g.pad_w
    zero = E.const(0, cd)

    def padded(x: te.Tensor, name: str) -> te.Tensor:
        def element(i: E.PrimExpr, j: E.PrimExpr, y: E.PrimExpr, z: E.PrimExpr) -> E.PrimExpr:
            yy, zz = y - g.pad_h, z - g.pad_w
            inside = te.all(yy >= 0, yy < h, zz >= 0, zz < w)
            return te.if_then_else(inside, E.cast(x[i, j, yy, zz], cd), zero)
        return te.compute((n, c, ph, pw), element, name=name, tag="injective")

    p1, p2 = padded(a, "T_correlation_pad1"), padded(b, "T_correlation_pad2")
    k, md, s1, s2 = attrs.kernel_size, attrs.max_displacement, attrs.stride1, attrs.stride2
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, k), name="ry")
    rx = te.reduce_axis((0, k), name="rx")
    scale = E.const(1.0 / float(k * k * c), cd)

    def element(i: E.PrimExpr, q: E.PrimExpr, y: E.PrimExpr, x: E.PrimExpr) -> E.PrimExpr:
        y1, x1 = y * s1 + md + ry.var, x * s1 + md + rx.var
        y2 = y1 + (te.floordiv(q, g.grid) - g.radius) * s2
        x2 = x1 + (te.floormod(q, g.grid) - g.radius) * s2
        v1, v2 = p1[i, rc.var, y1, x1], p2[i, rc.var, y2, x2]
        term = v1 * v2 if attrs.is_multiply else te.abs(v1 - v2)
        return te.sum(term, axis=[rc, ry, rx])

    total = te.compute((n, g.grid * g.grid, g.out_h, g.out_w), element, name="T_correlation_sum")
    return te.compute(total.shape, lambda *i: E.cast(total(*i) * scale, a.dtype),
                      name="T_correlation", tag="injective")


get_op_def("nn.correlation").compute = _correlation_compute


def correlation(data1: Expr, data2: Expr, kernel_size: int, max_displacement: int, stride1: int,
                stride2: int, padding: Any, is_multiply: bool, layout: str = "NCHW") -> Call:
    """FlowNet correlation of ``data1`` and ``data2`` (``relay.nn.correlation``).

    Parameters
    ----------
    data1, data2 : Expr
        NCHW tensors of one shape and dtype.
    kernel_size : int
        Odd patch size.
    max_displacement : int
        The largest displacement compared.
    stride1, stride2 : int
        Stride over ``data1`` positions; step between compared displacements.
    padding : int or tuple of int
        Zero padding of both inputs (one value, or (height, width)).
    is_multiply : bool
        Compare by product (True) or absolute difference (False).
    layout : str
        ``"NCHW"`` (the only layout TVM supports).

    Returns
    -------
    Call
        ``(N, (2 * (max_displacement // stride2) + 1) ** 2, out_h, out_w)``.
    """
    pad = (int(padding), int(padding)) if isinstance(padding, int) else tuple(int(p) for p in padding)
    return make_call("nn.correlation", [data1, data2],
                     CorrelationAttrs(int(kernel_size), int(max_displacement), int(stride1),
                                      int(stride2), pad, bool(is_multiply), layout))


# --- bitpack -----------------------------------------------------------------------------------

def _bitpack_shape(shape: tuple[int, ...], attrs: BitPackAttrs, dtype: str) -> tuple[int, ...]:
    op = "nn.bitpack"
    ndim = len(shape)
    width = np.dtype(as_dtype(attrs.pack_type)).itemsize * 8
    if not is_int(dtype):
        raise KilnTypeError(f"{op}: data must be an integer tensor, got {dtype}")
    if not 0 <= attrs.pack_axis < ndim or not 0 <= attrs.bit_axis <= ndim:
        raise KilnTypeError(f"{op}: pack_axis {attrs.pack_axis} / bit_axis {attrs.bit_axis} out of "
                            f"range for data of shape {shape}")
    if shape[attrs.pack_axis] % width:
        raise KilnTypeError(f"{op}: axis {attrs.pack_axis} of {shape} is not a multiple of the "
                            f"{width} bits of {attrs.pack_type}")
    out = list(shape)
    out[attrs.pack_axis] //= width
    out.insert(attrs.bit_axis, int(attrs.bits))
    return tuple(out)


def _bitpack_rel(types: list[Type], attrs: BitPackAttrs) -> Type:
    data = tensor_arg(types, 0, "nn.bitpack", "data")
    if is_float(as_dtype(attrs.pack_type)) or not is_int(as_dtype(attrs.pack_type)):
        raise KilnTypeError(f"nn.bitpack: pack_type must be an integer type, got {attrs.pack_type}")
    return TensorType(_bitpack_shape(data.shape, attrs, data.dtype), as_dtype(attrs.pack_type))


def _bitpack_ref(args: list[np.ndarray], attrs: BitPackAttrs, out_type: Type) -> np.ndarray:
    data = args[0].astype(np.int64)
    width = np.dtype(as_dtype(attrs.pack_type)).itemsize * 8
    axis = attrs.pack_axis
    moved = np.moveaxis(data, axis, -1)
    words = moved.reshape(*moved.shape[:-1], moved.shape[-1] // width, width)
    weights = np.array([1 << (width - 1 - k) for k in range(width)], dtype=np.uint64)
    planes = [(((words >> b) & 1).astype(np.uint64) * weights).sum(axis=-1) for b in range(attrs.bits)]
    packed = np.stack([np.moveaxis(p, -1, axis) for p in planes], axis=attrs.bit_axis)
    return packed.astype(np.dtype(as_dtype(attrs.pack_type)))


register_op("nn.bitpack", num_inputs=1, type_rel=_bitpack_rel, reference=_bitpack_ref,
            pattern=OpPattern.INJECTIVE, attrs_type=BitPackAttrs,
            doc="pack bit planes of integer data into words")


def _bitpack_compute(inputs: list[te.Tensor], attrs: BitPackAttrs, out_type: Type) -> te.Tensor:
    data = inputs[0]
    word = as_dtype(attrs.pack_type)
    width = np.dtype(word).itemsize * 8
    shape = _bitpack_shape(tuple(int(d) for d in data.shape), attrs, data.dtype)
    one = E.const(1, data.dtype)

    def element(*index: E.PrimExpr) -> E.PrimExpr:
        plane = index[attrs.bit_axis]
        rest = list(index[:attrs.bit_axis]) + list(index[attrs.bit_axis + 1:])
        total: E.PrimExpr = E.const(0, word)
        for k in range(width):  # element k of the word goes to bit width - 1 - k
            at = list(rest)
            at[attrs.pack_axis] = rest[attrs.pack_axis] * width + k
            bit = te.bitwise_and(te.shift_right(data[tuple(at)], E.cast(plane, data.dtype)), one)
            total = te.bitwise_or(total, te.shift_left(E.cast(bit, word), E.const(width - 1 - k, word)))
        return total

    return te.compute(shape, element, name="T_bitpack", tag="injective")


get_op_def("nn.bitpack").compute = _bitpack_compute


def bitpack(data: Expr, bits: int = 1, pack_axis: int = 1, bit_axis: int = 2,
            pack_type: str = "uint32", name: str = "BitPack") -> Call:
    """Pack ``bits`` bit planes of ``data`` into ``pack_type`` words (``relay.nn.bitpack``).

    Parameters
    ----------
    data : Expr
        Integer tensor.
    bits : int
        Bit planes to extract (bit 0 first).
    pack_axis : int
        The axis packed into words (its size divides by the word width).
    bit_axis : int
        Where the new axis of ``bits`` planes goes in the output.
    pack_type : str
        The word type (``uint8``, ``uint16``, ``uint32``, ``uint64``).
    name : str
        A name for the operation.

    Returns
    -------
    Call
        The packed tensor.
    """
    return make_call("nn.bitpack", [data],
                     BitPackAttrs(int(bits), int(pack_axis), int(bit_axis), pack_type, name))
