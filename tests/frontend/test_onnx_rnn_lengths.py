"""LSTM/GRU/RNN ``sequence_lens`` computed from graph inputs (known only at run time) and
zero-length entries, checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontend._onnx_helpers import Const, check_node

RNG = np.random.default_rng(16)
SEQ, BATCH, FEAT, HIDDEN = 4, 4, 3, 5
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _w(*shape: int) -> Const:
    return Const((RNG.standard_normal(shape) * 0.5).astype(np.float32))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("runtime", [True, False])
def test_sequence_lengths_with_zero_length_entry(op: str, direction: str, runtime: bool) -> None:
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    lens = np.array([4, 0, 2, 1], np.int32)
    inputs = [RNG.standard_normal((SEQ, BATCH, FEAT)).astype(np.float32), _w(dirs, g * HIDDEN, FEAT),
              _w(dirs, g * HIDDEN, HIDDEN), _w(dirs, 2 * g * HIDDEN),
              lens if runtime else Const(lens), _w(dirs, BATCH, HIDDEN)]
    if op == "LSTM":
        inputs.append(_w(dirs, BATCH, HIDDEN))
    check_node(op, inputs, {"hidden_size": HIDDEN, "direction": direction}, opset=14,
               n_outputs=3 if op == "LSTM" else 2, rtol=1e-4, atol=1e-5)
