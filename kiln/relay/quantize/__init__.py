"""``relay.quantize``: TVM's automatic quantization (``qconfig`` / ``quantize``), names only.

Kiln runs models that arrive already quantized (TFLite int8, ONNX QLinear, ``relay.qnn``); it
does not calibrate float models itself. :func:`qconfig` builds and enters a configuration as TVM's
does, so scripts that set one import and run; :func:`quantize` raises
:class:`QuantizeUnsupportedError` naming what to use instead.
"""

from __future__ import annotations

from typing import Any

from kiln.relay.quantize import _annotate
from kiln.relay.quantize._annotate import QAnnotateKind, QuantizeUnsupportedError
from kiln.relay.quantize.quantize import QConfig, current_qconfig, qconfig, quantize

__all__ = ["QAnnotateKind", "QConfig", "QuantizeUnsupportedError", "_annotate", "current_qconfig",
           "qconfig", "quantize"]


def __getattr__(name: str) -> Any:
    if name in ("partition", "annotate", "realize", "calibrate", "prerequisite_optimize"):
        from kiln.relay.quantize import quantize as _q

        return getattr(_q, name)
    raise AttributeError(f"module 'kiln.relay.quantize' has no attribute {name!r}")
