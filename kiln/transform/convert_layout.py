"""ConvertLayout: move convolutions and pools to the data layouts a user asks for (TVM semantics).

``ConvertLayout({"nn.conv2d": ["NCHW", "default"]})`` rewrites every ``nn.conv2d`` to take its data
in ``NCHW`` and its kernel in the default kernel layout of that data layout, so that ``NHWC`` graphs
(TFLite, Keras, ...) reach the blocked ``NCHW{c}c`` convolutions of ``AlterOpLayout``. As in TVM:

- a converted operator (a key of ``desired_layouts``) gets a ``layout_transform`` on its data and
  on its weight (constant weights are folded by the next ``FoldConstant``), and its attributes
  name the new layouts;
- its result stays in the new layout through the layout-agnostic consumers that follow
  (element-wise and broadcasting ops, ``nn.bias_add``, ``nn.prelu``, norms and softmax with their
  axis remapped, pools, ``nn.pad``, ``concatenate``, reductions);
- every other consumer, and the function's result, gets the value converted back to its original
  layout. Each value is converted at most once per target layout, and a conversion back of a
  converted value reuses the value before the conversion, so no ``layout_transform`` pair that
  cancels out is left behind.

Supported keys and values:

===========================  ==============================================================
``nn.conv2d``                ``[data, kernel]``: data ``NCHW`` or ``NHWC``; kernel ``"default"``
                             (``NCHW`` -> ``OIHW``; ``NHWC`` -> ``HWIO``, ``HWOI`` when
                             depthwise) or any order of ``OIHW`` (e.g. ``OHWI``)
``nn.conv2d_transpose``      ``[data, kernel]``: kernel ``"default"`` (``NCHW`` -> ``IOHW``,
                             ``NHWC`` -> ``HWIO``) or any order of ``IOHW``
``nn.max_pool2d``,           ``[layout]``: ``NCHW`` or ``NHWC``
``nn.avg_pool2d``,
``nn.global_max_pool2d``,
``nn.global_avg_pool2d``
===========================  ==============================================================

Pools that are not keys follow the layout of their input. Convolutions whose current layouts are
not plain 4-d ones (``NCHW8c``, ...) are left alone.

Every value of the rewritten graph is a :class:`Held` ``(expr, layout, held)``: ``expr`` holds the
original value, whose axes are named by ``layout``, with its axes in the order of ``held``; when
``layout == held`` (both empty for values no rule touched) ``expr`` has the original value's shape.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import kiln.op as K
from kiln.errors import PassError
from kiln.ir.attrs import Attrs
from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, Op, Tuple, TupleGetItem, Var
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, TupleType
from kiln.ir.visitor import children, post_order, rebuild
from kiln.op.registry import OpPattern, all_ops
from kiln.transform.infer_type import infer_type
from kiln.transform.pass_infra import ModulePass, PassContext, PassInfo

__all__ = ["ConvertLayout", "convert_layout"]

_DATA_LAYOUTS = ("NCHW", "NHWC")
_CONVS = {"nn.conv2d": "OIHW", "nn.conv2d_transpose": "IOHW"}  # op -> letters of its kernel
_POOL_KEYS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_max_pool2d", "nn.global_avg_pool2d")
_POOLS = (*_POOL_KEYS, "nn.adaptive_max_pool2d", "nn.adaptive_avg_pool2d")
_AXIS_OPS = ("nn.bias_add", "nn.prelu", "nn.batch_norm", "nn.layer_norm", "nn.softmax",
             "nn.log_softmax")
_REDUCTIONS = ("sum", "mean", "max", "min", "prod")
# Broadcasting ops whose extra operand is not a broadcast value.
_NOT_BROADCAST = frozenset({"broadcast_to_like"})


@dataclass(frozen=True)
class Held:
    """A rewritten value: ``expr`` holds the original (axes named ``layout``) in order ``held``."""

    expr: Expr
    layout: str = ""
    held: str = ""

    @property
    def moved(self) -> bool:
        """Whether ``expr``'s axes are in another order than the original value's."""
        return self.layout != self.held


Rule = Callable[["_Converter", Call], Held | None]


# --- desired layouts -----------------------------------------------------------------------------

def _is_order_of(layout: str, letters: str) -> bool:
    return len(layout) == len(letters) and set(layout) == set(letters)


def _check_desired(desired_layouts: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """Validate ``desired_layouts``; raise ``PassError`` naming every bad key or layout."""
    problems: list[str] = []
    out: dict[str, tuple[str, ...]] = {}
    for key, value in desired_layouts.items():
        layouts = (value,) if isinstance(value, str) else tuple(str(v) for v in value)
        if key in _CONVS:
            letters = _CONVS[key]
            if len(layouts) != 2:
                problems.append(f"{key}: expected [data_layout, kernel_layout], got {list(layouts)}")
                continue
            data, kernel = layouts
            if data not in _DATA_LAYOUTS:
                problems.append(f"{key}: data layout {data!r} is not one of {list(_DATA_LAYOUTS)}")
            if kernel != "default" and not _is_order_of(kernel, letters):
                problems.append(f"{key}: kernel layout {kernel!r} is neither 'default' nor an "
                                f"order of {letters!r}")
        elif key in _POOL_KEYS:
            if len(layouts) != 1 or layouts[0] not in _DATA_LAYOUTS:
                problems.append(f"{key}: expected one layout of {list(_DATA_LAYOUTS)}, got "
                                f"{list(layouts)}")
        else:
            problems.append(f"{key!r} is not an operator ConvertLayout converts (supported: "
                            f"{', '.join([*_CONVS, *_POOL_KEYS])})")
        out[key] = layouts
    if problems:
        raise PassError("ConvertLayout: " + "; ".join(problems))
    return out


def _default_kernel(op: str, data_layout: str, depthwise: bool) -> str:
    """TVM's default kernel layout of ``op`` for ``data_layout``."""
    if op == "nn.conv2d_transpose":
        return "IOHW" if data_layout == "NCHW" else "HWIO"
    if data_layout == "NCHW":
        return "OIHW"
    return "HWOI" if depthwise else "HWIO"


