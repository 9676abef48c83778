"""Kernel libraries implemented in Python: plain callables, and the ``numpy`` target.

:class:`NumpyLibrary` runs each fused function with the reference interpreter: it is the library
of the ``numpy`` target, which needs no C compiler, and it can be exported to Kiln's portable
container. :class:`PythonLibrary` wraps Python callables that follow the kernel ABI (inputs, then
outputs written in place), for custom kernels and tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kiln.ir.expr import Function
from kiln.ir.types import TensorType, TupleType, Type
from kiln.runtime.module import Kernel, KernelError, KernelLibrary, check_args

__all__ = ["NumpyLibrary", "PythonLibrary"]


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


def _flat_tensor_types(ty: Type) -> list[TensorType]:
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in _flat_tensor_types(f)]
    if isinstance(ty, TensorType):
        return [ty]
    raise KernelError(f"a fused function cannot return {ty}")


def _flat_values(value: Any) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [v for f in value for v in _flat_values(f)]
    return [value]


def _regroup(ty: Type, flat: list[np.ndarray]) -> Any:
    """Rebuild a (possibly tuple-typed) parameter value from the flat argument list."""
    if isinstance(ty, TupleType):
        return tuple(_regroup(f, flat) for f in ty.fields)
    return flat.pop(0)


class _InterpretedKernel(Kernel):
    """A fused function run by the interpreter; tuple parameters and results are flattened."""

    def __init__(self, name: str, fn: Function, interpreter: Any):
        super().__init__(name)
        self.fn = fn
        self.interpreter = interpreter
        self.param_types = [p.checked_type for p in fn.params]
        self.in_types = [t for ty in self.param_types for t in _flat_tensor_types(ty)]
        self.out_types = _flat_tensor_types(fn.body.checked_type)
        self.signature = tuple((t.shape, t.dtype) for t in self.in_types + self.out_types)

    def bind(self, arrays: Sequence[np.ndarray]) -> Callable[[], None]:
        check_args(self.name, arrays, self.signature)
        n_in = len(self.in_types)
        flat_inputs, outputs = list(arrays[:n_in]), list(arrays[n_in:])
        args = [_regroup(ty, flat_inputs) for ty in self.param_types]
        fn, interp, name = self.fn, self.interpreter, self.name

        def call() -> None:
            result = _flat_values(interp.call_function(fn, args, name))
            for out, value in zip(outputs, result):
                np.copyto(out, value)

        return call


class NumpyLibrary(KernelLibrary):
    """The ``numpy`` target's library: fused functions evaluated by the reference interpreter.

    Parameters
    ----------
    functions : mapping of str to Function
        The fused (``Primitive=1``) functions, by kernel symbol (graph-JSON ``func_name``).
    """

    type_key = "numpy"

    def __init__(self, functions: Mapping[str, Function]):
        from kiln.interpreter import Interpreter
        from kiln.ir.module import IRModule

        super().__init__()
        for name, fn in functions.items():
            if not isinstance(fn, Function):
                raise KernelError(f"NumpyLibrary: kernel {name!r} must be a relay Function, got "
                                  f"{type(fn).__name__}")
        self.functions = dict(functions)
        self._interpreter = Interpreter(IRModule(self.functions))
        self._kernels: dict[str, _InterpretedKernel] = {}

    def kernel(self, name: str) -> Kernel | None:
        """The fused function ``name``, run by the interpreter."""
        if name not in self.functions:
            return None
        if name not in self._kernels:
            typed = self._interpreter.mod[name]
            self._kernels[name] = _InterpretedKernel(name, typed, self._interpreter)
        return self._kernels[name]
