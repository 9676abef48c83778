"""Tensors, operations, iteration variables and commutative reducers.

A :class:`Tensor` is one output of an :class:`Operation`: a :class:`PlaceholderOp` (an input) or
a :class:`ComputeOp` (one element-wise definition per output element, possibly a reduction).
Build them with :func:`placeholder`, :func:`compute`, :func:`reduce_axis` and the reducers
:data:`sum`, :data:`max`, :data:`min`, :data:`prod` or your own :func:`comm_reducer`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.runtime.dtype import dtype_range, int_range
from kiln.te import expr as E
from kiln.te.expr import PrimExpr, Var, as_expr, const
from kiln.te.visit import post_order

__all__ = [
    "CommReducer",
    "ComputeOp",
    "IterVar",
    "Operation",
    "PlaceholderOp",
    "Range",
    "Tensor",
    "comm_reducer",
    "compute",
    "max",
    "max_value",
    "min",
    "min_value",
    "placeholder",
    "prod",
    "reduce_axis",
    "sum",
]


@dataclass(frozen=True, eq=False, slots=True)
class Range:
    """The half-open interval ``[min, min + extent)``."""

    min: PrimExpr
    extent: PrimExpr

    @staticmethod
    def from_min_extent(min_value: Any, extent: Any) -> Range:
        """A range from a start and a length."""
        return Range(as_expr(min_value), as_expr(extent))

    def __str__(self) -> str:
        return f"range(min={self.min}, ext={self.extent})"

    __repr__ = __str__


DATA_PAR = "data_par"
COMM_REDUCE = "comm_reduce"


@dataclass(frozen=True, eq=False, slots=True)
class IterVar:
    """An iteration variable: ``var`` ranging over ``dom``.

    ``iter_type`` is ``"data_par"`` for a spatial axis of a compute, ``"comm_reduce"`` for a
    reduction axis.
    """

    var: Var
    dom: Range | None
    iter_type: str = DATA_PAR

    @property
    def name(self) -> str:
        """The variable's name."""
        return self.var.name

    def __str__(self) -> str:
        dom = str(self.dom) if self.dom is not None else ""
        return f"iter_var({self.var.name}, {dom})"

    __repr__ = __str__

    # An IterVar is used like its variable inside expressions (TVM converts it implicitly).
    def __add__(self, other: Any) -> PrimExpr:
        return self.var + other

    def __radd__(self, other: Any) -> PrimExpr:
        return other + self.var

    def __sub__(self, other: Any) -> PrimExpr:
        return self.var - other

    def __rsub__(self, other: Any) -> PrimExpr:
        return other - self.var

    def __mul__(self, other: Any) -> PrimExpr:
        return self.var * other

    def __rmul__(self, other: Any) -> PrimExpr:
        return other * self.var

    def __floordiv__(self, other: Any) -> PrimExpr:
        return self.var // other

    def __mod__(self, other: Any) -> PrimExpr:
        return self.var % other

    def __lt__(self, other: Any) -> PrimExpr:
        return self.var < other

    def __le__(self, other: Any) -> PrimExpr:
        return self.var <= other

    def __gt__(self, other: Any) -> PrimExpr:
        return self.var > other

    def __ge__(self, other: Any) -> PrimExpr:
        return self.var >= other


def reduce_axis(dom: tuple[Any, Any] | Range, name: str = "rv") -> IterVar:
    """A reduction axis over ``dom = (lo, hi)`` (``hi`` excluded), like ``te.reduce_axis``."""
    if isinstance(dom, Range):
        rng = dom
    else:
        lo, hi = dom
        rng = Range(as_expr(lo), E._binary("sub", as_expr(hi), as_expr(lo)))
    return IterVar(Var(name, "int32"), rng, COMM_REDUCE)


# --- reducers ----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, slots=True)
class CommReducer:
    """A commutative reducer: ``result`` combines ``lhs`` and ``rhs``; ``identity`` starts it."""

    lhs: tuple[Var, ...]
    rhs: tuple[Var, ...]
    result: tuple[PrimExpr, ...]
    identity: tuple[PrimExpr, ...]

    def __str__(self) -> str:
        def arr(xs: Sequence[PrimExpr]) -> str:
            return "[" + ", ".join(E.legacy_repr(x) for x in xs) + "]"

        return (f"comm_reducer(result={arr(self.result)}, lhs={arr(self.lhs)}, "
                f"rhs={arr(self.rhs)}, identity_element={arr(self.identity)})")

    __repr__ = __str__

    def combine(self, lhs: Sequence[PrimExpr], rhs: Sequence[PrimExpr]) -> list[PrimExpr]:
        """The reducer applied to concrete operands."""
        from kiln.te.visit import substitute

        mapping: dict[Var, PrimExpr] = dict(zip(self.lhs, lhs))
        mapping.update(zip(self.rhs, rhs))
        return [substitute(r, mapping) for r in self.result]


