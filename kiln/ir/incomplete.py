"""``IncompleteType``: a type annotation that asks InferType to infer the type (TVM's
``relay.IncompleteType``).

``relay.var("w", relay.IncompleteType())`` is the same as ``relay.var("w")``: the variable's type
comes from its uses. All incomplete types are equal (TVM compares their kinds, and relay types
have one kind here).
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.ir.types import Type

__all__ = ["IncompleteType"]


@dataclass(frozen=True, slots=True)
class IncompleteType(Type):
    """A type to be inferred.

    Parameters
    ----------
    kind : int
        TVM's ``TypeKind`` (0, a type); kept for the signature.
    """

    kind: int = 0

    def __str__(self) -> str:
        return "_"
