"""ConvertLayout: convolutions and pools moved to the desired layouts, TVM semantics.

Oracles: the reference interpreter on the module *before* the pass (values), the layouts and
transform counts that the task's rules call for (written out per case), NumPy formulas for the
end-to-end block, and the kernel names TVM's x86 build uses for blocked convolutions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _pass_helpers import assert_same_values, module, random_inputs, run_unchanged_input
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.errors import PassError
from kiln.interpreter import evaluate
from kiln.ir import assert_structural_equal
from kiln.ir.expr import Call, Constant, Expr, Op
from kiln.ir.visitor import post_order
from kiln.relay import testing
from kiln.transform import CanonicalizeOps, ConvertLayout, FoldConstant, InferType, PassContext
from kiln.transform.convert_layout import convert_layout

TO_NCHW = {"nn.conv2d": ["NCHW", "default"]}
TO_NHWC = {"nn.conv2d": ["NHWC", "default"]}


# --- helpers -------------------------------------------------------------------------------------

def calls(expr: Expr, name: str) -> list[Call]:
    """Calls of operator ``name`` in ``expr``."""
    return [n for n in post_order(expr)
            if isinstance(n, Call) and isinstance(n.op, Op) and n.op.name == name]


def const(rng: np.random.Generator, shape: tuple[int, ...], dtype: str = "float32") -> Expr:
    """A random constant (weights, biases)."""
    return relay.const(rng.uniform(-1, 1, shape).astype(dtype))


def convert(mod: tvm.IRModule, desired: dict[str, list[str]], fold: bool = True) -> tvm.IRModule:
    """ConvertLayout at opt level 3 (then FoldConstant, which folds weight transforms)."""
    with PassContext(opt_level=3):
        out = ConvertLayout(desired)(mod)
        if fold:
            out = FoldConstant()(out)
    return InferType()(out)


def check(mod: tvm.IRModule, desired: dict[str, list[str]], rng: np.random.Generator,
          transforms: int) -> tvm.IRModule:
    """Convert ``mod``; assert it is unchanged, values agree and ``transforms`` activation
    ``layout_transform`` calls remain (weights are constants, so theirs are folded)."""
    run_unchanged_input(ConvertLayout(desired), mod)
    out = convert(mod, desired)
    assert_same_values(mod, out, random_inputs(mod, rng))
    lts = calls(out["main"].body, "layout_transform")
    assert all(not isinstance(lt.args[0], Constant) for lt in lts)
    assert len(lts) == transforms, out.astext()
    assert_no_inverse_pairs(out)
    return out


def assert_no_inverse_pairs(mod: tvm.IRModule) -> None:
    """No ``layout_transform(layout_transform(x, A, B), B, A)``."""
    for lt in calls(mod["main"].body, "layout_transform"):
        inner = lt.args[0]
        if isinstance(inner, Call) and isinstance(inner.op, Op) and inner.op.name == lt.op.name:
            assert (inner.attrs.src_layout, inner.attrs.dst_layout) != \
                (lt.attrs.dst_layout, lt.attrs.src_layout)


def bias_shapes(mod: tvm.IRModule) -> list[tuple[int, ...]]:
    """Shapes of the constants added in ``main`` (biases: ConvertLayout canonicalizes
    ``nn.bias_add`` to ``add``, as TVM's does)."""
    return [tuple(c.args[1].data.shape) for c in calls(mod["main"].body, "add")
            if isinstance(c.args[1], Constant)]


def conv_layouts(mod: tvm.IRModule, name: str = "nn.conv2d") -> list[tuple[str, str]]:
    """``(data_layout, kernel_layout)`` of every ``name`` call in ``main``."""
    return [(c.attrs.data_layout, c.attrs.kernel_layout) for c in calls(mod["main"].body, name)]


def nhwc_conv(x: Expr, rng: np.random.Generator, c_in: int, c_out: int, k: int = 3,
              **kw: object) -> Expr:
    """An NHWC/HWIO convolution with a constant weight."""
    w = const(rng, (k, k, c_in, c_out))
    return relay.nn.conv2d(x, w, padding=k // 2, data_layout="NHWC", kernel_layout="HWIO", **kw)


# --- the basic chain -----------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 8, 8, 4), (2, 7, 5, 3)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nhwc_chain_needs_one_transform_in_and_one_out(shape, dtype, rng):
    c = shape[3]
    x = relay.var("x", shape=shape, dtype=dtype)
    y = relay.nn.conv2d(x, const(rng, (3, 3, c, 8), dtype), padding=1, data_layout="NHWC",
                        kernel_layout="HWIO")
    y = relay.nn.relu(relay.nn.bias_add(y, const(rng, (8,), dtype), axis=3))
    y = relay.nn.conv2d(y, const(rng, (3, 3, 8, 6), dtype), padding=1, data_layout="NHWC",
                        kernel_layout="HWIO")
    out = check(module(relay.nn.relu(y)), TO_NCHW, rng, transforms=2)
    assert conv_layouts(out) == [("NCHW", "OIHW")] * 2
    assert out["main"].body.checked_type == relay.TensorType((*shape[:3], 6), dtype)
    assert bias_shapes(out) == [(1, 8, 1, 1)]  # bias_add canonicalized, its bias moved to NCHW


def test_variable_weights_are_transformed_in_the_graph(rng):
    x = relay.var("x", shape=(1, 6, 6, 3))
    w = relay.var("w", shape=(3, 3, 3, 4))
    mod = module(relay.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="HWIO"))
    out = convert(mod, TO_NCHW)
    assert_same_values(mod, out, random_inputs(mod, rng))
    pairs = sorted((lt.attrs.src_layout, lt.attrs.dst_layout)
                   for lt in calls(out["main"].body, "layout_transform"))
    assert pairs == [("HWIO", "OIHW"), ("NCHW", "NHWC"), ("NHWC", "NCHW")]


# --- consumers that follow the converted layout, and those that do not --------------------------

def _case_bias_vector(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.add(nhwc_conv(x, rng, 4, 8), const(rng, (8,)))


def _case_bias_4d(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.multiply(nhwc_conv(x, rng, 4, 8), const(rng, (1, 1, 1, 8)))


def _case_spatial_operand(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.subtract(nhwc_conv(x, rng, 4, 8), const(rng, (6, 6, 1)))


def _case_residual_input(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.add(nhwc_conv(x, rng, 4, 4), x)  # x converted once, shared with the conv


def _case_residual_two_convs(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.add(nhwc_conv(x, rng, 4, 8), nhwc_conv(x, rng, 4, 8, k=1))


def _case_scalar_clip_leaky(x: Expr, rng: np.random.Generator) -> Expr:
    y = relay.multiply(nhwc_conv(x, rng, 4, 8), relay.const(np.float32(0.5)))
    return relay.nn.leaky_relu(relay.clip(y, -0.5, 0.7), alpha=0.1)


def _case_prelu(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.nn.prelu(nhwc_conv(x, rng, 4, 8), const(rng, (8,)), axis=3)


def _case_pad(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.nn.pad(nhwc_conv(x, rng, 4, 8), ((0, 0), (1, 2), (0, 1), (0, 0)))


def _case_pools(x: Expr, rng: np.random.Generator) -> Expr:
    y = relay.nn.max_pool2d(nhwc_conv(x, rng, 4, 8), (2, 2), (2, 2), layout="NHWC")
    y = relay.nn.avg_pool2d(y, (3, 3), (1, 1), padding=(1, 1), layout="NHWC")
    return relay.nn.global_avg_pool2d(y, layout="NHWC")


def _case_concatenate(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.concatenate([nhwc_conv(x, rng, 4, 8), nhwc_conv(x, rng, 4, 3, k=1)], axis=3)


def _case_concatenate_input(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.concatenate([nhwc_conv(x, rng, 4, 8), x], axis=-1)


def _case_mean_spatial(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.mean(nhwc_conv(x, rng, 4, 8), axis=[1, 2])  # (N, C) either way: no way back


def _case_sum_keepdims(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.sum(nhwc_conv(x, rng, 4, 8), axis=[1, 2], keepdims=True)


def _case_max_channels(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.max(nhwc_conv(x, rng, 4, 8), axis=[3])  # (N, H, W) either way


def _case_min_batch(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.min(nhwc_conv(x, rng, 4, 8), axis=[0])  # HWC held as CHW: converted back


def _case_batch_norm(x: Expr, rng: np.random.Generator) -> Expr:
    vecs = [const(rng, (8,)) for _ in range(3)]
    var = relay.const(rng.uniform(0.5, 2, (8,)).astype("float32"))
    bn = relay.nn.batch_norm(nhwc_conv(x, rng, 4, 8), *vecs, var, axis=3)
    return relay.nn.relu(bn[0])


def _case_batch_norm_tuple(x: Expr, rng: np.random.Generator) -> Expr:
    vecs = [const(rng, (8,)) for _ in range(3)]
    var = relay.const(rng.uniform(0.5, 2, (8,)).astype("float32"))
    return relay.nn.batch_norm(nhwc_conv(x, rng, 4, 8), *vecs, var, axis=3).astuple()


def _case_softmax_layer_norm(x: Expr, rng: np.random.Generator) -> Expr:
    y = relay.nn.softmax(nhwc_conv(x, rng, 4, 8), axis=-1)
    return relay.nn.layer_norm(y, const(rng, (8,)), const(rng, (8,)), axis=3)


def _case_flatten(x: Expr, rng: np.random.Generator) -> Expr:
    return relay.nn.batch_flatten(relay.nn.relu(nhwc_conv(x, rng, 4, 8)))


def _case_two_layout_sensitive_consumers(x: Expr, rng: np.random.Generator) -> Expr:
    y = relay.nn.relu(nhwc_conv(x, rng, 4, 8))  # converted back once, shared by both
    return relay.Tuple([relay.nn.batch_flatten(y), relay.transpose(y, (0, 3, 1, 2))])


def _case_explicit_transform(x: Expr, rng: np.random.Generator) -> Expr:
    y = relay.layout_transform(nhwc_conv(x, rng, 4, 8), "NHWC", "NCHW")  # already NCHW
    return relay.nn.relu(y)


CONSUMERS: dict[str, tuple[Callable[[Expr, np.random.Generator], Expr], int]] = {
    "bias_vector": (_case_bias_vector, 2),
    "bias_4d": (_case_bias_4d, 2),
    "spatial_operand": (_case_spatial_operand, 2),  # (H, W, 1) made 4-d, moved, folded
    "residual_input": (_case_residual_input, 2),
    "residual_two_convs": (_case_residual_two_convs, 2),
    "scalar_clip_leaky": (_case_scalar_clip_leaky, 2),
    "prelu": (_case_prelu, 2),
    "pad": (_case_pad, 2),
    "pools": (_case_pools, 2),
    "concatenate": (_case_concatenate, 2),
    "concatenate_input": (_case_concatenate_input, 2),
    "mean_spatial": (_case_mean_spatial, 1),
    "sum_keepdims": (_case_sum_keepdims, 2),
    "max_channels": (_case_max_channels, 1),
    "min_batch": (_case_min_batch, 2),
    "batch_norm": (_case_batch_norm, 2),
    "batch_norm_tuple": (_case_batch_norm_tuple, 2),
    "softmax_layer_norm": (_case_softmax_layer_norm, 2),
    "flatten": (_case_flatten, 2),
    "two_layout_sensitive_consumers": (_case_two_layout_sensitive_consumers, 2),
    "explicit_transform": (_case_explicit_transform, 1),
}


@pytest.mark.parametrize("case", sorted(CONSUMERS))
def test_consumers(case, rng):
    build, transforms = CONSUMERS[case]
    x = relay.var("x", shape=(2, 6, 6, 4))
    out = check(module(build(x, rng)), TO_NCHW, rng, transforms)
    assert all(layouts == ("NCHW", "OIHW") for layouts in conv_layouts(out))


def test_followers_get_remapped_attributes(rng):
    x = relay.var("x", shape=(1, 6, 6, 4))
    y = relay.nn.prelu(nhwc_conv(x, rng, 4, 8), const(rng, (8,)), axis=3)
    y = relay.nn.pad(y, ((0, 0), (1, 2), (3, 4), (0, 0)))
    y = relay.nn.max_pool2d(y, (2, 2), layout="NHWC")
    y = relay.concatenate([y, y], axis=3)
    y = relay.mean(y, axis=[1, 2], keepdims=True)
    body = convert(module(y), TO_NCHW)["main"].body
    assert calls(body, "nn.prelu")[0].attrs.axis == 1
    assert calls(body, "nn.pad")[0].attrs.pad_width == ((0, 0), (0, 0), (1, 2), (3, 4))
    assert calls(body, "nn.max_pool2d")[0].attrs.layout == "NCHW"
    assert calls(body, "concatenate")[0].attrs.axis == 1
    assert calls(body, "mean")[0].attrs.axis == (2, 3)


# --- other directions, depthwise, grouped, transposed, explicit kernel layouts ----------------

@pytest.mark.parametrize("groups, c_in, c_out, kernel", [
    (1, 4, 8, "HWIO"),  # plain NCHW -> NHWC: HWIO
    (4, 4, 4, "HWOI"),  # depthwise: HWOI (TVM's rule)
    (2, 4, 6, "HWIO"),  # grouped but not depthwise
])
def test_nchw_to_nhwc(groups, c_in, c_out, kernel, rng):
    x = relay.var("x", shape=(1, c_in, 7, 7))
    w = const(rng, (c_out, c_in // groups, 3, 3))
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, w, padding=1, groups=groups),
                                        const(rng, (c_out,))))
    y = relay.nn.avg_pool2d(y, (2, 2), (2, 2))
    out = check(module(y), TO_NHWC, rng, transforms=2)
    assert conv_layouts(out) == [("NHWC", kernel)]
    assert bias_shapes(out) == [(1, 1, 1, c_out)]  # the add of the canonicalized bias, in NHWC
    assert calls(out["main"].body, "nn.avg_pool2d")[0].attrs.layout == "NHWC"


@pytest.mark.parametrize("groups, c, mult", [(6, 6, 1), (3, 6, 1), (6, 6, 2)])
def test_nhwc_depthwise_and_grouped_to_nchw(groups, c, mult, rng):
    x = relay.var("x", shape=(2, 5, 5, c))
    kernel = "HWOI" if groups == c and mult == 1 else "HWIO"
    shape = (3, 3, c * mult, c // groups) if kernel == "HWOI" else (3, 3, c // groups, c * mult)
    y = relay.nn.conv2d(x, const(rng, shape), padding=1, groups=groups, data_layout="NHWC",
                        kernel_layout=kernel)
    out = check(module(relay.nn.relu(y)), TO_NCHW, rng, transforms=2)
    assert conv_layouts(out) == [("NCHW", "OIHW")]


def test_explicit_kernel_layout(rng):
    x = relay.var("x", shape=(1, 3, 6, 6))
    y = relay.nn.conv2d(x, const(rng, (5, 3, 3, 3)), padding=1)
    out = check(module(y), {"nn.conv2d": ["NHWC", "OHWI"]}, rng, transforms=2)
    assert conv_layouts(out) == [("NHWC", "OHWI")]


def test_same_layout_changes_only_the_kernel(rng):
    x = relay.var("x", shape=(1, 3, 6, 6))
    y = relay.nn.conv2d(x, const(rng, (3, 3, 3, 5)), padding=1, kernel_layout="HWIO")
    out = check(module(y), TO_NCHW, rng, transforms=0)
    assert conv_layouts(out) == [("NCHW", "OIHW")]


@pytest.mark.parametrize("strides, padding, out_pad", [((1, 1), (1, 1), (0, 0)),
                                                       ((2, 2), (0, 1), (1, 0))])
def test_conv2d_transpose(strides, padding, out_pad, rng):
    x = relay.var("x", shape=(1, 5, 5, 4))
    y = relay.nn.conv2d_transpose(x, const(rng, (3, 3, 4, 6)), strides=strides, padding=padding,
                                  output_padding=out_pad, data_layout="NHWC",
                                  kernel_layout="HWIO")
    y = relay.nn.relu(relay.nn.bias_add(y, const(rng, (6,)), axis=3))
    desired = {"nn.conv2d_transpose": ["NCHW", "default"]}
    out = check(module(y), desired, rng, transforms=2)
    assert conv_layouts(out, "nn.conv2d_transpose") == [("NCHW", "IOHW")]


def test_converted_pools(rng):
    """Pools named in the desired layouts take that layout even when their input moved."""
    x = relay.var("x", shape=(1, 8, 8, 4))
    y = relay.nn.max_pool2d(nhwc_conv(x, rng, 4, 8), (2, 2), (2, 2), layout="NHWC")
    y = relay.nn.global_max_pool2d(y, layout="NHWC")
    desired = {**TO_NCHW, "nn.max_pool2d": ["NHWC"], "nn.global_max_pool2d": ["NCHW"]}
    out = check(module(y), desired, rng, transforms=4)  # in, to NHWC, to NCHW, out
    body = out["main"].body
    assert calls(body, "nn.max_pool2d")[0].attrs.layout == "NHWC"
    assert calls(body, "nn.global_max_pool2d")[0].attrs.layout == "NCHW"


def test_pool_only_conversion(rng):
    x = relay.var("x", shape=(1, 4, 8, 8))
    y = relay.nn.avg_pool2d(x, (3, 3), (2, 2), padding=(1, 1), count_include_pad=False)
    y = relay.nn.global_avg_pool2d(relay.nn.relu(y))
    desired = {"nn.avg_pool2d": ["NHWC"], "nn.global_avg_pool2d": ["NHWC"]}
    out = check(module(y), desired, rng, transforms=2)
    assert [c.attrs.layout for c in calls(out["main"].body, "nn.avg_pool2d")] == ["NHWC"]


# --- whole networks -------------------------------------------------------------------------------

@pytest.mark.parametrize("name, kwargs", [
    ("resnet", {"num_layers": 18}),
    ("mobilenet", {}),  # depthwise convolutions and batch norms
])
def test_workload_to_nhwc_and_back(name, kwargs, rng):
    """An NCHW workload converted to NHWC computes the same, with one activation transform in
    and one out; converting it back to NCHW gives the original module again."""
    mod, params = getattr(testing, name).get_workload(batch_size=1, image_shape=(3, 32, 32),
                                                      num_classes=10, **kwargs)
    with PassContext(opt_level=3):
        nhwc = InferType()(ConvertLayout(TO_NHWC)(mod))
        back = InferType()(ConvertLayout(TO_NCHW)(nhwc))
    body = nhwc["main"].body
    weights = set(nhwc["main"].params[1:])
    activation = [lt for lt in calls(body, "layout_transform") if lt.args[0] not in weights]
    assert len(activation) == 2
    assert {layouts[0] for layouts in conv_layouts(nhwc)} == {"NHWC"}
    assert_no_inverse_pairs(nhwc)
    values = {k: v.numpy() for k, v in params.items()}
    x = {"data": rng.uniform(-1, 1, (1, 3, 32, 32)).astype("float32")}
    np.testing.assert_allclose(evaluate(nhwc, x, values), evaluate(mod, x, values), rtol=1e-5,
                               atol=1e-6)
    with PassContext(opt_level=3):  # the dense's bias_add is canonicalized, as TVM's does
        assert_structural_equal(back, InferType()(CanonicalizeOps()(mod)))


# --- provenance, input, errors -------------------------------------------------------------------

def test_provenance_is_kept(rng):
    x = relay.var("x", shape=(1, 6, 6, 4))
    conv = nhwc_conv(x, rng, 4, 8)
    conv = Call(conv.op, conv.args, conv.attrs, source_names=("conv_a",))
    relu = Call(Op.get("nn.relu"), [conv], source_names=("relu_a",))
    body = convert(module(relay.nn.batch_flatten(relu)), TO_NCHW, fold=False)["main"].body
    assert calls(body, "nn.conv2d")[0].source_names == ("conv_a",)
    assert calls(body, "nn.relu")[0].source_names == ("relu_a",)
    assert all(lt.source_names for lt in calls(body, "layout_transform"))


def test_nothing_to_convert_returns_the_same_function(rng):
    x = relay.var("x", shape=(1, 3, 6, 6))
    mod = module(relay.nn.relu(relay.nn.conv2d(x, const(rng, (4, 3, 3, 3)))))
    assert convert_layout(mod["main"], TO_NCHW) is mod["main"]


@pytest.mark.parametrize("desired, message", [
    ({"nn.not_an_op": ["NC"]}, "'nn.not_an_op' is not an operator"),
    ({"nn.conv2d": ["NCHW8c", "default"]}, "data layout 'NCHW8c'"),
    ({"nn.conv2d": ["NCHW", "OIHX"]}, "kernel layout 'OIHX'"),
    ({"nn.conv2d": ["NCHW"]}, "expected \\[data_layout, kernel_layout\\]"),
    ({"nn.conv2d_transpose": ["NHWC", "HWI"]}, "order of 'IOHW'"),
    ({"nn.max_pool2d": ["NCHW", "NHWC"]}, "nn.max_pool2d: expected one layout"),
])
def test_errors_name_the_bad_key_or_layout(desired, message):
    with pytest.raises(PassError, match=message):
        ConvertLayout(desired)


# --- property ------------------------------------------------------------------------------------

@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 2), h=st.integers(3, 8), w=st.integers(3, 8), c_in=st.integers(1, 5),
       c_out=st.integers(1, 6), k=st.integers(1, 3), stride=st.integers(1, 2),
       pad=st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)),
       depthwise=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_random_nhwc_conv_bias_relu(n, h, w, c_in, c_out, k, stride, pad, depthwise, seed):
    rng = np.random.default_rng(seed)
    x = relay.var("x", shape=(n, h, w, c_in))
    if depthwise:  # groups = channels, kernel HWOI
        c_out = c_in
        y = relay.nn.conv2d(x, const(rng, (k, k, c_in, 1)), strides=stride, padding=pad,
                            groups=c_in, data_layout="NHWC", kernel_layout="HWOI")
    else:
        y = relay.nn.conv2d(x, const(rng, (k, k, c_in, c_out)), strides=stride, padding=pad,
                            data_layout="NHWC", kernel_layout="HWIO")
    y = relay.nn.relu(relay.nn.bias_add(y, const(rng, (c_out,)), axis=3))
    mod = module(y)
    out = convert(mod, TO_NCHW)
    assert_same_values(mod, out, random_inputs(mod, rng))
    assert len(calls(out["main"].body, "layout_transform")) == 2
    assert conv_layouts(out) == [("NCHW", "OIHW")]


# --- end to end: the C build reaches the blocked kernels ----------------------------------------

def resnet_block(rng: np.random.Generator, c: int = 16, size: int = 14, classes: int = 10
                 ) -> tuple[tvm.IRModule, dict[str, np.ndarray]]:
    """An NHWC residual block: two 3x3 convs, residual add, relu, global avg pool, dense."""
    x = relay.var("x", shape=(1, size, size, c))
    names = {"w1": (3, 3, c, c), "b1": (c,), "w2": (3, 3, c, c), "b2": (c,),
             "wd": (classes, c), "bd": (classes,)}
    params = {k: rng.uniform(-0.3, 0.3, s).astype("float32") for k, s in names.items()}
    v = {k: relay.var(k, shape=s) for k, s in names.items()}
    y = relay.nn.conv2d(x, v["w1"], padding=1, data_layout="NHWC", kernel_layout="HWIO")
    y = relay.nn.relu(relay.nn.bias_add(y, v["b1"], axis=3))
    y = relay.nn.conv2d(y, v["w2"], padding=1, data_layout="NHWC", kernel_layout="HWIO")
    y = relay.nn.relu(relay.add(relay.nn.bias_add(y, v["b2"], axis=3), x))
    y = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(y, layout="NHWC"))
    y = relay.nn.bias_add(relay.nn.dense(y, v["wd"]), v["bd"])
    return module(y, [x, *v.values()]), params


def numpy_block(x: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    """The block of :func:`resnet_block` in float64 NumPy (NHWC, HWIO)."""
    def conv(a: np.ndarray, w: np.ndarray) -> np.ndarray:
        padded = np.pad(a, ((0, 0), (1, 1), (1, 1), (0, 0)))
        h, wd = a.shape[1:3]
        out = np.zeros((*a.shape[:3], w.shape[3]))
        for i in range(3):
            for j in range(3):
                out += np.einsum("nhwc,co->nhwo", padded[:, i:i + h, j:j + wd], w[i, j])
        return out

    x64 = x.astype(np.float64)
    y = np.maximum(conv(x64, p["w1"]) + p["b1"], 0)
    y = np.maximum(conv(y, p["w2"]) + p["b2"] + x64, 0)
    return y.mean(axis=(1, 2)) @ p["wd"].T.astype(np.float64) + p["bd"]


def build_block(mod: tvm.IRModule, params: dict[str, np.ndarray], converted: bool) -> Any:
    """``relay.build`` for the C target at opt level 3, after ConvertLayout to NCHW or not."""
    with PassContext(opt_level=3):
        if converted:
            mod = relay.transform.ConvertLayout(TO_NCHW)(mod)  # the TVM user path
        return relay.build(mod, target="c", params=params)


def kernel_names(factory: Any) -> list[str]:
    """The graph JSON's kernel names, without deduplication suffixes."""
    return [re.sub(r"_\d+$", "", n["attrs"]["func_name"])
            for n in json.loads(factory.get_graph_json())["nodes"] if n["op"] == "tvm_op"]


@pytest.mark.requires_cc
@pytest.mark.requires_cc
def test_resnet_block_build_with_and_without_convert_layout(rng):
    mod, params = resnet_block(rng)
    x = rng.uniform(-1, 1, (1, 14, 14, 16)).astype("float32")
    expected = numpy_block(x, params)
    for converted in (False, True):
        factory = build_block(mod, params, converted)
        m = graph_executor.GraphModule(factory["default"](tvm.cpu()))
        m.set_input(x=x)
        m.run()
        np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-4)
        blocked = [n for n in kernel_names(factory) if "contrib_conv2d_NCHWc" in n]
        assert len(blocked) == (2 if converted else 0), kernel_names(factory)
