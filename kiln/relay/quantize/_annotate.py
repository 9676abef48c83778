"""``relay.quantize._annotate``: the annotation kinds of TVM's automatic quantization.

Kiln has no ``relay.op.annotation.simulated_quantize`` operator (it does not calibrate float
models); :func:`attach_simulated_quantize` raises :class:`QuantizeUnsupportedError`.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from kiln.errors import KilnError

__all__ = ["QAnnotateKind", "QuantizeUnsupportedError", "attach_simulated_quantize",
           "register_annotate_function"]


class QuantizeUnsupportedError(KilnError, NotImplementedError):
    """A part of TVM's automatic quantization (``relay.quantize``) Kiln does not implement."""


class QAnnotateKind(IntEnum):
    """What a simulated quantization annotates (TVM's ``QAnnotateKind``)."""

    IDENTITY = 0
    INPUT = 1
    WEIGHT = 2
    ACTIVATION = 3
    BIAS = 4


def attach_simulated_quantize(data: Any, kind: int, sign: bool = True,
                              rounding: str = "round") -> Any:
    """TVM's ``attach_simulated_quantize``: raises :class:`QuantizeUnsupportedError`.

    Raises
    ------
    QuantizeUnsupportedError
        Always: Kiln has no ``simulated_quantize`` operator; quantize with a framework (TFLite,
        ONNX QDQ) or build ``relay.qnn`` ops.
    """
    raise QuantizeUnsupportedError(
        f"relay.quantize.attach_simulated_quantize(kind={QAnnotateKind(kind).name}): Kiln has no "
        "simulated_quantize operator; use relay.qnn ops or a pre-quantized TFLite/ONNX model")


def register_annotate_function(op_name: str, frewrite: Any = None, level: int = 10) -> Any:
    """TVM's ``register_annotate_function``: raises :class:`QuantizeUnsupportedError`."""
    raise QuantizeUnsupportedError(
        f"relay.quantize.register_annotate_function({op_name!r}): Kiln does not run TVM's "
        "automatic quantization")
