"""CanonicalizeOps: rewrite convenience ops into the basic ones (TVM's ``CanonicalizeOps``).

``nn.bias_add(x, b, axis)`` becomes ``add(x, expand_dims(b, ...))`` with the bias aligned to
``axis``, so that it fuses and folds like any broadcasting add.
"""

from __future__ import annotations

import kiln.op as K
from kiln.ir.expr import Call, Expr, Function
from kiln.ir.module import IRModule
from kiln.transform.pass_infra import FunctionPass, PassContext, PassInfo
from kiln.transform.pattern_utils import expand_bias_to_match_axis
from kiln.transform.rewrite import Rule, call_attrs, graph_rewrite, tensor_type

__all__ = ["CanonicalizeOps", "canonicalize_ops", "pm_canonicalize_ops"]


def _bias_add(call: Call) -> Expr | None:
    """``nn.bias_add(x, b, axis) -> add(x, expand_dims(b))``."""
    data = tensor_type(call.args[0])
    if data is None:
        return None
    axis = call_attrs(call).axis % data.ndim if data.ndim else 0
    return K.add(call.args[0], expand_bias_to_match_axis(call.args[1], data.ndim, [axis]))


pm_canonicalize_ops = [
    Rule("bias_add", "nn.bias_add", _bias_add),  # bias_add(x, b) -> add(x, expand_dims(b))
]


def canonicalize_ops(expr: Expr, mod: IRModule | None = None) -> Expr:
    """Apply :data:`pm_canonicalize_ops` everywhere in ``expr`` (not modified)."""
    return graph_rewrite(expr, pm_canonicalize_ops, what="CanonicalizeOps", mod=mod)


def CanonicalizeOps() -> FunctionPass:
    """The CanonicalizeOps pass (opt level 3)."""

    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out = canonicalize_ops(fn, mod)
        assert isinstance(out, Function)
        return out

    return FunctionPass(run, PassInfo(3, "CanonicalizeOps", ("InferType",)))
