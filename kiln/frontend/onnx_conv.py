"""ONNX converters: convolutions and pooling (Conv, ConvTranspose, MaxPool, AveragePool, LpPool,
GlobalAveragePool, GlobalMaxPool, MaxUnpool) and Col2Im.

ONNX's ``pads`` list ``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]`` is relay's padding order
for 1-, 2- and 3-d ops. ``auto_pad`` (SAME_UPPER, SAME_LOWER, VALID) is resolved to explicit pads
from the static input shape. ConvTranspose pads that come out negative (an ``output_shape`` larger
than the natural output) are applied as a crop-or-zero-pad of the unpadded result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.frontend.onnx_common import NodeContext, const, converter, scalar_like
from kiln.frontend.onnx_tensor import reshape_to, static_slice
from kiln.ir.expr import Expr
from kiln.op import elemwise as ew

__all__ = ["conv_call", "resolve_pads"]

_LAYOUTS = {1: ("NCW", "OIW"), 2: ("NCHW", "OIHW"), 3: ("NCDHW", "OIDHW")}


def _check_auto_pad(attrs: dict[str, Any], opset: int) -> str | None:
    mode = attrs.get("auto_pad", "NOTSET")
    return None if mode in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "") else f"auto_pad={mode!r}"


def resolve_pads(ctx: NodeContext, in_shape: Sequence[int], kernel: Sequence[int],
                 strides: Sequence[int], dilations: Sequence[int]) -> list[int]:
    """Explicit ``[begins..., ends...]`` pads from ``pads`` or ``auto_pad``."""
    n = len(kernel)
    mode = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    if mode == "VALID":
        return [0] * (2 * n)
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(in_shape, kernel, strides, dilations):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            small, large = total // 2, total - total // 2
            begins.append(small if mode == "SAME_UPPER" else large)
            ends.append(large if mode == "SAME_UPPER" else small)
        return begins + ends
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * n))]
    if len(pads) != 2 * n:
        raise ctx.error(f"pads {pads} must hold {2 * n} values for a {n}-d kernel")
    return pads


def _spatial_attrs(ctx: NodeContext, n: int) -> tuple[list[int], list[int]]:
    strides = [int(s) for s in ctx.attr("strides", [1] * n)]
    dilations = [int(d) for d in ctx.attr("dilations", [1] * n)]
    if len(strides) != n or len(dilations) != n:
        raise ctx.error(f"strides {strides} and dilations {dilations} must have {n} entries")
    return strides, dilations


def _bias_add(ctx: NodeContext, out: Expr) -> Expr:
    if not ctx.has_input(2):
        return out
    from kiln.op import nn

    return nn.bias_add(out, ctx.input(2), axis=1)


def conv_call(ctx: NodeContext, x: Expr, w: Expr, out_dtype: str = "") -> Expr:
    """The convolution the node's attributes describe, of ``x`` by ``w`` (no bias)."""
    from kiln.op import conv

    xs, ws = ctx.shape(x), ctx.shape(w)
    n = len(xs) - 2
    if n not in _LAYOUTS:
        raise ctx.unsupported(f"{n}-d convolution (Kiln has 1-, 2- and 3-d)")
    kernel = [int(k) for k in ctx.attr("kernel_shape", ws[2:])]
    strides, dilations = _spatial_attrs(ctx, n)
    pads = resolve_pads(ctx, xs[2:], kernel, strides, dilations)
    data_layout, kernel_layout = _LAYOUTS[n]
    build = getattr(conv, f"conv{n}d")
    return build(x, w, strides=strides, padding=pads, dilation=dilations,
                 groups=int(ctx.attr("group", 1)), channels=ws[0], kernel_size=kernel,
                 data_layout=data_layout, kernel_layout=kernel_layout, out_dtype=out_dtype)


@converter("Conv", needs=("nn.conv2d", "nn.bias_add"), check=_check_auto_pad)
def _conv(ctx: NodeContext) -> Expr:
    return _bias_add(ctx, conv_call(ctx, ctx.input(0), ctx.input(1)))


