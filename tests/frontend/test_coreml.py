"""CoreML importer: specs built with coremltools (NeuralNetworkBuilder, ct.convert), compiled with
relay.build and compared with PyTorch or a NumPy reference written from NeuralNetwork.proto.

CoreML cannot run models on Linux, so the oracle is the same network with the same weights in
PyTorch (or NumPy). Tolerance: rtol 1e-4, atol 1e-5 (1e-4 for the multi-layer models).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
F = torch.nn.functional

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: E402

from kiln.errors import FrontendError, UnsupportedOpError  # noqa: E402
from kiln.frontend.coreml import from_coreml, supported_layers, supported_mil_ops  # noqa: E402
from tests.frontend._compiled import run_compiled  # noqa: E402

RNG = np.random.default_rng(7)
RTOL, ATOL = 1e-4, 1e-5


def rand(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def t(x: np.ndarray) -> Any:
    return torch.tensor(x)


def check(spec: Any, inputs: dict[str, np.ndarray], refs: list[np.ndarray], atol: float = ATOL,
          **kw: Any) -> list[np.ndarray]:
    mod, params = from_coreml(spec, **kw)
    outs = run_compiled(mod, params, inputs)
    assert len(outs) == len(refs)
    for got, ref in zip(outs, refs):
        np.testing.assert_allclose(got, np.asarray(ref, dtype=np.float32).reshape(got.shape)
                                   if np.size(ref) == got.size else ref, rtol=RTOL, atol=atol)
    return outs


def builder(inputs: dict[str, tuple[int, ...]], outputs: list[str], rank5: bool = True) -> Any:
    return NeuralNetworkBuilder([(k, datatypes.Array(*v)) for k, v in inputs.items()],
                                [(o, None) for o in outputs], disable_rank5_shape_mapping=not rank5)


def conv_w(oihw: np.ndarray) -> np.ndarray:
    """OIHW weights in the builder's (H, W, I, O) layout."""
    return oihw.transpose(2, 3, 1, 0)


# --- one model per layer converter (old rank-5 layers: input [C, H, W] -> (1, C, H, W)) --------

def case_conv() -> tuple[Any, dict, list]:
    b = builder({"x": (4, 9, 9)}, ["valid", "same", "tlh", "grp", "dw"])
    x = rand(1, 4, 9, 9)
    w1, b1 = rand(6, 4, 3, 3), rand(6)
    b.add_convolution("valid", 4, 6, 3, 3, 2, 2, "valid", 1, conv_w(w1), b1, True, input_name="x",
                      output_name="valid", padding_top=1, padding_bottom=0, padding_left=2, padding_right=1)
    w2 = rand(5, 4, 3, 3)
    b.add_convolution("same", 4, 5, 3, 3, 2, 2, "same", 1, conv_w(w2), None, False, input_name="x",
                      output_name="same")
    w3 = rand(5, 4, 4, 4)
    b.add_convolution("tlh", 4, 5, 4, 4, 1, 1, "same", 1, conv_w(w3), None, False, input_name="x",
                      output_name="tlh", same_padding_asymmetry_mode="TOP_LEFT_HEAVY")
    w4, b4 = rand(6, 2, 3, 3), rand(6)
    b.add_convolution("grp", 2, 6, 3, 3, 1, 1, "valid", 2, conv_w(w4), b4, True, input_name="x",
                      output_name="grp", dilation_factors=[2, 2])
    w5 = rand(4, 1, 3, 3)
    b.add_convolution("dw", 1, 4, 3, 3, 1, 1, "same", 4, conv_w(w5), None, False, input_name="x",
                      output_name="dw")
    tx = t(x)
    refs = [F.conv2d(F.pad(tx, (2, 1, 1, 0)), t(w1), t(b1), stride=2),
            F.conv2d(F.pad(tx, (1, 1, 1, 1)), t(w2), stride=2),   # 9 -> 5: pad 2, split 1/1
            F.conv2d(F.pad(tx, (2, 1, 2, 1)), t(w3)),             # pad 3: top-left heavy 2/1
            F.conv2d(tx, t(w4), t(b4), dilation=2, groups=2),
            F.conv2d(tx, t(w5), padding=1, groups=4)]
    return b.spec, {"x": x}, [r.numpy() for r in refs]


