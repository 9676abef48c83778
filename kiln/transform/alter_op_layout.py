"""AlterOpLayout: blocked ``NCHW{c}c`` convolutions and packed dense for the CPU.

This is TVM's relay-era x86 ``AlterOpLayout`` with its default (untuned) schedule configuration,
reading the vector width of ``Target.current()``:

- ``nn.conv2d`` in ``NCHW``/``OIHW`` with ``groups == 1`` becomes
  ``nn.contrib_conv2d_NCHWc(layout_transform(data, "NCHW", "NCHW{ic}c"),
  layout_transform(weight, "OIHW", "OIHW{ic}i{oc}o"))`` with ``out_layout="NCHW{oc}c"``;
- a depthwise ``nn.conv2d`` (``groups == C_in == C_out``) becomes
  ``nn.contrib_depthwise_conv2d_NCHWc`` with kernel layout ``OIHW1i{c}o`` and ``ic == oc``;
- ``nn.dense`` of 2-d data with a constant weight ``(N, K)`` becomes ``nn.contrib_dense_pack``
  with the weight ``layout_transform(weight, "NC", "NC{n}n")``.

Weight transforms are constant subgraphs: the build's next ``FoldConstant`` packs the weights
once, at build time. Blocked results are carried through the layout-agnostic operators by
:mod:`kiln.transform.layout_propagation`, so activations stay blocked between convolutions and
``layout_transform`` back to ``NCHW`` appears only in front of the consumers that need it. The
function's parameters and results keep their layouts.

Block sizes (``L`` = lanes of the dtype in one vector register, :meth:`Target.vector_width`):

- convolutions (:func:`channel_block`): the largest power of two dividing the channel count and
  at most ``L``; when that is 1, the largest divisor at most ``L`` (the 3-channel stem gets 3);
- dense (:func:`dense_block`): the largest multiple of ``L`` up to ``2 L`` dividing ``N`` (a
  16-column panel on AVX2), else the largest power of two from 4 up to ``2 L`` dividing ``N``, else
  the largest divisor of ``N`` up to ``2 L`` (TVM's rule: ``N = 10`` at 4 lanes gives 5).

Left alone: grouped convolutions that are not depthwise, depthwise multipliers above 1,
convolutions in other layouts (``NHWC``/``HWIO``: run :mod:`~kiln.transform.convert_layout`
first; changing them here would also change what TVM's x86 rules produce), integer convolutions
(TVM packs those for VNNI instead), ``nn.matmul``/``nn.batch_matmul`` (no packed variant), and
dense with a weight that is not a constant.
"""

from __future__ import annotations

import kiln.op as K
from kiln.ir.expr import Call, Constant, Function
from kiln.ir.module import IRModule
from kiln.ir.types import is_float
from kiln.op.nn_pack import DensePackAttrs
from kiln.op.registry import make_call
from kiln.target import Target
from kiln.transform.infer_type import infer_type
from kiln.transform.layout_propagation import (
    LayoutPropagator,
    LayoutRule,
    Value,
    blocked_layout,
    propagation_rules,
)
from kiln.transform.pass_infra import ModulePass, PassContext, PassInfo

__all__ = ["AlterOpLayout", "alter_op_layout", "channel_block", "dense_block"]


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


def _conv2d_rule(target: Target) -> LayoutRule:
    def rule(prop: LayoutPropagator, call: Call) -> Value | None:
        """``conv2d(x, w)`` -> ``contrib_conv2d_NCHWc(x{ic}, layout_transform(w)){oc}``."""
        attrs = call.attrs
        data, weight = prop.tensor(call.args[0]), prop.tensor(call.args[1])
        if (data is None or weight is None or attrs.data_layout != "NCHW"
                or attrs.kernel_layout != "OIHW" or attrs.out_layout not in ("", "NCHW")
                or not is_float(data.dtype) or data.dtype != weight.dtype):
            return None
        lanes = target.vector_width(data.dtype)
        c_in, c_out = data.shape[1], weight.shape[0]
        if attrs.groups == 1:
            ic, oc = channel_block(c_in, lanes), channel_block(c_out, lanes)
            name, kernel_layout = "nn.contrib_conv2d_NCHWc", f"OIHW{ic}i{oc}o"
        elif attrs.groups == c_in == c_out and weight.shape[1] == 1:
            ic = oc = channel_block(c_out, lanes)
            name, kernel_layout = "nn.contrib_depthwise_conv2d_NCHWc", f"OIHW1i{oc}o"
        else:
            return None
        new_attrs = attrs.replace(channels=c_out, kernel_size=tuple(weight.shape[2:]),
                                  data_layout=blocked_layout(ic), kernel_layout=kernel_layout,
                                  out_layout=blocked_layout(oc))
        packed = K.layout_transform(prop.primal(call.args[1]), "OIHW", kernel_layout)
        new = make_call(name, [prop.convert(call.args[0], ic), packed], new_attrs,
                        source_names=call.source_names)
        return Value(new, oc)

    return rule


def _dense_rule(target: Target) -> LayoutRule:
    def rule(prop: LayoutPropagator, call: Call) -> Value | None:
        """``dense(x, W)`` -> ``contrib_dense_pack(x, layout_transform(W, "NC", "NC{n}n"))``."""
        data, weight = prop.tensor(call.args[0]), prop.tensor(call.args[1])
        if (not isinstance(call.args[1], Constant) or data is None or weight is None
                or data.ndim != 2 or not is_float(data.dtype)):
            return None
        units = weight.shape[0]
        layout = f"NC{dense_block(units, target.vector_width(data.dtype))}n"
        packed = K.layout_transform(call.args[1], "NC", layout)
        attrs = DensePackAttrs(units=units, out_dtype=call.attrs.out_dtype, weight_layout=layout)
        new = make_call("nn.contrib_dense_pack", [prop.primal(call.args[0]), packed], attrs,
                        source_names=call.source_names)
        return Value(new)

    return rule


def _rules(target: Target) -> dict[str, LayoutRule]:
    rules = dict(propagation_rules())
    rules["nn.conv2d"] = _conv2d_rule(target)  # conv2d(x, w) -> conv2d_NCHWc(x{ic}, w'){oc}
    rules["nn.dense"] = _dense_rule(target)  # dense(x, W) -> dense_pack(x, W')
    return rules


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
    return LayoutPropagator(_rules(tgt)).run(fn)


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
        rules: dict[str, LayoutRule] | None = None
        out = typed.copy()
        for gv, fn in typed.items():
            if _skipped(fn):
                continue
            rules = rules or _rules(Target.current() or Target("c"))
            out[gv] = LayoutPropagator(rules).run(fn)
        return infer_type(out)

    return ModulePass(run, PassInfo(3, "AlterOpLayout", ("InferType",)))
