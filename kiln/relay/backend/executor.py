"""``relay.backend.Executor``: which executor a build targets (TVM's ``Executor(name, options)``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from kiln.errors import KilnError

__all__ = ["Executor"]


class Description:
    """A named build component with options (the common part of ``Executor`` and ``Runtime``).

    Parameters
    ----------
    name : str
        One of the subclass's ``known`` names.
    options : Mapping[str, Any], optional
        The component's options, kept as given.
    """

    known: ClassVar[tuple[str, ...]] = ()

    def __init__(self, name: str, options: Mapping[str, Any] | None = None):
        kind = type(self).__name__
        if name not in self.known:
            raise KilnError(f"{kind}: unknown {kind.lower()} {name!r} (TVM's are "
                            f"{', '.join(self.known)})")
        self.name = name
        self.attrs: dict[str, Any] = dict(options or {})

    def __getitem__(self, key: str) -> Any:
        return self.attrs[key]

    def get(self, key: str, default: Any = None) -> Any:
        """The option ``key``, or ``default``."""
        return self.attrs.get(key, default)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.name == self.name and other.attrs == self.attrs

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        kind = type(self).__name__
        return f"{kind}({self.name!r}, {self.attrs!r})" if self.attrs else f"{kind}({self.name!r})"


class Executor(Description):
    """An executor description: ``Executor("graph")`` or ``Executor("aot", {"link-params": True})``.

    ``"graph"`` is what Kiln builds for; ``"aot"`` and ``"vm"`` are TVM's (``relay.build`` raises).
    """

    known = ("graph", "aot", "vm")

    def __init__(self, name: str = "graph", options: Mapping[str, Any] | None = None):
        super().__init__(name, options)
