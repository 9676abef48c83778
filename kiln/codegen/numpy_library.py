"""The ``numpy`` target's kernel library: fused functions run by the reference interpreter.

:class:`NumpyLibrary` needs no C compiler. Its kernels are IR functions, so it belongs to the
compiler, not to the runtime: importing this module registers it as the ``numpy`` library kind
(:func:`kiln.runtime.module.register_library_kind`), whose payload in an exported container is the
fused functions as Kiln IR JSON (:mod:`kiln.ir.serialize`). ``import kiln`` imports it (through
:mod:`kiln.codegen`), so ``kiln.runtime.load_module`` reads ``numpy`` exports, those written
before the move included.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from kiln.errors import KilnError, RuntimeFormatError
from kiln.interpreter import Interpreter
from kiln.ir.expr import Function
from kiln.ir.module import IRModule
from kiln.ir.serialize import load_json, save_json
from kiln.ir.types import TensorType, TupleType, Type
from kiln.runtime.module import Kernel, KernelError, KernelLibrary, check_args, register_library_kind

__all__ = ["NumpyLibrary", "load_numpy_library", "save_numpy_library"]


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

    def __init__(self, name: str, fn: Function, interpreter: Interpreter):
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


def save_numpy_library(library: NumpyLibrary) -> bytes:
    """The payload of a ``numpy`` library in a container: its fused functions as IR JSON."""
    return save_json(IRModule(dict(library.functions))).encode("utf-8")


def load_numpy_library(payload: bytes, what: str = "numpy container") -> NumpyLibrary:
    """A ``numpy`` library from its container payload.

    Raises
    ------
    RuntimeFormatError
        The fused functions are unreadable or not stored as a module (naming ``what``).
    """
    try:
        mod = load_json(payload)
    except KilnError as e:
        raise RuntimeFormatError(f"{what}: fused functions are unreadable: {e}") from None
    if not isinstance(mod, IRModule):
        raise RuntimeFormatError(f"{what}: fused functions are not stored as a module")
    return NumpyLibrary({gv.name_hint: fn for gv, fn in mod.items()})


register_library_kind(NumpyLibrary.type_key, NumpyLibrary, save_numpy_library, load_numpy_library)
