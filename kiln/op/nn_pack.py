"""``nn.contrib_dense_pack``: dense with a weight pre-packed into column panels.

TVM's x86 AlterOpLayout turns ``nn.dense(data, weight)`` with a constant ``weight`` of shape
``(N, K)`` into ``nn.contrib_dense_pack(data, layout_transform(weight, "NC", "NC{n}n"))``; the
packed weight has shape ``(N // n, K, n)`` and ``packed[j // n, k, j % n] == weight[j, k]``, so a
kernel reads ``n`` consecutive output columns as one vector. FoldConstant packs the weight at
build time. Data is ``(M, K)`` (2-d only, as TVM), the result ``(M, N)``.

The TE compute (``T_dense_pack``, tag ``dense_pack``) is the plain reduction over ``K`` with the
packed index arithmetic; fast schedules match it by its tag.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from kiln import te
from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr
from kiln.ir.types import TensorType, Type, as_dtype
from kiln.op.compute_conv import accumulate_dtype, cast_output, tensor_type
from kiln.op.nn_common import acc_dtype, check_operand_dtypes, to_out
from kiln.op.registry import OpPattern, get_op_def, make_call, register_op, tensor_arg
from kiln.te import expr as E

__all__ = ["DensePackAttrs", "contrib_dense_pack", "packed_block"]

_OP = "nn.contrib_dense_pack"
_PACKED = re.compile(r"^NC([1-9][0-9]*)n$")


@attrs_class("relay.attrs.DensePackAttrs", always_print=("units",))
class DensePackAttrs(Attrs):
    """Attributes of ``nn.contrib_dense_pack`` (TVM's field order and defaults)."""

    units: int | None = None
    out_dtype: str = ""
    weight_layout: str = "NC"


def packed_block(weight_layout: str, weight: TensorType | None = None) -> int:
    """The panel width ``n`` of a packed weight layout ``"NC{n}n"``.

    Parameters
    ----------
    weight_layout : str
        The layout attribute, e.g. ``"NC8n"``.
    weight : TensorType, optional
        The weight's type, named in the error.

    Returns
    -------
    int
        ``n``.

    Raises
    ------
    KilnTypeError
        When the layout is not of the form ``NC{n}n``.
    """
    m = _PACKED.match(weight_layout)
    if m is None:
        shown = f" for weight {weight.shape} ({weight.dtype})" if weight is not None else ""
        raise KilnTypeError(f"{_OP}: weight_layout {weight_layout!r}{shown} is not a packed "
                            "layout NC{n}n (e.g. 'NC8n': weight shape (N // 8, K, 8))")
    return int(m.group(1))


def _dense_pack_rel(types: list[Type], attrs: DensePackAttrs) -> Type:
    data = tensor_arg(types, 0, _OP, "data")
    weight = tensor_arg(types, 1, _OP, "weight")
    check_operand_dtypes(_OP, data, weight, "data", "weight")
    n = packed_block(attrs.weight_layout, weight)
    shapes = f"data {data.shape} ({data.dtype}), weight {weight.shape} ({weight.dtype})"
    if data.ndim != 2 or weight.ndim != 3:
        raise KilnTypeError(f"{_OP}: needs 2-d data (M, K) and a 3-d packed weight (N // n, K, n), "
                            f"got {shapes}")
    if weight.shape[2] != n:
        raise KilnTypeError(f"{_OP}: weight_layout {attrs.weight_layout!r} packs {n} columns but "
                            f"the weight's last axis has {weight.shape[2]} ({shapes})")
    if data.shape[1] != weight.shape[1]:
        raise KilnTypeError(f"{_OP}: reduction dimensions differ: data gives K={data.shape[1]}, "
                            f"weight gives K={weight.shape[1]} ({shapes})")
    units = weight.shape[0] * n
    if attrs.units is not None and int(attrs.units) != units:
        raise KilnTypeError(f"{_OP}: units={attrs.units} but the packed weight gives "
                            f"{weight.shape[0]} x {n} = {units} ({shapes})")
    out_dtype = as_dtype(attrs.out_dtype) if attrs.out_dtype else data.dtype
    return TensorType((data.shape[0], units), out_dtype)


def _dense_pack_ref(args: list[np.ndarray], attrs: DensePackAttrs, out_type: Type) -> np.ndarray:
    data, packed = args
    blocks, k, n = packed.shape
    # packed[jo, k, ji] = weight[jo * n + ji, k]
    weight = packed.transpose(0, 2, 1).reshape(blocks * n, k)
    acc = acc_dtype(data.dtype, packed.dtype)
    return to_out(data.astype(acc) @ weight.astype(acc).T, out_type)


register_op(_OP, num_inputs=2, type_rel=_dense_pack_rel, reference=_dense_pack_ref,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=DensePackAttrs,
            doc="dense with a weight packed as (N // n, K, n) (layout NC{n}n)")


def _dense_pack_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    data, packed = inputs
    out = tensor_type(out_type, _OP)
    n = packed.shape[2]
    acc = accumulate_dtype((data.dtype, packed.dtype), out.dtype)
    k = te.reduce_axis((0, data.shape[1]), name="k")

    def element(i: E.PrimExpr, j: E.PrimExpr) -> E.PrimExpr:
        # one panel (N == n): column j is at [0, k, j], no division to get in a vector's way
        w = packed[0, k.var, j] if packed.shape[0] == 1 else \
            packed[te.floordiv(j, n), k.var, te.floormod(j, n)]
        return te.sum(E.cast(data[i, k.var], acc) * E.cast(w, acc), axis=k)

    result = te.compute(out.shape, element, name="T_dense_pack", tag="dense_pack")
    return cast_output(result, out.dtype, "T_dense_pack")


get_op_def(_OP).compute = _dense_pack_compute


def contrib_dense_pack(data: Expr, weight: Expr, weight_layout: str = "NC", units: int | None = None,
                       out_dtype: str = "") -> Call:
    """Dense with a pre-packed weight (``relay.nn.contrib_dense_pack``).

    Parameters
    ----------
    data : Expr
        ``(M, K)``.
    weight : Expr
        The packed weight ``(N // n, K, n)``: ``layout_transform(w, "NC", "NC{n}n")`` of a
        ``(N, K)`` dense weight.
    weight_layout : str
        ``"NC{n}n"`` with the weight's panel width ``n`` (TVM's default ``"NC"`` is rejected by
        the type relation, as in TVM).
    units : int, optional
        ``N`` (checked against the weight).
    out_dtype : str
        Result dtype (``""``: the data's dtype).

    Returns
    -------
    Call
        ``(M, N)``: ``data @ w.T``.

    Examples
    --------
    >>> x = relay.var("x", shape=(4, 64))  # doctest: +SKIP
    >>> w = relay.layout_transform(relay.const(np.ones((32, 64), "float32")), "NC", "NC8n")  # doctest: +SKIP
    >>> y = relay.nn.contrib_dense_pack(x, w, "NC8n", units=32)  # doctest: +SKIP
    """
    dtype = as_dtype(out_dtype) if out_dtype not in ("", None) else ""
    return make_call(_OP, [data, weight], DensePackAttrs(
        units=None if units is None else int(units), out_dtype=dtype, weight_layout=str(weight_layout)))
