"""``relay.frontend``: model importers, with TVM's entry points and signatures.

Each importer lives in :mod:`kiln.frontend` (one module per framework) and is imported only when
called, so ``import kiln`` needs none of the frameworks; one called without its framework says
which extra to install.
"""

from __future__ import annotations

import importlib
from typing import Any

from kiln.relay.frontend import common

__all__ = [
    "common",
    "from_coreml",
    "from_darknet",
    "from_keras",
    "from_mxnet",
    "from_onnx",
    "from_pytorch",
    "from_tensorflow",
    "from_tflite",
]


def _importer(module: str, name: str) -> Any:
    return getattr(importlib.import_module(f"kiln.frontend.{module}"), name)


def from_onnx(model: Any, shape: Any = None, dtype: Any = "float32", opset: Any = None,
              freeze_params: bool = True, convert_config: Any = None,
              export_node_renamed_model_path: Any = None, **kwargs: Any) -> Any:
    """Import an ONNX model; see :func:`kiln.frontend.onnx.from_onnx`."""
    return _importer("onnx", "from_onnx")(model, shape=shape, dtype=dtype, opset=opset,
                                         freeze_params=freeze_params, convert_config=convert_config,
                                         export_node_renamed_model_path=export_node_renamed_model_path,
                                         **kwargs)


def from_tensorflow(graph: Any, layout: str = "NHWC", shape: Any = None, outputs: Any = None,
                    **kwargs: Any) -> Any:
    """Import a TensorFlow GraphDef; see :func:`kiln.frontend.tensorflow.from_tensorflow`."""
    return _importer("tensorflow", "from_tensorflow")(graph, layout=layout, shape=shape,
                                                      outputs=outputs, **kwargs)


def from_keras(model: Any, shape: Any = None, layout: str = "NCHW", **kwargs: Any) -> Any:
    """Import a Keras model; see :func:`kiln.frontend.keras.from_keras`."""
    return _importer("keras", "from_keras")(model, shape=shape, layout=layout, **kwargs)


def from_tflite(model: Any, shape_dict: Any = None, dtype_dict: Any = None, **kwargs: Any) -> Any:
    """Import a TFLite flatbuffer; see :func:`kiln.frontend.tflite.from_tflite`."""
    return _importer("tflite", "from_tflite")(model, shape_dict=shape_dict, dtype_dict=dtype_dict,
                                              **kwargs)


def from_pytorch(script_module: Any, input_infos: Any, **kwargs: Any) -> Any:
    """Import a TorchScript module; see :func:`kiln.frontend.pytorch.from_pytorch`."""
    return _importer("pytorch", "from_pytorch")(script_module, input_infos, **kwargs)


def from_coreml(model: Any, shape: Any = None, **kwargs: Any) -> Any:
    """Import a CoreML model; see :func:`kiln.frontend.coreml.from_coreml`."""
    return _importer("coreml", "from_coreml")(model, shape=shape, **kwargs)


def from_darknet(net: Any, shape: Any = None, dtype: str = "float32", **kwargs: Any) -> Any:
    """Import a Darknet network; see :func:`kiln.frontend.darknet.from_darknet`."""
    return _importer("darknet", "from_darknet")(net, shape=shape, dtype=dtype, **kwargs)


def from_mxnet(symbol: Any, shape: Any = None, dtype: Any = "float32", arg_params: Any = None,
               aux_params: Any = None, **kwargs: Any) -> Any:
    """Import an MXNet symbol; see :func:`kiln.frontend.mxnet.from_mxnet`."""
    return _importer("mxnet", "from_mxnet")(symbol, shape=shape, dtype=dtype, arg_params=arg_params,
                                            aux_params=aux_params, **kwargs)
