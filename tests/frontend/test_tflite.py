"""TFLite importer: one small model per converter, built with tf.function, converted with
TFLiteConverter, and compared with the TFLite interpreter (Kiln compiled with relay.build).

Float outputs must match at rtol 1e-4, atol 1e-5 (relative to the output's magnitude where it is
large); quantized outputs within one quantization step.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")
tflite = pytest.importorskip("tflite")

from kiln.errors import FrontendError, UnsupportedOpError  # noqa: E402
from kiln.frontend.tflite import CONVERTERS, from_tflite  # noqa: E402
from tests.frontend._compiled import run_compiled  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
DOC = Path(__file__).resolve().parents[2] / "docs" / "frontends" / "tflite.md"


# --- helpers (also used by test_tflite_models.py) ----------------------------------------------
def convert_fn(fn: Callable[..., Any], *shapes: Any, dtypes: Any = None, setup: Any = None) -> bytes:
    """A TFLite flatbuffer of ``fn`` over inputs of ``shapes`` (float32 unless ``dtypes``)."""
    dtypes = dtypes or [tf.float32] * len(shapes)
    specs = [tf.TensorSpec(s, d, name=f"x{i}") for i, (s, d) in enumerate(zip(shapes, dtypes))]
    concrete = tf.function(fn, input_signature=specs).get_concrete_function()
    conv = tf.lite.TFLiteConverter.from_concrete_functions([concrete])
    if setup is not None:
        setup(conv)
    return conv.convert()


def run_tflite(buf: bytes, feeds: Mapping[str, np.ndarray], reference: bool = False) -> dict[str, np.ndarray]:
    """The TFLite interpreter's outputs by tensor name."""
    kw: dict[str, Any] = {}
    if reference:
        kw["experimental_op_resolver_type"] = tf.lite.experimental.OpResolverType.BUILTIN_REF
    it = tf.lite.Interpreter(model_content=buf, **kw)
    for d in it.get_input_details():
        if tuple(d["shape"]) != feeds[d["name"]].shape:
            it.resize_tensor_input(d["index"], feeds[d["name"]].shape)
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], feeds[d["name"]])
    it.invoke()
    return {d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()}


def random_feeds(buf: bytes, seed: int = 0, low: float = -2.0, high: float = 2.0,
                 shapes: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
    """Random inputs for every input of the model (its shapes, or ``shapes``)."""
    rng = np.random.default_rng(seed)
    it = tf.lite.Interpreter(model_content=buf)
    feeds = {}
    for d in it.get_input_details():
        shape = tuple((shapes or {}).get(d["name"], d["shape"]))
        dt = np.dtype(d["dtype"])
        if dt.kind == "f":
            feeds[d["name"]] = rng.uniform(low, high, shape).astype(dt)
        elif dt == np.bool_:
            feeds[d["name"]] = rng.integers(0, 2, shape).astype(bool)
        else:
            info = np.iinfo(dt)
            feeds[d["name"]] = rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dt)
    return feeds


def run_kiln(buf: bytes, feeds: Mapping[str, np.ndarray], **kw: Any) -> dict[str, np.ndarray]:
    """Kiln's compiled outputs by tensor name."""
    mod, params = from_tflite(tflite.Model.GetRootAsModel(buf, 0), **kw)
    outs = run_compiled(mod, params, feeds)
    return dict(zip(mod.attrs["output_names"], outs))


def compare(buf: bytes, feeds: Mapping[str, np.ndarray] | None = None, rtol: float = RTOL,
            atol: float = ATOL, quant_steps: float | None = None, reference: bool = False,
            **kw: Any) -> float:
    """Assert Kiln matches the interpreter; return the largest absolute error."""
    feeds = dict(feeds if feeds is not None else random_feeds(buf))
    expected = run_tflite(buf, feeds, reference=reference)
    actual = run_kiln(buf, feeds, **kw)
    assert set(actual) == set(expected)
    worst = 0.0
    for name, e in expected.items():
        a = actual[name]
        assert a.shape == e.shape, (name, a.shape, e.shape)
        assert a.dtype == e.dtype, (name, a.dtype, e.dtype)
        if e.size == 0:
            continue
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        worst = max(worst, float(diff.max()))
        if quant_steps is not None:
            assert diff.max() <= quant_steps, (name, diff.max())
        elif e.dtype.kind in "fc":
            scale = max(1.0, float(np.abs(e).max()))
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol * scale, err_msg=name)
        else:
            np.testing.assert_array_equal(a, e, err_msg=name)
    return worst


