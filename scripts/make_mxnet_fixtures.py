"""Write the MXNet fixtures of ``tests/frontend/data/mxnet`` with real MXNet (1.9.1).

MXNet does not install on current Pythons, so the tests cannot run it: this script, run once in a
side environment (``python3.11 -m venv /tmp/mxnet-venv && /tmp/mxnet-venv/bin/pip install
"numpy<1.24" mxnet==1.9.1``), writes

* for each model: ``NAME-symbol.json`` + ``NAME-0000.params`` (``HybridBlock.export``) and
  ``NAME-io.npz`` (``input``, then ``output0``, ``output1``, ... from MXNet's own inference);
* ``ops.json`` + ``ops.npz``: one small symbol per operator case, with its inputs, weights and
  MXNet's outputs (keys ``CASE:in:NAME``, ``CASE:arg:NAME``, ``CASE:aux:NAME``, ``CASE:out:I``).

Usage: ``/tmp/mxnet-venv/bin/python scripts/make_mxnet_fixtures.py [OUT_DIR]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import gluon
from mxnet.gluon import nn
from mxnet.gluon.model_zoo.vision.mobilenet import MobileNet, MobileNetV2
from mxnet.gluon.model_zoo.vision.resnet import BasicBlockV1, ResNetV1

RNG = np.random.default_rng(0)
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "tests/frontend/data/mxnet"


def randomize(net: gluon.Block) -> None:
    """Random weights and non-trivial batch-norm statistics."""
    for name, p in net.collect_params().items():
        shape = p.shape
        if name.endswith(("gamma", "running_var")):
            v = RNG.uniform(0.5, 1.5, shape)
        elif name.endswith(("beta", "running_mean", "bias")):
            v = RNG.uniform(-0.2, 0.2, shape)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            v = RNG.uniform(-1, 1, shape) * np.sqrt(3.0 / max(fan_in, 1))
        p.set_data(mx.nd.array(v.astype(np.float32)))


class Detector(gluon.HybridBlock):
    """A small single-shot detector head over a two-level feature pyramid."""

    def __init__(self, anchors: int = 3, classes: int = 4, **kw: Any):
        super().__init__(**kw)
        self.anchors, self.classes = anchors, classes
        with self.name_scope():
            self.stem = nn.HybridSequential()
            self.stem.add(
                nn.Conv2D(8, 3, strides=2, padding=1, use_bias=False), nn.BatchNorm(), nn.Activation("relu")
            )
            self.down = nn.HybridSequential()
            self.down.add(nn.Conv2D(16, 3, strides=2, padding=1), nn.LeakyReLU(0.1))
            self.up = nn.Conv2DTranspose(8, 4, strides=2, padding=1)
            self.merge = nn.Conv2D(8, 1)
            self.cls = nn.Conv2D(anchors * (classes + 1), 3, padding=1)
            self.box = nn.Conv2D(anchors * 4, 3, padding=1)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        f0 = self.stem(x)
        f1 = self.down(f0)
        up = F.UpSampling(f1, scale=2, sample_type="nearest")
        deconv = self.up(f1)
        m = self.merge(F.concat(f0, F.slice_axis(up, axis=1, begin=0, end=8) + deconv, dim=1))
        cls_preds, box_preds = [], []
        for f in (m, F.contrib.BilinearResize2D(m, height=4, width=4)):
            cls_preds.append(F.flatten(F.transpose(self.cls(f), axes=(0, 2, 3, 1))))
            box_preds.append(F.flatten(F.transpose(self.box(f), axes=(0, 2, 3, 1))))
        cls = F.reshape(F.concat(*cls_preds, dim=1), shape=(0, -1, self.classes + 1))
        box = F.reshape(F.concat(*box_preds, dim=1), shape=(0, -1, 4))
        return F.softmax(cls, axis=-1), box


class Recurrent(gluon.HybridBlock):
    """A two-layer bidirectional LSTM, a GRU and a per-step dense layer."""

    def __init__(self, **kw: Any):
        super().__init__(**kw)
        with self.name_scope():
            self.lstm = gluon.rnn.LSTM(8, num_layers=2, layout="NTC", bidirectional=True, input_size=4)
            self.gru = gluon.rnn.GRU(6, layout="NTC", input_size=16)
            self.fc = nn.Dense(3, flatten=False)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return self.fc(self.gru(self.lstm(x)))


MODELS: dict[str, tuple[Any, tuple[int, ...]]] = {
    "resnet_v1_small": (
        lambda: ResNetV1(BasicBlockV1, [1, 1, 1, 1], [8, 8, 16, 32, 64], classes=10),
        (1, 3, 32, 32),
    ),
    "mobilenet0.125": (lambda: MobileNet(multiplier=0.125, classes=10), (1, 3, 32, 32)),
    "mobilenetv2_0.125": (lambda: MobileNetV2(multiplier=0.125, classes=10), (1, 3, 32, 32)),
    "rnn": (Recurrent, (2, 5, 4)),
    "detector": (Detector, (1, 3, 16, 16)),
}


def write_models() -> None:
    for name, (make, shape) in MODELS.items():
        net = make()
        net.initialize()
        net(mx.nd.zeros(shape))
        randomize(net)
        net.hybridize()
        x = RNG.uniform(-1, 1, shape).astype(np.float32)
        outs = net(mx.nd.array(x))
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        net.export(str(OUT / name))
        sym_path = OUT / f"{name}-symbol.json"  # the same JSON without MXNet's indentation
        sym_path.write_text(json.dumps(json.loads(sym_path.read_text()), separators=(",", ":")))
        np.savez(OUT / f"{name}-io.npz", input=x, **{f"output{i}": o.asnumpy() for i, o in enumerate(outs)})
        print(name, [o.shape for o in outs])


S = mx.sym
V = S.var


_VARS: dict[str, Any] = {}


def d(name: str = "data") -> Any:
    """One variable per name (MXNet keeps two variables of one name apart)."""
    return _VARS.setdefault(name, V(name))


# case name -> (symbol, input shapes, arg shapes, aux shapes); args/aux get random values.
CASES: dict[
    str, tuple[Any, dict[str, tuple[int, ...]], dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]
] = {
    "conv2d": (
        S.Convolution(
            d(), d("w"), d("b"), kernel=(3, 3), num_filter=4, stride=(2, 1), pad=(1, 0), name="conv"
        ),
        {"data": (1, 3, 7, 6)},
        {"w": (4, 3, 3, 3), "b": (4,)},
        {},
    ),
    "conv2d_group_dilate_nobias": (
        S.Convolution(
            d(),
            d("w"),
            kernel=(3, 3),
            num_filter=4,
            num_group=2,
            dilate=(2, 2),
            pad=(2, 2),
            no_bias=True,
            name="conv",
        ),
        {"data": (1, 4, 8, 8)},
        {"w": (4, 2, 3, 3)},
        {},
    ),
    "conv1d": (
        S.Convolution(d(), d("w"), d("b"), kernel=(3,), num_filter=2, stride=(2,), pad=(1,), name="c1"),
        {"data": (2, 3, 9)},
        {"w": (2, 3, 3), "b": (2,)},
        {},
    ),
    "deconv2d": (
        S.Deconvolution(
            d(), d("w"), kernel=(3, 3), num_filter=2, stride=(2, 2), pad=(1, 1), adj=(1, 1), name="deconv"
        ),
        {"data": (1, 3, 4, 5)},
        {"w": (3, 2, 3, 3)},
        {},
    ),
    "deconv2d_group_bias": (
        S.Deconvolution(
            d(),
            d("w"),
            d("b"),
            kernel=(2, 2),
            num_filter=4,
            num_group=2,
            stride=(2, 2),
            no_bias=False,
            name="deconv",
        ),
        {"data": (1, 4, 3, 3)},
        {"w": (4, 2, 2, 2), "b": (4,)},
        {},
    ),
    "batchnorm_fix_gamma": (
        S.BatchNorm(d(), d("g"), d("be"), d("mm"), d("mv"), eps=1e-3, name="bn"),
        {"data": (2, 3, 4, 4)},
        {"g": (3,), "be": (3,)},
        {"mm": (3,), "mv": (3,)},
    ),
    "batchnorm_gamma": (
        S.BatchNorm(
            d(),
            d("g"),
            d("be"),
            d("mm"),
            d("mv"),
            eps=2e-5,
            fix_gamma=False,
            use_global_stats=True,
            name="bn",
        ),
        {"data": (2, 3, 5)},
        {"g": (3,), "be": (3,)},
        {"mm": (3,), "mv": (3,)},
    ),
    "act_relu": (S.Activation(d(), act_type="relu"), {"data": (2, 5)}, {}, {}),
    "act_sigmoid": (S.Activation(d(), act_type="sigmoid"), {"data": (2, 5)}, {}, {}),
    "act_tanh": (S.Activation(d(), act_type="tanh"), {"data": (2, 5)}, {}, {}),
    "act_softrelu": (S.Activation(d(), act_type="softrelu"), {"data": (2, 5)}, {}, {}),
    "act_softsign": (S.Activation(d(), act_type="softsign"), {"data": (2, 5)}, {}, {}),
    "leaky": (S.LeakyReLU(d(), act_type="leaky", slope=0.1), {"data": (2, 5)}, {}, {}),
    "prelu": (S.LeakyReLU(d(), d("gamma"), act_type="prelu"), {"data": (2, 3, 4)}, {"gamma": (3,)}, {}),
    "elu": (S.LeakyReLU(d(), act_type="elu", slope=0.7), {"data": (2, 5)}, {}, {}),
    "selu": (S.LeakyReLU(d(), act_type="selu"), {"data": (2, 5)}, {}, {}),
    "gelu": (S.LeakyReLU(d(), act_type="gelu"), {"data": (2, 5)}, {}, {}),
    "pool_max": (
        S.Pooling(d(), kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max"),
        {"data": (1, 2, 7, 7)},
        {},
        {},
    ),
    "pool_max_full": (
        S.Pooling(d(), kernel=(3, 3), stride=(2, 2), pool_type="max", pooling_convention="full"),
        {"data": (1, 2, 8, 8)},
        {},
        {},
    ),
    "pool_avg_pad": (
        S.Pooling(d(), kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg"),
        {"data": (1, 2, 6, 6)},
        {},
        {},
    ),
    "pool_avg_nopad_count": (
        S.Pooling(d(), kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg", count_include_pad=False),
        {"data": (1, 2, 6, 6)},
        {},
        {},
    ),
    "pool_avg_full": (
        S.Pooling(d(), kernel=(2, 2), stride=(2, 2), pool_type="avg", pooling_convention="full"),
        {"data": (1, 2, 5, 5)},
        {},
        {},
    ),
    "pool_sum": (
        S.Pooling(d(), kernel=(2, 2), stride=(1, 1), pool_type="sum"),
        {"data": (1, 2, 4, 4)},
        {},
        {},
    ),
    "pool_global_avg": (
        S.Pooling(d(), kernel=(1, 1), global_pool=True, pool_type="avg"),
        {"data": (2, 3, 4, 5)},
        {},
        {},
    ),
    "pool_global_max": (
        S.Pooling(d(), kernel=(1, 1), global_pool=True, pool_type="max"),
        {"data": (2, 3, 4, 5)},
        {},
        {},
    ),
    "pool1d_max": (S.Pooling(d(), kernel=(2,), stride=(2,), pool_type="max"), {"data": (1, 2, 8)}, {}, {}),
    "fc": (
        S.FullyConnected(d(), d("w"), d("b"), num_hidden=4),
        {"data": (2, 3, 2, 2)},
        {"w": (4, 12), "b": (4,)},
        {},
    ),
    "fc_noflatten_nobias": (
        S.FullyConnected(d(), d("w"), num_hidden=4, flatten=False, no_bias=True),
        {"data": (2, 3, 5)},
        {"w": (4, 5)},
        {},
    ),
    "flatten": (S.Flatten(d()), {"data": (2, 3, 2, 2)}, {}, {}),
    "reshape_codes": (S.Reshape(d(), shape=(0, -4, 2, -1, -2)), {"data": (2, 6, 3, 2)}, {}, {}),
    "reshape_merge": (S.Reshape(d(), shape=(-3, -1)), {"data": (2, 3, 4)}, {}, {}),
    "reshape_reverse": (S.Reshape(d(), shape=(-1, 0), reverse=True), {"data": (2, 3, 4)}, {}, {}),
    "transpose": (S.transpose(d(), axes=(0, 2, 1)), {"data": (2, 3, 4)}, {}, {}),
    "transpose_default": (S.transpose(d()), {"data": (2, 3, 4)}, {}, {}),
    "swapaxes": (S.SwapAxis(d(), dim1=0, dim2=2), {"data": (2, 3, 4)}, {}, {}),
    "concat": (S.Concat(d("a"), d("b"), dim=1), {"a": (2, 3), "b": (2, 4)}, {}, {}),
    "split": (S.Group(list(S.SliceChannel(d(), num_outputs=3, axis=1))), {"data": (2, 6, 2)}, {}, {}),
    "split_squeeze": (
        S.Group(list(S.split(d(), num_outputs=2, axis=0, squeeze_axis=True))),
        {"data": (2, 3)},
        {},
        {},
    ),
    "elemwise": (
        S.elemwise_div(
            S.elemwise_mul(S.elemwise_sub(S.elemwise_add(d("a"), d("b")), d("b")), d("a")), d("b") + 3.0
        )
        + d("a") * d("b")
        - d("a") / d("b"),
        {"a": (2, 3), "b": (2, 3)},
        {},
        {},
    ),
    "broadcast": (
        S.broadcast_maximum(S.broadcast_add(d("a"), d("b")), S.broadcast_mul(d("b"), d("c")))
        + S.broadcast_minimum(S.broadcast_sub(d("a"), d("c")), S.broadcast_div(d("a"), d("b") + 2)),
        {"a": (2, 3, 4), "b": (1, 4), "c": (3, 1)},
        {},
        {},
    ),
    "broadcast_power_compare": (
        S.broadcast_power(S.abs(d("a")) + 0.5, d("b"))
        + S.broadcast_greater(d("a"), d("b"))
        + S.broadcast_equal(d("a"), d("a")),
        {"a": (2, 3), "b": (1, 3)},
        {},
        {},
    ),
    "scalar_ops": (
        (((((d() + 1.5) - 0.5) * 2.0) / 4.0) ** 2.0)
        + (3.0 - d())
        + (1.0 / (S.abs(d()) + 1))
        + S.maximum(d(), 0.2)
        + S.minimum(d(), -0.1)
        + (d() > 0.3)
        + (d() <= -0.2)
        + (2.0 ** d()),
        {"data": (3, 4)},
        {},
        {},
    ),
    "unary": (
        S.exp(d())
        + S.log(S.abs(d()) + 1)
        + S.sqrt(S.abs(d()))
        + S.square(d())
        + S.negative(d())
        + S.rsqrt(S.abs(d()) + 1)
        + S.floor(d())
        + S.ceil(d())
        + S.sin(d())
        + S.cos(d())
        + S.erf(d())
        + S.sigmoid(d())
        + S.tanh(d())
        + S.relu(d())
        + S.softsign(d())
        + S.reciprocal(S.abs(d()) + 1)
        + S.log1p(S.abs(d()))
        + S.expm1(d())
        + S.sign(d())
        + S.round(d() * 3),
        {"data": (3, 4)},
        {},
        {},
    ),
    "softmax": (S.softmax(d(), axis=1), {"data": (2, 3, 4)}, {}, {}),
    "softmax_temperature": (S.softmax(d(), temperature=2.0), {"data": (2, 5)}, {}, {}),
    "log_softmax": (S.log_softmax(d()), {"data": (2, 5)}, {}, {}),
    "softmax_output": (S.SoftmaxOutput(d(), name="softmax"), {"data": (2, 5)}, {}, {}),
    "softmax_output_multi": (
        S.SoftmaxOutput(d(), multi_output=True, name="softmax"),
        {"data": (2, 3, 4)},
        {},
        {},
    ),
    "softmax_activation": (S.SoftmaxActivation(d()), {"data": (2, 5)}, {}, {}),
    "softmax_activation_channel": (S.SoftmaxActivation(d(), mode="channel"), {"data": (2, 3, 2, 2)}, {}, {}),
    "dropout": (S.Dropout(d(), p=0.3) * 2, {"data": (2, 5)}, {}, {}),
    "clip": (S.clip(d(), -0.3, 0.4), {"data": (2, 5)}, {}, {}),
    "expand_dims": (S.expand_dims(d(), axis=1), {"data": (2, 5)}, {}, {}),
    "squeeze": (S.squeeze(d(), axis=(1, 3)), {"data": (2, 1, 3, 1)}, {}, {}),
    "squeeze_all": (S.squeeze(d()), {"data": (2, 1, 3, 1)}, {}, {}),
    "slice": (
        S.slice(d(), begin=(0, 1, None), end=(None, 3, 4), step=(1, 1, 2)),
        {"data": (2, 4, 5)},
        {},
        {},
    ),
    "slice_neg": (S.slice(d(), begin=(-1, 2), end=(None, None)), {"data": (3, 5)}, {}, {}),
    "slice_axis": (S.slice_axis(d(), axis=1, begin=1, end=-1), {"data": (2, 5, 3)}, {}, {}),
    "slice_axis_none": (S.slice_axis(d(), axis=-1, begin=-2, end=None), {"data": (2, 5, 3)}, {}, {}),
    "slice_like": (S.slice_like(d("a"), d("b"), axes=(0, 2)), {"a": (3, 4, 5), "b": (2, 3, 3)}, {}, {}),
    "upsampling": (S.UpSampling(d(), scale=2, sample_type="nearest"), {"data": (1, 2, 3, 4)}, {}, {}),
    "bilinear_resize": (S.contrib.BilinearResize2D(d(), height=7, width=5), {"data": (1, 2, 3, 4)}, {}, {}),
    "bilinear_resize_noalign": (
        S.contrib.BilinearResize2D(d(), height=6, width=9, align_corners=False),
        {"data": (1, 2, 3, 4)},
        {},
        {},
    ),
    "bilinear_resize_scale": (
        S.contrib.BilinearResize2D(d(), scale_height=2.0, scale_width=1.5, mode="odd_scale"),
        {"data": (1, 2, 3, 4)},
        {},
        {},
    ),
    "add_n": (S.add_n(d("a"), d("b"), d("c")), {"a": (2, 3), "b": (2, 3), "c": (2, 3)}, {}, {}),
    "element_wise_sum": (S.ElementWiseSum(d("a"), d("b")), {"a": (2, 3), "b": (2, 3)}, {}, {}),
    "reduce": (
        S.Group(
            [
                S.mean(d(), axis=1),
                S.sum(d(), axis=(0, 2), keepdims=True),
                S.max(d()),
                S.min(d(), axis=1, exclude=True),
                S.prod(d(), axis=-1),
                S.sum_axis(d(), axis=2),
            ]
        ),
        {"data": (2, 3, 4)},
        {},
        {},
    ),
    "argmax": (
        S.Group([S.argmax(d(), axis=1), S.argmin(d(), axis=0, keepdims=True)]),
        {"data": (3, 4)},
        {},
        {},
    ),
    "dot": (S.dot(d("a"), d("b")), {"a": (3, 4), "b": (4, 5)}, {}, {}),
    "dot_transpose": (
        S.dot(d("a"), d("b"), transpose_a=True, transpose_b=True),
        {"a": (4, 3), "b": (5, 4)},
        {},
        {},
    ),
    "dot_nd": (S.dot(d("a"), d("b")), {"a": (2, 3, 4), "b": (4, 5)}, {}, {}),
    "batch_dot": (S.batch_dot(d("a"), d("b")), {"a": (2, 3, 4), "b": (2, 4, 5)}, {}, {}),
    "batch_dot_t": (
        S.batch_dot(d("a"), d("b"), transpose_a=True, transpose_b=True),
        {"a": (2, 4, 3), "b": (2, 5, 4)},
        {},
        {},
    ),
    "layernorm": (
        S.LayerNorm(d(), d("g"), d("b"), eps=1e-5),
        {"data": (2, 3, 6)},
        {"g": (6,), "b": (6,)},
        {},
    ),
    "layernorm_axis": (
        S.LayerNorm(d(), d("g"), d("b"), axis=1),
        {"data": (2, 3, 4)},
        {"g": (3,), "b": (3,)},
        {},
    ),
    "embedding": (S.Embedding(d(), d("w"), input_dim=10, output_dim=4), {"data": (2, 3)}, {"w": (10, 4)}, {}),
    "zeros_ones_like": (S.zeros_like(d()) + S.ones_like(d()) * 2 + d(), {"data": (2, 3)}, {}, {}),
    "cast": (S.Cast(S.Cast(d() * 3, dtype="int32"), dtype="float32"), {"data": (2, 3)}, {}, {}),
    "stack": (S.stack(d("a"), d("b"), axis=1), {"a": (2, 3), "b": (2, 3)}, {}, {}),
    "tile_repeat": (
        S.Group([S.tile(d(), reps=(2, 1)), S.repeat(d(), repeats=2, axis=1)]),
        {"data": (2, 3)},
        {},
        {},
    ),
    "where": (S.where(d("c") > 0, d("a"), d("b")), {"c": (2, 3), "a": (2, 3), "b": (2, 3)}, {}, {}),
    "broadcast_to_like": (
        S.Group(
            [
                S.broadcast_to(d("a"), shape=(2, 3)),
                S.broadcast_like(d("a"), d("b")),
                S.broadcast_axis(d("a"), axis=0, size=4),
            ]
        ),
        {"a": (1, 3), "b": (5, 3)},
        {},
        {},
    ),
    "l2norm": (S.L2Normalization(d(), mode="channel"), {"data": (2, 3, 4)}, {}, {}),
    "instance_norm": (
        S.InstanceNorm(d(), d("g"), d("b"), eps=1e-3),
        {"data": (2, 3, 4, 4)},
        {"g": (3,), "b": (3,)},
        {},
    ),
    "pad": (
        S.pad(d(), mode="constant", pad_width=(0, 0, 0, 0, 1, 2, 2, 1), constant_value=0.5),
        {"data": (1, 2, 3, 3)},
        {},
        {},
    ),
    "take": (S.take(d("a"), d("idx"), axis=1), {"a": (2, 5, 3), "idx": (2, 2)}, {}, {}),
    "rrelu": (S.LeakyReLU(d(), act_type="rrelu"), {"data": (2, 5)}, {}, {}),
    "pool_max_full_pad": (
        S.Pooling(d(), kernel=(2, 2), stride=(2, 2), pad=(1, 1), pool_type="max", pooling_convention="full"),
        {"data": (1, 2, 5, 5)},
        {},
        {},
    ),
    "regression_outputs": (
        S.Group([S.LinearRegressionOutput(d(), name="lin"), S.LogisticRegressionOutput(d(), name="logit")]),
        {"data": (2, 3)},
        {},
        {},
    ),
    "lstm_fused": (
        S.RNN(
            d(),
            d("params"),
            d("state"),
            d("cell"),
            mode="lstm",
            state_size=5,
            num_layers=1,
            state_outputs=True,
        ),
        {"data": (4, 2, 3)},
        {"params": (4 * 5 * (3 + 5 + 2),), "state": (1, 2, 5), "cell": (1, 2, 5)},
        {},
    ),
    "gru_fused_bi": (
        S.RNN(
            d(),
            d("params"),
            d("state"),
            mode="gru",
            state_size=4,
            num_layers=1,
            bidirectional=True,
            state_outputs=True,
        ),
        {"data": (3, 2, 3)},
        {"params": (2 * 3 * 4 * (3 + 4 + 2),), "state": (2, 2, 4)},
        {},
    ),
    "rnn_tanh_2layer": (
        S.RNN(d(), d("params"), d("state"), mode="rnn_tanh", state_size=4, num_layers=2),
        {"data": (3, 2, 3)},
        {"params": (4 * (3 + 4 + 2) + 4 * (4 + 4 + 2),), "state": (2, 2, 4)},
        {},
    ),
    "rnn_relu": (
        S.RNN(d(), d("params"), d("state"), mode="rnn_relu", state_size=3, num_layers=1),
        {"data": (3, 2, 2)},
        {"params": (3 * (2 + 3 + 2),), "state": (1, 2, 3)},
        {},
    ),
}


def write_ops() -> None:
    meta: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for case, (sym, ins, args, aux) in CASES.items():
        values: dict[str, np.ndarray] = {}
        for name, shape in {**ins, **args, **aux}.items():
            if (case == "embedding" and name == "data") or name == "idx":
                v = RNG.integers(0, 10 if case == "embedding" else 5, shape).astype(np.float32)
            elif name in ("mv",):
                v = RNG.uniform(0.5, 1.5, shape).astype(np.float32)
            else:
                v = RNG.uniform(-1, 1, shape).astype(np.float32)
            values[name] = v
        arg_names = sym.list_arguments()
        aux_names = sym.list_auxiliary_states()
        arg_shapes, _, _ = sym.infer_shape(**{**ins, **args})
        for n, shape in zip(arg_names, arg_shapes):
            values.setdefault(n, np.zeros(shape, np.float32))  # labels: unused at inference
        exe = sym.bind(
            mx.cpu(),
            {n: mx.nd.array(values[n]) for n in arg_names},
            aux_states={n: mx.nd.array(values[n]) for n in aux_names},
        )
        outs = exe.forward(is_train=False)
        meta[case] = {
            "symbol": json.loads(sym.tojson()),
            "inputs": {k: list(v) for k, v in ins.items()},
            "args": sorted(args),
            "aux": sorted(aux),
            "outputs": len(outs),
        }
        for n in ins:
            arrays[f"{case}:in:{n}"] = values[n]
        for n in args:
            arrays[f"{case}:arg:{n}"] = values[n]
        for n in aux:
            arrays[f"{case}:aux:{n}"] = values[n]
        for i, o in enumerate(outs):
            arrays[f"{case}:out:{i}"] = o.asnumpy()
    (OUT / "ops.json").write_text(json.dumps(meta, sort_keys=True, separators=(",", ":")))
    np.savez_compressed(OUT / "ops.npz", **arrays)
    print(len(meta), "op cases")


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    write_ops()
    write_models()
