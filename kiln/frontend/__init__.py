"""Model importers: ONNX to an :class:`~kiln.ir.IRModule` plus a params dict.

``from_onnx`` is the entry point (also reachable as ``relay.frontend.from_onnx``); the converters
live in one module per operator family (``onnx_math``, ``onnx_nn``, ``onnx_tensor``, ...).
"""

from __future__ import annotations

from typing import Any

__all__ = ["from_onnx"]


def __getattr__(name: str) -> Any:
    # onnx is imported only when an importer is used, so ``import kiln`` stays light.
    if name == "from_onnx":
        from kiln.frontend.onnx import from_onnx

        return from_onnx
    raise AttributeError(f"module 'kiln.frontend' has no attribute {name!r}")
