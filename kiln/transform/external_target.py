"""The registry of external targets: which operators each external compiler takes.

An external target (TVM's "BYOC" compiler) is a name such as ``"kiln_c"``. Which calls it takes
is declared per operator, as TVM does with ``tvm.ir.register_op_attr(op, "target.<name>")``: a
predicate ``f(call) -> bool`` stored on the operator's registry entry under ``target.<name>``, so
it can check attributes, shapes and dtypes. A target may also give one predicate for every
operator. ``AnnotateTarget`` consults this registry; :mod:`kiln.codegen.external` compiles what
was partitioned.

The predicates live in the IR's operator attribute maps (:mod:`kiln.ir.op_table`). Kiln's own
target ``kiln_c`` is declared with its C templates by :mod:`kiln.codegen.external_kiln_c`, which
``import kiln`` loads.
TVM targets that Kiln does not have (``"dnnl"``, ``"tensorrt"``, ...) are known by name, so asking
for them fails with a clear "not available" error instead of partitioning nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kiln.errors import ExternalTargetError
from kiln.ir import op_table
from kiln.ir.expr import Call, Op

__all__ = [
    "UNAVAILABLE_TARGETS",
    "ExternalTarget",
    "ExternalTargetError",
    "ExternalTargetUnavailable",
    "check_targets",
    "external_targets",
    "get_external_target",
    "op_supported",
    "register_external_target",
    "register_op_target",
    "supported_ops",
]

Predicate = Callable[..., bool]


class ExternalTargetUnavailable(ExternalTargetError, ImportError):
    """A TVM external target Kiln does not have (``dnnl``, ``tensorrt``, ...)."""


# TVM's external codegens that Kiln does not ship, and what each needs.
UNAVAILABLE_TARGETS: dict[str, str] = {
    "dnnl": "TVM's oneDNN (DNNL) codegen; it needs TVM's C++ runtime built with oneDNN",
    "tensorrt": "TVM's TensorRT codegen; it needs NVIDIA TensorRT and a GPU",
    "cutlass": "TVM's CUTLASS codegen; it needs CUDA and a GPU",
    "cublas": "TVM's cuBLAS codegen; it needs CUDA and a GPU",
    "cudnn": "TVM's cuDNN codegen; it needs CUDA and a GPU",
    "arm_compute_lib": "TVM's Arm Compute Library codegen; it needs an Arm device and ACL",
    "ethos-n": "TVM's Arm Ethos-N NPU codegen; it needs the Ethos-N driver stack",
    "ethos-u": "TVM's Arm Ethos-U microNPU codegen; it needs Vela and an Ethos-U",
    "cmsis-nn": "TVM's CMSIS-NN codegen for Cortex-M microcontrollers",
    "vitis_ai": "TVM's Vitis AI codegen; it needs Xilinx Vitis AI and a DPU",
    "bnns": "TVM's Apple BNNS codegen; it needs macOS",
    "coremlcompiler": "TVM's Core ML codegen; it needs macOS",
    "clml": "TVM's OpenCL ML codegen; it needs a Qualcomm Adreno GPU",
    "libtorch": "TVM's libtorch codegen; it needs PyTorch's C++ library",
    "mrvl": "TVM's Marvell ML codegen; it needs the Marvell toolchain",
    "tidl": "TVM's TI Deep Learning codegen; it needs TI's TIDL tools",
}


@dataclass(frozen=True)
class ExternalTarget:
    """An external compiler known to Kiln.

    Attributes
    ----------
    name : str
        The target (``Compiler`` attribute) name.
    description : str
        One line saying what it is.
    predicate : callable or None
        ``predicate(call) -> bool`` for operators without their own ``target.<name>`` rule.
    """

    name: str
    description: str = ""
    predicate: Predicate | None = None


_TARGETS: dict[str, ExternalTarget] = {}


def register_external_target(name: str, predicate: Predicate | None = None, *,
                             description: str = "", override: bool = False) -> ExternalTarget:
    """Declare an external target.

    Parameters
    ----------
    name : str
        The target name (the ``Compiler`` attribute of its partitioned functions).
    predicate : callable, optional
        ``predicate(call) -> bool`` deciding for any operator call without its own
        ``target.<name>`` rule (see :func:`register_op_target`).
    description : str
        One line saying what the target is.
    override : bool
        Replace an existing declaration instead of failing.

    Returns
    -------
    ExternalTarget
        The declaration.

    Raises
    ------
    ExternalTargetError
        ``name`` is already declared (and ``override`` is False).
    """
    if name in _TARGETS and not override:
        raise ExternalTargetError(f"external target {name!r} is already registered")
    target = ExternalTarget(name, description, predicate)
    _TARGETS[name] = target
    return target


def register_op_target(op_name: str, target: str, predicate: Predicate | bool = True) -> None:
    """Declare that ``target`` takes calls of ``op_name`` when ``predicate(call)`` holds.

    This is TVM's ``register_op_attr(op_name, "target.<target>", predicate)``.

    Parameters
    ----------
    op_name : str
        The operator, e.g. ``"nn.conv2d"``.
    target : str
        The external target name.
    predicate : callable or bool
        ``predicate(call) -> bool`` (TVM's older ``predicate(attrs, args)`` also works), or a
        constant.
    """
    op_table.set_op_attr(op_name, f"target.{target}", predicate)


def _call_predicate(predicate: Predicate | bool, call: Call) -> bool:
    if isinstance(predicate, bool):
        return predicate
    try:
        arity = len(inspect.signature(predicate).parameters)
    except (TypeError, ValueError):
        arity = 1
    if arity == 2:  # TVM's older FTVMAnnotateTarget(attrs, args)
        return bool(predicate(call.attrs, list(call.args)))
    return bool(predicate(call))


def op_supported(call: Call, target: str) -> bool:
    """Whether ``target`` takes the operator call ``call``."""
    assert isinstance(call.op, Op)
    rule = op_table.get_op_attr(call.op.name, f"target.{target}")
    if rule is not None:
        return _call_predicate(rule, call)
    declared = get_external_target(target)
    if declared is not None and declared.predicate is not None:
        return _call_predicate(declared.predicate, call)
    return False


def supported_ops(target: str) -> list[str]:
    """Operators with a ``target.<target>`` rule, sorted by name."""
    return sorted(op_table.op_attr_map(f"target.{target}"))


def get_external_target(name: str) -> ExternalTarget | None:
    """The declaration of ``name``, or None."""
    return _TARGETS.get(name)


def external_targets() -> dict[str, ExternalTarget]:
    """Every declared external target, by name."""
    return dict(_TARGETS)


def _describe_known() -> str:
    known = [f"{t.name} ({t.description})" if t.description else t.name
             for t in external_targets().values()]
    return ", ".join(known) or "none"


def check_targets(targets: Any, where: str) -> list[str]:
    """Validate target names for ``where`` (a pass name); returns them as a list.

    A name is usable when it is declared with :func:`register_external_target` or some operator
    has a ``target.<name>`` rule.

    Raises
    ------
    ExternalTargetUnavailable
        A name is one of TVM's targets Kiln does not have.
    ExternalTargetError
        A name is unknown.
    """
    names = [targets] if isinstance(targets, str) else [str(t) for t in targets]
    if not names:
        raise ExternalTargetError(f"{where}: no target given; Kiln's external targets: "
                                  f"{_describe_known()}")
    for name in names:
        if get_external_target(name) is not None or supported_ops(name):
            continue
        if name in UNAVAILABLE_TARGETS:
            raise ExternalTargetUnavailable(
                f"{where}: external target {name!r} is not available in Kiln ("
                f"{UNAVAILABLE_TARGETS[name]}). Kiln's external targets: {_describe_known()}")
        raise ExternalTargetError(
            f"{where}: unknown external target {name!r}: no operator declares a 'target.{name}' "
            f"rule. Register one with kiln.relay.op.contrib.register_op_attr(op, "
            f"'target.{name}') or use one of Kiln's external targets: {_describe_known()}")
    return names