# --- the rewrite ---------------------------------------------------------------------------------

def _named(call: Call, names: tuple[str, ...]) -> Call:
    """``call`` (just built) carrying the source names ``names``."""
    return Call(call.op, call.args, call.attrs, source_names=names)


def _transform(expr: Expr, src: str, dst: str, names: tuple[str, ...]) -> Expr:
    """``layout_transform(expr, src, dst)``, or the input of ``expr`` when ``expr`` is the
    inverse transform (a graph converted before, e.g. weights moved by an earlier run)."""
    if (isinstance(expr, Call) and isinstance(expr.op, Op) and expr.op.name == "layout_transform"
            and (expr.attrs.src_layout, expr.attrs.dst_layout) == (dst, src)):
        return expr.args[0]  # layout_transform(layout_transform(x, B, A), A, B) -> x
    return _named(K.layout_transform(expr, src, dst), names)


def _remap(axis: int, layout: str, held: str) -> int:
    """Where axis ``axis`` of a value in ``layout`` is in the same value held as ``held``."""
    return held.index(layout[axis % len(layout)])


class _Converter:
    """Rewrites one function with the ConvertLayout rules, converting layouts where needed."""

    def __init__(self, desired: Mapping[str, tuple[str, ...]]):
        self.desired = desired
        self.rules = _rules_for(desired)
        self._values: dict[int, Held] = {}
        self._converted: dict[tuple[int, str, str], Expr] = {}
        self._tuples: dict[int, Expr] = {}
        self._consumer_names: tuple[str, ...] = ()

    def run(self, fn: Function) -> Function:
        """``fn`` rewritten (``fn`` itself when nothing changed); params and result keep their
        layouts."""
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
            rule = self.rules.get(node.op.name)
            value = rule(self, node) if rule is not None else None
        elif isinstance(node, TupleGetItem):
            value = self._tuple_get_item(node)
        if value is None:
            value = Held(rebuild(node, tuple(self.primal(c) for c in children(node))))
        self._values[id(node)] = value

    def _tuple_get_item(self, node: TupleGetItem) -> Held | None:
        """Field 0 of a moved multi-output call (``batch_norm``) stays moved; the statistics
        fields are per-channel vectors that no layout touches."""
        tup = self.value(node.tuple_value)
        if not tup.moved:
            return None
        item = TupleGetItem(tup.expr, node.index)
        return Held(item, tup.layout, tup.held) if node.index == 0 else Held(item)

    # --- queries for rules ---------------------------------------------------------------------
    def value(self, old: Expr) -> Held:
        """The rewritten value of an original node (tuples: in the original layout)."""
        if isinstance(old, Tuple):
            return Held(self.primal(old))
        return self._values.get(id(old)) or Held(old)

    @staticmethod
    def tensor(old: Expr) -> TensorType | None:
        """The (original) type of ``old`` when it is a tensor."""
        ty = old.checked_type
        return ty if isinstance(ty, TensorType) else None

    def moved_arg(self, call: Call) -> Held | None:
        """The rewritten first argument of ``call`` when it is moved, else None."""
        value = self.value(call.args[0])
        return value if value.moved else None

    def names_of(self, old: Expr) -> tuple[str, ...]:
        """Source names for a conversion of ``old``: its own, else the current consumer's."""
        return (old.source_names if isinstance(old, Call) else ()) or self._consumer_names

    # --- conversions -----------------------------------------------------------------------------
    def primal(self, old: Expr) -> Expr:
        """The rewritten ``old`` in its original layout (converted back when it was moved)."""
        if isinstance(old, Tuple):
            key = id(old)
            if key not in self._tuples:
                self._tuples[key] = rebuild(old, tuple(self.primal(f) for f in old.fields))
            return self._tuples[key]
        value = self.value(old)
        if not value.moved:
            return value.expr
        key = (id(old), "", "")
        if key not in self._converted:
            names = self.names_of(old)
            if isinstance(old.checked_type, TupleType):  # batch_norm: field 0 moved back
                n = len(old.checked_type.fields)
                first = _transform(TupleGetItem(value.expr, 0), value.held, value.layout,
                                   names)
                rest = [TupleGetItem(value.expr, i) for i in range(1, n)]
                self._converted[key] = Tuple([first, *rest])
            else:
                self._converted[key] = _transform(value.expr, value.held, value.layout, names)
        return self._converted[key]

    def convert(self, old: Expr, layout: str, held: str) -> Expr:
        """The rewritten tensor ``old``, whose axes are named ``layout``, with axes ordered as
        ``held``; made once per value and target layout."""
        if layout == held:
            return self.primal(old)
        value = self.value(old)
        if value.layout == layout and value.held == held:
            return value.expr
        key = (id(old), layout, held)
        if key not in self._converted:
            if value.moved and value.layout == layout:
                new = _transform(value.expr, value.held, held, self.names_of(old))
            else:
                new = _transform(self.primal(old), layout, held, self.names_of(old))
            self._converted[key] = new
        return self._converted[key]

    def operand(self, old: Expr, layout: str, held: str) -> Expr | None:
        """A broadcasting operand of a result in ``layout`` brought to order ``held``.

        Scalars stay as they are, operands with at most one axis larger than 1 (``(C,)`` biases,
        ``(1, 1, 1, C)``) are reshaped, other full-rank operands are converted and lower-rank ones
        are reshaped to full rank, then converted. None when ``old`` has more axes than the result.
        """
        ty = self.tensor(old)
        rank = len(layout)
        if ty is None or ty.ndim > rank:
            return None
        if ty.ndim == 0:
            return self.primal(old)
        value = self.value(old)
        if ty.ndim == rank and value.layout == layout and value.held == held:
            return value.expr
        shape = (1,) * (rank - ty.ndim) + tuple(ty.shape)
        spread = sum(d != 1 for d in shape) > 1
        if spread and ty.ndim == rank:
            return self.convert(old, layout, held)
        new_shape = tuple(shape[layout.index(a)] for a in held)
        if not spread and new_shape == tuple(ty.shape):
            return self.primal(old)
        key = (id(old), layout, held)
        if key not in self._converted:
            names = self.names_of(old)
            if spread:  # (H, W, 1) next to NHWC: made 4-d, then moved
                full = _named(K.reshape(self.primal(old), shape), names)
                self._converted[key] = _transform(full, layout, held, names)
            else:  # (C,) next to NHWC held as NCHW: (1, C, 1, 1)
                self._converted[key] = _named(K.reshape(self.primal(old), new_shape), names)
        return self._converted[key]

    @staticmethod
    def recall(call: Call, args: Sequence[Expr], attrs: Attrs | None = None) -> Call:
        """``call`` with new arguments (and attributes), keeping its operator and source names."""
        return Call(call.op, list(args), attrs if attrs is not None else call.attrs,
                    source_names=call.source_names)


