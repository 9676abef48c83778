"""The layout engine: values that travel through a graph in another layout than the model's.

Two passes use it. :mod:`~kiln.transform.convert_layout` moves convolutions and pools to the data
layout a user asks for (an ``NHWC`` graph to ``NCHW``); :mod:`~kiln.transform.alter_op_layout`
replaces convolutions by channel-blocked ones (``NCHW{c}c``). Both only say how their converted
operators change; everything else is this module's.

Every value of the rewritten graph is a :class:`Held` ``(expr, layout, held)``: ``expr`` holds the
original value, whose axes are named by the letters of ``layout``, in the layout ``held``:

- another order of the same letters (``NHWC`` held as ``NCHW``), or
- a blocked layout whose lower-case axes split an axis (``NCHW`` held as ``NCHW8c``: channel ``c``
  at ``[:, c // 8, :, :, c % 8]``); blocks always divide the axis they split.

``layout == held`` (both empty for values no rule touched) means ``expr`` is the original value.

:class:`LayoutRewriter` walks the graph children first and hands every operator call to its rule:
the pass's own rule for that operator if it has one, else the rule of the operator's layout
behaviour declared in the registry (``OpDef.layout``, one of
:data:`~kiln.op.registry.LAYOUT_KINDS`). A rule returns the call's new :class:`Held`, or ``None``
for the default: the call rebuilt on its arguments converted back to their own layouts.

- ``elemwise`` ops keep the layout of their argument;
- ``broadcast`` ops keep the layout of a moved operand and bring the others to it as TVM does:
  scalars and lower-rank operands of ones stay, other lower-rank operands get ``expand_dims`` to
  full rank, then a ``layout_transform`` to the held layout with a block of 1 on every split axis
  they have as 1 (``NCHW1c`` next to ``NCHW16c``);
- ``axis`` ops (norms, softmax, prelu) get their axis remapped, unless the axis is split;
  ``bias_add`` on a split axis becomes an ``add`` of the bias reshaped to the blocked layout;
- ``pool`` ops (2-d) run in the held layout when it is ``NCHW``, ``NHWC`` or ``NCHW{c}c``;
- ``pad`` pads the held layout (never a split axis); ``concatenate`` converts its inputs to the
  most common layout they can all take; ``reduce`` remaps its axes (a split axis is reduced with
  its block, the result of ``keepdims`` then held as ``NCHW1c``), and a float32 ``mean``/``max``
  over ``H`` and ``W`` of a channel-blocked image, with ``keepdims``, becomes
  ``nn.global_avg_pool2d``/``global_max_pool2d`` in that layout; ``axes`` ops (``l2_normalize``)
  remap their axis list; ``squeeze`` and ``strided_slice`` permute their axes or bounds;
  ``transpose`` permutes straight to its original result layout; ``resize`` ops
  (``nn.upsampling``, ``image.resize2d``) run in the held layout;
  ``layout_transform`` to the held layout is the held value itself; ``depth_to_space`` (DCR) of a
  channel-blocked value stays blocked.

A value may also be held *channel-padded* (:class:`Padded`): a convolution computed in whole
vectors of channels (72 as 80 in ``NCHW16c``) keeps its extra channels, each holding one finite
number the rules track with the operators' NumPy references (``relu(0) = 0``, ``sigmoid(0) = 0.5``;
a division by a zero-padded divisor is not finite, and padding stops there). ``elemwise`` and
``broadcast`` ops (per-channel operands zero-padded), reductions over ``H`` and ``W`` and pools
stay padded; convolutions read it (:mod:`~kiln.transform.alter_op_layout`); every other rule sees
the real channels, sliced out once.

Users can plug TVM's layout hooks into an operator (``relay.op.register_alter_op_layout``,
``register_convert_op_layout``, ``relay.testing.temp_op_attr.TempOpAttr``): :func:`hook_rule`
calls them as TVM does and adopts the layouts of the call they return.

Each value is converted at most once per target layout, and converting a converted value back
reuses the value before the conversion, so no pair of ``layout_transform`` that cancel out is left
behind. Calls built by rules carry the source names of the call they replace (conversions: those of
the value converted, or of the consumer when that value is a graph input), so provenance survives.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

import kiln.op as K
from kiln.ir.attrs import Attrs
from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, Op, Tuple, TupleGetItem, Var
from kiln.ir.op_table import op_attr_map
from kiln.ir.types import TensorType, TupleType, is_float
from kiln.ir.visitor import children, post_order, rebuild
from kiln.op.registry import get_op_def
from kiln.op.transform_layout import parse_layout

__all__ = [
    "Held",
    "LayoutRewriter",
    "Padded",
    "Rule",
    "blocked_layout",
    "channel_pad_value",
    "follow_rules",
    "held_axis",
    "held_shape",
    "hook_rule",
    "padded_held",
    "user_hooks",
]


def blocked_layout(block: int, layout: str = "NCHW") -> str:
    """``layout`` with its channel axis split by ``block`` (``"NCHW8c"``), or ``layout`` for 0."""
    return f"{layout}{block}c" if block else layout


@dataclass(frozen=True)
class Padded:
    """A channel-padded form of a held ``NCHW`` value: ``expr`` holds ``channels`` channels,
    the original's first, split as ``held`` (``NCHW16c``); each channel past the original's holds
    ``value``, a finite number, everywhere."""

    expr: Expr
    held: str
    channels: int
    value: float = 0.0


@dataclass(frozen=True)
class Held:
    """A rewritten value: ``expr`` holds the original (axes named ``layout``) as ``held``.

    ``padded``, when set, is the same value with zero-weight channels appended (a convolution
    whose channel count is not a multiple of the vector lanes computes whole vectors): rules that
    understand it keep computing on whole vectors, every other rule sees ``expr``, the padded
    value's original channels (:func:`padded_held`).
    """

    expr: Expr
    layout: str = ""
    held: str = ""
    all_fields: bool = False  # a tuple whose every field is held so (split, topk)
    padded: Padded | None = None

    @property
    def moved(self) -> bool:
        """Whether ``expr`` is in another layout than the original value."""
        return self.layout != self.held


Rule = Callable[["LayoutRewriter", Call], Held | None]


def padded_held(padded: Padded, channels: int, held: str) -> Held:
    """The :class:`Held` of an ``NCHW`` value of ``channels`` channels computed as ``padded``: its
    original channels (held as ``held``, an ``NCHW{c}c`` whose block divides ``channels``) are a
    ``layout_transform`` and ``strided_slice`` of the padded value, built for the rules that
    need them."""
    block = splits(held)["C"]
    exact: Expr = padded.expr
    if held != padded.held:
        exact = K.layout_transform(exact, padded.held, held)
    exact = K.strided_slice(exact, begin=(0,), end=(channels // block,), axes=(1,))
    return Held(exact, "NCHW", held, padded=padded)


def channel_pad_value(call: Call, values: Sequence[float], shape: tuple[int, ...] = ()) -> float | None:
    """What ``call`` gives in a padded channel where its arguments hold ``values``: its NumPy
    reference on arrays of ``shape`` (``()`` for element-wise operators, one channel's
    ``(1, 1, H, W)`` for a pool or reduction) filled with them. None unless that is one finite
    number (not a division by a zero-padded divisor, not an average over a border), so padding
    must stop there."""
    out = call.checked_type
    if not isinstance(out, TensorType) or not is_float(out.dtype) or not isinstance(call.op, Op):
        return None
    types = [TensorType(shape, a.checked_type.dtype if isinstance(a.checked_type, TensorType)
                        else out.dtype) for a in call.args]
    op_def = get_op_def(call.op.name)
    try:
        arrays = [np.full(t.shape, v, dtype=t.dtype) for v, t in zip(values, types)]
        with np.errstate(all="ignore"):
            result = np.asarray(op_def.reference(arrays, call.attrs,
                                                 op_def.type_rel(list(types), call.attrs)))
    except Exception:  # an operator whose reference wants other arguments: no padding
        return None
    flat = result.reshape(-1)
    if flat.size == 0 or not np.isfinite(flat).all() or (flat != flat[0]).any():
        return None
    return float(flat[0])


# --- layout algebra --------------------------------------------------------------------------------

@functools.cache
def _tokens(held: str) -> tuple[tuple[str, int], ...]:
    return tuple(parse_layout(held))


def splits(held: str) -> dict[str, int]:
    """The axes ``held`` splits, with their block sizes (``{"C": 8}`` for ``NCHW8c``)."""
    return {letter: block for letter, block in _tokens(held) if block}


def held_axis(layout: str, held: str, axis: int) -> int:
    """Where axis ``axis`` of a value in ``layout`` is in the same value held as ``held`` (its
    outer part when the axis is split)."""
    return _tokens(held).index((layout[axis % len(layout)], 0))


def held_shape(shape: Sequence[int], layout: str, held: str) -> tuple[int, ...] | None:
    """The shape of a tensor of ``shape`` (axes ``layout``) held as ``held``; a split axis of size
    1 (a broadcast operand) stays 1. None when a block does not divide its axis."""
    dims = dict(zip(layout, shape))
    blocks = splits(held)
    out: list[int] = []
    for letter, block in _tokens(held):
        d = dims[letter]
        size = block or blocks.get(letter, 0)
        if size and d != 1:
            if d % size:
                return None
            out.append(block if block else d // size)
        else:
            out.append(1 if size else d)
    return tuple(out)


def _is_reshape(layout: str, held: str) -> bool:
    """Whether ``held`` keeps the elements of ``layout`` in order (every block right after the axis
    it splits: ``NC8c`` of ``NC``), so converting between them is a reshape."""
    tokens = _tokens(held)
    primal = "".join(letter for letter, block in tokens if not block)
    if primal != layout:
        return False
    return all(block == 0 or tokens[i - 1] == (letter, 0) for i, (letter, block) in enumerate(tokens))


def _transform(expr: Expr, src: str, dst: str, shape: Sequence[int]) -> Expr:
    """``expr`` (original shape ``shape`` in layout ``src`` or ``dst``) from ``src`` to ``dst``:
    the input of ``expr`` when ``expr`` is the inverse transform, a reshape when the two layouts keep
    the elements in the same order, else ``layout_transform``."""
    if (isinstance(expr, Call) and isinstance(expr.op, Op) and expr.op.name == "layout_transform"
            and expr.attrs is not None
            and (expr.attrs.src_layout, expr.attrs.dst_layout) == (dst, src)):
        return expr.args[0]  # layout_transform(layout_transform(x, B, A), A, B) -> x
    if not splits(src) and _is_reshape(src, dst):
        new = held_shape(shape, src, dst)
        assert new is not None
        return K.reshape(expr, new)
    if not splits(dst) and _is_reshape(dst, src):
        return K.reshape(expr, tuple(shape))
    return K.layout_transform(expr, src, dst)


# --- the rewrite -----------------------------------------------------------------------------------

class LayoutRewriter:
    """Rewrites a function with per-operator layout rules, converting layouts where needed.

    Parameters
    ----------
    rules : mapping of str to Rule
        The pass's own rules by operator name (its conversions); other operators follow their
        registry layout behaviour (:func:`follow_rules`).
    """

    def __init__(self, rules: Mapping[str, Rule]):
        self.rules = rules
        self._follow = follow_rules()
        self._values: dict[int, Held] = {}
        self._converted: dict[tuple[int, str, str], Expr] = {}
        self._tuples: dict[int, Expr] = {}
        self._named: set[int] = set()
        self._consumer_names: tuple[str, ...] = ()

    def run(self, fn: Function) -> Function:
        """``fn`` rewritten (``fn`` itself when nothing changed); its parameters and result keep
        their layouts. ``fn`` must be typed and is not modified; the result is untyped."""
        for node in post_order(fn.body, into_functions=False):
            self._visit(node)
        body = self.primal(fn.body)
        if body is fn.body:
            return fn
        return Function(fn.params, body, None, attrs=fn.attrs)

    def _visit(self, node: Expr) -> None:
        if isinstance(node, Tuple):
            return  # built on demand: concatenate may take its fields in a new layout
        if isinstance(node, (Var, Constant, Op, GlobalVar, Function)):
            self._values[id(node)] = Held(node)
            return
        value = None
        if isinstance(node, Call) and isinstance(node.op, Op):
            self._consumer_names = node.source_names
            name = node.op.name
            rule = self.rules[name] if name in self.rules else self._follow.get(get_op_def(name).layout)
            value = rule(self, node) if rule is not None else None
        elif isinstance(node, TupleGetItem):
            value = self._tuple_get_item(node)
        if value is None:
            value = Held(rebuild(node, tuple(self.primal(c) for c in children(node))))
        if isinstance(node, Call):
            self._name_new_calls(value.expr, node.source_names)
        self._values[id(node)] = value

    def _tuple_get_item(self, node: TupleGetItem) -> Held | None:
        """Field 0 of a moved multi-output call (``batch_norm``) stays moved; the statistics
        fields are per-channel vectors that no layout touches."""
        tup = self.value(node.tuple_value)
        if not tup.moved:
            return None
        item = TupleGetItem(tup.expr, node.index)
        moved = node.index == 0 or tup.all_fields
        return Held(item, tup.layout, tup.held) if moved else Held(item)

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

    def _names_of(self, old: Expr) -> tuple[str, ...]:
        """Source names for a conversion of ``old``: its own, else the current consumer's."""
        return (old.source_names if isinstance(old, Call) else ()) or self._consumer_names

    def _made(self, key: tuple[int, str, str], old: Expr, new: Expr) -> Expr:
        self._name_new_calls(new, self._names_of(old))
        self._converted[key] = new
        return new

    # --- queries for rules ---------------------------------------------------------------------
    def value(self, old: Expr) -> Held:
        """The rewritten value of an original node (tuples: in the original layout)."""
        if isinstance(old, Tuple):
            return Held(self.primal(old))
        return self._values.get(id(old)) or Held(old)

    def moved_arg(self, call: Call) -> Held | None:
        """The rewritten first argument of ``call`` when it is moved, else None."""
        value = self.value(call.args[0])
        return value if value.moved else None

    @staticmethod
    def tensor(old: Expr) -> TensorType | None:
        """The (original) type of ``old`` when it is a tensor."""
        ty = old.checked_type
        return ty if isinstance(ty, TensorType) else None

    # --- conversions -----------------------------------------------------------------------------
    def primal(self, old: Expr) -> Expr:
        """The rewritten ``old`` in its original layout (converted back when it was moved)."""
        if isinstance(old, Tuple):
            if id(old) not in self._tuples:
                self._tuples[id(old)] = rebuild(old, tuple(self.primal(f) for f in old.fields))
            return self._tuples[id(old)]
        value = self.value(old)
        if not value.moved:
            return value.expr
        key = (id(old), "", "")
        if key in self._converted:
            return self._converted[key]
        ty = old.checked_type
        if isinstance(ty, TupleType):  # batch_norm: field 0 moved back; split, topk: every field
            fields: list[Expr] = []
            for i, field_type in enumerate(ty.fields):
                item = TupleGetItem(value.expr, i)
                if i == 0 or value.all_fields:
                    assert isinstance(field_type, TensorType)
                    item = _transform(item, value.held, value.layout, field_type.shape)  # type: ignore[assignment]
                fields.append(item)
            return self._made(key, old, Tuple(fields))
        assert isinstance(ty, TensorType)
        return self._made(key, old, _transform(value.expr, value.held, value.layout, ty.shape))

    def convert(self, old: Expr, layout: str, held: str) -> Expr:
        """The rewritten tensor ``old``, whose axes are named ``layout``, held as ``held``; made
        once per value and target layout."""
        if layout == held:
            return self.primal(old)
        value = self.value(old)
        if value.layout == layout and value.held == held:
            return value.expr
        key = (id(old), layout, held)
        if key not in self._converted:
            ty = self.tensor(old)
            assert ty is not None
            if value.moved and value.layout == layout:
                new = _transform(value.expr, value.held, held, ty.shape)
            else:
                new = _transform(self.primal(old), layout, held, ty.shape)
            self._made(key, old, new)
        return self._converted[key]

    def operand(self, old: Expr, layout: str, held: str) -> Expr | None:
        """A broadcasting operand of a result in ``layout`` brought to ``held`` (TVM's rule).

        Scalars, and lower-rank operands whose axes are all 1, stay as they are; other
        lower-rank operands get ``expand_dims`` to full rank first. The operand is then converted
        to ``held`` with a block of 1 on every split axis it has as 1 (``NCHW1c`` next to
        ``NCHW16c``), so it still broadcasts. None when ``old`` has more axes than the result or
        a block does not divide it.
        """
        ty = self.tensor(old)
        rank = len(layout)
        if ty is None or ty.ndim > rank:
            return None
        if ty.ndim == 0 or (ty.ndim < rank and all(d == 1 for d in ty.shape)):
            return self.primal(old)
        value = self.value(old)
        if ty.ndim == rank and value.layout == layout and value.held == held:
            return value.expr
        shape = (1,) * (rank - ty.ndim) + tuple(ty.shape)
        dims = dict(zip(layout, shape))
        target = "".join(("1" if dims[letter.upper()] == 1 else str(block)) + letter.lower()
                         if block else letter for letter, block in _tokens(held))
        if held_shape(shape, layout, target) is None:
            return None
        if ty.ndim == rank:
            return self.convert(old, layout, target)
        key = (id(old), layout, target)
        if key not in self._converted:  # (C, 1, 1) next to NCHW16c: made 4-d, then moved
            full = K.expand_dims(self.primal(old), 0, rank - ty.ndim)
            self._made(key, old, full if target == layout else
                       K.layout_transform(full, layout, target))
        return self._converted[key]

    # --- building --------------------------------------------------------------------------------
    @staticmethod
    def recall(call: Call, args: Sequence[Expr], attrs: Attrs | None = None) -> Call:
        """``call`` with new arguments (and attributes), keeping its operator and source names."""
        return Call(call.op, list(args), attrs if attrs is not None else call.attrs,
                    source_names=call.source_names)


