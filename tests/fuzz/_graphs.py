"""A Hypothesis strategy for small random ONNX graphs built from Kiln's op library.

A graph starts from one or two float32 inputs (0-d to 4-d; often NCHW) and grows node by node:
every step picks an op family that applies to a value already in the graph and appends its
nodes. The families cover what real models are made of and what has broken before:

* element-wise unary ops and binary ops with broadcasting, where the second operand is another
  value, a fresh constant, or a constant *shared* by several nodes (and so by several kernels):
  0-d and [1] scalars from a small per-graph palette, broadcast shapes (a trailing sub-shape with
  some dims set to 1) from a pool;
* 0-d values computed in the graph (a full reduction with ``keepdims=0``) used by later nodes;
* reductions of such a broadcast product over the leading axes (``mean(x * s)``, global pooling
  in NHWC), whose innermost axis the schedules vectorize;
* Clip / hard-swish / hard-sigmoid / SiLU / ReLU6 / PRelu patterns on shared 0-d initializers (as
  tf2onnx emits for Keras models), Clip with bounds computed in the graph;
* reductions (ReduceSum/Mean/Max/Min/L2) over random axes, with and without ``keepdims``;
* layout ops: Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Concat, Pad, Slice, Split,
  Expand, Gather;
* MatMul/Gemm, Softmax/LogSoftmax, LayerNormalization, BatchNormalization, Where with a
  comparison, Sqrt/Log/Exp/Reciprocal/Pow on safe inputs;
* Conv (1x1, 3x3, 1x3, depthwise, grouped, strided, dilated, asymmetric pads) and pooling on
  NCHW values, and both between NHWC<->NCHW transposes (as tf2onnx exports Keras);
  ConvTranspose, Resize, InstanceNormalization, DepthToSpace, Tile.

The outputs are the last value plus, sometimes, an intermediate (possibly read by later nodes),
a graph input, an initializer, or the last value again.

Each value's shape is tracked while building, so every drawn node is valid; the sizes stay
small (at most :data:`MAX_ELEMENTS` elements per value) because compiling is the slow part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

__all__ = ["GraphCase", "graphs"]

MAX_ELEMENTS = 2048
OPSET = 17
DIMS = (1, 2, 3, 4, 5, 8, 16)
SCALARS = (0.5, 1 / 6, 3.0, -1.5, 2.0)

Shape = tuple[int, ...]


class GraphCase:
    """A drawn model and its inputs (printed as ONNX text when Hypothesis reports a failure)."""

    def __init__(self, model: onnx.ModelProto, feeds: dict[str, np.ndarray]):
        self.model = model
        self.feeds = feeds

    def __repr__(self) -> str:
        inits = {i.name: list(i.dims) for i in self.model.graph.initializer}
        shapes = {k: v.shape for k, v in self.feeds.items()}
        return f"GraphCase(inputs={shapes}, initializers={inits})\n{onnx.printer.to_text(self.model.graph)}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # Hypothesis's pretty printer
        printer.text(repr(self))


@dataclass
class _Builder:
    draw: Any
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: dict[str, np.ndarray] = field(default_factory=dict)
    shapes: dict[str, Shape] = field(default_factory=dict)   # every float value in the graph
    inputs: dict[str, Shape] = field(default_factory=dict)
    shared: dict[tuple[Shape, float, float], list[str]] = field(default_factory=dict)  # by shape
    by_value: dict[tuple[Shape, str, bytes], str] = field(default_factory=dict)
    palette: list[float] = field(default_factory=list)
    count: int = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def node(self, op: str, inputs: list[str], shape: Shape, **attrs: Any) -> str:
        out = self.fresh(op.lower()[:4] + "_")
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        self.shapes[out] = shape
        return out

    def const(self, value: np.ndarray, share: bool = False) -> str:
        """An initializer; with ``share`` an existing one of the same value is reused (exporters
        write one ``3.0`` for every hard-swish of a model)."""
        value = np.asarray(value)
        key = (value.shape, value.dtype.str, value.tobytes())
        if share and key in self.by_value:
            return self.by_value[key]
        name = self.fresh("c")
        self.inits[name] = value
        if share:
            self.by_value[key] = name
        return name

    def int_const(self, values: list[int]) -> str:
        return self.const(np.array(values, np.int64))

    def random_const(self, shape: Shape, share: bool = True, low: float = -1.0,
                     high: float = 1.0) -> str:
        """A random float32 initializer; with ``share``, usually one drawn before with this shape
        (and range), so that one constant feeds several nodes (and kernels)."""
        pool = self.shared.setdefault((shape, low, high), [])
        if share and pool and self.draw(st.integers(0, 3)) > 0:
            return self.draw(st.sampled_from(pool))
        seed = self.draw(st.integers(0, 2**16))
        name = self.const(np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32))
        if share:
            pool.append(name)
        return name

    def scalar_const(self, shape: Shape = ()) -> str:
        """A 0-d (or [1]) constant from a small palette, shared by value: several nodes, and so
        several kernels, read the same scalar initializer."""
        if not self.palette:  # a model has few scalar constants, each read by many nodes
            self.palette = self.draw(st.lists(st.sampled_from(SCALARS), min_size=1, max_size=2))
        value = self.draw(st.sampled_from(self.palette))
        return self.const(np.full(shape, value, np.float32), share=True)

    def any_value(self) -> str:
        """Any value (the newest one half the time)."""
        x = self.pick()
        assert x is not None  # the graph inputs are always there
        return x

    def pick(self, pred: Any = None) -> str | None:
        """A value satisfying ``pred``: the newest one half the time (deep chains fuse into one
        kernel), else any."""
        names = [n for n, s in self.shapes.items() if pred is None or pred(s)]
        if not names:
            return None
        return names[-1] if self.draw(st.booleans()) else self.draw(st.sampled_from(names))


def _broadcast_shape(draw: Any, shape: Shape) -> Shape:
    """A shape that broadcasts to ``shape``: [], [1], a suffix with some dims set to 1, or ``shape``."""
    kind = draw(st.sampled_from(["scalar", "one", "suffix", "full"]))
    if kind == "scalar" or not shape:
        return ()
    if kind == "one":
        return (1,)
    if kind == "full":
        return shape
    n = draw(st.integers(1, len(shape)))
    return tuple(d if draw(st.booleans()) else 1 for d in shape[len(shape) - n:])


def _bshape(a: Shape, b: Shape) -> Shape:
    return tuple(np.broadcast_shapes(a, b))


# ---- op families: each appends nodes to the builder and returns False when it does not apply ----

_UNARY = ("Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Erf", "Softplus", "Identity", "Elu", "LeakyRelu",
          "HardSigmoid", "HardSwish")


def _unary(b: _Builder) -> bool:
    x = b.any_value()
    op = b.draw(st.sampled_from(_UNARY))
    b.node(op, [x], b.shapes[x])
    return True


def _binary(b: _Builder) -> bool:
    x = b.any_value()
    op = b.draw(st.sampled_from(("Add", "Sub", "Mul", "Max", "Min", "Div")))
    shape = b.shapes[x]
    source = b.draw(st.sampled_from(["const", "value"]))
    if source == "value":
        others = [n for n, s in b.shapes.items() if _broadcasts(s, shape)]
        y = b.draw(st.sampled_from(others))
        if op == "Div":  # keep the divisor away from zero: 1 + |y|
            y = b.node("Add", [b.node("Abs", [y], b.shapes[y]), b.const(np.array(1, np.float32), True)],
                       b.shapes[y])
    else:
        low, high = (0.5, 2.0) if op == "Div" else (-1.0, 1.0)
        ys = _broadcast_shape(b.draw, shape)
        if op != "Div" and (b.draw(st.booleans()) or (len(ys) <= 1 and prod(ys) == 1)):
            y = b.scalar_const(b.draw(st.sampled_from(((), (1,)))))
        else:
            y = b.random_const(ys, low=low, high=high)
    ys = b.inits[y].shape if y in b.inits else b.shapes[y]
    args = [x, y] if op == "Div" or b.draw(st.booleans()) else [y, x]
    b.node(op, args, _bshape(shape, ys))
    return True


def _broadcasts(small: Shape, big: Shape) -> bool:
    try:
        return tuple(np.broadcast_shapes(small, big)) == big
    except ValueError:
        return False


def _scalar_from_reduce(b: _Builder) -> bool:
    """A 0-d value computed in the graph (full reduction, keepdims=0) used by a later node."""
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    op = b.draw(st.sampled_from(("ReduceMean", "ReduceMax", "ReduceSum")))
    s = b.node(op, [x], (), keepdims=0)  # no axes: every axis
    y = b.pick(lambda sh: len(sh) >= 1)
    assert y is not None
    user = b.draw(st.sampled_from(("Mul", "Add", "Sub")))
    b.node(user, [y, s] if b.draw(st.booleans()) else [s, y], b.shapes[y])
    return True


def _activation_pattern(b: _Builder) -> bool:
    """hard-swish / hard-sigmoid / Clip / SiLU written with primitive ops and shared 0-d constants."""
    x = b.any_value()
    shape = b.shapes[x]
    kind = b.draw(st.sampled_from(("hswish", "hsigmoid", "clip", "silu", "relu6", "clip computed",
                                   "prelu")))
    three = b.const(np.array(3, np.float32), share=True)
    zero = b.const(np.array(0, np.float32), share=True)
    six = b.const(np.array(6, np.float32), share=True)
    if kind == "hswish" or kind == "hsigmoid":
        a = b.node("Add", [x, three], shape)
        c = b.node("Clip", [a, zero, six], shape)
        r = b.node("Mul", [c, b.const(np.array(1 / 6, np.float32), share=True)], shape)
        if kind == "hswish":
            b.node("Mul", [x, r], shape)
    elif kind == "clip":
        lo = b.const(np.array(-0.5, np.float32), share=True)
        hi = b.const(np.array(0.5, np.float32), share=True)
        b.node("Clip", [x, lo, hi], shape)
    elif kind == "clip computed":  # bounds are 0-d values computed in the graph
        src = b.any_value()
        lo = b.node("ReduceMin", [src], (), keepdims=0) if b.shapes[src] else src
        hi = b.node("Add", [lo, b.scalar_const()], ())
        b.node("Clip", [x, lo, hi], shape)
    elif kind == "prelu":  # a slope that broadcasts: [], [1], or a trailing shape
        b.node("PRelu", [x, b.random_const(_broadcast_shape(b.draw, shape))], shape)
    elif kind == "relu6":
        b.node("Clip", [x, zero, six], shape)
    else:
        b.node("Mul", [x, b.node("Sigmoid", [x], shape)], shape)
    return True


def _reduce(b: _Builder, x: str | None = None, how: str | None = None) -> bool:
    x = x or b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    shape = b.shapes[x]
    rank = len(shape)
    op = b.draw(st.sampled_from(("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2")))
    keep = b.draw(st.booleans())
    how = how or b.draw(st.sampled_from(("leading", "last", "subset", "all")))
    if how == "leading" and rank > 1:  # the innermost (often vectorized) axis stays
        axes = list(range(b.draw(st.integers(0, rank - 2)), rank - 1))
    elif how == "last":
        axes = [rank - 1]
    elif how == "all":
        axes = list(range(rank))
    else:
        axes = sorted(b.draw(st.sets(st.integers(0, rank - 1), min_size=1, max_size=rank)))
    out = tuple((1 if keep else None) if i in axes else d for i, d in enumerate(shape))
    out_shape = tuple(d for d in out if d is not None)
    written = [a - rank if b.draw(st.booleans()) else a for a in axes]  # negative axes too
    if op == "ReduceSum":
        b.node(op, [x, b.int_const(written)], out_shape, keepdims=int(keep))
    else:
        b.node(op, [x], out_shape, axes=written, keepdims=int(keep))
    return True


def _scaled_reduce(b: _Builder) -> bool:
    """A reduction of an element-wise op with a scalar or broadcast operand (the mean of
    ``x * scale``): the operand is a shared constant (0-d, [1], or a broadcast shape), a 0-d value
    computed by a full reduction, or a [1]-shaped one; the element-wise op fuses into the
    reduction's kernel."""
    # preferably a value whose innermost axis is at least a vector wide (the reduction is vectorized)
    x = b.pick(lambda s: len(s) >= 2 and s[-1] >= 8) or b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    shape = b.shapes[x]
    kind = b.draw(st.sampled_from(("shared 0-d", "computed 0-d", "shared 0-d", "computed 0-d",
                                   "computed [1]", "broadcast")))
    if kind == "shared 0-d":
        y = b.scalar_const(b.draw(st.sampled_from(((), (1,)))))
        if b.draw(st.booleans()):  # a second reader in another branch (so another kernel)
            b.node("Mul", [x, y], _bshape(shape, b.inits[y].shape))
    elif kind == "broadcast":
        y = b.random_const(_broadcast_shape(b.draw, shape), share=True)
    else:
        src = b.pick(lambda s: len(s) >= 1)
        assert src is not None
        keep = kind == "computed [1]"
        y = b.node("ReduceMax" if b.draw(st.booleans()) else "ReduceMean", [src],
                   (1,) * len(b.shapes[src]) if keep else (), keepdims=int(keep))
        if keep and len(b.shapes[src]) > len(shape):
            y = b.node("Reshape", [y, b.int_const([1])], (1,))
    ys = b.inits[y].shape if y in b.inits else b.shapes[y]
    op = b.draw(st.sampled_from(("Mul", "Add", "Sub")))
    # over the leading axes, as global pooling in NHWC does: the innermost axis is vectorized
    return _reduce(b, b.node(op, [x, y] if b.draw(st.booleans()) else [y, x], _bshape(shape, ys)),
                   how="leading")