class _Reducer:
    """A reducer factory such as ``te.sum``: ``te.sum(expr, axis=k, where=cond, init=v)``."""

    def __init__(self, fcombine: Callable[..., Any], fidentity: Callable[..., Any], name: str):
        self.fcombine = fcombine
        self.fidentity = fidentity
        self.name = name
        self.__name__ = name
        self.__doc__ = f"The ``{name}`` reducer (also combines two expressions directly)."

    def __call__(self, expr: Any, axis: Any = None, where: Any = None, init: Any = None,
                 *args: Any) -> Any:
        if axis is not None and not isinstance(axis, (IterVar, list, tuple)):
            # te.max(a, b): combine two expressions directly
            return self.fcombine(as_expr(expr), as_expr(axis))
        if axis is None:
            raise KilnTypeError(f"te.{self.name}: a reduction needs axis=")
        return self._reduce(expr, axis, where, init)

    def _reduce(self, expr: Any, axis: Any, where: Any, init: Any) -> Any:
        code = self.fcombine.__code__
        lname, rname = code.co_varnames[0], code.co_varnames[1]
        if isinstance(expr, (list, tuple)):
            source = tuple(as_expr(x) for x in expr)
            dtypes = [x.dtype for x in source]
            lhs = tuple(Var(f"{lname}_{i}", d) for i, d in enumerate(dtypes))
            rhs = tuple(Var(f"{rname}_{i}", d) for i, d in enumerate(dtypes))
            result = tuple(as_expr(x) for x in self.fcombine(list(lhs), list(rhs)))
            identity = tuple(as_expr(x) for x in self.fidentity(*dtypes))
            inits = tuple(as_expr(x) for x in init) if init is not None else ()
        else:
            src = as_expr(expr)
            source = (src,)
            lhs = (Var(lname, src.dtype),)
            rhs = (Var(rname, src.dtype),)
            result = (as_expr(self.fcombine(lhs[0], rhs[0])),)
            identity = (as_expr(self.fidentity(src.dtype)),)
            inits = (as_expr(init, src.dtype),) if init is not None else ()
        reducer = CommReducer(lhs, rhs, result, identity)
        axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
        cond = const(True) if where is None else E._as_bool(where)
        outs = tuple(E.Reduce(reducer, source, axes, cond, i, inits, source[i].dtype)
                     for i in range(len(source)))
        return outs[0] if len(outs) == 1 else outs


def comm_reducer(fcombine: Callable[..., Any], fidentity: Callable[..., Any],
                 name: str = "reduce") -> _Reducer:
    """Create a commutative reducer from a combiner and an identity function (``te.comm_reducer``).

    Parameters
    ----------
    fcombine : callable
        ``fcombine(x, y) -> expr`` (or, for a tuple reduction, lists in and a list out).
    fidentity : callable
        ``fidentity(dtype, ...) -> expr`` (or a list for tuple reductions).
    name : str
        Name used in messages.

    Returns
    -------
    callable
        ``reducer(expr, axis, where=None, init=None)``.
    """
    return _Reducer(fcombine, fidentity, name)


def min_value(dtype: str) -> PrimExpr:
    """The smallest finite value of ``dtype``."""
    if E.is_float_dtype(dtype):
        return const(dtype_range(dtype)[0], dtype)
    if dtype == "bool":
        return const(False)
    return const(int_range(dtype)[0], dtype)


def max_value(dtype: str) -> PrimExpr:
    """The largest finite value of ``dtype``."""
    if E.is_float_dtype(dtype):
        return const(dtype_range(dtype)[1], dtype)
    if dtype == "bool":
        return const(True)
    return const(int_range(dtype)[1], dtype)


sum = comm_reducer(lambda x, y: x + y, lambda t: const(0, t), name="sum")
max = comm_reducer(lambda x, y: E._binary("max", x, y), min_value, name="max")
min = comm_reducer(lambda x, y: E._binary("min", x, y), max_value, name="min")
prod = comm_reducer(lambda x, y: x * y, lambda t: const(1, t), name="prod")


# --- operations and tensors ---------------------------------------------------------------------


