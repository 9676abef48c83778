"""``relay.op.contrib.kiln_c``: Kiln's shipped external target (see
:mod:`kiln.codegen.external_kiln_c`, where it is defined with its C templates)."""

from __future__ import annotations

from kiln.codegen.external_kiln_c import TARGET, float32_only, kiln_c_op

__all__ = ["TARGET", "float32_only", "kiln_c_op"]
