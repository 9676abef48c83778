"""The Keras 3 importer: ``from_keras`` (TVM's ``relay.frontend.from_keras``).

The model's graph is walked as Keras itself runs it (``Functional._nodes_by_depth``, deepest
first); each layer call is converted from the layer's configuration and weights by the converters
of :mod:`kiln.frontend.keras_layers` (no TensorFlow graph is involved) and stamped with the layer's
name. Nested models are walked in place (their layers are stamped ``"outer/inner"``).

``layout="NCHW"`` (TVM's default) makes 4-D inputs and outputs channels-first (the caller
transposes its NHWC data, as TVM's tutorials do) and runs spatial layers channels-first;
``layout="NHWC"`` keeps the Keras layout throughout. Tensors of other ranks keep the Keras layout
at the function's boundary in both cases.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np

import kiln.op as K
from kiln.errors import DynamicShapeError, FrontendError, KilnTypeError
from kiln.frontend.common import ImportState, check_input_shape, require, unsupported_error
from kiln.frontend.keras_layers import LAYERS, Ctx, KVal, apply_activation, check_layer
from kiln.ir.expr import Constant, Expr
from kiln.ir.module import IRModule

__all__ = ["from_keras"]

_LAYOUTS = ("NCHW", "NHWC")


def from_keras(model: Any, shape: Mapping[str, Sequence[int]] | None = None, layout: str = "NCHW",
               freeze_params: bool = True) -> tuple[IRModule, dict[str, Any]]:
    """Import a Keras 3 model.

    Parameters
    ----------
    model : keras.Model, or path of a ``.keras`` / ``.h5`` file
        A Functional or Sequential model (built); nested models are converted in place.
    shape : dict of str to tuple of int, optional
        Input shapes keyed by the Keras input layer names, in the function's layout (NCHW for
        4-D inputs with ``layout="NCHW"``). Required for unknown dims other than the batch,
        which defaults to 1 (as TVM does).
    layout : str
        ``"NCHW"`` (TVM's default: 4-D inputs and outputs channels-first) or ``"NHWC"`` (the
        Keras layout).
    freeze_params : bool
        True: weights are embedded as constants and ``params`` is empty. False: they become
        function parameters (named ``layer.weight``) returned in ``params``.

    Returns
    -------
    mod : IRModule
        ``main`` takes the model inputs (then the used params) and returns the model outputs (a
        tuple when several); ``mod.attrs["output_names"]`` names them after their layers.
    params : dict of str to NDArray
        The params ``main`` takes besides the inputs.

    Examples
    --------
    >>> mod, params = from_keras(model, shape={"input_1": (1, 3, 224, 224)})  # doctest: +SKIP
    """
    if layout not in _LAYOUTS:
        raise FrontendError(f"from_keras: layout must be one of {list(_LAYOUTS)}, got {layout!r}")
    keras = require("keras", "keras", "from_keras")
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise FrontendError(f"from_keras: no such model file {path!r}")
        try:
            model = keras.models.load_model(path, compile=False)
        except Exception as e:
            raise FrontendError(f"from_keras: cannot load {path!r}: {e}") from None
    if not isinstance(model, keras.Model):
        raise FrontendError(f"from_keras expects a keras.Model or a model file path, got "
                            f"{type(model).__name__}")
    return _Importer(model, dict(shape or {}), layout == "NCHW", freeze_params).run()


def _graph(model: Any) -> Any:
    """The Functional graph of ``model`` (a Sequential model's inner Functional)."""
    functional = getattr(model, "_functional", None) if type(model).__name__ == "Sequential" else model
    if functional is not None and not hasattr(functional, "_nodes_by_depth"):
        raise FrontendError(f"Keras model {model.name!r} ({type(model).__name__}) is a subclassed model: "
                            "only Functional and Sequential models can be imported")
    if functional is None:
        raise FrontendError(f"Keras model {model.name!r} ({type(model).__name__}) is not built: give it "
                            "an Input, or call model.build(input_shape) before importing it")
    return functional


def _nodes(graph: Any) -> list[Any]:
    """The graph's layer calls in execution order (deepest first, as Keras runs them)."""
    out: list[Any] = []
    for depth in sorted(graph._nodes_by_depth, reverse=True):
        out.extend(n for n in graph._nodes_by_depth[depth] if n.operation is not None and not n.is_input)
    return out


def _is_model(op: Any) -> bool:
    return hasattr(op, "_nodes_by_depth") or (type(op).__name__ == "Sequential"
                                              and getattr(op, "_functional", None) is not None)


class _Importer:
    """One Keras import."""

    def __init__(self, model: Any, shape: dict[str, Sequence[int]], nchw: bool, freeze_params: bool):
        self.model = model
        self.shape = shape
        self.nchw = nchw
        self.state = ImportState(freeze_params)
        self.ctx = Ctx(self.state, nchw)
        self.layer_class = require("keras", "keras", "from_keras").layers.Layer

    def run(self) -> tuple[IRModule, dict[str, Any]]:
        graph = _graph(self.model)
        self._check_supported(graph)
        inputs = self._inputs(graph)
        outs = self._run_graph(graph, inputs, "")
        names = [h.operation.name + (f":{h.tensor_index}" if h.tensor_index else "")
                 for h in (t._keras_history for t in graph.outputs)]
        exprs: list[Expr] = []
        for v in outs:
            rank = len(self.ctx.shape(v.expr))
            exprs.append(self.ctx.cf(v) if self.nchw and rank == 4 else self.ctx.cl(v))
        finished = self.state.finish(exprs, "output")
        assert all(e is not None for e in finished)  # finish keeps every (present) output
        return self.state.module(cast("list[Expr]", finished), names)

    # --- checks and inputs --------------------------------------------------------------------
    def _check_supported(self, graph: Any) -> None:
        problems: dict[tuple[str, str], list[str]] = {}

        def scan(g: Any, scope: str) -> None:
            for node in _nodes(g):
                op = node.operation
                if _is_model(op):
                    scan(_graph(op), f"{scope}{op.name}/")
                    continue
                kind = type(op).__name__
                if not isinstance(op, self.layer_class):
                    kind = f"keras.ops.{kind}"
                    detail = "" if type(op).__name__ in OPS else "no converter"
                else:
                    detail = check_layer(op) or ""
                if detail:
                    key = (kind, "" if detail == "no converter" else detail)
                    problems.setdefault(key, []).append(scope + op.name)

        scan(graph, "")
        if problems:
            raise unsupported_error([(k, names, d) for (k, d), names in problems.items()], framework="Keras")

    def _inputs(self, graph: Any) -> list[KVal]:
        names = [t._keras_history.operation.name for t in graph.inputs]
        unknown = sorted(set(self.shape) - set(names))
        if unknown:
            raise FrontendError(f"from_keras: shape names {unknown}, which are not model inputs "
                                f"(the inputs are {names})")
        vals: list[KVal] = []
        unbound: list[tuple[str, tuple[int | str | None, ...] | None, tuple[int, ...]]] = []
        for name, t in zip(names, graph.inputs):
            declared: tuple[int | None, ...] = tuple(None if d is None else int(d) for d in t.shape)
            cf = self.nchw and len(declared) == 4
            if cf:
                declared = (declared[0], declared[3], declared[1], declared[2])
            dims: tuple[int, ...]
            if name in self.shape:
                dims = check_input_shape(name, declared, self.shape[name])
            else:
                free = tuple(1 if (i == 0 and d is None) else d for i, d in enumerate(declared))
                missing = tuple(i for i, d in enumerate(free) if d is None)
                if missing:
                    unbound.append((name, declared, missing))
                    continue
                dims = cast("tuple[int, ...]", free)  # no dim is None once `missing` is empty
            dtype = str(t.dtype)
            vals.append(KVal(self.state.add_input(name, [int(d) for d in dims], dtype), cf))
        if unbound:
            raise DynamicShapeError(unbound, frontend="from_keras")
        return vals

    # --- the walk -----------------------------------------------------------------------------
    def _run_graph(self, graph: Any, inputs: list[KVal], scope: str) -> list[KVal]:
        if len(inputs) != len(graph.inputs):
            raise FrontendError(f"Keras model {graph.name!r} takes {len(graph.inputs)} inputs, got "
                                f"{len(inputs)}")
        values: dict[int, KVal] = {id(t): v for t, v in zip(graph.inputs, inputs)}
        for node in _nodes(graph):
            if any(id(x) not in values for x in node.input_tensors):
                continue
            args, kwargs = node.arguments.fill_in(values)
            outs = self._call(node.operation, args, kwargs, scope)
            if len(outs) != len(node.outputs):
                raise FrontendError(f"Keras layer {scope}{node.operation.name!r} produced {len(outs)} "
                                    f"outputs, Keras says {len(node.outputs)}")
            for x, y in zip(node.outputs, outs):
                values[id(x)] = y
        missing = [t.name for t in graph.outputs if id(t) not in values]
        if missing:
            raise FrontendError(f"Keras model {graph.name!r}: outputs {missing} are not connected to "
                                "its inputs")
        return [values[id(t)] for t in graph.outputs]

    def _call(self, layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any], scope: str) -> list[KVal]:
        flat = _flatten_vals(args)
        if _is_model(layer):
            inner = _graph(layer)
            return self._run_graph(inner, flat, f"{scope}{layer.name}/")
        name = scope + layer.name
        self.ctx.layer_name = name
        kw = {k: v for k, v in kwargs.items() if k not in ("training", "mask") or type(layer).__name__
              == "Softmax"}
        try:
            if isinstance(layer, self.layer_class):
                outs = LAYERS[type(layer).__name__][0](self.ctx, layer, flat, kw)
            else:
                outs = OPS[type(layer).__name__](self.ctx, layer, list(args), kw)
        except FrontendError:
            raise
        except Exception as e:
            raise FrontendError(f"Keras layer {name!r} ({type(layer).__name__}): cannot convert: "
                                f"{type(e).__name__}: {e}") from e
        try:
            exprs = self.state.finish([o.expr for o in outs], name)
        except KilnTypeError as e:
            raise FrontendError(f"Keras layer {name!r} ({type(layer).__name__}): {e}") from None
        return [KVal(e, o.cf) for e, o in zip(exprs, outs) if e is not None]


