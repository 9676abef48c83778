"""ResNet v2 (pre-activation) test networks, structured and named as ``tvm.relay.testing.resnet``.

He, Zhang, Ren, Sun: "Identity Mappings in Deep Residual Networks". Each residual unit is
batch_norm -> relu -> conv (twice, or three times with a bottleneck), with a 1x1 projection
shortcut when the shape changes. Parameter names follow TVM (``bn_data_gamma``, ``conv0_weight``,
``stage1_unit1_bn1_gamma``, ..., ``fc1_weight``, ``fc1_bias``).
"""

from __future__ import annotations

from typing import Any

from kiln.errors import KilnError
from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function, var
from kiln.ir.module import IRModule
from kiln.op.elemwise import add
from kiln.op.nn import batch_flatten, relu, softmax
from kiln.op.pool import global_avg_pool2d, max_pool2d
from kiln.relay.testing import layers
from kiln.relay.testing.init import create_workload
from kiln.runtime.ndarray import NDArray

__all__ = ["get_net", "get_workload", "residual_unit", "resnet"]


def residual_unit(data: Expr, num_filter: int, stride: tuple[int, int], dim_match: bool, name: str,
                  bottle_neck: bool = True, data_layout: str = "NCHW",
                  kernel_layout: str = "OIHW") -> Expr:
    """One pre-activation residual unit.

    Parameters
    ----------
    data : Expr
        Input.
    num_filter : int
        Output channels.
    stride : tuple of int
        Stride of the unit's first (or, with a bottleneck, its 1x1) convolution.
    dim_match : bool
        True when input and output shapes match (identity shortcut).
    name : str
        Prefix of the unit's parameter names.
    bottle_neck : bool
        Use the 1x1 -> 3x3 -> 1x1 bottleneck (ResNet-50 and deeper).
    data_layout, kernel_layout : str
        Layouts of the convolutions.

    Returns
    -------
    Expr
        The unit's output.
    """
    bn_axis = data_layout.index("C")
    conv_args: dict[str, Any] = {"data_layout": data_layout, "kernel_layout": kernel_layout}
    bn1 = layers.batch_norm_infer(data=data, epsilon=2e-5, axis=bn_axis, name=name + "_bn1")
    act1 = relu(bn1)
    if bottle_neck:
        conv1 = layers.conv2d(data=act1, channels=int(num_filter * 0.25), kernel_size=(1, 1),
                              strides=stride, padding=(0, 0), name=name + "_conv1", **conv_args)
        bn2 = layers.batch_norm_infer(data=conv1, epsilon=2e-5, axis=bn_axis, name=name + "_bn2")
        conv2 = layers.conv2d(data=relu(bn2), channels=int(num_filter * 0.25), kernel_size=(3, 3),
                              strides=(1, 1), padding=(1, 1), name=name + "_conv2", **conv_args)
        bn3 = layers.batch_norm_infer(data=conv2, epsilon=2e-5, axis=bn_axis, name=name + "_bn3")
        body = layers.conv2d(data=relu(bn3), channels=num_filter, kernel_size=(1, 1),
                             strides=(1, 1), padding=(0, 0), name=name + "_conv3", **conv_args)
    else:
        conv1 = layers.conv2d(data=act1, channels=num_filter, kernel_size=(3, 3), strides=stride,
                              padding=(1, 1), name=name + "_conv1", **conv_args)
        bn2 = layers.batch_norm_infer(data=conv1, epsilon=2e-5, axis=bn_axis, name=name + "_bn2")
        body = layers.conv2d(data=relu(bn2), channels=num_filter, kernel_size=(3, 3),
                             strides=(1, 1), padding=(1, 1), name=name + "_conv2", **conv_args)
    if dim_match:
        shortcut = data
    else:
        shortcut = layers.conv2d(data=act1, channels=num_filter, kernel_size=(1, 1),
                                 strides=stride, name=name + "_sc", **conv_args)
    return add(body, shortcut)