def _transpose(b: _Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 2)
    if x is None:
        return False
    shape = b.shapes[x]
    perm = b.draw(st.permutations(range(len(shape))))
    b.node("Transpose", [x], tuple(shape[p] for p in perm), perm=list(perm))
    return True


def _factorizations(n: int, rank: int) -> list[Shape]:
    if rank == 0:
        return [()] if n == 1 else []
    if rank == 1:
        return [(n,)]
    out = []
    for d in range(1, n + 1):
        if n % d == 0:
            out += [(d, *rest) for rest in _factorizations(n // d, rank - 1)]
    return out


def _reshape(b: _Builder) -> bool:
    x = b.any_value()
    shape = b.shapes[x]
    size = prod(shape)
    kind = b.draw(st.sampled_from(("reshape", "flatten", "squeeze", "unsqueeze")))
    if kind == "reshape":
        rank = b.draw(st.integers(0 if size == 1 else 1, 4))
        options = _factorizations(size, rank)
        if not options:
            return False
        new = b.draw(st.sampled_from(options[:64]))
        spec = list(new)
        if spec and b.draw(st.booleans()):
            spec[b.draw(st.integers(0, len(spec) - 1))] = -1
        b.node("Reshape", [x, b.int_const(spec)], new)
    elif kind == "flatten":
        axis = b.draw(st.integers(0, len(shape)))
        b.node("Flatten", [x], (prod(shape[:axis]), prod(shape[axis:])), axis=axis)
    elif kind == "squeeze":
        ones = [i for i, d in enumerate(shape) if d == 1]
        if not ones:
            return False
        axes = sorted(b.draw(st.sets(st.sampled_from(ones), min_size=1)))
        b.node("Squeeze", [x, b.int_const(axes)], tuple(d for i, d in enumerate(shape) if i not in axes))
    else:
        if len(shape) >= 4:
            return False
        axis = b.draw(st.integers(0, len(shape)))
        b.node("Unsqueeze", [x, b.int_const([axis])], (*shape[:axis], 1, *shape[axis:]))
    return True


def _concat(b: _Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1 and prod(s) * 2 <= MAX_ELEMENTS)
    if x is None:
        return False
    shape = b.shapes[x]
    axis = b.draw(st.integers(0, len(shape) - 1))
    same = [n for n, s in b.shapes.items() if len(s) == len(shape)
            and all(d == e for i, (d, e) in enumerate(zip(s, shape)) if i != axis)
            and prod(s) + prod(shape) <= MAX_ELEMENTS]
    if b.draw(st.booleans()):
        y = b.draw(st.sampled_from(same))
        ydim = b.shapes[y][axis]
    else:
        ydim = b.draw(st.sampled_from((1, 2, 3)))
        y = b.random_const((*shape[:axis], ydim, *shape[axis + 1:]), share=False)
    written = axis - len(shape) if b.draw(st.booleans()) else axis
    b.node("Concat", [x, y] if b.draw(st.booleans()) else [y, x],
           (*shape[:axis], shape[axis] + ydim, *shape[axis + 1:]), axis=written)
    return True


def _pad(b: _Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    shape = b.shapes[x]
    rank = len(shape)
    mode = b.draw(st.sampled_from(("constant", "constant", "edge", "reflect")))
    limit = 2 if mode != "reflect" else 1
    pads = [b.draw(st.integers(0, limit if mode != "reflect" or shape[i % rank] > 1 else 0))
            for i in range(2 * rank)]
    new = tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(shape))
    if prod(new) > MAX_ELEMENTS:
        return False
    inputs = [x, b.int_const(pads)]
    if mode == "constant" and b.draw(st.booleans()):
        inputs.append(b.const(np.array(b.draw(st.sampled_from((0.0, 0.5))), np.float32), share=True))
    b.node("Pad", inputs, new, mode=mode)
    return True


def _matmul(b: _Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    shape = b.shapes[x]
    k = shape[-1]
    n = b.draw(st.sampled_from((1, 3, 8)))
    if len(shape) == 2 and b.draw(st.booleans()):  # Gemm with a broadcast bias
        m = shape[0]
        trans_b = b.draw(st.booleans())
        w = b.random_const((n, k) if trans_b else (k, n), share=False)
        inputs = [x, w]
        if b.draw(st.booleans()):
            inputs.append(b.random_const(b.draw(st.sampled_from(((), (1,), (n,), (m, n)))), share=True))
        b.node("Gemm", inputs, (m, n), transB=int(trans_b), alpha=0.5, beta=1.5)
        return True
    if len(shape) == 1:
        w = b.random_const((k, n), share=False)
        b.node("MatMul", [x, w], (n,))
        return True
    # another value as the right operand, when one has the matching inner dimension
    rights = [v for v, s in b.shapes.items() if len(s) == 2 and s[0] == k]
    if rights and b.draw(st.booleans()):
        w = b.draw(st.sampled_from(rights))
        n = b.shapes[w][1]
    else:
        w = b.random_const((k, n), share=False)
    out = (*shape[:-1], n)
    if prod(out) > MAX_ELEMENTS:
        return False
    b.node("MatMul", [x, w], out)
    return True


def _softmax(b: _Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    axis = b.draw(st.integers(-len(b.shapes[x]), len(b.shapes[x]) - 1))
    b.node(b.draw(st.sampled_from(("Softmax", "LogSoftmax"))), [x], b.shapes[x], axis=axis)
    return True


def _conv(b: _Builder, x: str | None = None) -> bool:
    x = x or b.pick(lambda s: len(s) == 4 and s[2] >= 3 and s[3] >= 3)
    if x is None:
        return False
    n, c, h, w = b.shapes[x]
    kind = b.draw(st.sampled_from(("1x1", "3x3", "depthwise", "grouped", "1x3")))
    kh, kw = {"1x1": (1, 1), "1x3": (1, 3)}.get(kind, (3, 3))
    group = c if kind == "depthwise" else 1
    if kind == "grouped":
        group = b.draw(st.sampled_from([g for g in (2, 4) if c % g == 0] or [1]))
    out_c = c if kind == "depthwise" else group * b.draw(st.sampled_from((1, 4, 8, 6, 16)))
    stride = b.draw(st.sampled_from((1, 2)))
    dilation = b.draw(st.sampled_from((1, 1, 2))) if min(h, w) >= 5 else 1
    # pads: top, left, bottom, right (asymmetric too, as "SAME_UPPER" exports write them)
    pads = [b.draw(st.integers(0, k // 2)) for k in (kh, kw, kh, kw)]
    eh, ew = dilation * (kh - 1) + 1, dilation * (kw - 1) + 1
    oh = (h + pads[0] + pads[2] - eh) // stride + 1
    ow = (w + pads[1] + pads[3] - ew) // stride + 1
    if oh < 1 or ow < 1 or n * out_c * oh * ow > MAX_ELEMENTS:
        return False
    wt = b.random_const((out_c, c // group, kh, kw), share=False)
    inputs = [x, wt]
    if b.draw(st.booleans()):
        inputs.append(b.random_const((out_c,), share=True))
    b.node("Conv", inputs, (n, out_c, oh, ow), group=group, kernel_shape=[kh, kw],
           strides=[stride, stride], pads=pads, dilations=[dilation, dilation])
    return True


def _pool(b: _Builder, x: str | None = None) -> bool:
    x = x or b.pick(lambda s: len(s) == 4 and s[2] >= 2 and s[3] >= 2)
    if x is None:
        return False
    n, c, h, w = b.shapes[x]
    op = b.draw(st.sampled_from(("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")))
    if op.startswith("Global"):
        b.node(op, [x], (n, c, 1, 1))
        return True
    k = b.draw(st.sampled_from((2, 3)))
    if k > min(h, w):
        k = 2
    stride = b.draw(st.sampled_from((1, 2)))
    pad = b.draw(st.integers(0, k // 2))
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    attrs: dict[str, Any] = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4}
    if op == "AveragePool":
        attrs["count_include_pad"] = int(b.draw(st.booleans()))
    b.node(op, [x], (n, c, oh, ow), **attrs)
    return True


def _nhwc_block(b: _Builder) -> bool:
    """A conv or pool written in NHWC between layout transposes (as tf2onnx exports Keras)."""
    x = b.pick(lambda s: len(s) == 4 and s[1] >= 3 and s[2] >= 3)
    if x is None:
        return False
    n, h, w, c = b.shapes[x]
    t = b.node("Transpose", [x], (n, c, h, w), perm=[0, 3, 1, 2])
    start = len(b.nodes)
    if not (_conv(b, t) if b.draw(st.booleans()) else _pool(b, t)):
        return False
    y = b.nodes[start].output[0]
    n2, c2, h2, w2 = b.shapes[y]
    b.node("Transpose", [y], (n2, h2, w2, c2), perm=[0, 2, 3, 1])
    return True


def _batch_norm(b: _Builder) -> bool:
    x = b.pick(lambda s: len(s) in (2, 3, 4))
    if x is None:
        return False
    c = b.shapes[x][1]
    scale, bias, mean = (b.random_const((c,), share=False) for _ in range(3))
    var = b.random_const((c,), share=False, low=0.5, high=2.0)
    b.node("BatchNormalization", [x, scale, bias, mean, var], b.shapes[x], epsilon=1e-3)
    return True


def _layer_norm(b: _Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    shape = b.shapes[x]
    axis = b.draw(st.integers(-len(shape), len(shape) - 1))
    norm = shape[axis:] if axis >= 0 else shape[len(shape) + axis:]
    inputs = [x, b.random_const(norm, share=False)]
    if b.draw(st.booleans()):
        inputs.append(b.random_const(norm, share=False))
    b.node("LayerNormalization", inputs, shape, axis=axis, epsilon=1e-5)
    return True


def _safe_math(b: _Builder) -> bool:
    """Ops with a restricted domain, on inputs made safe: sqrt/log/reciprocal of ``1 + |x|``,
    ``exp(-|x|)``, ``x ** 2``."""
    x = b.any_value()
    shape = b.shapes[x]
    op = b.draw(st.sampled_from(("Sqrt", "Log", "Reciprocal", "Exp", "Pow")))
    if op == "Pow":
        b.node("Pow", [x, b.const(np.array(2, np.float32), share=True)], shape)
        return True
    a = b.node("Abs", [x], shape)
    if op == "Exp":
        b.node("Exp", [b.node("Neg", [a], shape)], shape)
    else:
        b.node(op, [b.node("Add", [a, b.const(np.array(1, np.float32), share=True)], shape)], shape)
    return True


def _slice(b: _Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1 and max(s) >= 2)
    if x is None:
        return False
    shape = b.shapes[x]
    axis = b.draw(st.sampled_from([i for i, d in enumerate(shape) if d >= 2]))
    d = shape[axis]
    step = b.draw(st.sampled_from((1, 1, 2, -1)))
    if step > 0:
        start = b.draw(st.integers(0, d - 1))
        end = b.draw(st.integers(start + 1, d))
        length = len(range(start, end, step))
    else:
        start, end = d - 1, -d - 1  # the whole axis reversed
        length = d
    inputs = [x, b.int_const([start]), b.int_const([end]), b.int_const([axis])]
    if step != 1 or b.draw(st.booleans()):
        inputs.append(b.int_const([step]))
    b.node("Slice", inputs, (*shape[:axis], length, *shape[axis + 1:]))
    return True


def _expand_gather(b: _Builder) -> bool:
    x = b.pick(lambda s: len(s) >= 1)
    if x is None:
        return False
    shape = b.shapes[x]
    if b.draw(st.booleans()):  # Expand a dim of 1 (or prepend one)
        ones = [i for i, d in enumerate(shape) if d == 1]
        new = list(shape)
        if ones:
            new[b.draw(st.sampled_from(ones))] = b.draw(st.sampled_from((2, 3, 8)))
        else:
            new = [2, *new]
        if prod(new) > MAX_ELEMENTS:
            return False
        b.node("Expand", [x, b.int_const(new)], tuple(new))
        return True
    axis = b.draw(st.integers(0, len(shape) - 1))
    d = shape[axis]
    count = b.draw(st.integers(0, 3))  # 0: a scalar index, which drops the axis
    if count == 0:
        idx = b.const(np.array(b.draw(st.integers(-d, d - 1)), np.int64))
        out = shape[:axis] + shape[axis + 1:]
    else:
        idx = b.const(np.array([b.draw(st.integers(-d, d - 1)) for _ in range(count)], np.int64))
        out = (*shape[:axis], count, *shape[axis + 1:])
    b.node("Gather", [x, idx], out, axis=axis)
    return True


def _where(b: _Builder) -> bool:
    """Where(x > y, x, y * c): a comparison and a select with broadcasting."""
    x = b.any_value()
    shape = b.shapes[x]
    y = b.random_const(_broadcast_shape(b.draw, shape))
    ys = b.inits[y].shape
    cond = b.node(b.draw(st.sampled_from(("Greater", "Less"))), [x, y], _bshape(shape, ys))
    del b.shapes[cond]  # a bool value: not an operand for the float families
    other = b.node("Mul", [x, b.scalar_const()], shape)
    b.node("Where", [cond, x, other], _bshape(shape, ys))
    return True


def _split(b: _Builder) -> bool:
    """Split into two parts (a node with two outputs)."""
    x = b.pick(lambda s: len(s) >= 1 and max(s) >= 2)
    if x is None:
        return False
    shape = b.shapes[x]
    axis = b.draw(st.sampled_from([i for i, d in enumerate(shape) if d >= 2]))
    first = b.draw(st.integers(1, shape[axis] - 1))
    sizes = (first, shape[axis] - first)
    outs = [b.fresh("split_"), b.fresh("split_")]
    b.nodes.append(helper.make_node("Split", [x, b.int_const(list(sizes))], outs, name=outs[0],
                                    axis=axis))
    for o, n in zip(outs, sizes):
        b.shapes[o] = (*shape[:axis], n, *shape[axis + 1:])
    return True


def _nchw_misc(b: _Builder) -> bool:
    """Less common NCHW ops: ConvTranspose, Resize (nearest/linear), InstanceNormalization,
    DepthToSpace, Tile."""
    x = b.pick(lambda s: len(s) == 4 and s[2] >= 2 and s[3] >= 2)
    if x is None:
        return False
    n, c, h, w = b.shapes[x]
    op = b.draw(st.sampled_from(("ConvTranspose", "Resize", "InstanceNormalization", "DepthToSpace",
                                 "Tile")))
    if op == "ConvTranspose":
        out_c, stride = b.draw(st.sampled_from((1, 4, 8))), b.draw(st.sampled_from((1, 2)))
        oh, ow = (h - 1) * stride + 3, (w - 1) * stride + 3
        if n * out_c * oh * ow > MAX_ELEMENTS:
            return False
        b.node(op, [x, b.random_const((c, out_c, 3, 3), share=False)], (n, out_c, oh, ow),
               strides=[stride, stride])
    elif op == "Resize":
        if n * c * h * w * 4 > MAX_ELEMENTS:
            return False
        mode = b.draw(st.sampled_from(("nearest", "linear")))
        scales = b.const(np.array([1, 1, 2, 2], np.float32))
        b.node(op, [x, "", scales], (n, c, 2 * h, 2 * w), mode=mode)
    elif op == "InstanceNormalization":
        b.node(op, [x, b.random_const((c,), share=False), b.random_const((c,), share=False)],
               (n, c, h, w), epsilon=1e-5)
    elif op == "DepthToSpace":
        if c % 4:
            return False
        b.node(op, [x], (n, c // 4, 2 * h, 2 * w), blocksize=2,
               mode=b.draw(st.sampled_from(("DCR", "CRD"))))
    else:
        reps = [1, 1, b.draw(st.sampled_from((1, 2))), 2]
        if n * c * h * w * reps[2] * 2 > MAX_ELEMENTS:
            return False
        b.node(op, [x, b.int_const(reps)], (n, c, h * reps[2], w * 2))
    return True


# Repeats weight a family: element-wise ops around reductions and convolutions are what models
# are made of, and where the schedules have the most cases.
_FAMILIES = (_scaled_reduce, _scaled_reduce, _scaled_reduce, _scaled_reduce, _binary, _binary, _binary,
             _reduce, _reduce, _activation_pattern, _activation_pattern, _conv, _conv, _unary,
             _scalar_from_reduce, _transpose, _reshape, _concat, _pad, _matmul, _softmax, _pool,
             _nhwc_block, _batch_norm, _layer_norm, _safe_math, _slice, _expand_gather, _where, _split,
             _nchw_misc)


def _input_shape(draw: Any) -> Shape:
    if draw(st.integers(0, 2)) == 0:  # NCHW
        return (draw(st.sampled_from((1, 2))), draw(st.sampled_from((1, 2, 3, 4, 8, 16))),
                draw(st.sampled_from((3, 4, 5, 8))), draw(st.sampled_from((8, 16, 3, 4, 5, 11))))
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.sampled_from(DIMS)) for _ in range(rank - 1))
    if rank:  # often at least a vector's width, so the innermost loop is vectorized
        shape += (draw(st.sampled_from((8, 16, 3, 1, 17, 12))),)  # 17, 12: vector loop remainders
    return shape if prod(shape) <= MAX_ELEMENTS else shape[:1]


@st.composite
def graphs(draw: Any, min_nodes: int = 2, max_nodes: int = 8) -> GraphCase:
    """A random small float32 ONNX model (opset 17) and random inputs for it."""
    b = _Builder(draw)
    for i in range(draw(st.integers(1, 2))):
        name = f"x{i}"
        b.inputs[name] = b.shapes[name] = _input_shape(draw)
    target = draw(st.integers(min_nodes, max_nodes))
    tries = 0
    while len(b.nodes) < target and tries < 4 * max_nodes:
        tries += 1
        family = draw(st.sampled_from(_FAMILIES))
        before = (len(b.nodes), dict(b.shapes))
        if not family(b):
            del b.nodes[before[0]:]
            b.shapes = before[1]
    if not b.nodes:
        _unary(b)
    # Outputs: the last value, plus sometimes another one: an intermediate (possibly also read by
    # later nodes), a graph input, a float initializer, or the last value a second time.
    produced = [o for n in b.nodes for o in n.output if o in b.shapes]
    outputs = [produced[-1]]
    extra = draw(st.sampled_from(("none", "intermediate", "intermediate", "input", "initializer",
                                  "repeat")))
    candidates = {"intermediate": produced[:-1], "input": list(b.inputs), "repeat": outputs[:1],
                  "initializer": [k for k, v in b.inits.items() if v.dtype == np.float32]}.get(extra)
    if candidates:
        name = draw(st.sampled_from(candidates))
        b.shapes.setdefault(name, b.inits[name].shape if name in b.inits else ())
        outputs.append(name)
    # Graph inputs no node reads are dropped (an unused input is legal, but uninteresting).
    used = {i for n in b.nodes for i in n.input} | set(outputs)
    inputs = {k: v for k, v in b.inputs.items() if k in used}
    graph = helper.make_graph(
        b.nodes, "fuzz",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v)) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(b.shapes[o])) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in b.inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    feeds = {k: np.asarray(rng.standard_normal(v), np.float32) for k, v in inputs.items()}
    return GraphCase(model, feeds)
