"""Pattern rewrites that give exported encoders fewer, faster kernels (native targets).

Both passes match a whole subgraph, check that every intermediate they replace is used by the
pattern alone (a use count over the graph, so nothing ends up computed twice), and rebuild it
in one ``rewrite`` walk; the graph must be typed.

**FuseLayerNorm**: a layer norm spelled out in arithmetic becomes one ``nn.layer_norm`` call.
Exporters write ``LayerNorm`` over the last axis as a chain of eight or nine operators, and
SimplifyInference writes ``nn.layer_norm`` the same way. Left alone, FuseOps cuts the chain into
three or four kernels (a reduction does not absorb its consumers); as one ``nn.layer_norm`` it
is a single row-wise kernel (:mod:`kiln.te.templates.reduction`).

The pass recognises, for a float32/float64 ``x`` whose last axis has ``D`` elements::

    m = mean(x, axis=-1, keepdims=True)          # axis given as -1 or ndim - 1
    c = x - m
    v = mean(c * c, -1, keepdims)  |  mean(power(c, 2), -1, keepdims)
      | variance(x, m, -1, keepdims, unbiased=False)
    n = c / sqrt(v + eps)  |  c * rsqrt(v + eps)  |  c * (1 / sqrt(v + eps))
    y = n [* gamma] [+ beta]                      # each operand order accepted

with ``eps`` a one-element constant, and rewrites ``y`` to ``nn.layer_norm(x, gamma, beta,
axis=-1, epsilon=eps)`` (``scale=False`` / ``center=False`` with ones / zeros when ``gamma`` /
``beta`` is absent). The two centerings ``c`` may be one node or two ``x - m`` calls on the same
``x`` and mean. ``gamma`` and ``beta`` must vary along the last axis only (shape ``(D,)``, with
any leading unit axes, or a single element) and must not widen the result's type.

The rewrite is exact, up to float rounding: ``nn.layer_norm`` computes the same quantities in the
same order (its reference kernel in float64). It fires only where every intermediate result is
used by the pattern alone (so nothing is computed twice); when the scaled or shifted value is
also used elsewhere, the largest private part is rewritten. The new call carries the source
names of every call it replaces.

**PadSoftmaxRows** (opt level 3) handles attention whose token count is not a
multiple of the vector width (ViT's 197 tokens). AlterBatchMatmul would compute ``Q K^T`` with
zero-padded columns and slice them off again: the slice is a copy kernel of its own, and the
softmax then runs over rows that end in a partial vector. When the scores reach a last-axis
``nn.softmax`` only through reshapes that keep the last axis and multiplications, additions,
subtractions or divisions by finite scalar constants, and the probabilities reach the ``P V``
product only through such reshapes, the pass pads once and keeps the padding to the end::

    batch_matmul(softmax(f(batch_matmul(Q, K))), V)
      -> batch_matmul(softmax(f(batch_matmul(Q, pad(K))) + m), pad(V))

``N`` columns become ``N'`` (AlterBatchMatmul's :func:`padded_columns` for the target's
vector width), ``m`` is a constant row of ``0`` for the real columns and ``-inf`` for the
padding, and ``V`` gets ``N' - N`` zero rows. The padded probabilities are exactly zero
(``exp(-inf)``) and meet zero rows, so the result is the same; the scale and the mask fuse into
the product's epilogue, and the softmax runs over whole vectors.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

import kiln.op as K
from kiln.ir.expr import Call, Constant, Expr, Function
from kiln.ir.module import IRModule
from kiln.ir.types import np_dtype
from kiln.ir.visitor import children, post_order, rewrite
from kiln.op.nn import layer_norm
from kiln.op.registry import get_op_def
from kiln.target import Target
from kiln.transform.alter_batch_matmul import padded_columns
from kiln.transform.pass_infra import FunctionPass, PassContext, PassInfo
from kiln.transform.rewrite import call_attrs, ensure_types, is_op, op_name, scalar_value, tensor_type

__all__ = [
    "FuseLayerNorm",
    "LayerNormMatch",
    "PadSoftmaxRows",
    "fuse_layer_norm",
    "match_layer_norm",
    "pad_softmax_rows",
]

_FLOAT_DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class LayerNormMatch:
    """A layer norm found in arithmetic form.

    Attributes
    ----------
    data : Expr
        The normalised tensor ``x``.
    gamma, beta : Expr or None
        The scale and shift operands as written (``None`` when absent).
    epsilon : float
        The constant added to the variance.
    calls : tuple of Call
        Every call the rewrite replaces, the matched root first.
    """

    data: Expr
    gamma: Expr | None
    beta: Expr | None
    epsilon: float
    calls: tuple[Call, ...]


# --- matching --------------------------------------------------------------------------------

def _last_axis_mean(expr: Expr) -> Expr | None:
    """``x`` for ``mean(x, axis=-1, keepdims=True)`` over a float tensor, else None."""
    if not is_op(expr, "mean"):
        return None
    assert isinstance(expr, Call)
    return expr.args[0] if _reduces_last_axis(expr) else None


def _reduces_last_axis(call: Call) -> bool:
    x = tensor_type(call.args[0])
    attrs = call_attrs(call)
    if x is None or x.ndim == 0 or x.dtype not in _FLOAT_DTYPES or attrs.axis is None:
        return False
    axes = tuple(int(a) % x.ndim for a in attrs.axis)
    return axes == (x.ndim - 1,) and bool(attrs.keepdims) and not attrs.exclude


def _centered(expr: Expr) -> tuple[Expr, Call] | None:
    """``(x, mean call)`` for ``x - mean(x, -1, keepdims)``, else None."""
    if not is_op(expr, "subtract"):
        return None
    assert isinstance(expr, Call)
    x, m = expr.args
    if _last_axis_mean(m) is not x or expr.checked_type != x.checked_type:
        return None
    assert isinstance(m, Call)
    return x, m


def _same_centering(a: Expr, b: Expr) -> bool:
    """Whether ``a`` and ``b`` are one centering node, or two ``x - mean(x)`` of the same ``x``."""
    if a is b:
        return True
    ca, cb = _centered(a), _centered(b)
    return ca is not None and cb is not None and ca[0] is cb[0] and \
        (ca[1] is cb[1] or _last_axis_mean(cb[1]) is ca[0])


def _variance_calls(v: Expr, c: Expr, x: Expr, mean: Call) -> list[Call] | None:
    """The calls computing ``v`` as the biased variance of ``x`` over its last axis, given the
    centering ``c = x - mean``, else None."""
    if is_op(v, "variance"):
        assert isinstance(v, Call)
        data, m = v.args
        if data is not x or call_attrs(v).unbiased or not _reduces_last_axis(v):
            return None
        if m is mean:
            return [v]
        if _last_axis_mean(m) is not x:
            return None
        assert isinstance(m, Call)
        return [v, m]
    square = _last_axis_mean(v)
    if square is None:
        return None
    assert isinstance(v, Call)
    if is_op(square, "multiply"):
        assert isinstance(square, Call)
        a, b = square.args
        if not (_same_centering(a, c) and _same_centering(b, c)):
            return None
    elif is_op(square, "power"):
        assert isinstance(square, Call)
        if scalar_value(square.args[1]) != 2.0 or not _same_centering(square.args[0], c):
            return None
        a = b = square.args[0]
    else:
        return None
    calls = [v, square]
    for other in (a, b):  # a second centering x - mean(x), and its own mean
        if other is not c and isinstance(other, Call) and other not in calls:
            calls.extend(n for n in (other, other.args[1]) if isinstance(n, Call) and n is not mean)
    return calls


def _epsilon(e: Expr) -> tuple[Expr, float, Call] | None:
    """``(v, eps, add call)`` for ``v + eps`` with a one-element constant eps that keeps v's
    type, else None."""
    if not is_op(e, "add"):
        return None
    assert isinstance(e, Call)
    for v, eps in (e.args, e.args[::-1]):
        value = scalar_value(eps)
        if value is not None and isinstance(eps, Constant) and v.checked_type == e.checked_type \
                and value >= 0.0:
            return v, value, e
    return None


def _inverse_std(expr: Expr) -> tuple[Expr, list[Call]] | None:
    """``(v + eps, calls)`` for ``rsqrt(v + eps)`` or ``1 / sqrt(v + eps)``."""
    if is_op(expr, "rsqrt"):
        assert isinstance(expr, Call)
        return expr.args[0], [expr]
    if is_op(expr, "divide"):
        assert isinstance(expr, Call)
        one, root = expr.args
        if scalar_value(one) == 1.0 and is_op(root, "sqrt") \
                and expr.checked_type == root.checked_type:
            assert isinstance(root, Call)
            return root.args[0], [expr, root]
    return None


def _normalized(expr: Expr) -> LayerNormMatch | None:
    """The match of ``(x - mean) / sqrt(var + eps)`` in any accepted form, without affine."""
    candidates: list[tuple[Expr, Expr, list[Call]]] = []  # (centering, v + eps, calls)
    if is_op(expr, "divide"):
        assert isinstance(expr, Call)
        c, root = expr.args
        if is_op(root, "sqrt"):
            assert isinstance(root, Call)
            candidates.append((c, root.args[0], [expr, root]))
    elif is_op(expr, "multiply"):
        assert isinstance(expr, Call)
        for c, inv in (expr.args, expr.args[::-1]):
            found = _inverse_std(inv)
            if found is not None:
                candidates.append((c, found[0], [expr, *found[1]]))
    for c, e, calls in candidates:
        centered, eps = _centered(c), _epsilon(e)
        if centered is None or eps is None or expr.checked_type != c.checked_type:
            continue
        x, mean = centered
        var_calls = _variance_calls(eps[0], c, x, mean)
        if var_calls is None:
            continue
        assert isinstance(c, Call)
        found_calls = [*calls, eps[2], *var_calls, c, mean]
        unique = tuple(dict.fromkeys(found_calls))
        return LayerNormMatch(x, None, None, eps[1], unique)
    return None


def _channel_operand(operand: Expr, result: Expr, x: Expr) -> bool:
    """Whether ``operand`` varies along x's last axis only and leaves ``result``'s type as x's."""
    shape = tensor_type(operand)
    data = tensor_type(x)
    if shape is None or data is None or result.checked_type != x.checked_type:
        return False
    dims = tuple(int(d) for d in shape.shape)
    if len(dims) > data.ndim:
        return False
    lead = dims[:-1] if dims else ()
    return all(d == 1 for d in lead) and (not dims or dims[-1] in (1, int(data.shape[-1])))


