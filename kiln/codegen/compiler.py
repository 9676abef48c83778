"""The C compiler driver: shared libraries from C sources, and a content-addressed compile cache.

Every command runs the compiler named by ``settings.cc`` (``CC``, default ``cc``) with
``-O3 -fPIC -std=c99 -pthread -fopenmp-simd`` and the target's instruction-set flags
(:meth:`kiln.target.Target.isa`: ``-march=znver3``, ``-march=x86-64 -mavx2 -mfma``, ...);
flags that choose no ``-march`` get ``-march=native``. Generated kernels run their parallel
loops on their own thread pool (pthreads, see :mod:`kiln.codegen.c_runtime`), so libraries do
not link an OpenMP runtime; ``-fopenmp-simd`` only lets the compiler honour ``#pragma omp simd``
and is dropped, once and for the rest of the process (and remembered in the cache directory),
when the compiler does not accept it. Failures raise :class:`~kiln.errors.CompileError` holding
the whole command line and the compiler's stderr.

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
import logging
import os
import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kiln.config import settings, usable_cpus
from kiln.errors import CompileError, CompilerNotFoundError

__all__ = [
    "BASE_FLAGS",
    "BLOB_SYMBOL",
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

BASE_FLAGS: tuple[str, ...] = ("-O3", "-fPIC", "-std=c99", "-pthread")
NATIVE_FLAG = "-march=native"
SIMD_FLAG = "-fopenmp-simd"
LINK_LIBS: tuple[str, ...] = ("-lm",)
BLOB_SYMBOL = "__tvm_dev_mblob"
_SUFFIXES = (".so", ".o", ".c")

log = logging.getLogger(__name__)

_versions: dict[str, str] = {}
_simd: dict[str, bool] = {}
_stats = {"compiles": 0, "hits": 0}


# --- running the compiler ----------------------------------------------------------------------

def _cc() -> list[str]:
    try:
        cmd = shlex.split(settings.cc)
    except ValueError as e:
        raise CompileError(f"the C compiler command {settings.cc!r} (settings.cc / CC) cannot be "
                           f"split into words: {e}") from None
    if not cmd:
        raise CompileError("no C compiler configured (settings.cc / CC is empty)")
    return cmd


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    line = shlex.join(cmd)
    log.debug("%s: %s", what, line)
    _stats["compiles"] += 1
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd)
    except FileNotFoundError:
        raise CompilerNotFoundError(f"{what}: C compiler {cmd[0]!r} not found (set CC or "
                                    f"kiln.config.settings.cc)\ncommand: {line}") from None
    except PermissionError as e:
        raise CompilerNotFoundError(f"{what}: cannot run {cmd[0]!r}: {e}\ncommand: {line}") from None
    if proc.returncode != 0:
        raise CompileError(f"{what} failed with exit code {proc.returncode}\ncommand: {line}\n"
                           f"stderr:\n{proc.stderr.strip()}")
    return proc


def compiler_version() -> str:
    """The first line of ``<cc> --version`` (part of every cache key)."""
    key = settings.cc
    if key not in _versions:
        proc = _run([*_cc(), "--version"], "querying the C compiler version")
        lines = (proc.stdout or proc.stderr).strip().splitlines()
        _versions[key] = lines[0] if lines else "unknown"
    return _versions[key]


def _memo_path(kind: str, ident: str) -> Path:
    digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
    return Path(settings.cache_dir) / "compile" / f"{kind}-{digest}.txt"


def simd_pragmas_supported() -> bool:
    """Whether the compiler accepts ``-fopenmp-simd`` (probed once, then remembered)."""
    ident = f"{settings.cc}\0{compiler_version()}"
    if ident in _simd:
        return _simd[ident]
    memo = _memo_path("openmp-simd", ident)
    try:
        _simd[ident] = memo.read_text().strip() == "1"
        return _simd[ident]
    except OSError:
        pass
    probe = ("void kiln_simd_probe(float* x, int n) {\n"
             "#pragma omp simd\n  for (int i = 0; i < n; ++i) x[i] += 1.0f;\n}\n")
    with tempfile.TemporaryDirectory(prefix="kiln-simd-") as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text(probe)
        cmd = [*_cc(), *BASE_FLAGS, NATIVE_FLAG, SIMD_FLAG, "-c", str(src), "-o", str(Path(tmp) / "p.o")]
        try:
            _run(cmd, "probing -fopenmp-simd")
            ok = True
        except CompileError as e:
            log.info("the C compiler does not take %s; simd pragmas are ignored (%s)", SIMD_FLAG, e)
            ok = False
    _simd[ident] = ok
    _atomic_write(memo, b"1" if ok else b"0")
    return ok


def compiler_flags(extra_flags: Sequence[str] = ()) -> list[str]:
    """Compile flags: the base set, ``-march=native`` unless ``extra_flags`` choose the CPU
    (``-march=...``, or ``-mcpu=...`` where the compiler takes that), ``-fopenmp-simd`` when it
    works, then ``extra_flags``."""
    flags = list(BASE_FLAGS)
    if not any(f.startswith(("-march=", "-mcpu=")) for f in extra_flags):
        flags.append(NATIVE_FLAG)
    if simd_pragmas_supported():
        flags.append(SIMD_FLAG)
    return flags + list(extra_flags)


def _native_signature(flags: Sequence[str]) -> str:
    """For ``-march=native`` flags, what native means here (its CPU features); else ``""``."""
    if NATIVE_FLAG not in flags:
        return ""
    from kiln.target import native_isa

    isa = native_isa()
    return f"native:{isa.vector_bytes}:{','.join(sorted(isa.features))}"


def _link_flags() -> list[str]:
    return ["-shared", "-pthread"]


# --- embedding a blob ------------------------------------------------------------------------

# Every byte as a 3-digit octal escape: a string literal compiles ~20x faster than an initializer
# list of the same bytes, and a fixed-width octal escape cannot run into the next character.
_OCTAL = np.array([list(f"\\{i:03o}".encode()) for i in range(256)], dtype=np.uint8)
_BYTES_PER_LINE = 64


def blob_c_source(blob: bytes, symbol: str = BLOB_SYMBOL) -> str:
    """C source defining ``const unsigned char <symbol>[]`` holding ``blob`` (exported).

    Parameters
    ----------
    blob : bytes
        The symbol's exact contents (the array has exactly ``len(blob)`` bytes: C drops the
        string literal's terminating NUL when the array size leaves no room for it).
    symbol : str
        The symbol name.
    """
    data = np.frombuffer(blob, dtype=np.uint8)
    lines = []
    full = len(data) // _BYTES_PER_LINE * _BYTES_PER_LINE
    if full:
        cells = _OCTAL[data[:full]].reshape(-1, _BYTES_PER_LINE * 4)
        n = cells.shape[0]
        quote = np.full((n, 1), ord('"'), np.uint8)
        newline = np.full((n, 1), ord("\n"), np.uint8)
        lines.append(np.hstack([quote, cells, quote, newline]).tobytes().decode("ascii"))
    if full < len(data) or not len(data):
        lines.append('"' + _OCTAL[data[full:]].tobytes().decode("ascii") + '"\n')
    return ("/* Generated by Kiln: the module blob (graph JSON, params, metadata). */\n"
            "__attribute__((visibility(\"default\"), aligned(16)))\n"
            f"const unsigned char {symbol}[{max(len(blob), 1)}] =\n" + "".join(lines) + ";\n")


# Large blobs are assembled from the raw bytes with ``.incbin`` (GNU as and LLVM's integrated
# assembler, i.e. gcc and clang on ELF): 100 MB takes 0.4 s instead of ~17 s as a C literal.
_INCBIN_MIN_BYTES = 1 << 20
_INCBIN_SOURCE = f"""/* Generated by Kiln: the module blob, assembled from kiln_blob.bin. */
__asm__(".section .rodata\\n"
        ".global {BLOB_SYMBOL}\\n"
        ".type {BLOB_SYMBOL}, @object\\n"
        ".balign 16\\n"
        "{BLOB_SYMBOL}:\\n"
        ".incbin \\"kiln_blob.bin\\"\\n"
        ".size {BLOB_SYMBOL}, . - {BLOB_SYMBOL}\\n"
        ".previous\\n");
