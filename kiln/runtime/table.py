"""Plain-text tables that fit a width: long names are shortened in the middle, numbers never.

Used by the command-line tables (``kiln debug``, ``kiln inspect``). A column either keeps its
natural width (numbers, counts) or may shrink down to a minimum; when the table is wider than the
target width, the widest shrinkable column of the lowest tier gives up one character at a time
until the table fits. A shortened cell keeps its start and its end around ``...``; kernel names
first drop their ``tvmgen_<module>_`` prefix, which every kernel shares.

Examples
--------
>>> cols = [Column("Name", shrink=1, min_width=8, shortener=shorten_kernel),
...         Column("Time(us)", align=">")]
>>> print(format_table(cols, [["tvmgen_default_fused_nn_conv2d_add_nn_relu", "12.500"]], 30))
Name                  Time(us)
--------------------  --------
fused_...add_nn_relu    12.500
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_WIDTH",
    "ELLIPSIS",
    "Column",
    "format_table",
    "kernel_differs",
    "shorten",
    "shorten_kernel",
    "strip_kernel_prefix",
    "terminal_width",
]

DEFAULT_WIDTH = 100
"""Width used when the output is not a terminal (piped, redirected) and ``COLUMNS`` is unset."""

ELLIPSIS = "..."
_KERNEL_PREFIX = re.compile(r"tvmgen_.*?_(?=fused_)")


def terminal_width(default: int = DEFAULT_WIDTH) -> int:
    """Columns of the terminal (``COLUMNS`` first, as :func:`shutil.get_terminal_size` reads it).

    Parameters
    ----------
    default : int
        Width when standard output is not a terminal.

    Returns
    -------
    int
        The width in characters.
    """
    return shutil.get_terminal_size((default, 24)).columns


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters by replacing its middle with ``...``.

    The end keeps a little more than the start: kernel and layer names differ most at their end
    (``..._add_nn_relu_3``, ``.../conv2/Relu``).

    Parameters
    ----------
    text : str
        The text.
    width : int
        The most characters allowed.

    Returns
    -------
    str
        ``text`` itself when it fits.
    """
    if len(text) <= width:
        return text
    if width <= len(ELLIPSIS):
        return text[:max(width, 0)]
    room = width - len(ELLIPSIS)
    head = room * 2 // 5
    return text[:head] + ELLIPSIS + text[len(text) - (room - head):]


def strip_kernel_prefix(name: str) -> str:
    """``name`` without the ``tvmgen_<module>_`` prefix every kernel shares (``fused_...``)."""
    return _KERNEL_PREFIX.sub("", name, count=1)


def shorten_kernel(name: str, width: int) -> str:
    """A kernel (or kernel node) name cut to ``width``: the ``tvmgen_<module>_`` prefix goes first.

    Parameters
    ----------
    name : str
        E.g. ``tvmgen_default_fused_nn_conv2d_add_nn_relu_1``.
    width : int
        The most characters allowed.

    Returns
    -------
    str
        ``name`` itself when it fits.
    """
    if len(name) <= width:
        return name
    return shorten(strip_kernel_prefix(name), width)


def kernel_differs(node_name: str, kernel: str) -> bool:
    """Whether a node's kernel is more than its name says (names are ``<kernel>`` or ``<kernel>_N``).

    Parameters
    ----------
    node_name : str
        The graph node's name.
    kernel : str
        Its ``func_name`` (``__nop`` for aliasing reshapes, which their name already says).

    Returns
    -------
    bool
        True when a table must show the kernel beside the node name.
    """
    if kernel in ("", "__nop", "null", "param", node_name):
        return False
    return not (node_name.startswith(kernel + "_") and node_name[len(kernel) + 1:].isdigit())


@dataclass(frozen=True)
class Column:
    """One column of a :func:`format_table` table.

    Parameters
    ----------
    header : str
        The title.
    align : str
        ``"<"`` (text) or ``">"`` (numbers).
    shrink : int
        0: never shortened; otherwise the tier in which it gives up width (1 first, then 2, ...).
    min_width : int
        Narrowest width when shrinking.
    soft_width : int, optional
        Width this column keeps until the columns of every tier are at their own soft width
        (default: ``min_width``); lets names stay readable while other columns give way.
    shortener : callable, optional
        ``(text, width) -> text`` used to fit a cell (default :func:`shorten`).
    """

    header: str
    align: str = "<"
    shrink: int = 0
    min_width: int = 6
    soft_width: int | None = None
    shortener: Callable[[str, int], str] | None = None


def _fit_widths(columns: Sequence[Column], natural: list[int], width: int, gap: int) -> list[int]:
    widths = list(natural)
    excess = sum(widths) + gap * (len(widths) - 1) - width
    tiers = sorted({c.shrink for c in columns if c.shrink > 0})
    floors = ([max(c.min_width, c.soft_width or 0) for c in columns],  # first every soft width
              [c.min_width for c in columns])                          # then every hard one
    for floor in floors:
        for tier in tiers:
            members = [i for i, c in enumerate(columns) if c.shrink == tier]
            while excess > 0:
                room = [i for i in members if widths[i] > floor[i]]
                if not room:
                    break
                widest = max(room, key=lambda i: widths[i])
                widths[widest] -= 1
                excess -= 1
    return widths


def format_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None,
                 gap: int = 2) -> str:
    """Lay out ``rows`` under ``columns``, shortening shrinkable cells to fit ``width``.

    Parameters
    ----------
    columns : sequence of Column
        The columns.
    rows : sequence of sequence of str
        The cells, one list per row.
    width : int or None
        Total width to fit; None or 0 for no limit. Lines may still exceed it when every
        shrinkable column is at its minimum.
    gap : int
        Spaces between columns.

    Returns
    -------
    str
        Header, a rule of dashes, then the rows; no trailing spaces, no trailing newline.
    """
    natural = [max([len(c.header)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    widths = _fit_widths(columns, natural, width, gap) if width else natural

    def cell(text: str, i: int) -> str:
        w, col = widths[i], columns[i]
        if len(text) > w:
            text = (col.shortener or shorten)(text, w)
        return text.rjust(w) if col.align == ">" else text.ljust(w)

    def line(cells: Sequence[str]) -> str:
        return (" " * gap).join(cell(str(t), i) for i, t in enumerate(cells)).rstrip()

    header = [c.header if len(c.header) <= w else shorten(c.header, w)
              for c, w in zip(columns, widths)]
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