def _affine(expr: Expr, op: str) -> list[tuple[Expr, Expr]]:
    """``(inner, operand)`` splits of ``expr = op(inner, operand)`` in both operand orders."""
    if not is_op(expr, op):
        return []
    assert isinstance(expr, Call)
    a, b = expr.args
    return [(a, b), (b, a)]


def _scaled(expr: Expr) -> LayerNormMatch | None:
    """The match of ``normalized [* gamma]``."""
    found = _normalized(expr)
    if found is not None:
        return found
    for inner, gamma in _affine(expr, "multiply"):
        core = _normalized(inner)
        if core is not None and _channel_operand(gamma, expr, core.data):
            assert isinstance(expr, Call)
            return LayerNormMatch(core.data, gamma, None, core.epsilon, (expr, *core.calls))
    return None


def match_layer_norm(expr: Expr) -> LayerNormMatch | None:
    """Match a spelled-out layer norm over the last axis rooted at ``expr`` (typed).

    Parameters
    ----------
    expr : Expr
        Candidate root: the shift ``add``, the scale ``multiply`` or the normalizing call.

    Returns
    -------
    LayerNormMatch or None
        What was found (see the module docstring for the accepted forms), or None.
    """
    found = _scaled(expr)
    if found is not None:
        return found
    for inner, beta in _affine(expr, "add"):
        core = _scaled(inner)
        if core is not None and _channel_operand(beta, expr, core.data):
            assert isinstance(expr, Call)
            return LayerNormMatch(core.data, core.gamma, beta, core.epsilon, (expr, *core.calls))
    return None