# --- the rules of the layout behaviours ----------------------------------------------------------

def _elemwise(rw: LayoutRewriter, call: Call) -> Held | None:
    """``f(x{L as H}) -> f(x'){L as H}`` for element-wise ops keeping their input's shape; a
    channel-padded ``x`` stays padded while ``f`` keeps the padded channels finite."""
    value = rw.moved_arg(call)
    out, arg = rw.tensor(call), rw.tensor(call.args[0])
    if value is None or out is None or arg is None or out.shape != arg.shape:
        return None
    pad = value.padded
    if pad is not None and len(call.args) == 1:
        fill = channel_pad_value(call, [pad.value])
        if fill is not None:
            new = Padded(rw.recall(call, [pad.expr]), pad.held, pad.channels, fill)
            return padded_held(new, out.shape[1], value.held)
    return Held(rw.recall(call, [value.expr]), value.layout, value.held)


def _broadcast(rw: LayoutRewriter, call: Call) -> Held | None:
    """``f(x{L as H}, y) -> f(x', y'){L as H}`` with ``y`` reshaped or converted (``operand``)."""
    out = rw.tensor(call)
    if out is None:
        return None
    tags = [(v.layout, v.held) for v in (rw.value(a) for a in call.args)
            if v.moved and len(v.layout) == out.ndim]
    if not tags:
        return None
    layout, held = tags[0]
    padded = _padded_broadcast(rw, call)
    if padded is not None:
        return padded
    args: list[Expr] = []
    for arg in call.args:
        new = rw.operand(arg, layout, held)
        if new is None:
            return None
        args.append(new)
    return Held(rw.recall(call, args), layout, held)


