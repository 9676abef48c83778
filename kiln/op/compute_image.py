"""Tensor-expression computes of the image operators (``image.resize1d/2d/3d``), also used by
``nn.upsampling`` and ``nn.upsampling3d``.

Resizing is separable and its sampling pattern depends only on the output position along each
resized axis, so the compute takes it from constant tables built with the reference's own
coordinate rules (:mod:`kiln.op.image_resize`): per axis, the clamped input index of every tap
(``int32``), its weight (``float64``; absent for nearest-neighbour, whose weight is 1) and, for
``tf_crop_and_resize``, whether the position falls outside the input. Each output element then
combines its taps in the reference's order and precision: float64 arithmetic, the first resized
axis innermost (``sum_j (sum_k x[k, j] * w0[k]) * w1[j]``, terms added left to right), then
``extrapolation_value`` where a coordinate is outside, then one conversion to ``out_dtype`` (float
to integer truncates toward zero). Nearest-neighbour resizing of float data, or between equal
dtypes, is a plain gather.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kiln import te
from kiln.ir.types import Type
from kiln.op import image  # noqa: F401  (the operators must be registered before their computes)
from kiln.op.compute_conv import tensor_type
from kiln.op.image import resize_plan
from kiln.op.image_resize import _taps, input_coords
from kiln.op.registry import get_op_def
from kiln.te import expr as E
from kiln.te.expr import PrimExpr
from kiln.te.tensor import PlaceholderOp

__all__ = ["resize_tensor"]

Index = tuple[PrimExpr, ...]


def _table(value: np.ndarray, dtype: str, name: str) -> te.Tensor:
    data = np.ascontiguousarray(value.astype(dtype))
    return PlaceholderOp(name, data.shape, dtype, attrs={"value": data}).output(0)


class _AxisPlan:
    """The sampling tables of one resized axis."""

    def __init__(self, axis: int, in_size: int, out_size: int, roi: tuple[float, float],
                 method: str, mode: str, rounding: str, alpha: float, exclude: bool,
                 name: str) -> None:
        coord = input_coords(in_size, out_size, mode, roi)
        idx, weights = _taps(coord, in_size, method, rounding, alpha, exclude)
        self.axis = axis
        self.taps = idx.shape[1]
        self.index = _table(idx, "int32", f"{name}_index{axis}")
        self.weight = None if method == "nearest_neighbor" else \
            _table(weights, "float64", f"{name}_weight{axis}")
        self.outside = None
        if mode == "tf_crop_and_resize":
            self.outside = _table((coord < 0) | (coord > in_size - 1), "bool",
                                  f"{name}_outside{axis}")


def _unfused(product: PrimExpr) -> PrimExpr:
    """``product`` unchanged (``max(p, -inf)`` is ``p`` for every value, NaN and -0.0 included),
    but no longer a bare multiplication: the C compiler cannot contract it with the following
    addition into a fused multiply-add, whose single rounding would differ from the reference's
    two. Integer results truncate, so they need the reference's exact float64 value."""
    return E.binary("max", product, E.const(-math.inf, "float64"))


def resize_tensor(data: te.Tensor, axes: Sequence[int], sizes: Sequence[int],
                  roi: Sequence[tuple[float, float]], method: str, mode: str, rounding: str,
                  cubic_alpha: float, cubic_exclude: bool, extrapolation_value: float,
                  out_dtype: str, name: str = "T_resize") -> te.Tensor:
    """Resize ``data`` along ``axes`` to ``sizes`` (ONNX ``Resize`` semantics, as
    :func:`kiln.op.image_resize.resize_nd`).

    Parameters
    ----------
    data : Tensor
        Input in any layout.
    axes : sequence of int
        The resized axes, in the order the reference processes them.
    sizes : sequence of int
        New length of each.
    roi : sequence of (float, float)
        Normalised crop ``(start, end)`` per resized axis (``tf_crop_and_resize`` only).
    method : str
        ``"nearest_neighbor"``, ``"linear"`` or ``"cubic"``.
    mode : str
        Coordinate transformation mode.
    rounding : str
        Nearest rounding method (``""``: ``round`` with ``align_corners``, else ``floor``).
    cubic_alpha : float
        Cubic kernel coefficient.
    cubic_exclude : bool
        Give taps outside the input zero weight (renormalising the rest).
    extrapolation_value : float
        Value of positions outside the input with ``tf_crop_and_resize``.
    out_dtype : str
        Result dtype.
    name : str
        Stage name.

    Returns
    -------
    Tensor
        The resized tensor (``tag="injective"``).
    """
    rounding = rounding or ("round" if mode == "align_corners" else "floor")
    plans = [_AxisPlan(a, data.shape[a], s, r, method, mode, rounding, cubic_alpha,
                       cubic_exclude, name) for a, s, r in zip(axes, sizes, roi)]
    shape = list(data.shape)
    for a, s in zip(axes, sizes):
        shape[a] = s
    gather = method == "nearest_neighbor" and mode != "tf_crop_and_resize" and \
        (E.is_float_dtype(data.dtype) or data.dtype == out_dtype)
    work = data.dtype if gather else "float64"
    exact = not E.is_float_dtype(out_dtype)

    def value(level: int, out_index: Index, index: list[PrimExpr]) -> PrimExpr:
        if level == 0:
            return E.cast(data[tuple(index)], work)
        plan = plans[level - 1]
        o = out_index[plan.axis]
        total: PrimExpr | None = None
        for j in range(plan.taps):
            sub = list(index)
            sub[plan.axis] = plan.index[o, j]
            term = value(level - 1, out_index, sub)
            if plan.weight is not None:
                term = term * plan.weight[o, j]
                if exact:
                    term = _unfused(term)
            total = term if total is None else total + term
        assert total is not None
        return total

    def element(*i: PrimExpr) -> PrimExpr:
        result = value(len(plans), i, list(i))
        outside = [p.outside[i[p.axis]] for p in plans if p.outside is not None]
        if outside:
            result = E.select(te.any(*outside), E.const(float(extrapolation_value), work), result)
        return E.cast(result, out_dtype)

    return te.compute(tuple(shape), element, name=name, tag="injective")


def _resize_compute(nsp: int) -> Callable[[list[te.Tensor], Any, Type], te.Tensor]:
    name = f"image.resize{nsp}d"

    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        x = inputs[0]
        out = tensor_type(out_type, name)
        axes, sizes, roi = resize_plan(name, nsp, x.shape, attrs)
        return resize_tensor(x, axes, sizes, roi, attrs.method,
                             attrs.coordinate_transformation_mode, attrs.rounding_method,
                             float(attrs.cubic_alpha), bool(attrs.cubic_exclude),
                             float(attrs.extrapolation_value), out.dtype)

    return compute


def _register() -> None:
    for nsp in (1, 2, 3):
        get_op_def(f"image.resize{nsp}d").compute = _resize_compute(nsp)


_register()