class Operation:
    """Base class of operations; an operation produces ``num_outputs`` tensors."""

    name: str
    tag: str
    attrs: dict[str, Any]

    @property
    def num_outputs(self) -> int:
        """How many tensors the operation produces."""
        return 1

    def output(self, index: int = 0) -> Tensor:
        """The ``index``-th output tensor."""
        if not 0 <= index < self.num_outputs:
            raise IndexError(f"operation {self.name} has {self.num_outputs} output(s), "
                             f"asked for {index}")
        return Tensor(self, index)

    def output_shape(self, index: int = 0) -> tuple[int, ...]:
        """Shape of output ``index``."""
        raise TypeError(f"{type(self).__name__} has no shape")

    def output_dtype(self, index: int = 0) -> str:
        """Dtype of output ``index``."""
        raise TypeError(f"{type(self).__name__} has no dtype")

    def input_tensors(self) -> list[Tensor]:
        """Tensors this operation reads, in first-use order."""
        return []


@dataclass(eq=False)
class PlaceholderOp(Operation):
    """An input tensor of a given shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    tag: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)

    def output_shape(self, index: int = 0) -> tuple[int, ...]:
        """The placeholder's shape."""
        return self.shape

    def output_dtype(self, index: int = 0) -> str:
        """The placeholder's dtype."""
        return self.dtype


@dataclass(eq=False)
class ComputeOp(Operation):
    """``name(axis) = body`` over the spatial ``axis`` (and ``reduce_axis`` for reductions)."""

    name: str
    tag: str
    attrs: dict[str, Any]
    axis: tuple[IterVar, ...]
    body: tuple[PrimExpr, ...]
    reduce_axis: tuple[IterVar, ...] = ()

    @property
    def num_outputs(self) -> int:
        """One output per body expression."""
        return len(self.body)

    @property
    def shape(self) -> tuple[int, ...]:
        """The output shape (all outputs share it)."""
        return self.output_shape(0)

    def output_shape(self, index: int = 0) -> tuple[int, ...]:
        """Extents of the spatial axes."""
        shape = []
        for iv in self.axis:
            ext = iv.dom.extent if iv.dom is not None else None
            if not isinstance(ext, E.IntImm):
                raise KilnTypeError(f"compute {self.name}: axis {iv.var.name} has a non-constant "
                                    f"extent {ext}")
            shape.append(ext.value)
        return tuple(shape)

    def output_dtype(self, index: int = 0) -> str:
        """Dtype of body ``index``."""
        return self.body[index].dtype

    def input_tensors(self) -> list[Tensor]:
        """Tensors loaded by the body, in post-order of first use (TVM's order)."""
        seen: dict[tuple[int, int], Tensor] = {}
        for body in self.body:
            for node in post_order(body):
                if isinstance(node, E.TensorLoad):
                    seen.setdefault(node.tensor.key, node.tensor)
        return list(seen.values())

    @property
    def is_reduction(self) -> bool:
        """Whether the body is a reduction."""
        return isinstance(self.body[0], E.Reduce)


class Tensor:
    """Output ``value_index`` of operation ``op``; index it to read an element: ``A[i, j]``."""

    __slots__ = ("op", "value_index")

    def __init__(self, op: Operation, value_index: int = 0):
        self.op = op
        self.value_index = value_index

    @property
    def key(self) -> tuple[int, int]:
        """Identity of the tensor: its operation and output index."""
        return (id(self.op), self.value_index)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tensor) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def shape(self) -> tuple[int, ...]:
        """Static shape."""
        return self.op.output_shape(self.value_index)

    @property
    def dtype(self) -> str:
        """Element dtype."""
        return self.op.output_dtype(self.value_index)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def name(self) -> str:
        """The producing operation's name (with ``.v<k>`` for extra outputs, like TVM)."""
        if self.op.num_outputs == 1:
            return self.op.name
        return f"{self.op.name}.v{self.value_index}"

    def __call__(self, *indices: Any) -> PrimExpr:
        return self[indices]

    def __getitem__(self, indices: Any) -> Any:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) == 1 and isinstance(indices[0], (list, tuple)):
            indices = tuple(indices[0])
        if len(indices) < self.ndim:
            return _TensorSlice(self, tuple(indices))
        return self._load(indices)

    def _load(self, indices: Sequence[Any]) -> PrimExpr:
        if len(indices) != self.ndim:
            raise KilnTypeError(f"tensor {self.name} of shape {self.shape} indexed with "
                                f"{len(indices)} indices")
        idx = []
        for i in indices:
            e = as_expr(i)
            if E.is_float_dtype(e.dtype) or e.dtype == "bool":
                raise KilnTypeError(f"tensor {self.name}: index {e} has dtype {e.dtype}; "
                                    "indices must be integers")
            idx.append(e)
        return E.TensorLoad(self, tuple(idx), self.dtype)

    def __repr__(self) -> str:
        return f"Tensor(shape={list(self.shape)}, op.name={self.name})"


