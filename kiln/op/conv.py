"""Convolution operators: conv1d/2d/3d, their transposes, and the blocked NCHWc variants.

Every convolution reads its data, weight and output in the layouts named by its attributes
(``NCHW``/``OIHW``, ``NHWC``/``HWIO``, blocked ``NCHW8c``/``OIHW8i8o``, ...). The type relation and
the reference kernel both convert to the primal layout (``NC`` + spatial for data, ``OI`` or ``IO``
+ spatial for the weight), work there, and convert the result to the output layout, so one
implementation serves every layout. Attributes, defaults and builders follow TVM's
``relay.nn.conv2d`` and friends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr
from kiln.ir.types import TensorType, Type, as_dtype, np_dtype
from kiln.op.conv_ref import conv_nd, conv_transpose_nd
from kiln.op.nn_common import (
    Layout,
    check_operand_dtypes,
    int_tuple,
    pad_pairs,
    pad_tuple,
    positive,
    window_out_size,
)
from kiln.op.registry import OpPattern, make_call, register_op, tensor_arg

__all__ = [
    "contrib_conv2d_nchwc",
    "contrib_depthwise_conv2d_nchwc",
    "conv1d",
    "conv1d_transpose",
    "conv2d",
    "conv2d_transpose",
    "conv3d",
    "conv3d_transpose",
]

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


# --- attributes (TVM's field order and defaults) ----------------------------------------------

@attrs_class("relay.attrs.Conv1DAttrs")
class Conv1DAttrs(Attrs):
    """Attributes of ``nn.conv1d``."""

    strides: tuple[int, ...] = (1,)
    padding: tuple[int, ...] = (0, 0)
    dilation: tuple[int, ...] = (1,)
    groups: int = 1
    channels: int | None = None
    kernel_size: tuple[int, ...] | None = None
    data_layout: str = "NCW"
    kernel_layout: str = "OIW"
    out_layout: str = ""
    out_dtype: str = ""


@attrs_class("relay.attrs.Conv2DAttrs")
class Conv2DAttrs(Attrs):
    """Attributes of ``nn.conv2d`` (also used by the NCHWc variants)."""

    strides: tuple[int, ...] = (1, 1)
    padding: tuple[int, ...] = (0, 0)
    dilation: tuple[int, ...] = (1, 1)
    groups: int = 1
    channels: int | None = None
    kernel_size: tuple[int, ...] | None = None
    data_layout: str = "NCHW"
    kernel_layout: str = "OIHW"
    out_layout: str = ""
    out_dtype: str = ""


@attrs_class("relay.attrs.Conv3DAttrs")
class Conv3DAttrs(Attrs):
    """Attributes of ``nn.conv3d``."""

    strides: tuple[int, ...] = (1, 1, 1)
    padding: tuple[int, ...] = (0, 0, 0)
    dilation: tuple[int, ...] = (1, 1, 1)
    groups: int = 1
    channels: int | None = None
    kernel_size: tuple[int, ...] | None = None
    data_layout: str = "NCDHW"
    kernel_layout: str = "OIDHW"
    out_layout: str = ""
    out_dtype: str = ""


@attrs_class("relay.attrs.Conv1DTransposeAttrs")
class Conv1DTransposeAttrs(Attrs):
    """Attributes of ``nn.conv1d_transpose``."""

    channels: int | None = None
    kernel_size: tuple[int, ...] | None = None
    strides: tuple[int, ...] = (1,)
    output_padding: tuple[int, ...] = (0,)
    padding: tuple[int, ...] = (0,)
    dilation: tuple[int, ...] = (1,)
    groups: int = 1
    data_layout: str = "NCW"
    kernel_layout: str = "IOW"
    out_layout: str = ""
    out_dtype: str = ""


@attrs_class("relay.attrs.Conv2DTransposeAttrs")
class Conv2DTransposeAttrs(Attrs):
    """Attributes of ``nn.conv2d_transpose``."""

    channels: int | None = None
    kernel_size: tuple[int, ...] | None = None
    strides: tuple[int, ...] = (1, 1)
    output_padding: tuple[int, ...] = (0, 0)
    padding: tuple[int, ...] = (0, 0)
    dilation: tuple[int, ...] = (1, 1)
    groups: int = 1
    data_layout: str = "NCHW"
    kernel_layout: str = "IOHW"
    out_layout: str = ""
    out_dtype: str = ""


@attrs_class("relay.attrs.Conv3DTransposeAttrs")
class Conv3DTransposeAttrs(Attrs):
    """Attributes of ``nn.conv3d_transpose``."""

    channels: int | None = None
    kernel_size: tuple[int, ...] | None = None
    strides: tuple[int, ...] = (1, 1, 1)
    output_padding: tuple[int, ...] = (0, 0, 0)
    padding: tuple[int, ...] = (0, 0, 0)
    dilation: tuple[int, ...] = (1, 1, 1)
    groups: int = 1
    data_layout: str = "NCDHW"
    kernel_layout: str = "IODHW"
    out_layout: str = ""
    out_dtype: str = ""


# --- geometry: the type relation and the reference share it -----------------------------------

@dataclass(frozen=True)
class ConvPlan:
    """Everything a convolution call computes from its argument shapes and attributes.

    Attributes
    ----------
    data_layout, kernel_layout, out_layout : Layout
        Parsed layouts.
    data_primal, kernel_primal : str
        The primal layouts the kernel works in (``NCHW`` and ``OIHW`` / ``IOHW``).
    data_shape, weight_shape : tuple of int
        Argument shapes in the primal layouts.
    strides, dilation : tuple of int
        Per spatial axis.
    padding : tuple of (int, int)
        ``(begin, end)`` per spatial axis.
    groups : int
        Channel groups.
    out_shape : tuple of int
        Result shape in the output layout.
    out_primal_shape : tuple of int
        Result shape in the primal data layout.
    out_dtype : str
        Result dtype.
    """

    data_layout: Layout
    kernel_layout: Layout
    out_layout: Layout
    data_primal: str
    kernel_primal: str
    data_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    strides: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    groups: int
    out_shape: tuple[int, ...]
    out_primal_shape: tuple[int, ...]
    out_dtype: str


def _describe(ty: TensorType, layout: str) -> str:
    return f"{ty.shape} ({layout}, {ty.dtype})"


def conv_plan(op: str, nsp: int, transpose: bool, data: TensorType, weight: TensorType,
              attrs: Any) -> ConvPlan:
    """Check a convolution call and work out its geometry.

    Parameters
    ----------
    op : str
        Operator name (for errors).
    nsp : int
        Number of spatial axes.
    transpose : bool
        Whether this is a transposed convolution (weight ``I, O // groups, ...``).
    data, weight : TensorType
        Argument types.
    attrs : Attrs
        The call's convolution attributes.

    Returns
    -------
    ConvPlan
        Layouts, primal shapes, window geometry and the result type.

    Raises
    ------
    KilnTypeError
        Naming the op, both shapes and their layouts when the arguments do not fit together.
    """
    spatial = _SPATIAL[nsp]
    dprim, kprim = "NC" + spatial, ("IO" if transpose else "OI") + spatial
    dl = Layout(attrs.data_layout, op)
    kl = Layout(attrs.kernel_layout, op)
    ol = Layout(attrs.out_layout or attrs.data_layout, op)
    check_operand_dtypes(op, data, weight, "data", "weight")
    dshape = dl.forward_shape(data.shape, dprim, op, "data")
    wshape = kl.forward_shape(weight.shape, kprim, op, "weight")
    strides = int_tuple(attrs.strides, nsp, "strides", op)
    dilation = int_tuple(attrs.dilation, nsp, "dilation", op)
    positive(strides, "strides", op)
    positive(dilation, "dilation", op)
    padding = pad_pairs(attrs.padding, nsp, op)
    groups = int(attrs.groups)
    kernel = wshape[2:]
    positive(kernel, "kernel size", op)
    c = dshape[1]
    d_desc, w_desc = _describe(data, dl.name), _describe(weight, kl.name)
    if groups < 1 or c % groups:
        raise KilnTypeError(f"{op}: data {d_desc} has {c} input channels, which groups={groups} "
                            "does not divide")
    if transpose:
        if wshape[0] != c:
            raise KilnTypeError(f"{op}: data {d_desc} has {c} input channels but weight {w_desc} "
                                f"has {wshape[0]} (axis I)")
        out_channels = wshape[1] * groups
    else:
        if wshape[1] * groups != c:
            raise KilnTypeError(f"{op}: data {d_desc} has {c} input channels but weight {w_desc} "
                                f"expects {wshape[1]} per group x groups={groups} = "
                                f"{wshape[1] * groups}")
        out_channels = wshape[0]
        if out_channels % groups:
            raise KilnTypeError(f"{op}: weight {w_desc} has {out_channels} output channels, which "
                                f"groups={groups} does not divide")
    if attrs.channels is not None and int(attrs.channels) != out_channels:
        raise KilnTypeError(f"{op}: channels={attrs.channels} but weight {w_desc} gives "
                            f"{out_channels} output channels")
    if attrs.kernel_size is not None and tuple(attrs.kernel_size) != kernel:
        raise KilnTypeError(f"{op}: kernel_size={tuple(attrs.kernel_size)} but weight {w_desc} has "
                            f"kernel {kernel}")
    if transpose:
        out_pad = int_tuple(attrs.output_padding, nsp, "output_padding", op)
        if any(p < 0 for p in out_pad):
            raise KilnTypeError(f"{op}: output_padding must be non-negative, got {out_pad}")
        out_sp = tuple((i - 1) * s + (k - 1) * d + 1 - p[0] - p[1] + q for i, s, k, d, p, q in
                       zip(dshape[2:], strides, kernel, dilation, padding, out_pad))
    else:
        out_sp = tuple(window_out_size(i, p, k, s, d) for i, p, k, s, d in
                       zip(dshape[2:], padding, kernel, strides, dilation))
    if any(o < 1 for o in out_sp):
        raise KilnTypeError(f"{op}: output spatial shape {out_sp} is empty for data {d_desc}, "
                            f"kernel {kernel}, strides {strides}, padding {attrs.padding}, "
                            f"dilation {dilation}")
    out_primal = (dshape[0], out_channels, *out_sp)
    out_shape = ol.backward_shape(out_primal, dprim, op, "output")
    return ConvPlan(dl, kl, ol, dprim, kprim, dshape, wshape, strides, dilation, padding, groups,
                    out_shape, out_primal, as_dtype(attrs.out_dtype or data.dtype))


def conv_weight_type(op: str, nsp: int, transpose: bool, data: TensorType,
                     attrs: Any) -> TensorType | None:
    """The weight type that a convolution's ``channels`` and ``kernel_size`` imply.

    TVM's ``Conv*Rel`` assign it to a weight whose type is not known: ``(channels, C // groups,
    *kernel_size)`` (``(C, channels // groups, ...)`` when transposed) in the kernel layout, in the
    data's dtype. ``None`` when the attributes do not say, and for a grouped 2-d convolution,
    whose weight TVM's ``Conv2DRel`` needs to be given.
    """
    if attrs.channels is None or attrs.kernel_size is None:
        return None
    groups = int(attrs.groups)
    if nsp == 2 and groups > 1 and not transpose:
        return None
    spatial = _SPATIAL[nsp]
    dprim, kprim = "NC" + spatial, ("IO" if transpose else "OI") + spatial
    c = Layout(attrs.data_layout, op).forward_shape(data.shape, dprim, op, "data")[1]
    channels = int(attrs.channels)
    kernel = int_tuple(attrs.kernel_size, nsp, "kernel_size", op)
    primal = (c, channels // groups, *kernel) if transpose else (channels, c // groups, *kernel)
    shape = Layout(attrs.kernel_layout, op).backward_shape(primal, kprim, op, "weight")
    return TensorType(shape, data.dtype)


def _make_conv_op(name: str, nsp: int, transpose: bool, attrs_type: type, doc: str,
                  blocked: bool = False) -> None:
    def infer_args(types: list[Type | None], attrs: Any, out: Type | None) -> list[Type | None]:
        data = types[0]
        if not isinstance(data, TensorType) or name == "nn.contrib_conv2d_NCHWc":
            return [None, None]
        return [None, conv_weight_type(name, nsp, transpose, data, attrs)]

    def rel(types: list[Type], attrs: Any) -> Type:
        data = tensor_arg(types, 0, name, "data")
        weight = tensor_arg(types, 1, name, "weight")
        plan = conv_plan(name, nsp, transpose, data, weight, attrs)
        return TensorType(plan.out_shape, plan.out_dtype)

    def reference(args: list[np.ndarray], attrs: Any, out_type: Type) -> np.ndarray:
        data, weight = args
        plan = conv_plan(name, nsp, transpose, TensorType(data.shape, data.dtype.name),
                         TensorType(weight.shape, weight.dtype.name), attrs)
        x = plan.data_layout.to_primal(data, plan.data_primal)
        w = plan.kernel_layout.to_primal(weight, plan.kernel_primal)
        kernel = conv_transpose_nd if transpose else conv_nd
        out = kernel(x, w, plan.strides, plan.padding, plan.dilation, plan.groups,
                     plan.out_primal_shape[2:], np_dtype(plan.out_dtype))
        return plan.out_layout.from_primal(out, plan.data_primal)

    spatial = "DHW"[3 - nsp:]
    register_op(name, num_inputs=2, type_rel=rel, reference=reference,
                pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=attrs_type, doc=doc,
                kernel_layout="" if blocked else ("IO" if transpose else "OI") + spatial,
                fold_scale="conv" if not (transpose or blocked) and nsp > 1 else "",
                infer_args=infer_args)


_make_conv_op("nn.conv1d", 1, False, Conv1DAttrs, "1-d convolution")
_make_conv_op("nn.conv2d", 2, False, Conv2DAttrs, "2-d convolution")
_make_conv_op("nn.conv3d", 3, False, Conv3DAttrs, "3-d convolution")
_make_conv_op("nn.conv1d_transpose", 1, True, Conv1DTransposeAttrs, "1-d transposed convolution")
_make_conv_op("nn.conv2d_transpose", 2, True, Conv2DTransposeAttrs, "2-d transposed convolution")
_make_conv_op("nn.conv3d_transpose", 3, True, Conv3DTransposeAttrs, "3-d transposed convolution")
_make_conv_op("nn.contrib_conv2d_NCHWc", 2, False, Conv2DAttrs,
              "2-d convolution on channel-blocked data (NCHW[x]c, kernel OIHW[x]i[y]o)", blocked=True)
_make_conv_op("nn.contrib_depthwise_conv2d_NCHWc", 2, False, Conv2DAttrs,
              "depthwise 2-d convolution on channel-blocked data (kernel OIHW1i[y]o)", blocked=True)


# --- builders (TVM's relay.nn signatures) ------------------------------------------------------

def _opt_tuple(value: Any, n: int, what: str, op: str) -> tuple[int, ...] | None:
    return None if value is None else int_tuple(value, n, what, op)


def _dtype_attr(out_dtype: Any) -> str:
    return as_dtype(out_dtype) if out_dtype not in ("", None) else ""


def _conv(name: str, nsp: int, attrs_type: type, data: Expr, weight: Expr, strides: Any,
          padding: Any, dilation: Any, groups: int, channels: int | None, kernel_size: Any,
          data_layout: str, kernel_layout: str, out_layout: str, out_dtype: Any) -> Call:
    attrs = attrs_type(
        strides=int_tuple(strides, nsp, "strides", name),
        padding=pad_tuple(padding, nsp, name),
        dilation=int_tuple(dilation, nsp, "dilation", name),
        groups=int(groups),
        channels=None if channels is None else int(channels),
        kernel_size=_opt_tuple(kernel_size, nsp, "kernel_size", name),
        data_layout=data_layout,
        kernel_layout=kernel_layout,
        out_layout=out_layout,
        out_dtype=_dtype_attr(out_dtype),
    )
    return make_call(name, [data, weight], attrs)


def _conv_transpose(name: str, nsp: int, attrs_type: type, data: Expr, weight: Expr,
                    strides: Any, padding: Any, dilation: Any, groups: int,
                    channels: int | None, kernel_size: Any, data_layout: str,
                    kernel_layout: str, out_layout: str, output_padding: Any,
                    out_dtype: Any) -> Call:
    attrs = attrs_type(
        channels=None if channels is None else int(channels),
        kernel_size=_opt_tuple(kernel_size, nsp, "kernel_size", name),
        strides=int_tuple(strides, nsp, "strides", name),
        output_padding=int_tuple(output_padding, nsp, "output_padding", name),
        padding=pad_tuple(padding, nsp, name),
        dilation=int_tuple(dilation, nsp, "dilation", name),
        groups=int(groups),
        data_layout=data_layout,
        kernel_layout=kernel_layout,
        out_layout=out_layout,
        out_dtype=_dtype_attr(out_dtype),
    )
    return make_call(name, [data, weight], attrs)


def conv1d(data: Expr, weight: Expr, strides: Any = 1, padding: Any = 0, dilation: Any = 1,
           groups: int = 1, channels: int | None = None, kernel_size: Any = None,
           data_layout: str = "NCW", kernel_layout: str = "OIW", out_layout: str = "",
           out_dtype: str = "") -> Call:
    """1-d convolution (``relay.nn.conv1d``).

    Parameters
    ----------
    data : Expr
        Input, ``(N, C, W)`` in ``data_layout``.
    weight : Expr
        Kernel, ``(O, C // groups, KW)`` in ``kernel_layout``.
    strides, dilation : int or tuple of int
        Window stride and dilation.
    padding : int or tuple of int
        One value (both sides) or ``(left, right)``.
    groups : int
        Channel groups.
    channels : int, optional
        Number of output channels (checked against the weight).
    kernel_size : int or tuple of int, optional
        Kernel width (checked against the weight).
    data_layout, kernel_layout, out_layout : str
        Layouts of the data, the weight and the result (``""``: same as the data).
    out_dtype : str
        Result dtype (``""``: the data's dtype).

    Returns
    -------
    Call
        The convolution.
    """
    return _conv("nn.conv1d", 1, Conv1DAttrs, data, weight, strides, padding, dilation, groups,
                 channels, kernel_size, data_layout, kernel_layout, out_layout, out_dtype)


def conv2d(data: Expr, weight: Expr, strides: Any = (1, 1), padding: Any = (0, 0),
           dilation: Any = (1, 1), groups: int = 1, channels: int | None = None,
           kernel_size: Any = None, data_layout: str = "NCHW", kernel_layout: str = "OIHW",
           out_layout: str = "", out_dtype: str = "") -> Call:
    """2-d convolution (``relay.nn.conv2d``).

    Parameters
    ----------
    data : Expr
        Input, ``(N, C, H, W)`` in ``data_layout`` (``NHWC`` etc. also work).
    weight : Expr
        Kernel, ``(O, C // groups, KH, KW)`` in ``kernel_layout`` (``HWIO``, ``HWOI``, ...).
    strides, dilation : int or tuple of int
        Window stride and dilation per axis.
    padding : int or tuple of int
        One value, ``(pad_h, pad_w)``, or ``(top, left, bottom, right)``.
    groups : int
        Channel groups (``groups == C`` is a depthwise convolution).
    channels : int, optional
        Number of output channels (checked against the weight).
    kernel_size : int or tuple of int, optional
        Kernel size (checked against the weight).
    data_layout, kernel_layout, out_layout : str
        Layouts of the data, the weight and the result (``""``: same as the data).
    out_dtype : str
        Result dtype (``""``: the data's dtype).

    Returns
    -------
    Call
        The convolution.

    Examples
    --------
    >>> y = conv2d(x, w, padding=1, channels=8, kernel_size=3)
    """
    return _conv("nn.conv2d", 2, Conv2DAttrs, data, weight, strides, padding, dilation, groups,
                 channels, kernel_size, data_layout, kernel_layout, out_layout, out_dtype)


def conv3d(data: Expr, weight: Expr, strides: Any = (1, 1, 1), padding: Any = (0, 0, 0),
           dilation: Any = (1, 1, 1), groups: int = 1, channels: int | None = None,
           kernel_size: Any = None, data_layout: str = "NCDHW", kernel_layout: str = "OIDHW",
           out_layout: str = "", out_dtype: str = "") -> Call:
    """3-d convolution (``relay.nn.conv3d``).

    Parameters
    ----------
    data : Expr
        Input, ``(N, C, D, H, W)`` in ``data_layout``.
    weight : Expr
        Kernel, ``(O, C // groups, KD, KH, KW)`` in ``kernel_layout``.
    strides, dilation : int or tuple of int
        Window stride and dilation per axis.
    padding : int or tuple of int
        One value, three (symmetric) or six (front, top, left, back, bottom, right).
    groups : int
        Channel groups.
    channels : int, optional
        Number of output channels (checked against the weight).
    kernel_size : int or tuple of int, optional
        Kernel size (checked against the weight).
    data_layout, kernel_layout, out_layout : str
        Layouts of the data, the weight and the result.
    out_dtype : str
        Result dtype (``""``: the data's dtype).

    Returns
    -------
    Call
        The convolution.
    """
    return _conv("nn.conv3d", 3, Conv3DAttrs, data, weight, strides, padding, dilation, groups,
                 channels, kernel_size, data_layout, kernel_layout, out_layout, out_dtype)


def conv1d_transpose(data: Expr, weight: Expr, strides: Any = (1,), padding: Any = (0,),
                     dilation: Any = (1,), groups: int = 1, channels: int | None = None,
                     kernel_size: Any = None, data_layout: str = "NCW", kernel_layout: str = "IOW",
                     out_layout: str = "", output_padding: Any = (0,),
                     out_dtype: str = "") -> Call:
    """1-d transposed convolution (``relay.nn.conv1d_transpose``).

    Parameters
    ----------
    data : Expr
        Input, ``(N, C, W)``.
    weight : Expr
        Kernel, ``(C, O // groups, KW)`` in ``kernel_layout`` (default ``IOW``).
    strides, dilation : int or tuple of int
        Stride and dilation of the forward convolution this transposes.
    padding : int or tuple of int
        Cropping of the full output, one value or ``(left, right)``.
    groups : int
        Channel groups.
    channels : int, optional
        Number of output channels (checked against the weight).
    kernel_size : int or tuple of int, optional
        Kernel width (checked against the weight).
    data_layout, kernel_layout, out_layout : str
        Layouts.
    output_padding : int or tuple of int
        Extra positions added at the end of the output.
    out_dtype : str
        Result dtype (``""``: the data's dtype).

    Returns
    -------
    Call
        The transposed convolution.
    """
    return _conv_transpose("nn.conv1d_transpose", 1, Conv1DTransposeAttrs, data, weight, strides,
                           padding, dilation, groups, channels, kernel_size, data_layout,
                           kernel_layout, out_layout, output_padding, out_dtype)


def conv2d_transpose(data: Expr, weight: Expr, strides: Any = (1, 1), padding: Any = (0, 0),
                     dilation: Any = (1, 1), groups: int = 1, channels: int | None = None,
                     kernel_size: Any = None, data_layout: str = "NCHW",
                     kernel_layout: str = "IOHW", out_layout: str = "",
                     output_padding: Any = (0, 0), out_dtype: str = "") -> Call:
    """2-d transposed convolution (``relay.nn.conv2d_transpose``).

    The output size per axis is ``(in - 1) * stride + (kernel - 1) * dilation + 1 - pad_begin -
    pad_end + output_padding``.

    Parameters
    ----------
    data : Expr
        Input, ``(N, C, H, W)``.
    weight : Expr
        Kernel, ``(C, O // groups, KH, KW)`` in ``kernel_layout`` (default ``IOHW``).
    strides, dilation : int or tuple of int
        Stride and dilation of the forward convolution this transposes.
    padding : int or tuple of int
        Cropping of the full output: one, two or four values.
    groups : int
        Channel groups.
    channels : int, optional
        Number of output channels (checked against the weight).
    kernel_size : int or tuple of int, optional
        Kernel size (checked against the weight).
    data_layout, kernel_layout, out_layout : str
        Layouts.
    output_padding : int or tuple of int
        Extra positions added at the end of each spatial axis.
    out_dtype : str
        Result dtype (``""``: the data's dtype).

    Returns
    -------
    Call
        The transposed convolution.
    """
    return _conv_transpose("nn.conv2d_transpose", 2, Conv2DTransposeAttrs, data, weight, strides,
                           padding, dilation, groups, channels, kernel_size, data_layout,
                           kernel_layout, out_layout, output_padding, out_dtype)


def conv3d_transpose(data: Expr, weight: Expr, strides: Any = (1, 1, 1),
                     padding: Any = (0, 0, 0), dilation: Any = (1, 1, 1), groups: int = 1,
                     channels: int | None = None, kernel_size: Any = None,
                     data_layout: str = "NCDHW", kernel_layout: str = "IODHW",
                     out_layout: str = "", output_padding: Any = (0, 0, 0),
                     out_dtype: str = "") -> Call:
    """3-d transposed convolution (``relay.nn.conv3d_transpose``).

    Parameters
    ----------
    data : Expr
        Input, ``(N, C, D, H, W)``.
    weight : Expr
        Kernel, ``(C, O // groups, KD, KH, KW)`` in ``kernel_layout`` (default ``IODHW``).
    strides, dilation : int or tuple of int
        Stride and dilation of the forward convolution this transposes.
    padding : int or tuple of int
        Cropping of the full output: one, three or six values.
    groups : int
        Channel groups.
    channels : int, optional
        Number of output channels (checked against the weight).
    kernel_size : int or tuple of int, optional
        Kernel size (checked against the weight).
    data_layout, kernel_layout, out_layout : str
        Layouts.
    output_padding : int or tuple of int
        Extra positions added at the end of each spatial axis.
    out_dtype : str
        Result dtype (``""``: the data's dtype).

    Returns
    -------
    Call
        The transposed convolution.
    """
    return _conv_transpose("nn.conv3d_transpose", 3, Conv3DTransposeAttrs, data, weight, strides,
                           padding, dilation, groups, channels, kernel_size, data_layout,
                           kernel_layout, out_layout, output_padding, out_dtype)


def contrib_conv2d_nchwc(data: Expr, kernel: Expr, strides: Any = (1, 1), padding: Any = (0, 0),
                         dilation: Any = (1, 1), groups: int = 1, channels: int | None = None,
                         kernel_size: Any = None, data_layout: str = "NCHW8c",
                         kernel_layout: str = "OIHW", out_layout: str = "",
                         out_dtype: str = "") -> Call:
    """2-d convolution on channel-blocked tensors (``nn.contrib_conv2d_NCHWc``).

    Data is ``(N, C // x, H, W, x)`` in layout ``NCHW{x}c``, the kernel ``(O // y, C // x, KH, KW,
    x, y)`` in ``OIHW{x}i{y}o`` and the result ``(N, O // y, OH, OW, y)`` in ``NCHW{y}c`` (the
    ``out_layout``). The result equals a plain ``conv2d`` of the unblocked tensors.

    Parameters
    ----------
    data : Expr
        Blocked input.
    kernel : Expr
        Blocked kernel.
    strides, padding, dilation, groups, channels, kernel_size : see :func:`conv2d`
        Convolution parameters.
    data_layout, kernel_layout, out_layout : str
        Blocked layouts (e.g. ``"NCHW8c"``, ``"OIHW8i8o"``, ``"NCHW8c"``).
    out_dtype : str
        Result dtype (``""``: the data's dtype).

    Returns
    -------
    Call
        The convolution.
    """
    return _conv("nn.contrib_conv2d_NCHWc", 2, Conv2DAttrs, data, kernel, strides, padding,
                 dilation, groups, channels, kernel_size, data_layout, kernel_layout, out_layout,
                 out_dtype)


def contrib_depthwise_conv2d_nchwc(data: Expr, kernel: Expr, strides: Any = (1, 1),
                                   padding: Any = (0, 0), dilation: Any = (1, 1), groups: int = 1,
                                   channels: int | None = None, kernel_size: Any = None,
                                   data_layout: str = "NCHW8c", kernel_layout: str = "OIHW",
                                   out_layout: str = "", out_dtype: str = "") -> Call:
    """Depthwise 2-d convolution on channel-blocked tensors (``nn.contrib_depthwise_conv2d_NCHWc``).

    As TVM: data ``NCHW{x}c``, kernel ``(O // y, 1, KH, KW, 1, y)`` in ``OIHW1i{y}o``, result
    ``NCHW{y}c``, with ``groups`` equal to the number of input channels; output channel ``o``
    reads input channel ``o // (O // C)``.

    Parameters
    ----------
    data : Expr
        Blocked input.
    kernel : Expr
        Blocked depthwise kernel.
    strides, padding, dilation, groups, channels, kernel_size : see :func:`conv2d`
        Convolution parameters (``groups`` is the number of input channels).
    data_layout, kernel_layout, out_layout : str
        Blocked layouts.
    out_dtype : str
        Result dtype (``""``: the data's dtype).

    Returns
    -------
    Call
        The convolution.
    """
    return _conv("nn.contrib_depthwise_conv2d_NCHWc", 2, Conv2DAttrs, data, kernel, strides,
                 padding, dilation, groups, channels, kernel_size, data_layout, kernel_layout,
                 out_layout, out_dtype)

# TE computes used by the C code generator (kept in their own module).
from kiln.op import compute_conv  # noqa: E402,F401
