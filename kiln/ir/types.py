"""Relay types: tensors, tuples and functions (dtype names: :mod:`kiln.runtime.dtype`).

Types are frozen dataclasses with structural equality (two ``TensorType((1, 3), "float32")`` are
equal). Shapes are static tuples of Python ints: Kiln compiles one artifact per shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from kiln.runtime.dtype import DTYPES, as_dtype, is_float, is_int, np_dtype

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
