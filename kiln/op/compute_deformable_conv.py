"""Tensor-expression compute of ``nn.deformable_conv2d`` (:mod:`kiln.op.deformable_conv`).

Two stages, as in TVM's topi:

- ``data_deform`` (``N, C, KH, KW, OH, OW``): every input channel sampled at every kernel tap of
  every output position. The sampling point is the regular tap position plus the tap's ``(dy,
  dx)`` offset pair; its value is the bilinear blend of its four neighbours, each neighbour
  outside the image reading zero (the reference's and ONNX's rule), times the tap's mask when the
  call has one. The integer corner is the floor of the point clamped to ``[-2, size]`` before the
  conversion, so a far-away point stays a valid ``int32`` and all four neighbours fall outside.
  The stage holds guarded loads, so the default schedule keeps it as its own buffer and the
  reduction reads it without branches.
- ``deformable_conv2d_nchw`` (named after the primal layout whatever the data layout): the grouped
  convolution of ``data_deform`` with the weight, a reduction over the group's input channels and
  the kernel taps, computed directly in the output layout; a ``T_cast`` stage follows when the
  accumulation dtype differs from ``out_dtype``.

Sampling and accumulation run in :func:`~kiln.op.compute_conv.accumulate_dtype` (float32 for
float16/float32 data, float64 when float64 is involved), so float32 results agree with the
float64 reference to float32 rounding.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.ir.types import TensorType, Type
from kiln.op.compute_conv import (
    Coord,
    accumulate_dtype,
    cast_output,
    layout_coords,
    layout_index,
    tensor_type,
)
from kiln.op.deformable_conv import deformable_plan
from kiln.op.registry import get_op_def
from kiln.te import expr as E
from kiln.te.expr import PrimExpr

__all__: list[str] = []

_OP = "nn.deformable_conv2d"


def _deformable_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    """The compute hook: ``inputs`` are ``data, offset, weight`` and optionally ``mask``."""
    data, offset, weight = inputs[:3]
    mask = inputs[3] if len(inputs) == 4 else None
    out = tensor_type(out_type, _OP)
    plan = deformable_plan(TensorType(data.shape, data.dtype), TensorType(offset.shape, offset.dtype),
                           TensorType(weight.shape, weight.dtype),
                           None if mask is None else TensorType(mask.shape, mask.dtype), attrs)
    cp = plan.conv
    acc = accumulate_dtype((data.dtype, weight.dtype), out.dtype)
    _, c, h, w = cp.data_shape
    o, cg, kh, kw = cp.weight_shape
    oh, ow = cp.out_primal_shape[2:]
    per_group = c // plan.deformable_groups
    (sh, sw), (dh, dw) = cp.strides, cp.dilation
    top, left = cp.padding[0][0], cp.padding[1][0]
    layout = cp.data_layout
    zero = E.const(0, acc)

    def read(t: te.Tensor, n: PrimExpr, ch: PrimExpr, y: PrimExpr, x: PrimExpr) -> PrimExpr:
        coords = {"N": Coord(n), "C": Coord(ch), "H": Coord(y), "W": Coord(x)}
        return t[layout_index(layout, coords)]

    def corner(point: PrimExpr, size: int) -> tuple[PrimExpr, PrimExpr]:
        """The integer floor of ``point`` (clamped) and the weight of the upper neighbour."""
        low = te.floor(point)
        clamped = te.min(te.max(low, E.const(-2.0, acc)), E.const(float(size), acc))
        return clamped.astype("int32"), point - low

    def sample(n: PrimExpr, ch: PrimExpr, i: PrimExpr, j: PrimExpr, y: PrimExpr,
               x: PrimExpr) -> PrimExpr:
        group = te.floordiv(ch, per_group) if plan.deformable_groups > 1 else E.const(0)
        tap = group * (kh * kw) + i * kw + j
        py = E.cast(y * sh - top + i * dh, acc) + E.cast(read(offset, n, tap * 2, y, x), acc)
        px = E.cast(x * sw - left + j * dw, acc) + E.cast(read(offset, n, tap * 2 + 1, y, x), acc)
        y0, ly = corner(py, h)
        x0, lx = corner(px, w)
        total: PrimExpr | None = None
        for dy, wy in ((0, 1.0 - ly), (1, ly)):
            for dx, wx in ((0, 1.0 - lx), (1, lx)):
                yy, xx = y0 + dy, x0 + dx
                inside = te.all(yy >= 0, yy < h, xx >= 0, xx < w)
                value = te.if_then_else(inside, E.cast(read(data, n, ch, yy, xx), acc), zero)
                term = value * (wy * wx)
                total = term if total is None else total + term
        assert total is not None
        if mask is not None:
            total = total * E.cast(read(mask, n, tap, y, x), acc)
        return total

    deform = te.compute((cp.data_shape[0], c, kh, kw, oh, ow), sample, name="data_deform",
                        tag="injective")
    rc = te.reduce_axis((0, cg), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    out_per_group = o // cp.groups

    def conv(*index: PrimExpr) -> PrimExpr:
        coords = layout_coords(cp.out_layout, "NCHW", index)
        oc = coords["C"]
        c_in = rc.var if cp.groups == 1 else te.floordiv(oc.value, out_per_group) * cg + rc.var
        wcoords = {"O": oc, "I": Coord(rc.var), "H": Coord(ry.var), "W": Coord(rx.var)}
        x = deform[coords["N"].value, c_in, ry.var, rx.var, coords["H"].value, coords["W"].value]
        k = E.cast(weight[layout_index(cp.kernel_layout, wcoords)], acc)
        return te.sum(x * k, axis=[rc, ry, rx])

    stage = "deformable_conv2d_nchw"
    result = te.compute(out.shape, conv, name=stage, tag=stage)
    return cast_output(result, out.dtype, stage)


get_op_def(_OP).compute = _deformable_compute
