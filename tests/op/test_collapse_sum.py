"""collapse_sum_to / collapse_sum_like, reverse_reshape and the shift dtype rule, against NumPy:
reference kernels (the interpreter) and the compiled kernels."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.errors import KilnTypeError
from kiln.interpreter import evaluate
from kiln.ir import IRModule, TensorType
from kiln.transform import InferType


def _collapse(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and x.shape[lead + i] != 1)
    return x.sum(axis=axes).reshape(shape)


CASES = [((2, 3, 4), (3, 1)), ((2, 3, 4), (4,)), ((2, 3, 4), (1, 3, 4)), ((5,), (5,)), ((2, 3), ())]


@pytest.mark.parametrize("shape,target", CASES)
def test_collapse_sum_reference_matches_numpy(shape, target):
    x = relay.var("x", shape=shape)
    like = relay.var("like", shape=target)
    data = np.random.default_rng(0).normal(size=shape).astype("float32")
    fn = relay.Function([x, like], relay.Tuple([relay.collapse_sum_to(x, target),
                                               relay.collapse_sum_like(x, like)]))
    to, like_out = evaluate(IRModule.from_expr(fn), [data, np.zeros(target, "float32")])
    np.testing.assert_allclose(to, _collapse(data, target), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(like_out, _collapse(data, target), rtol=1e-5, atol=1e-6)


def test_collapse_sum_type_errors():
    x = relay.var("x", shape=(2, 3))
    with pytest.raises(KilnTypeError, match="do not broadcast"):
        InferType()(IRModule.from_expr(relay.Function([x], relay.collapse_sum_to(x, (4,)))))
    with pytest.raises(KilnTypeError, match="does not broadcast to the data shape"):
        InferType()(IRModule.from_expr(relay.Function([x], relay.collapse_sum_to(x, (5, 2, 3)))))


def test_compiled_kernels_match_numpy():
    x = relay.var("x", shape=(2, 3, 4))
    y = relay.var("y", shape=(3, 1))
    fn = relay.Function([x, y], relay.Tuple([
        relay.collapse_sum_to(x * relay.const(2.0), (3, 1)),
        relay.collapse_sum_like(x, y) + y,
        relay.reverse_reshape(x, (-1, 0))]))
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(2, 3, 4)).astype("float32"), rng.normal(size=(3, 1)).astype("float32")
    lib = relay.build(IRModule.from_expr(fn), "c")
    m = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    m.set_input("x", a)
    m.set_input("y", b)
    m.run()
    ref = _collapse(a, (3, 1))
    np.testing.assert_allclose(m.get_output(0).numpy(), 2 * ref, rtol=1e-5)
    np.testing.assert_allclose(m.get_output(1).numpy(), ref + b, rtol=1e-5)
    np.testing.assert_array_equal(m.get_output(2).numpy(), a.reshape(6, 4))


@pytest.mark.parametrize("shape,newshape,expected", [
    ((10, 5, 4), (-1, 0), (50, 4)),
    ((10, 5, 4), (0, -1), (5, 40)),
    ((2, 3, 4), (4, -1), (4, 6)),
])
def test_reverse_reshape_reads_codes_from_the_right(shape, newshape, expected):
    x = relay.var("x", shape=shape)
    fn = relay.Function([x], relay.reverse_reshape(x, newshape))
    mod = InferType()(IRModule.from_expr(fn))
    assert mod["main"].body.checked_type == TensorType(expected, "float32")
    data = np.arange(np.prod(shape), dtype="float32").reshape(shape)
    np.testing.assert_array_equal(evaluate(mod, [data]), data.reshape(expected))


def test_shifts_type_check_for_any_dtype_but_compute_on_ints():
    x = relay.var("x", shape=(3,))
    mod = InferType()(IRModule.from_expr(relay.Function([x], relay.left_shift(x, x))))
    assert mod["main"].body.checked_type == TensorType((3,), "float32")  # TVM's BroadcastRel
    with pytest.raises(KilnTypeError, match="cannot shift float32"):
        evaluate(mod, [np.ones(3, "float32")])
    i = relay.var("i", shape=(3,), dtype="int32")
    fn = relay.Function([i], relay.right_shift(relay.left_shift(i, relay.const(2)), relay.const(1)))
    out = evaluate(IRModule.from_expr(fn), [np.array([1, 2, 3], "int32")])
    np.testing.assert_array_equal(out, np.array([2, 4, 6], "int32"))
