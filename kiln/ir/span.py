"""Source locations of IR nodes (TVM's ``tvm.ir.Span`` and ``tvm.ir.SourceName``).

A :class:`Span` names where a node came from: a source name (a file, a model, a frontend op) and
a line/column range. Spans are provenance only: structural equality ignores them, and the text
printer shows a call's span in its ``/* ... */`` comment as ``span=<source>:<line>:<column>``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SourceName", "Span"]


@dataclass(frozen=True, slots=True)
class SourceName:
    """The name of a source (a file name, ``"from_string"``, a frontend op name).

    Parameters
    ----------
    name : str
        The name.
    """

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Span:
    """A range of a source: ``line``/``column`` to ``end_line``/``end_column`` (1-based).

    Parameters
    ----------
    source_name : SourceName or str
        The source.
    line, end_line, column, end_column : int
        The range (TVM's argument order).
    """

    source_name: SourceName
    line: int
    end_line: int
    column: int
    end_column: int

    def __post_init__(self) -> None:
        if isinstance(self.source_name, str):
            object.__setattr__(self, "source_name", SourceName(self.source_name))

    def merge(self, other: Span) -> Span:
        """The smallest span covering ``self`` and ``other`` (same source)."""
        start = min((self.line, self.column), (other.line, other.column))
        end = max((self.end_line, self.end_column), (other.end_line, other.end_column))
        return Span(self.source_name, start[0], end[0], start[1], end[1])

    def __str__(self) -> str:
        return f"{self.source_name.name}:{self.line}:{self.column}"
