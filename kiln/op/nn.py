"""Neural-network operators: dense/matmul, bias, activations, softmax, dropout, flatten.

The normalisations (``batch_norm``, ``layer_norm``, ``instance_norm``, ``group_norm``, ``lrn``,
``l2_normalize``) live in :mod:`kiln.op.nn_norm` and the spatial rearrangements (``pad``,
``depth_to_space``, ``space_to_depth``, ``upsampling``, ``upsampling3d``) in
:mod:`kiln.op.nn_spatial`; this module registers its own operators, imports those two, and exports
every builder of the family (``relay.nn.dense``, ``relay.nn.batch_norm``, ...).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr, TupleGetItem, TupleWrapper
from kiln.ir.types import TensorType, TupleType, Type, as_dtype, is_float, is_int, tensor_of
from kiln.op.arg_types import axis_vectors, same_as_result
from kiln.op.nn_common import acc_dtype, along_axis, check_operand_dtypes, to_out
from kiln.op.nn_norm import batch_norm, group_norm, instance_norm, l2_normalize, layer_norm, lrn
from kiln.op.nn_spatial import depth_to_space, pad, space_to_depth, upsampling, upsampling3d
from kiln.op.registry import OpPattern, make_call, normalize_axis, register_op, tensor_arg

__all__ = [
    "batch_flatten",
    "batch_matmul",
    "batch_norm",
    "bias_add",
    "dense",
    "depth_to_space",
    "dropout",
    "dropout_raw",
    "fast_softmax",
    "group_norm",
    "instance_norm",
    "l2_normalize",
    "layer_norm",
    "leaky_relu",
    "log_softmax",
    "lrn",
    "matmul",
    "pad",
    "prelu",
    "relu",
    "softmax",
    "space_to_depth",
    "upsampling",
    "upsampling3d",
]


def float_arg(types: list[Type], i: int, op: str, what: str) -> TensorType:
    """Argument ``i`` as a floating-point tensor type.

    Parameters
    ----------
    types : list of Type
        Argument types.
    i : int
        Argument index.
    op, what : str
        Operator and argument named in errors.

    Returns
    -------
    TensorType
        The argument's type; a :class:`KilnTypeError` when it is not a float tensor.
    """
    ty = tensor_arg(types, i, op, what)
    if not is_float(ty.dtype):
        raise KilnTypeError(f"{op}: {what} must be a floating-point tensor, got {ty.dtype}")
    return ty


def _out_dtype(attrs: Any, default: str) -> str:
    return as_dtype(attrs.out_dtype) if attrs.out_dtype else default


# --- dense, matmul, batch_matmul ---------------------------------------------------------------

@attrs_class("relay.attrs.DenseAttrs", always_print=("units",))
class DenseAttrs(Attrs):
    """Attributes of ``nn.dense`` (TVM gives ``units`` no default, so it always prints)."""

    units: int | None = None
    out_dtype: str = ""


@attrs_class("relay.attrs.MatmulAttrs", always_print=("units",))
class MatmulAttrs(Attrs):
    """Attributes of ``nn.matmul`` (``units`` always prints)."""

    units: int | None = None
    out_dtype: str = ""
    transpose_a: bool = False
    transpose_b: bool = False


@attrs_class("relay.attrs.BatchMatmulAttrs")
class BatchMatmulAttrs(Attrs):
    """Attributes of ``nn.batch_matmul``."""

    out_dtype: str = ""
    transpose_a: bool = False
    transpose_b: bool = False


def _matmul_rel(name: str, types: list[Type], attrs: Any, transpose_a: bool,
                transpose_b: bool) -> Type:
    a_name, b_name = ("data", "weight") if name == "nn.dense" else ("tensor_a", "tensor_b")
    a = tensor_arg(types, 0, name, a_name)
    b = tensor_arg(types, 1, name, b_name)
    check_operand_dtypes(name, a, b, a_name, b_name)
    if a.ndim < 1 or (transpose_a and a.ndim < 2) or b.ndim != 2:
        raise KilnTypeError(f"{name}: needs a tensor of rank >= {2 if transpose_a else 1} and a "
                            f"2-d weight, got shapes {a.shape} and {b.shape}")
    k_a = a.shape[-2] if transpose_a else a.shape[-1]
    k_b, units = (b.shape[1], b.shape[0]) if transpose_b else (b.shape[0], b.shape[1])
    if k_a != k_b:
        raise KilnTypeError(f"{name}: reduction dimensions differ: {a.shape} gives {k_a}, weight "
                            f"{b.shape} gives {k_b} (transpose_a={transpose_a}, "
                            f"transpose_b={transpose_b})")
    if attrs.units is not None and int(attrs.units) != units:
        raise KilnTypeError(f"{name}: units={attrs.units} but weight {b.shape} gives {units}")
    shape = list(a.shape)
    if transpose_a:
        shape[-2] = a.shape[-1]
    shape[-1] = units
    return TensorType(tuple(shape), _out_dtype(attrs, a.dtype))


def _matmul_weight(types: list[Type | None], attrs: Any, transpose_a: bool,
                   transpose_b: bool) -> list[Type | None]:
    """TVM's ``MatmulRel``: ``units`` gives an unknown weight ``(units, K)`` (``(K, units)``
    without ``transpose_b``) in the data's dtype."""
    a = types[0]
    if not isinstance(a, TensorType) or attrs.units is None or a.ndim < (2 if transpose_a else 1):
        return [None, None]
    k, units = a.shape[-2] if transpose_a else a.shape[-1], int(attrs.units)
    return [None, TensorType((units, k) if transpose_b else (k, units), a.dtype)]


