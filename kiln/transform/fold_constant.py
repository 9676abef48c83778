"""FoldConstant: evaluate every subgraph that depends on no variable (TVM's ``FoldConstant``).

Calls of primitive operators whose arguments are all constants are evaluated with the operators'
NumPy reference kernels and replaced by the resulting constant, bottom-up, so whole constant
subgraphs collapse (batch-norm scale/shift arithmetic on bound weights, weight layout changes, ...).
``shape_of`` and ``ndarray_size`` fold from the static type of their argument even when it is not
constant. Projections of literal tuples and ``if`` on a constant condition are simplified too.

As in TVM, calls without arguments (``zeros``, ``arange``: cheap to compute, large to store) and
stateful operators (``nn.dropout``) are kept, and fused primitive functions are left alone. In the
build, params bound by name become constants first, so folding plus graph codegen give TVM's
"PrecomputePrune": params no longer used after folding are not in the built params.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.interpreter import check_value
from kiln.ir.expr import Call, Constant, Expr, Function, If, Op, Tuple, TupleGetItem
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, np_dtype
from kiln.op.registry import get_op_def
from kiln.transform.pass_infra import FunctionPass, PassContext, PassInfo
from kiln.transform.rewrite import Rule, graph_rewrite, tensor_type

__all__ = ["FoldConstant", "FoldConstantExpr", "fold_constant", "pm_fold_constant"]

def _is_constant(expr: Expr) -> bool:
    if isinstance(expr, Constant):
        return True
    return isinstance(expr, Tuple) and all(_is_constant(f) for f in expr.fields)


def _value(expr: Expr) -> Any:
    if isinstance(expr, Constant):
        return expr.value
    assert isinstance(expr, Tuple)
    return tuple(_value(f) for f in expr.fields)


def _to_expr(value: Any) -> Expr:
    if isinstance(value, tuple):
        return Tuple([_to_expr(v) for v in value])
    return Constant(value)


def _fold_call(call: Call) -> Expr | None:
    """``op(c1, c2, ...)`` with constant arguments -> the constant it evaluates to."""
    if not isinstance(call.op, Op) or not call.args:
        return None
    op_def = get_op_def(call.op.name)
    if op_def.stateful or not all(_is_constant(a) for a in call.args):
        return None
    with np.errstate(all="ignore"):
        out = op_def.reference([_value(a) for a in call.args], call.attrs, call.checked_type)
    if isinstance(out, list):
        out = tuple(out)
    out = check_value(out, call.checked_type, f"reference kernel of {call._short()}")
    return _to_expr(out)


def _static_shape(call: Call) -> tuple[int, ...] | None:
    arg = tensor_type(call.args[0]) if call.args else None
    return arg.shape if arg is not None else None


def _fold_shape_of(call: Call) -> Expr | None:
    """``shape_of(x)`` -> the constant shape of ``x`` (known statically)."""
    shape = _static_shape(call)
    out = call.checked_type
    if shape is None or not isinstance(out, TensorType):
        return None
    return Constant(np.array(shape, dtype=np_dtype(out.dtype)).reshape(out.shape))


def _fold_ndarray_size(call: Call) -> Expr | None:
    """``ndarray_size(x)`` -> the constant element count of ``x``."""
    shape = _static_shape(call)
    out = call.checked_type
    if shape is None or not isinstance(out, TensorType):
        return None
    return Constant(np.array(int(np.prod(shape)), dtype=np_dtype(out.dtype)).reshape(out.shape))


def _fold_tuple_getitem(node: TupleGetItem) -> Expr | None:
    """``(a, b, c).1`` -> ``b``."""
    if isinstance(node.tuple_value, Tuple):
        return node.tuple_value.fields[node.index]
    return None


def _fold_if(node: If) -> Expr | None:
    """``if (const) a else b`` -> the branch taken."""
    if not isinstance(node.cond, Constant):
        return None
    return node.then_branch if bool(node.cond.value.reshape(-1)[0]) else node.else_branch


pm_fold_constant = [
    Rule("shape_of", "shape_of", _fold_shape_of),  # shape_of(x) -> const(shape)
    Rule("ndarray_size", "ndarray_size", _fold_ndarray_size),  # ndarray_size(x) -> const(size)
    Rule("const_call", Call, _fold_call),  # op(c1, ..., cn) -> const(op(c1, ..., cn))
    Rule("tuple_getitem", TupleGetItem, _fold_tuple_getitem),  # (a, b).1 -> b
    Rule("const_if", If, _fold_if),  # if (c) a else b -> a or b
]


def fold_constant(expr: Expr, mod: IRModule | None = None) -> Expr:
    """Fold the constant subgraphs of ``expr``.

    Parameters
    ----------
    expr : Expr
        A function or expression (not modified).
    mod : IRModule, optional
        The module, to type calls of global functions.

    Returns
    -------
    Expr
        The folded expression.

    Examples
    --------
    >>> fold_constant(relay.const(1.0) + relay.const(2.0))  # doctest: +SKIP
    const(3.0, float32)
    """
    return graph_rewrite(expr, pm_fold_constant, what="FoldConstant", mod=mod)


def FoldConstantExpr(expr: Expr, mod: IRModule | None = None, fold_qnn: bool = False) -> Expr:
    """TVM's ``relay.transform.FoldConstantExpr``: :func:`fold_constant` (Kiln has no QNN ops)."""
    return fold_constant(expr, mod)


def FoldConstant(fold_qnn: bool = False) -> FunctionPass:
    """The constant-folding pass (opt level 2).

    Parameters
    ----------
    fold_qnn : bool
        Accepted for TVM compatibility; Kiln has no QNN operators.

    Returns
    -------
    FunctionPass
        The pass.
    """

    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out = fold_constant(fn, mod)
        assert isinstance(out, Function)
        return out

    return FunctionPass(run, PassInfo(2, "FoldConstant"))
