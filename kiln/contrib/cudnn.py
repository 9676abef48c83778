"""TVM's ``tvm.contrib.cudnn``: Kiln's cuda target generates its own kernels and never calls cuDNN."""

from __future__ import annotations

__all__ = ["exists"]


def exists() -> bool:
    """Whether cuDNN can be used (``-libs=cudnn``): never; Kiln's GPU kernels are its own."""
    return False
