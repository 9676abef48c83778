"""JSON text laid out exactly as dmlc's ``JSONWriter`` (TVM's graph JSON writer) lays it out.

Each object or array is written either on one line or one item per line, indented by 2 spaces
per level; items are separated by ``", "`` (so multi-line items end lines with a space); an empty
scope is ``[]`` / ``{}``; nothing follows the closing bracket. dmlc writes STL arrays of numbers
on one line up to 10 items and maps of more than one key on several lines; graph JSON's own
structures (nodes, entries, attributes) are always multi-line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["DmlcWriter", "escape"]


def escape(s: str) -> str:
    """``s`` as a JSON string literal, escaped as dmlc does (plus other control characters)."""
    out = []
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class DmlcWriter:
    """Builds text the way dmlc::JSONWriter does; callers open and close scopes explicitly.

    Examples
    --------
    >>> w = DmlcWriter()
    >>> w.begin("{", True); w.key("a"); w.int_list([1, 2]); w.end("}")
    >>> w.text()
    '{\\n  "a": [1, 2]\\n}'
    """

    def __init__(self) -> None:
        self.out: list[str] = []
        self.multi: list[bool] = []
        self.count: list[int] = []

    def _separator(self) -> None:
        if not self.multi or self.multi[-1]:
            self.out.append("\n" + "  " * len(self.multi))

    def begin(self, bracket: str, multi: bool) -> None:
        """Open an object (``{``) or array (``[``), on one line or one item per line."""
        self.out.append(bracket)
        self.multi.append(multi)
        self.count.append(0)

    def end(self, bracket: str) -> None:
        """Close the innermost scope with ``bracket``."""
        multi = self.multi.pop()
        n = self.count.pop()
        if multi and n:
            self._separator()
        self.out.append(bracket)

    def key(self, key: str) -> None:
        """Start the next member of the current object."""
        if self.count[-1]:
            self.out.append(", ")
        self._separator()
        self.out.append(escape(key) + ": ")
        self.count[-1] += 1

    def item(self) -> None:
        """Start the next item of the current array."""
        if self.count[-1]:
            self.out.append(", ")
        self.count[-1] += 1
        self._separator()

    def string(self, s: str) -> None:
        """Write a string value."""
        self.out.append(escape(s))

    def int_list(self, values: Iterable[int], multi: bool | None = None) -> None:
        """Write integers as an array: one line up to 10 items, unless ``multi`` says otherwise."""
        values = list(values)
        self.begin("[", len(values) > 10 if multi is None else multi)
        for v in values:
            self.item()
            self.out.append(str(int(v)))
        self.end("]")

    def value(self, v: Any) -> None:
        """Any JSON value, laid out the way dmlc lays out STL containers."""
        if isinstance(v, str):
            self.string(v)
        elif isinstance(v, Mapping):
            self.begin("{", len(v) > 1)
            for k, x in v.items():
                self.key(str(k))
                self.value(x)
            self.end("}")
        elif isinstance(v, (list, tuple)):
            scalar = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
            self.begin("[", len(v) > 10 or not scalar)
            for x in v:
                self.item()
                self.value(x)
            self.end("]")
        else:
            self.out.append(json.dumps(v))

    def text(self) -> str:
        """Everything written so far."""
        return "".join(self.out)
