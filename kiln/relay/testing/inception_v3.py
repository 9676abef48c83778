"""Inception v3 test network, structured and named as ``tvm.relay.testing.inception_v3``.

Szegedy et al., "Rethinking the Inception Architecture for Computer Vision" (2015), as TVM's
test network builds it (from MXNet's example symbol): convolution + batch norm + relu blocks
named ``<name><suffix>_conv1`` / ``_bn``, the Inception 7A-7E modules, an 8x8 average pool, a
dense layer (``fc1_weight``, ``fc2_bias``) and a softmax. TVM leaves the dense weight and bias
untyped; here they carry their shapes, ``(num_classes, 2048)`` and ``(num_classes,)``.
"""

from __future__ import annotations

from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function, var
from kiln.ir.module import IRModule
from kiln.op.nn import batch_flatten, bias_add, dense, relu, softmax
from kiln.op.pool import avg_pool2d, max_pool2d
from kiln.op.transform import concatenate
from kiln.relay.testing import layers
from kiln.relay.testing.init import create_workload
from kiln.runtime.ndarray import NDArray

__all__ = ["get_net", "get_workload"]

_Pair = tuple[int, int]


def _conv(data: Expr, num_filter: int, kernel: _Pair = (1, 1), stride: _Pair = (1, 1),
          pad: _Pair = (0, 0), name: str = "", suffix: str = "") -> Expr:
    conv = layers.conv2d(data=data, channels=int(num_filter), kernel_size=kernel, strides=stride,
                         padding=pad, name=f"{name}{suffix}_conv1")
    return relu(layers.batch_norm_infer(data=conv, epsilon=2e-5, name=f"{name}{suffix}_bn"))


def _pool(data: Expr, kernel: _Pair, stride: _Pair, pad: _Pair, pool_type: str) -> Expr:
    if pool_type == "max":
        return max_pool2d(data, pool_size=kernel, strides=stride, padding=pad)
    return avg_pool2d(data, pool_size=kernel, strides=stride, padding=pad, count_include_pad=True)


def _inception_7a(data: Expr, n1: int, n3r: int, n31: int, n32: int, n5r: int, n5: int,
                  pool: str, proj: int, name: str) -> Expr:
    t1 = _conv(data, n1, name=f"{name}_conv")
    t5 = _conv(data, n5r, name=f"{name}_tower", suffix="_conv")
    t5 = _conv(t5, n5, kernel=(5, 5), pad=(2, 2), name=f"{name}_tower", suffix="_conv_1")
    t3 = _conv(data, n3r, name=f"{name}_tower_1", suffix="_conv")
    t3 = _conv(t3, n31, kernel=(3, 3), pad=(1, 1), name=f"{name}_tower_1", suffix="_conv_1")
    t3 = _conv(t3, n32, kernel=(3, 3), pad=(1, 1), name=f"{name}_tower_1", suffix="_conv_2")
    pooled = _pool(data, (3, 3), (1, 1), (1, 1), pool)
    cproj = _conv(pooled, proj, name=f"{name}_tower_2", suffix="_conv")
    return concatenate((t1, t5, t3, cproj), axis=1)


def _inception_7b(data: Expr, n3: int, nd3r: int, nd31: int, nd32: int, pool: str,
                  name: str) -> Expr:
    t3 = _conv(data, n3, kernel=(3, 3), stride=(2, 2), name=f"{name}_conv")
    td = _conv(data, nd3r, name=f"{name}_tower", suffix="_conv")
    td = _conv(td, nd31, kernel=(3, 3), pad=(1, 1), name=f"{name}_tower", suffix="_conv_1")
    td = _conv(td, nd32, kernel=(3, 3), stride=(2, 2), name=f"{name}_tower", suffix="_conv_2")
    pooled = _pool(data, (3, 3), (2, 2), (0, 0), "max")
    return concatenate((t3, td, pooled), axis=1)