def _padded_broadcast(rw: LayoutRewriter, call: Call) -> Held | None:
    """A broadcast op on channel-padded values, computed padded: every full-size operand padded
    the same way, per-channel operands (a bias, a squeeze-excitation's scale) zero-padded,
    constant scalars as they are; None otherwise, or when a padded channel would not stay finite.
    """
    out = rw.tensor(call)
    values = [rw.value(a) for a in call.args]
    pads = [v.padded for v in values if v.padded is not None]
    if out is None or out.ndim != 4 or not pads:
        return None
    first = pads[0]
    exact = next(v.held for v in values if v.padded is not None)
    args: list[Expr] = []
    fills: list[float] = []
    for arg, value in zip(call.args, values):
        ty = rw.tensor(arg)
        if ty is None:
            return None
        pad = value.padded
        if pad is not None:
            if (pad.held, pad.channels) != (first.held, first.channels) or ty.shape != out.shape:
                return None
            args.append(pad.expr)
            fills.append(pad.value)
        elif ty.ndim == 0 or all(d == 1 for d in ty.shape):
            if not isinstance(arg, Constant):
                return None
            args.append(arg)
            fills.append(float(arg.value.reshape(-1)[0]))
        else:
            shape = (1,) * (4 - ty.ndim) + tuple(ty.shape)
            if ty.ndim < 3 or shape[0] != 1 or shape[2:] != (1, 1) or shape[1] != out.shape[1]:
                return None
            full = rw.primal(arg)
            if ty.ndim == 3:
                full = K.expand_dims(full, 0, 1)
            full = K.nn.pad(full, ((0, 0), (0, first.channels - shape[1]), (0, 0), (0, 0)))
            args.append(K.layout_transform(full, "NCHW", first.held))
            fills.append(0.0)
    fill = channel_pad_value(call, fills)
    if fill is None:
        return None
    return padded_held(Padded(rw.recall(call, args), first.held, first.channels, fill),
                       out.shape[1], exact)