# --- rewriting -------------------------------------------------------------------------------

def _is_private(match: LayerNormMatch, uses: Counter[int]) -> bool:
    """Whether every matched call but the root is used only by other matched calls."""
    inside: Counter[int] = Counter(id(a) for call in match.calls for a in call.args)
    return all(uses[id(call)] == inside[id(call)] for call in match.calls[1:])


def _channel_vector(original: Expr | None, memo: dict[int, Expr], size: int, dtype: str,
                    fill: float) -> Expr:
    """The rebuilt ``original`` as a ``(size,)`` vector (a constant of ``fill`` when absent)."""
    if original is None:
        return Constant(np.full(size, fill, dtype=np_dtype(dtype)))
    operand = memo.get(id(original), original)
    if isinstance(operand, Constant):
        value = np.broadcast_to(operand.value.reshape(-1), (size,))
        return Constant(np.ascontiguousarray(value, dtype=np_dtype(dtype)))
    ty = tensor_type(original)
    assert ty is not None
    if tuple(ty.shape) == (size,):
        return operand
    flat = K.reshape(operand, (-1,))
    return flat if int(np.prod(ty.shape)) == size else K.broadcast_to(flat, (size,))


def _build(match: LayerNormMatch, memo: dict[int, Expr], order: dict[int, int]) -> Call:
    data = memo.get(id(match.data), match.data)
    ty = tensor_type(match.data)
    assert ty is not None
    size = int(ty.shape[-1])
    call = layer_norm(data, _channel_vector(match.gamma, memo, size, ty.dtype, 1.0),
                      _channel_vector(match.beta, memo, size, ty.dtype, 0.0), axis=-1,
                      epsilon=match.epsilon, center=match.beta is not None,
                      scale=match.gamma is not None)
    names: list[str] = []
    for c in sorted(match.calls, key=lambda c: order[id(c)]):
        names.extend(n for n in c.source_names if n not in names)
    return Call(call.op, call.args, call.attrs, source_names=names)


