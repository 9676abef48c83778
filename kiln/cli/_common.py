"""Helpers the ``kiln`` commands share: the compiler check and the pass context with timing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kiln import progress
from kiln.errors import CompileError, CompilerNotFoundError
from kiln.transform import PassContext, PassTimingInstrument

__all__ = ["NUMPY_HINT", "compiler_problem", "pass_context", "require_compiler"]

NUMPY_HINT = "--target numpy (the NumPy reference kernels, which need no compiler)"
"""How to build without a C compiler, for messages."""


def compiler_problem() -> str | None:
    """Why native code cannot be built here (one line), or None when the C compiler runs.

    Runs ``<CC> --version`` once (then cached); the reason names the command and ``CC``.
    """
    from kiln.codegen.compiler import compiler_version
    from kiln.config import settings

    where = "(from CC; the default is 'cc')"
    try:
        compiler_version()
    except CompilerNotFoundError:
        return f"C compiler {settings.cc!r} {where} not found"
    except CompileError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return f"C compiler {settings.cc!r} {where} does not run: {first}"
    return None


def require_compiler() -> None:
    """Raise a one-line :class:`CompilerNotFoundError` naming ``CC`` and ``--target numpy``
    unless the C compiler runs."""
    problem = compiler_problem()
    if problem is not None:
        raise CompilerNotFoundError(f"{problem}: install one and set CC to it, or pass {NUMPY_HINT}")


@contextlib.contextmanager
def pass_context(opt_level: int, verbose: bool = False) -> Iterator[PassContext]:
    """A :class:`PassContext` at ``opt_level``; when ``verbose``, the pass timings are reported.

    The timing table (:class:`PassTimingInstrument`, one line per pass) goes to the current
    progress reporter's :meth:`~kiln.progress.Reporter.message` when the block ends.
    """
    timing = PassTimingInstrument() if verbose else None
    with PassContext(opt_level=opt_level, instruments=[timing] if timing else None) as ctx:
        yield ctx
    if timing is not None and timing.timings:
        table = "\n".join(f"  {line}" for line in timing.render().splitlines())
        progress.current().message(f"wall time per pass:\n{table}")
