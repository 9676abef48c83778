"""Workload registry: tuning tasks named by a registered function or by a DAG hash.

Ansor names a task by its *workload key*, a JSON string. For a function decorated with
:func:`register_workload` the key is ``["<function name>", arg, ...]`` and the function, called
with the args, returns the task's tensors. For a DAG extracted from a model the key is
``["<md5 of the DAG print>", [shape], ...]``; :func:`register_workload_tensors` stores those
tensors under the key so records can be replayed.

Example
-------
>>> @register_workload
... def matmul(n, m, k):
...     A = te.placeholder((n, k), name="A")
...     ...
...     return [A, B, C]
>>> key = make_workload_key(matmul, (512, 512, 512))
>>> tensors = workload_key_to_tensors(key)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from kiln.errors import TuningLogError
from kiln.te.tensor import Tensor

__all__ = [
    "WORKLOAD_FUNC_REGISTRY",
    "make_workload_key",
    "register_workload",
    "register_workload_tensors",
    "workload_key_to_dag",
    "workload_key_to_tensors",
]

# name -> function returning tensors, or workload key -> tensors
WORKLOAD_FUNC_REGISTRY: dict[str, Callable[..., Sequence[Tensor]] | list[Tensor]] = {}


def register_workload(func_name: str | Callable[..., Any], f: Callable[..., Any] | None = None,
                      override: bool = False) -> Any:
    """Register a function that builds a task's tensors (usable as a decorator).

    Parameters
    ----------
    func_name : str or callable
        The name to register under, or the function itself (registered by its ``__name__``).
    f : callable, optional
        The function, when ``func_name`` is a string and this is not used as a decorator.
    override : bool
        Allow replacing an existing registration.

    Returns
    -------
    callable
        The function (or a decorator when only a name is given).
    """
    if callable(func_name):
        f, name = func_name, func_name.__name__
    else:
        name = func_name

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        if name in WORKLOAD_FUNC_REGISTRY and not override:
            raise TuningLogError(f"workload {name!r} is already registered")
        WORKLOAD_FUNC_REGISTRY[name] = func
        return func

    if f is not None:
        return register(f)
    return register


def register_workload_tensors(workload_key: str, tensors: Sequence[Tensor],
                              override: bool = True) -> str:
    """Store the tensors of a DAG-hash workload so the key can be resolved later."""
    if workload_key in WORKLOAD_FUNC_REGISTRY and not override:
        raise TuningLogError(f"workload {workload_key!r} is already registered")
    WORKLOAD_FUNC_REGISTRY[workload_key] = list(tensors)
    return workload_key


def make_workload_key(func: str | Callable[..., Any], args: Sequence[Any]) -> str:
    """``'["name", arg, ...]'`` for a registered function and its arguments."""
    name = func if isinstance(func, str) else func.__name__
    if name not in WORKLOAD_FUNC_REGISTRY:
        raise TuningLogError(f"workload {name!r} is not registered; decorate it with "
                             "@register_workload")
    return json.dumps([name, *args])


def workload_key_to_tensors(workload_key: str) -> list[Tensor]:
    """The tensors a workload key stands for."""
    if workload_key in WORKLOAD_FUNC_REGISTRY:
        entry = WORKLOAD_FUNC_REGISTRY[workload_key]
        if isinstance(entry, list):
            return list(entry)
    try:
        parsed = json.loads(workload_key)
    except json.JSONDecodeError as err:
        raise TuningLogError(f"workload key {workload_key!r} is not JSON: {err}") from None
    if not isinstance(parsed, list) or not parsed or not isinstance(parsed[0], str):
        raise TuningLogError(f"workload key {workload_key!r} is not [name, args...]")
    name, args = parsed[0], parsed[1:]
    registered = WORKLOAD_FUNC_REGISTRY.get(name)
    if registered is None:
        raise TuningLogError(f"workload {name!r} (key {workload_key}) is not registered")
    if isinstance(registered, list):
        return list(registered)
    return list(registered(*args))


def workload_key_to_dag(workload_key: str) -> Any:
    """The :class:`~kiln.te.dag.ComputeDAG` of a workload key."""
    from kiln.te.dag import ComputeDAG

    return ComputeDAG(workload_key_to_tensors(workload_key))
