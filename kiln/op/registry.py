"""The operator registry: one entry per operator.

An :class:`OpDef` holds everything Kiln knows about an operator: its attributes class, its type
relation (argument types and attrs to result type), its NumPy reference kernel (the oracle for every
test, the interpreter and the ``numpy`` target), its fusion pattern, and the optional hooks later
layers use (``compute`` for code generation, ``layout`` rules, ...). Operators are declared with
:func:`register_op` in one file per family (``elemwise.py``, ``nn.py``, ``reduce.py``, ...).

The table itself lives in the IR layer (:mod:`kiln.ir.op_table`, with the per-operator attribute
maps such as the ``target.<compiler>`` predicates): :func:`register_op` fills it, so ``Op.get``
and ``Op.op_def`` answer without importing this layer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

from kiln.errors import KilnError, KilnTypeError
from kiln.ir import op_table
from kiln.ir.attrs import Attrs
from kiln.ir.expr import Call, Expr, Op
from kiln.ir.types import TensorType, TupleType, Type

__all__ = [
    "FOLD_SCALE_KINDS",
    "LAYOUT_KINDS",
    "OpDef",
    "OpPattern",
    "all_ops",
    "get_op_def",
    "make_call",
    "register_op",
    "register_python_op",
]


class OpPattern(IntEnum):
    """How an operator may fuse with its neighbours (TVM's ``OpPatternKind``, same values)."""

    ELEMWISE = 0  # out[i] = f(in[i]) on same-shape inputs
    BROADCAST = 1  # elementwise with NumPy broadcasting
    INJECTIVE = 2  # each output element reads one input element (reshape, transpose, take, ...)
    COMM_REDUCE = 3  # commutative reduction over axes (sum, max, ...)
    OUT_ELEMWISE_FUSABLE = 4  # complex op whose output may absorb elementwise ops (conv2d, dense)
    TUPLE = 7  # tuple construction / projection
    OPAQUE = 8  # never fused (sort, topk, ...)


TypeRel = Callable[[list[Type], Any], Type]
Reference = Callable[[list[np.ndarray], Any, Type], Any]
# infer_args(arg_types with None where unknown, attrs, result type or None) -> implied arg types
ArgRel = Callable[[list[Type | None], Any, Type | None], list[Type | None]]


@dataclass
class OpDef:
    """Everything known about one operator.

    Attributes
    ----------
    name : str
        Relay name, e.g. ``"nn.conv2d"``.
    num_inputs : int
        Number of arguments, or -1 for a variable number (``concatenate`` takes a tuple: 1).
    type_rel : callable
        ``type_rel(arg_types, attrs) -> Type``; raises :class:`KilnTypeError` with the reason.
    reference : callable
        ``reference(arrays, attrs, out_type) -> ndarray | tuple[ndarray, ...]``.
    pattern : OpPattern
        Fusion pattern.
    attrs_type : type or None
        The :class:`~kiln.ir.attrs.Attrs` subclass of its attributes.
    compute : callable or None
        Tensor-expression compute used by code generation (registered by ``kiln.op.compute``).
    doc : str
        One-line description.
    layout : str
        How the op carries a value held in another layout (ConvertLayout's ``NHWC`` held as
        ``NCHW``, AlterOpLayout's ``NCHW{c}c``); one of :data:`LAYOUT_KINDS`. ``""``: its
        arguments are converted back to their own layouts first.
    kernel_layout : str
        Convolutions: the letters of the kernel (``"OIHW"``, ``"IOHW"`` for transposed ones);
        ConvertLayout can move the ones with 2 spatial axes to other data layouts.
    fold_scale : str
        Its role in FoldScaleAxis, one of :data:`FOLD_SCALE_KINDS` (``""``: scales stop here).
    stateful : bool
        Its result is not a function of its arguments alone (``nn.dropout`` in training): never
        folded or deduplicated.
    arguments : tuple of (name, type, description)
        Its documented arguments (TVM's ``add_argument``; operators declared in Python).
    reshape_only : bool
        It only reinterprets the shape of a dense buffer (TVM's ``TReshapeOp``): the value of
        ``reshape``, ``squeeze``, ... is its argument's buffer, so chains of them collapse and a
        fused function of only such ops needs no kernel.
    infer_args : callable or None
        The other direction of the type relation, for arguments whose type is not known (a
        ``relay.var`` without a type): ``infer_args(arg_types, attrs, out_type)`` gets the known
        argument types (``None`` for the unknown ones) and the result type when known, and returns
        the type it implies for each argument (``None`` where it cannot tell), as TVM's relations
        assign the weight of ``Conv2DRel`` or the bias of ``BiasAddRel``.
    """

    name: str
    num_inputs: int
    type_rel: TypeRel
    reference: Reference
    pattern: OpPattern
    attrs_type: type | None = None
    compute: Callable[..., Any] | None = None
    doc: str = ""
    layout: str = ""
    kernel_layout: str = ""
    fold_scale: str = ""
    stateful: bool = False
    infer_args: ArgRel | None = None
    reshape_only: bool = False
    arguments: tuple[tuple[str, str, str], ...] = ()

    @property
    def op(self) -> Op:
        """The IR node naming this operator."""
        return Op.get(self.name)


# How an op carries a value held in another layout (``OpDef.layout``):
LAYOUT_KINDS = {
    "": "takes its arguments in their own layouts",
    "elemwise": "element-wise, result shaped as its one argument: keeps the layout",
    "broadcast": "broadcasting: keeps the layout of a moved operand, brings the others to it",
    "axis": "per-axis op (attrs.axis; other arguments are vectors along it): remaps the axis",
    "bias_add": "as 'axis'; on a blocked channel axis it becomes an add of the blocked bias",
    "pool": "2-d pooling (attrs.layout): runs in the held layout",
    "pad": "nn.pad: pads the held layout",
    "concatenate": "concatenates in the held layout",
    "reduce": "reduction over attrs.axis: remaps the axes",
    "axes": "op over a list of axes (attrs.axis) keeping the shape: remaps the axes in order",
    "squeeze": "squeeze: remaps its axes; the result is held in what is left of the layout",
    "resize": "resizes the H and W axes named by attrs.layout: runs in the held layout",
    "transpose": "transpose: permutes the held value straight to the original result layout",
    "split": "split/topk along attrs.axis: every output is held in the input's layout",
    "strided_slice": "strided_slice: its bounds (or axes) are permuted to the held layout",
    "layout_transform": "a transform to the held layout is the held value itself",
    "depth_to_space": "DCR depth-to-space of a channel-blocked value stays blocked",
}
# What FoldScaleAxis does at an op (``OpDef.fold_scale``):
FOLD_SCALE_KINDS = {
    "": "a scale stops here",
    "activation": "commutes with a positive per-channel scale (relu, leaky_relu)",
    "add": "add/subtract: a scale passes when both sides can carry it",
    "bias_add": "the bias is scaled with the data",
    "multiply": "a multiply by a per-channel constant is the scale itself",
    "conv": "convolution: folds into the weight's O (backward) or I (forward) axis",
    "dense": "dense: folds into the weight's rows (backward) or columns (forward)",
}

def register_op(
    name: str,
    *,
    num_inputs: int,
    type_rel: TypeRel,
    reference: Reference,
    pattern: OpPattern,
    attrs_type: type | None = None,
    doc: str = "",
    layout: str | None = None,
    kernel_layout: str = "",
    fold_scale: str = "",
    stateful: bool = False,
    infer_args: ArgRel | None = None,
    reshape_only: bool = False,
) -> OpDef:
    """Declare an operator; returns its :class:`OpDef`.

    ``layout=None`` derives the layout behaviour from the pattern: ``"elemwise"`` for one-input
    ELEMWISE ops, ``"broadcast"`` for attribute-less BROADCAST ops of several inputs, else ``""``.
    """
    if layout is None:
        if pattern == OpPattern.ELEMWISE and num_inputs == 1:
            layout = "elemwise"
        elif pattern == OpPattern.BROADCAST and num_inputs >= 2 and attrs_type is None:
            layout = "broadcast"
        else:
            layout = ""
    for what, value, kinds in (("layout", layout, LAYOUT_KINDS),
                               ("fold_scale", fold_scale, FOLD_SCALE_KINDS)):
        if value not in kinds:
            raise ValueError(f"operator {name!r}: {what}={value!r} is not one of {sorted(kinds)}")
    op_def = OpDef(name, num_inputs, type_rel, reference, pattern, attrs_type, doc=doc, layout=layout,
                   kernel_layout=kernel_layout, fold_scale=fold_scale, stateful=stateful,
                   infer_args=infer_args, reshape_only=reshape_only)
    op_table.register_op_def(op_def)
    return op_def


def register_python_op(name: str, describe: str = "") -> OpDef:
    """Declare an operator from a script (TVM's ``relay.op.op.register``), to be given its
    arguments and type relation with the :class:`~kiln.ir.expr.Op` methods (``set_num_inputs``,
    ``add_type_rel``, ...). It type-checks and partitions like any operator; it has no kernel,
    so evaluating or compiling a call of it is an error naming it.

    Raises
    ------
    KilnError
        ``name`` is already registered.
    """
    if name in op_table.op_definitions():
        raise KilnError(f"Operator {name} is registered before")

    def no_relation(_types: list[Type], _attrs: Any) -> Type:
        raise KilnTypeError(f"operator {name} has no type relation yet (Op.add_type_rel)")

    def no_kernel(_arrays: list[np.ndarray], _attrs: Any, _ty: Type) -> Any:
        raise KilnError(f"operator {name} was declared in Python without a kernel: Kiln can "
                        "type-check and partition its calls (e.g. for an external compiler), not "
                        "evaluate them")

    return register_op(name, num_inputs=-1, type_rel=no_relation, reference=no_kernel,
                       pattern=OpPattern.OPAQUE, doc=describe.strip(), layout="")


def get_op_def(name: str) -> OpDef:
    """The registry entry of operator ``name`` (an ``UnknownOpError``, a ``KeyError``, if none)."""
    op_def: OpDef = op_table.op_definition(name)
    return op_def


def all_ops() -> dict[str, OpDef]:
    """Every registered operator, by name."""
    return op_table.op_definitions()


def make_call(
    name: str,
    args: Sequence[Expr],
    attrs: Attrs | None = None,
    source_names: Sequence[str] = (),
) -> Call:
    """Build a call of operator ``name``, checking the argument count and attrs class."""
    op_def = get_op_def(name)
    if op_def.num_inputs >= 0 and len(args) != op_def.num_inputs:
        raise KilnTypeError(f"{name} takes {op_def.num_inputs} argument(s), got {len(args)}")
    if op_def.attrs_type is not None and attrs is not None and not isinstance(attrs, op_def.attrs_type):
        raise TypeError(f"{name} takes {op_def.attrs_type.__name__}, got {type(attrs).__name__}")
    return Call(op_def.op, list(args), attrs, source_names=tuple(source_names))


# --- helpers for type relations ---------------------------------------------------------------

def tensor_arg(types: list[Type], i: int, op: str, what: str = "") -> TensorType:
    """Argument ``i`` as a TensorType, or a type error naming the op and argument."""
    if i >= len(types):
        raise KilnTypeError(f"{op}: missing argument {i}")
    ty = types[i]
    if not isinstance(ty, TensorType):
        label = what or f"argument {i}"
        raise KilnTypeError(f"{op}: {label} must be a tensor, got {ty}")
    return ty


def tuple_arg(types: list[Type], i: int, op: str) -> TupleType:
    """Argument ``i`` as a TupleType of tensors."""
    ty = types[i]
    if not isinstance(ty, TupleType) or not all(isinstance(f, TensorType) for f in ty.fields):
        raise KilnTypeError(f"{op}: argument {i} must be a tuple of tensors, got {ty}")
    return ty


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...], op: str = "") -> tuple[int, ...]:
    """NumPy broadcasting of two shapes, or a type error naming both."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            raise KilnTypeError(f"{op}: shapes {a} and {b} do not broadcast "
                                f"(dimension -{i}: {x} vs {y})")
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def normalize_axis(axis: int, ndim: int, op: str) -> int:
    """``axis`` in ``[0, ndim)``, accepting negative values; a type error when out of range."""
    if not -ndim <= axis < max(ndim, 1):
        raise KilnTypeError(f"{op}: axis {axis} is out of range for a {ndim}-d tensor")
    return axis % ndim if ndim else 0


# TVM's named type relations for operators declared in Python (``Op.add_type_rel("Identity")``).
op_table.register_type_relation("Identity", lambda types, attrs: types[0])
op_table.register_type_relation("Broadcast", lambda types, attrs: get_op_def("add").type_rel(types, None))
