"""Multilayer perceptron test network, structured and named as ``tvm.relay.testing.mlp``.

``batch_flatten``, then three dense + bias layers (128, 64 and ``num_classes`` units) with relu
between them and a softmax at the end; parameters ``fc1_weight``, ``fc1_bias``, ... ``fc3_bias``.
"""

from __future__ import annotations

from math import prod

from kiln.ir.analysis import free_vars
from kiln.ir.expr import Function, var
from kiln.ir.module import IRModule
from kiln.op.nn import batch_flatten, bias_add, dense, relu, softmax
from kiln.relay.testing.init import create_workload
from kiln.runtime.ndarray import NDArray

__all__ = ["get_net", "get_workload"]


def get_net(batch_size: int, num_classes: int = 10, image_shape: tuple[int, ...] = (1, 28, 28),
            dtype: str = "float32") -> Function:
    """The MLP as a function of ``data`` and its parameters.

    Parameters
    ----------
    batch_size : int
        Batch size.
    num_classes : int
        Output classes.
    image_shape : tuple of int
        One input, without the batch axis.
    dtype : str
        Data and parameter dtype.

    Returns
    -------
    Function
        The network.
    """
    data = var("data", shape=(batch_size, *image_shape), dtype=dtype)
    net = batch_flatten(data)
    in_dim = prod(image_shape)
    for i, units in enumerate((128, 64, num_classes), start=1):
        weight = var(f"fc{i}_weight", shape=(units, in_dim), dtype=dtype)
        bias = var(f"fc{i}_bias", shape=(units,), dtype=dtype)
        net = bias_add(dense(net, weight, units=units), bias, axis=-1)
        if i < 3:
            net = relu(net)
        in_dim = units
    net = softmax(net)
    return Function(free_vars(net), net)


def get_workload(batch_size: int, num_classes: int = 10,
                 image_shape: tuple[int, ...] = (1, 28, 28),
                 dtype: str = "float32") -> tuple[IRModule, dict[str, NDArray]]:
    """The MLP module and its Xavier-initialised parameters (``relay.testing.mlp``).

    Parameters
    ----------
    batch_size : int
        Batch size.
    num_classes : int
        Output classes.
    image_shape : tuple of int
        One input, without the batch axis.
    dtype : str
        Data and parameter dtype.

    Returns
    -------
    mod : IRModule
        The network, input ``data``.
    params : dict of str to NDArray
        The other parameters.
    """
    return create_workload(get_net(batch_size, num_classes, image_shape, dtype))
