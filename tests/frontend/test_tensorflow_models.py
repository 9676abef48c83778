"""Whole TensorFlow/Keras models frozen through ``tf.function`` (random weights, randomized
batch-norm statistics), imported, built (native C) and compared with TensorFlow running the same
frozen graph: rtol=1e-4, atol=1e-5 times the output's magnitude."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tests.frontend._tf_models import check_function  # noqa: E402

RNG = np.random.default_rng(11)


def _randomize_batch_norms(model: Any) -> Any:
    """Give every BatchNormalization layer non-trivial statistics (fresh ones are identities)."""
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            shapes = [w.shape for w in layer.get_weights()]
            values = [RNG.uniform(0.5, 1.5, s) if i in (0, 3) else RNG.uniform(-0.5, 0.5, s)
                      for i, s in enumerate(shapes)]
            layer.set_weights([v.astype(np.float32) for v in values])
    return model


def _check_model(model: Any, shape: tuple[int, ...], atol: float = 1e-5) -> float:
    x = RNG.standard_normal(shape).astype(np.float32)
    _, err, _ = check_function(lambda v: model(v, training=False), [x], atol=atol)
    return err


def _resnet_style() -> Any:
    L = keras.layers

    def block(x: Any, filters: int, stride: int) -> Any:
        y = L.Conv2D(filters, 3, stride, padding="same", use_bias=False)(x)
        y = L.ReLU()(L.BatchNormalization()(y))
        y = L.BatchNormalization()(L.Conv2D(filters, 3, padding="same", use_bias=False)(y))
        if stride != 1 or x.shape[-1] != filters:
            x = L.BatchNormalization()(L.Conv2D(filters, 1, stride, use_bias=False)(x))
        return L.ReLU()(L.Add()([x, y]))

    inp = keras.Input((32, 32, 3))
    x = L.ReLU()(L.BatchNormalization()(L.Conv2D(8, 5, 2, padding="same")(inp)))
    x = L.MaxPooling2D(3, 2, padding="same")(x)
    x = block(x, 8, 1)
    x = block(x, 16, 2)
    x = L.GlobalAveragePooling2D()(x)
    return _randomize_batch_norms(keras.Model(inp, L.Dense(10, activation="softmax")(x)))


def test_resnet_style_cnn() -> None:
    assert _check_model(_resnet_style(), (2, 32, 32, 3)) < 1e-4


@pytest.mark.slow  # about 20 s: Keras builds and TF freezes 150 layers
def test_mobilenet_v2_small() -> None:
    model = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3), alpha=0.35, classes=10,
                                           classifier_activation=None)
    assert _check_model(_randomize_batch_norms(model), (1, 32, 32, 3), atol=1e-4) < 1e-2


@pytest.mark.slow
def test_mobilenet_v2_224() -> None:
    model = keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3),
                                           classifier_activation=None)
    _check_model(_randomize_batch_norms(model), (1, 224, 224, 3), atol=1e-4)


@pytest.mark.slow
def test_resnet50() -> None:
    model = keras.applications.ResNet50(weights=None, input_shape=(224, 224, 3), classifier_activation=None)
    _check_model(_randomize_batch_norms(model), (1, 224, 224, 3), atol=1e-4)


def test_transformer_encoder_block() -> None:
    L = keras.layers
    inp = keras.Input((6, 16))
    att = L.MultiHeadAttention(num_heads=2, key_dim=8)(inp, inp)
    x = L.LayerNormalization(epsilon=1e-6)(inp + att)
    ff = L.Dense(16)(L.Dense(32, activation="gelu")(x))
    out = L.LayerNormalization(epsilon=1e-6)(x + ff)
    _check_model(keras.Model(inp, out), (2, 6, 16))


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_recurrent_layers_unroll(cell: str) -> None:
    layer = getattr(keras.layers, cell)
    model = keras.Sequential([keras.Input((5, 4)), layer(6, return_sequences=True), layer(3)])
    _check_model(model, (2, 5, 4))


def test_detection_head() -> None:
    """An SSD/YOLO-style head: two feature levels, nearest upsampling, concat, per-anchor
    reshapes, box decoding with strided slices, exp and sigmoid."""
    w = [tf.constant(RNG.standard_normal(s).astype(np.float32) * 0.2)
         for s in [(3, 3, 3, 8), (3, 3, 8, 16), (1, 1, 24, 18), (1, 1, 16, 18)]]
    anchors = tf.constant(RNG.uniform(0.5, 2.0, (3, 2)).astype(np.float32))

    def head(feat: Any, grid: int) -> Any:
        p = tf.reshape(feat, [-1, grid * grid * 3, 6])
        xy = tf.sigmoid(p[..., 0:2])
        wh = tf.exp(p[..., 2:4]) * tf.tile(anchors, [grid * grid, 1])
        boxes = tf.concat([xy - wh / 2, xy + wh / 2], axis=-1)
        scores = tf.sigmoid(p[..., 4:5]) * tf.nn.softmax(p[..., 5:])
        return boxes, scores

    def net(x: Any) -> Any:
        c1 = tf.nn.relu(tf.nn.conv2d(x, w[0], 2, "SAME"))
        c2 = tf.nn.relu(tf.nn.conv2d(c1, w[1], 2, "SAME"))
        up = tf.compat.v1.image.resize_nearest_neighbor(c2, tf.shape(c1)[1:3])
        f1 = tf.nn.conv2d(tf.concat([c1, up], -1), w[2], 1, "VALID")
        f2 = tf.nn.conv2d(c2, w[3], 1, "VALID")
        b1, s1 = head(f1, 8)
        b2, s2 = head(f2, 4)
        boxes, scores = tf.concat([b1, b2], 1), tf.concat([s1, s2], 1)
        best = tf.reduce_max(scores, -1)
        return boxes, best, tf.argmax(scores, -1, output_type=tf.int32)

    x = RNG.standard_normal((1, 16, 16, 3)).astype(np.float32)
    check_function(net, [x])
