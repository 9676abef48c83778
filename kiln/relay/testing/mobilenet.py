"""MobileNet v1 test network, structured and named as ``tvm.relay.testing.mobilenet``.

A 3x3 stride-2 convolution block, then 13 depthwise-separable blocks (depthwise 3x3 + batch norm +
relu, pointwise 1x1 + batch norm + relu), global average pooling, a dense layer and a softmax.
Parameter names follow TVM (``conv_block_1_conv_weight``, ``separable_conv_block_1_weight`` for the
depthwise kernel, ``separable_conv_block_1_conv2_weight``, ..., ``fc_weight``, ``fc_bias``).
"""

from __future__ import annotations

from kiln.errors import KilnError
from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function, var
from kiln.ir.module import IRModule
from kiln.op.nn import batch_flatten, bias_add, dense, relu, softmax
from kiln.op.pool import global_avg_pool2d
from kiln.relay.testing import layers
from kiln.relay.testing.init import create_workload
from kiln.runtime.ndarray import NDArray

__all__ = ["conv_block", "get_workload", "mobile_net", "separable_conv_block"]


def conv_block(data: Expr, name: str, channels: int, kernel_size: tuple[int, int] = (3, 3),
               strides: tuple[int, int] = (1, 1), padding: tuple[int, int] = (1, 1),
               epsilon: float = 1e-5, layout: str = "NCHW") -> Expr:
    """Convolution, batch norm and relu.

    Parameters
    ----------
    data : Expr
        Input.
    name : str
        Parameter name prefix.
    channels : int
        Output channels.
    kernel_size, strides, padding : tuple of int
        Convolution geometry.
    epsilon : float
        Batch-norm epsilon.
    layout : str
        ``"NCHW"`` or ``"NHWC"``.

    Returns
    -------
    Expr
        The block's output.
    """
    conv = layers.conv2d(data=data, channels=channels, kernel_size=kernel_size, strides=strides,
                         padding=padding, data_layout=layout,
                         kernel_layout=layers.conv_kernel_layout(layout), name=name + "_conv")
    bn = layers.batch_norm_infer(data=conv, epsilon=epsilon, axis=layout.index("C"),
                                 name=name + "_bn")
    return relu(bn)


def separable_conv_block(data: Expr, name: str, depthwise_channels: int, pointwise_channels: int,
                         kernel_size: tuple[int, int] = (3, 3), downsample: bool = False,
                         padding: tuple[int, int] = (1, 1), epsilon: float = 1e-5,
                         layout: str = "NCHW", dtype: str = "float32") -> Expr:
    """Depthwise convolution + batch norm + relu, then pointwise convolution + batch norm + relu.

    Parameters
    ----------
    data : Expr
        Input.
    name : str
        Parameter name prefix.
    depthwise_channels : int
        Channels of the input and of the depthwise convolution.
    pointwise_channels : int
        Output channels.
    kernel_size : tuple of int
        Depthwise kernel size.
    downsample : bool
        Stride 2 in the depthwise convolution.
    padding : tuple of int
        Depthwise padding.
    epsilon : float
        Batch-norm epsilon.
    layout : str
        ``"NCHW"`` or ``"NHWC"``.
    dtype : str
        Parameter dtype.

    Returns
    -------
    Expr
        The block's output.
    """
    strides = (2, 2) if downsample else (1, 1)
    if layout == "NCHW":
        wshape = (depthwise_channels, 1, *kernel_size)
    elif layout == "NHWC":
        wshape = (*kernel_size, depthwise_channels, 1)
    else:
        raise KilnError(f"invalid layout {layout!r}; expected NCHW or NHWC")
    bn_axis = layout.index("C")
    weight = var(name + "_weight", shape=wshape, dtype=dtype)
    conv1 = layers.conv2d(data=data, weight=weight, channels=depthwise_channels,
                          groups=depthwise_channels, kernel_size=kernel_size, strides=strides,
                          padding=padding, data_layout=layout,
                          kernel_layout=layers.conv_kernel_layout(layout, True),
                          name=name + "_depthwise_conv1")
    bn1 = layers.batch_norm_infer(data=conv1, epsilon=epsilon, axis=bn_axis, name=name + "_bn1")
    conv2 = layers.conv2d(data=relu(bn1), channels=pointwise_channels, kernel_size=(1, 1),
                          strides=(1, 1), padding=(0, 0), data_layout=layout,
                          kernel_layout=layers.conv_kernel_layout(layout), name=name + "_conv2")
    bn2 = layers.batch_norm_infer(data=conv2, epsilon=epsilon, axis=bn_axis, name=name + "_bn2")
    return relu(bn2)


def mobile_net(num_classes: int = 1000, data_shape: tuple[int, ...] = (1, 3, 224, 224),
               dtype: str = "float32", alpha: float = 1.0, is_shallow: bool = False,
               layout: str = "NCHW") -> Function:
    """MobileNet v1 as a relay function of its free variables.

    Parameters
    ----------
    num_classes : int
        Output classes.
    data_shape : tuple of int
        Input shape (batch first, in ``layout``).
    dtype : str
        Data and parameter dtype.
    alpha : float
        Width multiplier.
    is_shallow : bool
        Use the shallow variant (two 1024-channel blocks instead of five 512-channel ones).
    layout : str
        ``"NCHW"`` or ``"NHWC"``.

    Returns
    -------
    Function
        The network, ending in a softmax.
    """
    def width(c: int) -> int:
        return int(c * alpha)

    data = var("data", shape=data_shape, dtype=dtype)
    body = conv_block(data, "conv_block_1", width(32), strides=(2, 2), layout=layout)
    # (input channels, output channels, downsample) of each separable block
    plan = [(32, 64, False), (64, 128, True), (128, 128, False), (128, 256, True),
            (256, 256, False), (256, 512, True)]
    if is_shallow:
        plan += [(512, 1024, True), (1024, 1024, True)]
    else:
        plan += [(512, 512, False)] * 5 + [(512, 1024, True), (1024, 1024, False)]
    for i, (cin, cout, downsample) in enumerate(plan, start=1):
        body = separable_conv_block(body, f"separable_conv_block_{i}", width(cin), width(cout),
                                    downsample=downsample, layout=layout, dtype=dtype)
    flatten = batch_flatten(global_avg_pool2d(body, layout=layout))
    in_dim = layers.tensor_type(flatten).shape[1]
    weight = var("fc_weight", shape=(num_classes, in_dim), dtype=dtype)
    bias = var("fc_bias", shape=(num_classes,), dtype=dtype)
    net = softmax(bias_add(dense(flatten, weight, units=num_classes), bias))
    return Function(free_vars(net), net)


def get_workload(batch_size: int = 1, num_classes: int = 1000,
                 image_shape: tuple[int, int, int] = (3, 224, 224), dtype: str = "float32",
                 layout: str = "NCHW") -> tuple[IRModule, dict[str, NDArray]]:
    """A MobileNet module and its initial parameters (``relay.testing.mobilenet.get_workload``).

    Parameters
    ----------
    batch_size : int
        Batch size.
    num_classes : int
        Output classes.
    image_shape : tuple of int
        One image, in ``layout`` without the batch axis.
    dtype : str
        Data and parameter dtype.
    layout : str
        ``"NCHW"`` or ``"NHWC"``.

    Returns
    -------
    mod : IRModule
        The network, input ``data``.
    params : dict of str to NDArray
        Every other parameter, Xavier-initialised with seed 0.
    """
    net = mobile_net(num_classes=num_classes, data_shape=(batch_size, *image_shape), dtype=dtype,
                     alpha=1.0, is_shallow=False, layout=layout)
    return create_workload(net)
