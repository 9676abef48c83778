"""``nn.deformable_conv2d``: reference kernel vs a NumPy loop and onnxruntime's DeformConv, the
compiled C kernel vs the reference, the ONNX converter, and the type relation.

Float32 comparisons with onnxruntime allow 10x the usual float32 tolerance (1e-4): onnxruntime
samples and accumulates in float32, the reference in float64, and the sums here run over up to
27 products of unit-size values whose bilinear weights are themselves rounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from _compute_native import Case, check_case, run_cases, var
from _onnx_oracle import assert_close, run_onnx, run_relay
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from kiln import relay
from kiln.errors import KilnTypeError
from kiln.frontend.onnx import from_onnx
from kiln.interpreter import evaluate
from kiln.ir import IRModule
from kiln.op.registry import OpPattern, get_op_def
from kiln.transform.infer_type import infer_type

Seq = Sequence[int]
rng = np.random.default_rng(7)

# name: (N, C, O, H, W, kernel, strides, pads (top, left, bottom, right), dilation, groups,
#        offset groups, mask, bias)
CONFIGS: dict[str, tuple[Any, ...]] = {
    "plain": (1, 2, 3, 6, 5, (3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1, 1, False, False),
    "batch-groups-offset-groups": (2, 4, 4, 7, 6, (3, 2), (2, 1), (1, 0, 2, 1), (1, 1), 2, 2,
                                   True, True),
    "dilated-offset-groups": (1, 4, 2, 8, 8, (2, 2), (1, 2), (1, 1, 1, 1), (2, 1), 1, 2, True,
                              False),
    "batch-groups-bias": (2, 2, 4, 5, 5, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2, 1, False, True),
    "groups-across-offset-groups": (1, 6, 4, 6, 7, (1, 3), (2, 2), (0, 1, 0, 1), (1, 2), 2, 3,
                                    True, True),
}


def _out_size(size: int, k: int, s: int, d: int, before: int, after: int) -> int:
    return (size + before + after - (k - 1) * d - 1) // s + 1


def _inputs(cfg: tuple[Any, ...], dtype: str = "float32", scale: float = 2.0
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Data, offset, weight, mask (or None) and bias (or None) for a configuration."""
    n, c, o, h, w, (kh, kw), (sh, sw), pads, (dh, dw), groups, dg, with_mask, with_bias = cfg
    oh = _out_size(h, kh, sh, dh, pads[0], pads[2])
    ow = _out_size(w, kw, sw, dw, pads[1], pads[3])
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    offset = (scale * rng.standard_normal((n, 2 * dg * kh * kw, oh, ow))).astype(dtype)
    weight = rng.standard_normal((o, c // groups, kh, kw)).astype(dtype)
    mask = rng.uniform(0, 1, (n, dg * kh * kw, oh, ow)).astype(dtype) if with_mask else None
    bias = rng.standard_normal(o).astype(dtype) if with_bias else None
    return x, offset, weight, mask, bias


def _bilinear(image: np.ndarray, py: float, px: float) -> float:
    """Bilinear value of a 2-d image at ``(py, px)``; neighbours outside the image count as 0."""
    y0, x0 = int(np.floor(py)), int(np.floor(px))
    total = 0.0
    for yy in (y0, y0 + 1):
        for xx in (x0, x0 + 1):
            if 0 <= yy < image.shape[0] and 0 <= xx < image.shape[1]:
                total += float(image[yy, xx]) * (1 - abs(py - yy)) * (1 - abs(px - xx))
    return total


def _naive(x: np.ndarray, offset: np.ndarray, weight: np.ndarray, mask: np.ndarray | None,
           strides: Seq, pads: Seq, dilation: Seq, groups: int, dg: int) -> np.ndarray:
    """Float64 deformable convolution, one sample at a time (the loop oracle)."""
    n, c = x.shape[:2]
    o, cg, kh, kw = weight.shape
    oh, ow = offset.shape[2:]
    og = o // groups
    samples = np.zeros((n, c, kh, kw, oh, ow))
    for b, ch, i, j, y, xo in np.ndindex(n, c, kh, kw, oh, ow):
        g = ch // (c // dg)
        k = g * kh * kw + i * kw + j
        py = y * strides[0] - pads[0] + i * dilation[0] + float(offset[b, 2 * k, y, xo])
        px = xo * strides[1] - pads[1] + j * dilation[1] + float(offset[b, 2 * k + 1, y, xo])
        value = _bilinear(x[b, ch].astype(np.float64), py, px)
        if mask is not None:
            value *= float(mask[b, k, y, xo])
        samples[b, ch, i, j, y, xo] = value
    out = np.zeros((n, o, oh, ow))
    for b, oc, y, xo in np.ndindex(n, o, oh, ow):
        g = oc // og
        patch = samples[b, g * cg:(g + 1) * cg, :, :, y, xo]
        out[b, oc, y, xo] = float((patch * weight[oc].astype(np.float64)).sum())
    return out


def _attrs(cfg: tuple[Any, ...]) -> dict[str, Any]:
    _, _, o, _, _, kernel, strides, pads, dilation, groups, dg = cfg[:11]
    return {"strides": strides, "padding": pads, "dilation": dilation, "groups": groups,
            "deformable_groups": dg, "channels": o, "kernel_size": kernel}


def _kiln(x: np.ndarray, offset: np.ndarray, weight: np.ndarray, mask: np.ndarray | None,
          bias: np.ndarray | None, **attrs: Any) -> np.ndarray:
    """The relay op (plus ``nn.bias_add``) evaluated by the reference interpreter."""
    arrays = [x, offset, weight] + [a for a in (mask, bias) if a is not None]

    def build(*p: Any) -> Any:
        rest = list(p[3:])
        m = rest.pop(0) if mask is not None else None
        out = relay.nn.deformable_conv2d(p[0], p[1], p[2], mask=m, **attrs)
        return relay.nn.bias_add(out, rest[0]) if bias is not None else out

    return run_relay(build, *arrays)


def _onnx_attrs(cfg: tuple[Any, ...]) -> dict[str, Any]:
    _, _, _, _, _, kernel, strides, pads, dilation, groups, dg = cfg[:11]
    return {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads),
            "dilations": list(dilation), "group": groups, "offset_group": dg}


# --- reference kernel -------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_reference_matches_naive_loop(name: str) -> None:
    cfg = CONFIGS[name]
    x, offset, weight, mask, _ = _inputs(cfg, "float64")
    got = _kiln(x, offset, weight, mask, None, **_attrs(cfg))
    want = _naive(x, offset, weight, mask, cfg[6], cfg[7], cfg[8], cfg[9], cfg[10])
    assert got.dtype == np.float64
    assert_close(got, want, "float64")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_reference_matches_onnxruntime(name: str) -> None:
    cfg = CONFIGS[name]
    x, offset, weight, mask, bias = _inputs(cfg)
    want = run_onnx("DeformConv", [x, weight, offset, bias, mask], _onnx_attrs(cfg), opset=19)[0]
    got = _kiln(x, offset, weight, mask, bias, **_attrs(cfg))
    assert got.dtype == np.float32
    assert_close(got, want, "float32", scale=10)


def test_far_offsets_read_zeros() -> None:
    """Every tap far outside the image: only the bias remains (onnxruntime agrees)."""
    cfg = CONFIGS["batch-groups-bias"]
    x, offset, weight, _, bias = _inputs(cfg)
    far = np.where(np.arange(offset.shape[1])[None, :, None, None] % 2, 50.0, -50.0)
    offset = np.broadcast_to(far, offset.shape).astype(np.float32)
    want = run_onnx("DeformConv", [x, weight, offset, bias], _onnx_attrs(cfg), opset=19)[0]
    got = _kiln(x, offset, weight, None, bias, **_attrs(cfg))
    assert bias is not None
    assert_close(got, np.broadcast_to(bias[None, :, None, None], got.shape))
    assert_close(got, want)


@pytest.mark.parametrize("name", ["plain", "batch-groups-offset-groups", "dilated-offset-groups"])
def test_zero_offsets_equal_conv2d(name: str) -> None:
    cfg = CONFIGS[name]
    x, offset, weight, _, _ = _inputs(cfg)
    offset = np.zeros_like(offset)
    attrs = _attrs(cfg)
    got = _kiln(x, offset, weight, None, None, **attrs)
    onnx_attrs = {k: v for k, v in _onnx_attrs(cfg).items() if k != "offset_group"}
    assert_close(got, run_onnx("Conv", [x, weight], onnx_attrs)[0], "float32", scale=10)
    del attrs["deformable_groups"]
    conv = run_relay(lambda a, b: relay.nn.conv2d(a, b, **attrs), x, weight)
    assert_close(got, conv, "float32", scale=10)


def test_nhwc_layout_matches_nchw() -> None:
    """Data, offset and mask in NHWC with an HWIO kernel: the NCHW result, transposed."""
    cfg = CONFIGS["batch-groups-offset-groups"]
    x, offset, weight, mask, _ = _inputs(cfg)
    want = run_onnx("DeformConv", [x, weight, offset, None, mask], _onnx_attrs(cfg), opset=19)[0]
    nhwc = (0, 2, 3, 1)
    got = _kiln(x.transpose(nhwc), offset.transpose(nhwc), weight.transpose(2, 3, 1, 0),
                None if mask is None else mask.transpose(nhwc), None, data_layout="NHWC",
                kernel_layout="HWIO", **_attrs(cfg))
    assert_close(got, want.transpose(nhwc), "float32", scale=10)


def test_out_dtype() -> None:
    cfg = CONFIGS["plain"]
    x, offset, weight, _, _ = _inputs(cfg)
    got = _kiln(x, offset, weight, None, None, out_dtype="float64", **_attrs(cfg))
    assert got.dtype == np.float64
    want = _naive(x, offset, weight, None, cfg[6], cfg[7], cfg[8], cfg[9], cfg[10])
    assert_close(got, want, "float32")


def test_tvm_call_form() -> None:
    """Three inputs and TVM's attribute defaults; the mask is a fourth input."""
    x = relay.var("x", shape=(1, 2, 5, 5))
    off = relay.var("off", shape=(1, 18, 3, 3))
    w = relay.var("w", shape=(4, 2, 3, 3))
    call = relay.nn.deformable_conv2d(x, off, w, padding=0)
    assert len(call.args) == 3
    a = call.attrs
    assert (a.strides, a.padding, a.dilation, a.deformable_groups, a.groups) == \
        ((1, 1), (0, 0, 0, 0), (1, 1), 1, 1)
    assert (a.channels, a.kernel_size, a.data_layout, a.kernel_layout, a.out_layout, a.out_dtype) \
        == (None, None, "NCHW", "OIHW", "", "")
    masked = relay.nn.deformable_conv2d(x, off, w, mask=relay.var("m", shape=(1, 9, 3, 3)))
    assert len(masked.args) == 4
    assert get_op_def("nn.deformable_conv2d").pattern == OpPattern.OUT_ELEMWISE_FUSABLE


# --- ONNX converter ------------------------------------------------------------------------------

def test_onnx_import_matches_onnxruntime() -> None:
    cfg = CONFIGS["groups-across-offset-groups"]
    x, offset, weight, mask, bias = _inputs(cfg)
    assert mask is not None and bias is not None
    feeds = {"X": x, "offset": offset, "mask": mask}
    node = helper.make_node("DeformConv", ["X", "W", "offset", "B", "mask"], ["Y"],
                            **_onnx_attrs(cfg))
    graph = helper.make_graph(
        [node], "deform",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(weight, "W"), onnx.numpy_helper.from_array(bias, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    mod, params = from_onnx(model, shape={k: v.shape for k, v in feeds.items()})
    got = evaluate(mod, feeds, params=params)
    want = run_onnx("DeformConv", [x, weight, offset, bias, mask], _onnx_attrs(cfg), opset=19)[0]
    assert_close(got, want, "float32", scale=10)


# --- compiled (C target) vs reference -------------------------------------------------------------

def _case(cfg: tuple[Any, ...], dtype: str = "float32", epilogue: bool = False,
          layout: bool = False) -> Case:
    x, offset, weight, mask, bias = _inputs(cfg, dtype)
    attrs = _attrs(cfg)
    arrays: dict[str, np.ndarray] = {"x": x, "offset": offset, "weight": weight}
    if layout:
        nhwc = (0, 2, 3, 1)
        arrays = {"x": x.transpose(nhwc), "offset": offset.transpose(nhwc),
                  "weight": weight.transpose(2, 3, 1, 0)}
        mask = None if mask is None else mask.transpose(nhwc)
        attrs.update(data_layout="NHWC", kernel_layout="HWIO")
    if mask is not None:
        arrays["mask"] = mask
    if epilogue and bias is not None:
        arrays["bias"] = bias

    def build() -> Any:
        v = {k: var(k, a) for k, a in arrays.items()}
        out = relay.nn.deformable_conv2d(v["x"], v["offset"], v["weight"], mask=v.get("mask"),
                                         **attrs)
        if "bias" in v:
            out = relay.nn.relu(relay.nn.bias_add(out, v["bias"], axis=3 if layout else 1))
        return out

    # float16: the compiled kernel works in float32, the reference rounds a float64 value once.
    tol = {"float64": 1e-10, "float32": 1e-4, "float16": 1e-2}[dtype]
    return Case(build, {k: np.ascontiguousarray(a) for k, a in arrays.items()}, rtol=tol, atol=tol)


@pytest.fixture(scope="module")
def compiled() -> dict[str, Case]:
    cases = {
        "plain": _case(CONFIGS["plain"]),
        "groups-offset-groups-mask": _case(CONFIGS["batch-groups-offset-groups"]),
        "fused-bias-relu": _case(CONFIGS["groups-across-offset-groups"], epilogue=True),
        "float64-dilated": _case(CONFIGS["dilated-offset-groups"], "float64"),
        "nhwc-hwio": _case(CONFIGS["batch-groups-offset-groups"], layout=True),
        "float16": _case(CONFIGS["batch-groups-bias"], "float16"),
    }
    return dict(run_cases(cases))


@pytest.mark.parametrize("name", ["plain", "groups-offset-groups-mask", "fused-bias-relu",
                                  "float64-dilated", "nhwc-hwio", "float16"])
def test_compiled_matches_reference(compiled: dict[str, Case], name: str) -> None:
    check_case(compiled[name])


# --- type relation --------------------------------------------------------------------------------

def _infer(shapes: Sequence[tuple[int, ...]], dtypes: Sequence[str] | None = None,
           **attrs: Any) -> Any:
    dtypes = dtypes or ["float32"] * len(shapes)
    names = ["data", "offset", "weight", "mask"]
    v = [relay.var(n, shape=s, dtype=d) for n, s, d in zip(names, shapes, dtypes)]
    call = relay.nn.deformable_conv2d(v[0], v[1], v[2], mask=v[3] if len(v) == 4 else None,
                                      **attrs)
    return infer_type(IRModule.from_expr(relay.Function(v, call)))["main"].ret_type


ERRORS = [  # shapes, dtypes, attrs, substrings of the message
    ([(1, 2, 5, 5), (1, 16, 3, 3), (4, 2, 3, 3)], None, {},
     ["offset", "(1, 16, 3, 3)", "expected (1, 18, 3, 3)", "deformable_groups=1"]),
    ([(1, 2, 5, 5), (1, 18, 4, 3), (4, 2, 3, 3)], None, {},
     ["offset", "(1, 18, 4, 3)", "expected (1, 18, 3, 3)"]),
    ([(1, 4, 5, 5), (1, 36, 3, 3), (4, 4, 3, 3), (1, 9, 3, 3)], None, {"deformable_groups": 2},
     ["mask", "(1, 9, 3, 3)", "expected (1, 18, 3, 3)"]),
    ([(1, 3, 5, 5), (1, 36, 3, 3), (4, 3, 3, 3)], None, {"deformable_groups": 2},
     ["data", "(1, 3, 5, 5)", "3 input channels", "deformable_groups=2"]),
    ([(1, 2, 5, 5), (1, 18, 3, 3), (4, 3, 3, 3)], None, {},
     ["data", "weight", "(4, 3, 3, 3)", "2 input channels"]),
    ([(1, 2, 5, 5), (1, 18, 3, 3), (4, 2, 3, 3)], ["float32", "float16", "float32"], {},
     ["offset", "float16", "data's dtype float32"]),
    ([(1, 2, 5, 5), (1, 18, 3, 3), (4, 2, 3, 3), (1, 9, 3, 3)],
     ["float32", "float32", "float32", "float64"], {}, ["mask", "float64", "float32"]),
    ([(1, 2, 5, 5), (1, 18, 3, 3), (4, 2, 3, 3)], ["int32", "int32", "int32"], {},
     ["data", "int32", "float dtype"]),
    ([(1, 2, 5, 5), (1, 18, 3, 3), (4, 2, 3, 3)], None, {"kernel_size": 2},
     ["kernel_size=(2, 2)", "(4, 2, 3, 3)"]),
]


@pytest.mark.parametrize("shapes, dtypes, attrs, words", ERRORS)
def test_type_errors(shapes: list[tuple[int, ...]], dtypes: list[str] | None,
                     attrs: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(KilnTypeError) as info:
        _infer(shapes, dtypes, **attrs)
    message = str(info.value)
    assert "nn.deformable_conv2d" in message
    for word in words:
        assert word in message, (word, message)


def test_argument_count_error() -> None:
    x = relay.var("x", shape=(1, 2, 5, 5))
    w = relay.var("w", shape=(4, 2, 3, 3))
    call = relay.Call(get_op_def("nn.deformable_conv2d").op, [x, w],
                      relay.nn.deformable_conv2d(x, x, w).attrs)
    with pytest.raises(KilnTypeError, match=r"nn\.deformable_conv2d.*got 2"):
        infer_type(IRModule.from_expr(relay.Function([x, w], call)))


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 2), groups=st.sampled_from([1, 2]), dg=st.sampled_from([1, 2]),
       cpg=st.integers(1, 2), o_per_group=st.integers(1, 2), size=st.integers(6, 9),
       k=st.integers(1, 3), s=st.integers(1, 2), d=st.integers(1, 2), p=st.integers(0, 2),
       mask=st.booleans(), off_by=st.sampled_from([0, 1]))
def test_shape_relation(n: int, groups: int, dg: int, cpg: int, o_per_group: int, size: int,
                        k: int, s: int, d: int, p: int, mask: bool, off_by: int) -> None:
    c = groups * dg * cpg
    o = groups * o_per_group
    out = (size + 2 * p - (k - 1) * d - 1) // s + 1
    shapes = [(n, c, size, size), (n, 2 * dg * k * k + 2 * off_by, out, out),
              (o, c // groups, k, k)]
    if mask:
        shapes.append((n, dg * k * k, out, out))
    attrs = {"strides": s, "padding": p, "dilation": d, "groups": groups, "deformable_groups": dg}
    if off_by:
        with pytest.raises(KilnTypeError, match="offset"):
            _infer(shapes, **attrs)
        return
    ty = _infer(shapes, **attrs)
    assert ty.shape == (n, o, out, out) and ty.dtype == "float32"
