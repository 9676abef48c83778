"""``nn.contrib_conv2d_winograd_NCHWc``: the transforms, the weight transform, the NumPy reference
and the type relation. The oracle is the direct convolution (``conv_nd``) of the original
filters; the compiled kernels are tested in ``tests/te/test_templates_winograd.py``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.errors import KilnTypeError
from kiln.interpreter import evaluate
from kiln.ir.module import IRModule
from kiln.op.conv_ref import conv_nd
from kiln.op.nn_winograd import winograd_matrices, winograd_weight
from kiln.transform.infer_type import infer_type


@pytest.mark.parametrize("m", [2, 4])
def test_matrices_make_the_transformed_product_a_correlation(m: int) -> None:
    at, g, bt = winograd_matrices(m)
    a = m + 2
    assert at.shape == (m, a) and g.shape == (a, 3) and bt.shape == (a, a)
    rng = np.random.default_rng(m)
    for _ in range(5):
        d, w = rng.standard_normal(a), rng.standard_normal(3)
        np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), np.correlate(d, w, "valid"),
                                   atol=1e-12)
    # B^T's entries are exact in binary (the transform's multiplies round nothing extra)
    np.testing.assert_array_equal(bt * 2.0 ** 20, np.round(bt * 2.0 ** 20))


def test_an_unsupported_tile_size_is_an_error() -> None:
    with pytest.raises(ValueError, match="tile_size must be one of"):
        winograd_matrices(3)


def _nchwc(x: np.ndarray, block: int) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def _winograd_call(data: np.ndarray, weight: np.ndarray, pads: tuple[int, int, int, int],
                   m: int, x: int, y: int) -> np.ndarray:
    dv = relay.var("d", shape=(data.shape[0], data.shape[1] // x, *data.shape[2:], x))
    call = relay.nn.contrib_conv2d_winograd_nchwc(
        dv, relay.const(winograd_weight(weight, m, y)), tile_size=m, padding=pads,
        channels=weight.shape[0], data_layout=f"NCHW{x}c", out_layout=f"NCHW{y}c")
    mod = infer_type(IRModule.from_expr(relay.Function([dv], call)))
    out = np.asarray(evaluate(mod, [_nchwc(data, x)]))
    n, kb, oh, ow, _ = out.shape
    return out.transpose(0, 1, 4, 2, 3).reshape(n, kb * y, oh, ow)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 2), cb=st.integers(1, 3), kb=st.integers(1, 3), h=st.integers(1, 11),
       w=st.integers(1, 11), pads=st.tuples(*[st.integers(0, 2)] * 4), m=st.sampled_from([2, 4]),
       x=st.sampled_from([1, 4]), y=st.sampled_from([1, 4]), seed=st.integers(0, 2**16))
def test_reference_equals_the_direct_convolution(n, cb, kb, h, w, pads, m, x, y, seed) -> None:
    top, left, bottom, right = pads
    if h + top + bottom < 3 or w + left + right < 3:
        return
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((n, cb * x, h, w)).astype("float32")
    weight = rng.standard_normal((kb * y, cb * x, 3, 3)).astype("float32")
    out = _winograd_call(data, weight, pads, m, x, y)
    ref = conv_nd(data, weight, (1, 1), ((top, bottom), (left, right)), (1, 1), 1,
                  (h + top + bottom - 2, w + left + right - 2), np.dtype("float64"))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(ref).max()))


def test_weight_transform_is_g_g_gt_per_filter() -> None:
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((8, 3, 3, 3)).astype("float32")
    u = winograd_weight(weight, 4, 4)
    assert u.shape == (6, 6, 2, 3, 4) and u.dtype == np.float32
    _, g, _ = winograd_matrices(4)
    np.testing.assert_allclose(u[:, :, 1, 2, 3], g @ weight[7, 2] @ g.T, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("data", "weight", "attrs", "message"), [
    ((1, 2, 8, 8, 8), (6, 6, 1, 16, 16), {"data_layout": "NCHW"}, "not a blocked layout"),
    ((1, 2, 8, 8, 8), (6, 6, 1, 16, 16), {"data_layout": "NCHW16c"}, r"data must be \(N, C // 16"),
    ((1, 2, 8, 8, 8), (4, 4, 1, 16, 16), {}, "a = tile_size \\+ 2 = 6"),
    ((1, 2, 8, 8, 8), (6, 6, 1, 24, 16), {}, "16 input channels but the weight 24"),
    ((1, 2, 8, 8, 8), (6, 6, 1, 16, 16), {"channels": 32}, "channels=32 but the weight gives 16"),
    ((1, 2, 8, 8, 8), (6, 6, 1, 16, 16), {"tile_size": 3}, "tile_size must be one of"),
    ((1, 2, 2, 8, 8), (6, 6, 1, 16, 16), {"padding": 0}, "output 0 x 6 is empty"),
])
def test_bad_calls_are_type_errors_naming_the_shapes(data, weight, attrs, message) -> None:
    d = relay.var("d", shape=data)
    u = relay.var("u", shape=weight)
    kwargs = {"data_layout": "NCHW8c", "out_layout": "NCHW16c", **attrs}
    call = relay.nn.contrib_conv2d_winograd_nchwc(d, u, **kwargs)
    with pytest.raises(KilnTypeError, match=message):
        infer_type(IRModule.from_expr(relay.Function([d, u], call)))


def test_result_type_follows_the_padding_and_out_layout() -> None:
    d = relay.var("d", shape=(2, 3, 10, 7, 8))
    u = relay.var("u", shape=(6, 6, 5, 24, 4))
    call = relay.nn.contrib_conv2d_winograd_nchwc(d, u, padding=(1, 0, 2, 1), channels=20,
                                                  data_layout="NCHW8c", out_layout="NCHW4c")
    mod = infer_type(IRModule.from_expr(relay.Function([d, u], call)))
    assert tuple(mod["main"].body.checked_type.shape) == (2, 5, 11, 6, 4)
