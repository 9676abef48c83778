"""Schedule templates: hand-written Ansor step sequences for known compute patterns.

A template is a function ``(dag, target) -> State | None``: it looks at a
:class:`~kiln.te.dag.ComputeDAG` (usually at the tags of its stages: ``conv2d_NCHWc``,
``depthwise_conv2d_NCHWc``, ``pool_max``, ``dense_pack``, ...) and either returns a scheduled
:class:`~kiln.te.loop_state.State` or ``None`` when the DAG is not its pattern. Because the
result is a list of ordinary Ansor steps, a templated schedule prints, serialises to a tuning
record and replays exactly like a tuned one.

:func:`~kiln.codegen.native.build_native` asks, for every fused function, first the tuning
records (``schedule_lookup``), then :func:`apply_template`, then falls back to
:func:`~kiln.te.default_schedule.default_schedule`.

Writing a template::

    from kiln.te.templates import TargetInfo, register_template

    @register_template
    def schedule_my_op(dag: ComputeDAG, target: TargetInfo) -> State | None:
        if not any(getattr(op, "tag", "") == "my_op" for op in dag.ops):
            return None
        state = dag.init_state
        ...  # split / reorder / cache_write / compute_at / vectorize / parallel
        return state

Every module of this package is imported on the first :func:`apply_template` call, so a new
template file registers itself by being here. Templates are tried in registration order (module
name order, then definition order); the first non-``None`` answer wins.

What the C code generator does with a schedule (so that templates can count on it):

* a ``cache_write`` stage (``"local"`` scope) computed at a loop of its consumer, whose innermost
  loop is vectorized with the vector width, lives in vector-typed local variables (registers), not
  in memory; its other loops must be unrolled (constant indices) for that to happen;
* stages computed at the accumulator's consumer loop (epilogue: bias, activation, residual add)
  read those registers and store once;
* small intermediate buffers live on the stack, large ones are allocated once per call.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

from kiln.te.dag import ComputeDAG
from kiln.te.loop_state import State

__all__ = ["TEMPLATES", "TargetInfo", "TemplateFn", "apply_template", "register_template"]


@dataclass(frozen=True)
class TargetInfo:
    """What a template needs to know about the machine.

    Parameters
    ----------
    vector_bytes : int
        Bytes of a vector register (64 with AVX-512, 32 with AVX2).
    num_threads : int
        Usable CPUs; 1 means no parallel loops.
    """

    vector_bytes: int = 32
    num_threads: int = 1

    def lanes(self, dtype: str = "float32") -> int:
        """Lanes of one vector register for elements of ``dtype``."""
        bits = 8 if dtype == "bool" else int("".join(c for c in dtype if c.isdigit()) or 32)
        return max(1, self.vector_bytes * 8 // bits)

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers (32 with AVX-512, else 16)."""
        return 32 if self.vector_bytes >= 64 else 16


TemplateFn = Callable[[ComputeDAG, TargetInfo], "State | None"]

TEMPLATES: list[TemplateFn] = []

_loaded = False


def register_template(fn: TemplateFn) -> TemplateFn:
    """Add ``fn`` to :data:`TEMPLATES` (use as a decorator).

    Parameters
    ----------
    fn : callable
        ``fn(dag, target) -> State | None``.

    Returns
    -------
    callable
        ``fn`` itself.
    """
    if fn not in TEMPLATES:
        TEMPLATES.append(fn)
    return fn


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{info.name}")


def apply_template(dag: ComputeDAG, target: TargetInfo) -> State | None:
    """The first registered template's schedule of ``dag``, or ``None`` if none applies.

    Parameters
    ----------
    dag : ComputeDAG
        The computation (one fused function).
    target : TargetInfo
        Vector width and usable cores.

    Returns
    -------
    State or None
        The scheduled state, or ``None`` (use the default schedule).
    """
    _load_all()
    for fn in TEMPLATES:
        state = fn(dag, target)
        if state is not None:
            return state
    return None
