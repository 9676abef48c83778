"""The TensorFlow importer: converters (compiled Kiln output vs TensorFlow running the same frozen
graph), the entry points, inputs/outputs, errors, provenance and the DecodeJpeg flow.

Converters are tested in families: each case is one ``tf.function`` returning many outputs, so
one native build covers a family (a build per op would not fit the test-time budget). Tolerance:
rtol=1e-4, atol=1e-5 times the output's magnitude (integer outputs exactly).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import kiln  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.errors import DynamicShapeError, FrontendError, UnsupportedOpError  # noqa: E402
from kiln.frontend.tensorflow import (  # noqa: E402
    from_saved_model,
    from_tensorflow,
    from_tf_function,
    supported_ops,
)
from kiln.ir.expr import Call  # noqa: E402
from kiln.ir.visitor import post_order  # noqa: E402
from tests.frontend._compiled import run_compiled  # noqa: E402
from tests.frontend._tf_models import assert_close, check_function, freeze  # noqa: E402

RNG = np.random.default_rng(7)


def _r(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def _c(*shape: int) -> Any:
    return tf.constant(RNG.standard_normal(shape).astype(np.float32))


# --- converter families ----------------------------------------------------------------------

def _unary(a: Any, p: Any) -> list[Any]:
    raw = tf.raw_ops
    return [tf.nn.relu(a), tf.nn.relu6(a * 4), tf.nn.elu(a), tf.nn.selu(a), tf.sigmoid(a), tf.tanh(a),
            tf.nn.softplus(a * 8), tf.nn.softsign(a), tf.nn.leaky_relu(a, 0.1), tf.math.erf(a),
            tf.math.erfc(a), tf.exp(a), tf.negative(a), tf.abs(a), tf.floor(a), tf.math.ceil(a),
            tf.sign(a), tf.sin(a), tf.cos(a), tf.round(a * 3), tf.math.expm1(a), tf.math.log(p),
            tf.math.log1p(p), tf.sqrt(p), tf.math.rsqrt(p), tf.square(a), tf.math.reciprocal(p),
            raw.Inv(x=p), tf.math.logical_not(a > 0), tf.math.is_nan(a), tf.math.is_finite(a),
            tf.math.tan(a * 0.5), tf.math.atan(a), tf.math.sinh(a), tf.math.cosh(a)]


def _binary(a: Any, b: Any) -> list[Any]:
    raw, p = tf.raw_ops, tf.abs(b) + 0.5
    return [raw.Add(x=a, y=b), a + b, a - b, a * b, a / p, raw.Div(x=a, y=p), tf.maximum(a, b),
            tf.minimum(a, b), tf.pow(p, a), tf.math.squared_difference(a, b), a < b, a > b, a <= b,
            a >= b, tf.equal(a, tf.round(a)), tf.not_equal(a, b), tf.logical_and(a > 0, b > 0),
            tf.logical_or(a > 0, b > 0), tf.math.floordiv(a, p), tf.math.floormod(a, p),
            tf.math.add_n([a, b, a]), tf.clip_by_value(a, -0.5, 0.7), tf.math.divide_no_nan(a, b * 0),
            tf.where(a > b, a, b), tf.compat.v1.where(a[:, 0] > 0, a, b), tf.cast(a * 3, tf.int32),
            tf.cast(a > 0, tf.float32), tf.math.atan2(a, p), tf.nn.bias_add(a, b[0]),
            raw.ZerosLike(x=a), raw.OnesLike(x=b)]


W_CONV, W_DW, W_T = _c(3, 3, 4, 6), _c(3, 3, 4, 2), _c(3, 3, 5, 4)


def _conv(x: Any) -> list[Any]:
    bn = tf.compat.v1.nn.fused_batch_norm(x, _c(4), _c(4), mean=_c(4), variance=tf.abs(_c(4)) + 0.5,
                                          epsilon=1e-3, is_training=False)[0]
    t_same = tf.nn.conv2d_transpose(x, W_T, [1, 18, 18, 5], strides=2, padding="SAME")
    t_valid = tf.nn.conv2d_transpose(x, W_T, [1, 19, 19, 5], strides=2, padding="VALID")
    return [tf.nn.conv2d(x, W_CONV, strides=2, padding="SAME"),
            tf.nn.conv2d(x, W_CONV, strides=1, padding="VALID", dilations=2),
            tf.nn.conv2d(x, W_CONV, strides=1, padding=[[0, 0], [1, 2], [0, 1], [0, 0]]),
            tf.nn.depthwise_conv2d(x, W_DW, strides=[1, 2, 2, 1], padding="SAME"),
            tf.nn.depthwise_conv2d(x, W_DW, strides=[1, 1, 1, 1], padding="VALID", dilations=[2, 2]),
            tf.nn.bias_add(x, _c(4)), bn, t_same, t_valid]


def _pool_resize(x: Any) -> list[Any]:
    img = tf.compat.v1.image
    return [tf.nn.max_pool2d(x, 3, 2, "SAME"), tf.nn.max_pool2d(x, 2, 2, "VALID"),
            tf.nn.avg_pool2d(x, 3, 2, "SAME"), tf.nn.avg_pool2d(x, 2, 1, "VALID"),
            img.resize_bilinear(x, [13, 7]), img.resize_bilinear(x, [13, 7], align_corners=True),
            img.resize_bilinear(x, [13, 7], half_pixel_centers=True),
            img.resize_nearest_neighbor(x, [18, 5]),
            img.resize_nearest_neighbor(x, [18, 5], align_corners=True),
            img.resize_nearest_neighbor(x, [18, 5], half_pixel_centers=True),
            tf.nn.local_response_normalization(x, depth_radius=1, bias=1.5, alpha=0.3, beta=0.6),
            tf.nn.depth_to_space(x, 2), tf.nn.space_to_depth(x[:, :8, :8], 2),
            tf.reduce_mean(x, [1, 2], keepdims=True)]


def _matmul(a: Any, b: Any) -> list[Any]:
    w = _c(5, 3)
    return [tf.matmul(a[0], w), tf.matmul(a[0], a[1], transpose_b=True),
            tf.matmul(tf.transpose(a[0]), w, transpose_a=True),
            tf.matmul(a, b), tf.matmul(b, b[0], adjoint_a=True), tf.matmul(a, a, adjoint_b=True),
            tf.einsum("bij,bjk->bik", a, b), tf.einsum("abc,abd->acd", a, a),
            tf.nn.softmax(a), tf.nn.log_softmax(a)]


def _reduce(x: Any) -> list[Any]:
    return [tf.reduce_mean(x, 1), tf.reduce_sum(x, [0, 2], keepdims=True), tf.reduce_max(x, -1),
            tf.reduce_min(x, [1, 2]), tf.reduce_prod(x, 0), tf.reduce_all(x > -1, 1), tf.reduce_any(x > 1, 2),
            tf.argmax(x, 1), tf.argmin(x, -1, output_type=tf.int32), tf.math.cumsum(x, 1),
            tf.math.cumsum(x, 2, exclusive=True, reverse=True), tf.math.cumprod(x, 0)]


def _shapes(x: Any) -> list[Any]:
    n = tf.shape(x)[0]
    flat = tf.reshape(x, tf.stack([n, -1]))  # Shape -> StridedSlice -> Pack -> Reshape: folds
    parts = tf.split(x, 2, axis=2)
    v1, v2 = tf.split(x, [1, -1], axis=1)
    u = tf.unstack(x, axis=1)
    ids = tf.identity_n([x, flat])
    return [flat, tf.squeeze(x[:, :1], 1), tf.expand_dims(x, -1), tf.transpose(x, [2, 0, 1]),
            tf.concat([x, x * 2], -1), tf.stack([x, x], 1), u[0], u[2], parts[1], v1, v2,
            tf.slice(x, [0, 1, 1], [-1, 2, 2]), tf.tile(x, [1, 2, 1]), tf.fill(tf.shape(x)[1:], 3.0),
            tf.range(2, 11, 3), tf.size(x), tf.rank(x), tf.broadcast_to(x[:, :1], [2, 4, 6]),
            tf.stop_gradient(x), ids[1], tf.cast(tf.shape(x), tf.float32) * x[0, 0, 0]]


def _slices(x: Any) -> list[Any]:
    return [x[1:, ::2], x[..., 1], x[:, None, 2:-1], x[::-1], x[-1], x[:, -2, 1::3], x[0, ..., None],
            x[::2, ::-2, 3], x[:, 1:1]]


def _pads(x: Any) -> list[Any]:
    p = [[1, 0], [2, 1], [0, 2]]
    return [tf.pad(x, p), tf.pad(x, p, constant_values=1.5), tf.pad(x, p, mode="REFLECT"),
            tf.pad(x, p, mode="SYMMETRIC")]


def _gathers(x: Any, idx: Any) -> list[Any]:
    top = tf.math.top_k(x[0], 3)
    return [tf.gather(x, idx, axis=1), tf.gather(x, [[0, 1], [1, 0]]),
            tf.gather(x, idx[:, :2] % 2, axis=2, batch_dims=1),
            tf.gather_nd(x, [[0, 1], [1, 3]]), tf.gather_nd(x, [[[1, 2, 3]]]),
            tf.one_hot(idx, 5, on_value=2.0, off_value=-1.0), tf.one_hot(idx[0], 4, axis=0),
            top.values, top.indices, tf.reverse(x, [0, -1])]


def _raw(x: Any, i: Any) -> list[Any]:
    raw = tf.raw_ops
    m = x[0]
    return [raw.Mod(x=i, y=tf.constant(3)), raw.TruncateDiv(x=i - 5, y=tf.constant(3)),
            raw.BitwiseAnd(x=i, y=tf.constant(6)), raw.BitwiseOr(x=i, y=tf.constant(9)),
            raw.Concat(concat_dim=tf.constant(1), values=[x, x]),
            raw.MaxPoolV2(input=x, ksize=[1, 2, 2, 1], strides=[1, 1, 2, 1], padding="SAME"),
            raw.BiasAddV1(value=x, bias=tf.constant([0.5, -1.0, 2.0])),
            raw.FusedBatchNorm(x=x, scale=_c(3), offset=_c(3), mean=_c(3), variance=tf.abs(_c(3)),
                               epsilon=1e-3, is_training=False)[0],
            raw.Gather(params=m, indices=tf.constant([2, 0])), raw.Snapshot(input=x),
            raw.EnsureShape(input=x, shape=[2, 4, 4, 3]), raw.CheckNumerics(tensor=x, message="x"),
            raw.ShapeN(input=[x, m])[1] * 2, raw.BatchMatMul(x=m, y=m, adj_y=True),
            raw.BatchMatMulV3(x=m, y=m, Tout=tf.float32, adj_x=True), raw.Asin(x=tf.sin(x)),
            raw.Acos(x=tf.cos(x)), raw.Rank(input=x) + 1, raw.Size(input=x)]


def _control(x: Any) -> list[Any]:
    def body(i: Any, acc: Any) -> tuple[Any, Any]:
        return i + 1, acc * 0.5 + tf.sin(acc) + tf.cast(i, tf.float32)

    _, looped = tf.while_loop(lambda i, acc: i < tf.shape(x)[0] + 2, body, [tf.constant(0), x])
    picked = tf.cond(tf.constant(True), lambda: x * 2, lambda: x - 1)
    ta = tf.TensorArray(tf.float32, size=3)
    for i in range(3):
        ta = ta.write(i, x[i] + float(i))
    return [looped, picked, ta.stack(), _nested(x)]


@tf.function
def _nested(x: Any) -> Any:
    return tf.nn.relu(x) - 1


FAMILIES: dict[str, tuple[Callable[..., list[Any]], Callable[[], list[np.ndarray]], str]] = {
    # name: (function, inputs, TF ops its frozen graph must contain)
    "unary": (_unary, lambda: [_r(3, 4), _r(3, 4, lo=0.1)],
              "Relu Relu6 Elu Selu Sigmoid Tanh Softplus Softsign LeakyRelu Erf Erfc Exp Neg Abs Floor "
              "Ceil Sign Sin Cos Round Expm1 Log Log1p Sqrt Rsqrt Square Reciprocal Inv LogicalNot IsNan "
              "IsFinite Tan Atan Sinh Cosh"),
    "binary": (_binary, lambda: [_r(4, 3), _r(4, 3)],
               "Add AddV2 Sub Mul RealDiv Div Maximum Minimum Pow SquaredDifference Less Greater LessEqual "
               "GreaterEqual Equal NotEqual LogicalAnd LogicalOr FloorDiv FloorMod AddN DivNoNan SelectV2 "
               "Select Cast Atan2 BiasAdd ZerosLike OnesLike"),
    "conv": (_conv, lambda: [_r(1, 9, 9, 4)],
             "Conv2D DepthwiseConv2dNative Conv2DBackpropInput BiasAdd FusedBatchNormV3 SpaceToBatchND "
             "BatchToSpaceND"),
    "pool_resize": (_pool_resize, lambda: [_r(1, 9, 10, 4)],
                    "MaxPool AvgPool ResizeBilinear ResizeNearestNeighbor LRN DepthToSpace SpaceToDepth "
                    "Mean"),
    "matmul": (_matmul, lambda: [_r(2, 4, 5), _r(2, 5, 3)], "MatMul BatchMatMulV2 Einsum Softmax LogSoftmax"),
    "reduce": (_reduce, lambda: [_r(3, 4, 5)], "Mean Sum Max Min Prod All Any ArgMax ArgMin Cumsum Cumprod"),
    "shapes": (_shapes, lambda: [_r(2, 4, 6)],
               "Reshape Squeeze ExpandDims Transpose ConcatV2 Pack Unpack Split SplitV Slice Tile Fill "
               "BroadcastTo IdentityN"),
    "strided_slice": (_slices, lambda: [_r(4, 6, 5)], "StridedSlice"),
    "pad": (_pads, lambda: [_r(3, 4, 5)], "Pad PadV2 MirrorPad"),
    "gather": (_gathers, lambda: [_r(2, 4, 5), RNG.integers(0, 4, (2, 3)).astype(np.int32)],
               "GatherV2 GatherNd OneHot TopKV2 ReverseV2"),
    "control_flow": (_control, lambda: [_r(3, 4)],
                     "StatelessWhile StatelessIf TensorListReserve TensorListSetItem TensorListStack"),
    "raw": (_raw, lambda: [_r(2, 4, 4, 3), RNG.integers(0, 20, (5,)).astype(np.int32)],
            "Mod TruncateDiv BitwiseAnd BitwiseOr Concat MaxPoolV2 BiasAddV1 FusedBatchNorm Gather Snapshot "
            "EnsureShape CheckNumerics ShapeN BatchMatMul BatchMatMulV3 Asin Acos Rank Size"),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_converters(family: str) -> None:
    fn, make, expected = FAMILIES[family]
    _, _, ops = check_function(fn, make())
    # the graph really holds the ops the family is meant to test (TF did not fold them away)
    assert set(expected.split()) - ops == set()
    assert ops - set(supported_ops()) == set()


# --- entry points, inputs and outputs ----------------------------------------------------------

def _graph_def() -> tuple[Any, np.ndarray, list[np.ndarray]]:
    w = _c(4, 3)

    def fn(x: Any) -> list[Any]:
        h = tf.matmul(x, w, name="proj")
        return [tf.nn.relu(h, name="act"), tf.reduce_sum(h, 1, name="total")]

    x = _r(2, 4)
    _, frozen = freeze(fn, [x])
    expected = [np.asarray(t) for t in frozen(tf.constant(x))]
    return frozen.graph.as_graph_def(), x, expected


def test_graph_def_bytes_and_files(tmp_path: Path) -> None:
    gd, x, expected = _graph_def()
    pb, pbtxt = tmp_path / "m.pb", tmp_path / "m.pbtxt"
    pb.write_bytes(gd.SerializeToString())
    tf.io.write_graph(gd, str(tmp_path), "m.pbtxt", as_text=True)
    for source in (gd, gd.SerializeToString(), str(pb), pbtxt):
        mod, params = relay.frontend.from_tensorflow(source, layout="NHWC",
                                                     outputs=["Identity", "Identity_1"])
        assert mod.attrs["output_names"] == ("Identity", "Identity_1")
        got = run_compiled(mod, params, {"x": x}, opt_level=0)
        for a, e in zip(got, expected):
            assert_close(a, e)


def test_default_outputs_are_sinks_and_tensor_names_pick_outputs() -> None:
    gd, x, expected = _graph_def()
    mod, _ = from_tensorflow(gd)
    assert mod.attrs["output_names"] == ("Identity", "Identity_1")
    mod, params = from_tensorflow(gd, outputs=["act:0", "proj"])
    assert mod.attrs["output_names"] == ("act", "proj")
    got = run_compiled(mod, params, {"x": x}, opt_level=0)
    assert_close(got[0], expected[0])
    with pytest.raises(FrontendError, match="output 'nope' is not a node of the graph"):
        from_tensorflow(gd, outputs=["nope"])


def test_freeze_params_false_names_params_after_const_nodes() -> None:
    gd, x, expected = _graph_def()
    mod, params = from_tensorflow(gd, freeze_params=False)
    assert any("proj" in name or "Const" in name or "ReadVariableOp" in name for name in params), list(params)
    assert mod["main"].params[0].name_hint == "x"
    got = run_compiled(mod, params, {"x": x}, opt_level=0)
    for a, e in zip(got, expected):
        assert_close(a, e)


def test_layout_nchw_converts_convolutions() -> None:
    w = _c(3, 3, 3, 4)
    x = _r(1, 8, 8, 3)
    _, frozen = freeze(lambda v: tf.nn.relu(tf.nn.conv2d(v, w, 1, "SAME")), [x])
    expected = np.asarray(frozen(tf.constant(x))[0])
    mod, params = from_tensorflow(frozen.graph.as_graph_def(), layout="NCHW")
    layouts = {c.attrs.data_layout for c in post_order(mod["main"].body)
               if isinstance(c, Call) and getattr(c.op, "name", "") == "nn.conv2d"}
    assert layouts == {"NCHW"}
    assert_close(run_compiled(mod, params, {"v": x})[0], expected)
    with pytest.raises(FrontendError, match="layout must be"):
        from_tensorflow(frozen.graph.as_graph_def(), layout="NCDHW")


def test_saved_model_signature(tmp_path: Path) -> None:
    class Net(tf.Module):
        def __init__(self) -> None:
            self.w = tf.Variable(RNG.standard_normal((4, 3)).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="feat")])
        def __call__(self, feat: Any) -> dict[str, Any]:
            h = tf.matmul(feat, self.w)
            return {"score": tf.sigmoid(h), "logits": h}

    net = Net()
    tf.saved_model.save(net, str(tmp_path), signatures=net.__call__)
    x = _r(2, 4)
    with pytest.raises(DynamicShapeError, match=r"input 'feat' has unknown dim 0.*from_tensorflow"):
        from_saved_model(tmp_path)
    mod, params = from_saved_model(tmp_path, shape={"feat": (2, 4)})
    assert mod.attrs["output_names"] == ("logits", "score")
    expected = net(tf.constant(x))
    got = run_compiled(mod, params, {"feat": x}, opt_level=0)
    assert_close(got[0], expected["logits"].numpy())
    assert_close(got[1], expected["score"].numpy())
    with pytest.raises(FrontendError, match="has no signature 'other'"):
        from_saved_model(tmp_path, signature="other")


def test_tf_function_needs_a_signature() -> None:
    f = tf.function(lambda x: x * 2)
    with pytest.raises(FrontendError, match="input_signature"):
        from_tf_function(f)
    mod, _ = from_tf_function(f, input_signature=[tf.TensorSpec([3], tf.float32)])
    assert mod["main"].params[0].type_annotation.shape == (3,)


def test_partitioned_call_is_inlined() -> None:
    @tf.function
    def inner(v: Any) -> Any:
        return tf.nn.relu(v) * 3.0

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 3], name="x")
        tf.identity(inner(x) + 1.0, name="out")
    gd = g.as_graph_def()
    assert {"PartitionedCall", "StatefulPartitionedCall"} & {n.op for n in gd.node}
    mod, params = from_tensorflow(gd)
    value = _r(2, 3)
    with tf.compat.v1.Session(graph=g) as sess:
        expected = sess.run("out:0", {"x:0": value})
    assert_close(run_compiled(mod, params, {"x": value}, opt_level=0)[0], expected)


def test_placeholder_with_default_is_its_default_unless_fed() -> None:
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 3], name="x")
        scale = tf.compat.v1.placeholder_with_default(tf.constant(2.0), [], name="scale")
        check = tf.compat.v1.debugging.assert_greater(scale, 0.0, message="scale must be positive")
        with tf.control_dependencies([check]):  # an Assert with string constants: not computed
            tf.identity(x * scale, name="out")
    value = _r(2, 3)
    with tf.compat.v1.Session(graph=g) as sess:
        default, fed = sess.run("out:0", {"x:0": value}), sess.run("out:0", {"x:0": value, "scale:0": 5.0})
    mod, params = from_tensorflow(g.as_graph_def())
    assert [p.name_hint for p in mod["main"].params] == ["x"]
    assert_close(run_compiled(mod, params, {"x": value}, opt_level=0)[0], default)
    mod, params = from_tensorflow(g.as_graph_def(), shape={"scale": ()})
    assert [p.name_hint for p in mod["main"].params] == ["x", "scale"]
    got = run_compiled(mod, params, {"x": value, "scale": np.array(5.0, np.float32)}, opt_level=0)
    assert_close(got[0], fed)


# --- errors --------------------------------------------------------------------------------------

def test_unsupported_ops_are_listed_together_before_converting() -> None:
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4], name="x")
        u = tf.raw_ops.Unique(x=x, name="uniq")
        b = tf.raw_ops.Bucketize(input=x, boundaries=[0.0, 1.0], name="buckets")
        tf.raw_ops.Unique(x=u.y, name="uniq2")
        tf.identity(tf.cast(b, tf.float32) + x, name="out")
    with pytest.raises(UnsupportedOpError) as e:
        from_tensorflow(g.as_graph_def())
    msg = str(e.value)
    assert "2 unsupported operator kind(s) in the TensorFlow model" in msg
    assert "Unique: nodes 'uniq', 'uniq2'" in msg and "Bucketize: nodes 'buckets'" in msg


def test_tf1_control_flow_is_reported_with_a_hint() -> None:
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    def fn(x: Any) -> Any:
        return tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2), [0, x])[1]

    concrete, _ = freeze(fn, [_r(3)])
    lowered = convert_variables_to_constants_v2(concrete, lower_control_flow=True)
    with pytest.raises(UnsupportedOpError, match=r"(?s)Merge: nodes .*TF1 control flow.*lower_control_flow"):
        from_tensorflow(lowered.graph.as_graph_def())


def test_missing_shape_names_the_input() -> None:
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="images")
        tf.nn.relu(x, name="out")
    with pytest.raises(DynamicShapeError, match=r"input 'images' has unknown dim 0.*shape=\{'images'"):
        from_tensorflow(g.as_graph_def())
    with pytest.raises(FrontendError, match="a shape was given for 'img', which is not a graph input"):
        from_tensorflow(g.as_graph_def(), shape={"img": (1, 4)})
    with pytest.raises(FrontendError, match="input 'images'"):
        from_tensorflow(g.as_graph_def(), shape={"images": (1, 5)})
    mod, _ = from_tensorflow(g.as_graph_def(), shape={"images": (3, 4)})
    assert mod["main"].params[0].type_annotation.shape == (3, 4)


def test_input_dependent_values_are_clear_errors() -> None:
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 3], name="x")
        n = tf.compat.v1.placeholder(tf.int32, [], name="n")
        tf.reshape(x, tf.stack([n, -1]), name="flat")
    with pytest.raises(FrontendError, match=r"Reshape node 'flat'.*computed from graph inputs \['n'\]"):
        from_tensorflow(g.as_graph_def(), outputs=["flat"])

    def loop(x: Any, n: Any) -> Any:
        return tf.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a * 2), [0, x])[1]

    concrete, _ = freeze(loop, [_r(3), np.array(3, np.int32)])
    with pytest.raises(UnsupportedOpError, match="loop condition depends on graph inputs"):
        from_tf_function(concrete)


def test_bad_sources() -> None:
    with pytest.raises(FrontendError, match="not a serialized TensorFlow GraphDef"):
        from_tensorflow(b"\xff\xfe garbage")
    with pytest.raises(FrontendError, match="does not exist"):
        from_tensorflow("/nonexistent/model.pb")
    with pytest.raises(FrontendError, match="takes a GraphDef"):
        from_tensorflow(3.5)


# --- provenance -----------------------------------------------------------------------------------

def test_provenance_reaches_fused_functions_and_graph_json() -> None:
    w = _c(3, 3, 3, 4)

    def fn(x: Any) -> Any:
        y = tf.nn.conv2d(x, w, 1, "SAME", name="stem_conv")
        return tf.nn.relu(tf.nn.bias_add(y, _c(4), name="stem_bias"), name="stem_relu")

    concrete, _ = freeze(fn, [_r(1, 6, 6, 3)])
    mod, params = from_tf_function(concrete)
    names = {s for c in post_order(mod["main"].body) if isinstance(c, Call) for s in c.source_names}
    assert {"stem_conv", "stem_bias", "stem_relu"} <= names
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    graph = json.loads(lib.get_graph_json())
    sources = ",".join(n.get("attrs", {}).get("source_names", "") for n in graph["nodes"])
    assert "stem_conv" in sources and "stem_relu" in sources


# --- the seed's flow: Inception's DecodeJpeg/contents input ---------------------------------------

def test_decode_jpeg_contents_is_the_graph_input() -> None:
    """TF InceptionV1's first node is the string Const ``DecodeJpeg/contents`` feeding
    ``DecodeJpeg``: Kiln (like TVM) makes it a uint8 input taking the decoded image, and
    ``DecodeJpeg`` passes it through; the built graph's input is named ``DecodeJpeg/contents``."""
    image = RNG.integers(0, 256, (20, 24, 3), dtype=np.uint8)
    jpeg = tf.io.encode_jpeg(tf.constant(image)).numpy()
    w = RNG.standard_normal((3, 3, 3, 8)).astype(np.float32) * 0.05
    g = tf.Graph()
    with g.as_default():
        contents = tf.constant(jpeg, name="DecodeJpeg/contents")
        decoded = tf.image.decode_jpeg(contents, channels=3, name="DecodeJpeg")
        x = tf.expand_dims(tf.cast(decoded, tf.float32, name="Cast"), 0, name="ExpandDims")
        x = tf.compat.v1.image.resize_bilinear(x, [16, 16], name="ResizeBilinear")
        x = tf.multiply(tf.subtract(x, 117.0, name="Sub"), 1 / 117.0, name="Mul")
        x = tf.nn.relu(tf.nn.conv2d(x, w, 2, "SAME", name="conv"), name="conv/relu")
        tf.nn.softmax(tf.reshape(tf.reduce_mean(x, [1, 2]), [1, 8]), name="softmax")
    with tf.compat.v1.Session(graph=g) as sess:
        decoded_img, expected = sess.run(["DecodeJpeg:0", "softmax:0"])
    with pytest.raises(FrontendError, match=r"string input 'DecodeJpeg/contents'.*shape="):
        from_tensorflow(g.as_graph_def())
    mod, params = relay.frontend.from_tensorflow(g.as_graph_def(), layout="NHWC",
                                                 shape={"DecodeJpeg/contents": decoded_img.shape})
    (inp,) = mod["main"].params
    assert inp.name_hint == "DecodeJpeg/contents" and inp.type_annotation.dtype == "uint8"
    assert mod.attrs["output_names"] == ("softmax",)
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    graph = json.loads(lib.get_graph_json())
    assert graph["nodes"][graph["arg_nodes"][0]]["name"] == "DecodeJpeg/contents"
    from kiln.contrib import graph_executor

    gm = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    gm.set_input("DecodeJpeg/contents", decoded_img)
    gm.run()
    assert_close(gm.get_output(0).numpy(), expected)


# --- documentation ------------------------------------------------------------------------------

def test_doc_table_lists_exactly_the_supported_ops() -> None:
    doc = Path(__file__).parents[2] / "docs" / "frontends" / "tensorflow.md"
    text = doc.read_text()
    section = text.split("## Supported operators", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in section.splitlines() if line.startswith("|")][2:]
    listed = [op for row in rows for op in re.findall(r"`([A-Za-z0-9]+)`", row[2])]
    assert sorted(listed) == supported_ops()
