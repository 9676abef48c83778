"""relay.testing workloads: structure and names as TVM's, and outputs vs a NumPy forward pass."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from kiln import relay
from kiln.errors import KilnError
from kiln.interpreter import evaluate
from kiln.ir import IRModule, TensorType
from kiln.relay.testing import create_workload, layers, run_infer_type
from kiln.relay.testing.init import Constant, Xavier

# --- an independent NumPy forward pass (float64, sliding windows + einsum) ------------------------

Arr = np.ndarray
Params = dict[str, np.ndarray]


def _conv(x: Arr, w: Arr, stride: int = 1, pad: int = 0, groups: int = 1) -> Arr:
    x = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    kh, kw = w.shape[2:]
    win = sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    n, c, oh, ow = win.shape[:4]
    win = win.reshape(n, groups, c // groups, oh, ow, kh, kw)
    wg = w.reshape(groups, w.shape[0] // groups, *w.shape[1:])
    return np.einsum("ngchwij,gocij->ngohw", win, wg, optimize=True).reshape(n, -1, oh, ow)


def _bn(x: Arr, p: Params, name: str, eps: float, scale: bool = True) -> Arr:
    shape = (1, -1, 1, 1)
    y = (x - p[f"{name}_moving_mean"].reshape(shape)) / np.sqrt(
        p[f"{name}_moving_var"].reshape(shape) + eps)
    if scale:
        y = y * p[f"{name}_gamma"].reshape(shape)
    return y + p[f"{name}_beta"].reshape(shape)


def _relu(x: Arr) -> Arr:
    return np.maximum(x, 0)


def _max_pool_3x3_s2_p1(x: Arr) -> Arr:
    x = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
    return sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max(axis=(4, 5))


def _head(x: Arr, p: Params, weight: str, bias: str) -> Arr:
    logits = x.mean(axis=(2, 3)) @ p[weight].T + p[bias]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _numpy_resnet18(x: Arr, p: Params) -> Arr:
    """ResNet-18 v2 (pre-activation), as the paper and TVM's resnet.py define it."""
    body = _conv(_bn(x, p, "bn_data", 2e-5, scale=False), p["conv0_weight"], 2, 3)
    body = _max_pool_3x3_s2_p1(_relu(_bn(body, p, "bn0", 2e-5)))
    for stage in range(1, 5):
        for unit in (1, 2):
            name = f"stage{stage}_unit{unit}"
            stride = 2 if stage > 1 and unit == 1 else 1
            act1 = _relu(_bn(body, p, f"{name}_bn1", 2e-5))
            conv1 = _conv(act1, p[f"{name}_conv1_weight"], stride, 1)
            conv2 = _conv(_relu(_bn(conv1, p, f"{name}_bn2", 2e-5)), p[f"{name}_conv2_weight"], 1, 1)
            shortcut = body if unit == 2 else _conv(act1, p[f"{name}_sc_weight"], stride, 0)
            body = conv2 + shortcut
    return _head(_relu(_bn(body, p, "bn1", 2e-5)), p, "fc1_weight", "fc1_bias")


def _numpy_mobilenet(x: Arr, p: Params) -> Arr:
    body = _relu(_bn(_conv(x, p["conv_block_1_conv_weight"], 2, 1), p, "conv_block_1_bn", 1e-5))
    strides = [1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1]
    for i, stride in enumerate(strides, start=1):
        name = f"separable_conv_block_{i}"
        dw = p[f"{name}_weight"]
        body = _relu(_bn(_conv(body, dw, stride, 1, groups=dw.shape[0]), p, f"{name}_bn1", 1e-5))
        body = _relu(_bn(_conv(body, p[f"{name}_conv2_weight"]), p, f"{name}_bn2", 1e-5))
    return _head(body, p, "fc_weight", "fc_bias")


def _randomize_batch_norm(params: dict[str, Any], rng: np.random.Generator) -> Params:
    """Non-trivial batch-norm statistics (Xavier init leaves them 1/0) as float64 and float32."""
    out = {}
    for name, value in params.items():
        array = value.numpy()
        if name.endswith(("gamma", "beta", "moving_mean")):
            array = rng.uniform(-0.5, 1.0, array.shape).astype(array.dtype)
        elif name.endswith("moving_var"):
            array = rng.uniform(0.5, 2.0, array.shape).astype(array.dtype)
        out[name] = array
    return out


# --- ResNet --------------------------------------------------------------------------------------

