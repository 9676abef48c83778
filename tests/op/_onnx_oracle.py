"""Test helpers: run one ONNX node in onnxruntime (the oracle) and one relay call in Kiln.

``run_onnx`` builds a one-node model with ``onnx.helper`` and evaluates it with onnxruntime (graph
optimisations off, one thread) or, on request or where onnxruntime has no kernel for the dtype,
with the ONNX project's reference evaluator (``onnx.reference``). ``run_relay`` builds relay
variables for the given arrays, applies an op builder and evaluates the result with
:func:`kiln.interpreter.evaluate` (which type-checks and verifies the kernel's output shape and
dtype against the inferred type).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as NotImplemented_

from kiln import relay
from kiln.interpreter import evaluate

__all__ = ["TOL", "assert_close", "rand", "run_onnx", "run_relay"]

# Tolerances (rtol, atol) per dtype for comparisons against an independent oracle.
TOL: dict[str, tuple[float, float]] = {
    "float16": (5e-3, 5e-3),
    "float32": (1e-5, 1e-5),
    "float64": (1e-10, 1e-10),
}


def rand(rng: np.random.Generator, shape: Sequence[int], dtype: str = "float32",
         low: float = -1.0, high: float = 1.0) -> np.ndarray:
    """Random test data: uniform floats in ``[low, high)`` or integers in ``[low, high]``."""
    if np.dtype(dtype).kind in "iu":
        return rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: str | None = None,
                 scale: float = 1.0) -> None:
    """Shapes, dtypes and values agree within the dtype's tolerance (times ``scale``)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    name = dtype or actual.dtype.name
    rtol, atol = TOL.get(name, (0.0, 0.0))
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                               rtol=rtol * scale, atol=atol * scale)


def run_onnx(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attrs: Mapping[str, Any] | None = None,
    num_outputs: int = 1,
    constants: Mapping[int, np.ndarray] | None = None,
    opset: int = 21,
    domain: str = "",
    out_dtypes: Sequence[Any] | None = None,
    reference: bool = False,
) -> list[np.ndarray]:
    """Evaluate one ONNX node in onnxruntime.

    Parameters
    ----------
    op_type : str
        ONNX operator, e.g. ``"Conv"``.
    inputs : sequence of ndarray or None
        Runtime inputs in the node's argument order; None leaves an optional input empty.
    attrs : mapping, optional
        Node attributes.
    num_outputs : int
        Number of outputs to return.
    constants : mapping of int to ndarray, optional
        Argument positions given as initializers instead (``sizes`` of Resize, ``pads`` of Pad).
    opset : int
        Opset of the model.
    domain : str
        Operator domain.
    out_dtypes : sequence of dtype, optional
        Output dtypes (default: the first runtime input's dtype for every output).
    reference : bool
        Evaluate with the ONNX project's reference evaluator (``onnx.reference``) instead; that
        also happens when onnxruntime has no kernel for the node's dtypes.

    Returns
    -------
    list of ndarray
        The node's outputs.
    """
    constants = dict(constants or {})
    names: list[str] = []
    graph_inputs = []
    initializers = []
    feeds: dict[str, np.ndarray] = {}
    count = len(inputs) + len(constants)
    runtime = iter(inputs)
    for i in range(count):
        if i in constants:
            name = f"const{i}"
            initializers.append(onnx.numpy_helper.from_array(np.asarray(constants[i]), name))
            names.append(name)
            continue
        value = next(runtime)
        if value is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        graph_inputs.append(helper.make_tensor_value_info(name, elem, value.shape))
        feeds[name] = value
    out_names = [f"out{j}" for j in range(num_outputs)]
    node = helper.make_node(op_type, names, out_names, domain=domain, **dict(attrs or {}))
    first = next(v for v in inputs if v is not None)
    dtypes = list(out_dtypes) if out_dtypes is not None else [first.dtype] * num_outputs
    outputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(d)), None)
               for n, d in zip(out_names, dtypes)]
    graph = helper.make_graph([node], "oracle", graph_inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])
    model.ir_version = 10
    if reference:
        return [np.asarray(v) for v in ReferenceEvaluator(model).run(out_names, feeds)]
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
    except NotImplemented_:  # no onnxruntime kernel for this dtype (often float64)
        return [np.asarray(v) for v in ReferenceEvaluator(model).run(out_names, feeds)]
    return [np.asarray(v) for v in session.run(out_names, feeds)]


def run_relay(build: Callable[..., Any], *arrays: np.ndarray, **attrs: Any) -> Any:
    """Evaluate ``build(var0, var1, ..., **attrs)`` on ``arrays`` with the reference interpreter."""
    params = [relay.var(f"p{i}", shape=a.shape, dtype=a.dtype.name) for i, a in enumerate(arrays)]
    expr = build(*params, **attrs)
    if hasattr(expr, "astuple"):
        expr = expr.astuple()
    return evaluate(expr, {f"p{i}": a for i, a in enumerate(arrays)})
