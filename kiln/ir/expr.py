"""Relay expressions: immutable graph nodes.

Nodes compare and hash by identity, like TVM's ``ObjectRef``: two ``var("x")`` are different
variables and a graph node shared by two users is one object. Use
:func:`kiln.ir.structural_equal` / :func:`kiln.ir.structural_hash` to compare graphs by shape.
Nodes cannot be changed after construction; :meth:`Expr.replace` returns a copy (or the node itself
when nothing changed). The one cache a node carries is its ``checked_type``, written once by type
inference; it is a pure function of the node's structure.

Python arithmetic on expressions builds calls, as relay's ``ExprWithOp`` does: ``x + y`` is
``add(x, y)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kiln.ir.attrs import Attrs, DictAttrs
from kiln.ir.types import FuncType, TensorType, Type, as_dtype, np_dtype

if TYPE_CHECKING:
    from kiln.runtime.ndarray import NDArray

__all__ = [
    "Call",
    "Constant",
    "Expr",
    "Function",
    "GlobalVar",
    "If",
    "Let",
    "Op",
    "Tuple",
    "TupleGetItem",
    "TupleWrapper",
    "Var",
    "const",
    "var",
]

_var_ids = itertools.count()


class Expr:
    """Base class of relay expressions."""

    __slots__ = ("__weakref__", "_checked_type")
    _fields: tuple[str, ...] = ()
    _checked_type: Type | None

    def _set(self, **values: Any) -> None:
        for k, v in values.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_checked_type", None)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; use .replace({key}=...)")

    # --- types -----------------------------------------------------------------------------
    @property
    def checked_type(self) -> Type:
        """The type inferred by ``InferType``; an error if inference has not run on this node."""
        if self._checked_type is None:
            raise ValueError(
                f"the type of {self._short()} is not known yet; run relay.transform.InferType() "
                "on the module first"
            )
        return self._checked_type

    @property
    def has_type(self) -> bool:
        """Whether ``checked_type`` has been filled in."""
        return self._checked_type is not None

    def _set_checked_type(self, ty: Type) -> None:
        object.__setattr__(self, "_checked_type", ty)

    # --- copies ----------------------------------------------------------------------------
    def replace(self, **changes: Any) -> Expr:
        """A copy with the given fields changed; ``self`` when every value is unchanged."""
        if all(_same(getattr(self, k), v) for k, v in changes.items()):
            return self
        values = {k: getattr(self, k) for k in self._fields}
        values.update(changes)
        return type(self)(**values)

    def _short(self) -> str:
        return type(self).__name__

    def __str__(self) -> str:
        from kiln.ir.printer import astext

        return astext(self)

    def astext(self, show_meta_data: bool = True, annotate: Any = None) -> str:
        """The expression in relay's text form (with the ``#[metadata]`` section, as TVM's)."""
        from kiln.ir.printer import astext

        return astext(self, show_meta_data=show_meta_data, annotate=annotate)

    # --- operators building calls (relay ExprWithOp) -----------------------------------------
    def _binary(self, name: str, other: Any, reverse: bool = False) -> Call:
        other_expr = _to_expr(other, like=self)
        args = [other_expr, self] if reverse else [self, other_expr]
        return Call(Op.get(name), args)

    def __add__(self, other: Any) -> Call:
        return self._binary("add", other)

    def __radd__(self, other: Any) -> Call:
        return self._binary("add", other, reverse=True)

    def __sub__(self, other: Any) -> Call:
        return self._binary("subtract", other)

    def __rsub__(self, other: Any) -> Call:
        return self._binary("subtract", other, reverse=True)

    def __mul__(self, other: Any) -> Call:
        return self._binary("multiply", other)

    def __rmul__(self, other: Any) -> Call:
        return self._binary("multiply", other, reverse=True)

    def __truediv__(self, other: Any) -> Call:
        return self._binary("divide", other)

    def __rtruediv__(self, other: Any) -> Call:
        return self._binary("divide", other, reverse=True)

    def __neg__(self) -> Call:
        return Call(Op.get("negative"), [self])

    def __lt__(self, other: Any) -> Call:
        return self._binary("less", other)

    def __gt__(self, other: Any) -> Call:
        return self._binary("greater", other)

    def __le__(self, other: Any) -> Call:
        return self._binary("less_equal", other)

    def __ge__(self, other: Any) -> Call:
        return self._binary("greater_equal", other)

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def astype(self, dtype: str) -> Call:
        """``cast(self, dtype)``."""
        from kiln.ir.op_table import call_op

        return call_op("cast", [self], dtype=as_dtype(dtype))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Expr) or isinstance(b, Expr):
        return a is b
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:  # arrays and other exotic values
        return a is b


def _to_expr(value: Any, like: Expr | None = None) -> Expr:
    if isinstance(value, Expr):
        return value
    dtype = None
    if like is not None and like.has_type and isinstance(like.checked_type, TensorType):
        dtype = like.checked_type.dtype
    if isinstance(value, (int, float, bool, np.number, np.bool_)):
        return const(value, dtype)
    raise TypeError(f"cannot use {type(value).__name__} {value!r} as a relay expression")


class Op(Expr):
    """A primitive operator, looked up by name in the operator registry (``Op.get("add")``)."""

    __slots__ = ("name",)
    _fields = ("name",)
    name: str

    def __init__(self, name: str):
        self._set(name=name)

    @staticmethod
    def get(name: str) -> Op:
        """The registered operator called ``name`` (an ``UnknownOpError`` naming it if none)."""
        from kiln.ir.op_table import get_op

        return get_op(name)

    @property
    def op_def(self) -> Any:
        """The registry entry (type relation, reference kernel, fusion pattern, ...)."""
        from kiln.ir.op_table import op_definition

        return op_definition(self.name)

    def replace(self, **changes: Any) -> Expr:
        return self if not changes or changes == {"name": self.name} else Op.get(changes["name"])

    # TVM's registration methods for operators declared in Python (``relay.op.op.register``);
    # they change the operator's registry entry, not this node.
    def set_num_inputs(self, n: int) -> None:
        """Declare the operator's number of arguments."""
        self.op_def.num_inputs = int(n)

    def add_argument(self, name: str, type_key: str, description: str) -> None:
        """Document an argument (appended to the operator's ``arguments``)."""
        self.op_def.arguments = (*self.op_def.arguments, (name, type_key, description))

    def add_type_rel(self, rel_name: str, type_rel_func: Callable[..., Any] | None = None) -> None:
        """Give the operator a type relation: a function, or a name (``"Identity"``, ``"Broadcast"``)."""
        from kiln.ir.op_table import set_type_relation

        set_type_relation(self.name, rel_name, type_rel_func)

    def set_support_level(self, level: int) -> None:
        """TVM's documentation level: accepted, Kiln has no use for it."""

    def set_attrs_type_key(self, key: str) -> None:
        """TVM's attrs type key: accepted; calls of Python-declared operators take any attrs."""

    def _short(self) -> str:
        return f"Op({self.name})"

    def __repr__(self) -> str:
        return f"Op({self.name})"


