"""SimplifyExpr: algebraic and shape clean-ups (TVM's ``SimplifyExpr``, opt level 0).

The rules, in TVM's order: ``*_like`` ops with static shapes become their explicit forms,
``x + x`` becomes ``x * 2``, ``a / sqrt(x)`` becomes ``a * rsqrt(x)``, identities disappear
(``x + 0``, ``x - 0``, ``x * 1``, ``x / 1`` when the result has ``x``'s type), reshape chains
(``reverse_reshape`` included) collapse, chains of transposes and ``layout_transform`` s become one
transpose or one ``layout_transform`` (TVM's ``SimplifyTranspose``) and no-op ones vanish, casts
to the same dtype and widening double casts simplify, ``full``-like operands of broadcasting ops
become scalars, constant multiplies and adds regroup (``(x + c1) * c2 -> x * c2 + c1 * c2``,
``x * c1 * c2 -> x * (c1 * c2)``) so FoldScaleAxis and FoldConstant find them,
``argmax/argmin/argsort(dequantize(x))`` read ``x`` (positive constant scale), casts after a clip
that fit its range go, clips that cannot cut anything (``clip(uint8, 0, 255)``) go away, and
``a*x*x + b*x*y + c*y*y`` factors into ``a * (x + p*y) * (x + q*y)`` (matched with the dataflow
pattern language, :mod:`kiln.transform.dataflow_pattern`).

Kiln adds rules that exported transformer graphs need before fusion:

- powers by a constant exponent become cheaper ops: ``power(x, 2) -> x * x``,
  ``power(x, 0.5) -> sqrt(x)``, ``power(x, -0.5) -> rsqrt(x)``, ``power(x, 1) -> x``;
- when compiling for a target (inside ``with Target(...)``, as ``relay.build`` runs its passes),
  a floating-point division by a constant becomes a multiplication by its reciprocal
  (``x / c -> x * (1 / c)``) when every ``1 / c`` is a finite normal number. When ``c`` is a power
  of two this is exact; otherwise the result can differ from the correctly rounded quotient by
  the rounding of ``1 / c`` plus that of the product: at most three units of the format's
  rounding error, i.e. a relative difference of at most ``3 * 2**-24`` (about ``1.8e-7``) in
  float32 and ``3 * 2**-53`` in float64. Multiplications cost a fraction of a division in
  vectorized epilogues (GELU's ``x / sqrt(2)``);
- reshapes that add axes (the ``reshape`` back to ``(batch, tokens, features)`` after a
  ``dense`` on a flattened input) move below element-wise and broadcasting consumers, so that
  bias adds, activations and residual adds fuse into the ``dense``/``batch_matmul`` epilogue.
  The other operand of a binary op follows with a reshape that drops axes (or none): a bias or
  mask that varies along the trailing axes the reshape keeps loses its leading unit axes, a
  full-size operand takes the product's shape. Each move lowers the rank of the op's result, so
  the rules terminate;
- ``split(transpose(x))`` becomes one ``transpose(strided_slice(x))`` per part, and projections
  of tuple literals their field, so each part fuses with its own consumers.
"""

from __future__ import annotations

import math

import numpy as np

import kiln.op as K
from kiln.ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, TupleType, np_dtype
from kiln.op.registry import OpPattern, all_ops, get_op_def
from kiln.runtime.dtype import dtype_range, has_inf, is_float, is_narrow
from kiln.target import Target
from kiln.transform.dataflow_pattern import DFPattern, is_constant, match_nodes, wildcard
from kiln.transform.dataflow_pattern import is_op as op_pattern
from kiln.transform.fold_constant import fold_constant
from kiln.transform.pass_infra import FunctionPass, PassContext, PassInfo
from kiln.transform.rewrite import (
    Rule,
    call_attrs,
    const_array,
    graph_rewrite,
    is_op,
    op_name,
    scalar_value,
    tensor_type,
)

__all__ = ["RESHAPE_OPS", "SimplifyExpr", "pm_simplify_expr", "simplify_expr"]

# Operators that only reinterpret the shape of a dense buffer (``OpDef.reshape_only``, TVM's
# ``TReshapeOp``), read from the registry (every family is declared by ``import kiln.op``).
RESHAPE_OPS = frozenset(name for name, op in all_ops().items() if op.reshape_only)


# --- *_like ops with static shapes ----------------------------------------------------------

def _zeros_like(call: Call) -> Expr | None:
    """``zeros_like(x) -> zeros(shape)``."""
    out = tensor_type(call)
    return K.zeros(out.shape, out.dtype) if out is not None else None