def test_resnet18_structure_and_names():
    mod, params = relay.testing.resnet.get_workload(num_classes=10, image_shape=(3, 64, 64))
    names = [p.name_hint for p in mod["main"].params]
    assert names[:6] == ["data", "bn_data_gamma", "bn_data_beta", "bn_data_moving_mean",
                         "bn_data_moving_var", "conv0_weight"]
    assert names[-2:] == ["fc1_weight", "fc1_bias"]
    # stem (bn_data 4 + conv0 1 + bn0 4), 8 units of 10 + 4 shortcut convs, bn1 4, fc 2
    assert len(params) == 9 + 8 * 10 + 4 + 4 + 2 and "data" not in params
    shapes = {k: v.shape for k, v in params.items()}
    assert shapes["conv0_weight"] == (64, 3, 7, 7)
    assert shapes["stage2_unit1_sc_weight"] == (128, 64, 1, 1)
    assert shapes["stage4_unit2_conv2_weight"] == (512, 512, 3, 3)
    assert shapes["fc1_weight"] == (10, 512) and shapes["fc1_bias"] == (10,)
    text = mod.astext()
    assert ("nn.batch_norm(%data, %bn_data_gamma, %bn_data_beta, %bn_data_moving_mean, "
            "%bn_data_moving_var, epsilon=2e-05f, scale=False)") in text
    assert "nn.max_pool2d(%" in text and "pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])" in text
    assert "nn.dense(%" in text and "units=10)" in text and "nn.bias_add(%" in text
    assert mod["main"].ret_type == TensorType((1, 10), "float32")


def test_resnet18_matches_numpy_forward():
    rng = np.random.default_rng(0)
    mod, params = relay.testing.resnet.get_workload(num_classes=10, image_shape=(3, 64, 64))
    params = _randomize_batch_norm(params, rng)
    x = rng.uniform(-1, 1, (1, 3, 64, 64)).astype("float32")
    out = evaluate(mod, {"data": x}, params)
    expected = _numpy_resnet18(x.astype(np.float64),
                               {k: v.astype(np.float64) for k, v in params.items()})
    assert out.shape == (1, 10) and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out.sum(), 1.0, rtol=1e-6)


@pytest.mark.parametrize("num_layers,image_shape,layout,bottleneck", [
    (20, (3, 28, 28), "NCHW", False),  # CIFAR-style: 3 stages of 3 units, 3x3 stem
    (50, (3, 64, 64), "NCHW", True),
    (18, (32, 32, 3), "NHWC", False),
])
def test_resnet_variants_typecheck_and_run(num_layers, image_shape, layout, bottleneck):
    mod, params = relay.testing.resnet.get_workload(batch_size=2, num_classes=7,
                                                    num_layers=num_layers,
                                                    image_shape=image_shape, layout=layout)
    assert ("stage1_unit1_conv3_weight" in params) == bottleneck
    x = np.random.default_rng(1).uniform(size=(2, *image_shape)).astype("float32")
    out = evaluate(mod, {"data": x}, params)
    assert out.shape == (2, 7)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)


def test_resnet_nhwc_matches_nchw():
    nchw, params = relay.testing.resnet.get_workload(num_classes=5, image_shape=(3, 40, 40))
    nhwc, params_nhwc = relay.testing.resnet.get_workload(num_classes=5, image_shape=(40, 40, 3),
                                                          layout="NHWC")
    rng = np.random.default_rng(2)
    params = _randomize_batch_norm(params, rng)
    converted = {k: v.transpose(2, 3, 1, 0).copy() if v.ndim == 4 else v for k, v in params.items()}
    assert {k: v.shape for k, v in converted.items()} == {k: v.shape for k, v in params_nhwc.items()}
    x = rng.uniform(size=(1, 3, 40, 40)).astype("float32")
    out = evaluate(nchw, {"data": x}, params)
    out_nhwc = evaluate(nhwc, {"data": x.transpose(0, 2, 3, 1).copy()}, converted)
    np.testing.assert_allclose(out_nhwc, out, rtol=1e-4, atol=1e-6)


def test_resnet18_full_size():
    mod, params = relay.testing.resnet.get_workload()
    assert mod["main"].params[0].type_annotation == TensorType((1, 3, 224, 224), "float32")
    out = evaluate(mod, {"data": np.random.default_rng(3).uniform(size=(1, 3, 224, 224))
                         .astype("float32")}, params)
    assert out.shape == (1, 1000)
    np.testing.assert_allclose(out.sum(), 1.0, rtol=1e-5)


def test_resnet_rejects_unknown_depth():
    with pytest.raises(KilnError, match="no ImageNet ResNet with 19 layers"):
        relay.testing.resnet.get_workload(num_layers=19)


# --- MobileNet -----------------------------------------------------------------------------------

