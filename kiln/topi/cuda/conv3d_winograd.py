"""``tvm.topi.cuda.conv3d_winograd``: only the tile-size rule tests import."""

from __future__ import annotations

from typing import Any

from kiln.topi.utils import get_const_tuple


def _infer_tile_size(data: Any, kernel: Any, layout: str = "NCDHW") -> int:
    """Winograd tile size TVM picks for 3-D convolution: 4 when the height is a multiple of 8."""
    if layout == "NCDHW":
        _, _, _, height, _ = get_const_tuple(data.shape)
    elif layout == "NDHWC":
        _, _, height, _, _ = get_const_tuple(data.shape)
    else:
        raise ValueError(f"_infer_tile_size: layout {layout!r} is not NCDHW or NDHWC")
    return 4 if height % 8 == 0 else 2
