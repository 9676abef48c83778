"""One kernel as a small shared library that links Kiln's runtime instead of containing it.

The tuner compiles hundreds of candidate kernels. A full module (see
:meth:`~kiln.codegen.c_codegen.CCodegen.module`) carries Kiln's C runtime (thread pool, thread
count, run plan): about 12 KB of C that every compile would parse and optimise again. Here the
runtime is compiled once into its own library (:func:`runtime_library`, in the compile cache),
and a candidate's translation unit holds only the scalar prelude, the runtime's declarations and
the kernel (:func:`kernel_source`); it is linked against the runtime library by its absolute
path, so loading the candidate loads (once per process) the shared runtime with it.

Libraries built here are for measurement and live as long as the runtime library stays in the
cache; :func:`kiln.build` makes self-contained libraries instead.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kiln.codegen.c_codegen import CCodegen
from kiln.codegen.c_runtime import runtime_unit
from kiln.codegen.compiler import LINK_LIBS, compile_cached, compiler_flags
from kiln.codegen.native import COMPILE_FLAGS
from kiln.config import settings
from kiln.errors import CompileError, CompilerNotFoundError
from kiln.te.loop_ir import PrimFunc

__all__ = ["build_kernel", "compile_kernel", "kernel_source", "runtime_library", "runtime_source"]

_runtime_paths: dict[tuple[str, str], Path] = {}


def runtime_source() -> str:
    """The C text of the runtime library: the prelude and the runtime, no kernel."""
    return runtime_unit()


def runtime_library() -> Path:
    """The runtime as a shared library in the compile cache (built on first use).

    Returns
    -------
    Path
        An ``.so`` exporting ``kiln_parallel_for``, ``kiln_set_num_threads`` and
        ``kiln_run_plan``.
    """
    key = (settings.cc, str(settings.cache_dir))
    path = _runtime_paths.get(key)
    if path is None or not path.is_file():
        path = compile_cached(runtime_source(), "kiln_runtime", flags=COMPILE_FLAGS)
        _runtime_paths[key] = path
    return path


def kernel_source(func: PrimFunc, vector_bytes: int = 32) -> str:
    """One kernel's translation unit, declaring (not defining) the runtime.

    Parameters
    ----------
    func : PrimFunc
        The lowered kernel.
    vector_bytes : int
        Vector register bytes of the target.
    """
    return CCodegen(vector_bytes).module([func])


def compile_kernel(sources: Sequence[str | Path], output: str | Path,
                   options: Sequence[str] | None = None) -> Path:
    """Compile kernel sources into ``output``, linked against :func:`runtime_library`.

    The signature is TVM's ``create_shared(output, objects, options)``, so a custom
    ``build_func`` of :class:`~kiln.auto_scheduler.measure.LocalBuilder` can wrap it.

    Parameters
    ----------
    sources : sequence of path
        C files (from :func:`kernel_source`).
    output : path
        The library to write.
    options : sequence of str, optional
        Extra compiler flags; instruction-set flags of a target
        (:func:`kiln.codegen.native.target_compile_flags`) replace ``-march=native``.

    Returns
    -------
    Path
        ``output``.

    Raises
    ------
    CompileError
        The compiler failed (the message has the command and its stderr).
    """
    try:
        cc = shlex.split(settings.cc)
    except ValueError as e:
        raise CompileError(f"the C compiler command {settings.cc!r} cannot be split: {e}") from None
    if not cc:
        raise CompileError("no C compiler configured (settings.cc / CC is empty)")
    runtime = runtime_library()
    output = Path(output)
    cmd = [*cc, *compiler_flags((*COMPILE_FLAGS, *(options or ()))), "-shared",
           *map(str, sources), "-o", str(output), str(runtime), *LINK_LIBS]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise CompilerNotFoundError(f"cannot run the C compiler {cc[0]!r}: {e}") from None
    if proc.returncode != 0:
        raise CompileError(f"compiling {output.name} failed with exit code {proc.returncode}\n"
                           f"command: {shlex.join(cmd)}\nstderr:\n{proc.stderr.strip()}")
    return output


def build_kernel(func: PrimFunc, folder: str | Path | None = None,
                 vector_bytes: int = 32) -> Path:
    """Generate and compile one kernel into ``folder`` (a new temporary folder by default).

    Returns
    -------
    Path
        The ``.so``; its ``.c`` lies beside it.
    """
    folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="kiln-kernel-"))
    src = folder / f"{func.name}.c"
    src.write_text(kernel_source(func, vector_bytes))
    return compile_kernel([src], folder / f"{func.name}.so")