def case_deconv() -> tuple[Any, dict, list]:
    b = builder({"x": (4, 5, 5)}, ["plain", "shaped", "grouped"])
    x = rand(1, 4, 5, 5)
    w1, b1 = rand(4, 3, 3, 3), rand(3)  # (Cin, Cout, kh, kw)
    b.add_convolution("plain", 4, 3, 3, 3, 2, 2, "valid", 1, w1.transpose(2, 3, 0, 1), b1, True,
                      is_deconv=True, input_name="x", output_name="plain")
    w2 = rand(4, 2, 4, 4)
    b.add_convolution("shaped", 4, 2, 4, 4, 2, 2, "valid", 1, w2.transpose(2, 3, 0, 1), None, False,
                      is_deconv=True, output_shape=(10, 10), input_name="x", output_name="shaped")
    w3 = rand(4, 3, 3, 3)  # groups 2: (Cin, Cout/groups, kh, kw)
    b.add_convolution("grouped", 4, 6, 3, 3, 1, 1, "valid", 2, w3.transpose(2, 3, 0, 1), None, False,
                      is_deconv=True, input_name="x", output_name="grouped")
    tx = t(x)
    full2 = F.conv_transpose2d(tx, t(w2), stride=2)  # 12x12, cropped to 10x10 (1 each side)
    refs = [F.conv_transpose2d(tx, t(w1), t(b1), stride=2), full2[:, :, 1:11, 1:11],
            F.conv_transpose2d(tx, t(w3), groups=2)]
    return b.spec, {"x": x}, [r.numpy() for r in refs]


def case_batchnorm() -> tuple[Any, dict, list]:
    b = builder({"x": (3, 4, 5)}, ["bn", "inorm"])
    x = rand(1, 3, 4, 5)
    g, be, m, v = rand(3), rand(3), rand(3), np.abs(rand(3)) + 0.5
    b.add_batchnorm("bn", 3, g, be, m, v, input_name="x", output_name="bn", epsilon=1e-3)
    b.add_batchnorm("inorm", 3, g, be, input_name="x", output_name="inorm", compute_mean_var=True,
                    instance_normalization=True, epsilon=1e-5)
    refs = [F.batch_norm(t(x), t(m), t(v), t(g), t(be), eps=1e-3),
            F.instance_norm(t(x), weight=t(g), bias=t(be), eps=1e-5)]
    return b.spec, {"x": x}, [r.numpy() for r in refs]


ACTIVATIONS: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "RELU": (None, torch.relu),
    "LEAKYRELU": ([0.2], lambda x: F.leaky_relu(x, 0.2)),
    "SIGMOID": (None, torch.sigmoid),
    "TANH": (None, torch.tanh),
    "LINEAR": ([1.5, -0.5], lambda x: 1.5 * x - 0.5),
    "PRELU": (np.array([0.1, 0.2, 0.3], np.float32),
              lambda x: F.prelu(x, torch.tensor([0.1, 0.2, 0.3]))),
    "ELU": (0.7, lambda x: F.elu(x, 0.7)),
    "SOFTPLUS": (None, F.softplus),
    "SCALED_TANH": ([1.7, 0.6], lambda x: 1.7 * torch.tanh(0.6 * x)),
    "SIGMOID_HARD": ([0.2, 0.5], lambda x: torch.clamp(0.2 * x + 0.5, 0, 1)),
    "SOFTSIGN": (None, F.softsign),
    "THRESHOLDEDRELU": (0.3, lambda x: torch.where(x >= 0.3, x, torch.zeros_like(x))),
    "PARAMETRICSOFTPLUS": ([np.array([1.0, 2.0, 0.5], np.float32),
                            np.array([0.5, 1.0, 2.0], np.float32)],
                           lambda x: torch.tensor([1.0, 2.0, 0.5]).reshape(3, 1, 1)
                           * F.softplus(torch.tensor([0.5, 1.0, 2.0]).reshape(3, 1, 1) * x)),
}


def case_activation() -> tuple[Any, dict, list]:
    names = [k.lower() for k in ACTIVATIONS]
    b = builder({"x": (3, 4, 4)}, names)
    x = rand(1, 3, 4, 4, scale=2.0)
    for (kind, (params, _)), name in zip(ACTIVATIONS.items(), names):
        b.add_activation(name, kind, "x", name, params=params)
    return b.spec, {"x": x}, [fn(t(x)).numpy() for _, fn in ACTIVATIONS.values()]


def case_pooling() -> tuple[Any, dict, list]:
    outs = ["maxv", "avgs", "avgpad", "gmax", "gavg", "lastmax", "lastavg"]
    b = builder({"x": (3, 7, 7)}, outs)
    x = rand(1, 3, 7, 7)
    b.add_pooling("maxv", 3, 3, 2, 2, "MAX", "VALID", "x", "maxv")
    b.add_pooling("avgs", 3, 3, 2, 2, "AVERAGE", "SAME", "x", "avgs", exclude_pad_area=True)
    b.add_pooling("avgpad", 2, 2, 2, 2, "AVERAGE", "VALID", "x", "avgpad", exclude_pad_area=False,
                  padding_top=1, padding_bottom=1, padding_left=1, padding_right=1)
    b.add_pooling("gmax", 0, 0, 1, 1, "MAX", "VALID", "x", "gmax", is_global=True)
    b.add_pooling("gavg", 0, 0, 1, 1, "AVERAGE", "VALID", "x", "gavg", is_global=True)
    b.add_pooling("lastmax", 2, 2, 2, 2, "MAX", "INCLUDE_LAST_PIXEL", "x", "lastmax")
    b.add_pooling("lastavg", 3, 3, 2, 2, "AVERAGE", "INCLUDE_LAST_PIXEL", "x", "lastavg",
                  exclude_pad_area=False, padding_top=1, padding_left=1, padding_bottom=1, padding_right=1)
    tx = t(x)
    refs = [F.max_pool2d(tx, 3, 2),
            F.avg_pool2d(tx, 3, 2, padding=1, count_include_pad=False),  # 7 -> 4: pad 2 split 1/1
            F.avg_pool2d(tx, 2, 2, padding=1, count_include_pad=True),
            tx.amax((2, 3), keepdim=True), tx.mean((2, 3), keepdim=True),
            F.max_pool2d(tx, 2, 2, ceil_mode=True),
            F.avg_pool2d(tx, 3, 2, padding=1, ceil_mode=True, count_include_pad=True)]
    return b.spec, {"x": x}, [r.numpy() for r in refs]


