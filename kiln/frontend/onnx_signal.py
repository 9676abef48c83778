"""ONNX converters: DFT, STFT and MelWeightMatrix (the signal-processing front ends of audio models).

A DFT of length ``L`` is a product with constant matrices, so it compiles like any dense layer:
with ``C[m, n] = cos(2 pi m n / L)`` and ``S[m, n] = sin(2 pi m n / L)`` (times ``1 / L`` for an
inverse) and the sign ``s`` of the exponent (-1 forward, +1 inverse), a complex input
``xr + j xi`` along the transformed axis gives::

    yr = xr C^T - s xi S^T        yi = xi C^T + s xr S^T

The input is cut or zero-padded to ``L`` samples (columns past the input are dropped, columns
past ``L`` are zero), a one-sided forward transform keeps the ``L // 2 + 1`` first frequencies,
and the inverse of a one-sided spectrum (irfft) is the real part of the Hermitian sum: frequency
``k`` counted twice except ``k = 0`` and, for even ``L``, ``k = L / 2``. ONNX's last axis holds
``(real, imaginary)`` (or the real part alone). A float32 or float16 transform is computed in
float64 and rounded once at the end: the float32 products of a length-``L`` sum would leave
errors of about ``1e-7 * sqrt(L)`` times the signal's size on outputs that should be zero.

STFT frames the signal with a constant gather (``n_frames = 1 + (length - frame_length) //
frame_step``), multiplies each frame by the window and takes a DFT of every frame.
MelWeightMatrix needs its inputs at import and becomes a constant.
"""

from __future__ import annotations

import numpy as np

from kiln.frontend.onnx_common import NodeContext, converter, normalize_axis, onnx_dtype
from kiln.ir.expr import Constant, Expr

__all__: list[str] = []


