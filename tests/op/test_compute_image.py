"""Compiled resizing (``kiln.op.compute_image``) against the reference interpreter.

Every case becomes one fused function of a single library built once for the file. The compiled
code computes in float64 in the reference's order and rounding, so integer results (which
truncate) must match bit for bit and float32 results within rtol 1e-6. With uint8 data over its
full range some interpolations are exact integers in the reference, where a sum rounded any other
way (a fused multiply-add, say) would truncate to the integer below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _compute_native import Case, check_case, random_array, run_cases, var

from kiln import relay
from kiln.op.image_resize import COORDINATE_MODES, ROUNDING_METHODS
from kiln.op.registry import all_ops

FAMILY = "kiln.op.image"  # ops registered in kiln/op/image.py and the image_*.py files
MIN_OPS = 3
TOL = {"rtol": 1e-6, "atol": 1e-6}

rng = np.random.default_rng(0)
CASES: dict[str, Case] = {}


def case(name: str, fn: Callable[..., Any], **arrays: np.ndarray) -> None:
    """Register ``fn(*vars)`` on ``arrays`` (one relay variable per keyword, in order)."""
    CASES[name] = Case(lambda: fn(*[var(k, v) for k, v in arrays.items()]), arrays, **TOL)


def data(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    if dtype == "uint8":
        return random_array(rng, shape, dtype, 0, 256)
    return random_array(rng, shape, dtype, -3, 3)


ROI = (0.1, 0.2, 0.9, 1.1)

# --- every method x coordinate mode (x rounding for nearest) in 2-d --------------------------------
for method in ("nearest_neighbor", "linear", "cubic"):
    for mode in COORDINATE_MODES:
        roundings = ROUNDING_METHODS if method == "nearest_neighbor" else ("",)
        for rounding in roundings:
            for dtype in ("float32", "uint8"):
                for n, size in enumerate(((7, 5), (3, 9))):
                    case(f"resize2d-{method}-{mode}-{rounding or 'default'}-{dtype}-{n}",
                         lambda x, method=method, mode=mode, rounding=rounding, size=size:
                         relay.image.resize2d(x, size, roi=ROI, method=method,
                                              coordinate_transformation_mode=mode,
                                              rounding_method=rounding,
                                              extrapolation_value=-1.5),
                         x=data((1, 2, 4, 6), dtype))

# --- cubic parameters, other ranks, layouts and dtypes ---------------------------------------------
for alpha in (-0.5, -0.75):
    for exclude in (0, 1):
        for dtype in ("float32", "uint8"):
            case(f"resize1d-cubic-{alpha}-{exclude}-{dtype}",
                 lambda x, alpha=alpha, exclude=exclude: relay.image.resize1d(
                     x, 9, method="cubic", cubic_alpha=alpha, cubic_exclude=exclude),
                 x=data((2, 3, 5), dtype))
for method in ("nearest_neighbor", "linear", "cubic"):
    for dtype in ("float32", "uint8"):
        case(f"resize3d-{method}-{dtype}", lambda x, method=method: relay.image.resize3d(
            x, (3, 5, 4), method=method), x=data((1, 2, 2, 3, 5), dtype))
    case(f"resize3d-{method}-crop", lambda x, method=method: relay.image.resize3d(
        x, (3, 4, 4), roi=(0.0, 0.1, -0.2, 1.0, 0.9, 0.8), method=method,
        coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=9.0),
        x=data((1, 2, 2, 3, 5)))
case("resize1d-nwc-linear", lambda x: relay.image.resize1d(x, 7, layout="NWC"),
     x=data((2, 5, 3)))
case("resize2d-nhwc-linear", lambda x: relay.image.resize2d(x, (5, 3), layout="NHWC"),
     x=data((1, 4, 6, 19)))
case("resize2d-nhwc-uint8-cubic", lambda x: relay.image.resize2d(
    x, (5, 8), layout="NHWC", method="cubic"), x=data((1, 4, 6, 3), "uint8"))
case("resize2d-nchw4c-nearest", lambda x: relay.image.resize2d(
    x, (8, 10), layout="NCHW4c", method="nearest_neighbor"), x=data((1, 2, 4, 5, 4)))
case("resize2d-uint8-to-float32", lambda x: relay.image.resize2d(
    x, (5, 7), method="linear", out_dtype="float32"), x=data((1, 2, 4, 6), "uint8"))
case("resize2d-float32-to-int32", lambda x: relay.image.resize2d(
    x, (5, 7), method="cubic", out_dtype="int32"), x=random_array(rng, (1, 2, 4, 6), "float32"))
for dtype in ("int8", "int32", "float16", "float64"):
    for method in ("nearest_neighbor", "linear"):
        case(f"resize2d-{method}-{dtype}", lambda x, method=method: relay.image.resize2d(
            x, (5, 9), method=method), x=data((1, 2, 4, 6), dtype))
case("resize2d-downscale-large", lambda x: relay.image.resize2d(x, (37, 45), method="linear"),
     x=data((1, 3, 100, 80)))
case("resize2d-identity", lambda x: relay.image.resize2d(x, (4, 6), method="cubic"),
     x=data((1, 2, 4, 6), "uint8"))


@pytest.fixture(scope="module")
def compiled() -> dict[str, Case]:
    return dict(run_cases(CASES))


@pytest.mark.parametrize("name", sorted(CASES))
def test_resize_matches_reference(compiled: dict[str, Case], name: str) -> None:
    check_case(compiled[name])


def test_every_image_op_has_a_compute() -> None:
    family = {d.name: d for d in all_ops().values()
              if d.type_rel.__module__ == FAMILY or d.type_rel.__module__.startswith(FAMILY + "_")}
    assert len(family) >= MIN_OPS
    assert sorted(name for name, d in family.items() if d.compute is None) == []
    ours = {name for name, d in family.items() if d.compute.__module__ == "kiln.op.compute_image"}
    tested = {name.split("-")[0] for name in CASES}
    assert sorted(name for name in ours if name.removeprefix("image.") not in tested) == []
