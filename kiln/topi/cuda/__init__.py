"""``tvm.topi.cuda`` names that relay-era tests import (Kiln has no CUDA target)."""

from __future__ import annotations

from kiln.topi.cuda import conv3d_winograd

__all__ = ["conv3d_winograd"]
