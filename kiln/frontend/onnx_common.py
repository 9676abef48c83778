"""Shared machinery of the ONNX converters: the converter table, the per-node context, helpers.

A converter is a function ``fn(ctx: NodeContext) -> Expr | list[Expr | None]`` registered for one
or more ONNX op types with :func:`converter`. It builds relay expressions from ``ctx.inputs`` with
the operator builders of :mod:`kiln.op`; the importer then stamps every new call with the ONNX
node's name (provenance), folds what is constant, and binds the node's outputs. Converters never
need to care about names, folding or error wrapping.

Shapes are static: ``ctx.shape(i)`` is a tuple of ints, and values that decide shapes (a Reshape
target, Slice bounds, a TopK ``k``) are read with ``ctx.const_input(i)`` from the constant-value
tracker, which knows every initializer, Constant node and folded subgraph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import numpy_helper

from kiln.errors import FrontendError, UnsupportedOpError
from kiln.ir.expr import Constant, Expr
from kiln.ir.printer import format_type
from kiln.ir.types import TensorType, Type, as_dtype, np_dtype

__all__ = [
    "CONVERTERS",
    "ConverterSpec",
    "DynamicValueError",
    "InputDependentError",
    "NodeContext",
    "const",
    "converter",
    "normalize_axis",
    "onnx_dtype",
    "parse_attributes",
    "resolve_attributes",
    "scalar_like",
    "tensor_to_array",
]

ConvertResult = Expr | Sequence[Expr | None]
Converter = Callable[["NodeContext"], ConvertResult]
AttrCheck = Callable[[dict[str, Any], int], "str | None"]


class DynamicValueError(FrontendError):
    """A value that decides a shape is computed from graph inputs.

    Attributes
    ----------
    inputs : list of str
        The graph inputs it depends on; binding them with ``const_inputs=`` makes it static.
    """

    def __init__(self, message: str, inputs: list[str]):
        super().__init__(message)
        self.inputs = inputs


class InputDependentError(UnsupportedOpError):
    """An op Kiln can import only when some of its data is constant: an ``If`` condition, the data
    of NonZero/Unique/Compress (whose output shapes depend on it). ``inputs`` names the graph
    inputs that data is computed from."""

    def __init__(self, op_type: str, name: str, detail: str, opset: int, inputs: list[str]):
        super().__init__([(op_type, [name], detail)], opset)
        self.inputs = inputs


class ImporterLike(Protocol):
    """What a :class:`NodeContext` needs from the importer."""

    def type_of(self, expr: Expr) -> Type: ...

    def value_of(self, expr: Expr) -> np.ndarray | None: ...

    def inputs_of(self, expr: Expr) -> list[str]: ...


@dataclass(frozen=True)
class ConverterSpec:
    """How one ONNX op type is imported.

    Attributes
    ----------
    fn : callable
        ``fn(ctx) -> Expr | list[Expr | None]``: the converter.
    needs : tuple of str
        Relay operators the converter uses; a missing one makes the op unsupported up front.
    check : callable or None
        ``check(attrs, opset) -> str | None``: a reason the attribute values are unsupported.
    """

    fn: Converter
    needs: tuple[str, ...] = ()
    check: AttrCheck | None = None


CONVERTERS: dict[str, ConverterSpec] = {}


def converter(*op_types: str, needs: Sequence[str] = (),
              check: AttrCheck | None = None) -> Callable[[Converter], Converter]:
    """Register the decorated function as the converter of ``op_types``.

    Parameters
    ----------
    *op_types : str
        ONNX op types (default domain) the function converts.
    needs : sequence of str
        Relay operators it builds.
    check : callable, optional
        ``check(attrs, opset) -> reason | None`` run on every node before conversion starts.
    """

    def register(fn: Converter) -> Converter:
        for op_type in op_types:
            if op_type in CONVERTERS:
                raise ValueError(f"ONNX op {op_type} has two converters")
            CONVERTERS[op_type] = ConverterSpec(fn, tuple(needs), check)
        return fn

    return register


# --- dtypes and attributes -------------------------------------------------------------------

def onnx_dtype(elem_type: int, what: str) -> str:
    """Relay dtype of an ONNX element type; a FrontendError naming ``what`` if Kiln lacks it."""
    try:
        dtype = as_dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        known = elem_type in onnx.TensorProto.DataType.values()
        name = onnx.TensorProto.DataType.Name(elem_type) if known else str(elem_type)
        raise FrontendError(f"{what} has ONNX element type {name}, which Kiln does not support "
                            "(supported: bool, int2-64, uint2-64, float16, float32, float64, bfloat16, "
                            "float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz, float4 e2m1fn)") from None
    return dtype


def tensor_to_array(tensor: onnx.TensorProto, what: str) -> np.ndarray:
    """The value of a TensorProto (initializer or attribute) as a NumPy array."""
    onnx_dtype(tensor.data_type, what)
    try:
        arr = numpy_helper.to_array(tensor)
    except Exception as e:
        raise FrontendError(f"{what}: cannot read tensor data ({type(e).__name__}: {e})") from None
    return np.array(arr, order="C")


AttrProtos = dict[str, onnx.AttributeProto]


def resolve_attributes(node: onnx.NodeProto, caller: AttrProtos | None = None) -> AttrProtos:
    """A node's attributes by name; inside a function body, references to the caller's attributes
    (``ref_attr_name``) take the caller's value, or are left out when the caller does not set it."""
    out: dict[str, onnx.AttributeProto] = {}
    for a in node.attribute:
        if a.ref_attr_name:
            if caller is not None and a.ref_attr_name in caller:
                value = onnx.AttributeProto()
                value.CopyFrom(caller[a.ref_attr_name])
                value.name = a.name
                out[a.name] = value
            continue
        out[a.name] = a
    return out


