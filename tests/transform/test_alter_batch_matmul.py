"""AlterBatchMatmul: transposed right operands made untransposed, odd column counts padded.

Oracles: hand-built expected graphs (structural equality), the reference interpreter on the
module before the pass and NumPy products (values), and the compiled module after the pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from _pass_helpers import assert_same_values, module, random_inputs, run_unchanged_input

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.interpreter import evaluate
from kiln.ir import assert_structural_equal
from kiln.target import Target
from kiln.transform import InferType, PassContext, Sequential
from kiln.transform.alter_batch_matmul import MIN_ROWS, AlterBatchMatmul, padded_columns

LANES = {8: "llvm -mcpu=haswell", 16: "llvm -mcpu=skylake-avx512"}


def _after(mod: tvm.IRModule, lanes: int) -> tvm.IRModule:
    with Target(LANES[lanes]):
        return run_unchanged_input(AlterBatchMatmul(), mod)


def test_transposed_b_becomes_untransposed():
    """``batch_matmul(a, b, transpose_b=True) -> batch_matmul(a, transpose(b, [0, 2, 1]))``."""
    a, b = relay.var("a", shape=(12, 128, 32)), relay.var("b", shape=(12, 128, 32))
    out = _after(module(relay.nn.batch_matmul(a, b, transpose_b=True)), 16)
    want = relay.nn.batch_matmul(a, relay.transpose(b, [0, 2, 1]), transpose_b=False)
    assert_structural_equal(out["main"], module(want)["main"])


@pytest.mark.parametrize(("lanes", "cols", "padded"), [(16, 197, 208), (8, 197, 200),
                                                        (16, 20, 32), (16, 5, 8), (8, 12, 16)])
def test_odd_columns_are_padded_and_sliced(lanes, cols, padded):
    a, b = relay.var("a", shape=(3, 21, 64)), relay.var("b", shape=(3, 64, cols))
    out = _after(module(relay.nn.batch_matmul(a, b, transpose_b=False)), lanes)
    product = relay.nn.batch_matmul(a, relay.nn.pad(b, ((0, 0), (0, 0), (0, padded - cols))),
                                    transpose_b=False)
    want = relay.strided_slice(product, [0, 0, 0], [3, 21, cols])
    assert_structural_equal(out["main"], module(want)["main"])
    assert padded_columns(cols, lanes) == padded


def test_transposed_and_odd_gets_both():
    a, b = relay.var("a", shape=(2, 9, 16)), relay.var("b", shape=(2, 20, 16))
    out = _after(module(relay.nn.batch_matmul(a, b, transpose_b=True)), 16)
    rhs = relay.nn.pad(relay.transpose(b, [0, 2, 1]), ((0, 0), (0, 0), (0, 12)))
    want = relay.strided_slice(relay.nn.batch_matmul(a, rhs, transpose_b=False), [0, 0, 0],
                               [2, 9, 20])
    assert_structural_equal(out["main"], module(want)["main"])


@pytest.mark.parametrize("build", [
    lambda: relay.nn.batch_matmul(relay.var("a", shape=(4, 8, 16)),
                                  relay.var("b", shape=(4, 16, 32)), transpose_b=False),
    lambda: relay.nn.batch_matmul(relay.var("a", shape=(4, MIN_ROWS - 1, 16)),
                                  relay.var("b", shape=(4, 32, 16)), transpose_b=True),
    lambda: relay.nn.batch_matmul(relay.var("a", shape=(2, 8, 4), dtype="int32"),
                                  relay.var("b", shape=(2, 4, 7), dtype="int32"), transpose_b=False),
], ids=["aligned", "few_rows", "int32"])
def test_left_alone(build):
    """Aligned untransposed products, products with fewer than ``MIN_ROWS`` rows (the transpose
    would cost as much as the product) and integer products do not change."""
    mod = module(build())
    assert_structural_equal(_after(mod, 16)["main"], mod["main"])


@pytest.mark.parametrize(("a_shape", "b_shape", "ta", "tb"), [
    ((3, 21, 64), (3, 64, 197), False, False),
    ((2, 9, 16), (2, 20, 16), False, True),
    ((1, 10, 8), (4, 8, 13), False, False),
    ((4, 16, 10), (4, 24, 16), True, True),
])
def test_values_kept(rng, a_shape, b_shape, ta, tb):
    """The rewritten module computes the interpreter's values of the original (and NumPy's)."""
    a, b = relay.var("a", shape=a_shape), relay.var("b", shape=b_shape)
    before = module(relay.nn.batch_matmul(a, b, transpose_a=ta, transpose_b=tb))
    after = _after(before, 16)
    inputs = random_inputs(before, rng)
    assert_same_values(before, after, inputs)
    x = inputs["a"].transpose(0, 2, 1) if ta else inputs["a"]
    y = inputs["b"].transpose(0, 2, 1) if tb else inputs["b"]
    got = np.asarray(evaluate(after, inputs))
    np.testing.assert_allclose(got, x.astype(np.float64) @ y, rtol=1e-5, atol=1e-5)


def test_compiled_attention_block(rng):
    """An attention core (scores, scale, softmax, weighted sum over 197 tokens) rewritten by the
    pass and built for the C target equals the interpreter on the original."""
    q, k, v = (relay.var(n, shape=(3, 197, 16)) for n in "qkv")
    scores = relay.multiply(relay.nn.batch_matmul(q, k, transpose_b=True),
                            relay.const(0.25, "float32"))
    out = relay.nn.batch_matmul(relay.nn.softmax(scores, axis=-1), v, transpose_b=False)
    before = module(out)
    with Target("c"), PassContext(opt_level=3):
        after = InferType()(Sequential([AlterBatchMatmul()])(before))
        lib = relay.build(after, target="c")
    inputs = random_inputs(before, rng)
    gm = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    gm.run(**inputs)
    want = np.asarray(evaluate(before, inputs))
    np.testing.assert_allclose(gm.get_output(0).numpy(), want, rtol=1e-5, atol=1e-5)
