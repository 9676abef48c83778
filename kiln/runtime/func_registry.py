"""Global functions registered by name (TVM's ``tvm.register_func`` / ``get_global_func``).

Kiln has no FFI, but some hooks are looked up by name as in TVM: an external compiler's
``relay.ext.<compiler>.optimize`` runs on each function PartitionGraph outlines for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.errors import KilnError

__all__ = ["get_registered_func", "list_registered_funcs", "register_func", "remove_func"]

_FUNCS: dict[str, Callable[..., Any]] = {}


def register_func(func_name: str | Callable[..., Any], f: Callable[..., Any] | None = None,
                  override: bool = False) -> Any:
    """Register ``f`` under ``func_name`` (a decorator when ``f`` is omitted).

    Parameters
    ----------
    func_name : str or callable
        The name; a function registers under its own ``__name__``.
    f : callable, optional
        The function.
    override : bool
        Replace an existing registration instead of raising.
    """
    if callable(func_name):
        return register_func(func_name.__name__, func_name, override)
    name = str(func_name)

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in _FUNCS and not override:
            raise KilnError(f"global function {name!r} is already registered (pass override=True)")
        _FUNCS[name] = fn
        return fn

    return register(f) if f is not None else register


def get_registered_func(name: str) -> Callable[..., Any] | None:
    """The function registered as ``name``, or None."""
    return _FUNCS.get(name)


def remove_func(name: str) -> None:
    """Forget the registration of ``name`` (if any)."""
    _FUNCS.pop(name, None)


def list_registered_funcs() -> list[str]:
    """Names of the registered functions, sorted."""
    return sorted(_FUNCS)
