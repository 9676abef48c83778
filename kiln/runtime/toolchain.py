"""The C toolchain: find and run the C compiler, link shared libraries (TVM's ``contrib.cc``).

This is the one place that builds compiler command lines. The runtime links exported libraries
with it (``export_library`` embeds a module blob into the kernels' objects) and the compiler
(:mod:`kiln.codegen.compiler`, which adds a content-addressed compile cache) builds on it.

Every command runs the compiler named by ``settings.cc`` (``CC``, default ``cc``) with
``-O3 -fPIC -std=c99 -pthread -fopenmp-simd`` and the caller's instruction-set flags
(``-march=znver3``, ``-march=x86-64 -mavx2 -mfma``, ...); flags that choose no ``-march`` get
``-march=native``. Generated kernels run their parallel loops on their own thread pool, so
libraries do not link an OpenMP runtime; ``-fopenmp-simd`` only lets the compiler honour
``#pragma omp simd`` and is dropped, once and for the rest of the process (and remembered in
``settings.cache_dir/compile``), when the compiler does not accept it. Failures raise
:class:`~kiln.errors.CompileError` holding the whole command line and the compiler's stderr
(:class:`~kiln.errors.CompilerNotFoundError` when the compiler cannot be run).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from kiln.config import settings, usable_cpus
from kiln.errors import CompileError, CompilerNotFoundError
from kiln.runtime.export import BLOB_SYMBOL

__all__ = [
    "BASE_FLAGS",
    "BLOB_SYMBOL",
    "LINK_LIBS",
    "NATIVE_FLAG",
    "SIMD_FLAG",
    "atomic_write",
    "blob_c_source",
    "cc_command",
    "compile_object",
    "compile_shared",
    "compiler_flags",
    "compiler_runs",
    "compiler_version",
    "forget_probes",
    "link_flags",
    "run_compiler",
    "simd_pragmas_supported",
]

BASE_FLAGS: tuple[str, ...] = ("-O3", "-fPIC", "-std=c99", "-pthread")
NATIVE_FLAG = "-march=native"
SIMD_FLAG = "-fopenmp-simd"
LINK_LIBS: tuple[str, ...] = ("-lm",)

log = logging.getLogger(__name__)

_versions: dict[str, str] = {}
_simd: dict[str, bool] = {}
_runs = [0]  # compiler processes started by this process


# --- running the compiler ----------------------------------------------------------------------

def cc_command() -> list[str]:
    """The C compiler command (``settings.cc`` split into words).

    Raises
    ------
    CompileError
        ``settings.cc`` is empty or does not split (an unbalanced quote).
    """
    try:
        cmd = shlex.split(settings.cc)
    except ValueError as e:
        raise CompileError(f"the C compiler command {settings.cc!r} (settings.cc / CC) cannot be "
                           f"split into words: {e}") from None
    if not cmd:
        raise CompileError("no C compiler configured (settings.cc / CC is empty)")
    return cmd


def run_compiler(cmd: list[str], what: str,
                 cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a compiler command; its output, or an error with the command line and stderr.

    Parameters
    ----------
    cmd : list of str
        The whole command (``cc_command() + [...]``).
    what : str
        What it does, for messages (``"compiling kernels.c"``).
    cwd : Path, optional
        Its working folder.

    Raises
    ------
    CompilerNotFoundError
        The compiler cannot be run.
    CompileError
        It exited with a non-zero status.
    """
    line = shlex.join(cmd)
    log.debug("%s: %s", what, line)
    _runs[0] += 1
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


def compiler_runs() -> int:
    """Compiler processes this process has started."""
    return _runs[0]


def compiler_version() -> str:
    """The first line of ``<cc> --version`` (part of every compile cache key)."""
    key = settings.cc
    if key not in _versions:
        proc = run_compiler([*cc_command(), "--version"], "querying the C compiler version")
        lines = (proc.stdout or proc.stderr).strip().splitlines()
        _versions[key] = lines[0] if lines else "unknown"
    return _versions[key]


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file beside it, then ``os.replace``).

    Raises
    ------
    CompileError
        The folder cannot be created (the message names ``KILN_CACHE_DIR``).
    """
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
        cmd = [*cc_command(), *BASE_FLAGS, NATIVE_FLAG, SIMD_FLAG, "-c", str(src), "-o",
               str(Path(tmp) / "p.o")]
        try:
            run_compiler(cmd, "probing -fopenmp-simd")
            ok = True
        except CompileError as e:
            log.info("the C compiler does not take %s; simd pragmas are ignored (%s)", SIMD_FLAG, e)
            ok = False
    _simd[ident] = ok
    atomic_write(memo, b"1" if ok else b"0")
    return ok


def forget_probes() -> None:
    """Forget this process's compiler probes (they are read again from their memo files)."""
    _simd.clear()


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


def link_flags() -> list[str]:
    """Flags that link objects into a shared library."""
    return ["-shared", "-pthread"]


def compile_object(src: Path, obj: Path, flags: Sequence[str], cwd: Path | None = None) -> None:
    """Compile the C file ``src`` into the object ``obj`` with ``flags`` (complete flags, as
    :func:`compiler_flags` returns them)."""
    run_compiler([*cc_command(), *flags, "-c", str(src), "-o", str(obj)], f"compiling {src.name}",
                 cwd)


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
            compile_object(src, obj, flags, cwd=folder)  # .incbin resolves against the cwd
            return obj
        except CompileError as e:
            log.info("the assembler cannot .incbin; embedding the blob as a C literal (%s)", e)
    src.write_text(blob_c_source(blob))
    compile_object(src, obj, flags)
    return obj


# --- building shared libraries ----------------------------------------------------------------

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
            run_compiler([*cc_command(), *flags, "-shared", str(c_files[0]), "-o", str(linked),
                          *LINK_LIBS], f"compiling {c_files[0].name}")
        else:
            targets = [tmp / f"{i}_{p.stem}.o" for i, p in enumerate(c_files)]
            workers = max(1, min(len(c_files) + (blob is not None), usable_cpus()))
            with ThreadPoolExecutor(max_workers=workers) as pool:
                jobs = [pool.submit(compile_object, s, o, flags) for s, o in zip(c_files, targets)]
                blob_job = pool.submit(_blob_object, blob, tmp, flags) if blob is not None else None
                for job in jobs:
                    job.result()
            if blob_job is not None:
                targets.append(blob_job.result())
            run_compiler([*cc_command(), *link_flags(), *map(str, objects + targets), "-o",
                          str(linked), *LINK_LIBS], f"linking {output.name}")
        os.replace(linked, output)
    return output
