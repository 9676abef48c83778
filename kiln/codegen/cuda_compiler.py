"""Compiling CUDA C: NVRTC (loaded with ctypes) or nvcc, cached like the C kernels.

NVRTC is looked for in the toolkit of ``CUDA_HOME`` / ``CUDA_PATH``, on the library path, and
in the ``nvidia-cuda-nvrtc`` Python wheels (which PyTorch installs); ``nvcc`` in the toolkit and
on ``PATH``. Neither is needed to import Kiln or to build for a CPU; compiling for ``cuda``
without either raises :class:`~kiln.errors.CompilerNotFoundError` naming what to install.

:func:`compile_cuda` returns the PTX and, from NVRTC, the cubin for the named architecture; both
are cached under ``<cache_dir>/cuda`` by a hash of the source, architecture and compiler.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kiln.config import settings
from kiln.errors import CompileError, CompilerNotFoundError

__all__ = ["CudaBinary", "compile_cuda", "find_nvcc", "find_nvrtc", "nvrtc_version"]

_OPTIONS = ("-std=c++17", "--fmad=true", "--diag-suppress=177")  # 177: an unused helper


@dataclass(frozen=True)
class CudaBinary:
    """A compiled translation unit: PTX text, and the cubin for ``arch`` when NVRTC made one."""

    arch: str
    ptx: bytes
    cubin: bytes | None
    compiler: str


def _nvrtc_candidates() -> list[str]:
    names: list[str] = []
    if settings.cuda_home is not None:
        names += sorted(str(p) for p in (settings.cuda_home / "lib64").glob("libnvrtc.so*"))
    for entry in sys.path:  # the wheels: nvidia/cuda_nvrtc/lib (CUDA 12), nvidia/cu13/lib, ...
        wheels = Path(entry) / "nvidia"
        if wheels.is_dir():
            names += sorted(str(p) for p in wheels.glob("*/lib/libnvrtc.so*")
                            if ".alt." not in p.name and "builtins" not in p.name)
    found = ctypes.util.find_library("nvrtc")
    if found:
        names.append(found)
    names += [str(p) for p in sorted(Path("/usr/local/cuda/lib64").glob("libnvrtc.so*"))]
    return names


@functools.cache
def find_nvrtc() -> ctypes.CDLL | None:
    """NVRTC, or None when no loadable ``libnvrtc`` is found."""
    for name in _nvrtc_candidates():
        try:
            lib = ctypes.CDLL(name)
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            return lib
        except OSError:
            continue
    return None


def nvrtc_version() -> tuple[int, int] | None:
    """NVRTC's (major, minor), or None without NVRTC."""
    lib = find_nvrtc()
    if lib is None:
        return None
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def find_nvcc() -> str | None:
    """The ``nvcc`` command, or None."""
    if settings.cuda_home is not None and (settings.cuda_home / "bin" / "nvcc").is_file():
        return str(settings.cuda_home / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.is_file() else None


def _check_arch(arch: str) -> int:
    if not (arch.startswith("sm_") and arch[3:].rstrip("a").isdigit()):
        raise CompileError(f"cuda target: -arch={arch!r} is not an architecture such as 'sm_90'")
    return int(arch[3:].rstrip("a"))


def compile_cuda(source: str, arch: str, name: str = "kernels") -> CudaBinary:
    """Compile a CUDA translation unit for ``arch`` (``"sm_90"``); cached by content.

    Raises
    ------
    CompilerNotFoundError
        Neither NVRTC nor nvcc is available.
    CompileError
        The compiler rejected the source (its log is in the message).
    """
    _check_arch(arch)
    nvrtc = find_nvrtc()
    nvcc = None if nvrtc is not None else find_nvcc()
    if nvrtc is None and nvcc is None:
        raise CompilerNotFoundError(
            "the cuda target needs a CUDA compiler: neither NVRTC (libnvrtc.so) nor nvcc was found; "
            "install the CUDA toolkit (and set CUDA_HOME) or the nvidia-cuda-nvrtc-cu12 wheel")
    compiler = f"nvrtc {nvrtc_version()}" if nvrtc is not None else f"nvcc {nvcc}"
    key = hashlib.sha256("\0".join([source, arch, compiler, *_OPTIONS]).encode()).hexdigest()[:24]
    cache = Path(settings.cache_dir) / "cuda"
    ptx_path, cubin_path = cache / f"{name}-{key}.ptx", cache / f"{name}-{key}.cubin"
    if ptx_path.is_file():
        cubin = cubin_path.read_bytes() if cubin_path.is_file() else None
        return CudaBinary(arch, ptx_path.read_bytes(), cubin, compiler)
    if nvrtc is not None:
        ptx, cubin = _nvrtc(nvrtc, source, arch, name)
    else:
        assert nvcc is not None
        ptx, cubin = _nvcc(nvcc, source, arch), None
    cache.mkdir(parents=True, exist_ok=True)
    (cache / f"{name}-{key}.cu").write_text(source)
    if cubin is not None:
        _write(cubin_path, cubin)
    _write(ptx_path, ptx)
    return CudaBinary(arch, ptx, cubin, compiler)


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _nvrtc(lib: ctypes.CDLL, source: str, arch: str, name: str) -> tuple[bytes, bytes | None]:
    prog = ctypes.c_void_p()

    def check(code: int, what: str) -> None:
        if code != 0:
            raise CompileError(f"NVRTC {what}: {lib.nvrtcGetErrorString(code).decode()}")

    check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), f"{name}.cu".encode(),
                                 0, None, None), "nvrtcCreateProgram")
    try:
        options = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in _OPTIONS)]
        array = (ctypes.c_char_p * len(options))(*options)
        code = lib.nvrtcCompileProgram(prog, len(options), array)
        if code != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise CompileError(f"NVRTC could not compile the CUDA kernels for {arch}:\n"
                               f"{log.value.decode(errors='replace').strip()}")
        size = ctypes.c_size_t()
        check(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        ptx = ctypes.create_string_buffer(size.value)
        check(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
        cubin = None
        if hasattr(lib, "nvrtcGetCUBINSize") \
                and lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)) == 0 and size.value:
            buf = ctypes.create_string_buffer(size.value)
            if lib.nvrtcGetCUBIN(prog, buf) == 0:
                cubin = buf.raw
        return ptx.raw.rstrip(b"\0"), cubin
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _nvcc(nvcc: str, source: str, arch: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "kernels.cu", Path(tmp) / "kernels.ptx"
        src.write_text(source)
        cmd = [nvcc, "--ptx", f"-arch={arch}", *_OPTIONS, "-o", str(out), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise CompileError(f"nvcc could not compile the CUDA kernels for {arch}:\n"
                               f"{(proc.stderr or proc.stdout).strip()}")
        return out.read_bytes()
