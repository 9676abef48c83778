"""``tvm.testing.auto_scheduler``: workloads TVM's own auto-scheduler tests register.

Importing this module registers them, as importing TVM's does, so records written for them
(e.g. ``["matmul_auto_scheduler_test", 512, 512, 512]``) load and replay.
"""

from __future__ import annotations

from kiln import te

__all__ = ["matmul_auto_scheduler_test"]


@te.register_workload("matmul_auto_scheduler_test", override=True)
def matmul_auto_scheduler_test(N: int, M: int, K: int) -> list[te.Tensor]:
    """``C[i, j] = sum_k A[i, k] * B[k, j]`` with A ``(N, K)`` and B ``(K, M)``."""
    A = te.placeholder((N, K), name="A")
    B = te.placeholder((K, M), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), name="C",
                   attrs={"layout_free_placeholders": [B]})
    return [A, B, C]
