"""TVM-compatible ``relay`` namespace: ``from kiln import relay``.

The real code lives in :mod:`kiln.ir`, :mod:`kiln.op`, :mod:`kiln.transform`, :mod:`kiln.frontend`
and the build layers; this package only gathers the names relay-era scripts use.
"""

from __future__ import annotations

import typing
from typing import NoReturn

from kiln.errors import SymbolicShapeError
from kiln.ir import (
    Call,
    Constant,
    Expr,
    Function,
    FuncType,
    GlobalVar,
    If,
    IRModule,
    Let,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    TupleWrapper,
    Var,
    const,
    var,
)
from kiln.ir.expr import Op
from kiln.ir.incomplete import IncompleteType
from kiln.ir.ref import RefCreate, RefRead, RefType, RefWrite
from kiln.op import *
from kiln.relay import analysis, expr_functor, image, nn, op, transform, vision
from kiln.relay.expr_functor import ExprMutator, ExprVisitor
from kiln.relay.op import annotation
from kiln.relay.scope_builder import ScopeBuilder
from kiln.runtime.params import load_param_dict, save_param_dict
from kiln.transform.pass_infra import PassContext

__all__ = [
    "Any",
    "Call",
    "Constant",
    "Expr",
    "ExprMutator",
    "ExprVisitor",
    "FuncType",
    "Function",
    "GlobalVar",
    "IRModule",
    "If",
    "IncompleteType",
    "Let",
    "Op",
    "TensorType",
    "Tuple",
    "TupleGetItem",
    "TupleType",
    "TupleWrapper",
    "Var",
    "analysis",
    "annotation",
    "backend",
    "build",
    "build_config",
    "const",
    "create_executor",
    "expr_functor",
    "frontend",
    "image",
    "load_param_dict",
    "nn",
    "op",
    "optimize",
    "save_param_dict",
    "scalar_type",
    "testing",
    "transform",
    "var",
    "vision",
]


def build_config(opt_level: int = 2, required_pass: typing.Any = None, disabled_pass: typing.Any = None,
                 trace: typing.Any = None, **config: typing.Any) -> PassContext:
    """The old name of :class:`~kiln.transform.PassContext` (NNVM/relay ``build_config``)."""
    return PassContext(opt_level=opt_level, required_pass=required_pass,
                       disabled_pass=disabled_pass, config=config or None)


def Any() -> NoReturn:
    """TVM's symbolic dimension; Kiln compiles static shapes, so this says so."""
    raise SymbolicShapeError("relay.Any(): symbolic dimensions are not supported; Kiln's types have "
                             "static shapes (give every dimension a size)")


def scalar_type(dtype: str) -> TensorType:
    """The type of a 0-d tensor of ``dtype`` (``relay.scalar_type``)."""
    return TensorType((), dtype)


def __getattr__(name: str) -> typing.Any:
    # Heavier subsystems load on first use so ``from kiln import relay`` stays fast.
    if name in ("build", "optimize", "create_executor"):
        from kiln import build_module

        return getattr(build_module, name)
    if name in ("parse", "parse_expr", "fromtext"):  # the relay text parser
        from kiln.frontend import relay_text

        return getattr(relay_text, name)
    if name in ("Span", "SourceName"):
        from kiln.ir import span

        return getattr(span, name)
    if name in ("backend", "frontend", "testing", "build_module", "ty", "dataflow_pattern",
                "expr", "scope_builder", "qnn", "quantize", "vm"):
        import importlib

        return importlib.import_module(f"kiln.relay.{name}")
    raise AttributeError(f"module 'kiln.relay' has no attribute {name!r}")
