"""Helpers for the ONNX frontend tests: build models with onnx.helper, run them in onnxruntime
(the oracle) and through Kiln's importer plus reference interpreter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from kiln.frontend.onnx import from_onnx
from kiln.interpreter import evaluate

__all__ = ["Const", "check_node", "init", "make_model", "node", "run_kiln", "run_ort", "single_node_model",
           "value_info"]

_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
         np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.int64): TensorProto.INT64,
         np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int8): TensorProto.INT8,
         np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.bool_): TensorProto.BOOL}


def value_info(name: str, dtype: Any, shape: Sequence[int | str] | None) -> onnx.ValueInfoProto:
    """A graph input/output declaration."""
    return helper.make_tensor_value_info(name, _ELEM[np.dtype(dtype)], shape)


def init(name: str, value: np.ndarray) -> onnx.TensorProto:
    """An initializer."""
    return numpy_helper.from_array(np.asarray(value), name)


def node(op_type: str, inputs: Sequence[str], outputs: Sequence[str], name: str = "",
         **attrs: Any) -> onnx.NodeProto:
    """A node (attributes as keyword arguments)."""
    return helper.make_node(op_type, list(inputs), list(outputs), name=name or None, **attrs)


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto],
               initializers: Sequence[onnx.TensorProto] = (), opset: int = 17,
               name: str = "test") -> onnx.ModelProto:
    """A model of one graph in the default domain at ``opset``."""
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 8)
    return model


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Outputs of onnxruntime on ``model``."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return list(sess.run(None, dict(feeds)))


def run_kiln(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], **kwargs: Any) -> list[np.ndarray]:
    """Outputs of Kiln: ``from_onnx`` (input shapes from ``feeds``) then the reference interpreter."""
    kwargs.setdefault("shape", {k: v.shape for k, v in feeds.items()})
    mod, params = from_onnx(model, **kwargs)
    names = {p.name_hint for p in mod["main"].params}
    out = evaluate(mod, {k: v for k, v in feeds.items() if k in names}, params=params)
    return list(out) if isinstance(out, tuple) else [out]


class Const:
    """Marks a node input that is an initializer (a constant Kiln sees at import)."""

    def __init__(self, value: Any):
        self.value = np.asarray(value)


def _elem(dtype: Any) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def single_node_model(op_type: str, inputs: Sequence[Any], attrs: Mapping[str, Any] | None = None,
                      opset: int = 17, n_outputs: int = 1, domain: str = "") -> tuple[onnx.ModelProto,
                                                                                      dict[str, np.ndarray]]:
    """A one-node model; ``inputs`` holds arrays (graph inputs), :class:`Const` (initializers) or
    None (omitted optional inputs). Returns the model and its feeds."""
    names, graph_inputs, inits, feeds = [], [], [], {}
    for i, x in enumerate(inputs):
        if x is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        if isinstance(x, Const):
            inits.append(numpy_helper.from_array(x.value, name))
        else:
            x = np.asarray(x)
            feeds[name] = x
            graph_inputs.append(helper.make_tensor_value_info(name, _elem(x.dtype), x.shape))
    outputs = [f"out{i}" for i in range(n_outputs)]
    n = helper.make_node(op_type, names, outputs, name="the_node", domain=domain, **dict(attrs or {}))
    graph = helper.make_graph([n], "single", graph_inputs,
                              [helper.make_empty_tensor_value_info(o) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 8)
    return model, feeds


def check_node(op_type: str, inputs: Sequence[Any], attrs: Mapping[str, Any] | None = None,
               opset: int = 17, n_outputs: int = 1, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Run a one-node model in onnxruntime and in Kiln and compare every output."""
    model, feeds = single_node_model(op_type, inputs, attrs, opset, n_outputs)
    expected = run_ort(model, feeds)
    actual = run_kiln(model, feeds)
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape, f"output {i}: shape {a.shape}, expected {e.shape}"
        assert a.dtype == e.dtype, f"output {i}: dtype {a.dtype}, expected {e.dtype}"
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"output {i}")
