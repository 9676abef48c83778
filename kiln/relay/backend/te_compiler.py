"""``relay.backend.te_compiler``: the handle of TVM's cache of lowered functions.

Kiln keeps no global cache of lowered functions between builds, so ``get().clear()`` (what TVM's
tests call before each build) has nothing to clear.
"""

from __future__ import annotations

__all__ = ["TECompiler", "get"]


class TECompiler:
    """TVM's TE compiler handle; Kiln's has only ``clear``."""

    def clear(self) -> None:
        """Drop cached lowered functions (Kiln caches none between builds)."""


_COMPILER = TECompiler()


def get() -> TECompiler:
    """The process-wide TE compiler handle."""
    return _COMPILER
