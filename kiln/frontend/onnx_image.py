"""ONNX converters: Resize, Upsample, RoiAlign and GridSample.

Output sizes are static, so the importer works out per axis the output size, the scale and, for
every output index, the source pixels and their weights (ONNX's separable interpolation, in
float64 NumPy). Two lowerings follow:

- ``image.resize1d/2d/3d`` when the request is one relay's resize expresses exactly: only the
  spatial axes of an N, C, spatial... tensor change, each axis's scale equals ``out / in``, no
  antialiasing and a coordinate mode relay knows;
- otherwise a separable gather-and-blend: per resized axis, ``sum_k take(x, idx_k) * w_k`` with
  constant indices and weights (one ``take`` for nearest), which reproduces ONNX for every mode,
  antialiasing, ``axes`` and non-spatial axes. Both fuse into injective kernels.

GridSample samples at data-dependent positions, so its indices and weights are computed in the
graph: per spatial axis the grid is denormalized (and clamped or reflected per ``padding_mode``),
each interpolation tap becomes an int64 index and a weight, and the taps gather rows of the input
laid out as ``(N * spatial, C)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.frontend.onnx_common import NodeContext, const, converter, normalize_axis
from kiln.frontend.onnx_tensor import reshape_to, static_slice
from kiln.ir.expr import Expr
from kiln.ir.types import is_float, np_dtype
from kiln.op import elemwise as ew
from kiln.op.registry import all_ops

__all__: list[str] = []

_COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_Span = tuple[float, float]


def _check_resize(attrs: dict[str, Any], opset: int) -> str | None:
    mode = attrs.get("mode", "nearest")
    if mode == "bilinear":
        mode = "linear"
    if mode not in ("nearest", "linear", "cubic"):
        return f"mode={mode!r}"
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    if coord not in _COORD_MODES:
        return f"coordinate_transformation_mode={coord!r}"
    if attrs.get("nearest_mode", "round_prefer_floor") not in _NEAREST_MODES:
        return f"nearest_mode={attrs.get('nearest_mode')!r}"
    if attrs.get("keep_aspect_ratio_policy", "stretch") not in ("stretch", "not_larger", "not_smaller"):
        return f"keep_aspect_ratio_policy={attrs.get('keep_aspect_ratio_policy')!r}"
    return None


def _source_coords(mode: str, out: int, size: int, scale: float,
                   roi: tuple[float, float]) -> tuple[np.ndarray, np.ndarray | None]:
    """Source coordinate of every output index, and the extrapolation mask (crop-and-resize)."""
    y = np.arange(out, dtype=np.float64)
    width = scale * size
    if mode == "align_corners":
        # ONNX's reference divides by scale * size - 1 (onnxruntime by the integer output length
        # minus one; they differ only when scale * size is not an integer).
        return (np.zeros(out) if width == 1 else y * (size - 1) / (width - 1)), None
    if mode == "asymmetric":
        return y / scale, None
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale, None
    if mode == "pytorch_half_pixel":
        return (np.full(out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5), None
    if mode == "half_pixel_symmetric":
        offset = size / 2 * (1 - out / width)
        return offset + (y + 0.5) / scale - 0.5, None
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        if width == 1:
            x = np.full(out, (hi - lo) * (size - 1) / 2)
        else:
            x = y * (hi - lo) * (size - 1) / (width - 1)
        x = x + lo * (size - 1)
        return x, (x < 0) | (x > size - 1)
    return (y + 0.5) / scale - 0.5, None


def _kernel(mode: str, ratio: float, scale: float, a: float, nearest: str, antialias: bool) -> np.ndarray:
    """Interpolation weights for a point at ``ratio`` in (0, 1] past its left neighbour."""
    if mode == "nearest":
        if ratio == 1:
            return np.array([0.0, 1.0])
        pick_right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                      "floor": False, "ceil": True}[nearest]
        return np.array([0.0, 1.0]) if pick_right else np.array([1.0, 0.0])
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(math.floor(-1 / s) + 1)
        taps = (np.arange(start, 2 - start) - ratio) * s
        w = np.clip(1 - np.abs(taps), 0, 1)
        return w / w.sum()
    if not antialias:
        r1, r2 = ratio + 1, 1 - ratio
        return np.array([
            ((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a,
            ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
            ((a + 2) * r2 - (a + 3)) * r2 * r2 + 1,
            ((a * (r2 + 1) - 5 * a) * (r2 + 1) + 8 * a) * (r2 + 1) - 4 * a,
        ])
    s = min(scale, 1.0)
    start = int(math.floor(-2 / s) + 1)
    w = np.array([_cubic_weight(s * (i - ratio), a) for i in range(start, 2 - start)])
    return w / w.sum()


def _cubic_weight(x: float, a: float) -> float:
    x = abs(x)
    if x <= 1:
        return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
    if x < 2:
        return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
    return 0.0


def axis_taps(mode: str, coord: str, out: int, size: int, scale: float, roi: tuple[float, float],
              cubic_a: float, exclude_outside: bool, nearest: str, antialias: bool
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Per output index: source indices (out, n), weights (out, n) and the extrapolation mask."""
    x, extrapolated = _source_coords(coord, out, size, scale, roi)
    left = np.floor(x)
    ratios = np.where(x == left, 1.0, x - left)
    weights = np.stack([_kernel(mode, float(r), scale, cubic_a, nearest, antialias) for r in ratios]) \
        if out else np.zeros((0, 2))
    n = weights.shape[1]
    # The n source pixels nearest to x (ties to the smaller index), in edge-padded coordinates.
    pad = -(-n // 2)
    xp = x + pad
    base = np.floor(xp)
    frac = xp - base
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (base + offset).astype(np.int64)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        weights = np.where((idx < 0) | (idx >= size), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, size - 1), weights, extrapolated


class _Request:
    """A resolved Resize: output shape, per-axis scales and roi, and the interpolation options."""

    def __init__(self, ctx: NodeContext, scales: list[float], sizes: list[int], roi: list[_Span]):
        self.scales, self.sizes, self.roi = scales, sizes, roi
        mode = ctx.attr("mode", "nearest")
        self.mode = "linear" if mode == "bilinear" else mode
        self.coord = ctx.attr("coordinate_transformation_mode", "half_pixel")
        self.nearest = ctx.attr("nearest_mode", "round_prefer_floor")
        self.cubic_a = float(ctx.attr("cubic_coeff_a", -0.75))
        self.exclude = bool(int(ctx.attr("exclude_outside", 0)))
        self.extrapolation = float(ctx.attr("extrapolation_value", 0.0))
        self.antialias = bool(int(ctx.attr("antialias", 0))) and self.mode != "nearest"


def _resolve(ctx: NodeContext, shape: tuple[int, ...], scales_in: np.ndarray | None,
             sizes_in: np.ndarray | None, roi_in: np.ndarray | None
             ) -> tuple[list[float], list[int], list[_Span]]:
    """Per axis: scale, output size and roi span, from the node's scales/sizes/roi/axes."""
    rank = len(shape)
    axes_attr = ctx.attr("axes")
    axes = list(range(rank)) if axes_attr is None else [normalize_axis(ctx, int(a), rank) for a in axes_attr]
    scales = [1.0] * rank
    sizes = list(shape)
    roi = [(0.0, 1.0)] * rank
    if roi_in is not None and roi_in.size:
        flat = roi_in.reshape(-1).astype(np.float64)
        if flat.size != 2 * len(axes):
            raise ctx.error(f"roi has {flat.size} values, expected {2 * len(axes)}")
        for i, a in enumerate(axes):
            roi[a] = (float(flat[i]), float(flat[len(axes) + i]))
    if sizes_in is not None and sizes_in.size:
        given = [int(v) for v in sizes_in.reshape(-1)]
        if len(given) != len(axes):
            raise ctx.error(f"sizes {given} must have {len(axes)} entries")
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        ratios = [given[i] / shape[a] for i, a in enumerate(axes)]
        if policy == "stretch":
            for i, a in enumerate(axes):
                sizes[a], scales[a] = given[i], ratios[i]
        else:
            s = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                sizes[a], scales[a] = int(s * shape[a] + 0.5), s
    elif scales_in is not None and scales_in.size:
        given_s = [float(v) for v in scales_in.reshape(-1)]
        if len(given_s) != len(axes):
            raise ctx.error(f"scales {given_s} must have {len(axes)} entries")
        for i, a in enumerate(axes):
            scales[a] = given_s[i]
            sizes[a] = math.floor(given_s[i] * shape[a])
    else:
        raise ctx.error("one of scales and sizes must be given")
    if any(s <= 0 for s in scales):
        raise ctx.error(f"scales {scales} must be positive")
    return scales, sizes, roi


def _lower(ctx: NodeContext, x: Expr, req: _Request) -> Expr:
    shape = ctx.shape(x)
    changed = [a for a in range(len(shape)) if not (req.sizes[a] == shape[a] and req.scales[a] == 1.0
                                                     and req.roi[a] == (0.0, 1.0))]
    if not changed:
        return x
    relay_out = _relay_resize(ctx, x, req, changed)
    if relay_out is not None:
        return relay_out
    return _blend(ctx, x, req, changed)


def _relay_resize(ctx: NodeContext, x: Expr, req: _Request, changed: list[int]) -> Expr | None:
    """``image.resizeNd`` when it expresses the request exactly; None otherwise."""
    shape = ctx.shape(x)
    n = len(shape) - 2
    name = f"image.resize{n}d"
    if n not in (1, 2, 3) or name not in all_ops() or req.antialias or min(changed) < 2:
        return None
    if req.coord in ("half_pixel_symmetric", "tf_crop_and_resize"):
        return None
    if any(abs(req.scales[a] * shape[a] - req.sizes[a]) > 1e-9 * max(1, req.sizes[a]) for a in changed):
        return None
    from kiln.op import image

    layout = {1: "NCW", 2: "NCHW", 3: "NCDHW"}[n]
    method = {"nearest": "nearest_neighbor", "linear": "linear", "cubic": "cubic"}[req.mode]
    rounding = req.nearest if req.mode == "nearest" else ""
    return getattr(image, f"resize{n}d")(
        x, size=req.sizes[2:], roi=None, layout=layout, method=method,
        coordinate_transformation_mode=req.coord, rounding_method=rounding, cubic_alpha=req.cubic_a,
        cubic_exclude=int(req.exclude), extrapolation_value=req.extrapolation)


def _blend(ctx: NodeContext, x: Expr, req: _Request, changed: list[int]) -> Expr:
    """Separable gather-and-blend, one axis at a time (exact ONNX semantics)."""
    from kiln.op import transform as tf

    dtype = ctx.dtype(x)
    out_dtype = dtype
    compute = dtype if is_float(dtype) or req.mode == "nearest" else "float32"
    if compute != dtype:
        x = ew.cast(x, compute)
    masks = []
    rank = len(ctx.shape(x))
    for a in changed:
        size = ctx.shape(x)[a]
        idx, w, extrap = axis_taps(req.mode, req.coord, req.sizes[a], size, req.scales[a], req.roi[a],
                                   req.cubic_a, req.exclude, req.nearest, req.antialias)
        bshape = (1,) * a + (req.sizes[a],) + (1,) * (rank - a - 1)
        if req.mode == "nearest":
            pick = idx[np.arange(idx.shape[0]), np.argmax(w, axis=1)] if idx.size else idx[:, 0]
            x = tf.take(x, const(pick.astype(np.int64)), axis=a)
        else:
            acc: Expr | None = None
            for k in range(w.shape[1]):
                if not np.any(w[:, k]):
                    continue
                term = ew.multiply(tf.take(x, const(idx[:, k]), axis=a),
                                   const(w[:, k].reshape(bshape), compute))
                acc = term if acc is None else ew.add(acc, term)
            x = acc if acc is not None else ew.multiply(tf.take(x, const(idx[:, 0]), axis=a),
                                                        const(np.zeros(bshape), compute))
        if extrap is not None and extrap.any():
            masks.append(extrap.reshape(bshape))
    if masks:
        mask = np.zeros(tuple(req.sizes), dtype=bool)
        for m in masks:
            mask = mask | m
        x = ew.where(const(mask), const(req.extrapolation, compute), x)
    if compute != out_dtype:
        info = np.iinfo(np_dtype(out_dtype))
        x = ew.cast(ew.clip(ew.round(x), float(info.min), float(info.max)), out_dtype)
    return x


@converter("Resize", needs=("take", "multiply", "add", "where"), check=_check_resize)
def _resize(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    shape = ctx.shape(x)
    scales_in: np.ndarray | None
    sizes_in: np.ndarray | None
    roi_in: np.ndarray | None
    if ctx.opset < 11:
        scales_in, sizes_in, roi_in = ctx.const_input(1, "scales"), None, None
    else:
        crop = ctx.attr("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize"
        roi_in = ctx.const_input(1, "roi") if crop and ctx.has_input(1) else None
        scales_in = ctx.const_input(2, "scales") if ctx.has_input(2) else None
        sizes_in = ctx.const_input(3, "sizes") if ctx.has_input(3) else None
    req = _Request(ctx, *_resolve(ctx, shape, scales_in, sizes_in, roi_in))
    if ctx.opset < 11:
        req.coord, req.nearest = "asymmetric", "floor"
    return _lower(ctx, x, req)


@converter("Upsample", needs=("take", "multiply", "add"), check=_check_resize)
def _upsample(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    if ctx.opset < 9:
        scales = np.asarray(ctx.attr("scales"), dtype=np.float64)
    else:
        scales = np.asarray(ctx.const_input(1, "scales"), dtype=np.float64)
    req = _Request(ctx, *_resolve(ctx, ctx.shape(x), scales, None, None))
    req.coord, req.nearest = "asymmetric", "floor"
    return _lower(ctx, x, req)


def _check_roi_align(attrs: dict[str, Any], opset: int) -> str | None:
    mode = attrs.get("mode", "avg")
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    if mode not in ("avg", "max"):
        return f"mode={mode!r}"
    if coord not in ("half_pixel", "output_half_pixel"):
        return f"coordinate_transformation_mode={coord!r}"
    return None


@converter("RoiAlign", needs=("vision.roi_align", "concatenate", "cast"), check=_check_roi_align)
def _roi_align(ctx: NodeContext) -> Expr:
    from kiln.op import transform as tf
    from kiln.op import vision

    x, rois, batch_index = ctx.input(0), ctx.input(1), ctx.input(2)
    dtype = ctx.dtype(rois)
    index = ew.cast(batch_index, dtype)
    # relay's rois rows are [batch_index, x1, y1, x2, y2].
    rows = tf.concatenate([tf.reshape(index, newshape=(ctx.shape(batch_index)[0], 1)), rois], axis=1)
    default_coord = "half_pixel" if ctx.opset >= 16 else "output_half_pixel"
    aligned = ctx.attr("coordinate_transformation_mode", default_coord) == "half_pixel"
    return vision.roi_align(x, rows, pooled_size=(int(ctx.attr("output_height", 1)),
                                                   int(ctx.attr("output_width", 1))),
                            spatial_scale=float(ctx.attr("spatial_scale", 1.0)),
                            sample_ratio=int(ctx.attr("sampling_ratio", 0)), layout="NCHW",
                            mode=ctx.attr("mode", "avg"), aligned=aligned)


# --- GridSample -----------------------------------------------------------------------------------

_GRID_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic",
               "cubic": "cubic"}


def _check_grid_sample(attrs: dict[str, Any], opset: int) -> str | None:
    if attrs.get("mode", "linear" if opset >= 20 else "bilinear") not in _GRID_MODES:
        return f"mode={attrs.get('mode')!r}"
    if attrs.get("padding_mode", "zeros") not in ("zeros", "border", "reflection"):
        return f"padding_mode={attrs.get('padding_mode')!r}"
    return None


def _reflect(ctx: NodeContext, x: Expr, lo: float, hi: float) -> Expr:
    """Fold coordinates outside ``[lo, hi]`` back in by repeated reflection at the borders."""
    def f(v: float) -> Expr:
        return const(v, ctx.dtype(x))

    span = f(hi - lo)
    below = ew.less(x, f(lo))
    dist = ew.where(below, ew.subtract(f(lo), x), ew.subtract(x, f(hi)))
    turns = ew.floor(ew.divide(dist, span))
    rest = ew.subtract(dist, ew.multiply(turns, span))
    even = ew.equal(ew.floor_mod(turns, f(2)), f(0))
    from_lo, from_hi = ew.add(f(lo), rest), ew.subtract(f(hi), rest)
    folded = ew.where(below, ew.where(even, from_lo, from_hi), ew.where(even, from_hi, from_lo))
    inside = ew.logical_and(ew.greater_equal(x, f(lo)), ew.less_equal(x, f(hi)))
    return ew.where(inside, x, folded)


def _cubic_weights(ctx: NodeContext, t: Expr) -> list[Expr]:
    """Keys' cubic convolution weights (a = -0.75) of the 4 taps around a point ``t`` past floor."""
    a = -0.75

    def f(v: float) -> Expr:
        return const(v, ctx.dtype(t))

    def near(d: Expr) -> Expr:  # |d| <= 1
        return ew.add(ew.multiply(ew.subtract(ew.multiply(f(a + 2), d), f(a + 3)), ew.multiply(d, d)), f(1))

    def far(d: Expr) -> Expr:  # 1 < |d| < 2
        inner = ew.add(ew.multiply(ew.subtract(ew.multiply(f(a), d), f(5 * a)), d), f(8 * a))
        return ew.subtract(ew.multiply(inner, d), f(4 * a))

    one_minus = ew.subtract(f(1), t)
    return [far(ew.add(t, f(1))), near(t), near(one_minus), far(ew.add(one_minus, f(1)))]


@converter("GridSample", needs=("take", "floor", "round", "where", "transpose"), check=_check_grid_sample)
def _grid_sample(ctx: NodeContext) -> Expr:
    from kiln.op import transform as tf

    x, grid = ctx.input(0), ctx.input(1)
    xs, gs = ctx.shape(x), ctx.shape(grid)
    n, c, dims = xs[0], xs[1], xs[2:]
    nd, out = len(dims), gs[1:-1]
    if gs[-1] != nd or gs[0] != n:
        raise ctx.error(f"grid of shape {gs} does not match input of shape {xs}")
    mode = _GRID_MODES[ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear")]
    padding = ctx.attr("padding_mode", "zeros")
    align = bool(int(ctx.attr("align_corners", 0)))
    dtype = ctx.dtype(grid)

    def f(v: float) -> Expr:
        return const(v, dtype)

    # Per spatial axis k (grid's last dim lists them innermost first): pixel coordinates.
    taps_per_axis = []
    for k, size in enumerate(dims):
        g = reshape_to(ctx, static_slice(ctx, grid, [len(gs) - 1], [nd - 1 - k], [nd - k]), (n, *out))
        if align:
            coord = ew.multiply(ew.add(g, f(1)), f((size - 1) / 2))
        else:
            coord = ew.divide(ew.subtract(ew.multiply(ew.add(g, f(1)), f(size)), f(1)), f(2))
        if mode == "nearest":
            coord = ew.round(coord)
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if padding == "border":
            outside = ew.logical_or(ew.less(coord, f(lo)), ew.greater(coord, f(hi)))
            coord = ew.where(outside, ew.clip(coord, 0.0, size - 1.0), coord)
        elif padding == "reflection":
            coord = _reflect(ctx, coord, lo, hi)
        taps_per_axis.append(_grid_taps(ctx, coord, mode, padding, size, lo, hi))
    # Gather rows of x laid out as (n * prod(dims), c) and blend every combination of taps.
    flat = reshape_to(ctx, tf.transpose(x, axes=[0, *range(2, 2 + nd), 1]), (n * int(np.prod(dims)), c))
    strides = [int(np.prod(dims[k + 1:])) for k in range(nd)]
    base = const((np.arange(n) * int(np.prod(dims))).reshape((n,) + (1,) * len(out)), "int64")
    total: Expr | None = None
    for combo in np.ndindex(*[len(t) for t in taps_per_axis]):
        index, weight = base, None
        for k, j in enumerate(combo):
            idx, w = taps_per_axis[k][j]
            index = ew.add(index, ew.multiply(idx, const(strides[k], "int64")))
            weight = w if weight is None else ew.multiply(weight, w)
        picked = tf.take(flat, index, axis=0)  # (n, *out, c)
        assert weight is not None
        term = ew.multiply(picked, ew.cast(reshape_to(ctx, weight, (n, *out, 1)), ctx.dtype(x)))
        total = term if total is None else ew.add(total, term)
    assert total is not None
    return tf.transpose(total, axes=[0, 1 + len(out), *range(1, 1 + len(out))])


def _grid_taps(ctx: NodeContext, coord: Expr, mode: str, padding: str, size: int, lo: float,
               hi: float) -> list[tuple[Expr, Expr]]:
    """(int64 source index, weight) per tap along one axis; zero weight for padded taps."""
    dtype = ctx.dtype(coord)

    def f(v: float) -> Expr:
        return const(v, dtype)

    weights: Sequence[Expr | None]
    if mode == "nearest":
        positions, weights = [coord], [None]
    else:
        left = ew.floor(coord)
        t = ew.subtract(coord, left)
        offsets = (0, 1) if mode == "linear" else (-1, 0, 1, 2)
        positions = [ew.add(left, f(o)) for o in offsets]
        weights = [ew.subtract(f(1), t), t] if mode == "linear" else _cubic_weights(ctx, t)
    taps: list[tuple[Expr, Expr]] = []
    for pos, w in zip(positions, weights):
        weight: Expr = w if w is not None else const(np.ones(ctx.shape(pos)), dtype)
        if padding == "zeros":
            valid = ew.logical_and(ew.greater_equal(pos, f(0)), ew.less(pos, f(size)))
            weight = ew.where(valid, weight, f(0))
            pos = ew.clip(pos, 0.0, size - 1.0)
        elif padding == "border":
            pos = ew.clip(pos, 0.0, size - 1.0)
        else:
            pos = ew.clip(ew.trunc(_reflect(ctx, pos, lo, hi)), 0.0, size - 1.0)
        taps.append((ew.cast(pos, "int64"), weight))
    return taps
