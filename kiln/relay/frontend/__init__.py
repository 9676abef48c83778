"""``relay.frontend``: model importers."""

from __future__ import annotations

from typing import Any

__all__ = ["from_onnx"]


def from_onnx(model: Any, shape: Any = None, dtype: Any = "float32", opset: Any = None,
              freeze_params: bool = True, **kwargs: Any) -> Any:
    """Import an ONNX model; see :func:`kiln.frontend.onnx.from_onnx`."""
    from kiln.frontend.onnx import from_onnx as _from_onnx

    return _from_onnx(model, shape=shape, dtype=dtype, opset=opset, freeze_params=freeze_params,
                      **kwargs)
