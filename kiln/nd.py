"""``tvm.nd``: NDArray construction."""

from kiln.runtime.ndarray import NDArray, array, cpu, empty

__all__ = ["NDArray", "array", "cpu", "empty"]