def case_inner_product() -> tuple[Any, dict, list]:
    b = builder({"x": (2, 3, 3)}, ["sm"])
    x = rand(1, 2, 3, 3)
    w, bias = rand(5, 18), rand(5)
    b.add_flatten("flat", 0, "x", "f")
    b.add_inner_product("fc", w, bias, 18, 5, True, "f", "fc")
    b.add_softmax("sm", "fc", "sm")
    return b.spec, {"x": x}, [torch.softmax(F.linear(t(x).flatten(1), t(w), t(bias)), 1).numpy()]


def case_softmax() -> tuple[Any, dict, list]:
    b = builder({"x": (4, 2, 3)}, ["y"])
    x = rand(1, 4, 2, 3)
    b.add_softmax("sm", "x", "y")
    return b.spec, {"x": x}, [torch.softmax(t(x), 1).numpy()]


def case_elementwise() -> tuple[Any, dict, list]:
    outs = ["add", "mul", "ave", "max", "min", "adda", "mula", "cat"]
    b = builder({"a": (3, 4, 4), "b": (3, 4, 4)}, outs)
    a, c = rand(1, 3, 4, 4), rand(1, 3, 4, 4)
    for mode, name in (("ADD", "add"), ("MULTIPLY", "mul"), ("AVE", "ave"), ("MAX", "max"), ("MIN", "min"),
                       ("CONCAT", "cat")):
        b.add_elementwise(name, ["a", "b"], name, mode)
    b.add_elementwise("adda", ["a"], "adda", "ADD", alpha=2.5)
    b.add_elementwise("mula", ["a"], "mula", "MULTIPLY", alpha=-3.0)
    refs = [a + c, a * c, (a + c) / 2, np.maximum(a, c), np.minimum(a, c), a + 2.5, a * -3.0,
            np.concatenate([a, c], 1)]
    return b.spec, {"a": a, "b": c}, refs


def case_shape_ops() -> tuple[Any, dict, list]:
    b = builder({"x": (2, 3, 4)}, ["perm", "resh", "reshl", "flatl"])
    x = rand(1, 2, 3, 4)
    b.add_permute("perm", (0, 3, 1, 2), "x", "perm")
    b.add_reshape("resh", "x", "resh", (4, 3, 2), 0)
    b.add_reshape("reshl", "x", "reshl", (4, 3, 2), 1)
    b.add_flatten("flatl", 1, "x", "flatl")
    hwc = x.transpose(0, 2, 3, 1)
    refs = [x.transpose(0, 3, 1, 2), x.reshape(1, 4, 3, 2),
            hwc.reshape(1, 3, 2, 4).transpose(0, 3, 1, 2), hwc.reshape(1, -1)]
    return b.spec, {"x": x}, refs


def _default_grid(size: int, out: int) -> np.ndarray:
    spacing = (size - size / out) / (out - 1)
    return np.minimum(size - 1, np.maximum(0, np.arange(out) * spacing))


def _np_bilinear(x: np.ndarray, gh: np.ndarray, gw: np.ndarray) -> np.ndarray:
    out = np.zeros((*x.shape[:2], len(gh), len(gw)), np.float64)
    for i, y in enumerate(gh):
        y0 = int(np.floor(y))
        y1, fy = min(y0 + 1, x.shape[2] - 1), y - y0
        for j, xx in enumerate(gw):
            x0 = int(np.floor(xx))
            x1, fx = min(x0 + 1, x.shape[3] - 1), xx - x0
            out[:, :, i, j] = ((1 - fy) * ((1 - fx) * x[:, :, y0, x0] + fx * x[:, :, y0, x1])
                               + fy * ((1 - fx) * x[:, :, y1, x0] + fx * x[:, :, y1, x1]))
    return out.astype(np.float32)


