"""Operator family: pool (being written)."""

from __future__ import annotations

__all__: list[str] = []
