"""The benchmark models: builders, their published sizes, and matching random inputs.

======================  =======================================  =====  =====================
name                    builder                                  GFLOP  inputs
======================  =======================================  =====  =====================
``resnet18``            ``resnet(depth=18)``, 224x224            3.63   ``input`` (1,3,224,224)
``resnet50``            ``resnet(depth=50)``, 224x224            8.18   ``input`` (1,3,224,224)
``mobilenet_v2``        ``mobilenet_v2()``, width 1.0, 224x224   0.60   ``input`` (1,3,224,224)
``vit_tiny``            ``vit()``, patch 16, dim 192, depth 12   2.51   ``input`` (1,3,224,224)
``minilm_l6``           ``bert()``, hidden 384, 6 layers, seq    2.87   ``input_ids``,
                        128                                             ``attention_mask`` (1,128)
``dbnet_det``           ``dbnet_det()``, 640x640                 5.05   ``input`` (1,3,640,640)
``crnn_rec``            ``crnn_rec()``, 32x320, 80 steps         1.28   ``input`` (1,3,32,320)
``yolov8n_det``         ``yolov8n_det()``, 640x640               8.74   ``images`` (1,3,640,640)
``mobilenet_v3``        ``mobilenet_v3()``, large 1.0, 224x224   0.433  ``input`` (1,3,224,224)
``conv1d_bilstm``       ``conv1d_bilstm()``, 80 x 200 steps      0.333  ``features`` (1,80,200)
``tiny_gru_stream``     ``tiny_gru_stream()``, one frame, GRU    1.6e-4 ``x`` (1,1,64),
                        hidden 128                                      ``h`` (1,1,128)
======================  =======================================  =====  =====================

The first five are written node by node (``models_cnn``, ``models_transformer``); the last seven
are PyTorch modules exported by PyTorch's own exporter (``models_real``; they need torch).

GFLOP counts 2 x the multiply-accumulates of Conv, Gemm and MatMul (``PERFORMANCE.md``), and
of ConvTranspose, LSTM and GRU (:func:`bench.onnx_graph.count_macs`); every
builder's count is checked against this table by :func:`check_gflop`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from bench.models_cnn import mobilenet_v2, resnet
from bench.models_real import (
    conv1d_bilstm,
    crnn_rec,
    dbnet_det,
    mobilenet_v3,
    regnet_y_400mf,
    tiny_gru_stream,
    yolov8n_det,
)
from bench.models_transformer import bert, vit
from bench.onnx_graph import count_gflop

__all__ = ["MODELS", "ModelSpec", "check_gflop", "make_feeds"]


@dataclass(frozen=True)
class ModelSpec:
    """One benchmark model.

    Attributes
    ----------
    name : str
        The name used on the command line.
    builder : callable
        Returns the ONNX model; ``kwargs`` are passed to it.
    gflop : float
        The published size (2 x MACs, GFLOP) the built model must match.
    kwargs : dict
        Arguments of ``builder`` for the benchmark size.
    """

    name: str
    builder: Callable[..., onnx.ModelProto]
    gflop: float
    kwargs: dict[str, Any] = field(default_factory=dict)

    def build(self, **overrides: Any) -> onnx.ModelProto:
        """The model at benchmark size, or with ``overrides`` of the builder's arguments."""
        return self.builder(**{**self.kwargs, **overrides})


MODELS: dict[str, ModelSpec] = {
    spec.name: spec for spec in (
        ModelSpec("resnet18", resnet, 3.63, {"depth": 18}),
        ModelSpec("resnet50", resnet, 8.18, {"depth": 50}),
        ModelSpec("mobilenet_v2", mobilenet_v2, 0.60),
        ModelSpec("vit_tiny", vit, 2.51),
        ModelSpec("minilm_l6", bert, 2.87),
        ModelSpec("dbnet_det", dbnet_det, 5.047),
        ModelSpec("crnn_rec", crnn_rec, 1.280),
        ModelSpec("yolov8n_det", yolov8n_det, 8.744),
        ModelSpec("mobilenet_v3", mobilenet_v3, 0.4332),
        ModelSpec("regnet_y_400mf", regnet_y_400mf, 0.8037),  # torchvision: 0.402 GMACs
        ModelSpec("conv1d_bilstm", conv1d_bilstm, 0.3334),
        ModelSpec("tiny_gru_stream", tiny_gru_stream, 0.000156),
    )
}


def check_gflop(spec: ModelSpec, model: onnx.ModelProto, rel: float = 0.01) -> tuple[float, bool]:
    """The model's GFLOP and whether it is within ``rel`` of the published ``spec.gflop``."""
    gflop = count_gflop(model)
    return gflop, abs(gflop - spec.gflop) <= rel * spec.gflop


def _gather_rows(model: onnx.ModelProto, name: str) -> int | None:
    """Rows of the initializer table that a Gather indexes with graph input ``name``."""
    tables = {t.name: tuple(t.dims) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Gather" and len(n.input) == 2 and n.input[1] == name:
            dims = tables.get(n.input[0])
            if dims:
                return dims[0]
    return None


def make_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for every graph input of ``model``.

    Float inputs are standard normal. An ``attention_mask`` is ones with its last quarter of
    positions zero (padding). Other integer inputs are indices into the embedding table that a
    Gather reads them with (or into ``[0, 100)`` when there is none).

    Parameters
    ----------
    model : onnx.ModelProto
        A model with static input shapes.
    seed : int
        Seed of the values.

    Returns
    -------
    dict of str to numpy.ndarray
        One array per graph input, by name.
    """
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        tensor_type = info.type.tensor_type
        shape = tuple(d.dim_value for d in tensor_type.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[info.name] = rng.standard_normal(shape).astype(dtype)
        elif info.name == "attention_mask":
            mask = np.ones(shape, dtype=dtype)
            mask[..., shape[-1] - shape[-1] // 4:] = 0
            feeds[info.name] = mask
        else:
            high = _gather_rows(model, info.name) or 100
            feeds[info.name] = rng.integers(0, high, shape).astype(dtype)
    return feeds

