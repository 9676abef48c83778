"""Runtime containers (TVM's ``tvm.runtime.container``)."""

from __future__ import annotations

from typing import Any

__all__ = ["ADT"]


class ADT(tuple[Any, ...]):
    """A tuple result of the VM (TVM's algebraic data type object with tag 0: a tuple)."""

    @property
    def tag(self) -> int:
        """The constructor tag: 0, a tuple."""
        return 0
