"""``tvm._ffi.base``: the error base class (:class:`kiln.errors.KilnError`)."""

from __future__ import annotations

from kiln.errors import KilnError

#: TVM's base error: every Kiln error derives from it.
TVMError = KilnError

__all__ = ["TVMError"]
