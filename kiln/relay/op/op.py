"""``relay.op.op``: TVM's operator-registry module (``from tvm.relay.op import op as reg``).

Kiln's operators are registered in Python (:mod:`kiln.op.registry`): ``get``, ``OpPattern`` and
``register_op_attr`` (external targets) work as TVM's. TVM's hooks that plug C++-side callbacks
into an operator (compute, strategy, layout inference, ...) have no counterpart: calling one raises
a :class:`~kiln.errors.KilnError` naming the hook, so a script imports and only the use fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.errors import KilnError
from kiln.ir.expr import Op
from kiln.op.registry import OpPattern
from kiln.relay.op.contrib.register import register_op_attr

__all__ = [
    "OpPattern",
    "get",
    "register",
    "register_alter_op_layout",
    "register_compute",
    "register_convert_op_layout",
    "register_infer_correct_layout",
    "register_legalize",
    "register_op_attr",
    "register_pattern",
    "register_strategy",
]


def get(op_name: str) -> Op:
    """The operator called ``op_name`` (``reg.get("nn.conv2d")``)."""
    return Op.get(op_name)


def _unsupported(hook: str) -> Callable[..., Any]:
    def hook_fn(op_name: str, *args: Any, **kwargs: Any) -> Any:
        raise KilnError(f"relay.op.op.{hook}({op_name!r}): Kiln's operators are defined in Python "
                        "(kiln.op.registry.register_op); TVM's per-op hooks are not supported")

    hook_fn.__name__ = hook_fn.__qualname__ = hook
    hook_fn.__doc__ = f"TVM's ``{hook}``: raises :class:`~kiln.errors.KilnError` (no counterpart)."
    return hook_fn


register = _unsupported("register")
register_pattern = _unsupported("register_pattern")
register_compute = _unsupported("register_compute")
register_strategy = _unsupported("register_strategy")
register_alter_op_layout = _unsupported("register_alter_op_layout")
register_convert_op_layout = _unsupported("register_convert_op_layout")
register_infer_correct_layout = _unsupported("register_infer_correct_layout")
register_legalize = _unsupported("register_legalize")
