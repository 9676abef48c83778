"""TVM's ``tvm.contrib.nvcc``: CUDA capability checks and compilation.

The capability checks are pure functions of a compute version (``"7.5"``) and answer as TVM's do.
:func:`compile_cuda` compiles with the cuda target's driver
(:func:`kiln.codegen.cuda_compiler.compile_cuda`: NVRTC, else nvcc); without either it raises
:class:`~kiln.errors.CompilerNotFoundError` saying what to install.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from kiln.codegen.cuda_compiler import compile_cuda as _compile
from kiln.codegen.cuda_compiler import find_nvcc, nvrtc_version
from kiln.config import settings
from kiln.errors import CompileError, CompilerNotFoundError

__all__ = ["compile_cuda", "find_cuda_path", "get_cuda_version", "have_bf16", "have_fp16",
           "have_int8", "have_tensorcore", "parse_compute_version"]


def parse_compute_version(compute_version: str) -> tuple[int, int]:
    """``"7.5"`` -> ``(7, 5)``.

    Raises
    ------
    ValueError
        When the text is not ``major.minor``.
    """
    parts = str(compute_version).split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError) as err:
        raise ValueError(f"compute version {compute_version!r} is not 'major.minor'") from err


def have_fp16(compute_version: str) -> bool:
    """Whether a CUDA device of ``compute_version`` has fast fp16 (5.3, or 6.0 and later)."""
    major, minor = parse_compute_version(compute_version)
    return (major == 5 and minor == 3) or major >= 6


def have_int8(compute_version: str) -> bool:
    """Whether a CUDA device of ``compute_version`` has int8 dot products (6.1 and later)."""
    major, minor = parse_compute_version(compute_version)
    return (major, minor) >= (6, 1)


def have_tensorcore(compute_version: str | None = None, target: Any = None) -> bool:
    """Whether a CUDA device of ``compute_version`` has tensor cores (7.x and later)."""
    if compute_version is None:
        if target is None or getattr(target, "mcpu", None) is None:
            return False
        compute_version = str(target.mcpu).replace("sm_", "").replace("_", ".")
        if "." not in compute_version:
            compute_version = compute_version[:-1] + "." + compute_version[-1:]
    major, _ = parse_compute_version(compute_version)
    return major >= 7


def have_bf16(compute_version: str) -> bool:
    """Whether a CUDA device of ``compute_version`` has bfloat16 (8.0 and later)."""
    major, _ = parse_compute_version(compute_version)
    return major >= 8


def find_cuda_path() -> str:
    """The CUDA toolkit's folder: ``CUDA_HOME`` / ``CUDA_PATH``, else the one around ``nvcc``.

    Raises
    ------
    CompilerNotFoundError
        Neither is set or found.
    """
    if settings.cuda_home is not None:
        return str(settings.cuda_home)
    nvcc = find_nvcc()
    if nvcc is None:
        raise CompilerNotFoundError("kiln.contrib.nvcc.find_cuda_path: no CUDA toolkit (set "
                                    "CUDA_HOME, or put nvcc on PATH)")
    return str(Path(nvcc).resolve().parent.parent)


def get_cuda_version(cuda_path: str | None = None) -> tuple[int, int]:
    """``(major, minor)`` of the CUDA compiler Kiln uses (NVRTC's, else nvcc's).

    Raises
    ------
    CompilerNotFoundError
        Neither NVRTC nor nvcc is available.
    """
    version = nvrtc_version()
    if version is not None:
        return version
    nvcc = find_nvcc() if cuda_path is None else str(Path(cuda_path) / "bin" / "nvcc")
    if nvcc is None or not Path(nvcc).is_file():
        raise CompilerNotFoundError("kiln.contrib.nvcc.get_cuda_version: neither NVRTC nor nvcc "
                                    "was found")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"release (\d+)\.(\d+)", out)
    if match is None:
        raise CompilerNotFoundError(f"kiln.contrib.nvcc.get_cuda_version: {nvcc} --version "
                                    "printed no release")
    return int(match.group(1)), int(match.group(2))


def compile_cuda(code: str, target_format: str = "ptx", arch: Any = None, options: Any = None,
                 path_target: str | None = None) -> bytes:
    """Compile CUDA source (TVM's ``nvcc.compile_cuda``) with Kiln's driver (NVRTC or nvcc).

    Parameters
    ----------
    code : str
        The CUDA source.
    target_format : str
        ``"ptx"`` or ``"cubin"`` (the cubin needs NVRTC).
    arch : str or list of str, optional
        ``"sm_90"`` (``"-arch=sm_90"`` and ``["-arch", "sm_90"]`` too); default: GPU 0's.
    options : optional
        Accepted for TVM's signature; Kiln compiles with its own options.
    path_target : str, optional
        Also write the result to this file.

    Returns
    -------
    bytes
        The PTX or cubin.
    """
    from kiln.codegen.cuda import cuda_arch
    from kiln.target import Target

    if target_format not in ("ptx", "cubin"):
        raise CompileError(f"kiln.contrib.nvcc.compile_cuda: target_format {target_format!r} is "
                           "not 'ptx' or 'cubin'")
    names = [arch] if isinstance(arch, str) else list(arch or [])
    sm = next((n.split("=")[-1] for n in names if "sm_" in n), None) or cuda_arch(Target("cuda"))
    binary = _compile(code, sm.replace("compute_", "sm_"), "contrib_nvcc")
    data = binary.ptx if target_format == "ptx" else binary.cubin
    if data is None:
        raise CompileError("kiln.contrib.nvcc.compile_cuda: the compiler in use (nvcc) gives PTX "
                           "only; ask for target_format='ptx'")
    if path_target is not None:
        Path(path_target).write_bytes(data)
    return data
