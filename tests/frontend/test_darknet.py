"""The Darknet frontend against an independent NumPy/PyTorch re-implementation of darknet
(``_darknet_ref.py``, written from darknet's C sources), on cfgs written here and random weights
written in darknet's binary layout.

Kiln's compiled output (relay.build + graph executor) must match the reference at rtol 1e-4 and
atol 1e-4 times the output's largest magnitude (at least 1e-5).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from _compiled import run_compiled
from _darknet_ref import RefNet, detection_extras

from kiln import relay
from kiln.errors import FrontendError, UnsupportedOpError
from kiln.frontend import darknet
from kiln.frontend.darknet import ACTIVATIONS, DarknetNet, from_darknet, load_net
from kiln.ir.expr import Call
from kiln.ir.visitor import post_order

DOC = Path(__file__).resolve().parents[2] / "docs" / "frontends" / "darknet.md"


def _conv(filters: int, size: int = 3, stride: int = 1, bn: int = 1, act: str = "leaky", **kw: Any) -> str:
    extra = "".join(f"{k}={v}\n" for k, v in kw.items())
    pad = "" if "padding" in kw else "pad=1\n"
    return (f"[convolutional]\nbatch_normalize={bn}\nfilters={filters}\nsize={size}\nstride={stride}\n"
            f"{pad}activation={act}\n{extra}\n")


def _net(width: int, height: int | None = None, channels: int = 3) -> str:
    return f"[net]\nbatch=1\nsubdivisions=1\nwidth={width}\nheight={height or width}\nchannels={channels}\n\n"


def _section(name: str, **kw: Any) -> str:
    return f"[{name}]\n" + "".join(f"{k}={v}\n" for k, v in kw.items()) + "\n"


ANCHORS = "10,14,  23,27,  37,58,  81,82,  135,169,  344,319"


def yolov3_tiny_cfg(size: int, classes: int = 80) -> str:
    f = 3 * (classes + 5)
    yolo = f"classes={classes}\nnum=6\njitter=.3\nignore_thresh = .7\ntruth_thresh = 1\nrandom=1\n"
    cfg = _net(size)
    for i, filters in enumerate((16, 32, 64, 128, 256)):
        cfg += _conv(filters) + _section("maxpool", size=2, stride=2)
        del i
    cfg += _conv(512) + _section("maxpool", size=2, stride=1) + _conv(1024)
    cfg += "###########\n\n" + _conv(256, 1) + _conv(512) + _conv(f, 1, bn=0, act="linear")
    cfg += f"[yolo]\nmask = 3,4,5\nanchors = {ANCHORS}\n{yolo}\n"
    cfg += _section("route", layers=-4) + _conv(128, 1) + _section("upsample", stride=2)
    cfg += _section("route", layers="-1, 8") + _conv(256) + _conv(f, 1, bn=0, act="linear")
    cfg += f"[yolo]\nmask = 0,1,2\nanchors = {ANCHORS}\n{yolo}\n"
    return cfg


def yolov4_tiny_cfg(size: int, classes: int = 80, width: int = 1) -> str:
    f = 3 * (classes + 5)
    anchors = "10,14,  23,27,  37,58,  81,82,  135,169,  344,319"
    yolo = (f"anchors = {anchors}\nclasses={classes}\nnum=6\njitter=.3\nscale_x_y = 1.05\n"
            "cls_normalizer=1.0\niou_normalizer=0.07\niou_loss=ciou\nignore_thresh = .7\n"
            "truth_thresh = 1\nrandom=0\nresize=1.5\nnms_kind=greedynms\nbeta_nms=0.6\n")
    cfg = _net(size) + _conv(32 // width, stride=2) + _conv(64 // width, stride=2)
    for c in (64, 128, 256):
        c //= width
        cfg += _conv(c) + _section("route", layers=-1, groups=2, group_id=1)
        cfg += _conv(c // 2) + _conv(c // 2) + _section("route", layers="-1,-2") + _conv(c, 1)
        cfg += _section("route", layers="-6,-1") + _section("maxpool", size=2, stride=2)
    cfg += _conv(512 // width) + "##################################\n\n"
    cfg += _conv(256 // width, 1) + _conv(512 // width) + _conv(f, 1, bn=0, act="linear")
    cfg += f"[yolo]\nmask = 3,4,5\n{yolo}\n"
    cfg += _section("route", layers=-4) + _conv(128 // width, 1) + _section("upsample", stride=2)
    cfg += _section("route", layers="-1, 23") + _conv(256 // width) + _conv(f, 1, bn=0, act="linear")
    cfg += f"[yolo]\nmask = 1,2,3\n{yolo}\n"
    return cfg


# --------------------------------------------------------------------------------------------
def _write(tmp_path: Path, cfg: str, seed: int = 0, **weights_kw: Any) -> tuple[RefNet, Path, Path]:
    cfg_path, weights_path = tmp_path / "net.cfg", tmp_path / "net.weights"
    cfg_path.write_text(cfg)
    ref = RefNet(cfg)
    ref.write_weights(weights_path, np.random.default_rng(seed), **weights_kw)
    return ref, cfg_path, weights_path


def _close(name: str, got: np.ndarray, want: np.ndarray) -> float:
    """Assert ``got`` matches ``want`` (rtol 1e-4, atol 1e-4 x magnitude); the max abs error."""
    assert got.shape == want.shape, (name, got.shape, want.shape)
    atol = max(1e-5, 1e-4 * float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol, err_msg=name)
    return float(np.abs(got.astype(np.float64) - want).max(initial=0.0))


def check(tmp_path: Path, cfg: str, shape: Any = None, seed: int = 0,
          scale: float = 1.0, **import_kw: Any) -> dict[str, float]:
    """Import ``cfg`` with random weights, run it compiled, compare every output with the reference.

    Returns the max abs error of each output.
    """
    ref, cfg_path, weights_path = _write(tmp_path, cfg, seed)
    net = load_net(cfg_path, weights_path)
    mod, params = from_darknet(net, shape=shape, **import_kw)
    dims = tuple(shape["data"] if isinstance(shape, dict) else shape or (1, ref.c, ref.h, ref.w))
    if shape is not None:
        ref = RefNet(cfg, c=dims[1], h=dims[2], w=dims[3])
        ref.write_weights(tmp_path / "unused.weights", np.random.default_rng(seed))
    x = (np.random.default_rng(seed + 1).normal(size=dims) * scale).astype(np.float32)
    outs = run_compiled(mod, params, {"data": x})
    refs = ref.forward(x)
    names = mod.attrs["output_names"]
    assert len(names) == len(outs)
    errors: dict[str, float] = {}
    for name, got in zip(names, outs):
        m = re.fullmatch(r"[a-z0-9]+?_(\d+)(?:_(mask|biases|attr))?", name)
        assert m, name
        idx = int(m.group(1))
        if m.group(2):
            np.testing.assert_array_equal(got, detection_extras(ref.layers[idx])[m.group(2)], err_msg=name)
            continue
        errors[name] = _close(name, got, refs[idx].reshape(got.shape))
    return errors


# --------------------------------------------------------------------------------------------
# networks
# --------------------------------------------------------------------------------------------
def test_yolov3_tiny(tmp_path: Path) -> None:
    errors = check(tmp_path, yolov3_tiny_cfg(64))
    ref_net = load_net(tmp_path / "net.cfg", tmp_path / "net.weights")
    mod, _ = from_darknet(ref_net)
    # TVM's output layout: the last layer, then every yolo layer's extras, later layers first
    assert mod.attrs["output_names"] == ("yolo_23", "yolo_23_mask", "yolo_23_biases", "yolo_23_attr",
                                         "yolo_16", "yolo_16_mask", "yolo_16_biases", "yolo_16_attr")
    assert set(errors) == {"yolo_23", "yolo_16"}


@pytest.mark.slow
def test_yolov3_tiny_416(tmp_path: Path) -> None:
    check(tmp_path, yolov3_tiny_cfg(416))


def test_yolov4_tiny(tmp_path: Path) -> None:
    # route groups/group_id, scale_x_y, mask 1,2,3; channels / 4 and 64x64 to stay fast
    errors = check(tmp_path, yolov4_tiny_cfg(64, classes=20, width=4), detection_extras=False)
    assert set(errors) == {"yolo_37", "yolo_30"}


@pytest.mark.slow
def test_yolov4_tiny_416(tmp_path: Path) -> None:
    check(tmp_path, yolov4_tiny_cfg(416))


CLASSIFIER = (_net(32) + _conv(16) + _section("maxpool", size=2, stride=2) + _conv(32)
              + _section("maxpool", size=2, stride=2) + _conv(64, act="relu")
              + _section("dropout", probability=0.5) + _conv(10, 1, bn=0, act="linear")
              + _section("avgpool") + _section("connected", output=20, activation="leaky", batch_normalize=1)
              + _section("connected", output=10, activation="linear")
              + _section("softmax", groups=1) + _section("cost", type="sse"))


def test_classifier(tmp_path: Path) -> None:
    errors = check(tmp_path, CLASSIFIER)
    assert list(errors) == ["softmax_10"]  # the trailing [cost] layer is skipped, as darknet does


# --------------------------------------------------------------------------------------------
# layers
# --------------------------------------------------------------------------------------------
def test_activations(tmp_path: Path) -> None:
    # one conv, scaled to +-30 by [upsample] stride=1 scale=..., then every activation on it
    names = sorted(ACTIVATIONS)
    cfg = _net(6, channels=2) + _conv(4, bn=0, act="linear") + _section("upsample", stride=1, scale=12)
    for name in names:
        cfg += _section("route", layers=1) + _section("activation", activation=name)
    cfg += _section("route", layers=",".join(str(3 + 2 * i) for i in range(len(names))))
    cfg += _section("route", layers=1) + _section("logistic")
    cfg += _section("route", layers="-3,-1")
    check(tmp_path, cfg)


def test_convolutions(tmp_path: Path) -> None:
    cfg = (_net(11, 9, channels=4) + _conv(8, act="mish")                        # 0: same padding
           + _conv(8, groups=8, act="swish")                                       # 1: depthwise
           + _conv(8, 3, stride=2, groups=2, act="relu6")                          # 2: grouped, stride 2
           + _section("route", layers=0)
           + _conv(6, 3, bn=0, act="tanh", padding=0)                              # 4: valid
           + _section("route", layers=0)
           + _conv(6, 5, bn=0, act="logistic", padding=1)                          # 6: explicit padding
           + _section("route", layers=0)
           + _conv(6, 3, dilation=2, act="leaky")                                  # 8: dilated
           + _section("route", layers=0)
           + _conv(5, 3, stride_x=2, stride_y=1, act="linear")                     # 10: stride_x/y
           + _section("route", layers=0)
           + _conv(4, 1, bn=0, act="relu"))                                        # 12: 1x1
    check(tmp_path, cfg + _section("route", layers="2,4,6,8,10,12"))  # sizes differ: a flat concat


def test_pools_and_reshapes(tmp_path: Path) -> None:
    cfg = (_net(13, 11, channels=3) + _conv(4, act="leaky")
           + _section("maxpool", size=2, stride=1)                   # 1: darknet's stride-1 padding
           + _section("maxpool", size=3, stride=2)                   # 2: default padding size-1
           + _section("maxpool", size=2, stride=2)                   # 3: odd input
           + _section("route", layers=0) + _section("maxpool", size=3, stride=2, padding=0)  # 5
           + _section("route", layers=0) + _section("maxpool", size=2, stride_x=2, stride_y=1)  # 7
           + _section("route", layers=0) + _section("upsample", stride=-2, scale=0.5)  # 9: reverse
           + _section("route", layers=0) + _section("batchnorm")   # 11
           + _section("l2norm")                                      # 12
           + _section("avgpool"))                                    # 13
    check(tmp_path, cfg + _section("route", layers="3,5,7,9,13"))


def test_route_shortcut_reorg(tmp_path: Path) -> None:
    cfg = (_net(8, channels=3) + _conv(8)                                              # 0
           + _conv(8) + _section("shortcut", **{"from": -2, "activation": "leaky"})    # 1, 2
           + _conv(6) + _section("shortcut", **{"from": -2, "alpha": 0.5, "beta": 2})  # 3, 4: 8 -> 6
           + _conv(10) + _section("shortcut", **{"from": 2})                           # 5, 6: 8 -> 10
           + _section("shortcut", **{"from": "-2,-6", "activation": "relu"})          # 7: two from
           + _section("route", layers="0,-1,3", groups=2, group_id=1)                  # 8
           + _section("route", layers="0", groups=2, group_id=0)                       # 9
           + _section("reorg", stride=2)                                               # 10
           + _section("route", layers="8,2"))                                          # 11
    check(tmp_path, cfg + _section("route", layers="10,11"))


def test_yolo_and_region_heads(tmp_path: Path) -> None:
    # yolo without mask, with new_coords; region heads (yolov2): softmax, background, sigmoid
    cfg = (_net(8, channels=3) + _conv(2 * 8, 1, bn=0, act="logistic")
           + _section("yolo", classes=3, num=2, new_coords=1, scale_x_y=2.0, anchors="1,2,3,4")     # 1
           + _section("route", layers=0)
           + _conv(2 * 10, 1, bn=0, act="linear")                                                  # 3
           + _section("region", classes=5, coords=4, num=2, softmax=1, anchors="1,2,3,4")          # 4
           + _section("route", layers=3)
           + _section("region", classes=5, coords=4, num=2, softmax=1, background=1)               # 6
           + _section("route", layers=3)
           + _section("region", classes=5, coords=4, num=2, softmax=0))                            # 8
    errors = check(tmp_path, cfg)
    assert set(errors) == {"region_8", "region_6", "region_4", "yolo_1"}


def test_softmax_groups_and_connected(tmp_path: Path) -> None:
    cfg = (_net(4, channels=3) + _section("softmax", groups=4, temperature=2)
           + _section("connected", output=6, activation="relu")
           + _section("connected", output=4, activation="leaky", batch_normalize=1)
           + _section("l2norm") + _section("dropout"))
    check(tmp_path, cfg, scale=3.0)


def test_transposed_connected_and_old_header(tmp_path: Path) -> None:
    cfg = _net(3, channels=2) + _section("connected", output=5, activation="linear")
    for version, transpose in (((0, 1, 0), False), ((0, 1001, 0), True)):
        ref, cfg_path, weights_path = _write(tmp_path, cfg, version=version, transpose=transpose)
        net = load_net(cfg_path, weights_path)
        assert net.version == version and net.seen == 12345
        np.testing.assert_array_equal(net.layers[0].weights["weights"], ref.layers[0].params["weights"])
        x = np.random.default_rng(3).normal(size=(1, 2, 3, 3)).astype(np.float32)
        got = run_compiled(*from_darknet(net), {"data": x})[0]
        _close("connected", got, ref.forward(x)[0])


def test_input_shape_override_and_batch(tmp_path: Path) -> None:
    cfg = _net(32) + _conv(4) + _section("maxpool", size=2, stride=2) + _conv(6, act="mish")
    check(tmp_path, cfg, shape=(2, 3, 20, 12))
    check(tmp_path, cfg, shape={"data": (1, 3, 16, 16)}, freeze_params=False)


def test_relay_entry_point_provenance_and_params(tmp_path: Path) -> None:
    cfg = _net(8) + _conv(4) + _section("maxpool", size=2, stride=2) + _conv(4, act="mish")
    _, cfg_path, weights_path = _write(tmp_path, cfg)
    mod, params = relay.frontend.from_darknet(load_net(cfg_path, weights_path), freeze_params=False)
    assert mod.attrs["output_names"] == ("conv_2",)
    assert {"conv_0_weights", "conv_0_scales", "conv_0_rolling_mean", "conv_0_rolling_variance",
            "conv_0_biases", "conv_2_weights"} <= set(params)
    sources = {name for e in post_order(mod["main"].body) if isinstance(e, Call) for name in e.source_names}
    assert sources == {"conv_0", "maxpool_1", "conv_2"}
    assert mod["main"].params[0].name_hint == "data"
    # a (cfg, weights) pair is accepted too
    mod2, _ = from_darknet((cfg_path, weights_path))
    assert mod2.attrs["output_names"] == ("conv_2",)


# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------
def test_unsupported_layers_listed_at_once(tmp_path: Path) -> None:
    cfg = (_net(8) + _conv(4) + _section("crop", crop_height=4) + _conv(4, binary=1)
           + _section("local", filters=2) + _section("crop") + _section("mystery"))
    path = tmp_path / "bad.cfg"
    path.write_text(cfg)
    with pytest.raises(UnsupportedOpError) as info:
        load_net(path, None)
    text = str(info.value)
    for part in ("[crop]", "crop_1 (line 16)", "crop_4", "[local]", "local_3", "[mystery]", "mystery_5",
                 "binary=1", "conv_2", str(path)):
        assert part in text, (part, text)


def test_truncated_weights(tmp_path: Path) -> None:
    cfg = _net(8) + _conv(4) + _conv(6, bn=0)
    _, cfg_path, weights_path = _write(tmp_path, cfg, cut=5)
    with pytest.raises(FrontendError, match=r"truncated at .*net.cfg: layer 1 \[convolutional\] \(line 16\).*"
                                            r"needs 222 floats \(biases 6, weights 216\) from float 124.*"
                                            r"only 217 left"):
        load_net(cfg_path, weights_path)


def test_trailing_weights(tmp_path: Path) -> None:
    cfg = _net(8) + _conv(4)
    _, cfg_path, weights_path = _write(tmp_path, cfg, extra=3)
    with pytest.raises(FrontendError, match="12 bytes .3 floats. after the weights of the last layer"):
        load_net(cfg_path, weights_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = load_net(cfg_path, weights_path, strict=False)
    assert net.layers[0].weights["weights"].shape == (4, 3, 3, 3)
    assert any("12 bytes" in str(w.message) for w in caught)


@pytest.mark.parametrize(("cfg", "message"), [
    (_conv(4), r"first section must be \[net\] or \[network\], found \[convolutional\] at line 1"),
    ("[net]\nwidth=8\nheight=8\n", r"\[net\] channels='0': expected a positive integer"),
    (_net(8) + _conv(4).replace("filters=4", "filters=four"),
     r"layer 0 \[convolutional\] \(line 8\): option filters='four': expected an integer"),
    (_net(8) + _conv(4, act="sparkle"), r"activation='sparkle': expected one of .*mish"),
    (_net(8) + _section("route", layers=3), r"layers='3' refers to layer 3; expected an earlier layer"),
    (_net(8) + _conv(10, 1, bn=0) + _section("yolo", classes=2, num=3, mask="0,1"),
     r"layer 1 \[yolo\].*the input has 10 channels; expected 14 \(2 anchors x 7\)"),
    ("width=3\n" + _net(8), r"option 'width=3' comes before any section"),
    (_net(8) + "[convolutional\n", r"bad section header"),
    (_net(8) + _conv(4) + "filters 3\n", r"cannot parse 'filters 3': expected key=value"),
    (_net(8) + _conv(4, groups=3), r"groups=3 do not fit 3 input channels"),
])
@pytest.mark.filterwarnings("ignore:.*after the weights of the last layer")
def test_bad_cfgs(tmp_path: Path, cfg: str, message: str) -> None:
    path = tmp_path / "bad.cfg"
    path.write_text(cfg)
    weights = tmp_path / "w.weights"
    weights.write_bytes(b"\0" * 16 + b"\0" * 4 * 10000)
    with pytest.raises(FrontendError, match=message) as info:
        from_darknet(load_net(path, weights, strict=False))
    assert str(path) in str(info.value)


def test_bad_inputs(tmp_path: Path) -> None:
    cfg = _net(8) + _conv(4) + _section("connected", output=3)
    _, cfg_path, weights_path = _write(tmp_path, cfg)
    net = load_net(cfg_path, weights_path)
    with pytest.raises(FrontendError, match=r"gives this connected layer 144 inputs; its weights expect 256"):
        from_darknet(net, shape=(1, 3, 6, 6))
    with pytest.raises(FrontendError, match=r"expected NCHW \(N, 3, H, W\)"):
        from_darknet(net, shape=(1, 4, 8, 8))
    with pytest.raises(FrontendError, match="without weights"):
        from_darknet(load_net(cfg_path, None))
    with pytest.raises(FrontendError, match="not str"):
        from_darknet(str(cfg_path))
    with pytest.raises(FrontendError, match="too short"):
        (tmp_path / "short.weights").write_bytes(b"\0" * 10)
        load_net(cfg_path, tmp_path / "short.weights")
    assert isinstance(net, DarknetNet) and net.n == 2 and net.input_shape == (1, 3, 8, 8)


def test_doc_table_matches_converters() -> None:
    text = DOC.read_text()
    rows = re.findall(r"^\| `\[([a-z0-9_]+)\]`", text, flags=re.M)
    assert sorted(rows) == sorted(darknet._CONVERTERS), rows
    acts = re.findall(r"`([a-z_0-9]+)`", text.split("## Activations", 1)[1].split("##", 1)[0])
    assert sorted(set(acts)) == sorted(ACTIVATIONS)
