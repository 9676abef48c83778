"""Whole Keras 3 models imported by Kiln, compiled, and compared with Keras' own inference.

keras.applications architectures are built with ``weights=None`` (random weights, batch norm
statistics randomised too) at small inputs and compared on their logits
(``classifier_activation=None``), so that the comparison is not flattened by a softmax over 1000
classes. Tolerance: rtol 1e-4, atol 1e-5 times the output's magnitude (1e-4 for the deep
architectures, whose float32 sums run over many more terms).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
keras = pytest.importorskip("keras")

from tests.frontend.test_keras import calibrate, check_model, randomize  # noqa: E402

L = keras.layers
A = keras.applications


def _image(size: int, batch: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, size, size, 3)).astype(np.float32)


def _app(make: Any, size: int = 64, preprocess: bool = False) -> Any:
    """A random ``keras.applications`` model, batch norms calibrated on other random images."""
    x = _image(size, batch=4, seed=17)
    return calibrate(randomize(make(), seed=3, deep=True), x * 50 + 100 if preprocess else x)


# --- keras.applications ------------------------------------------------------------------------

def test_mobilenet_v2_small() -> None:
    model = _app(lambda: A.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None,
                                       classifier_activation=None), size=32)
    check_model(model, [_image(32)], layout="NCHW", atol=1e-4, varies=True)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_mobilenet_v2_64(layout: str) -> None:
    model = _app(lambda: A.MobileNetV2(input_shape=(64, 64, 3), alpha=0.35, weights=None,
                                       classifier_activation=None))
    check_model(model, [_image(64)], layout=layout, atol=1e-4, varies=True)


@pytest.mark.slow
def test_mobilenet_v3_small() -> None:
    # keras.ops arithmetic between layers (x + 3.0, x * (1/6)), Rescaling, hard_swish, SE blocks.
    model = _app(lambda: A.MobileNetV3Small(input_shape=(64, 64, 3), alpha=0.75, weights=None,
                                            classifier_activation=None), preprocess=True)
    check_model(model, [_image(64) * 50 + 100], layout="NCHW", atol=1e-4, varies=True)


@pytest.mark.slow
def test_efficientnet_b0() -> None:
    # Rescaling + Normalization preprocessing, swish, squeeze-excite (Reshape, Multiply).
    model = _app(lambda: A.EfficientNetB0(input_shape=(64, 64, 3), weights=None,
                                          classifier_activation=None), preprocess=True)
    check_model(model, [_image(64) * 50 + 100], layout="NHWC", atol=1e-4, varies=True)


@pytest.mark.slow
def test_resnet50() -> None:
    model = _app(lambda: A.ResNet50(input_shape=(64, 64, 3), weights=None, classifier_activation=None))
    check_model(model, [_image(64)], layout="NCHW", atol=1e-4, varies=True)


# --- hand-built models ---------------------------------------------------------------------------

def _encoder_block(seq: int = 6, dim: int = 16, heads: int = 2) -> Any:
    inp = keras.Input((seq, dim), name="tokens")
    att = L.MultiHeadAttention(heads, dim // heads, name="mha")(inp, inp)
    x = L.LayerNormalization(epsilon=1e-6, name="ln1")(L.Add(name="res1")([inp, L.Dropout(0.1)(att)]))
    ff = L.Dense(32, activation="gelu", name="ff1")(x)
    ff = L.Dense(dim, name="ff2")(ff)
    out = L.LayerNormalization(epsilon=1e-6, name="ln2")(L.Add(name="res2")([x, ff]))
    return randomize(keras.Model(inp, out), seed=5)


def test_transformer_encoder_block() -> None:
    check_model(_encoder_block())


def test_text_classifier_embedding_bidirectional_lstm() -> None:
    inp = keras.Input((7,), dtype="int32", name="ids")
    x = L.Embedding(20, 8, name="emb")(inp)
    x = L.Bidirectional(L.LSTM(6, return_sequences=True), name="bilstm")(x)
    x = L.LSTM(5, name="lstm")(x)
    model = randomize(keras.Model(inp, L.Dense(3, activation="softmax", name="cls")(x)), seed=7)
    ids = np.random.default_rng(0).integers(0, 20, (3, 7)).astype(np.int32)
    check_model(model, [ids])


def test_gru_sequence_model() -> None:
    inp = keras.Input((8, 4), name="series")
    x = L.Conv1D(6, 3, padding="causal", activation="relu", name="conv")(inp)
    x = L.GRU(6, return_sequences=True, name="gru1")(x)
    x = L.Bidirectional(L.GRU(4, go_backwards=False), merge_mode="ave", name="bigru")(x)
    model = randomize(keras.Model(inp, L.Dense(2, name="out")(x)), seed=9)
    check_model(model, layout="NCHW")


def _detection_head() -> Any:
    inp = keras.Input((16, 16, 3), name="image")
    c1 = L.Conv2D(8, 3, strides=2, padding="same", activation="relu", name="stem")(inp)  # 8x8
    c2 = L.Conv2D(16, 3, strides=2, padding="same", name="down")(c1)  # 4x4
    c2 = L.LeakyReLU(0.1, name="down_act")(L.BatchNormalization(name="down_bn")(c2))
    up = L.UpSampling2D(2, name="up")(L.Conv2D(8, 1, name="lateral")(c2))  # 8x8
    merged = L.Concatenate(name="merge")([up, c1])
    p = L.ZeroPadding2D(1, name="pad")(merged)
    p = L.Conv2D(12, 3, name="head_conv")(p)  # 8x8x12: 2 anchors x (4 box + 1 obj + 1 cls)
    boxes = L.Cropping2D(((1, 1), (1, 1)), name="crop")(p)
    grid = L.Reshape((-1, 6), name="to_anchors")(boxes)
    xy = L.Activation("sigmoid", name="xy")(grid)
    out_small = L.Conv2D(6, 1, name="head_small")(c2)
    return randomize(keras.Model(inp, [xy, out_small, merged]), seed=11)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_detection_head(layout: str) -> None:
    check_model(_detection_head(), layout=layout)


def test_ops_between_layers() -> None:
    inp = keras.Input((6, 6, 4), name="x")
    y = L.Conv2D(4, 1, name="c")(inp)
    y = L.ReLU(6.0, name="r6")(y + 3.0) * (1.0 / 6.0)
    z = keras.ops.concatenate([y[:, 1:5, ::2], -inp[:, :4, 1::2], inp[:, 4:0:-1, ::-2]], axis=-1)
    z = keras.ops.mean(keras.ops.transpose(z, (0, 3, 1, 2)), axis=1, keepdims=False)
    model = randomize(keras.Model(inp, keras.ops.reshape(z, (-1, 12)) / 2.0), seed=13)
    check_model(model, layout="NCHW")
    check_model(model, layout="NHWC")
