"""Runtime: tensors, devices, params format, graph model, loaded modules and executors."""

from __future__ import annotations

from typing import Any

from kiln.runtime import cuda_driver as _cuda_driver  # registers CUDA NDArrays (opens no driver)
from kiln.runtime import cuda_library as _cuda_library  # the cuda library kind, for load_module
from kiln.runtime.ndarray import Device, NDArray, array, cpu, cuda, device, empty

__all__ = [
    "Device",
    "Module",
    "NDArray",
    "array",
    "convert",
    "cpu",
    "cuda",
    "device",
    "empty",
    "load_module",
    "load_param_dict",
    "load_param_dict_from_file",
    "save_param_dict",
    "save_param_dict_to_file",
]

_LAZY = {
    "save_param_dict": "kiln.runtime.params",
    "load_param_dict": "kiln.runtime.params",
    "save_param_dict_to_file": "kiln.runtime.params",
    "load_param_dict_from_file": "kiln.runtime.params",
    "load_module": "kiln.runtime.module",
    "convert": "kiln.runtime.convert_value",
    "Module": "kiln.runtime.module",
}


# submodules reached as attributes, as TVM's are (``tvm.runtime.vm.VirtualMachine``)
_SUBMODULES = ("container", "vm")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"kiln.runtime.{name}")
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kiln.runtime' has no attribute {name!r}")
