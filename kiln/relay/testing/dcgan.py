"""DCGAN generator test network, structured and named as ``tvm.relay.testing.dcgan``.

A dense layer from the random code to ``4 x 4 x 8 ngf`` features, reshaped to a 4x4 map, then
three transposed-convolution blocks (4x4 kernels, stride 2; batch norm without scale; relu)
doubling the map to 32x32, a last transposed convolution to the 64x64 image and ``tanh``
(Radford et al., arXiv:1511.06434). Parameters: ``dense_weight``, ``g2_deconv_weight``,
``g2_batch_norm_gamma``, ... ``g5_deconv_weight``.
"""

from __future__ import annotations

from typing import Any

from kiln.errors import KilnError
from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function, var
from kiln.ir.module import IRModule
from kiln.op.elemwise import tanh
from kiln.op.nn import dense, relu
from kiln.op.transform import reshape
from kiln.relay.testing import layers
from kiln.relay.testing.init import create_workload
from kiln.runtime.ndarray import NDArray

__all__ = ["deconv2d", "deconv2d_bn_relu", "get_net", "get_workload"]

_Shape = tuple[int, ...]


def deconv2d(data: Expr, ishape: _Shape, oshape: _Shape, kshape: tuple[int, int], layout: str,
             name: str, stride: tuple[int, int] = (2, 2)) -> Expr:
    """A transposed convolution enlarging the feature map to ``oshape`` (``C, H, W``).

    Parameters
    ----------
    data : Expr
        The input.
    ishape, oshape : tuple of int
        Input and output shapes, ``(channels, height, width)``.
    kshape : tuple of int
        Kernel size.
    layout : str
        ``"NCHW"`` or ``"NHWC"``.
    name : str
        Prefix of the weight's name.
    stride : tuple of int
        Strides.

    Returns
    -------
    Expr
        The transposed convolution.
    """
    pad_y, pad_x = (kshape[0] - 1) // 2, (kshape[1] - 1) // 2
    adj_y = (oshape[-2] + 2 * pad_y - kshape[0]) % stride[0]
    adj_x = (oshape[-1] + 2 * pad_x - kshape[1]) % stride[1]
    kernel_layouts = {"NCHW": "IOHW", "NHWC": "HWOI"}
    if layout not in kernel_layouts:
        raise KilnError(f"dcgan: invalid layout {layout!r} (NCHW or NHWC)")
    return layers.conv2d_transpose(data, kernel_size=kshape, strides=stride, channels=oshape[0],
                                   padding=(pad_y, pad_x), output_padding=(adj_y, adj_x),
                                   data_layout=layout, kernel_layout=kernel_layouts[layout],
                                   name=name)


def deconv2d_bn_relu(data: Expr, prefix: str, **kwargs: Any) -> Expr:
    """:func:`deconv2d`, batch norm (no scale, epsilon 1e-5 + 1e-12) and relu.

    Parameters
    ----------
    data : Expr
        The input.
    prefix : str
        Prefix of the parameter names (``<prefix>_deconv_weight``, ``<prefix>_batch_norm_*``).
    **kwargs
        The arguments of :func:`deconv2d` but ``name``.

    Returns
    -------
    Expr
        The block's output.
    """
    eps = 1e-5 + 1e-12
    net = deconv2d(data, name=f"{prefix}_deconv", **kwargs)
    bn_axis = kwargs.get("layout", "NCHW").index("C")
    net = layers.batch_norm_infer(net, epsilon=eps, scale=False, axis=bn_axis,
                                  name=f"{prefix}_batch_norm")
    return relu(net)


def get_net(batch_size: int, random_len: int = 100, oshape: _Shape = (3, 64, 64), ngf: int = 128,
            code: Expr | None = None, layout: str = "NCHW", dtype: str = "float32") -> Function:
    """The generator as a function of ``data`` (the random code) and its parameters.

    Parameters
    ----------
    batch_size : int
        Batch size.
    random_len : int
        Length of the random code.
    oshape : tuple of int
        Output image ``(channels, 64, 64)``.
    ngf : int
        Feature maps of the last block.
    code : Expr, optional
        The code (default: a variable ``data`` of shape ``(batch_size, random_len)``).
    layout : str
        ``"NCHW"`` or ``"NHWC"``.
    dtype : str
        Data and parameter dtype.

    Returns
    -------
    Function
        The network.
    """
    if tuple(oshape[-2:]) != (64, 64):
        raise KilnError(f"dcgan: only 64x64 images are supported, got {oshape}")
    if code is None:
        code = var("data", shape=(batch_size, random_len), dtype=dtype)
    units = 4 * 4 * ngf * 8
    code_len = layers.tensor_type(code).shape[-1]
    dense_weight = var("dense_weight", shape=(units, code_len), dtype=dtype)
    net: Expr = relu(dense(code, dense_weight, units=units))
    if layout == "NCHW":
        net = reshape(net, newshape=(-1, ngf * 8, 4, 4))
    elif layout == "NHWC":
        net = reshape(net, newshape=(-1, 4, 4, ngf * 8))
    else:
        raise KilnError(f"dcgan: invalid layout {layout!r} (NCHW or NHWC)")
    net = deconv2d_bn_relu(net, ishape=(ngf * 8, 4, 4), oshape=(ngf * 4, 8, 8), kshape=(4, 4),
                           layout=layout, prefix="g2")
    net = deconv2d_bn_relu(net, ishape=(ngf * 4, 8, 8), oshape=(ngf * 2, 16, 16), kshape=(4, 4),
                           layout=layout, prefix="g3")
    net = deconv2d_bn_relu(net, ishape=(ngf * 2, 16, 16), oshape=(ngf, 32, 32), kshape=(4, 4),
                           layout=layout, prefix="g4")
    net = deconv2d(net, ishape=(ngf, 32, 32), oshape=tuple(oshape[-3:]), kshape=(4, 4),
                   layout=layout, name="g5_deconv")
    net = tanh(net)
    return Function(free_vars(net), net)


def get_workload(batch_size: int, oshape: _Shape = (3, 64, 64), ngf: int = 128,
                 random_len: int = 100, layout: str = "NCHW",
                 dtype: str = "float32") -> tuple[IRModule, dict[str, NDArray]]:
    """The DCGAN generator module and its parameters (``relay.testing.dcgan``).

    Parameters
    ----------
    batch_size : int
        Batch size.
    oshape : tuple of int
        Output image, ``CHW``.
    ngf : int
        Feature maps of the last block.
    random_len : int
        Length of the random code.
    layout : str
        ``"NCHW"`` or ``"NHWC"``.
    dtype : str
        Data and parameter dtype.

    Returns
    -------
    mod : IRModule
        The network, input ``data``.
    params : dict of str to NDArray
        The other parameters.
    """
    return create_workload(get_net(batch_size, random_len, oshape=oshape, ngf=ngf, layout=layout,
                                   dtype=dtype))
