"""``relay.frontend.common``: TVM's importer helpers, as TVM's tests call them."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import relay
from kiln.errors import KilnError
from kiln.ir.expr import Function
from kiln.ir.types import TensorType
from kiln.relay.frontend import common


def test_infer_type_of_an_expression_and_of_a_function() -> None:
    x = relay.var("x", shape=(2, 3), dtype="float32")
    body = relay.nn.relu(relay.add(x, relay.const(np.float32(1))))
    typed = common.infer_type(body)
    assert typed.checked_type == TensorType((2, 3), "float32")
    fn = common.infer_type(relay.Function([x], body))
    assert isinstance(fn, Function)
    assert fn.checked_type.ret_type == TensorType((2, 3), "float32")


def test_infer_shape_and_channels() -> None:
    w = relay.var("w", shape=(8, 4, 3, 3))
    assert common.infer_shape(w) == [8, 4, 3, 3]
    assert common.infer_shape(relay.Tuple([w, relay.var("b", shape=(8,))])) == [[8, 4, 3, 3], [8]]
    assert common.infer_channels(w) == 8
    assert common.infer_channels(w, transpose=True) == 4


def test_infer_value_evaluates_with_params() -> None:
    x = relay.var("x", shape=(3,), dtype="float32")
    expr = relay.multiply(x, relay.const(np.float32(2)))
    value = common.infer_value(expr, {"x": np.array([1, 2, 3], np.float32)})
    np.testing.assert_array_equal(value.numpy(), [2, 4, 6])
    with pytest.raises(KilnError, match="x"):
        common.infer_value(expr, {})
    assert common.try_infer_value(expr)[1] is False
    simulated = common.infer_value_simulated(expr, {})
    assert simulated.numpy().shape == (3,)


def test_shape_of_static_and_get_relay_op() -> None:
    x = relay.var("x", shape=(2, 5, 7))
    shape = common.shape_of(x, start=1)
    np.testing.assert_array_equal(shape.data.numpy(), [5, 7])
    assert common.get_relay_op("nn.relu") is relay.nn.relu
    assert common.get_relay_op("add") is relay.add
    with pytest.raises(KilnError, match="no_such_op"):
        common.get_relay_op("nn.no_such_op")
    v = common.new_var("v", shape=(4,), dtype="int32")
    assert v.name_hint == "v" and v.type_annotation == TensorType((4,), "int32")


def test_fold_constant() -> None:
    expr = relay.add(relay.const(np.float32(1)), relay.const(np.float32(2)))
    folded = common.fold_constant(expr)
    assert float(folded.data.numpy()) == 3.0