"""


def _blob_object(blob: bytes, folder: Path, flags: list[str]) -> Path:
    """Compile ``blob`` into an object defining ``__tvm_dev_mblob`` (in ``folder``)."""
    src, obj = folder / "kiln_blob.c", folder / "kiln_blob.o"
    if len(blob) >= _INCBIN_MIN_BYTES:
        (folder / "kiln_blob.bin").write_bytes(blob)
        src.write_text(_INCBIN_SOURCE)
        try:
            _compile_object(src, obj, flags, cwd=folder)  # .incbin resolves against the cwd
            return obj
        except CompileError as e:
            log.info("the assembler cannot .incbin; embedding the blob as a C literal (%s)", e)
    src.write_text(blob_c_source(blob))
    _compile_object(src, obj, flags)
    return obj


# --- building shared libraries ----------------------------------------------------------------

def _atomic_write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CompileError(f"cannot create the compile cache folder {path.parent} "
                           f"({e.strerror or e}): set KILN_CACHE_DIR (or kiln.config.settings."
                           "cache_dir) to a writable folder") from None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes the file private; cached sources are for reading
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _compile_object(src: Path, obj: Path, flags: list[str], cwd: Path | None = None) -> None:
    _run([*_cc(), *flags, "-c", str(src), "-o", str(obj)], f"compiling {src.name}", cwd)


def compile_shared(
    sources: Sequence[str | Path],
    output: Path | str,
    *,
    extra_flags: Sequence[str] = (),
    blob: bytes | None = None,
) -> Path:
    """Compile C sources (and/or link object files) into one shared library.

    Parameters
    ----------
    sources : sequence of path
        ``.c`` files to compile and ``.o`` files to link. Several ``.c`` files are compiled in
        parallel (one compiler process per usable CPU), then linked once.
    output : path
        The library to write; it appears atomically.
    extra_flags : sequence of str
        Flags appended to the compile commands.
    blob : bytes, optional
        Contents of an exported ``const unsigned char __tvm_dev_mblob[]`` linked into the library.

    Returns
    -------
    Path
        ``output``.

    Raises
    ------
    CompileError
        The compiler is missing or a command failed (the message has the command and stderr).
    """
    output = Path(output).resolve()
    paths = [Path(s).resolve() for s in sources]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise CompileError(f"compile_shared: source file(s) not found: {', '.join(missing)}")
    if not paths and blob is None:
        raise CompileError("compile_shared: nothing to compile (no sources and no blob)")
    output.parent.mkdir(parents=True, exist_ok=True)
    flags = compiler_flags(extra_flags)
    c_files = [p for p in paths if p.suffix != ".o"]
    objects = [p for p in paths if p.suffix == ".o"]
    with tempfile.TemporaryDirectory(prefix="kiln-cc-", dir=output.parent) as tmp_dir:
        tmp = Path(tmp_dir)
        linked = tmp / output.name
        if len(c_files) == 1 and not objects and blob is None:
            _run([*_cc(), *flags, "-shared", str(c_files[0]), "-o", str(linked), *LINK_LIBS],
                 f"compiling {c_files[0].name}")
        else:
            targets = [tmp / f"{i}_{p.stem}.o" for i, p in enumerate(c_files)]
            workers = max(1, min(len(c_files) + (blob is not None), usable_cpus()))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                jobs = [pool.submit(_compile_object, s, o, flags) for s, o in zip(c_files, targets)]
                blob_job = pool.submit(_blob_object, blob, tmp, flags) if blob is not None else None
                for job in jobs:
                    job.result()
            if blob_job is not None:
                targets.append(blob_job.result())
            _run([*_cc(), *_link_flags(), *map(str, objects + targets), "-o", str(linked),
                  *LINK_LIBS], f"linking {output.name}")
        os.replace(linked, output)
    return output


def _cache_dir() -> Path:
    return Path(settings.cache_dir) / "compile"


def compile_cached(
    source_text: str,
    name_hint: str = "kernels",
    flags: Sequence[str] = (),
    objects: Sequence[Path] = (),
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

    Returns
    -------
    Path
        The ``.so``; the ``.c`` and ``.o`` it was built from lie beside it (same stem).

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
    if so.is_file() and obj.is_file():
        _stats["hits"] += 1
        now = time.time()
        for p in (so, obj, src):
            with contextlib.suppress(OSError):  # record the last use, for pruning
                os.utime(p, (now, now))
        return so
    _atomic_write(src, source_text.encode())
    with tempfile.TemporaryDirectory(prefix="kiln-cc-", dir=so.parent) as tmp_dir:
        tmp = Path(tmp_dir)
        tmp_obj, tmp_so = tmp / obj.name, tmp / so.name
        _compile_object(src, tmp_obj, all_flags)
        _run([*_cc(), *_link_flags(), str(tmp_obj), *map(str, objects), "-o", str(tmp_so),
              *LINK_LIBS], f"linking {so.name}")
        os.replace(tmp_obj, obj)
        os.replace(tmp_so, so)
    return so


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
                     _stats["compiles"], _stats["hits"])


def clear_cache() -> int:
    """Delete every cached library (and the compiler probe memos); returns the files removed."""
    removed = 0
    folder = _cache_dir()
    if folder.is_dir():
        for p in folder.iterdir():
            if p.is_file():
                p.unlink(missing_ok=True)
                removed += 1
    _simd.clear()
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
