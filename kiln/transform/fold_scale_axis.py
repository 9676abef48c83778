"""FoldScaleAxis: fold per-channel multiplies into conv2d/conv3d/dense weights (TVM's pass).

After SimplifyInference and FoldConstant a batch norm is ``x * scale + shift`` with constant
per-channel ``scale``; this pass moves such multiplies into the weights of the neighbouring
convolution or dense layer, where FoldConstant then pre-multiplies them, so the scale costs
nothing at run time.

**Backward** (``conv(x, w) * s`` with ``s`` varying along the output channels only): the multiply
disappears and the weight becomes ``w * s`` along its ``O`` axis. The scale may cross
``bias_add``/``add``/``subtract`` of per-channel terms (which get multiplied by ``s`` too) and
``relu``/``leaky_relu`` when ``s`` is a non-negative constant. A node only passes a scale down when
it has a single user.

**Forward** (``conv(x * s, w)`` with ``s`` varying along the input channels only): the multiply
disappears and the weight becomes ``w * s`` along its ``I`` axis (``O`` for depthwise), crossing
``relu`` (non-negative constants only) and per-channel ``add``/``subtract`` (whose term is divided
by ``s``). Every user of the scaled value must be able to take the scale.

A scale computed at run time (it reads a function parameter: an SE gate, a GRU reset gate) is
folded only into weights with no more elements than the value it scales, since the weights are
then rescaled (and repacked) at every run: an SE gate on a 104 x 14 x 14 activation moves onto
the 104 x 104 weight after it, a GRU gate on a (1, 128) step output stays where it is.

Both directions follow TVM's message passing: a preparation walk computes, for every node, along
which axes a scale could be absorbed (and whether it must be non-negative), then a rewrite walk
moves the scales. Plain layouts (``NCHW``/``NHWC``, ``OIHW``/``HWIO``, ...) and blocked ones
whose data, output and kernel are all blocked (``NCHW2c``/``OIHW2i4o``: the scale runs along the
pair of channel axes and is reshaped onto the weight's ``I``/``i`` or ``O``/``o`` axes), with full
or depthwise convolutions, are handled, as in TVM.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import kiln.op as K
from kiln.ir.expr import Call, Expr, Function, If, Let, Op, Tuple, Var
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.ir.visitor import children, post_order, rebuild, rewrite
from kiln.op.registry import get_op_def
from kiln.transform.fold_constant import FoldConstant
from kiln.transform.pass_infra import FunctionPass, PassContext, PassInfo, Sequential
from kiln.transform.pattern_utils import (
    expand_bias_to_match_axis,
    is_all_positive_constant,
    match_broadcast_to_left_axes,
    squeeze_to_axes,
)
from kiln.transform.rewrite import call_attrs, ensure_types, op_name, tensor_type

__all__ = [
    "BackwardFoldScaleAxis",
    "FoldScaleAxis",
    "ForwardFoldScaleAxis",
    "backward_fold_scale_axis",
    "forward_fold_scale_axis",
]



def _kind(expr: Expr) -> str:
    """The FoldScaleAxis role of a call's operator (``OpDef.fold_scale``; ``""`` for others)."""
    name = op_name(expr)
    return get_op_def(name).fold_scale if name is not None else ""


@dataclass(frozen=True)
class Message:
    """Axes along which a node's value may be scaled, and whether the scale must be >= 0."""

    axes: tuple[int, ...]
    require_positive: bool


def _intersect(a: Message | None, b: Message | None) -> Message | None:
    if a is None or b is None:
        return None
    axes = tuple(sorted(set(a.axes) & set(b.axes)))
    return Message(axes, a.require_positive or b.require_positive) if axes else None


def _ttype(expr: Expr) -> TensorType:
    ty = tensor_type(expr)
    assert ty is not None, f"{expr._short()} is not a tensor"
    return ty


def _elements(expr: Expr) -> int:
    return math.prod(_ttype(expr).shape)


def _costs_more(scale: Expr, weight_elements: int, scaled: Expr) -> bool:
    """Whether folding ``scale`` into weights of ``weight_elements`` elements costs more than the
    multiply of ``scaled`` it removes: a scale computed at run time (it reads a parameter: an SE
    gate, a GRU reset gate) scales the weights at every run, so it is folded only into weights
    no larger than the scaled value. Constant scales fold at build time, for free."""
    runtime = any(isinstance(n, Var) for n in post_order(scale, into_functions=False))
    return runtime and weight_elements > _elements(scaled)


