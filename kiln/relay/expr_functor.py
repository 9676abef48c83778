"""``relay.expr_functor``: visitors and mutators."""

from kiln.ir.visitor import ExprMutator, ExprVisitor, post_order_visit

__all__ = ["ExprMutator", "ExprVisitor", "post_order_visit"]
