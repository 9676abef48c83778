"""Nature DQN test network, structured and named as ``tvm.relay.testing.dqn``.

Three convolutions (8x8/4, 4x4/2, 3x3/1; 32, 64, 64 channels) each with a bias and relu, then
``batch_flatten``, a 512-unit dense layer with relu and a ``num_actions``-unit dense layer
(Mnih et al., Nature 518, 2015). Parameters: ``conv1_weight``, ``conv1_bias``, ...,
``dense2_weight``, ``dense2_bias``.
"""

from __future__ import annotations

from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function, var
from kiln.ir.module import IRModule
from kiln.op.nn import batch_flatten, bias_add, relu
from kiln.relay.testing import layers
from kiln.relay.testing.init import create_workload
from kiln.runtime.ndarray import NDArray

__all__ = ["get_net", "get_workload"]


def get_net(batch_size: int, num_actions: int = 18, image_shape: tuple[int, ...] = (4, 84, 84),
            dtype: str = "float32", layout: str = "NCHW") -> Function:
    """The DQN as a function of ``data`` and its parameters.

    Parameters
    ----------
    batch_size : int
        Batch size.
    num_actions : int
        Outputs (one Q value per action).
    image_shape : tuple of int
        One input in ``layout``, without the batch axis.
    dtype : str
        Data and parameter dtype.
    layout : str
        ``"NCHW"`` or ``"NHWC"``.

    Returns
    -------
    Function
        The network.
    """
    data = var("data", shape=(batch_size, *image_shape), dtype=dtype)
    bias_axis = layout.index("C")
    net: Expr = data
    for i, (kernel, stride, channels) in enumerate(((8, 4, 32), (4, 2, 64), (3, 1, 64)), start=1):
        bias = var(f"conv{i}_bias", shape=(channels,), dtype=dtype)
        net = layers.conv2d(net, kernel_size=(kernel, kernel), strides=(stride, stride),
                            padding=(0, 0), channels=channels, name=f"conv{i}",
                            data_layout=layout, kernel_layout=layers.conv_kernel_layout(layout))
        net = relu(bias_add(net, bias, bias_axis))
    net = batch_flatten(net)
    net = relu(layers.dense_add_bias(net, units=512, name="dense1"))
    net = layers.dense_add_bias(net, units=num_actions, name="dense2")
    return Function(free_vars(net), net)


def get_workload(batch_size: int, num_actions: int = 18,
                 image_shape: tuple[int, ...] = (4, 84, 84), dtype: str = "float32",
                 layout: str = "NCHW") -> tuple[IRModule, dict[str, NDArray]]:
    """The DQN module and its Xavier-initialised parameters (``relay.testing.dqn``).

    Parameters
    ----------
    batch_size : int
        Batch size.
    num_actions : int
        Outputs.
    image_shape : tuple of int
        One input, without the batch axis.
    dtype : str
        Data and parameter dtype.
    layout : str
        ``"NCHW"`` or ``"NHWC"``.

    Returns
    -------
    mod : IRModule
        The network, input ``data``.
    params : dict of str to NDArray
        The other parameters.
    """
    return create_workload(get_net(batch_size, num_actions, image_shape, dtype, layout))
