"""Carrying channel-blocked activations (``NCHW{c}c``) through a graph.

:mod:`kiln.transform.alter_op_layout` replaces convolutions by blocked ones whose inputs and
results are ``NCHW{c}c`` tensors. This module keeps such values blocked through the operators that
can consume them as they are, so consecutive convolutions exchange blocked tensors and layout
conversions happen only where a consumer needs the original layout (graph outputs, ``reshape``,
``batch_flatten``, ``softmax``, ...).

Every value of the rewritten graph is a :class:`Value` ``(expr, block)``:

- ``block == 0``: ``expr`` has the original value's layout and shape;
- ``block == b > 0``: the original value is a 4-d ``NCHW`` tensor ``(N, C, H, W)`` and ``expr``
  holds it as ``(N, C // b, H, W, b)``, channel ``c`` at ``[:, c // b, :, :, c % b]``. Blocks
  always divide ``C``, so blocked tensors carry no padding.

:class:`LayoutPropagator` walks the graph children-first and hands every operator call to its rule
(``rule(prop, call) -> Value | None``, looked up by operator name; ``call`` is the original, typed
call). A rule returning ``None`` gets the default: the call rebuilt on its arguments in their
original layouts. Converting a blocked value back (or to another block) inserts one
``layout_transform`` per producer and target block, shared by all consumers that need it.

The rules (one line each in :func:`propagation_rules`):

- element-wise unary ops (``nn.relu``, ``clip``, ``exp``, ``cast``, ...) keep the block;
- broadcasting ops (``add``, ``multiply``, ``maximum``, ``where``, ...) keep the block of a blocked
  operand; other operands are brought to the same block: per-channel ones (``(C, 1, 1)``,
  ``(1, C, 1, 1)``) by a ``reshape`` to ``(1, C // b, 1, 1, b)``, full tensors (residual adds) by
  a conversion, channel-less ones (``(1, 1, H, W)``) by a reshape to ``(1, 1, H, W, 1)``, scalars
  as they are;
- ``nn.bias_add`` on axis 1 becomes ``add`` of the bias reshaped to ``(1, C // b, 1, 1, b)``;
- 2-d pooling (max/avg, global, adaptive) in ``NCHW`` runs with ``layout="NCHW{b}c"``;
- ``nn.pad`` without channel padding pads the blocked tensor (no padding of the inner axis);
- ``concatenate`` keeps a block that divides every input's channels (converting the inputs not
  yet in it);
- ``nn.depth_to_space`` in ``DCR`` mode keeps a block that divides the result's channels;
- ``sum``/``mean``/``max``/``min``/``prod`` over spatial or batch axes keep the block
  (``keepdims``), or reshape the blocked result when both spatial axes are dropped.

Reductions over channels, softmax, reshapes, transposes and everything else take the original
layout.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import kiln.op as K
from kiln.ir.attrs import Attrs
from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, Op, Tuple, Var
from kiln.ir.types import TensorType
from kiln.ir.visitor import children, post_order, rebuild
from kiln.op.registry import OpPattern, all_ops

__all__ = [
    "LayoutPropagator",
    "LayoutRule",
    "Value",
    "blocked_layout",
    "propagation_rules",
]


def blocked_layout(block: int) -> str:
    """The layout name of a value with channel block ``block`` (``"NCHW"`` for 0).

    Parameters
    ----------
    block : int
        Channel block, 0 for the original layout.

    Returns
    -------
    str
        ``"NCHW{block}c"`` or ``"NCHW"``.
    """
    return f"NCHW{block}c" if block else "NCHW"


@dataclass(frozen=True)
class Value:
    """A rewritten value: its expression and its channel block (0: original layout)."""

    expr: Expr
    block: int = 0


LayoutRule = Callable[["LayoutPropagator", Call], Value | None]


class LayoutPropagator:
    """Rewrites a function with per-operator layout rules, converting layouts where needed.

    Parameters
    ----------
    rules : mapping of str to LayoutRule
        Rule per operator name; operators without one take their arguments in the original
        layout.

    Notes
    -----
    Calls created by rules get the source names of the call they replace (layout conversions:
    those of the value converted, or of the consumer when that value is a graph input), so
    provenance survives the rewrite.
    """

    def __init__(self, rules: Mapping[str, LayoutRule]):
        self.rules = rules
        self._values: dict[int, Value] = {}
        self._converted: dict[tuple[int, int], Expr] = {}
        self._tuples: dict[int, Expr] = {}
        self._named: set[int] = set()
        self._consumer_names: tuple[str, ...] = ()

    # --- the walk --------------------------------------------------------------------------------
    def run(self, fn: Function) -> Function:
        """``fn`` rewritten; its parameters and result keep their layouts.

        Parameters
        ----------
        fn : Function
            A typed function (not modified).

        Returns
        -------
        Function
            The rewritten function (``fn`` itself when nothing changed), untyped.
        """
        for node in post_order(fn.body, into_functions=False):
            self._visit(node)
        body = self.primal(fn.body)
        if body is fn.body:
            return fn
        return Function(fn.params, body, None, attrs=fn.attrs)

    def _visit(self, node: Expr) -> None:
        if isinstance(node, Tuple):
            return  # built on demand: concatenate may take its fields blocked
        if isinstance(node, (Var, Constant, Op, GlobalVar, Function)):
            self._values[id(node)] = Value(node)
            return
        value = None
        if isinstance(node, Call) and isinstance(node.op, Op):
            self._consumer_names = node.source_names
            rule = self.rules.get(node.op.name)
            value = rule(self, node) if rule is not None else None
        if value is None:
            value = Value(rebuild(node, tuple(self.primal(c) for c in children(node))))
        if isinstance(node, Call):
            self._name_new_calls(value.expr, node.source_names)
        self._values[id(node)] = value

    def _name_new_calls(self, expr: Expr, names: tuple[str, ...]) -> None:
        """Give calls built by a rule (not yet seen, without source names) ``names``.

        Such calls were created moments ago and nothing else holds them yet, so setting their
        names finishes their construction rather than changing a shared node.
        """
        stack = [expr]
        while stack:
            node = stack.pop()
            if id(node) in self._named or node.has_type:
                continue
            self._named.add(id(node))
            if isinstance(node, Call) and not node.source_names and names:
                object.__setattr__(node, "source_names", tuple(names))
            stack.extend(children(node))

    # --- queries for rules ---------------------------------------------------------------------
    def value(self, old: Expr) -> Value:
        """The rewritten value of an original node (tuples: in the original layout)."""
        if isinstance(old, Tuple):
            return Value(self.primal(old))
        return self._values.get(id(old)) or Value(old)

    def block_of(self, old: Expr) -> int:
        """The channel block of an original node's rewritten value (0: original layout)."""
        return 0 if isinstance(old, Tuple) else self.value(old).block

    @staticmethod
    def tensor(old: Expr) -> TensorType | None:
        """The (original) type of ``old`` when it is a tensor."""
        ty = old.checked_type
        return ty if isinstance(ty, TensorType) else None

    # --- conversions -----------------------------------------------------------------------------
    def primal(self, old: Expr) -> Expr:
        """The rewritten ``old`` in its original layout (converted back when it is blocked)."""
        if isinstance(old, Tuple):
            key = id(old)
            if key not in self._tuples:
                self._tuples[key] = rebuild(old, tuple(self.primal(f) for f in old.fields))
            return self._tuples[key]
        return self.convert(old, 0)

    def convert(self, old: Expr, block: int) -> Expr:
        """The rewritten ``old`` (a 4-d ``NCHW`` tensor when ``block`` > 0) with channel block
        ``block``; conversions are made once per value and block."""
        value = self.value(old)
        if value.block == block:
            return value.expr
        key = (id(old), block)
        if key not in self._converted:
            names = old.source_names if isinstance(old, Call) else ()
            out = K.layout_transform(value.expr, blocked_layout(value.block),
                                     blocked_layout(block))
            self._name_new_calls(out, names or self._consumer_names)
            self._converted[key] = out
        return self._converted[key]

    def operand(self, old: Expr, channels: int, block: int) -> Expr | None:
        """A broadcasting operand brought next to a 4-d result of ``channels`` channels held
        with channel block ``block``.

        Parameters
        ----------
        old : Expr
            The original operand (rank at most 4, broadcasting against the result).
        channels, block : int
            Channels of the 4-d result and its block.

        Returns
        -------
        Expr or None
            The operand in a shape that broadcasts against the blocked result the way the original
            broadcast against the original result; None when there is no such shape.
        """
        ty = self.tensor(old)
        if ty is None or ty.ndim > 4:
            return None
        if ty.ndim == 0:
            return self.primal(old)
        n, c, h, w = (1,) * (4 - ty.ndim) + ty.shape
        if c == channels:
            if ty.ndim == 4 and (self.block_of(old) or h * w != 1):
                return self.convert(old, block)  # (N, C, H, W) -> (N, C/b, H, W, b)
            if h * w == 1:  # (C, 1, 1) -> (1, C/b, 1, 1, b)
                return K.reshape(self.primal(old), (n, channels // block, 1, 1, block))
            full = K.reshape(self.primal(old), (n, c, h, w))
            return K.layout_transform(full, "NCHW", blocked_layout(block))
        if c == 1:
            if self.block_of(old) == 1:
                return self.value(old).expr  # (N, 1, H, W, 1) already
            return K.reshape(self.primal(old), (n, 1, h, w, 1))
        return None

    # --- building --------------------------------------------------------------------------------
    @staticmethod
    def recall(call: Call, args: Sequence[Expr], attrs: Attrs | None = None) -> Call:
        """``call`` with new arguments (and attributes), keeping its operator and source names."""
        return Call(call.op, list(args), attrs if attrs is not None else call.attrs,
                    source_names=call.source_names)


# --- propagation rules ---------------------------------------------------------------------------

def _unary(prop: LayoutPropagator, call: Call) -> Value | None:
    """``f(x{b}) -> f(x){b}`` for element-wise ops whose result has their input's shape."""
    value = prop.value(call.args[0])
    out, arg = prop.tensor(call), prop.tensor(call.args[0])
    if not value.block or out is None or arg is None or out.shape != arg.shape:
        return None
    return Value(prop.recall(call, [value.expr]), value.block)


def _broadcast(prop: LayoutPropagator, call: Call) -> Value | None:
    """``f(x{b}, y) -> f(x{b}, y{b}){b}`` with ``y`` reshaped or converted (see ``operand``)."""
    out = prop.tensor(call)
    if out is None or out.ndim != 4:
        return None
    channels = out.shape[1]
    blocks = [prop.block_of(a) for a in call.args]
    types = [prop.tensor(a) for a in call.args]
    block = next((b for b, t in zip(blocks, types) if b and t is not None and t.shape[1] == channels),
                 0)
    if not block:
        return None
    args: list[Expr] = []
    for arg in call.args:
        new = prop.operand(arg, channels, block)
        if new is None:
            return None
        args.append(new)
    return Value(prop.recall(call, args), block)


def _bias_add(prop: LayoutPropagator, call: Call) -> Value | None:
    """``bias_add(x{b}, bias, axis=1) -> add(x{b}, reshape(bias, (1, C/b, 1, 1, b))){b}``."""
    value = prop.value(call.args[0])
    data = prop.tensor(call.args[0])
    if not value.block or data is None or call.attrs.axis % 4 != 1:
        return None
    channels = data.shape[1]
    bias = K.reshape(prop.primal(call.args[1]), (1, channels // value.block, 1, 1, value.block))
    return Value(K.add(value.expr, bias), value.block)


def _pool(prop: LayoutPropagator, call: Call) -> Value | None:
    """``pool(x{b}, layout="NCHW") -> pool(x{b}, layout="NCHW{b}c"){b}``."""
    value = prop.value(call.args[0])
    attrs = call.attrs
    if not value.block or attrs.layout != "NCHW" or attrs.out_layout not in ("", "NCHW"):
        return None
    new_attrs = attrs.replace(layout=blocked_layout(value.block), out_layout="")
    return Value(prop.recall(call, [value.expr], new_attrs), value.block)


def _pad(prop: LayoutPropagator, call: Call) -> Value | None:
    """``pad(x{b}, ((n0, n1), (0, 0), (h0, h1), (w0, w1))) -> pad(x{b}, ... + ((0, 0),)){b}``."""
    value = prop.value(call.args[0])
    widths = tuple(tuple(w) for w in call.attrs.pad_width)
    if not value.block or len(widths) != 4 or widths[1] != (0, 0):
        return None
    new_attrs = call.attrs.replace(pad_width=(*widths, (0, 0)))
    return Value(prop.recall(call, [value.expr, prop.primal(call.args[1])], new_attrs),
                 value.block)


def _concatenate(prop: LayoutPropagator, call: Call) -> Value | None:
    """``concatenate((x{b}, y{b}, ...), axis) -> concatenate(...){b}`` when ``b`` divides every
    input's channels; inputs in another layout are converted to ``b``."""
    tup = call.args[0]
    out = prop.tensor(call)
    if not isinstance(tup, Tuple) or out is None or out.ndim != 4:
        return None
    channels = []
    for field in tup.fields:
        ty = prop.tensor(field)
        if ty is None or ty.ndim != 4:
            return None
        channels.append(ty.shape[1])
    blocks = [prop.block_of(f) for f in tup.fields]
    usable = [b for b in set(blocks) if b and all(c % b == 0 for c in channels)]
    if not usable:
        return None
    block = max(usable, key=lambda b: (blocks.count(b), b))  # fewest conversions, then widest
    fields = Tuple([prop.convert(f, block) for f in tup.fields])
    new_attrs = call.attrs.replace(axis=call.attrs.axis % 4)
    return Value(prop.recall(call, [fields], new_attrs), block)


def _reduce(prop: LayoutPropagator, call: Call) -> Value | None:
    """``r(x{b}, axis)`` over batch/spatial axes: ``keepdims`` keeps the block; dropping both
    spatial axes reshapes ``(.., C/b, b)`` to ``(.., C)``."""
    value = prop.value(call.args[0])
    attrs = call.attrs
    out = prop.tensor(call)
    if not value.block or out is None or attrs.exclude or attrs.axis is None:
        return None
    axes = tuple(sorted({a % 4 for a in attrs.axis}))
    if 1 in axes:
        return None
    reduced = prop.recall(call, [value.expr], attrs.replace(axis=axes))
    if attrs.keepdims:
        return Value(reduced, value.block)
    if not {2, 3} <= set(axes):
        return None
    return Value(K.reshape(reduced, out.shape))


def _depth_to_space(prop: LayoutPropagator, call: Call) -> Value | None:
    """``depth_to_space(x{b}, s, DCR) -> reshape(transpose(reshape(x{b}))){b}`` when ``b``
    divides the result's channels (channel ``(ry * s + rx) * C + c`` keeps its inner index)."""
    value = prop.value(call.args[0])
    data, out = prop.tensor(call.args[0]), prop.tensor(call)
    attrs = call.attrs
    if (not value.block or data is None or out is None or attrs.layout != "NCHW"
            or attrs.mode != "DCR" or out.shape[1] % value.block):
        return None
    n, _, h, w = data.shape
    s, b, cb = attrs.block_size, value.block, out.shape[1] // value.block
    y = K.reshape(value.expr, (n, s, s, cb, h, w, b))
    y = K.transpose(y, (0, 3, 4, 1, 5, 2, 6))
    return Value(K.reshape(y, (n, cb, h * s, w * s, b)), b)


_POOLS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_max_pool2d", "nn.global_avg_pool2d",
          "nn.adaptive_max_pool2d", "nn.adaptive_avg_pool2d")
_REDUCTIONS = ("sum", "mean", "max", "min", "prod")
# Broadcasting ops whose extra operand is not a broadcast value.
_NOT_BROADCAST = frozenset({"broadcast_to_like"})


@functools.cache
def propagation_rules() -> Mapping[str, LayoutRule]:
    """The rules of blocked-layout propagation, by operator name (see the module docstring).

    Returns
    -------
    mapping of str to LayoutRule
        Read-only table shared by every AlterOpLayout run.
    """
    rules: dict[str, LayoutRule] = {}
    for name, op_def in all_ops().items():
        if op_def.pattern == OpPattern.ELEMWISE and op_def.num_inputs == 1:
            rules[name] = _unary  # relu(x{b}) -> relu(x){b}
        elif (op_def.pattern == OpPattern.BROADCAST and op_def.num_inputs >= 2
              and op_def.attrs_type is None and name not in _NOT_BROADCAST):
            rules[name] = _broadcast  # add(x{b}, c[C,1,1]) -> add(x{b}, c[1,C/b,1,1,b]){b}
    rules["nn.bias_add"] = _bias_add  # bias_add(x{b}, v) -> add(x{b}, reshape(v)){b}
    for name in _POOLS:
        rules[name] = _pool  # pool(x{b}, NCHW) -> pool(x{b}, NCHW{b}c){b}
    rules["nn.pad"] = _pad  # pad(x{b}, no channel padding) -> pad(x{b}){b}
    rules["concatenate"] = _concatenate  # concat((x{b}, y{b})) -> concat(...){b}
    rules["nn.depth_to_space"] = _depth_to_space  # d2s(x{b}, DCR) -> 7-d shuffle of x{b}{b}
    for name in _REDUCTIONS:
        rules[name] = _reduce  # mean(x{b}, [2, 3], keepdims) -> mean(x{b}, [2, 3]){b}
    return rules
