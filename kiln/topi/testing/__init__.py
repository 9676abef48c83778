"""NumPy reference kernels with the signatures of TVM's ``tvm.topi.testing``.

Relay-era tests compare compiled results against these. Layout names follow TVM: data ``NC...``
(or ``N...C``), conv weights ``OI...`` (``...IO`` for channels-last), transposed-conv weights
``IO...``. Padding is an int, a str (``"SAME"``/``"VALID"``), one value per spatial axis, or
before-values then after-values.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "batch_matmul",
    "conv1d_ncw_python",
    "conv1d_transpose_ncw_python",
    "conv2d_nchw_python",
    "conv2d_nhwc_python",
    "conv2d_transpose_nchw_python",
    "conv2d_transpose_nhwc_python",
    "conv3d_ncdhw_python",
    "conv3d_ndhwc_python",
    "conv3d_transpose_ncdhw_python",
    "correlation_nchw_python",
    "depth_to_space_python",
    "dilate_python",
    "gather_nd_python",
    "gather_python",
    "l2_normalize_python",
    "log_softmax_python",
    "lrn_python",
    "one_hot",
    "poolnd_python",
    "resize2d_python",
    "resize3d_python",
    "sequence_mask",
    "slice_axis_python",
    "softmax_python",
    "space_to_depth_python",
]


def _as_tuple(value: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    out = tuple(int(v) for v in value)
    if len(out) == 1:
        return out * n
    if len(out) != n:
        raise ValueError(f"{what} {value!r} needs 1 or {n} values")
    return out


def _pad_tuple(
    padding: Any, kernel: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """TVM's ``get_pad_tuple``: (before, after) per spatial axis for an effective kernel."""
    n = len(kernel)
    if isinstance(padding, str):
        if padding.upper() == "VALID":
            return (0,) * n, (0,) * n
        if padding.upper() == "SAME":
            total = [k - 1 for k in kernel]
            before = tuple((t + 1) // 2 for t in total)
            return before, tuple(t - b for t, b in zip(total, before))
        raise ValueError(f"padding {padding!r} is not 'SAME' or 'VALID'")
    if isinstance(padding, (int, np.integer)):
        return (int(padding),) * n, (int(padding),) * n
    pads = tuple(int(p) for p in padding)
    if len(pads) == 1:
        return pads * n, pads * n
    if len(pads) == n:
        return pads, pads
    if len(pads) == 2 * n:
        return pads[:n], pads[n:]
    raise ValueError(f"padding {padding!r} needs 1, {n} or {2 * n} values")


def _conv_nd(
    data: np.ndarray,
    weight: np.ndarray,
    stride: Sequence[int],
    before: Sequence[int],
    after: Sequence[int],
    dilation: Sequence[int],
    groups: int,
) -> np.ndarray:
    """Grouped N-d cross-correlation, data ``NC...``, weight ``OI...``."""
    nsp = data.ndim - 2
    out_dtype = np.result_type(data.dtype, weight.dtype)
    padded = np.pad(
        data, [(0, 0), (0, 0)] + [(int(b), int(a)) for b, a in zip(before, after)]
    ).astype(out_dtype)
    batch, in_c = data.shape[:2]
    out_c = weight.shape[0]
    if in_c % groups or out_c % groups or weight.shape[1] != in_c // groups:
        raise ValueError(
            f"conv: data channels {in_c}, weight {weight.shape} and groups {groups} do not agree"
        )
    kernel = weight.shape[2:]
    out_sp = [
        (padded.shape[2 + i] - (kernel[i] - 1) * dilation[i] - 1) // stride[i] + 1
        for i in range(nsp)
    ]
    out = np.zeros((batch, out_c, *out_sp), dtype=out_dtype)
    ig, og = in_c // groups, out_c // groups
    for offs in itertools.product(*(range(k) for k in kernel)):
        taps: tuple[slice, ...] = (slice(None), slice(None), *(
            slice(start, start + (out_sp[i] - 1) * stride[i] + 1, stride[i])
            for i, start in enumerate(o * d for o, d in zip(offs, dilation))
        ))
        window = padded[taps]
        at: tuple[slice | int, ...] = (slice(None), slice(None), *offs)
        w = weight[at].astype(out_dtype)
        for g in range(groups):
            out[:, g * og:(g + 1) * og] += np.einsum(
                "ni...,oi->no...", window[:, g * ig:(g + 1) * ig], w[g * og:(g + 1) * og]
            )
    return out


def _conv_transpose_nd(
    data: np.ndarray,
    weight: np.ndarray,
    stride: Any,
    padding: Any,
    output_padding: Any,
    groups: int = 1,
) -> np.ndarray:
    """Grouped N-d transposed convolution, data ``NC...``, weight ``IO...`` (O per group)."""
    nsp = data.ndim - 2
    stride_t = _as_tuple(stride, nsp, "stride")
    opad = _as_tuple(output_padding, nsp, "output_padding")
    kernel = weight.shape[2:]
    before, after = _pad_tuple(padding, kernel)
    dilated = dilate_python(data, (1, 1, *stride_t))
    lo = [k - 1 - b for k, b in zip(kernel, before)]
    hi = [k - 1 - a + o for k, a, o in zip(kernel, after, opad)]
    padded = np.pad(dilated, [(0, 0), (0, 0)] + [(max(x, 0), max(y, 0)) for x, y in zip(lo, hi)])
    padded = padded[
        (slice(None), slice(None), *(
            slice(max(-x, 0), padded.shape[2 + i] - max(-y, 0))
            for i, (x, y) in enumerate(zip(lo, hi))
        ))
    ]
    in_c, og = weight.shape[:2]
    ig = in_c // groups
    # IO... per group -> OI... with flipped spatial axes
    w = weight.reshape(groups, ig, og, *kernel).swapaxes(1, 2).reshape(groups * og, ig, *kernel)
    w = np.flip(w, axis=tuple(range(2, 2 + nsp)))
    return _conv_nd(padded, w, (1,) * nsp, (0,) * nsp, (0,) * nsp, (1,) * nsp, groups)


def _nchw_conv(a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any, groups: int,
               dilation: Any = 1) -> np.ndarray:
    nsp = a_np.ndim - 2
    stride_t = _as_tuple(stride, nsp, "stride")
    dil = _as_tuple(dilation, nsp, "dilation")
    eff = [(k - 1) * d + 1 for k, d in zip(w_np.shape[2:], dil)]
    before, after = _pad_tuple(padding, eff)
    return _conv_nd(a_np, w_np, stride_t, before, after, dil, groups)


def conv1d_ncw_python(
    a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any, dilation: Any
) -> np.ndarray:
    """1-D convolution: data ``NCW``, weight ``OIW``, with kernel dilation."""
    return _nchw_conv(a_np, w_np, stride, padding, 1, dilation)


def conv2d_nchw_python(
    a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any, groups: int = 1
) -> np.ndarray:
    """2-D convolution: data ``NCHW``, weight ``OIHW`` (dilate the weight first for dilation)."""
    return _nchw_conv(a_np, w_np, stride, padding, groups)


def conv2d_nhwc_python(
    a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any, groups: int = 1
) -> np.ndarray:
    """2-D convolution: data ``NHWC``, weight ``HWIO``."""
    out = _nchw_conv(a_np.transpose(0, 3, 1, 2), w_np.transpose(3, 2, 0, 1), stride, padding,
                     groups)
    return out.transpose(0, 2, 3, 1)


def conv3d_ncdhw_python(
    a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any, groups: int = 1
) -> np.ndarray:
    """3-D convolution: data ``NCDHW``, weight ``OIDHW``."""
    return _nchw_conv(a_np, w_np, stride, padding, groups)


def conv3d_ndhwc_python(
    a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any, groups: int = 1
) -> np.ndarray:
    """3-D convolution: data ``NDHWC``, weight ``DHWIO``."""
    out = _nchw_conv(a_np.transpose(0, 4, 1, 2, 3), w_np.transpose(4, 3, 0, 1, 2), stride,
                     padding, groups)
    return out.transpose(0, 2, 3, 4, 1)


def conv1d_transpose_ncw_python(
    a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any, output_padding: Any
) -> np.ndarray:
    """1-D transposed convolution: data ``NCW``, weight ``IOW``."""
    return _conv_transpose_nd(a_np, w_np, stride, padding, output_padding)


def conv2d_transpose_nchw_python(
    a_np: np.ndarray,
    w_np: np.ndarray,
    stride: Any,
    padding: Any,
    output_padding: Any = (0, 0),
    groups: int = 1,
) -> np.ndarray:
    """2-D transposed convolution: data ``NCHW``, weight ``IOHW``."""
    return _conv_transpose_nd(a_np, w_np, stride, padding, output_padding, groups)


_TO_IOHW = {"IOHW": (0, 1, 2, 3), "OIHW": (1, 0, 2, 3), "HWIO": (2, 3, 0, 1), "HWOI": (3, 2, 0, 1)}


def conv2d_transpose_nhwc_python(
    a_nhwc: np.ndarray,
    weight: np.ndarray,
    weight_format: str,
    stride: Any,
    padding: Any,
    output_padding: Any = (0, 0),
) -> np.ndarray:
    """2-D transposed convolution: data ``NHWC``, weight in ``weight_format`` (HWIO, HWOI, ...)."""
    if weight_format not in _TO_IOHW:
        raise ValueError(f"weight_format {weight_format!r} is not one of {sorted(_TO_IOHW)}")
    out = conv2d_transpose_nchw_python(
        a_nhwc.transpose(0, 3, 1, 2), weight.transpose(_TO_IOHW[weight_format]), stride, padding,
        output_padding,
    )
    return out.transpose(0, 2, 3, 1)


def conv3d_transpose_ncdhw_python(
    a_np: np.ndarray, w_np: np.ndarray, stride: Any, padding: Any,
    output_padding: Any = (0, 0, 0),
) -> np.ndarray:
    """3-D transposed convolution: data ``NCDHW``, weight ``IODHW``."""
    return _conv_transpose_nd(a_np, w_np, stride, padding, output_padding)


def dilate_python(
    input_np: np.ndarray,
    strides: Sequence[int],
    dilation_value: float = 0.0,
    out_dtype: Any = None,
) -> np.ndarray:
    """Insert ``strides[i] - 1`` copies of ``dilation_value`` between elements along axis ``i``."""
    if len(strides) != input_np.ndim:
        raise ValueError(f"dilate: {len(strides)} strides for a {input_np.ndim}-d input")
    shape = tuple((n - 1) * s + 1 for n, s in zip(input_np.shape, strides))
    out = np.full(shape, dilation_value, dtype=out_dtype or input_np.dtype)
    out[tuple(slice(None, None, s) for s in strides)] = input_np
    return out


def poolnd_python(
    np_data: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilation: Sequence[int],
    padding_before: Sequence[int],
    padding_after: Sequence[int],
    pool_type: str,
    count_include_pad: bool = True,
    ceil_mode: bool = False,
    dtype: str = "float32",
    layout: str | None = None,
) -> np.ndarray:
    """Max or average pooling over the spatial axes (``NCW``/``NCHW``/``NCDHW`` or ``layout``).

    As in TVM: max pooling pads with 0 unless ``count_include_pad`` is false (then with the dtype's
    minimum); average pooling divides by the window's size inside the padded input, or by its
    count of real elements when ``count_include_pad`` is false (0 for an all-padding window).
    """
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool type {pool_type!r} is not 'max' or 'avg'")
    nsp = np_data.ndim - 2
    canon = {1: "NCW", 2: "NCHW", 3: "NCDHW"}.get(nsp)
    if canon is None:
        raise ValueError(f"poolnd_python: {np_data.ndim}-d input is not 3-, 4- or 5-d")
    if layout is not None and layout != canon:
        np_data = np_data.transpose([layout.index(d) for d in canon])
    out_sp = []
    for i in range(nsp):
        val = (np_data.shape[2 + i] - (kernel[i] - 1) * dilation[i] - 1 + padding_before[i]
               + padding_after[i]) / strides[i]
        out_sp.append(int((math.ceil if ceil_mode else math.floor)(val)) + 1)
    pad_value: float = 0
    if pool_type == "max" and not count_include_pad:
        dt = np.dtype(dtype)
        pad_value = np.finfo(dt).min if dt.kind == "f" else np.iinfo(dt).min
    pads = [(0, 0), (0, 0)] + [(padding_before[i], padding_after[i]) for i in range(nsp)]
    pad_data = np.pad(np_data.astype(dtype), pads, constant_values=pad_value)
    pad_map = np.pad(np.ones(np_data.shape[2:], dtype=bool), pads[2:])
    out = np.zeros(np_data.shape[:2] + tuple(out_sp), dtype=dtype)
    for coord in itertools.product(*(range(n) for n in out_sp)):
        idx = tuple(
            slice(coord[i] * strides[i], coord[i] * strides[i] + (kernel[i] - 1) * dilation[i] + 1,
                  dilation[i])
            for i in range(nsp)
        )
        window = pad_data[(slice(None), slice(None), *idx)]
        axes = tuple(range(2, 2 + nsp))
        target: tuple[slice | int, ...] = (slice(None), slice(None), *coord)
        if pool_type == "max":
            out[target] = window.max(axis=axes)
        else:
            count = int(np.prod(window.shape[2:])) if count_include_pad else int(pad_map[idx].sum())
            out[target] = window.sum(axis=axes) / count if count else 0
    if layout is not None and layout != canon:
        out = out.transpose([canon.index(d) for d in layout])
    return out


def softmax_python(a_np: np.ndarray, axis: int = 1) -> np.ndarray:
    """Softmax along ``axis``, stabilised by subtracting the maximum."""
    e = np.exp(a_np - a_np.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax_python(a_np: np.ndarray, axis: int = 1) -> np.ndarray:
    """Log-softmax along ``axis``."""
    shifted = a_np - a_np.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def lrn_python(
    a_np: np.ndarray, size: int, axis: int, bias: float, alpha: float, beta: float
) -> np.ndarray:
    """Local response normalisation across ``axis``: ``a / (bias + alpha * sum(a^2) / size)^beta``.

    The sum runs over the ``size``-wide window centred on each index (radius ``size // 2``).
    """
    radius = size // 2
    n = a_np.shape[axis]
    sq = np.moveaxis(a_np.astype(np.float64) ** 2, axis, 0)
    sums = np.stack([sq[max(0, j - radius):min(n, j + radius + 1)].sum(axis=0) for j in range(n)])
    denom = np.power(bias + alpha * np.moveaxis(sums, 0, axis) / size, beta)
    return (a_np / denom).astype(a_np.dtype)


def l2_normalize_python(a_np: np.ndarray, eps: float, axis: Any = None) -> np.ndarray:
    """``a / sqrt(max(sum(a^2, axis), eps))``."""
    axis_t = tuple(axis) if isinstance(axis, (list, tuple)) else axis
    sq = np.sum(np.square(a_np), axis=axis_t, keepdims=True)
    return a_np / np.sqrt(np.maximum(sq, eps))


def _resize_matrix(n_in: int, n_out: int, method: str, mode: str) -> np.ndarray:
    """(n_out, n_in) weights resampling one axis as TVM's reference resize does."""
    mat = np.zeros((n_out, n_in))
    for x in range(n_out):
        if mode == "half_pixel":
            src = (x + 0.5) * n_in / n_out - 0.5
        elif mode == "align_corners":
            src = (n_in - 1) / (n_out - 1) * x if n_out > 1 else 0.0
        elif mode == "asymmetric":
            src = x * n_in / n_out
        else:
            raise ValueError(f"unsupported coordinate_transformation_mode {mode!r}")
        base = math.floor(src)
        frac = src - base
        if method == "nearest_neighbor":
            idx = math.floor(src + 0.5) if mode == "align_corners" else base
            taps = [(idx, 1.0)]
        elif method == "linear":
            taps = [(base, 1.0 - frac), (base + 1, frac)]
        elif method == "cubic":
            a, t = -0.5, frac
            weights = [
                a * (t**3 - 2 * t**2 + t),
                (a + 2) * t**3 - (3 + a) * t**2 + 1,
                -(a + 2) * t**3 + (3 + 2 * a) * t**2 - a * t,
                -a * t**3 + a * t**2,
            ]
            taps = [(base + k - 1, w) for k, w in enumerate(weights)]
        else:
            raise ValueError(f"unknown resize method {method!r}")
        for idx, weight in taps:
            mat[x, min(max(idx, 0), n_in - 1)] += weight
    return mat


def _resize_ncx(data: np.ndarray, scale: Sequence[float], method: str, mode: str) -> np.ndarray:
    out = data.astype(np.float64)
    for i, s in enumerate(scale):
        axis = 2 + i
        n_out = round(data.shape[axis] * float(s))
        mat = _resize_matrix(data.shape[axis], n_out, method, mode)
        out = np.moveaxis(np.tensordot(mat, np.moveaxis(out, axis, 0), axes=1), 0, axis)
    return out.astype(data.dtype)


def resize2d_python(
    data: np.ndarray,
    scale: Sequence[float],
    layout: str = "NCHW",
    method: str = "nearest_neighbor",
    coordinate_transformation_mode: str = "align_corners",
) -> np.ndarray:
    """Resize ``NCHW``/``NHWC`` data by ``scale`` (output size ``round(size * scale)``).

    ``method`` is ``nearest_neighbor`` (round half up under ``align_corners``, else floor),
    ``linear`` or ``cubic`` (a = -0.5); indices outside the input clamp to its border.
    """
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"resize2d_python: layout {layout!r} is not NCHW or NHWC")
    if layout == "NHWC":
        data = data.transpose(0, 3, 1, 2)
    out = _resize_ncx(data, scale, method, coordinate_transformation_mode)
    return out.transpose(0, 2, 3, 1) if layout == "NHWC" else out


def resize3d_python(
    data: np.ndarray,
    scale: Sequence[float],
    layout: str = "NCDHW",
    method: str = "nearest_neighbor",
    coordinate_transformation_mode: str = "align_corners",
) -> np.ndarray:
    """Resize ``NCDHW``/``NDHWC`` data by ``scale``, as :func:`resize2d_python` does in 2-D."""
    if layout not in ("NCDHW", "NDHWC"):
        raise ValueError(f"resize3d_python: layout {layout!r} is not NCDHW or NDHWC")
    if layout == "NDHWC":
        data = data.transpose(0, 4, 1, 2, 3)
    out = _resize_ncx(data, scale, method, coordinate_transformation_mode)
    return out.transpose(0, 2, 3, 4, 1) if layout == "NDHWC" else out


def correlation_nchw_python(
    data1: np.ndarray,
    data2: np.ndarray,
    kernel_size: int,
    max_displacement: int,
    stride1: int,
    stride2: int,
    padding: int,
    is_multiply: bool,
) -> np.ndarray:
    """FlowNet correlation of two ``NCHW`` tensors (as in TVM; returns float64).

    Output channel ``q`` compares the ``kernel_size`` patch of ``data1`` at each output position
    with ``data2`` displaced by ``((q // grid) - r, (q % grid) - r) * stride2`` (``r =
    max_displacement // stride2``, ``grid = 2r + 1``), by product or absolute difference, averaged
    over the patch and the channels. Output size is ``(padded - 2 * border) // stride1``.
    """
    batch, chans, height, width = data1.shape
    pad = [(0, 0), (0, 0), (padding, padding), (padding, padding)]
    p1 = np.pad(data1.astype(np.float64), pad)
    p2 = np.pad(data2.astype(np.float64), pad)
    border = max_displacement + (kernel_size - 1) // 2
    out_h = (height + 2 * padding - 2 * border) // stride1
    out_w = (width + 2 * padding - 2 * border) // stride1
    radius = max_displacement // stride2
    grid = 2 * radius + 1
    out = np.zeros((batch, grid * grid, out_h, out_w))
    if out_h <= 0 or out_w <= 0:
        return out

    def window(arr: np.ndarray, y0: int, x0: int) -> np.ndarray:
        return arr[:, :, y0:y0 + (out_h - 1) * stride1 + 1:stride1,
                   x0:x0 + (out_w - 1) * stride1 + 1:stride1]

    for q in range(grid * grid):
        dy = (q // grid - radius) * stride2
        dx = (q % grid - radius) * stride2
        for h in range(kernel_size):
            for w in range(kernel_size):
                y1, x1 = max_displacement + h, max_displacement + w
                a, b = window(p1, y1, x1), window(p2, y1 + dy, x1 + dx)
                out[:, q] += (a * b if is_multiply else np.abs(a - b)).sum(axis=1)
    return out / float(kernel_size**2 * chans)


# --- layout, indexing and batched products (TVM's names and defaults) ---------------------------

def depth_to_space_python(data: np.ndarray, block_size: int, mode: str = "DCR") -> np.ndarray:
    """NCHW depth-to-space: ``(N, C, H, W)`` -> ``(N, C / b^2, H * b, W * b)``.

    ``mode="DCR"`` takes the block offset from the outer channel bits (depth, column, row),
    ``"CRD"`` from the inner ones (ONNX's two modes).
    """
    n, c, h, w = data.shape
    b = int(block_size)
    nc = c // (b * b)
    if mode == "DCR":
        moved = data.reshape(n, b, b, nc, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        moved = data.reshape(n, nc, b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return moved.reshape(n, nc, h * b, w * b)


def space_to_depth_python(data: np.ndarray, block_size: int) -> np.ndarray:
    """NCHW space-to-depth: ``(N, C, H, W)`` -> ``(N, C * b^2, H / b, W / b)`` (inverse of DCR)."""
    n, c, h, w = data.shape
    b = int(block_size)
    moved = data.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return moved.reshape(n, c * b * b, h // b, w // b)


def one_hot(indices: np.ndarray, on_value: Any, off_value: Any, depth: int, axis: int,
            dtype: Any) -> np.ndarray:
    """``on_value`` where ``indices`` selects along a new axis ``axis`` of size ``depth``."""
    idx = np.asarray(indices)
    axis = axis if axis >= 0 else idx.ndim + 1 + axis
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape(
        [depth if i == axis else 1 for i in range(idx.ndim + 1)])
    return np.where(hot, on_value, off_value).astype(dtype)


def gather_python(data: np.ndarray, axis: int, indices: np.ndarray) -> np.ndarray:
    """``out[..., i, ...] = data[..., indices[..., i, ...], ...]`` along ``axis`` (ONNX GatherElements)."""
    return np.take_along_axis(data, np.asarray(indices).astype(np.int64), axis=axis)


def gather_nd_python(a_np: np.ndarray, indices_np: np.ndarray) -> np.ndarray:
    """``out[y] = a[indices[0][y], ..., indices[m-1][y]]`` (the index tuples lead ``indices``)."""
    return a_np[tuple(np.asarray(indices_np).astype(np.int64))]


def batch_matmul(x: np.ndarray, y: np.ndarray, out_dtype: Any = None, trans_x: bool = False,
                 trans_y: bool = True) -> np.ndarray:
    """Batched ``x @ y`` of 3-d tensors, ``y`` transposed by default (TVM's ``nn.batch_matmul``);
    a batch of 1 broadcasts."""
    dtype = x.dtype if out_dtype is None else np.dtype(out_dtype)
    xx = np.swapaxes(x, 1, 2) if trans_x else x
    yy = np.swapaxes(y, 1, 2) if trans_y else y
    return np.matmul(xx.astype(dtype), yy.astype(dtype)).astype(dtype)


def slice_axis_python(data: np.ndarray, axis: int, begin: int, end: int | None = None) -> np.ndarray:
    """``data[..., begin:end, ...]`` along ``axis`` (negative bounds count from the end)."""
    index = [slice(None)] * data.ndim
    index[axis] = slice(begin, end)
    return data[tuple(index)]


def sequence_mask(data: np.ndarray, valid_length: np.ndarray, mask_value: float,
                  axis: int) -> np.ndarray:
    """Replace steps at or after each sequence's length by ``mask_value``.

    ``data`` is ``(max_length, batch, ...)`` for ``axis=0`` and ``(batch, max_length, ...)`` for
    ``axis=1``; ``valid_length`` has one length per batch entry.
    """
    steps = [1] * data.ndim
    steps[axis] = data.shape[axis]
    lengths = [1] * data.ndim
    lengths[1 - axis] = data.shape[1 - axis]
    mask = np.arange(data.shape[axis]).reshape(steps) >= np.asarray(valid_length).reshape(lengths)
    return data * (1 - mask) + mask_value * mask
