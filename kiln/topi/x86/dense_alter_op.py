"""``tvm.topi.x86.dense_alter_op``: TVM's x86 dense packing hook, not available in Kiln."""

from __future__ import annotations

from typing import Any

from kiln.errors import TopiUnsupportedError


def _alter_dense_layout(attrs: Any, inputs: Any, tinfos: Any, out_type: Any) -> Any:
    raise TopiUnsupportedError(
        "kiln.topi.x86.dense_alter_op._alter_dense_layout: Kiln has no x86 TOPI dense packing "
        "schedule (nn.contrib_dense_pack) to alter dense into"
    )