def _matmul_ref(a: np.ndarray, b: np.ndarray, transpose_a: bool, transpose_b: bool,
                out_type: Type) -> np.ndarray:
    acc = acc_dtype(a.dtype, b.dtype)
    a64, b64 = a.astype(acc), b.astype(acc)
    if transpose_a:
        a64 = np.swapaxes(a64, -1, -2)
    if transpose_b:
        b64 = np.swapaxes(b64, -1, -2)
    return to_out(np.matmul(a64, b64), out_type)


register_op("nn.dense", fold_scale="dense", num_inputs=2,
            type_rel=lambda types, attrs: _matmul_rel("nn.dense", types, attrs, False, True),
            reference=lambda args, attrs, out: _matmul_ref(args[0], args[1], False, True, out),
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=DenseAttrs,
            doc="data (..., K) times weight (units, K) transposed",
            infer_args=lambda types, attrs, out: _matmul_weight(types, attrs, False, True))
register_op("nn.matmul", num_inputs=2,
            type_rel=lambda types, attrs: _matmul_rel("nn.matmul", types, attrs, attrs.transpose_a,
                                                      attrs.transpose_b),
            reference=lambda args, attrs, out: _matmul_ref(args[0], args[1], attrs.transpose_a,
                                                           attrs.transpose_b, out),
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=MatmulAttrs,
            doc="matrix product with optional transposes; tensor_b is 2-d",
            infer_args=lambda types, attrs, out: _matmul_weight(types, attrs, attrs.transpose_a,
                                                                attrs.transpose_b))


def _batch_matmul_rel(types: list[Type], attrs: BatchMatmulAttrs) -> Type:
    name = "nn.batch_matmul"
    x = tensor_arg(types, 0, name, "tensor_a")
    y = tensor_arg(types, 1, name, "tensor_b")
    check_operand_dtypes(name, x, y, "tensor_a", "tensor_b")
    if x.ndim != 3 or y.ndim != 3:
        raise KilnTypeError(f"{name}: both operands must be 3-d, got {x.shape} and {y.shape}")
    xb, xi, xk = (x.shape[0], x.shape[2], x.shape[1]) if attrs.transpose_a else x.shape
    yb, yj, yk = (y.shape[0], y.shape[1], y.shape[2]) if attrs.transpose_b else \
        (y.shape[0], y.shape[2], y.shape[1])
    if xb != yb and 1 not in (xb, yb):
        raise KilnTypeError(f"{name}: batch dimensions of {x.shape} and {y.shape} do not match")
    if xk != yk:
        raise KilnTypeError(f"{name}: reduction dimensions differ: {x.shape} gives {xk}, "
                            f"{y.shape} gives {yk} (transpose_a={attrs.transpose_a}, "
                            f"transpose_b={attrs.transpose_b})")
    return TensorType((max(xb, yb), xi, yj), _out_dtype(attrs, x.dtype))


