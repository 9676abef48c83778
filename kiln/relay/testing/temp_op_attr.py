"""``relay.testing.temp_op_attr``: override an operator attribute for the length of a ``with``.

TVM's tests plug their own callbacks into an operator for one pass run::

    with TempOpAttr("nn.conv2d", "FTVMAlterOpLayout", alter_conv2d):
        mod = relay.transform.AlterOpLayout()(mod)

The attribute lives in the IR's operator attribute maps (:mod:`kiln.ir.op_table`, which
``relay.op.register_alter_op_layout`` and friends write); the previous value, or its absence, is
restored on exit.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from kiln.ir.op_table import get_op_attr, set_op_attr

__all__ = ["TempOpAttr"]


class TempOpAttr:
    """Temporarily set ``attr_key`` of operator ``op_name`` to ``attr_value``.

    Parameters
    ----------
    op_name : str
        The operator, e.g. ``"nn.conv2d"``.
    attr_key : str
        The attribute, e.g. ``"FTVMAlterOpLayout"``, ``"FTVMConvertOpLayout"``,
        ``"FInferCorrectLayout"``.
    attr_value : object
        The value while the context is entered (a callable for the hooks).

    Examples
    --------
    >>> with TempOpAttr("nn.relu", "FTVMAlterOpLayout", lambda *a: None):  # doctest: +SKIP
    ...     pass
    """

    def __init__(self, op_name: str, attr_key: str, attr_value: Any):
        self.op_name = op_name
        self.attr_key = attr_key
        self.attr_value = attr_value
        self._older: Any = None

    def __enter__(self) -> TempOpAttr:
        self._older = get_op_attr(self.op_name, self.attr_key)
        set_op_attr(self.op_name, self.attr_key, self.attr_value)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        set_op_attr(self.op_name, self.attr_key, self._older)  # None: no attribute (as before)
