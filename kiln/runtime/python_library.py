"""Kernels implemented as plain Python callables (custom kernels, tests).

:class:`PythonLibrary` wraps Python callables that follow the kernel ABI (inputs, then outputs
written in place). The ``numpy`` target's library, which runs fused IR functions with the
reference interpreter, belongs to the compiler: :class:`kiln.codegen.numpy_library.NumpyLibrary`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kiln.runtime.module import Kernel, KernelLibrary, check_args

__all__ = ["PythonLibrary"]


class _PyKernel(Kernel):
    def __init__(self, name: str, fn: Callable[..., Any]):
        super().__init__(name)
        self.fn = fn

    def bind(self, arrays: Sequence[np.ndarray]) -> Callable[[], None]:
        check_args(self.name, arrays)
        fn, args = self.fn, tuple(arrays)
        return lambda: fn(*args)


class PythonLibrary(KernelLibrary):
    """Kernels given as Python callables ``fn(*inputs, *outputs)`` that fill the outputs in place.

    Parameters
    ----------
    functions : mapping of str to callable
        Kernels by symbol name.

    Examples
    --------
    >>> def double(x, out):
    ...     np.multiply(x, 2, out=out)
    >>> lib = PythonLibrary({"tvmgen_default_fused_multiply": double})
    """

    type_key = "python"

    def __init__(self, functions: Mapping[str, Callable[..., Any]]):
        super().__init__()
        self.functions = dict(functions)

    def kernel(self, name: str) -> Kernel | None:
        """The callable registered as ``name``, as a kernel."""
        fn = self.functions.get(name)
        return None if fn is None else _PyKernel(name, fn)
