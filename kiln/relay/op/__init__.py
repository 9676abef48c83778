"""``relay.op``: every operator builder, plus the registry (``relay.op.get``)."""

from kiln.ir.expr import Op
from kiln.op import *
from kiln.op.registry import OpPattern, get_op_def
from kiln.relay import image, nn, vision
from kiln.relay.op import contrib

__all__ = ["Op", "OpPattern", "contrib", "get", "get_op_def", "image", "nn", "vision"]


def get(name: str) -> Op:
    """The operator called ``name`` (``relay.op.get("nn.conv2d")``)."""
    return Op.get(name)
