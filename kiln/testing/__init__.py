"""``tvm.testing`` helpers."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["assert_allclose"]


def assert_allclose(actual: Any, desired: Any, rtol: float = 1e-7, atol: float = 1e-7,
                    verbose: bool = True) -> None:
    """``numpy.testing.assert_allclose`` that also accepts NDArrays, with TVM's defaults."""
    a = actual.numpy() if hasattr(actual, "numpy") and not isinstance(actual, np.ndarray) else actual
    d = desired.numpy() if hasattr(desired, "numpy") and not isinstance(desired, np.ndarray) else desired
    np.testing.assert_allclose(np.asarray(a), np.asarray(d), rtol=rtol, atol=atol, verbose=verbose)