# --- rules of the converted operators -----------------------------------------------------------

def _conv(cv: _Converter, call: Call) -> Held | None:
    """``conv(x, w)`` -> ``conv(x', layout_transform(w))`` with the desired layouts; result moved
    from the original output layout to the desired data layout."""
    name = call.op.name
    attrs = call.attrs
    data, weight = cv.tensor(call.args[0]), cv.tensor(call.args[1])
    letters = _CONVS[name]
    out_layout = attrs.out_layout or attrs.data_layout
    if (data is None or weight is None or attrs.data_layout not in _DATA_LAYOUTS
            or out_layout not in _DATA_LAYOUTS or not _is_order_of(attrs.kernel_layout, letters)):
        return None
    want_data, want_kernel = cv.desired[name]
    if want_kernel == "default":
        c_in = data.shape[attrs.data_layout.index("C")]
        c_out = weight.shape[attrs.kernel_layout.index("O")]
        want_kernel = _default_kernel(name, want_data, c_in == c_out == attrs.groups)
    new_attrs = attrs.replace(data_layout=want_data, kernel_layout=want_kernel, out_layout="")
    args = [cv.convert(call.args[0], attrs.data_layout, want_data),
            cv.convert(call.args[1], attrs.kernel_layout, want_kernel)]
    if new_attrs == attrs and all(a is b for a, b in zip(args, call.args)):
        return None  # already in the desired layouts
    return Held(cv.recall(call, args, new_attrs), out_layout, want_data)