class Var(Expr):
    """A variable: a function parameter or a graph input.

    Parameters
    ----------
    name_hint : str
        The variable's name (graph inputs keep it through the build).
    type_annotation : Type, optional
        Its declared type.
    """

    __slots__ = ("name_hint", "type_annotation", "vid")
    _fields = ("name_hint", "type_annotation")
    name_hint: str
    type_annotation: Type | None
    vid: int

    def __init__(self, name_hint: str, type_annotation: Type | None = None):
        self._set(name_hint=str(name_hint), type_annotation=type_annotation, vid=next(_var_ids))

    def replace(self, **changes: Any) -> Expr:
        raise TypeError("variables are identities; create a new relay.var instead of replacing one")

    def __call__(self, *args: Expr) -> Call:
        """A call of this (function-typed) variable."""
        return Call(self, list(args))

    def _short(self) -> str:
        return f"%{self.name_hint}"

    def __repr__(self) -> str:
        return f"Var({self.name_hint}, ty={self.type_annotation})"


class Constant(Expr):
    """A constant tensor. ``value`` is a read-only NumPy array; ``data`` an NDArray view of it."""

    __slots__ = ("value",)
    _fields = ("value",)
    value: np.ndarray

    def __init__(self, value: Any):
        if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
            value = value.numpy()
        arr = np.array(value, copy=True)
        if arr.dtype == np.float64 and not isinstance(value, np.ndarray):
            arr = arr.astype(np.float32)
        as_dtype(arr.dtype)  # validates the dtype
        arr.setflags(write=False)
        self._set(value=arr)

    @property
    def data(self) -> NDArray:
        """The constant as an :class:`~kiln.runtime.ndarray.NDArray` (TVM's ``Constant.data``)."""
        from kiln.runtime.ndarray import NDArray

        return NDArray(self.value)

    @property
    def tensor_type(self) -> TensorType:
        """The type of the constant."""
        return TensorType(self.value.shape, as_dtype(self.value.dtype))

    def _short(self) -> str:
        if self.value.ndim == 0:
            return f"const({self.value.item()!r}, {self.value.dtype})"
        return f"const(shape={self.value.shape}, {self.value.dtype})"

    def __repr__(self) -> str:
        return self._short()