register_op("nn.batch_matmul", num_inputs=2, type_rel=_batch_matmul_rel,
            reference=lambda args, attrs, out: _matmul_ref(args[0], args[1], attrs.transpose_a,
                                                           attrs.transpose_b, out),
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=BatchMatmulAttrs,
            doc="batched matrix product of 3-d tensors (batch 1 broadcasts)")


# --- bias_add, activations ---------------------------------------------------------------------

@attrs_class("relay.attrs.BiasAddAttrs")
class BiasAddAttrs(Attrs):
    """Attributes of ``nn.bias_add``."""

    axis: int = 1


@attrs_class("relay.attrs.LeakyReluAttrs")
class LeakyReluAttrs(Attrs):
    """Attributes of ``nn.leaky_relu``."""

    alpha: float = 0.25


@attrs_class("relay.attrs.PReluAttrs")
class PReluAttrs(Attrs):
    """Attributes of ``nn.prelu``."""

    axis: int = 1


def channel_vector(types: list[Type], i: int, op: str, what: str, data: TensorType,
                   axis: int) -> int:
    """Check a per-channel vector argument (bias, alpha).

    Parameters
    ----------
    types : list of Type
        Argument types.
    i : int
        Index of the vector argument.
    op, what : str
        Operator and argument named in errors.
    data : TensorType
        The data type.
    axis : int
        The channel axis of ``data`` (negative counts from the end).

    Returns
    -------
    int
        The normalised axis; a :class:`KilnTypeError` unless the vector is
        ``Tensor[(data.shape[axis],), data.dtype]``.
    """
    axis = normalize_axis(axis, data.ndim, op)
    vec = tensor_arg(types, i, op, what)
    if vec.shape != (data.shape[axis],) or vec.dtype != data.dtype:
        raise KilnTypeError(f"{op}: {what} must be Tensor[({data.shape[axis]}), {data.dtype}] "
                            f"(axis {axis} of data {data.shape}), got {vec.shape} {vec.dtype}")
    return axis


def _bias_add_rel(types: list[Type], attrs: BiasAddAttrs) -> Type:
    data = tensor_arg(types, 0, "nn.bias_add", "data")
    channel_vector(types, 1, "nn.bias_add", "bias", data, attrs.axis)
    return data


def _bias_add_ref(args: list[np.ndarray], attrs: BiasAddAttrs, out_type: Type) -> np.ndarray:
    data, bias = args
    axis = normalize_axis(attrs.axis, data.ndim, "nn.bias_add")
    return to_out(data + along_axis(bias, data.ndim, axis), out_type)


register_op("nn.bias_add", num_inputs=2, type_rel=_bias_add_rel, reference=_bias_add_ref,
            pattern=OpPattern.BROADCAST, attrs_type=BiasAddAttrs, doc="add a bias along an axis",
            layout="bias_add", fold_scale="bias_add", infer_args=axis_vectors(1))


def _relu_rel(types: list[Type], attrs: Any) -> Type:
    data = tensor_arg(types, 0, "nn.relu", "data")
    if not (is_float(data.dtype) or is_int(data.dtype)):
        raise KilnTypeError(f"nn.relu: data must be numeric, got {data.dtype}")
    return data


register_op("nn.relu", fold_scale="activation", num_inputs=1, type_rel=_relu_rel,
            reference=lambda args, attrs, out: to_out(np.maximum(args[0], 0), out),
            pattern=OpPattern.ELEMWISE, doc="max(x, 0)", infer_args=same_as_result)
