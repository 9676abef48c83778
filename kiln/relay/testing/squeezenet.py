"""SqueezeNet 1.0 / 1.1 test network, structured and named as ``tvm.relay.testing.squeezenet``.

A first convolution, eight fire modules (a 1x1 squeeze convolution feeding 1x1 and 3x3 expand
convolutions, concatenated) with max pooling between groups, dropout, a 1x1 convolution to
``num_classes`` channels, global average pooling and softmax (Iandola et al., arXiv:1602.07360).
Parameters: ``conv1_weight``, ``conv1_bias``, ``fire1_input_conv_weight``, ...,
``conv_final_bias``.
"""

from __future__ import annotations

from typing import Any

from kiln.errors import KilnError
from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function, var
from kiln.ir.module import IRModule
from kiln.op.nn import batch_flatten, bias_add, dropout, relu, softmax
from kiln.op.pool import global_avg_pool2d, max_pool2d
from kiln.op.transform import concatenate
from kiln.relay.testing import layers
from kiln.relay.testing.init import create_workload
from kiln.runtime.ndarray import NDArray

__all__ = ["get_net", "get_workload"]


def _make_fire(net: Expr, squeeze: int, expand1x1: int, expand3x3: int, prefix: str) -> Expr:
    net = _make_fire_conv(net, squeeze, 1, 0, f"{prefix}_input")
    left = _make_fire_conv(net, expand1x1, 1, 0, f"{prefix}_left")
    right = _make_fire_conv(net, expand3x3, 3, 1, f"{prefix}_right")
    return concatenate((left, right), axis=1)


def _make_fire_conv(net: Expr, channels: int, kernel_size: int, padding: int = 0,
                    prefix: str = "") -> Expr:
    net = layers.conv2d(net, channels=channels, kernel_size=(kernel_size, kernel_size),
                        padding=(padding, padding), name=f"{prefix}_conv")
    bias = var(f"{prefix}_conv_bias", shape=(channels,), dtype=layers.tensor_type(net).dtype)
    return relu(bias_add(net, bias))


def _conv_bias_relu(net: Expr, name: str, channels: int, **kwargs: Any) -> Expr:
    net = layers.conv2d(net, channels=channels, name=name, **kwargs)
    bias = var(f"{name}_bias", shape=(channels,), dtype=layers.tensor_type(net).dtype)
    return relu(bias_add(net, bias))


def get_net(batch_size: int, image_shape: tuple[int, ...], num_classes: int, version: str,
            dtype: str) -> Function:
    """SqueezeNet ``version`` ("1.0" or "1.1") as a function of ``data`` and its parameters.

    Parameters
    ----------
    batch_size : int
        Batch size.
    image_shape : tuple of int
        One image, ``CHW``.
    num_classes : int
        Output classes.
    version : str
        ``"1.0"`` or ``"1.1"``.
    dtype : str
        Data and parameter dtype.

    Returns
    -------
    Function
        The network.
    """
    if version not in ("1.0", "1.1"):
        raise KilnError(f"unsupported SqueezeNet version {version!r}: 1.0 or 1.1 expected")
    net: Expr = var("data", shape=(batch_size, *image_shape), dtype=dtype)
    if version == "1.0":
        net = _conv_bias_relu(net, "conv1", 96, kernel_size=(7, 7), strides=(2, 2), padding=(3, 3))
        net = max_pool2d(net, pool_size=(3, 3), strides=(2, 2))
        net = _make_fire(net, 16, 64, 64, "fire1")
        net = _make_fire(net, 16, 64, 64, "fire2")
        net = _make_fire(net, 32, 128, 128, "fire3")
        net = max_pool2d(net, pool_size=(3, 3), strides=(2, 2))
        net = _make_fire(net, 32, 128, 128, "fire4")
        net = _make_fire(net, 48, 192, 192, "fire5")
        net = _make_fire(net, 48, 192, 192, "fire6")
        net = _make_fire(net, 64, 256, 256, "fire7")
        net = max_pool2d(net, pool_size=(3, 3), strides=(2, 2))
        net = _make_fire(net, 64, 256, 256, "fire8")
    else:
        net = _conv_bias_relu(net, "conv1", 64, kernel_size=(3, 3), strides=(2, 2), padding=(1, 1))
        net = max_pool2d(net, pool_size=(3, 3), strides=(2, 2))
        net = _make_fire(net, 16, 64, 64, "fire1")
        net = _make_fire(net, 16, 64, 64, "fire2")
        net = max_pool2d(net, pool_size=(3, 3), strides=(2, 2))
        net = _make_fire(net, 32, 128, 128, "fire3")
        net = _make_fire(net, 32, 128, 128, "fire4")
        net = max_pool2d(net, pool_size=(3, 3), strides=(2, 2))
        net = _make_fire(net, 48, 192, 192, "fire5")
        net = _make_fire(net, 48, 192, 192, "fire6")
        net = _make_fire(net, 64, 256, 256, "fire7")
        net = _make_fire(net, 64, 256, 256, "fire8")
    net = dropout(net, rate=0.5)
    net = _conv_bias_relu(net, "conv_final", num_classes, kernel_size=(1, 1))
    net = softmax(batch_flatten(global_avg_pool2d(net)))
    return Function(free_vars(net), net)


def get_workload(batch_size: int = 1, num_classes: int = 1000, version: str = "1.0",
                 image_shape: tuple[int, ...] = (3, 224, 224),
                 dtype: str = "float32") -> tuple[IRModule, dict[str, NDArray]]:
    """The SqueezeNet module and its parameters (``relay.testing.squeezenet``).

    Parameters
    ----------
    batch_size : int
        Batch size.
    num_classes : int
        Output classes.
    version : str
        ``"1.0"`` or ``"1.1"``.
    image_shape : tuple of int
        One image, ``CHW``.
    dtype : str
        Data and parameter dtype.

    Returns
    -------
    mod : IRModule
        The network, input ``data``.
    params : dict of str to NDArray
        The other parameters.
    """
    return create_workload(get_net(batch_size, image_shape, num_classes, version, dtype))
