"""Schedule templates: hand-written Ansor step sequences for known compute patterns.

A template is a function ``(dag, target) -> State | None`` registered for the compute tags of
the reductions it schedules (``conv2d_NCHWc``, ``depthwise_conv2d_NCHWc``, ``pool_max``,
``dense_pack``, ...): given a :class:`~kiln.te.dag.ComputeDAG` with such a stage it returns a
scheduled :class:`~kiln.te.loop_state.State`, or ``None`` when the DAG is not of its exact shape. Because the
result is a list of ordinary Ansor steps, a templated schedule prints, serialises to a tuning
record and replays exactly like a tuned one.

:func:`~kiln.codegen.native.build_native` asks, for every fused function, first the tuning
records (``schedule_lookup``), then :func:`apply_template`, then falls back to
:func:`~kiln.te.default_schedule.default_schedule`.

Writing a template::

    from kiln.te.templates.registry import TargetInfo, register_template

    MY_TAGS = ("my_op",)

    @register_template(*MY_TAGS)
    def schedule_my_op(dag: ComputeDAG, target: TargetInfo) -> State | None:
        ...  # split / reorder / cache_write / compute_at / vectorize / parallel
        return state

and import the module below. A template claims the compute tags of the reduction stages it
schedules (:mod:`kiln.te.templates.registry`); :func:`apply_template` looks the tags of the DAG's
reductions up in that table and asks the one template claiming them all, which answers ``None``
when the DAG is not of its exact shape. A tag claimed twice is an error at registration, so the
choice depends neither on import nor on definition order.

What the C code generator does with a schedule (so that templates can count on it):

* a ``cache_write`` stage (``"local"`` scope) computed at a loop of its consumer, whose innermost
  loop is vectorized with the vector width, lives in vector-typed local variables (registers), not
  in memory; its other loops must be unrolled (constant indices) for that to happen;
* stages computed at the accumulator's consumer loop (epilogue: bias, activation, residual add)
  read those registers and store once;
* small intermediate buffers live on the stack, large ones are allocated once per call.
"""

from __future__ import annotations

# The templates; each registers the tags it schedules when imported.
from kiln.te.templates import (
    batch_matmul,
    conv2d,
    dense,
    depthwise,
    pool,
    reduction,
    winograd,
)
from kiln.te.templates.registry import (
    TargetInfo,
    Template,
    TemplateError,
    TemplateFn,
    anchor_tags,
    apply_template,
    register_template,
    template_for,
    templates,
)

__all__ = [
    "TargetInfo",
    "Template",
    "TemplateError",
    "TemplateFn",
    "anchor_tags",
    "apply_template",
    "batch_matmul",
    "conv2d",
    "dense",
    "depthwise",
    "pool",
    "reduction",
    "register_template",
    "template_for",
    "templates",
    "winograd",
]
