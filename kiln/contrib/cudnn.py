"""TVM's ``tvm.contrib.cudnn``: cuDNN is never available to Kiln (CPU only)."""

from __future__ import annotations

__all__ = ["exists"]


def exists() -> bool:
    """Whether cuDNN can be used: never, since Kiln has no CUDA target."""
    return False
