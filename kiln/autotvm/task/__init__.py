"""``tvm.autotvm.task``: the configuration-space entities (:mod:`kiln.autotvm.task.space`)."""

from __future__ import annotations

from kiln.autotvm.task import space
from kiln.autotvm.task.space import ConfigEntity, FallbackConfigEntity

__all__ = ["ConfigEntity", "FallbackConfigEntity", "space"]
