"""Kiln's graph IR: types, expressions, modules, traversal, structural equality and text form."""

from kiln.ir.analysis import all_vars, bound_vars, free_vars
from kiln.ir.attrs import Attrs, DictAttrs, attrs_class
from kiln.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    TupleWrapper,
    Var,
    const,
    var,
)
from kiln.ir.module import IRModule
from kiln.ir.op_table import register_op_attr
from kiln.ir.printer import astext
from kiln.ir.span import SourceName, Span
from kiln.ir.structural import assert_structural_equal, structural_equal, structural_hash
from kiln.ir.types import FuncType, TensorType, TupleType, Type, as_dtype, np_dtype
from kiln.ir.visitor import (
    ExprMutator,
    ExprVisitor,
    children,
    post_order,
    post_order_visit,
    rebuild,
    rewrite,
)

__all__ = [
    "Attrs",
    "register_op_attr",
    "Call",
    "Constant",
    "DictAttrs",
    "Expr",
    "ExprMutator",
    "ExprVisitor",
    "FuncType",
    "Function",
    "GlobalVar",
    "IRModule",
    "If",
    "Let",
    "Op",
    "SourceName",
    "Span",
    "TensorType",
    "Tuple",
    "TupleGetItem",
    "TupleType",
    "TupleWrapper",
    "Type",
    "Var",
    "all_vars",
    "as_dtype",
    "assert_structural_equal",
    "astext",
    "attrs_class",
    "bound_vars",
    "children",
    "const",
    "free_vars",
    "np_dtype",
    "post_order",
    "post_order_visit",
    "rebuild",
    "rewrite",
    "structural_equal",
    "structural_hash",
    "var",
]