class Call(Expr):
    """A call of an operator, a global function or a function literal.

    Parameters
    ----------
    op : Op, GlobalVar or Function
        What is called.
    args : sequence of Expr
        The arguments.
    attrs : Attrs, optional
        Operator attributes.
    type_args : ignored
        Accepted for TVM compatibility; :attr:`type_args` is derived from the argument types.
    span : Span, optional
        Where the call came from (:class:`~kiln.ir.span.Span`); printed, never compared.
    source_names : tuple of str
        Names of the source-model nodes this call came from (provenance); kept by every pass.
    """

    __slots__ = ("args", "attrs", "op", "source_names", "span")
    _fields = ("op", "args", "attrs", "source_names")
    op: Expr
    args: tuple[Expr, ...]
    attrs: Attrs | None
    source_names: tuple[str, ...]

    def __init__(
        self,
        op: Expr,
        args: Sequence[Expr],
        attrs: Attrs | None = None,
        type_args: Any = None,
        span: Any = None,
        source_names: Iterable[str] = (),
    ):
        args = tuple(_to_expr(a) for a in args)
        if not isinstance(op, Expr):  # an Op, a GlobalVar, a function or any function-typed expr
            raise TypeError(f"cannot call {type(op).__name__}: expected an Op, GlobalVar, Function "
                            "or function-typed expression")
        self._set(op=op, args=args, attrs=attrs, source_names=tuple(source_names), span=span)

    @property
    def type_args(self) -> list[Type]:
        """TVM's type arguments: an operator call's argument types once the call is type-checked.

        Empty before type inference and for calls of functions (Kiln has no type parameters).
        """
        if not isinstance(self.op, Op) or not self.has_type:
            return []
        if not all(a.has_type for a in self.args):
            return []
        return [a.checked_type for a in self.args]

    def _short(self) -> str:
        name = self.op.name if isinstance(self.op, Op) else self.op._short()
        src = f" from {', '.join(self.source_names)}" if self.source_names else ""
        return f"call to {name}{src}"

    def __repr__(self) -> str:
        return f"Call({self._short()})"


