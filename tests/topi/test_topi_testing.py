"""kiln.topi.testing reference kernels against onnxruntime and explicit NumPy loops."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from kiln.topi import testing as tt  # noqa: E402
from kiln.topi.utils import get_const_tuple  # noqa: E402

RNG = np.random.default_rng(0)


def _ort(op: str, inputs: list[np.ndarray], out_rank: int, **attrs: object) -> np.ndarray:
    names = [f"i{k}" for k in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in zip(names, inputs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * out_rank)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, inputs)))[0]


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype("float32")


@pytest.mark.parametrize(
    ("nsp", "stride", "pads", "dil", "groups"),
    [(1, 2, (1, 2), 2, 1), (2, 1, (1, 0, 2, 1), 1, 2), (2, 2, (1, 1, 1, 1), 1, 4), (3, 1, (1,) * 6, 1, 1)],
)
def test_conv_nchw_matches_onnxruntime(nsp, stride, pads, dil, groups):
    data = _rand(2, 4, *([7] * nsp))
    weight = _rand(8, 4 // groups, *([3] * nsp))
    ref = _ort("Conv", [data, weight], nsp + 2, pads=list(pads), strides=[stride] * nsp,
               dilations=[dil] * nsp, group=groups)
    if nsp == 1:
        got = tt.conv1d_ncw_python(data, weight, stride, pads, dil)
    elif nsp == 2:
        got = tt.conv2d_nchw_python(data, weight, stride, pads, groups=groups)
        nhwc = tt.conv2d_nhwc_python(data.transpose(0, 2, 3, 1), weight.transpose(2, 3, 1, 0),
                                     stride, pads, groups=groups)
        np.testing.assert_allclose(nhwc.transpose(0, 3, 1, 2), ref, rtol=1e-4, atol=1e-4)
    else:
        got = tt.conv3d_ncdhw_python(data, weight, stride, pads)
        ndhwc = tt.conv3d_ndhwc_python(data.transpose(0, 2, 3, 4, 1),
                                       weight.transpose(2, 3, 4, 1, 0), stride, pads)
        np.testing.assert_allclose(ndhwc.transpose(0, 4, 1, 2, 3), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_conv2d_same_and_dilated_kernel_match_explicit_loop():
    data, weight = _rand(1, 2, 5, 6), _rand(3, 2, 2, 2)
    dk = tt.dilate_python(weight, (1, 1, 2, 2))
    got = tt.conv2d_nchw_python(data, dk, 1, "SAME")  # effective kernel 3: pads 1 each side
    padded = np.pad(data, [(0, 0), (0, 0), (1, 1), (1, 1)])
    ref = np.zeros((1, 3, 5, 6), "float32")
    for o, y, x in itertools.product(range(3), range(5), range(6)):
        ref[0, o, y, x] = np.sum(padded[0, :, y:y + 3:2, x:x + 3:2] * weight[o])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("nsp", "stride", "pad", "opad"), [(1, 2, 1, 1), (2, 2, 1, 1), (2, 3, 0, 2), (3, 2, 1, 0)]
)
def test_conv_transpose_matches_onnxruntime(nsp, stride, pad, opad):
    data = _rand(1, 3, *([4] * nsp))
    weight = _rand(3, 2, *([3] * nsp))
    ref = _ort("ConvTranspose", [data, weight], nsp + 2, pads=[pad] * 2 * nsp, strides=[stride] * nsp,
               output_padding=[opad] * nsp)
    if nsp == 1:
        got = tt.conv1d_transpose_ncw_python(data, weight, stride, pad, (opad,))
    elif nsp == 2:
        got = tt.conv2d_transpose_nchw_python(data, weight, stride, pad, (opad, opad))
        hwoi = weight.transpose(2, 3, 1, 0)
        nhwc = tt.conv2d_transpose_nhwc_python(data.transpose(0, 2, 3, 1), hwoi, "HWOI", stride, pad,
                                               output_padding=(opad, opad))
        np.testing.assert_allclose(nhwc.transpose(0, 3, 1, 2), ref, rtol=1e-4, atol=1e-4)
    else:
        got = tt.conv3d_transpose_ncdhw_python(data, weight, stride, pad, (opad,) * 3)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_dilate_python_places_values_on_a_strided_grid():
    x = np.arange(6, dtype="float32").reshape(2, 3)
    got = tt.dilate_python(x, (2, 3), dilation_value=-1.0)
    assert got.shape == (3, 7)
    assert got[0, 3] == 1 and got[2, 6] == 5 and got[1, 0] == -1 and got[0, 1] == -1


@pytest.mark.parametrize(
    ("pool", "include", "ceil", "pads"),
    [("max", False, False, (1, 1, 1, 1)), ("max", False, True, (0, 0, 0, 0)),
     ("avg", True, False, (1, 0, 1, 0)), ("avg", False, False, (1, 1, 1, 1)),
     ("avg", False, True, (0, 0, 0, 0))],
)
def test_poolnd_matches_onnxruntime(pool, include, ceil, pads):
    data = _rand(1, 2, 7, 6)
    attrs: dict[str, object] = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": list(pads),
                                "ceil_mode": int(ceil)}
    if pool == "avg":
        attrs["count_include_pad"] = int(include)
    ref = _ort("MaxPool" if pool == "max" else "AveragePool", [data], 4, **attrs)
    got = tt.poolnd_python(data, [3, 3], [2, 2], [1, 1], list(pads[:2]), list(pads[2:]), pool,
                           count_include_pad=include, ceil_mode=ceil)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    nhwc = tt.poolnd_python(data.transpose(0, 2, 3, 1), [3, 3], [2, 2], [1, 1], list(pads[:2]),
                            list(pads[2:]), pool, count_include_pad=include, ceil_mode=ceil,
                            layout="NHWC")
    np.testing.assert_allclose(nhwc.transpose(0, 3, 1, 2), ref, rtol=1e-5, atol=1e-5)


def test_softmax_and_log_softmax_match_onnxruntime():
    x = _rand(2, 5, 3)
    np.testing.assert_allclose(tt.softmax_python(x, axis=1), _ort("Softmax", [x], 3, axis=1), rtol=1e-5)
    np.testing.assert_allclose(tt.log_softmax_python(x, axis=2), _ort("LogSoftmax", [x], 3, axis=2),
                               rtol=1e-5, atol=1e-6)


def test_lrn_matches_onnxruntime():
    x = _rand(2, 7, 3, 4)
    ref = _ort("LRN", [x], 4, size=5, alpha=1e-3, beta=0.75, bias=2.0)
    np.testing.assert_allclose(tt.lrn_python(x, 5, 1, 2.0, 1e-3, 0.75), ref, rtol=1e-5)


def test_l2_normalize_matches_explicit_norm():
    x = _rand(2, 3, 4)
    got = tt.l2_normalize_python(x, 1e-12, [1, 2])
    for n in range(2):
        np.testing.assert_allclose(got[n], x[n] / np.sqrt(np.sum(x[n] ** 2)), rtol=1e-6)
    tiny = tt.l2_normalize_python(np.full((1, 2), 1e-4, "float32"), 1.0, 1)
    np.testing.assert_allclose(tiny, 1e-4)  # eps floors the squared norm


@pytest.mark.parametrize("method", ["nearest_neighbor", "linear", "cubic"])
@pytest.mark.parametrize("mode", ["align_corners", "half_pixel", "asymmetric"])
def test_resize_matches_onnxruntime(method, mode):
    data = _rand(1, 2, 4, 5)
    sizes = np.array([1, 2, 8, 10], dtype=np.int64)
    onnx_mode = {"nearest_neighbor": "nearest"}.get(method, method)
    nearest = "round_prefer_ceil" if mode == "align_corners" else "floor"
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=onnx_mode,
                            coordinate_transformation_mode=mode, nearest_mode=nearest,
                            cubic_coeff_a=-0.5)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, data.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(sizes, "sizes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"x": data})[0]
    got = tt.resize2d_python(data, (2.0, 2.0), "NCHW", method, mode)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    nhwc = tt.resize2d_python(data.transpose(0, 2, 3, 1), (2.0, 2.0), "NHWC", method, mode)
    np.testing.assert_allclose(nhwc.transpose(0, 3, 1, 2), ref, rtol=1e-5, atol=1e-5)
    vol = tt.resize3d_python(data[:, :, None], (1.0, 2.0, 2.0), "NCDHW", method, mode)
    np.testing.assert_allclose(vol[:, :, 0], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("ksize", "maxd", "s1", "s2", "pad", "mul"),
                         [(1, 2, 1, 1, 2, True), (3, 2, 2, 2, 3, False), (3, 1, 1, 1, 0, True)])
def test_correlation_matches_explicit_loop(ksize, maxd, s1, s2, pad, mul):
    d1, d2 = _rand(2, 3, 7, 8), _rand(2, 3, 7, 8)
    got = tt.correlation_nchw_python(d1, d2, ksize, maxd, s1, s2, pad, mul)
    p1 = np.pad(d1, [(0, 0), (0, 0), (pad, pad), (pad, pad)]).astype(np.float64)
    p2 = np.pad(d2, [(0, 0), (0, 0), (pad, pad), (pad, pad)]).astype(np.float64)
    border = maxd + (ksize - 1) // 2
    out_h, out_w = (7 + 2 * pad - 2 * border) // s1, (8 + 2 * pad - 2 * border) // s1
    r = maxd // s2
    g = 2 * r + 1
    ref = np.zeros((2, g * g, out_h, out_w))
    for n, q, i, j in itertools.product(range(2), range(g * g), range(out_h), range(out_w)):
        y1, x1 = i * s1 + maxd, j * s1 + maxd
        y2, x2 = y1 + (q // g - r) * s2, x1 + (q % g - r) * s2
        a = p1[n, :, y1:y1 + ksize, x1:x1 + ksize]
        b = p2[n, :, y2:y2 + ksize, x2:x2 + ksize]
        ref[n, q, i, j] = np.mean(a * b if mul else np.abs(a - b))
    assert got.shape == ref.shape and out_h > 0
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_get_const_tuple_and_layout_hook():
    class Dim:
        def __init__(self, v):
            self.value = v

    assert get_const_tuple([Dim(2), 3]) == (2, 3)
    assert get_const_tuple(np.zeros((4, 5))) == (4, 5)
    from kiln.errors import KilnError
    from kiln.topi import nn

    with pytest.raises(KilnError, match="conv2d_alter_layout"):
        nn.conv2d_alter_layout(None, [], [], None)
    from kiln import topi

    with pytest.raises(KilnError, match="dense"):
        topi.x86.dense_alter_op._alter_dense_layout(None, [], [], None)
    data = np.zeros((1, 3, 5, 16, 16))
    assert topi.cuda.conv3d_winograd._infer_tile_size(data, None) == 4


def test_topi_is_lazy_and_resolves_as_an_attribute():
    code = (
        "import sys, kiln; assert 'kiln.topi' not in sys.modules; "
        "assert callable(kiln.topi.testing.conv2d_nchw_python); assert 'topi' in dir(kiln)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back_match_onnxruntime(mode: str) -> None:
    x = _rand(2, 8, 3, 5)
    np.testing.assert_array_equal(tt.depth_to_space_python(x, 2, mode),
                                  _ort("DepthToSpace", [x], 4, blocksize=2, mode=mode))
    y = _rand(1, 3, 4, 6)
    np.testing.assert_array_equal(tt.space_to_depth_python(y, 2), _ort("SpaceToDepth", [y], 4, blocksize=2))
    np.testing.assert_array_equal(tt.depth_to_space_python(tt.space_to_depth_python(y, 2), 2), y)


def test_indexing_references_match_explicit_loops() -> None:
    data = _rand(3, 4)
    idx = RNG.integers(0, 4, size=(3, 2))
    gathered = tt.gather_python(data, 1, idx)
    assert all(gathered[i, j] == data[i, idx[i, j]] for i in range(3) for j in range(2))
    nd_idx = np.array([[0, 2, 1], [3, 0, 3]])
    assert tt.gather_nd_python(data, nd_idx).tolist() == [data[0, 3], data[2, 0], data[1, 3]]
    hot = tt.one_hot(np.array([[1, 0], [2, 3]]), 5.0, -1.0, 3, 1, "float32")
    assert hot.shape == (2, 3, 2) and hot.dtype == np.float32
    assert hot[:, :, 0].tolist() == [[-1, 5, -1], [-1, -1, 5]]
    assert hot[1, :, 1].tolist() == [-1, -1, -1]  # index 3 is out of the depth: all off
    np.testing.assert_array_equal(tt.slice_axis_python(data, 1, 1, -1), data[:, 1:3])


def test_batch_matmul_and_sequence_mask() -> None:
    x, y = _rand(2, 3, 4), _rand(1, 5, 4)
    out = tt.batch_matmul(x, y)  # y transposed, its batch of 1 broadcast
    np.testing.assert_allclose(out[1], x[1] @ y[0].T, rtol=1e-5)
    np.testing.assert_allclose(tt.batch_matmul(x, x, trans_x=True, trans_y=False)[0], x[0].T @ x[0],
                               rtol=1e-5)
    data = _rand(4, 2, 3)  # (max_length, batch, ...)
    masked = tt.sequence_mask(data, np.array([1, 3]), -9.0, 0)
    np.testing.assert_array_equal(masked[:1, 0], data[:1, 0])
    assert (masked[1:, 0] == -9.0).all() and (masked[3:, 1] == -9.0).all()
    np.testing.assert_array_equal(masked[:3, 1], data[:3, 1])
