"""DenseNet test network, structured and named as ``tvm.relay.testing.densenet``.

A 7x7 stride-2 convolution, batch norm, relu and max pooling, then dense blocks (each layer:
batch norm, relu, 1x1 convolution to ``bn_size * growth_rate`` channels, batch norm, relu, 3x3
convolution to ``growth_rate`` channels; a block concatenates its layers' outputs) separated by
transitions (batch norm, relu, 1x1 convolution halving the channels, 2x2 average pooling), then
batch norm, relu, 7x7 average pooling and a dense layer (Huang et al., arXiv:1608.06993).
Parameters follow TVM: ``conv1_weight``, ``batch1_gamma``, ``batch_1_0_0_gamma``,
``conv2d_1_0_0_weight``, ``batch_t_0_gamma``, ``conv_t_0_weight``, ..., ``dense_weight``.
"""

from __future__ import annotations

from kiln.errors import KilnError
from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function, var
from kiln.ir.module import IRModule
from kiln.op.nn import batch_flatten, relu
from kiln.op.pool import avg_pool2d, max_pool2d
from kiln.op.transform import concatenate
from kiln.relay.testing import layers
from kiln.relay.testing.init import create_workload
from kiln.runtime.ndarray import NDArray

__all__ = ["get_workload"]

_SPECS: dict[int, tuple[int, int, list[int]]] = {
    121: (64, 32, [6, 12, 24, 16]),
    161: (96, 48, [6, 12, 36, 24]),
    169: (69, 32, [6, 12, 32, 32]),
    201: (64, 32, [6, 12, 48, 32]),
}


def _make_dense_layer(data: Expr, growth_rate: int, bn_size: int, index: str) -> Expr:
    net: Expr = relu(layers.batch_norm_infer(data, name=f"batch_1_{index}"))
    net = layers.conv2d(net, channels=bn_size * growth_rate, kernel_size=(1, 1),
                        name=f"conv2d_1_{index}")
    net = relu(layers.batch_norm_infer(net, name=f"batch_2_{index}"))
    return layers.conv2d(net, channels=growth_rate, kernel_size=(3, 3), padding=(1, 1),
                         name=f"conv2d_2_{index}")


def _make_dense_block(data: Expr, num_layers: int, bn_size: int, growth_rate: int,
                      index: int) -> Expr:
    layer_out = data
    blocks = []
    for i in range(num_layers):
        layer_out = _make_dense_layer(layer_out, growth_rate, bn_size, f"{index}_{i}")
        blocks.append(layer_out)
    return concatenate(blocks, 1)


def _make_transition(data: Expr, num_output_features: int, index: int) -> Expr:
    net: Expr = relu(layers.batch_norm_infer(data, name=f"batch_t_{index}"))
    net = layers.conv2d(net, channels=num_output_features, kernel_size=(1, 1),
                        name=f"conv_t_{index}")
    return avg_pool2d(net, pool_size=(2, 2), strides=(2, 2))


def _make_dense_net(num_init_features: int, growth_rate: int, block_config: list[int],
                    data_shape: tuple[int, ...], data_dtype: str, bn_size: int = 4,
                    classes: int = 1000) -> Function:
    data = var("data", shape=data_shape, dtype=data_dtype)
    net: Expr = layers.conv2d(data, channels=num_init_features, kernel_size=(7, 7), strides=(2, 2),
                        padding=(3, 3), name="conv1")
    net = relu(layers.batch_norm_infer(net, name="batch1"))
    net = max_pool2d(net, pool_size=(3, 3), strides=(2, 2), padding=(1, 1))
    num_features = num_init_features
    for i, num_layers in enumerate(block_config):
        net = _make_dense_block(net, num_layers, bn_size, growth_rate, i)
        num_features += num_layers * growth_rate
        if i != len(block_config) - 1:
            net = _make_transition(net, num_features // 2, i)
            num_features //= 2
    net = relu(layers.batch_norm_infer(net, name="batch2"))
    net = batch_flatten(avg_pool2d(net, pool_size=(7, 7)))
    net = layers.dense_add_bias(net, units=classes, name="dense")
    return Function(free_vars(net), net)


def get_workload(densenet_size: int = 121, classes: int = 1000, batch_size: int = 4,
                 image_shape: tuple[int, ...] = (3, 224, 224),
                 dtype: str = "float32") -> tuple[IRModule, dict[str, NDArray]]:
    """A DenseNet module and its parameters (``relay.testing.densenet``).

    Parameters
    ----------
    densenet_size : int
        121, 161, 169 or 201.
    classes : int
        Output classes.
    batch_size : int
        Batch size.
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
    if densenet_size not in _SPECS:
        raise KilnError(f"no DenseNet-{densenet_size}; choose one of {sorted(_SPECS)}")
    num_init_features, growth_rate, block_config = _SPECS[densenet_size]
    net = _make_dense_net(num_init_features, growth_rate, block_config,
                          (batch_size, *image_shape), dtype, 4, classes)
    return create_workload(net)
