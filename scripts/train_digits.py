"""Train the bundled demo model: a small CNN on scikit-learn's 8x8 digits, saved as ONNX.

The network is conv3x3(1->8, pad 1) -> relu -> maxpool2x2 -> flatten -> dense(128->64) -> relu
-> dense(64->10) -> softmax, trained with Adam in plain NumPy (seeded, about 20 seconds on 2 cores).
It writes ``kiln/data/digits_cnn.onnx`` and ``kiln/data/digits_test.npz`` (the held-out images and
labels the demo scores). Run from the repository root::

    python scripts/train_digits.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

OUT = Path(__file__).resolve().parent.parent / "kiln" / "data"


def im2col(x: np.ndarray) -> np.ndarray:
    """(N, 1, 8, 8) -> (N, 64, 9) patches of a 3x3 window with zero padding 1."""
    n = x.shape[0]
    xp = np.pad(x[:, 0], ((0, 0), (1, 1), (1, 1)))
    cols = np.empty((n, 8, 8, 9), x.dtype)
    for dy in range(3):
        for dx in range(3):
            cols[..., dy * 3 + dx] = xp[:, dy:dy + 8, dx:dx + 8]
    return cols.reshape(n, 64, 9)


def forward(p: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    cols = im2col(x)                                        # (N, 64, 9)
    conv = cols @ p["conv_w"].reshape(8, 9).T + p["conv_b"]  # (N, 64, 8)
    relu1 = np.maximum(conv, 0).reshape(-1, 8, 8, 8)        # (N, H, W, C)
    pooled = relu1.reshape(-1, 4, 2, 4, 2, 8).max(axis=(2, 4))  # (N, 4, 4, 8)
    flat = pooled.transpose(0, 3, 1, 2).reshape(-1, 128)    # NCHW flatten order
    h = flat @ p["fc1_w"].T + p["fc1_b"]
    relu2 = np.maximum(h, 0)
    logits = relu2 @ p["fc2_w"].T + p["fc2_b"]
    cache = {"cols": cols, "conv": conv, "relu1": relu1, "pooled": pooled, "flat": flat, "h": h,
             "relu2": relu2}
    return logits, cache


def backward(p: dict[str, np.ndarray], cache: dict[str, np.ndarray],
             dlogits: np.ndarray) -> dict[str, np.ndarray]:
    g: dict[str, np.ndarray] = {}
    g["fc2_w"] = dlogits.T @ cache["relu2"]
    g["fc2_b"] = dlogits.sum(0)
    dh = (dlogits @ p["fc2_w"]) * (cache["h"] > 0)
    g["fc1_w"] = dh.T @ cache["flat"]
    g["fc1_b"] = dh.sum(0)
    dpooled = (dh @ p["fc1_w"]).reshape(-1, 8, 4, 4).transpose(0, 2, 3, 1)
    relu1 = cache["relu1"].reshape(-1, 4, 2, 4, 2, 8)
    mask = relu1 == cache["pooled"][:, :, None, :, None, :]
    drelu1 = (mask * dpooled[:, :, None, :, None, :]).reshape(-1, 64, 8)
    dconv = drelu1 * (cache["conv"] > 0)
    g["conv_w"] = np.einsum("npc,npk->ck", dconv, cache["cols"]).reshape(8, 1, 3, 3)
    g["conv_b"] = dconv.sum((0, 1))
    return g


def train(x: np.ndarray, y: np.ndarray, epochs: int = 80, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = {
        "conv_w": rng.normal(0, np.sqrt(2 / 9), (8, 1, 3, 3)),
        "conv_b": np.zeros(8),
        "fc1_w": rng.normal(0, np.sqrt(2 / 128), (64, 128)),
        "fc1_b": np.zeros(64),
        "fc2_w": rng.normal(0, np.sqrt(1 / 64), (10, 64)),
        "fc2_b": np.zeros(10),
    }
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    step, lr, batch = 0, 3e-3, 64
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for i in range(0, len(x), batch):
            idx = order[i:i + batch]
            logits, cache = forward(p, x[idx])
            probs = np.exp(logits - logits.max(1, keepdims=True))
            probs /= probs.sum(1, keepdims=True)
            probs[np.arange(len(idx)), y[idx]] -= 1
            grads = backward(p, cache, probs / len(idx))
            step += 1
            for k in p:
                m[k] = 0.9 * m[k] + 0.1 * grads[k]
                v[k] = 0.999 * v[k] + 0.001 * grads[k] ** 2
                mhat, vhat = m[k] / (1 - 0.9**step), v[k] / (1 - 0.999**step)
                p[k] -= lr * mhat / (np.sqrt(vhat) + 1e-8)
    return {k: val.astype(np.float32) for k, val in p.items()}


def to_onnx(p: dict[str, np.ndarray]) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(val, name) for name, val in p.items()]
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["conv"], name="conv1",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu1"], name="relu1"),
        helper.make_node("MaxPool", ["relu1"], ["pool"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc1_w", "fc1_b"], ["fc1"], name="fc1", transB=1),
        helper.make_node("Relu", ["fc1"], ["relu2"], name="relu2"),
        helper.make_node("Gemm", ["relu2", "fc2_w", "fc2_b"], ["logits"], name="fc2", transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="kiln/scripts/train_digits.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> None:
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]  # (N, 1, 8, 8) in [0, 1]
    y = digits.target
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0,
                                                        stratify=y)
    params = train(x_train.astype(np.float64), y_train)
    logits, _ = forward({k: v.astype(np.float64) for k, v in params.items()}, x_test)
    acc = float((logits.argmax(1) == y_test).mean())
    OUT.mkdir(parents=True, exist_ok=True)
    onnx.save(to_onnx(params), OUT / "digits_cnn.onnx")
    np.savez_compressed(OUT / "digits_test.npz", images=x_test, labels=y_test.astype(np.int64))
    print(f"test accuracy {acc:.4f} on {len(y_test)} images; wrote {OUT}")


if __name__ == "__main__":
    main()
