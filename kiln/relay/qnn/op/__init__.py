"""``relay.qnn.op``: builders of the quantized operators (:mod:`kiln.op.qnn`)."""

from __future__ import annotations

from kiln.op.qnn import (
    add,
    concatenate,
    conv2d,
    conv2d_transpose,
    dense,
    dequantize,
    mul,
    quantize,
    requantize,
)

__all__ = ["add", "concatenate", "conv2d", "conv2d_transpose", "dense", "dequantize", "mul",
           "quantize", "requantize"]