def ops_of(buf: bytes) -> list[str]:
    """The builtin operator names of the model's main subgraph."""
    from tflite.utils import opcode2name

    m = tflite.Model.GetRootAsModel(buf, 0)
    g = m.Subgraphs(0)
    names = []
    for i in range(g.OperatorsLength()):
        oc = m.OperatorCodes(g.Operators(i).OpcodeIndex())
        names.append(opcode2name(max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())))
    return names


def _w(*shape: int, seed: int = 1) -> Any:
    return tf.constant(np.random.default_rng(seed).normal(0, 0.5, shape).astype(np.float32))


# --- one test per converter -------------------------------------------------------------------
def _conv_model(x: Any) -> Any:
    a = tf.nn.relu6(tf.nn.conv2d(x, _w(3, 3, 3, 5), strides=2, padding="SAME") + _w(5, seed=2))
    b = tf.nn.conv2d(x, _w(2, 3, 3, 4, seed=3), strides=1, padding="VALID", dilations=2)
    return a, b


@functools.cache
def _prelu_layer() -> Any:
    import keras

    alpha = np.linspace(-0.5, 0.7, 7).astype(np.float32)
    layer = keras.layers.PReLU(alpha_initializer=keras.initializers.Constant(alpha))
    layer.build((None, 7))
    return layer


