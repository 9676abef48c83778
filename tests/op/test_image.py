"""image.resize1d/2d/3d: reference kernels vs onnxruntime's Resize for every mode combination."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from _onnx_oracle import assert_close, rand, run_onnx, run_relay
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.errors import KilnTypeError
from kiln.ir import Expr, IRModule
from kiln.op.registry import OpPattern, get_op_def
from kiln.transform.infer_type import infer_type

MODES = ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn",
         "tf_crop_and_resize"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
# (method, nearest_mode / rounding_method, exclude_outside) combinations
METHODS = ([("nearest", r, 0) for r in NEAREST] + [("linear", "", 0)]
           + [("cubic", "", 0), ("cubic", "", 1)])
# (in_h, in_w, out_h, out_w): up, down, mixed, to one pixel, identity
SIZES_2D = [(4, 5, 7, 3), (6, 4, 4, 6), (3, 3, 9, 9), (8, 6, 3, 5), (4, 4, 1, 1), (5, 3, 5, 3)]
# Normalised crop boxes chosen so that no sampled coordinate is exactly an integer or a half, where
# float32 (onnxruntime) and float64 (Kiln) arithmetic could round to different neighbours.
ROI_2D = (0.13, 0.21, 0.87, 1.17)


def _onnx_resize(x: np.ndarray, sizes: Sequence[int], method: str, mode: str, rounding: str,
                 exclude: int, roi: Sequence[float], alpha: float = -0.75,
                 extrapolation: float = -3.0, reference: bool = False) -> np.ndarray:
    nsp = len(sizes)
    attrs = {"mode": method, "coordinate_transformation_mode": mode, "cubic_coeff_a": alpha,
             "exclude_outside": exclude, "extrapolation_value": extrapolation}
    if rounding:
        attrs["nearest_mode"] = rounding
    onnx_roi = np.array([0, 0, *roi[:nsp], 1, 1, *roi[nsp:]] if mode == "tf_crop_and_resize" else [],
                        "float32")
    consts = {1: onnx_roi, 2: np.array([], "float32"),
              3: np.array([*x.shape[:2], *sizes], "int64")}
    return run_onnx("Resize", [x], attrs, constants=consts, opset=19, reference=reference)[0]


def _kiln_resize(builder: Callable[..., Any], x: np.ndarray, sizes: Sequence[int], method: str,
                 mode: str, rounding: str, exclude: int, roi: Sequence[float], alpha: float = -0.75,
                 extrapolation: float = -3.0, **extra: Any) -> np.ndarray:
    return run_relay(builder, x, size=sizes, roi=roi if mode == "tf_crop_and_resize" else None,
                     method="nearest_neighbor" if method == "nearest" else method,
                     coordinate_transformation_mode=mode, rounding_method=rounding,
                     cubic_alpha=alpha, cubic_exclude=exclude, extrapolation_value=extrapolation,
                     **extra)


# Every mode x method x size; an unchanged size with tf_half_pixel_for_nn is left out, because
# onnxruntime copies the input when the sizes do not change (test_tf_half_pixel_for_nn_unchanged_size
# covers it).
RESIZE_2D_CASES = [(mode, *method, sizes) for mode in MODES for method in METHODS for sizes in SIZES_2D
                   if not (mode == "tf_half_pixel_for_nn" and sizes[:2] == sizes[2:])]


@pytest.mark.parametrize("mode,method,rounding,exclude,sizes", RESIZE_2D_CASES)
def test_resize2d_vs_onnx(rng, mode, method, rounding, exclude, sizes):
    x = rand(rng, (2, 3, sizes[0], sizes[1]), "float32")
    # onnxruntime also copies the input for an unchanged tf_crop_and_resize: use the ONNX
    # project's reference evaluator there
    identity = sizes[:2] == sizes[2:]
    expected = _onnx_resize(x, sizes[2:], method, mode, rounding, exclude, ROI_2D, reference=identity)
    got = _kiln_resize(relay.image.resize2d, x, sizes[2:], method, mode, rounding, exclude, ROI_2D)
    assert_close(got, expected, "float32")


@pytest.mark.parametrize("alpha", [-0.5, -0.75])
def test_resize2d_cubic_alpha(rng, alpha):
    x = rand(rng, (1, 2, 5, 6), "float32")
    for exclude in (0, 1):
        expected = _onnx_resize(x, (9, 4), "cubic", "half_pixel", "", exclude, ROI_2D, alpha=alpha)
        got = _kiln_resize(relay.image.resize2d, x, (9, 4), "cubic", "half_pixel", "", exclude,
                           ROI_2D, alpha=alpha)
        assert_close(got, expected, "float32")


@pytest.mark.parametrize("method,rounding,expected", [
    ("nearest_neighbor", "ceil", [1, 2, 3, 3]), ("nearest_neighbor", "floor", [0, 1, 2, 3]),
    ("nearest_neighbor", "round_prefer_floor", [0, 1, 2, 3]),
    ("linear", "", [0.5, 1.5, 2.5, 3.0])])
def test_tf_half_pixel_for_nn_unchanged_size(method, rounding, expected):
    # coordinates x + 0.5 even when the size does not change (TVM's formula; onnxruntime copies)
    x = np.arange(4, dtype="float32").reshape(1, 1, 4)
    got = run_relay(relay.image.resize1d, x, size=4, method=method, rounding_method=rounding,
                    coordinate_transformation_mode="tf_half_pixel_for_nn")
    np.testing.assert_allclose(got.ravel(), expected)


def test_resize2d_default_rounding():
    # rounding_method "" means "round" with align_corners (half away from zero) and floor otherwise
    x = np.arange(4, dtype="float32").reshape(1, 1, 1, 4)
    floor = run_relay(relay.image.resize2d, x, size=(1, 6), method="nearest_neighbor",
                      coordinate_transformation_mode="asymmetric")
    np.testing.assert_array_equal(floor.ravel(), [0, 0, 1, 2, 2, 3])  # 4/6 * [0..5] floored
    rounded = run_relay(relay.image.resize2d, x, size=(1, 3), method="nearest_neighbor",
                        coordinate_transformation_mode="align_corners")
    np.testing.assert_array_equal(rounded.ravel(), [0, 2, 3])  # 1.5 rounds away from zero


@pytest.mark.parametrize("method,rounding,exclude", [("nearest", "round_prefer_ceil", 0),
                                                     ("linear", "", 0), ("cubic", "", 1)])
@pytest.mark.parametrize("mode", MODES)
def test_resize1d_vs_onnx(rng, mode, method, rounding, exclude):
    # onnxruntime resizes 1-d data through a unit height: (N, C, W) -> (N, C, 1, W)
    x = rand(rng, (2, 3, 7), "float32")
    roi = (0.17, 1.09)
    expected = _onnx_resize(x[:, :, None, :], (1, 4), method, mode, rounding, exclude,
                            (0.0, roi[0], 1.0, roi[1]))[:, :, 0, :]
    got = _kiln_resize(relay.image.resize1d, x, (4,), method, mode, rounding, exclude, roi)
    assert_close(got, expected, "float32")


@pytest.mark.parametrize("method,rounding", [("nearest", "round_prefer_floor"), ("nearest", "ceil"),
                                             ("linear", "")])
@pytest.mark.parametrize("mode", MODES)
def test_resize3d_vs_onnx(rng, mode, method, rounding):
    x = rand(rng, (1, 2, 3, 4, 5), "float32")
    roi = (0.09, 0.13, 0.21, 0.93, 0.87, 1.17)  # (start d, h, w, end d, h, w)
    expected = _onnx_resize(x, (5, 3, 7), method, mode, rounding, 0, roi)
    got = _kiln_resize(relay.image.resize3d, x, (5, 3, 7), method, mode, rounding, 0, roi)
    assert_close(got, expected, "float32")


def test_resize3d_cubic_matches_2d_per_depth(rng):
    # onnxruntime has no 3-d cubic; an unchanged depth (asymmetric: integer coordinates) reduces
    # tricubic resizing to bicubic resizing of every depth slice
    x = rand(rng, (1, 2, 3, 5, 6), "float32")
    got = _kiln_resize(relay.image.resize3d, x, (3, 8, 4), "cubic", "asymmetric", "", 1, ())
    for d in range(3):
        expected = _onnx_resize(x[:, :, d], (8, 4), "cubic", "asymmetric", "", 1, ())
        assert_close(got[:, :, d], expected, "float32")


@pytest.mark.parametrize("method", ["nearest", "linear", "cubic"])
def test_resize2d_nhwc_and_blocked(rng, method):
    x = rand(rng, (1, 8, 5, 6), "float32")
    rounding = "round_prefer_floor" if method == "nearest" else ""
    expected = _onnx_resize(x, (8, 4), method, "half_pixel", rounding, 0, ())
    got = _kiln_resize(relay.image.resize2d, x.transpose(0, 2, 3, 1).copy(), (8, 4), method,
                       "half_pixel", rounding, 0, (), layout="NHWC")
    assert_close(got, expected.transpose(0, 2, 3, 1), "float32")
    blocked = x.reshape(1, 2, 4, 5, 6).transpose(0, 1, 3, 4, 2).copy()
    got = _kiln_resize(relay.image.resize2d, blocked, (8, 4), method, "half_pixel", rounding, 0, (),
                       layout="NCHW4c")
    assert_close(got, expected.reshape(1, 2, 4, 8, 4).transpose(0, 1, 3, 4, 2), "float32")


@pytest.mark.parametrize("dtype", ["float16", "uint8", "int8", "int32"])
@pytest.mark.parametrize("method", ["nearest", "linear"])
def test_resize2d_dtypes(rng, dtype, method):
    x = rand(rng, (1, 2, 4, 5), dtype, -60 if dtype in ("int8", "int32") else 0, 100)
    rounding = "round_prefer_floor" if method == "nearest" else ""
    expected = _onnx_resize(x, (7, 3), method, "half_pixel", rounding, 0, ())
    got = _kiln_resize(relay.image.resize2d, x, (7, 3), method, "half_pixel", rounding, 0, ())
    assert got.dtype == np.dtype(dtype)
    if dtype == "float16":
        assert_close(got, expected, "float16")
    elif method == "nearest":
        np.testing.assert_array_equal(got, expected)
    else:
        # Integer outputs truncate; onnxruntime blends in float32, so values that are integers
        # mathematically may land one below.
        assert np.abs(got.astype(np.int64) - expected.astype(np.int64)).max() <= 1


def test_resize2d_out_dtype(rng):
    x = rand(rng, (1, 1, 3, 3), "float32")
    got = run_relay(relay.image.resize2d, x, size=(5, 5), out_dtype="float64")
    assert got.dtype == np.float64
    assert_close(got, _onnx_resize(x, (5, 5), "linear", "half_pixel", "", 0, ()), "float32")


# --- shape relation (Hypothesis) -----------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.data())
def test_resize_shape_relation(nsp, data):
    layout = data.draw(st.sampled_from([{1: "NCW", 2: "NCHW", 3: "NCDHW"}[nsp],
                                        {1: "NWC", 2: "NHWC", 3: "NDHWC"}[nsp]]))
    spatial = [data.draw(st.integers(1, 6)) for _ in range(nsp)]
    sizes = tuple(data.draw(st.integers(1, 8)) for _ in range(nsp))
    shape = (1, *spatial, 2) if layout.endswith("C") else (1, 2, *spatial)
    method = data.draw(st.sampled_from(["nearest_neighbor", "linear", "cubic"]))
    mode = data.draw(st.sampled_from(MODES))
    builder = getattr(relay.image, f"resize{nsp}d")
    x = relay.var("x", shape=shape)
    call = builder(x, sizes, layout=layout, method=method, coordinate_transformation_mode=mode)
    inferred = infer_type(IRModule.from_expr(call))["main"].body.checked_type.shape
    expected = (1, *sizes, 2) if layout.endswith("C") else (1, 2, *sizes)
    assert inferred == expected
    out = run_relay(builder, np.ones(shape, "float32"), size=sizes, layout=layout, method=method,
                    coordinate_transformation_mode=mode)
    assert out.shape == expected
    if mode != "tf_crop_and_resize":  # resizing a constant image keeps it constant
        np.testing.assert_allclose(out, 1.0, rtol=1e-6)


# --- printing, patterns, errors ------------------------------------------------------------------

def test_resize_printing():
    call = relay.image.resize2d(relay.var("x", shape=(1, 3, 8, 8)), (16, 16), method="nearest_neighbor",
                                coordinate_transformation_mode="asymmetric",
                                rounding_method="floor")
    assert call.attrs.roi == (0.0, 0.0, 0.0, 0.0)
    assert ('image.resize2d(%x, size=[16, 16], roi=[0f, 0f, 0f, 0f], method="nearest_neighbor", '
            'coordinate_transformation_mode="asymmetric", rounding_method="floor")') in call.astext()
    assert get_op_def("image.resize2d").attrs_type.type_key == "relay.attrs.Resize2DAttrs"


def test_resize_patterns():
    for n in (1, 2, 3):  # TVM: kInjective (src/relay/op/image/resize.cc)
        assert get_op_def(f"image.resize{n}d").pattern == OpPattern.INJECTIVE


def _type_error(call: Expr) -> str:
    with pytest.raises(KilnTypeError) as info:
        infer_type(IRModule.from_expr(call))
    return str(info.value)


def test_resize_errors():
    x = relay.var("x", shape=(1, 3, 8, 8))
    assert "unknown method 'bilinear'" in _type_error(relay.image.resize2d(x, (4, 4), method="bilinear"))
    assert "coordinate_transformation_mode" in _type_error(
        relay.image.resize2d(x, (4, 4), coordinate_transformation_mode="half_pixel_symmetric"))
    assert "roi must have 4 values" in _type_error(relay.image.resize2d(x, (4, 4), roi=(0.0, 1.0)))
    assert "size must be positive" in _type_error(relay.image.resize2d(x, (0, 4)))
    assert "4-d" in _type_error(relay.image.resize2d(relay.var("y", shape=(3, 8, 8)), (4, 4)))
