"""Compiled pooling (``kiln.op.compute_pool``) against the reference interpreter.

Every case becomes one fused function of a single library built once for the file. Max pooling and
every integer or bool result must match bit for bit. Float32 averages are within rtol 1e-5 (the
compiled code sums a window of at most a few dozen values in float32, the reference in float64);
float16 averages may differ by one float16 ulp (about 1e-3 relative).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _compute_native import Case, check_case, random_array, run_cases, var

from kiln import relay
from kiln.op.registry import all_ops

FAMILY = "kiln.op.pool"  # ops registered in kiln/op/pool.py and the pool_*.py files it imports
MIN_OPS = 14
F32 = {"rtol": 1e-5, "atol": 1e-6}
F16 = {"rtol": 1e-3, "atol": 1e-3}

rng = np.random.default_rng(0)
CASES: dict[str, Case] = {}


def case(name: str, fn: Callable[..., Any], **arrays: np.ndarray) -> None:
    """Register ``fn(*vars)`` on ``arrays`` (one relay variable per keyword, in order)."""
    tol = F16 if any(a.dtype == np.float16 for a in arrays.values()) else F32
    CASES[name] = Case(lambda: fn(*[var(k, v) for k, v in arrays.items()]), arrays, **tol)


def data(shape: tuple[int, ...], dtype: str = "float32", low: int = -50,
         high: int = 50) -> np.ndarray:
    return random_array(rng, shape, dtype, low, high)


# --- windowed pooling -----------------------------------------------------------------------------
WINDOWS_2D = [  # name, data shape, attrs
    ("basic", (1, 3, 7, 9), {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1)}),
    ("no-pad", (2, 2, 6, 7), {"pool_size": (2, 2), "strides": (2, 2)}),
    ("ceil-dilation", (2, 3, 8, 9),
     {"pool_size": (2, 3), "strides": (2, 2), "dilation": (2, 1), "padding": (0, 1, 1, 2),
      "ceil_mode": True}),
    ("asym", (1, 3, 7, 6), {"pool_size": (3, 2), "strides": (2, 1), "padding": (1, 0, 0, 1)}),
    ("ceil-only", (1, 2, 10, 7), {"pool_size": 3, "strides": 3, "ceil_mode": True}),
    ("nhwc", (1, 5, 6, 19), {"pool_size": 2, "strides": 2, "padding": 1, "layout": "NHWC"}),
    ("nchw16c", (1, 2, 5, 5, 16), {"pool_size": 3, "strides": 1, "padding": 1,
                                   "layout": "NCHW16c"}),
    ("large", (1, 16, 56, 56), {"pool_size": 3, "strides": 2, "padding": 1}),
]
for name, shape, attrs in WINDOWS_2D:
    case(f"max_pool2d-{name}", lambda x, attrs=attrs: relay.nn.max_pool2d(x, **attrs),
         x=data(shape))
    for include in (False, True):
        case(f"avg_pool2d-{name}-{include:d}",
             lambda x, attrs=attrs, include=include: relay.nn.avg_pool2d(
                 x, count_include_pad=include, **attrs), x=data(shape))
POOL2D = {"pool_size": (3, 2), "strides": (2, 1), "padding": (1, 0, 0, 1)}
for dtype in ("int8", "uint8", "int32", "float16", "float64", "bool"):
    case(f"max_pool2d-{dtype}", lambda x: relay.nn.max_pool2d(x, **POOL2D),
         x=data((1, 3, 7, 6), dtype, 0 if dtype == "uint8" else -50))
    case(f"avg_pool2d-{dtype}", lambda x: relay.nn.avg_pool2d(x, **POOL2D),
         x=data((1, 3, 7, 6), dtype, 0 if dtype == "uint8" else -50))
case("max_pool2d-nan", lambda x: relay.nn.max_pool2d(x, 2, 1),
     x=np.array([[[[1.0, np.nan, 2.0], [0.0, -1.0, np.inf]]]], dtype="float32"))
case("max_pool2d-all-padding", lambda x: relay.nn.max_pool2d(x, 2, 2, padding=(2, 2)),
     x=data((1, 1, 2, 2)))
for name, attrs in (("basic", {"pool_size": 3, "strides": 2, "padding": 1}),
                    ("ceil-dilation", {"pool_size": 2, "strides": 2, "dilation": 2,
                                       "padding": (1, 0), "ceil_mode": True}),
                    ("nwc", {"pool_size": 2, "layout": "NWC"})):
    case(f"max_pool1d-{name}", lambda x, attrs=attrs: relay.nn.max_pool1d(x, **attrs),
         x=data((2, 3, 11)))
    case(f"avg_pool1d-{name}", lambda x, attrs=attrs: relay.nn.avg_pool1d(x, **attrs),
         x=data((2, 3, 11)))
case("avg_pool1d-int16-include", lambda x: relay.nn.avg_pool1d(
    x, 3, 2, padding=2, count_include_pad=True, ceil_mode=True), x=data((1, 2, 9), "int16"))
for name, attrs in (("basic", {"pool_size": 2, "strides": 2, "padding": 1}),
                    ("asym", {"pool_size": (2, 3, 2), "strides": (1, 2, 2),
                              "padding": (0, 1, 1, 1, 0, 0), "ceil_mode": True}),
                    ("ndhwc", {"pool_size": 2, "layout": "NDHWC"})):
    for include in (False, True):
        case(f"avg_pool3d-{name}-{include:d}",
             lambda x, attrs=attrs, include=include: relay.nn.avg_pool3d(
                 x, count_include_pad=include, **attrs), x=data((1, 2, 5, 4, 5)))
    case(f"max_pool3d-{name}", lambda x, attrs=attrs: relay.nn.max_pool3d(x, **attrs),
         x=data((1, 2, 5, 4, 5)))

# --- global and adaptive pooling ---------------------------------------------------------------------
for op in ("global_max_pool2d", "global_avg_pool2d"):
    builder = getattr(relay.nn, op)
    case(f"{op}-nchw", builder, x=data((2, 3, 5, 7)))
    case(f"{op}-nhwc", lambda x, b=builder: b(x, layout="NHWC"), x=data((2, 5, 7, 19)))
    case(f"{op}-int16", builder, x=data((2, 3, 5, 7), "int16"))
    case(f"{op}-large", builder, x=data((1, 64, 28, 28)))
case("global_avg_pool2d-empty-window", relay.nn.global_avg_pool2d, x=data((1, 2, 0, 3)))
ADAPTIVE = {  # output sizes per dimensionality: varying windows, uniform windows, keep, grow
    1: [(3,), (2,), (None,), (13,)],
    2: [(3, 4), (2, 2), (None, 3), (5, 6)],
    3: [(2, 3, 1), (2, 2, 2), (2, None, 3), (1, 1, 1)],
}
SHAPES = {1: (2, 3, 10), 2: (2, 3, 7, 10), 3: (1, 2, 5, 7, 4)}
for nsp, sizes in ADAPTIVE.items():
    for mode in ("max", "avg"):
        builder = getattr(relay.nn, f"adaptive_{mode}_pool{nsp}d")
        for n, size in enumerate(sizes):
            case(f"adaptive_{mode}_pool{nsp}d-{n}", lambda x, b=builder, size=size: b(x, size),
                 x=data(SHAPES[nsp]))
        case(f"adaptive_{mode}_pool{nsp}d-int32", lambda x, b=builder, nsp=nsp: b(x, (3,) * nsp),
             x=data(SHAPES[nsp], "int32"))
case("adaptive_avg_pool2d-nhwc", lambda x: relay.nn.adaptive_avg_pool2d(x, (3, 2), layout="NHWC"),
     x=data((1, 7, 5, 17)))
case("adaptive_max_pool2d-float16", lambda x: relay.nn.adaptive_max_pool2d(x, (3, 2)),
     x=data((1, 2, 7, 5), "float16"))
case("adaptive_avg_pool2d-float16", lambda x: relay.nn.adaptive_avg_pool2d(x, (3, 2)),
     x=data((1, 2, 7, 5), "float16"))
case("adaptive_avg_pool3d-ndhwc", lambda x: relay.nn.adaptive_avg_pool3d(
    x, (2, 3, 2), layout="NDHWC"), x=data((1, 5, 7, 4, 3)))

# --- fused chains ---------------------------------------------------------------------------------------
case("fused-relu-max_pool2d", lambda x: relay.nn.max_pool2d(relay.nn.relu(x), 2, 2),
     x=data((1, 3, 6, 6)))
case("fused-avg_pool2d-relu", lambda x: relay.nn.relu(relay.nn.avg_pool2d(x, 3, 1, padding=1)),
     x=data((1, 3, 6, 6)))


@pytest.fixture(scope="module")
def compiled() -> dict[str, Case]:
    return dict(run_cases(CASES))


@pytest.mark.parametrize("name", sorted(CASES))
def test_pooling_matches_reference(compiled: dict[str, Case], name: str) -> None:
    check_case(compiled[name])


def test_every_pooling_op_has_a_compute() -> None:
    family = {d.name: d for d in all_ops().values()
              if d.type_rel.__module__ == FAMILY or d.type_rel.__module__.startswith(FAMILY + "_")}
    assert len(family) >= MIN_OPS
    assert sorted(name for name, d in family.items() if d.compute is None) == []
    ours = {name for name, d in family.items() if d.compute.__module__ == "kiln.op.compute_pool"}
    tested = {name.split("-")[0] for name in CASES}
    assert sorted(name for name in ours if name.removeprefix("nn.") not in tested) == []