def _ones_like(call: Call) -> Expr | None:
    """``ones_like(x) -> ones(shape)``."""
    out = tensor_type(call)
    return K.ones(out.shape, out.dtype) if out is not None else None


def _full_like(call: Call) -> Expr | None:
    """``full_like(x, v) -> full(v, shape)``."""
    out = tensor_type(call)
    return K.full(call.args[1], out.shape, out.dtype) if out is not None else None


def _reshape_like(call: Call) -> Expr | None:
    """``reshape_like(x, y) -> reshape(x, shape)``."""
    out = tensor_type(call)
    return K.reshape(call.args[0], out.shape) if out is not None else None


def _broadcast_to_like(call: Call) -> Expr | None:
    """``broadcast_to_like(x, y) -> broadcast_to(x, shape)``."""
    out = tensor_type(call)
    return K.broadcast_to(call.args[0], out.shape) if out is not None else None


def _collapse_sum_like(call: Call) -> Expr | None:
    """``collapse_sum_like(x, y) -> collapse_sum_to(x, shape)``."""
    out = tensor_type(call)
    return K.collapse_sum_to(call.args[0], out.shape) if out is not None else None


def _cast_like(call: Call) -> Expr | None:
    """``cast_like(x, y) -> cast(x, dtype of y)``."""
    out = tensor_type(call)
    return K.cast(call.args[0], out.dtype) if out is not None else None


# --- arithmetic ---------------------------------------------------------------------------------

def _add_self(call: Call) -> Expr | None:
    """``x + x -> x * 2``."""
    x, y = call.args
    out = tensor_type(call)
    if x is not y or out is None:
        return None
    return K.multiply(x, Constant(np.asarray(2, dtype=np_dtype(out.dtype))))


def _div_sqrt(call: Call) -> Expr | None:
    """``a / sqrt(x) -> a * rsqrt(x)``."""
    num, den = call.args
    if not is_op(den, "sqrt"):
        return None
    assert isinstance(den, Call)
    return K.multiply(num, K.rsqrt(den.args[0]))


def _identity_value(expr: Expr) -> float | None:
    """The value of an operand that is the same everywhere: a one-element constant or zeros/ones."""
    name = op_name(expr)
    if name in ("zeros", "zeros_like"):
        return 0.0
    if name in ("ones", "ones_like"):
        return 1.0
    return scalar_value(expr)


def _identity(call: Call, neutral: float, commutative: bool) -> Expr | None:
    out = tensor_type(call)
    if out is None:
        return None
    candidates = [(call.args[0], call.args[1])]
    if commutative:
        candidates.append((call.args[1], call.args[0]))
    for x, other in candidates:
        if _identity_value(other) == neutral and x.checked_type == out:
            return x
    return None


def _add_zero(call: Call) -> Expr | None:
    """``x + 0 -> x`` and ``0 + x -> x`` (when the result has ``x``'s type)."""
    return _identity(call, 0.0, commutative=True)


def _sub_zero(call: Call) -> Expr | None:
    """``x - 0 -> x``."""
    return _identity(call, 0.0, commutative=False)


def _mul_one(call: Call) -> Expr | None:
    """``x * 1 -> x`` and ``1 * x -> x``."""
    return _identity(call, 1.0, commutative=True)


def _div_one(call: Call) -> Expr | None:
    """``x / 1 -> x``."""
    return _identity(call, 1.0, commutative=False)


def _split_const(call: Call) -> tuple[Expr, Constant] | None:
    """``(x, c)`` for a binary call with exactly one constant operand."""
    a, b = call.args
    if isinstance(b, Constant) and not isinstance(a, Constant):
        return a, b
    if isinstance(a, Constant) and not isinstance(b, Constant):
        return b, a
    return None


def _fold(expr: Expr) -> Constant:
    out = fold_constant(expr)
    assert isinstance(out, Constant)
    return out


def _switch_add_mul(call: Call) -> Expr | None:
    """``(x + c1) * c2 -> x * c2 + c1 * c2``."""
    outer = _split_const(call)
    if outer is None or not is_op(outer[0], "add"):
        return None
    inner_call, c2 = outer
    assert isinstance(inner_call, Call)
    inner = _split_const(inner_call)
    if inner is None:
        return None
    x, c1 = inner
    return K.add(K.multiply(x, c2), _fold(K.multiply(c1, c2)))


