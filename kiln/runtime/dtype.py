"""Dtype names: relay's (``"float32"``, ``"bool"``, ...) and their NumPy dtypes.

The bottom of the package: the runtime (NDArray, params, graph JSON) and the IR's types both
name dtypes this way.

Narrow dtypes (TVM's and ``ml_dtypes``' names): ``bfloat16``, the 8-bit floats
``float8_e4m3fn``, ``float8_e4m3fnuz``, ``float8_e5m2``, ``float8_e5m2fnuz``, the 4-bit float
``float4_e2m1fn`` and the integers ``int4``, ``uint4``, ``int2``, ``uint2``. Their NumPy dtypes
come from ``ml_dtypes``; in memory every element takes a whole byte (two for bfloat16), as in
``ml_dtypes`` arrays: sub-byte values are not packed, the value's bits are the low bits of its
byte. Compiled code stores them as :func:`storage_dtype` and computes on them in
:func:`compute_dtype` (float32 / int32), see :mod:`kiln.codegen.c_narrow`; reference kernels
compute on them the same way, see :mod:`kiln.op.narrow_ref`.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

__all__ = [
    "DTYPES",
    "NARROW_FLOATS",
    "NARROW_INTS",
    "as_dtype",
    "compute_dtype",
    "dtype_bits",
    "dtype_range",
    "has_inf",
    "int_range",
    "is_float",
    "is_int",
    "is_narrow",
    "np_dtype",
    "storage_dtype",
]

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
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float8_e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "float4_e2m1fn": np.dtype(ml_dtypes.float4_e2m1fn),
    "int4": np.dtype(ml_dtypes.int4),
    "uint4": np.dtype(ml_dtypes.uint4),
    "int2": np.dtype(ml_dtypes.int2),
    "uint2": np.dtype(ml_dtypes.uint2),
}

# Floating-point dtypes narrower than float16 or with another layout (no C arithmetic type) ...
NARROW_FLOATS = frozenset({"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                           "float8_e5m2fnuz", "float4_e2m1fn"})
# ... and integers narrower than a byte: one element per byte, in the byte's low bits.
NARROW_INTS = frozenset({"int4", "uint4", "int2", "uint2"})
_BITS = {"bool": 1, "bfloat16": 16, "float8_e4m3fn": 8, "float8_e4m3fnuz": 8, "float8_e5m2": 8,
         "float8_e5m2fnuz": 8, "float4_e2m1fn": 4, "int4": 4, "uint4": 4, "int2": 2, "uint2": 2}


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
    """True for floating-point dtypes (bfloat16 and the narrow floats included)."""
    return dtype.startswith(("float", "bfloat"))


def is_int(dtype: str) -> bool:
    """True for signed or unsigned integer dtypes (not bool)."""
    return dtype.startswith(("int", "uint"))


def is_narrow(dtype: str) -> bool:
    """True for the dtypes compiled code stores as another type (:func:`storage_dtype`)."""
    return dtype in NARROW_FLOATS or dtype in NARROW_INTS


@functools.cache  # asked of every node of every expression by the code generators
def dtype_bits(dtype: str) -> int:
    """Bits of a value of ``dtype`` (bool: 1, int4: 4, float8_e5m2: 8, bfloat16: 16)."""
    known = _BITS.get(dtype)
    if known is not None:
        return known
    return int("".join(c for c in dtype if c.isdigit()))


def storage_dtype(dtype: str) -> str:
    """The standard dtype of the same size that holds ``dtype``'s bytes in compiled code
    (bfloat16: uint16; the 8-bit floats, float4 and the sub-byte integers: uint8); other
    dtypes are their own storage."""
    if dtype == "bfloat16":
        return "uint16"
    if is_narrow(dtype):
        return "uint8"
    return dtype


def compute_dtype(dtype: str) -> str:
    """The dtype compiled code computes values of ``dtype`` in: float32 for the narrow floats,
    int32 for the sub-byte integers, ``dtype`` itself otherwise."""
    if dtype in NARROW_FLOATS:
        return "float32"
    if dtype in NARROW_INTS:
        return "int32"
    return dtype


def dtype_range(dtype: str) -> tuple[float, float]:
    """The lowest and highest finite values of a numeric dtype (bool: 0 and 1)."""
    name = as_dtype(dtype)
    if name == "bool":
        return 0.0, 1.0
    npt = DTYPES[name]
    if is_float(name):
        finfo = ml_dtypes.finfo(npt)
        return float(finfo.min), float(finfo.max)
    iinfo = ml_dtypes.iinfo(npt)
    return float(iinfo.min), float(iinfo.max)


def int_range(dtype: str) -> tuple[int, int]:
    """The lowest and highest values of an integer dtype, exactly (bool: 0 and 1)."""
    name = as_dtype(dtype)
    if name == "bool":
        return 0, 1
    iinfo = ml_dtypes.iinfo(DTYPES[name])
    return int(iinfo.min), int(iinfo.max)


def has_inf(dtype: str) -> bool:
    """True for the floats with infinities (not the narrow "fn"/"fnuz" ones nor float4_e2m1fn,
    whose largest finite value is the identity of ``max``)."""
    return is_float(dtype) and (dtype in ("bfloat16", "float8_e5m2") or dtype not in NARROW_FLOATS)
