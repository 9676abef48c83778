"""Operator family: vision (being written)."""

from __future__ import annotations

__all__: list[str] = []
