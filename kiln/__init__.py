"""Kiln: a deep-learning model compiler and runtime in Python.

``import kiln as tvm; from kiln import relay`` runs relay-era TVM scripts: the names below are the
ones those scripts use. See the README for the command line and the documentation of each layer.
"""

from __future__ import annotations

from typing import Any

from kiln import ir, nd, relay, runtime, testing, transform
from kiln._version import __version__
from kiln.errors import KilnError
from kiln.ir import IRModule
from kiln.runtime.func_registry import register_func
from kiln.runtime.ndarray import Device, cpu, cuda, device

__all__ = [
    "Device",
    "IRModule",
    "KilnError",
    "__version__",
    "auto_scheduler",
    "build",
    "contrib",
    "cpu",
    "cuda",
    "device",
    "gpu",
    "get_global_func",
    "ir",
    "nd",
    "register_func",
    "relay",
    "runtime",
    "target",
    "testing",
    "transform",
]


gpu = cuda  # TVM's older name


def get_global_func(name: str, allow_missing: bool = False) -> Any:
    """TVM's global-function lookup; Kiln has no FFI registry, so only known names resolve.

    ``relay.ext.<compiler>`` resolves to the external codegen of a compiler Kiln has (``kiln_c``,
    ...); codegens Kiln does not ship (``relay.ext.dnnl``, ...) are reported missing, so scripts
    that probe for them take their "not available" branch.
    """
    from kiln.runtime.func_registry import get_registered_func

    registered = get_registered_func(name)
    if registered is not None:
        return registered
    if name.startswith("relay.ext."):
        from kiln.codegen import external

        compiler = name[len("relay.ext."):]
        if compiler in external.registered_codegens():
            return lambda functions: external.build_external(functions, compiler)
    if allow_missing:
        return None
    raise ValueError(f"Kiln has no global function {name!r} (there is no TVM FFI registry)")


# Subpackages a user reaches as attributes (``kiln.debug.compare(...)``), imported on first use so
# that ``import kiln`` stays light; ``kiln.cli`` is the command line's, not an attribute.
_LAZY_SUBMODULES = frozenset({
    "_ffi", "analysis", "auto_scheduler", "autotvm", "build_module", "codegen", "config", "contrib",
    "instrument",
    "debug", "driver", "error", "errors", "frontend", "interpreter", "op", "progress", "rpc", "target", "te",
    "support", "tir", "topi", "parser",
})


def __getattr__(name: str) -> Any:
    if name == "build":  # kiln.build (TVM's tvm.build): imported on first use
        from kiln.driver import build

        return build
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f"kiln.{name}")
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY_SUBMODULES | {"build"})
