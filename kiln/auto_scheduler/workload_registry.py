"""Workload registry (TVM's ``tvm.auto_scheduler.workload_registry``).

A task is named by its *workload key*: ``["<registered function>", args...]`` or
``["<md5 of the DAG print>", [shape], ...]`` (a JSON string). The registry itself lives at the te
layer (:mod:`kiln.te.workload`); this module re-exports it with TVM's names and adds TVM's key
helpers :func:`decode_workload_key` and :func:`calc_workload_dis_factor`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from kiln.te.workload import (
    WORKLOAD_FUNC_REGISTRY,
    make_workload_key,
    register_workload,
    register_workload_tensors,
    workload_key_to_dag,
    workload_key_to_tensors,
)

__all__ = [
    "WORKLOAD_FUNC_REGISTRY",
    "calc_workload_dis_factor",
    "decode_workload_key",
    "is_registered",
    "make_workload_key",
    "register_workload",
    "register_workload_tensors",
    "workload_key_to_dag",
    "workload_key_to_tensors",
]


def decode_workload_key(workload_key: str) -> tuple[str, tuple[Any, ...] | None]:
    """The name (function name or DAG hash) and flattened arguments of a workload key.

    Parameters
    ----------
    workload_key : str
        ``'["name", args...]'``.

    Returns
    -------
    (str, tuple or None)
        The name and the arguments with nested lists flattened; ``(workload_key, None)`` when
        the key is not a JSON list.
    """
    def flatten(items: list[Any]) -> list[Any]:
        out: list[Any] = []
        for item in items:
            out += flatten(item) if isinstance(item, list) else [item]
        return out

    try:
        parsed = json.loads(workload_key)
    except (json.JSONDecodeError, TypeError):
        return workload_key, None
    if isinstance(parsed, list) and parsed:
        return parsed[0], tuple(flatten(parsed[1:]))
    return workload_key, None


def calc_workload_dis_factor(target: tuple[str, tuple[Any, ...] | None],
                             candidate: tuple[str, tuple[Any, ...] | None]) -> float:
    """How far a candidate workload is from a target workload (TVM's rule).

    ``inf`` when they are different functions or DAGs (or any non-integer argument differs, or a
    target integer argument is not a multiple of the candidate's); otherwise the product of
    ``target_arg / candidate_arg`` over the integer arguments, so 1 means identical.

    Parameters
    ----------
    target, candidate : (str, tuple or None)
        Pairs from :func:`decode_workload_key`.

    Returns
    -------
    float
        The distance factor.
    """
    target_key, target_args = target[0], list(target[1] or [])
    key, args = candidate[0], list(candidate[1] or [])
    if key != target_key or len(target_args) != len(args):
        return math.inf
    factor = 1.0
    for t_arg, arg in zip(target_args, args):
        if isinstance(t_arg, int) and not isinstance(t_arg, bool):
            if t_arg == 0 or arg == 0:
                if t_arg != arg:
                    return math.inf
            elif not isinstance(arg, int) or t_arg % arg != 0:
                return math.inf
            else:
                factor *= t_arg / arg
        elif t_arg != arg:
            return math.inf
    return factor


def is_registered(workload_key: str) -> bool:
    """Whether the tensors of ``workload_key`` can be found (by its key or its function name)."""
    if workload_key in WORKLOAD_FUNC_REGISTRY:
        return True
    name, _ = decode_workload_key(workload_key)
    return isinstance(name, str) and name in WORKLOAD_FUNC_REGISTRY \
        and not isinstance(WORKLOAD_FUNC_REGISTRY[name], list)
