"""QnnCanonicalizeOps: qnn.* lowered to plain ops, and relay.build of a quantized graph.

Oracle: NumPy formulas of TVM's qnn arithmetic written here (int32 accumulation of centred
operands, requantize rounding half up, saturation).
"""

from __future__ import annotations

import numpy as np

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.ir import assert_structural_equal
from kiln.transform import InferType, PassContext
from kiln.transform.qnn_canonicalize import QnnCanonicalizeOps, module_has_qnn


def c(v, dtype):
    return relay.const(np.asarray(v, dtype))


def test_quantized_dense_graph_builds_for_c_and_matches_numpy(rng):
    x = relay.var("x", shape=(2, 6), dtype="uint8")
    w = rng.integers(-128, 128, (5, 6)).astype("int8")
    acc = relay.qnn.op.dense(x, relay.const(w), c(128, "int32"), c(0, "int32"), c(0.05, "float32"),
                             c(0.02, "float32"), units=5)
    out = relay.qnn.op.dequantize(
        relay.qnn.op.requantize(acc, c(0.001, "float32"), c(0, "int32"), c(0.1, "float32"),
                                c(-3, "int32"), out_dtype="int8"), c(0.1, "float32"), c(-3, "int32"))
    mod = tvm.IRModule.from_expr(relay.Function([x], out))
    lowered = QnnCanonicalizeOps()(mod)
    assert module_has_qnn(mod) and not module_has_qnn(lowered)
    with PassContext(opt_level=3):
        lib = relay.build(mod, target="c")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    data = rng.integers(0, 256, (2, 6)).astype("uint8")
    m.set_input("x", data)
    m.run()
    accum = (data.astype(np.int64) - 128) @ w.astype(np.int64).T
    q = np.clip(np.floor(accum * (np.float64(np.float32(0.001)) / np.float64(np.float32(0.1)))
                         + 0.5) - 3, -128, 127)
    expected = ((q + 3) * np.float32(0.1)).astype("float32")
    np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=1e-6)


def test_module_without_qnn_is_unchanged():
    x = relay.var("x", shape=(2,))
    mod = InferType()(tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(x))))
    assert_structural_equal(InferType()(QnnCanonicalizeOps()(mod)), mod)
