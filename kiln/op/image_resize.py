"""NumPy reference kernel of resizing, with ONNX ``Resize`` semantics (as TVM's ``image.resize*``).

Resizing is separable: each resized axis maps output positions to input coordinates through the
coordinate transformation, then picks (nearest), blends two (linear) or four (cubic) neighbours,
clamping neighbour indices to the edge. With ``tf_crop_and_resize``, outputs whose coordinate falls
outside the input on any axis take ``extrapolation_value``. Coordinates are computed in float64
from the input and output sizes; ``floor``/``ceil`` rounding allow TVM's 1e-5 slack so that
coordinates that are integers up to rounding error land on that integer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["COORDINATE_MODES", "METHODS", "ROUNDING_METHODS", "input_coords", "resize_nd"]

METHODS = ("nearest_neighbor", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                    "tf_half_pixel_for_nn", "tf_crop_and_resize")
ROUNDING_METHODS = ("", "round", "floor", "ceil", "round_prefer_floor", "round_prefer_ceil")
_EPS = 1e-5


def input_coords(in_size: int, out_size: int, mode: str, roi: tuple[float, float]) -> np.ndarray:
    """Input coordinate of every output position along one axis.

    Parameters
    ----------
    in_size, out_size : int
        Axis length before and after resizing.
    mode : str
        Coordinate transformation mode (one of :data:`COORDINATE_MODES`).
    roi : (float, float)
        Normalised ``(start, end)`` of the crop, used by ``tf_crop_and_resize`` only.

    Returns
    -------
    ndarray
        float64 coordinates, one per output position.
    """
    x = np.arange(out_size, dtype=np.float64)
    scale = in_size / out_size  # input length per output position
    if mode == "half_pixel":
        return (x + 0.5) * scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) * scale - 0.5 if out_size > 1 else np.zeros_like(x)
    if mode == "align_corners":
        return x * ((in_size - 1) / (out_size - 1)) if out_size > 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x * scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) * scale
    start, end = roi
    if out_size > 1:
        return start * (in_size - 1) + x * ((end - start) * (in_size - 1) / (out_size - 1))
    return np.full_like(x, 0.5 * (start + end) * (in_size - 1))


def _nearest_index(coord: np.ndarray, rounding: str) -> np.ndarray:
    if rounding == "round":  # half away from zero, like C's round()
        idx = np.sign(coord) * np.floor(np.abs(coord) + 0.5)
    elif rounding == "round_prefer_floor":
        idx = np.ceil(coord - 0.5)
    elif rounding == "round_prefer_ceil":
        idx = np.floor(coord + 0.5)
    elif rounding == "floor":
        idx = np.floor(coord + _EPS)
    else:
        idx = np.ceil(coord - _EPS)
    return idx.astype(np.int64)


def _cubic_weights(t: np.ndarray, alpha: float) -> np.ndarray:
    """Keys cubic convolution weights of the taps at offsets -1, 0, 1, 2 (shape ``(len(t), 4)``)."""
    t2, t3 = t * t, t * t * t
    return np.stack([
        alpha * (t3 - 2 * t2 + t),
        (alpha + 2) * t3 - (alpha + 3) * t2 + 1,
        -(alpha + 2) * t3 + (2 * alpha + 3) * t2 - alpha * t,
        alpha * (t2 - t3),
    ], axis=1)


def _taps(coord: np.ndarray, in_size: int, method: str, rounding: str, alpha: float,
          exclude: bool) -> tuple[np.ndarray, np.ndarray]:
    """Input indices ``(out, taps)`` (clamped to the edge) and their weights for one axis."""
    if method == "nearest_neighbor":
        idx = _nearest_index(coord, rounding)[:, None]
        weights = np.ones(idx.shape)
    elif method == "linear":
        base = np.floor(coord)
        t = coord - base
        idx = base.astype(np.int64)[:, None] + np.arange(2)[None, :]
        weights = np.stack([1.0 - t, t], axis=1)
    else:
        base = np.floor(coord)
        idx = base.astype(np.int64)[:, None] + np.arange(-1, 3)[None, :]
        weights = _cubic_weights(coord - base, alpha)
        if exclude:
            weights = np.where((idx < 0) | (idx >= in_size), 0.0, weights)
            weights = weights / weights.sum(axis=1, keepdims=True)
    return np.clip(idx, 0, in_size - 1), weights


def _resize_axis(x: np.ndarray, axis: int, idx: np.ndarray, weights: np.ndarray) -> np.ndarray:
    out = None
    for k in range(idx.shape[1]):
        shape = [1] * x.ndim
        shape[axis] = idx.shape[0]
        term = np.take(x, idx[:, k], axis=axis) * weights[:, k].reshape(shape)
        out = term if out is None else out + term
    assert out is not None
    return out


def resize_nd(
    data: np.ndarray,
    axes: Sequence[int],
    out_sizes: Sequence[int],
    roi: Sequence[tuple[float, float]],
    method: str,
    coordinate_transformation_mode: str,
    rounding_method: str,
    cubic_alpha: float,
    cubic_exclude: bool,
    extrapolation_value: float,
    out_dtype: np.dtype,
) -> np.ndarray:
    """Resize ``data`` along ``axes`` to ``out_sizes``.

    Parameters
    ----------
    data : ndarray
        Input in any layout.
    axes : sequence of int
        The resized axes.
    out_sizes : sequence of int
        New length of each resized axis.
    roi : sequence of (float, float)
        Normalised crop ``(start, end)`` per resized axis (``tf_crop_and_resize`` only).
    method : str
        ``"nearest_neighbor"``, ``"linear"`` or ``"cubic"``.
    coordinate_transformation_mode : str
        One of :data:`COORDINATE_MODES`.
    rounding_method : str
        Nearest-neighbour rounding (``""``: ``round`` with ``align_corners``, else ``floor``).
    cubic_alpha : float
        The cubic kernel's coefficient ``a``.
    cubic_exclude : bool
        Give taps outside the input zero weight (and renormalise).
    extrapolation_value : float
        Value of outputs sampled outside the input with ``tf_crop_and_resize``.
    out_dtype : numpy dtype
        Result dtype (floats to integers truncate toward zero).

    Returns
    -------
    ndarray
        The resized tensor.
    """
    mode = coordinate_transformation_mode
    rounding = rounding_method or ("round" if mode == "align_corners" else "floor")
    x = data.astype(np.float64)
    outside = np.zeros((1,) * data.ndim, dtype=bool)
    for axis, size, (start, end) in zip(axes, out_sizes, roi):
        n = data.shape[axis]
        coord = input_coords(n, size, mode, (start, end))
        idx, weights = _taps(coord, n, method, rounding, cubic_alpha, cubic_exclude)
        x = _resize_axis(x, axis, idx, weights)
        if mode == "tf_crop_and_resize":
            shape = [1] * data.ndim
            shape[axis] = size
            outside = outside | ((coord < 0) | (coord > n - 1)).reshape(shape)
    if mode == "tf_crop_and_resize":
        x = np.where(outside, extrapolation_value, x)
    with np.errstate(all="ignore"):
        if out_dtype.kind in "iu":
            x = np.trunc(x)
        return x.astype(out_dtype)