class Tuple(Expr):
    """A tuple of expressions."""

    __slots__ = ("fields",)
    _fields = ("fields",)
    fields: tuple[Expr, ...]

    def __init__(self, fields: Sequence[Expr], span: Any = None):
        self._set(fields=tuple(_to_expr(f) for f in fields))

    def __len__(self) -> int:
        return len(self.fields)

    def __getitem__(self, index: int) -> Expr:
        return self.fields[index]

    def astuple(self) -> Tuple:
        """The tuple itself (TupleWrapper compatibility)."""
        return self

    def _short(self) -> str:
        return f"tuple of {len(self.fields)}"

    def __repr__(self) -> str:
        return f"Tuple({len(self.fields)} fields)"


class TupleGetItem(Expr):
    """Field ``index`` of a tuple-typed expression."""

    __slots__ = ("index", "tuple_value")
    _fields = ("tuple_value", "index")
    tuple_value: Expr
    index: int

    def __init__(self, tuple_value: Expr, index: int, span: Any = None):
        self._set(tuple_value=tuple_value, index=int(index))

    def _short(self) -> str:
        return f"field {self.index} of {self.tuple_value._short()}"

    def __repr__(self) -> str:
        return f"TupleGetItem({self.index})"


class Function(Expr):
    """A function: parameters, a body, an optional return type and attributes.

    Parameters
    ----------
    params : sequence of Var
        The parameters.
    body : Expr
        The body.
    ret_type : Type, optional
        The declared return type (filled in by InferType).
    type_params : ignored
        Accepted for TVM compatibility.
    attrs : mapping, optional
        Function attributes (``Compiler``, ``Primitive``, ``global_symbol``, ...).
    """

    __slots__ = ("attrs", "body", "params", "ret_type")
    _fields = ("params", "body", "ret_type", "attrs")
    params: tuple[Var, ...]
    body: Expr
    ret_type: Type | None
    attrs: DictAttrs

    def __init__(
        self,
        params: Sequence[Var],
        body: Expr,
        ret_type: Type | None = None,
        type_params: Any = None,
        attrs: Mapping[str, Any] | DictAttrs | None = None,
        span: Any = None,
    ):
        params = tuple(params)
        for p in params:
            if not isinstance(p, Var):
                raise TypeError(f"function parameters must be relay.var, got {type(p).__name__}")
        if not isinstance(attrs, DictAttrs):
            attrs = DictAttrs(attrs)
        self._set(params=params, body=_to_expr(body), ret_type=ret_type, attrs=attrs)

    def with_attr(self, key: str | Mapping[str, Any], value: Any = None) -> Function:
        """A copy with attribute ``key`` set to ``value`` (or several, given a dict)."""
        attrs = self.attrs
        items = key.items() if isinstance(key, Mapping) else [(key, value)]
        for k, v in items:
            attrs = attrs.with_attr(k, v)
        return Function(self.params, self.body, self.ret_type, attrs=attrs)

    def __call__(self, *args: Expr) -> Call:
        """A call of this function on ``args``."""
        return Call(self, list(args))

    def without_attr(self, key: str) -> Function:
        """A copy without attribute ``key``."""
        return Function(self.params, self.body, self.ret_type, attrs=self.attrs.without(key))

    def func_type(self) -> FuncType:
        """The function's type from its parameter annotations and its body's checked type."""
        ret = self.ret_type or self.body.checked_type
        return FuncType(tuple(_var_type(p) for p in self.params), ret)

    def _short(self) -> str:
        return "fn(" + ", ".join(p._short() for p in self.params) + ")"

    def __repr__(self) -> str:
        return f"Function({', '.join(p.name_hint for p in self.params)})"


class GlobalVar(Expr):
    """The name of a function in an :class:`~kiln.ir.module.IRModule` (equal by name)."""

    __slots__ = ("name_hint",)
    _fields = ("name_hint",)
    name_hint: str

    def __init__(self, name_hint: str, type_annot: Any = None):
        self._set(name_hint=str(name_hint))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GlobalVar) and other.name_hint == self.name_hint

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("GlobalVar", self.name_hint))

    def __call__(self, *args: Expr) -> Call:
        return Call(self, list(args))

    def _short(self) -> str:
        return f"@{self.name_hint}"

    def __repr__(self) -> str:
        return f'I.GlobalVar("{self.name_hint}")'


