"""ONNX converters: Gemm, MatMul, normalizations, softmax family, LRN, Dropout and
DepthToSpace/SpaceToDepth.

MatMul follows NumPy's ``matmul``: 1-d operands gain and then lose a unit dim, a 2-d right operand
becomes ``nn.dense`` on the flattened left operand, and N-d operands broadcast their batch dims
and run as one ``nn.batch_matmul``. Normalizations that relay has no exact operator for (layer
norm over several axes or with its Mean/InvStdDev outputs, group norm, mean-variance
normalization, Lp normalization) are composed from reductions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.frontend.onnx_common import NodeContext, const, converter, normalize_axis, scalar_like
from kiln.frontend.onnx_tensor import reshape_to
from kiln.ir.expr import Expr
from kiln.op import elemwise as ew

__all__: list[str] = []


def _nn() -> Any:
    from kiln.op import nn

    return nn


def _tf() -> Any:
    from kiln.op import transform

    return transform


def _red() -> Any:
    from kiln.op import reduce

    return reduce


# --- matrix products ---------------------------------------------------------------------------

def _transpose2d(x: Expr) -> Expr:
    return _tf().transpose(x, axes=[1, 0])


@converter("Gemm", needs=("nn.dense", "transpose"))
def _gemm(ctx: NodeContext) -> Expr:
    a, b = ctx.input(0), ctx.input(1)
    if ctx.ndim(a) != 2:
        shape = ctx.shape(a)
        a = reshape_to(ctx, a, (shape[0], int(np.prod(shape[1:]))))
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if int(ctx.attr("transA", 0)):
        a = _transpose2d(a)
    weight = b if int(ctx.attr("transB", 0)) else _transpose2d(b)
    out = _nn().dense(a, weight, units=ctx.shape(weight)[0])
    if alpha != 1.0:
        out = ew.multiply(out, scalar_like(ctx, alpha, out))
    if ctx.has_input(2) and beta != 0.0:
        c = ctx.input(2)
        if beta != 1.0:
            c = ew.multiply(c, scalar_like(ctx, beta, c))
        out = ew.add(out, c)
    return out


def matmul(ctx: NodeContext, a: Expr, b: Expr) -> Expr:
    """NumPy ``matmul`` of two static-shaped expressions."""
    sa, sb = ctx.shape(a), ctx.shape(b)
    squeeze_front = len(sa) == 1
    squeeze_back = len(sb) == 1
    if squeeze_front:
        a, sa = reshape_to(ctx, a, (1, sa[0])), (1, sa[0])
    if squeeze_back:
        b, sb = reshape_to(ctx, b, (sb[0], 1)), (sb[0], 1)
    m, k, n = sa[-2], sa[-1], sb[-1]
    if sb[-2] != k:
        raise ctx.error(f"cannot multiply shapes {sa} and {sb}: inner dims {k} and {sb[-2]} differ")
    if len(sb) == 2:
        batch = sa[:-2]
        flat = reshape_to(ctx, a, (int(np.prod(batch, dtype=np.int64)) * m, k))
        out = _nn().dense(flat, _transpose2d(b), units=n)
        out_shape = (*batch, m, n)
    else:
        batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
        size = int(np.prod(batch, dtype=np.int64))
        a3 = _batched(ctx, a, batch, (m, k), size)
        b3 = _batched(ctx, b, batch, (k, n), size)
        if _use_nt_batch_matmul(ctx):
            # TVM's default form: batch_matmul with a transposed right operand (the NT kernel)
            out = _nn().batch_matmul(a3, _tf().transpose(b3, (0, 2, 1)), transpose_a=False,
                                     transpose_b=True)
        else:
            out = _nn().batch_matmul(a3, b3, transpose_a=False, transpose_b=False)
        out_shape = (*batch, m, n)
    if squeeze_front:
        out_shape = out_shape[:-2] + out_shape[-1:]
    if squeeze_back:
        out_shape = out_shape[:-1]
    return reshape_to(ctx, out, out_shape)


def _use_nt_batch_matmul(ctx: NodeContext) -> bool:
    """``convert_config["use_nt_batch_matmul"]`` of the import (TVM's default: True)."""
    config = getattr(ctx.importer, "convert_config", None) or {}
    return bool(config.get("use_nt_batch_matmul", True))


def _batched(ctx: NodeContext, x: Expr, batch: tuple[int, ...], mat: tuple[int, int], size: int) -> Expr:
    full = (*batch, *mat)
    if ctx.shape(x) != full:
        x = _tf().broadcast_to(reshape_to(ctx, x, (1,) * (len(full) - ctx.ndim(x)) + ctx.shape(x)), full)
    return reshape_to(ctx, x, (size, *mat))


@converter("MatMul", needs=("nn.dense", "nn.batch_matmul", "reshape", "transpose", "broadcast_to"))
def _matmul(ctx: NodeContext) -> Expr:
    return matmul(ctx, ctx.input(0), ctx.input(1))


# --- normalizations ----------------------------------------------------------------------------

def _check_batch_norm(attrs: dict[str, Any], opset: int) -> str | None:
    return "spatial=0 (per-activation statistics)" if not int(attrs.get("spatial", 1)) else None


@converter("BatchNormalization", needs=("nn.batch_norm", "mean"), check=_check_batch_norm)
def _batch_norm(ctx: NodeContext) -> list[Expr | None]:
    x, scale, bias, mean, var = (ctx.input(i) for i in range(5))
    eps = float(ctx.attr("epsilon", 1e-5))
    if int(ctx.attr("training_mode", 0)):
        return _batch_norm_training(ctx, x, scale, bias, mean, var, eps)
    if any(ctx.wants_output(i) for i in range(1, ctx.num_outputs)):
        raise ctx.unsupported("the statistics outputs of BatchNormalization outside training mode")
    return [_nn().batch_norm(x, scale, bias, mean, var, axis=1, epsilon=eps)[0]]


def _batch_norm_training(ctx: NodeContext, x: Expr, scale: Expr, bias: Expr, mean: Expr, var: Expr,
                         eps: float) -> list[Expr | None]:
    """Normalize with the batch's statistics; the running ones move towards them by momentum."""
    shape = ctx.shape(x)
    axes = [0, *range(2, len(shape))]
    channel = (shape[1],) + (1,) * (len(shape) - 2)
    batch_mean, centered, batch_var = _moments(x, axes)
    normed = ew.multiply(centered, ew.rsqrt(ew.add(batch_var, scalar_like(ctx, eps, x))))
    y = ew.add(ew.multiply(normed, reshape_to(ctx, scale, channel)), reshape_to(ctx, bias, channel))
    momentum = float(ctx.attr("momentum", 0.9))
    keep, take = scalar_like(ctx, momentum, mean), scalar_like(ctx, 1.0 - momentum, mean)
    running = [ew.add(ew.multiply(old, keep), ew.multiply(reshape_to(ctx, new, (shape[1],)), take))
               for old, new in ((mean, batch_mean), (var, batch_var))]
    return [y, *running]


@converter("InstanceNormalization", needs=("nn.instance_norm",))
def _instance_norm(ctx: NodeContext) -> Expr:
    return _nn().instance_norm(ctx.input(0), ctx.input(1), ctx.input(2), axis=1,
                               epsilon=float(ctx.attr("epsilon", 1e-5)))


def _moments(x: Expr, axes: list[int]) -> tuple[Expr, Expr, Expr]:
    """(mean, x - mean, variance), reduced over ``axes`` with kept dims."""
    mean = _red().mean(x, axis=axes, keepdims=True)
    centered = ew.subtract(x, mean)
    var = _red().mean(ew.multiply(centered, centered), axis=axes, keepdims=True)
    return mean, centered, var


@converter("LayerNormalization", needs=("mean", "rsqrt", "nn.layer_norm"))
def _layer_norm(ctx: NodeContext) -> list[Expr | None]:
    x, scale = ctx.input(0), ctx.input(1)
    bias = ctx.optional_input(2)
    shape, dtype = ctx.shape(x), ctx.dtype(x)
    axis = normalize_axis(ctx, int(ctx.attr("axis", -1)), len(shape))
    eps = float(ctx.attr("epsilon", 1e-5))
    stash = "float32" if int(ctx.attr("stash_type", 1)) == 1 else dtype
    extra = ctx.wants_output(1) or ctx.wants_output(2)
    last_only = axis == len(shape) - 1 and ctx.shape(scale) == (shape[-1],) and \
        (bias is None or ctx.shape(bias) == (shape[-1],))
    if last_only and not extra and stash == dtype:
        beta = bias if bias is not None else const(np.zeros(shape[-1]), dtype)
        return [_nn().layer_norm(x, scale, beta, axis=-1, epsilon=eps)]
    xs = ew.cast(x, stash) if stash != dtype else x
    mean, centered, var = _moments(xs, list(range(axis, len(shape))))
    inv = ew.rsqrt(ew.add(var, const(eps, stash)))
    normed = ew.multiply(centered, inv)
    if stash != dtype:
        normed = ew.cast(normed, dtype)
    y = ew.multiply(normed, scale)
    if bias is not None:
        y = ew.add(y, bias)
    return [y, mean, inv]


@converter("GroupNormalization", needs=("mean", "rsqrt", "reshape", "broadcast_to"))
def _group_norm(ctx: NodeContext) -> Expr:
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    shape, dtype = ctx.shape(x), ctx.dtype(x)
    groups = int(ctx.attr("num_groups"))
    eps = float(ctx.attr("epsilon", 1e-5))
    n, c = shape[0], shape[1]
    if c % groups:
        raise ctx.error(f"{c} channels do not split into {groups} groups")
    stash = "float32" if int(ctx.attr("stash_type", 1)) == 1 and ctx.opset >= 21 else dtype
    grouped = reshape_to(ctx, x, (n, groups, int(np.prod(shape[1:])) // groups))
    if stash != dtype:
        grouped = ew.cast(grouped, stash)
    _, centered, var = _moments(grouped, [2])
    normed = ew.multiply(centered, ew.rsqrt(ew.add(var, const(eps, stash))))
    if stash != dtype:
        normed = ew.cast(normed, dtype)
    normed = reshape_to(ctx, normed, shape)
    channel_shape = (c,) + (1,) * (len(shape) - 2)
    return ew.add(ew.multiply(normed, _per_channel(ctx, scale, groups, c, channel_shape)),
                  _per_channel(ctx, bias, groups, c, channel_shape))


def _per_channel(ctx: NodeContext, v: Expr, groups: int, c: int, out_shape: tuple[int, ...]) -> Expr:
    """A per-channel (C,) or per-group (G,) parameter as a (C, 1, ...) tensor."""
    size = int(np.prod(ctx.shape(v)))
    if size == groups and groups != c:
        v = _tf().broadcast_to(reshape_to(ctx, v, (groups, 1)), (groups, c // groups))
    return reshape_to(ctx, v, out_shape)


@converter("MeanVarianceNormalization", needs=("mean", "sqrt"))
def _mvn(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    rank = ctx.ndim(x)
    axes = sorted({normalize_axis(ctx, int(a), rank) for a in ctx.attr("axes", [0, 2, 3])})
    mean = _red().mean(x, axis=axes, keepdims=True)
    mean_sq = _red().mean(ew.multiply(x, x), axis=axes, keepdims=True)
    std = ew.sqrt(ew.subtract(mean_sq, ew.multiply(mean, mean)))
    return ew.divide(ew.subtract(x, mean), ew.add(std, scalar_like(ctx, 1e-9, x)))


@converter("LpNormalization", needs=("sum", "sqrt", "where"))
def _lp_norm(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    axis = normalize_axis(ctx, int(ctx.attr("axis", -1)), ctx.ndim(x))
    p = int(ctx.attr("p", 2))
    if p == 1:
        norm = _red().sum(ew.abs(x), axis=[axis], keepdims=True)
    elif p == 2:
        norm = ew.sqrt(_red().sum(ew.multiply(x, x), axis=[axis], keepdims=True))
    else:
        raise ctx.unsupported(f"p={p} (ONNX allows 1 and 2)")
    zero = scalar_like(ctx, 0, x)
    return ew.where(ew.equal(norm, zero), zero, ew.divide(x, norm))


@converter("LRN", needs=("nn.lrn",))
def _lrn(ctx: NodeContext) -> Expr:
    return _nn().lrn(ctx.input(0), size=int(ctx.attr("size")), axis=1,
                     bias=float(ctx.attr("bias", 1.0)), alpha=float(ctx.attr("alpha", 1e-4)),
                     beta=float(ctx.attr("beta", 0.75)))


# --- softmax family ----------------------------------------------------------------------------

def _softmax_like(ctx: NodeContext, apply: Any) -> Expr:
    """Run ``apply(x, axis)``; before opset 13 on the input flattened to 2-d at ``axis``."""
    x = ctx.input(0)
    shape = ctx.shape(x)
    if ctx.opset >= 13:
        return apply(x, normalize_axis(ctx, int(ctx.attr("axis", -1)), len(shape)))
    axis = normalize_axis(ctx, int(ctx.attr("axis", 1)), len(shape)) if shape else 0
    flat = (int(np.prod(shape[:axis])), int(np.prod(shape[axis:])))
    return reshape_to(ctx, apply(reshape_to(ctx, x, flat), 1), shape)


@converter("Softmax", needs=("nn.softmax",))
def _softmax(ctx: NodeContext) -> Expr:
    return _softmax_like(ctx, lambda x, axis: _nn().softmax(x, axis=axis))


@converter("LogSoftmax", needs=("nn.log_softmax",))
def _log_softmax(ctx: NodeContext) -> Expr:
    return _softmax_like(ctx, lambda x, axis: _nn().log_softmax(x, axis=axis))


@converter("Hardmax", needs=("argmax", "one_hot"))
def _hardmax(ctx: NodeContext) -> Expr:
    dtype = ctx.dtype(0)

    def apply(x: Expr, axis: int) -> Expr:
        idx = _red().argmax(x, axis=[axis], keepdims=False)
        depth = ctx.shape(x)[axis]
        return _tf().one_hot(idx, const(1, dtype), const(0, dtype), depth, axis=axis, dtype=dtype)

    return _softmax_like(ctx, apply)


# --- misc --------------------------------------------------------------------------------------

@converter("Dropout")
def _dropout(ctx: NodeContext) -> list[Expr | None]:
    x = ctx.input(0)
    if ctx.opset >= 12 and ctx.has_input(2) and bool(ctx.const_input(2, "training_mode").reshape(-1)[0]):
        ratio = ctx.const_input(1, "ratio") if ctx.has_input(1) else np.array(0.5)
        if float(np.asarray(ratio).reshape(-1)[0]) != 0.0:
            raise ctx.unsupported("Dropout in training mode (random masks)")
    outs: list[Expr | None] = [x]
    if ctx.wants_output(1):
        mask_dtype = "bool" if ctx.opset >= 10 else ctx.dtype(x)
        outs.append(const(np.ones(ctx.shape(x)), mask_dtype))
    return outs


def _check_d2s(attrs: dict[str, Any], opset: int) -> str | None:
    mode = attrs.get("mode", "DCR")
    return None if mode in ("DCR", "CRD") else f"mode={mode!r}"


@converter("DepthToSpace", needs=("nn.depth_to_space",), check=_check_d2s)
def _depth_to_space(ctx: NodeContext) -> Expr:
    return _nn().depth_to_space(ctx.input(0), int(ctx.attr("blocksize")), layout="NCHW",
                                mode=ctx.attr("mode", "DCR"))


@converter("SpaceToDepth", needs=("nn.space_to_depth", "reshape", "transpose"), check=_check_d2s)
def _space_to_depth(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    b = int(ctx.attr("blocksize"))
    if ctx.attr("mode", "DCR") == "DCR":
        return _nn().space_to_depth(x, b, layout="NCHW")
    n, c, h, w = ctx.shape(x)
    if h % b or w % b:
        raise ctx.error(f"blocksize {b} does not divide the spatial dims {(h, w)}")
    blocks = reshape_to(ctx, x, (n, c, h // b, b, w // b, b))
    moved = _tf().transpose(blocks, axes=[0, 1, 3, 5, 2, 4])
    return reshape_to(ctx, moved, (n, c * b * b, h // b, w // b))