register_op("nn.leaky_relu", fold_scale="activation", num_inputs=1,
            type_rel=lambda types, attrs: float_arg(types, 0, "nn.leaky_relu", "data"),
            reference=lambda args, attrs, out: to_out(
                np.where(args[0] > 0, args[0].astype(np.float64),
                         attrs.alpha * args[0].astype(np.float64)), out),
            pattern=OpPattern.ELEMWISE, attrs_type=LeakyReluAttrs, doc="x if x > 0 else alpha * x",
            infer_args=same_as_result)


def _prelu_rel(types: list[Type], attrs: PReluAttrs) -> Type:
    data = float_arg(types, 0, "nn.prelu", "data")
    channel_vector(types, 1, "nn.prelu", "alpha", data, attrs.axis)
    return data


def _prelu_ref(args: list[np.ndarray], attrs: PReluAttrs, out_type: Type) -> np.ndarray:
    data, alpha = args
    axis = normalize_axis(attrs.axis, data.ndim, "nn.prelu")
    x = data.astype(np.float64)
    return to_out(np.where(x > 0, x, along_axis(alpha.astype(np.float64), x.ndim, axis) * x), out_type)


register_op("nn.prelu", layout="axis", num_inputs=2, type_rel=_prelu_rel, reference=_prelu_ref,
            pattern=OpPattern.BROADCAST, attrs_type=PReluAttrs,
            doc="x if x > 0 else alpha[channel] * x", infer_args=axis_vectors(1))


# --- softmax family ----------------------------------------------------------------------------

@attrs_class("relay.attrs.SoftmaxAttrs")
class SoftmaxAttrs(Attrs):
    """Attributes of ``nn.softmax``, ``nn.fast_softmax`` and ``nn.log_softmax``."""

    axis: int = -1


def _softmax_ref(args: list[np.ndarray], attrs: SoftmaxAttrs, out_type: Type,
                 log: bool) -> np.ndarray:
    x = args[0].astype(np.float64)
    axis = normalize_axis(attrs.axis, x.ndim, "nn.softmax")
    shifted = x - x.max(axis=axis, keepdims=True)
    total = np.exp(shifted).sum(axis=axis, keepdims=True)
    return to_out(shifted - np.log(total) if log else np.exp(shifted) / total, out_type)


def _register_softmax(name: str, log: bool, doc: str) -> None:
    def rel(types: list[Type], attrs: SoftmaxAttrs) -> Type:
        data = float_arg(types, 0, name, "data")
        normalize_axis(attrs.axis, data.ndim, name)
        return data

    register_op(name, num_inputs=1, type_rel=rel, layout="axis",
                reference=lambda args, attrs, out: _softmax_ref(args, attrs, out, log),
                pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=SoftmaxAttrs, doc=doc)


_register_softmax("nn.softmax", False, "exp(x) / sum(exp(x)) along an axis")
_register_softmax("nn.fast_softmax", False, "softmax (approximate exp in compiled code)")
_register_softmax("nn.log_softmax", True, "log(softmax(x)) along an axis")


# --- dropout, batch_flatten --------------------------------------------------------------------

@attrs_class("relay.attrs.DropoutAttrs")
class DropoutAttrs(Attrs):
    """Attributes of ``nn.dropout``."""

    rate: float = 0.5


def _dropout_rel(types: list[Type], attrs: DropoutAttrs) -> Type:
    data = tensor_arg(types, 0, "nn.dropout", "data")
    return TupleType((data, data))


register_op("nn.dropout", stateful=True, num_inputs=1, type_rel=_dropout_rel,
            reference=lambda args, attrs, out: (args[0].copy(), np.ones_like(args[0])),
            pattern=OpPattern.OPAQUE, attrs_type=DropoutAttrs,
            doc="inference dropout: (data, all-ones mask)")


def _batch_flatten_rel(types: list[Type], attrs: Any) -> Type:
    data = tensor_arg(types, 0, "nn.batch_flatten", "data")
    if data.ndim < 1:
        raise KilnTypeError("nn.batch_flatten: data must have a batch axis, got a 0-d tensor")
    return TensorType((data.shape[0], int(np.prod(data.shape[1:], dtype=np.int64))), data.dtype)