def _make_regroup(name: str) -> Rule:
    def regroup(call: Call) -> Expr | None:
        outer = _split_const(call)
        if outer is None or not is_op(outer[0], name):
            return None
        inner_call, c2 = outer
        assert isinstance(inner_call, Call)
        inner = _split_const(inner_call)
        if inner is None:
            return None
        x, c1 = inner
        builder = getattr(K, name)
        return builder(x, _fold(builder(c1, c2)))

    regroup.__doc__ = f"``{name}({name}(x, c1), c2) -> {name}(x, {name}(c1, c2))``."
    return Rule(f"{name}_{name}_const", name, regroup)


# --- shapes -----------------------------------------------------------------------------------

def _reshape_chain(call: Call) -> Expr | None:
    """``reshape(r(x)) -> reshape(x)`` for any reshape-like ``r``."""
    inner = call.args[0]
    out = tensor_type(call)
    if op_name(inner) not in RESHAPE_OPS or out is None:
        return None
    assert isinstance(inner, Call)
    return K.reshape(inner.args[0], out.shape)


def _noop_reshape(call: Call) -> Expr | None:
    """``r(x) -> x`` for a reshape-like ``r`` that keeps the shape."""
    x = call.args[0]
    return x if x.checked_type == call.checked_type else None


def _permutation(call: Call) -> tuple[int, ...] | None:
    """The axis order of a transpose (``out[i] = in[perm[i]]``)."""
    x = tensor_type(call.args[0])
    if x is None:
        return None
    axes = call_attrs(call).axes
    ndim = x.ndim
    if axes is None:
        return tuple(range(ndim - 1, -1, -1))
    return tuple(int(a) % ndim for a in axes)


def _layout_axes(layout: str) -> list[str]:
    """The axis names of a layout string: primal letters, block axes in lower case."""
    return [letter if block == 0 else letter.lower() for letter, block in K.parse_layout(layout)]


def _axis_order(call: Call, ndim: int) -> list[int] | None:
    """TVM's ``GetTransposeAxisOrder``: the input axis of each output axis of a transpose or a
    same-rank layout_transform."""
    if is_op(call, "transpose"):
        perm = _permutation(call)
        return list(perm) if perm is not None and len(perm) == ndim else None
    attrs = call_attrs(call)
    src, dst = _layout_axes(attrs.src_layout), _layout_axes(attrs.dst_layout)
    if len(dst) < ndim or any(a not in src for a in dst[:ndim]):
        return None
    return [src.index(dst[i]) for i in range(ndim)]


def _permute_layout(layout: str, order: list[int]) -> str | None:
    if len(layout) != len(order):
        return None
    return "".join(layout[i] for i in order)


def _rank_changing(call: Call) -> bool:
    if not is_op(call, "layout_transform"):
        return False
    attrs = call_attrs(call)
    return len(attrs.src_layout) != len(attrs.dst_layout)


def _fold_rank_changing(x: Expr, outer: Call, inner: Call) -> Expr | None:
    """TVM's ``FoldRankChangingLayoutTrans`` for ``outer(inner(x))``; None when neither call is
    a rank-changing layout_transform (or the layouts cannot be combined)."""
    src = dst = ""
    other: Call | None = None
    if _rank_changing(outer):
        src, dst, other = call_attrs(outer).src_layout, call_attrs(outer).dst_layout, inner
    if _rank_changing(inner):
        if other is None:
            src, dst, other = call_attrs(inner).src_layout, call_attrs(inner).dst_layout, outer
        else:
            src = call_attrs(inner).src_layout
    if other is None:
        return None
    n_src, n_dst = len(_layout_axes(src)), len(_layout_axes(dst))
    if n_src < n_dst:  # a rank-increasing transform after a transpose
        order = _axis_order(other, n_src)
        if order is None:
            return None
        inverse = [0] * len(order)
        for i, a in enumerate(order):
            inverse[a] = i
        new_src = _permute_layout(src, inverse)
        return None if new_src is None else K.layout_transform(x, new_src, dst)
    if n_src > n_dst:  # a transpose after a rank-decreasing transform
        order = _axis_order(other, n_dst)
        new_dst = None if order is None else _permute_layout(dst, order)
        return None if new_dst is None else K.layout_transform(x, src, new_dst)
    return K.layout_transform(x, src, dst) if is_op(other, "layout_transform") else None