def _merge_names(*groups: tuple[str, ...]) -> tuple[str, ...]:
    names: list[str] = []
    for group in groups:
        names.extend(n for n in group if n not in names)
    return tuple(names)


def _with(call: Call, args: Sequence[Expr], names: tuple[str, ...] | None = None) -> Call:
    return Call(call.op, args, call.attrs, source_names=call.source_names if names is None else names)


def _reshape_or_expand(scale: Expr, shape: tuple[int, ...], axes: tuple[int, ...]) -> Expr:
    """A per-axis scale (one dim per axis) made to broadcast against a tensor of ``shape``."""
    if len(axes) > 1:
        return K.reshape(scale, [shape[i] if i in axes else 1 for i in range(len(shape))])
    return expand_bias_to_match_axis(scale, len(shape), axes)


# --- convolution layouts ----------------------------------------------------------------------

@dataclass(frozen=True)
class _ConvAxes:
    data_c: tuple[int, ...]  # channel axes of the data (C, and c when blocked)
    out_c: tuple[int, ...]  # channel axes of the output
    kernel_o: tuple[int, ...]  # output-channel axes of the weight (O, and o when blocked)
    kernel_i: tuple[int, ...]  # input-channel axes of the weight
    kernel_ndim: int
    depthwise: bool


def _letter_axes(layout: str, letter: str) -> tuple[int, ...]:
    """Positions of ``letter`` and of its block (``c`` of ``C``) in ``layout`` (``NCHW8c``)."""
    positions, i = [], 0
    for char in layout:
        if char.isdigit():
            continue
        if char in (letter, letter.lower()):
            positions.append(i)
        i += 1
    return tuple(positions)


def _conv_axes(call: Call) -> _ConvAxes | None:
    """Channel axes of a full or depthwise convolution in a plain layout (``NCHW``/``OIHW``) or a
    blocked one whose data, output and kernel are all blocked (``NCHW2c``/``OIHW2i4o``), as TVM
    folds them; else ``None``."""
    attrs = call_attrs(call)
    data_layout, kernel_layout = attrs.data_layout, attrs.kernel_layout
    out_layout = attrs.out_layout or data_layout
    data_c, out_c = _letter_axes(data_layout, "C"), _letter_axes(out_layout, "C")
    o, i = _letter_axes(kernel_layout, "O"), _letter_axes(kernel_layout, "I")
    if not data_c or not out_c or not o or not i:
        return None
    blocked = [len(a) == 2 for a in (data_c, out_c, o, i)]
    if any(blocked) and not all(blocked):
        return None
    weight = _ttype(call.args[1])
    ndim = weight.ndim
    kernel_letters = "".join(c for c in kernel_layout if not c.isdigit())
    if len(kernel_letters) != ndim or kernel_letters[o[0]] != "O" or kernel_letters[i[0]] != "I":
        return None
    o_total = 1
    for k in o:
        o_total *= weight.shape[k]
    i_total = 1
    for k in i:
        i_total *= weight.shape[k]
    depthwise = o_total == attrs.groups and i_total == 1  # TVM's IsDepthwiseConv (OIHW shape)
    if attrs.groups != 1 and not depthwise:
        return None
    return _ConvAxes(data_c, out_c, o, i, ndim, depthwise)


def _scale_weight(weight: Expr, scale: Expr, weight_type: TensorType, axes: tuple[int, ...]) -> Expr:
    """``weight * scale`` along ``axes``: expanded for one axis, reshaped for a blocked pair."""
    if len(axes) == 1:
        return K.multiply(weight, expand_bias_to_match_axis(scale, weight_type.ndim, list(axes)))
    shape = [d if k in axes else 1 for k, d in enumerate(weight_type.shape)]
    return K.multiply(weight, K.reshape(scale, shape))


# --- forward folding ----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Scaled:
    """A value still to be multiplied by ``scale`` (one dim per axis) along ``axes``."""

    value: Expr
    axes: tuple[int, ...]
    scale: Expr
    names: tuple[str, ...]

    def realize(self) -> Expr:
        shape = _ttype(self.value).shape
        return K.multiply(self.value, _reshape_or_expand(self.scale, shape, self.axes))


Value = Expr | _Scaled