def _axis(rw: LayoutRewriter, call: Call) -> Held | None:
    """``f(x{L as H}, ..., axis=a)`` -> ``f(x', ..., axis=a in H){L as H}`` for ops whose other
    arguments are vectors along ``axis`` (bias, alpha, gamma, statistics); not on a split axis."""
    value = rw.moved_arg(call)
    data = rw.tensor(call.args[0])
    if value is None or data is None or data.ndim != len(value.layout) or call.attrs is None:
        return None
    if value.layout[call.attrs.axis % data.ndim] in splits(value.held):
        return None
    new_attrs = call.attrs.replace(axis=held_axis(value.layout, value.held, call.attrs.axis))
    args = [value.expr, *(rw.primal(a) for a in call.args[1:])]
    return Held(rw.recall(call, args, new_attrs), value.layout, value.held)


def _bias_add(rw: LayoutRewriter, call: Call) -> Held | None:
    """As ``_axis``; on a split axis ``bias_add(x{L as H}, v) -> add(x', reshape(v)){L as H}``."""
    value = rw.moved_arg(call)
    data = rw.tensor(call.args[0])
    if value is None or data is None or data.ndim != len(value.layout) or call.attrs is None:
        return None
    axis = call.attrs.axis % data.ndim
    if value.layout[axis] not in splits(value.held):
        return _axis(rw, call)
    shape = tuple(d if i == axis else 1 for i, d in enumerate(data.shape))
    new_shape = held_shape(shape, value.layout, value.held)
    if new_shape is None:
        return None
    bias = K.reshape(rw.primal(call.args[1]), new_shape)
    return Held(K.add(value.expr, bias), value.layout, value.held)