def _transpose_layout_chain(call: Call) -> Expr | None:
    """TVM's ``SimplifyTranspose``: two transposes / layout_transforms in a row become one
    transpose (or none), or one layout_transform when one of them changes the rank."""
    inner = call.args[0]
    out = tensor_type(call)
    if not is_op(inner, "transpose", "layout_transform") or out is None:
        return None
    assert isinstance(inner, Call)
    x = inner.args[0]
    folded = _fold_rank_changing(x, call, inner)
    if folded is not None:
        assert isinstance(folded, Call)
        attrs = call_attrs(folded)
        return x if attrs.src_layout == attrs.dst_layout else folded
    if _rank_changing(call) or _rank_changing(inner):
        return None
    ndim = out.ndim
    orders = [_axis_order(inner, ndim), _axis_order(call, ndim)]
    axes = list(range(ndim))
    for order in orders:
        if order is None:
            return None
        axes = [axes[order[i]] for i in range(ndim)]
    return x if axes == list(range(ndim)) else K.transpose(x, axes)


def _noop_layout_transform(call: Call) -> Expr | None:
    """``layout_transform(x, L, L) -> x``."""
    attrs = call_attrs(call)
    return call.args[0] if attrs.src_layout == attrs.dst_layout else None


def _noop_transpose(call: Call) -> Expr | None:
    """``transpose(x, identity) -> x``."""
    perm = _permutation(call)
    if perm is None or perm != tuple(range(len(perm))):
        return None
    return call.args[0]


# --- casts and clips --------------------------------------------------------------------------

def _same_cast(call: Call) -> Expr | None:
    """``cast(x, dtype of x) -> x``."""
    x = call.args[0]
    return x if x.checked_type == call.checked_type else None


_MANTISSA_BITS = {2: 11, 4: 24, 8: 53}  # float16, float32, float64 (with the implicit bit)


def _is_widening(src: str, dst: str) -> bool:
    """Whether every value of ``src`` is exactly representable in ``dst``.

    TVM's ``IsWidenCast`` is looser (it treats int32 -> float32 and int8 -> uint8 as widening);
    Kiln only drops a cast when no value can change.
    """
    if is_narrow(src) or is_narrow(dst):
        return _narrow_widening(src, dst)
    a, b = np_dtype(src), np_dtype(dst)
    if a.kind == "b":
        return True
    if a.kind == b.kind:
        return a.itemsize <= b.itemsize
    if a.kind == "u" and b.kind == "i":
        return a.itemsize < b.itemsize
    if a.kind in "iu" and b.kind == "f":
        return 8 * a.itemsize - (a.kind == "i") <= _MANTISSA_BITS[b.itemsize]
    return False


def _cast_chain(call: Call) -> Expr | None:
    """``cast(cast(x, wider), t) -> cast(x, t)``."""
    inner = call.args[0]
    if not is_op(inner, "cast"):
        return None
    assert isinstance(inner, Call)
    x, mid, out = tensor_type(inner.args[0]), tensor_type(inner), tensor_type(call)
    if x is None or mid is None or out is None or not _is_widening(x.dtype, mid.dtype):
        return None
    return K.cast(inner.args[0], out.dtype)


def _narrow_widening(src: str, dst: str) -> bool:
    """:func:`_is_widening` where a dtype is narrow (bfloat16, float8, int4, ...): casts to a
    narrow dtype always stay; narrow values widen exactly to the wider standard types."""
    if is_narrow(dst):
        return False
    if src == "bfloat16":
        return dst in ("float32", "float64")
    if is_float(src):
        return dst in ("float16", "float32", "float64")
    if src.startswith("u"):
        return dst != "bool"
    return dst != "bool" and not dst.startswith("u")


def _dtype_range(dtype: str) -> tuple[float, float]:
    """The values a tensor of ``dtype`` can hold (floats: infinities included)."""
    if is_narrow(dtype):
        return (-math.inf, math.inf) if has_inf(dtype) else dtype_range(dtype)
    np_type = np_dtype(dtype)
    if np_type.kind == "b":
        return 0.0, 1.0
    if np_type.kind == "f":
        return -np.inf, np.inf
    info = np.iinfo(np_type)
    return float(info.min), float(info.max)


def _clip_casts(call: Call) -> Expr | None:
    """TVM's ``SimplifyClipAndConsecutiveCast``: in ``cast(...cast(clip(x, lo, hi))...)`` the
    casts to dtypes holding all of ``[lo, hi]`` go; a final cast keeps the result's dtype."""
    casts: list[Call] = []
    node: Expr = call
    while is_op(node, "cast"):
        assert isinstance(node, Call)
        casts.append(node)
        node = node.args[0]
    out = tensor_type(call)
    if not is_op(node, "clip") or out is None:
        return None
    assert isinstance(node, Call)
    lo, hi = call_attrs(node).a_min, call_attrs(node).a_max
    chain = [str(call_attrs(c).dtype) for c in reversed(casts)]  # innermost first
    # a cast to a narrow dtype (bfloat16, float8, int4, ...) rounds or wraps: it always stays
    dtypes = [d for d in chain
              if is_narrow(d) or not (_dtype_range(d)[0] <= lo and hi <= _dtype_range(d)[1])]
    clipped = tensor_type(node)
    last = dtypes[-1] if dtypes else clipped.dtype if clipped is not None else None
    if last != out.dtype:
        dtypes.append(out.dtype)
    if dtypes == chain:
        return None
    res: Expr = node
    for dtype in dtypes:
        res = K.cast(res, dtype)
    return res


