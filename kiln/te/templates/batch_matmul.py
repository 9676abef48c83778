"""Schedule template for ``nn.batch_matmul`` (attention's ``Q K^T`` and ``P V``).

A batched product ``C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]`` gets the register tiling of
:mod:`kiln.te.templates.dense`, with the batch axis fused outermost into the parallel loop, so
that each thread works through whole heads and a head's ``B`` (at most a few tens of kilobytes
for attention) stays in the first-level cache while its row tiles pass:

* untransposed ``B`` (``transpose_b=False``, what the ONNX frontend produces for ``MatMul``):
  broadcast-A tiles, ``B``'s rows read as vectors along ``j``; a column count that is not a
  multiple of the vector width (ViT's 197 tokens) leaves a bound-checked tail vector in the
  innermost loop, several times slower than whole vectors;
* transposed ``B`` (``transpose_b=True``, relay's default): dot-product tiles along ``k``, which
  sum the lanes of every output once (slow when ``K`` is a head size of 32 or 64).

:func:`~kiln.transform.alter_batch_matmul.AlterBatchMatmul` removes both slow cases before
fusion (``B`` transposed once, columns padded to whole vectors and sliced off after).

Element-wise stages that follow the product in the same fused function (the attention scale,
the mask bias) are applied to each tile before it is stored.
"""

from __future__ import annotations

from kiln.te.dag import ComputeDAG
from kiln.te.loop_state import State
from kiln.te.templates.dense import find_contraction, schedule_contraction
from kiln.te.templates.registry import TargetInfo, register_template

__all__ = ["BATCH_MATMUL_TAGS", "schedule_batch_matmul"]

BATCH_MATMUL_TAGS = ("batch_matmul",)


@register_template(*BATCH_MATMUL_TAGS)
def schedule_batch_matmul(dag: ComputeDAG, target: TargetInfo) -> State | None:
    """Template for ``nn.batch_matmul`` (tag ``batch_matmul``) and its fused epilogue.

    Parameters
    ----------
    dag : ComputeDAG
        One fused function.
    target : TargetInfo
        Vector width and usable cores.

    Returns
    -------
    State or None
        The register-tiled schedule, or None when the DAG has no batched product whose
        operands can be tiled.
    """
    c = find_contraction(dag, BATCH_MATMUL_TAGS)
    return schedule_contraction(dag, c, target) if c is not None else None
