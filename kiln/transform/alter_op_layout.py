"""AlterOpLayout: blocked ``NCHW{c}c`` convolutions and packed dense for the CPU.

This is TVM's relay-era x86 ``AlterOpLayout`` with its default (untuned) schedule configuration,
reading the vector width of ``Target.current()``:

- ``nn.conv2d`` in ``NCHW``/``OIHW`` with ``groups == 1`` becomes
  ``nn.contrib_conv2d_NCHWc(layout_transform(data, "NCHW", "NCHW{ic}c"),
  layout_transform(weight, "OIHW", "OIHW{ic}i{oc}o"))`` with ``out_layout="NCHW{oc}c"``;
- a depthwise ``nn.conv2d`` (``groups == C_in == C_out``) becomes
  ``nn.contrib_depthwise_conv2d_NCHWc`` with kernel layout ``OIHW1i{c}o`` and ``ic == oc``;
- a grouped ``nn.conv2d`` with more than one input channel per group becomes
  ``nn.contrib_conv2d_NCHWc`` with its ``groups`` (TVM's ``group_conv2d_NCHWc``), the blocks
  dividing the channels of one group (a block never straddles two groups);
- a 3x3 stride-1 ``nn.conv2d`` with a constant float32 weight becomes
  ``nn.contrib_conv2d_winograd_NCHWc`` (Winograd ``F(4x4, 3x3)``, :mod:`kiln.op.nn_winograd`:
  the same blocks, the filters transformed at build time) where
  :func:`~kiln.te.templates.winograd.winograd_tile` finds one faster (``F(4x4, 3x3)`` for an
  output of at least 25 tiles of 4 x 4, ``F(2x2, 3x3)`` for one of 25 tiles of 2 x 2 with 128
  channels or more, input blocks of at least 8 channels); ResNet's, DBNet's and YOLOv8's 3x3
  convolutions take a third to a half of the direct template's time. Not while an entered
  tuning log holds TVM's task for the direct convolution (its record applies then);
- ``nn.max_pool2d``/``nn.avg_pool2d`` of an ``NCHW`` value (not blocked by a convolution before
  it) run in ``NCHW{c}c`` when ``c`` is a power of two of at least 4: the pooling template
  vectorizes a window over the channel block (a 3x3 stride-2 max pool of 64 x 112 x 112: 6.7 ms
  in ``NCHW``, scalar and branchy, 0.42 ms blocked with both conversions);
- ``nn.dense`` of 2-d data with a constant weight ``(N, K)`` becomes ``nn.contrib_dense_pack``
  with the weight ``layout_transform(weight, "NC", "NC{n}n")``.

A hook registered for an operator (``relay.op.register_alter_op_layout``, or
``TempOpAttr(op, "FTVMAlterOpLayout", fn)``) replaces Kiln's rule for it and is called as TVM calls
it, ``fn(attrs, inputs, tinfos, out_type)``; the layouts named by the call it returns are adopted
(:func:`~kiln.transform.layout_propagation.hook_rule`).

Weight transforms are constant subgraphs: the build's next ``FoldConstant`` packs the weights
once, at build time. Blocked results are carried through the layout-agnostic operators by
:mod:`kiln.transform.layout_propagation`, so activations stay blocked between convolutions and
``layout_transform`` back to ``NCHW`` appears only in front of the consumers that need it. The
function's parameters and results keep their layouts. A convolution padded to whole vectors of
output channels (:func:`conv_padded_channels`) stays padded through its epilogue, pools and
squeeze-excitations (:class:`~kiln.transform.layout_propagation.Padded`); a depthwise convolution
of it computes the padded channels too (16-lane blocks for MobileNetV3's 72 and 120 channels,
not 8), a convolution reads it with zero input channels where those cost less than copying the
real channels out.

Block sizes (``L`` = lanes of the dtype in one vector register, :meth:`Target.vector_width`):

- convolutions (:func:`channel_block`): the largest power of two dividing the channel count (of
  one group, for grouped convolutions) and at most ``L``; when that is 1, the largest divisor at
  most ``L`` (the 3-channel stem gets 3);
- dense (:func:`dense_block`): the largest multiple of ``L`` up to ``2 L`` dividing ``N`` (a
  16-column panel on AVX2), else the largest power of two from 4 up to ``2 L`` dividing ``N``, else
  the largest divisor of ``N`` up to ``2 L`` (TVM's rule: ``N = 10`` at 4 lanes gives 5); when that
  is below 4 (a prime ``N``), the weight gets zero rows up to a multiple of ``L``
  (:func:`dense_padded_units`) and the product is sliced back to ``N`` columns. A product of at
  most 3 rows (batch 1, a recurrent step) streams its weight once: its panel is one register
  tile's columns, up to ``8 L``, where such a width divides ``N``
  (:func:`kiln.te.templates.dense.stream_panel`).

Applying TVM's tuning logs (``with auto_scheduler.ApplyHistoryBest(log): relay.build(...)``):
TVM's auto-scheduler tasks are TVM's layouts, and a task's workload key (the MD5 of its DAG
print) depends on them. While a dispatch context is entered (:mod:`kiln.te.dispatch`), each rule
first works out the DAG TVM would extract for the op (:func:`tvm_task_dags`: the op in TVM's layout
with the epilogues TVM fuses most often: none, a bias ``add``, ``add`` + ``relu``, ``relu``, a
residual block's bias + shortcut ``add`` (+ ``relu``)) and asks the context for its key; when the
log holds it, the op gets TVM's layout instead of Kiln's:

- dense stays ``nn.dense`` (TVM's x86 strategy with the auto-scheduler enabled uses
  ``topi.nn.dense`` and never packs: ``python/tvm/relay/op/strategy/x86.py``, ``dense.generic``);
- a convolution is blocked with TVM's default blocks (:func:`tvm_conv_blocks`, the rule of
  ``python/tvm/topi/x86/conv2d_avx_common.py: _fallback_schedule``) for 4, 8 or 16 float32 lanes
  (``get_simd_32bit_lanes``: plain ``llvm``, AVX2, AVX-512), the one the log asks for.

Left alone: grouped convolutions with one input channel per group that are not depthwise
(multipliers above 1: LegalizeConv, which runs first, makes them depthwise), grouped convolutions
while a dispatch context is entered,
convolutions in other layouts (``NHWC``/``HWIO``: run :mod:`~kiln.transform.convert_layout`
first; changing them here would also change what TVM's x86 rules produce), integer convolutions
(TVM packs those for VNNI instead), ``nn.matmul``/``nn.batch_matmul`` (no packed variant), and
dense with a weight that is not a constant.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.op as K
from kiln.ir.expr import Call, Constant, Expr, Function, Var
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, is_float, tensor_of
from kiln.op.nn_pack import DensePackAttrs
from kiln.op.nn_winograd import WinogradAttrs, winograd_weight
from kiln.op.registry import get_op_def, make_call
from kiln.target import Target
from kiln.te import dispatch as te_dispatch
from kiln.te.dag import ComputeDAG
from kiln.te.templates.dense import stream_panel
from kiln.te.templates.winograd import winograd_tile
from kiln.te.tensor import placeholder
from kiln.transform.infer_type import infer_type
from kiln.transform.layout_propagation import (
    Held,
    LayoutRewriter,
    Padded,
    Rule,
    blocked_layout,
    follow_rules,
    padded_held,
    user_hooks,
)
from kiln.transform.pass_infra import ModulePass, PassContext, PassInfo
from kiln.transform.rewrite import call_attrs

__all__ = [
    "AlterOpLayout",
    "alter_op_layout",
    "channel_block",
    "dense_block",
    "log_has_task",
    "tvm_conv_blocks",
    "tvm_task_dags",
]


def channel_block(channels: int, lanes: int) -> int:
    """Channel block of a blocked convolution's input or output.

    Parameters
    ----------
    channels : int
        Channel count (positive).
    lanes : int
        Vector lanes of the dtype (positive).

    Returns
    -------
    int
        The largest power of two dividing ``channels`` and at most ``lanes``; when that is 1, the
        largest divisor of ``channels`` at most ``lanes``.

    Examples
    --------
    >>> channel_block(64, 8), channel_block(24, 16), channel_block(3, 8), channel_block(21, 8)
    (8, 8, 3, 7)
    """
    pow2 = 1
    while pow2 * 2 <= lanes and channels % (pow2 * 2) == 0:
        pow2 *= 2
    if pow2 > 1:
        return pow2
    return max(d for d in range(1, min(channels, lanes) + 1) if channels % d == 0)


def conv_padded_channels(channels: int, lanes: int) -> int:
    """Output channels a blocked convolution computes: ``channels``, or, when they are more
    than a vector and their channel block is narrower than one (24 channels with 16 lanes:
    blocks of 8, whose multiply-adds use half the vector), the next multiple of ``lanes`` when
    that takes fewer vector multiply-adds. The result is sliced back to ``channels``. DBNet's
    96 -> 24 channel 3x3 convolutions at 160 x 160 on one Zen 5 core: 8.5 -> 5.9 ms (what
    onnxruntime's 16-channel blocks take too).

    Examples
    --------
    >>> conv_padded_channels(24, 16), conv_padded_channels(48, 16), conv_padded_channels(4, 16)
    (32, 48, 4)
    >>> conv_padded_channels(24, 8), conv_padded_channels(40, 16), conv_padded_channels(100, 16)
    (24, 48, 112)
    """
    block = channel_block(channels, lanes)
    if channels <= lanes or block == lanes:
        return channels
    padded = -(-channels // lanes) * lanes
    return padded if padded * block < channels * lanes else channels


def dense_block(units: int, lanes: int) -> int:
    """Panel width ``n`` of a packed dense weight (layout ``NC{n}n``).

    Parameters
    ----------
    units : int
        Output columns ``N`` (positive).
    lanes : int
        Vector lanes of the dtype (positive).

    Returns
    -------
    int
        A divisor of ``units`` at most ``2 * lanes``: the largest multiple of ``lanes``, else the
        largest power of two of at least 4, else the largest divisor.

    Examples
    --------
    >>> dense_block(1000, 8), dense_block(10, 4), dense_block(1000, 16), dense_block(7, 8)
    (8, 5, 8, 7)
    """
    divisors = [d for d in range(min(units, 2 * lanes), 0, -1) if units % d == 0]
    for d in divisors:
        if d % lanes == 0:
            return d
    for d in divisors:
        if d >= 4 and d & (d - 1) == 0:
            return d
    return divisors[0]


TVM_LANES = (4, 8, 16)
_DAG_CACHE: dict[Any, list[ComputeDAG]] = {}


def tvm_conv_blocks(c_in: int, c_out: int, lanes: int) -> tuple[int, int]:
    """TVM's default ``(ic_bn, oc_bn)`` of an x86 ``conv2d_NCHWc`` (``_fallback_schedule``).

    ``oc_bn`` is the largest divisor of ``c_out`` up to ``lanes``; ``ic_bn`` the largest divisor
    of ``c_in`` up to ``oc_bn``.

    Examples
    --------
    >>> tvm_conv_blocks(3, 8, 4), tvm_conv_blocks(64, 64, 16), tvm_conv_blocks(3, 10, 8)
    ((3, 4), (16, 16), (3, 5))
    """
    oc = max(d for d in range(1, min(c_out, lanes) + 1) if c_out % d == 0)
    ic = max(d for d in range(1, min(c_in, oc) + 1) if c_in % d == 0)
    return ic, oc


def _epilogues(out: TensorType, channel_axis: int) -> list[list[tuple[str, tuple[int, ...]]]]:
    """The element-wise tails TVM most often fuses after an anchor op: none, a bias add (bias
    broadcast along ``channel_axis``), add + relu, relu, and a residual block's bias add +
    shortcut add (+ relu)."""
    if out.ndim == 2:  # dense: CanonicalizeOps turns bias_add into add(x, b), b of shape (N,)
        bias: tuple[int, ...] = (out.shape[1],)
    else:  # along the channel axis, and its inner block in a blocked (NCHW{c}c) output
        keep = {channel_axis} | ({out.ndim - 1} if out.ndim == 5 else set())
        bias = tuple(d if k in keep else 1 for k, d in enumerate(out.shape))
    add, relu, residual = ("add", bias), ("nn.relu", ()), ("add", tuple(out.shape))
    return [[], [add], [add, relu], [relu], [add, residual, relu], [add, residual]]


def tvm_task_dags(name: str, attrs: Any, arg_types: list[TensorType],
                  channel_axis: int = 1) -> list[ComputeDAG]:
    """DAGs of the fused functions TVM would make of ``name(p0, p1)`` plus common epilogues.

    Parameters
    ----------
    name : str
        The anchor operator (``nn.dense``, ``nn.contrib_conv2d_NCHWc``).
    attrs : Attrs
        Its attributes.
    arg_types : list of TensorType
        Types of its (data, weight) arguments.
    channel_axis : int
        The output axis a bias is broadcast along.

    Returns
    -------
    list of ComputeDAG
        One DAG per epilogue of :func:`_epilogues`, placeholders ``p0, p1, ...`` as in fused
        functions; empty when the op does not type-check.
    """
    cache_key = (name, repr(attrs), tuple((tuple(t.shape), t.dtype) for t in arg_types),
                 channel_axis)
    if cache_key in _DAG_CACHE:
        return _DAG_CACHE[cache_key]
    params = [Var(f"p{k}", t) for k, t in enumerate(arg_types)]
    try:
        anchor = make_call(name, params, attrs)
        typed = infer_type(IRModule.from_expr(Function(params, anchor)))
    except Exception:  # a layout the op cannot take: no candidate
        return []
    out_type = tensor_of(typed["main"].body.checked_type)
    dags = []
    for tail in _epilogues(out_type, channel_axis):
        ps = list(params)
        body: Any = make_call(name, ps[:2], attrs)
        for op, shape in tail:
            if op == "add":
                bias = Var(f"p{len(ps)}", TensorType(shape, out_type.dtype))
                ps.append(bias)
                body = make_call("add", [body, bias])
            else:
                body = make_call(op, [body])
        fn = infer_type(IRModule.from_expr(Function(ps, body)))["main"]
        tensors = {id(p): placeholder(tensor_of(p.checked_type).shape, tensor_of(p.checked_type).dtype,
                                      p.name_hint) for p in fn.params}

        out = _te_of(fn.body, tensors)
        dags.append(ComputeDAG([*(tensors[id(p)] for p in fn.params), out]))
    if len(_DAG_CACHE) > 512:
        _DAG_CACHE.clear()
    _DAG_CACHE[cache_key] = dags
    return dags


def _te_of(e: Any, tensors: dict[int, Any]) -> Any:
    """The tensor of a typed call tree (placeholders in ``tensors``), by the ops' computes."""
    if id(e) not in tensors:
        compute = get_op_def(e.op.name).compute
        assert compute is not None, f"{e.op.name} has no compute"
        tensors[id(e)] = compute([_te_of(a, tensors) for a in e.args], e.attrs, e.checked_type)
    return tensors[id(e)]


def log_has_task(dags: list[ComputeDAG], what: str) -> bool:
    """Whether an entered dispatch context (:mod:`kiln.te.dispatch`) holds a record for one of
    ``dags`` (TVM's forms of a task, from :func:`tvm_task_dags`).

    Parameters
    ----------
    dags : list of ComputeDAG
        Candidate task DAGs.
    what : str
        A function name to show the dispatchers.

    Returns
    -------
    bool
        True when one of the DAGs' workload keys has a record.
    """
    for dag in dags:
        try:
            if te_dispatch.lookup(dag.workload_key(), dag, what) is not None:
                return True
        except Exception:  # a broken context must not break the build
            return False
    return False


def _reads_padded(extra: int, c_in: int, weight_shape: tuple[int, ...]) -> bool:
    """Whether a convolution reads a channel-padded input as it is (its ``extra`` zero input
    channels cost multiply-adds) rather than the input's ``c_in`` real channels (a copy of the
    input). The multiply-adds win when ``extra x O x kh x kw`` is at most ``20 x c_in``: the copy
    moves ``8 c_in`` bytes per pixel at ~50 GB/s, the extra channels take ``2 extra O kh kw``
    FLOPs at ~265 GFLOP/s (one Zen 5 core). MobileNetV2's 24 -> 144 expansions copy (8 extra
    channels would add a third to their work), MobileNetV3's 72 -> 40 projections read 80."""
    out, _, kh, kw = weight_shape
    return extra * out * kh * kw <= 20 * c_in


def _conv2d_rule(target: Target) -> Rule:
    def rule(prop: LayoutRewriter, call: Call) -> Held | None:
        """``conv2d(x, w)`` -> ``contrib_conv2d_NCHWc(x{ic}, layout_transform(w)){oc}``."""
        attrs = call_attrs(call)
        data, weight = prop.tensor(call.args[0]), prop.tensor(call.args[1])
        if (data is None or weight is None or attrs.data_layout != "NCHW"
                or attrs.kernel_layout != "OIHW" or attrs.out_layout not in ("", "NCHW")
                or not is_float(data.dtype) or data.dtype != weight.dtype):
            return None
        lanes = target.vector_width(data.dtype)
        c_in, c_out = data.shape[1], weight.shape[0]
        weight_expr = prop.primal(call.args[1])
        padded = c_out
        data_expr: Expr | None = None
        # A channel-padded input (a padded convolution's extra channels, kept through its
        # epilogue) is taken as it is: the weights get zero input channels (a depthwise
        # convolution zero filters, its result staying padded). A weight computed at run time
        # (a squeeze-excitation's scale folded into it) is padded in the kernel that packs it.
        pad_in = prop.value(call.args[0]).padded
        if (pad_in is None or te_dispatch.current_dispatchers()
                or pad_in.held != blocked_layout(channel_block(pad_in.channels, lanes))):
            pad_in = None
        if attrs.groups == 1:
            ic, oc = channel_block(c_in, lanes), channel_block(c_out, lanes)
            logged = None
            if te_dispatch.current_dispatchers():
                logged = _tvm_blocks_in_log(attrs, data, weight)
                ic, oc = logged or (ic, oc)
            elif data.shape[2] * data.shape[3] > 1:
                # (over one pixel, a squeeze-excitation's fc, the weights bind, not the lanes)
                padded = conv_padded_channels(c_out, lanes)
            extra_in = 0
            if pad_in is not None and _reads_padded(pad_in.channels - c_in, c_in, weight.shape):
                ic, data_expr = channel_block(pad_in.channels, lanes), pad_in.expr
                extra_in = pad_in.channels - c_in
                weight_expr = K.nn.pad(weight_expr, ((0, 0), (0, extra_in), (0, 0), (0, 0)))
            out_bn = oc if padded == c_out else channel_block(padded, lanes)
            name, kernel_layout = "nn.contrib_conv2d_NCHWc", f"OIHW{ic}i{out_bn}o"
            wino = None if logged else _winograd_weight(prop, call, attrs, data, weight, ic,
                                                        (padded - c_out, extra_in), out_bn)
            if wino is not None:
                tile, wino_weight = wino
                if data_expr is None:
                    data_expr = prop.convert(call.args[0], "NCHW", blocked_layout(ic))
                computed = blocked_layout(out_bn)
                new = make_call("nn.contrib_conv2d_winograd_NCHWc", [data_expr, wino_weight],
                                WinogradAttrs(tile_size=tile, padding=attrs.padding,
                                              channels=padded, data_layout=blocked_layout(ic),
                                              out_layout=computed, out_dtype=attrs.out_dtype),
                                source_names=call.source_names)
                return _conv_result(new, computed, padded, c_out, oc, lanes)
        elif attrs.groups == c_in == c_out and weight.shape[1] == 1:
            ic = oc = out_bn = channel_block(c_out, lanes)
            if pad_in is not None:
                padded, data_expr = pad_in.channels, pad_in.expr
                ic = oc = out_bn = channel_block(padded, lanes)
            name, kernel_layout = "nn.contrib_depthwise_conv2d_NCHWc", f"OIHW1i{oc}o"
        elif not te_dispatch.current_dispatchers() and weight.shape[1] > 1:
            # blocks inside the groups; a log's tasks are TVM's NCHW group_conv2d
            ic = channel_block(c_in // attrs.groups, lanes)
            oc = out_bn = channel_block(c_out // attrs.groups, lanes)
            name, kernel_layout = "nn.contrib_conv2d_NCHWc", f"OIHW{ic}i{oc}o"
        else:
            return None
        if padded != c_out:  # zero filters, packed once at build time (a constant weight)
            weight_expr = K.nn.pad(weight_expr, ((0, padded - c_out), (0, 0), (0, 0), (0, 0)))
        computed = blocked_layout(out_bn)
        new_attrs = attrs.replace(channels=padded, kernel_size=tuple(weight.shape[2:]),
                                  data_layout=blocked_layout(ic), kernel_layout=kernel_layout,
                                  out_layout=computed)
        if attrs.groups != 1 and padded != c_out:  # a depthwise convolution of a padded input
            new_attrs = new_attrs.replace(groups=padded)
        packed = K.layout_transform(weight_expr, "OIHW", kernel_layout)
        if data_expr is None:
            data_expr = prop.convert(call.args[0], "NCHW", blocked_layout(ic))
        new = make_call(name, [data_expr, packed], new_attrs, source_names=call.source_names)
        return _conv_result(new, computed, padded, c_out, oc, lanes)

    return rule


def _conv_result(new: Call, computed: str, padded: int, c_out: int, oc: int, lanes: int) -> Held:
    """A rewritten convolution's value: blocked by ``oc``, or kept padded to ``padded`` channels
    (computed in ``computed``), the real ones blocks sliced out of it."""
    if padded != c_out:
        exact = blocked_layout(channel_block(c_out, lanes))
        return padded_held(Padded(new, computed, padded), c_out, exact)
    return Held(new, "NCHW", blocked_layout(oc))


def _winograd_weight(prop: LayoutRewriter, call: Call, attrs: Any, data: TensorType,
                     weight: TensorType, ic: int, extra: tuple[int, int],
                     out_bn: int) -> tuple[int, Constant] | None:
    """The tile size and the transformed filters when a convolution runs faster as Winograd
    ``F(m x m, 3 x 3)`` (:func:`~kiln.te.templates.winograd.winograd_tile`): 3x3, stride 1,
    dilation 1, float32, a constant weight; else None. ``extra`` are the zero filters and zero
    input channels the weight gets (a padded output, a padded input)."""
    const = prop.primal(call.args[1])
    if (not isinstance(const, Constant) or tuple(weight.shape[2:]) != (3, 3)
            or tuple(attrs.strides) != (1, 1) or tuple(attrs.dilation) != (1, 1)
            or data.dtype != "float32" or attrs.out_dtype not in ("", "float32")):
        return None
    out_type = call.checked_type
    assert isinstance(out_type, TensorType)
    oh, ow = out_type.shape[2:]
    c_out, c_in = weight.shape[:2]
    tile = winograd_tile(c_in + extra[1], c_out + extra[0], oh, ow, ic)
    if tile is None:
        return None
    filters = np.pad(const.value, ((0, extra[0]), (0, extra[1]), (0, 0), (0, 0)))
    return tile, Constant(winograd_weight(filters, tile, out_bn))


def _tvm_blocks_in_log(attrs: Any, data: TensorType,
                       weight: TensorType) -> tuple[int, int] | None:
    """The blocks of TVM's layout of this convolution when the entered log has its task, else
    None."""
    c_in, c_out = data.shape[1], weight.shape[0]
    seen: set[tuple[int, int]] = set()
    for lanes in TVM_LANES:
        ic, oc = tvm_conv_blocks(c_in, c_out, lanes)
        if (ic, oc) in seen:
            continue
        seen.add((ic, oc))
        n, _, h, w = data.shape
        kh, kw = weight.shape[2:]
        new_attrs = attrs.replace(channels=c_out, kernel_size=(kh, kw),
                                  data_layout=blocked_layout(ic), kernel_layout=f"OIHW{ic}i{oc}o",
                                  out_layout=blocked_layout(oc))
        types = [TensorType((n, c_in // ic, h, w, ic), data.dtype),
                 TensorType((c_out // oc, c_in // ic, kh, kw, ic, oc), weight.dtype)]
        if log_has_task(tvm_task_dags("nn.contrib_conv2d_NCHWc", new_attrs, types), "conv2d_NCHWc"):
            return ic, oc
    return None


def dense_padded_units(units: int, lanes: int) -> int:
    """Output columns a packed dense computes: ``units``, or, when ``units`` (more than ``lanes``)
    has no divisor of at least 4 up to ``2 * lanes`` (a prime such as a 97-class head, whose
    panels would be 1 column wide and run at a few GFLOP/s), the next multiple of ``lanes``.

    Examples
    --------
    >>> dense_padded_units(97, 16), dense_padded_units(1000, 16), dense_padded_units(7, 8)
    (112, 1000, 7)
    """
    if units <= lanes or dense_block(units, lanes) >= 4:
        return units
    return -(-units // lanes) * lanes


def _dense_rule(target: Target) -> Rule:
    def rule(prop: LayoutRewriter, call: Call) -> Held | None:
        """``dense(x, W)`` -> ``contrib_dense_pack(x, layout_transform(W, "NC", "NC{n}n"))``."""
        data, weight = prop.tensor(call.args[0]), prop.tensor(call.args[1])
        if (not isinstance(call.args[1], Constant) or data is None or weight is None
                or data.ndim != 2 or not is_float(data.dtype)):
            return None
        units = weight.shape[0]
        if te_dispatch.current_dispatchers() and log_has_task(
                tvm_task_dags("nn.dense", call.attrs, [data, weight]), "dense"):
            return None  # the log tunes TVM's unpacked dense (T_matmul_NT)
        lanes = target.vector_width(data.dtype)
        padded = dense_padded_units(units, lanes)
        panel = (stream_panel(padded, data.shape[0], lanes, target.vector_width("int8"))
                 or dense_block(padded, lanes))
        weight_expr: Expr = call.args[1]
        if padded != units:  # zero rows up to whole panels; the result is sliced back
            weight_expr = K.nn.pad(weight_expr, ((0, padded - units), (0, 0)))
        layout = f"NC{panel}n"
        packed = K.layout_transform(weight_expr, "NC", layout)
        attrs = DensePackAttrs(units=padded, out_dtype=call_attrs(call).out_dtype,
                               weight_layout=layout)
        new = make_call("nn.contrib_dense_pack", [prop.primal(call.args[0]), packed], attrs,
                        source_names=call.source_names)
        if padded != units:
            new = K.strided_slice(new, begin=(0, 0), end=(data.shape[0], units))
        return Held(new)

    return rule


def _pool2d_rule(target: Target) -> Rule:
    follow = follow_rules()["pool"]

    def rule(prop: LayoutRewriter, call: Call) -> Held | None:
        """A pool of a blocked value runs blocked (as every layout-following op); a pool of an
        ``NCHW`` value is blocked too when the channel block is a vector of at least 4 lanes."""
        held = follow(prop, call)
        if held is not None or te_dispatch.current_dispatchers():
            return held
        attrs, data = call_attrs(call), prop.tensor(call.args[0])
        if (data is None or attrs.layout != "NCHW" or attrs.out_layout not in ("", "NCHW")
                or not is_float(data.dtype)):
            return None
        block = channel_block(data.shape[1], target.vector_width(data.dtype))
        if block < 4 or block & (block - 1):
            return None
        new = prop.recall(call, [prop.convert(call.args[0], "NCHW", blocked_layout(block))],
                          attrs.replace(layout=blocked_layout(block), out_layout=""))
        return Held(new, "NCHW", blocked_layout(block))

    return rule


def _rules(target: Target) -> dict[str, Rule]:
    """Kiln's rules, replaced per operator by the hooks users registered
    (``relay.op.register_alter_op_layout``, ``TempOpAttr(op, "FTVMAlterOpLayout", fn)``)."""
    return {
        "nn.conv2d": _conv2d_rule(target),  # conv2d(x, w) -> conv2d_NCHWc(x{ic}, w'){oc}
        "nn.dense": _dense_rule(target),  # dense(x, W) -> dense_pack(x, W')
        # pool(x) -> pool(x{c}){c}: the windows of a channel block are vectors
        "nn.max_pool2d": _pool2d_rule(target), "nn.avg_pool2d": _pool2d_rule(target),
        **user_hooks("FTVMAlterOpLayout"),
    }


def alter_op_layout(fn: Function, target: Target | None = None) -> Function:
    """Blocked convolutions, packed dense and layout propagation in one function.

    Parameters
    ----------
    fn : Function
        A typed function (not modified); run ``InferType`` first.
    target : Target, optional
        Target whose vector width sets the blocks (default: the current target, else ``"c"``,
        this machine).

    Returns
    -------
    Function
        The rewritten function (untyped; ``fn`` itself when nothing applies).
    """
    tgt = target or Target.current() or Target("c")
    return LayoutRewriter(_rules(tgt)).run(fn)


def _skipped(fn: Function) -> bool:
    return any(fn.attrs.get(key) for key in ("Primitive", "Compiler", "SkipOptimization"))


def AlterOpLayout() -> ModulePass:
    """The AlterOpLayout pass (opt level 3): NCHW{c} convolutions and packed dense for the CPU.

    The vector width comes from ``Target.current()`` (``relay.build`` enters the build's target;
    without one, this machine's). Follow it with ``FoldConstant`` so weight layout transforms are
    computed at build time, as ``relay.build`` does for the C target.

    Returns
    -------
    ModulePass
        Rewrites every function except fused and externally compiled ones.

    Examples
    --------
    >>> with Target("llvm -mcpu=haswell"), PassContext(opt_level=3):  # doctest: +SKIP
    ...     mod = Sequential([AlterOpLayout(), FoldConstant()])(mod)
    """

    def run(mod: IRModule, ctx: PassContext) -> IRModule:
        typed = infer_type(mod)
        rules: dict[str, Rule] | None = None
        out = typed.copy()
        for gv, fn in typed.items():
            if _skipped(fn):
                continue
            rules = rules or _rules(Target.current() or Target("c"))
            out[gv] = LayoutRewriter(rules).run(fn)
        return infer_type(out)

    return ModulePass(run, PassInfo(3, "AlterOpLayout", ("InferType",)))
