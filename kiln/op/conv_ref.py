"""NumPy reference kernels of convolution: direct and transposed, any number of spatial axes.

Both take channels-first arrays (data ``N, C, *spatial``; weight ``O, I, *kernel`` for the direct
convolution and ``I, O, *kernel`` for the transposed one) and accumulate in float64 (floats) or
int64 (integers). The work is one batched matrix product per kernel tap, so the kernels stay fast
enough to run whole networks in the interpreter.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from kiln.op.nn_common import acc_dtype

__all__ = ["conv_nd", "conv_transpose_nd"]


def _tap_slices(tap: Sequence[int], dilation: Sequence[int], stride: Sequence[int],
                count: Sequence[int]) -> tuple[slice, ...]:
    """Slices picking, along each spatial axis, the ``count`` positions a kernel tap touches."""
    return tuple(slice(t * d, t * d + (c - 1) * s + 1, s)
                 for t, d, s, c in zip(tap, dilation, stride, count))


def conv_nd(
    data: np.ndarray,
    weight: np.ndarray,
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    dilation: Sequence[int],
    groups: int,
    out_spatial: Sequence[int],
    out_dtype: np.dtype,
) -> np.ndarray:
    """Grouped, strided, dilated, zero-padded convolution (cross-correlation, as in every DL framework).

    Parameters
    ----------
    data : ndarray
        ``(N, C, *spatial)``.
    weight : ndarray
        ``(O, C // groups, *kernel)``.
    strides, dilation : sequence of int
        Per spatial axis.
    padding : sequence of (int, int)
        ``(begin, end)`` zero padding per spatial axis.
    groups : int
        Number of channel groups.
    out_spatial : sequence of int
        Output spatial shape (from the type relation).
    out_dtype : numpy dtype
        Result dtype.

    Returns
    -------
    ndarray
        ``(N, O, *out_spatial)``.
    """
    acc = acc_dtype(data.dtype, weight.dtype, out_dtype)
    n, c = data.shape[:2]
    o = weight.shape[0]
    cg, og = c // groups, o // groups
    xp = np.pad(data.astype(acc), [(0, 0), (0, 0), *padding])
    xg = xp.reshape(n, groups, cg, *xp.shape[2:])
    wg = weight.astype(acc).reshape(groups, og, cg, *weight.shape[2:])
    positions = int(np.prod(out_spatial))
    out = np.zeros((n, groups, og, positions), dtype=acc)
    for tap in itertools.product(*(range(k) for k in weight.shape[2:])):
        patch = xg[(slice(None),) * 3 + _tap_slices(tap, dilation, strides, out_spatial)]
        w_tap = wg[(slice(None),) * 3 + tap]  # (G, Og, Cg)
        out += np.matmul(w_tap[None], patch.reshape(n, groups, cg, positions))
    with np.errstate(all="ignore"):
        return out.reshape(n, o, *out_spatial).astype(out_dtype)


def conv_transpose_nd(
    data: np.ndarray,
    weight: np.ndarray,
    strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    dilation: Sequence[int],
    groups: int,
    out_spatial: Sequence[int],
    out_dtype: np.dtype,
) -> np.ndarray:
    """Transposed convolution (the gradient of :func:`conv_nd` with respect to its input).

    Every input element scatters ``weight`` into the output at ``input_position * stride +
    tap * dilation - pad_begin``; ``out_spatial`` (which includes any output padding) decides how
    many output positions are kept.

    Parameters
    ----------
    data : ndarray
        ``(N, C, *spatial)``.
    weight : ndarray
        ``(C, O // groups, *kernel)``.
    strides, dilation : sequence of int
        Per spatial axis.
    padding : sequence of (int, int)
        ``(begin, end)`` cropping per spatial axis.
    groups : int
        Number of channel groups.
    out_spatial : sequence of int
        Output spatial shape (from the type relation).
    out_dtype : numpy dtype
        Result dtype.

    Returns
    -------
    ndarray
        ``(N, O, *out_spatial)``.
    """
    acc = acc_dtype(data.dtype, weight.dtype, out_dtype)
    n, c = data.shape[:2]
    in_spatial = data.shape[2:]
    kernel = weight.shape[2:]
    cg, og = c // groups, weight.shape[1]
    span = [(i - 1) * s + (k - 1) * d + 1 for i, s, k, d in zip(in_spatial, strides, kernel, dilation)]
    buf_shape = [max(sp, p[0] + o) for sp, p, o in zip(span, padding, out_spatial)]
    buf = np.zeros((n, groups, og, *buf_shape), dtype=acc)
    xg = data.astype(acc).reshape(n, groups, cg, -1)
    wg = weight.astype(acc).reshape(groups, cg, og, *kernel)
    for tap in itertools.product(*(range(k) for k in kernel)):
        w_tap = np.swapaxes(wg[(slice(None),) * 3 + tap], 1, 2)  # (G, Og, Cg)
        contrib = np.matmul(w_tap[None], xg).reshape(n, groups, og, *in_spatial)
        buf[(slice(None),) * 3 + _tap_slices(tap, dilation, strides, in_spatial)] += contrib
    crop = tuple(slice(p[0], p[0] + o) for p, o in zip(padding, out_spatial))
    out = buf[(slice(None),) * 3 + crop]
    with np.errstate(all="ignore"):
        return out.reshape(n, og * groups, *out_spatial).astype(out_dtype)
