"""Tensor-expression computes of the creating and repeating operators (``kiln.op.transform_fill``).

``broadcast_to``, ``tile``, ``repeat``, ``reverse``, ``reverse_sequence`` and ``meshgrid`` read
one input element per output element; ``arange``, ``full``, ``zeros``, ``ones`` and the ``*_like``
variants compute each element from constants (and the scalar fill value). As in the references,
``arange`` evaluates ``start + step * i`` in float64 for float steps (int64 otherwise) and then
converts, and ``reverse_sequence`` leaves positions past each sequence's length in place, treating
lengths above the axis size as the whole axis. Attached as ``get_op_def(name).compute``.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.ir.types import Type
from kiln.op.compute_transform_common import broadcast_index, clamp, tensor_type, tuple_types, unravel
from kiln.op.registry import get_op_def
from kiln.te import expr as E
from kiln.te.expr import PrimExpr

__all__: list[str] = []


def _broadcast_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    out = tensor_type(out_type)
    return te.compute(out.shape, lambda *i: x(*broadcast_index(x, out.shape, i)),
                      name="T_broadcast_to", tag="broadcast")


def _tile_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    out = tensor_type(out_type)
    off = out.ndim - x.ndim

    def element(*i: PrimExpr) -> PrimExpr:
        return x(*[E.const(0) if n == 1 else te.floormod(i[off + d], n)
                   for d, n in enumerate(x.shape)])

    return te.compute(out.shape, element, name="T_tile", tag="broadcast")


def _repeat_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    out = tensor_type(out_type)
    r = max(attrs.repeats, 1)
    if attrs.axis is None:
        def flat_element(i: PrimExpr) -> PrimExpr:
            return x(*unravel(te.floordiv(i, r), x.shape))

        return te.compute(out.shape, flat_element, name="T_repeat", tag="broadcast")
    axis = attrs.axis % x.ndim

    def element(*i: PrimExpr) -> PrimExpr:
        return x(*i[:axis], te.floordiv(i[axis], r), *i[axis + 1:])

    return te.compute(out.shape, element, name="T_repeat", tag="broadcast")


def _reverse_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    axes = set(range(x.ndim)) if attrs.axis is None else {attrs.axis % x.ndim}

    def element(*i: PrimExpr) -> PrimExpr:
        return x(*[x.shape[d] - 1 - c if d in axes else c for d, c in enumerate(i)])

    return te.compute(x.shape, element, name="T_reverse", tag="injective")


def _reverse_sequence_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x, lengths = inputs
    seq, batch = attrs.seq_axis % x.ndim, attrs.batch_axis % x.ndim
    n = x.shape[seq]

    def element(*i: PrimExpr) -> PrimExpr:
        length = E.cast(clamp(E.cast(lengths(i[batch]), "int64"), 0, n), "int32")
        pos = i[seq]
        source = E.select(te.any(length <= 1, pos >= length), pos, length - 1 - pos)
        return x(*i[:seq], source, *i[seq + 1:])

    return te.compute(x.shape, element, name="T_reverse_sequence", tag="injective")


def _arange_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    out = tensor_type(out_type)
    work = "float64" if isinstance(attrs.step, float) else "int64"
    start, step = E.const(attrs.start, work), E.const(attrs.step, work)
    return te.compute(out.shape, lambda i: E.cast(start + step * E.cast(i, work), out.dtype),
                      name="T_arange", tag="elemwise")


def _filled(value: Any, name: str) -> Any:
    """The compute of an op whose every element is ``value`` (a number, or None: the scalar
    fill value, the op's last input)."""
    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        out = tensor_type(out_type)
        element = E.cast(inputs[-1](), out.dtype) if value is None else E.const(value, out.dtype)
        return te.compute(out.shape, lambda *i: element, name=f"T_{name}", tag="elemwise")

    return compute


def _meshgrid_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> list[te.Tensor]:
    fields = tuple_types(out_type)
    swap = attrs.indexing == "xy" and len(inputs) >= 2
    results = []
    for k, (x, field) in enumerate(zip(inputs, fields)):
        axis = {0: 1, 1: 0}.get(k, k) if swap else k

        def element(*i: PrimExpr, x: te.Tensor = x, axis: int = axis) -> PrimExpr:
            return x(i[axis]) if x.ndim else x()

        results.append(te.compute(field.shape, element, name="T_meshgrid", tag="injective"))
    return results


def _collapse_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    from kiln.op.transform_fill import collapsed_axes

    x = inputs[0]
    out = tensor_type(out_type)
    axes = collapsed_axes(tuple(x.shape), tuple(out.shape), "collapse_sum")
    lead = x.ndim - out.ndim
    if not axes:
        return te.compute(out.shape, lambda *i: x(*i[-x.ndim:]) if x.ndim else x(),
                          name="T_collapse_sum", tag="elemwise")
    raxes = {a: te.reduce_axis((0, x.shape[a]), name=f"k{a}") for a in axes}

    def element(*i: PrimExpr) -> PrimExpr:
        coords = [raxes[d] if d in raxes else i[d - lead] for d in range(x.ndim)]
        return te.sum(x(*coords), axis=list(raxes.values()))

    return te.compute(out.shape, element, name="T_collapse_sum", tag="comm_reduce")


def _register() -> None:
    get_op_def("collapse_sum_to").compute = _collapse_compute
    get_op_def("collapse_sum_like").compute = _collapse_compute
    get_op_def("broadcast_to").compute = _broadcast_compute
    get_op_def("broadcast_to_like").compute = _broadcast_compute
    get_op_def("tile").compute = _tile_compute
    get_op_def("repeat").compute = _repeat_compute
    get_op_def("reverse").compute = _reverse_compute
    get_op_def("reverse_sequence").compute = _reverse_sequence_compute
    get_op_def("arange").compute = _arange_compute
    get_op_def("full").compute = _filled(None, "full")
    get_op_def("full_like").compute = _filled(None, "full_like")
    get_op_def("zeros").compute = _filled(0, "zeros")
    get_op_def("zeros_like").compute = _filled(0, "zeros_like")
    get_op_def("ones").compute = _filled(1, "ones")
    get_op_def("ones_like").compute = _filled(1, "ones_like")
    get_op_def("meshgrid").compute = _meshgrid_compute


_register()
