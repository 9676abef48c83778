"""TVM's ``tvm._ffi`` names that Python scripts touch.

TVM's Python package talks to its C++ core through an FFI; Kiln is pure Python and has none. The
only names scripts use from it are the error base class (``tvm._ffi.base.TVMError``, which every
C++ error derives from): here it is :class:`kiln.errors.KilnError`, so ``except TVMError`` catches
Kiln's errors where TVM's would catch its own.
"""

from __future__ import annotations

from kiln._ffi import base
from kiln._ffi.base import TVMError

__all__ = ["TVMError", "base"]
