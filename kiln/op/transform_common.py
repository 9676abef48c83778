"""Helpers shared by the reduce, transform, algorithm and vision operator families.

Kiln compiles static shapes, so every builder argument that decides an output shape (a new
shape, slice bounds, ``k`` of ``topk``, the depth of ``one_hot``, ...) must be known when the graph
is built: a Python number or sequence, a NumPy array, or a ``relay.const``. These helpers turn such
arguments into plain Python values for the attributes, and raise a clear error naming the operator
when they are given a computed expression instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.errors import KilnError, KilnTypeError
from kiln.ir.expr import Constant, Expr, Tuple, TupleWrapper
from kiln.ir.types import TensorType, Type, is_float, is_int, np_dtype

__all__ = [
    "as_result",
    "check_dtype_kind",
    "check_index_dtype",
    "const_int",
    "const_ints",
    "const_number",
    "optional_axes",
    "reduce_axes",
    "tuple_expr",
    "wrap_negative",
]


def _static_error(op: str, what: str, value: Any) -> KilnTypeError:
    shown = value._short() if isinstance(value, Expr) else repr(value)
    return KilnTypeError(f"{op}: {what} must be a constant (Python numbers or relay.const) because "
                         f"it decides the output shape and Kiln compiles static shapes; got {shown}")


def const_ints(value: Any, op: str, what: str) -> tuple[int, ...]:
    """A constant sequence of integers (a scalar becomes a 1-tuple) as a tuple of Python ints.

    Parameters
    ----------
    value : int, sequence of int, numpy.ndarray or Constant
        The argument given to the builder.
    op : str
        Operator name, for the error message.
    what : str
        Argument name, for the error message.

    Returns
    -------
    tuple of int
        The values.
    """
    if isinstance(value, Constant):
        value = value.value
    elif isinstance(value, Expr):
        raise _static_error(op, what, value)
    arr = np.asarray(value)
    if arr.dtype == object or (arr.size and arr.dtype.kind not in "iub"):
        raise KilnTypeError(f"{op}: {what} must hold integers, got {value!r}")
    return tuple(int(v) for v in arr.reshape(-1).tolist())


def const_int(value: Any, op: str, what: str) -> int:
    """A constant integer scalar as a Python int (a one-element constant tensor is accepted).

    Parameters
    ----------
    value : int or Constant
        The argument given to the builder.
    op, what : str
        Operator and argument names, for the error message.

    Returns
    -------
    int
        The value.
    """
    values = const_ints(value, op, what)
    if len(values) != 1:
        raise KilnTypeError(f"{op}: {what} must be a single integer, got {len(values)} values")
    return values[0]


def const_number(value: Any, op: str, what: str) -> int | float:
    """A constant scalar (int or float) as a Python number.

    Parameters
    ----------
    value : number or Constant
        The argument given to the builder.
    op, what : str
        Operator and argument names, for the error message.

    Returns
    -------
    int or float
        The value (a float for float inputs).
    """
    if isinstance(value, Constant):
        value = value.value
    elif isinstance(value, Expr):
        raise _static_error(op, what, value)
    arr = np.asarray(value)
    if arr.size != 1 or arr.dtype.kind not in "iufb":
        raise KilnTypeError(f"{op}: {what} must be a number, got {value!r}")
    item = arr.reshape(-1)[0].item()
    return float(item) if isinstance(item, float) else int(item)


def optional_axes(axis: Any, op: str, what: str = "axis") -> tuple[int, ...] | None:
    """An axis argument as an attribute: ``None`` stays ``None``, an int becomes a 1-tuple.

    Parameters
    ----------
    axis : None, int, sequence of int or Constant
        The argument given to the builder.
    op, what : str
        Operator and argument names, for the error message.

    Returns
    -------
    tuple of int or None
        The axes, as TVM stores ``[axis]``.
    """
    if axis is None:
        return None
    return const_ints(axis, op, what)


def tuple_expr(data: Any, op: str) -> Expr:
    """The tuple argument of ``concatenate``, ``stack``, ``einsum`` and ``meshgrid``.

    Parameters
    ----------
    data : list of Expr, TupleWrapper or Expr
        A list (or TupleWrapper) becomes a ``Tuple``; an expression is used as it is.
    op : str
        Operator name, for the error message.

    Returns
    -------
    Expr
        A tuple-valued expression.
    """
    if isinstance(data, Expr):
        return data
    if isinstance(data, TupleWrapper) or (isinstance(data, Sequence) and not isinstance(data, str)):
        fields = list(data)
        if not fields:
            raise KilnTypeError(f"{op}: needs at least one tensor")
        return Tuple(fields)
    raise KilnTypeError(f"{op}: expected a tuple or list of expressions, got {type(data).__name__}")


def reduce_axes(ndim: int, axis: tuple[int, ...] | None, exclude: bool, op: str) -> tuple[int, ...]:
    """The sorted axes a reduction runs over (TVM's ``GetReduceAxes``).

    Parameters
    ----------
    ndim : int
        Rank of the reduced tensor.
    axis : tuple of int or None
        Listed axes (negative ones count from the end); ``None`` or ``()`` means every axis.
    exclude : bool
        Reduce the axes *not* listed instead.
    op : str
        Operator name, for the error message.

    Returns
    -------
    tuple of int
        Non-negative axes in increasing order.
    """
    if not axis:
        return tuple(range(ndim))
    canon = []
    for a in axis:
        if not -ndim <= a < ndim:
            raise KilnTypeError(f"{op}: axis {a} is out of range for a {ndim}-d tensor")
        canon.append(a % ndim)
    if len(set(canon)) != len(canon):
        raise KilnTypeError(f"{op}: axis {axis} names the same dimension twice")
    if exclude:
        return tuple(i for i in range(ndim) if i not in canon)
    return tuple(sorted(canon))


def check_dtype_kind(op: str, ty: TensorType, kinds: str, what: str = "data") -> None:
    """Raise a type error unless ``ty.dtype`` is of one of ``kinds``.

    Parameters
    ----------
    op : str
        Operator name, for the error message.
    ty : TensorType
        The argument's type.
    kinds : str
        Accepted kinds: ``f`` float, ``i`` integer, ``b`` bool (e.g. ``"fi"``).
    what : str
        Argument name, for the error message.
    """
    ok = ((is_float(ty.dtype) and "f" in kinds) or (is_int(ty.dtype) and "i" in kinds)
          or (ty.dtype == "bool" and "b" in kinds))
    if not ok:
        names = {"f": "float", "i": "integer", "b": "bool"}
        wanted = " or ".join(names[k] for k in kinds)
        raise KilnTypeError(f"{op}: {what} has dtype {ty.dtype}, but {op} needs {wanted} tensors")


def as_result(out_type: Type, value: Any) -> np.ndarray:
    """``value`` as an array of ``out_type``'s dtype (casting without warnings).

    Parameters
    ----------
    out_type : TensorType
        The call's result type.
    value : array_like
        The computed result (often float64).

    Returns
    -------
    numpy.ndarray
        ``value`` cast to the result dtype.
    """
    assert isinstance(out_type, TensorType)
    with np.errstate(all="ignore"):
        return np.asarray(value).astype(np_dtype(out_type.dtype), copy=False)


def check_index_dtype(op: str, ty: TensorType, what: str = "indices") -> None:
    """Raise a type error unless ``ty`` holds integers.

    Parameters
    ----------
    op : str
        Operator name, for the error message.
    ty : TensorType
        The argument's type.
    what : str
        Argument name, for the error message.
    """
    if not is_int(ty.dtype):
        raise KilnTypeError(f"{op}: {what} must be an integer tensor, got dtype {ty.dtype}")


def wrap_negative(op: str, idx: np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """Indices in ``[-n, n)`` made non-negative (negative ones count from the end).

    Parameters
    ----------
    op : str
        Operator name, for the error message.
    idx : numpy.ndarray
        Integer indices.
    n : int or numpy.ndarray
        Size of the indexed dimension (broadcast against ``idx``).

    Returns
    -------
    numpy.ndarray
        int64 indices in ``[0, n)``; an index outside ``[-n, n)`` raises :class:`KilnError`.
    """
    idx = idx.astype(np.int64)
    bad = (idx < -n) | (idx >= n)
    if np.any(bad):
        first = int(idx[bad].reshape(-1)[0])
        limit = int(np.broadcast_to(n, idx.shape)[bad].reshape(-1)[0])
        raise KilnError(f"{op}: index {first} is out of range for a dimension of size {limit}")
    return np.where(idx < 0, idx + n, idx)
