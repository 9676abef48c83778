"""ONNX converter: DeformConv (opset 19, 22) to ``nn.deformable_conv2d`` plus ``nn.bias_add``.

DeformConv's inputs are ``X, W, offset[, B][, mask]`` and its attributes ``dilations``, ``group``,
``kernel_shape``, ``offset_group``, ``pads`` and ``strides``. The offset layout (per offset group,
per kernel position in row-major order, a ``(dy, dx)`` pair) and the mask layout (per offset
group, per kernel position) are those of ``nn.deformable_conv2d``, so both pass through unchanged;
``offset_group`` becomes ``deformable_groups``. Kiln's op is 2-d: other ranks are unsupported.
"""

from __future__ import annotations

from kiln.frontend.onnx_common import NodeContext, converter
from kiln.ir.expr import Expr

__all__: list[str] = []


@converter("DeformConv", needs=("nn.deformable_conv2d", "nn.bias_add"))
def _deform_conv(ctx: NodeContext) -> Expr:
    from kiln.op import nn
    from kiln.op.deformable_conv import deformable_conv2d

    x, w, offset = ctx.input(0), ctx.input(1), ctx.input(2)
    xs, ws = ctx.shape(x), ctx.shape(w)
    if len(xs) != 4:
        raise ctx.unsupported(f"{len(xs) - 2}-d deformable convolution of input shape {xs} "
                              "(Kiln has the 2-d one)")
    if len(ws) != 4:
        raise ctx.error(f"weight W has shape {ws}; a 2-d DeformConv needs (M, C/group, kH, kW)")
    kernel = [int(k) for k in ctx.attr("kernel_shape", ws[2:])]
    strides = [int(s) for s in ctx.attr("strides", [1, 1])]
    dilations = [int(d) for d in ctx.attr("dilations", [1, 1])]
    pads = [int(p) for p in ctx.attr("pads", [0, 0, 0, 0])]
    if len(kernel) != 2 or len(strides) != 2 or len(dilations) != 2 or len(pads) != 4:
        raise ctx.error(f"kernel_shape {kernel}, strides {strides} and dilations {dilations} need "
                        f"2 values and pads {pads} 4 for a 2-d DeformConv")
    out = deformable_conv2d(x, offset, w, strides=strides, padding=pads, dilation=dilations,
                            deformable_groups=int(ctx.attr("offset_group", 1)),
                            groups=int(ctx.attr("group", 1)), channels=ws[0], kernel_size=kernel,
                            mask=ctx.input(4) if ctx.has_input(4) else None)
    if ctx.has_input(3):
        out = nn.bias_add(out, ctx.input(3), axis=1)
    return out