def _dequantized_arg(call: Call) -> Expr | None:
    """TVM's ``SimplifyDQArgFunc``: ``argmax(dequantize(x, s, z)) -> argmax(x)`` (also argmin,
    argsort): dequantizing preserves the order for a positive constant scale."""
    dq = call.args[0]
    if not is_op(dq, "qnn.dequantize"):
        return None
    assert isinstance(dq, Call)
    scale = const_array(dq.args[1])
    if scale is None or scale.size == 0 or not bool(np.all(scale > 0)):
        return None
    return Call(call.op, [dq.args[0]], call.attrs, source_names=call.source_names)


def _binomial_pattern() -> tuple[DFPattern, ...]:
    x, y = wildcard(), wildcard()
    a, b, c = is_constant(), is_constant(), is_constant()

    def mul(p: DFPattern, q: DFPattern) -> DFPattern:
        return op_pattern("multiply")(p, q)

    def add(p: DFPattern, q: DFPattern) -> DFPattern:
        return op_pattern("add")(p, q)

    x_sq = mul(a, mul(x, x)) | mul(x, mul(a, x)) | mul(x, x)
    xy = mul(b, mul(x, y)) | mul(x, mul(b, y)) | mul(y, mul(b, x)) | mul(x, y)
    y_sq = mul(c, mul(y, y)) | mul(y, mul(c, y)) | mul(y, y)
    root = add(add(xy, x_sq), y_sq) | add(add(xy, y_sq), x_sq) | add(add(x_sq, y_sq), xy)
    return root, x, y, a, b, c


_BINOMIAL = _binomial_pattern()


def _binomial(call: Call) -> Expr | None:
    """TVM's ``SimplifyBinomial``: ``a*x*x + b*x*y + c*y*y -> a * ((x + p*y) * (x + q*y))`` with
    ``p, q = (b +- sqrt(b*b - 4ac)) / 2a`` (any order of the terms and factors; ``a``, ``b``, ``c``
    scalar constants, 1 when absent), when the discriminant is not negative (and, for integer
    tensors, the roots are integers)."""
    out = tensor_type(call)
    if out is None or out.dtype not in ("int32", "int64", "float32", "float64"):
        return None
    root, x_pat, y_pat, *coefs = _BINOMIAL
    found = match_nodes(root, call)
    if found is None:
        return None
    x, y = found[x_pat][0], found[y_pat][0]
    vals = []
    for pat in coefs:
        value = const_array(found[pat][0]) if pat in found else np.ones(1)
        if value is None or value.size != 1:
            return None
        vals.append(float(value.reshape(-1)[0]))
    a, b, c = vals
    if c == 1 and a > 1:
        x, y, a, c = y, x, c, a
    disc = b * b - 4 * a * c
    if disc < 0:
        return None
    root_d = float(np.sqrt(disc))
    dtype = np_dtype(out.dtype)
    p, q = (b + root_d) / (2 * a), (b - root_d) / (2 * a)
    if dtype.kind == "i" and not all(float(v).is_integer() for v in (a, p, q)):
        return None  # integer roots only: the factors must be exact in the dtype

    def scalar(v: float) -> Constant:
        return Constant(np.array(v).astype(dtype))

    first = K.add(x, K.multiply(y, scalar(p)))
    second = first if disc < 1e-4 else K.add(x, K.multiply(y, scalar(q)))
    return K.multiply(scalar(a), K.multiply(first, second))


def _redundant_clip(call: Call) -> Expr | None:
    """``clip(x, lo, hi) -> x`` when ``[lo, hi]`` covers every value of x's dtype."""
    out = tensor_type(call)
    if out is None:
        return None
    lo, hi = _dtype_range(out.dtype)
    if call_attrs(call).a_min <= lo and call_attrs(call).a_max >= hi:
        return call.args[0]
    return None


# --- full operands of broadcasting ops ----------------------------------------------------------

