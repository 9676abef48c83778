"""relay.testing's mlp, dqn, dcgan, squeezenet, densenet and lstm: TVM's structure and names,
run on the interpreter against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import relay
from kiln.relay.testing import dcgan, densenet, dqn, lstm, mlp, squeezenet


def evaluate(mod: object, *args: object, params: dict | None = None) -> object:
    ex = relay.create_executor("debug", mod=mod, params=params)
    return ex.evaluate()(*args)


def _np(v: object) -> np.ndarray:
    return v.numpy() if hasattr(v, "numpy") else np.asarray(v)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def test_mlp_matches_numpy() -> None:
    mod, params = mlp.get_workload(batch_size=2, num_classes=5, image_shape=(1, 4, 4))
    assert [p.name_hint for p in mod["main"].params] == [
        "data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "fc3_weight", "fc3_bias"]
    x = np.random.default_rng(0).standard_normal((2, 1, 4, 4)).astype("float32")
    p = {k: v.numpy() for k, v in params.items()}
    h = x.reshape(2, -1)
    for i in (1, 2, 3):
        h = h @ p[f"fc{i}_weight"].T + p[f"fc{i}_bias"]
        h = np.maximum(h, 0) if i < 3 else _softmax(h)
    np.testing.assert_allclose(_np(evaluate(mod, x, params=params)), h, rtol=1e-5, atol=1e-6)


def test_lstm_matches_a_numpy_lstm() -> None:
    steps, hidden = 3, 4
    mod, params = lstm.get_workload(steps, hidden)
    names = [p.name_hint for p in mod["main"].params]
    assert names[:5] == ["data", "i2h_0_weight", "i2h_0_bias", "h2h_0_weight", "h2h_0_bias"]
    assert names.count("data") == steps and len(params) == 4 * steps
    rng = np.random.default_rng(1)
    args = []
    for p in mod["main"].params:
        if p.name_hint == "data":
            args.append(rng.standard_normal((1, hidden)).astype("float32"))
        else:
            args.append(params[p.name_hint].numpy())
    h = c = np.zeros((1, hidden), "float32")
    for i in range(steps):
        x, wi, bi, wh, bh = args[5 * i:5 * i + 5]
        gates = x @ wi.T + bi + h @ wh.T + bh
        g_in, g_forget, g_transform, g_out = np.split(gates, 4, axis=1)
        c = _sigmoid(g_forget) * c + _sigmoid(g_in) * np.tanh(g_transform)
        h = _sigmoid(g_out) * np.tanh(c)
    np.testing.assert_allclose(_np(evaluate(mod, *args)), h, rtol=1e-5, atol=1e-6)


def test_dqn_structure_and_run() -> None:
    mod, params = dqn.get_workload(batch_size=1, num_actions=6, image_shape=(4, 36, 36))
    assert sorted(params) == sorted(f"{n}_{k}" for n in ("conv1", "conv2", "conv3", "dense1",
                                                         "dense2") for k in ("weight", "bias"))
    assert params["conv1_weight"].shape == (32, 4, 8, 8)
    assert params["dense1_weight"].shape == (512, 64)
    x = np.random.default_rng(2).standard_normal((1, 4, 36, 36)).astype("float32")
    out = _np(evaluate(mod, x, params=params))
    assert out.shape == (1, 6) and np.isfinite(out).all()


def test_dcgan_structure_and_run() -> None:
    mod, params = dcgan.get_workload(batch_size=1, ngf=4, random_len=10)
    assert params["dense_weight"].shape == (4 * 4 * 4 * 8, 10)
    assert params["g2_deconv_weight"].shape == (32, 16, 4, 4)  # IOHW
    assert "g2_batch_norm_beta" in params and "g5_deconv_weight" in params
    out = _np(evaluate(mod, np.ones((1, 10), "float32"), params=params))
    assert out.shape == (1, 3, 64, 64) and (np.abs(out) <= 1).all()  # tanh


@pytest.mark.parametrize("version, conv1", [("1.0", (96, 3, 7, 7)), ("1.1", (64, 3, 3, 3))])
def test_squeezenet_structure_and_run(version: str, conv1: tuple[int, ...]) -> None:
    mod, params = squeezenet.get_workload(1, num_classes=7, version=version,
                                          image_shape=(3, 64, 64))
    assert params["conv1_weight"].shape == conv1
    assert params["fire8_right_conv_weight"].shape == (256, 64, 3, 3)
    assert params["conv_final_weight"].shape == (7, 512, 1, 1)
    x = np.random.default_rng(3).standard_normal((1, 3, 64, 64)).astype("float32")
    out = _np(evaluate(mod, x, params=params))
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)  # softmax


def test_densenet_structure() -> None:
    mod, params = densenet.get_workload(121, classes=10, batch_size=1)
    ty = mod["main"].checked_type
    assert ty.ret_type == relay.TensorType((1, 10), "float32")
    assert params["conv1_weight"].shape == (64, 3, 7, 7)
    assert params["conv2d_1_0_0_weight"].shape == (128, 64, 1, 1)
    assert params["conv2d_2_3_15_weight"].shape == (32, 128, 3, 3)
    # as in TVM, a block concatenates its layers' outputs only (not its input): 6 x 32 channels
    # reach the first transition, which halves TVM's running count 64 + 6 x 32 = 256 to 128
    assert params["conv_t_0_weight"].shape == (128, 192, 1, 1)
    assert params["dense_weight"].shape == (10, 16 * 32)
    with pytest.raises(Exception, match="121"):
        densenet.get_workload(120)
