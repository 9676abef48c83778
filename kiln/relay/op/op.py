"""``relay.op.op``: TVM's operator-registry module (``from tvm.relay.op import op as reg``).

Kiln's operators are registered in Python (:mod:`kiln.op.registry`): ``get``, ``OpPattern`` and
``register_op_attr`` (external targets) work as TVM's, and so do the layout hooks the layout passes
call (``register_alter_op_layout``, ``register_convert_op_layout``,
``register_infer_correct_layout``). ``register`` declares an operator with a type relation but no
kernel (for type checking and partitioning), with ``register_pattern`` and ``register_stateful``.
TVM's other hooks that plug C++-side callbacks into an operator (compute, strategy, ...) have no
counterpart: calling one raises a :class:`~kiln.errors.KilnError`
naming the hook, so a script imports and only the use fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.errors import KilnError
from kiln.ir.expr import Op
from kiln.ir.op_table import set_op_attr
from kiln.op.registry import OpPattern, get_op_def, register_python_op
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
    "register_stateful",
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


def register(op_name: str, describe: str = "") -> Op:
    """Declare an operator from Python (TVM's ``reg.register``): give it arguments and a type
    relation with ``get(op_name).set_num_inputs(...)``, ``.add_type_rel(...)``; it type-checks
    and can be partitioned, but has no kernel (:func:`kiln.op.registry.register_python_op`)."""
    register_python_op(op_name, describe)
    return Op.get(op_name)


def register_pattern(op_name: str, pattern: int, level: int = 10) -> None:
    """Set the operator's fusion pattern (``OpPattern``)."""
    get_op_def(op_name).pattern = OpPattern(int(pattern))


def register_stateful(op_name: str, stateful: bool, level: int = 10) -> None:
    """Mark the operator stateful (never folded or deduplicated) or not."""
    get_op_def(op_name).stateful = bool(stateful)


register_compute = _unsupported("register_compute")
register_strategy = _unsupported("register_strategy")


def _hook_registrar(attr_key: str, what: str) -> Callable[..., Any]:
    """A TVM ``register_<what>(op_name, fn=None, level=10)``: sets the operator's ``attr_key``
    (:func:`kiln.ir.op_table.set_op_attr`), which the layout passes call; a decorator when ``fn``
    is omitted."""

    def register_hook(op_name: str, fn: Callable[..., Any] | None = None, level: int = 10) -> Any:
        def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
            set_op_attr(op_name, attr_key, f)
            return f

        return decorate(fn) if fn is not None else decorate

    register_hook.__name__ = register_hook.__qualname__ = f"register_{what}"
    register_hook.__doc__ = (f"TVM's ``register_{what}(op_name, fn=None, level=10)``: sets the "
                             f"operator's ``{attr_key}`` hook (a decorator without ``fn``).")
    return register_hook


register_alter_op_layout = _hook_registrar("FTVMAlterOpLayout", "alter_op_layout")
register_convert_op_layout = _hook_registrar("FTVMConvertOpLayout", "convert_op_layout")
register_infer_correct_layout = _hook_registrar("FInferCorrectLayout", "infer_correct_layout")
register_legalize = _unsupported("register_legalize")