def _flatten_vals(args: Any) -> list[KVal]:
    """The converted tensors among a layer call's positional arguments, in order."""
    out: list[KVal] = []
    stack = [args]
    while stack:
        item = stack.pop(0)
        if isinstance(item, KVal):
            out.append(item)
        elif isinstance(item, (list, tuple)):
            stack[:0] = list(item)
        elif isinstance(item, dict):
            stack[:0] = list(item.values())
    return out



# --- keras.ops operations called on symbolic tensors (``x + 3.0``, ``x[:, 1:]``, ...) ---------------

OpConverter = Callable[[Ctx, Any, list[Any], dict[str, Any]], list[KVal]]


def _operand(ctx: Ctx, value: Any, like: KVal, cf: bool) -> Expr:
    """A binary op's operand: a converted tensor in layout ``cf``, or a constant like ``like``."""
    if isinstance(value, KVal):
        return ctx.cf(value) if cf else ctx.cl(value)
    arr = np.asarray(value, dtype=ctx.dtype(like.expr))
    return Constant(ctx.broadcast_const(KVal(like.expr, cf), arr) if arr.ndim else arr)


def _binary(fn: Callable[[Expr, Expr], Expr]) -> OpConverter:
    def convert(ctx: Ctx, op: Any, args: list[Any], kw: dict[str, Any]) -> list[KVal]:
        vals = [a for a in args[:2] if isinstance(a, KVal)]
        exprs, cf = ctx.same_layout(vals)
        like = KVal(exprs[0], cf)
        a, b = (_operand(ctx, x, like, cf) for x in args[:2])
        return [KVal(fn(a, b), cf)]
    return convert


