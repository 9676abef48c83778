"""The Keras 3 importer, one small model per layer converter, compiled (relay.build, graph
executor) and compared with Keras' own inference (``model(x)``) at rtol 1e-4 and an atol of
1e-5 times the output's magnitude.

Weights are random (batch norm moving statistics too, variances positive), so every converter
is exercised with non-trivial values. Spatial layers run in both layouts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
keras = pytest.importorskip("keras")

from kiln.frontend.keras import from_keras  # noqa: E402
from kiln.frontend.keras_layers import LAYERS  # noqa: E402
from tests.frontend._compiled import run_compiled  # noqa: E402

L = keras.layers
RTOL = 1e-4


# --- helpers (also used by test_keras_models.py) ---------------------------------------------

def randomize(model: Any, seed: int = 0, scale: float = 0.5, deep: bool = False) -> Any:
    """Give every weight of ``model`` random values (variances positive).

    ``deep``: kernels scaled by ``sqrt(2 / fan_in)`` and batch norms near identity (but not
    trivial), so that a deep network's output still depends on its input.
    """
    rng = np.random.default_rng(seed)
    for w in model.weights:
        shape = tuple(w.shape)
        if "int" in str(w.dtype):
            continue
        noise = rng.standard_normal(shape).astype(np.float32)
        name = w.path.rsplit("/", 1)[-1]
        if "variance" in name:
            value = np.abs(noise) * (0.2 if deep else 0.5) + (1.0 if deep else 0.5)
        elif not deep:
            value = noise * scale
        elif name == "gamma":
            value = 1.0 + 0.2 * noise
        elif len(shape) >= 2:
            fan_in = int(np.prod(shape[:-2] if "depthwise" in name else shape[:-1]))
            value = noise * np.float32(np.sqrt(2.0 / max(fan_in, 1)))
        else:
            value = 0.1 * noise
        w.assign(value.astype(np.float32))
    return model


def calibrate(model: Any, x: np.ndarray, seed: int = 0) -> Any:
    """Set every batch norm's moving statistics to those of ``x`` (one training-mode pass with
    momentum 0), then perturb them by ~10%: a deep random network keeps a live signal."""
    bns = [layer for layer in model._flatten_layers() if type(layer).__name__ == "BatchNormalization"]
    momenta = [bn.momentum for bn in bns]
    for bn in bns:
        bn.momentum = 0.0
    model(x, training=True)
    rng = np.random.default_rng(seed)
    for bn, momentum in zip(bns, momenta):
        bn.momentum = momentum
        for w in (bn.moving_mean, bn.moving_variance):
            value = np.asarray(w.numpy())
            w.assign((value * (1 + 0.1 * rng.standard_normal(value.shape))).astype(np.float32))
    return model


def _to_nchw(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 3, 1, 2) if x.ndim == 4 else x


def _from_nchw(x: np.ndarray) -> np.ndarray:
    return x.transpose(0, 2, 3, 1) if x.ndim == 4 else x


def inputs_for(model: Any, seed: int = 1, batch: int = 2) -> list[np.ndarray]:
    """Random inputs for ``model`` (ints in [0, 10) for integer inputs)."""
    rng = np.random.default_rng(seed)
    out = []
    for t in model.inputs:
        shape = (batch, *(int(d) for d in t.shape[1:]))
        if "int" in str(t.dtype):
            out.append(rng.integers(0, 10, shape).astype(str(t.dtype)))
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    return out


def check_model(model: Any, xs: Sequence[np.ndarray] | None = None, layout: str = "NHWC",
                rtol: float = RTOL, atol: float = 1e-5, varies: bool = False) -> float:
    """Import ``model``, run it compiled on ``xs`` and compare with ``model(xs)``.

    ``varies``: also assert that the outputs differ between the batch's samples (a deep model
    whose output ignores its input would make the comparison meaningless). Returns the max abs
    error relative to the output magnitude.
    """
    xs = list(inputs_for(model) if xs is None else xs)
    names = [t._keras_history.operation.name for t in model.inputs]
    batch = xs[0].shape[0]
    nchw = layout == "NCHW"
    shape = {n: (_to_nchw(x) if nchw else x).shape for n, x in zip(names, xs)}
    mod, params = from_keras(model, shape=shape, layout=layout)
    feeds = {n: (_to_nchw(x) if nchw else x) for n, x in zip(names, xs)}
    got = run_compiled(mod, params, feeds)
    ref = model(xs if len(xs) > 1 else xs[0])
    refs = [np.asarray(r) for r in (ref if isinstance(ref, (list, tuple)) else [ref])]
    assert len(got) == len(refs)
    worst = 0.0
    for g, r in zip(got, refs):
        g = _from_nchw(g) if nchw else g
        assert g.shape == r.shape, (g.shape, r.shape, batch)
        mag = max(1.0, float(np.abs(r).max()) if r.size else 1.0)
        if varies:
            assert batch > 1 and float(r.std(axis=0).max()) > 1e-2 * mag, "output ignores the input"
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol * mag)
        worst = max(worst, float(np.abs(g - r).max()) / mag if r.size else 0.0)
    return worst


def single(layer: Any, *shapes: Sequence[int], dtype: str = "float32", call: Callable[..., Any] | None = None,
           seed: int = 0) -> Any:
    """A functional model calling ``layer`` on inputs of ``shapes`` (without batch)."""
    ins = [keras.Input(tuple(s), dtype=dtype, name=f"x{i}") for i, s in enumerate(shapes)]
    out = (call or (lambda *a: layer(a[0] if len(a) == 1 else list(a))))(*ins)
    return randomize(keras.Model(ins[0] if len(ins) == 1 else ins, out), seed)


# --- one case per converter ----------------------------------------------------------------------

IMG = (7, 7, 3)
SEQ = (6, 4)
STEPS = (3, 4)  # recurrent layers unroll: short sequences keep the compiled graphs small

# name -> (model factory, layouts)
BOTH = ("NHWC", "NCHW")
CASES: dict[str, tuple[Callable[[], Any], tuple[str, ...]]] = {
    "Dense": (lambda: single(L.Dense(4, activation="relu"), (6,)), ("NHWC",)),
    "Dense-seq": (lambda: single(L.Dense(3), SEQ), ("NHWC",)),
    "Dense-img": (lambda: single(L.Dense(3, activation="tanh"), IMG), BOTH),
    "Conv1D": (lambda: single(L.Conv1D(4, 3, strides=2, padding="same"), (10, 3)), BOTH),
    "Conv1D-causal": (lambda: single(L.Conv1D(4, 3, dilation_rate=2, padding="causal"), (10, 3)), BOTH),
    "Conv2D": (lambda: single(L.Conv2D(4, 3, strides=2, padding="same", activation="relu"), IMG), BOTH),
    "Conv2D-dilated": (lambda: single(L.Conv2D(4, (3, 2), dilation_rate=2), IMG), BOTH),
    "Conv2D-groups": (lambda: single(L.Conv2D(4, 3, groups=2, padding="same"), (6, 6, 4)), BOTH),
    "Conv3D": (lambda: single(L.Conv3D(3, 3, padding="same", strides=(1, 2, 2)), (4, 6, 6, 2)), BOTH),
    "DepthwiseConv1D": (lambda: single(L.DepthwiseConv1D(3, depth_multiplier=2), (9, 3)), BOTH),
    "DepthwiseConv2D": (lambda: single(L.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2),
                                       IMG), BOTH),
    "SeparableConv1D": (lambda: single(L.SeparableConv1D(5, 3, padding="same"), (9, 3)), BOTH),
    "SeparableConv2D": (lambda: single(L.SeparableConv2D(5, 3, depth_multiplier=2, activation="relu6"), IMG),
                        BOTH),
    "Conv1DTranspose": (lambda: single(L.Conv1DTranspose(4, 3, strides=2, padding="same"), (5, 3)), BOTH),
    "Conv2DTranspose": (lambda: single(L.Conv2DTranspose(4, 3, strides=2, padding="same"), (5, 5, 3)), BOTH),
    "Conv2DTranspose-valid": (lambda: single(L.Conv2DTranspose(2, (3, 2), strides=(2, 3)), (4, 4, 3)), BOTH),
    "Conv2DTranspose-k2s3": (lambda: single(L.Conv2DTranspose(2, 2, strides=3, padding="same"), (4, 4, 3)),
                             BOTH),
    "Conv3DTranspose": (lambda: single(L.Conv3DTranspose(2, 3, strides=2, padding="same"), (3, 4, 4, 2)),
                        BOTH),
    "BatchNormalization": (lambda: single(L.BatchNormalization(), IMG), BOTH),
    "BatchNormalization-2d": (lambda: single(L.BatchNormalization(center=False), (6,)), ("NHWC",)),
    "BatchNormalization-axis1": (lambda: single(L.BatchNormalization(axis=1, scale=False), (4, 5)),
                                 ("NHWC",)),
    "LayerNormalization": (lambda: single(L.LayerNormalization(), SEQ), ("NHWC",)),
    "LayerNormalization-img": (lambda: single(L.LayerNormalization(epsilon=1e-5), IMG), BOTH),
    "LayerNormalization-axes": (lambda: single(L.LayerNormalization(axis=[1, 2]), (3, 4, 5)), ("NHWC",)),
    "LayerNormalization-rms": (lambda: single(L.LayerNormalization(rms_scaling=True), SEQ), ("NHWC",)),
    "ReLU": (lambda: single(L.ReLU(max_value=1.0), IMG), BOTH),
    "ReLU-threshold": (lambda: single(L.ReLU(max_value=1.0, negative_slope=0.1, threshold=0.3), IMG),
                       ("NHWC",)),
    "LeakyReLU": (lambda: single(L.LeakyReLU(negative_slope=0.1), IMG), ("NHWC",)),
    "PReLU": (lambda: single(L.PReLU(shared_axes=[1, 2]), IMG), BOTH),
    "PReLU-full": (lambda: single(L.PReLU(), IMG), ("NCHW",)),
    "ELU": (lambda: single(L.ELU(alpha=0.5), IMG), ("NHWC",)),
    "Softmax": (lambda: single(L.Softmax(axis=1), IMG), BOTH),
    "Softmax-mask": (lambda: _softmax_mask(), BOTH),
    "Softmax-axes": (lambda: single(L.Softmax(axis=[1, 2]), IMG), ("NCHW",)),
    "MaxPooling1D": (lambda: single(L.MaxPooling1D(3, strides=2, padding="same"), (9, 3)), BOTH),
    "MaxPooling2D": (lambda: single(L.MaxPooling2D(3, strides=2, padding="same"), IMG), BOTH),
    "MaxPooling3D": (lambda: single(L.MaxPooling3D(2), (4, 4, 4, 2)), BOTH),
    "AveragePooling1D": (lambda: single(L.AveragePooling1D(2), (9, 3)), BOTH),
    "AveragePooling2D": (lambda: single(L.AveragePooling2D(3, strides=2, padding="same"), IMG), BOTH),
    "AveragePooling3D": (lambda: single(L.AveragePooling3D(2, padding="same"), (3, 5, 5, 2)), BOTH),
    "GlobalAveragePooling1D": (lambda: single(L.GlobalAveragePooling1D(), (9, 3)), ("NCHW",)),
    "GlobalAveragePooling2D": (lambda: single(L.GlobalAveragePooling2D(keepdims=True), IMG), BOTH),
    "GlobalAveragePooling3D": (lambda: single(L.GlobalAveragePooling3D(), (3, 4, 4, 2)), ("NCHW",)),
    "GlobalMaxPooling1D": (lambda: single(L.GlobalMaxPooling1D(keepdims=True), (9, 3)), ("NCHW",)),
    "GlobalMaxPooling2D": (lambda: single(L.GlobalMaxPooling2D(), IMG), BOTH),
    "GlobalMaxPooling3D": (lambda: single(L.GlobalMaxPooling3D(), (3, 4, 4, 2)), ("NCHW",)),
    "Flatten": (lambda: single(L.Flatten(), IMG), BOTH),
    "Reshape": (lambda: single(L.Reshape((-1, 7)), IMG), BOTH),
    "Permute": (lambda: single(L.Permute((3, 1, 2)), IMG), BOTH),
    "RepeatVector": (lambda: single(L.RepeatVector(3), (5,)), ("NHWC",)),
    "Dropout": (lambda: single(None, IMG, call=_identity_chain), ("NHWC",)),
    "SpatialDropout1D": (lambda: single(L.SpatialDropout1D(0.5), SEQ), ("NHWC",)),
    "SpatialDropout3D": (lambda: single(L.SpatialDropout3D(0.5), (2, 3, 3, 2)), ("NHWC",)),
    "ZeroPadding1D": (lambda: single(L.ZeroPadding1D((1, 2)), (5, 3)), ("NCHW",)),
    "ZeroPadding2D": (lambda: single(L.ZeroPadding2D(((1, 0), (2, 1))), IMG), BOTH),
    "ZeroPadding3D": (lambda: single(L.ZeroPadding3D(1), (2, 3, 3, 2)), ("NCHW",)),
    "Cropping1D": (lambda: single(L.Cropping1D((1, 2)), (7, 3)), ("NCHW",)),
    "Cropping2D": (lambda: single(L.Cropping2D(((1, 0), (2, 1))), IMG), BOTH),
    "Cropping3D": (lambda: single(L.Cropping3D(1), (4, 4, 4, 2)), ("NCHW",)),
    "UpSampling1D": (lambda: single(L.UpSampling1D(3), (4, 3)), ("NHWC",)),
    "UpSampling2D": (lambda: single(L.UpSampling2D((2, 3)), (4, 4, 3)), BOTH),
    "UpSampling2D-bilinear": (lambda: single(L.UpSampling2D(2, interpolation="bilinear"), (4, 4, 3)), BOTH),
    "UpSampling3D": (lambda: single(L.UpSampling3D((1, 2, 2)), (2, 3, 3, 2)), ("NCHW",)),
    "Concatenate": (lambda: single(L.Concatenate(), IMG, (7, 7, 2)), BOTH),
    "Concatenate-axis1": (lambda: single(L.Concatenate(axis=1), IMG, (2, 7, 3)), BOTH),
    "Add": (lambda: single(L.Add(), IMG, IMG, IMG), ("NCHW",)),
    "Subtract": (lambda: single(L.Subtract(), IMG, IMG), ("NCHW",)),
    "Multiply": (lambda: single(L.Multiply(), IMG, IMG), ("NCHW",)),
    "Average": (lambda: single(L.Average(), IMG, IMG), ("NCHW",)),
    "Maximum": (lambda: single(L.Maximum(), IMG, IMG), ("NCHW",)),
    "Minimum": (lambda: single(L.Minimum(), IMG, IMG), ("NCHW",)),
    "Dot": (lambda: single(L.Dot(axes=2), (4, 5), (3, 5)), ("NHWC",)),
    "Dot-normalize": (lambda: single(L.Dot(axes=1, normalize=True), (5,), (5,)), ("NHWC",)),
    "Embedding": (lambda: single(L.Embedding(10, 4), (6,), dtype="int32"), ("NHWC",)),
    "SimpleRNN": (lambda: single(L.SimpleRNN(5, return_sequences=True), STEPS), ("NHWC",)),
    "SimpleRNN-backwards": (lambda: single(L.SimpleRNN(5, go_backwards=True, activation="relu"), STEPS),
                            ("NHWC",)),
    "LSTM": (lambda: single(L.LSTM(5), STEPS), ("NHWC",)),
    "LSTM-seq-backwards": (lambda: single(L.LSTM(5, return_sequences=True, go_backwards=True), STEPS),
                           ("NHWC",)),
    "LSTM-state": (lambda: single(L.LSTM(3, return_state=True), STEPS), ("NHWC",)),
    "GRU": (lambda: single(L.GRU(5, return_sequences=True), STEPS), ("NHWC",)),
    "GRU-v1": (lambda: single(L.GRU(5, reset_after=False, go_backwards=True), STEPS), ("NHWC",)),
    "GRU-state": (lambda: single(L.GRU(3, return_state=True, return_sequences=True), STEPS), ("NHWC",)),
    "Bidirectional": (lambda: single(L.Bidirectional(L.LSTM(3, return_sequences=True)), STEPS), ("NHWC",)),
    "Bidirectional-sum": (lambda: single(L.Bidirectional(L.GRU(3), merge_mode="sum"), STEPS), ("NHWC",)),
    "MultiHeadAttention": (lambda: single(L.MultiHeadAttention(2, 4), (5, 8),
                                          call=lambda x: L.MultiHeadAttention(2, 4)(x, x)), ("NHWC",)),
    "MultiHeadAttention-cross": (lambda: _mha_cross(), ("NHWC",)),
    "MultiHeadAttention-mask": (lambda: _mha_mask(), ("NHWC",)),
    "LSTM-initial-state": (lambda: _lstm_initial_state(), ("NHWC",)),
    "TimeDistributed": (lambda: single(L.TimeDistributed(L.Dense(3)), SEQ), ("NHWC",)),
    "TimeDistributed-conv": (lambda: single(L.TimeDistributed(L.Conv2D(2, 3)), (3, 5, 5, 2)), BOTH),
    "RMSNormalization": (lambda: single(L.RMSNormalization(axis=[-2, -1]), SEQ), ("NHWC",)),
    "UnitNormalization": (lambda: single(L.UnitNormalization(axis=[1, 3]), IMG), BOTH),
    "GroupNormalization": (lambda: single(L.GroupNormalization(groups=2), (5, 5, 4)), BOTH),
    "GroupNormalization-seq": (lambda: single(L.GroupNormalization(groups=3, center=False), (4, 6)), BOTH),
    "Rescaling": (lambda: single(L.Rescaling(1 / 255.0, offset=-1.0), IMG), BOTH),
    "Normalization": (lambda: single(L.Normalization(mean=[1.0, 2.0, 3.0], variance=[1.0, 4.0, 0.25]), IMG),
                      BOTH),
    "Normalization-invert": (lambda: single(L.Normalization(mean=[1.0, 2.0, 3.0], variance=[1.0, 4.0, 0.25],
                                                            invert=True), IMG), ("NHWC",)),
    "InputLayer": (lambda: randomize(keras.Sequential([L.InputLayer(shape=(4,), name="x0"), L.Dense(2)])),
                   ("NHWC",)),
}


def _mha_cross() -> Any:
    q = keras.Input((3, 8), name="q")
    v = keras.Input((5, 6), name="v")
    out = L.MultiHeadAttention(2, 4, value_dim=3, output_shape=7)(q, v, use_causal_mask=True)
    return randomize(keras.Model([q, v], out))


IDENTITY_CHAIN = ["Dropout", "SpatialDropout2D", "GaussianDropout", "GaussianNoise", "AlphaDropout",
                  "ActivityRegularization", "Identity"]


def _identity_chain(x: Any) -> Any:
    """Every inference-time identity layer, chained (one case for all of them)."""
    for name in IDENTITY_CHAIN:
        x = getattr(L, name)(0.5)(x) if name not in ("Identity",) else L.Identity()(x)
    return x


def _softmax_mask() -> Any:
    x, mask = keras.Input(IMG, name="x"), keras.Input(IMG, dtype="int32", name="mask")
    return keras.Model([x, mask], L.Softmax()(x, mask=mask))


def _mha_mask() -> Any:
    q = keras.Input((4, 8), name="q")
    mask = keras.Input((4, 4), dtype="int32", name="mask")  # zeros (masked) among 0..9
    out, scores = L.MultiHeadAttention(2, 3)(q, q, attention_mask=mask, return_attention_scores=True)
    return randomize(keras.Model([q, mask], [out, scores]))


def _lstm_initial_state() -> Any:
    x, h, c = keras.Input(STEPS, name="x"), keras.Input((3,), name="h"), keras.Input((3,), name="c")
    return randomize(keras.Model([x, h, c], L.LSTM(3, return_sequences=True)(x, initial_state=[h, c])))


ACTIVATIONS = ["linear", "relu", "relu6", "sigmoid", "hard_sigmoid", "hard_swish", "hard_silu", "swish",
               "silu", "gelu", "tanh", "softmax", "log_softmax", "elu", "selu", "softplus", "softsign",
               "leaky_relu", "exponential", "mish", "log_sigmoid", "hard_tanh", "tanh_shrink"]


@pytest.mark.parametrize(("case", "layout"), [(c, lay) for c, (_, lays) in CASES.items() for lay in lays])
def test_layer(case: str, layout: str) -> None:
    check_model(CASES[case][0](), layout=layout)


def test_activations() -> None:
    """Every supported activation (one output each), on a channels-first feature map."""
    inp = keras.Input((5, 5, 3), name="x")
    model = keras.Model(inp, [L.Activation(name, name=f"act_{name}")(inp) for name in ACTIVATIONS])
    check_model(model, layout="NCHW")


def test_every_converter_has_a_case() -> None:
    tested = {c.split("-")[0] for c in CASES} | {"Activation"} | set(IDENTITY_CHAIN)
    assert tested == set(LAYERS)


# --- the contract ----------------------------------------------------------------------------------

def _cnn() -> Any:
    inp = keras.Input((6, 6, 3), name="image")
    x = L.Conv2D(4, 3, padding="same", name="conv_a")(inp)
    x = L.BatchNormalization(name="bn_a")(x)
    x = L.ReLU(name="relu_a")(x)
    return randomize(keras.Model(inp, L.Dense(2, name="head")(L.GlobalAveragePooling2D(name="gap")(x))))


def test_layouts_agree_and_inputs_follow_the_layout() -> None:
    model = _cnn()
    mod_nchw, _ = from_keras(model)  # TVM's default layout
    mod_nhwc, _ = from_keras(model, layout="NHWC")
    assert mod_nchw["main"].params[0].type_annotation.shape == (1, 3, 6, 6)  # batch None -> 1
    assert mod_nhwc["main"].params[0].type_annotation.shape == (1, 6, 6, 3)
    assert mod_nchw.attrs["output_names"] == ("head",)
    check_model(model, layout="NCHW")
    check_model(model, layout="NHWC")


def test_output_names_follow_layers() -> None:
    inp = keras.Input(STEPS, name="x")
    seq, h, c = L.LSTM(2, return_sequences=True, return_state=True, name="rnn")(inp)
    mod, _ = from_keras(keras.Model(inp, [seq, c, L.Dense(1, name="d")(h)]))
    assert mod.attrs["output_names"] == ("rnn", "rnn:2", "d")


def test_relay_entry_point_and_params() -> None:
    from kiln import relay

    model = _cnn()
    mod, params = relay.frontend.from_keras(model, shape={"image": (2, 3, 6, 6)}, freeze_params=False)
    assert {"conv_a.kernel.1", "head.kernel"} <= set(params)
    x = inputs_for(model)[0]
    got = run_compiled(mod, params, {"image": x.transpose(0, 3, 1, 2)})[0]
    np.testing.assert_allclose(got, np.asarray(model(x)), rtol=RTOL, atol=1e-5)


def test_provenance_names_layers() -> None:
    import kiln
    from kiln import relay
    from kiln.ir import Call, post_order

    model = _cnn()
    mod, params = from_keras(model, layout="NCHW")
    calls = [n for n in post_order(mod["main"].body) if isinstance(n, Call)]
    names = {s for c in calls for s in c.source_names}
    assert {"conv_a", "bn_a", "relu_a", "gap", "head"} <= names
    by_name: dict[str, set[str]] = {}
    for c in calls:
        by_name.setdefault(c.source_names[0], set()).add(c.op.name)
    assert "nn.conv2d" in by_name["conv_a"] and "nn.dense" in by_name["head"]
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    text = lib.get_graph_json()
    assert "source_names" in text and "conv_a" in text and "head" in text


def test_nested_model_layers_are_scoped() -> None:
    inner = keras.Sequential([keras.Input((5,)), L.Dense(4, name="d_in"), L.ReLU(name="r_in")], name="block")
    inp = keras.Input((5,), name="x")
    out = L.Add(name="sum")([inner(inp), L.Dense(4, name="skip")(inp)])
    model = randomize(keras.Model(inp, out))
    mod, _ = from_keras(model)
    from kiln.ir import Call, post_order

    names = {s for n in post_order(mod["main"].body) if isinstance(n, Call) for s in n.source_names}
    assert {"block/d_in", "block/r_in", "skip", "sum"} <= names
    check_model(model)


def test_shared_layer_weights_are_shared() -> None:
    dense = L.Dense(3, name="shared")
    a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
    model = randomize(keras.Model([a, b], L.Add()([dense(a), dense(b)])))
    _, params = from_keras(model, freeze_params=False)
    assert sorted(params) == ["shared.bias", "shared.kernel"]
    check_model(model)


def test_unsupported_layers_listed_at_once() -> None:
    from kiln.errors import UnsupportedOpError

    inp = keras.Input((4, 4, 3), name="x")
    x = L.Lambda(lambda t: t * 2, name="double")(inp)
    x = L.Conv2D(2, 3, data_format="channels_first", name="cf_conv")(x)
    x = L.Lambda(lambda t: t + 1, name="plus_one")(x)
    x = keras.ops.cumsum(x, axis=1)
    model = keras.Model(inp, L.Activation("sparsemax", name="act")(x))
    tokens = keras.Input((5,), dtype="int32", name="tokens")
    masked = L.LSTM(2, name="rnn")(L.Embedding(9, 3, mask_zero=True, name="emb")(tokens))
    with pytest.raises(UnsupportedOpError, match=r"Embedding: nodes 'emb' \(mask_zero=True"):
        from_keras(keras.Model(tokens, masked))
    with pytest.raises(UnsupportedOpError) as info:
        from_keras(model)
    message = str(info.value)
    assert re.search(r"Lambda: nodes 'double', 'plus_one'", message)
    assert "Conv2D: nodes 'cf_conv' (data_format='channels_first')" in message
    assert "Activation: nodes 'act' (activation 'sparsemax')" in message
    assert "keras.ops.Cumsum" in message and "Keras model" in message


def test_shape_errors() -> None:
    from kiln.errors import DynamicShapeError, FrontendError, InputShapeError

    inp = keras.Input((None, 4), name="seq")
    model = keras.Model(inp, L.Dense(2)(inp))
    with pytest.raises(DynamicShapeError, match=r"input 'seq' has unknown dim 1.*shape=\{'seq'.*from_keras"):
        from_keras(model)
    with pytest.raises(InputShapeError, match="dim 2"):
        from_keras(model, shape={"seq": (1, 3, 5)})
    with pytest.raises(InputShapeError, match="rank 2"):
        from_keras(model, shape={"seq": (1, 3)})
    with pytest.raises(FrontendError, match=r"\['nope'\], which are not model inputs"):
        from_keras(model, shape={"nope": (1, 3, 4)})
    with pytest.raises(FrontendError, match="layout must be one of"):
        from_keras(model, layout="NCW")
    mod, _ = from_keras(model, shape={"seq": (2, 3, 4)})
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    got = run_compiled(mod, {}, {"seq": x})[0]
    np.testing.assert_allclose(got, np.asarray(model(x)), rtol=RTOL, atol=1e-5)


def test_unbuilt_and_wrong_inputs() -> None:
    from kiln.errors import FrontendError

    with pytest.raises(FrontendError, match="is not built"):
        from_keras(keras.Sequential([L.Dense(2)]))

    class Sub(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.dense = L.Dense(2)

        def call(self, x: Any) -> Any:
            return self.dense(x)

    sub = Sub()
    sub(np.zeros((1, 3), np.float32))
    with pytest.raises(FrontendError, match="subclassed model"):
        from_keras(sub)
    with pytest.raises(FrontendError, match="expects a keras.Model"):
        from_keras(object())
    with pytest.raises(FrontendError, match="no such model file"):
        from_keras("/nonexistent/model.keras")


def test_model_file_round_trip(tmp_path: Path) -> None:
    model = _cnn()
    x = inputs_for(model)[0]
    for name in ("m.keras", "m.h5"):
        path = tmp_path / name
        model.save(path)
        mod, params = from_keras(str(path), shape={"image": x.shape}, layout="NHWC")
        got = run_compiled(mod, params, {"image": x})[0]
        np.testing.assert_allclose(got, np.asarray(model(x)), rtol=RTOL, atol=1e-5)


def test_doc_table_lists_exactly_the_converters() -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "frontends" / "keras.md"
    rows = re.findall(r"^\| `(\w+)` \|", doc.read_text(), flags=re.M)
    assert sorted(rows) == sorted(LAYERS)