def fuse_layer_norm(fn: Function, mod: IRModule | None = None) -> Function:
    """Rewrite every spelled-out layer norm of ``fn`` (not modified) to ``nn.layer_norm``.

    Parameters
    ----------
    fn : Function
        A typed function.
    mod : IRModule, optional
        The module, to type calls of global functions.

    Returns
    -------
    Function
        ``fn`` itself when nothing matched, else the rewritten, typed function.
    """
    ensure_types(fn, mod)
    nodes = post_order(fn, into_functions=False)
    order = {id(n): i for i, n in enumerate(nodes)}
    uses: Counter[int] = Counter(id(c) for n in nodes for c in children(n))
    plans: dict[int, LayerNormMatch] = {}
    claimed: set[int] = set()
    for node in reversed(nodes):  # roots before the calls below them
        if not isinstance(node, Call) or id(node) in claimed:
            continue
        found = match_layer_norm(node)
        if found is not None and _is_private(found, uses):
            plans[id(node)] = found
            claimed.update(id(c) for c in found.calls)
    if not plans:
        return fn
    memo: dict[int, Expr] = {}

    def replace(new: Expr, old: Expr) -> Expr | None:
        found = plans.get(id(old))
        return _build(found, memo, order) if found is not None else None

    out = rewrite(fn, replace, into_functions=False, memo=memo)
    assert isinstance(out, Function)
    ensure_types(out, mod)
    return out


