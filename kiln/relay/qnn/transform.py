"""``relay.qnn.transform``: ``CanonicalizeOps`` and ``Legalize`` lower ``qnn.*`` to plain ops."""

from __future__ import annotations

from kiln.transform.pass_infra import ModulePass
from kiln.transform.qnn_canonicalize import QnnCanonicalizeOps, QnnLegalize

__all__ = ["CanonicalizeOps", "Legalize"]


def CanonicalizeOps() -> ModulePass:
    """Lower every ``qnn.*`` call to plain operators (TVM's ``qnn.transform.CanonicalizeOps``)."""
    return QnnCanonicalizeOps()


def Legalize() -> ModulePass:
    """TVM's ``qnn.transform.Legalize``: the same lowering (no target-specific rewrites)."""
    return QnnLegalize()