def _forward_prep(call: Call, out: Message | None) -> list[Message | None]:
    """Messages a call sends to its arguments (TVM's ``FScaleAxisForwardPrep``)."""
    kind = _kind(call)
    none: list[Message | None] = [None] * len(call.args)
    if kind == "activation":
        return [Message(out.axes, True) if out is not None else None]
    if kind == "add" and out is not None:
        lhs, rhs = _ttype(call.args[0]), _ttype(call.args[1])
        if match_broadcast_to_left_axes(lhs, rhs, out.axes):
            return [out, None]
        if match_broadcast_to_left_axes(rhs, lhs, out.axes):
            return [None, out]
    if kind == "conv":
        axes = _conv_axes(call)
        if axes is not None:
            return [Message(axes.data_c, False), None]
    if kind == "dense":
        return [Message((1,), False), None]
    return none


def _forward_messages(fn: Expr) -> dict[int, Message]:
    """For every node: the scaling axes all of its users accept (consumers first)."""
    received: dict[int, Message | None] = {}

    def send(node: Expr, msg: Message | None) -> None:
        key = id(node)
        received[key] = _intersect(received[key], msg) if key in received else msg

    order = post_order(fn, into_functions=False)
    for node in reversed(order):
        if isinstance(node, Function):
            send(node.body, None)
        elif isinstance(node, Call):
            out = received.get(id(node))
            msgs = _forward_prep(node, out) if isinstance(node.op, Op) else [None] * len(node.args)
            for arg, msg in zip(node.args, msgs):
                send(arg, msg)
        elif isinstance(node, (Tuple, If, Let)):
            for c in children(node):
                send(c, None)
    return {k: m for k, m in received.items() if m is not None}


class _ForwardFolder:
    def __init__(self, fn: Function):
        self.fn = fn
        self.messages = _forward_messages(fn)

    def run(self) -> Expr:
        if not self.messages:
            return self.fn
        values: dict[int, Value] = {}
        for node in post_order(self.fn, into_functions=False):
            if isinstance(node, Function) and node is not self.fn:
                values[id(node)] = node
                continue
            new_kids = [values.get(id(c), c) for c in children(node)]
            out: Value | None = None
            if isinstance(node, Call) and isinstance(node.op, Op):
                out = self.rewrite_call(node, new_kids)
            if out is None:
                out = rebuild(node, tuple(self.realize(k) for k in new_kids))
            if isinstance(out, Expr):
                ensure_types(out)
            else:
                ensure_types(out.value)
                ensure_types(out.scale)
            values[id(node)] = out
        result = values[id(self.fn)]
        assert isinstance(result, Expr)
        return result

    @staticmethod
    def realize(value: Value) -> Expr:
        return value.realize() if isinstance(value, _Scaled) else value

    def rewrite_call(self, call: Call, args: list[Value]) -> Value | None:
        kind = _kind(call)
        if kind == "multiply":
            return self.multiply(call, args)
        scaled = [a for a in args if isinstance(a, _Scaled)]
        if not scaled:
            return None
        if kind == "activation":
            s = args[0]
            assert isinstance(s, _Scaled)
            return _Scaled(_with(call, [s.value]), s.axes, s.scale, s.names)
        if kind == "add":
            return self.add_sub(call, args)
        if kind == "conv":
            return self.conv(call, args)
        if kind == "dense":
            return self.dense(call, args)
        return None

    def multiply(self, call: Call, args: list[Value]) -> Value | None:
        """``x * s`` sent to users that take a scale along the axes: a pending scale."""
        msg = self.messages.get(id(call))
        if msg is None or any(isinstance(a, _Scaled) for a in args):
            return None
        lhs, rhs = _ttype(call.args[0]), _ttype(call.args[1])
        for i in (1, 0):
            data_t, scale_t = (lhs, rhs) if i == 1 else (rhs, lhs)
            data, scale = args[1 - i], args[i]
            assert isinstance(data, Expr) and isinstance(scale, Expr)
            if not match_broadcast_to_left_axes(data_t, scale_t, msg.axes, allow_scalar=True):
                continue
            squeezed = squeeze_to_axes(scale, data_t, scale_t, msg.axes)
            if msg.require_positive and not is_all_positive_constant(squeezed):
                continue
            return _Scaled(data, msg.axes, ensure_types(squeezed), call.source_names)
        return None

    @staticmethod
    def add_sub(call: Call, args: list[Value]) -> Value | None:
        """``(x * s) + b -> (x + b / s) * s``."""
        lhs, rhs = args
        if isinstance(lhs, _Scaled) and isinstance(rhs, Expr):
            scale = _reshape_or_expand(lhs.scale, _ttype(call.args[0]).shape, lhs.axes)
            return _Scaled(_with(call, [lhs.value, K.divide(rhs, scale)]), lhs.axes, lhs.scale,
                           lhs.names)
        if isinstance(rhs, _Scaled) and isinstance(lhs, Expr):
            scale = _reshape_or_expand(rhs.scale, _ttype(call.args[1]).shape, rhs.axes)
            return _Scaled(_with(call, [K.divide(lhs, scale), rhs.value]), rhs.axes, rhs.scale,
                           rhs.names)
        return None

    @staticmethod
    def conv(call: Call, args: list[Value]) -> Expr | None:
        """``conv(x * s, w) -> conv(x, w * s)`` along the weight's input channels."""
        data, weight = args
        axes = _conv_axes(call)
        if not isinstance(data, _Scaled) or isinstance(weight, _Scaled) or axes is None:
            return None
        if _costs_more(data.scale, _elements(call.args[1]), call.args[0]):
            return None
        kernel_axes = axes.kernel_o if axes.depthwise else axes.kernel_i
        new_weight = _scale_weight(weight, data.scale, _ttype(call.args[1]), kernel_axes)
        return _with(call, [data.value, new_weight], _merge_names(data.names, call.source_names))

    @staticmethod
    def dense(call: Call, args: list[Value]) -> Expr | None:
        """``dense(x * s, w) -> dense(x, w * s)``."""
        data, weight = args
        if not isinstance(data, _Scaled) or isinstance(weight, _Scaled) \
                or _costs_more(data.scale, _elements(call.args[1]), call.args[0]):
            return None
        names = _merge_names(data.names, call.source_names)
        return _with(call, [data.value, K.multiply(weight, data.scale)], names)