def case_upsample() -> tuple[Any, dict, list]:
    b = builder({"x": (2, 3, 4)}, ["nn", "bdef", "btrue", "bfalse"])
    x = rand(1, 2, 3, 4)
    b.add_upsample("nn", 2, 3, "x", "nn", mode="NN")
    modes = (("bdef", "DEFAULT"), ("btrue", "ALIGN_CORNERS_TRUE"), ("bfalse", "ALIGN_CORNERS_FALSE"))
    for name, mode in modes:
        b.add_upsample(name, 2, 2, "x", name, mode="BILINEAR", linear_upsample_mode=mode)
    tx = t(x)
    refs = [x.repeat(2, 2).repeat(3, 3), _np_bilinear(x, _default_grid(3, 6), _default_grid(4, 8)),
            F.interpolate(tx, scale_factor=2, mode="bilinear", align_corners=True).numpy(),
            F.interpolate(tx, scale_factor=2, mode="bilinear", align_corners=False).numpy()]
    return b.spec, {"x": x}, refs


def case_padding() -> tuple[Any, dict, list]:
    b = builder({"x": (2, 4, 5)}, ["const", "refl", "repl"])
    x = rand(1, 2, 4, 5)
    b.add_padding("const", 1, 2, 0, 3, 1.5, "x", "const")
    b.add_padding("refl", 2, 1, 1, 2, 0.0, "x", "refl", padding_type="reflection")
    b.add_padding("repl", 0, 1, 2, 1, 0.0, "x", "repl", padding_type="replication")
    refs = [F.pad(t(x), (1, 2, 0, 3), value=1.5), F.pad(t(x), (2, 1, 1, 2), mode="reflect"),
            F.pad(t(x), (0, 1, 2, 1), mode="replicate")]
    return b.spec, {"x": x}, [r.numpy() for r in refs]


def case_scale_bias() -> tuple[Any, dict, list]:
    b = builder({"x": (3, 2, 2)}, ["sc", "bi", "sc1"])
    x = rand(1, 3, 2, 2)
    s, sb, bb = rand(3), rand(3), rand(3, 2, 2)
    b.add_scale("sc", s, sb, True, "x", "sc", shape_scale=[3], shape_bias=[3])
    b.add_bias("bi", bb, "x", "bi", shape_bias=[3, 2, 2])
    b.add_scale("sc1", np.array([2.5], np.float32), None, False, "x", "sc1", shape_scale=[1])
    return b.spec, {"x": x}, [x * s.reshape(3, 1, 1) + sb.reshape(3, 1, 1), x + bb, x * 2.5]


UNARY = {"sqrt": lambda x: np.sqrt(2 * x + 1), "rsqrt": lambda x: 1 / np.sqrt(2 * x + 1 + 1e-6),
         "inverse": lambda x: 1 / (2 * x + 1 + 1e-6), "power": lambda x: (2 * x + 1) ** 1.5,
         "exp": lambda x: np.exp(2 * x + 1), "log": lambda x: np.log(2 * x + 1),
         "abs": lambda x: np.abs(2 * x + 1), "threshold": lambda x: np.maximum(2 * x + 1, 1.5)}


def case_unary() -> tuple[Any, dict, list]:
    b = builder({"x": (2, 3, 3)}, list(UNARY))
    x = np.abs(rand(1, 2, 3, 3)) + 0.1
    for mode in UNARY:
        b.add_unary(mode, "x", mode, mode, alpha=1.5, shift=1.0, scale=2.0)
    return b.spec, {"x": x}, [fn(x.astype(np.float64)) for fn in UNARY.values()]


def case_norms() -> tuple[Any, dict, list]:
    b = builder({"x": (6, 3, 3)}, ["l2", "lrn", "mvn"])
    x = rand(1, 6, 3, 3)
    b.add_l2_normalize("l2", "x", "l2", epsilon=1e-6)
    b.add_lrn("lrn", "x", "lrn", alpha=1e-2, beta=0.75, local_size=3, k=2.0)
    b.add_mvn("mvn", "x", "mvn", across_channels=False, normalize_variance=True, epsilon=1e-5)
    l2 = x / np.sqrt((x ** 2).sum(axis=(1, 2, 3), keepdims=True) + 1e-6)
    lrn = F.local_response_norm(t(x), 3, alpha=1e-2, beta=0.75, k=2.0).numpy()
    cen = x - x.mean(axis=(2, 3), keepdims=True)
    mvn = cen / (np.sqrt((cen ** 2).mean(axis=(2, 3), keepdims=True)) + 1e-5)
    return b.spec, {"x": x}, [l2, lrn, mvn]


