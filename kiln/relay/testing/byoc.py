"""``relay.testing.byoc``: TVM's BYOC test helper, an annotator for the ``ccompiler`` target."""

from __future__ import annotations

from kiln.ir.expr import Call, Expr, Var
from kiln.op import add, multiply, subtract
from kiln.relay.expr_functor import ExprMutator
from kiln.transform.annotation import compiler_begin, compiler_end

__all__ = ["CcompilerAnnotator"]


class CcompilerAnnotator(ExprMutator):
    """Annotate an ``add -> subtract -> multiply`` chain as one ``ccompiler`` region (TVM's).

    The ``add`` under a ``multiply`` gets ``compiler_begin`` on its arguments, variables feeding
    the ``subtract`` and ``multiply`` get one too, and the ``multiply`` gets ``compiler_end``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.in_compiler = 0

    def _begin_var(self, expr: Expr) -> Expr:
        return compiler_begin(expr, "ccompiler") if isinstance(expr, Var) else expr

    def visit_call(self, call: Call) -> Expr:
        """Annotate as TVM's ``CcompilerAnnotator.visit_call``."""
        name = getattr(call.op, "name", None)
        if name == "add" and self.in_compiler == 1:
            lhs: Expr = compiler_begin(super().visit(call.args[0]), "ccompiler")
            rhs: Expr = compiler_begin(super().visit(call.args[1]), "ccompiler")
            self.in_compiler = 2
            return add(lhs, rhs)
        if name == "subtract" and self.in_compiler == 1:
            lhs = self._begin_var(super().visit(call.args[0]))
            rhs = self._begin_var(super().visit(call.args[1]))
            return subtract(lhs, rhs)
        if name == "multiply":
            self.in_compiler = 1
            lhs = self._begin_var(super().visit(call.args[0]))
            rhs = self._begin_var(super().visit(call.args[1]))
            out: Expr = multiply(lhs, rhs)
            if self.in_compiler == 2:
                out = compiler_end(out, "ccompiler")
            self.in_compiler = 0
            return out
        return super().visit_call(call)