def _fill_scalar(expr: Expr, dtype: str) -> Constant | None:
    name = op_name(expr)
    value: float | None = None
    if name in ("zeros", "zeros_like"):
        value = 0.0
    elif name in ("ones", "ones_like"):
        value = 1.0
    elif name in ("full", "full_like"):
        assert isinstance(expr, Call)
        fill = const_array(expr.args[-1])
        if fill is None or fill.size != 1:
            return None
        return Constant(fill.reshape(()).astype(np_dtype(dtype)))
    if value is None:
        return None
    return Constant(np.asarray(value, dtype=np_dtype(dtype)))


def _full_elementwise(call: Call) -> Expr | None:
    """``op(x, full(v)) -> op(x, v)`` for a broadcasting binary ``op`` keeping x's type."""
    name = op_name(call)
    if name is None or len(call.args) != 2 or get_op_def(name).pattern != OpPattern.BROADCAST:
        return None
    out = tensor_type(call)
    if out is None:
        return None
    for i in (0, 1):
        fill, x = call.args[i], call.args[1 - i]
        fill_type = tensor_type(fill)
        if fill_type is None or x.checked_type != out:
            continue
        scalar = _fill_scalar(fill, fill_type.dtype)
        if scalar is not None:
            args = [x, scalar] if i == 1 else [scalar, x]
            return Call(call.op, args, call.attrs, source_names=call.source_names)
    return None


# --- powers and constant divisors ---------------------------------------------------------------

def _exponent(call: Call) -> float | None:
    """The exponent of ``power(x, c)`` for a one-element constant ``c`` that leaves x's type."""
    x, exponent = call.args
    value = scalar_value(exponent)
    if value is None or x.checked_type != call.checked_type:
        return None
    return value


def _is_float(expr: Expr) -> bool:
    ty = tensor_type(expr)
    return ty is not None and np_dtype(ty.dtype).kind == "f"


def _power_square(call: Call) -> Expr | None:
    """``power(x, 2) -> x * x``."""
    if _exponent(call) != 2.0:
        return None
    x = call.args[0]
    return K.multiply(x, x)


def _power_root(call: Call) -> Expr | None:
    """``power(x, 0.5) -> sqrt(x)`` and ``power(x, -0.5) -> rsqrt(x)`` (floats)."""
    exponent = _exponent(call)
    if exponent not in (0.5, -0.5) or not _is_float(call):
        return None
    x = call.args[0]
    return K.sqrt(x) if exponent == 0.5 else K.rsqrt(x)


def _power_one(call: Call) -> Expr | None:
    """``power(x, 1) -> x``."""
    return call.args[0] if _exponent(call) == 1.0 else None


def _div_const(call: Call) -> Expr | None:
    """``x / c -> x * (1 / c)`` for a float constant ``c`` whose reciprocals are normal numbers.

    The reciprocal is computed in float64 and rounded once to the dtype (see the module docstring
    for the difference this makes). Only when compiling for a target (``relay.build`` enters its
    target): on its own, SimplifyExpr keeps divisions exact, as TVM's does.
    """
    if Target.current() is None:
        return None
    x, den = call.args
    value = const_array(den)
    if value is None or isinstance(x, Constant) or value.dtype.kind != "f" or value.size == 0:
        return None
    with np.errstate(divide="ignore", over="ignore"):
        wide = 1.0 / value.astype(np.float64)
    recip = np.asarray(wide, dtype=value.dtype)
    magnitude = np.abs(recip)
    if not (np.all(np.isfinite(recip)) and np.all(magnitude >= np.finfo(value.dtype).tiny)):
        return None
    return K.multiply(x, Constant(recip))


# --- reshapes that add axes move below element-wise consumers -----------------------------------

def _shape(expr: Expr) -> tuple[int, ...] | None:
    ty = tensor_type(expr)
    return tuple(int(d) for d in ty.shape) if ty is not None else None


def _expanding_reshape(expr: Expr) -> Expr | None:
    """The input of a reshape-like call that adds axes (output rank above input rank)."""
    if op_name(expr) not in RESHAPE_OPS:
        return None
    assert isinstance(expr, Call)
    src, out = _shape(expr.args[0]), _shape(expr)
    if src is None or out is None or len(out) <= len(src):
        return None
    return expr.args[0]


def _kept_trailing_axes(src: tuple[int, ...], out: tuple[int, ...]) -> int:
    """How many trailing axes a reshape from ``src`` to ``out`` leaves unchanged.

    When ``src[-k:] == out[-k:]``, the leading axes on both sides hold the same number of
    elements, so every element keeps its trailing coordinates.
    """
    k = 0
    while k < min(len(src), len(out)) and src[-1 - k] == out[-1 - k]:
        k += 1
    return k