Case = tuple[Callable[..., Any], list[Any], str]
# Converters are grouped in families: each family is one model (one conversion, one build), each
# case is one test of its converter's outputs.
FAMILIES: dict[str, dict[str, Case]] = {
    "conv": {
        "conv2d": (_conv_model, [(1, 9, 10, 3)], "CONV_2D"),
        "depthwise": (lambda x: tf.nn.relu(tf.nn.depthwise_conv2d(x, _w(3, 3, 3, 2), [1, 2, 2, 1], "SAME")
                                           + _w(6)), [(1, 9, 9, 3)], "DEPTHWISE_CONV_2D"),
        "transpose_conv": (lambda x: (tf.nn.conv2d_transpose(x, _w(3, 3, 4, 3), (1, 10, 10, 4), 2, "SAME"),
                                      tf.nn.conv2d_transpose(x, _w(3, 3, 2, 3), (1, 11, 11, 2), 2, "VALID")),
                           [(1, 5, 5, 3)], "TRANSPOSE_CONV"),
        "fully_connected": (lambda x: tf.nn.relu(tf.matmul(x, _w(6, 4)) + _w(4)), [(3, 6)],
                            "FULLY_CONNECTED"),
        "avg_pool": (lambda x: tf.nn.avg_pool2d(x, 3, 2, "SAME"), [(1, 8, 7, 3)], "AVERAGE_POOL_2D"),
        "max_pool": (lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"), [(1, 8, 7, 3)], "MAX_POOL_2D"),
        "batch_matmul": (lambda a, b: (tf.matmul(a, b), tf.matmul(a, a, transpose_b=True),
                                       tf.matmul(b, b, transpose_a=True)),
                         [(2, 3, 4, 5), (2, 3, 5, 6)], "BATCH_MATMUL"),
    },
    "math": {
        "binary": (lambda a, b: (tf.nn.relu(a + b), a - b[0], tf.nn.relu6(a * b), a / (tf.abs(b) + 1.0)),
                   [(2, 3, 4), (1, 3, 4)], "ADD"),
        "unary": (lambda x: (tf.exp(x), tf.math.log(x), tf.sqrt(x), tf.math.rsqrt(x), tf.abs(x - 1.0),
                             -x, tf.sin(x), tf.cos(x), tf.floor(x), tf.math.ceil(x)),
                  [(2, 5)], "EXP"),
        "square": (lambda x: tf.square(x), [(2, 5)], "SQUARE"),
        "squared_difference": (lambda a, b: tf.math.squared_difference(a, b), [(2, 5), (2, 5)],
                               "SQUARED_DIFFERENCE"),
        "simple_binary": (lambda a, b: (tf.maximum(a, b), tf.minimum(a, b), tf.pow(tf.abs(a) + 0.5, b),
                                        tf.cast(tf.less(a, b), tf.float32) + tf.cast(a >= b, tf.float32)),
                          [(2, 5), (2, 5)], "MAXIMUM"),
        "cast": (lambda x: tf.cast(tf.cast(x * 10.0, tf.int32), tf.float32), [(3, 4)], "CAST"),
        "select": (lambda a, b: tf.where(a > b, a, b * 2.0), [(2, 6), (2, 6)], "SELECT"),
        "add_n": (lambda a, b: tf.add_n([a, b, a]), [(2, 6), (2, 6)], "ADD_N"),
        "floor_div_mod": (lambda a, b: (tf.math.floordiv(a, tf.abs(b) + 0.5),
                                        tf.math.floormod(a, tf.abs(b) + 0.5)), [(2, 6), (2, 6)], "FLOOR_MOD"),
        "logic": (lambda a, b: tf.cast(tf.logical_or(tf.logical_and(a > 0.0, b < 0.0),
                                                     tf.logical_not(tf.equal(a, b))), tf.float32)
                  + tf.cast(tf.not_equal(a, a * 2.0), tf.float32), [(2, 6), (2, 6)], "LOGICAL_OR"),
        "round_sign": (lambda x: (tf.round(x * 2.0), tf.sign(x)), [(2, 6)], "ROUND"),
        "atan2": (lambda a, b: tf.atan2(a, b), [(2, 6), (2, 6)], "ATAN2"),
        "cumsum": (lambda x: (tf.cumsum(x, 1), tf.cumsum(x, 1, exclusive=True, reverse=True)), [(2, 6)],
                   "CUMSUM"),
    },
    "activations": {
        "relu": (lambda x: (tf.nn.relu(x), tf.nn.relu6(x * 4.0), tf.clip_by_value(x, -1.0, 1.0)),
                 [(3, 7)], "RELU"),
        "tanh": (lambda x: tf.tanh(x), [(3, 7)], "TANH"),
        "logistic": (lambda x: tf.sigmoid(x), [(3, 7)], "LOGISTIC"),
        "hard_swish": (lambda x: x * tf.nn.relu6(x + 3.0) * 0.16666667, [(3, 7)], "HARD_SWISH"),
        "leaky_relu": (lambda x: tf.nn.leaky_relu(x, 0.3), [(3, 7)], "LEAKY_RELU"),
        "prelu": (lambda x: _prelu_layer()(x), [(3, 7)], "PRELU"),
        "gelu": (lambda x: (tf.nn.gelu(x, approximate=False), tf.nn.gelu(x * 2.0, approximate=True)),
                 [(3, 7)], "GELU"),
        "elu": (lambda x: tf.nn.elu(x), [(3, 7)], "ELU"),
        "softmax": (lambda x: tf.nn.softmax(x * 2.0), [(3, 7)], "SOFTMAX"),
        "log_softmax": (lambda x: tf.nn.log_softmax(x), [(3, 7)], "LOG_SOFTMAX"),
        "l2_normalization": (lambda x: tf.math.l2_normalize(x, axis=-1), [(2, 3, 7)], "L2_NORMALIZATION"),
        "lrn": (lambda x: tf.nn.local_response_normalization(x, 2, 1.5, 0.3, 0.6), [(1, 3, 3, 8)],
                "LOCAL_RESPONSE_NORMALIZATION"),
        "reduce": (lambda x: (tf.reduce_mean(x, [1, 2]), tf.reduce_sum(x, -1, keepdims=True),
                              tf.reduce_max(x, 0), tf.reduce_min(x, [0, 2]), tf.reduce_prod(x, 1)),
                   [(2, 3, 4)], "MEAN"),
        "arg": (lambda x: (tf.argmax(x, -1), tf.argmin(x, 1, output_type=tf.int32)), [(2, 5, 3)],
                "ARG_MAX"),
        "topk": (lambda x: tf.math.top_k(x, 3), [(2, 6)], "TOPK_V2"),
    },
    "shapes": {
        "reshape": (lambda x: tf.reshape(x, (3, -1)) * 2.0, [(2, 3, 4)], "RESHAPE"),
        "squeeze": (lambda x: tf.squeeze(x * 2.0), [(None, 1, 3)], "SQUEEZE"),
        "expand_dims": (lambda x: tf.expand_dims(x * 2.0, 1), [(None, 3)], "EXPAND_DIMS"),
        "transpose": (lambda x: tf.transpose(x, [2, 0, 1]), [(2, 3, 4)], "TRANSPOSE"),
        "concatenation": (lambda a, b: tf.concat([a, b * 2.0, a], axis=1), [(2, 3), (2, 1)],
                          "CONCATENATION"),
        "pack": (lambda a, b: tf.stack([a, b], axis=1), [(2, 3), (2, 3)], "PACK"),
        "unpack": (lambda x: tuple(v * 2.0 for v in tf.unstack(x, axis=1)), [(2, 3, 4)], "UNPACK"),
        "split": (lambda x: tuple(v * 2.0 for v in tf.split(x, 3, axis=-1)), [(2, 6)], "SPLIT"),
        "split_v": (lambda x: tuple(v * 2.0 for v in tf.split(x, [1, -1, 2], axis=1)), [(2, 6)],
                    "SPLIT_V"),
        "tile": (lambda x: tf.tile(x, [2, 3]), [(2, 3)], "TILE"),
        "broadcast_to": (lambda x: tf.broadcast_to(x * 2.0, (3, 2, 6)), [(2, 6)], "BROADCAST_TO"),
        "reverse": (lambda x: tf.reverse(x, [1]), [(2, 3, 4)], "REVERSE_V2"),
        "gather": (lambda x: tf.gather(x, [2, 0, 2], axis=1), [(2, 4, 3)], "GATHER"),
        "gather_nd": (lambda x: tf.gather_nd(x, [[1, 0], [0, 3]]), [(2, 4, 3)], "GATHER_ND"),
        "depth_to_space": (lambda x: tf.nn.depth_to_space(x, 2), [(1, 2, 3, 8)], "DEPTH_TO_SPACE"),
        "space_to_depth": (lambda x: tf.nn.space_to_depth(x, 2), [(1, 4, 6, 3)], "SPACE_TO_DEPTH"),
    },
    "slicing": {
        "strided_slice": (lambda x: (x[:, 1:-1:2], x[..., ::-1], x[0, :, tf.newaxis, 2:],
                                     x[:, -2, -3:-1]),
                          [(3, 5, 6)], "STRIDED_SLICE"),
        "slice": (lambda x: tf.slice(x, [0, 1, 2], [2, -1, 3]), [(3, 5, 6)], "SLICE"),
        "pad": (lambda x: tf.pad(x, [[0, 0], [1, 2], [2, 1]]), [(2, 3, 4)], "PAD"),
        "padv2": (lambda x: tf.pad(x, [[1, 0], [1, 2]], constant_values=1.5), [(3, 4)], "PADV2"),
        "mirror_pad": (lambda x: (tf.pad(x, [[1, 2], [2, 1]], mode="REFLECT"),
                                  tf.pad(x, [[1, 2], [2, 3]], mode="SYMMETRIC")), [(4, 5)], "MIRROR_PAD"),
        "resize_bilinear": (lambda x: (tf.compat.v1.image.resize_bilinear(x, (7, 9), align_corners=True),
                                       tf.compat.v1.image.resize_bilinear(x, (7, 9), half_pixel_centers=True),
                                       tf.compat.v1.image.resize_bilinear(x, (3, 2))),
                            [(1, 4, 5, 2)], "RESIZE_BILINEAR"),
        "resize_nearest": (lambda x: (
            tf.compat.v1.image.resize_nearest_neighbor(x, (7, 9), align_corners=True),
            tf.compat.v1.image.resize_nearest_neighbor(x, (7, 9), half_pixel_centers=True),
            tf.compat.v1.image.resize_nearest_neighbor(x, (8, 3))),
            [(1, 4, 5, 2)], "RESIZE_NEAREST_NEIGHBOR"),
    },
}
CASES = {case: (family, spec) for family, cases in FAMILIES.items() for case, spec in cases.items()}
_POSITIVE = {"unary"}
_RESULTS: dict[str, tuple[list[str], dict[str, list[tuple[str, np.ndarray, np.ndarray]]]]] = {}


def _flat(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _family(family: str) -> tuple[list[str], dict[str, list[tuple[str, np.ndarray, np.ndarray]]]]:
    """Convert, run and compile one family's model (once per process)."""
    if family in _RESULTS:
        return _RESULTS[family]
    cases = FAMILIES[family]
    _prelu_layer()  # its variable must exist before tracing
    shapes = [s for fn, ss, op in cases.values() for s in ss]
    counts: dict[str, int] = {}

    def combined(*xs: Any) -> tuple[Any, ...]:
        outs: list[Any] = []
        i = 0
        for case, (fn, ss, _) in cases.items():
            got = _flat(fn(*xs[i:i + len(ss)]))
            counts[case] = len(got)
            outs += got
            i += len(ss)
        return tuple(outs)

    buf = convert_fn(combined, *shapes)
    rng = np.random.default_rng(0)
    g = tflite.Model.GetRootAsModel(buf, 0).Subgraphs(0)
    feeds: dict[str, np.ndarray] = {}
    k = 0
    for case, (_, ss, _) in cases.items():
        for s in ss:
            name = g.Tensors(g.Inputs(k)).Name().decode()
            shape = tuple(1 if d is None else d for d in s)
            feeds[name] = rng.uniform(0.1 if case in _POSITIVE else -2.0, 3.0, shape).astype(np.float32)
            k += 1
    expected = run_tflite(buf, feeds)
    actual = run_kiln(buf, feeds)
    names = [g.Tensors(g.Outputs(j)).Name().decode() for j in range(g.OutputsLength())]
    per_case: dict[str, list[tuple[str, np.ndarray, np.ndarray]]] = {}
    j = 0
    for case in cases:
        per_case[case] = [(n, actual[n], expected[n]) for n in names[j:j + counts[case]]]
        j += counts[case]
    _RESULTS[family] = (ops_of(buf), per_case)
    return _RESULTS[family]


@pytest.mark.parametrize("case", sorted(CASES))
def test_converter(case: str) -> None:
    family, (_, _, op) = CASES[case]
    ops, per_case = _family(family)
    assert op in ops, ops  # the model really exercises the converter
    for name, a, e in per_case[case]:
        assert a.shape == e.shape and a.dtype == e.dtype, (name, a.shape, e.shape, a.dtype, e.dtype)
        if e.dtype.kind == "f":
            scale = max(1.0, float(np.abs(e).max())) if e.size else 1.0
            np.testing.assert_allclose(a, e, rtol=RTOL, atol=ATOL * scale, err_msg=f"{case}: {name}")
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"{case}: {name}")


def test_dequantize_float16_weights() -> None:
    def setup(c: Any) -> None:
        c.optimizations = [tf.lite.Optimize.DEFAULT]
        c.target_spec.supported_types = [tf.float16]

    buf = convert_fn(lambda x: tf.nn.conv2d(x, _w(3, 3, 2, 4), 1, "SAME") + _w(4), (1, 6, 6, 2), setup=setup)
    assert "DEQUANTIZE" in ops_of(buf)
    compare(buf, rtol=1e-3, atol=1e-4)


def test_dynamic_range_weights_run_in_float() -> None:
    """int8 weights with float activations ("hybrid") run in float with dequantized weights.

    TFLite's hybrid kernels quantize the activations on the fly, so the two differ by that
    quantization error (under 1% of the output range here), not by rounding noise.
    """
    rng = np.random.default_rng(0)
    w1 = tf.constant(rng.normal(0, 0.3, (3, 3, 4, 16)).astype(np.float32))
    w2 = tf.constant(rng.normal(0, 0.3, (16 * 8 * 8, 300)).astype(np.float32))

    def setup(c: Any) -> None:
        c.optimizations = [tf.lite.Optimize.DEFAULT]

    buf = convert_fn(lambda x: tf.matmul(tf.reshape(tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME")), (1, -1)), w2),
                     (1, 8, 8, 4), setup=setup)
    m = tflite.Model.GetRootAsModel(buf, 0)
    g = m.Subgraphs(0)
    assert any(g.Tensors(i).Type() == tflite.TensorType.INT8 for i in range(g.TensorsLength()))
    feeds = random_feeds(buf)
    (e,) = run_tflite(buf, feeds).values()
    (a,) = run_kiln(buf, feeds).values()
    assert np.abs(a - e).max() <= 0.02 * np.abs(e).max()


def test_shape_with_dynamic_batch() -> None:
    """SHAPE and the shape arithmetic behind a dynamic-batch transposed convolution fold away."""
    def fn(x: Any) -> Any:
        n = tf.shape(x)[0]
        return tf.nn.conv2d_transpose(x, _w(3, 3, 2, 3), tf.stack([n, 8, 8, 2]), 2, "SAME")

    buf = convert_fn(fn, (None, 4, 4, 3))
    assert "SHAPE" in ops_of(buf)
    name = tf.lite.Interpreter(model_content=buf).get_input_details()[0]["name"]
    compare(buf, random_feeds(buf))  # batch defaults to the model's size (1)
    compare(buf, random_feeds(buf, shapes={name: (3, 4, 4, 3)}), shape_dict={name: (3, 4, 4, 3)})


def test_dynamic_dim_needs_shape() -> None:
    buf = convert_fn(lambda x: x * 2.0, (1, None, 3))
    with pytest.raises(FrontendError, match="shape_dict"):
        from_tflite(buf)
    name = tf.lite.Interpreter(model_content=buf).get_input_details()[0]["name"]
    compare(buf, random_feeds(buf, shapes={name: (1, 5, 3)}), shape_dict={name: (1, 5, 3)})


def test_accepts_bytes_path_and_relay_entry(tmp_path: Path) -> None:
    from kiln import relay

    buf = convert_fn(lambda x: tf.nn.relu(tf.matmul(x, _w(4, 3))), (2, 4))
    path = tmp_path / "m.tflite"
    path.write_bytes(buf)
    feeds = random_feeds(buf)
    expected = next(iter(run_tflite(buf, feeds).values()))
    for model in (buf, str(path), path, tflite.Model.GetRootAsModel(buf, 0)):
        mod, params = relay.frontend.from_tflite(model)
        np.testing.assert_allclose(run_compiled(mod, params, feeds)[0], expected, rtol=RTOL, atol=ATOL)
    mod, params = from_tflite(buf, freeze_params=True)
    assert params == {}
    np.testing.assert_allclose(run_compiled(mod, params, feeds)[0], expected, rtol=RTOL, atol=ATOL)
    mod, params = from_tflite(buf)
    assert params  # TVM's default: weights are params named after their tensors


def test_bad_inputs() -> None:
    with pytest.raises(FrontendError, match="TFL3"):
        from_tflite(b"not a flatbuffer at all")
    with pytest.raises(FrontendError, match="expects"):
        from_tflite(42)
    buf = convert_fn(lambda x: x * 2.0, (2, 3))
    with pytest.raises(FrontendError, match="not inputs"):
        from_tflite(buf, shape_dict={"nope": (2, 3)})


def test_unsupported_ops_listed_at_once() -> None:
    def fn(x: Any) -> Any:
        y = tf.math.segment_sum(x, tf.constant([0, 0, 1]))
        z = tf.math.unsorted_segment_max(x, tf.constant([0, 1, 1]), 2)
        return tf.math.bincount(tf.cast(tf.abs(x[:, 0]), tf.int32), minlength=4, maxlength=4), y, z

    def setup(c: Any) -> None:
        c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS]

    buf = convert_fn(fn, (3, 4), setup=setup)
    with pytest.raises(UnsupportedOpError) as err:
        from_tflite(buf)
    msg = str(err.value)
    kinds = {p[0] for p in err.value.problems}
    assert len(kinds) >= 2, msg  # every unsupported kind is listed, not just the first
    assert "TFLite" in msg
    for _code, names, _ in err.value.problems:
        assert names and all(isinstance(n, str) and n for n in names)


def test_doc_table_matches_converters() -> None:
    text = DOC.read_text()
    table = text.split("<!-- ops -->")[1].split("<!-- /ops -->")[0]
    listed = set(re.findall(r"`([A-Z0-9_]+)`", table))
    assert listed == set(CONVERTERS), (sorted(listed - set(CONVERTERS)), sorted(set(CONVERTERS) - listed))
