"""``tvm.runtime.convert``: Python values as the runtime's values.

TVM turns Python containers into FFI objects (``Array``, ``Map``) and numbers into immediates; Kiln
has no FFI, so lists and tuples become lists (what Kiln's IR takes where TVM takes an ``Array``),
dicts stay dicts with converted values, NumPy scalars become Python numbers, and everything else is
returned as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["convert"]


def convert(value: Any) -> Any:
    """``value`` with its containers converted (see the module docstring).

    Examples
    --------
    >>> convert((1, np.int64(2), [3.0]))
    [1, 2, [3.0]]
    """
    if isinstance(value, (list, tuple)):
        return [convert(v) for v in value]
    if isinstance(value, dict):
        return {k: convert(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value
