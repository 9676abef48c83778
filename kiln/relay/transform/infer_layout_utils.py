"""``relay.transform.infer_layout_utils``: what an ``FInferCorrectLayout`` hook returns.

A hook registered with ``relay.op.register_infer_correct_layout(op_name)`` is called as
``hook(attrs, new_in_layouts, old_in_layouts, old_in_types)`` and returns an
:class:`InferCorrectLayoutOutput`: the layouts the operator wants for its inputs, the layouts of
its outputs, and its (possibly updated) attributes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["InferCorrectLayoutOutput"]


class InferCorrectLayoutOutput:
    """Result of layout inference for one call (TVM's ``InferCorrectLayoutOutput``).

    Parameters
    ----------
    input_layouts : sequence
        Layout the operator wants for each input (layout strings or layout objects).
    output_layouts : sequence
        Layout of each output.
    new_attrs : Attrs
        The call's attributes in the new layouts.
    """

    def __init__(self, input_layouts: Sequence[Any], output_layouts: Sequence[Any], new_attrs: Any):
        self.input_layouts = [str(x) for x in input_layouts]
        self.output_layouts = [str(x) for x in output_layouts]
        self.new_attrs = new_attrs

    def __repr__(self) -> str:
        return (f"InferCorrectLayoutOutput(input_layouts={self.input_layouts}, "
                f"output_layouts={self.output_layouts})")