def _converted_pool(cv: _Converter, call: Call) -> Held | None:
    """``pool(x, layout=L)`` -> ``pool(x', layout=D)`` for the desired layout ``D``."""
    attrs = call.attrs
    if attrs.layout not in _DATA_LAYOUTS or (attrs.out_layout or attrs.layout) != attrs.layout:
        return None
    (want,) = cv.desired[call.op.name]
    new_attrs = attrs.replace(layout=want, out_layout=want)
    data = cv.convert(call.args[0], attrs.layout, want)
    if want == attrs.layout and data is call.args[0]:
        return None  # already in the desired layout
    return Held(cv.recall(call, [data], new_attrs), attrs.layout, want)


# --- rules of the operators that follow their input's layout ------------------------------------

def _pool(cv: _Converter, call: Call) -> Held | None:
    """``pool(x{L as H}, layout=L)`` -> ``pool(x', layout=H){L as H}``."""
    value = cv.moved_arg(call)
    attrs = call.attrs
    if (value is None or attrs.layout != value.layout or value.held not in _DATA_LAYOUTS
            or (attrs.out_layout or attrs.layout) != attrs.layout):
        return None
    new_attrs = attrs.replace(layout=value.held, out_layout=value.held if attrs.out_layout else "")
    return Held(cv.recall(call, [value.expr], new_attrs), value.layout, value.held)


def _unary(cv: _Converter, call: Call) -> Held | None:
    """``f(x{L as H}) -> f(x'){L as H}`` for element-wise ops keeping their input's shape."""
    value = cv.moved_arg(call)
    out, arg = cv.tensor(call), cv.tensor(call.args[0])
    if value is None or out is None or arg is None or out.shape != arg.shape:
        return None
    return Held(cv.recall(call, [value.expr]), value.layout, value.held)


