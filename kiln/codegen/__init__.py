"""Code generation: C sources from lowered kernels, and the C compiler driver with its cache."""

from kiln.codegen.compiler import (
    CacheInfo,
    cache_info,
    clear_cache,
    compile_cached,
    compile_shared,
    prune_cache,
)
from kiln.codegen.numpy_library import NumpyLibrary  # registers the numpy library kind

__all__ = [
    "CacheInfo",
    "NumpyLibrary",
    "build_native",
    "cache_info",
    "clear_cache",
    "compile_cached",
    "compile_shared",
    "prune_cache",
]


def __getattr__(name: str) -> object:
    # build_native pulls in the whole TE stack: load it on first use.
    if name == "build_native":
        from kiln.codegen.native import build_native

        return build_native
    raise AttributeError(f"module 'kiln.codegen' has no attribute {name!r}")
