"""Dtype names: relay's (``"float32"``, ``"bool"``, ...) and their NumPy dtypes.

The bottom of the package: the runtime (NDArray, params, graph JSON) and the IR's types both
name dtypes this way.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DTYPES", "as_dtype", "is_float", "is_int", "np_dtype"]

# Relay dtype name -> NumPy dtype. "bool" is relay's 1-bit boolean (uint1 in graph JSON).
DTYPES: dict[str, np.dtype] = {
    "bool": np.dtype(np.bool_),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "float16": np.dtype(np.float16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
}


_NAMES = {np_type: name for name, np_type in DTYPES.items() if name != "uint1"}


def as_dtype(dtype: object) -> str:
    """Normalise a dtype given as a string, NumPy dtype or NumPy scalar type to relay's name."""
    known = _NAMES.get(dtype) if isinstance(dtype, np.dtype) else None  # the per-run path
    if known is not None:
        return known
    if isinstance(dtype, str):
        name = dtype
        if name == "uint1":
            name = "bool"
    else:
        name = np.dtype(dtype).name  # type: ignore[call-overload]
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; Kiln supports {', '.join(DTYPES)}")
    return name


def np_dtype(dtype: str) -> np.dtype:
    """NumPy dtype of a relay dtype name."""
    return DTYPES[as_dtype(dtype)]


def is_float(dtype: str) -> bool:
    """True for floating-point dtypes."""
    return dtype.startswith("float")


def is_int(dtype: str) -> bool:
    """True for signed or unsigned integer dtypes (not bool)."""
    return dtype.startswith(("int", "uint"))
