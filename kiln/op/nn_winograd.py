"""``nn.contrib_conv2d_winograd_NCHWc``: 3x3 stride-1 convolution by Winograd's minimal filtering.

Winograd's ``F(m x m, 3 x 3)`` (Lavin and Gray, "Fast Algorithms for Convolutional Neural
Networks", 2015) computes an ``m x m`` output tile from an ``a x a`` input tile (``a = m + 2``) as

    Y = A^T [ (G g G^T) (.) (B^T d B) ] A

where ``g`` is one 3x3 filter, ``d`` the input tile and ``(.)`` the element-wise product. Summed
over the input channels, the ``a x a`` element-wise products become ``a * a`` independent matrix
products ``M[xi, nu] = U[xi, nu] @ V[xi, nu]`` (output channels x input channels times input
channels x tiles): ``F(4x4, 3x3)`` does ``36`` multiply-adds per input channel, output channel and
tile where the direct convolution does ``16 * 9 = 144``. The transforms ``B^T d B`` and
``A^T M A`` are sums with constant coefficients.

The matrices are the Cook-Toom construction over the interpolation points
``0, -1, 1, 1/2, -2`` (and infinity) for ``m = 4`` and ``0, -1, 1`` for ``m = 2``: the points
Barabasz et al. ("Error Analysis and Improving the Accuracy of Winograd Convolution for Deep
Neural Networks", 2018) found most accurate in float32, which TVM uses too. Kiln's ``B`` and ``G``
are scaled differently from TVM's, so this operator's pre-transformed weights are Kiln's own
(:func:`winograd_weight`); it is not TVM's ``contrib_conv2d_winograd_without_weight_transform``.

Data is ``(N, C // x, H, W, x)`` in ``NCHW{x}c``; the weight is the transformed filter bank
``(a, a, K // y, C, y)`` (``weight[xi, nu, k // y, c, k % y] == (G g[k, c] G^T)[xi, nu]``); the
result ``(N, K // y, OH, OW, y)`` in ``NCHW{y}c`` with ``OH = H + pad_top + pad_bottom - 2``.
AlterOpLayout rewrites a 3x3 stride-1 ``nn.conv2d`` with a constant weight into it where that is
faster (:func:`kiln.te.templates.winograd.winograd_tile`), transforming the weight at build time.

The TE compute's stages: ``data_pad`` (zero padding up to whole tiles), ``data_pack_left``
(``B^T d``) and ``data_pack`` (``(B^T d) B``) per tile and input channel, ``bgemm`` (the ``a * a``
products over the input channels), ``inverse_right`` (``M A``) and ``conv2d_winograd_NCHWc``
(``A^T (M A)``, in the output layout). Each transform step is written out as its non-zero terms
(a few each), the row picked by a select on the position in the tile: the schedule template
(:mod:`kiln.te.templates.winograd`) unrolls those positions, and the code generator writes one
copy per position with its select folded.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln import te
from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr
from kiln.ir.types import TensorType, Type, as_dtype
from kiln.op.compute_conv import cast_output, tensor_type
from kiln.op.nn_common import acc_dtype, check_operand_dtypes, pad_pairs, pad_tuple, to_out
from kiln.op.registry import OpPattern, get_op_def, make_call, register_op, tensor_arg
from kiln.te import expr as E
from kiln.te.expr import PrimExpr

__all__ = ["WinogradAttrs", "contrib_conv2d_winograd_nchwc", "winograd_matrices",
           "winograd_weight"]

_OP = "nn.contrib_conv2d_winograd_NCHWc"
_BLOCKED = re.compile(r"^NCHW([1-9][0-9]*)c$")
# interpolation points of F(m x m, 3 x 3), infinity implied
_POINTS = {2: (0.0, -1.0, 1.0), 4: (0.0, -1.0, 1.0, 0.5, -2.0)}
KERNEL = 3


@functools.cache
def winograd_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The transforms ``(A^T, G, B^T)`` of ``F(m x m, 3 x 3)``, float64.

    ``A^T`` is ``m x a`` (``A^T[i, j] = p_j ** i``, the point at infinity picking ``y[m - 1]``),
    ``G`` is ``a x 3`` (``p_j ** k`` over the product of ``p_j - p_l``), and ``B^T`` (``a x a``)
    is the solution of ``sum_j A^T[i, j] G[j, k] B^T[j, l] == (l == i + k)``, the identity that
    makes ``A^T ((G g) * (B^T d))`` the correlation of ``d`` with ``g``.

    Parameters
    ----------
    m : int
        Output tile size: 2 or 4.

    Returns
    -------
    tuple of ndarray
        ``(A^T, G, B^T)``.
    """
    if m not in _POINTS:
        raise ValueError(f"{_OP}: tile_size must be one of {sorted(_POINTS)}, got {m}")
    points = np.array(_POINTS[m])
    a = m + KERNEL - 1
    at, g = np.zeros((m, a)), np.zeros((a, KERNEL))
    for j, p in enumerate(points):
        at[:, j] = p ** np.arange(m)
        g[j] = p ** np.arange(KERNEL) / np.prod([p - q for q in np.delete(points, j)])
    at[m - 1, a - 1] = g[a - 1, KERNEL - 1] = 1.0
    # sum_j (A^T[i, j] G[j, k]) B^T[j, l] == (l == i + k): rows (i, k), one column per l
    system = np.einsum("ij,jk->ikj", at, g).reshape(m * KERNEL, a)
    target = np.array([[float(col == i + k) for col in range(a)] for i in range(m)
                       for k in range(KERNEL)])
    bt = np.linalg.lstsq(system, target, rcond=None)[0]
    # the entries are dyadic rationals (0, +-1/2, +-1, +-3/2, ...): exact in binary floats
    bt = np.round(bt * 2.0 ** 20) / 2.0 ** 20
    assert np.allclose(system @ bt, target, atol=1e-12), "Winograd matrices"
    return at, g, bt


