"""``tvm.topi.x86`` names that relay-era tests reference."""

from __future__ import annotations

from kiln.topi.x86 import dense_alter_op

__all__ = ["dense_alter_op"]
