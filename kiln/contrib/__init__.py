"""``tvm.contrib``: the graph executor (also under its pre-0.8 name), the debugger and utils (loaded
on first use)."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["cudnn", "debugger", "download", "graph_executor", "graph_runtime", "nvcc", "utils"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"kiln.contrib.{name}")
    raise AttributeError(f"module 'kiln.contrib' has no attribute {name!r}")