def case_reduce() -> tuple[Any, dict, list]:
    modes = {("sum", "CHW"): lambda x: x.sum((1, 2, 3), keepdims=True),
             ("avg", "HW"): lambda x: x.mean((2, 3), keepdims=True),
             ("max", "C"): lambda x: x.max(1, keepdims=True),
             ("min", "H"): lambda x: x.min(2, keepdims=True),
             ("sumsquare", "W"): lambda x: (x ** 2).sum(3, keepdims=True),
             ("L2", "HW"): lambda x: np.sqrt((x ** 2).sum((2, 3), keepdims=True)),
             ("argmax", "C"): lambda x: x.argmax(1)[:, None].astype(np.float32)}
    names = [f"{m}_{a}".lower() for m, a in modes]
    b = builder({"x": (3, 4, 5)}, names)
    x = rand(1, 3, 4, 5)
    for (mode, axis), name in zip(modes, names):
        b.add_reduce(name, "x", name, axis, mode)
    return b.spec, {"x": x}, [fn(x) for fn in modes.values()]


def case_split_slice() -> tuple[Any, dict, list]:
    b = builder({"x": (4, 5, 6)}, ["s0", "s1", "sl", "crop", "s2d"])
    x = rand(1, 4, 5, 6)
    b.add_split("split", "x", ["s0", "s1"])
    b.add_slice("sl", "x", "sl", "width", start_index=1, end_index=-1, stride=2)
    b.add_crop("crop", 1, 2, 0, 1, [0, 0], ["x"], "crop")
    b.add_slice("xs", "x", "xs", "height", start_index=0, end_index=4)
    b.add_reorganize_data("s2d", "xs", "s2d0", "SPACE_TO_DEPTH", 2)
    b.add_reorganize_data("d2s", "s2d0", "s2d", "DEPTH_TO_SPACE", 2)
    xs = x[:, :, :4, :]
    return b.spec, {"x": x}, [x[:, :2], x[:, 2:], x[:, :, :, 1:5:2], x[:, :, 0:4, 1:4], xs]


