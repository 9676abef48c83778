"""Relay functions covering every op family, for the cuda target's tests (compiled vs reference).

Each case is ``name -> (make, inputs)``: ``make()`` returns the relay function, ``inputs`` the
arrays bound to its parameters by name (seeded, so every run and every machine sees the same).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import kiln
from kiln import relay
from kiln.build_module import lower_to_graph
from kiln.ir.expr import Function
from kiln.target import Target
from kiln.transform import PassContext

__all__ = ["CASES", "Case", "TILED_CASES", "fused_function"]

Case = tuple[Callable[[], Function], dict[str, np.ndarray]]


def fused_function(body_of: Callable[..., relay.Expr],
                   **shapes: tuple[int, ...]) -> tuple[str, Function]:
    """The one fused function of ``body_of`` over parameters of ``shapes``, as a cuda build
    fuses it: its kernel name and the function."""
    params = [relay.var(n, shape=s) for n, s in shapes.items()]
    mod = kiln.IRModule.from_expr(relay.Function(params, body_of(*params)))
    with PassContext(opt_level=3):
        lowered, _ = lower_to_graph(mod, Target("cuda -arch=sm_80"), None, "default")
    ((name, fn),) = lowered.functions.items()
    return name, fn


def _rand(*shape: int, seed: int = 0, dtype: str = "float32") -> np.ndarray:
    rng = np.random.default_rng(seed + sum(shape))
    return rng.standard_normal(shape).astype(dtype)


def _fn(body_of: Callable[..., relay.Expr], **shapes: tuple[int, ...]) -> Callable[[], Function]:
    def make() -> Function:
        params = [relay.var(name, shape=shape) for name, shape in shapes.items()]
        return relay.Function(params, body_of(*params))
    return make


def _case(body_of: Callable[..., relay.Expr], **shapes: tuple[int, ...]) -> Case:
    return _fn(body_of, **shapes), {n: _rand(*s, seed=i) for i, (n, s) in enumerate(shapes.items())}


CASES: dict[str, Case] = {
    "conv2d_bias_relu": _case(lambda x, w, b: relay.nn.relu(relay.nn.bias_add(
        relay.nn.conv2d(x, w, padding=(1, 1)), b)), x=(2, 4, 7, 7), w=(8, 4, 3, 3), b=(8,)),
    "conv2d_stride_dilate": _case(lambda x, w: relay.nn.conv2d(x, w, strides=(2, 2), dilation=(2, 2),
                                                               padding=(2, 2)),
                                  x=(1, 3, 9, 9), w=(6, 3, 3, 3)),
    "conv2d_grouped": _case(lambda x, w: relay.nn.conv2d(x, w, groups=4, padding=(1, 1)),
                            x=(1, 8, 9, 9), w=(8, 2, 3, 3)),
    "conv2d_depthwise_silu": _case(lambda x, w: relay.multiply(
        relay.nn.conv2d(x, w, groups=8, padding=(1, 1)),
        relay.sigmoid(relay.nn.conv2d(x, w, groups=8, padding=(1, 1)))),
        x=(1, 8, 10, 10), w=(8, 1, 3, 3)),
    "conv2d_transpose": _case(lambda x, w: relay.nn.conv2d_transpose(x, w, strides=(2, 2),
                                                                     padding=(1, 1),
                                                                     output_padding=(1, 1)),
                              x=(1, 4, 7, 7), w=(4, 6, 3, 3)),
    "conv1d": _case(lambda x, w: relay.nn.conv1d(x, w, padding=(2, 2)), x=(2, 6, 20), w=(5, 6, 5)),
    "conv3d": _case(lambda x, w: relay.nn.conv3d(x, w, padding=(1, 1, 1)),
                    x=(1, 3, 6, 6, 6), w=(4, 3, 3, 3, 3)),
    "dense_bias_gelu": _case(lambda x, w, b: relay.multiply(
        relay.nn.bias_add(relay.nn.dense(x, w), b, axis=1),
        relay.add(relay.const(0.5), relay.multiply(relay.const(0.5), relay.erf(relay.multiply(
            relay.nn.bias_add(relay.nn.dense(x, w), b, axis=1), relay.const(0.7071067811865476)))))),
        x=(7, 40), w=(33, 40), b=(33,)),
    "batch_matmul": _case(lambda a, b: relay.nn.batch_matmul(a, b), a=(3, 9, 16), b=(3, 11, 16)),
    "max_pool2d": _case(lambda x: relay.nn.max_pool2d(x, pool_size=(3, 3), strides=(2, 2),
                                                      padding=(1, 1)), x=(1, 5, 11, 11)),
    "avg_pool2d": _case(lambda x: relay.nn.avg_pool2d(x, pool_size=(2, 2), strides=(2, 2),
                                                      count_include_pad=False), x=(2, 3, 8, 8)),
    "global_avg_pool2d": _case(lambda x: relay.nn.global_avg_pool2d(x), x=(2, 64, 7, 7)),
    "softmax": _case(lambda x: relay.nn.softmax(x, axis=-1), x=(4, 3, 50)),
    "layer_norm": _case(lambda x, g, b: relay.nn.layer_norm(x, g, b, axis=-1),
                        x=(2, 5, 24), g=(24,), b=(24,)),
    "reduce_mean_max": _case(lambda x: relay.add(relay.mean(x, axis=[1, 2], keepdims=True),
                                                 relay.max(x, axis=[1, 2], keepdims=True)),
                             x=(3, 6, 7, 2)),
    "elementwise_broadcast": _case(lambda a, b: relay.tanh(relay.subtract(
        relay.exp(relay.clip(a, -3.0, 3.0)), relay.multiply(a, b))), a=(4, 1, 9), b=(1, 5, 9)),
    "concat_transpose_slice": _case(lambda a, b: relay.strided_slice(relay.transpose(
        relay.concatenate([a, b], axis=1), axes=[0, 2, 1]), begin=[0, 1, 0], end=[2, 8, 7],
        strides=[1, 2, 1]), a=(2, 3, 9), b=(2, 4, 9)),
    "resize_bilinear": _case(lambda x: relay.image.resize2d(x, size=(9, 13), method="linear"),
                             x=(1, 2, 5, 6)),
    "argmax_take": _case(lambda x: relay.take(relay.reshape(x, (-1,)), relay.argmax(x, axis=1)),
                         x=(6, 10)),
    "where_cast": _case(lambda a, b: relay.cast(relay.where(relay.greater(a, b), a, b), "int32"),
                        a=(5, 8), b=(5, 8)),
}

# Large enough for the tiled GPU schedules (kiln.te.gpu_schedule): run on the GPU and compiled,
# too slow for the loop-IR evaluator.
TILED_CASES: dict[str, Case] = {
    "conv2d_tiled_bias_relu": _case(lambda x, w, b: relay.nn.relu(relay.nn.bias_add(
        relay.nn.conv2d(x, w, padding=(1, 1)), b)), x=(8, 32, 32, 32), w=(128, 32, 3, 3), b=(128,)),
    "conv2d_tiled_stride2_residual": _case(lambda x, w, r: relay.add(
        relay.nn.conv2d(x, w, strides=(2, 2)), r), x=(16, 64, 64, 64), w=(64, 64, 1, 1),
        r=(16, 64, 32, 32)),
    "dense_tiled": _case(lambda x, w: relay.nn.dense(x, w), x=(200, 300), w=(700, 300)),
    "batch_matmul_tiled": _case(lambda a, b: relay.nn.batch_matmul(a, b), a=(12, 128, 64),
                                b=(12, 128, 64)),
}
