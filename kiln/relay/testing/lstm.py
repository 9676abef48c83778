"""Unrolled LSTM test network, structured and named as ``tvm.relay.testing.lstm``.

Each step calls a cell function literal (``i2h`` and ``h2h`` dense layers, gates from a 4-way
split, the new cell and hidden states) on that step's input ``data``, the previous states and the
step's parameters ``i2h_<i>_weight``, ``i2h_<i>_bias``, ``h2h_<i>_weight``, ``h2h_<i>_bias``. As
in TVM, the body is a chain of typed ``let`` bindings built with ``relay.ScopeBuilder``, so the
network runs on the interpreter (``create_executor``).
"""

from __future__ import annotations

from kiln.ir.analysis import free_vars
from kiln.ir.expr import Call, Expr, Function, Tuple, TupleGetItem, Var
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, TupleType
from kiln.op.elemwise import add, multiply, sigmoid, tanh
from kiln.op.transform import split
from kiln.op.transform_fill import zeros
from kiln.relay.scope_builder import ScopeBuilder
from kiln.relay.testing import layers
from kiln.relay.testing.init import create_workload
from kiln.runtime.ndarray import NDArray

__all__ = ["get_net", "get_workload", "lstm_cell"]


def lstm_cell(num_hidden: int, batch_size: int = 1, dtype: str = "float32",
              name: str = "") -> Function:
    """One LSTM cell: ``(inputs, (h, c), i2h_weight, i2h_bias, h2h_weight, h2h_bias)`` to
    ``(next_h, (next_h, next_c))``.

    Parameters
    ----------
    num_hidden : int
        Hidden size (also the input size).
    batch_size : int
        Batch size.
    dtype : str
        Dtype of data and parameters.
    name : str
        Prefix of the dense layers' names.

    Returns
    -------
    Function
        The cell.
    """
    b = ScopeBuilder()
    input_type = TensorType((batch_size, num_hidden), dtype)
    weight_type = TensorType((4 * num_hidden, num_hidden), dtype)
    bias_type = TensorType((4 * num_hidden,), dtype)
    dense_type = TensorType((batch_size, 4 * num_hidden), dtype)
    slice_type = TupleType((input_type,) * 4)
    ret_type = TupleType((input_type, TupleType((input_type, input_type))))
    inputs = Var("inputs", input_type)
    states = Var("states", TupleType((input_type, input_type)))
    i2h_weight = Var("i2h_weight", weight_type)
    i2h_bias = Var("i2h_bias", bias_type)
    h2h_weight = Var("h2h_weight", weight_type)
    h2h_bias = Var("h2h_bias", bias_type)
    i2h = b.let(("i2h", dense_type), layers.dense_add_bias(
        inputs, units=num_hidden * 4, weight=i2h_weight, bias=i2h_bias, name=f"{name}i2h"))
    h2h = b.let(("h2h", dense_type), layers.dense_add_bias(
        TupleGetItem(states, 0), units=num_hidden * 4, weight=h2h_weight, bias=h2h_bias,
        name=f"{name}h2h"))
    gates = b.let(("gates", dense_type), add(i2h, h2h))
    slice_gates = b.let(("slice_gates", slice_type),
                        split(gates, indices_or_sections=4, axis=1).astuple())
    in_gate = b.let(("in_gate", input_type), sigmoid(TupleGetItem(slice_gates, 0)))
    forget_gate = b.let(("forget_gate", input_type), sigmoid(TupleGetItem(slice_gates, 1)))
    in_transform = b.let(("in_transform", input_type), tanh(TupleGetItem(slice_gates, 2)))
    out_gate = b.let(("out_gate", input_type), sigmoid(TupleGetItem(slice_gates, 3)))
    next_c = b.let(("next_c", input_type), add(multiply(forget_gate, TupleGetItem(states, 1)),
                                             multiply(in_gate, in_transform)))
    next_h = b.let(("next_h", input_type), multiply(out_gate, tanh(next_c)))
    ret = b.let(("ret", ret_type), Tuple([next_h, Tuple([next_h, next_c])]))
    b.ret(ret)
    return Function([inputs, states, i2h_weight, i2h_bias, h2h_weight, h2h_bias], b.get(),
                    ret_type)


def get_net(iterations: int, num_hidden: int, batch_size: int = 1,
            dtype: str = "float32") -> Function:
    """An LSTM unrolled over ``iterations`` steps, returning the last step's output.

    Parameters
    ----------
    iterations : int
        Steps.
    num_hidden : int
        Hidden size.
    batch_size : int
        Batch size.
    dtype : str
        Dtype of data and parameters.

    Returns
    -------
    Function
        The network.
    """
    input_type = TensorType((batch_size, num_hidden), dtype)
    weight_type = TensorType((4 * num_hidden, num_hidden), dtype)
    bias_type = TensorType((4 * num_hidden,), dtype)
    state_type = TupleType((input_type, input_type))
    cell_type = TupleType((input_type, state_type))
    b = ScopeBuilder()
    zero = b.let(("zeros", input_type), zeros((batch_size, num_hidden), dtype))
    states: Expr = b.let(("init_states", state_type), Tuple([zero, zero]))
    out: Expr = states
    for i in range(iterations):
        inputs = Var("data", input_type)
        params = [Var(f"i2h_{i}_weight", weight_type), Var(f"i2h_{i}_bias", bias_type),
                  Var(f"h2h_{i}_weight", weight_type), Var(f"h2h_{i}_bias", bias_type)]
        cell = lstm_cell(num_hidden, batch_size, dtype, f"lstm_{i}")
        call = b.let((f"call_{i}", cell_type), Call(cell, [inputs, states, *params]))
        out = b.let((f"out_{i}", input_type), TupleGetItem(call, 0))
        states = b.let((f"states_{i}", state_type), TupleGetItem(call, 1))
    b.ret(out)
    body = b.get()
    return Function(free_vars(body), body, input_type)


def get_workload(iterations: int, num_hidden: int, batch_size: int = 1,
                 dtype: str = "float32") -> tuple[IRModule, dict[str, NDArray]]:
    """The unrolled LSTM module and its parameters (``relay.testing.lstm``).

    Parameters
    ----------
    iterations : int
        Steps.
    num_hidden : int
        Hidden size.
    batch_size : int
        Batch size.
    dtype : str
        Dtype of data and parameters.

    Returns
    -------
    mod : IRModule
        The network; its inputs are the ``data`` variables, one per step.
    params : dict of str to NDArray
        The other parameters.
    """
    return create_workload(get_net(iterations, num_hidden, batch_size, dtype))
