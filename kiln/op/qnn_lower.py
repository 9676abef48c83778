"""Lowering of the ``qnn`` operators to plain ones (TVM's ``qnn.transform.CanonicalizeOps``).

:func:`lower_qnn` rewrites one typed ``qnn.*`` call into ordinary operators computing exactly the
NumPy semantics of :mod:`kiln.op.qnn`: rounding half away from zero (quantize, ``TONEAREST``) or
half up (requantize's default), saturation to the output type, int32 accumulation of
zero-point-centred operands for ``conv2d``/``dense``. Requantization runs in float64, whose 53-bit
mantissa holds every int32 product exactly, so it matches TVM's fixed-point arithmetic.
"""

from __future__ import annotations

from typing import Any

import kiln.op as K
from kiln.errors import KilnTypeError
from kiln.ir import const
from kiln.ir.attrs import Attrs
from kiln.ir.expr import Call, Expr, Op, Tuple
from kiln.ir.types import TensorType
from kiln.op.conv import Conv2DAttrs, Conv2DTransposeAttrs
from kiln.op.nn import DenseAttrs
from kiln.op.qnn import dtype_range
from kiln.op.registry import make_call

__all__ = ["QNN_LOWERINGS", "lower_qnn", "requantize_expr"]


def _tensor(e: Expr) -> TensorType:
    ty = e.checked_type
    if not isinstance(ty, TensorType):
        raise KilnTypeError(f"qnn lowering: expected a tensor, got {ty}")
    return ty


def _along(v: Expr, ndim: int, axis: int) -> Expr:
    """A scalar or per-channel parameter shaped to broadcast along ``axis`` of ``ndim`` axes."""
    if not v.has_type:  # built here from scalars (mul's product of scales)
        return v
    shape = _tensor(v).shape
    if len(shape) == 0:
        return v
    if len(shape) == 1 and shape[0] == 1:
        return K.reshape(v, ())
    full = [1] * ndim
    full[axis % ndim] = shape[0]
    return K.reshape(v, tuple(full))


def _saturate(x: Expr, dtype: str) -> Expr:
    lo, hi = dtype_range(dtype)
    return K.cast(K.clip(x, float(lo), float(hi)), dtype)


def quantize_expr(x: Expr, scale: Expr, zp: Expr, axis: int, out_dtype: str) -> Expr:
    """``clip(round(x / scale) + zp)`` in ``out_dtype``."""
    nd = _tensor(x).ndim
    y = K.divide(K.cast(x, "float32"), _along(scale, nd, axis))
    y = K.multiply(K.sign(y), K.floor(K.add(K.abs(y), const(0.5, "float32"))))
    y = K.add(y, K.cast(_along(zp, nd, axis), "float32"))
    return _saturate(y, out_dtype)


def dequantize_expr(q: Expr, scale: Expr, zp: Expr, axis: int, out_dtype: str) -> Expr:
    """``(q - zp) * scale`` in ``out_dtype``."""
    nd = _tensor(q).ndim
    centred = K.subtract(K.cast(q, "int32"), _along(zp, nd, axis))
    out = K.multiply(K.cast(centred, "float32"), _along(scale, nd, axis))
    return out if out_dtype == "float32" else K.cast(out, out_dtype)


def requantize_expr(q: Expr, in_scale: Expr, in_zp: Expr, out_scale: Expr, out_zp: Expr,
                    axis: int, out_dtype: str, rounding: str = "None",
                    nd: int | None = None) -> Expr:
    """``clip(round((q - in_zp) * in_scale / out_scale) + out_zp)`` in ``out_dtype``, in float64.

    ``nd`` is the rank of ``q`` (taken from its type when omitted).
    """
    rank = _tensor(q).ndim if nd is None else nd
    centred = K.subtract(K.cast(q, "float64"), K.cast(_along(in_zp, rank, axis), "float64"))
    ratio = K.divide(K.cast(_along(in_scale, rank, axis), "float64"),
                     K.cast(_along(out_scale, rank, axis), "float64"))
    y = K.multiply(centred, ratio)
    half = const(0.5, "float64")
    if rounding == "TONEAREST":
        r = K.multiply(K.sign(y), K.floor(K.add(K.abs(y), half)))
    else:
        r = K.floor(K.add(y, half))
    r = K.add(r, K.cast(_along(out_zp, rank, axis), "float64"))
    return _saturate(r, out_dtype)


