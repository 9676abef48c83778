"""Whether this machine can compile C: the one answer every test that needs the compiler uses.

The compiler is Kiln's configured one (``CC``, default ``cc``; ``kiln.config.settings.cc``), so a
run with ``CC=clang`` or without a compiler skips exactly the tests the ``requires_cc`` marker and
these helpers guard.
"""

from __future__ import annotations

import shutil

from kiln.config import settings

__all__ = ["have_cc"]


def have_cc() -> bool:
    """Whether the configured C compiler is on ``PATH``."""
    words = settings.cc.split()
    return bool(words) and shutil.which(words[0]) is not None