def _inception_7c(data: Expr, n1: int, d7r: int, d71: int, d72: int, q7r: int, q71: int,
                  q72: int, q73: int, q74: int, pool: str, proj: int, name: str) -> Expr:
    t1 = _conv(data, n1, name=f"{name}_conv")
    d7 = _conv(data, d7r, name=f"{name}_tower", suffix="_conv")
    d7 = _conv(d7, d71, kernel=(1, 7), pad=(0, 3), name=f"{name}_tower", suffix="_conv_1")
    d7 = _conv(d7, d72, kernel=(7, 1), pad=(3, 0), name=f"{name}_tower", suffix="_conv_2")
    q7 = _conv(data, q7r, name=f"{name}_tower_1", suffix="_conv")
    q7 = _conv(q7, q71, kernel=(7, 1), pad=(3, 0), name=f"{name}_tower_1", suffix="_conv_1")
    q7 = _conv(q7, q72, kernel=(1, 7), pad=(0, 3), name=f"{name}_tower_1", suffix="_conv_2")
    q7 = _conv(q7, q73, kernel=(7, 1), pad=(3, 0), name=f"{name}_tower_1", suffix="_conv_3")
    q7 = _conv(q7, q74, kernel=(1, 7), pad=(0, 3), name=f"{name}_tower_1", suffix="_conv_4")
    pooled = _pool(data, (3, 3), (1, 1), (1, 1), pool)
    cproj = _conv(pooled, proj, name=f"{name}_tower_2", suffix="_conv")
    return concatenate((t1, d7, q7, cproj), axis=1)


def _inception_7d(data: Expr, n3r: int, n3: int, d7r: int, d71: int, d72: int, d73: int,
                  pool: str, name: str) -> Expr:
    t3 = _conv(data, n3r, name=f"{name}_tower", suffix="_conv")
    t3 = _conv(t3, n3, kernel=(3, 3), stride=(2, 2), name=f"{name}_tower", suffix="_conv_1")
    d7 = _conv(data, d7r, name=f"{name}_tower_1", suffix="_conv")
    d7 = _conv(d7, d71, kernel=(1, 7), pad=(0, 3), name=f"{name}_tower_1", suffix="_conv_1")
    d7 = _conv(d7, d72, kernel=(7, 1), pad=(3, 0), name=f"{name}_tower_1", suffix="_conv_2")
    d7 = _conv(d7, d73, kernel=(3, 3), stride=(2, 2), name=f"{name}_tower_1", suffix="_conv_3")
    pooled = _pool(data, (3, 3), (2, 2), (0, 0), pool)
    return concatenate((t3, d7, pooled), axis=1)


def _inception_7e(data: Expr, n1: int, d3r: int, d31: int, d32: int, t3r: int, n3: int,
                  t31: int, t32: int, pool: str, proj: int, name: str) -> Expr:
    t1 = _conv(data, n1, name=f"{name}_conv")
    d3 = _conv(data, d3r, name=f"{name}_tower", suffix="_conv")
    d3a = _conv(d3, d31, kernel=(1, 3), pad=(0, 1), name=f"{name}_tower", suffix="_mixed_conv")
    d3b = _conv(d3, d32, kernel=(3, 1), pad=(1, 0), name=f"{name}_tower", suffix="_mixed_conv_1")
    t3 = _conv(data, t3r, name=f"{name}_tower_1", suffix="_conv")
    t3 = _conv(t3, n3, kernel=(3, 3), pad=(1, 1), name=f"{name}_tower_1", suffix="_conv_1")
    t3a = _conv(t3, t31, kernel=(1, 3), pad=(0, 1), name=f"{name}_tower_1", suffix="_mixed_conv")
    t3b = _conv(t3, t32, kernel=(3, 1), pad=(1, 0), name=f"{name}_tower_1",
                suffix="_mixed_conv_1")
    pooled = _pool(data, (3, 3), (1, 1), (1, 1), pool)
    cproj = _conv(pooled, proj, name=f"{name}_tower_2", suffix="_conv")
    return concatenate((t1, d3a, d3b, t3a, t3b, cproj), axis=1)