def _poolable(layout: str, held: str) -> bool:
    return held in ("NCHW", "NHWC") or (set(splits(held)) == {"C"} and held.startswith("NCHW"))


def _pool(rw: LayoutRewriter, call: Call) -> Held | None:
    """``pool(x{L as H}, layout=L)`` -> ``pool(x', layout=H){L as H}``."""
    value = rw.moved_arg(call)
    attrs = call.attrs
    if (value is None or attrs is None or attrs.layout != value.layout
            or not _poolable(value.layout, value.held)
            or (attrs.out_layout or attrs.layout) != attrs.layout):
        return None
    out_layout = value.held if attrs.out_layout and not splits(value.held) else ""
    new_attrs = attrs.replace(layout=value.held, out_layout=out_layout)
    pad, out = value.padded, rw.tensor(call)
    if pad is not None and out is not None:
        data = rw.tensor(call.args[0])
        assert data is not None
        fill = channel_pad_value(call, [pad.value], (1, 1, *data.shape[2:]))
        if fill is not None:  # a global pool, or a window pool of a zero channel
            new = Padded(rw.recall(call, [pad.expr], attrs.replace(layout=pad.held, out_layout="")),
                         pad.held, pad.channels, fill)
            return padded_held(new, out.shape[1], value.held)
    return Held(rw.recall(call, [value.expr], new_attrs), value.layout, value.held)


def _pad(rw: LayoutRewriter, call: Call) -> Held | None:
    """``pad(x{L as H}, widths) -> pad(x', widths in H's order){L as H}`` (no split axis padded)."""
    value = rw.moved_arg(call)
    if value is None or call.attrs is None:
        return None
    widths = tuple(tuple(w) for w in call.attrs.pad_width)
    if len(widths) != len(value.layout):
        return None
    blocks = splits(value.held)
    by_letter = dict(zip(value.layout, widths))
    if any(by_letter[a] != (0, 0) for a in blocks):
        return None
    new_widths = tuple((0, 0) if block else by_letter[letter] for letter, block in _tokens(value.held))
    new_attrs = call.attrs.replace(pad_width=new_widths)
    return Held(rw.recall(call, [value.expr, rw.primal(call.args[1])], new_attrs),
                value.layout, value.held)


def _concatenate(rw: LayoutRewriter, call: Call) -> Held | None:
    """``concatenate((x{L as H}, y, ...), axis=a)`` -> ``concatenate((x', y'), a in H)`` in the
    layout most inputs are held in that every input can take (blocks divide their axes)."""
    tup = call.args[0]
    if not isinstance(tup, Tuple) or call.attrs is None:
        return None
    types = [rw.tensor(f) for f in tup.fields]
    tags = [(v.layout, v.held) for v in (rw.value(f) for f in tup.fields) if v.moved]
    if not tags or any(t is None for t in types):
        return None
    usable = [tag for tag in set(tags)
              if all(t is not None and t.ndim == len(tag[0])
                     and held_shape(t.shape, tag[0], tag[1]) is not None for t in types)]
    if not usable:
        return None
    layout, held = max(usable, key=lambda tag: (tags.count(tag), max(splits(tag[1]).values(), default=0)))
    fields = Tuple([rw.convert(f, layout, held) for f in tup.fields])
    new_attrs = call.attrs.replace(axis=held_axis(layout, held, call.attrs.axis))
    rest = [rw.primal(a) for a in call.args[1:]]  # qnn.concatenate: scales and zero points
    return Held(rw.recall(call, [fields, *rest], new_attrs), layout, held)


# Global pooling equal to a float32 reduction over an image's H and W axes, keeping them.
_GLOBAL_POOLS: dict[str, Callable[..., Expr]] = {"mean": K.pool.global_avg_pool2d,
                                                 "max": K.pool.global_max_pool2d}


def _reduce(rw: LayoutRewriter, call: Call) -> Held | None:
    """``r(x{L as H}, axes)`` -> ``r(x', axes in H)`` as TVM's reductions: a split axis is reduced
    with its block (``sum`` over ``C`` of ``NCHW16c`` reduces axes 1 and 4; with ``keepdims`` the
    result is held as ``NCHW1c``); ``exclude`` is kept, its kept axes listed with their blocks.
    Without ``keepdims`` the result is held in what is left of ``H``, taken back at once when
    that is a mere reshape (``NC8c`` of ``NC``)."""
    value = rw.moved_arg(call)
    attrs = call.attrs
    out = rw.tensor(call)
    if value is None or attrs is None or out is None:
        return None
    rank = len(value.layout)
    chosen = set(range(rank)) if attrs.axis is None else {a % rank for a in attrs.axis}
    axes = set(range(rank)) - chosen if attrs.exclude else chosen
    dropped = {value.layout[a] for a in axes}
    tokens = _tokens(value.held)
    if attrs.axis is None:
        new_attrs = attrs
    elif attrs.exclude:
        letters = {value.layout[a] for a in chosen}
        new_attrs = attrs.replace(axis=tuple(i for i, (letter, _) in enumerate(tokens)
                                             if letter in letters))
    else:
        new_attrs = attrs.replace(axis=tuple(i for i, (letter, _) in enumerate(tokens)
                                             if letter in dropped))
    rest = []  # variance's mean: a keepdims reduction of the same value, brought to its layout
    for arg in call.args[1:]:
        t = rw.tensor(arg)
        if t is None or t.ndim != rank:
            return None
        rest.append(rw.convert(arg, value.layout, value.held))
    pad = value.padded
    if pad is not None and attrs.keepdims and not rest and "C" not in dropped:
        fill = channel_pad_value(call, [pad.value], (1, 1, 2, 2))
        if fill is not None:  # over H and W: a padded channel's constant stays one number
            new = Padded(rw.recall(call, [pad.expr], new_attrs), pad.held, pad.channels, fill)
            return padded_held(new, out.shape[1], value.held)
    pool = _GLOBAL_POOLS.get(call.op.name) if isinstance(call.op, Op) else None
    if pool is not None and attrs.keepdims and not attrs.exclude and not rest and pad is None \
            and sorted(value.layout) == sorted("NCHW") and dropped == {"H", "W"} \
            and splits(value.held) and out.dtype == "float32":
        # a mean or max over the spatial axes of a blocked image (a squeeze-and-excitation
        # block's ReduceMean) is global pooling, which the pooling template accumulates in
        # registers, channel blocks together; the reduction over the blocked layout's middle
        # axes was left to the default schedule, accumulating through memory (MobileNetV3's
        # nine SE means, AVX-512: 54 -> 23 us)
        return Held(pool(value.expr, layout=value.held, out_layout=value.held), value.layout,
                    value.held)
    reduced = rw.recall(call, [value.expr, *rest], new_attrs)
    if attrs.keepdims:
        held = "".join((f"{1 if letter in dropped else block}{letter.lower()}" if block else letter)
                       for letter, block in tokens)
        return Held(reduced, value.layout, held)
    blocks = splits(value.held)
    kept = "".join(a for a in value.layout if a not in dropped)
    kept_held = "".join(f"{block}{letter.lower()}" if block else letter
                        for letter, block in tokens if letter not in dropped)
    if kept == kept_held:
        return Held(reduced)
    if blocks and _is_reshape(kept, kept_held):
        return Held(K.reshape(reduced, out.shape))
    return Held(reduced, kept, kept_held)


