"""Tensor-expression computes of the pooling operators (``kiln.op.pool``, ``kiln.op.pool_adaptive``).

Pooling works in the data's own layout on the pooled axes the type relation finds (``W``, ``HW``
or ``DHW``, never blocked), as the reference does:

* Windowed max pooling pads with the dtype's lowest finite value (``pad_temp``, inlined) and
  reduces with ``max`` (``pool_max``); a window entirely in the padding gives that value.
* Windowed average pooling sums a zero-padded window (``pool_sum``, float32 for float16/32 data,
  float64 for float64, int64 for integers and bool) and divides by the number of positions
  counted (``pool_avg``): every position inside the declared padding with ``count_include_pad``,
  otherwise only positions inside the data; the end padding ``ceil_mode`` adds never counts, and
  the count is at least 1. The counts depend only on the output position along each axis, so they
  are per-axis constant tables (a constant when uniform). Integer averages truncate toward zero.
* Adaptive (and global) pooling: output position ``i`` of an axis of length ``n`` pooled to ``m``
  covers ``[floor(i * n / m), ceil((i + 1) * n / m))``; the reduction runs over the longest
  window with a ``where`` condition cutting shorter ones (``adaptive_pool_max``,
  ``adaptive_pool_sum`` then ``adaptive_pool_avg``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

import numpy as np

from kiln import te
from kiln.ir.types import Type
from kiln.op import pool  # noqa: F401  (the operators must be registered before their computes)
from kiln.op.compute_conv import compute_dtype, tensor_type
from kiln.op.compute_elemwise import ax_compute
from kiln.op.pool import PoolPlan, pool_plan
from kiln.op.pool_adaptive import adaptive_plan
from kiln.op.registry import get_op_def
from kiln.te import expr as E
from kiln.te.expr import PrimExpr
from kiln.te.tensor import PlaceholderOp

__all__: list[str] = []

Index = tuple[PrimExpr, ...]
ComputeFn = Callable[[list[te.Tensor], Any, Type], te.Tensor]


def _sum_dtype(dtype: str) -> str:
    """Accumulation dtype of an average: float32/float64 for floats, int64 otherwise."""
    return compute_dtype(dtype) if E.is_float_dtype(dtype) else "int64"


def _replace(i: Index, axes: Sequence[int], values: Sequence[PrimExpr]) -> Index:
    out = list(i)
    for a, v in zip(axes, values):
        out[a] = v
    return tuple(out)


def _average(total: te.Tensor, divisors: Callable[[Index], list[PrimExpr]], dtype: str,
             name: str) -> te.Tensor:
    """``total`` divided by the product of integer ``divisors``, converted to ``dtype``.

    Floats divide once by the product (exact in floating point for window sizes); integers
    divide by one factor after the other, which truncates exactly like one truncating division
    by the product of positive factors. A zero divisor (an empty window) gives what the
    reference gives: NaN for floats, 0 for integers.
    """
    def element(*i: PrimExpr) -> PrimExpr:
        value = total(*i)
        factors = divisors(i)
        if E.is_float_dtype(total.dtype):
            n: PrimExpr = E.const(1, total.dtype)
            for f in factors:
                n = n * E.cast(f, total.dtype)
            value = value / n
        else:
            for f in factors:
                value = E.binary("div", value, E.cast(f, total.dtype))
        return E.cast(value, dtype)

    return ax_compute(total.shape, element, name=name, tag="elemwise")


# --- windowed pooling ----------------------------------------------------------------------------

def _axis_counts(size: int, out: int, kernel: int, stride: int, dilation: int,
                 pad: tuple[int, int], include_pad: bool) -> list[int]:
    """Per output position along one axis: how many window taps the average counts."""
    lo, hi = (-pad[0], size + pad[1]) if include_pad else (0, size)
    counts = []
    for o in range(out):
        start = o * stride - pad[0]
        counts.append(sum(1 for t in range(kernel) if lo <= start + t * dilation < hi))
    return counts


def _count_table(counts: list[int], name: str) -> te.Tensor:
    value = np.asarray(counts, dtype=np.int32)
    return PlaceholderOp(name, value.shape, "int32", attrs={"value": value}).output(0)


def _window_divisors(x_shape: Sequence[int], plan: PoolPlan,
                     include_pad: bool) -> Callable[[Index], list[PrimExpr]]:
    """The factors of the average's divisor at an output index: one constant for the axes whose
    count is uniform, a table lookup (at least 1) for each other axis."""
    constant = 1
    tables: list[tuple[int, te.Tensor, bool]] = []
    for k, a in enumerate(plan.axes):
        counts = _axis_counts(x_shape[a], plan.out_sizes[k], plan.kernel[k], plan.strides[k],
                              plan.dilation[k], plan.padding[k], include_pad)
        if len(set(counts)) == 1:
            constant *= max(counts[0], 1)
        else:
            tables.append((a, _count_table(counts, f"pool_count{k}"), min(counts) == 0))

    def divisors(i: Index) -> list[PrimExpr]:
        out: list[PrimExpr] = [E.const(constant)] if constant > 1 else []
        for a, table, may_be_zero in tables:
            n = table[i[a]]
            out.append(E.binary("max", n, E.const(1)) if may_be_zero else n)
        return out

    return divisors


def _pool_compute(name: str, nsp: int, mode: str) -> ComputeFn:
    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        x = inputs[0]
        out = tensor_type(out_type, name)
        plan = pool_plan(name, nsp, x.shape, attrs)
        acc = x.dtype if mode == "max" else _sum_dtype(x.dtype)
        fill = te.min_value(x.dtype) if mode == "max" else E.const(0, acc)
        pads = []
        for k, a in enumerate(plan.axes):
            needed = (plan.out_sizes[k] - 1) * plan.strides[k] + \
                (plan.kernel[k] - 1) * plan.dilation[k] + 1
            begin = plan.padding[k][0]
            pads.append((begin, max(needed - x.shape[a] - begin, 0)))
        read = _padded(x, plan.axes, pads, acc, fill)
        taps = [te.reduce_axis((0, kk), name=f"rv{k}") for k, kk in enumerate(plan.kernel)]

        def window(i: Index) -> PrimExpr:
            pos = [i[a] * s + t.var * d for a, s, t, d in zip(plan.axes, plan.strides, taps,
                                                              plan.dilation)]
            return read(_replace(i, plan.axes, pos))

        if mode == "max":
            # topi::nn::pool_impl_nd (include/tvm/topi/nn/pooling.h): pool_max(ax0, ...) max=
            # x[..., ((ax2*2) + rv0), ...] over reduce axes rv0, rv1, ...
            return ax_compute(out.shape, lambda *i: te.max(window(i), axis=taps), name="pool_max",
                              tag="pool_max")
        total = ax_compute(out.shape, lambda *i: te.sum(window(i), axis=taps), name="pool_sum",
                           tag="pool_sum")
        divisors = _window_divisors(x.shape, plan, bool(attrs.count_include_pad))
        return _average(total, divisors, out.dtype, "pool_avg")

    return compute


def _padded(x: te.Tensor, axes: Sequence[int], pads: Sequence[tuple[int, int]], dtype: str,
            fill: PrimExpr) -> Callable[[Index], PrimExpr]:
    """A reader of ``x`` (converted to ``dtype``) padded with ``fill`` along ``axes``."""
    if not any(a or b for a, b in pads):
        return lambda i: E.cast(x[i], dtype)
    shape = list(x.shape)
    for a, (before, after) in zip(axes, pads):
        shape[a] += before + after

    def element(*i: PrimExpr) -> PrimExpr:
        inside: list[PrimExpr] = []
        src = list(i)
        for a, (before, after) in zip(axes, pads):
            if before:
                inside.append(i[a] >= before)
            if after:
                inside.append(i[a] < before + x.shape[a])
            src[a] = i[a] - before
        return te.if_then_else(te.all(*inside), E.cast(x[tuple(src)], dtype), E.cast(fill, dtype))

    pad = ax_compute(tuple(shape), element, name="pad_temp", tag="injective")  # topi::pad
    return lambda i: pad[i]


# --- adaptive and global pooling -----------------------------------------------------------------

def _adaptive_compute(name: str, nsp: int, mode: str, is_global: bool) -> ComputeFn:
    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        x = inputs[0]
        out = tensor_type(out_type, name)
        axes, sizes = adaptive_plan(name, nsp, x.shape, attrs.layout,
                                    None if is_global else attrs.output_size)
        starts: list[Callable[[PrimExpr], PrimExpr]] = []
        lengths: list[Callable[[PrimExpr], PrimExpr]] = []
        taps = []
        widest = []
        conds_needed = []
        for k, a in enumerate(axes):
            n, m = x.shape[a], sizes[k]
            bounds = [((i * n) // m, -((-(i + 1) * n) // m)) for i in range(m)]
            widths = [e - s for s, e in bounds]

            def start(i: PrimExpr, n: int = n, m: int = m) -> PrimExpr:
                return te.floordiv(i * n, m)

            def length(i: PrimExpr, n: int = n, m: int = m) -> PrimExpr:
                return te.floordiv((i + 1) * n + (m - 1), m) - te.floordiv(i * n, m)

            starts.append(start)
            lengths.append(length)
            taps.append(te.reduce_axis((0, max(widths)), name=f"rv{k}"))
            widest.append(max(widths))
            conds_needed.append(len(set(widths)) > 1)
        acc = x.dtype if mode == "max" else _sum_dtype(x.dtype)

        def window(i: Index) -> tuple[PrimExpr, PrimExpr]:
            pos = [starts[k](i[a]) + taps[k].var for k, a in enumerate(axes)]
            conds = [taps[k].var < lengths[k](i[a]) for k, a in enumerate(axes)
                     if conds_needed[k]]
            return E.cast(x[_replace(i, axes, pos)], acc), te.all(*conds)

        if mode == "max":
            def largest(*i: PrimExpr) -> PrimExpr:
                value, cond = window(i)
                return te.max(value, axis=taps, where=cond)

            return te.compute(out.shape, largest, name="adaptive_pool_max",
                              tag="adaptive_pool_max")

        def total(*i: PrimExpr) -> PrimExpr:
            value, cond = window(i)
            return te.sum(value, axis=taps, where=cond)

        sums = te.compute(out.shape, total, name="adaptive_pool_sum", tag="adaptive_pool_sum")

        def divisors(i: Index) -> list[PrimExpr]:
            # an empty window (a pooled axis of length 0) divides by 0 as the reference does
            constant = prod(w for w, varies in zip(widest, conds_needed) if not varies)
            out: list[PrimExpr] = [E.const(constant)] if constant != 1 else []
            return out + [lengths[k](i[a]) for k, a in enumerate(axes) if conds_needed[k]]

        return _average(sums, divisors, out.dtype, "adaptive_pool_avg")

    return compute


def _register() -> None:
    for nsp in (1, 2, 3):
        for mode in ("max", "avg"):
            name = f"nn.{mode}_pool{nsp}d"
            get_op_def(name).compute = _pool_compute(name, nsp, mode)
            name = f"nn.adaptive_{mode}_pool{nsp}d"
            get_op_def(name).compute = _adaptive_compute(name, nsp, mode, False)
    for mode in ("max", "avg"):
        name = f"nn.global_{mode}_pool2d"
        get_op_def(name).compute = _adaptive_compute(name, 2, mode, True)


_register()
