"""Global and adaptive pooling: ``nn.global_{max,avg}_pool2d``, ``nn.adaptive_{max,avg}_pool{1,2,3}d``.

Part of the ``pool`` family (builders are exported by :mod:`kiln.op.pool`). Adaptive pooling splits
each pooled axis of length ``n`` into ``m`` windows, window ``i`` covering
``[floor(i * n / m), ceil((i + 1) * n / m))``; global pooling is adaptive pooling to size 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.attrs import Attrs, attrs_class
from kiln.ir.expr import Call, Expr
from kiln.ir.types import TensorType, Type
from kiln.op.nn_common import Layout, positive, spatial_axes
from kiln.op.pool_ref import adaptive_pool_nd
from kiln.op.registry import OpPattern, make_call, register_op, tensor_arg

__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    "global_avg_pool2d",
    "global_max_pool2d",
]

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


# --- attributes ----------------------------------------------------------------------------------

@attrs_class("relay.attrs.GlobalPool2DAttrs")
class GlobalPool2DAttrs(Attrs):
    """Attributes of ``nn.global_max_pool2d`` / ``nn.global_avg_pool2d``."""

    layout: str = "NCHW"
    out_layout: str = ""


@attrs_class("relay.attrs.AdaptivePool1DAttrs")
class AdaptivePool1DAttrs(Attrs):
    """Attributes of ``nn.adaptive_{max,avg}_pool1d``."""

    output_size: tuple[int | None, ...] = ()
    layout: str = "NCW"
    out_layout: str = ""


@attrs_class("relay.attrs.AdaptivePool2DAttrs")
class AdaptivePool2DAttrs(Attrs):
    """Attributes of ``nn.adaptive_{max,avg}_pool2d``."""

    output_size: tuple[int | None, ...] = ()
    layout: str = "NCHW"
    out_layout: str = ""


@attrs_class("relay.attrs.AdaptivePool3DAttrs")
class AdaptivePool3DAttrs(Attrs):
    """Attributes of ``nn.adaptive_{max,avg}_pool3d``."""

    output_size: tuple[int | None, ...] = ()
    layout: str = "NCDHW"
    out_layout: str = ""

# --- type relation and reference ----------------------------------------------------------------

def adaptive_plan(op: str, nsp: int, shape: tuple[int, ...], layout_name: str,
                  output_size: tuple[int | None, ...] | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Pooled axes and output sizes of an adaptive (or global) pooling call.

    Parameters
    ----------
    op : str
        Operator name (for errors).
    nsp : int
        Number of pooled axes.
    shape : tuple of int
        Data shape.
    layout_name : str
        Data layout.
    output_size : tuple of (int or None), or None
        None: global pooling (size 1). Empty: keep the input sizes; one value: every axis; a
        None entry keeps that axis's size.

    Returns
    -------
    axes : tuple of int
        Positions of the pooled axes.
    sizes : tuple of int
        Output size of each.
    """
    layout = Layout(layout_name, op)
    layout.check_shape(shape, op, "data")
    axes = spatial_axes(layout, _SPATIAL[nsp], op)
    if output_size is None:
        return axes, (1,) * nsp
    sizes: tuple[int | None, ...] = tuple(output_size)
    if len(sizes) == 1:
        sizes = sizes * nsp
    elif not sizes:
        sizes = (None,) * nsp
    if len(sizes) != nsp:
        raise KilnTypeError(f"{op}: output_size must have at most {nsp} values, got {output_size}")
    out = tuple(shape[a] if s is None else int(s) for a, s in zip(axes, sizes))
    positive(out, "output_size", op)
    return axes, out


