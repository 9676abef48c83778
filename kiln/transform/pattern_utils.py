"""Shape helpers shared by the passes that move per-channel values around.

These mirror TVM's ``pattern_utils.h`` helpers: aligning a per-channel vector with an axis of a
tensor (:func:`expand_bias_to_match_axis`), recognising operands that broadcast along given axes
only (:func:`match_broadcast_to_left_axes`), and checking constants for positivity.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import kiln.op as K
from kiln.ir.expr import Call, Constant, Expr
from kiln.ir.types import TensorType
from kiln.transform.rewrite import is_op

__all__ = [
    "expand_bias_to_match_axis",
    "is_all_positive_constant",
    "match_broadcast_to_left_axes",
    "squeeze_to_axes",
]


def expand_bias_to_match_axis(bias: Expr, target_ndim: int, axes: Sequence[int]) -> Expr:
    """Reshape a vector over ``axes`` so that it broadcasts against a ``target_ndim``-d tensor.

    ``bias`` has one dimension per entry of the sorted ``axes``; size-1 dimensions are inserted
    with ``expand_dims`` after each of them (TVM's ``ExpandBiasToMatchAxis``). Leading axes need
    nothing: broadcasting aligns from the right.

    Parameters
    ----------
    bias : Expr
        The vector (or one dimension per axis).
    target_ndim : int
        Rank of the tensor it will combine with.
    axes : sequence of int
        The (non-negative, increasing) axes ``bias`` runs along.

    Returns
    -------
    Expr
        ``bias`` with size-1 axes inserted (``bias`` itself when none are needed).
    """
    for i in range(len(axes), 0, -1):
        if i == len(axes):
            pad = target_ndim - axes[i - 1] - 1
        else:
            pad = axes[i] - axes[i - 1]
        if pad > 0:
            bias = K.expand_dims(bias, i, pad)
    return bias


def match_broadcast_to_left_axes(lhs: TensorType, rhs: TensorType, axes: Sequence[int],
                                 allow_scalar: bool = False) -> bool:
    """Whether ``rhs`` broadcasts against ``lhs`` varying along ``axes`` only.

    True when every axis of ``rhs`` aligned with one of ``axes`` has ``lhs``'s size there, and
    every other aligned axis has size 1 (TVM's ``MatchBroadcastToLeftAxes``). A 0-d ``rhs``
    matches only with ``allow_scalar`` (TVM accepts it where it can repeat the scalar).
    """
    if allow_scalar and rhs.ndim == 0 and axes:
        return True
    if lhs.ndim < rhs.ndim:
        return False
    base = lhs.ndim - rhs.ndim
    for i in range(lhs.ndim):
        if i in axes:
            if i < base or lhs.shape[i] != rhs.shape[i - base]:
                return False
        elif i >= base and rhs.shape[i - base] != 1:
            return False
    return True


def squeeze_to_axes(value: Expr, lhs: TensorType, rhs: TensorType, axes: Sequence[int]) -> Expr:
    """``value`` (of type ``rhs``, matching ``lhs`` along ``axes``) as one dim per axis.

    A scalar is repeated to the axis sizes; other size-1 dimensions are squeezed away.
    """
    if rhs.ndim == 0:
        out = K.expand_dims(value, 0, len(axes))
        for i, axis in enumerate(axes):
            out = K.repeat(out, lhs.shape[axis], i)
        return out
    base = lhs.ndim - rhs.ndim
    drop = [i - base for i in range(base, lhs.ndim) if i not in axes]
    return K.squeeze(value, drop) if drop else value


# Ops that only move values around: a positive constant stays positive through them.
_POSITIVE_PRESERVING = ("expand_dims", "reshape", "transpose", "squeeze", "repeat")


def is_all_positive_constant(expr: Expr) -> bool:
    """Whether ``expr`` is a constant (possibly reshaped) with no negative element.

    Like TVM's ``IsAllPositiveConstant``, zero counts as positive.
    """
    while is_op(expr, *_POSITIVE_PRESERVING):
        assert isinstance(expr, Call)
        expr = expr.args[0]
    if not isinstance(expr, Constant) or expr.value.dtype.kind not in "iuf":
        return False
    return bool(np.all(expr.value >= 0))