def _sink_unary(call: Call) -> Expr | None:
    """``f(reshape(y)) -> reshape(f(y))`` for an element-wise ``f`` of one tensor and an
    axis-adding reshape."""
    name = op_name(call)
    if name is None or len(call.args) != 1 or get_op_def(name).pattern != OpPattern.ELEMWISE:
        return None
    y = _expanding_reshape(call.args[0])
    out = _shape(call)
    if y is None or out is None or out != _shape(call.args[0]):
        return None
    inner = Call(call.op, [y], call.attrs, source_names=call.source_names)
    return K.reshape(inner, out)


def _operand_for(other: Expr, src: tuple[int, ...], out: tuple[int, ...]) -> Expr | None:
    """``other`` (an operand combined with ``reshape(y, out)``, ``y`` of shape ``src``) rewritten
    to combine with ``y`` instead, or None when that needs more than a reshape of ``other``."""
    inner = _expanding_reshape(other)
    if inner is not None and _shape(inner) == src and _shape(other) == out:
        return inner
    shape = _shape(other)
    if shape is None or len(shape) > len(out):
        return None
    tail = min(_kept_trailing_axes(src, out), len(shape))
    if all(d == 1 for d in shape[:len(shape) - tail]):
        # varies along kept trailing axes only (a bias, a mask): drop its leading unit axes
        target = shape[len(shape) - tail:]
        while target and target[0] == 1:
            target = target[1:]
    elif shape == out:
        target = src  # a full-size operand (a residual) takes y's shape
    else:
        return None
    if target == shape:
        return other
    value = const_array(other)
    return Constant(value.reshape(target)) if value is not None else K.reshape(other, target)


def _sink_binary(call: Call) -> Expr | None:
    """``op(reshape(y), b) -> reshape(op(y, b'))`` for a broadcasting binary ``op``, an
    axis-adding reshape and ``b`` that broadcasts along the reshape's kept trailing axes, is a
    reshape of a tensor of y's shape, or has the result's shape (then ``b' = reshape(b)``)."""
    name = op_name(call)
    if name is None or len(call.args) != 2 or call.attrs is not None \
            or get_op_def(name).pattern != OpPattern.BROADCAST:
        return None
    out = _shape(call)
    for i in (0, 1):
        reshaped, other = call.args[i], call.args[1 - i]
        y = _expanding_reshape(reshaped)
        if y is None or _shape(reshaped) != out:
            continue
        src = _shape(y)
        assert src is not None and out is not None
        operand = _operand_for(other, src, out)
        if operand is None:
            continue
        args = [y, operand] if i == 0 else [operand, y]
        return K.reshape(Call(call.op, args, None, source_names=call.source_names), out)
    return None


# --- splits of transposes ---------------------------------------------------------------------

def _split_transpose(call: Call) -> Expr | None:
    """``split(transpose(x, p), axis) -> (transpose(strided_slice(x, axis p[axis])), ...)``.

    Each part then fuses with its own consumers (ViT's packed QKV projection: one copy per
    head group instead of a three-output transpose kernel followed by a copy per part).
    """
    inner = call.args[0]
    out = call.checked_type
    if not is_op(inner, "transpose") or not isinstance(out, TupleType):
        return None
    assert isinstance(inner, Call)
    x = inner.args[0]
    perm, shape = _permutation(inner), _shape(x)
    if perm is None or shape is None:
        return None
    axis = int(call_attrs(call).axis) % len(perm)
    src = perm[axis]
    parts: list[Expr] = []
    start = 0
    for field in out.fields:
        assert isinstance(field, TensorType)
        stop = start + int(field.shape[axis])
        begin, end = [0] * len(shape), list(shape)
        begin[src], end[src] = start, stop
        parts.append(K.transpose(K.strided_slice(x, begin, end), perm))
        start = stop
    return Tuple(parts)


def _project_tuple(node: TupleGetItem) -> Expr | None:
    """``(a, b, ...).i -> the i-th field``."""
    tup = node.tuple_value
    return tup.fields[node.index] if isinstance(tup, Tuple) else None