class _TensorSlice:
    """A partially indexed tensor (``A[i]`` of a 2-d tensor), completed by more indexing."""

    def __init__(self, tensor: Tensor, indices: tuple[Any, ...]):
        self.tensor = tensor
        self.indices = indices

    def __getitem__(self, more: Any) -> Any:
        if not isinstance(more, tuple):
            more = (more,)
        return self.tensor[self.indices + more]


def placeholder(shape: Sequence[int] | int, dtype: str = "float32",
                name: str = "placeholder") -> Tensor:
    """An input tensor (``te.placeholder``).

    Parameters
    ----------
    shape : tuple of int
        Static shape (``()`` for a scalar).
    dtype : str
        Element dtype.
    name : str
        Name used in prints and generated code.

    Returns
    -------
    Tensor
    """
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    return PlaceholderOp(name, tuple(_static_dim(d, name) for d in dims), dtype).output(0)


def _static_dim(d: Any, name: str) -> int:
    if isinstance(d, E.IntImm):
        return d.value
    if isinstance(d, (int, np.integer)):
        return int(d)
    raise KilnTypeError(f"{name}: dimension {d!r} is not a static integer")


def _arg_names(fcompute: Callable[..., Any], ndim: int) -> list[str]:
    spec = inspect.getfullargspec(fcompute)
    if spec.varargs is not None:
        fixed = list(spec.args)
        return fixed + [f"i{i}" for i in range(len(fixed), ndim)]
    if not spec.args:
        return [f"i{i}" for i in range(ndim)]
    return list(spec.args)


def compute(shape: Sequence[int] | int, fcompute: Callable[..., Any], name: str = "compute",
            tag: str = "", attrs: dict[str, Any] | None = None) -> Any:
    """A tensor whose element at each index is ``fcompute(*index)`` (``te.compute``).

    Parameters
    ----------
    shape : tuple of int
        Output shape.
    fcompute : callable
        Takes one index variable per dimension (named after its parameters, or ``i0, i1, ...``
        for ``*args``) and returns the element expression, a reduction (``te.sum(...)``) or a
        tuple of expressions (several outputs).
    name : str
        Operation name.
    tag : str
        Free-form tag (``"elemwise"``, ``"broadcast"``, ``"injective"``, ...).
    attrs : dict, optional
        Extra attributes (``"FLOP"`` overrides the FLOP estimate).

    Returns
    -------
    Tensor or list of Tensor
        One tensor, or one per output expression.
    """
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    dims = tuple(_static_dim(d, name) for d in dims)
    names = _arg_names(fcompute, len(dims))
    if len(names) != len(dims):
        raise KilnTypeError(f"compute {name}: fcompute takes {len(names)} index argument(s) but "
                            f"the shape {dims} has {len(dims)} dimension(s)")
    axis = tuple(IterVar(Var(n, "int32"), Range(const(0), const(d)), DATA_PAR)
                 for n, d in zip(names, dims))
    result = fcompute(*[iv.var for iv in axis])
    bodies = tuple(result) if isinstance(result, (list, tuple)) else (result,)
    body = tuple(as_expr(b) for b in bodies)
    op = make_compute_op(name, tag, attrs or {}, axis, body)
    outs = [op.output(i) for i in range(op.num_outputs)]
    return outs[0] if len(outs) == 1 else outs


def make_compute_op(name: str, tag: str, attrs: dict[str, Any], axis: tuple[IterVar, ...],
                    body: tuple[PrimExpr, ...]) -> ComputeOp:
    """A :class:`ComputeOp`, checking that reductions are whole bodies and share their axes."""
    reduces = [b for b in body if isinstance(b, E.Reduce)]
    if reduces and len(reduces) != len(body):
        raise KilnTypeError(f"compute {name}: a reduction must be the whole body of every output")
    for b in body:
        for node in post_order(b):
            if isinstance(node, E.Reduce) and node is not b:
                raise KilnTypeError(f"compute {name}: a reduction may not be nested inside an "
                                    f"expression ({b}); split it into two computes")
    red_axis = reduces[0].axis if reduces else ()
    for r in reduces[1:]:
        if r.axis != red_axis:
            raise KilnTypeError(f"compute {name}: every output must reduce over the same axes")
    names = [iv.var.name for iv in (*axis, *red_axis)]
    if len(set(names)) != len(names):
        raise KilnTypeError(f"compute {name}: iterator names {names} are not unique")
    return ComputeOp(name, tag, dict(attrs), axis, body, tuple(red_axis))