def winograd_weight(weight: np.ndarray, m: int, block: int) -> np.ndarray:
    """Transform a 3x3 filter bank for :func:`contrib_conv2d_winograd_nchwc`.

    Parameters
    ----------
    weight : ndarray
        ``(K, C, 3, 3)`` (``OIHW``).
    m : int
        Output tile size.
    block : int
        Output channel block ``y`` (dividing ``K``).

    Returns
    -------
    ndarray
        ``(a, a, K // block, C, block)``: ``G g G^T`` of every filter, in the weight's dtype.
    """
    _, g, _ = winograd_matrices(m)
    k, c = weight.shape[:2]
    u = np.einsum("ar,kcrs,bs->abkc", g, weight.astype(np.float64), g)
    a = m + KERNEL - 1
    return u.reshape(a, a, k // block, block, c).transpose(0, 1, 2, 4, 3).astype(weight.dtype)


@attrs_class("relay.attrs.Conv2DWinogradNCHWcAttrs")
class WinogradAttrs(Attrs):
    """Attributes of ``nn.contrib_conv2d_winograd_NCHWc``."""

    tile_size: int = 4
    padding: tuple[int, ...] = (0, 0, 0, 0)
    channels: int | None = None
    data_layout: str = "NCHW16c"
    out_layout: str = ""
    out_dtype: str = ""


def _block(layout: str, what: str, shapes: str) -> int:
    found = _BLOCKED.match(layout)
    if found is None:
        raise KilnTypeError(f"{_OP}: {what} {layout!r} is not a blocked layout NCHW{{x}}c "
                            f"({shapes})")
    return int(found.group(1))


@dataclass(frozen=True)
class _Geometry:
    """A checked call: tile size, padding ``(top, bottom)``, ``(left, right)``, result shape."""

    m: int
    rows: tuple[int, int]
    cols: tuple[int, int]
    out_shape: tuple[int, int, int, int, int]


def _geometry(data: TensorType, weight: TensorType, attrs: WinogradAttrs) -> _Geometry:
    """The geometry of a call, or a type error naming the op and both shapes."""
    shapes = f"data {data.shape} ({data.dtype}), weight {weight.shape} ({weight.dtype})"
    check_operand_dtypes(_OP, data, weight, "data", "weight")
    m = int(attrs.tile_size)
    if m not in _POINTS:
        raise KilnTypeError(f"{_OP}: tile_size must be one of {sorted(_POINTS)}, got {m}")
    a = m + KERNEL - 1
    x = _block(attrs.data_layout, "data_layout", shapes)
    y = _block(attrs.out_layout or attrs.data_layout, "out_layout", shapes)
    if data.ndim != 5 or data.shape[4] != x:
        raise KilnTypeError(f"{_OP}: data must be (N, C // {x}, H, W, {x}) in "
                            f"{attrs.data_layout} ({shapes})")
    if weight.ndim != 5 or weight.shape[:2] != (a, a) or weight.shape[4] != y:
        raise KilnTypeError(f"{_OP}: weight must be the transformed filters (a, a, K // {y}, C, "
                            f"{y}) with a = tile_size + 2 = {a} ({shapes})")
    if weight.shape[3] != data.shape[1] * x:
        raise KilnTypeError(f"{_OP}: data has {data.shape[1] * x} input channels but the weight "
                            f"{weight.shape[3]} ({shapes})")
    channels = weight.shape[2] * y
    if attrs.channels is not None and int(attrs.channels) != channels:
        raise KilnTypeError(f"{_OP}: channels={attrs.channels} but the weight gives {channels} "
                            f"({shapes})")
    (pt, pb), (pl, pr) = pad_pairs(attrs.padding, 2, _OP)
    oh, ow = data.shape[2] + pt + pb - 2, data.shape[3] + pl + pr - 2
    if oh < 1 or ow < 1:
        raise KilnTypeError(f"{_OP}: output {oh} x {ow} is empty for padding {attrs.padding} "
                            f"({shapes})")
    return _Geometry(m, (pt, pb), (pl, pr), (data.shape[0], weight.shape[2], oh, ow, y))


def _winograd_rel(types: list[Type], attrs: WinogradAttrs) -> Type:
    data = tensor_arg(types, 0, _OP, "data")
    weight = tensor_arg(types, 1, _OP, "weight")
    out_dtype = as_dtype(attrs.out_dtype) if attrs.out_dtype else data.dtype
    return TensorType(_geometry(data, weight, attrs).out_shape, out_dtype)


def _winograd_ref(args: list[np.ndarray], attrs: WinogradAttrs, out_type: Type) -> np.ndarray:
    """The algorithm itself in NumPy (float64): tiles, ``B^T d B``, products, ``A^T M A``."""
    data, weight = args
    geo = _geometry(TensorType(data.shape, data.dtype.name),
                    TensorType(weight.shape, weight.dtype.name), attrs)
    m, (pt, _), (pl, _) = geo.m, geo.rows, geo.cols
    n, kb, oh, ow, y = geo.out_shape
    at, _, bt = winograd_matrices(m)
    a = m + KERNEL - 1
    acc = acc_dtype(data.dtype, weight.dtype)
    x = data.astype(acc).transpose(0, 1, 4, 2, 3).reshape(n, -1, *data.shape[2:4])
    nh, nw = -(-oh // m), -(-ow // m)
    x = np.pad(x, ((0, 0), (0, 0), (pt, nh * m + 2 - pt - data.shape[2]),
                   (pl, nw * m + 2 - pl - data.shape[3])))
    rows = np.arange(nh)[:, None] * m + np.arange(a)[None, :]  # (tile, position)
    cols = np.arange(nw)[:, None] * m + np.arange(a)[None, :]
    tiles = x[:, :, rows[:, :, None, None], cols[None, None, :, :]]  # n c th r tw s
    v = np.einsum("xr,ncurvs,ys->xynuvc", bt, tiles, bt)
    u = weight.astype(acc).transpose(0, 1, 2, 4, 3).reshape(a, a, kb * y, -1)  # x y k c
    prod = np.einsum("xykc,xynuvc->xynkuv", u, v)
    out = np.einsum("ix,xynkuv,jy->nkuivj", at, prod, at).reshape(n, kb * y, nh * m, nw * m)
    out = out[:, :, :oh, :ow].reshape(n, kb, y, oh, ow).transpose(0, 1, 3, 4, 2)
    return to_out(out, out_type)


register_op(_OP, num_inputs=2, type_rel=_winograd_rel, reference=_winograd_ref,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=WinogradAttrs,
            doc="3x3 stride-1 convolution by Winograd F(m x m, 3 x 3) on NCHW{x}c data, the "
                "weight transformed (a, a, K // y, C, y)")


def _terms(row: np.ndarray, term: Callable[[int], PrimExpr]) -> PrimExpr:
    """``sum_j row[j] * term(j)`` over the non-zero coefficients (``1`` and ``-1`` without a
    multiply)."""
    total: PrimExpr | None = None
    for j, coef in enumerate(row):
        if coef == 0.0:
            continue
        t = term(j)
        if coef == -1.0 and total is not None:
            total = total - t
            continue
        if coef != 1.0:
            t = t * float(coef)
        total = t if total is None else total + t
    assert total is not None
    return total


def _pick(index: PrimExpr, values: Sequence[PrimExpr]) -> PrimExpr:
    """``values[index]`` as a chain of selects: a loop the schedule unrolls folds it to one."""
    result = values[-1]
    for i in range(len(values) - 2, -1, -1):
        result = te.if_then_else(te.equal(index, i), values[i], result)
    return result


def _winograd_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    data, weight = inputs
    out = tensor_type(out_type, _OP)
    geo = _geometry(TensorType(data.shape, data.dtype), TensorType(weight.shape, weight.dtype),
                    attrs)
    m, (pt, _), (pl, _) = geo.m, geo.rows, geo.cols
    n, k_blocks, oh, ow, _ = out.shape
    _, c_blocks, h, w, x = data.shape
    a = m + KERNEL - 1
    at, _, bt = winograd_matrices(m)
    nh, nw = -(-oh // m), -(-ow // m)
    zero = E.const(0, data.dtype)

    def padded(i: PrimExpr, c: PrimExpr, yy: PrimExpr, xx: PrimExpr, ci: PrimExpr) -> PrimExpr:
        inside = [cond for cond, needed in ((yy >= pt, pt > 0), (yy < pt + h, nh * m + 2 > pt + h),
                                            (xx >= pl, pl > 0), (xx < pl + w, nw * m + 2 > pl + w))
                  if needed]
        value = data[i, c, yy - pt, xx - pl, ci]
        return te.if_then_else(te.all(*inside), value, zero) if inside else value

    pad = te.compute((n, c_blocks, nh * m + 2, nw * m + 2, x), padded, name="data_pad",
                     tag="injective")

    # B^T d B in two steps of a few terms each: B^T d (rows), then (B^T d) B
    left = te.compute(
        (a, a, n, nh, nw, c_blocks, x),
        lambda xi, s, i, th, tw, c, ci: _pick(xi, [
            _terms(bt[u], lambda r: pad[i, c, th * m + r, tw * m + s, ci]) for u in range(a)]),
        name="data_pack_left", tag="winograd_transform")
    packed = te.compute(
        (a, a, n, nh, nw, c_blocks, x),
        lambda xi, nu, i, th, tw, c, ci: _pick(nu, [
            _terms(bt[v], lambda s: left[xi, s, i, th, tw, c, ci]) for v in range(a)]),
        name="data_pack", tag="winograd_transform")
    rc = te.reduce_axis((0, c_blocks), name="rc")
    ri = te.reduce_axis((0, x), name="ri")
    bgemm = te.compute(
        (a, a, n, nh, nw, k_blocks, weight.shape[4]),
        lambda xi, nu, i, th, tw, k, kv: te.sum(
            weight[xi, nu, k, rc.var * x + ri.var, kv] * packed[xi, nu, i, th, tw, rc.var, ri.var],
            axis=[rc, ri]),
        name="bgemm", tag="winograd_bgemm")
    # A^T M A: M A (columns), then A^T (M A)
    right = te.compute(
        (a, m, n, nh, nw, k_blocks, weight.shape[4]),
        lambda r, j, i, th, tw, k, kv: _pick(j, [
            _terms(at[v], lambda s: bgemm[r, s, i, th, tw, k, kv]) for v in range(m)]),
        name="inverse_right", tag="winograd_transform")

    def inverse(i: PrimExpr, k: PrimExpr, yy: PrimExpr, xx: PrimExpr, kv: PrimExpr) -> PrimExpr:
        th, tw, col = te.floordiv(yy, m), te.floordiv(xx, m), te.floormod(xx, m)
        return _pick(te.floormod(yy, m), [
            _terms(at[u], lambda r: right[r, col, i, th, tw, k, kv]) for u in range(m)])

    result = te.compute(out.shape, inverse, name="conv2d_winograd_NCHWc",
                        tag="conv2d_winograd_NCHWc")
    return cast_output(result, out.dtype, "conv2d_winograd_NCHWc")


get_op_def(_OP).compute = _winograd_compute


def contrib_conv2d_winograd_nchwc(data: Expr, weight: Expr, tile_size: int = 4,
                                  padding: Any = (0, 0, 0, 0), channels: int | None = None,
                                  data_layout: str = "NCHW16c", out_layout: str = "",
                                  out_dtype: str = "") -> Call:
    """3x3 stride-1 convolution of blocked data by Winograd ``F(m x m, 3 x 3)``.

    Parameters
    ----------
    data : Expr
        ``(N, C // x, H, W, x)`` in ``data_layout`` ``NCHW{x}c``.
    weight : Expr
        Transformed filters ``(a, a, K // y, C, y)``, ``a = tile_size + 2``
        (:func:`winograd_weight` of an ``OIHW`` 3x3 weight).
    tile_size : int
        ``m``: 4 (or 2).
    padding : int or tuple of int
        One value, ``(vertical, horizontal)`` or ``(top, left, bottom, right)``.
    channels : int, optional
        ``K`` (checked against the weight).
    data_layout, out_layout : str
        ``NCHW{x}c`` and ``NCHW{y}c`` (``""``: the data layout's block).
    out_dtype : str
        Result dtype (``""``: the data's dtype).

    Returns
    -------
    Call
        ``(N, K // y, OH, OW, y)``: the convolution of the data with the original filters.
    """
    pads = pad_tuple(padding, 2, _OP)
    dtype = as_dtype(out_dtype) if out_dtype not in ("", None) else ""
    return make_call(_OP, [data, weight], WinogradAttrs(
        tile_size=int(tile_size), padding=pads, channels=None if channels is None else int(channels),
        data_layout=str(data_layout), out_layout=str(out_layout), out_dtype=dtype))

