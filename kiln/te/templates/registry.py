"""The table of schedule templates, keyed by the compute tags of the stages they schedule.

A fused function's *anchor* stages are its reductions (a convolution, a matrix product, a pooling
window, a row reduction); their compute tags (``conv2d_NCHWc``, ``dense``, ``pool_max``,
``comm_reduce``, or ``""`` for an untagged reduction) say which template schedules the function.
Each template claims its tags when it registers, and a tag may be claimed once: there is no trial
over templates and no dependence on the order in which they were defined or imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kiln.errors import KilnError
from kiln.te.dag import ComputeDAG
from kiln.te.loop_state import State
from kiln.te.tensor import ComputeOp

__all__ = ["L2_RESIDENT_BYTES", "TargetInfo", "Template", "TemplateError", "TemplateFn", "anchor_tags",
           "apply_template", "register_template", "template_for", "templates"]

# Bytes of data read again and again (a convolution's weights across its rows, a recurrent
# layer's weights across its steps) that stay in one core's L2 cache between reads: half of a
# 1 MB L2 (Zen 4 and 5, Intel server cores), all of a 512 KB one (Zen 2 and 3).
L2_RESIDENT_BYTES = 512 * 1024


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


class TemplateError(KilnError, ValueError):
    """A schedule template registration conflicts with another (a tag claimed twice)."""


@dataclass(frozen=True)
class Template:
    """A registered schedule template.

    Attributes
    ----------
    name : str
        The function's name (``schedule_conv2d_nchwc``, ...).
    tags : tuple of str
        The compute tags of the anchor stages it schedules.
    fn : callable
        ``fn(dag, target) -> State | None``; None when the DAG is not of its exact shape.
    """

    name: str
    tags: tuple[str, ...]
    fn: TemplateFn


_BY_TAG: dict[str, Template] = {}


def register_template(*tags: str) -> Callable[[TemplateFn], TemplateFn]:
    """Register a template for the anchor stages tagged ``tags`` (use as a decorator).

    Parameters
    ----------
    *tags : str
        Compute tags of the reductions the template schedules; ``""`` is an untagged reduction.

    Returns
    -------
    callable
        The decorator; it returns the function unchanged.

    Raises
    ------
    TemplateError
        No tag is given, or a tag is already claimed by another template.
    """
    if not tags:
        raise TemplateError("register_template needs the compute tags the template schedules")

    def wrap(fn: TemplateFn) -> TemplateFn:
        entry = Template(getattr(fn, "__qualname__", repr(fn)), tuple(tags), fn)
        for tag in tags:
            held = _BY_TAG.get(tag)
            if held is not None and held.fn is not fn:
                raise TemplateError(f"schedule template {entry.name}: tag {tag!r} is already "
                                    f"scheduled by {held.name}")
        for tag in tags:
            _BY_TAG[tag] = entry
        return fn

    return wrap


def templates() -> dict[str, Template]:
    """Every registered template, by the tag it claims."""
    return dict(_BY_TAG)


def anchor_tags(dag: ComputeDAG) -> set[str]:
    """The compute tags of the reduction stages of ``dag`` (``""`` for an untagged one)."""
    return {op.tag for op in dag.ops if isinstance(op, ComputeOp) and op.is_reduction}


def template_for(dag: ComputeDAG) -> Template | None:
    """The template that schedules ``dag``: the one claiming every tag of its anchor stages.

    None when ``dag`` has no reduction, a reduction with an unclaimed tag, or reductions whose
    tags belong to different templates (the default schedule handles those).
    """
    tags = anchor_tags(dag)
    if not tags or not all(t in _BY_TAG for t in tags):
        return None
    found = {_BY_TAG[t] for t in tags}
    return found.pop() if len(found) == 1 else None


def apply_template(dag: ComputeDAG, target: TargetInfo) -> State | None:
    """The schedule of ``dag`` by the template of its anchor tags, or ``None``.

    Parameters
    ----------
    dag : ComputeDAG
        The computation (one fused function).
    target : TargetInfo
        Vector width and usable cores.

    Returns
    -------
    State or None
        The scheduled state, or ``None`` (no template claims the DAG's anchor tags, or the
        template does not take this DAG): use the default schedule.
    """
    template = template_for(dag)
    return template.fn(dag, target) if template is not None else None
