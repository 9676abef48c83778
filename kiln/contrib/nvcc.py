"""TVM's ``tvm.contrib.nvcc``: CUDA capability checks, and a compiler Kiln does not drive.

The capability checks are pure functions of a compute version (``"7.5"``) and answer as TVM's do.
Kiln targets the CPU only: :func:`compile_cuda` and :func:`find_cuda_path` raise
:class:`~kiln.errors.TopiUnsupportedError` saying so, rather than pretending there is a toolkit.
"""

from __future__ import annotations

from typing import Any

from kiln.errors import TopiUnsupportedError

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


def _no_cuda(what: str) -> TopiUnsupportedError:
    return TopiUnsupportedError(f"kiln.contrib.nvcc.{what}: Kiln compiles for the CPU only; "
                                "it has no CUDA target and does not drive nvcc")


def find_cuda_path() -> str:
    """TVM finds the CUDA toolkit here; Kiln has no CUDA target.

    Raises
    ------
    TopiUnsupportedError
        Always.
    """
    raise _no_cuda("find_cuda_path")


def get_cuda_version(cuda_path: str | None = None) -> tuple[int, int]:
    """TVM reads the toolkit's version here; Kiln has no CUDA target.

    Raises
    ------
    TopiUnsupportedError
        Always.
    """
    raise _no_cuda("get_cuda_version")


def compile_cuda(code: str, target_format: str = "ptx", arch: Any = None, options: Any = None,
                 path_target: str | None = None) -> bytes:
    """TVM compiles CUDA source with nvcc here; Kiln has no CUDA target.

    Raises
    ------
    TopiUnsupportedError
        Always.
    """
    raise _no_cuda("compile_cuda")
