"""Declaring external targets and the operators they take (TVM's ``relay.op.contrib.register``).

Scripts written for TVM declare a target's operators with
``tvm.ir.register_op_attr("nn.conv2d", "target.<name>")``; :func:`register_op_attr` is that
decorator. The registry itself lives in :mod:`kiln.transform.external_target`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.transform.external_target import (
    ExternalTargetError,
    external_targets,
    register_external_target,
    register_op_target,
    supported_ops,
)

__all__ = [
    "external_targets",
    "get_pattern_table",
    "register_external_target",
    "register_op_attr",
    "register_op_target",
    "register_pattern_table",
    "supported_ops",
]


def register_op_attr(op_name: str, attr_key: str, value: Any = None,
                     level: int = 10) -> Callable[[Any], Any] | None:
    """Declare that an external target takes an operator (TVM's ``register_op_attr``).

    Parameters
    ----------
    op_name : str
        The operator, e.g. ``"nn.conv2d"``.
    attr_key : str
        ``"target.<name>"``: the target that takes it. Other TVM operator attributes
        (strategies, layouts, ...) have no meaning in Kiln and are refused.
    value : callable or bool, optional
        ``value(call) -> bool`` deciding per call, or a constant; when omitted this is a
        decorator.
    level : int
        Accepted for TVM compatibility (priority of the registration).

    Returns
    -------
    callable or None
        The decorator when ``value`` is omitted.

    Examples
    --------
    >>> @register_op_attr("nn.relu", "target.my_npu")  # doctest: +SKIP
    ... def _relu(expr):
    ...     return True
    """
    if not attr_key.startswith("target.") or attr_key == "target.":
        raise ExternalTargetError(f"register_op_attr({op_name!r}, {attr_key!r}): Kiln only takes "
                                  "'target.<name>' attributes (which external target takes the op)")
    target = attr_key[len("target."):]
    if value is not None:
        register_op_target(op_name, target, value)
        return None

    def decorate(fn: Any) -> Any:
        register_op_target(op_name, target, fn)
        return fn

    return decorate


_PATTERN_TABLES: dict[str, Any] = {}


def register_pattern_table(compiler: str, table: Callable[[], Any] | None = None) -> Any:
    """Register the pattern table of an external compiler (TVM's ``register_pattern_table``).

    Parameters
    ----------
    compiler : str
        The external compiler (target) name.
    table : callable, optional
        A function returning the table (a list of ``(name, pattern[, check])``); when omitted
        this is a decorator.

    Returns
    -------
    callable
        ``table`` itself, or the decorator when ``table`` is omitted.
    """

    def _register(fn: Callable[[], Any]) -> Callable[[], Any]:
        _PATTERN_TABLES[compiler] = fn()
        return fn

    return _register(table) if table is not None else _register


def get_pattern_table(compiler: str) -> Any:
    """The pattern table registered for ``compiler``, or None (TVM's ``get_pattern_table``)."""
    return _PATTERN_TABLES.get(compiler)