def _axes(rw: LayoutRewriter, call: Call) -> Held | None:
    """``f(x{L as H}, axis=[a, b])`` -> ``f(x', axis=[a in H, b in H]){L as H}`` for ops over a list
    of axes keeping the shape (``l2_normalize``); not over a split axis."""
    value = rw.moved_arg(call)
    attrs = call.attrs
    if value is None or attrs is None or attrs.axis is None:
        return None
    rank = len(value.layout)
    blocks = splits(value.held)
    if any(value.layout[a % rank] in blocks for a in attrs.axis):
        return None
    new_axes = tuple(held_axis(value.layout, value.held, a) for a in attrs.axis)
    return Held(rw.recall(call, [value.expr], attrs.replace(axis=new_axes)),
                value.layout, value.held)


def _squeeze(rw: LayoutRewriter, call: Call) -> Held | None:
    """``squeeze(x{L as H}, axes)`` -> ``squeeze(x', axes in H)`` held in what is left of ``H``
    (every axis of size 1, listed, when ``axes`` is None; no split axis squeezed)."""
    value = rw.moved_arg(call)
    attrs, data = call.attrs, rw.tensor(call.args[0])
    if value is None or attrs is None or data is None or data.ndim != len(value.layout):
        return None
    rank = data.ndim
    if attrs.axis is None:
        axes = [a for a in range(rank) if data.shape[a] == 1]
    else:
        axes = [a % rank for a in attrs.axis]
    if any(value.layout[a] in splits(value.held) for a in axes):
        return None
    if attrs.axis is None:
        new_axes = tuple(sorted(held_axis(value.layout, value.held, a) for a in axes))
    else:
        new_axes = tuple(held_axis(value.layout, value.held, a) for a in axes)
    squeezed = rw.recall(call, [value.expr], attrs.replace(axis=new_axes))
    dropped = {value.layout[a] for a in axes}
    kept = "".join(a for a in value.layout if a not in dropped)
    kept_held = "".join(f"{block}{letter.lower()}" if block else letter
                        for letter, block in _tokens(value.held) if letter not in dropped)
    return Held(squeezed) if kept == kept_held else Held(squeezed, kept, kept_held)


