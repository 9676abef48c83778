"""``tvm.error``: the error classes scripts catch. Every Kiln error is a
:class:`~kiln.errors.KilnError`, which is TVM's base ``TVMError`` here."""

from kiln.errors import KilnError as TVMError

__all__ = ["TVMError"]
