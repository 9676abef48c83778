"""Resize and Upsample against onnxruntime: every mode, coordinate transformation and nearest
rounding, sizes vs scales (including scales whose product with the input size is not an
integer), ``axes``, ``keep_aspect_ratio_policy`` and antialiasing."""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontend._onnx_helpers import Const, check_node, run_kiln, single_node_model

RNG = np.random.default_rng(5)
COORD_MODES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"]
# Scales exact in binary with scale * size an integer: there onnxruntime (float32 coordinates,
# integer output lengths) and ONNX's reference (float64, scale * size) agree; the conformance
# suite covers the other cases against the reference.
UP, DOWN = [1, 1, 2, 1.5], [1, 1, 0.75, 0.5]


def _x(shape=(1, 2, 4, 8)):
    return RNG.standard_normal(shape).astype(np.float32)


def _f32(values):
    return Const(np.array(values, np.float32))


def _i64(values):
    return Const(np.array(values, np.int64))


@pytest.mark.parametrize("coord", COORD_MODES)
@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("scales", [UP, DOWN])
def test_resize_nearest(coord, nearest, scales):
    attrs = {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": nearest}
    check_node("Resize", [_x(), None, _f32(scales)], attrs, opset=19)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coord", COORD_MODES)
@pytest.mark.parametrize("scales", [UP, DOWN])
def test_resize_linear_cubic(mode, coord, scales):
    attrs = {"mode": mode, "coordinate_transformation_mode": coord}
    check_node("Resize", [_x(), None, _f32(scales)], attrs, opset=19, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("exclude_outside, a", [(0, -0.5), (1, -0.75)])
def test_resize_cubic_options(exclude_outside, a):
    attrs = {"mode": "cubic", "cubic_coeff_a": a, "exclude_outside": exclude_outside}
    check_node("Resize", [_x(), None, None, _i64([1, 2, 7, 3])], attrs, opset=19, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias(mode):
    attrs = {"mode": mode, "antialias": 1}
    check_node("Resize", [_x((1, 1, 8, 9)), None, _f32([1, 1, 0.5, 0.6])], attrs, opset=19, rtol=1e-4,
               atol=1e-5)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_sizes_with_axes_and_policy(policy):
    attrs = {"mode": "linear", "axes": [3, 2], "keep_aspect_ratio_policy": policy}
    check_node("Resize", [_x(), None, None, _i64([7, 3])], attrs, opset=19, rtol=1e-4, atol=1e-5)


def test_resize_tf_crop_and_resize():
    attrs = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
             "extrapolation_value": 10.0}
    roi = _f32([0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7])
    check_node("Resize", [_x(), roi, None, _i64([1, 2, 3, 3])], attrs, opset=13, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("opset", [10, 11])
def test_resize_older_opsets(opset):
    if opset == 10:
        check_node("Resize", [_x(), _f32([1, 1, 2, 2])], {"mode": "nearest"}, opset=10)
    else:
        check_node("Resize", [_x(), _f32([]), _f32([1, 1, 2, 2])], {"mode": "linear"}, opset=11, rtol=1e-5)


def test_resize_of_non_spatial_axes_and_3d_data():
    check_node("Resize", [_x((2, 3, 4)), None, _f32([2, 1, 1.5])], {"mode": "nearest"}, opset=19)
    check_node("Resize", [_x((1, 1, 2, 3, 4)), None, _f32([1, 1, 2, 2, 2])], {"mode": "linear"}, opset=19,
               rtol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(mode):
    check_node("Upsample", [_x(), _f32([1, 1, 2, 3])], {"mode": mode}, opset=9, rtol=1e-5)
    check_node("Upsample", [_x()], {"mode": mode, "scales": [1.0, 1.0, 2.0, 2.0]}, opset=7, rtol=1e-5)


def test_resize_integer_images():
    x = RNG.integers(0, 255, size=(1, 1, 4, 4)).astype(np.uint8)
    check_node("Resize", [x, None, _f32([1, 1, 2, 2])], {"mode": "nearest"}, opset=19)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample(mode, padding, align):
    grid = RNG.uniform(-1.3, 1.3, size=(2, 3, 5, 2)).astype(np.float32)
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    if (mode, padding) != ("cubic", "border"):
        check_node("GridSample", [_x((2, 3, 4, 6)), grid], attrs, opset=20, rtol=1e-4, atol=1e-5)
        return
    # onnxruntime departs from the ONNX definition for cubic taps with border padding: the oracle
    # is ONNX's own reference implementation.
    from onnx.reference import ReferenceEvaluator

    model, feeds = single_node_model("GridSample", [_x((2, 3, 4, 6)), grid], attrs, opset=20)
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(run_kiln(model, feeds)[0], expected, rtol=1e-4, atol=1e-5)


def test_grid_sample_volumetric_and_opset16_names():
    grid = RNG.uniform(-1.1, 1.1, size=(1, 2, 3, 4, 3)).astype(np.float32)
    check_node("GridSample", [_x((1, 2, 3, 4, 5)), grid], {"mode": "linear"}, opset=20, rtol=1e-4, atol=1e-5)
    grid2 = RNG.uniform(-1, 1, size=(1, 3, 3, 2)).astype(np.float32)
    check_node("GridSample", [_x((1, 2, 4, 4)), grid2], {"mode": "bicubic"}, opset=16, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode, coord", [("avg", "half_pixel"), ("max", "half_pixel"),
                                         ("avg", "output_half_pixel")])
def test_roi_align(mode, coord):
    rois = Const(np.array([[0, 0, 7, 7], [1.5, 2.0, 6.5, 5.0], [0, 0, 3, 3]], np.float32))
    index = Const(np.array([0, 1, 1], np.int64))
    attrs = {"mode": mode, "coordinate_transformation_mode": coord, "output_height": 3, "output_width": 2,
             "sampling_ratio": 2, "spatial_scale": 1.0}
    check_node("RoiAlign", [_x((2, 3, 8, 8)), rois, index], attrs, opset=16, rtol=1e-4, atol=1e-5)
