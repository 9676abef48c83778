"""Compiled ``vision.roi_align`` (``kiln.op.compute_vision``) against the reference interpreter.

ROIs cover the awkward cases: the whole map, fractional corners, partly and wholly outside the
map, smaller than a pixel, reversed corners (empty when ``aligned``), large ROIs whose adaptive
sample grids are much finer than the map, and negative batch indices. Both modes, layouts,
alignments, fixed and adaptive sampling. Results are computed in float64 like the reference and
rounded to float32, so rtol is 1e-5.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from _compute_native import Case, check_case, run_cases, var

from kiln import relay
from kiln.op.registry import all_ops

ROIS = np.array([[0, 0.0, 0.0, 7.0, 7.0],
                 [1, 1.5, 2.2, 5.1, 6.3],
                 [1, -2.0, -1.0, 3.0, 2.5],
                 [0, 6.0, 6.0, 6.2, 6.1],
                 [1, 3.0, 1.0, 12.0, 9.0],
                 [-1, -30.0, -40.0, 35.0, 20.0],
                 [0, 5.0, 4.0, 2.0, 1.0],
                 [1, 20.0, 20.0, 30.0, 25.0]], dtype=np.float32)

rng = np.random.default_rng(0)
CASES: dict[str, Case] = {}
for mode in ("avg", "max"):
    for aligned in (False, True):
        for ratio in (0, 2, 3):
            for size, scale in (((2, 2), 1.0), ((3, 5), 0.5)):
                for layout in ("NCHW", "NHWC"):
                    x = rng.standard_normal((2, 3, 9, 7)).astype(np.float32)
                    if layout == "NHWC":
                        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
                    name = f"{mode}-{aligned}-{ratio}-{size[0]}x{size[1]}-{scale}-{layout}"
                    CASES[name] = Case(
                        lambda x=x, size=size, scale=scale, ratio=ratio, layout=layout, mode=mode,
                        aligned=aligned: relay.vision.roi_align(
                            var("x", x), var("rois", ROIS), size, scale, ratio, layout, mode,
                            aligned),
                        {"x": x, "rois": ROIS})


@pytest.fixture(scope="module")
def compiled() -> dict[str, Case]:
    return dict(run_cases(CASES))


@pytest.mark.parametrize("name", sorted(CASES))
def test_roi_align_matches_reference(compiled: dict[str, Case], name: str) -> None:
    check_case(compiled[name])


def test_every_vision_op_has_a_compute() -> None:
    family = [name for name, op in all_ops().items()
              if inspect.getmodule(op.reference).__name__ == "kiln.op.vision"]
    assert "vision.roi_align" in family
    assert [name for name in family if all_ops()[name].compute is None] == []
