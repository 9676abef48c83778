"""Oracles for the reduce/transform/algorithm/vision op tests: one-node ONNX models run by
onnxruntime, a reader for params files TVM wrote, and a helper that evaluates a Kiln expression
with the reference interpreter."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from kiln import relay
from kiln.interpreter import evaluate

ONNX_TYPES = {
    "float32": onnx.TensorProto.FLOAT,
    "float64": onnx.TensorProto.DOUBLE,
    "float16": onnx.TensorProto.FLOAT16,
    "int8": onnx.TensorProto.INT8,
    "int32": onnx.TensorProto.INT32,
    "int64": onnx.TensorProto.INT64,
    "uint8": onnx.TensorProto.UINT8,
    "bool": onnx.TensorProto.BOOL,
}


def run_onnx(op_type: str, inputs: Sequence[np.ndarray | None], out_dtypes: Sequence[str],
             opset: int = 18, **attrs: Any) -> list[np.ndarray]:
    """Run a one-node ONNX model; ``None`` inputs are omitted optional inputs."""
    names = ["" if a is None else f"in{i}" for i, a in enumerate(inputs)]
    outs = [f"out{i}" for i in range(len(out_dtypes))]
    node = helper.make_node(op_type, names, outs, **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, ONNX_TYPES[a.dtype.name], a.shape)
         for n, a in zip(names, inputs) if a is not None],
        [helper.make_tensor_value_info(o, ONNX_TYPES[d], None) for o, d in zip(outs, out_dtypes)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {n: a for n, a in zip(names, inputs) if a is not None}
    return sess.run(None, feeds)


def run_kiln(build: Callable[..., Any], inputs: Sequence[np.ndarray]) -> Any:
    """Evaluate ``build(*vars)`` on ``inputs`` (one variable per input) with the interpreter."""
    params = [relay.var(f"in{i}", shape=a.shape, dtype=a.dtype.name) for i, a in enumerate(inputs)]
    body = build(*params)
    if isinstance(body, relay.TupleWrapper):
        body = body.astuple()
    return evaluate(relay.Function(params, body), list(inputs))


def rand(rng: np.random.Generator, shape: Sequence[int], dtype: str, low: int = -20,
         high: int = 20) -> np.ndarray:
    """Random data of ``dtype``: bools, integers in ``[low, high]`` or floats in ``[low/4, high/4]``."""
    if dtype == "bool":
        return np.asarray(rng.random(shape) > 0.5)
    if dtype.startswith(("int", "uint")):
        lo = max(low, 0) if dtype.startswith("uint") else low
        return np.asarray(rng.integers(lo, high + 1, shape), dtype=dtype)
    return np.asarray(rng.uniform(low / 4, high / 4, shape), dtype=dtype)


_PARAMS_DTYPES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8",
                  (1, 16): "uint16", (1, 32): "uint32", (1, 1): "bool", (2, 16): "float16",
                  (2, 32): "float32", (2, 64): "float64"}


def read_tvm_params(blob: bytes) -> dict[str, np.ndarray]:
    """Decode a params file written by TVM (``save_param_dict`` format) without using Kiln."""
    def take(fmt: str) -> tuple:
        nonlocal pos
        values = struct.unpack_from("<" + fmt, blob, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    pos = 16  # magic, reserved
    names = []
    for _ in range(take("Q")[0]):
        length = take("Q")[0]
        names.append(blob[pos:pos + length].decode())
        pos += length
    arrays = []
    for _ in range(take("Q")[0]):
        _magic, _reserved, _dev_type, _dev_id, ndim, code, bits, _lanes = take("QQiiiBBH")
        shape = take("q" * ndim)
        nbytes = take("q")[0]
        dtype = np.dtype(_PARAMS_DTYPES[(code, bits)])
        arrays.append(np.frombuffer(blob[pos:pos + nbytes], dtype=dtype).reshape(shape))
        pos += nbytes
    return dict(zip(names, arrays))
