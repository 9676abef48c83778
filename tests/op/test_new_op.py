"""Adding an operator touches only its registry entry and its compute: a toy op declared here,
through the public registry alone, types, fuses into a convolution's epilogue, follows the
blocked layout of AlterOpLayout (its layout behaviour derived from its pattern), compiles to C and
runs, matching its NumPy reference (the interpreter runs the registered reference)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import relay, te
from kiln.contrib import graph_executor
from kiln.ir.types import TensorType, Type
from kiln.op.registry import OpPattern, all_ops, get_op_def, make_call, register_op

NAME = "toy.softsign"


def _rel(types: list[Type], attrs: Any) -> Type:
    (x,) = types
    assert isinstance(x, TensorType)
    return x


def _ref(args: list[np.ndarray], attrs: Any, out_type: Type) -> np.ndarray:
    x = args[0]
    return (x / (1 + np.abs(x))).astype(x.dtype)


def _compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    one = te.const(1, x.dtype)
    return te.compute(x.shape, lambda *i: x(*i) / (one + te.abs(x(*i))), name="T_softsign",
                      tag="elemwise")


def _declare() -> None:
    if NAME not in all_ops():
        register_op(NAME, num_inputs=1, type_rel=_rel, reference=_ref, pattern=OpPattern.ELEMWISE,
                    doc="x / (1 + |x|)")
        get_op_def(NAME).compute = _compute


def softsign(x: relay.Expr) -> relay.Expr:
    return make_call(NAME, [x])


@pytest.mark.requires_cc
def test_toy_op_fuses_keeps_blocked_layout_compiles_and_runs() -> None:
    _declare()
    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(1, 16, 8, 8), dtype="float32")
    w = relay.const(rng.standard_normal((16, 16, 3, 3)).astype("float32") * 0.2)
    y = softsign(relay.nn.conv2d(x, w, padding=(1, 1), channels=16, kernel_size=(3, 3)))
    y = relay.nn.conv2d(y, w, padding=(1, 1), channels=16, kernel_size=(3, 3))
    mod = kiln.IRModule.from_expr(relay.Function([x], y))
    data = rng.standard_normal((1, 16, 8, 8)).astype("float32")
    expected = relay.create_executor("debug", mod=mod).evaluate()(data).numpy()

    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    ops = [n["attrs"]["func_name"] for n in json.loads(lib.get_graph_json())["nodes"] if n["op"] == "tvm_op"]
    # fused into the epilogue of the first convolution, which AlterOpLayout made blocked: the toy
    # op followed the blocked layout (no layout_transform between the two convolutions)
    assert ops == ["tvmgen_default_fused_layout_transform",
                   "tvmgen_default_fused_nn_contrib_conv2d_NCHWc_toy_softsign",
                   "tvmgen_default_fused_nn_contrib_conv2d_NCHWc",
                   "tvmgen_default_fused_layout_transform_1"]
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    gm.set_input("x", data)
    gm.run()
    np.testing.assert_allclose(gm.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-5)