pm_simplify_expr = [
    Rule("zeros_like", "zeros_like", _zeros_like),  # zeros_like(x) -> zeros(shape)
    Rule("ones_like", "ones_like", _ones_like),  # ones_like(x) -> ones(shape)
    Rule("full_like", "full_like", _full_like),  # full_like(x, v) -> full(v, shape)
    Rule("reshape_like", "reshape_like", _reshape_like),  # reshape_like(x, y) -> reshape(x, shape)
    Rule("broadcast_to_like", "broadcast_to_like", _broadcast_to_like),  # -> broadcast_to(x, shape)
    Rule("collapse_sum_like", "collapse_sum_like", _collapse_sum_like),  # -> collapse_sum_to(x, shape)
    Rule("cast_like", "cast_like", _cast_like),  # cast_like(x, y) -> cast(x, dtype)
    Rule("add_self", "add", _add_self),  # x + x -> x * 2
    Rule("div_sqrt", "divide", _div_sqrt),  # a / sqrt(x) -> a * rsqrt(x)
    Rule("add_zero", "add", _add_zero),  # x + 0 -> x
    Rule("sub_zero", "subtract", _sub_zero),  # x - 0 -> x
    Rule("mul_one", "multiply", _mul_one),  # x * 1 -> x
    Rule("div_one", "divide", _div_one),  # x / 1 -> x
    Rule("reshape_chain", "reshape", _reshape_chain),  # reshape(reshape(x)) -> reshape(x)
    Rule("reverse_reshape_chain", "contrib_reverse_reshape", _reshape_chain),  # same, -> reshape
    *[Rule(f"noop_{name}", name, _noop_reshape)  # reshape(x) to its own shape -> x
      for name in sorted(RESHAPE_OPS)],
    Rule("transpose_chain", "transpose", _transpose_layout_chain),  # t(t(x)) -> t(x) or x
    Rule("layout_chain", "layout_transform", _transpose_layout_chain),  # same with layout_transform
    Rule("noop_layout_transform", "layout_transform", _noop_layout_transform),  # lt(x, L, L) -> x
    Rule("noop_transpose", "transpose", _noop_transpose),  # transpose(x, identity) -> x
    Rule("same_cast", "cast", _same_cast),  # cast(x: t, t) -> x
    Rule("clip_casts", "cast", _clip_casts),  # cast(cast(clip(x))) -> clip(x) when in range
    Rule("cast_chain", "cast", _cast_chain),  # cast(cast(x, wider), t) -> cast(x, t)
    Rule("full_elementwise", Call, _full_elementwise),  # op(x, full(v)) -> op(x, v)
    Rule("switch_add_mul", "multiply", _switch_add_mul),  # (x + c1) * c2 -> x * c2 + c1 * c2
    _make_regroup("multiply"),  # x * c1 * c2 -> x * (c1 * c2)
    _make_regroup("add"),  # x + c1 + c2 -> x + (c1 + c2)
    *[Rule(f"dequantized_{name}", name, _dequantized_arg)  # argmax(dequantize(x)) -> argmax(x)
      for name in ("argmax", "argmin", "argsort")],
    Rule("redundant_clip", "clip", _redundant_clip),  # clip(x: uint8, 0, 255) -> x
    Rule("binomial", "add", _binomial),  # a*x*x + b*x*y + c*y*y -> a * (x + p*y) * (x + q*y)
    Rule("power_square", "power", _power_square),  # power(x, 2) -> x * x
    Rule("power_root", "power", _power_root),  # power(x, +-0.5) -> sqrt(x) / rsqrt(x)
    Rule("power_one", "power", _power_one),  # power(x, 1) -> x
    Rule("div_const", "divide", _div_const),  # x / c -> x * (1 / c)
    Rule("sink_reshape_unary", Call, _sink_unary),  # f(reshape(y)) -> reshape(f(y))
    Rule("sink_reshape_binary", Call, _sink_binary),  # op(reshape(y), b) -> reshape(op(y, b'))
    Rule("split_transpose", "split", _split_transpose),  # split(transpose(x)) -> (transpose(slice)..)
    Rule("project_tuple", TupleGetItem, _project_tuple),  # (a, b).1 -> b
]


def simplify_expr(expr: Expr, mod: IRModule | None = None) -> Expr:
    """Apply :data:`pm_simplify_expr` to ``expr`` until nothing changes.

    Parameters
    ----------
    expr : Expr
        A function or expression (not modified).
    mod : IRModule, optional
        The module, to type calls of global functions.

    Returns
    -------
    Expr
        The simplified expression.
    """
    return graph_rewrite(expr, pm_simplify_expr, what="SimplifyExpr", mod=mod)


def SimplifyExpr() -> FunctionPass:
    """The SimplifyExpr pass (opt level 0)."""

    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out = simplify_expr(fn, mod)
        assert isinstance(out, Function)
        return out

    return FunctionPass(run, PassInfo(0, "SimplifyExpr", ("InferType",)))
