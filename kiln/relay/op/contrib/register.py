"""Declaring external targets and the operators they take (TVM's ``relay.op.contrib.register``).

Scripts written for TVM declare a target's operators with
``tvm.ir.register_op_attr("nn.conv2d", "target.<name>")``; :func:`register_op_attr` is that
decorator (:mod:`kiln.ir.op_table`, re-exported). The targets are declared in
:mod:`kiln.transform.external_target`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.ir.op_table import register_op_attr
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
