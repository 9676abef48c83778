"""FoldConstant: evaluate every subgraph that depends on no variable (TVM's ``FoldConstant``).

Calls of primitive operators whose arguments are all constants are evaluated with the operators'
NumPy reference kernels and replaced by the resulting constant, bottom-up, so whole constant
subgraphs collapse (batch-norm scale/shift arithmetic on bound weights, weight layout changes, ...).
``shape_of`` and ``ndarray_size`` fold from the static type of their argument even when it is not
constant. Projections of literal tuples and ``if`` on a constant condition are simplified too, and
a ``let`` binding a constant is dropped, the constant inlined where the variable was used.

As in TVM, calls without arguments (``zeros``, ``arange``: cheap to compute, large to store) and
stateful operators (``nn.dropout``) are kept, and fused primitive functions are left alone. In the
build, params bound by name become constants first, so folding plus graph codegen give TVM's
"PrecomputePrune": params no longer used after folding are not in the built params.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.interpreter import check_value
from kiln.ir.expr import Call, Constant, Expr, Function, If, Let, Op, Tuple, TupleGetItem
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, np_dtype
from kiln.ir.visitor import post_order, rewrite
from kiln.op.narrow_ref import run_reference
from kiln.op.registry import get_op_def
from kiln.transform.pass_infra import FunctionPass, PassContext, PassInfo
from kiln.transform.rewrite import Rule, graph_rewrite, tensor_type

__all__ = ["FoldConstant", "FoldConstantExpr", "fold_constant", "pm_fold_constant",
           "pm_fold_constant_qnn"]

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
    """``op(c1, c2, ...)`` with constant arguments -> the constant it evaluates to (QNN ops
    excepted: :func:`_fold_qnn_call` folds those too)."""
    if isinstance(call.op, Op) and call.op.name.startswith("qnn."):
        return None
    return _fold_qnn_call(call)


def _fold_qnn_call(call: Call) -> Expr | None:
    """``op(c1, c2, ...)`` with constant arguments -> the constant, QNN ops included."""
    if not isinstance(call.op, Op) or not call.args:
        return None
    op_def = get_op_def(call.op.name)
    if op_def.stateful or not all(_is_constant(a) for a in call.args):
        return None
    with np.errstate(all="ignore"):
        out = run_reference(op_def, [_value(a) for a in call.args], call.attrs, call.checked_type)
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
    Rule("const_call", Call, _fold_call),  # op(c1, ..., cn) -> const(op(c1, ..., cn)), not qnn.*
    Rule("tuple_getitem", TupleGetItem, _fold_tuple_getitem),  # (a, b).1 -> b
    Rule("const_if", If, _fold_if),  # if (c) a else b -> a or b
]

# FoldConstant(fold_qnn=True): QNN calls of constants fold too
pm_fold_constant_qnn = [
    Rule("const_qnn_call", Call, _fold_qnn_call) if r.name == "const_call" else r
    for r in pm_fold_constant
]


def fold_constant(expr: Expr, mod: IRModule | None = None, fold_qnn: bool = False) -> Expr:
    """Fold the constant subgraphs of ``expr``.

    Parameters
    ----------
    expr : Expr
        A function or expression (not modified).
    mod : IRModule, optional
        The module, to type calls of global functions.
    fold_qnn : bool
        Also fold QNN operators (``qnn.*``) of constants; TVM leaves them to QNN
        canonicalization by default.

    Returns
    -------
    Expr
        The folded expression.

    Examples
    --------
    >>> fold_constant(relay.const(1.0) + relay.const(2.0))  # doctest: +SKIP
    const(3.0, float32)
    """
    rules = pm_fold_constant_qnn if fold_qnn else pm_fold_constant
    out = graph_rewrite(expr, rules, what="FoldConstant", mod=mod)
    while True:  # constants bound by let are inlined, which may let more fold
        inlined = _inline_constant_lets(out)
        if inlined is out:
            return out
        out = graph_rewrite(inlined, rules, what="FoldConstant", mod=mod)


def _inline_constant_lets(expr: Expr) -> Expr:
    """``let v = const; body`` -> ``body[v := const]`` (TVM's FoldConstant drops such lets)."""
    bound = {id(n.var): n.value for n in post_order(expr) if isinstance(n, Let)
             and isinstance(n.value, Constant)}
    if not bound:
        return expr
    memo: dict[int, Expr] = dict(bound)

    def drop(new: Expr, old: Expr) -> Expr | None:
        if isinstance(old, Let) and id(old.var) in bound:
            assert isinstance(new, Let)
            return new.body
        return None

    return rewrite(expr, drop, memo=memo)


def FoldConstantExpr(expr: Expr, mod: IRModule | None = None, fold_qnn: bool = False) -> Expr:
    """TVM's ``relay.transform.FoldConstantExpr``: :func:`fold_constant`."""
    return fold_constant(expr, mod, fold_qnn)


def FoldConstant(fold_qnn: bool = False) -> FunctionPass:
    """The constant-folding pass (opt level 2).

    Parameters
    ----------
    fold_qnn : bool
        Also fold QNN operators of constants (TVM's default leaves them).

    Returns
    -------
    FunctionPass
        The pass.
    """

    def run(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
        out = fold_constant(fn, mod, fold_qnn)
        assert isinstance(out, Function)
        return out

    return FunctionPass(run, PassInfo(2, "FoldConstant"))