def _broadcast(cv: _Converter, call: Call) -> Held | None:
    """``f(x{L as H}, y) -> f(x', y'){L as H}`` with ``y`` reshaped or converted (``operand``)."""
    out = cv.tensor(call)
    if out is None:
        return None
    tags = [(v.layout, v.held) for v in (cv.value(a) for a in call.args)
            if v.moved and len(v.layout) == out.ndim]
    if not tags:
        return None
    layout, held = tags[0]
    args: list[Expr] = []
    for arg in call.args:
        new = cv.operand(arg, layout, held)
        if new is None:
            return None
        args.append(new)
    return Held(cv.recall(call, args), layout, held)


def _axis(cv: _Converter, call: Call) -> Held | None:
    """``f(x{L as H}, ..., axis=a)`` -> ``f(x', ..., axis=H.index(L[a])){L as H}`` for ops whose
    other arguments are vectors along ``axis`` (bias, alpha, gamma, statistics)."""
    value = cv.moved_arg(call)
    data = cv.tensor(call.args[0])
    if value is None or data is None or data.ndim != len(value.layout):
        return None
    new_attrs = call.attrs.replace(axis=_remap(call.attrs.axis, value.layout, value.held))
    args = [value.expr, *(cv.primal(a) for a in call.args[1:])]
    return Held(cv.recall(call, args, new_attrs), value.layout, value.held)


def _pad(cv: _Converter, call: Call) -> Held | None:
    """``pad(x{L as H}, widths) -> pad(x', widths in H's order){L as H}``."""
    value = cv.moved_arg(call)
    widths = tuple(tuple(w) for w in call.attrs.pad_width)
    if value is None or len(widths) != len(value.layout):
        return None
    new_widths = tuple(widths[value.layout.index(a)] for a in value.held)
    new_attrs = call.attrs.replace(pad_width=new_widths)
    return Held(cv.recall(call, [value.expr, cv.primal(call.args[1])], new_attrs),
                value.layout, value.held)


def _concatenate(cv: _Converter, call: Call) -> Held | None:
    """``concatenate((x{L as H}, y, ...), axis=a)`` -> ``concatenate((x', y'), H.index(L[a]))``
    with the inputs not yet in ``H`` converted."""
    tup = call.args[0]
    if not isinstance(tup, Tuple):
        return None
    values = [cv.value(f) for f in tup.fields]
    types = [cv.tensor(f) for f in tup.fields]
    tags = [(v.layout, v.held) for v in values if v.moved]
    if not tags or any(t is None or t.ndim != len(tags[0][0]) for t in types):
        return None
    layout, held = tags[0]
    fields = Tuple([cv.convert(f, layout, held) for f in tup.fields])
    new_attrs = call.attrs.replace(axis=_remap(call.attrs.axis, layout, held))
    return Held(cv.recall(call, [fields], new_attrs), layout, held)


def _reduce(cv: _Converter, call: Call) -> Held | None:
    """``r(x{L as H}, axes)`` -> ``r(x', axes in H)``; the result is moved unless the axes kept
    are in the same order in ``L`` and ``H`` (``mean`` over ``HW`` of ``NHWC`` held as ``NCHW``
    leaves ``NC`` either way)."""
    value = cv.moved_arg(call)
    attrs = call.attrs
    if value is None:
        return None
    rank = len(value.layout)
    chosen = set(range(rank)) if attrs.axis is None else {a % rank for a in attrs.axis}
    axes = set(range(rank)) - chosen if attrs.exclude else chosen
    new_axes = tuple(sorted(_remap(a, value.layout, value.held) for a in axes))
    reduced = cv.recall(call, [value.expr], attrs.replace(axis=new_axes, exclude=False))
    if attrs.keepdims:
        return Held(reduced, value.layout, value.held)
    kept = "".join(a for i, a in enumerate(value.layout) if i not in axes)
    kept_held = "".join(a for a in value.held if a in kept)
    return Held(reduced, kept, kept_held)


def _layout_transform(cv: _Converter, call: Call) -> Held | None:
    """``layout_transform(x{L as H}, L, H)`` -> ``x'``: the value is already in ``H``."""
    value = cv.moved_arg(call)
    attrs = call.attrs
    if value is None or (attrs.src_layout, attrs.dst_layout) != (value.layout, value.held):
        return None
    return Held(value.expr)


