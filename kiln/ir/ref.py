"""Mutable references: ``ref(v)``, ``r^`` and ``r := v`` (TVM's ``RefCreate``, ``RefRead``,
``RefWrite`` and ``RefType``).

They are IR nodes that type inference, printing, structural comparison, the graph walkers and
the interpreter understand; compiled builds refuse them (a reference is not a dataflow value).
``RefWrite`` returns the empty tuple.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.ir.expr import Expr
from kiln.ir.types import Type

__all__ = ["RefCreate", "RefRead", "RefType", "RefWrite"]


@dataclass(frozen=True, slots=True)
class RefType(Type):
    """The type of a reference to a value of ``value`` type."""

    value: Type

    def __str__(self) -> str:
        return f"ref({self.value})"


class RefCreate(Expr):
    """A new reference holding ``value``."""

    __slots__ = ("value",)
    _fields = ("value",)
    value: Expr

    def __init__(self, value: Expr, span: object = None):
        self._set(value=value)

    def __repr__(self) -> str:
        return "RefCreate(...)"


class RefRead(Expr):
    """The value a reference holds."""

    __slots__ = ("ref",)
    _fields = ("ref",)
    ref: Expr

    def __init__(self, ref: Expr, span: object = None):
        self._set(ref=ref)

    def __repr__(self) -> str:
        return "RefRead(...)"


class RefWrite(Expr):
    """Store ``value`` in ``ref``; evaluates to ``()``."""

    __slots__ = ("ref", "value")
    _fields = ("ref", "value")
    ref: Expr
    value: Expr

    def __init__(self, ref: Expr, value: Expr, span: object = None):
        self._set(ref=ref, value=value)

    def __repr__(self) -> str:
        return "RefWrite(...)"