def _quantize(call: Call) -> Expr:
    a: Any = call.attrs
    return quantize_expr(call.args[0], call.args[1], call.args[2], a.axis, a.out_dtype)


def _dequantize(call: Call) -> Expr:
    a: Any = call.attrs
    return dequantize_expr(call.args[0], call.args[1], call.args[2], a.axis, a.out_dtype)


def _requantize(call: Call) -> Expr:
    a: Any = call.attrs
    q, s_in, z_in, s_out, z_out = call.args
    return requantize_expr(q, s_in, z_in, s_out, z_out, a.axis, a.out_dtype, a.rounding)


def _add(call: Call) -> Expr:
    lhs, rhs, ls, lz, rs, rz, os_, oz = call.args
    a: Any = call.attrs
    dtype = _tensor(lhs).dtype
    x = requantize_expr(lhs, ls, lz, os_, oz, a.lhs_axis, "int32")
    y = requantize_expr(rhs, rs, rz, os_, oz, a.rhs_axis, "int32")
    total = K.subtract(K.add(x, y), oz)
    lo, hi = dtype_range(dtype)
    return K.cast(K.clip(total, float(lo), float(hi)), dtype)


def _mul(call: Call) -> Expr:
    lhs, rhs, ls, lz, rs, rz, os_, oz = call.args
    a: Any = call.attrs
    out = _tensor(call)
    x = K.subtract(K.cast(lhs, "int32"), _along(lz, _tensor(lhs).ndim, a.lhs_axis))
    y = K.subtract(K.cast(rhs, "int32"), _along(rz, _tensor(rhs).ndim, a.rhs_axis))
    scale = K.multiply(ls, rs)
    return requantize_expr(K.multiply(x, y), scale, const(0, "int32"), os_, oz, -1, out.dtype,
                           nd=out.ndim)


def _concatenate(call: Call) -> Expr:
    data, scales, zps, os_, oz = call.args
    if not isinstance(data, Tuple):
        raise KilnTypeError("qnn.concatenate lowering: the data must be a Tuple expression")
    scale_list = list(scales.fields) if isinstance(scales, Tuple) else [scales]
    zp_list = list(zps.fields) if isinstance(zps, Tuple) else [zps]
    parts = [requantize_expr(x, s, z, os_, oz, -1, _tensor(x).dtype)
             for x, s, z in zip(data.fields, scale_list, zp_list)]
    attrs: Any = call.attrs
    return K.concatenate(Tuple(parts), attrs.axis)


def _centred_kernel(kernel: Expr, kzp: Expr, layout: str) -> Expr:
    ndim = _tensor(kernel).ndim
    axis = layout.index("O") if "O" in layout else 0
    return K.subtract(K.cast(kernel, "int32"), _along(kzp, ndim, axis))


def _conv_like(name: str, attrs_type: type) -> Any:
    def lower(call: Call) -> Expr:
        data, kernel, dzp, kzp = call.args[:4]
        attrs: Any = call.attrs
        layout = getattr(attrs, "kernel_layout", "OI")
        d = K.subtract(K.cast(data, "int32"), _along(dzp, _tensor(data).ndim, 0))
        k = _centred_kernel(kernel, kzp, layout)
        new_attrs = attrs.replace(out_dtype=attrs.out_dtype or "int32")
        assert isinstance(new_attrs, attrs_type)
        assert isinstance(new_attrs, Attrs)
        return make_call(name, [d, k], new_attrs)

    return lower


QNN_LOWERINGS = {
    "qnn.quantize": _quantize,
    "qnn.dequantize": _dequantize,
    "qnn.requantize": _requantize,
    "qnn.add": _add,
    "qnn.mul": _mul,
    "qnn.concatenate": _concatenate,
    "qnn.conv2d": _conv_like("nn.conv2d", Conv2DAttrs),
    "qnn.conv2d_transpose": _conv_like("nn.conv2d_transpose", Conv2DTransposeAttrs),
    "qnn.dense": _conv_like("nn.dense", DenseAttrs),
}


def lower_qnn(call: Call) -> Expr | None:
    """Plain operators computing the typed ``qnn.*`` call ``call``; None for other calls."""
    if not isinstance(call.op, Op) or call.op.name not in QNN_LOWERINGS:
        return None
    return QNN_LOWERINGS[call.op.name](call)
