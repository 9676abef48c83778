"""``relay.op.annotation`` (also ``relay.annotation``): TVM's annotation operators.

``compiler_begin`` / ``compiler_end`` mark the edges of a region for an external compiler
(:mod:`kiln.transform.annotation`); ``stop_fusion`` is an identity that FuseOps never fuses across.
"""

from kiln.transform.annotation import compiler_begin, compiler_end, stop_fusion

__all__ = ["compiler_begin", "compiler_end", "stop_fusion"]
