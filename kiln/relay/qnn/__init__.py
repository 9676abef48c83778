"""``relay.qnn``: TVM's quantized-operator dialect (``relay.qnn.op.*``, ``relay.qnn.transform``).

The operators live in :mod:`kiln.op.qnn` (type relations and NumPy references); their lowering to
plain operators in :mod:`kiln.op.qnn_lower`.
"""

from __future__ import annotations

from kiln.relay.qnn import op, transform

__all__ = ["op", "transform"]
