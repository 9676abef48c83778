"""A small layer DSL for building networks: ops that create their own weight variables.

Mirrors ``tvm.relay.testing.layers``. TVM leaves the created weights untyped and lets type
inference fill their shapes in; Kiln's variables carry their types, so each wrapper infers its
input's type and gives the new variables their shapes (named ``<name>_weight``, ``<name>_gamma``,
... as in TVM).
"""

from __future__ import annotations

from typing import Any

from kiln.errors import KilnError, KilnTypeError
from kiln.ir.expr import Expr, Var, var
from kiln.ir.types import TensorType
from kiln.op.conv import conv2d as _conv2d
from kiln.op.conv import conv2d_transpose as _conv2d_transpose
from kiln.op.conv import conv3d as _conv3d
from kiln.op.nn import batch_norm, bias_add, dense
from kiln.op.nn_common import Layout, int_tuple
from kiln.transform.infer_type import infer_expr_type

__all__ = [
    "batch_norm_infer",
    "conv2d",
    "conv2d_transpose",
    "conv3d",
    "conv_kernel_layout",
    "dense_add_bias",
    "tensor_type",
]


def tensor_type(expr: Expr) -> TensorType:
    """The (inferred) tensor type of ``expr``.

    Parameters
    ----------
    expr : Expr
        An expression whose free variables all have types.

    Returns
    -------
    TensorType
        Its type.
    """
    ty = infer_expr_type(expr)
    if not isinstance(ty, TensorType):
        raise KilnTypeError(f"expected a tensor-typed expression, got {ty}")
    return ty


def batch_norm_infer(data: Expr, gamma: Expr | None = None, beta: Expr | None = None,
                     moving_mean: Expr | None = None, moving_var: Expr | None = None,
                     **kwargs: Any) -> Expr:
    """``nn.batch_norm`` creating missing parameters ``<name>_gamma``, ``_beta``,
    ``_moving_mean`` and ``_moving_var``; returns the normalised output (field 0).

    Parameters
    ----------
    data : Expr
        The input.
    gamma, beta, moving_mean, moving_var : Expr, optional
        Parameters (created when not given).
    **kwargs
        ``name`` (required) and the attributes of :func:`kiln.op.nn.batch_norm`.

    Returns
    -------
    Expr
        The normalised tensor.
    """
    name = kwargs.pop("name")
    ty = tensor_type(data)
    channels = ty.shape[kwargs.get("axis", 1)]

    def param(value: Expr | None, suffix: str) -> Expr:
        return value if value is not None else var(f"{name}_{suffix}", shape=(channels,),
                                                   dtype=ty.dtype)

    return batch_norm(data, param(gamma, "gamma"), param(beta, "beta"),
                      param(moving_mean, "moving_mean"), param(moving_var, "moving_var"),
                      **kwargs)[0]