# --- backward folding ---------------------------------------------------------------------------

def _use_counts(fn: Function) -> dict[int, int]:
    counts: dict[int, int] = {}
    for node in post_order(fn, into_functions=False):
        for c in children(node):
            counts[id(c)] = counts.get(id(c), 0) + 1
    return counts


def _backward_prep(call: Call, ins: list[Message | None]) -> Message | None:
    """The scaling axes a call's output may absorb (TVM's ``FScaleAxisBackwardPrep``)."""
    kind = _kind(call)
    if kind == "activation":
        return Message(ins[0].axes, True) if ins[0] is not None else None
    if kind == "add":
        lhs, rhs = _ttype(call.args[0]), _ttype(call.args[1])
        if ins[0] is not None and match_broadcast_to_left_axes(lhs, rhs, ins[0].axes):
            return ins[0]
        if ins[1] is not None and match_broadcast_to_left_axes(rhs, lhs, ins[1].axes):
            return ins[1]
        if ins[0] is not None and ins[1] is not None and ins[0].axes == ins[1].axes and \
                lhs.shape == rhs.shape:
            return ins[0]
        return None
    if kind == "conv":
        axes = _conv_axes(call)
        return Message(axes.out_c, False) if axes is not None else None
    if kind == "bias_add":
        ndim = _ttype(call.args[0]).ndim
        if ins[0] is not None and ins[0].axes == (call_attrs(call).axis % ndim,):
            return ins[0]
        return None
    if kind == "dense":
        return Message((1,), False)
    return None


def _backward_messages(fn: Function) -> dict[int, Message]:
    uses = _use_counts(fn)
    messages: dict[int, Message] = {}
    for node in post_order(fn, into_functions=False):
        if not isinstance(node, Call) or not isinstance(node.op, Op) or uses.get(id(node)) != 1:
            continue
        msg = _backward_prep(node, [messages.get(id(a)) for a in node.args])
        if msg is not None:
            messages[id(node)] = msg
    return messages