def _unary(fn: Callable[[Ctx, KVal], KVal]) -> OpConverter:
    def convert(ctx: Ctx, op: Any, args: list[Any], kw: dict[str, Any]) -> list[KVal]:
        return [fn(ctx, args[0])]
    return convert


def _act(name: str) -> OpConverter:
    return _unary(lambda ctx, v: apply_activation(ctx, name, v))


def _get_item(ctx: Ctx, op: Any, args: list[Any], kw: dict[str, Any]) -> list[KVal]:
    x = ctx.cl(args[0])
    shape = ctx.shape(x)
    key = args[1] if isinstance(args[1], tuple) else (args[1],)
    if any(k is None for k in key) or sum(k is Ellipsis for k in key) > 1:
        raise FrontendError(f"{ctx.layer_name!r}: indexing with {key} is not supported")
    if Ellipsis in key:
        i = key.index(Ellipsis)
        key = key[:i] + (slice(None),) * (len(shape) - len(key) + 1) + key[i + 1:]
    begin, end, strides, drop = [], [], [], []
    for axis, k in enumerate(key):
        if isinstance(k, slice):
            b, e, st = k.indices(shape[axis])
        else:
            b = int(k) % shape[axis]
            e, st = b + 1, 1
            drop.append(axis)
        begin.append(b)
        end.append(e if e >= 0 or st > 0 else -shape[axis] - 1)
        strides.append(st)
    out = K.strided_slice(x, begin, end, strides=strides, axes=list(range(len(key))))
    return [KVal(K.squeeze(out, axis=drop) if drop else out)]


