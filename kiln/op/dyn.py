"""Value-specialized imports: a model whose shapes depend on input values.

An ONNX ``Reshape`` whose shape is a graph input, a ``ReduceSum`` whose axes are one, a ``TopK``
whose ``k`` is one: the output shape is known only once those values are. TVM imports such models
as ``dyn.*`` operators with ``?`` dims and runs them on its VM. Kiln's types are static, so the
importer keeps the model as one ``dyn.specialized_import`` call whose result type is the one the
model declares, and the executors (``relay.create_executor``) import and compile it again for each
distinct set of deciding values (cached), as a VM with shape specialization would.

``relay.build`` refuses such a module with the reason: a graph executor artifact has static shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.errors import KilnError, KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr, Function
from kiln.ir.types import TensorType, TupleType, Type
from kiln.op.registry import OpPattern, make_call, register_op

__all__ = ["SpecializedImport", "SpecializedImportAttrs", "ValueSpecializationError",
           "specialized_import", "specialized_import_call"]

OP_NAME = "dyn.specialized_import"


class ValueSpecializationError(KilnError):
    """A value-specialized module was given to something that needs static shapes."""


@dataclass(frozen=True)
class SpecializedImport:
    """How to import a model again with some of its inputs bound to values.

    Attributes
    ----------
    key : str
        Identifies the model and import options (equal keys import equally).
    label : str
        What the printer shows, e.g. ``onnx model 'graph' (sha256 1a2b3c4d)``.
    specialize : callable
        ``specialize(values, bound) -> (module, bound)``: the module with the inputs named in
        ``bound`` (and any others found to decide shapes, returned as the new ``bound``) replaced
        by their ``values``; its ``main`` takes the remaining inputs by name.
    """

    key: str
    label: str
    specialize: Callable[[Mapping[str, np.ndarray], frozenset[str]],
                         tuple[Any, frozenset[str]]] = field(compare=False, repr=False)

    def __repr__(self) -> str:
        return self.label


@attrs_class("relay.attrs.SpecializedImportAttrs")
class SpecializedImportAttrs(Attrs):
    """The model, its input names (one per argument), the inputs known to decide shapes, and the
    declared result types."""

    model: SpecializedImport
    input_names: tuple[str, ...]
    value_inputs: tuple[str, ...]
    out_types: tuple[TensorType, ...]


def _rel(args: list[Type], attrs: SpecializedImportAttrs) -> Type:
    if len(args) != len(attrs.input_names):
        raise KilnTypeError(f"{OP_NAME}: {len(args)} arguments for the {len(attrs.input_names)} "
                            f"inputs {', '.join(attrs.input_names)} of {attrs.model.label}")
    return attrs.out_types[0] if len(attrs.out_types) == 1 else TupleType(attrs.out_types)


def _no_reference(_arrays: list[np.ndarray], attrs: SpecializedImportAttrs, _ty: Type) -> Any:
    raise ValueSpecializationError(
        f"{OP_NAME} ({attrs.model.label}): its shapes depend on the values of "
        f"{', '.join(map(repr, attrs.value_inputs))}; run it with relay.create_executor(...).evaluate(), "
        "which imports it again for those values")


register_op(OP_NAME, num_inputs=-1, type_rel=_rel, reference=_no_reference,
            pattern=OpPattern.OPAQUE, attrs_type=SpecializedImportAttrs, stateful=True,
            doc="a model imported again, and compiled, for each set of shape-deciding input values")


def specialized_import(args: list[Expr], model: SpecializedImport, input_names: list[str],
                       value_inputs: list[str], out_types: list[TensorType]) -> Call:
    """The ``dyn.specialized_import`` call of ``model`` on ``args`` (one per name in
    ``input_names``), typed by the model's declared ``out_types``."""
    return make_call(OP_NAME, list(args), SpecializedImportAttrs(
        model, tuple(input_names), tuple(value_inputs), tuple(out_types)))


def specialized_import_call(fn: Function) -> tuple[Call, SpecializedImportAttrs] | None:
    """The ``dyn.specialized_import`` call that is ``fn``'s body, and its attrs; or None."""
    body = fn.body
    if isinstance(body, Call) and isinstance(body.attrs, SpecializedImportAttrs):
        return body, body.attrs
    return None
