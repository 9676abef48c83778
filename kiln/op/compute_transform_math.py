"""Tensor-expression computes of the matrix-structure operators (``kiln.op.transform_math``).

``trilu`` masks the last two axes against the runtime diagonal offset ``k``;
``matrix_set_diag`` reads the band of diagonals ``[k1, k2]`` from ``diagonal`` with TensorFlow's
alignment rules, as its reference does; ``einsum`` handles NumPy's equation language (explicit or
implicit output, ``...`` broadcast dimensions, repeated letters for diagonals and traces) as one
reduction over the contracted letters: floats in float64 rounded once (like the reference),
integers wrapping in their dtype, bools with and/or. Attached as ``get_op_def(name).compute``.
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.ir.types import Type
from kiln.op.compute_transform_common import accumulate_dtype, logical_any, tensor_type
from kiln.op.registry import get_op_def
from kiln.te import expr as E
from kiln.te.expr import PrimExpr

__all__ = ["einsum_labels"]

Label = str | int  # a letter, or the position of a broadcast ('...') dimension


def _trilu_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x, k = inputs

    def element(*i: PrimExpr) -> PrimExpr:
        offset = E.cast(i[-1], "int64") - E.cast(i[-2], "int64")
        bound = E.cast(k(), "int64")
        keep = offset >= bound if attrs.upper else offset <= bound
        return E.select(keep, x(*i), E.const(0, x.dtype))

    return te.compute(x.shape, element, name="T_trilu", tag="elemwise")


def _matrix_set_diag_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x, diagonal = inputs
    rows, cols = x.shape[-2:]
    k1, k2 = attrs.k1, attrs.k2
    max_len = min(rows + min(k2, 0), cols - max(k1, 0))

    def element(*i: PrimExpr) -> PrimExpr:
        *batch, r, c = i
        d = c - r
        zero = E.const(0)
        length = E.binary("min", cols - E.binary("max", d, zero), rows + E.binary("min", d, zero))
        aligned_right = E.select(d >= 0, E.const(attrs.super_diag_right_align),
                                 E.const(attrs.sub_diag_right_align))
        pos = E.select(aligned_right, max_len - length, zero) + r + E.binary("min", d, zero)
        band = (k2 - d,) if k1 != k2 else ()
        value = diagonal(*batch, *band, pos)
        return te.if_then_else(te.all(d >= k1, d <= k2), value, x(*i))

    return te.compute(x.shape, element, name="T_matrix_set_diag", tag="injective")


def einsum_labels(equation: str, ndims: list[int]) -> tuple[list[list[Label]], list[Label]]:
    """The axis labels of each operand and of the output of an einsum equation.

    Letters label themselves; the dimensions an ellipsis stands for are labelled by their
    position in the broadcast ellipsis shape (aligned to the right, as NumPy broadcasts).

    Parameters
    ----------
    equation : str
        NumPy einsum equation (already checked by the type relation).
    ndims : list of int
        Rank of each operand.

    Returns
    -------
    (list of list of label, list of label)
        Labels per operand axis and per output axis.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    spans = [n - len(t.replace("...", "")) if "..." in t else 0 for t, n in zip(terms, ndims)]
    width = max(spans, default=0)

    def expand(term: str, span: int) -> list[Label]:
        head, dots, tail = term.partition("...")
        middle: list[Label] = list(range(width - span, width)) if dots else []
        return [*head, *middle, *tail]

    operands = [expand(t, s) for t, s in zip(terms, spans)]
    if not arrow:
        letters = "".join(t.replace("...", "") for t in terms)
        rhs = ("..." if any("..." in t for t in terms) else "") + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1))
    return operands, expand(rhs, width)


def _einsum_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    out = tensor_type(out_type)
    operands, out_labels = einsum_labels(attrs.equation, [t.ndim for t in inputs])
    sizes: dict[Label, int] = {}
    for labels, t in zip(operands, inputs):
        for label, n in zip(labels, t.shape):
            sizes[label] = max(sizes.get(label, 1), n)
    contracted = [lb for labels in operands for lb in labels if lb not in out_labels]
    raxes = {lb: te.reduce_axis((0, sizes[lb]), name=f"k_{lb}") for lb in dict.fromkeys(contracted)}
    dtype = out.dtype
    acc = "bool" if dtype == "bool" else accumulate_dtype(dtype)

    def product(i: tuple[PrimExpr, ...]) -> PrimExpr:
        where: dict[Label, Any] = dict(zip(out_labels, i))
        where.update(raxes)
        value: PrimExpr | None = None
        for labels, t in zip(operands, inputs):
            coords = [E.const(0) if n == 1 and sizes[lb] != 1 else where[lb]
                      for lb, n in zip(labels, t.shape)]
            factor = E.cast(t(*coords), acc)
            if value is None:
                value = factor
            else:
                value = E.logical_and(value, factor) if acc == "bool" else value * factor
        assert value is not None
        return value

    if not raxes:
        return te.compute(out.shape, lambda *i: E.cast(product(i), dtype), name="T_einsum",
                          tag="injective")
    reducer = logical_any if acc == "bool" else te.sum
    total = te.compute(out.shape, lambda *i: reducer(product(i), axis=list(raxes.values())),
                       name="T_einsum_acc" if acc != dtype else "T_einsum", tag="comm_reduce")
    if acc == dtype:
        return total
    return te.compute(out.shape, lambda *i: E.cast(total(*i), dtype), name="T_einsum",
                      tag="elemwise")


def _register() -> None:
    get_op_def("trilu").compute = _trilu_compute
    get_op_def("matrix_set_diag").compute = _matrix_set_diag_compute
    get_op_def("einsum").compute = _einsum_compute


_register()