def _reshape(ctx: Ctx, op: Any, args: list[Any], kw: dict[str, Any]) -> list[KVal]:
    return [KVal(K.reshape(ctx.cl(args[0]), tuple(-1 if d is None else int(d) for d in op.newshape)))]


def _transpose(ctx: Ctx, op: Any, args: list[Any], kw: dict[str, Any]) -> list[KVal]:
    return [KVal(K.transpose(ctx.cl(args[0]), None if op.axes is None else tuple(op.axes)))]


def _reduce(fn: Callable[..., Expr]) -> OpConverter:
    def convert(ctx: Ctx, op: Any, args: list[Any], kw: dict[str, Any]) -> list[KVal]:
        x = ctx.cl(args[0])
        axis = op.axis if op.axis is None or isinstance(op.axis, (list, tuple)) else [op.axis]
        return [KVal(fn(x, axis=None if axis is None else list(axis), keepdims=bool(op.keepdims)))]
    return convert


def _concat(ctx: Ctx, op: Any, args: list[Any], kw: dict[str, Any]) -> list[KVal]:
    exprs, cf = ctx.same_layout(list(args[0]))
    axis = 0 if op.axis is None else ctx.axis(KVal(exprs[0], cf), int(op.axis))
    return [KVal(K.concatenate(exprs, axis=axis), cf)]


#: ``keras.ops`` operation class name -> converter (the operation's call arguments as given).
OPS: dict[str, OpConverter] = {
    "Add": _binary(K.add),
    "Subtract": _binary(K.subtract),
    "Multiply": _binary(K.multiply),
    "Divide": _binary(K.divide),
    "TrueDivide": _binary(K.divide),
    "Maximum": _binary(K.maximum),
    "Minimum": _binary(K.minimum),
    "Power": _binary(K.power),
    "Negative": _unary(lambda ctx, v: KVal(K.negative(v.expr), v.cf)),
    "Abs": _unary(lambda ctx, v: KVal(K.abs(v.expr), v.cf)),
    "Sqrt": _unary(lambda ctx, v: KVal(K.sqrt(v.expr), v.cf)),
    "Exp": _unary(lambda ctx, v: KVal(K.exp(v.expr), v.cf)),
    "Relu": _act("relu"),
    "Relu6": _act("relu6"),
    "Sigmoid": _act("sigmoid"),
    "HardSigmoid": _act("hard_sigmoid"),
    "Silu": _act("silu"),
    "HardSilu": _act("hard_silu"),
    "Tanh": _act("tanh"),
    "GetItem": _get_item,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Mean": _reduce(K.mean),
    "Sum": _reduce(K.sum),
    "Max": _reduce(K.max),
    "Min": _reduce(K.min),
    "Concatenate": _concat,
}