def _split(rw: LayoutRewriter, call: Call) -> Held | None:
    """``split(x{L as H}, axis=a)`` / ``topk(x{L as H}, axis=a)`` -> the same op of ``x'`` along
    ``a in H``, every output held as ``H``; along a split axis only a ``split`` into whole
    blocks (sections along the outer axis)."""
    value = rw.moved_arg(call)
    attrs, data = call.attrs, rw.tensor(call.args[0])
    if value is None or attrs is None or data is None or data.ndim != len(value.layout):
        return None
    axis = attrs.axis % data.ndim
    new_attrs = attrs.replace(axis=held_axis(value.layout, value.held, axis))
    block = splits(value.held).get(value.layout[axis])
    if block is not None:
        # along a split axis only a split of whole blocks (C2f's halves of NCHW16c): the
        # sections of the outer axis, each output held in the same blocks
        spec = attrs.indices_or_sections if getattr(call.op, "name", "") == "split" else None
        dim = int(data.shape[axis])
        cuts = ([dim // spec * k for k in range(1, spec)] if isinstance(spec, int) and dim % spec == 0
                else list(spec) if isinstance(spec, tuple) else None)
        if cuts is None or any(c % block for c in cuts):
            return None
        new_attrs = new_attrs.replace(indices_or_sections=spec if isinstance(spec, int)
                                      else tuple(c // block for c in cuts))
    new = rw.recall(call, [value.expr], new_attrs)
    return Held(new, value.layout, value.held, all_fields=isinstance(call.checked_type, TupleType))


def _transpose(rw: LayoutRewriter, call: Call) -> Held | None:
    """``transpose(x{L as H}, p)`` -> ``transpose(x', q)`` with ``q`` giving the original result
    layout directly (TVM's rule; nothing split)."""
    value = rw.moved_arg(call)
    attrs = call.attrs
    if value is None or attrs is None or splits(value.held):
        return None
    rank = len(value.layout)
    perm = range(rank - 1, -1, -1) if attrs.axes is None else (a % rank for a in attrs.axes)
    new_axes = tuple(value.held.index(value.layout[a]) for a in perm)
    return Held(rw.recall(call, [value.expr], attrs.replace(axes=new_axes)))


def _strided_slice(rw: LayoutRewriter, call: Call) -> Held | None:
    """``strided_slice(x{L as H}, begin, end, strides)`` -> the same slice of ``x'`` with the
    bounds permuted to ``H`` (TVM's rule: missing begins are 0, ends the axis size, strides 1;
    with ``axes``, the axes are remapped). A split axis is sliced on its outer part when the
    bounds are multiples of the block and the stride is 1 (``[16, 32)`` of ``C`` in ``NCHW4c``
    is ``[4, 8)``); its inner part is kept whole."""
    value = rw.moved_arg(call)
    attrs, data = call.attrs, rw.tensor(call.args[0])
    if (value is None or attrs is None or data is None or attrs.slice_mode != "end"
            or data.ndim != len(value.layout)):
        return None
    rank = data.ndim
    blocks = splits(value.held)
    tokens = _tokens(value.held)

    def outer(letter: str, b: object, e: object, st: object) -> tuple[object, object] | None:
        block = blocks.get(letter, 0)
        if not block:
            return b, e
        size = data.shape[value.layout.index(letter)]
        if not (isinstance(b, int) and isinstance(e, int) and st == 1):
            return None
        b, e = b % size if b < 0 else b, e % size if e < 0 else min(e, size)
        if b % block or e % block:
            return None
        return b // block, e // block

    if attrs.axes is not None:
        n = len(attrs.axes)
        if len(attrs.begin) != n or len(attrs.end) != n or (
                len(attrs.strides) < n and any(st != 1 for st in attrs.strides)):
            return None
        steps = list(attrs.strides) + [1] * (n - len(attrs.strides))  # missing strides are 1
        new_axes, new_begin, new_end = [], [], []
        for a, b, e, st in zip(attrs.axes, attrs.begin, attrs.end, steps):
            letter = value.layout[a % rank]
            bounds = outer(letter, b, e, st)
            if bounds is None:
                return None
            new_axes.append(held_axis(value.layout, value.held, a))
            new_begin.append(bounds[0])
            new_end.append(bounds[1])
        new_attrs = attrs.replace(axes=tuple(new_axes), begin=tuple(new_begin),
                                  end=tuple(new_end))
    else:
        def full(values: tuple, default: list) -> list:
            return [values[i] if i < len(values) else default[i] for i in range(rank)]

        begin = full(tuple(attrs.begin), [0] * rank)
        end = full(tuple(attrs.end), list(data.shape))
        strides = full(tuple(attrs.strides), [1] * rank)
        nb: list[object] = []
        ne: list[object] = []
        ns: list[object] = []
        for letter, block in tokens:
            if block:  # the inner part of a split axis: whole
                nb.append(0)
                ne.append(block)
                ns.append(1)
                continue
            i = value.layout.index(letter)
            bounds = outer(letter, begin[i], end[i], strides[i])
            if bounds is None:
                return None
            nb.append(bounds[0])
            ne.append(bounds[1])
            ns.append(strides[i])
        new_attrs = attrs.replace(begin=tuple(nb), end=tuple(ne), strides=tuple(ns))
    return Held(rw.recall(call, [value.expr], new_attrs), value.layout, value.held)


def _resize(rw: LayoutRewriter, call: Call) -> Held | None:
    """``resize(x{L as H}, layout=L)`` -> ``resize(x', layout=H){L as H}`` for ops resizing the
    ``H``/``W`` axes named by ``attrs.layout`` (``nn.upsampling``, ``image.resize2d``), which may
    not be split."""
    value = rw.moved_arg(call)
    attrs = call.attrs
    if (value is None or attrs is None or attrs.layout != value.layout
            or any(a in splits(value.held) for a in "HW")):
        return None
    new_attrs = attrs.replace(layout=value.held)
    args = [value.expr, *(rw.primal(a) for a in call.args[1:])]
    return Held(rw.recall(call, args, new_attrs), value.layout, value.held)


def _layout_transform(rw: LayoutRewriter, call: Call) -> Held | None:
    """``layout_transform(x{L as H}, L, H)`` -> ``x'``: the value is already in ``H``."""
    value = rw.moved_arg(call)
    attrs = call.attrs
    if value is None or attrs is None or (attrs.src_layout, attrs.dst_layout) != (value.layout, value.held):
        return None
    return Held(value.expr)


def _depth_to_space(rw: LayoutRewriter, call: Call) -> Held | None:
    """``depth_to_space(x{NCHW as NCHW{b}c}, s, DCR)`` -> ``reshape(transpose(reshape(x')))``
    held as ``NCHW{b}c`` when ``b`` divides the result's channels (channel ``(ry * s + rx) * C + c``
    keeps its inner index)."""
    value = rw.moved_arg(call)
    data, out = rw.tensor(call.args[0]), rw.tensor(call)
    attrs = call.attrs
    b = splits(value.held).get("C", 0) if value is not None else 0
    if (value is None or data is None or out is None or attrs is None or attrs.layout != "NCHW"
            or attrs.mode != "DCR" or value.held != blocked_layout(b) or not b or out.shape[1] % b):
        return None
    n, _, h, w = data.shape
    s, cb = attrs.block_size, out.shape[1] // b
    y = K.reshape(value.expr, (n, s, s, cb, h, w, b))
    y = K.transpose(y, (0, 3, 4, 1, 5, 2, 6))
    return Held(K.reshape(y, (n, cb, h * s, w * s, b)), "NCHW", value.held)


@functools.cache
def follow_rules() -> Mapping[str, Rule]:
    """The rule of each layout behaviour (``OpDef.layout``) of operators that follow their
    input's layout (see the module docstring)."""
    return {
        "elemwise": _elemwise,  # relu(x{NHWC as NCHW}) -> relu(x'){NHWC as NCHW}
        "broadcast": _broadcast,  # add(x{NCHW as NCHW8c}, c[C,1,1]) -> add(x', c[1,C/8,1,1,8])
        "axis": _axis,  # softmax(x{NHWC as NCHW}, axis=3) -> softmax(x', axis=1)
        "bias_add": _bias_add,  # bias_add(x{NCHW as NCHW8c}, v) -> add(x', reshape(v))
        "pool": _pool,  # pool(x{NHWC as NCHW}, NHWC) -> pool(x', NCHW)
        "pad": _pad,  # pad(x{NHWC as NCHW}, w) -> pad(x', w permuted)
        "concatenate": _concatenate,  # concat((x{NHWC as NCHW}, y), 3) -> concat((x', y'), 1)
        "reduce": _reduce,  # mean(x{NHWC as NCHW}, [1, 2]) -> mean(x', [2, 3])
        "axes": _axes,  # l2_normalize(x{NHWC as NCHW}, [2, 3]) -> l2_normalize(x', [3, 1])
        "squeeze": _squeeze,  # squeeze(x{NHWC as NCHW}, [1]) -> squeeze(x', [2]){NWC as NCW}
        "split": _split,  # split(x{NHWC as NCHW}, axis=3) -> split(x', axis=1), fields moved
        "transpose": _transpose,  # transpose(x{NHWC as NCHW}, [0, 3, 1, 2]) -> transpose(x', id)
        "strided_slice": _strided_slice,  # slice(x{NCHW as NHWC}, [0, 1]) -> slice(x', [0,0,0,1])
        "resize": _resize,  # upsampling(x{NCHW as NCHW16c}) -> upsampling(x', NCHW16c)
        "layout_transform": _layout_transform,  # lt(x{NHWC as NCHW}, NHWC, NCHW) -> x'
        "depth_to_space": _depth_to_space,  # d2s(x{NCHW as NCHW8c}, DCR) -> 7-d shuffle of x'
    }


# --- user layout hooks (TVM's FTVMAlterOpLayout / FTVMConvertOpLayout) ----------------------------

def _layouts_of(attrs: Attrs | None) -> tuple[list[str], str] | None:
    """``([data, kernel], out)`` layouts named by a convolution's attributes, ``([layout], out)``
    by a pool's, None for other operators."""
    if attrs is None:
        return None
    if "data_layout" in attrs and isinstance(attrs.data_layout, str):
        ins = [attrs.data_layout]
        if "kernel_layout" in attrs and isinstance(attrs.kernel_layout, str):
            ins.append(attrs.kernel_layout)
        out = attrs.out_layout if "out_layout" in attrs and attrs.out_layout else attrs.data_layout
        return ins, out
    if "layout" in attrs and isinstance(attrs.layout, str) and attrs.layout:
        out = attrs.out_layout if "out_layout" in attrs and attrs.out_layout else attrs.layout
        return [attrs.layout], out
    return None


def _same_letters(a: str, b: str) -> bool:
    return sorted(c for c in a if c.isupper()) == sorted(c for c in b if c.isupper())


def hook_rule(hook: Callable[..., Expr | None], *extra: object) -> Rule:
    """The rule of an operator whose layout hook a user registered (TVM's ``FTVMAlterOpLayout``,
    ``FTVMConvertOpLayout``).

    The hook is called as TVM calls it, ``hook(attrs, inputs, tinfos, out_type)`` (ConvertLayout
    passes the desired layouts instead of ``out_type``: give them as ``extra``), with the inputs in
    the layouts of the original call. ``None`` keeps the call. When it returns a convolution or a
    pool whose attributes name other layouts than the original call's, its data (and kernel) are
    converted to the new layouts, reusing values already held in them, and the result is held in
    the new output layout; any other returned expression replaces the call as it is.

    Parameters
    ----------
    hook : callable
        The user's function.
    *extra : object
        Arguments that replace ``out_type`` (ConvertLayout's desired layouts).

    Returns
    -------
    Rule
        The rule, for :class:`LayoutRewriter`.
    """
    from kiln.te.tensor import placeholder

    def rule(rw: LayoutRewriter, call: Call) -> Held | None:
        inputs = [rw.primal(a) for a in call.args]
        tinfos = []
        for a in call.args:
            t = rw.tensor(a)
            tinfos.append(placeholder(t.shape, t.dtype) if t is not None else None)
        tail = list(extra) if extra else [call.checked_type]
        out = hook(call.attrs, inputs, tinfos, *tail)
        if out is None:
            return None
        old = _layouts_of(call.attrs)
        if not (isinstance(out, Call) and isinstance(out.op, Op)) or old is None:
            return Held(out)
        new = _layouts_of(out.attrs)
        if new is None or len(new[0]) != len(old[0]):
            return Held(out)
        args = list(out.args)
        for i, (src, dst) in enumerate(zip(old[0], new[0])):
            if src == dst or i >= len(args) or not _same_letters(src, dst):
                continue
            j = next((k for k, x in enumerate(inputs) if x is args[i]), None)
            if j is not None and rw.tensor(call.args[j]) is not None:
                args[i] = rw.convert(call.args[j], src, dst)
            else:
                args[i] = K.layout_transform(args[i], src, dst)
        new_call = Call(out.op, args, out.attrs, source_names=out.source_names or call.source_names)
        old_out, new_out = old[1], new[1]
        if old_out == new_out or not _same_letters(old_out, new_out):
            return Held(new_call)
        return Held(new_call, old_out, new_out)

    return rule


def user_hooks(attr_key: str, ops: Sequence[str] | None = None) -> dict[str, Rule]:
    """The rules of every operator (of ``ops``, default all) with a user hook ``attr_key``."""
    return {name: hook_rule(fn) for name, fn in op_attr_map(attr_key).items()
            if fn is not None and (ops is None or name in ops)}
