"""NumPy reference kernels of pooling: windowed max/avg and adaptive max/avg over any axes.

The windowed kernel follows TVM's ``topi.nn.pool_impl_nd``: max pooling pads with the dtype's
lowest finite value, average pooling sums zero-padded windows and divides by the number of elements
counted (with ``count_include_pad`` every position inside the declared padding counts, otherwise
only positions inside the data; the extra end padding ``ceil_mode`` adds never counts). Integer
averages use truncating division, as TVM's integer ``div``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from types import EllipsisType

import numpy as np

from kiln.op.nn_common import acc_dtype

__all__ = ["adaptive_pool_nd", "pool_nd"]


def _lowest(dtype: np.dtype) -> float | int:
    """TVM's ``min_value``: the most negative finite value (a window entirely in the padding
    yields it)."""
    if dtype.kind == "f":
        return float(np.finfo(dtype).min)
    if dtype.kind == "b":
        return False
    return int(np.iinfo(dtype).min)


def _divide(total: np.ndarray, count: np.ndarray | np.integer) -> np.ndarray:
    if total.dtype.kind == "f":
        return total / count
    quotient = np.abs(total) // count
    return np.where(total < 0, -quotient, quotient)


def _window_counts(size: int, out: int, kernel: int, stride: int, dilation: int,
                   pad: tuple[int, int], include_pad: bool) -> np.ndarray:
    """Per output position along one axis: how many window taps are counted by the average."""
    lo, hi = (-pad[0], size + pad[1]) if include_pad else (0, size)
    starts = np.arange(out) * stride - pad[0]
    taps = starts[:, None] + np.arange(kernel)[None, :] * dilation
    return ((taps >= lo) & (taps < hi)).sum(axis=1)


def pool_nd(
    data: np.ndarray,
    axes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilation: Sequence[int],
    padding: Sequence[tuple[int, int]],
    out_sizes: Sequence[int],
    mode: str,
    count_include_pad: bool = False,
) -> np.ndarray:
    """Windowed max or average pooling of ``data`` over ``axes``.

    Parameters
    ----------
    data : ndarray
        Input in any layout.
    axes : sequence of int
        The pooled axes (in the order of ``kernel`` etc.).
    kernel, strides, dilation : sequence of int
        Window size, stride and dilation per pooled axis.
    padding : sequence of (int, int)
        Declared ``(begin, end)`` padding per pooled axis.
    out_sizes : sequence of int
        Output size per pooled axis (from the type relation, ``ceil_mode`` included).
    mode : str
        ``"max"`` or ``"avg"``.
    count_include_pad : bool
        For ``"avg"``: count padded positions inside the declared padding.

    Returns
    -------
    ndarray
        The pooled tensor, in ``data``'s dtype.
    """
    nsp = len(axes)
    x = np.moveaxis(data, list(axes), list(range(data.ndim - nsp, data.ndim)))
    lead = x.ndim - nsp
    acc = data.dtype if mode == "max" else acc_dtype(data.dtype)
    fill = _lowest(data.dtype) if mode == "max" else 0
    pads = []
    for size, k, s, d, p, o in zip(x.shape[lead:], kernel, strides, dilation, padding, out_sizes):
        needed = (o - 1) * s + (k - 1) * d + 1
        pads.append((p[0], max(needed - size - p[0], 0)))
    xp = np.pad(x.astype(acc), [(0, 0)] * lead + pads, constant_values=fill)
    out: np.ndarray | None = None
    for tap in itertools.product(*(range(k) for k in kernel)):
        sl: tuple[EllipsisType | slice, ...] = (Ellipsis, *(
            slice(t * d, t * d + (o - 1) * s + 1, s)
            for t, d, s, o in zip(tap, dilation, strides, out_sizes)))
        window = xp[sl]
        if out is None:
            out = window.copy()
        elif mode == "max":
            np.maximum(out, window, out=out)
        else:
            out += window
    assert out is not None
    if mode == "avg":
        count = np.ones((1,) * lead, dtype=np.int64)
        for i, (size, k, s, d, p, o) in enumerate(zip(x.shape[lead:], kernel, strides, dilation,
                                                      padding, out_sizes)):
            c = _window_counts(size, o, k, s, d, p, count_include_pad)
            count = count[..., None] * c.reshape((1,) * (lead + i) + (o,))
        out = _divide(out, np.maximum(count, 1))
    out = np.moveaxis(out, list(range(lead, out.ndim)), list(axes))
    with np.errstate(all="ignore"):
        return out.astype(data.dtype)


def adaptive_pool_nd(data: np.ndarray, axes: Sequence[int], out_sizes: Sequence[int],
                     mode: str) -> np.ndarray:
    """Adaptive max or average pooling: output position ``i`` of an axis of length ``n`` pooled to
    ``m`` covers ``[floor(i * n / m), ceil((i + 1) * n / m))``.

    Parameters
    ----------
    data : ndarray
        Input in any layout.
    axes : sequence of int
        The pooled axes.
    out_sizes : sequence of int
        Output size per pooled axis.
    mode : str
        ``"max"`` or ``"avg"``.

    Returns
    -------
    ndarray
        The pooled tensor, in ``data``'s dtype.
    """
    nsp = len(axes)
    x = np.moveaxis(data, list(axes), list(range(data.ndim - nsp, data.ndim)))
    lead = x.ndim - nsp
    acc = data.dtype if mode == "max" else acc_dtype(data.dtype)
    out = np.empty(x.shape[:lead] + tuple(out_sizes), dtype=acc)
    ranges = [[((i * n) // m, -((-(i + 1) * n) // m)) for i in range(m)]
              for n, m in zip(x.shape[lead:], out_sizes)]
    for idx in itertools.product(*(range(m) for m in out_sizes)):
        cover: tuple[EllipsisType | slice, ...] = (
            Ellipsis, *(slice(*ranges[a][i]) for a, i in enumerate(idx)))
        region = x[cover]
        flat = region.reshape((*region.shape[:lead], -1)).astype(acc)
        at: tuple[EllipsisType | int, ...] = (Ellipsis, *idx)
        if mode == "max":
            out[at] = flat.max(axis=-1)
        else:
            out[at] = _divide(flat.sum(axis=-1), np.int64(flat.shape[-1]))
    out = np.moveaxis(out, list(range(lead, out.ndim)), list(axes))
    with np.errstate(all="ignore"):
        return out.astype(data.dtype)
