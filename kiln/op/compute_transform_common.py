"""Index arithmetic shared by the tensor-expression computes of the non-elementwise families.

The computes of :mod:`~kiln.op.compute_reduce`, :mod:`~kiln.op.compute_transform` (and its
``compute_transform_*`` siblings), :mod:`~kiln.op.compute_algorithm` and
:mod:`~kiln.op.compute_vision` describe each output element as an expression of the output
coordinates. These helpers build the recurring pieces: row-major ravel/unravel of coordinates,
broadcast reads, and data-dependent indices made safe to load with (negative indices counting
from the end, then clamped into range, so a compiled kernel never reads outside a buffer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln import te
from kiln.errors import KilnTypeError
from kiln.ir.types import TensorType, TupleType, Type
from kiln.runtime.dtype import NARROW_INTS, has_inf
from kiln.te import expr as E
from kiln.te.expr import PrimExpr

__all__ = [
    "accumulate_dtype",
    "broadcast_index",
    "clamp",
    "highest",
    "logical_all",
    "logical_any",
    "lowest",
    "ravel",
    "safe_index",
    "tensor_type",
    "tuple_types",
    "unravel",
    "wrap_negative",
]


def tensor_type(out_type: Type) -> TensorType:
    """``out_type`` as a tensor type.

    Parameters
    ----------
    out_type : Type
        The result type handed to a compute.

    Returns
    -------
    TensorType
        The same type; a tuple type is a :class:`~kiln.errors.KilnTypeError`.
    """
    if not isinstance(out_type, TensorType):
        raise KilnTypeError(f"expected a tensor result type, got {out_type}")
    return out_type


def tuple_types(out_type: Type) -> list[TensorType]:
    """The field types of a tuple result.

    Parameters
    ----------
    out_type : Type
        A tuple of tensors, or one tensor.

    Returns
    -------
    list of TensorType
        The fields (one for a tensor type).
    """
    fields = out_type.fields if isinstance(out_type, TupleType) else (out_type,)
    return [tensor_type(f) for f in fields]


def accumulate_dtype(dtype: str) -> str:
    """The dtype sums and products of ``dtype`` values run in.

    Parameters
    ----------
    dtype : str
        Element dtype.

    Returns
    -------
    str
        ``"float64"`` for floats (the references compute float results in float64 and round
        once), ``dtype`` itself for integers (which wrap around), int64 for the sub-byte integers
        (the references compute them in int32: a mean of int4 values is not a mean of wrapped
        sums).
    """
    if dtype in NARROW_INTS:
        return "int64"
    return "float64" if E.is_float_dtype(dtype) else dtype


# Logical and/or reductions of bools.
logical_all = te.comm_reducer(lambda x, y: E.logical_and(x, y), lambda t: E.const(True), name="all")
logical_any = te.comm_reducer(lambda x, y: E.logical_or(x, y), lambda t: E.const(False), name="any")


def highest(dtype: str) -> PrimExpr:
    """The largest value of ``dtype``: ``+inf`` for floats, the identity of ``min``.

    Parameters
    ----------
    dtype : str
        Element dtype.

    Returns
    -------
    PrimExpr
        A constant (``True`` for bool, the largest integer for integers).
    """
    if E.is_float_dtype(dtype) and has_inf(dtype):
        return E.const(float("inf"), dtype)
    return te.max_value(dtype)


def lowest(dtype: str) -> PrimExpr:
    """The smallest value of ``dtype``: ``-inf`` for floats, the identity of ``max``.

    Parameters
    ----------
    dtype : str
        Element dtype.

    Returns
    -------
    PrimExpr
        A constant (``False`` for bool, the smallest integer for integers).
    """
    if E.is_float_dtype(dtype) and has_inf(dtype):
        return E.const(float("-inf"), dtype)
    return te.min_value(dtype)


def unravel(flat: PrimExpr, shape: Sequence[int]) -> list[PrimExpr]:
    """Row-major coordinates of a flat position.

    Parameters
    ----------
    flat : PrimExpr
        Non-negative flat position.
    shape : sequence of int
        Shape of the tensor.

    Returns
    -------
    list of PrimExpr
        One coordinate per dimension (the first is not reduced modulo its extent).
    """
    coords: list[PrimExpr] = []
    rest = flat
    for d in reversed(range(len(shape))):
        if d == 0:
            coords.append(rest)
        else:
            coords.append(te.floormod(rest, shape[d]))
            rest = te.floordiv(rest, shape[d])
    return coords[::-1]


def ravel(coords: Sequence[Any], shape: Sequence[int]) -> PrimExpr:
    """The row-major flat position of coordinates.

    Parameters
    ----------
    coords : sequence of expr
        One coordinate per dimension (variables, iteration variables or expressions).
    shape : sequence of int
        Shape of the tensor.

    Returns
    -------
    PrimExpr
        ``((c0 * d1 + c1) * d2 + c2) ...``.
    """
    flat: PrimExpr = E.const(0)
    for c, d in zip(coords, shape):
        flat = flat * d + c
    return flat


def broadcast_index(t: te.Tensor, out_shape: Sequence[int], idx: Sequence[Any]) -> tuple:
    """Coordinates reading ``t`` at an output position under NumPy broadcasting.

    Parameters
    ----------
    t : te.Tensor
        A tensor whose shape broadcasts to ``out_shape``.
    out_shape : sequence of int
        The broadcast shape.
    idx : sequence of expr
        Output coordinates.

    Returns
    -------
    tuple
        ``t``'s coordinates: trailing ones aligned, size-1 dimensions read at 0.
    """
    off = len(out_shape) - t.ndim
    return tuple(E.const(0) if t.shape[d] == 1 and out_shape[off + d] != 1 else idx[off + d]
                 for d in range(t.ndim))


def clamp(e: PrimExpr, lo: Any, hi: Any) -> PrimExpr:
    """``min(max(e, lo), hi)``.

    Parameters
    ----------
    e : PrimExpr
        The value.
    lo, hi : expr or number
        Bounds (numbers take ``e``'s dtype).

    Returns
    -------
    PrimExpr
        The clamped value.
    """
    return E.binary("min", E.binary("max", e, lo), hi)


def wrap_negative(value: PrimExpr, n: int) -> PrimExpr:
    """An index in ``[-n, n)`` made non-negative, as int64 (negative ones count from the end).

    Parameters
    ----------
    value : PrimExpr
        An integer index.
    n : int
        Size of the indexed dimension.

    Returns
    -------
    PrimExpr
        int64 index; values outside ``[-n, n)`` stay outside ``[0, n)``.
    """
    v = E.cast(value, "int64")
    if E.is_uint_dtype(value.dtype):
        return v
    return E.select(v < 0, v + n, v)


def safe_index(value: PrimExpr, n: int) -> PrimExpr:
    """An int64 index clamped into ``[0, n)`` and converted to int32, safe to load with.

    The reference kernels reject out-of-range indices; compiled kernels cannot raise, so they
    clamp instead of reading outside the buffer.

    Parameters
    ----------
    value : PrimExpr
        int64 index.
    n : int
        Size of the indexed dimension.

    Returns
    -------
    PrimExpr
        int32 index in ``[0, n)`` (0 when ``n`` is 0).
    """
    return E.cast(clamp(value, 0, max(n - 1, 0)), "int32")
