"""vision.roi_align: reference kernel vs onnxruntime's RoiAlign (opset 16)."""

from __future__ import annotations

import numpy as np
import pytest
from _oracle_b import run_kiln, run_onnx

from kiln import relay
from kiln.errors import KilnTypeError
from kiln.transform.infer_type import infer_expr_type

ROIS = np.array([[0.0, 0.0, 7.0, 7.0],      # whole map
                 [1.5, 2.2, 5.1, 6.3],      # fractional corners
                 [-2.0, -1.0, 3.0, 2.5],    # partly outside
                 [6.0, 6.0, 6.2, 6.1],      # smaller than a pixel
                 [3.0, 1.0, 12.0, 9.0]],    # reaching past the far edges
                dtype=np.float32)
BATCH = np.array([0, 1, 1, 0, 1], dtype=np.int64)


def _onnx_roi_align(x, rois, batch, size, scale, ratio, mode, aligned):
    return run_onnx("RoiAlign", [x, rois, batch], ["float32"], opset=16, output_height=size[0],
                    output_width=size[1], spatial_scale=scale, sampling_ratio=ratio, mode=mode,
                    coordinate_transformation_mode="half_pixel" if aligned else "output_half_pixel")[0]


def _kiln_roi_align(x, rois, batch, size, scale, ratio, mode, aligned, layout="NCHW"):
    rois5 = np.concatenate([batch[:, None].astype(np.float32), rois], axis=1)
    return run_kiln(lambda d, r: relay.vision.roi_align(d, r, size, scale, ratio, layout, mode, aligned),
                    [x, rois5])


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize("ratio", [0, 2])
@pytest.mark.parametrize("size,scale", [((2, 2), 1.0), ((3, 4), 0.5)])
def test_roi_align_vs_onnxruntime(rng, mode, aligned, ratio, size, scale):
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    rois = ROIS / np.float32(scale) * np.float32(0.9)
    got = _kiln_roi_align(x, rois, BATCH, size, scale, ratio, mode, aligned)
    want = _onnx_roi_align(x, rois, BATCH, size, scale, ratio, mode, aligned)
    assert got.shape == want.shape == (5, 3, *size)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_roi_align_nhwc_matches_nchw(rng):
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    want = _onnx_roi_align(x, ROIS, BATCH, (2, 3), 1.0, 2, "avg", False)
    got = _kiln_roi_align(x.transpose(0, 2, 3, 1), ROIS, BATCH, (2, 3), 1.0, 2, "avg", False, "NHWC")
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-5)


def test_roi_align_type_errors():
    x = relay.var("x", shape=(1, 3, 8, 8))
    with pytest.raises(KilnTypeError, match=r"rois must be \(num_roi, 5\)"):
        infer_expr_type(relay.vision.roi_align(x, relay.var("r", shape=(2, 4)), (2, 2), 1.0))
    with pytest.raises(KilnTypeError, match="mode must be 'avg' or 'max'"):
        infer_expr_type(relay.vision.roi_align(x, relay.var("r", shape=(2, 5)), 2, 1.0, mode="sum"))
    call = relay.vision.roi_align(x, relay.var("r", shape=(2, 5)), 7, 0.25, mode=b"max")
    assert call.attrs.pooled_size == (7, 7) and call.attrs.mode == "max"
    assert type(call.attrs).type_key == "relay.attrs.ROIAlignAttrs"