@functools.cache
def _follow_rules() -> Mapping[str, Rule]:
    """The rules of the operators that follow their input's layout, by operator name."""
    rules: dict[str, Rule] = {}
    for name, op_def in all_ops().items():
        if op_def.pattern == OpPattern.ELEMWISE and op_def.num_inputs == 1:
            rules[name] = _unary  # relu(x{L as H}) -> relu(x'){L as H}
        elif (op_def.pattern == OpPattern.BROADCAST and op_def.num_inputs >= 2
              and op_def.attrs_type is None and name not in _NOT_BROADCAST):
            rules[name] = _broadcast  # add(x{NHWC as NCHW}, b[C]) -> add(x', b[1,C,1,1])
    for name in _POOLS:
        rules[name] = _pool  # pool(x{NHWC as NCHW}, NHWC) -> pool(x', NCHW)
    for name in _AXIS_OPS:
        rules[name] = _axis  # bias_add(x{NHWC as NCHW}, b, axis=3) -> bias_add(x', b, axis=1)
    for name in _REDUCTIONS:
        rules[name] = _reduce  # mean(x{NHWC as NCHW}, [1, 2]) -> mean(x', [2, 3]){NC}
    rules["nn.pad"] = _pad  # pad(x{NHWC as NCHW}, w) -> pad(x', w permuted)
    rules["concatenate"] = _concatenate  # concat((x{NHWC as NCHW}, y), 3) -> concat((x', y'), 1)
    rules["layout_transform"] = _layout_transform  # lt(x{NHWC as NCHW}, NHWC, NCHW) -> x'
    return rules


def _rules_for(desired: Mapping[str, tuple[str, ...]]) -> dict[str, Rule]:
    """The follow rules plus the conversion rule of every operator in ``desired``."""
    rules = dict(_follow_rules())
    for name in desired:
        rules[name] = _conv if name in _CONVS else _converted_pool
    return rules


def convert_layout(fn: Function, desired_layouts: Mapping[str, Sequence[str]]) -> Function:
    """Convert the layouts of one function's convolutions and pools (see the module docstring).

    Parameters
    ----------
    fn : Function
        A typed function (not modified); run ``InferType`` first.
    desired_layouts : mapping of str to list of str
        Desired layouts per operator name, as for :func:`ConvertLayout`.

    Returns
    -------
    Function
        The rewritten function (untyped; ``fn`` itself when nothing changed).

    Raises
    ------
    PassError
        When ``desired_layouts`` names an unsupported operator or layout.
    """
    return _Converter(_check_desired(desired_layouts)).run(fn)


def _skipped(fn: Function) -> bool:
    return any(fn.attrs.get(key) for key in ("Primitive", "Compiler", "SkipOptimization"))


def ConvertLayout(desired_layouts: Mapping[str, Sequence[str]]) -> ModulePass:
    """The ConvertLayout pass (opt level 3): convolutions and pools to the desired layouts.

    Parameters
    ----------
    desired_layouts : mapping of str to list of str
        Per operator name, its desired layouts: ``[data_layout, kernel_layout]`` for
        ``nn.conv2d`` / ``nn.conv2d_transpose`` (kernel ``"default"`` picks TVM's default for the
        data layout), ``[layout]`` for the 2-d pools. Data layouts are ``NCHW`` or ``NHWC``.

    Returns
    -------
    ModulePass
        Rewrites every function except fused and externally compiled ones; the result is typed.

    Raises
    ------
    PassError
        At once, when ``desired_layouts`` names an unsupported operator or layout.

    Examples
    --------
    >>> desired = {"nn.conv2d": ["NCHW", "default"]}
    >>> with PassContext(opt_level=3):  # doctest: +SKIP
    ...     mod = ConvertLayout(desired)(mod)
    """
    desired = _check_desired(desired_layouts)

    def run(mod: IRModule, ctx: PassContext) -> IRModule:
        typed = infer_type(mod)
        out = typed.copy()
        for gv, fn in typed.items():
            if not _skipped(fn):
                out[gv] = _Converter(desired).run(fn)
        return infer_type(out)

    return ModulePass(run, PassInfo(3, "ConvertLayout", ("InferType",)))