def test_mobilenet_structure_and_forward():
    rng = np.random.default_rng(4)
    mod, params = relay.testing.mobilenet.get_workload(num_classes=10, image_shape=(3, 32, 32))
    names = [p.name_hint for p in mod["main"].params]
    assert names[:3] == ["data", "conv_block_1_conv_weight", "conv_block_1_bn_gamma"]
    assert names[-2:] == ["fc_weight", "fc_bias"]
    assert params["separable_conv_block_1_weight"].shape == (32, 1, 3, 3)
    assert params["separable_conv_block_13_conv2_weight"].shape == (1024, 1024, 1, 1)
    assert "groups=32" in mod.astext()
    params = _randomize_batch_norm(params, rng)
    x = rng.uniform(-1, 1, (1, 3, 32, 32)).astype("float32")
    out = evaluate(mod, {"data": x}, params)
    expected = _numpy_mobilenet(x.astype(np.float64),
                                {k: v.astype(np.float64) for k, v in params.items()})
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-6)


def test_mobilenet_full_size_and_nhwc():
    mod, params = relay.testing.mobilenet.get_workload()
    out = evaluate(mod, {"data": np.ones((1, 3, 224, 224), "float32")}, params)
    assert out.shape == (1, 1000)
    np.testing.assert_allclose(out.sum(), 1.0, rtol=1e-5)
    mod, params = relay.testing.mobilenet.get_workload(image_shape=(64, 64, 3), layout="NHWC",
                                                       num_classes=3)
    assert params["separable_conv_block_1_weight"].shape == (3, 3, 32, 1)
    out = evaluate(mod, {"data": np.ones((1, 64, 64, 3), "float32")}, params)
    assert out.shape == (1, 3)


# --- initialisation ------------------------------------------------------------------------------

def test_xavier_initialisation_follows_tvm_rules():
    _, params = relay.testing.resnet.get_workload(num_classes=10, image_shape=(3, 64, 64))
    _, again = relay.testing.resnet.get_workload(num_classes=10, image_shape=(3, 64, 64))
    for name, value in params.items():
        np.testing.assert_array_equal(value.numpy(), again[name].numpy())  # seeded
        if name.endswith(("gamma", "moving_var")):
            assert np.all(value.numpy() == 1.0), name
        elif name.endswith(("beta", "moving_mean", "bias")):
            assert np.all(value.numpy() == 0.0), name
    # conv0_weight is the first weight drawn: uniform(-s, s) with s = sqrt(3 / ((fan_in + fan_out) / 2))
    fan_in, fan_out = 3 * 49, 64 * 49
    scale = np.sqrt(3.0 / ((fan_in + fan_out) / 2))
    expected = np.random.RandomState(0).uniform(-scale, scale, (64, 3, 7, 7)).astype("float32")
    np.testing.assert_array_equal(params["conv0_weight"].numpy(), expected)
    # the fc weight: fan_in 512, fan_out 10
    bound = np.sqrt(3.0 / ((512 + 10) / 2))
    assert np.abs(params["fc1_weight"].numpy()).max() <= bound
    assert np.abs(params["fc1_weight"].numpy()).max() > 0.9 * bound


def test_create_workload_custom_net_and_initializer():
    data = relay.var("data", shape=(2, 4))
    net = layers.dense_add_bias(data=data, units=3, name="fc")
    mod, params = create_workload(relay.Function(relay.analysis.free_vars(net), net), Constant())
    assert isinstance(mod, IRModule) and sorted(params) == ["fc_bias", "fc_weight"]
    np.testing.assert_allclose(params["fc_weight"].numpy(), 1.0 / 12)
    with pytest.raises(KilnError, match="no initialization rule"):
        Xavier()("alpha", np.zeros((2, 2), "float32"))


def test_layers_create_typed_weights():
    data = relay.var("data", shape=(1, 16, 8, 8))
    out = layers.conv2d(data=data, channels=8, kernel_size=(3, 3), groups=2, padding=(1, 1),
                        name="c")
    typed = run_infer_type(out)
    assert typed.checked_type == TensorType((1, 8, 8, 8), "float32")
    assert typed.args[1].type_annotation == TensorType((8, 8, 3, 3), "float32")
    out = layers.conv2d_transpose(data=data, channels=4, kernel_size=(2, 2), strides=(2, 2), name="t")
    assert run_infer_type(out).checked_type.shape == (1, 4, 16, 16)
    out = layers.conv3d(data=relay.var("v", shape=(1, 4, 4, 4, 2)), channels=3, kernel_size=3,
                        name="k", data_layout="NDHWC", kernel_layout="DHWIO")
    assert out.args[1].type_annotation.shape == (3, 3, 3, 2, 3)
    assert run_infer_type(out).checked_type.shape == (1, 2, 2, 2, 3)
    assert layers.conv_kernel_layout("NHWC", True) == "HWOI"
