"""onnxruntime held to its AVX2 kernels, to compare AVX2 builds fairly on an AVX-512 machine.

onnxruntime chooses its MLAS kernels (GEMM, convolution, pooling, activations) from the running
CPU's features when it loads, and offers no setting to choose lower. A Kiln AVX2 build
(``--target "llvm -mcpu=znver3"``) measured against it on an AVX-512 machine therefore races
AVX2 code against AVX-512 code, which is not what an AVX2 machine sees.

``--ort-isa avx2`` (``bench_models.py``, ``bench_isa.py``, ``bench_layers.py``) makes the
benchmark import a private copy of the installed onnxruntime package in which MLAS's platform
setup never takes its AVX-512 branch: the one conditional jump that enters it (``not %rax;
test $0xe0,%al; je ...``: "the OS saves the AVX-512 registers") is found by its instruction
bytes and replaced by a no-op of the same length, so MLAS sets up its AVX2/FMA3 kernels exactly
as on a CPU without AVX-512. The installed package is not touched; the copy lives in a temporary
directory for the process. A version whose bytes do not match exactly once is refused with an
error naming it, never half-patched.

This is benchmark tooling only: nothing in ``kiln`` imports it.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ISAS", "OrtIsaError", "add_option", "avx2_copy", "isa_from_argv", "loaded_isa",
           "patch_mlas_avx2", "require", "select", "select_for_script"]

ISAS = ("native", "avx2")

# MLAS's platform setup (platform.cpp), x86-64: after "CPUID.7 reports AVX512F", the XCR0 test
# for the AVX-512 register state, ``not %rax; test $0xe0,%al; je rel32``. The 6-byte ``je`` is
# replaced by a 6-byte no-op, so the AVX-512 kernels are never installed.
_XCR0_AVX512_TEST = bytes.fromhex("48f7d0a8e0")
_JE_REL32 = bytes.fromhex("0f84")
_NOP6 = bytes.fromhex("660f1f440000")
_EXTENSION = "onnxruntime_pybind11_state"
_MARK = "kiln-bench-ort-avx2-"


class OrtIsaError(RuntimeError):
    """onnxruntime cannot be held to the requested ISA (or was imported before it could be)."""


def patch_mlas_avx2(binary: bytes) -> bytes:
    """``binary`` (onnxruntime's Python extension) with MLAS's AVX-512 branch disabled.

    Raises
    ------
    OrtIsaError
        When the branch's instruction bytes occur other than exactly once.
    """
    pattern = _XCR0_AVX512_TEST + _JE_REL32
    count = binary.count(pattern)
    if count != 1:
        raise OrtIsaError(f"MLAS's AVX-512 check (bytes {pattern.hex()}) occurs {count} times in "
                          f"this onnxruntime build, not once: cannot hold it to AVX2")
    at = binary.index(pattern) + len(_XCR0_AVX512_TEST)
    return binary[:at] + _NOP6 + binary[at + len(_NOP6):]


def _installed_package() -> Path:
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        raise OrtIsaError("onnxruntime is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def avx2_copy(dest: Path) -> Path:
    """Copy the installed onnxruntime package under ``dest`` with MLAS held to AVX2.

    Python files are copied, shared libraries other than the extension are linked, and the
    extension is written patched. Returns the directory to put first on ``sys.path``.
    """
    src = _installed_package()
    pkg = dest / "onnxruntime"
    shutil.copytree(src, pkg, symlinks=True,
                    ignore=shutil.ignore_patterns("*.so", "*.so.*", "__pycache__"))
    extensions = sorted((src / "capi").glob(f"{_EXTENSION}*.so"))
    if len(extensions) != 1:
        raise OrtIsaError(f"expected one {_EXTENSION}*.so in {src / 'capi'}, found "
                          f"{len(extensions)}")
    for lib in (src / "capi").iterdir():
        if lib.name.endswith(".so") or ".so." in lib.name:
            target = pkg / "capi" / lib.name
            if lib == extensions[0]:
                target.write_bytes(patch_mlas_avx2(lib.read_bytes()))
                target.chmod(0o755)
            else:
                target.symlink_to(lib)
    return dest


def loaded_isa() -> str | None:
    """The ISA of the onnxruntime this process imported (None when it has not imported one)."""
    module = sys.modules.get("onnxruntime")
    if module is None:
        return None
    return "avx2" if _MARK in str(getattr(module, "__file__", "")) else "native"


def select(isa: str) -> None:
    """Make this process's ``import onnxruntime`` load the ``isa`` kernels' copy.

    Raises
    ------
    OrtIsaError
        For an unknown ISA, a build that cannot be patched, or onnxruntime already imported with
        other kernels.
    """
    if isa not in ISAS:
        raise OrtIsaError(f"unknown onnxruntime ISA {isa!r}; choose from {', '.join(ISAS)}")
    loaded = loaded_isa()
    if loaded is not None:
        if loaded != isa:
            raise OrtIsaError(f"onnxruntime was imported with its {loaded} kernels before "
                              f"--ort-isa {isa} could take effect")
        return
    if isa == "avx2":
        dest = Path(tempfile.mkdtemp(prefix=_MARK))
        atexit.register(shutil.rmtree, dest, ignore_errors=True)
        sys.path.insert(0, str(avx2_copy(dest)))


def isa_from_argv(argv: Sequence[str]) -> str:
    """The value of ``--ort-isa`` in ``argv`` ("native" when absent), read before argparse runs.

    A benchmark must choose its onnxruntime before anything imports it, which its imports do.
    """
    for i, arg in enumerate(argv):
        if arg == "--ort-isa" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--ort-isa="):
            return arg.split("=", 1)[1]
    return "native"


def select_for_script(argv: Sequence[str]) -> None:
    """:func:`select` for a script's ``--ort-isa``, before its imports load onnxruntime.

    An ISA that cannot be had is one line on stderr and exit status 2, as argparse reports a bad
    option.
    """
    try:
        select(isa_from_argv(argv))
    except OrtIsaError as err:
        print(f"error: --ort-isa: {err}", file=sys.stderr)
        sys.exit(2)


def add_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--ort-isa`` to a benchmark's options (read early by :func:`select_for_script`)."""
    parser.add_argument("--ort-isa", choices=ISAS, default="native",
                        help="onnxruntime's kernels: native (what this CPU has, default) or avx2 "
                             "(a private copy held to its AVX2 kernels, to compare AVX2 builds "
                             "on an AVX-512 machine)")


def require(parser: argparse.ArgumentParser, isa: str) -> None:
    """:func:`select` ``isa`` after parsing, as a parser error when onnxruntime has other kernels.

    Only a script's own run reaches here with its choice already made; this catches ``main(argv)``
    called in a process that imported onnxruntime before.
    """
    try:
        select(isa)
    except OrtIsaError as err:
        parser.error(f"--ort-isa: {err}")
