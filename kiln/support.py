"""TVM's ``tvm.support``: what this build of Kiln supports, and a module of Python kernels.

:func:`libinfo` answers the questions scripts ask TVM's build flags (``USE_PROFILER``,
``USE_CUDA``, ...) truthfully for Kiln: the graph and debug executors and their per-node profiler
are there; no GPU runtime, RPC, LLVM or external C++ libraries are.
:class:`FrontendTestModule` is a runtime module whose kernels are Python callables, as TVM's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln._version import __version__
from kiln.runtime.python_library import PythonLibrary

__all__ = ["FrontendTestModule", "libinfo"]

_ON = ("USE_GRAPH_EXECUTOR", "USE_GRAPH_EXECUTOR_DEBUG", "USE_PROFILER", "USE_LIBBACKTRACE")
_OFF = ("USE_CUDA", "USE_ROCM", "USE_OPENCL", "USE_METAL", "USE_VULKAN", "USE_HEXAGON", "USE_RPC",
        "USE_LLVM", "USE_CUDNN", "USE_CUBLAS", "USE_MKL", "USE_DNNL", "USE_TENSORRT", "USE_VITIS_AI",
        "USE_MICRO", "USE_RANDOM", "USE_CUTLASS", "USE_CMSISNN", "USE_ETHOSN", "USE_ETHOSU",
        "USE_ARM_COMPUTE_LIB", "USE_CLML", "USE_BNNS", "USE_COREML", "USE_TFLITE", "USE_PAPI",
        "USE_AOT_EXECUTOR", "USE_RELAY_DEBUG", "USE_MSVC_MT", "USE_OPENMP")


def libinfo() -> dict[str, str]:
    """TVM's build-flag table, answered for Kiln (``"ON"``/``"OFF"`` per feature).

    ``USE_PROFILER`` is ``"ON"``: the debug executor times every node. Every GPU runtime, RPC, LLVM
    and external library flag is ``"OFF"``: Kiln compiles C for the host CPU and links none of them.
    """
    info = {key: "ON" for key in _ON}
    info.update({key: "OFF" for key in _OFF})
    info["GIT_COMMIT_HASH"] = "NOT-FOUND"
    info["VERSION"] = __version__
    return info


class FrontendTestModule(PythonLibrary):
    """A runtime module whose functions are Python callables: ``mod["myadd"] = fn``.

    The graph and debug executors call ``fn(*inputs, *outputs)`` with the node's arrays (outputs
    written in place), as for any kernel.
    """

    type_key = "frontend_test"

    def __init__(self, entry_name: str = "main") -> None:
        super().__init__({})
        self.entry_name = entry_name

    def add_function(self, name: str, func: Callable[..., Any]) -> None:
        """Register ``func`` as the kernel ``name``."""
        self.functions[name] = func

    def __setitem__(self, key: str, value: Callable[..., Any]) -> None:
        self.add_function(key, value)
