"""Helpers shared by the neural-network families (nn, conv, pool, image).

- Data layouts in TVM's notation: upper-case letters are primal axes (``N``, ``C``, ``H``, ...), a
  number followed by a lower-case letter is a sub-axis split off the primal axis of that letter
  (``NCHW8c`` holds channel ``c_outer * 8 + c_inner``; ``OIHW8i8o`` is a blocked kernel). Shapes and
  arrays convert between any such layout and a primal one (``NCHW``, ``OIHW``, ...).
- Normalisation of window attributes (strides, dilation, padding) the way TVM's Python builders
  and C++ type relations read them.
- Accumulation dtypes for reference kernels (float64 for floats, int64 for integers).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.types import TensorType, is_float, np_dtype

__all__ = [
    "Layout",
    "acc_dtype",
    "along_axis",
    "check_operand_dtypes",
    "int_tuple",
    "pad_pairs",
    "pad_tuple",
    "positive",
    "spatial_axes",
    "to_out",
    "window_out_size",
]

_LAYOUT_TOKEN = re.compile(r"(\d*)([A-Za-z])")


class Layout:
    """A parsed data layout such as ``"NCHW"``, ``"NHWC"``, ``"NCHW8c"`` or ``"OIHW8i8o"``.

    Parameters
    ----------
    name : str
        The layout string.
    op : str
        Operator name used in error messages.
    """

    def __init__(self, name: str, op: str = "layout"):
        self.name = name
        self.axes: list[tuple[str, int]] = []  # (letter, factor); factor 0 for primal axes
        pos = 0
        for m in _LAYOUT_TOKEN.finditer(name):
            if m.start() != pos:
                break
            pos = m.end()
            digits, letter = m.groups()
            if letter.isupper() and digits:
                raise KilnTypeError(f"{op}: invalid layout {name!r}: primal axis {letter} has a factor")
            if letter.islower() and (not digits or int(digits) <= 0):
                raise KilnTypeError(f"{op}: invalid layout {name!r}: sub-axis {letter} needs a "
                                    "positive factor (e.g. 8c)")
            self.axes.append((letter, int(digits) if digits else 0))
        letters = [a for a, _ in self.axes]
        if pos != len(name) or not name or len(set(letters)) != len(letters):
            raise KilnTypeError(f"{op}: invalid layout {name!r}")
        for letter, _ in self.axes:
            if letter.islower() and letter.upper() not in letters:
                raise KilnTypeError(f"{op}: invalid layout {name!r}: sub-axis {letter} has no "
                                    f"primal axis {letter.upper()}")

    @property
    def ndim(self) -> int:
        """Number of dimensions of a tensor in this layout."""
        return len(self.axes)

    @property
    def primal(self) -> str:
        """The primal axes in layout order (``"NCHW"`` for ``"NCHW8c"``)."""
        return "".join(a for a, _ in self.axes if a.isupper())

    def index(self, letter: str) -> int:
        """Position of an axis.

        Parameters
        ----------
        letter : str
            A primal (upper-case) or sub-axis (lower-case) letter.

        Returns
        -------
        int
            Its position in the layout, or -1 when absent.
        """
        for i, (a, _) in enumerate(self.axes):
            if a == letter:
                return i
        return -1

    def factor(self, letter: str) -> int:
        """Split factor of a primal axis.

        Parameters
        ----------
        letter : str
            The primal axis.

        Returns
        -------
        int
            The size of its sub-axis, 1 when it is not split.
        """
        i = self.index(letter.lower())
        return self.axes[i][1] if i >= 0 else 1

    def is_split(self, letter: str) -> bool:
        """Whether a primal axis has a sub-axis.

        Parameters
        ----------
        letter : str
            The primal axis.

        Returns
        -------
        bool
            True for ``C`` in ``NCHW8c``.
        """
        return self.index(letter.lower()) >= 0

    def _check_primal(self, primal: str, op: str) -> None:
        if sorted(self.primal) != sorted(primal):
            raise KilnTypeError(f"{op}: layout {self.name!r} is not convertible to {primal!r}")

    def check_shape(self, shape: Sequence[int], op: str, what: str) -> None:
        """Check that ``shape`` has this layout's rank and sub-axis sizes.

        Parameters
        ----------
        shape : sequence of int
            A tensor shape.
        op, what : str
            Operator and argument named in the error.

        Raises
        ------
        KilnTypeError
            When the shape does not fit the layout.
        """
        if len(shape) != self.ndim:
            raise KilnTypeError(f"{op}: {what} has shape {tuple(shape)} ({len(shape)}-d), but layout "
                                f"{self.name!r} needs a {self.ndim}-d tensor")
        for i, (a, f) in enumerate(self.axes):
            if a.islower() and shape[i] != f:
                raise KilnTypeError(f"{op}: {what} has shape {tuple(shape)}, but axis {i} of layout "
                                    f"{self.name!r} must have size {f}")

    def forward_shape(self, shape: Sequence[int], primal: str, op: str, what: str) -> tuple[int, ...]:
        """Convert a shape from this layout to a primal one.

        Parameters
        ----------
        shape : sequence of int
            Shape of a tensor in this layout.
        primal : str
            Target layout with the same primal axes, e.g. ``"NCHW"``.
        op, what : str
            Operator and argument named in errors.

        Returns
        -------
        tuple of int
            The shape in ``primal`` (``(1, 2, 5, 5, 8)`` in ``NCHW8c`` is ``(1, 16, 5, 5)``).
        """
        self._check_primal(primal, op)
        self.check_shape(shape, op, what)
        return tuple(shape[self.index(p)] * self.factor(p) for p in primal)

    def backward_shape(self, shape: Sequence[int], primal: str, op: str, what: str) -> tuple[int, ...]:
        """Convert a shape from a primal layout to this one.

        Parameters
        ----------
        shape : sequence of int
            Shape of a tensor in ``primal``.
        primal : str
            Its layout, with the same primal axes as this one.
        op, what : str
            Operator and argument named in errors.

        Returns
        -------
        tuple of int
            The shape in this layout; a split axis must divide by its factor.
        """
        self._check_primal(primal, op)
        sizes = dict(zip(primal, shape))
        out = []
        for a, f in self.axes:
            if a.islower():
                out.append(f)
                continue
            fac = self.factor(a)
            if sizes[a] % fac:
                raise KilnTypeError(f"{op}: {what} axis {a} of size {sizes[a]} does not split by "
                                    f"{fac} (layout {self.name!r})")
            out.append(sizes[a] // fac)
        return tuple(out)

    def to_primal(self, arr: np.ndarray, primal: str) -> np.ndarray:
        """Rearrange an array from this layout into a primal one.

        Parameters
        ----------
        arr : ndarray
            Data in this layout.
        primal : str
            Target layout with the same primal axes.

        Returns
        -------
        ndarray
            A contiguous array in ``primal``.
        """
        perm: list[int] = []
        shape: list[int] = []
        for p in primal:
            perm.append(self.index(p))
            size = arr.shape[self.index(p)]
            if self.is_split(p):
                perm.append(self.index(p.lower()))
                size *= self.factor(p)
            shape.append(size)
        return np.ascontiguousarray(arr.transpose(perm)).reshape(shape)

    def from_primal(self, arr: np.ndarray, primal: str) -> np.ndarray:
        """Rearrange an array from a primal layout into this one.

        Parameters
        ----------
        arr : ndarray
            Data in ``primal``.
        primal : str
            Its layout, with the same primal axes as this one.

        Returns
        -------
        ndarray
            A contiguous array in this layout.
        """
        split: list[int] = []
        where: dict[str, int] = {}
        for p, size in zip(primal, arr.shape):
            where[p] = len(split)
            if self.is_split(p):
                split += [size // self.factor(p), self.factor(p)]
                where[p.lower()] = len(split) - 1
            else:
                split.append(size)
        perm = [where[a] for a, _ in self.axes]
        return np.ascontiguousarray(arr.reshape(split).transpose(perm))

    def __str__(self) -> str:
        return self.name


def int_tuple(value: Any, n: int, what: str, op: str) -> tuple[int, ...]:
    """An int or a sequence of ints as an ``n``-tuple.

    Parameters
    ----------
    value : int or sequence of int
        A scalar or a 1-sequence is repeated ``n`` times.
    n : int
        Wanted length.
    what, op : str
        Attribute and operator named in the error.

    Returns
    -------
    tuple of int
        ``n`` values.
    """
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    values = tuple(int(v) for v in value)
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise KilnTypeError(f"{op}: {what} must have {n} value(s), got {values}")
    return values


def pad_tuple(padding: Any, n: int, op: str) -> tuple[int, ...]:
    """Normalise padding for an ``n``-d window the way TVM's builders do.

    Parameters
    ----------
    padding : int or sequence of int
        One value (all sides), ``n`` values (symmetric per axis) or ``2n`` values (as given).
    n : int
        Number of spatial axes.
    op : str
        Operator named in the error.

    Returns
    -------
    tuple of int
        ``2n`` values: every axis's begin, then every axis's end.
    """
    if isinstance(padding, (int, np.integer)):
        return (int(padding),) * (2 * n)
    values = tuple(int(v) for v in padding)
    if len(values) == 1:
        return values * (2 * n)
    if len(values) == n:
        return values + values
    if len(values) == 2 * n:
        return values
    raise KilnTypeError(f"{op}: padding must have 1, {n} or {2 * n} values, got {values}")


def pad_pairs(padding: Sequence[int], n: int, op: str) -> tuple[tuple[int, int], ...]:
    """Split a padding attribute into per-axis pairs.

    Parameters
    ----------
    padding : sequence of int
        As accepted by :func:`pad_tuple`.
    n : int
        Number of spatial axes.
    op : str
        Operator named in errors.

    Returns
    -------
    tuple of (int, int)
        ``(begin, end)`` per spatial axis; negative values are a type error.
    """
    values = pad_tuple(padding, n, op)
    if any(v < 0 for v in values):
        raise KilnTypeError(f"{op}: padding must be non-negative, got {values}")
    return tuple((values[i], values[i + n]) for i in range(n))


def positive(values: Sequence[int], what: str, op: str) -> None:
    """Check that every value is positive.

    Parameters
    ----------
    values : sequence of int
        The values.
    what, op : str
        Attribute and operator named in the error.

    Raises
    ------
    KilnTypeError
        When a value is zero or negative.
    """
    if any(v <= 0 for v in values):
        raise KilnTypeError(f"{op}: {what} must be positive, got {tuple(values)}")


def check_operand_dtypes(op: str, a: TensorType, b: TensorType, a_name: str, b_name: str) -> None:
    """Check the dtypes of a contraction's operands: equal, or both integers (quantized).

    Parameters
    ----------
    op : str
        Operator named in the error.
    a, b : TensorType
        The operand types.
    a_name, b_name : str
        Their argument names.

    Raises
    ------
    KilnTypeError
        When the dtypes differ and one is floating-point.
    """
    if a.dtype != b.dtype and (is_float(a.dtype) or is_float(b.dtype)):
        raise KilnTypeError(f"{op}: {a_name} dtype {a.dtype} and {b_name} dtype {b.dtype} differ")


def acc_dtype(*dtypes: Any) -> np.dtype:
    """Accumulation dtype of a reference kernel.

    Parameters
    ----------
    *dtypes : dtype-like
        Operand and result dtypes.

    Returns
    -------
    numpy.dtype
        float64 when any is floating-point, else int64.
    """
    kinds = {np.dtype(d).kind for d in dtypes}
    return np.dtype(np.float64) if "f" in kinds else np.dtype(np.int64)


def to_out(value: np.ndarray, out_type: Any) -> np.ndarray:
    """Cast a reference result to its type's dtype.

    Parameters
    ----------
    value : ndarray
        The result (usually float64 or int64).
    out_type : TensorType
        The inferred type of the call.

    Returns
    -------
    ndarray
        ``value`` in ``out_type.dtype`` (integers wrap, as C casts do).
    """
    with np.errstate(all="ignore"):
        return np.asarray(value).astype(np_dtype(out_type.dtype), copy=False)


def window_out_size(size: int, pad: tuple[int, int], kernel: int, stride: int, dilation: int,
                    ceil_mode: bool = False) -> int:
    """Output length of a sliding window along one axis.

    Parameters
    ----------
    size : int
        Input length.
    pad : (int, int)
        Padding before and after.
    kernel, stride, dilation : int
        Window geometry.
    ceil_mode : bool
        Round up instead of down.

    Returns
    -------
    int
        ``(size + pads - ((kernel - 1) * dilation + 1)) / stride + 1``, rounded; less than 1 when
        the window does not fit.
    """
    span = size + pad[0] + pad[1] - ((kernel - 1) * dilation + 1)
    if ceil_mode:
        return -(-span // stride) + 1
    return span // stride + 1


def spatial_axes(layout: Layout, letters: str, op: str) -> tuple[int, ...]:
    """Positions of spatial axes in a layout.

    Parameters
    ----------
    layout : Layout
        The data layout.
    letters : str
        The spatial axes, e.g. ``"HW"``; none may be split.
    op : str
        Operator named in the error.

    Returns
    -------
    tuple of int
        Their positions, in the order of ``letters``.
    """
    out = []
    for letter in letters:
        i = layout.index(letter)
        if i < 0 or layout.is_split(letter):
            raise KilnTypeError(f"{op}: layout {layout.name!r} must have axis {letter}, unsplit "
                                f"(needs the spatial axes {letters})")
        out.append(i)
    return tuple(out)


def along_axis(vec: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """A 1-d array reshaped to broadcast along one axis of an ``ndim``-d tensor.

    Parameters
    ----------
    vec : ndarray
        Per-channel values.
    ndim : int
        Rank of the tensor it will combine with.
    axis : int
        The (non-negative) channel axis.

    Returns
    -------
    ndarray
        ``vec`` with shape ``(1, ..., len(vec), ..., 1)``.
    """
    shape = [1] * ndim
    shape[axis] = -1
    return vec.reshape(shape)