def FuseLayerNorm() -> FunctionPass:
    """The pass rewriting spelled-out layer norms to ``nn.layer_norm`` (opt level 1)."""

    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        return fuse_layer_norm(fn, mod)

    return FunctionPass(run, PassInfo(1, "FuseLayerNorm", ("InferType",)))


# --- softmax rows over padded products ----------------------------------------------------------

# Element-wise steps allowed between the scores and the softmax, with the positions their tensor
# operand may take (the other operand is a finite scalar constant): they map the padding's zeros
# to finite values, which the ``-inf`` mask then overrides.
_SCALAR_STEPS = {"multiply": (0, 1), "add": (0, 1), "subtract": (0,), "divide": (0,)}


@dataclass(frozen=True)
class _PaddedSoftmax:
    """``product(after(softmax(before(scores))), v)``; steps listed from the softmax out."""

    scores: Call
    before: tuple[Call, ...]
    softmax: Call
    after: tuple[Call, ...]
    product: Call

    @property
    def calls(self) -> tuple[Call, ...]:
        """Every replaced call, the root first."""
        return (self.product, *self.after, self.softmax, *self.before, self.scores)


def _keeps_last_axis(expr: Expr) -> bool:
    """Whether ``expr`` is a reshape that keeps its input's last axis."""
    if not is_op(expr, "reshape"):
        return False
    assert isinstance(expr, Call)
    src, out = tensor_type(expr.args[0]), tensor_type(expr)
    return src is not None and out is not None and src.ndim > 0 and out.ndim > 0 \
        and src.shape[-1] == out.shape[-1]


def _scalar_step(call: Call) -> int | None:
    """The position of the tensor operand of an allowed scalar step, else None."""
    for i in _SCALAR_STEPS.get(op_name(call) or "", ()):
        const = call.args[1 - i]
        value = scalar_value(const)
        if isinstance(const, Constant) and value is not None and np.isfinite(value) \
                and call.args[i].checked_type == call.checked_type \
                and not (op_name(call) == "divide" and value == 0.0):
            return i
    return None


def _float_product(expr: Expr) -> bool:
    """Whether ``expr`` is a batch_matmul of 3-d float operands without ``transpose_a``."""
    if not is_op(expr, "nn.batch_matmul"):
        return False
    assert isinstance(expr, Call)
    types = [tensor_type(a) for a in expr.args]
    return not call_attrs(expr).transpose_a and all(
        t is not None and t.ndim == 3 and t.dtype in _FLOAT_DTYPES for t in types)


def _match_padded_softmax(product: Expr) -> _PaddedSoftmax | None:
    if not _float_product(product):
        return None
    assert isinstance(product, Call)
    node = product.args[0]
    after: list[Call] = []
    while _keeps_last_axis(node):
        assert isinstance(node, Call)
        after.append(node)
        node = node.args[0]
    ty = tensor_type(node)
    if not is_op(node, "nn.softmax") or ty is None:
        return None
    assert isinstance(node, Call)
    if int(call_attrs(node).axis) % ty.ndim != ty.ndim - 1:
        return None
    softmax, node = node, node.args[0]
    before: list[Call] = []
    while not _float_product(node):
        position = _scalar_step(node) if isinstance(node, Call) else None
        if position is None and not _keeps_last_axis(node):
            return None
        assert isinstance(node, Call)
        before.append(node)
        node = node.args[position or 0]
    assert isinstance(node, Call)
    return _PaddedSoftmax(node, tuple(before), softmax, tuple(after), product)


def _padded(expr: Expr, ndim: int, axis: int, extra: int) -> Expr:
    pad = [(0, 0)] * ndim
    pad[axis] = (0, extra)
    return K.nn.pad(expr, tuple(pad))


