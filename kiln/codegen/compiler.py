"""The compiler driver: C sources to shared libraries, through a content-addressed compile cache.

The compiler command lines are built by the runtime's toolchain (:mod:`kiln.runtime.toolchain`:
finding ``settings.cc``, the base and instruction-set flags, ``-fopenmp-simd`` probing, linking
with an embedded module blob), which this module re-exports; the runtime links exported libraries
with it too, without the compiler. The target's instruction-set flags come from
:meth:`kiln.target.Target.isa`.

:func:`compile_cached` keys each library by a SHA-256 of the source, the flags, the compiler
command and its version, and, for ``-march=native``, the CPU features it means on this machine
(a cache shared by machines with different CPUs never hands one of them the other's code).
Each entry is three files side by side in ``settings.cache_dir/compile``:
``<name>-<key>.c`` (for reading), ``<name>-<key>.o`` (for linking into exported libraries) and
``<name>-<key>.so``. Files appear atomically (written under a temporary name, then
``os.replace``), so processes building the same source at once are safe: the last rename wins
and both renamed files are identical.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kiln.config import settings
from kiln.runtime.toolchain import (
    BASE_FLAGS,
    BLOB_SYMBOL,
    LINK_LIBS,
    NATIVE_FLAG,
    atomic_write,
    blob_c_source,
    cc_command,
    compile_object,
    compile_shared,
    compiler_flags,
    compiler_runs,
    compiler_version,
    forget_probes,
    link_flags,
    run_compiler,
    simd_pragmas_supported,
)

__all__ = [
    "BASE_FLAGS",
    "BLOB_SYMBOL",
    "LINK_LIBS",
    "NATIVE_FLAG",
    "CacheInfo",
    "blob_c_source",
    "cache_info",
    "clear_cache",
    "compile_cached",
    "compile_shared",
    "compiler_flags",
    "compiler_version",
    "prune_cache",
    "simd_pragmas_supported",
]

_SUFFIXES = (".so", ".o", ".c")
_hits = [0]  # compile cache hits in this process


def _native_signature(flags: Sequence[str]) -> str:
    """For ``-march=native`` flags, what native means here (its CPU features); else ``""``."""
    if NATIVE_FLAG not in flags:
        return ""
    from kiln.target import native_isa

    isa = native_isa()
    return f"native:{isa.vector_bytes}:{','.join(sorted(isa.features))}"


def _cache_dir() -> Path:
    return Path(settings.cache_dir) / "compile"


def compile_cached(
    source_text: str,
    name_hint: str = "kernels",
    flags: Sequence[str] = (),
    objects: Sequence[Path] = (),
    link: bool = True,
) -> Path:
    """A shared library built from ``source_text``, from the cache when it was built before.

    Parameters
    ----------
    source_text : str
        Complete C source.
    name_hint : str
        Readable prefix of the cached file names.
    flags : sequence of str
        Extra compile flags (part of the key).
    objects : sequence of Path
        Object files linked into the library besides ``source_text``'s (their paths are part of
        the key: name them after their contents, as this cache does).
    link : bool
        False: only compile, and return the ``.o`` (a part of a library linked later: linking
        a library of each part would cost a linker run that nothing uses).

    Returns
    -------
    Path
        The ``.so`` (the ``.o`` when not linking); the ``.c`` and ``.o`` it was built from lie
        beside it (same stem).

    Examples
    --------
    >>> so = compile_cached("int one(void) { return 1; }", "one")  # doctest: +SKIP
    """
    all_flags = compiler_flags(flags)
    key_text = "\0".join([source_text, *all_flags, settings.cc, compiler_version(),
                          _native_signature(all_flags), *map(str, objects)])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:24]
    stem = re.sub(r"[^A-Za-z0-9_]", "_", name_hint)[:48] or "kernels"
    base = _cache_dir() / f"{stem}-{key}"
    so, obj, src = (base.with_suffix(s) for s in _SUFFIXES)
    result = so if link else obj
    if result.is_file() and obj.is_file():
        _hits[0] += 1
        now = time.time()
        for p in (so, obj, src):
            with contextlib.suppress(OSError):  # record the last use, for pruning
                os.utime(p, (now, now))
        return result
    atomic_write(src, source_text.encode())
    with tempfile.TemporaryDirectory(prefix="kiln-cc-", dir=so.parent) as tmp_dir:
        tmp = Path(tmp_dir)
        tmp_obj, tmp_so = tmp / obj.name, tmp / so.name
        compile_object(src, tmp_obj, all_flags)
        if link:
            run_compiler([*cc_command(), *link_flags(), str(tmp_obj), *map(str, objects), "-o",
                          str(tmp_so), *LINK_LIBS], f"linking {so.name}")
        os.replace(tmp_obj, obj)
        if link:
            os.replace(tmp_so, so)
    return result


# --- cache maintenance ------------------------------------------------------------------------

@dataclass(frozen=True)
class CacheInfo:
    """What the compile cache holds, and this process's compiler use."""

    path: Path
    entries: int
    total_bytes: int
    compiler_runs: int
    hits: int


def _entries() -> dict[Path, list[Path]]:
    groups: dict[Path, list[Path]] = {}
    folder = _cache_dir()
    if not folder.is_dir():
        return groups
    for p in folder.iterdir():
        if p.suffix in _SUFFIXES and not p.name.startswith("."):
            groups.setdefault(p.with_suffix(""), []).append(p)
    return groups


def _size(paths: list[Path]) -> int:
    total = 0
    for p in paths:
        with contextlib.suppress(OSError):
            total += p.stat().st_size
    return total


def cache_info() -> CacheInfo:
    """Entries and bytes in the compile cache, plus compiler runs and cache hits so far."""
    groups = _entries()
    return CacheInfo(_cache_dir(), len(groups), sum(_size(v) for v in groups.values()),
                     compiler_runs(), _hits[0])


def clear_cache() -> int:
    """Delete every cached library (and the compiler probe memos); returns the files removed."""
    removed = 0
    folder = _cache_dir()
    if folder.is_dir():
        for p in folder.iterdir():
            if p.is_file():
                p.unlink(missing_ok=True)
                removed += 1
    forget_probes()
    return removed


def prune_cache(max_bytes: int | None = None, max_age_s: float | None = None) -> int:
    """Drop least recently used entries until the cache fits ``max_bytes``, and any older entry.

    Parameters
    ----------
    max_bytes : int, optional
        Size the cache may keep.
    max_age_s : float, optional
        Entries unused for longer than this many seconds are removed.

    Returns
    -------
    int
        Number of entries removed.
    """
    def last_use(paths: list[Path]) -> float:
        times = []
        for p in paths:
            with contextlib.suppress(OSError):
                times.append(p.stat().st_mtime)
        return max(times, default=0.0)

    groups = sorted(_entries().items(), key=lambda kv: last_use(kv[1]))
    now = time.time()
    total = sum(_size(v) for _, v in groups)
    removed = 0
    for _, paths in groups:
        too_old = max_age_s is not None and now - last_use(paths) > max_age_s
        too_big = max_bytes is not None and total > max_bytes
        if not (too_old or too_big):
            continue
        total -= _size(paths)
        for p in paths:
            p.unlink(missing_ok=True)
        removed += 1
    return removed