def get_net(batch_size: int, num_classes: int, image_shape: tuple[int, ...],
            dtype: str) -> Function:
    """The Inception v3 network as a function of its input and parameters.

    Parameters
    ----------
    batch_size : int
        The batch size.
    num_classes : int
        Number of classes.
    image_shape : tuple of int
        ``(channels, height, width)``; 299x299 gives the 8x8 map the final pool expects.
    dtype : str
        The data type.

    Returns
    -------
    Function
        ``fn(data, <parameters>) -> softmax``.
    """
    data = var("data", shape=(batch_size, *image_shape), dtype=dtype)
    conv = _conv(data, 32, kernel=(3, 3), stride=(2, 2), name="conv")
    conv_1 = _conv(conv, 32, kernel=(3, 3), name="conv_1")
    conv_2 = _conv(conv_1, 64, kernel=(3, 3), pad=(1, 1), name="conv_2")
    pool = _pool(conv_2, (3, 3), (2, 2), (0, 0), "max")
    conv_3 = _conv(pool, 80, kernel=(1, 1), name="conv_3")
    conv_4 = _conv(conv_3, 192, kernel=(3, 3), name="conv_4")
    pool1 = _pool(conv_4, (3, 3), (2, 2), (0, 0), "max")
    in3a = _inception_7a(pool1, 64, 64, 96, 96, 48, 64, "avg", 32, "mixed")
    in3b = _inception_7a(in3a, 64, 64, 96, 96, 48, 64, "avg", 64, "mixed_1")
    in3c = _inception_7a(in3b, 64, 64, 96, 96, 48, 64, "avg", 64, "mixed_2")
    in3d = _inception_7b(in3c, 384, 64, 96, 96, "max", "mixed_3")
    in4a = _inception_7c(in3d, 192, 128, 128, 192, 128, 128, 128, 128, 192, "avg", 192, "mixed_4")
    in4b = _inception_7c(in4a, 192, 160, 160, 192, 160, 160, 160, 160, 192, "avg", 192, "mixed_5")
    in4c = _inception_7c(in4b, 192, 160, 160, 192, 160, 160, 160, 160, 192, "avg", 192, "mixed_6")
    in4d = _inception_7c(in4c, 192, 192, 192, 192, 192, 192, 192, 192, 192, "avg", 192, "mixed_7")
    in4e = _inception_7d(in4d, 192, 320, 192, 192, 192, 192, "max", "mixed_8")
    in5a = _inception_7e(in4e, 320, 384, 384, 384, 448, 384, 384, 384, "avg", 192, "mixed_9")
    in5b = _inception_7e(in5a, 320, 384, 384, 384, 448, 384, 384, 384, "max", 192, "mixed_10")
    pooled = _pool(in5b, (8, 8), (1, 1), (0, 0), "avg")
    flat = batch_flatten(pooled)
    fc1 = dense(flat, var("fc1_weight", shape=(num_classes, 2048), dtype=dtype), units=num_classes)
    fc1 = bias_add(fc1, var("fc2_bias", shape=(num_classes,), dtype=dtype))
    out = softmax(fc1)
    return Function(free_vars(out), out)


def get_workload(batch_size: int = 1, num_classes: int = 1000,
                 image_shape: tuple[int, ...] = (3, 299, 299),
                 dtype: str = "float32") -> tuple[IRModule, dict[str, NDArray]]:
    """Inception v3 as ``(mod, params)`` with Xavier-initialised parameters (TVM's workload).

    Parameters
    ----------
    batch_size : int
        The batch size.
    num_classes : int
        Number of classes.
    image_shape : tuple of int
        ``(channels, height, width)``.
    dtype : str
        The data type.

    Returns
    -------
    tuple of (IRModule, dict of str to NDArray)
        The module and its parameters.
    """
    return create_workload(get_net(batch_size, num_classes, image_shape, dtype))