def parse_attributes(attrs: dict[str, onnx.AttributeProto], what: str) -> dict[str, Any]:
    """Attributes as Python values (str, int, float, lists, arrays, graphs)."""
    out: dict[str, Any] = {}
    for name, a in attrs.items():
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        elif isinstance(value, onnx.TensorProto):
            value = tensor_to_array(value, f"{what} attribute {name!r}")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", errors="replace") for v in value]
        elif isinstance(value, list) and a.type == onnx.AttributeProto.TENSORS:
            value = [tensor_to_array(t, f"{what} attribute {name!r}") for t in value]
        out[name] = value
    return out


def const(value: Any, dtype: str | None = None) -> Constant:
    """A relay constant holding ``value`` (as ``dtype`` when given; floats stay as given)."""
    arr = np.asarray(value, dtype=np_dtype(dtype) if dtype is not None else None)
    return Constant(np.array(arr))


# --- the per-node context --------------------------------------------------------------------

class NodeContext:
    """Everything a converter sees of one ONNX node.

    Parameters
    ----------
    importer : ImporterLike
        Gives types and known constant values of expressions.
    node : onnx.NodeProto
        The node.
    name : str
        Its name (a generated one when the model has none).
    opset : int
        The default-domain opset it is converted under.
    raw_attrs : dict of str to onnx.AttributeProto
        The attributes as protos (references to a calling function's attributes resolved).
    inputs : list of Expr or None
        Converted inputs; None for omitted optional ones.
    in_function : bool
        Whether the node belongs to a function body being expanded.
    """

    def __init__(self, importer: ImporterLike, node: onnx.NodeProto, name: str, opset: int,
                 raw_attrs: dict[str, onnx.AttributeProto], inputs: list[Expr | None],
                 in_function: bool = False):
        self.importer = importer
        self.node = node
        self.name = name
        self.op_type = node.op_type
        self.opset = opset
        self.raw_attrs = raw_attrs
        self.attrs = parse_attributes(raw_attrs, f"{node.op_type} node {name!r}")
        self.inputs = inputs
        self.in_function = in_function

    # --- attributes and inputs ----------------------------------------------------------------
    def attr(self, key: str, default: Any = None) -> Any:
        """Attribute ``key``, or ``default`` when the node does not set it."""
        return self.attrs.get(key, default)

    @property
    def num_outputs(self) -> int:
        """Number of outputs the node declares (including omitted optional ones)."""
        return len(self.node.output)

    def wants_output(self, i: int) -> bool:
        """Whether output ``i`` is used (declared with a non-empty name)."""
        return i < len(self.node.output) and bool(self.node.output[i])

    def has_input(self, i: int) -> bool:
        """Whether input ``i`` is given."""
        return i < len(self.inputs) and self.inputs[i] is not None

    def input(self, i: int) -> Expr:
        """Input ``i``; a FrontendError when it is missing."""
        if not self.has_input(i):
            raise self.error(f"input {i} is required but not given")
        value = self.inputs[i]
        assert value is not None
        return value

    def optional_input(self, i: int) -> Expr | None:
        """Input ``i`` or None."""
        return self.inputs[i] if i < len(self.inputs) else None

    # --- types and values ---------------------------------------------------------------------
    def tensor_type(self, x: int | Expr) -> TensorType:
        """The tensor type of input ``x`` (an index) or of an expression."""
        expr = self.input(x) if isinstance(x, int) else x
        ty = self.importer.type_of(expr)
        if not isinstance(ty, TensorType):
            raise self.error(f"expected a tensor, got {format_type(ty)}")
        return ty

    def shape(self, x: int | Expr) -> tuple[int, ...]:
        """Static shape of input ``x`` or of an expression."""
        return self.tensor_type(x).shape

    def dtype(self, x: int | Expr) -> str:
        """Dtype of input ``x`` or of an expression."""
        return self.tensor_type(x).dtype

    def ndim(self, x: int | Expr) -> int:
        """Rank of input ``x`` or of an expression."""
        return len(self.shape(x))

    def value(self, x: int | Expr) -> np.ndarray | None:
        """The value of input ``x`` if it is known at import (constant), else None."""
        if isinstance(x, int):
            if not self.has_input(x):
                return None
            x = self.input(x)
        return self.importer.value_of(x)

    def const_input(self, i: int, what: str) -> np.ndarray:
        """The value of input ``i``, which must be known at import (it decides a shape)."""
        if not self.has_input(i):
            raise self.error(f"input {i} ({what}) is required")
        value = self.value(i)
        if value is None:
            names = self.importer.inputs_of(self.input(i))
            shown = ", ".join(repr(n) for n in names)
            message = self.error(f"input {i} ({what}) must be known at import time, but it is computed "
                                 f"from graph input(s) {shown}; Kiln compiles static shapes: bind "
                                 f"them with const_inputs={{{shown.split(',')[0]}: ...}}")
            raise DynamicValueError(str(message), names)
        return value

    def ints(self, i: int, what: str) -> list[int]:
        """A constant integer input as a list of Python ints."""
        return [int(v) for v in np.asarray(self.const_input(i, what)).reshape(-1)]

    def scalar(self, i: int, what: str) -> float:
        """The (first) element of a constant input known at import, e.g. a scalar ``k``."""
        values = np.asarray(self.const_input(i, what)).reshape(-1)
        if values.size == 0:
            raise self.error(f"input {i} ({what}) is empty; one value is expected")
        return values[0].item()

    # --- errors -------------------------------------------------------------------------------
    def describe_inputs(self) -> str:
        """The input types, for error messages."""
        parts = []
        for x in self.inputs:
            if x is None:
                parts.append("-")
                continue
            try:
                parts.append(format_type(self.importer.type_of(x)))
            except Exception:  # an input whose own type is broken: show it as unknown
                parts.append("?")
        return "(" + ", ".join(parts) + ")"

    def error(self, message: str) -> FrontendError:
        """A FrontendError naming this node, its op type and input types."""
        return FrontendError(f"{self.op_type} node {self.name!r} (opset {self.opset}): {message}; "
                             f"input types {self.describe_inputs()}")

    def unsupported(self, detail: str) -> UnsupportedOpError:
        """An UnsupportedOpError for this node alone (found only during conversion)."""
        return UnsupportedOpError([(self.op_type, [self.name], detail)], self.opset)


# --- small builders shared by the families ---------------------------------------------------

def normalize_axis(ctx: NodeContext, axis: int, ndim: int, what: str = "axis") -> int:
    """``axis`` in ``[0, ndim)``; a FrontendError naming the node when out of range."""
    if not -ndim <= axis < max(ndim, 1):
        raise ctx.error(f"{what} {axis} is out of range for a {ndim}-d input")
    return axis % ndim if ndim else 0


def scalar_like(ctx: NodeContext, value: float | int | bool, like: int | Expr) -> Constant:
    """A 0-d constant of the dtype of ``like``."""
    return const(value, ctx.dtype(like))
