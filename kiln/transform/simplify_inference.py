"""SimplifyInference: training-time ops to inference arithmetic (TVM's ``SimplifyInference``).

Each rule produces exactly the arithmetic TVM writes, so that later passes (SimplifyExpr,
FoldConstant, FoldScaleAxis) and the graph JSON look like TVM's:

- ``batch_norm(x, gamma, beta, mean, var).0`` becomes ``x * scale + shift`` with
  ``scale = 1 / sqrt(var + eps) * gamma`` and ``shift = -mean * scale + beta``, both expanded to
  broadcast along the channel axis; with bound weights FoldConstant turns them into two constants,
  leaving one multiply and one add per batch norm;
- ``dropout(x).0`` becomes ``x``;
- ``layer_norm``, ``instance_norm`` and ``group_norm`` become ``(x - mean) / sqrt(var + eps)``
  over their axes, times gamma plus beta; ``l2_normalize`` becomes ``x / sqrt(max(sum(x*x), eps))``.
"""

from __future__ import annotations

import numpy as np

import kiln.op as K
from kiln.ir.expr import Call, Constant, Expr, Function, TupleGetItem
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, np_dtype
from kiln.transform.pass_infra import FunctionPass, PassContext, PassInfo
from kiln.transform.pattern_utils import expand_bias_to_match_axis
from kiln.transform.rewrite import Rule, call_attrs, graph_rewrite, is_op, tensor_type

__all__ = ["SimplifyInference", "pm_simplify_inference", "simplify_inference"]


def _scalar(value: float, dtype: str) -> Constant:
    # TVM goes through a C float (MakeConstantScalar(dtype, static_cast<float>(eps))).
    return Constant(np.asarray(np.float32(value), dtype=np_dtype(dtype)))


def _data_type(call: Call) -> TensorType | None:
    return tensor_type(call.args[0])


def _batch_norm(node: TupleGetItem) -> Expr | None:
    """``batch_norm(x, g, b, m, v).0 -> x * (1/sqrt(v + eps) * g) + (-m * scale + b)``."""
    bn = node.tuple_value
    if node.index != 0 or not is_op(bn, "nn.batch_norm"):
        return None
    assert isinstance(bn, Call)
    ty = _data_type(bn)
    if ty is None:
        return None
    data, gamma, beta, moving_mean, moving_var = bn.args
    attrs = call_attrs(bn)
    scale: Expr = K.divide(_scalar(1.0, ty.dtype),
                           K.sqrt(K.add(moving_var, _scalar(attrs.epsilon, ty.dtype))))
    if attrs.scale:
        scale = K.multiply(scale, gamma)
    shift: Expr = K.multiply(K.negative(moving_mean), scale)
    if attrs.center:
        shift = K.add(shift, beta)
    axis = attrs.axis % ty.ndim
    scale = expand_bias_to_match_axis(scale, ty.ndim, [axis])
    shift = expand_bias_to_match_axis(shift, ty.ndim, [axis])
    return K.add(K.multiply(data, scale), shift)


def _dropout(node: TupleGetItem) -> Expr | None:
    """``dropout(x).0 -> x``."""
    if node.index != 0 or not is_op(node.tuple_value, "nn.dropout"):
        return None
    assert isinstance(node.tuple_value, Call)
    return node.tuple_value.args[0]


