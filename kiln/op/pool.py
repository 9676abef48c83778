"""Pooling operators: max/avg pooling in 1, 2 and 3 dimensions (global and adaptive pooling are
in :mod:`kiln.op.pool_adaptive`; this module exports every pooling builder).

Pooling works on the spatial axes of the ``layout`` attribute (``W``, ``HW`` or ``DHW``) wherever
they sit (``NCHW``, ``NHWC``, blocked ``NCHW16c``, ...); those axes may not be split. The output
size per axis is ``(in + pad_begin + pad_end - dilated_window) / stride + 1``, rounded down, or up
with ``ceil_mode`` (TVM's rule: a last window that starts in the end padding is kept).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr
from kiln.ir.types import TensorType, Type
from kiln.op.nn_common import (
    Layout,
    int_tuple,
    pad_pairs,
    pad_tuple,
    positive,
    spatial_axes,
    window_out_size,
)
from kiln.op.pool_adaptive import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    adaptive_max_pool3d,
    global_avg_pool2d,
    global_max_pool2d,
)
from kiln.op.pool_ref import pool_nd
from kiln.op.registry import OpPattern, make_call, register_op, tensor_arg

__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "global_avg_pool2d",
    "global_max_pool2d",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
]

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


# --- attributes (TVM's field order and defaults; pool_size has no default, so it always prints) -

@attrs_class("relay.attrs.MaxPool1DAttrs")
class MaxPool1DAttrs(Attrs):
    """Attributes of ``nn.max_pool1d``."""

    pool_size: tuple[int, ...]
    strides: tuple[int, ...] = (1,)
    dilation: tuple[int, ...] = (1,)
    padding: tuple[int, ...] = (0,)
    layout: str = "NCW"
    out_layout: str = ""
    ceil_mode: bool = False


@attrs_class("relay.attrs.AvgPool1DAttrs")
class AvgPool1DAttrs(Attrs):
    """Attributes of ``nn.avg_pool1d``."""

    pool_size: tuple[int, ...]
    strides: tuple[int, ...] = (1,)
    dilation: tuple[int, ...] = (1,)
    padding: tuple[int, ...] = (0,)
    layout: str = "NCW"
    out_layout: str = ""
    ceil_mode: bool = False
    count_include_pad: bool = False


@attrs_class("relay.attrs.MaxPool2DAttrs")
class MaxPool2DAttrs(Attrs):
    """Attributes of ``nn.max_pool2d``."""

    pool_size: tuple[int, ...]
    strides: tuple[int, ...] = (1, 1)
    dilation: tuple[int, ...] = (1, 1)
    padding: tuple[int, ...] = (0, 0)
    layout: str = "NCHW"
    out_layout: str = ""
    ceil_mode: bool = False


@attrs_class("relay.attrs.AvgPool2DAttrs")
class AvgPool2DAttrs(Attrs):
    """Attributes of ``nn.avg_pool2d``."""

    pool_size: tuple[int, ...]
    strides: tuple[int, ...] = (1, 1)
    dilation: tuple[int, ...] = (1, 1)
    padding: tuple[int, ...] = (0, 0)
    layout: str = "NCHW"
    out_layout: str = ""
    ceil_mode: bool = False
    count_include_pad: bool = False


@attrs_class("relay.attrs.MaxPool3DAttrs")
class MaxPool3DAttrs(Attrs):
    """Attributes of ``nn.max_pool3d``."""

    pool_size: tuple[int, ...]
    strides: tuple[int, ...] = (1, 1, 1)
    dilation: tuple[int, ...] = (1, 1, 1)
    padding: tuple[int, ...] = (0, 0, 0)
    layout: str = "NCDHW"
    out_layout: str = ""
    ceil_mode: bool = False


@attrs_class("relay.attrs.AvgPool3DAttrs")
class AvgPool3DAttrs(Attrs):
    """Attributes of ``nn.avg_pool3d``."""

    pool_size: tuple[int, ...]
    strides: tuple[int, ...] = (1, 1, 1)
    dilation: tuple[int, ...] = (1, 1, 1)
    padding: tuple[int, ...] = (0, 0, 0)
    layout: str = "NCDHW"
    out_layout: str = ""
    ceil_mode: bool = False
    count_include_pad: bool = False

# --- windowed pooling --------------------------------------------------------------------------

@dataclass(frozen=True)
class PoolPlan:
    """The geometry of a windowed pooling call.

    Attributes
    ----------
    axes : tuple of int
        Positions of the pooled axes in the data.
    kernel, strides, dilation : tuple of int
        Per pooled axis.
    padding : tuple of (int, int)
        ``(begin, end)`` per pooled axis.
    out_sizes : tuple of int
        Output size per pooled axis.
    out_shape : tuple of int
        The result shape.
    """

    axes: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    out_sizes: tuple[int, ...]
    out_shape: tuple[int, ...]


def pool_plan(op: str, nsp: int, shape: tuple[int, ...], attrs: Any) -> PoolPlan:
    """Check a windowed pooling call and work out its geometry.

    Parameters
    ----------
    op : str
        Operator name (for errors).
    nsp : int
        Number of pooled axes.
    shape : tuple of int
        Data shape.
    attrs : Attrs
        The call's pooling attributes.

    Returns
    -------
    PoolPlan
        Pooled axes, window geometry and the result shape.
    """
    layout = Layout(attrs.layout, op)
    layout.check_shape(shape, op, "data")
    axes = spatial_axes(layout, _SPATIAL[nsp], op)
    kernel = int_tuple(attrs.pool_size, nsp, "pool_size", op)
    strides = int_tuple(attrs.strides, nsp, "strides", op)
    dilation = int_tuple(attrs.dilation, nsp, "dilation", op)
    for values, what in ((kernel, "pool_size"), (strides, "strides"), (dilation, "dilation")):
        positive(values, what, op)
    padding = pad_pairs(attrs.padding, nsp, op)
    out_sizes = tuple(window_out_size(shape[a], p, k, s, d, bool(attrs.ceil_mode))
                      for a, p, k, s, d in zip(axes, padding, kernel, strides, dilation))
    if any(o < 1 for o in out_sizes):
        raise KilnTypeError(f"{op}: output would be empty: data shape {shape} ({layout.name}), "
                            f"pool_size {kernel}, strides {strides}, padding {attrs.padding}, "
                            f"dilation {dilation}")
    out_shape = list(shape)
    for a, o in zip(axes, out_sizes):
        out_shape[a] = o
    return PoolPlan(axes, kernel, strides, dilation, padding, out_sizes, tuple(out_shape))


def _register_pool(name: str, nsp: int, mode: str, attrs_type: type) -> None:
    def rel(types: list[Type], attrs: Any) -> Type:
        data = tensor_arg(types, 0, name, "data")
        return TensorType(pool_plan(name, nsp, data.shape, attrs).out_shape, data.dtype)

    def reference(args: list[np.ndarray], attrs: Any, out_type: Type) -> np.ndarray:
        plan = pool_plan(name, nsp, args[0].shape, attrs)
        include = bool(getattr(attrs, "count_include_pad", False))
        return pool_nd(args[0], plan.axes, plan.kernel, plan.strides, plan.dilation, plan.padding,
                       plan.out_sizes, mode, include)

    register_op(name, num_inputs=1, type_rel=rel, reference=reference, layout="pool" if nsp == 2 else "",
                pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=attrs_type,
                doc=f"{nsp}-d {mode} pooling")


_register_pool("nn.max_pool1d", 1, "max", MaxPool1DAttrs)
_register_pool("nn.max_pool2d", 2, "max", MaxPool2DAttrs)
_register_pool("nn.max_pool3d", 3, "max", MaxPool3DAttrs)
_register_pool("nn.avg_pool1d", 1, "avg", AvgPool1DAttrs)
_register_pool("nn.avg_pool2d", 2, "avg", AvgPool2DAttrs)
_register_pool("nn.avg_pool3d", 3, "avg", AvgPool3DAttrs)

# --- builders (TVM's relay.nn signatures) ------------------------------------------------------

def _window_attrs(name: str, nsp: int, pool_size: Any, strides: Any, dilation: Any,
                  padding: Any) -> dict[str, tuple[int, ...]]:
    return {
        "pool_size": int_tuple(pool_size, nsp, "pool_size", name),
        "strides": int_tuple(strides, nsp, "strides", name),
        "dilation": int_tuple(dilation, nsp, "dilation", name),
        "padding": pad_tuple(padding, nsp, name),
    }


def _max_pool(nsp: int, attrs_type: type, data: Expr, pool_size: Any, strides: Any,
              dilation: Any, padding: Any, layout: str, out_layout: str, ceil_mode: bool) -> Call:
    name = f"nn.max_pool{nsp}d"
    attrs = attrs_type(**_window_attrs(name, nsp, pool_size, strides, dilation, padding),
                       layout=layout, out_layout=out_layout, ceil_mode=bool(ceil_mode))
    return make_call(name, [data], attrs)


def _avg_pool(nsp: int, attrs_type: type, data: Expr, pool_size: Any, strides: Any,
              dilation: Any, padding: Any, layout: str, out_layout: str, ceil_mode: bool,
              count_include_pad: bool) -> Call:
    name = f"nn.avg_pool{nsp}d"
    attrs = attrs_type(**_window_attrs(name, nsp, pool_size, strides, dilation, padding),
                       layout=layout, out_layout=out_layout, ceil_mode=bool(ceil_mode),
                       count_include_pad=bool(count_include_pad))
    return make_call(name, [data], attrs)


def max_pool1d(data: Expr, pool_size: Any = (1,), strides: Any = (1,), dilation: Any = (1,),
               padding: Any = (0,), layout: str = "NCW", out_layout: str = "",
               ceil_mode: bool = False) -> Call:
    """Max pooling over the W axes of ``data`` (``relay.nn.max_pool1d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    pool_size, strides, dilation : int or tuple of int
        Window size, stride and dilation per pooled axis.
    padding : int or tuple of int
        One value, one per axis (symmetric), or all begins then all ends.
    layout : str
        Data layout; the pooled axes may not be split.
    out_layout : str
        Output layout for layout passes (the result keeps ``layout``).
    ceil_mode : bool
        Round the output size up instead of down.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return _max_pool(1, MaxPool1DAttrs, data, pool_size, strides, dilation, padding, layout,
                     out_layout, ceil_mode)


def max_pool2d(data: Expr, pool_size: Any = (1, 1), strides: Any = (1, 1), dilation: Any = (1, 1),
               padding: Any = (0, 0), layout: str = "NCHW", out_layout: str = "",
               ceil_mode: bool = False) -> Call:
    """Max pooling over the H and W axes of ``data`` (``relay.nn.max_pool2d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    pool_size, strides, dilation : int or tuple of int
        Window size, stride and dilation per pooled axis.
    padding : int or tuple of int
        One value, one per axis (symmetric), or all begins then all ends.
    layout : str
        Data layout; the pooled axes may not be split.
    out_layout : str
        Output layout for layout passes (the result keeps ``layout``).
    ceil_mode : bool
        Round the output size up instead of down.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return _max_pool(2, MaxPool2DAttrs, data, pool_size, strides, dilation, padding, layout,
                     out_layout, ceil_mode)


def max_pool3d(data: Expr, pool_size: Any = (1, 1, 1), strides: Any = (1, 1, 1), dilation: Any = (1, 1, 1),
               padding: Any = (0, 0, 0), layout: str = "NCDHW", out_layout: str = "",
               ceil_mode: bool = False) -> Call:
    """Max pooling over the D, H and W axes of ``data`` (``relay.nn.max_pool3d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    pool_size, strides, dilation : int or tuple of int
        Window size, stride and dilation per pooled axis.
    padding : int or tuple of int
        One value, one per axis (symmetric), or all begins then all ends.
    layout : str
        Data layout; the pooled axes may not be split.
    out_layout : str
        Output layout for layout passes (the result keeps ``layout``).
    ceil_mode : bool
        Round the output size up instead of down.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return _max_pool(3, MaxPool3DAttrs, data, pool_size, strides, dilation, padding, layout,
                     out_layout, ceil_mode)


def avg_pool1d(data: Expr, pool_size: Any = (1,), strides: Any = (1,), dilation: Any = (1,),
               padding: Any = (0,), layout: str = "NCW", out_layout: str = "",
               ceil_mode: bool = False, count_include_pad: bool = False) -> Call:
    """Average pooling over the W axes of ``data`` (``relay.nn.avg_pool1d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    pool_size, strides, dilation : int or tuple of int
        Window size, stride and dilation per pooled axis.
    padding : int or tuple of int
        One value, one per axis (symmetric), or all begins then all ends.
    layout : str
        Data layout; the pooled axes may not be split.
    out_layout : str
        Output layout for layout passes (the result keeps ``layout``).
    ceil_mode : bool
        Round the output size up instead of down.
    count_include_pad : bool
        Count padded positions in the divisor.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return _avg_pool(1, AvgPool1DAttrs, data, pool_size, strides, dilation, padding, layout,
                     out_layout, ceil_mode, count_include_pad)


def avg_pool2d(data: Expr, pool_size: Any = (1, 1), strides: Any = (1, 1), dilation: Any = (1, 1),
               padding: Any = (0, 0), layout: str = "NCHW", out_layout: str = "",
               ceil_mode: bool = False, count_include_pad: bool = False) -> Call:
    """Average pooling over the H and W axes of ``data`` (``relay.nn.avg_pool2d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    pool_size, strides, dilation : int or tuple of int
        Window size, stride and dilation per pooled axis.
    padding : int or tuple of int
        One value, one per axis (symmetric), or all begins then all ends.
    layout : str
        Data layout; the pooled axes may not be split.
    out_layout : str
        Output layout for layout passes (the result keeps ``layout``).
    ceil_mode : bool
        Round the output size up instead of down.
    count_include_pad : bool
        Count padded positions in the divisor.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return _avg_pool(2, AvgPool2DAttrs, data, pool_size, strides, dilation, padding, layout,
                     out_layout, ceil_mode, count_include_pad)


def avg_pool3d(data: Expr, pool_size: Any = (1, 1, 1), strides: Any = (1, 1, 1), dilation: Any = (1, 1, 1),
               padding: Any = (0, 0, 0), layout: str = "NCDHW", out_layout: str = "",
               ceil_mode: bool = False, count_include_pad: bool = False) -> Call:
    """Average pooling over the D, H and W axes of ``data`` (``relay.nn.avg_pool3d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    pool_size, strides, dilation : int or tuple of int
        Window size, stride and dilation per pooled axis.
    padding : int or tuple of int
        One value, one per axis (symmetric), or all begins then all ends.
    layout : str
        Data layout; the pooled axes may not be split.
    out_layout : str
        Output layout for layout passes (the result keeps ``layout``).
    ceil_mode : bool
        Round the output size up instead of down.
    count_include_pad : bool
        Count padded positions in the divisor.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return _avg_pool(3, AvgPool3DAttrs, data, pool_size, strides, dilation, padding, layout,
                     out_layout, ceil_mode, count_include_pad)

# TE computes used by the C code generator (kept in their own module).
from kiln.op import compute_pool  # noqa: E402,F401