def resnet(units: list[int], num_stages: int, filter_list: list[int], num_classes: int,
           data_shape: tuple[int, ...], bottle_neck: bool = True, layout: str = "NCHW",
           dtype: str = "float32") -> Function:
    """A ResNet as a relay function of its free variables.

    Parameters
    ----------
    units : list of int
        Residual units per stage.
    num_stages : int
        Number of stages.
    filter_list : list of int
        Channels of the stem and of each stage.
    num_classes : int
        Output classes.
    data_shape : tuple of int
        Input shape (batch first).
    bottle_neck : bool
        Use bottleneck units.
    layout : str
        ``"NCHW"`` or ``"NHWC"``.
    dtype : str
        Data and parameter dtype.

    Returns
    -------
    Function
        The network, ending in a softmax.
    """
    if len(units) != num_stages:
        raise KilnError(f"{len(units)} unit counts given for {num_stages} stages")
    kernel_layout = "OIHW" if layout == "NCHW" else "HWIO"
    conv_args: dict[str, Any] = {"data_layout": layout, "kernel_layout": kernel_layout}
    bn_axis = layout.index("C")
    data = var("data", shape=data_shape, dtype=dtype)
    body = layers.batch_norm_infer(data=data, epsilon=2e-5, axis=bn_axis, scale=False,
                                   name="bn_data")
    height = data_shape[layout.index("H")]
    if height <= 32:  # CIFAR-sized inputs: a 3x3 stem without pooling
        body = layers.conv2d(data=body, channels=filter_list[0], kernel_size=(3, 3),
                             strides=(1, 1), padding=(1, 1), name="conv0", **conv_args)
    else:  # ImageNet-sized inputs: 7x7 stride-2 stem, batch norm, relu, 3x3 max pooling
        body = layers.conv2d(data=body, channels=filter_list[0], kernel_size=(7, 7),
                             strides=(2, 2), padding=(3, 3), name="conv0", **conv_args)
        body = layers.batch_norm_infer(data=body, epsilon=2e-5, axis=bn_axis, name="bn0")
        body = max_pool2d(relu(body), pool_size=(3, 3), strides=(2, 2), padding=(1, 1),
                          layout=layout)
    for i in range(num_stages):
        stride = (1, 1) if i == 0 else (2, 2)
        body = residual_unit(body, filter_list[i + 1], stride, False, name=f"stage{i + 1}_unit1",
                             bottle_neck=bottle_neck, data_layout=layout,
                             kernel_layout=kernel_layout)
        for j in range(units[i] - 1):
            body = residual_unit(body, filter_list[i + 1], (1, 1), True,
                                 name=f"stage{i + 1}_unit{j + 2}", bottle_neck=bottle_neck,
                                 data_layout=layout, kernel_layout=kernel_layout)
    bn1 = layers.batch_norm_infer(data=body, epsilon=2e-5, axis=bn_axis, name="bn1")
    pool1 = global_avg_pool2d(relu(bn1), layout=layout)
    fc1 = layers.dense_add_bias(data=batch_flatten(pool1), units=num_classes, name="fc1")
    net = softmax(fc1)
    return Function(free_vars(net), net)


_IMAGENET_UNITS = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3],
                   152: [3, 8, 36, 3], 200: [3, 24, 36, 3], 269: [3, 30, 48, 8]}


def get_net(batch_size: int, num_classes: int, num_layers: int = 50,
            image_shape: tuple[int, int, int] = (3, 224, 224), layout: str = "NCHW",
            dtype: str = "float32") -> Function:
    """The ResNet of ``num_layers`` layers for images of ``image_shape`` (TVM's configurations:
    CIFAR-style 3-stage networks for images up to 28 pixels high, ImageNet-style 4-stage ones
    otherwise).

    Parameters
    ----------
    batch_size : int
        Batch size.
    num_classes : int
        Output classes.
    num_layers : int
        Depth (18, 34, 50, 101, 152, 200, 269; CIFAR: 6n + 2 or, from 164, 9n + 2).
    image_shape : tuple of int
        One image, in ``layout`` without the batch axis.
    layout : str
        ``"NCHW"`` or ``"NHWC"``.
    dtype : str
        Data and parameter dtype.

    Returns
    -------
    Function
        The network.
    """
    height = image_shape[1] if layout == "NCHW" else image_shape[0]
    data_shape = (batch_size, *image_shape)
    if height <= 28:
        num_stages = 3
        if (num_layers - 2) % 9 == 0 and num_layers >= 164:
            per_unit, filter_list, bottle_neck = [(num_layers - 2) // 9], [16, 64, 128, 256], True
        elif (num_layers - 2) % 6 == 0 and num_layers < 164:
            per_unit, filter_list, bottle_neck = [(num_layers - 2) // 6], [16, 16, 32, 64], False
        else:
            raise KilnError(f"no CIFAR ResNet with {num_layers} layers")
        units = per_unit * num_stages
    else:
        if num_layers not in _IMAGENET_UNITS:
            raise KilnError(f"no ImageNet ResNet with {num_layers} layers; choose one of "
                            f"{sorted(_IMAGENET_UNITS)}")
        bottle_neck = num_layers >= 50
        filter_list = [64, 256, 512, 1024, 2048] if bottle_neck else [64, 64, 128, 256, 512]
        num_stages = 4
        units = _IMAGENET_UNITS[num_layers]
    return resnet(units, num_stages, filter_list, num_classes, data_shape, bottle_neck, layout,
                  dtype)


def get_workload(batch_size: int = 1, num_classes: int = 1000, num_layers: int = 18,
                 image_shape: tuple[int, int, int] = (3, 224, 224), layout: str = "NCHW",
                 dtype: str = "float32") -> tuple[IRModule, dict[str, NDArray]]:
    """A ResNet module and its initial parameters (``relay.testing.resnet.get_workload``).

    Parameters
    ----------
    batch_size : int
        Batch size.
    num_classes : int
        Output classes.
    num_layers : int
        Depth.
    image_shape : tuple of int
        One image, in ``layout`` without the batch axis.
    layout : str
        ``"NCHW"`` or ``"NHWC"``.
    dtype : str
        Data and parameter dtype.

    Returns
    -------
    mod : IRModule
        The network, input ``data``.
    params : dict of str to NDArray
        Every other parameter, Xavier-initialised with seed 0.

    Examples
    --------
    >>> mod, params = get_workload(num_layers=18, image_shape=(3, 64, 64), num_classes=10)
    """
    net = get_net(batch_size, num_classes, num_layers, image_shape, layout, dtype)
    return create_workload(net)
