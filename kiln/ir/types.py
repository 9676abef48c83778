"""Relay types: tensors, tuples and functions, plus dtype helpers.

Types are frozen dataclasses with structural equality (two ``TensorType((1, 3), "float32")`` are
equal). Shapes are static tuples of Python ints: Kiln compiles one artifact per shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

__all__ = [
    "DTYPES",
    "FuncType",
    "TensorType",
    "TupleType",
    "Type",
    "as_dtype",
    "is_float",
    "is_int",
    "np_dtype",
    "tensor_of",
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
}


def as_dtype(dtype: object) -> str:
    """Normalise a dtype given as a string, NumPy dtype or NumPy scalar type to relay's name."""
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


class Type:
    """Base class of relay types."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class TensorType(Type):
    """A tensor of a static ``shape`` and a ``dtype`` name such as ``"float32"``."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", as_dtype(self.dtype))
        if any(d < 0 for d in self.shape):
            raise ValueError(f"negative dimension in shape {self.shape}")

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return prod(self.shape)

    @property
    def concrete_shape(self) -> tuple[int, ...]:
        """The shape as a tuple of ints (TVM's name)."""
        return self.shape

    @property
    def nbytes(self) -> int:
        """Bytes a dense buffer of this type occupies."""
        return self.size * np_dtype(self.dtype).itemsize

    def __str__(self) -> str:
        if not self.shape:
            return self.dtype
        dims = ", ".join(str(d) for d in self.shape)
        return f"Tensor[({dims}), {self.dtype}]"


def tensor_of(ty: Type) -> TensorType:
    """``ty`` narrowed to a :class:`TensorType` (e.g. the result type of a single-output op).

    Parameters
    ----------
    ty : Type
        A type known to be a tensor type.

    Returns
    -------
    TensorType
        ``ty`` itself.
    """
    assert isinstance(ty, TensorType), f"expected a tensor type, got {ty}"
    return ty


@dataclass(frozen=True, slots=True)
class TupleType(Type):
    """A tuple of types."""

    fields: tuple[Type, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))

    def __len__(self) -> int:
        return len(self.fields)

    def __str__(self) -> str:
        if len(self.fields) == 1:
            return f"({self.fields[0]},)"
        return "(" + ", ".join(str(f) for f in self.fields) + ")"


@dataclass(frozen=True, slots=True)
class FuncType(Type):
    """The type of a function: argument types and return type."""

    arg_types: tuple[Type, ...]
    ret_type: Type

    def __post_init__(self) -> None:
        object.__setattr__(self, "arg_types", tuple(self.arg_types))

    def __str__(self) -> str:
        return "fn (" + ", ".join(str(a) for a in self.arg_types) + f") -> {self.ret_type}"
