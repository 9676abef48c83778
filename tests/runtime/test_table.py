"""Plain-text tables fitted to a width (``kiln.runtime.table``): shortening and column widths.

Oracles: the input strings themselves (a shortened cell is a prefix, ``...`` and a suffix of the
original) and the requested width.
"""

from __future__ import annotations

import re
import string

from hypothesis import given
from hypothesis import strategies as st

from kiln.runtime.table import (
    ELLIPSIS,
    Column,
    format_table,
    kernel_differs,
    shorten,
    shorten_kernel,
    strip_kernel_prefix,
)

NAMES = st.text(string.ascii_letters + string.digits + "_/.,", min_size=0, max_size=150)


@given(NAMES, st.integers(min_value=4, max_value=160))
def test_shorten_keeps_both_ends_within_the_width(text: str, width: int) -> None:
    short = shorten(text, width)
    assert len(short) <= width
    if len(text) <= width:
        assert short == text
    else:
        head, sep, tail = short.partition(ELLIPSIS)
        assert sep == ELLIPSIS and text.startswith(head) and text.endswith(tail)
        assert len(short) == width and len(tail) >= len(head)


def test_kernel_names_lose_their_module_prefix_first() -> None:
    name = "tvmgen_my_model_fused_nn_conv2d_add_nn_relu_3"
    assert strip_kernel_prefix(name) == "fused_nn_conv2d_add_nn_relu_3"
    assert shorten_kernel(name, len(name)) == name
    assert shorten_kernel(name, 29) == "fused_nn_conv2d_add_nn_relu_3"
    short = shorten_kernel(name, 20)
    assert len(short) == 20 and short.startswith("fused_") and short.endswith("relu_3")
    assert strip_kernel_prefix("reshape_nop") == "reshape_nop"


def test_kernel_differs_only_beyond_a_numbered_copy() -> None:
    assert not kernel_differs("tvmgen_default_fused_add", "tvmgen_default_fused_add")
    assert not kernel_differs("tvmgen_default_fused_add_2", "tvmgen_default_fused_add")
    assert not kernel_differs("reshape_nop", "__nop")
    assert kernel_differs("tvmgen_default_fused_add_x", "tvmgen_default_fused_add")
    assert kernel_differs("conv_block", "tvmgen_default_fused_nn_conv2d")


@given(st.lists(st.tuples(NAMES, st.integers(0, 10**9), NAMES), min_size=1, max_size=8),
       st.integers(min_value=40, max_value=200))
def test_tables_fit_when_the_names_can_give_way(rows: list[tuple[str, int, str]],
                                                width: int) -> None:
    columns = [Column("Node", shrink=1, min_width=8, soft_width=20), Column("Time(us)", ">"),
               Column("Source", shrink=1, min_width=6)]
    cells = [[a, str(n), b] for a, n, b in rows]
    lines = format_table(columns, cells, width).split("\n")
    assert len(lines) == 2 + len(rows)
    assert all(line == line.rstrip() for line in lines)
    fixed = max(8, *(len(c[1]) for c in cells)) + 8 + 6 + 4  # narrowest possible table
    assert max(len(line) for line in lines) <= max(width, fixed)
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[1])]
    for line, (a, n, b) in zip(lines[2:], rows):
        shown = [line[start:end].strip() for start, end in spans]
        assert shown[1] == str(n)  # numbers are never cut
        for full, cell in ((a, shown[0]), (b, shown[2])):
            # the name itself may hold dots: some "..." in the cell must split it into a
            # start and an end of the full name
            cuts = [i for i in range(len(cell)) if cell.startswith(ELLIPSIS, i)]
            assert cell == full or any(full.startswith(cell[:i])
                                       and full.endswith(cell[i + len(ELLIPSIS):]) for i in cuts)


def test_no_width_means_natural_widths() -> None:
    columns = [Column("Name", shrink=1), Column("Bytes", ">")]
    text = format_table(columns, [["a_very_long_parameter_name", "12"], ["b", "3456"]], None)
    assert text.split("\n") == ["Name                        Bytes",
                                "--------------------------  -----",
                                "a_very_long_parameter_name     12",
                                "b                            3456"]
