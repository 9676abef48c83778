"""``relay.backend.Executor``: which executor a build targets (TVM's ``Executor(name, options)``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiln.errors import KilnError

__all__ = ["Executor"]

_KNOWN = ("graph", "aot", "vm")


class Executor:
    """An executor description: ``Executor("graph")`` or ``Executor("aot", {"link-params": True})``.

    Parameters
    ----------
    name : str
        ``"graph"`` (what Kiln builds for), ``"aot"`` or ``"vm"`` (TVM's; ``relay.build`` raises).
    options : Mapping[str, Any], optional
        The executor's options, kept as given.
    """

    def __init__(self, name: str = "graph", options: Mapping[str, Any] | None = None):
        if name not in _KNOWN:
            raise KilnError(f"Executor: unknown executor {name!r} (TVM's are {', '.join(_KNOWN)})")
        self.name = name
        self.attrs: dict[str, Any] = dict(options or {})

    def __getitem__(self, key: str) -> Any:
        return self.attrs[key]

    def get(self, key: str, default: Any = None) -> Any:
        """The option ``key``, or ``default``."""
        return self.attrs.get(key, default)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Executor) and other.name == self.name
                and other.attrs == self.attrs)

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"Executor({self.name!r}, {self.attrs!r})" if self.attrs else f"Executor({self.name!r})"
