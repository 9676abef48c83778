"""Model importers: a framework's model to an :class:`~kiln.ir.IRModule` plus a params dict.

One module per framework (``onnx``, ``tensorflow``, ``keras``, ``tflite``, ``pytorch``, ``coreml``,
``darknet``, ``mxnet``), each built on :mod:`kiln.frontend.common`; the entry points are also
reachable as ``relay.frontend.from_*`` with TVM's signatures. The ONNX converters live in one
module per operator family (``onnx_math``, ``onnx_nn``, ``onnx_tensor``, ...).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["from_coreml", "from_darknet", "from_keras", "from_mxnet", "from_onnx", "from_pytorch",
           "from_tensorflow", "from_tflite"]

_MODULES = {"from_onnx": "onnx", "from_tensorflow": "tensorflow", "from_keras": "keras",
            "from_tflite": "tflite", "from_pytorch": "pytorch", "from_torch_export": "pytorch",
            "from_coreml": "coreml", "from_darknet": "darknet", "from_mxnet": "mxnet"}


def __getattr__(name: str) -> Any:
    # a framework's importer (and the framework) is imported only when used, so ``import kiln``
    # stays light.
    if name in _MODULES:
        return getattr(importlib.import_module(f"kiln.frontend.{_MODULES[name]}"), name)
    raise AttributeError(f"module 'kiln.frontend' has no attribute {name!r}")