class _BackwardFolder:
    def __init__(self, fn: Function):
        self.fn = fn
        self.messages = _backward_messages(fn)
        self.memo: dict[int, Expr] = {}

    def run(self) -> Expr:
        if not self.messages:
            return self.fn
        return rewrite(self.fn, self.visit, into_functions=False, memo=self.memo)

    def visit(self, new: Expr, old: Expr) -> Expr | None:
        if _kind(old) != "multiply":
            return None
        assert isinstance(old, Call)
        for i in (0, 1):
            data, scale = old.args[i], old.args[1 - i]
            msg = self.messages.get(id(data))
            if msg is None:
                continue
            data_t, scale_t = _ttype(data), _ttype(scale)
            if not match_broadcast_to_left_axes(data_t, scale_t, msg.axes, allow_scalar=True):
                return None
            squeezed = ensure_types(squeeze_to_axes(self.memo[id(scale)], data_t, scale_t, msg.axes))
            if msg.require_positive and not is_all_positive_constant(squeezed):
                return None
            if _costs_more(squeezed, self.weight_elements(data), old):
                return None
            return self.absorb(data, msg, squeezed, old)
        return None

    def scaled_args(self, node: Call) -> list[Expr]:
        """Arguments of a node on the scale's path that take the scale too."""
        kind = _kind(node)
        if kind == "activation" or kind == "bias_add":
            return [node.args[0]]
        if kind == "add":
            with_msg = [a for a in node.args if id(a) in self.messages]
            return with_msg
        return []

    def weight_elements(self, root: Expr) -> int:
        """Elements of the conv/dense weights a scale on ``root`` would be folded into."""
        total, stack = 0, [root]
        while stack:
            node = stack.pop()
            assert isinstance(node, Call)
            if _kind(node) in ("conv", "dense"):
                total += _elements(node.args[1])
            else:
                stack.extend(self.scaled_args(node))
        return total

    def absorb(self, root: Expr, msg: Message, scale: Expr, multiply: Call) -> Expr:
        """``root`` (which had a single user, ``multiply``) rebuilt to include ``* scale``."""
        order: list[Expr] = []
        stack: list[tuple[Expr, bool]] = [(root, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            stack.append((node, True))
            assert isinstance(node, Call)
            stack.extend((a, False) for a in self.scaled_args(node))
        built: dict[int, Expr] = {}
        for node in order:
            assert isinstance(node, Call)
            built[id(node)] = ensure_types(self.transform(node, msg, scale, built, multiply))
        return built[id(root)]

    def transform(self, node: Call, msg: Message, scale: Expr, built: dict[int, Expr],
                  multiply: Call) -> Expr:
        kind = _kind(node)

        def arg(i: int) -> Expr:
            a = node.args[i]
            return built.get(id(a)) or self.memo[id(a)]

        if kind == "activation":
            return _with(node, [arg(0)])
        if kind == "bias_add":
            return _with(node, [arg(0), K.multiply(arg(1), scale)])
        if kind == "add":
            lhs, rhs = arg(0), arg(1)
            if id(node.args[0]) not in built:
                lhs = K.multiply(lhs, _reshape_or_expand(scale, _ttype(node.args[1]).shape, msg.axes))
            if id(node.args[1]) not in built:
                rhs = K.multiply(rhs, _reshape_or_expand(scale, _ttype(node.args[0]).shape, msg.axes))
            return _with(node, [lhs, rhs])
        names = _merge_names(node.source_names, multiply.source_names)
        if kind == "conv":
            axes = _conv_axes(node)
            assert axes is not None
            weight = _scale_weight(arg(1), scale, _ttype(node.args[1]), axes.kernel_o)
            return _with(node, [arg(0), weight], names)
        assert kind == "dense", f"no backward scale folding for {op_name(node)}"
        return _with(node, [arg(0), _scale_weight(arg(1), scale, _ttype(node.args[1]), (0,))],
                     names)


# --- passes -------------------------------------------------------------------------------------

def forward_fold_scale_axis(fn: Function) -> Function:
    """Fold multiplies feeding conv/dense data into their weights (``fn`` is not modified)."""
    ensure_types(fn)
    out = _ForwardFolder(fn).run()
    assert isinstance(out, Function)
    return out


def backward_fold_scale_axis(fn: Function) -> Function:
    """Fold multiplies of conv/dense outputs into their weights (``fn`` is not modified)."""
    ensure_types(fn)
    out = _BackwardFolder(fn).run()
    assert isinstance(out, Function)
    return out


def _function_pass(fold: Callable[[Function], Function], name: str) -> FunctionPass:
    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        return fold(fn)

    return FunctionPass(run, PassInfo(3, name, ("InferType",)))


def ForwardFoldScaleAxis() -> FunctionPass:
    """The forward scale-folding pass (opt level 3)."""
    return _function_pass(forward_fold_scale_axis, "ForwardFoldScaleAxis")


def BackwardFoldScaleAxis() -> FunctionPass:
    """The backward scale-folding pass (opt level 3)."""
    return _function_pass(backward_fold_scale_axis, "BackwardFoldScaleAxis")


def FoldScaleAxis() -> Sequential:
    """Backward then forward scale folding, then FoldConstant (TVM's ``FoldScaleAxis``)."""
    return Sequential([BackwardFoldScaleAxis(), ForwardFoldScaleAxis(), FoldConstant()],
                      opt_level=3, name="FoldScaleAxis")
