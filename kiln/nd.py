"""``tvm.nd``: NDArray construction."""

from kiln.runtime.ndarray import NDArray, array, cpu, cuda, empty

gpu = cuda

__all__ = ["NDArray", "array", "cpu", "cuda", "empty", "gpu"]
