"""``relay.backend``: TVM's executor and runtime descriptions, and the TE compiler's cache handle.

``Executor("graph")`` and ``Runtime("cpp")`` are what ``relay.build(executor=..., runtime=...)``
takes; Kiln builds for the graph executor only (``relay.build`` raises for ``"aot"``), and has one
runtime, so ``Runtime`` is only recorded. ``te_compiler.get().clear()`` is accepted: Kiln keeps no
global cache of lowered functions between builds.
"""

from __future__ import annotations

from kiln.relay.backend import te_compiler
from kiln.relay.backend.executor import Executor
from kiln.relay.backend.runtime import Runtime

__all__ = ["Executor", "Runtime", "te_compiler"]
