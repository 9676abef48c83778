"""Detection operators with static output shapes: ``vision.roi_align``.

``roi_align`` pools a fixed-size feature patch for every region of interest by bilinear sampling,
following the ONNX ``RoiAlign`` definition (opset 16) as onnxruntime implements it:

* ``aligned=False`` (ONNX ``output_half_pixel``, TVM's only behaviour): ROI corners are scaled by
  ``spatial_scale`` and ROIs are at least 1x1;
* ``aligned=True`` (ONNX ``half_pixel``): scaled corners are shifted by -0.5 pixel and ROIs are not
  enlarged;
* ``sample_ratio <= 0`` samples ``ceil(roi_size / pooled_size)`` points per bin and axis;
* samples outside ``[-1, size]`` contribute 0; others are clamped into the feature map;
* ``mode="max"`` keeps, over the samples of a bin, the largest of the four *weighted* corner
  contributions ``w_i * v_i`` (ONNX's definition; TVM's topi takes the max of interpolated values).

``non_max_suppression`` has a data-dependent output size and is not provided (Kiln compiles static
shapes).
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr
from kiln.ir.types import TensorType, Type
from kiln.op.registry import OpPattern, make_call, register_op, tensor_arg
from kiln.op.transform_common import as_result, check_dtype_kind, const_ints

__all__ = ["ROIAlignAttrs", "roi_align"]


@attrs_class("relay.attrs.ROIAlignAttrs")
class ROIAlignAttrs(Attrs):
    """Output size, scale, sampling, layout and mode of ``vision.roi_align``.

    ``aligned`` is a Kiln addition (ONNX's ``coordinate_transformation_mode="half_pixel"``); at its
    default the attributes print exactly as TVM's.
    """

    pooled_size: tuple[int, ...]  # (ph, pw); the type relation checks the length
    spatial_scale: float
    sample_ratio: int = -1
    layout: str = "NCHW"
    mode: str = "avg"
    aligned: bool = False


def _roi_align_rel(types: list[Type], attrs: ROIAlignAttrs) -> Type:
    data = tensor_arg(types, 0, "vision.roi_align", "data")
    rois = tensor_arg(types, 1, "vision.roi_align", "rois")
    check_dtype_kind("vision.roi_align", data, "f")
    if data.ndim != 4:
        raise KilnTypeError(f"vision.roi_align: data must be 4-d ({attrs.layout}), got shape {data.shape}")
    if rois.ndim != 2 or rois.shape[1] != 5 or rois.dtype != data.dtype:
        raise KilnTypeError(f"vision.roi_align: rois must be (num_roi, 5) [batch_index, x1, y1, x2, y2] "
                            f"of dtype {data.dtype}, got {TensorType(rois.shape, rois.dtype)}")
    if attrs.layout not in ("NCHW", "NHWC"):
        raise KilnTypeError(f"vision.roi_align: layout must be NCHW or NHWC, got {attrs.layout!r}")
    if attrs.mode not in ("avg", "max"):
        raise KilnTypeError(f"vision.roi_align: mode must be 'avg' or 'max', got {attrs.mode!r}")
    ph, pw = attrs.pooled_size
    if ph <= 0 or pw <= 0:
        raise KilnTypeError(f"vision.roi_align: pooled_size {attrs.pooled_size} must be positive")
    channels = data.shape[1] if attrs.layout == "NCHW" else data.shape[3]
    if attrs.layout == "NCHW":
        return TensorType((rois.shape[0], channels, ph, pw), data.dtype)
    return TensorType((rois.shape[0], ph, pw, channels), data.dtype)


def _axis_samples(coords: np.ndarray, size: int) -> tuple[np.ndarray, ...]:
    """Low/high neighbours, their weights and validity of sample coordinates along one axis."""
    valid = (coords >= -1.0) & (coords <= size)
    c = np.maximum(coords, 0.0)
    low = np.floor(c).astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    frac = np.where(at_end, 0.0, c - low)
    return low, high, frac, 1.0 - frac, valid


def _bin_coords(start: float, bin_size: float, pooled: int, grid: int) -> np.ndarray:
    """Sample coordinates, shape (pooled, grid)."""
    return (start + np.arange(pooled)[:, None] * bin_size
            + (np.arange(grid)[None, :] + 0.5) * bin_size / grid)


def _pool_roi(feature: np.ndarray, roi: np.ndarray, attrs: ROIAlignAttrs) -> np.ndarray:
    """One ROI of a (C, H, W) feature map -> (C, ph, pw)."""
    channels, height, width = feature.shape
    ph, pw = attrs.pooled_size
    offset = 0.5 if attrs.aligned else 0.0
    x1, y1, x2, y2 = (float(v) * attrs.spatial_scale - offset for v in roi)
    roi_w, roi_h = x2 - x1, y2 - y1
    if not attrs.aligned:
        roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
    bin_h, bin_w = roi_h / ph, roi_w / pw
    grid_h = attrs.sample_ratio if attrs.sample_ratio > 0 else math.ceil(roi_h / ph)
    grid_w = attrs.sample_ratio if attrs.sample_ratio > 0 else math.ceil(roi_w / pw)
    if grid_h <= 0 or grid_w <= 0:
        return np.zeros((channels, ph, pw))
    yl, yh, ly, hy, vy = _axis_samples(_bin_coords(y1, bin_h, ph, grid_h), height)
    xl, xh, lx, hx, vx = _axis_samples(_bin_coords(x1, bin_w, pw, grid_w), width)

    def corner(rows: np.ndarray, cols: np.ndarray, wy: np.ndarray, wx: np.ndarray) -> np.ndarray:
        # -> (C, ph, grid_h, pw, grid_w): weight * value, zero for samples outside the map
        values = feature[:, rows[:, :, None, None], cols[None, None, :, :]]
        weight = wy[:, :, None, None] * wx[None, None, :, :]
        valid = vy[:, :, None, None] & vx[None, None, :, :]
        return np.where(valid, weight * values, 0.0)

    parts = [corner(yl, xl, hy, hx), corner(yl, xh, hy, lx), corner(yh, xl, ly, hx), corner(yh, xh, ly, lx)]
    if attrs.mode == "avg":
        total = cast(np.ndarray, sum(parts))  # four arrays: never the int start value
        return total.sum(axis=(2, 4)) / max(grid_h * grid_w, 1)
    return np.maximum.reduce(parts).max(axis=(2, 4))


def _roi_align_ref(args: list[np.ndarray], attrs: ROIAlignAttrs, out: Type) -> np.ndarray:
    data, rois = args
    features = data.astype(np.float64)
    if attrs.layout == "NHWC":
        features = features.transpose(0, 3, 1, 2)
    pooled = [_pool_roi(features[int(r[0])], r[1:].astype(np.float64), attrs) for r in rois]
    result = np.stack(pooled) if pooled else np.zeros((0, features.shape[1], *attrs.pooled_size))
    if attrs.layout == "NHWC":
        result = result.transpose(0, 2, 3, 1)
    return as_result(out, result)


register_op("vision.roi_align", num_inputs=2, type_rel=_roi_align_rel, reference=_roi_align_ref,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=ROIAlignAttrs,
            doc="bilinear region-of-interest pooling")


def roi_align(data: Expr, rois: Expr, pooled_size: Any, spatial_scale: float, sample_ratio: int = -1,
              layout: str = "NCHW", mode: str = "avg", aligned: bool = False) -> Call:
    """Pool a ``pooled_size`` patch of ``data`` for every region in ``rois``.

    Parameters
    ----------
    data : Expr
        Feature map, 4-d float in ``layout``.
    rois : Expr
        ``(num_roi, 5)`` rows ``[batch_index, x1, y1, x2, y2]`` in input-image coordinates.
    pooled_size : int or (int, int)
        Output height and width.
    spatial_scale : float
        Feature-map size over input-image size.
    sample_ratio : int
        Samples per bin and axis; ``<= 0`` adapts to the ROI size.
    layout : str
        ``"NCHW"`` or ``"NHWC"``.
    mode : str
        ``"avg"`` or ``"max"`` (see the module docstring).
    aligned : bool
        Half-pixel ROI coordinates (ONNX ``coordinate_transformation_mode="half_pixel"``).

    Returns
    -------
    Call
        ``(num_roi, C, ph, pw)`` for NCHW, ``(num_roi, ph, pw, C)`` for NHWC.
    """
    size = const_ints(pooled_size, "vision.roi_align", "pooled_size")
    if len(size) == 1:
        size = (size[0], size[0])
    if isinstance(mode, bytes):
        mode = mode.decode()
    attrs = ROIAlignAttrs(pooled_size=size, spatial_scale=float(spatial_scale),
                          sample_ratio=int(sample_ratio), layout=str(layout), mode=str(mode),
                          aligned=bool(aligned))
    return make_call("vision.roi_align", [data, rois], attrs)

from kiln.op import compute_vision  # noqa: E402,F401  (attaches TE computes)