def _register_adaptive(name: str, nsp: int, mode: str, attrs_type: type, is_global: bool) -> None:
    def plan(shape: tuple[int, ...], attrs: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
        size = None if is_global else attrs.output_size
        return adaptive_plan(name, nsp, shape, attrs.layout, size)

    def rel(types: list[Type], attrs: Any) -> Type:
        data = tensor_arg(types, 0, name, "data")
        axes, sizes = plan(data.shape, attrs)
        shape = list(data.shape)
        for a, s in zip(axes, sizes):
            shape[a] = s
        return TensorType(tuple(shape), data.dtype)

    def reference(args: list[np.ndarray], attrs: Any, out_type: Type) -> np.ndarray:
        axes, sizes = plan(args[0].shape, attrs)
        return adaptive_pool_nd(args[0], axes, sizes, mode)

    kind = "global" if is_global else "adaptive"
    register_op(name, num_inputs=1, type_rel=rel, reference=reference, layout="pool" if nsp == 2 else "",
                pattern=OpPattern.OUT_ELEMWISE_FUSABLE, attrs_type=attrs_type,
                doc=f"{kind} {nsp}-d {mode} pooling")


_register_adaptive("nn.global_max_pool2d", 2, "max", GlobalPool2DAttrs, True)
_register_adaptive("nn.global_avg_pool2d", 2, "avg", GlobalPool2DAttrs, True)
for _nsp, _attrs_type in ((1, AdaptivePool1DAttrs), (2, AdaptivePool2DAttrs),
                          (3, AdaptivePool3DAttrs)):
    _register_adaptive(f"nn.adaptive_max_pool{_nsp}d", _nsp, "max", _attrs_type, False)
    _register_adaptive(f"nn.adaptive_avg_pool{_nsp}d", _nsp, "avg", _attrs_type, False)

def global_max_pool2d(data: Expr, layout: str = "NCHW", out_layout: str = "") -> Call:
    """Max over the whole H and W axes, keeping them with size 1 (``relay.nn.global_max_pool2d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    layout, out_layout : str
        Data layout and (for layout passes) output layout.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return make_call("nn.global_max_pool2d", [data], GlobalPool2DAttrs(layout, out_layout))


def global_avg_pool2d(data: Expr, layout: str = "NCHW", out_layout: str = "") -> Call:
    """Mean over the whole H and W axes, keeping them with size 1 (``relay.nn.global_avg_pool2d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    layout, out_layout : str
        Data layout and (for layout passes) output layout.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return make_call("nn.global_avg_pool2d", [data], GlobalPool2DAttrs(layout, out_layout))


def _output_size(output_size: Any) -> tuple[int | None, ...]:
    if output_size is None:
        return ()
    if isinstance(output_size, (int, np.integer)):
        return (int(output_size),)
    return tuple(None if s is None else int(s) for s in output_size)


def _adaptive(mode: str, nsp: int, attrs_type: type, data: Expr, output_size: Any, layout: str,
              out_layout: str) -> Call:
    return make_call(f"nn.adaptive_{mode}_pool{nsp}d", [data],
                     attrs_type(_output_size(output_size), layout, out_layout))


def adaptive_max_pool1d(data: Expr, output_size: Any = None, layout: str = "NCW",
                        out_layout: str = "") -> Call:
    """Adaptive max pooling of the W axes to a fixed size (``relay.nn.adaptive_max_pool1d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    output_size : int, tuple of int, or None
        Output size per pooled axis (one value: every axis; None or empty: the input size).
    layout, out_layout : str
        Data layout and (for layout passes) output layout.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return _adaptive("max", 1, AdaptivePool1DAttrs, data, output_size, layout, out_layout)


def adaptive_avg_pool1d(data: Expr, output_size: Any = None, layout: str = "NCW",
                        out_layout: str = "") -> Call:
    """Adaptive average pooling of the W axes to a fixed size (``relay.nn.adaptive_avg_pool1d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    output_size : int, tuple of int, or None
        Output size per pooled axis (one value: every axis; None or empty: the input size).
    layout, out_layout : str
        Data layout and (for layout passes) output layout.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return _adaptive("avg", 1, AdaptivePool1DAttrs, data, output_size, layout, out_layout)


def adaptive_max_pool2d(data: Expr, output_size: Any = None, layout: str = "NCHW",
                        out_layout: str = "") -> Call:
    """Adaptive max pooling of the H and W axes to a fixed size (``relay.nn.adaptive_max_pool2d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    output_size : int, tuple of int, or None
        Output size per pooled axis (one value: every axis; None or empty: the input size).
    layout, out_layout : str
        Data layout and (for layout passes) output layout.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return _adaptive("max", 2, AdaptivePool2DAttrs, data, output_size, layout, out_layout)


def adaptive_avg_pool2d(data: Expr, output_size: Any = None, layout: str = "NCHW",
                        out_layout: str = "") -> Call:
    """Adaptive average pooling of the H and W axes to a fixed size (``relay.nn.adaptive_avg_pool2d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    output_size : int, tuple of int, or None
        Output size per pooled axis (one value: every axis; None or empty: the input size).
    layout, out_layout : str
        Data layout and (for layout passes) output layout.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return _adaptive("avg", 2, AdaptivePool2DAttrs, data, output_size, layout, out_layout)


def adaptive_max_pool3d(data: Expr, output_size: Any = None, layout: str = "NCDHW",
                        out_layout: str = "") -> Call:
    """Adaptive max pooling of the D, H and W axes to a fixed size (``relay.nn.adaptive_max_pool3d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    output_size : int, tuple of int, or None
        Output size per pooled axis (one value: every axis; None or empty: the input size).
    layout, out_layout : str
        Data layout and (for layout passes) output layout.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return _adaptive("max", 3, AdaptivePool3DAttrs, data, output_size, layout, out_layout)


def adaptive_avg_pool3d(data: Expr, output_size: Any = None, layout: str = "NCDHW",
                        out_layout: str = "") -> Call:
    """Adaptive average pooling of the D, H and W axes to a fixed size (``relay.nn.adaptive_avg_pool3d``).

    Parameters
    ----------
    data : Expr
        Input in ``layout``.
    output_size : int, tuple of int, or None
        Output size per pooled axis (one value: every axis; None or empty: the input size).
    layout, out_layout : str
        Data layout and (for layout passes) output layout.

    Returns
    -------
    Call
        The pooled tensor.
    """
    return _adaptive("avg", 3, AdaptivePool3DAttrs, data, output_size, layout, out_layout)
