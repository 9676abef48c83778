"""``tvm.topi.nn`` hooks that relay-era tests call."""

from __future__ import annotations

from typing import Any

from kiln.errors import TopiUnsupportedError


def conv2d_alter_layout(attrs: Any, inputs: Any, tinfos: Any, out_type: Any) -> Any:
    """TVM's per-target conv2d layout-alteration hook: not available in Kiln.

    TVM picks an NCHWc/winograd layout from the current target's tuned schedules; Kiln's layout
    choice lives in its own passes (``ConvertLayout``), so there is nothing to dispatch to.

    Raises
    ------
    TopiUnsupportedError
        Always.
    """
    raise TopiUnsupportedError(
        "kiln.topi.nn.conv2d_alter_layout: Kiln has no per-target TOPI conv2d layout hooks "
        "(TVM's x86/arm_cpu NCHWc alteration); use relay.transform.ConvertLayout instead"
    )
