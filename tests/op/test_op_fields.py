"""Per-operator facts declared on ``OpDef`` (not restated in pass-local name tables).

Oracle: TVM's ``TReshapeOp`` registrations (src/relay/op/tensor/transform.cc: ``reshape``,
``expand_dims``, ``squeeze``, ``contrib_reverse_reshape``; ``nn.batch_flatten`` in nn.cc).
"""

from __future__ import annotations

from kiln.op.registry import all_ops
from kiln.transform.fuse_ops import RESHAPE_OPS as FUSE_RESHAPE_OPS
from kiln.transform.simplify_expr import RESHAPE_OPS


def test_reshape_only_ops_are_declared_on_the_registry() -> None:
    declared = {name for name, op in all_ops().items() if op.reshape_only}
    assert declared == {"reshape", "expand_dims", "squeeze", "nn.batch_flatten",
                        "contrib_reverse_reshape"}
    assert declared == RESHAPE_OPS and FUSE_RESHAPE_OPS is RESHAPE_OPS
