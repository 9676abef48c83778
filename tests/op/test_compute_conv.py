"""Compiled convolutions (``kiln.op.compute_conv``) against the reference interpreter.

Every case becomes one fused function of a single library built once for the file. Integer results
must match bit for bit (including wrap-around when the result dtype is narrow). Float32 results
are within rtol 1e-5 and atol 1e-5: the compiled code accumulates in float32 while the reference
accumulates in float64, and a sum of ``K`` (at most a few hundred here) unit-size products carries
an absolute rounding error of about ``sqrt(K) * 6e-8`` times its partial sums; the large cases get
atol 1e-4 for their larger partial sums. Float16 results may differ by one float16 ulp (about 1e-3
relative) from the reference's single rounding of a float64 value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _compute_native import Case, check_case, random_array, run_cases, var

from kiln import relay
from kiln.op.registry import all_ops

FAMILY = "kiln.op.conv"  # ops registered in kiln/op/conv.py and the conv_*.py files it imports
MIN_OPS = 8
F32 = {"rtol": 1e-5, "atol": 1e-5}
F16 = {"rtol": 1e-3, "atol": 1e-3}
LARGE = {"rtol": 1e-5, "atol": 1e-4}

rng = np.random.default_rng(0)
CASES: dict[str, Case] = {}


def case(name: str, fn: Callable[..., Any], tol: dict[str, float] | None = None,
         **arrays: np.ndarray) -> None:
    """Register ``fn(*vars)`` on ``arrays`` (one relay variable per keyword, in order)."""
    if tol is None:
        tol = F16 if any(a.dtype == np.float16 for a in arrays.values()) else F32
    CASES[name] = Case(lambda: fn(*[var(k, v) for k, v in arrays.items()]), arrays, **tol)


def data(shape: tuple[int, ...], dtype: str = "float32", low: int = -20,
         high: int = 20) -> np.ndarray:
    return random_array(rng, shape, dtype, low, high)


# --- conv2d ---------------------------------------------------------------------------------------
CONV2D = [  # name, data shape, weight shape, attrs
    ("basic", (1, 3, 7, 9), (4, 3, 3, 3), {"padding": (1, 1)}),
    ("no-pad", (2, 3, 6, 5), (5, 3, 2, 2), {}),
    ("strided", (1, 4, 9, 8), (6, 4, 3, 3), {"strides": (2, 2), "padding": (1, 1)}),
    ("stride-dilation-asym", (2, 4, 9, 8), (6, 4, 3, 2),
     {"strides": (2, 1), "padding": (1, 0, 2, 1), "dilation": (1, 2)}),
    ("dilated", (1, 2, 11, 10), (3, 2, 3, 3), {"dilation": (2, 3), "padding": (2, 3)}),
    ("kernel-1x1", (1, 17, 5, 6), (9, 17, 1, 1), {}),
    ("groups", (1, 4, 5, 5), (6, 2, 3, 3), {"padding": 1, "groups": 2}),
    ("depthwise", (1, 4, 5, 7), (4, 1, 3, 3), {"padding": 1, "groups": 4}),
    ("depthwise-mult", (1, 4, 5, 7), (8, 1, 3, 3), {"padding": 1, "groups": 4}),
    ("group-strided", (2, 6, 7, 7), (9, 2, 3, 3), {"strides": 2, "groups": 3}),
    ("nhwc", (1, 6, 5, 3), (3, 3, 3, 5),
     {"padding": 1, "data_layout": "NHWC", "kernel_layout": "HWIO"}),
    ("nhwc-ohwi-depthwise", (1, 6, 5, 4), (4, 3, 3, 1),
     {"padding": 1, "groups": 4, "data_layout": "NHWC", "kernel_layout": "OHWI"}),
    ("nchw-to-nhwc", (1, 3, 5, 6), (4, 3, 3, 3), {"padding": 1, "out_layout": "NHWC"}),
    ("blocked-width", (1, 3, 5, 3, 2), (4, 3, 3, 3), {"padding": 1, "data_layout": "NCHW2w"}),
    ("blocked-width-strided", (1, 3, 5, 4, 2), (4, 3, 2, 3),
     {"padding": (1, 1, 0, 1), "strides": 2, "data_layout": "NCHW2w", "out_layout": "NCHW"}),
]
for name, dshape, wshape, attrs in CONV2D:
    case(f"conv2d-{name}", lambda x, w, attrs=attrs: relay.nn.conv2d(x, w, **attrs),
         x=data(dshape), w=data(wshape))
case("conv2d-large", lambda x, w: relay.nn.conv2d(x, w, padding=1), LARGE,
     x=data((1, 16, 32, 32)), w=data((16, 16, 3, 3)))
case("conv2d-empty-batch", relay.nn.conv2d, x=data((0, 2, 3, 3)), w=data((2, 2, 2, 2)))
case("conv2d-float16", lambda x, w: relay.nn.conv2d(x, w, padding=1),
     x=data((1, 3, 5, 5), "float16"), w=data((4, 3, 3, 3), "float16"))
case("conv2d-float64", lambda x, w: relay.nn.conv2d(x, w, padding=1),
     x=data((1, 3, 5, 5), "float64"), w=data((4, 3, 3, 3), "float64"))
case("conv2d-float32-to-float64", lambda x, w: relay.nn.conv2d(x, w, out_dtype="float64"),
     x=data((1, 3, 5, 5)), w=data((4, 3, 3, 3)))
case("conv2d-int8-to-int32", lambda x, w: relay.nn.conv2d(x, w, padding=1, out_dtype="int32"),
     x=data((1, 3, 5, 5), "int8", -128, 128), w=data((4, 3, 3, 3), "int8", -128, 128))
case("conv2d-uint8-int8", lambda x, w: relay.nn.conv2d(x, w, padding=1, out_dtype="int32"),
     x=data((1, 3, 5, 5), "uint8", 0, 256), w=data((4, 3, 3, 3), "int8", -128, 128))
case("conv2d-int8-wraps", lambda x, w: relay.nn.conv2d(x, w, padding=1),
     x=data((1, 3, 5, 5), "int8", -128, 128), w=data((4, 3, 3, 3), "int8", -128, 128))
case("conv2d-int32-to-float32", lambda x, w: relay.nn.conv2d(x, w, out_dtype="float32"),
     x=data((1, 2, 4, 4), "int32"), w=data((3, 2, 2, 2), "int32"))

# --- conv1d, conv3d -------------------------------------------------------------------------------
case("conv1d", lambda x, w: relay.nn.conv1d(x, w, padding=(2, 1), strides=2),
     x=data((2, 3, 11)), w=data((5, 3, 4)))
case("conv1d-dilated-groups", lambda x, w: relay.nn.conv1d(x, w, padding=2, dilation=2, groups=3),
     x=data((1, 6, 13)), w=data((3, 2, 3)))
case("conv1d-nwc", lambda x, w: relay.nn.conv1d(x, w, padding=1, data_layout="NWC",
                                                kernel_layout="WIO"),
     x=data((2, 9, 3)), w=data((3, 3, 4)))
case("conv1d-int16", lambda x, w: relay.nn.conv1d(x, w, padding=1),
     x=data((1, 3, 10), "int16"), w=data((2, 3, 3), "int16"))
case("conv3d", lambda x, w: relay.nn.conv3d(x, w, padding=1),
     x=data((1, 2, 4, 5, 3)), w=data((3, 2, 3, 3, 3)))
case("conv3d-strided-groups", lambda x, w: relay.nn.conv3d(
    x, w, strides=(1, 2, 2), padding=(1, 0, 1, 0, 1, 1), groups=2),
    x=data((1, 4, 4, 6, 5)), w=data((4, 2, 2, 3, 2)))
case("conv3d-ndhwc", lambda x, w: relay.nn.conv3d(x, w, padding=1, data_layout="NDHWC",
                                                  kernel_layout="DHWIO"),
     x=data((1, 3, 4, 5, 2)), w=data((3, 3, 3, 2, 4)))

# --- transposed convolutions ------------------------------------------------------------------------
TRANSPOSE2D = [
    ("basic", (1, 3, 4, 5), (3, 2, 3, 3), {}),
    ("strided", (1, 4, 5, 5), (4, 3, 3, 3),
     {"strides": (2, 2), "padding": (1, 1), "output_padding": (1, 1)}),
    ("groups-dilation", (1, 4, 5, 4), (4, 3, 3, 2),
     {"strides": (2, 3), "padding": (0, 1, 1, 0), "dilation": (2, 1), "groups": 2}),
    ("depthwise", (1, 3, 4, 4), (3, 1, 3, 3), {"strides": 2, "padding": 1, "groups": 3}),
    ("big-padding", (1, 2, 6, 6), (2, 2, 3, 3), {"padding": (3, 2, 3, 2)}),
    ("oihw-kernel", (1, 3, 4, 5), (2, 3, 3, 3), {"strides": 2, "kernel_layout": "OIHW"}),
    ("nhwc", (1, 4, 5, 3), (3, 3, 3, 2),
     {"strides": 2, "padding": 1, "data_layout": "NHWC", "kernel_layout": "HWIO"}),
]
for name, dshape, wshape, attrs in TRANSPOSE2D:
    case(f"conv2d_transpose-{name}",
         lambda x, w, attrs=attrs: relay.nn.conv2d_transpose(x, w, **attrs),
         x=data(dshape), w=data(wshape))
case("conv2d_transpose-int32", lambda x, w: relay.nn.conv2d_transpose(x, w, strides=2),
     x=data((1, 2, 3, 3), "int32"), w=data((2, 2, 2, 2), "int32"))
case("conv1d_transpose", lambda x, w: relay.nn.conv1d_transpose(x, w, strides=3, padding=(1,)),
     x=data((1, 2, 7)), w=data((2, 3, 4)))
case("conv1d_transpose-outpad-dilated", lambda x, w: relay.nn.conv1d_transpose(
    x, w, strides=2, padding=(2,), output_padding=(1,), dilation=2, groups=2),
    x=data((2, 4, 6)), w=data((4, 1, 3)))
case("conv3d_transpose", lambda x, w: relay.nn.conv3d_transpose(x, w, strides=2),
     x=data((1, 2, 3, 3, 3)), w=data((2, 2, 2, 2, 2)))
case("conv3d_transpose-padded", lambda x, w: relay.nn.conv3d_transpose(
    x, w, strides=(1, 2, 2), padding=1, output_padding=(0, 1, 0)),
    x=data((1, 2, 3, 4, 3)), w=data((2, 3, 3, 3, 3)))

# --- blocked NCHWc variants ---------------------------------------------------------------------------
NCHWC = [  # name, data shape, weight shape, data/kernel/out layouts, attrs
    ("4c", (1, 2, 5, 6, 4), (2, 2, 3, 3, 4, 4), ("NCHW4c", "OIHW4i4o", "NCHW4c"), {"padding": 1}),
    ("8c-to-4c", (1, 1, 6, 6, 8), (3, 1, 3, 3, 8, 4), ("NCHW8c", "OIHW8i4o", "NCHW4c"),
     {"padding": (1, 0, 0, 1), "strides": 2}),
    ("dilated", (2, 2, 7, 7, 2), (1, 2, 3, 3, 2, 3), ("NCHW2c", "OIHW2i3o", "NCHW3c"),
     {"dilation": 2}),
    ("nchw-out", (1, 2, 4, 4, 4), (2, 2, 1, 1, 4, 4), ("NCHW4c", "OIHW4i4o", "NCHW"), {}),
    ("16c", (1, 1, 5, 5, 16), (2, 1, 3, 3, 16, 16), ("NCHW16c", "OIHW16i16o", "NCHW16c"),
     {"padding": 1}),
]
for name, dshape, wshape, (dl, kl, ol), attrs in NCHWC:
    case(f"contrib_conv2d_NCHWc-{name}",
         lambda x, w, dl=dl, kl=kl, ol=ol, attrs=attrs: relay.nn.contrib_conv2d_nchwc(
             x, w, data_layout=dl, kernel_layout=kl, out_layout=ol, **attrs),
         x=data(dshape), w=data(wshape))
case("contrib_conv2d_NCHWc-int8", lambda x, w: relay.nn.contrib_conv2d_nchwc(
    x, w, padding=1, data_layout="NCHW4c", kernel_layout="OIHW4i4o", out_layout="NCHW4c",
    out_dtype="int32"),
    x=data((1, 1, 4, 5, 4), "int8", -128, 128), w=data((1, 1, 3, 3, 4, 4), "int8", -128, 128))
DEPTHWISE_NCHWC = [  # name, data shape, weight shape, layouts, attrs
    ("4c", (1, 2, 5, 6, 4), (2, 1, 3, 3, 1, 4), ("NCHW4c", "OIHW1i4o", "NCHW4c"),
     {"padding": 1, "groups": 8}),
    ("mult-2", (1, 2, 5, 5, 4), (4, 1, 3, 3, 1, 4), ("NCHW4c", "OIHW1i4o", "NCHW4c"),
     {"padding": 1, "groups": 8, "strides": 2}),
    ("16c", (1, 1, 7, 7, 16), (1, 1, 3, 3, 1, 16), ("NCHW16c", "OIHW1i16o", "NCHW16c"),
     {"padding": 1, "groups": 16}),
]
for name, dshape, wshape, (dl, kl, ol), attrs in DEPTHWISE_NCHWC:
    case(f"contrib_depthwise_conv2d_NCHWc-{name}",
         lambda x, w, dl=dl, kl=kl, ol=ol, attrs=attrs: relay.nn.contrib_depthwise_conv2d_nchwc(
             x, w, data_layout=dl, kernel_layout=kl, out_layout=ol, **attrs),
         x=data(dshape), w=data(wshape))

# --- fused chains -------------------------------------------------------------------------------------
case("fused-conv2d-bias-relu", lambda x, w, b: relay.nn.relu(relay.nn.bias_add(
    relay.nn.conv2d(x, w, padding=1), b)), x=data((1, 3, 6, 7)), w=data((5, 3, 3, 3)),
    b=data((5,)))
case("fused-conv2d-int8-requantize", lambda x, w: relay.cast(relay.nn.conv2d(
    x, w, padding=1, out_dtype="int32"), "int8"),
    x=data((1, 3, 5, 5), "int8", -128, 128), w=data((4, 3, 3, 3), "int8", -128, 128))


@pytest.fixture(scope="module")
def compiled() -> dict[str, Case]:
    return dict(run_cases(CASES))


@pytest.mark.parametrize("name", sorted(CASES))
def test_convolution_matches_reference(compiled: dict[str, Case], name: str) -> None:
    check_case(compiled[name])


def test_every_convolution_has_a_compute() -> None:
    family = {d.name: d for d in all_ops().values()
              if d.type_rel.__module__ == FAMILY or d.type_rel.__module__.startswith(FAMILY + "_")}
    assert len(family) >= MIN_OPS
    assert sorted(name for name, d in family.items() if d.compute is None) == []
    ours = {name for name, d in family.items() if d.compute.__module__ == "kiln.op.compute_conv"}
    tested = {name.split("-")[0] for name in CASES}
    assert sorted(name for name in ours if name.removeprefix("nn.") not in tested) == []