def case_lstm() -> tuple[Any, dict, list]:
    seq, inp, hid = 4, 3, 5
    lstm = torch.nn.LSTM(inp, hid)
    b = builder({"x": (seq, 1, inp, 1, 1)}, ["y", "h", "c"], rank5=False)
    wi, wf, wg, wo = (lstm.weight_ih_l0.detach().numpy()[i * hid:(i + 1) * hid] for i in range(4))
    ri, rf, rg, ro = (lstm.weight_hh_l0.detach().numpy()[i * hid:(i + 1) * hid] for i in range(4))
    bias = (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach().numpy()
    bi, bf, bg, bo = (bias[i * hid:(i + 1) * hid] for i in range(4))
    b.add_unilstm("lstm", [ri, rf, ro, rg], [wi, wf, wo, wg], [bi, bf, bo, bg], hid, inp, ["x"],
                  ["y", "h", "c"], output_all=True)
    x = rand(seq, 1, inp, 1, 1)
    with torch.no_grad():
        y, (h, c) = lstm(t(x.reshape(seq, 1, inp)))
    return b.spec, {"x": x}, [y.numpy(), h.numpy(), c.numpy()]


def case_bilstm() -> tuple[Any, dict, list]:
    seq, inp, hid = 3, 2, 4
    lstm = torch.nn.LSTM(inp, hid, bidirectional=True)
    b = builder({"x": (seq, 1, inp, 1, 1)}, ["y", "h", "c", "hb", "cb"], rank5=False)

    def parts(sfx: str) -> tuple[list, list, list]:
        wih = getattr(lstm, f"weight_ih_l0{sfx}").detach().numpy()
        whh = getattr(lstm, f"weight_hh_l0{sfx}").detach().numpy()
        bias = (getattr(lstm, f"bias_ih_l0{sfx}") + getattr(lstm, f"bias_hh_l0{sfx}")).detach().numpy()
        order = (0, 1, 3, 2)  # torch i, f, g, o -> builder i, f, o, z
        return ([whh[k * hid:(k + 1) * hid] for k in order], [wih[k * hid:(k + 1) * hid] for k in order],
                [bias[k * hid:(k + 1) * hid] for k in order])
    wh, wx, bb = parts("")
    whb, wxb, bbb = parts("_reverse")
    b.add_bidirlstm("bilstm", wh, wx, bb, whb, wxb, bbb, hid, inp, ["x"], ["y", "h", "c", "hb", "cb"],
                    output_all=True)
    x = rand(seq, 1, inp, 1, 1)
    with torch.no_grad():
        y, (h, c) = lstm(t(x.reshape(seq, 1, inp)))
    return b.spec, {"x": x}, [y.numpy(), h[0].numpy(), c[0].numpy(), h[1].numpy(), c[1].numpy()]


# --- the newer ND layers (exact shapes) ----------------------------------------------------------

def case_broadcastable() -> tuple[Any, dict, list]:
    ops = {"addBroadcastable": np.add, "subtractBroadcastable": np.subtract,
           "multiplyBroadcastable": np.multiply, "divideBroadcastable": np.divide,
           "maxBroadcastable": np.maximum, "minBroadcastable": np.minimum}
    b = builder({"a": (2, 3, 4), "b": (3, 1)}, list(ops), rank5=False)
    for name in ops:
        getattr(b, "add_" + re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower())(name, ["a", "b"], name)
    a, c = rand(2, 3, 4), np.abs(rand(3, 1)) + 0.5
    return b.spec, {"a": a, "b": c}, [fn(a, c) for fn in ops.values()]


def case_nd_shape() -> tuple[Any, dict, list]:
    outs = ["smx", "rs", "cat", "sq", "ed", "tr", "f2d", "sls", "sp0", "sp1", "cpad"]
    b = builder({"x": (2, 1, 3, 4)}, outs, rank5=False)
    x = rand(2, 1, 3, 4)
    b.add_softmax_nd("smx", "x", "smx", axis=-1)
    b.add_reshape_static("rs", "x", "rs", (6, 4))
    b.add_concat_nd("cat", ["x", "x"], "cat", axis=2)
    b.add_squeeze("sq", "x", "sq", axes=[1])
    b.add_expand_dims("ed", "x", "ed", axes=[0, -1])
    b.add_transpose("tr", (3, 0, 2, 1), "x", "tr")
    b.add_flatten_to_2d("f2d", "x", "f2d", axis=2)
    b.add_slice_static("sls", "x", "sls", [0, 0, 1, 0], [2, 1, 3, 4], [1, 1, 1, 2],
                       [False, False, False, False], [False, False, False, True])
    b.add_split_nd("spl", "x", ["sp0", "sp1"], axis=3, split_sizes=[1, 3])
    b.add_constant_pad("cpad", ["x"], "cpad", value=0.5, pad_amounts=[1, 0, 2, 1])
    refs = [torch.softmax(t(x), -1).numpy(), x.reshape(6, 4), np.concatenate([x, x], 2), x[:, 0],
            x[None, ..., None], x.transpose(3, 0, 2, 1), x.reshape(2, 12), x[:, :, 1:3, ::2],
            x[..., :1], x[..., 1:], np.pad(x, [(0, 0), (0, 0), (1, 0), (2, 1)], constant_values=0.5)]
    return b.spec, {"x": x}, refs


def case_nd_math() -> tuple[Any, dict, list]:
    outs = ["bmm", "bmmw", "clip", "rsum", "rmean", "gelu", "ln", "amax"]
    b = builder({"a": (2, 3, 4), "b": (2, 4, 5)}, outs, rank5=False)
    a, c = rand(2, 3, 4), rand(2, 4, 5)
    w, bias = rand(4, 6), rand(6)
    g, be = rand(4), rand(4)
    b.add_batched_mat_mul("bmm", ["a", "b"], "bmm")
    b.add_batched_mat_mul("bmmw", ["a"], "bmmw", weight_matrix_rows=4, weight_matrix_columns=6, W=w,
                          bias=bias)
    b.add_clip("clip", "a", "clip", -0.5, 0.5)
    b.add_reduce_sum("rsum", "a", "rsum", axes=[1], keepdims=False)
    b.add_reduce_mean("rmean", "a", "rmean", axes=[-1, 0], keepdims=True)
    b.add_gelu("gelu", "a", "gelu", mode="TANH_APPROXIMATION")
    b.add_layer_normalization("ln", "a", "ln", [4], g, be, eps=1e-5)
    b.add_argmax("amax", "a", "amax", axis=1, keepdims=False)
    refs = [a @ c, a @ w + bias, np.clip(a, -0.5, 0.5), a.sum(1), a.mean((0, 2), keepdims=True),
            F.gelu(t(a), approximate="tanh").numpy(), F.layer_norm(t(a), [4], t(g), t(be)).numpy(),
            a.argmax(1).astype(np.float32)]
    return b.spec, {"a": a, "b": c}, refs


CASES = {name[5:]: fn for name, fn in dict(globals()).items() if name.startswith("case_")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_layer(case: str) -> None:
    spec, inputs, refs = CASES[case]()
    check(spec, inputs, refs)


def test_every_converter_is_tested() -> None:
    """Every layer kind the cases build has a converter, and most converters are exercised."""
    seen: set[str] = set()
    for fn in CASES.values():
        seen |= {lay.WhichOneof("layer") for lay in fn()[0].neuralNetwork.layers}
    assert seen <= set(supported_layers())
    assert len(seen) >= 50


# --- models --------------------------------------------------------------------------------------

def test_cnn_classifier_with_preprocessing_and_mlmodel_file(tmp_path: Path) -> None:
    """conv/bn/relu/pool/innerProduct/softmax classifier, image scaler, saved and loaded as .mlmodel."""
    classes = [f"c{i}" for i in range(5)]
    b = NeuralNetworkBuilder([("image", datatypes.Array(3, 16, 16))], [("probs", None)], mode="classifier")
    w1, b1 = rand(8, 3, 3, 3, scale=0.3), rand(8)
    g, be, m, v = rand(8), rand(8), rand(8), np.abs(rand(8)) + 0.5
    w2, b2 = rand(16, 8, 3, 3, scale=0.2), rand(16)
    fc, fcb = rand(5, 16 * 4 * 4, scale=0.1), rand(5)
    b.add_convolution("conv1", 3, 8, 3, 3, 1, 1, "same", 1, conv_w(w1), b1, True, input_name="image",
                      output_name="c1")
    b.add_batchnorm("bn1", 8, g, be, m, v, input_name="c1", output_name="bn1")
    b.add_activation("relu1", "RELU", "bn1", "r1")
    b.add_pooling("pool1", 2, 2, 2, 2, "MAX", "VALID", "r1", "p1")
    b.add_convolution("conv2", 8, 16, 3, 3, 1, 1, "same", 1, conv_w(w2), b2, True, input_name="p1",
                      output_name="c2")
    b.add_activation("relu2", "RELU", "c2", "r2")
    b.add_pooling("pool2", 2, 2, 2, 2, "AVERAGE", "VALID", "r2", "p2")
    b.add_flatten("flatten", 0, "p2", "flat")
    b.add_inner_product("fc", fc, fcb, 256, 5, True, "flat", "logits")
    b.add_softmax("softmax", "logits", "probs")
    b.set_class_labels(classes, predicted_feature_name="label", prediction_blob="probs")
    b.set_pre_processing_parameters(image_input_names=["image"], is_bgr=False, red_bias=-0.5,
                                    green_bias=-0.25, blue_bias=0.1, image_scale=1 / 255.0)
    spec = b.spec
    assert spec.description.input[0].type.WhichOneof("Type") == "imageType"
    path = tmp_path / "cnn.mlmodel"
    ct.utils.save_spec(spec, str(path))
    x = (RNG.random((1, 3, 16, 16)) * 255).astype(np.float32)
    with torch.no_grad():
        y = t(x) / 255.0 + torch.tensor([-0.5, -0.25, 0.1]).reshape(1, 3, 1, 1)
        y = F.relu(F.batch_norm(F.conv2d(y, t(w1), t(b1), padding=1), t(m), t(v), t(g), t(be)))
        y = F.avg_pool2d(F.relu(F.conv2d(F.max_pool2d(y, 2), t(w2), t(b2), padding=1)), 2)
        ref = torch.softmax(F.linear(y.flatten(1), t(fc), t(fcb)), 1).numpy()
    model = ct.models.MLModel(str(path), skip_model_load=True)
    for source in (model, str(path)):
        mod, params = from_coreml(source)
        (out,) = run_compiled(mod, params, {"image": x})
        np.testing.assert_allclose(out, ref, rtol=RTOL, atol=1e-6)
    assert mod.attrs["output_names"] == ("probs",)


class _MobileNetish(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()

        def dw(cin: int, cout: int, stride: int) -> list[Any]:
            return [torch.nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
                    torch.nn.BatchNorm2d(cin),
                    torch.nn.ReLU6(), torch.nn.Conv2d(cin, cout, 1, bias=False), torch.nn.BatchNorm2d(cout),
                    torch.nn.ReLU6()]
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, 2, 1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU6(),
            *dw(8, 16, 1), *dw(16, 24, 2), *dw(24, 32, 2))
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x: Any) -> Any:
        return torch.softmax(self.fc(self.features(x).mean((2, 3))), 1)


def _randomize_bn(model: Any) -> None:
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.5, 1.5)


