"""``relay.expr``: the expression node classes and constructors."""

from kiln.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Tuple,
    TupleGetItem,
    TupleWrapper,
    Var,
    const,
    var,
)
from kiln.ir.ref import RefCreate, RefRead, RefType, RefWrite

__all__ = [
    "Call",
    "Constant",
    "Expr",
    "Function",
    "GlobalVar",
    "If",
    "Let",
    "RefCreate",
    "RefRead",
    "RefType",
    "RefWrite",
    "Tuple",
    "TupleGetItem",
    "TupleWrapper",
    "Var",
    "const",
    "var",
]
