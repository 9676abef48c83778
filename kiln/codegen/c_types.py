"""C types of Kiln's dtypes, literals and vector type names: the leaf every C emitter module uses."""

from __future__ import annotations

import math

from kiln.errors import CompileError
from kiln.te import expr as E

__all__ = [
    "C_TYPES",
    "MASK_INT",
    "UNSIGNED_OF",
    "bits",
    "c_literal",
    "c_type",
    "np_name",
    "vector_type_name",
]

C_TYPES = {
    "bool": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
    "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
    "uint64": "uint64_t", "float16": "_Float16", "float32": "float", "float64": "double",
}
UNSIGNED_OF = {"int8": "uint8_t", "int16": "uint16_t", "int32": "uint32_t", "int64": "uint64_t"}
# The integer dtype of a vector mask of elements of each width
MASK_INT = {8: "int8", 16: "int16", 32: "int32", 64: "int64"}


def c_type(dtype: str) -> str:
    """The C type storing elements of ``dtype``."""
    try:
        return C_TYPES[dtype]
    except KeyError:
        raise CompileError(f"dtype {dtype} has no C type") from None


def c_literal(value: float | int, dtype: str) -> str:
    """A C literal of ``value`` as ``dtype`` (exact for every finite float)."""
    if E.is_float_dtype(dtype):
        v = float(value)
        if math.isnan(v):
            text = "NAN"
        elif math.isinf(v):
            text = "INFINITY" if v > 0 else "(-INFINITY)"
        elif dtype == "float64":
            text = repr(v)
            if "e" not in text and "." not in text and "n" not in text:
                text += ".0"
        else:
            text = f"{v:.9g}"
            if "e" not in text and "." not in text:
                text += ".0"
            text += "f"
        if dtype == "float16":
            return f"((_Float16){text})"
        return text if not text.startswith("-") else f"({text})"
    v = int(value)
    if dtype == "bool":
        return str(int(v != 0))
    bits = E.dtype_bits(dtype)
    if E.is_uint_dtype(dtype):
        return f"{v}u" if bits <= 32 else f"{v}ull"
    if bits == 64:
        if v == -(1 << 63):
            return "(-9223372036854775807ll - 1)"
        return f"{v}ll" if v >= 0 else f"({v}ll)"
    if v == -(1 << 31):
        return "(-2147483647 - 1)"
    return str(v) if v >= 0 else f"({v})"


def vector_type_name(dtype: str, lanes: int) -> str:
    """Name of the GCC vector type of ``lanes`` elements of ``dtype`` (bool: uint8)."""
    short = {"bool": "u8", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
             "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
             "float16": "f16", "float32": "f32", "float64": "f64"}[dtype]
    return f"kiln_{short}x{lanes}"


def bits(dtype: str) -> int:
    """Bits of an element of ``dtype`` (bool: 8)."""
    return 8 if dtype == "bool" else E.dtype_bits(dtype)


def np_name(dtype: str) -> str:
    """The NumPy name of ``dtype``."""
    return "bool" if dtype == "bool" else dtype