@converter("ConvTranspose", needs=("nn.conv2d_transpose", "nn.bias_add"), check=_check_auto_pad)
def _conv_transpose(ctx: NodeContext) -> Expr:
    from kiln.op import conv

    x, w = ctx.input(0), ctx.input(1)
    xs, ws = ctx.shape(x), ctx.shape(w)
    n = len(xs) - 2
    if n not in _LAYOUTS:
        raise ctx.unsupported(f"{n}-d transposed convolution (Kiln has 1-, 2- and 3-d)")
    group = int(ctx.attr("group", 1))
    kernel = [int(k) for k in ctx.attr("kernel_shape", ws[2:])]
    strides, dilations = _spatial_attrs(ctx, n)
    out_pad = [int(p) for p in ctx.attr("output_padding", [0] * n)]
    full = [s * (i - 1) + (k - 1) * d + 1 for i, k, s, d in zip(xs[2:], kernel, strides, dilations)]
    mode = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    target = ctx.attr("output_shape")
    if target is not None or mode in ("SAME_UPPER", "SAME_LOWER"):
        if target is not None:
            target = [int(t) for t in target][-n:]
        else:
            target = [i * s for i, s in zip(xs[2:], strides)]
        begins, ends = [], []
        for f, op, t in zip(full, out_pad, target):
            total = f + op - t
            half = total // 2  # floor, as ONNX's reference does (a negative total pads the end)
            if mode == "SAME_UPPER":
                begins.append(half)
                ends.append(total - half)
            else:
                begins.append(total - half)
                ends.append(half)
        pads = begins + ends
    elif mode == "VALID":
        pads = [0] * (2 * n)
    else:
        pads = [int(p) for p in ctx.attr("pads", [0] * (2 * n))]
    layout = _LAYOUTS[n][0]
    kernel_layout = {1: "IOW", 2: "IOHW", 3: "IODHW"}[n]
    build = getattr(conv, f"conv{n}d_transpose")
    simple = all(p >= 0 for p in pads) and all(0 <= p < max(s, d) for p, s, d in
                                                  zip(out_pad, strides, dilations))
    if simple:
        out = build(x, w, strides=strides, padding=pads, dilation=dilations, groups=group,
                    channels=ws[1] * group, kernel_size=kernel, data_layout=layout,
                    kernel_layout=kernel_layout, output_padding=out_pad)
        return _bias_add(ctx, out)
    out = build(x, w, strides=strides, padding=[0] * (2 * n), dilation=dilations, groups=group,
                channels=ws[1] * group, kernel_size=kernel, data_layout=layout,
                kernel_layout=kernel_layout)
    return _bias_add(ctx, _crop_or_pad(ctx, out, pads[:n], [f + op - pads[i] - pads[n + i] for i, (f, op)
                                                            in enumerate(zip(full, out_pad))]))


def _crop_or_pad(ctx: NodeContext, out: Expr, begins: Sequence[int], sizes: Sequence[int]) -> Expr:
    """Spatial window ``[b, b + size)`` of ``out``, zero-filled where it leaves ``out``."""
    from kiln.op import nn

    shape = ctx.shape(out)
    n = len(begins)
    lo = [max(b, 0) for b in begins]
    hi = [min(b + s, d) for b, s, d in zip(begins, sizes, shape[2:])]
    out = static_slice(ctx, out, list(range(2, 2 + n)), lo, hi)
    before = [max(-b, 0) for b in begins]
    after = [s - (h - lo_) - bf for s, h, lo_, bf in zip(sizes, hi, lo, before)]
    if any(before) or any(after):
        width = [(0, 0), (0, 0), *zip(before, after)]
        out = nn.pad(out, pad_width=width, pad_value=scalar_like(ctx, 0, out), pad_mode="constant")
    return out


# --- pooling -------------------------------------------------------------------------------------

