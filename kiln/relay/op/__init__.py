"""``relay.op``: every operator builder, plus the registry (``relay.op.get``)."""

from kiln.ir.expr import Op
from kiln.op import *
from kiln.op.registry import OpPattern, get_op_def
from kiln.relay import image, nn, vision
from kiln.relay.op import _make, annotation, contrib, op
from kiln.relay.op.op import (
    register_alter_op_layout,
    register_compute,
    register_convert_op_layout,
    register_legalize,
    register_pattern,
    register_strategy,
)

__all__ = ["Op", "OpPattern", "annotation", "contrib", "get", "get_op_def", "image", "nn", "op",
           "register_alter_op_layout", "register_compute", "register_convert_op_layout",
           "register_legalize", "register_pattern", "register_strategy", "vision"]


def get(name: str) -> Op:
    """The operator called ``name`` (``relay.op.get("nn.conv2d")``)."""
    return Op.get(name)
