"""Spatial rearrangements of the ``nn`` family: pad, depth_to_space, space_to_depth, upsampling.

Builders are exported by :mod:`kiln.op.nn`. ``upsampling`` and ``upsampling3d`` are resizes by a
scale factor (TVM lowers them to ``image.resize2d``/``resize3d``); they share the resize kernel.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Constant, Expr, const
from kiln.ir.types import TensorType, Type
from kiln.op.image_resize import COORDINATE_MODES, resize_nd
from kiln.op.nn_common import Layout, spatial_axes, to_out
from kiln.op.registry import OpPattern, make_call, register_op, tensor_arg

__all__ = ["depth_to_space", "pad", "space_to_depth", "upsampling", "upsampling3d"]


# --- pad ---------------------------------------------------------------------------------------

@attrs_class("relay.attrs.PadAttrs")
class PadAttrs(Attrs):
    """Attributes of ``nn.pad`` (the pad value is the second argument)."""

    pad_width: tuple[tuple[int, int], ...]
    pad_mode: str = "constant"


_PAD_MODES: dict[str, Literal["constant", "edge", "reflect"]] = {
    "constant": "constant", "edge": "edge", "reflect": "reflect"}


def _pad_rel(types: list[Type], attrs: PadAttrs) -> Type:
    op = "nn.pad"
    data = tensor_arg(types, 0, op, "data")
    value = tensor_arg(types, 1, op, "pad_value")
    if value.size != 1:
        raise KilnTypeError(f"{op}: pad_value must be a scalar, got shape {value.shape}")
    if attrs.pad_mode not in _PAD_MODES:
        raise KilnTypeError(f"{op}: unknown pad_mode {attrs.pad_mode!r}; expected constant, edge "
                            "or reflect")
    if len(attrs.pad_width) != data.ndim or any(len(p) != 2 for p in attrs.pad_width):
        raise KilnTypeError(f"{op}: pad_width needs one (before, after) pair per axis of data "
                            f"{data.shape}, got {attrs.pad_width}")
    shape = tuple(d + a + b for d, (a, b) in zip(data.shape, attrs.pad_width))
    if any(d < 0 for d in shape):
        raise KilnTypeError(f"{op}: pad_width {attrs.pad_width} crops data {data.shape} below size 0")
    for axis, (d, (a, b)) in enumerate(zip(data.shape, attrs.pad_width)):
        kept = d + min(a, 0) + min(b, 0)
        widest = max(a, b, 0)
        if widest and ((attrs.pad_mode == "edge" and kept < 1) or
                       (attrs.pad_mode == "reflect" and kept <= widest)):
            raise KilnTypeError(f"{op}: {attrs.pad_mode} padding of {widest} on axis {axis} "
                                f"needs more input values along it (data {data.shape})")
    return TensorType(shape, data.dtype)


def _pad_ref(args: list[np.ndarray], attrs: PadAttrs, out_type: Type) -> np.ndarray:
    data, value = args
    crop = tuple(slice(max(-a, 0), d - max(-b, 0)) for d, (a, b) in zip(data.shape, attrs.pad_width))
    widths = [(max(a, 0), max(b, 0)) for a, b in attrs.pad_width]
    x = data[crop]
    if attrs.pad_mode == "constant":
        fill = np.asarray(value).reshape(()).astype(data.dtype)
        return to_out(np.pad(x, widths, mode="constant", constant_values=fill), out_type)
    return to_out(np.pad(x, widths, mode=_PAD_MODES[attrs.pad_mode]), out_type)


register_op("nn.pad", layout="pad", num_inputs=2, type_rel=_pad_rel, reference=_pad_ref,
            pattern=OpPattern.INJECTIVE, attrs_type=PadAttrs,
            doc="pad (or, with negative widths, crop) every axis")


# --- depth_to_space, space_to_depth ------------------------------------------------------------

@attrs_class("relay.attrs.SubPixelAttrs")
class SubPixelAttrs(Attrs):
    """Attributes of ``nn.depth_to_space`` and ``nn.space_to_depth``."""

    block_size: int = 1
    layout: str = "NCHW"
    mode: str = "DCR"


def _subpixel_rel(op: str, types: list[Type], attrs: SubPixelAttrs) -> Type:
    data = tensor_arg(types, 0, op, "data")
    layout = Layout(attrs.layout, op)
    n, c, h, w = layout.forward_shape(data.shape, "NCHW", op, "data")
    bs = int(attrs.block_size)
    if bs < 1:
        raise KilnTypeError(f"{op}: block_size must be positive, got {bs}")
    if attrs.mode not in ("DCR", "CRD"):
        raise KilnTypeError(f"{op}: mode must be 'DCR' or 'CRD', got {attrs.mode!r}")
    if op == "nn.depth_to_space":
        if c % (bs * bs):
            raise KilnTypeError(f"{op}: {c} channels of data {data.shape} do not divide by "
                                f"block_size^2 = {bs * bs}")
        out = (n, c // (bs * bs), h * bs, w * bs)
    else:
        if h % bs or w % bs:
            raise KilnTypeError(f"{op}: height {h} and width {w} of data {data.shape} must divide "
                                f"by block_size {bs}")
        out = (n, c * bs * bs, h // bs, w // bs)
    return TensorType(layout.backward_shape(out, "NCHW", op, "output"), data.dtype)


def _depth_to_space_ref(args: list[np.ndarray], attrs: SubPixelAttrs, out_type: Type) -> np.ndarray:
    layout = Layout(attrs.layout)
    x = layout.to_primal(args[0], "NCHW")
    n, c, h, w = x.shape
    bs = attrs.block_size
    if attrs.mode == "DCR":  # channel index = (row offset, column offset, output channel)
        y = x.reshape(n, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:  # CRD: channel index = (output channel, row offset, column offset)
        y = x.reshape(n, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return layout.from_primal(y.reshape(n, c // (bs * bs), h * bs, w * bs), "NCHW")


def _space_to_depth_ref(args: list[np.ndarray], attrs: SubPixelAttrs, out_type: Type) -> np.ndarray:
    layout = Layout(attrs.layout)
    x = layout.to_primal(args[0], "NCHW")
    n, c, h, w = x.shape
    bs = attrs.block_size
    y = x.reshape(n, c, h // bs, bs, w // bs, bs).transpose(0, 3, 5, 1, 2, 4)
    return layout.from_primal(y.reshape(n, c * bs * bs, h // bs, w // bs), "NCHW")


register_op("nn.depth_to_space", layout="depth_to_space", num_inputs=1,
            type_rel=lambda types, attrs: _subpixel_rel("nn.depth_to_space", types, attrs),
            reference=_depth_to_space_ref, pattern=OpPattern.INJECTIVE, attrs_type=SubPixelAttrs,
            doc="move channel blocks into spatial blocks (DCR or CRD order)")
register_op("nn.space_to_depth", num_inputs=1,
            type_rel=lambda types, attrs: _subpixel_rel("nn.space_to_depth", types, attrs),
            reference=_space_to_depth_ref, pattern=OpPattern.INJECTIVE, attrs_type=SubPixelAttrs,
            doc="move spatial blocks into channels")


# --- upsampling --------------------------------------------------------------------------------

@attrs_class("relay.attrs.UpSamplingAttrs")
class UpSamplingAttrs(Attrs):
    """Attributes of ``nn.upsampling`` (the scales have no default, so they always print)."""

    scale_h: float
    scale_w: float
    layout: str = "NCHW"
    method: str = "nearest_neighbor"
    align_corners: bool = False


@attrs_class("relay.attrs.UpSampling3DAttrs")
class UpSampling3DAttrs(Attrs):
    """Attributes of ``nn.upsampling3d``."""

    scale_d: float
    scale_h: float
    scale_w: float
    layout: str = "NCDHW"
    method: str = "nearest_neighbor"
    coordinate_transformation_mode: str = "half_pixel"


# Upsampling method names (TVM's "bilinear"/"trilinear"... drop the prefix) -> resize methods.
_UPSAMPLE_METHODS = {"nearest_neighbor": "nearest_neighbor", "bilinear": "linear",
                     "trilinear": "linear", "linear": "linear", "bicubic": "cubic",
                     "tricubic": "cubic", "cubic": "cubic"}


def _round_half_away(x: float) -> int:
    return int(np.floor(abs(x) + 0.5) * np.sign(x))


def _upsample_plan(op: str, shape: tuple[int, ...], attrs: Any, letters: str,
                   scales: tuple[float, ...]) -> tuple[tuple[int, ...], tuple[int, ...], str, str]:
    """Resized axes, their new sizes, the resize method and coordinate mode of an upsampling."""
    layout = Layout(attrs.layout, op)
    layout.check_shape(shape, op, "data")
    axes = spatial_axes(layout, letters, op)
    if attrs.method not in _UPSAMPLE_METHODS:
        raise KilnTypeError(f"{op}: unknown method {attrs.method!r}; expected one of "
                            f"{', '.join(_UPSAMPLE_METHODS)}")
    sizes = tuple(_round_half_away(shape[a] * s) for a, s in zip(axes, scales))
    if any(s < 1 for s in sizes):
        raise KilnTypeError(f"{op}: scales {scales} make data {shape} empty")
    if letters == "HW":
        mode = "align_corners" if attrs.align_corners else "asymmetric"
    else:
        mode = attrs.coordinate_transformation_mode
        if mode not in COORDINATE_MODES:
            raise KilnTypeError(f"{op}: unknown coordinate_transformation_mode {mode!r}")
    return axes, sizes, _UPSAMPLE_METHODS[attrs.method], mode


def _register_upsampling(name: str, letters: str, attrs_type: type) -> None:
    def scales(attrs: Any) -> tuple[float, ...]:
        return tuple(float(getattr(attrs, f"scale_{a.lower()}")) for a in letters)

    def rel(types: list[Type], attrs: Any) -> Type:
        data = tensor_arg(types, 0, name, "data")
        axes, sizes, _, _ = _upsample_plan(name, data.shape, attrs, letters, scales(attrs))
        shape = list(data.shape)
        for a, s in zip(axes, sizes):
            shape[a] = s
        return TensorType(tuple(shape), data.dtype)

    def reference(args: list[np.ndarray], attrs: Any, out_type: Type) -> np.ndarray:
        axes, sizes, method, mode = _upsample_plan(name, args[0].shape, attrs, letters,
                                                   scales(attrs))
        roi = ((0.0, 0.0),) * len(axes)
        return resize_nd(args[0], axes, sizes, roi, method, mode, "", -0.5, False, 0.0,
                         args[0].dtype)

    register_op(name, num_inputs=1, type_rel=rel, reference=reference,
                pattern=OpPattern.INJECTIVE, attrs_type=attrs_type,
                doc=f"resize the {letters} axes by scale factors",
                layout="resize" if letters == "HW" else "")


_register_upsampling("nn.upsampling", "HW", UpSamplingAttrs)
_register_upsampling("nn.upsampling3d", "DHW", UpSampling3DAttrs)


# --- builders ----------------------------------------------------------------------------------

def pad(data: Expr, pad_width: Any, pad_value: Any = 0.0, pad_mode: str = "constant") -> Call:
    """Pad every axis of ``data`` (``relay.nn.pad``, TVM >= 0.8 signature).

    Parameters
    ----------
    data : Expr
        Input.
    pad_width : sequence of (int, int)
        ``(before, after)`` per axis; negative values crop.
    pad_value : Expr or number
        Fill value for ``"constant"`` mode; a number becomes a ``relay.const`` (the call's second
        argument), cast to the data's dtype when padding.
    pad_mode : str
        ``"constant"``, ``"edge"`` (repeat the border) or ``"reflect"`` (mirror, border excluded).

    Returns
    -------
    Call
        The padded tensor.
    """
    if isinstance(pad_width, Constant):
        pad_width = pad_width.value.tolist()
    if isinstance(pad_width, Expr):
        raise KilnTypeError("nn.pad: pad_width must be static (a list of pairs or a constant); "
                            "Kiln compiles static shapes")
    widths = tuple((int(a), int(b)) for a, b in pad_width)
    value = pad_value if isinstance(pad_value, Expr) else const(pad_value)
    return make_call("nn.pad", [data, value], PadAttrs(widths, pad_mode))


def depth_to_space(data: Expr, block_size: int, layout: str = "NCHW", mode: str = "DCR") -> Call:
    """Rearrange channel blocks into ``block_size`` x ``block_size`` spatial blocks
    (``relay.nn.depth_to_space``, ONNX ``DepthToSpace``).

    Parameters
    ----------
    data : Expr
        ``(N, C, H, W)`` in ``layout`` (``NCHW`` or ``NHWC``).
    block_size : int
        Block edge.
    layout : str
        Data layout.
    mode : str
        ``"DCR"`` (depth-column-row) or ``"CRD"`` (column-row-depth) channel order.

    Returns
    -------
    Call
        ``(N, C / block_size^2, H * block_size, W * block_size)``.
    """
    return make_call("nn.depth_to_space", [data], SubPixelAttrs(int(block_size), layout, mode))


def space_to_depth(data: Expr, block_size: int, layout: str = "NCHW") -> Call:
    """Rearrange ``block_size`` x ``block_size`` spatial blocks into channels
    (``relay.nn.space_to_depth``, ONNX ``SpaceToDepth``).

    Parameters
    ----------
    data : Expr
        ``(N, C, H, W)`` in ``layout`` (``NCHW`` or ``NHWC``).
    block_size : int
        Block edge; divides ``H`` and ``W``.
    layout : str
        Data layout.

    Returns
    -------
    Call
        ``(N, C * block_size^2, H / block_size, W / block_size)``.
    """
    return make_call("nn.space_to_depth", [data], SubPixelAttrs(int(block_size), layout))


def _scale(value: Any) -> float:
    if isinstance(value, Constant):
        return float(value.value.reshape(()))
    if isinstance(value, Expr):
        raise KilnTypeError("nn.upsampling: scales must be static numbers; Kiln compiles static "
                            "shapes")
    return float(value)


def upsampling(data: Expr, scale_h: Any = 1, scale_w: Any = 1, layout: str = "NCHW",
               method: str = "nearest_neighbor", align_corners: bool = False) -> Call:
    """Upsample H and W by scale factors (``relay.nn.upsampling``).

    The new size is ``round(size * scale)``; ``align_corners`` selects the ``align_corners``
    coordinate transformation, else ``asymmetric`` (nearest rounds down), as TVM.

    Parameters
    ----------
    data : Expr
        Input in ``layout`` (``NCHW``, ``NHWC``, ...).
    scale_h, scale_w : float
        Scale factors.
    layout : str
        Data layout.
    method : str
        ``"nearest_neighbor"``, ``"bilinear"`` or ``"bicubic"``.
    align_corners : bool
        Align the corner pixels of input and output.

    Returns
    -------
    Call
        The upsampled tensor.
    """
    return make_call("nn.upsampling", [data],
                     UpSamplingAttrs(_scale(scale_h), _scale(scale_w), layout, method,
                                     bool(align_corners)))


def upsampling3d(data: Expr, scale_d: Any = 1, scale_h: Any = 1, scale_w: Any = 1,
                 layout: str = "NCDHW", method: str = "nearest_neighbor",
                 coordinate_transformation_mode: str = "half_pixel") -> Call:
    """Upsample D, H and W by scale factors (``relay.nn.upsampling3d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout`` (``NCDHW``, ``NDHWC``, ...).
    scale_d, scale_h, scale_w : float
        Scale factors (new size ``round(size * scale)``).
    layout : str
        Data layout.
    method : str
        ``"nearest_neighbor"``, ``"trilinear"`` or ``"tricubic"``.
    coordinate_transformation_mode : str
        As ``image.resize3d``.

    Returns
    -------
    Call
        The upsampled tensor.
    """
    return make_call("nn.upsampling3d", [data],
                     UpSampling3DAttrs(_scale(scale_d), _scale(scale_h), _scale(scale_w), layout,
                                       method, coordinate_transformation_mode))