def _normalize(data: Expr, axes: list[int], eps: float, dtype: str) -> Expr:
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` (both statistics keep dims)."""
    mean = K.mean(data, axes, True, False)
    var = K.variance(data, axes, True, False, False, with_mean=mean)
    return K.divide(K.subtract(data, mean), K.sqrt(K.add(var, _scalar(eps, dtype))))


def _affine(out: Expr, call: Call, ndim: int, axis: int) -> Expr:
    """``out * gamma + beta`` (each when the op's ``scale`` / ``center`` flag is set)."""
    attrs = call_attrs(call)
    if attrs.scale:
        out = K.multiply(out, expand_bias_to_match_axis(call.args[1], ndim, [axis]))
    if attrs.center:
        out = K.add(out, expand_bias_to_match_axis(call.args[2], ndim, [axis]))
    return out


def _layer_norm(call: Call) -> Expr | None:
    """``layer_norm(x, g, b) -> (x - mean) / sqrt(var + eps) * g + b`` over ``axis``."""
    ty = _data_type(call)
    if ty is None:
        return None
    attrs = call_attrs(call)
    axis = attrs.axis % ty.ndim
    out = _normalize(call.args[0], [axis], attrs.epsilon, ty.dtype)
    return _affine(out, call, ty.ndim, axis)


def _instance_norm(call: Call) -> Expr | None:
    """``instance_norm(x, g, b) -> (x - mean) / sqrt(var + eps) * g + b`` per sample and channel."""
    ty = _data_type(call)
    if ty is None:
        return None
    attrs = call_attrs(call)
    axis = attrs.axis % ty.ndim
    reduced = [i for i in range(1, ty.ndim) if i != axis]
    out = _normalize(call.args[0], reduced, attrs.epsilon, ty.dtype)
    return _affine(out, call, ty.ndim, axis)


def _group_norm(call: Call) -> Expr | None:
    """``group_norm(x, g, b)`` -> normalise ``x`` reshaped to ``(N, groups, C/groups, ...)``."""
    ty = _data_type(call)
    if ty is None:
        return None
    attrs = call_attrs(call)
    axis = attrs.axis % ty.ndim
    groups = attrs.num_groups
    new_shape: list[int] = []
    reduced: list[int] = []
    for i, dim in enumerate(ty.shape):
        if i == axis:
            new_shape += [groups, dim // groups]
            reduced.append(i + 1)
        else:
            if i > axis:
                reduced.append(i + 1)
            new_shape.append(dim)
    grouped = K.reshape(call.args[0], new_shape)
    out = K.reshape(_normalize(grouped, reduced, attrs.epsilon, ty.dtype), ty.shape)
    return _affine(out, call, ty.ndim, axis)


def _l2_normalize(call: Call) -> Expr | None:
    """``l2_normalize(x) -> x / sqrt(max(sum(x * x, axis), eps))``."""
    ty = _data_type(call)
    if ty is None:
        return None
    attrs = call_attrs(call)
    data = call.args[0]
    total = K.sum(K.multiply(data, data), attrs.axis, True, False)
    return K.divide(data, K.sqrt(K.maximum(total, _scalar(attrs.eps, ty.dtype))))


pm_simplify_inference = [
    Rule("batch_norm", TupleGetItem, _batch_norm),  # batch_norm(x, ...).0 -> x * scale + shift
    Rule("dropout", TupleGetItem, _dropout),  # dropout(x).0 -> x
    Rule("layer_norm", "nn.layer_norm", _layer_norm),  # layer_norm(x) -> (x - m) / sqrt(v + e) * g + b
    Rule("instance_norm", "nn.instance_norm", _instance_norm),  # same, per instance and channel
    Rule("group_norm", "nn.group_norm", _group_norm),  # same, over channel groups
    Rule("l2_normalize", "nn.l2_normalize", _l2_normalize),  # l2_normalize(x) -> x / sqrt(max(...))
]


def simplify_inference(expr: Expr, mod: IRModule | None = None) -> Expr:
    """Apply :data:`pm_simplify_inference` everywhere in ``expr`` (not modified)."""
    return graph_rewrite(expr, pm_simplify_inference, what="SimplifyInference", mod=mod)


def SimplifyInference() -> FunctionPass:
    """The SimplifyInference pass (opt level 0)."""

    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out = simplify_inference(fn, mod)
        assert isinstance(out, Function)
        return out

    return FunctionPass(run, PassInfo(0, "SimplifyInference", ("InferType",)))
