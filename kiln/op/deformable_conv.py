"""Deformable 2-d convolution: ``nn.deformable_conv2d`` (TVM's op, plus ONNX DeformConv's mask).

A deformable convolution is a convolution whose every kernel tap reads the input at a learned,
fractional displacement from its regular position. For output position ``(y, x)``, kernel tap
``(i, j)`` and input channel ``c`` of offset group ``g = c // (C // deformable_groups)``, the tap
reads the input by bilinear interpolation at::

    py = y * stride_h - pad_top  + i * dilation_h + offset[n, g*KH*KW*2 + (i*KW + j)*2,     y, x]
    px = x * stride_w - pad_left + j * dilation_w + offset[n, g*KH*KW*2 + (i*KW + j)*2 + 1, y, x]

so the offset channels hold, per offset group and per kernel position in row-major order, a
``(dy, dx)`` pair: the layout of TVM's ``deformable_conv2d`` and of ONNX DeformConv (whose
reference reshapes the offset to ``(N, offset_group, KH, KW, 2, OH, OW)``). The four neighbours
of ``(py, px)`` that fall outside the image count as zero (ONNX's reference, onnxruntime and
torchvision agree). TVM's topi differs at the border only: it zeroes a sample point whose
coordinate lies in ``(-1, 0)`` entirely (older releases also clamp the upper neighbour to the last
row or column instead of reading zero). Padding only moves the sampling grid: there is no padded
copy of the data.

Kiln's op takes TVM's inputs ``(data, offset, weight)`` and attributes unchanged. An optional
fourth input, the DCNv2 modulation ``mask`` of shape ``(N, deformable_groups * KH * KW, OH, OW)``
(same channel order as the offset pairs), multiplies every sampled value; TVM has no mask, so the
three-input form is exactly TVM's op. The offset and the mask are in the data layout, as in TVM's
type relation. ``groups`` splits the channels as in ``nn.conv2d``; the offset groups split the
input channels independently of them. A bias is a separate ``nn.bias_add``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr
from kiln.ir.types import TensorType, Type, as_dtype, is_float, np_dtype
from kiln.op.conv import ConvPlan, conv_plan
from kiln.op.nn_common import Layout, int_tuple, pad_tuple
from kiln.op.registry import OpPattern, make_call, register_op, tensor_arg

__all__ = ["deformable_conv2d"]

_OP = "nn.deformable_conv2d"


@attrs_class("relay.attrs.DeformableConv2DAttrs")
class DeformableConv2DAttrs(Attrs):
    """Attributes of ``nn.deformable_conv2d`` (TVM's fields, order and defaults)."""

    strides: tuple[int, ...] = (1, 1)
    padding: tuple[int, ...] = (0, 0)
    dilation: tuple[int, ...] = (1, 1)
    deformable_groups: int = 1
    groups: int = 1
    channels: int | None = None
    kernel_size: tuple[int, ...] | None = None
    data_layout: str = "NCHW"
    kernel_layout: str = "OIHW"
    out_layout: str = ""
    out_dtype: str = ""


@dataclass(frozen=True)
class DeformablePlan:
    """The geometry of one ``nn.deformable_conv2d`` call.

    Attributes
    ----------
    conv : ConvPlan
        The convolution geometry (layouts, primal shapes, padding, groups, result type).
    deformable_groups : int
        Number of offset groups.
    """

    conv: ConvPlan
    deformable_groups: int


def _describe(ty: TensorType, layout: str) -> str:
    return f"{ty.shape} ({layout}, {ty.dtype})"


def deformable_plan(data: TensorType, offset: TensorType, weight: TensorType,
                    mask: TensorType | None, attrs: Any) -> DeformablePlan:
    """Check a deformable convolution call and work out its geometry.

    Parameters
    ----------
    data, offset, weight : TensorType
        Argument types (offset in the data layout, weight in the kernel layout).
    mask : TensorType or None
        Type of the optional modulation mask (data layout).
    attrs : DeformableConv2DAttrs
        The call's attributes.

    Returns
    -------
    DeformablePlan
        The convolution geometry and the number of offset groups.

    Raises
    ------
    KilnTypeError
        Naming the op, the argument at fault, its shape, layout and dtype.
    """
    if not is_float(data.dtype):
        raise KilnTypeError(f"{_OP}: data {_describe(data, attrs.data_layout)} must have a float "
                            "dtype (the taps are sampled by bilinear interpolation)")
    plan = conv_plan(_OP, 2, False, data, weight, attrs)
    dg = int(attrs.deformable_groups)
    n, c = plan.data_shape[:2]
    d_desc = _describe(data, plan.data_layout.name)
    if dg < 1 or c % dg:
        raise KilnTypeError(f"{_OP}: data {d_desc} has {c} input channels, which "
                            f"deformable_groups={dg} does not divide")
    kh, kw = plan.weight_shape[2:]
    out_hw = plan.out_primal_shape[2:]
    want_offset = (n, 2 * dg * kh * kw, *out_hw)
    want_mask = (n, dg * kh * kw, *out_hw)
    layout = plan.data_layout

    def check(ty: TensorType, want: tuple[int, ...], what: str, rule: str) -> None:
        if ty.dtype != data.dtype:
            raise KilnTypeError(f"{_OP}: {what} {_describe(ty, layout.name)} must have the data's "
                                f"dtype {data.dtype}")
        shape = layout.forward_shape(ty.shape, "NCHW", _OP, what)
        if shape != want:
            raise KilnTypeError(
                f"{_OP}: {what} has shape {ty.shape} ({layout.name}, {ty.dtype}); expected "
                f"{layout.backward_shape(want, 'NCHW', _OP, what)}: {rule} for data {d_desc}, "
                f"weight {_describe(weight, plan.kernel_layout.name)}, deformable_groups={dg}")

    check(offset, want_offset, "offset", "(N, 2 * deformable_groups * KH * KW, OH, OW)")
    if mask is not None:
        check(mask, want_mask, "mask", "(N, deformable_groups * KH * KW, OH, OW)")
    return DeformablePlan(plan, dg)


def deformable_conv2d_nchw(data: np.ndarray, offset: np.ndarray, weight: np.ndarray,
                           mask: np.ndarray | None, strides: tuple[int, ...],
                           padding: tuple[tuple[int, int], ...], dilation: tuple[int, ...],
                           groups: int, deformable_groups: int,
                           out_dtype: np.dtype) -> np.ndarray:
    """NumPy deformable convolution in ``NCHW`` / ``OIHW``, computed in float64.

    Parameters
    ----------
    data : ndarray
        ``(N, C, H, W)``.
    offset : ndarray
        ``(N, 2 * deformable_groups * KH * KW, OH, OW)``: ``(dy, dx)`` per group and tap.
    weight : ndarray
        ``(O, C // groups, KH, KW)``.
    mask : ndarray or None
        ``(N, deformable_groups * KH * KW, OH, OW)`` modulation, or None (all ones).
    strides, dilation : tuple of int
        ``(h, w)``.
    padding : tuple of (int, int)
        ``(begin, end)`` per spatial axis (only the begins move the sampling grid).
    groups, deformable_groups : int
        Channel groups and offset groups.
    out_dtype : numpy dtype
        Result dtype.

    Returns
    -------
    ndarray
        ``(N, O, OH, OW)``.
    """
    n, c, h, w = data.shape
    o, cg, kh, kw = weight.shape
    oh, ow = offset.shape[2:]
    dg = deformable_groups
    taps = kh * kw * oh * ow
    off = offset.astype(np.float64).reshape(n, dg, kh, kw, 2, oh, ow)
    grid_y = (np.arange(kh) * dilation[0])[:, None, None, None] \
        + (np.arange(oh) * strides[0] - padding[0][0])[None, None, :, None]
    grid_x = (np.arange(kw) * dilation[1])[None, :, None, None] \
        + (np.arange(ow) * strides[1] - padding[1][0])[None, None, None, :]
    py = off[:, :, :, :, 0] + grid_y  # (N, dg, KH, KW, OH, OW)
    px = off[:, :, :, :, 1] + grid_x
    y0, x0 = np.floor(py), np.floor(px)
    ly, lx = py - y0, px - x0
    with np.errstate(invalid="ignore"):
        iy0 = np.clip(y0, -2, h).astype(np.int64).reshape(n, dg, 1, taps)
        ix0 = np.clip(x0, -2, w).astype(np.int64).reshape(n, dg, 1, taps)
    ly, lx = ly.reshape(n, dg, 1, taps), lx.reshape(n, dg, 1, taps)
    src = data.astype(np.float64).reshape(n, dg, c // dg, h * w)
    cols = np.zeros((n, dg, c // dg, taps))
    for dy, wy in ((0, 1.0 - ly), (1, ly)):
        for dx, wx in ((0, 1.0 - lx), (1, lx)):
            yy, xx = iy0 + dy, ix0 + dx
            inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            flat = np.clip(yy, 0, h - 1) * w + np.clip(xx, 0, w - 1)
            picked = np.take_along_axis(src, np.broadcast_to(flat, (n, dg, c // dg, taps)), axis=3)
            cols += np.where(inside, picked, 0.0) * (wy * wx)
    if mask is not None:
        cols *= mask.astype(np.float64).reshape(n, dg, 1, taps)
    cols = cols.reshape(n, groups, cg * kh * kw, oh * ow)
    wg = weight.astype(np.float64).reshape(groups, o // groups, cg * kh * kw)
    out = np.matmul(wg[None], cols).reshape(n, o, oh, ow)
    with np.errstate(all="ignore"):
        return out.astype(out_dtype)


def _types(types: list[Type]) -> tuple[TensorType, TensorType, TensorType, TensorType | None]:
    if len(types) not in (3, 4):
        raise KilnTypeError(f"{_OP}: takes 3 arguments (data, offset, weight) or 4 (with mask), "
                            f"got {len(types)}")
    data = tensor_arg(types, 0, _OP, "data")
    offset = tensor_arg(types, 1, _OP, "offset")
    weight = tensor_arg(types, 2, _OP, "weight")
    mask = tensor_arg(types, 3, _OP, "mask") if len(types) == 4 else None
    return data, offset, weight, mask


def _infer_args(types: list[Type | None], attrs: Any, out: Type | None) -> list[Type | None]:
    """TVM's ``DeformableConv2DRel``: ``channels`` and ``kernel_size`` give the weight
    ``(channels, C // groups, KH, KW)``; the weight's kernel and the window give the offset
    ``(N, 2 * deformable_groups * KH * KW, OH, OW)`` (and Kiln's mask, half as many channels),
    both in the data's dtype, the offset and mask in the data layout."""
    implied: list[Type | None] = [None] * len(types)
    data = types[0]
    weight = types[2] if len(types) > 2 else None
    if not isinstance(data, TensorType):
        return implied
    layout = Layout(attrs.data_layout, _OP)
    n, c = layout.forward_shape(data.shape, "NCHW", _OP, "data")[:2]
    if attrs.channels is not None and attrs.kernel_size is not None:
        kh, kw = int_tuple(attrs.kernel_size, 2, "kernel_size", _OP)
        primal = (int(attrs.channels), c // int(attrs.groups), kh, kw)
        weight = TensorType(Layout(attrs.kernel_layout, _OP).backward_shape(
            primal, "OIHW", _OP, "weight"), data.dtype)
        implied[2] = weight
    if not isinstance(weight, TensorType):
        return implied
    conv = conv_plan(_OP, 2, False, data, weight, attrs)
    taps = int(attrs.deformable_groups) * conv.weight_shape[2] * conv.weight_shape[3]
    out_hw = conv.out_primal_shape[2:]
    implied[1] = TensorType(layout.backward_shape((n, 2 * taps, *out_hw), "NCHW", _OP, "offset"),
                            data.dtype)
    if len(types) == 4:
        implied[3] = TensorType(layout.backward_shape((n, taps, *out_hw), "NCHW", _OP, "mask"),
                                data.dtype)
    return implied


def _rel(types: list[Type], attrs: Any) -> Type:
    plan = deformable_plan(*_types(types), attrs)
    return TensorType(plan.conv.out_shape, plan.conv.out_dtype)


def _reference(args: list[np.ndarray], attrs: Any, out_type: Type) -> np.ndarray:
    arg_types: list[Type] = [TensorType(a.shape, a.dtype.name) for a in args]
    plan = deformable_plan(*_types(arg_types), attrs)
    cp = plan.conv
    layout = cp.data_layout
    data = layout.to_primal(args[0], "NCHW")
    offset = layout.to_primal(args[1], "NCHW")
    weight = cp.kernel_layout.to_primal(args[2], "OIHW")
    mask = layout.to_primal(args[3], "NCHW") if len(args) == 4 else None
    out = deformable_conv2d_nchw(data, offset, weight, mask, cp.strides, cp.padding, cp.dilation,
                                 cp.groups, plan.deformable_groups, np_dtype(cp.out_dtype))
    return cp.out_layout.from_primal(out, "NCHW")


register_op(_OP, num_inputs=-1, type_rel=_rel, reference=_reference,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=DeformableConv2DAttrs,
            doc="deformable 2-d convolution (bilinear taps at learned offsets, optional mask)",
            infer_args=_infer_args)


def deformable_conv2d(data: Expr, offset: Expr, weight: Expr, strides: Any = (1, 1),
                      padding: Any = (0, 0), dilation: Any = (1, 1), deformable_groups: int = 1,
                      groups: int = 1, channels: int | None = None, kernel_size: Any = None,
                      data_layout: str = "NCHW", kernel_layout: str = "OIHW", out_layout: str = "",
                      out_dtype: str = "", mask: Expr | None = None) -> Call:
    """Deformable 2-d convolution (``relay.nn.deformable_conv2d``).

    The positional signature is TVM's; ``mask`` (keyword only in practice) adds ONNX DeformConv's
    DCNv2 modulation as a fourth input.

    Parameters
    ----------
    data : Expr
        Input, ``(N, C, H, W)`` in ``data_layout``.
    offset : Expr
        Sampling offsets, ``(N, 2 * deformable_groups * KH * KW, OH, OW)`` in ``data_layout``:
        for each offset group and each kernel tap (row-major), a ``(dy, dx)`` pair.
    weight : Expr
        Kernel, ``(O, C // groups, KH, KW)`` in ``kernel_layout``.
    strides, dilation : int or tuple of int
        Window stride and dilation per axis.
    padding : int or tuple of int
        One value, ``(pad_h, pad_w)``, or ``(top, left, bottom, right)``.
    deformable_groups : int
        Offset groups: input channel ``c`` uses the offsets of group
        ``c // (C // deformable_groups)``.
    groups : int
        Channel groups of the convolution.
    channels : int, optional
        Number of output channels (checked against the weight).
    kernel_size : int or tuple of int, optional
        Kernel size (checked against the weight).
    data_layout, kernel_layout, out_layout : str
        Layouts of the data (and offset, mask), the weight and the result (``""``: the data's).
    out_dtype : str
        Result dtype (``""``: the data's dtype).
    mask : Expr, optional
        Modulation, ``(N, deformable_groups * KH * KW, OH, OW)`` in ``data_layout``, multiplying
        every sampled tap.

    Returns
    -------
    Call
        The deformable convolution.

    Examples
    --------
    >>> y = deformable_conv2d(x, off, w, padding=1, kernel_size=3, channels=16)
    """
    attrs = DeformableConv2DAttrs(
        strides=int_tuple(strides, 2, "strides", _OP),
        padding=pad_tuple(padding, 2, _OP),
        dilation=int_tuple(dilation, 2, "dilation", _OP),
        deformable_groups=int(deformable_groups),
        groups=int(groups),
        channels=None if channels is None else int(channels),
        kernel_size=None if kernel_size is None else int_tuple(kernel_size, 2, "kernel_size", _OP),
        data_layout=data_layout,
        kernel_layout=kernel_layout,
        out_layout=out_layout,
        out_dtype=as_dtype(out_dtype) if out_dtype not in ("", None) else "",
    )
    args = [data, offset, weight] if mask is None else [data, offset, weight, mask]
    return make_call(_OP, args, attrs)

# The TE compute used by the C code generator (kept in its own module).
from kiln.op import compute_deformable_conv  # noqa: E402,F401