def _with_columns(call: Call, arg: Expr, columns: int) -> Expr:
    """``call`` rebuilt on ``arg`` (its tensor operand) with ``columns`` in its last axis."""
    position = _scalar_step(call)
    if position is None:  # a reshape keeping the last axis
        shape = tensor_type(call)
        assert shape is not None
        return K.reshape(arg, (*shape.shape[:-1], columns))
    args = list(call.args)
    args[position] = arg
    return Call(call.op, args, call.attrs, source_names=call.source_names)


def _build_padded(found: _PaddedSoftmax, width: int, memo: dict[int, Expr]) -> Call:
    scores = found.scores
    ty = tensor_type(scores)
    assert ty is not None
    used = int(ty.shape[-1])
    q, k = (memo.get(id(a), a) for a in scores.args)
    k = _padded(k, 3, 1 if call_attrs(scores).transpose_b else 2, width - used)
    z: Expr = Call(scores.op, [q, k], scores.attrs, source_names=scores.source_names)
    for step in reversed(found.before):
        z = _with_columns(step, z, width)
    mask = np.where(np.arange(width) < used, 0.0, -np.inf).astype(np_dtype(ty.dtype))
    z = Call(get_op_def("add").op, [z, Constant(mask)], source_names=found.softmax.source_names)
    probs: Expr = Call(found.softmax.op, [z], found.softmax.attrs,
                       source_names=found.softmax.source_names)
    for step in reversed(found.after):
        probs = _with_columns(step, probs, width)
    product = found.product
    v = memo.get(id(product.args[1]), product.args[1])
    v = _padded(v, 3, 2 if call_attrs(product).transpose_b else 1, width - used)
    return Call(product.op, [probs, v], product.attrs, source_names=product.source_names)


def pad_softmax_rows(fn: Function, lanes: dict[str, int], mod: IRModule | None = None) -> Function:
    """Pad attention scores once and keep the padding through the softmax (module docstring).

    Parameters
    ----------
    fn : Function
        A typed function.
    lanes : dict of str to int
        Vector lanes per dtype (``float32``, ``float64``) of the target.
    mod : IRModule, optional
        The module, to type calls of global functions.

    Returns
    -------
    Function
        ``fn`` itself when nothing matched, else the rewritten, typed function.
    """
    ensure_types(fn, mod)
    nodes = post_order(fn, into_functions=False)
    uses: Counter[int] = Counter(id(c) for n in nodes for c in children(n))
    plans: dict[int, tuple[_PaddedSoftmax, int]] = {}
    for node in nodes:
        found = _match_padded_softmax(node)
        if found is None:
            continue
        ty = tensor_type(found.scores)
        assert ty is not None
        width = padded_columns(int(ty.shape[-1]), lanes[ty.dtype])
        inside: Counter[int] = Counter(id(a) for call in found.calls for a in call.args)
        if width != ty.shape[-1] and all(uses[id(c)] == inside[id(c)] for c in found.calls[1:]):
            plans[id(node)] = (found, width)
    if not plans:
        return fn
    memo: dict[int, Expr] = {}

    def replace(new: Expr, old: Expr) -> Expr | None:
        plan = plans.get(id(old))
        return _build_padded(plan[0], plan[1], memo) if plan is not None else None

    out = rewrite(fn, replace, into_functions=False, memo=memo)
    assert isinstance(out, Function)
    ensure_types(out, mod)
    return out


def PadSoftmaxRows() -> FunctionPass:
    """The pass padding attention scores to whole vectors through the softmax (opt level 3).

    The vector width comes from ``Target.current()`` (``relay.build`` enters the build's target;
    without one, this machine's).
    """

    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        target = Target.current() or Target("c")
        lanes = {dtype: target.vector_width(dtype) for dtype in _FLOAT_DTYPES}
        return pad_softmax_rows(fn, lanes, mod)

    return FunctionPass(run, PassInfo(3, "PadSoftmaxRows", ("InferType",)))
