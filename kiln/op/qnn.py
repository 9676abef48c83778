"""Quantized operators (TVM's ``qnn`` dialect): ``qnn.quantize``, ``qnn.dequantize``,
``qnn.requantize``, ``qnn.add``, ``qnn.mul``, ``qnn.concatenate``, ``qnn.conv2d``, ``qnn.dense``.

Scales are float32 and zero points int32, scalars or 1-d per-channel vectors along ``axis``. The
arithmetic is TVM's: quantize rounds half away from zero; requantize rounds half up (TVM's
default ``UPWARD``; ``TONEAREST`` rounds half away from zero) and saturates to the output type;
``add`` and ``concatenate`` requantize their inputs to the output's parameters; ``mul`` multiplies
the centred inputs and requantizes with the product of their scales; ``conv2d`` and ``dense``
accumulate the centred inputs in int32. The references below compute exactly that in NumPy; the
plain-op lowering (:mod:`kiln.op.qnn_lower`, used by ``relay.qnn.transform.CanonicalizeOps``)
builds the same computation from ordinary operators.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr, Tuple
from kiln.ir.types import TensorType, Type, np_dtype
from kiln.op.conv import Conv2DAttrs, Conv2DTransposeAttrs
from kiln.op.nn import DenseAttrs
from kiln.op.registry import (
    OpPattern,
    broadcast_shapes,
    get_op_def,
    make_call,
    register_op,
    tensor_arg,
    tuple_arg,
)
from kiln.op.transform import ConcatenateAttrs

__all__ = [
    "BroadcastAttrs",
    "DequantizeAttrs",
    "QuantizeAttrs",
    "RequantizeAttrs",
    "add",
    "concatenate",
    "conv2d",
    "conv2d_transpose",
    "dense",
    "dequantize",
    "mul",
    "quantize",
    "requantize",
]


@attrs_class("relay.attrs.QuantizeAttrs")
class QuantizeAttrs(Attrs):
    """Attributes of ``qnn.quantize``."""

    out_dtype: str = "int8"
    axis: int = -1


@attrs_class("relay.attrs.DequantizeAttrs")
class DequantizeAttrs(Attrs):
    """Attributes of ``qnn.dequantize``."""

    axis: int = -1
    out_dtype: str = "float32"


@attrs_class("relay.attrs.RequantizeAttrs")
class RequantizeAttrs(Attrs):
    """Attributes of ``qnn.requantize`` (``rounding``: ``"None"`` is TVM's default, UPWARD)."""

    axis: int = -1
    rounding: str = "None"
    compute_dtype: str = "None"
    out_dtype: str = "int8"


@attrs_class("relay.attrs.BroadcastAttrs")
class BroadcastAttrs(Attrs):
    """Axes of per-channel parameters of ``qnn.add`` / ``qnn.mul``."""

    lhs_axis: int = -1
    rhs_axis: int = -1


_QUANT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32")


def dtype_range(dtype: str) -> tuple[int, int]:
    """The smallest and largest value of integer ``dtype``."""
    info = np.iinfo(np_dtype(dtype))
    return int(info.min), int(info.max)


# --- NumPy semantics (the references) ------------------------------------------------------------

def _along(v: Any, ndim: int, axis: int) -> np.ndarray:
    """A scalar or per-channel parameter shaped to broadcast along ``axis`` of ``ndim`` axes."""
    v = np.asarray(v)
    if v.ndim == 0 or (v.size == 1 and ndim == 0):
        return v.reshape(())
    if v.size == 1:
        return v.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = v.size
    return v.reshape(shape)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """Round half away from zero (C's ``round``)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def np_quantize(x: np.ndarray, scale: Any, zp: Any, axis: int,
                out_dtype: str) -> np.ndarray:
    """``clip(round(x / scale) + zp)`` in ``out_dtype``."""
    lo, hi = dtype_range(out_dtype)
    q = round_half_away(x.astype("float32") / _along(scale, x.ndim, axis).astype("float32"))
    q = q + _along(zp, x.ndim, axis)
    return np.clip(q, lo, hi).astype(out_dtype)


def np_dequantize(q: np.ndarray, scale: Any, zp: Any, axis: int,
                  out_dtype: str = "float32") -> np.ndarray:
    """``(q - zp) * scale``."""
    centred = q.astype("int32") - _along(zp, q.ndim, axis).astype("int32")
    return (centred.astype("float32") * _along(scale, q.ndim, axis).astype("float32")).astype(out_dtype)


def np_requantize(q: np.ndarray, in_scale: Any, in_zp: Any, out_scale: Any, out_zp: Any, axis: int,
                  out_dtype: str, rounding: str = "None") -> np.ndarray:
    """``clip(round((q - in_zp) * in_scale / out_scale) + out_zp)`` in ``out_dtype``."""
    nd = q.ndim
    centred = q.astype("int64") - _along(in_zp, nd, axis).astype("int64")
    ratio = (_along(in_scale, nd, axis).astype("float64")
             / _along(out_scale, nd, axis).astype("float64"))
    y = centred.astype("float64") * ratio
    r = round_half_away(y) if rounding == "TONEAREST" else np.floor(y + 0.5)
    r = r + _along(out_zp, nd, axis).astype("int64")
    lo, hi = dtype_range(out_dtype)
    return np.clip(r, lo, hi).astype(out_dtype)


# --- type relations -------------------------------------------------------------------------------

def _param(types: list[Type], i: int, op: str, what: str, dtype: str | None) -> TensorType:
    t = tensor_arg(types, i, op, what)
    if t.ndim > 1:
        raise KilnTypeError(f"{op}: {what} must be a scalar or a 1-d per-channel vector, got "
                            f"shape {t.shape}")
    if dtype is not None and t.dtype != dtype:
        raise KilnTypeError(f"{op}: {what} must be {dtype}, got {t.dtype}")
    return t


def _check_channels(op: str, data: TensorType, params: Sequence[TensorType], axis: int) -> None:
    if not params or data.ndim == 0:
        return
    if not -data.ndim <= axis < data.ndim:
        raise KilnTypeError(f"{op}: axis {axis} is out of range for data of shape {data.shape}")
    c = data.shape[axis % data.ndim]
    for p in params:
        if p.ndim == 1 and p.shape[0] not in (1, c):
            raise KilnTypeError(f"{op}: a per-channel parameter has {p.shape[0]} values but axis "
                                f"{axis} of {data.shape} has {c}")


def _check_int(op: str, t: TensorType, what: str) -> None:
    if t.dtype not in _QUANT_DTYPES:
        raise KilnTypeError(f"{op}: {what} must be one of {', '.join(_QUANT_DTYPES)}, got {t.dtype}")


def _quantize_rel(types: list[Type], attrs: QuantizeAttrs) -> Type:
    data = tensor_arg(types, 0, "qnn.quantize", "data")
    if data.dtype not in ("float32", "float16", "float64"):
        raise KilnTypeError(f"qnn.quantize: data must be float, got {data.dtype}")
    scale = _param(types, 1, "qnn.quantize", "output_scale", "float32")
    zp = _param(types, 2, "qnn.quantize", "output_zero_point", "int32")
    if attrs.out_dtype not in ("int8", "uint8", "int16", "uint16", "int32"):
        raise KilnTypeError(f"qnn.quantize: out_dtype {attrs.out_dtype!r} is not an integer type")
    _check_channels("qnn.quantize", data, [scale, zp], attrs.axis)
    return TensorType(data.shape, attrs.out_dtype)


def _dequantize_rel(types: list[Type], attrs: DequantizeAttrs) -> Type:
    data = tensor_arg(types, 0, "qnn.dequantize", "data")
    _check_int("qnn.dequantize", data, "data")
    scale = _param(types, 1, "qnn.dequantize", "input_scale", "float32")
    zp = _param(types, 2, "qnn.dequantize", "input_zero_point", "int32")
    _check_channels("qnn.dequantize", data, [scale, zp], attrs.axis)
    return TensorType(data.shape, attrs.out_dtype)


def _requantize_rel(types: list[Type], attrs: RequantizeAttrs) -> Type:
    op = "qnn.requantize"
    data = tensor_arg(types, 0, op, "data")
    _check_int(op, data, "data")
    params = [_param(types, 1, op, "input_scale", "float32"),
              _param(types, 2, op, "input_zero_point", "int32"),
              _param(types, 3, op, "output_scale", "float32"),
              _param(types, 4, op, "output_zero_point", "int32")]
    _check_channels(op, data, params, attrs.axis)
    if attrs.rounding not in ("None", "UPWARD", "TONEAREST"):
        raise KilnTypeError(f"{op}: rounding {attrs.rounding!r} is not UPWARD or TONEAREST")
    if attrs.out_dtype not in _QUANT_DTYPES:
        raise KilnTypeError(f"{op}: out_dtype {attrs.out_dtype!r} is not an integer type")
    return TensorType(data.shape, attrs.out_dtype)


def _binary_rel(op: str) -> Any:
    def rel(types: list[Type], attrs: BroadcastAttrs) -> Type:
        lhs, rhs = tensor_arg(types, 0, op, "lhs"), tensor_arg(types, 1, op, "rhs")
        if lhs.dtype != rhs.dtype:
            raise KilnTypeError(f"{op}: lhs is {lhs.dtype} but rhs is {rhs.dtype}")
        for i, what in enumerate(("lhs_scale", "lhs_zero_point", "rhs_scale", "rhs_zero_point",
                                  "output_scale", "output_zero_point")):
            _param(types, 2 + i, op, what, "float32" if "scale" in what else "int32")
        return TensorType(broadcast_shapes(lhs.shape, rhs.shape, op), lhs.dtype)

    return rel


def _fields(types: list[Type], i: int, op: str, what: str) -> list[TensorType]:
    t = types[i]
    if isinstance(t, TensorType):
        return [t]
    tup = tuple_arg(types, i, op)
    out = []
    for f in tup.fields:
        if not isinstance(f, TensorType):
            raise KilnTypeError(f"{op}: {what} must hold tensors")
        out.append(f)
    return out


def _concatenate_rel(types: list[Type], attrs: ConcatenateAttrs) -> Type:
    op = "qnn.concatenate"
    data = tuple_arg(types, 0, op)
    scales, zps = _fields(types, 1, op, "input_scales"), _fields(types, 2, op, "input_zero_points")
    if len(scales) != len(data.fields) or len(zps) != len(data.fields):
        raise KilnTypeError(f"{op}: {len(data.fields)} inputs but {len(scales)} scales and "
                            f"{len(zps)} zero points")
    _param(types, 3, op, "output_scale", "float32")
    _param(types, 4, op, "output_zero_point", "int32")
    out: Type = get_op_def("concatenate").type_rel([data], ConcatenateAttrs(axis=attrs.axis))
    return out


def _conv_like_rel(op: str, float_op: str) -> Any:
    def rel(types: list[Type], attrs: Any) -> Type:
        data, weight = tensor_arg(types, 0, op, "data"), tensor_arg(types, 1, op, "weight")
        _check_int(op, data, "data")
        _check_int(op, weight, "weight")
        _param(types, 2, op, "input_zero_point", "int32")
        _param(types, 3, op, "kernel_zero_point", "int32")
        _param(types, 4, op, "input_scale", "float32")
        _param(types, 5, op, "kernel_scale", "float32")
        out_dtype = attrs.out_dtype or "int32"
        out: Type = get_op_def(float_op).type_rel([TensorType(data.shape, "int32"),
                                                   TensorType(weight.shape, "int32")],
                                                  attrs.replace(out_dtype=out_dtype))
        return out

    return rel


# --- references -------------------------------------------------------------------------------------

def _ref_quantize(args: list[np.ndarray], attrs: QuantizeAttrs, out: Type) -> np.ndarray:
    return np_quantize(args[0], args[1], args[2], attrs.axis, attrs.out_dtype)


def _ref_dequantize(args: list[np.ndarray], attrs: DequantizeAttrs, out: Type) -> np.ndarray:
    return np_dequantize(args[0], args[1], args[2], attrs.axis, attrs.out_dtype)


def _ref_requantize(args: list[np.ndarray], attrs: RequantizeAttrs, out: Type) -> np.ndarray:
    q, s_in, z_in, s_out, z_out = args
    return np_requantize(q, s_in, z_in, s_out, z_out, attrs.axis, attrs.out_dtype, attrs.rounding)


def _ref_add(args: list[np.ndarray], attrs: BroadcastAttrs, out: Type) -> np.ndarray:
    lhs, rhs, ls, lz, rs, rz, os_, oz = args
    a = np_requantize(lhs, ls, lz, os_, oz, attrs.lhs_axis, "int32")
    b = np_requantize(rhs, rs, rz, os_, oz, attrs.rhs_axis, "int32")
    lo, hi = dtype_range(lhs.dtype.name)
    return np.clip(a.astype("int64") + b - np.asarray(oz).astype("int64"), lo, hi).astype(lhs.dtype)


def _ref_mul(args: list[np.ndarray], attrs: BroadcastAttrs, out: Type) -> np.ndarray:
    lhs, rhs, ls, lz, rs, rz, os_, oz = args
    a = lhs.astype("int32") - _along(lz, lhs.ndim, attrs.lhs_axis).astype("int32")
    b = rhs.astype("int32") - _along(rz, rhs.ndim, attrs.rhs_axis).astype("int32")
    prod = a * b
    scale = np.float32(np.asarray(ls).reshape(()) * np.asarray(rs).reshape(()))
    return np_requantize(prod, scale, np.int32(0), os_, oz, -1, lhs.dtype.name)


def _ref_concatenate(args: list[Any], attrs: ConcatenateAttrs, out: Type) -> np.ndarray:
    data, scales, zps, os_, oz = args
    scales = scales if isinstance(scales, (tuple, list)) else [scales]
    zps = zps if isinstance(zps, (tuple, list)) else [zps]
    parts = [np_requantize(x, s, z, os_, oz, -1, x.dtype.name) for x, s, z in zip(data, scales, zps)]
    return np.concatenate(parts, axis=attrs.axis)


def _ref_conv_like(float_op: str) -> Any:
    def reference(args: list[np.ndarray], attrs: Any, out: Type) -> np.ndarray:
        data, weight, dzp, kzp = args[:4]
        d = data.astype("int32") - np.asarray(dzp).astype("int32").reshape(())
        k = weight.astype("int32") - _kernel_zp(np.asarray(kzp).astype("int32"), weight, attrs)
        result: np.ndarray = get_op_def(float_op).reference(
            [d, k], attrs.replace(out_dtype=attrs.out_dtype or "int32"), out)
        return result

    return reference


def _kernel_zp(kzp: np.ndarray, weight: np.ndarray, attrs: Any) -> np.ndarray:
    """A scalar or per-output-channel kernel zero point shaped to broadcast against the weight."""
    if kzp.size == 1:
        return kzp.reshape(())
    layout = getattr(attrs, "kernel_layout", "OI")  # dense: (units, k)
    axis = layout.index("O") if "O" in layout else 0
    shape = [1] * weight.ndim
    shape[axis] = kzp.size
    return kzp.reshape(shape)


register_op("qnn.quantize", num_inputs=3, type_rel=_quantize_rel, reference=_ref_quantize,
            pattern=OpPattern.OPAQUE, attrs_type=QuantizeAttrs, layout="axis",
            doc="float to integers: clip(round(x / scale) + zero_point)")
register_op("qnn.dequantize", num_inputs=3, type_rel=_dequantize_rel, reference=_ref_dequantize,
            pattern=OpPattern.OPAQUE, attrs_type=DequantizeAttrs, layout="axis",
            doc="integers to float: (q - zero_point) * scale")
register_op("qnn.requantize", num_inputs=5, type_rel=_requantize_rel, reference=_ref_requantize,
            pattern=OpPattern.OPAQUE, attrs_type=RequantizeAttrs, layout="axis",
            doc="integers to integers of another scale and zero point")
register_op("qnn.add", num_inputs=8, type_rel=_binary_rel("qnn.add"), reference=_ref_add,
            pattern=OpPattern.OPAQUE, attrs_type=BroadcastAttrs, layout="broadcast",
            doc="quantized broadcasting add")
register_op("qnn.mul", num_inputs=8, type_rel=_binary_rel("qnn.mul"), reference=_ref_mul,
            pattern=OpPattern.OPAQUE, attrs_type=BroadcastAttrs, layout="broadcast",
            doc="quantized broadcasting multiply")
register_op("qnn.concatenate", num_inputs=5, type_rel=_concatenate_rel,
            reference=_ref_concatenate, pattern=OpPattern.OPAQUE, attrs_type=ConcatenateAttrs,
            layout="concatenate", doc="concatenate quantized tensors, requantized to the output")
register_op("qnn.conv2d", num_inputs=6, type_rel=_conv_like_rel("qnn.conv2d", "nn.conv2d"),
            reference=_ref_conv_like("nn.conv2d"), pattern=OpPattern.OPAQUE,
            attrs_type=Conv2DAttrs, kernel_layout="OIHW",
            doc="2-d convolution of zero-point-centred integers, accumulated in int32")
register_op("qnn.conv2d_transpose", num_inputs=6,
            type_rel=_conv_like_rel("qnn.conv2d_transpose", "nn.conv2d_transpose"),
            reference=_ref_conv_like("nn.conv2d_transpose"), pattern=OpPattern.OPAQUE,
            attrs_type=Conv2DTransposeAttrs, kernel_layout="IOHW",
            doc="2-d transposed convolution of zero-point-centred integers, in int32")
register_op("qnn.dense", num_inputs=6, type_rel=_conv_like_rel("qnn.dense", "nn.dense"),
            reference=_ref_conv_like("nn.dense"), pattern=OpPattern.OPAQUE, attrs_type=DenseAttrs,
            doc="dense layer of zero-point-centred integers, accumulated in int32")


# --- builders ---------------------------------------------------------------------------------------

def quantize(data: Expr, output_scale: Expr, output_zero_point: Expr, axis: int = -1,
             out_dtype: str = "int8") -> Call:
    """Quantize float ``data``: ``clip(round(data / scale) + zero_point)`` (``relay.qnn.op``)."""
    return make_call("qnn.quantize", [data, output_scale, output_zero_point],
                     QuantizeAttrs(out_dtype=str(out_dtype), axis=int(axis)))


def dequantize(data: Expr, input_scale: Expr, input_zero_point: Expr, axis: int = -1,
               out_dtype: str = "float32") -> Call:
    """Dequantize integer ``data``: ``(data - zero_point) * scale``."""
    return make_call("qnn.dequantize", [data, input_scale, input_zero_point],
                     DequantizeAttrs(axis=int(axis), out_dtype=str(out_dtype)))


def requantize(data: Expr, input_scale: Expr, input_zero_point: Expr, output_scale: Expr,
               output_zero_point: Expr, axis: int = -1, rounding: str = "None",
               compute_dtype: str = "None", out_dtype: str = "int8") -> Call:
    """Re-express integers of one scale and zero point in another (saturating)."""
    return make_call("qnn.requantize",
                     [data, input_scale, input_zero_point, output_scale, output_zero_point],
                     RequantizeAttrs(axis=int(axis), rounding=str(rounding),
                                     compute_dtype=str(compute_dtype), out_dtype=str(out_dtype)))


def _binary(name: str, lhs: Expr, rhs: Expr, params: Sequence[Expr], lhs_axis: int,
            rhs_axis: int) -> Call:
    return make_call(name, [lhs, rhs, *params], BroadcastAttrs(lhs_axis=int(lhs_axis),
                                                              rhs_axis=int(rhs_axis)))


def add(lhs: Expr, rhs: Expr, lhs_scale: Expr, lhs_zero_point: Expr, rhs_scale: Expr,
        rhs_zero_point: Expr, output_scale: Expr, output_zero_point: Expr, lhs_axis: int = -1,
        rhs_axis: int = -1) -> Call:
    """Quantized add: both inputs requantized to the output's parameters, then added."""
    return _binary("qnn.add", lhs, rhs, [lhs_scale, lhs_zero_point, rhs_scale, rhs_zero_point,
                                         output_scale, output_zero_point], lhs_axis, rhs_axis)


def mul(lhs: Expr, rhs: Expr, lhs_scale: Expr, lhs_zero_point: Expr, rhs_scale: Expr,
        rhs_zero_point: Expr, output_scale: Expr, output_zero_point: Expr, lhs_axis: int = -1,
        rhs_axis: int = -1) -> Call:
    """Quantized multiply: product of the centred inputs, requantized to the output."""
    return _binary("qnn.mul", lhs, rhs, [lhs_scale, lhs_zero_point, rhs_scale, rhs_zero_point,
                                         output_scale, output_zero_point], lhs_axis, rhs_axis)


def _tuple(values: Any) -> Expr:
    if isinstance(values, Expr):
        return values
    return Tuple(list(values))


def concatenate(data: Any, input_scales: Any, input_zero_points: Any, output_scale: Expr,
                output_zero_point: Expr, axis: int) -> Call:
    """Concatenate quantized tensors, each requantized to the output's parameters."""
    return make_call("qnn.concatenate", [_tuple(data), _tuple(input_scales),
                                         _tuple(input_zero_points), output_scale,
                                         output_zero_point], ConcatenateAttrs(axis=int(axis)))


def conv2d(data: Expr, kernel: Expr, input_zero_point: Expr, kernel_zero_point: Expr,
           input_scale: Expr, kernel_scale: Expr, kernel_size: Any, channels: Any,
           strides: Any = (1, 1), padding: Any = (0, 0), dilation: Any = (1, 1), groups: int = 1,
           data_layout: str = "NCHW", kernel_layout: str = "OIHW", out_layout: str = "",
           out_dtype: str = "int32") -> Call:
    """Quantized 2-d convolution: int32 convolution of the zero-point-centred inputs."""
    from kiln.op.conv import conv2d as float_conv

    ref = float_conv(data, kernel, strides, padding, dilation, groups, channels, kernel_size,
                     data_layout, kernel_layout, out_layout, out_dtype)
    return make_call("qnn.conv2d", [data, kernel, input_zero_point, kernel_zero_point,
                                    input_scale, kernel_scale], ref.attrs)


def conv2d_transpose(data: Expr, weight: Expr, input_zero_point: Expr, kernel_zero_point: Expr,
                     input_scale: Expr, kernel_scale: Expr, strides: Any = (1, 1),
                     padding: Any = (0, 0), dilation: Any = (1, 1), groups: int = 1,
                     channels: Any = None, kernel_size: Any = None, data_layout: str = "NCHW",
                     kernel_layout: str = "IOHW", out_layout: str = "",
                     output_padding: Any = (0, 0), out_dtype: str = "int32") -> Call:
    """Quantized 2-d transposed convolution (int32 accumulation of the centred inputs)."""
    from kiln.op.conv import conv2d_transpose as float_conv_t

    ref = float_conv_t(data, weight, strides, padding, dilation, groups, channels, kernel_size,
                       data_layout, kernel_layout, out_layout, output_padding, out_dtype)
    return make_call("qnn.conv2d_transpose", [data, weight, input_zero_point, kernel_zero_point,
                                              input_scale, kernel_scale], ref.attrs)


def dense(data: Expr, weight: Expr, input_zero_point: Expr, kernel_zero_point: Expr,
          input_scale: Expr, kernel_scale: Expr, units: Any = None,
          out_dtype: str = "int32") -> Call:
    """Quantized dense layer: int32 ``dense`` of the zero-point-centred inputs."""
    return make_call("qnn.dense", [data, weight, input_zero_point, kernel_zero_point,
                                   input_scale, kernel_scale],
                     DenseAttrs(units=None if units is None else int(units), out_dtype=out_dtype))