def _conv_weight(data: Expr, name: str, kwargs: dict[str, Any], nsp: int, transpose: bool,
                 default_layouts: tuple[str, str]) -> Var:
    ty = tensor_type(data)
    spatial = {2: "HW", 3: "DHW"}[nsp]
    data_layout = Layout(kwargs.get("data_layout", default_layouts[0]))
    kernel_layout = Layout(kwargs.get("kernel_layout", default_layouts[1]))
    in_channels = data_layout.forward_shape(ty.shape, "NC" + spatial, name, "data")[1]
    groups = int(kwargs.get("groups", 1))
    channels = kwargs.get("channels")
    kernel_size = kwargs.get("kernel_size")
    if channels is None or kernel_size is None:
        raise KilnTypeError(f"{name}: give channels and kernel_size (or a weight)")
    kernel = int_tuple(kernel_size, nsp, "kernel_size", name)
    if transpose:
        primal, shape = "IO" + spatial, (in_channels, int(channels) // groups, *kernel)
    else:
        primal, shape = "OI" + spatial, (int(channels), in_channels // groups, *kernel)
    return var(f"{name}_weight", shape=kernel_layout.backward_shape(shape, primal, name, "weight"),
               dtype=ty.dtype)


def conv2d(data: Expr, weight: Expr | None = None, **kwargs: Any) -> Expr:
    """:func:`kiln.op.conv.conv2d` creating the weight ``<name>_weight`` when not given.

    Parameters
    ----------
    data : Expr
        The input.
    weight : Expr, optional
        The kernel (created from ``channels``, ``kernel_size``, ``groups`` and the layouts).
    **kwargs
        ``name`` (required) and the arguments of ``conv2d``.

    Returns
    -------
    Expr
        The convolution.
    """
    name = kwargs.pop("name")
    if weight is None:
        weight = _conv_weight(data, name, kwargs, 2, False, ("NCHW", "OIHW"))
    return _conv2d(data, weight, **kwargs)


def conv3d(data: Expr, weight: Expr | None = None, **kwargs: Any) -> Expr:
    """:func:`kiln.op.conv.conv3d` creating the weight ``<name>_weight`` when not given.

    Parameters
    ----------
    data : Expr
        The input.
    weight : Expr, optional
        The kernel.
    **kwargs
        ``name`` (required) and the arguments of ``conv3d``.

    Returns
    -------
    Expr
        The convolution.
    """
    name = kwargs.pop("name")
    if weight is None:
        weight = _conv_weight(data, name, kwargs, 3, False, ("NCDHW", "OIDHW"))
    return _conv3d(data, weight, **kwargs)


def conv2d_transpose(data: Expr, weight: Expr | None = None, **kwargs: Any) -> Expr:
    """:func:`kiln.op.conv.conv2d_transpose` creating ``<name>_weight`` when not given.

    Parameters
    ----------
    data : Expr
        The input.
    weight : Expr, optional
        The kernel (``IOHW`` by default).
    **kwargs
        ``name`` (required) and the arguments of ``conv2d_transpose``.

    Returns
    -------
    Expr
        The transposed convolution.
    """
    name = kwargs.pop("name")
    if weight is None:
        weight = _conv_weight(data, name, kwargs, 2, True, ("NCHW", "IOHW"))
    return _conv2d_transpose(data, weight, **kwargs)


def dense_add_bias(data: Expr, weight: Expr | None = None, bias: Expr | None = None,
                   units: int | None = None, **kwargs: Any) -> Expr:
    """``nn.dense`` then ``nn.bias_add(axis=-1)``, creating ``<name>_weight`` and
    ``<name>_bias`` when not given.

    Parameters
    ----------
    data : Expr
        ``(..., in_dim)``.
    weight, bias : Expr, optional
        ``(units, in_dim)`` and ``(units,)``.
    units : int, optional
        Output size (required when a parameter is created).
    **kwargs
        ``name`` (required) and ``out_dtype``.

    Returns
    -------
    Expr
        ``dense(data, weight) + bias``.
    """
    name = kwargs.pop("name")
    if weight is None or bias is None:
        if units is None:
            raise KilnTypeError(f"{name}: give units (or the weight and bias)")
        ty = tensor_type(data)
        if weight is None:
            weight = var(f"{name}_weight", shape=(int(units), ty.shape[-1]), dtype=ty.dtype)
        if bias is None:
            bias = var(f"{name}_bias", shape=(int(units),), dtype=ty.dtype)
    return bias_add(dense(data, weight, units, **kwargs), bias, axis=-1)


def conv_kernel_layout(data_layout: str, is_depthwise: bool = False) -> str:
    """The kernel layout TVM's test networks pair with a data layout.

    Parameters
    ----------
    data_layout : str
        ``"NCHW"`` or ``"NHWC"``.
    is_depthwise : bool
        Whether the convolution is depthwise (``NHWC`` then uses ``HWOI``).

    Returns
    -------
    str
        ``OIHW``, ``HWIO`` or ``HWOI``.
    """
    mapping = {"NCHW": "OIHW", "NHWC": "HWOI" if is_depthwise else "HWIO"}
    if data_layout not in mapping:
        raise KilnError(f"unknown data layout {data_layout!r}; expected NCHW or NHWC")
    return mapping[data_layout]
