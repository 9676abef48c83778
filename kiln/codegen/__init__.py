"""Code generation: C sources from lowered kernels, and the C compiler driver with its cache."""

from kiln.codegen.compiler import (
    CacheInfo,
    cache_info,
    clear_cache,
    compile_cached,
    compile_shared,
    prune_cache,
)

__all__ = [
    "CacheInfo",
    "cache_info",
    "clear_cache",
    "compile_cached",
    "compile_shared",
    "prune_cache",
]
