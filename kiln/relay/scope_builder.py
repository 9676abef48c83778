"""``relay.ScopeBuilder``: write nested ``let`` / ``if`` code in Python ``with`` blocks.

Example::

    sb = ScopeBuilder()
    x = sb.let("x", relay.const(1.0))
    with sb.if_scope(cond):
        sb.ret(x)
    with sb.else_scope():
        sb.ret(relay.const(0.0))
    expr = sb.get()  # let %x = 1f; if (%cond) { %x } else { 0f }
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from kiln.errors import KilnError
from kiln.ir.expr import Expr, If, Let, Var
from kiln.ir.types import Type

__all__ = ["ScopeBuilder", "WithScope"]


class WithScope:
    """A ``with`` block that returns ``enter_value`` and calls ``exit_cb`` when it closes."""

    def __init__(self, enter_value: Any, exit_cb: Callable[[], None]):
        self._enter_value = enter_value
        self._exit_cb = exit_cb

    def __enter__(self) -> Any:
        return self._enter_value

    def __exit__(self, ptype: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        if ptype is None:
            self._exit_cb()


class _PartialIf:
    """An ``if`` whose else branch is still to come."""

    def __init__(self, cond: Expr, true_branch: Expr):
        self.cond = cond
        self.true_branch = true_branch


def _make_lets(bindings: Sequence[tuple[Var, Expr]], ret_value: Expr | _PartialIf | None) -> Expr:
    if ret_value is None:
        raise KilnError("ScopeBuilder: the scope has no result; call ret() in it")
    if isinstance(ret_value, _PartialIf):
        raise KilnError("ScopeBuilder: an if_scope needs an else_scope before the scope ends")
    for var, value in reversed(bindings):
        ret_value = Let(var, value, ret_value)
    return ret_value


class ScopeBuilder:
    """Build nested ``let`` and ``if`` expressions scope by scope (TVM's ``relay.ScopeBuilder``)."""

    def __init__(self) -> None:
        self._bindings: list[list[tuple[Var, Expr]]] = [[]]
        self._ret_values: list[Expr | _PartialIf | None] = [None]

    def _enter_scope(self) -> None:
        self._bindings.append([])
        self._ret_values.append(None)

    def _exit_scope(self) -> tuple[list[tuple[Var, Expr]], Expr | _PartialIf | None]:
        return self._bindings.pop(), self._ret_values.pop()

    def let(self, var: Var | str | tuple[str, Type], value: Expr) -> Var:
        """Bind ``value`` to a variable in the current scope and return the variable.

        Parameters
        ----------
        var : Var, str or (str, Type)
            The variable, or its name (and type annotation).
        value : Expr
            The bound value.
        """
        if isinstance(var, (tuple, list)):
            if len(var) > 2:
                raise KilnError("ScopeBuilder.let: give a Var, a name or a (name, type) pair")
            var = Var(*var)
        elif isinstance(var, str):
            var = Var(var)
        self._bindings[-1].append((var, value))
        return var

    def if_scope(self, cond: Expr) -> WithScope:
        """The ``then`` branch of ``if (cond)``: a ``with`` block that must ``ret`` a value."""
        self._enter_scope()

        def _on_exit() -> None:
            bindings, ret_value = self._exit_scope()
            if self._ret_values[-1] is not None:
                raise KilnError("ScopeBuilder: the scope already has a result before if_scope")
            self._ret_values[-1] = _PartialIf(cond, _make_lets(bindings, ret_value))

        return WithScope(None, _on_exit)

    def else_scope(self) -> WithScope:
        """The ``else`` branch of the preceding :meth:`if_scope`."""
        partial = self._ret_values[-1]
        if not isinstance(partial, _PartialIf):
            raise KilnError("ScopeBuilder: else_scope can only follow an if_scope")
        self._enter_scope()

        def _on_exit() -> None:
            bindings, ret_value = self._exit_scope()
            self._ret_values[-1] = If(partial.cond, partial.true_branch,
                                      _make_lets(bindings, ret_value))

        return WithScope(None, _on_exit)

    def type_of(self, expr: Expr) -> Type | None:
        """The declared type of a variable (Kiln has no incomplete types for other values)."""
        if isinstance(expr, Var):
            return expr.type_annotation
        raise KilnError("ScopeBuilder.type_of: Kiln gives types of variables only; run InferType "
                        "and read checked_type for other expressions")

    def ret(self, value: Expr) -> None:
        """Set the result of the current scope."""
        if self._ret_values[-1] is not None:
            raise KilnError("ScopeBuilder: ret() was already called in this scope")
        self._ret_values[-1] = value

    def get(self) -> Expr:
        """The built expression (call at the outermost scope)."""
        if len(self._bindings) != 1:
            raise KilnError("ScopeBuilder: get() is only valid at the outermost scope")
        return _make_lets(self._bindings[-1], self._ret_values[-1])