def _matrices(rows: int, cols: int, length: int, inverse: bool, dtype: str,
              hermitian: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(C, S)`` of shape ``(rows, cols)``: output ``m``, input sample ``n < min(cols, L)``."""
    m = np.arange(rows, dtype=np.float64)[:, None]
    n = np.arange(cols, dtype=np.float64)[None, :]
    angle = 2.0 * np.pi * ((m * n) % length) / length  # reduced first: exact for large m * n
    scale = np.where(n < length, 1.0 / length if inverse else 1.0, 0.0)
    if hermitian:  # the input is frequency n of a real signal: its mirror counts too
        double = (n > 0) & ~((length % 2 == 0) & (n == length // 2))
        scale = scale * np.where(double, 2.0, 1.0)
    return ((np.cos(angle) * scale).astype(dtype), (np.sin(angle) * scale).astype(dtype))


def _to_last(axis: int, rank: int) -> tuple[list[int], list[int]]:
    """The permutation moving ``axis`` last, and the one moving it back."""
    perm = [i for i in range(rank) if i != axis] + [axis]
    return perm, [perm.index(i) for i in range(rank)]


def dft(ctx: NodeContext, x: Expr, axis: int, length: int, inverse: bool, onesided: bool) -> Expr:
    """The ONNX DFT of ``x`` (last axis: real, or (real, imaginary)) along ``axis`` (not the last).

    Forward one-sided: the first ``length // 2 + 1`` frequencies. Inverse one-sided (irfft): the
    input holds the first frequencies of a real signal's spectrum and the result is real.
    """
    from kiln.op import nn
    from kiln.op import transform as tf
    from kiln.op.elemwise import add, cast, negative, subtract

    shape = ctx.shape(x)
    rank, parts, dtype = len(shape), shape[-1], ctx.dtype(x)
    if dtype in ("float16", "float32"):  # sums of many products: accumulate in float64
        return cast(dft(ctx, cast(x, "float64"), axis, length, inverse, onesided), dtype)
    if parts not in (1, 2):
        raise ctx.error(f"the last axis of input shape {shape} must hold 1 (real) or 2 (real, "
                        "imaginary) values")
    if length <= 0:
        raise ctx.error(f"dft_length {length} must be positive")
    samples = shape[axis]
    irfft = inverse and onesided
    outputs = length // 2 + 1 if onesided and not inverse else length
    cos, sin = _matrices(outputs, samples, length, inverse, dtype, hermitian=irfft)
    outer = [d for i, d in enumerate(shape[:-1]) if i != axis]
    moved = axis != rank - 2  # the transformed axis is not already last once the pair axis goes
    perm, back = _to_last(axis, rank - 1)

    def part(i: int) -> Expr:  # real (0) or imaginary (1) samples, the transformed axis last
        v = tf.take(x, Constant(np.array(i, np.int64)), axis=rank - 1)
        return tf.transpose(v, perm) if moved else v

    def product(v: Expr, w: np.ndarray) -> Expr:
        flat = tf.reshape(v, (-1, samples))
        return tf.reshape(nn.dense(flat, Constant(w)), (*outer, outputs))

    real = part(0)
    rc = product(real, cos)
    if parts == 1:
        yr = rc
        yi = None if irfft else product(real, sin) if inverse else negative(product(real, sin))
    else:
        imag = part(1)
        isin = product(imag, sin)
        yr = subtract(rc, isin) if inverse else add(rc, isin)
        yi = None
        if not irfft:
            ic, rs = product(imag, cos), product(real, sin)
            yi = add(ic, rs) if inverse else subtract(ic, rs)
    result = [tf.transpose(r, back) if moved else r for r in (yr, yi) if r is not None]
    if len(result) == 1:
        return tf.expand_dims(result[0], rank - 1)
    return tf.stack(result, axis=rank - 1)


@converter("DFT", needs=("nn.dense", "take", "transpose", "reshape", "stack"))
def _dft(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    rank = len(ctx.shape(x))
    if ctx.opset >= 20:
        axis = int(ctx.scalar(2, "axis")) if ctx.has_input(2) else -2
    else:
        axis = int(ctx.attr("axis", 1))
    axis = normalize_axis(ctx, axis, rank)
    if axis == rank - 1:
        raise ctx.error(f"axis {axis} is the (real, imaginary) axis of input shape {ctx.shape(x)}")
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    if ctx.has_input(1):
        length = int(ctx.scalar(1, "dft_length"))
    elif inverse and onesided:
        length = 2 * (ctx.shape(x)[axis] - 1)
    else:
        length = ctx.shape(x)[axis]
    return dft(ctx, x, axis, length, inverse, onesided)


@converter("STFT", needs=("nn.dense", "take", "multiply", "stack"))
def _stft(ctx: NodeContext) -> Expr:
    from kiln.op import transform as tf
    from kiln.op.elemwise import multiply

    signal = ctx.input(0)
    shape = ctx.shape(signal)
    if len(shape) != 3:
        raise ctx.error(f"signal of shape {shape} must be (batch, length, 1 or 2)")
    step = int(ctx.scalar(1, "frame_step"))
    window = ctx.input(2) if ctx.has_input(2) else None
    if ctx.has_input(3):
        frame = int(ctx.scalar(3, "frame_length"))
    elif window is not None:
        frame = ctx.shape(window)[0]
    else:
        raise ctx.error("STFT needs a window or a frame_length")
    if step <= 0 or frame <= 0 or frame > shape[1]:
        raise ctx.error(f"frame_step {step} and frame_length {frame} do not fit a signal of "
                        f"length {shape[1]}")
    frames = 1 + (shape[1] - frame) // step
    index = np.arange(frames, dtype=np.int64)[:, None] * step + np.arange(frame, dtype=np.int64)
    framed = tf.take(signal, Constant(index), axis=1)  # (batch, frames, frame, parts)
    if window is not None:
        framed = multiply(framed, tf.reshape(window, (1, 1, -1, 1)))
    return dft(ctx, framed, 2, frame, False, bool(ctx.attr("onesided", 1)))


@converter("MelWeightMatrix")
def _mel_weight_matrix(ctx: NodeContext) -> Expr:
    mel_bins, length, rate = (int(ctx.scalar(i, what)) for i, what
                              in enumerate(("num_mel_bins", "dft_length", "sample_rate")))
    low, high = float(ctx.scalar(3, "lower_edge_hertz")), float(ctx.scalar(4, "upper_edge_hertz"))
    dtype = onnx_dtype(int(ctx.attr("output_datatype", 1)), "MelWeightMatrix output_datatype")
    return Constant(mel_weight_matrix(mel_bins, length, rate, low, high).astype(dtype))


def mel_weight_matrix(mel_bins: int, length: int, rate: int, low: float, high: float) -> np.ndarray:
    """Triangular mel filters as ONNX defines them: ``(length // 2 + 1, mel_bins)``.

    ``mel_bins + 2`` edges are spaced evenly on the mel scale (``2595 log10(1 + f / 700)``)
    from ``low`` by ``(mel(high) - mel(low)) / (mel_bins + 2)``, mapped back to hertz and to
    spectrogram bins ``floor((length + 1) f / rate)``. Filter ``i`` rises linearly from edge
    ``i`` to edge ``i + 1`` (a single 1 when they coincide) and falls to edge ``i + 2``.
    """
    def to_mel(f: float) -> float:
        return 2595.0 * np.log10(1.0 + f / 700.0)

    step = (to_mel(high) - to_mel(low)) / (mel_bins + 2)
    mels = to_mel(low) + step * np.arange(mel_bins + 2)
    hertz = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    edges = np.floor((length + 1) * hertz / rate).astype(np.int64)
    out = np.zeros((length // 2 + 1, mel_bins))
    for i in range(mel_bins):
        left, center, right = edges[i], edges[i + 1], edges[i + 2]
        if center == left:
            out[center, i] = 1.0
        else:
            j = np.arange(left, center + 1)
            out[j, i] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, i] = (right - j) / (right - center)
    return out
