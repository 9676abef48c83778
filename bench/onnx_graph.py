"""A small helper for writing ONNX graphs node by node, and a FLOP counter for finished models.

The model builders (``models_cnn``, ``models_transformer``) use :class:`GraphBuilder` to write
graphs in the shape PyTorch's exporter writes them: nodes named after their module scope
(``/layer1/layer1.0/conv1/Conv``), outputs named ``<node>_output_<i>``, weights as initializers
named after their parameters, with seeded random values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

__all__ = ["GraphBuilder", "count_macs", "count_gflop", "param_name"]


def param_name(scope: str) -> str:
    """The PyTorch parameter prefix of a module scope: ``/layer1/layer1.0/conv1`` -> ``layer1.0.conv1``."""
    parts = [p for p in scope.split("/") if p]
    if not parts:
        return ""
    name, last = parts[0], parts[0]
    for part in parts[1:]:
        name += part[len(last):] if part.startswith(last + ".") else "." + part
        last = part
    return name


class GraphBuilder:
    """Accumulates nodes, initializers and graph inputs/outputs of one ONNX graph.

    Parameters
    ----------
    name : str
        The graph's name.
    seed : int
        Seed of the generator that draws every weight.
    """

    def __init__(self, name: str, seed: int = 0):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._names: set[str] = set()

    def _unique(self, base: str) -> str:
        name, k = base, 0
        while name in self._names:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        return name

    # --- tensors ---------------------------------------------------------------------------------
    def const(self, name: str, value: Any, dtype: Any = None) -> str:
        """Add an initializer holding ``value``; returns its (unique) name."""
        array = np.asarray(value, dtype=dtype)
        unique = self._unique(name)
        self.initializers.append(numpy_helper.from_array(array, unique))
        return unique

    def normal(self, name: str, shape: Sequence[int], std: float, mean: float = 0.0) -> str:
        """Add a float32 initializer drawn from N(mean, std^2); returns its name."""
        value = self.rng.standard_normal(tuple(shape)).astype(np.float32) * np.float32(std)
        return self.const(name, value + np.float32(mean))

    def uniform(self, name: str, shape: Sequence[int], low: float, high: float) -> str:
        """Add a float32 initializer drawn from U(low, high); returns its name."""
        return self.const(name, self.rng.uniform(low, high, tuple(shape)).astype(np.float32))

    def input(self, name: str, elem_type: int, shape: Sequence[int]) -> str:
        """Declare a graph input; returns its name."""
        self._names.add(name)
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def output(self, tensor: str, name: str, shape: Sequence[int],
               elem_type: int = TensorProto.FLOAT) -> str:
        """Declare ``tensor`` a graph output ``name`` of ``shape`` (an Identity node renames it)."""
        self.nodes.append(helper.make_node("Identity", [tensor], [name], name=self._unique(
            f"/{name}/Identity")))
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    # --- nodes -----------------------------------------------------------------------------------
    def node(self, op_type: str, inputs: Sequence[str], scope: str = "", num_outputs: int = 1,
             **attrs: Any) -> str:
        """Add a node named ``<scope>/<op_type>``; returns its first output's name.

        Further outputs are named ``<node>_output_<i>``; use :meth:`node_outputs` to get all.
        """
        return self.node_outputs(op_type, inputs, scope, num_outputs, **attrs)[0]

    def node_outputs(self, op_type: str, inputs: Sequence[str], scope: str = "",
                     num_outputs: int = 1, **attrs: Any) -> list[str]:
        """Add a node named ``<scope>/<op_type>``; returns the names of its outputs."""
        name = self._unique(f"{scope}/{op_type}")
        outputs = [self._unique(f"{name}_output_{i}") for i in range(num_outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs, name=name, **attrs))
        return outputs

    def model(self, opset: int) -> onnx.ModelProto:
        """The finished, checked model at ``opset`` of the default domain."""
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs,
                                  self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="kiln-bench")
        model.ir_version = min(model.ir_version, 8)
        onnx.checker.check_model(model)
        return model


# Further op types counted, keyed in the result only when the model has them (their gate count
# is in the weights' shapes).
_EXTRA_OPS = frozenset({"ConvTranspose", "LSTM", "GRU", "RNN"})


def _dims(info: onnx.ValueInfoProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in info.type.tensor_type.shape.dim)


def count_macs(model: onnx.ModelProto) -> dict[str, int]:
    """Multiply-accumulates of every Conv, Gemm, MatMul, ConvTranspose, LSTM, GRU and RNN node.

    Shapes come from ONNX shape inference, so the count is independent of the builders and of
    Kiln. A Conv costs ``output elements x (input channels / group) x kernel area``; a MatMul
    ``output elements x K``; a Gemm ``M x N x K``; a ConvTranspose ``input elements x (output
    channels / group) x kernel area``; an LSTM, GRU or RNN ``steps x batch x directions x gates x
    hidden x (input + hidden)`` (the input and recurrence matrix products; the gates' element-wise
    work is not counted).

    Parameters
    ----------
    model : onnx.ModelProto
        A model with static input shapes.

    Returns
    -------
    dict of str to int
        ``{"Conv": macs, "MatMul": macs, "Gemm": macs}`` (0 when absent), plus
        ``"ConvTranspose"``, ``"LSTM"``, ``"GRU"``, ``"RNN"`` for those the model has.

    Raises
    ------
    ValueError
        When shape inference leaves a counted node's data, weight or output shape unknown.
    """
    inferred = shape_inference.infer_shapes(model)
    g = inferred.graph
    shapes = {v.name: _dims(v) for v in [*g.input, *g.value_info, *g.output]}
    shapes.update({t.name: tuple(t.dims) for t in g.initializer})
    macs = {"Conv": 0, "MatMul": 0, "Gemm": 0}
    for n in g.node:
        if n.op_type not in macs and n.op_type not in _EXTRA_OPS:
            continue
        unknown = [t for t in (*n.input[:2], n.output[0]) if not all(shapes.get(t, ()))]
        if unknown:
            raise ValueError(f"count_macs: shape inference left the shape of {unknown[0]!r} "
                             f"({n.op_type} node {n.name!r}) unknown")
        if n.op_type in _EXTRA_OPS:
            macs[n.op_type] = macs.get(n.op_type, 0) + _extra_macs(n, shapes)
            continue
        out = shapes[n.output[0]]
        if n.op_type == "Conv":
            weight = shapes[n.input[1]]
            macs["Conv"] += math.prod(out) * weight[1] * math.prod(weight[2:])
        elif n.op_type == "MatMul":
            macs["MatMul"] += math.prod(out) * shapes[n.input[0]][-1]
        else:
            trans_a = next((a.i for a in n.attribute if a.name == "transA"), 0)
            a_shape = shapes[n.input[0]]
            macs["Gemm"] += math.prod(out) * (a_shape[0] if trans_a else a_shape[1])
    return macs


def _extra_macs(n: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> int:
    """Multiply-accumulates of a ConvTranspose, LSTM, GRU or RNN node."""
    if n.op_type == "ConvTranspose":  # every input element meets (C_out / group) x kernel weights
        weight = shapes[n.input[1]]
        return math.prod(shapes[n.input[0]]) * weight[1] * math.prod(weight[2:])
    # W (directions, gates x hidden, input) and R (directions, gates x hidden, hidden) are applied
    # at every step of X, (seq, batch, input) or (batch, seq, input) alike
    w, r, x = shapes[n.input[1]], shapes[n.input[2]], shapes[n.input[0]]
    return x[0] * x[1] * w[0] * w[1] * (w[2] + r[2])


def count_gflop(model: onnx.ModelProto) -> float:
    """GFLOP of one run: 2 x the multiply-accumulates of :func:`count_macs`, / 1e9."""
    return 2 * sum(count_macs(model).values()) / 1e9