class If(Expr):
    """Control flow: ``then_branch`` if ``cond`` else ``else_branch`` (interpreter only)."""

    __slots__ = ("cond", "else_branch", "then_branch")
    _fields = ("cond", "then_branch", "else_branch")
    cond: Expr
    then_branch: Expr
    else_branch: Expr

    def __init__(self, cond: Expr, then_branch: Expr, else_branch: Expr):
        self._set(cond=cond, then_branch=then_branch, else_branch=else_branch)

    def __repr__(self) -> str:
        return "If(...)"


class Let(Expr):
    """``let var = value; body`` (interpreter only)."""

    __slots__ = ("body", "value", "var")
    _fields = ("var", "value", "body")
    var: Var
    value: Expr
    body: Expr

    def __init__(self, var: Var, value: Expr, body: Expr):
        self._set(var=var, value=value, body=body)

    def __repr__(self) -> str:
        return f"Let({self.var.name_hint})"


def _var_type(v: Var) -> Type:
    if v.type_annotation is not None:
        return v.type_annotation
    return v.checked_type


def var(
    name_hint: str,
    type_annotation: Type | None = None,
    shape: Sequence[int] | None = None,
    dtype: str = "float32",
) -> Var:
    """Create a variable, as ``relay.var``.

    Parameters
    ----------
    name_hint : str
        The name.
    type_annotation : Type or str, optional
        Its type; a string is taken as a dtype of a 0-d tensor (relay does the same).
    shape : sequence of int, optional
        Shape of a tensor variable (with ``dtype``).
    dtype : str
        Dtype of a tensor variable.

    Examples
    --------
    >>> x = var("x", shape=(1, 3, 224, 224))
    """
    if type_annotation is not None and shape is not None:
        raise ValueError("give either type_annotation or shape, not both")
    if shape is not None:
        type_annotation = TensorType(tuple(int(s) for s in shape), dtype)
    elif isinstance(type_annotation, str):
        type_annotation = TensorType((), type_annotation)
    return Var(name_hint, type_annotation)


def const(value: Any, dtype: str | None = None) -> Constant:
    """Create a constant, as ``relay.const``; Python floats default to float32, ints to int32."""
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    if isinstance(dtype, TensorType):  # relay.const(0, relay.scalar_type("int32")), as NumPy reads it
        dtype = dtype.dtype
    if dtype is not None:
        return Constant(np.asarray(value, dtype=np_dtype(dtype)))
    if isinstance(value, (np.ndarray, np.number, np.bool_)):
        return Constant(np.asarray(value))
    if isinstance(value, bool):
        return Constant(np.asarray(value, dtype=np.bool_))
    if isinstance(value, int):
        return Constant(np.asarray(value, dtype=np.int32))
    arr = np.asarray(value)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    elif arr.dtype == np.int64:
        arr = arr.astype(np.int32)
    return Constant(arr)


class TupleWrapper:
    """A multi-output call seen as a sequence (``relay.split(...)[0]``, ``batch_norm(...)[0]``).

    Parameters
    ----------
    tuple_value : Expr
        The tuple-typed expression.
    size : int
        Number of fields.
    """

    def __init__(self, tuple_value: Expr, size: int):
        self.tuple_value = tuple_value
        self.size = size

    def astuple(self) -> Expr:
        """The underlying tuple-typed expression."""
        return self.tuple_value

    def astext(self) -> str:
        """Text form of the underlying expression."""
        return self.tuple_value.astext()

    def __getitem__(self, index: int) -> TupleGetItem:
        if not -self.size <= index < self.size:
            raise IndexError(f"tuple index {index} out of range for {self.size} fields")
        return TupleGetItem(self.tuple_value, index % self.size)

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Any:
        return (self[i] for i in range(self.size))

    def __repr__(self) -> str:
        return f"TupleWrapper({self.tuple_value!r}, {self.size})"
