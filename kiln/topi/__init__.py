"""TVM's ``tvm.topi`` names that relay-era tests use.

``kiln.topi.testing`` holds NumPy reference kernels with TVM's signatures; ``kiln.topi.utils``,
``kiln.topi.nn``, ``kiln.topi.x86`` and ``kiln.topi.cuda`` hold the few helpers those tests touch.
Kiln's per-op compute lives in the op registry (``kiln.op``), not here.
"""

from __future__ import annotations

from kiln.topi import cuda, nn, testing, utils, x86

__all__ = ["cuda", "nn", "testing", "utils", "x86"]
