"""External targets (``relay.op.contrib``): which operators each external compiler takes.

- :func:`register_external_target`, :func:`register_op_attr`: declare a target and its operators;
- :mod:`~kiln.relay.op.contrib.kiln_c`: Kiln's shipped target ``kiln_c`` (and ``ccompiler``),
  whose partitioned regions are compiled to C as a separate library (defined by the compiler,
  :mod:`kiln.codegen.external_kiln_c`; re-exported here);
- TVM's targets Kiln does not have (``dnnl``, ``tensorrt``, ...) fail to import with a clear
  "not available" error.
"""

from __future__ import annotations

from typing import Any

from kiln.relay.op.contrib import kiln_c, register
from kiln.relay.op.contrib.register import (
    external_targets,
    register_external_target,
    register_op_attr,
    register_op_target,
    supported_ops,
)
from kiln.transform.external_target import UNAVAILABLE_TARGETS, ExternalTargetUnavailable

__all__ = [
    "external_targets",
    "kiln_c",
    "register",
    "register_external_target",
    "register_op_attr",
    "register_op_target",
    "supported_ops",
]


# TVM's module names of targets whose Compiler name differs
_MODULE_TARGETS = {"ethosn": "ethos-n", "ethosu": "ethos-u", "cmsisnn": "cmsis-nn"}


def __getattr__(name: str) -> Any:
    # ``from tvm.relay.op.contrib import dnnl``: a clear error instead of a missing module
    target = _MODULE_TARGETS.get(name, name)
    if target in UNAVAILABLE_TARGETS:
        raise ExternalTargetUnavailable(
            f"relay.op.contrib.{name}: external target {target!r} is not available in Kiln "
            f"({UNAVAILABLE_TARGETS[target]}); Kiln's external targets: "
            f"{', '.join(external_targets())}")
    raise AttributeError(f"module 'kiln.relay.op.contrib' has no attribute {name!r}")
