"""``relay.backend.Runtime``: the runtime a build targets (TVM's ``Runtime(name, options)``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiln.errors import KilnError

__all__ = ["Runtime"]

_KNOWN = ("cpp", "crt")


class Runtime:
    """A runtime description: ``Runtime("cpp")`` or ``Runtime("crt", {"system-lib": True})``.

    Kiln has one runtime (ctypes-loaded C); ``relay.build`` accepts either name and records it.

    Parameters
    ----------
    name : str
        ``"cpp"`` or ``"crt"``.
    options : Mapping[str, Any], optional
        The runtime's options, kept as given.
    """

    def __init__(self, name: str = "cpp", options: Mapping[str, Any] | None = None):
        if name not in _KNOWN:
            raise KilnError(f"Runtime: unknown runtime {name!r} (TVM's are {', '.join(_KNOWN)})")
        self.name = name
        self.attrs: dict[str, Any] = dict(options or {})

    def __getitem__(self, key: str) -> Any:
        return self.attrs[key]

    def get(self, key: str, default: Any = None) -> Any:
        """The option ``key``, or ``default``."""
        return self.attrs.get(key, default)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Runtime) and other.name == self.name and other.attrs == self.attrs

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"Runtime({self.name!r}, {self.attrs!r})" if self.attrs else f"Runtime({self.name!r})"
