"""Tensor-expression compute of ``vision.roi_align`` (``kiln.op.vision``).

Each output element reduces over the bilinear samples of its bin, computed in float64 exactly as
the reference does (ROI corners scaled and, when ``aligned``, shifted by half a pixel; samples
outside ``[-1, size]`` contribute 0, others are clamped into the map; ``avg`` divides the sum of
the weighted corners by the number of samples, ``max`` keeps the largest weighted corner). The
batch index is the ROI's first column truncated toward zero, negative values counting from the
end as in the reference's indexing; an index still out of range is clamped.

The samples of each axis depend only on (ROI, bin, sample), so they are computed once into small
tables: per sample its coordinate (``T_roi_align_coords_y``/``_x``), its two pixel rows (or
columns) and whether it is valid (``T_roi_align_index_y``/``_x``) and their weights
(``T_roi_align_weights_y``/``_x``), and per bin its grid size, the first sample of the reduced
window and whether samples fall outside it (``T_roi_align_bins_y``/``_x``). The main stage reads
its pixels through them.

With ``sample_ratio > 0`` the sample grid of every bin is ``sample_ratio`` by ``sample_ratio``
and the reduction runs over exactly that. With ``sample_ratio <= 0`` the grid is
``ceil(bin_size)`` per axis, which depends on the ROI data, while tensor-expression reduction
axes have static extents: adaptive samples are more than half a pixel apart, so at most
``2 * size + 3`` of them per axis fall inside ``[-1, size]``, and the reduction runs over a window
of ``2 * size + 5`` samples per axis starting just before the first sample inside the map. Samples
outside the window are all outside the map (they add 0; ``max`` includes a 0 for them). The cost
is then ``O(H * W)`` per output element for adaptive sampling, against ``O(sample_ratio^2)``
for a fixed ratio.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln import te
from kiln.ir.types import Type
from kiln.op.compute_transform_common import clamp, tensor_type
from kiln.op.registry import get_op_def
from kiln.te import expr as E
from kiln.te.expr import PrimExpr

__all__: list[str] = []

F64 = "float64"
# Columns of the int32 and float64 sample tables.
LOW, HIGH, KIND = range(3)
LOW_WEIGHT, HIGH_WEIGHT = range(2)
# KIND values: beyond the bin's grid, inside the grid but outside the map, valid.
BEYOND, INVALID, VALID = 0, 1, 2
# Columns of a bin table.
GRID, FIRST, OUTSIDE = range(3)


def _f(value: Any) -> PrimExpr:
    return E.const(float(value), F64)


def _materialized(shape: tuple[int, ...], fcompute: Callable[..., PrimExpr], name: str,
                  dtype: str = F64) -> te.Tensor:
    """A stage computed once into its own buffer.

    The default schedule inlines every injective stage into its readers, which would repeat
    these per-sample computations for every channel; a reduction over one element is kept.
    """
    one = te.reduce_axis((0, 1), name="one")
    return te.compute(shape, lambda *i: te.sum(E.cast(fcompute(*i), dtype), axis=one), name=name,
                      tag="comm_reduce")


def _window(size: int, ratio: int) -> int:
    """Static number of samples reduced per axis (see the module docstring)."""
    return ratio if ratio > 0 else 2 * size + 5


class _Axis:
    """The samples of one axis (y or x) of the bins of one ROI."""

    def __init__(self, size: int, pooled: int, ratio: int, start: PrimExpr, extent: PrimExpr):
        self.size, self.ratio = size, ratio
        self.start = start
        self.bin_size = extent / _f(pooled)

    def base(self, p: PrimExpr) -> PrimExpr:
        return self.start + E.cast(p, F64) * self.bin_size

    def grid(self) -> PrimExpr:
        """Samples per bin along this axis (int32; <= 0: none)."""
        if self.ratio > 0:
            return E.const(self.ratio)
        return E.cast(te.ceil(self.bin_size), "int32")

    def first(self, p: PrimExpr) -> PrimExpr:
        """Index of the first sample of the reduced window of bin ``p``."""
        if self.ratio > 0:
            return E.const(0)
        # The first sample at or after -1 is at k >= (-1 - base) * grid / bin - 0.5; start one
        # earlier to absorb rounding, and never past the grid.
        grid = E.cast(self.grid(), F64)
        estimate = te.ceil((_f(-1.0) - self.base(p)) * grid / self.bin_size - _f(0.5)) - _f(1.0)
        limit = E.binary("max", grid, _f(0.0))
        return E.select(self.bin_size > _f(0.0), E.cast(clamp(estimate, _f(0.0), limit), "int32"),
                        E.const(0))

    def bin_info(self, p: PrimExpr, column: PrimExpr) -> PrimExpr:
        """Column ``column`` of the bin table: grid size, first sample of the window, and
        whether the window misses samples of the grid."""
        first, grid = self.first(p), self.grid()
        outside = te.any(first > 0, first + _window(self.size, self.ratio) < grid)
        return _pick(column, [E.cast(grid, F64), E.cast(first, F64),
                              E.select(outside, _f(1.0), _f(0.0))])

    def coord(self, bins: te.Tensor, n: PrimExpr, p: PrimExpr, t: PrimExpr) -> PrimExpr:
        """Coordinate of sample ``t`` of the window of bin ``p``, as the reference computes it."""
        k = E.cast(bins(n, p, FIRST), F64) + E.cast(t, F64)
        return self.base(p) + ((k + _f(0.5)) * self.bin_size) / bins(n, p, GRID)

    def sample(self, coords: te.Tensor, bins: te.Tensor, n: PrimExpr, p: PrimExpr, t: PrimExpr,
               column: PrimExpr, weights: bool) -> PrimExpr:
        """Column ``column`` of the index table row (or, with ``weights``, of the weight table
        row) of sample ``t`` of the window of bin ``p``."""
        coord = coords(n, p, t)
        c = E.binary("max", coord, _f(0.0))
        low_f = te.floor(c)
        last = _f(self.size - 1)
        at_end = low_f >= last
        if weights:
            frac = E.select(at_end, _f(0.0), c - low_f)
            return _pick(column, [_f(1.0) - frac, frac])
        low = E.cast(E.select(at_end, last, clamp(low_f, _f(0.0), last)), "int32")
        valid = te.all(coord >= _f(-1.0), coord <= _f(self.size))
        in_grid = E.cast(bins(n, p, FIRST), F64) + E.cast(t, F64) < bins(n, p, GRID)
        kind = E.select(in_grid, E.select(valid, E.const(VALID), E.const(INVALID)), E.const(BEYOND))
        return _pick(column, [low, E.binary("min", low + 1, E.const(self.size - 1)), kind])


def _pick(column: PrimExpr, values: list[PrimExpr]) -> PrimExpr:
    """``values[column]`` for a runtime ``column``."""
    value = values[-1]
    for j in reversed(range(len(values) - 1)):
        value = E.select(E.compare("eq", column, j), values[j], value)
    return value


def _axis_tables(rois: te.Tensor, attrs: Any, vertical: bool, size: int,
                 pooled: int) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    """The bin table, the int32 sample index table and the float64 sample weight table of the y
    (``vertical``) or x axis."""
    num_rois = rois.shape[0]
    window = _window(size, attrs.sample_ratio)
    offset = 0.5 if attrs.aligned else 0.0
    suffix = "y" if vertical else "x"

    def axis(n: PrimExpr) -> _Axis:
        def corner(k: int) -> PrimExpr:
            return E.cast(rois(n, k), F64) * _f(attrs.spatial_scale) - _f(offset)

        lo, hi = (corner(2), corner(4)) if vertical else (corner(1), corner(3))
        extent = hi - lo if attrs.aligned else E.binary("max", hi - lo, _f(1.0))
        return _Axis(size, pooled, attrs.sample_ratio, lo, extent)

    bins = _materialized((num_rois, pooled, 3), lambda n, p, j: axis(n).bin_info(p, j),
                         f"T_roi_align_bins_{suffix}")
    coords = _materialized((num_rois, pooled, window), lambda n, p, t: axis(n).coord(bins, n, p, t),
                           f"T_roi_align_coords_{suffix}")
    index = _materialized((num_rois, pooled, window, 3),
                          lambda n, p, t, j: axis(n).sample(coords, bins, n, p, t, j, False),
                          f"T_roi_align_index_{suffix}", "int32")
    weights = _materialized((num_rois, pooled, window, 2),
                            lambda n, p, t, j: axis(n).sample(coords, bins, n, p, t, j, True),
                            f"T_roi_align_weights_{suffix}")
    return bins, index, weights


def _roi_align_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    data, rois = inputs
    out = tensor_type(out_type)
    nchw = attrs.layout == "NCHW"
    batch, height, width = (data.shape[0], *(data.shape[2:] if nchw else data.shape[1:3]))
    ph, pw = attrs.pooled_size
    bins_y, ys, wys = _axis_tables(rois, attrs, True, height, ph)
    bins_x, xs, wxs = _axis_tables(rois, attrs, False, width, pw)

    def pixel(n: PrimExpr, c: PrimExpr, y: PrimExpr, x: PrimExpr) -> PrimExpr:
        b = E.cast(E.cast(rois(n, 0), F64), "int64")
        b = E.cast(clamp(E.select(b < 0, b + batch, b), 0, batch - 1), "int32")
        return E.cast(data(b, c, y, x) if nchw else data(b, y, x, c), F64)

    ry = te.reduce_axis((0, _window(height, attrs.sample_ratio)), name="ry")
    rx = te.reduce_axis((0, _window(width, attrs.sample_ratio)), name="rx")
    is_max = attrs.mode == "max"

    def reduce_bin(n: PrimExpr, c: PrimExpr, p: PrimExpr, q: PrimExpr) -> PrimExpr:
        yl, yh, ky = ys(n, p, ry, LOW), ys(n, p, ry, HIGH), ys(n, p, ry, KIND)
        xl, xh, kx = xs(n, q, rx, LOW), xs(n, q, rx, HIGH), xs(n, q, rx, KIND)
        wyl, wyh = wys(n, p, ry, LOW_WEIGHT), wys(n, p, ry, HIGH_WEIGHT)
        wxl, wxh = wxs(n, q, rx, LOW_WEIGHT), wxs(n, q, rx, HIGH_WEIGHT)
        corners = [wyl * wxl * pixel(n, c, yl, xl), wyl * wxh * pixel(n, c, yl, xh),
                   wyh * wxl * pixel(n, c, yh, xl), wyh * wxh * pixel(n, c, yh, xh)]
        valid = te.all(E.compare("eq", ky, VALID), E.compare("eq", kx, VALID))
        if not is_max:  # invalid samples add nothing: skip them
            return te.sum(corners[0] + corners[1] + corners[2] + corners[3], axis=[ry, rx],
                          where=valid)
        best = E.binary("max", E.binary("max", corners[0], corners[1]),
                        E.binary("max", corners[2], corners[3]))
        # Every sample of the grid counts, an invalid one as 0. te.max starts from the lowest
        # float64; ``finish`` turns a bin without samples into 0.
        return te.max(te.if_then_else(valid, best, _f(0.0)), axis=[ry, rx],
                      where=te.all(E.compare("ne", ky, BEYOND), E.compare("ne", kx, BEYOND)))

    def finish(n: PrimExpr, c: PrimExpr, p: PrimExpr, q: PrimExpr, total: PrimExpr) -> PrimExpr:
        grid_y, grid_x = bins_y(n, p, GRID), bins_x(n, q, GRID)
        empty = te.any(grid_y <= _f(0.0), grid_x <= _f(0.0))
        if is_max:
            outside = te.any(bins_y(n, p, OUTSIDE) > _f(0.0), bins_x(n, q, OUTSIDE) > _f(0.0))
            value = E.select(outside, E.binary("max", total, _f(0.0)), total)
        else:
            value = total / E.binary("max", grid_y * grid_x, _f(1.0))
        return E.cast(E.select(empty, _f(0.0), value), out.dtype)

    if nchw:
        acc = te.compute(out.shape, reduce_bin, name="T_roi_align_acc", tag="comm_reduce")
        return te.compute(out.shape, lambda n, c, p, q: finish(n, c, p, q, acc(n, c, p, q)),
                          name="T_roi_align", tag="elemwise")
    acc = te.compute(out.shape, lambda n, p, q, c: reduce_bin(n, c, p, q), name="T_roi_align_acc",
                     tag="comm_reduce")
    return te.compute(out.shape, lambda n, p, q, c: finish(n, c, p, q, acc(n, p, q, c)),
                      name="T_roi_align", tag="elemwise")


def _register() -> None:
    get_op_def("vision.roi_align").compute = _roi_align_compute


_register()
