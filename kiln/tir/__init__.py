"""TVM's ``tvm.tir`` immediates, as far as relay-era scripts use them.

Kiln has no TIR (its loop IR is :mod:`kiln.te`); relay scripts still write
``tvm.tir.IntImm("int32", 1)`` as a function attribute or a shape dimension, and ``tvm.tir.const``
for scalars. Here an :class:`IntImm` is an ``int`` that carries a ``dtype`` (a :class:`FloatImm` a
``float``, a :class:`StringImm` a ``str``), so attributes and shapes that hold one compare and hash
equal to the plain values Kiln's passes write, and ``TensorType`` turns such dimensions into ints.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FloatImm", "IntImm", "StringImm", "const"]


def _check_dtype(dtype: str, kinds: tuple[str, ...], what: str) -> str:
    if not isinstance(dtype, str) or not dtype.startswith(kinds):
        raise ValueError(f"{what} needs a dtype starting with one of {kinds}, got {dtype!r}")
    return dtype


class IntImm(int):
    """An integer immediate of ``dtype`` (``"int32"``, ``"int64"``, ``"bool"``, ...).

    Parameters
    ----------
    dtype : str
        The integer dtype name.
    value : int
        The value; equal and hashed as this ``int``.
    span : ignored
        Accepted for TVM compatibility.
    """

    dtype: str

    def __new__(cls, dtype: str, value: int | float, span: Any = None) -> IntImm:
        _check_dtype(dtype, ("int", "uint", "bool"), "IntImm")
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"IntImm value {value!r} is not an integer")
        self = super().__new__(cls, int(value))
        self.dtype = dtype
        return self

    @property
    def value(self) -> int:
        """The value as a plain ``int``."""
        return int(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (IntImm, (self.dtype, int(self)))


class FloatImm(float):
    """A floating-point immediate of ``dtype`` (``"float32"``, ``"float64"``, ...).

    Parameters
    ----------
    dtype : str
        The float dtype name.
    value : float
        The value; equal and hashed as this ``float``.
    span : ignored
        Accepted for TVM compatibility.
    """

    dtype: str

    def __new__(cls, dtype: str, value: float, span: Any = None) -> FloatImm:
        _check_dtype(dtype, ("float", "bfloat"), "FloatImm")
        self = super().__new__(cls, float(value))
        self.dtype = dtype
        return self

    @property
    def value(self) -> float:
        """The value as a plain ``float``."""
        return float(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (FloatImm, (self.dtype, float(self)))


class StringImm(str):
    """A string immediate; equal and hashed as its ``str``.

    Parameters
    ----------
    value : str
        The string.
    span : ignored
        Accepted for TVM compatibility.
    """

    def __new__(cls, value: str, span: Any = None) -> StringImm:
        if not isinstance(value, str):
            raise TypeError(f"StringImm needs a str, got {type(value).__name__}")
        return super().__new__(cls, value)

    @property
    def value(self) -> str:
        """The value as a plain ``str``."""
        return str(self)

    @property
    def dtype(self) -> str:
        """TVM's dtype of a string immediate (a handle)."""
        return "handle"


def const(value: Any, dtype: str | None = None, span: Any = None) -> IntImm | FloatImm | StringImm:
    """TVM's ``tir.const``: an immediate of ``value``, of ``dtype`` or one inferred as TVM does.

    ``bool`` gives ``"bool"``, ``int`` ``"int32"``, ``float`` ``"float32"``; a ``str`` is a
    :class:`StringImm`.
    """
    if isinstance(value, str):
        return StringImm(value)
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = "int32"
        elif isinstance(value, float):
            dtype = "float32"
        else:
            raise TypeError(f"tir.const cannot infer a dtype for {type(value).__name__}: pass dtype")
    if dtype.startswith(("float", "bfloat")):
        return FloatImm(dtype, value)
    return IntImm(dtype, value)
