"""``relay.op._make``: TVM's C++ operator constructors, called with positional arguments.

Each name is the operator builder of the same name (``_make.concatenate(tuple, axis)`` is
``relay.concatenate(tuple, axis)``); TVM's constructors and Kiln's builders take their leading
arguments in the same order.
"""

from __future__ import annotations

from typing import Any

import kiln.op as _ops


def __getattr__(name: str) -> Any:
    builder = getattr(_ops, name, None)
    if builder is None or not callable(builder):
        raise AttributeError(f"relay.op._make has no operator constructor {name!r}")
    return builder
