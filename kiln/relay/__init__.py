"""TVM-compatible ``relay`` namespace: ``from kiln import relay``.

The real code lives in :mod:`kiln.ir`, :mod:`kiln.op`, :mod:`kiln.transform`, :mod:`kiln.frontend`
and the build layers; this package only gathers the names relay-era scripts use.
"""

from __future__ import annotations

from typing import Any

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
from kiln.op import *
from kiln.relay import analysis, expr_functor, image, nn, op, transform, vision
from kiln.relay.expr_functor import ExprMutator, ExprVisitor
from kiln.relay.op import annotation
from kiln.runtime.params import load_param_dict, save_param_dict
from kiln.transform.pass_infra import PassContext

__all__ = [
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
    "testing",
    "transform",
    "var",
    "vision",
]


def build_config(opt_level: int = 2, required_pass: Any = None, disabled_pass: Any = None,
                 trace: Any = None, **config: Any) -> PassContext:
    """The old name of :class:`~kiln.transform.PassContext` (NNVM/relay ``build_config``)."""
    return PassContext(opt_level=opt_level, required_pass=required_pass,
                       disabled_pass=disabled_pass, config=config or None)


def __getattr__(name: str) -> Any:
    # Heavier subsystems load on first use so ``from kiln import relay`` stays fast.
    if name in ("build", "optimize", "create_executor"):
        from kiln import build_module

        return getattr(build_module, name)
    if name in ("backend", "frontend", "testing", "build_module"):
        import importlib

        return importlib.import_module(f"kiln.relay.{name}")
    raise AttributeError(f"module 'kiln.relay' has no attribute {name!r}")
