"""LSTM, GRU and RNN converters against onnxruntime: directions, initial states, biases,
sequence lengths, peepholes, GRU's linear_before_reset, custom activations and clipping."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.frontend._onnx_helpers import Const, check_node

RNG = np.random.default_rng(6)
SEQ, BATCH, FEAT, HIDDEN = 4, 3, 5, 4
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _w(*shape):
    return Const((RNG.standard_normal(shape) * 0.5).astype(np.float32))


def _inputs(op, dirs, bias=True, lens=None, states=False, peepholes=False):
    g = GATES[op]
    x = RNG.standard_normal((SEQ, BATCH, FEAT)).astype(np.float32)
    inputs = [x, _w(dirs, g * HIDDEN, FEAT), _w(dirs, g * HIDDEN, HIDDEN),
              _w(dirs, 2 * g * HIDDEN) if bias else None,
              Const(np.array(lens, np.int32)) if lens is not None else None,
              _w(dirs, BATCH, HIDDEN) if states else None]
    if op == "LSTM":
        inputs += [_w(dirs, BATCH, HIDDEN) if states else None, _w(dirs, 3 * HIDDEN) if peepholes else None]
    while inputs[-1] is None:
        inputs.pop()
    return inputs


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("bias, states", [(True, True), (False, False)])
def test_recurrent_directions(op, direction, bias, states):
    dirs = 2 if direction == "bidirectional" else 1
    n_out = 3 if op == "LSTM" else 2
    check_node(op, _inputs(op, dirs, bias=bias, states=states),
               {"hidden_size": HIDDEN, "direction": direction}, opset=14, n_outputs=n_out, rtol=1e-4,
               atol=1e-5)


def test_bidirectional_steps_alternate_and_long_sequences_compile():
    """A bidirectional LSTM over 600 steps matches onnxruntime (its outputs' 1200-way
    concatenation compiles), and the graph runs the two directions' steps alternately (each
    step's recurrence product after the other direction's step, not its own) while both
    directions' recurrence weights fit in L2 together."""
    from kiln import relay
    from kiln.ir.expr import Call, Op
    from kiln.ir.visitor import post_order
    from tests.frontend._onnx_helpers import single_node_model

    seq, hidden = 600, 8
    inputs = [RNG.standard_normal((seq, 1, 4)).astype(np.float32), _w(2, 4 * hidden, 4),
              _w(2, 4 * hidden, hidden), _w(2, 8 * hidden)]
    attrs = {"hidden_size": hidden, "direction": "bidirectional"}
    check_node("LSTM", inputs, attrs, opset=14, n_outputs=3, rtol=1e-4, atol=1e-5)
    mod, _ = relay.frontend.from_onnx(single_node_model("LSTM", inputs, attrs, 14, 3)[0])
    recurrences = [n.args[1] for n in post_order(mod["main"].body) if isinstance(n, Call)
                   and isinstance(n.op, Op) and n.op.name == "nn.dense"
                   and tuple(n.args[1].checked_type.shape) == (4 * hidden, hidden)]
    assert len(recurrences) == 2 * (seq - 1)  # step 0 starts from zero states: no product
    assert all(a is not b for a, b in itertools.pairwise(recurrences))
    # recurrence weights of 2 x 1 MB would evict each other from L2 at every step: chained
    big = [RNG.standard_normal((3, 1, 4)).astype(np.float32), _w(2, 1024, 4), _w(2, 1024, 256)]
    mod, _ = relay.frontend.from_onnx(single_node_model(
        "LSTM", big, {"hidden_size": 256, "direction": "bidirectional"}, 14, 3)[0])
    order = [n.args[1] for n in post_order(mod["main"].body) if isinstance(n, Call)
             and isinstance(n.op, Op) and n.op.name == "nn.dense"
             and tuple(n.args[1].checked_type.shape) == (1024, 256)]
    assert len(order) == 4 and order[0] is order[1] and order[2] is order[3]


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_sequence_lengths(op, direction):
    dirs = 2 if direction == "bidirectional" else 1
    n_out = 3 if op == "LSTM" else 2
    attrs = {"hidden_size": HIDDEN, "direction": direction}
    check_node(op, _inputs(op, dirs, lens=[4, 1, 3], states=True), attrs, opset=14, n_outputs=n_out,
               rtol=1e-4, atol=1e-5)


def test_lstm_peepholes_and_forget_coupling():
    check_node("LSTM", _inputs("LSTM", 1, states=True, peepholes=True), {"hidden_size": HIDDEN}, opset=14,
               n_outputs=3, rtol=1e-4, atol=1e-5)
    check_node("LSTM", _inputs("LSTM", 1), {"hidden_size": HIDDEN, "input_forget": 1}, opset=14,
               n_outputs=3, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("before_reset", [0, 1])
def test_gru_linear_before_reset(before_reset):
    check_node("GRU", _inputs("GRU", 2, states=True), {"hidden_size": HIDDEN, "direction": "bidirectional",
                                                       "linear_before_reset": before_reset},
               opset=14, n_outputs=2, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op, acts, alpha, beta", [
    ("RNN", ["Relu"], None, None), ("RNN", ["LeakyRelu"], [0.2], None),
    ("GRU", ["HardSigmoid", "Softsign"], [0.3], [0.4]), ("LSTM", ["Sigmoid", "Affine", "Tanh"], [0.5], [0.1]),
    ("RNN", ["ScaledTanh", "Elu"], [1.5, 0.7], [0.8]),
])
def test_custom_activations(op, acts, alpha, beta):
    dirs = 2 if (op == "RNN" and len(acts) == 2) else 1
    attrs = {"hidden_size": HIDDEN, "activations": acts}
    if dirs == 2:
        attrs["direction"] = "bidirectional"
    if alpha:
        attrs["activation_alpha"] = alpha
    if beta:
        attrs["activation_beta"] = beta
    n_out = 3 if op == "LSTM" else 2
    check_node(op, _inputs(op, dirs), attrs, opset=14, n_outputs=n_out, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_clip(op):
    n_out = 3 if op == "LSTM" else 2
    check_node(op, _inputs(op, 1), {"hidden_size": HIDDEN, "clip": 0.5}, opset=14, n_outputs=n_out, rtol=1e-4,
               atol=1e-5)
