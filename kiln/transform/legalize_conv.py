"""LegalizeConv: 1-d, 3-d and transposed convolutions as 2-d convolutions the blocked templates run.

Only ``nn.conv2d`` has fast CPU kernels (``AlterOpLayout`` blocks it to ``conv2d_NCHWc`` or
``depthwise_conv2d_NCHWc``, whose templates are register-tiled); ``nn.conv1d``, ``nn.conv3d`` and
the transposed convolutions would run on the generic default schedule. This pass rewrites them:

- ``conv1d(x, w)`` (``NCW``/``OIW``) -> ``squeeze(conv2d(expand_dims(x, 2), expand_dims(w, 2)), 2)``:
  a conv2d with ``H = 1``, strides ``(1, s)``, padding ``(0, pb, 0, pe)``, dilation ``(1, d)``,
  any groups (depthwise stays depthwise);
- ``conv2d_transpose(x, w)`` (``NCHW``/``IOHW``) -> sub-pixel (phase) decomposition: output row
  ``o = s * q + r`` only takes the taps ``t`` with ``(r + pad - t * d) % s == 0``, reading input row
  ``q + (r + pad - t * d) / s``; so each of the ``s_h * s_w`` phases is a stride-1 ``conv2d`` of
  the undilated input with those taps (flipped, kernel transposed to ``OIHW``), and the phases
  interleave into the output (``nn.depth_to_space`` in ``DCR`` mode, which AlterOpLayout keeps on
  channel-blocked tensors, or ``reshape``/``transpose``/``reshape`` for unequal strides; then a
  crop for padding and ``output_padding``). No multiply by an inserted zero is done. When every
  phase has the same taps window and ``groups == 1`` (``k == s``, e.g. the 2x2 stride-2
  upsampling of detectors) the phases are one ``conv2d`` with ``s_h * s_w * C_out`` channels (a
  1x1 GEMM for ``k == s``); with fewer output channels than vector lanes (a 1-channel
  probability map) the phases share one window anyway, some taps zero, to fill the vectors;
- ``conv1d_transpose`` -> the same on ``H = 1``;
- a depthwise ``conv2d`` with a channel multiplier ``m > 1`` (``groups == C_in``,
  ``C_out = m * C_in``) -> a depthwise ``conv2d`` (multiplier 1) of ``repeat(x, m, axis=1)``:
  output channel ``c * m + j`` reads input channel ``c`` either way, the weight is unchanged and
  no multiply-add is added (the repeat is a copy);
- ``conv3d(x, w)`` (``NCDHW``/``OIDHW``, no channel multiplier) -> one ``conv2d`` over the depth
  folded into the batch: output depth ``z`` reads input depths ``z * s + t * d`` (``t < k_d``), so
  the ``k_d`` strided depth slices of the (depth-padded) input are stacked inside each group's
  channels (``N * D_out`` images of ``groups * k_d * C_g`` channels) and the weight's depth taps
  join its input channels (``OIDHW -> O (D I) H W``); a depthwise conv3d (one channel a group)
  sums ``k_d`` depthwise ``conv2d`` of the slices instead (each adds the previous one's result
  as its epilogue). The ``(N * D_out, O, H, W)`` result is the output in ``NDCHW`` order. A
  conv3d reading another one's result takes that order directly, so only the chain's last result
  is transposed back to ``NCDHW``.

Epilogues stay fused: an element-wise op (``relu``, ``sigmoid``, ``clip``, ``cast``, ...) or a
broadcasting op whose other operands are per-channel (a bias, a batch norm's scale and shift) on
the result of a rewritten convolution is moved in front of the interleave (or squeeze), onto each
phase's ``conv2d`` (per-channel operands are tiled for a merged phase conv), when the result has
one user. FoldScaleAxis, which runs next, then folds batch-norm scales into the new weights, and
FuseOps fuses the rest as conv2d epilogues. ``conv1d`` chains keep ``H = 1``: a ``conv1d`` of a
rewritten result reads the 4-d value directly, so no squeeze/expand pair sits between them.

Left alone: other layouts (``NWC``, ``NHWC``, ...).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import kiln.op as K
from kiln.ir.expr import Call, Expr, Function, Op, const
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.ir.visitor import children, post_order, rebuild
from kiln.op.conv import Conv2DAttrs, Conv2DTransposeAttrs
from kiln.op.nn_common import pad_pairs
from kiln.op.nn_spatial import depth_to_space
from kiln.op.registry import OpPattern, get_op_def, make_call
from kiln.target import Target
from kiln.transform.infer_type import infer_type
from kiln.transform.pass_infra import ModulePass, PassContext, PassInfo
from kiln.transform.rewrite import op_name

__all__ = ["LegalizeConv", "legalize_conv", "transpose_phases"]


@dataclass(frozen=True)
class Phase:
    """One output phase of a transposed convolution along one spatial axis.

    Attributes
    ----------
    taps : tuple of int
        Kernel taps used, in the order of the equivalent convolution's window (flipped).
    offset : int
        Input index read by window position 0 for output ``q`` is ``q + offset``.
    dilation : int
        Input step between window positions.
    """

    taps: tuple[int, ...]
    offset: int
    dilation: int


def transpose_phases(stride: int, kernel: int, dilation: int, pad_begin: int) -> list[Phase]:
    """The ``stride`` phases of a 1-d transposed convolution.

    Output ``o = stride * q + r`` of phase ``r`` is ``sum_m x[q + offset + m * dil'] *
    w[taps[m]]``.

    Parameters
    ----------
    stride, kernel, dilation, pad_begin : int
        The transposed convolution's geometry along the axis.

    Returns
    -------
    list of Phase
        One per ``r`` in ``range(stride)`` (``taps`` empty when no tap reaches the phase).

    Examples
    --------
    >>> [(p.taps, p.offset) for p in transpose_phases(2, 4, 1, 1)]
    [((3, 1), -1), ((2, 0), 0)]
    """
    step = stride // math.gcd(stride, dilation)
    out = []
    for r in range(stride):
        taps = [t for t in range(kernel) if (r + pad_begin - t * dilation) % stride == 0]
        taps.reverse()  # input offset grows as the tap index falls
        offset = (r + pad_begin - taps[0] * dilation) // stride if taps else 0
        out.append(Phase(tuple(taps), offset, dilation * step // stride))
    return out


@dataclass
class _Deferred:
    """A rewritten value held as 4-d ``NCHW`` parts plus the function building the real value.

    ``finish(parts)`` gives the value of the original op's type. Element-wise epilogues are
    applied to every part; ``reps`` is how many times a part repeats the channel vector (a merged
    phase conv has ``P * C`` channels); ``squeeze_only`` marks a conv1d result (``parts[0]``
    squeezed), which other conv1d read directly and whose full-size operands may be expanded.
    """

    parts: list[Expr]
    finish: Callable[[list[Expr]], Expr]
    out: TensorType
    reps: int = 1
    squeeze_only: bool = False
    depth_major: bool = False  # a conv3d result: parts[0] is (N * D, C, H, W)
    names: tuple[str, ...] = ()
    value: Expr | None = field(default=None)


def _crop(x: Expr, begins: tuple[int, int], sizes: tuple[int, int],
          have: tuple[int, int]) -> Expr:
    if begins == (0, 0) and sizes == have:
        return x
    return K.strided_slice(x, list(begins), [b + s for b, s in zip(begins, sizes)], axes=[2, 3])


def _union(phases: list[Phase], kernel: int) -> list[Phase]:
    """The phases of one axis on a common window (``kernel`` stands for a zero tap), so that
    they can share one convolution; unchanged when they already share one or use dilation."""
    if len({(p.offset, len(p.taps)) for p in phases}) == 1 or any(
            p.dilation != 1 for p in phases if p.taps):
        return phases
    used = [p for p in phases if p.taps]
    lo = min(p.offset for p in used)
    hi = max(p.offset + len(p.taps) - 1 for p in used)
    out = []
    for p in phases:
        taps = [kernel] * (hi - lo + 1)
        for m, t in enumerate(p.taps):
            taps[p.offset - lo + m] = t
        out.append(Phase(tuple(taps), lo, 1))
    return out


def _taps(w: Expr, taps_h: tuple[int, ...], taps_w: tuple[int, ...], kernel: tuple[int, int],
          groups: int, c_in: int, c_out_g: int, dtype: str) -> Expr:
    """The ``OIHW`` weight of one phase: taps picked (flipped) from an ``IOHW`` weight; tap index
    ``kernel[axis]`` is a zero tap."""
    for axis, taps in ((2, taps_h), (3, taps_w)):
        k = kernel[axis - 2]
        if taps == tuple(range(k)):
            continue
        if k in taps:
            shape = [c_in, c_out_g, *kernel]
            shape[axis] = 1
            if axis == 3:
                shape[2] = len(taps_h) if taps_h != tuple(range(kernel[0])) else kernel[0]
            w = K.concatenate([w, K.zeros(tuple(shape), dtype)], axis=axis)
        w = K.take(w, const(np.array(taps, "int32")), axis=axis)
    nh, nw = len(taps_h), len(taps_w)
    if groups == 1:
        return K.transpose(w, (1, 0, 2, 3))
    w = K.reshape(w, (groups, c_in // groups, c_out_g, nh, nw))
    w = K.transpose(w, (0, 2, 1, 3, 4))
    return K.reshape(w, (groups * c_out_g, c_in // groups, nh, nw))


def _conv2d(x: Expr, w: Expr, attrs: Any, strides: tuple[int, int], padding: tuple[int, ...],
            dilation: tuple[int, int], kernel: tuple[int, int], channels: int,
            names: tuple[str, ...]) -> Call:
    return make_call("nn.conv2d", [x, w], Conv2DAttrs(
        strides=strides, padding=padding, dilation=dilation, groups=int(attrs.groups),
        channels=channels, kernel_size=kernel, data_layout="NCHW", kernel_layout="OIHW",
        out_layout="", out_dtype=attrs.out_dtype), source_names=names)


def _transpose2d(x: Expr, xt: TensorType, w: Expr, wt: TensorType, attrs: Any, out: TensorType,
                 names: tuple[str, ...]) -> _Deferred:
    """Phase decomposition of ``conv2d_transpose`` in ``NCHW``/``IOHW`` (4-d ``x`` and ``w``)."""
    n, c_in, h, wd = xt.shape
    kernel = (wt.shape[2], wt.shape[3])
    c_out_g, groups = wt.shape[1], int(attrs.groups)
    c_out = c_out_g * groups
    strides, dil = tuple(attrs.strides), tuple(attrs.dilation)
    pads = tuple(b for b, _ in pad_pairs(attrs.padding, 2, "nn.conv2d_transpose"))
    out_hw = (out.shape[2], out.shape[3])
    q = (-(-out_hw[0] // strides[0]), -(-out_hw[1] // strides[1]))
    phases = [transpose_phases(s, k, d, p) for s, k, d, p in zip(strides, kernel, dil, pads)]
    target = Target.current() or Target("c")
    if groups == 1 and c_out < target.vector_width(out.dtype):
        # a few output channels would leave the conv2d's vectors mostly empty: one conv2d of
        # s_h * s_w * C_out channels on a common window (some taps zero) fills them
        phases = [_union(ps, k) for ps, k in zip(phases, kernel)]
    sizes = (h, wd)

    def window(ph: Phase, axis: int) -> tuple[int, int, int, int]:
        """(pad_begin, pad_end, crop start, conv output length) of one axis of a phase."""
        span = (len(ph.taps) - 1) * ph.dilation
        pb = max(0, -ph.offset)
        start = max(ph.offset, 0)
        pe = max(0, start + q[axis] + span - sizes[axis] - pb)
        return pb, pe, start, sizes[axis] + pb + pe - span

    grid = [(py, px) for py in phases[0] for px in phases[1]]
    same = all((py.offset, len(py.taps)) == (grid[0][0].offset, len(grid[0][0].taps))
               and (px.offset, len(px.taps)) == (grid[0][1].offset, len(grid[0][1].taps))
               for py, px in grid)
    if groups == 1 and same and grid[0][0].taps and grid[0][1].taps:
        py, px = grid[0]
        (pbh, peh, sh, lh), (pbw, pew, sw, lw) = window(py, 0), window(px, 1)
        weight: Expr = K.concatenate([_taps(w, a.taps, b.taps, kernel, 1, c_in, c_out, wt.dtype)
                                for a, b in grid], axis=0)
        conv = _conv2d(x, weight, attrs, (1, 1), (pbh, pbw, peh, pew),
                       (py.dilation, px.dilation), (len(py.taps), len(px.taps)),
                       c_out * len(grid), names)
        crops = [((sh, sw), (lh, lw))]
        parts: list[Expr] = [conv]
        reps = len(grid)
    else:
        parts, crops = [], []
        for py, px in grid:
            if not py.taps or not px.taps:
                parts.append(K.zeros((n, c_out, q[0], q[1]), out.dtype))
                crops.append(((0, 0), q))
                continue
            (pbh, peh, sh, lh), (pbw, pew, sw, lw) = window(py, 0), window(px, 1)
            weight = _taps(w, py.taps, px.taps, kernel, groups, c_in, c_out_g, wt.dtype)
            parts.append(_conv2d(x, weight, attrs, (1, 1), (pbh, pbw, peh, pew),
                                 (py.dilation, px.dilation), (len(py.taps), len(px.taps)),
                                 c_out, names))
            crops.append(((sh, sw), (lh, lw)))
        reps = 1

    def finish(ps: list[Expr]) -> Expr:
        cropped = [_crop(p, begin, q, have) for p, (begin, have) in zip(ps, crops)]
        y = cropped[0] if len(cropped) == 1 else K.concatenate(cropped, axis=1)
        sy, sx = strides
        if sy == sx > 1:  # channel (ry, rx, c) -> pixel (q_h * s + ry, q_w * s + rx)
            y = depth_to_space(y, sy, "NCHW", "DCR")
        elif sy * sx > 1:  # channel (ry, rx, c) -> pixel (q_h * sy + ry, q_w * sx + rx)
            y = K.reshape(y, (n, sy, sx, c_out, q[0], q[1]))
            y = K.transpose(y, (0, 3, 4, 1, 5, 2))
            y = K.reshape(y, (n, c_out, q[0] * sy, q[1] * sx))
        return _crop(y, (0, 0), out_hw, (q[0] * sy, q[1] * sx))

    return _Deferred(parts, finish, out, reps=reps)


class _Legalizer:
    """One walk over a function body (children first)."""

    def __init__(self, body: Expr):
        self.nodes = post_order(body, into_functions=False)
        self.uses: Counter[int] = Counter(id(c) for node in self.nodes for c in children(node))
        self.uses[id(body)] += 1
        self.memo: dict[int, Expr | _Deferred] = {}
        self.named: set[int] = set()
        self.changed = False

    def expr(self, old: Expr) -> Expr:
        value = self.memo.get(id(old), old)
        if not isinstance(value, _Deferred):
            return value
        if value.value is None:  # the interleave / squeeze, built once for all its users
            value.value = value.finish(value.parts)
            # the phases' concatenation is no source tensor: unnamed, `kiln debug --compare`
            # does not mistake it for one (it looks through the reshapes of the interleave)
            stack = [value.value]
            while stack:
                node = stack.pop()
                if isinstance(node, Call) and not node.has_type and id(node) not in self.named:
                    if isinstance(node.op, Op) and node.op.name == "concatenate":
                        self.named.add(id(node))
                    else:
                        stack.extend(node.args)
            self.name([value.value], value.names)
        return value.value

    def name(self, exprs: list[Expr], names: tuple[str, ...]) -> None:
        """Give new (untyped, unnamed) calls the source names of the call they replace."""
        stack = list(exprs)
        while stack:
            node = stack.pop()
            if node.has_type or id(node) in self.named:
                continue
            self.named.add(id(node))
            if isinstance(node, Call) and not node.source_names and names:
                object.__setattr__(node, "source_names", tuple(names))
            stack.extend(children(node))

    def run(self, fn: Function) -> Function:
        for node in self.nodes:
            self.memo[id(node)] = self.visit(node)
        body = self.expr(fn.body)
        if not self.changed:
            return fn
        return Function(fn.params, body, None, attrs=fn.attrs)

    def visit(self, node: Expr) -> Expr | _Deferred:
        if isinstance(node, Call) and isinstance(node.op, Op):
            out = None
            name = node.op.name
            if name in ("nn.conv1d", "nn.conv1d_transpose", "nn.conv2d_transpose", "nn.conv3d"):
                out = self.convolution(node)
            elif name == "nn.conv2d" and (direct := self.multiplier(node)) is not None:
                self.changed = True
                self.name([direct], node.source_names)
                return direct
            elif any(isinstance(self.memo.get(id(a)), _Deferred) for a in node.args):
                out = self.epilogue(node)
            if out is not None:
                self.changed = True
                out.names = node.source_names
                self.name(out.parts, node.source_names)
                return out
        if isinstance(node, Function):
            return node
        return rebuild(node, tuple(self.expr(c) for c in children(node)))

    # --- convolutions ------------------------------------------------------------------------------
    def data4d(self, old: Expr) -> Expr:
        """A 3-d ``NCW`` value as ``NC1W`` (a conv1d result's 4-d part itself)."""
        value = self.memo.get(id(old))
        if isinstance(value, _Deferred) and value.squeeze_only:
            return value.parts[0]
        return K.expand_dims(self.expr(old), 2)

    def convolution(self, call: Call) -> _Deferred | None:
        attrs, name = call.attrs, op_name(call)
        assert attrs is not None and name is not None, "visit() passes convolutions, which carry attrs"
        xt, wt, out = (call.args[0].checked_type, call.args[1].checked_type, call.checked_type)
        if not (isinstance(xt, TensorType) and isinstance(wt, TensorType) and isinstance(out, TensorType)
                ) or attrs.out_layout not in ("", attrs.data_layout):
            return None
        names = call.source_names
        if name == "nn.conv3d":
            return self.conv3d(call, xt, wt, out)
        if name == "nn.conv2d_transpose":
            if attrs.data_layout != "NCHW" or attrs.kernel_layout != "IOHW":
                return None
            return _transpose2d(self.expr(call.args[0]), xt, self.expr(call.args[1]), wt, attrs,
                                out, names)
        if attrs.data_layout != "NCW" or attrs.kernel_layout != ("OIW" if name == "nn.conv1d"
                                                                  else "IOW"):
            return None
        x = self.data4d(call.args[0])
        w = K.expand_dims(self.expr(call.args[1]), 2)
        ((pb, pe),) = pad_pairs(attrs.padding, 1, name)
        if name == "nn.conv1d":
            conv = _conv2d(x, w, attrs, (1, attrs.strides[0]), (0, pb, 0, pe),
                           (1, attrs.dilation[0]), (1, wt.shape[2]), out.shape[1], names)
            return _Deferred([conv], lambda ps: K.squeeze(ps[0], [2]), out, squeeze_only=True)
        x4 = TensorType((xt.shape[0], xt.shape[1], 1, xt.shape[2]), xt.dtype)
        w4 = TensorType((wt.shape[0], wt.shape[1], 1, wt.shape[2]), wt.dtype)
        out4 = TensorType((out.shape[0], out.shape[1], 1, out.shape[2]), out.dtype)
        attrs2 = Conv2DTransposeAttrs(
            strides=(1, attrs.strides[0]), padding=(0, pb, 0, pe), dilation=(1, attrs.dilation[0]),
            output_padding=(0, attrs.output_padding[0]), groups=attrs.groups,
            out_dtype=attrs.out_dtype)
        inner = _transpose2d(x, x4, w, w4, attrs2, out4, names)
        return _Deferred(inner.parts, lambda ps: K.squeeze(inner.finish(ps), [2]), out,
                         reps=inner.reps)

    def conv3d(self, call: Call, xt: TensorType, wt: TensorType, out: TensorType) -> _Deferred | None:
        """``conv3d`` as a ``conv2d`` over ``N * D_out`` images (see the module notes)."""
        attrs = call.attrs
        assert attrs is not None, "convolution() passes calls with attrs"
        groups = int(attrs.groups)
        n, _, _, h, w = xt.shape
        o, cg, kd, kh, kw = wt.shape
        depthwise = cg == 1 < groups
        if attrs.data_layout != "NCDHW" or attrs.kernel_layout != "OIDHW" \
                or (depthwise and o != groups):
            return None  # a channel multiplier
        (dpb, dpe), (hpb, hpe), (wpb, wpe) = pad_pairs(attrs.padding, 3, "nn.conv3d")
        sd, dd = int(attrs.strides[0]), int(attrs.dilation[0])
        od, oh, ow = out.shape[2:]
        x = self.depth_major(call.args[0])  # (n, d, c, h, w)
        if dpb or dpe:
            x = K.nn.pad(x, ((0, 0), (dpb, dpe), (0, 0), (0, 0), (0, 0)))
        taps = [K.reshape(K.strided_slice(x, [t * dd], [t * dd + (od - 1) * sd + 1], [sd],
                                          axes=[1]), (n, od, groups, cg, h, w))
                for t in range(kd)]
        weight = self.expr(call.args[1])

        def conv2d(x2: Expr, w2: Expr) -> Call:
            return _conv2d(x2, w2, attrs, tuple(attrs.strides[1:]), (hpb, wpb, hpe, wpe),
                           tuple(attrs.dilation[1:]), (kh, kw), o, call.source_names)

        if depthwise:  # the depth taps summed: one depthwise conv2d each
            convs = [conv2d(K.reshape(tap, (n * od, o, h, w)), K.reshape(
                K.strided_slice(weight, [t], [t + 1], axes=[2]), (o, 1, kh, kw)))
                for t, tap in enumerate(taps)]
            conv: Expr = convs[0]
            for c in convs[1:]:
                conv = K.add(conv, c)
        else:
            stacked = taps[0] if kd == 1 else K.concatenate(taps, axis=3)  # (.., group, tap, c, ..)
            x2 = K.reshape(stacked, (n * od, groups * kd * cg, h, w))
            conv = conv2d(x2, K.reshape(K.transpose(weight, (0, 2, 1, 3, 4)), (o, kd * cg, kh, kw)))
        return _Deferred([conv], lambda ps: K.transpose(K.reshape(ps[0], (n, od, o, oh, ow)),
                                                        (0, 2, 1, 3, 4)),
                         out, depth_major=True)

    def multiplier(self, call: Call) -> Expr | None:
        """A depthwise ``conv2d`` with a channel multiplier as one without (module notes)."""
        attrs, xt, wt = call.attrs, call.args[0].checked_type, call.args[1].checked_type
        if not (isinstance(xt, TensorType) and isinstance(wt, TensorType)) or attrs is None \
                or attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW" \
                or attrs.out_layout not in ("", "NCHW"):
            return None
        c_in, c_out = xt.shape[1], wt.shape[0]
        if int(attrs.groups) != c_in or wt.shape[1] != 1 or c_out == c_in or c_in == 1:
            return None
        x = K.repeat(self.expr(call.args[0]), c_out // c_in, axis=1)
        return make_call("nn.conv2d", [x, self.expr(call.args[1])],
                         attrs.replace(groups=c_out, channels=c_out),
                         source_names=call.source_names)

    def depth_major(self, old: Expr) -> Expr:
        """A 5-d ``NCDHW`` value as ``NDCHW`` (a conv3d result's part reshaped, no transpose)."""
        value = self.memo.get(id(old))
        if isinstance(value, _Deferred) and value.depth_major:
            n, c, d, h, w = value.out.shape
            return K.reshape(value.parts[0], (n, d, c, h, w))
        return K.transpose(self.expr(old), (0, 2, 1, 3, 4))

    # --- epilogues ---------------------------------------------------------------------------------
    def epilogue(self, call: Call) -> _Deferred | None:
        """``f(finish(parts), c) -> finish(f(part, c'))`` for element-wise ``f`` and per-channel
        (or, on a conv1d result, any non-growing) operands ``c``."""
        name = op_name(call)
        assert name is not None, "visit() passes only calls of primitive ops"
        op = get_op_def(name)
        held = {k: v for k, a in enumerate(call.args)
                if isinstance(v := self.memo.get(id(a)), _Deferred)}
        out = call.checked_type
        if (op.pattern not in (OpPattern.ELEMWISE, OpPattern.BROADCAST)
                or not isinstance(out, TensorType)
                or any(d.out.shape != out.shape for d in held.values())):
            return None
        first = min(held)
        dfr = held[first]
        # a conv1d result is a free squeeze of one part: any number of users and of such operands
        # (residual adds) may work on the 4-d parts; an interleave moves only with one user
        if len(held) > 1 and not all(d.squeeze_only for d in held.values()):
            return None
        if not dfr.squeeze_only and self.uses[id(call.args[first])] != 1:
            return None
        axis = getattr(call.attrs, "axis", None)
        if name == "nn.bias_add":
            if axis is None or axis % out.ndim != 1:
                return None
        elif axis is not None:
            return None
        per_part: list[list[Expr]] = [[] for _ in dfr.parts]
        for k, arg in enumerate(call.args):
            for i, args in enumerate(per_part):
                if k in held:
                    args.append(held[k].parts[i])
                    continue
                adapted = self.operand(arg, dfr, name == "nn.bias_add")
                if adapted is None:
                    return None
                args.append(adapted)
        parts: list[Expr] = [Call(call.op, args, call.attrs, source_names=call.source_names)
                             for args in per_part]
        return _Deferred(parts, dfr.finish, out, reps=dfr.reps, squeeze_only=dfr.squeeze_only,
                         depth_major=dfr.depth_major)

    def operand(self, old: Expr, dfr: _Deferred, bias: bool) -> Expr | None:
        """A broadcasting operand of an epilogue, shaped for the 4-d parts."""
        ty = old.checked_type
        if not isinstance(ty, TensorType):
            return None
        value = self.expr(old)
        rank, c = dfr.out.ndim, dfr.out.shape[1]
        if bias:  # nn.bias_add(x, b, axis=1): b is (C,)
            return self.tile(value, dfr.reps, (c,)) if ty.shape == (c,) else None
        if math.prod(ty.shape) == 1 and ty.ndim <= 4:
            return value
        dims = (1,) * (rank - ty.ndim) + tuple(ty.shape)
        if ty.ndim <= rank and all(d == 1 for k, d in enumerate(dims) if k != 1) and dims[1] == c:
            return self.tile(K.reshape(value, (c,)), dfr.reps, (c, 1, 1))
        if dfr.squeeze_only and 2 <= ty.ndim <= 3:  # (.., C, W) -> (.., C, 1, W)
            return K.expand_dims(value, ty.ndim - 1)
        return None

    @staticmethod
    def tile(vec: Expr, reps: int, shape: tuple[int, ...]) -> Expr:
        if reps > 1:
            vec = K.concatenate([K.reshape(vec, (-1,))] * reps, axis=0)
        c = shape[0] * reps
        return K.reshape(vec, (c, *shape[1:])) if len(shape) > 1 or reps > 1 else vec


def legalize_conv(fn: Function) -> Function:
    """Rewrite the 1-d and transposed convolutions of a typed function (see the module notes).

    Parameters
    ----------
    fn : Function
        A typed function (not modified).

    Returns
    -------
    Function
        The rewritten function (untyped; ``fn`` itself when nothing applies).
    """
    return _Legalizer(fn.body).run(fn)


def LegalizeConv() -> ModulePass:
    """The LegalizeConv pass (opt level 3): conv1d, conv{1,2}d_transpose and conv3d -> conv2d.

    Returns
    -------
    ModulePass
        Rewrites every function except fused and externally compiled ones.
    """

    def run(mod: IRModule, ctx: PassContext) -> IRModule:
        typed = infer_type(mod)
        out = typed.copy()
        for gv, fn in typed.items():
            if any(fn.attrs.get(k) for k in ("Primitive", "Compiler", "SkipOptimization")):
                continue
            out[gv] = legalize_conv(fn)
        return infer_type(out)

    return ModulePass(run, PassInfo(3, "LegalizeConv", ("InferType",)))