def _convert(model: Any, shape: tuple[int, ...]) -> tuple[Any, np.ndarray, Any]:
    model.eval()
    x = rand(*shape)
    traced = torch.jit.trace(model, t(x))
    ml = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=shape)], convert_to="neuralnetwork")
    with torch.no_grad():
        ref = model(t(x))
    return ml, x, ref


@pytest.mark.slow
def test_mobilenet_style_from_torch() -> None:
    torch.manual_seed(0)
    model = _MobileNetish()
    _randomize_bn(model)
    ml, x, ref = _convert(model, (1, 3, 32, 32))
    kinds = {lay.WhichOneof("layer") for lay in ml.get_spec().neuralNetwork.layers}
    assert "convolution" in kinds
    (out,) = check(ml, {"x": x}, [ref.numpy()], atol=1e-5)
    assert out.shape == (1, 10)


class _DetHead(torch.nn.Module):
    """A tiny SSD-style head: backbone, per-anchor class scores and boxes, flattened and joined."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, 2, 1), torch.nn.ReLU(),
                                        torch.nn.Conv2d(8, 16, 3, 2, 1), torch.nn.LeakyReLU(0.1))
        self.cls = torch.nn.Conv2d(16, 2 * 3, 3, padding=1)
        self.box = torch.nn.Conv2d(16, 2 * 4, 1)
        self.up = torch.nn.Upsample(scale_factor=2, mode="nearest")

    def forward(self, x: Any) -> tuple[Any, Any]:
        f = self.body(x)
        cls = torch.sigmoid(self.cls(f)).permute(0, 2, 3, 1).reshape(1, -1, 3)
        box = self.box(f).permute(0, 2, 3, 1).reshape(1, -1, 4)
        up = self.up(f).sum(1, keepdim=True)
        return torch.cat([box, cls], dim=2), up


@pytest.mark.slow
def test_detection_head_from_torch() -> None:
    torch.manual_seed(1)
    ml, x, (det, up) = _convert(_DetHead(), (1, 3, 16, 16))
    check(ml, {"x": x}, [det.numpy(), up.numpy()], atol=1e-5)


def test_freeze_params_false_names_weights_after_layers() -> None:
    spec, inputs, refs = case_conv()
    mod, params = from_coreml(spec, freeze_params=False)
    assert "valid.weights" in params and "grp.bias" in params
    outs = run_compiled(mod, params, inputs)
    np.testing.assert_allclose(outs[0], refs[0], rtol=RTOL, atol=ATOL)


def test_provenance_is_the_layer_name() -> None:
    from kiln.ir.expr import Call
    from kiln.ir.visitor import children

    spec, _, _ = case_inner_product()
    mod, _ = from_coreml(spec)
    found: set[str] = set()
    stack = [mod["main"].body]
    while stack:
        node = stack.pop()
        if isinstance(node, Call):
            found |= set(node.source_names)
        stack.extend(children(node))
    assert {"flat", "fc", "sm"} <= found


def test_shape_override() -> None:
    b = builder({"x": (3, 4, 4)}, ["y"])
    b.add_activation("relu", "RELU", "x", "y")
    x = rand(2, 3, 5, 6)
    check(b.spec, {"x": x}, [np.maximum(x, 0)], shape={"x": (2, 3, 5, 6)})
    with pytest.raises(FrontendError, match="not a model input"):
        from_coreml(b.spec, shape={"nope": (1, 3, 4, 4)})


# --- ML Program ----------------------------------------------------------------------------------

class _SmallNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 4 * 4, 6)

    def forward(self, x: Any) -> Any:
        y = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        y = F.avg_pool2d(y, 2).flatten(1)
        return torch.softmax(self.fc(y) + 1.0, dim=1)


def test_mlprogram_package(tmp_path: Path) -> None:
    torch.manual_seed(2)
    model = _SmallNet().eval()
    _randomize_bn(model)
    x = rand(1, 3, 16, 16)
    traced = torch.jit.trace(model, t(x))
    ml = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=x.shape)], convert_to="mlprogram",
                    compute_precision=ct.precision.FLOAT32)
    with torch.no_grad():
        ref = model(t(x)).numpy()
    path = tmp_path / "net.mlpackage"
    ml.save(str(path))
    for source in (ml, str(path)):
        mod, params = from_coreml(source)
        (out,) = run_compiled(mod, params, {"x": x})
        np.testing.assert_allclose(out, ref, rtol=RTOL, atol=1e-6)
    assert {"conv", "linear", "softmax"} <= set(supported_mil_ops())


# --- errors --------------------------------------------------------------------------------------

def test_unsupported_layers_listed_together() -> None:
    b = builder({"x": (3, 4, 4)}, ["y"])
    b.add_embedding("emb1", np.ones((4, 10), np.float32), None, 10, 4, False, "x", "e")
    b.add_pooling("l2pool", 2, 2, 2, 2, "L2", "VALID", "e", "p")
    b.add_embedding("emb2", np.ones((4, 10), np.float32), None, 10, 4, False, "p", "y")
    with pytest.raises(UnsupportedOpError) as err:
        from_coreml(b.spec)
    msg = str(err.value)
    assert "embedding" in msg and "emb1" in msg and "emb2" in msg
    assert "pooling" in msg and "l2pool" in msg and "L2" in msg


def test_malformed_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mlmodel"
    bad.write_bytes(b"\x08\x04\x12\xff\xff this is not a protobuf")
    with pytest.raises(FrontendError, match="not a CoreML model"):
        from_coreml(str(bad))
    with pytest.raises(FrontendError, match="does not exist"):
        from_coreml(str(tmp_path / "missing.mlmodel"))
    with pytest.raises(FrontendError, match="expects an MLModel"):
        from_coreml(42)


# --- docs ----------------------------------------------------------------------------------------

def test_doc_tables_match_converters() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "frontends" / "coreml.md").read_text()

    def table(title: str) -> set[str]:
        section = doc.split(f"<!-- {title} -->")[1].split("<!-- end -->")[0]
        return set(re.findall(r"^\| `([A-Za-z0-9_]+)` \|", section, flags=re.M))
    assert table("layers") == set(supported_layers())
    assert table("mil") == set(supported_mil_ops())