register_op("nn.batch_flatten", num_inputs=1, type_rel=_batch_flatten_rel,
            reference=lambda args, attrs, out: args[0].reshape(tensor_of(out).shape).copy(),
            pattern=OpPattern.INJECTIVE, doc="reshape to (batch, everything else)",
            reshape_only=True)


# --- builders ------------------------------------------------------------------------------------

def _dtype(out_dtype: Any) -> str:
    return as_dtype(out_dtype) if out_dtype not in ("", None) else ""


def dense(data: Expr, weight: Expr, units: int | None = None, out_dtype: str = "") -> Call:
    """Fully connected layer ``data @ weight.T`` (``relay.nn.dense``).

    Parameters
    ----------
    data : Expr
        ``(..., in_dim)``.
    weight : Expr
        ``(units, in_dim)``.
    units : int, optional
        Number of output units (checked against the weight).
    out_dtype : str
        Result dtype (``""``: the data's dtype).

    Returns
    -------
    Call
        ``(..., units)``.
    """
    units = None if units is None else int(units)
    return make_call("nn.dense", [data, weight], DenseAttrs(units, _dtype(out_dtype)))


def matmul(tensor_a: Expr, tensor_b: Expr, units: int | None = None, out_dtype: str = "",
           transpose_a: bool = False, transpose_b: bool = False) -> Call:
    """Matrix product ``op(a) @ op(b)`` with a 2-d ``tensor_b`` (``relay.nn.matmul``).

    As TVM, ``transpose_a=False, transpose_b=True`` builds ``nn.dense``.

    Parameters
    ----------
    tensor_a : Expr
        ``(..., M, K)`` (or ``(..., K, M)`` with ``transpose_a``).
    tensor_b : Expr
        ``(K, N)`` (or ``(N, K)`` with ``transpose_b``).
    units : int, optional
        ``N`` (checked against ``tensor_b``).
    out_dtype : str
        Result dtype (``""``: ``tensor_a``'s dtype).
    transpose_a, transpose_b : bool
        Transpose the last two axes of an operand.

    Returns
    -------
    Call
        ``(..., M, N)``.
    """
    if not transpose_a and transpose_b:
        return dense(tensor_a, tensor_b, units, out_dtype)
    units = None if units is None else int(units)
    return make_call("nn.matmul", [tensor_a, tensor_b],
                     MatmulAttrs(units, _dtype(out_dtype), bool(transpose_a), bool(transpose_b)))


def batch_matmul(tensor_a: Expr, tensor_b: Expr, out_dtype: str = "", transpose_a: bool = False,
                 transpose_b: bool = True) -> Call:
    """Batched matrix product of 3-d tensors (``relay.nn.batch_matmul``; TVM's default
    ``transpose_b=True`` computes ``a @ b^T``).

    Parameters
    ----------
    tensor_a : Expr
        ``(B, M, K)`` (or ``(B, K, M)`` with ``transpose_a``).
    tensor_b : Expr
        ``(B, N, K)`` with ``transpose_b`` (default), else ``(B, K, N)``; batch 1 broadcasts.
    out_dtype : str
        Result dtype (``""``: ``tensor_a``'s dtype).
    transpose_a, transpose_b : bool
        Transpose the last two axes of an operand.

    Returns
    -------
    Call
        ``(B, M, N)``.
    """
    return make_call("nn.batch_matmul", [tensor_a, tensor_b],
                     BatchMatmulAttrs(_dtype(out_dtype), bool(transpose_a), bool(transpose_b)))


def bias_add(data: Expr, bias: Expr, axis: int = 1) -> Call:
    """Add the 1-d ``bias`` along ``axis`` of ``data`` (``relay.nn.bias_add``).

    Parameters
    ----------
    data : Expr
        Any tensor.
    bias : Expr
        ``(data.shape[axis],)``.
    axis : int
        The channel axis (negative counts from the end).

    Returns
    -------
    Call
        ``data + bias`` broadcast along ``axis``.
    """
    return make_call("nn.bias_add", [data, bias], BiasAddAttrs(int(axis)))


