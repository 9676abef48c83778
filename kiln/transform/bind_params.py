"""Binding weights to a function's parameters by name (TVM's ``bind_params_by_name``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from kiln.errors import KilnTypeError
from kiln.ir.expr import Constant, Expr, Function, Var
from kiln.ir.printer import format_type
from kiln.ir.types import TensorType, as_dtype
from kiln.ir.visitor import rewrite

__all__ = ["bind_params_by_name"]


def _as_constant(var: Var, value: Any) -> Constant:
    if isinstance(value, Constant):
        const = value
    else:
        if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
            value = value.numpy()
        const = Constant(np.asarray(value))
    ty = var.type_annotation
    if isinstance(ty, TensorType):
        got = const.value
        if tuple(got.shape) != ty.shape or as_dtype(got.dtype) != ty.dtype:
            raise KilnTypeError(f"bind_params_by_name: param %{var.name_hint} is declared "
                                f"{format_type(ty)} but the value given has shape {got.shape} and "
                                f"dtype {as_dtype(got.dtype)}")
    return const


def bind_params_by_name(func: Function, params: Mapping[str, Any] | None) -> Function:
    """Replace the parameters of ``func`` named in ``params`` by constants.

    Parameters
    ----------
    func : Function
        The function (not modified).
    params : mapping of str to array-like
        Values by parameter name (NumPy arrays, NDArrays or Constants); names that are not
        parameters of ``func`` are ignored, as in TVM.

    Returns
    -------
    Function
        The function without the bound parameters, which are constants in its body.

    Raises
    ------
    KilnTypeError
        When two parameters share a bound name, or a value's shape or dtype differs from the
        parameter's declared type.

    Examples
    --------
    >>> main = bind_params_by_name(mod["main"], {"conv_weight": w})  # doctest: +SKIP
    """
    if not params:
        return func
    counts: dict[str, int] = {}
    for p in func.params:
        counts[p.name_hint] = counts.get(p.name_hint, 0) + 1
    memo: dict[int, Expr] = {}
    for p in func.params:
        if p.name_hint not in params:
            continue
        if counts[p.name_hint] > 1:
            raise KilnTypeError(f"bind_params_by_name: {counts[p.name_hint]} parameters are named "
                                f"{p.name_hint!r}; cannot bind by name")
        memo[id(p)] = _as_constant(p, params[p.name_hint])
    if not memo:
        return func
    body = rewrite(func.body, lambda new, old: None, memo=dict(memo))
    kept = [p for p in func.params if id(p) not in memo]
    return Function(kept, body, func.ret_type, attrs=func.attrs)
