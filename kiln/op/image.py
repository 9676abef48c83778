"""Image operators: ``image.resize1d``, ``image.resize2d``, ``image.resize3d``.

They resize the spatial axes of their ``layout`` (``W``, ``HW``, ``DHW``; the channel axis may be
blocked, spatial axes may not) to ``size`` with ONNX ``Resize`` semantics, which the ONNX importer
relies on: every coordinate transformation mode, nearest rounding method, linear and cubic
interpolation (``cubic_alpha``, ``cubic_exclude``) and ``tf_crop_and_resize`` with ``roi`` and
``extrapolation_value``. ``roi`` lists the normalised crop starts of the resized axes then their
ends, in layout order (``(start_h, start_w, end_h, end_w)`` for 2-d, ``(start_d, start_h, start_w,
end_d, end_h, end_w)`` for 3-d).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Constant, Expr
from kiln.ir.types import TensorType, Type, as_dtype, np_dtype
from kiln.op.image_resize import COORDINATE_MODES, METHODS, ROUNDING_METHODS, resize_nd
from kiln.op.nn_common import Layout, int_tuple, positive, spatial_axes
from kiln.op.registry import OpPattern, make_call, register_op, tensor_arg

__all__ = ["resize1d", "resize2d", "resize3d"]

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


@attrs_class("relay.attrs.Resize1DAttrs")
class Resize1DAttrs(Attrs):
    """Attributes of ``image.resize1d``."""

    size: tuple[int, ...] | None = None
    roi: tuple[float, ...] | None = None
    layout: str = "NCW"
    method: str = "linear"
    coordinate_transformation_mode: str = "half_pixel"
    rounding_method: str = "round"
    cubic_alpha: float = -0.5
    cubic_exclude: int = 0
    extrapolation_value: float = 0.0
    out_dtype: str = ""


@attrs_class("relay.attrs.Resize2DAttrs")
class Resize2DAttrs(Attrs):
    """Attributes of ``image.resize2d``."""

    size: tuple[int, ...] | None = None
    roi: tuple[float, ...] | None = None
    layout: str = "NCHW"
    method: str = "linear"
    coordinate_transformation_mode: str = "half_pixel"
    rounding_method: str = "round"
    cubic_alpha: float = -0.5
    cubic_exclude: int = 0
    extrapolation_value: float = 0.0
    out_dtype: str = ""


@attrs_class("relay.attrs.Resize3DAttrs")
class Resize3DAttrs(Attrs):
    """Attributes of ``image.resize3d``."""

    size: tuple[int, ...] | None = None
    roi: tuple[float, ...] | None = None
    layout: str = "NCDHW"
    method: str = "linear"
    coordinate_transformation_mode: str = "half_pixel"
    rounding_method: str = "round"
    cubic_alpha: float = -0.5
    cubic_exclude: int = 0
    extrapolation_value: float = 0.0
    out_dtype: str = ""


def resize_plan(op: str, nsp: int, shape: tuple[int, ...], attrs: Any
                ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[float, float], ...]]:
    """Check a resize call.

    Parameters
    ----------
    op : str
        Operator name (for errors).
    nsp : int
        Number of resized axes.
    shape : tuple of int
        Data shape.
    attrs : Attrs
        The call's resize attributes.

    Returns
    -------
    axes : tuple of int
        Positions of the resized axes.
    sizes : tuple of int
        Their new lengths.
    roi : tuple of (float, float)
        Crop ``(start, end)`` per resized axis.
    """
    layout = Layout(attrs.layout, op)
    layout.check_shape(shape, op, "data")
    axes = spatial_axes(layout, _SPATIAL[nsp], op)
    if attrs.size is None:
        raise KilnTypeError(f"{op}: size is not set")
    sizes = int_tuple(attrs.size, nsp, "size", op)
    positive(sizes, "size", op)
    roi = tuple(float(v) for v in (attrs.roi if attrs.roi is not None else (0.0,) * (2 * nsp)))
    if len(roi) != 2 * nsp:
        raise KilnTypeError(f"{op}: roi must have {2 * nsp} values (starts then ends), got {roi}")
    for what, value, allowed in (("method", attrs.method, METHODS),
                                 ("coordinate_transformation_mode",
                                  attrs.coordinate_transformation_mode, COORDINATE_MODES),
                                 ("rounding_method", attrs.rounding_method, ROUNDING_METHODS)):
        if value not in allowed:
            raise KilnTypeError(f"{op}: unknown {what} {value!r}; expected one of "
                                f"{', '.join(repr(a) for a in allowed)}")
    return axes, sizes, tuple((roi[i], roi[i + nsp]) for i in range(nsp))


def _register_resize(nsp: int, attrs_type: type) -> None:
    name = f"image.resize{nsp}d"

    def rel(types: list[Type], attrs: Any) -> Type:
        data = tensor_arg(types, 0, name, "data")
        axes, sizes, _ = resize_plan(name, nsp, data.shape, attrs)
        shape = list(data.shape)
        for a, s in zip(axes, sizes):
            shape[a] = s
        return TensorType(tuple(shape), as_dtype(attrs.out_dtype or data.dtype))

    def reference(args: list[np.ndarray], attrs: Any, out_type: Type) -> np.ndarray:
        axes, sizes, roi = resize_plan(name, nsp, args[0].shape, attrs)
        assert isinstance(out_type, TensorType)
        return resize_nd(args[0], axes, sizes, roi, attrs.method,
                         attrs.coordinate_transformation_mode, attrs.rounding_method,
                         float(attrs.cubic_alpha), bool(attrs.cubic_exclude),
                         float(attrs.extrapolation_value), np_dtype(out_type.dtype))

    register_op(name, num_inputs=1, type_rel=rel, reference=reference, pattern=OpPattern.INJECTIVE,
                attrs_type=attrs_type, doc=f"resize the {_SPATIAL[nsp]} axes (ONNX Resize)",
                layout="resize" if nsp == 2 else "")


_register_resize(1, Resize1DAttrs)
_register_resize(2, Resize2DAttrs)
_register_resize(3, Resize3DAttrs)


def _resize(nsp: int, attrs_type: type, data: Expr, size: Any, roi: Any, layout: str, method: str,
            coordinate_transformation_mode: str, rounding_method: str, cubic_alpha: float,
            cubic_exclude: int, extrapolation_value: float, out_dtype: Any) -> Call:
    name = f"image.resize{nsp}d"
    if isinstance(size, Constant):
        size = size.value.astype(np.int64).tolist()
    if isinstance(roi, Constant):
        roi = roi.value.astype(np.float64).tolist()
    attrs = attrs_type(
        size=int_tuple(size, nsp, "size", name),
        roi=tuple(float(v) for v in roi) if roi is not None else (0.0,) * (2 * nsp),
        layout=layout,
        method=method,
        coordinate_transformation_mode=coordinate_transformation_mode,
        rounding_method=rounding_method,
        cubic_alpha=float(cubic_alpha),
        cubic_exclude=int(cubic_exclude),
        extrapolation_value=float(extrapolation_value),
        out_dtype=as_dtype(out_dtype) if out_dtype not in (None, "") else "",
    )
    return make_call(name, [data], attrs)


def resize1d(data: Expr, size: Any, roi: Any = None, layout: str = "NCW", method: str = "linear",
             coordinate_transformation_mode: str = "half_pixel", rounding_method: str = "",
             cubic_alpha: float = -0.5, cubic_exclude: int = 0, extrapolation_value: float = 0.0,
             out_dtype: str | None = None) -> Call:
    """Resize the W axis (``relay.image.resize1d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout`` (``NCW``, ``NWC``, ...).
    size : int or tuple of int
        New width.
    roi : tuple of float, optional
        ``(start_w, end_w)`` for ``tf_crop_and_resize`` (default zeros).
    layout : str
        Data layout.
    method : str
        ``"nearest_neighbor"``, ``"linear"`` or ``"cubic"``.
    coordinate_transformation_mode : str
        ``half_pixel``, ``align_corners``, ``asymmetric``, ``pytorch_half_pixel``,
        ``tf_half_pixel_for_nn`` or ``tf_crop_and_resize``.
    rounding_method : str
        Nearest rounding: ``round``, ``floor``, ``ceil``, ``round_prefer_floor``,
        ``round_prefer_ceil`` (``""``: ``round`` with ``align_corners``, else ``floor``).
    cubic_alpha : float
        Cubic kernel coefficient (ONNX ``cubic_coeff_a``).
    cubic_exclude : int
        1 to give taps outside the input zero weight (ONNX ``exclude_outside``).
    extrapolation_value : float
        Value of samples outside the input (``tf_crop_and_resize``).
    out_dtype : str, optional
        Result dtype (default: the input's).

    Returns
    -------
    Call
        The resized tensor.
    """
    return _resize(1, Resize1DAttrs, data, size, roi, layout, method,
                   coordinate_transformation_mode, rounding_method, cubic_alpha, cubic_exclude,
                   extrapolation_value, out_dtype)


def resize2d(data: Expr, size: Any, roi: Any = None, layout: str = "NCHW", method: str = "linear",
             coordinate_transformation_mode: str = "half_pixel", rounding_method: str = "",
             cubic_alpha: float = -0.5, cubic_exclude: int = 0, extrapolation_value: float = 0.0,
             out_dtype: str | None = None) -> Call:
    """Resize the H and W axes (``relay.image.resize2d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout`` (``NCHW``, ``NHWC``, ``NCHW8c``, ...).
    size : int or tuple of int
        New ``(height, width)``.
    roi : tuple of float, optional
        ``(start_h, start_w, end_h, end_w)`` for ``tf_crop_and_resize`` (default zeros).
    layout : str
        Data layout.
    method : str
        ``"nearest_neighbor"``, ``"linear"`` or ``"cubic"``.
    coordinate_transformation_mode : str
        ``half_pixel``, ``align_corners``, ``asymmetric``, ``pytorch_half_pixel``,
        ``tf_half_pixel_for_nn`` or ``tf_crop_and_resize``.
    rounding_method : str
        Nearest rounding: ``round``, ``floor``, ``ceil``, ``round_prefer_floor``,
        ``round_prefer_ceil`` (``""``: ``round`` with ``align_corners``, else ``floor``).
    cubic_alpha : float
        Cubic kernel coefficient (ONNX ``cubic_coeff_a``).
    cubic_exclude : int
        1 to give taps outside the input zero weight (ONNX ``exclude_outside``).
    extrapolation_value : float
        Value of samples outside the input (``tf_crop_and_resize``).
    out_dtype : str, optional
        Result dtype (default: the input's).

    Returns
    -------
    Call
        The resized tensor.

    Examples
    --------
    >>> y = resize2d(x, (32, 32), method="nearest_neighbor", rounding_method="round_prefer_floor")
    """
    return _resize(2, Resize2DAttrs, data, size, roi, layout, method,
                   coordinate_transformation_mode, rounding_method, cubic_alpha, cubic_exclude,
                   extrapolation_value, out_dtype)


def resize3d(data: Expr, size: Any, roi: Any = None, layout: str = "NCDHW", method: str = "linear",
             coordinate_transformation_mode: str = "half_pixel", rounding_method: str = "",
             cubic_alpha: float = -0.5, cubic_exclude: int = 0, extrapolation_value: float = 0.0,
             out_dtype: str | None = None) -> Call:
    """Resize the D, H and W axes (``relay.image.resize3d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout`` (``NCDHW``, ``NDHWC``, ...).
    size : int or tuple of int
        New ``(depth, height, width)``.
    roi : tuple of float, optional
        ``(start_d, start_h, start_w, end_d, end_h, end_w)`` for ``tf_crop_and_resize``.
    layout : str
        Data layout.
    method : str
        ``"nearest_neighbor"``, ``"linear"`` or ``"cubic"``.
    coordinate_transformation_mode : str
        ``half_pixel``, ``align_corners``, ``asymmetric``, ``pytorch_half_pixel``,
        ``tf_half_pixel_for_nn`` or ``tf_crop_and_resize``.
    rounding_method : str
        Nearest rounding: ``round``, ``floor``, ``ceil``, ``round_prefer_floor``,
        ``round_prefer_ceil`` (``""``: ``round`` with ``align_corners``, else ``floor``).
    cubic_alpha : float
        Cubic kernel coefficient (ONNX ``cubic_coeff_a``).
    cubic_exclude : int
        1 to give taps outside the input zero weight (ONNX ``exclude_outside``).
    extrapolation_value : float
        Value of samples outside the input (``tf_crop_and_resize``).
    out_dtype : str, optional
        Result dtype (default: the input's).

    Returns
    -------
    Call
        The resized tensor.
    """
    return _resize(3, Resize3DAttrs, data, size, roi, layout, method,
                   coordinate_transformation_mode, rounding_method, cubic_alpha, cubic_exclude,
                   extrapolation_value, out_dtype)

# TE computes used by the C code generator (kept in their own module).
from kiln.op import compute_image  # noqa: E402,F401
