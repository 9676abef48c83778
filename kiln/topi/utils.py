"""Shape helpers of ``tvm.topi.utils``."""

from __future__ import annotations

from typing import Any


def get_const_int(value: Any) -> int:
    """Return ``value`` (an int, or an object with an integer ``value``) as a Python int."""
    if hasattr(value, "value"):
        value = value.value
    return int(value)


def get_const_tuple(shape: Any) -> tuple[int, ...]:
    """Return a shape (ints, IR integers or an object with ``.shape``) as a tuple of ints."""
    if hasattr(shape, "shape") and not isinstance(shape, (tuple, list)):
        shape = shape.shape
    return tuple(get_const_int(dim) for dim in shape)