def relu(data: Expr) -> Call:
    """Rectified linear unit ``max(data, 0)`` (``relay.nn.relu``).

    Parameters
    ----------
    data : Expr
        Input.

    Returns
    -------
    Call
        The activation.
    """
    return make_call("nn.relu", [data])


def leaky_relu(data: Expr, alpha: float = 0.01) -> Call:
    """``data`` where positive, else ``alpha * data`` (``relay.nn.leaky_relu``).

    Parameters
    ----------
    data : Expr
        Floating-point input.
    alpha : float
        Slope of the negative part.

    Returns
    -------
    Call
        The activation.
    """
    return make_call("nn.leaky_relu", [data], LeakyReluAttrs(float(alpha)))


def prelu(data: Expr, alpha: Expr, axis: int = 1) -> Call:
    """Parametric ReLU with one slope per channel (``relay.nn.prelu``).

    Parameters
    ----------
    data : Expr
        Floating-point input.
    alpha : Expr
        ``(data.shape[axis],)`` slopes.
    axis : int
        The channel axis.

    Returns
    -------
    Call
        The activation.
    """
    return make_call("nn.prelu", [data, alpha], PReluAttrs(int(axis)))


def softmax(data: Expr, axis: int = -1) -> Call:
    """Softmax along ``axis`` (``relay.nn.softmax``).

    Parameters
    ----------
    data : Expr
        Floating-point input.
    axis : int
        The normalised axis.

    Returns
    -------
    Call
        Probabilities summing to 1 along ``axis``.
    """
    return make_call("nn.softmax", [data], SoftmaxAttrs(int(axis)))


def fast_softmax(data: Expr, axis: int = -1) -> Call:
    """Softmax that compiled code may compute with a fast ``exp`` (``relay.nn.fast_softmax``).

    Parameters
    ----------
    data : Expr
        Floating-point input.
    axis : int
        The normalised axis.

    Returns
    -------
    Call
        Probabilities summing to 1 along ``axis``.
    """
    return make_call("nn.fast_softmax", [data], SoftmaxAttrs(int(axis)))


def log_softmax(data: Expr, axis: int = -1) -> Call:
    """``log(softmax(data))`` along ``axis``, computed stably (``relay.nn.log_softmax``).

    Parameters
    ----------
    data : Expr
        Floating-point input.
    axis : int
        The normalised axis.

    Returns
    -------
    Call
        Log-probabilities.
    """
    return make_call("nn.log_softmax", [data], SoftmaxAttrs(int(axis)))


def dropout_raw(data: Expr, rate: float = 0.5) -> Call:
    """The ``nn.dropout`` call itself: a tuple ``(output, mask)`` (``relay.nn.dropout_raw``).

    Parameters
    ----------
    data : Expr
        Input.
    rate : float
        Fraction dropped during training (inference passes ``data`` through).

    Returns
    -------
    Call
        The tuple-typed call.
    """
    return make_call("nn.dropout", [data], DropoutAttrs(float(rate)))


def dropout(data: Expr, rate: float = 0.5) -> TupleGetItem:
    """Dropout's output, field 0 of ``nn.dropout`` (``relay.nn.dropout``).

    Parameters
    ----------
    data : Expr
        Input.
    rate : float
        Fraction dropped during training (inference passes ``data`` through).

    Returns
    -------
    TupleGetItem
        The output.
    """
    return TupleWrapper(dropout_raw(data, rate), 2)[0]


def batch_flatten(data: Expr) -> Call:
    """Flatten every axis after the first (``relay.nn.batch_flatten``).

    Parameters
    ----------
    data : Expr
        ``(N, d1, d2, ...)``.

    Returns
    -------
    Call
        ``(N, d1 * d2 * ...)``.
    """
    return make_call("nn.batch_flatten", [data])

# TE computes used by the C code generator (kept in their own module).
from kiln.op import compute_nn  # noqa: E402,F401
from kiln.op.nn_correlation import bitpack, correlation  # noqa: E402,F401
from kiln.op.nn_pack import contrib_dense_pack  # noqa: E402,F401
