"""``tvm.relay.ty``: relay's type classes (they live in :mod:`kiln.ir.types`)."""

from __future__ import annotations

from kiln.ir import FuncType, TensorType, TupleType
from kiln.ir.types import Type

__all__ = ["FuncType", "TensorType", "TupleType", "Type"]
