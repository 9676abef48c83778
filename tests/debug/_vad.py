"""Small ONNX models with value-preserving tails, shared by the layer-comparison tests.

:func:`make_vad_onnx` is shaped like the Silero voice-activity detector (opset 15): an STFT-like
strided Conv1d front end with a magnitude, Conv+ReLU encoder layers, a Squeeze/Unsqueeze (or
Transpose) into an LSTM whose initial state comes from the graph input ``state`` (``[2, 1, H]``,
split with Gather), then a decoder ``Squeeze -> Unsqueeze -> Relu -> Conv -> Sigmoid -> Squeeze ->
ReduceMean`` and outputs ``output`` and ``stateN`` (the Concat of h and c). Weights are random;
every node is named like a PyTorch export (``/model/decoder/Relu``), so the importer's source
names are those names.

:func:`make_tail_onnx` builds tiny models whose layers end in a reshape, an unsqueeze, a
transpose, a flatten or a concat, for the same matching through tails.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["HIDDEN", "SAMPLES", "TAILS", "make_tail_onnx", "make_vad_onnx", "vad_inputs"]

SAMPLES = 256
HIDDEN = 16
TAILS = ("reshape", "unsqueeze", "transpose", "flatten", "concat", "split", "squeeze_relu",
         "unsqueeze_relu")


class _Graph:
    def __init__(self, seed: int):
        self.rng = np.random.RandomState(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def init(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], scale: float) -> str:
        return self.init(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def ints(self, name: str, values: list[int]) -> str:
        return self.init(name, np.array(values, dtype=np.int64))

    def node(self, op: str, inputs: list[str], name: str, outputs: int = 1, **attrs: object) -> list[str]:
        outs = [f"{name}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs

    def one(self, op: str, inputs: list[str], name: str, **attrs: object) -> str:
        return self.node(op, inputs, name, **attrs)[0]


def make_vad_onnx(seed: int = 0, *, transpose_in: bool = False,
                  perturb: str | None = None) -> onnx.ModelProto:
    """The voice-activity-style model: inputs ``input`` ``[1, SAMPLES]`` and ``state``.

    Parameters
    ----------
    seed : int
        Seed of the random weights.
    transpose_in : bool
        Feed the LSTM through a Transpose (``[1, C, 1] -> [1, 1, C]``) instead of Squeeze and
        Unsqueeze.
    perturb : str, optional
        The name of a weight initializer to change (its first row, by 0.5): a model that computes
        something else from the same layer structure.

    Returns
    -------
    onnx.ModelProto
        Outputs ``output`` (``[1, 1]``) and ``stateN`` (``[2, 1, HIDDEN]``).
    """
    g = _Graph(seed)
    h = HIDDEN
    frames, hop, bins = 64, 32, 12
    x = g.one("Reshape", ["input", g.ints("stft_shape", [1, 1, SAMPLES])], "/model/stft/Reshape")
    x = g.one("Pad", [x, g.ints("stft_pads", [0, 0, 16, 0, 0, 16])], "/model/stft/Pad",
              mode="reflect")
    basis = g.weight("model.stft.forward_basis_buffer", (2 * bins, 1, frames), 0.2)
    spec = g.one("Conv", [x, basis], "/model/stft/Conv", strides=[hop])
    real = g.one("Slice", [spec, g.ints("s0", [0]), g.ints("s1", [bins]), g.ints("s2", [1])],
                 "/model/stft/Slice")
    imag = g.one("Slice", [spec, g.ints("s3", [bins]), g.ints("s4", [2 * bins]), g.ints("s5", [1])],
                 "/model/stft/Slice_1")
    power = g.one("Add", [g.one("Mul", [real, real], "/model/stft/Mul"),
                          g.one("Mul", [imag, imag], "/model/stft/Mul_1")], "/model/stft/Add")
    x = g.one("Sqrt", [power], "/model/stft/Sqrt")  # [1, bins, 9]
    channels = [bins, 16, 16, 24, h]
    strides = [1, 2, 2, 2]
    for i, stride in enumerate(strides):
        cin, cout = channels[i], channels[i + 1]
        w = g.weight(f"model.encoder.{i}.reparam_conv.weight", (cout, cin, 3),
                     1.0 / np.sqrt(3 * cin))
        b = g.weight(f"model.encoder.{i}.reparam_conv.bias", (cout,), 0.1)
        x = g.one("Conv", [x, w, b], f"/model/encoder/encoder.{i}/reparam_conv/Conv",
                  kernel_shape=[3], pads=[1, 1], strides=[stride])
        x = g.one("Relu", [x], f"/model/encoder/encoder.{i}/activation/Relu")
    # x: [1, H, 2] -> mean over time keeps [1, H, 1] as Silero's encoder ends with T = 1
    x = g.one("ReduceMean", [x], "/model/encoder/ReduceMean", axes=[2], keepdims=1)
    if transpose_in:
        seq = g.one("Transpose", [x], "/model/decoder/Transpose", perm=[2, 0, 1])
    else:
        sq = g.one("Squeeze", [x, g.ints("axis_m1", [-1])], "/model/decoder/Squeeze")
        seq = g.one("Unsqueeze", [sq, g.ints("axis_0", [0])], "/model/decoder/rnn/Unsqueeze")
    h0 = g.one("Gather", ["state", g.init("idx0", np.array(0, np.int64))], "/model/Gather", axis=0)
    c0 = g.one("Gather", ["state", g.init("idx1", np.array(1, np.int64))], "/model/Gather_1", axis=0)
    h0 = g.one("Unsqueeze", [h0, "axis_0"] if not transpose_in else
               [h0, g.ints("axis_0", [0])], "/model/decoder/rnn/Unsqueeze_1")
    c0 = g.one("Unsqueeze", [c0, "axis_0"], "/model/decoder/rnn/Unsqueeze_2")
    wih = g.weight("onnx::LSTM_W", (1, 4 * h, h), 1.0 / np.sqrt(h))
    whh = g.weight("onnx::LSTM_R", (1, 4 * h, h), 1.0 / np.sqrt(h))
    bias = g.weight("onnx::LSTM_B", (1, 8 * h), 0.1)
    _, yh, yc = g.node("LSTM", [seq, wih, whh, bias, "", h0, c0], "/model/decoder/rnn/LSTM",
                       outputs=3, hidden_size=h)
    hn = g.one("Squeeze", [yh, "axis_0"], "/model/decoder/rnn/Squeeze")   # [1, H]
    cn = g.one("Squeeze", [yc, "axis_0"], "/model/decoder/rnn/Squeeze_1")
    y = g.one("Unsqueeze", [hn, g.ints("axis_2", [-1])], "/model/decoder/Unsqueeze")  # [1, H, 1]
    y = g.one("Relu", [y], "/model/decoder/decoder/1/Relu")
    wd = g.weight("model.decoder.decoder.2.weight", (1, h, 1), 1.0 / np.sqrt(h))
    bd = g.weight("model.decoder.decoder.2.bias", (1,), 0.1)
    y = g.one("Conv", [y, wd, bd], "/model/decoder/decoder/2/Conv", kernel_shape=[1])
    y = g.one("Sigmoid", [y], "/model/decoder/decoder/3/Sigmoid")     # [1, 1, 1]
    y = g.one("Squeeze", [y, g.ints("axis_1", [1])], "/model/decoder/Squeeze_1")  # [1, 1]
    g.nodes.append(helper.make_node("ReduceMean", [y], ["output"], name="/model/ReduceMean",
                                    axes=[1], keepdims=1))
    hs = g.one("Unsqueeze", [hn, "axis_0"], "/model/Unsqueeze")
    cs = g.one("Unsqueeze", [cn, "axis_0"], "/model/Unsqueeze_1")
    g.nodes.append(helper.make_node("Concat", [hs, cs], ["stateN"], name="/model/Concat", axis=0))
    if perturb is not None:
        index = next(i for i, t in enumerate(g.inits) if t.name == perturb)
        value = numpy_helper.to_array(g.inits[index]).copy()
        value[0] += 0.5
        g.inits[index] = numpy_helper.from_array(value, perturb)
    graph = helper.make_graph(
        g.nodes, "vad_like",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, SAMPLES]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 1, h])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1]),
         helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, 1, h])],
        initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def vad_inputs(seed: int = 1) -> dict[str, np.ndarray]:
    """An input frame and a non-zero state for :func:`make_vad_onnx`."""
    rng = np.random.RandomState(seed)
    return {"input": rng.standard_normal((1, SAMPLES)).astype(np.float32),
            "state": (rng.standard_normal((2, 1, HIDDEN)) * 0.5).astype(np.float32)}


_TAIL_OUT = {"reshape": [1, 5, 4], "unsqueeze": [1, 5, 1, 6], "transpose": [1, 5, 4],
             "flatten": [1, 5], "concat": [1, 5, 8], "split": [1, 5, 8], "squeeze_relu": [1, 5, 8],
             "unsqueeze_relu": [1, 5, 1]}


def make_tail_onnx(tail: str, seed: int = 0) -> onnx.ModelProto:
    """A conv layer whose ReLU output goes through ``tail`` before the next layer (opset 15).

    ``tail`` is one of :data:`TAILS`: ``reshape`` (Relu -> Reshape -> Conv), ``unsqueeze``,
    ``transpose``, ``flatten`` (into a Gemm), ``concat`` (two ReLU branches concatenated),
    ``split`` (two parts, each into a conv),
    ``squeeze_relu`` (Squeeze, then Relu on the squeezed tensor) or ``unsqueeze_relu`` (a Gemm's
    output unsqueezed, then a Relu, as in Silero's decoder). Input ``x`` is ``[1, 4, 8]``.
    """
    g = _Graph(seed)
    x = g.one("Conv", ["x", g.weight("w1", (6, 4, 3), 0.3), g.weight("b1", (6,), 0.1)], "conv1",
              kernel_shape=[3], pads=[1, 1])
    x = g.one("Relu", [x], "relu1")  # [1, 6, 8]
    if tail == "reshape":
        x = g.one("Reshape", [x, g.ints("shape", [1, 12, 4])], "reshape")
        x = g.one("Conv", [x, g.weight("w2", (5, 12, 1), 0.3)], "conv2", kernel_shape=[1])
    elif tail == "unsqueeze":
        x = g.one("Unsqueeze", [x, g.ints("axes", [2])], "unsqueeze")  # [1, 6, 1, 8]
        x = g.one("Conv", [x, g.weight("w2", (5, 6, 1, 3), 0.3)], "conv2", kernel_shape=[1, 3])
    elif tail == "transpose":
        x = g.one("Transpose", [x], "transpose", perm=[0, 2, 1])  # [1, 8, 6]
        x = g.one("Conv", [x, g.weight("w2", (5, 8, 3), 0.3)], "conv2", kernel_shape=[3])
    elif tail == "flatten":
        x = g.one("Flatten", [x], "flatten", axis=1)
        x = g.one("Gemm", [x, g.weight("w2", (5, 48), 0.2), g.weight("b2", (5,), 0.1)], "fc",
                  transB=1)
    elif tail == "concat":
        y = g.one("Relu", [g.one("Conv", [x, g.weight("w3", (3, 6, 1), 0.3)], "conv3",
                                 kernel_shape=[1])], "relu3")
        x = g.one("Concat", [x, y], "concat", axis=1)  # [1, 9, 8]
        x = g.one("Conv", [x, g.weight("w2", (5, 9, 1), 0.3)], "conv2", kernel_shape=[1])
    elif tail == "split":  # a multi-output node: each part is one output of the ONNX Split
        a, b = g.node("Split", [x, g.ints("split", [3, 3])], "split", outputs=2, axis=1)
        a = g.one("Conv", [a, g.weight("w2", (5, 3, 1), 0.3)], "conv2", kernel_shape=[1])
        b = g.one("Conv", [b, g.weight("w3", (5, 3, 3), 0.3)], "conv3", kernel_shape=[3],
                  pads=[1, 1])
        x = g.one("Add", [a, b], "add")
    elif tail == "squeeze_relu":
        x = g.one("Conv", [x, g.weight("w3", (1, 6, 1), 0.3)], "conv3", kernel_shape=[1])
        x = g.one("Squeeze", [x, g.ints("axes", [1])], "squeeze")  # [1, 8]
        x = g.one("Relu", [x], "relu2")
        x = g.one("Unsqueeze", [x, g.ints("axes2", [1])], "unsqueeze")  # [1, 1, 8]
        x = g.one("Conv", [x, g.weight("w2", (5, 1, 1), 0.3)], "conv2", kernel_shape=[1])
    elif tail == "unsqueeze_relu":  # Silero's decoder: the build sinks the unsqueeze below the ReLU
        x = g.one("Flatten", [x], "flatten", axis=1)
        x = g.one("Gemm", [x, g.weight("w3", (6, 48), 0.2), g.weight("b3", (6,), 0.1)], "fc",
                  transB=1)
        # a second reader of the Gemm keeps the ReLU out of the Gemm's kernel
        total = g.one("ReduceSum", [x, g.ints("axes_sum", [1])], "sum", keepdims=1)  # [1, 1]
        x = g.one("Unsqueeze", [x, g.ints("axes", [-1])], "unsqueeze")  # [1, 6, 1]
        x = g.one("Relu", [x], "relu2")
        x = g.one("Conv", [x, g.weight("w2", (5, 6, 1), 0.3)], "conv2", kernel_shape=[1])
        x = g.one("Add", [x, g.one("Unsqueeze", [total, "axes"], "unsqueeze_1")], "add")
    else:
        raise ValueError(f"unknown tail {tail!r}")
    g.nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        g.nodes, f"tail_{tail}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, _TAIL_OUT[tail])],
        initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model
