"""``relay.backend.Runtime``: the runtime a build targets (TVM's ``Runtime(name, options)``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiln.relay.backend.executor import Description

__all__ = ["Runtime"]


class Runtime(Description):
    """A runtime description: ``Runtime("cpp")`` or ``Runtime("crt", {"system-lib": True})``.

    Kiln has one runtime (ctypes-loaded C); ``relay.build`` accepts either name and records it.
    """

    known = ("cpp", "crt")

    def __init__(self, name: str = "cpp", options: Mapping[str, Any] | None = None):
        super().__init__(name, options)