def _pool_setup(ctx: NodeContext) -> tuple[Expr, int, list[int], list[int], list[int], list[int], bool]:
    """Input, rank, kernel, strides, dilations, pads and relay's ceil_mode for a pooling node."""
    x = ctx.input(0)
    xs = ctx.shape(x)
    n = len(xs) - 2
    if n not in _LAYOUTS:
        raise ctx.unsupported(f"{n}-d pooling (Kiln has 1-, 2- and 3-d)")
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    strides, dilations = _spatial_attrs(ctx, n)
    pads = resolve_pads(ctx, xs[2:], kernel, strides, dilations)
    ceil = bool(int(ctx.attr("ceil_mode", 0)))
    if not ceil:
        return x, n, kernel, strides, dilations, pads, False
    # ONNX drops a last ceil-mode window that starts in the end padding; relay keeps it. Where
    # they differ, ONNX's size is the floor size, and the end padding is extended to reach it.
    floor_sizes, onnx_sizes = [], []
    for i, (size, k, s, d) in enumerate(zip(xs[2:], kernel, strides, dilations)):
        span = size + pads[i] + pads[n + i] - ((k - 1) * d + 1)
        out = -(-span // s) + 1
        if (out - 1) * s >= size + pads[i]:
            out -= 1
        floor_sizes.append(span // s + 1)
        onnx_sizes.append(out)
    ceil_sizes = [-(-(size + pads[i] + pads[n + i] - ((k - 1) * d + 1)) // s) + 1
                  for i, (size, k, s, d) in enumerate(zip(xs[2:], kernel, strides, dilations))]
    if onnx_sizes == ceil_sizes:
        return x, n, kernel, strides, dilations, pads, True
    if onnx_sizes != floor_sizes:
        for i, (size, k, s, d) in enumerate(zip(xs[2:], kernel, strides, dilations)):
            need = (onnx_sizes[i] - 1) * s + (k - 1) * d + 1 - (size + pads[i] + pads[n + i])
            pads[n + i] += max(need, 0)
    return x, n, kernel, strides, dilations, pads, False


@converter("MaxPool", needs=("nn.max_pool2d",), check=_check_auto_pad)
def _max_pool(ctx: NodeContext) -> Expr:
    from kiln.op import pool

    if ctx.wants_output(1):
        raise ctx.unsupported("the Indices output of MaxPool")
    x, n, kernel, strides, dilations, pads, ceil = _pool_setup(ctx)
    build = getattr(pool, f"max_pool{n}d")
    return build(x, pool_size=kernel, strides=strides, dilation=dilations, padding=pads,
                 layout=_LAYOUTS[n][0], ceil_mode=ceil)


def _avg_pool(x: Expr, n: int, kernel: list[int], strides: list[int], dilations: list[int],
              pads: list[int], ceil: bool, count_include_pad: bool) -> Expr:
    from kiln.op import pool

    build = getattr(pool, f"avg_pool{n}d")
    return build(x, pool_size=kernel, strides=strides, dilation=dilations, padding=pads,
                 layout=_LAYOUTS[n][0], ceil_mode=ceil, count_include_pad=count_include_pad)


@converter("AveragePool", needs=("nn.avg_pool2d",), check=_check_auto_pad)
def _average_pool(ctx: NodeContext) -> Expr:
    x, n, kernel, strides, dilations, pads, ceil = _pool_setup(ctx)
    return _avg_pool(x, n, kernel, strides, dilations, pads, ceil,
                     bool(int(ctx.attr("count_include_pad", 0))))


@converter("LpPool", needs=("nn.avg_pool2d", "power", "abs"), check=_check_auto_pad)
def _lp_pool(ctx: NodeContext) -> Expr:
    x, n, kernel, strides, dilations, pads, ceil = _pool_setup(ctx)
    p = float(ctx.attr("p", 2))
    powered = ew.power(ew.abs(x), scalar_like(ctx, p, x)) if p != 1 else ew.abs(x)
    # The sum over each window is the padded average times the window size.
    mean = _avg_pool(powered, n, kernel, strides, dilations, pads, ceil, True)
    total = ew.multiply(mean, scalar_like(ctx, float(np.prod(kernel)), x))
    return total if p == 1 else ew.power(total, scalar_like(ctx, 1.0 / p, x))


def _global_pool(ctx: NodeContext) -> Expr:
    from kiln.op import pool, reduce

    x = ctx.input(0)
    average = ctx.op_type == "GlobalAveragePool"
    if ctx.ndim(x) == 4:
        # nn.global_*_pool2d, as TVM's frontend writes it: layout passes block it (NCHWc) and the
        # pooling template accumulates channel blocks in registers, where a mean over the
        # blocked spatial axes fell to the default schedule (MobileNetV3's SE blocks)
        return pool.global_avg_pool2d(x) if average else pool.global_max_pool2d(x)
    axes = list(range(2, ctx.ndim(x)))
    return (reduce.mean if average else reduce.max)(x, axis=axes, keepdims=True)


converter("GlobalAveragePool", needs=("mean", "nn.global_avg_pool2d"))(_global_pool)
converter("GlobalMaxPool", needs=("max", "nn.global_max_pool2d"))(_global_pool)


@converter("Col2Im", needs=("scatter_elements", "strided_slice", "reshape"))
def _col2im(ctx: NodeContext) -> Expr:
    """Sum sliding blocks back into an image: a scatter-add with indices computed at import."""
    from kiln.op import transform as tf

    x = ctx.input(0)
    image = ctx.ints(1, "image_shape")
    block = ctx.ints(2, "block_shape")
    n, ck, cols = ctx.shape(x)
    nd = len(image)
    k = int(np.prod(block))
    if ck % k:
        raise ctx.error(f"{ck} rows are not a multiple of the block size {k}")
    c = ck // k
    strides, dilations = _spatial_attrs(ctx, nd)
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * nd))]
    padded = [image[i] + pads[i] + pads[nd + i] for i in range(nd)]
    counts = [(padded[i] - ((block[i] - 1) * dilations[i] + 1)) // strides[i] + 1 for i in range(nd)]
    if int(np.prod(counts)) != cols:
        raise ctx.error(f"{cols} columns do not match {counts} block positions of image {image}")
    # Padded-image position of every (channel, block offset, block position).
    offsets = np.stack(np.meshgrid(*[np.arange(b) * d for b, d in zip(block, dilations)], indexing="ij"),
                       -1).reshape(-1, nd)
    starts = np.stack(np.meshgrid(*[np.arange(m) * s for m, s in zip(counts, strides)], indexing="ij"),
                      -1).reshape(-1, nd)
    where = offsets[:, None, :] + starts[None, :, :]  # (k, cols, nd)
    flat = np.ravel_multi_index(tuple(where[..., i] for i in range(nd)), padded)  # (k, cols)
    size = int(np.prod(padded))
    index = (np.arange(c)[:, None, None] * size + flat[None]).reshape(1, -1)
    out: Expr = tf.scatter_elements(const(np.zeros((n, c * size)), ctx.dtype(x)),
                              const(np.broadcast_to(index, (n, index.shape[1])).copy()),
                              reshape_to(ctx, x, (n, ck * cols)), axis=1, reduction="add")
    out = reshape_to(ctx, out, (n, c, *padded))
    return static_slice(ctx, out, list(range(2, 2 + nd)), pads[:nd],
                        [pads[i] + image[i] for i in range(nd)])


@converter("MaxUnpool", needs=("scatter_elements", "reshape"))
def _max_unpool(ctx: NodeContext) -> Expr:
    """MaxPool's inverse: every value written at the flat output position its index names (the
    indices MaxPool returns count over the whole output tensor), zeros elsewhere. The output shape
    is ``output_shape`` (input 2, known at import) or the shape a MaxPool with these attributes
    would have pooled from. With ``output_shape``, indices address that shape, as onnxruntime and
    PyTorch read them (the indices of a MaxPool over an odd-sized image); ONNX's reference
    instead scatters into the default shape and pads, which its one test case encodes."""
    from kiln.op import transform as tf

    x, index = ctx.input(0), ctx.input(1)
    shape = ctx.shape(x)
    if ctx.shape(index) != shape:
        raise ctx.error(f"indices of shape {ctx.shape(index)} must match the data's {shape}")
    nd = len(shape) - 2
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    strides = [int(s) for s in ctx.attr("strides", [1] * nd)]
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * nd))]
    if ctx.has_input(2):
        out_shape = tuple(ctx.ints(2, "output_shape"))
    else:
        out_shape = (*shape[:2], *((shape[2 + i] - 1) * strides[i] - pads[i] - pads[nd + i] + kernel[i]
                                   for i in range(nd)))
    if len(out_shape) != len(shape) or out_shape[:2] != shape[:2]:
        raise ctx.error(f"output_shape {list(out_shape)} must keep the rank and the first two dims "
                        f"of the data's shape {list(shape)}")
    size, count = int(np.prod(out_shape)), int(np.prod(shape))
    flat = tf.scatter_elements(const(np.zeros(size), ctx.dtype(x)),
                               reshape_to(ctx, index, (count,)), reshape_to(ctx, x, (count,)), axis=0)
    return reshape_to(ctx, flat, out_shape)
