"""Compiled ``nn`` operators (``kiln.op.compute_nn``) against the reference interpreter.

Every case becomes one fused function of a single library built once for the file. Integer and
bool results must match bit for bit. Float32 results are within rtol 1e-5 and atol 1e-5: the
compiled code accumulates contractions, softmax sums and normalisation statistics in float32
while the reference accumulates in float64 (a sum of ``K`` unit-size terms carries an absolute
rounding error of about ``sqrt(K) * 6e-8``, below 1e-5 for these sizes, and results near zero
have no meaningful relative error); the large dense case gets atol 1e-4 for its larger partial
sums. Float16 results may differ by one float16 ulp (about 1e-3 relative)
from the reference's single rounding of a float64 value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _compute_native import Case, check_case, random_array, run_cases, var

from kiln import relay
from kiln.ir.expr import Call, Op
from kiln.ir.visitor import post_order
from kiln.op.registry import all_ops

FAMILY = "kiln.op.nn"  # ops registered in kiln/op/nn.py and the nn_*.py files it imports
F32 = {"rtol": 1e-5, "atol": 1e-5}
F16 = {"rtol": 1e-3, "atol": 1e-3}

rng = np.random.default_rng(0)
CASES: dict[str, Case] = {}


def case(name: str, fn: Callable[..., Any], tol: dict[str, float] | None = None,
         **arrays: np.ndarray) -> None:
    """Register ``fn(*vars)`` on ``arrays`` (one relay variable per keyword, in order)."""
    if tol is None:
        dtypes = {a.dtype.name for a in arrays.values()}
        tol = F16 if "float16" in dtypes else F32
    CASES[name] = Case(lambda: fn(*[var(k, v) for k, v in arrays.items()]), arrays, **tol)


def data(shape: tuple[int, ...], dtype: str = "float32", low: int = -20,
         high: int = 20) -> np.ndarray:
    return random_array(rng, shape, dtype, low, high)


def positive(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    return (rng.random(shape) + 0.5).astype(dtype)


# --- dense, matmul, batch_matmul -----------------------------------------------------------------
case("dense", relay.nn.dense, x=data((3, 17)), w=data((5, 17)))
case("dense-3d", relay.nn.dense, x=data((2, 3, 9)), w=data((4, 9)))
# 256-term float32 sums with partial sums up to ~50: rounding error up to ~5e-5 absolute.
case("dense-large", relay.nn.dense, {"rtol": 1e-5, "atol": 1e-4}, x=data((64, 256)),
     w=data((130, 256)))
case("dense-float16", relay.nn.dense, x=data((3, 17), "float16"), w=data((5, 17), "float16"))
case("dense-float64", relay.nn.dense, x=data((3, 17), "float64"), w=data((5, 17), "float64"))
case("dense-f32-to-f64", lambda x, w: relay.nn.dense(x, w, out_dtype="float64"),
     x=data((3, 17)), w=data((5, 17)))
case("dense-f32-to-int32", lambda x, w: relay.nn.dense(x, w, out_dtype="int32"),
     x=data((3, 17)), w=data((5, 17)))
case("dense-int8-to-int32", lambda x, w: relay.nn.dense(x, w, out_dtype="int32"),
     x=data((3, 33), "int8", -128, 128), w=data((7, 33), "int8", -128, 128))
case("dense-uint8-int8", lambda x, w: relay.nn.dense(x, w, out_dtype="int32"),
     x=data((3, 33), "uint8", 0, 256), w=data((7, 33), "int8", -128, 128))
case("dense-int8-wraps", relay.nn.dense, x=data((3, 33), "int8", -128, 128),
     w=data((7, 33), "int8", -128, 128))
case("dense-1d", relay.nn.dense, x=data((7,)), w=data((3, 7)))
case("dense-empty-reduction", relay.nn.dense, x=data((3, 0)), w=data((2, 0)))
case("dense-int32-to-float32", lambda x, w: relay.nn.dense(x, w, out_dtype="float32"),
     x=data((3, 9), "int32"), w=data((2, 9), "int32"))
for ta, tb in ((False, False), (True, False), (True, True)):
    a = data((2, 7, 3)) if ta else data((2, 3, 7))
    b = data((5, 7)) if tb else data((7, 5))
    case(f"matmul-{ta:d}{tb:d}", lambda a, b, ta=ta, tb=tb: relay.nn.matmul(
        a, b, transpose_a=ta, transpose_b=tb), a=a, b=b)
case("matmul-1d", relay.nn.matmul, a=data((7,)), b=data((7, 5)))
case("matmul-int32", relay.nn.matmul, a=data((4, 6), "int32"), b=data((6, 3), "int32"))
for ta in (False, True):
    for tb in (False, True):
        a = data((3, 5, 4)) if ta else data((3, 4, 5))
        b = data((3, 6, 5)) if tb else data((3, 5, 6))
        case(f"batch_matmul-{ta:d}{tb:d}", lambda a, b, ta=ta, tb=tb: relay.nn.batch_matmul(
            a, b, transpose_a=ta, transpose_b=tb), a=a, b=b)
case("batch_matmul-broadcast-a", relay.nn.batch_matmul, a=data((1, 4, 5)), b=data((3, 6, 5)))
case("batch_matmul-broadcast-b", relay.nn.batch_matmul, a=data((3, 4, 5)), b=data((1, 6, 5)))
case("batch_matmul-int8", lambda a, b: relay.nn.batch_matmul(a, b, out_dtype="int32"),
     a=data((2, 3, 17), "int8", -128, 128), b=data((2, 5, 17), "int8", -128, 128))

# --- bias_add, activations ----------------------------------------------------------------------
for dtype in ("float32", "float16", "int8", "int32"):
    case(f"bias_add-{dtype}", relay.nn.bias_add, x=data((2, 3, 5, 7), dtype), b=data((3,), dtype))
case("bias_add-last", lambda x, b: relay.nn.bias_add(x, b, axis=-1), x=data((2, 3, 37)),
     b=data((37,)))
case("bias_add-axis0", lambda x, b: relay.nn.bias_add(x, b, axis=0), x=data((4, 3)),
     b=data((4,)))
case("bias_add-bool", relay.nn.bias_add, x=data((2, 3), "bool"), b=data((3,), "bool"))
SPECIAL = np.array([[np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.5]], dtype="float32")
for dtype in ("float32", "float16", "float64", "int8", "uint8", "int32", "int64"):
    case(f"relu-{dtype}", relay.nn.relu, x=data((3, 37), dtype))
case("relu-special", relay.nn.relu, x=SPECIAL)
case("relu-large", relay.nn.relu, x=data((64, 1001)))
case("relu-empty", relay.nn.relu, x=data((3, 0)))
for dtype in ("float32", "float16", "float64"):
    for alpha in (0.1, 0.25):
        case(f"leaky_relu-{dtype}-{alpha}", lambda x, alpha=alpha: relay.nn.leaky_relu(x, alpha),
             x=data((3, 37), dtype))
case("leaky_relu-special", lambda x: relay.nn.leaky_relu(x, 0.3), x=SPECIAL)
case("prelu", relay.nn.prelu, x=data((2, 3, 5, 7)), a=data((3,)))
case("prelu-last", lambda x, a: relay.nn.prelu(x, a, axis=3), x=data((2, 5, 7, 3)),
     a=data((3,)))
case("prelu-float16", relay.nn.prelu, x=data((2, 3, 5), "float16"), a=data((3,), "float16"))

# --- softmax family -----------------------------------------------------------------------------
for op in ("softmax", "fast_softmax", "log_softmax"):
    builder = getattr(relay.nn, op)
    for axis, shape in ((-1, (3, 37)), (1, (4, 7, 40)), (0, (6, 5)), (-1, (9,))):
        case(f"{op}-{axis}-{len(shape)}d", lambda x, b=builder, axis=axis: b(x, axis=axis),
             x=data(shape))
    case(f"{op}-float16", builder, x=data((3, 20), "float16"))
    case(f"{op}-float64", builder, x=data((3, 20), "float64"))
case("softmax-large", relay.nn.softmax, x=data((64, 513)))

# --- dropout, batch_flatten ---------------------------------------------------------------------
for dtype in ("float32", "int32", "bool"):
    case(f"dropout-{dtype}", lambda x: relay.nn.dropout_raw(x, 0.3), x=data((3, 5), dtype))
    case(f"batch_flatten-{dtype}", relay.nn.batch_flatten, x=data((2, 3, 4, 5), dtype))
case("batch_flatten-1d", relay.nn.batch_flatten, x=data((4,)))
case("dropout-output", lambda x: relay.nn.relu(relay.nn.dropout(x)), x=data((3, 5)))

# --- normalisations -----------------------------------------------------------------------------
for dtype, shape, axis in (("float32", (2, 3, 4, 5), 1), ("float32", (2, 5, 7, 3), -1),
                           ("float16", (2, 3, 4), 1), ("float64", (4, 3), 0)):
    c = shape[axis]
    for center, scale in ((True, True), (False, True), (True, False)):
        case(f"batch_norm-{dtype}-{axis}-{center:d}{scale:d}",
             lambda x, g, b, m, v, axis=axis, center=center, scale=scale: relay.nn.batch_norm(
                 x, g, b, m, v, axis=axis, epsilon=1e-3, center=center, scale=scale).astuple(),
             x=data(shape, dtype), g=data((c,), dtype), b=data((c,), dtype), m=data((c,), dtype),
             v=positive((c,), dtype))
case("batch_norm-relu", lambda x, g, b, m, v: relay.nn.relu(relay.nn.batch_norm(x, g, b, m, v)[0]),
     x=data((2, 3, 4, 5)), g=data((3,)), b=data((3,)), m=data((3,)), v=positive((3,)))
for axis, shape in ((-1, (3, 4, 10)), (1, (3, 4, 10)), (0, (5, 6)), (-1, (7,))):
    c = shape[axis]
    for center, scale in ((True, True), (False, False)):
        case(f"layer_norm-{axis}-{len(shape)}d-{center:d}{scale:d}",
             lambda x, g, b, axis=axis, center=center, scale=scale: relay.nn.layer_norm(
                 x, g, b, axis=axis, center=center, scale=scale),
             x=data(shape), g=data((c,)), b=data((c,)))
case("layer_norm-float16", relay.nn.layer_norm, x=data((3, 16), "float16"),
     g=data((16,), "float16"), b=data((16,), "float16"))
case("layer_norm-large", relay.nn.layer_norm, x=data((64, 768)), g=data((768,)), b=data((768,)))
for axis, shape in ((1, (2, 3, 4, 5)), (-1, (2, 4, 5, 3)), (1, (2, 3, 7)), (1, (1, 2, 3, 4, 5))):
    c = shape[axis]
    case(f"instance_norm-{axis}-{len(shape)}d",
         lambda x, g, b, axis=axis: relay.nn.instance_norm(x, g, b, axis=axis, epsilon=1e-3),
         x=data(shape), g=data((c,)), b=data((c,)))
for groups, axis, shape in ((2, 1, (2, 6, 4, 5)), (1, 1, (2, 6, 3)), (6, 1, (2, 6, 3, 3)),
                            (3, -1, (2, 4, 5, 6)), (2, 1, (3, 4))):
    c = shape[axis]
    case(f"group_norm-{groups}-{axis}-{len(shape)}d",
         lambda x, g, b, groups=groups, axis=axis: relay.nn.group_norm(
             x, g, b, num_groups=groups, axis=axis),
         x=data(shape), g=data((c,)), b=data((c,)))
for axes in ([1], [0, 2], None, [-1]):
    case(f"l2_normalize-{axes}", lambda x, axes=axes: relay.nn.l2_normalize(x, 1e-3, axis=axes),
         x=data((2, 7, 3)))
case("l2_normalize-eps", lambda x: relay.nn.l2_normalize(x, 100.0, axis=[1]), x=data((2, 7, 3)))
for size, axis, shape in ((3, 1, (2, 6, 3, 4)), (4, -1, (2, 3, 7)), (5, 1, (1, 3, 5)),
                          (1, 0, (4, 3))):
    case(f"lrn-{size}-{axis}",
         lambda x, size=size, axis=axis: relay.nn.lrn(x, size=size, axis=axis, bias=1.0,
                                                      alpha=0.05, beta=0.75),
         x=data(shape))
case("lrn-defaults", relay.nn.lrn, x=data((1, 7, 4, 4)))

# --- pad ------------------------------------------------------------------------------------------
PADS = {
    "constant": [((1, 2), (0, 3)), ((-1, 2), (2, -1)), ((0, 0), (-2, -1))],
    "edge": [((1, 2), (3, -1)), ((2, 0), (0, 4))],
    "reflect": [((1, 2), (3, 0)), ((-1, 2), (2, -1))],
}
for mode, widths in PADS.items():
    for n, width in enumerate(widths):
        for dtype in ("float32", "int8", "bool"):
            case(f"pad-{mode}-{n}-{dtype}",
                 lambda x, width=width, mode=mode: relay.nn.pad(x, width, 1.0, pad_mode=mode),
                 x=data((4, 5), dtype))
case("pad-fill-truncates", lambda x: relay.nn.pad(x, ((1, 1), (1, 1), (0, 2)), -2.7),
     x=data((2, 3, 2), "int32"))
case("pad-value-input", lambda x, v: relay.nn.pad(x, ((1, 0), (2, 1)), v), x=data((3, 4)),
     v=np.array(7.5, dtype="float32"))
case("pad-value-shape-1", lambda x, v: relay.nn.pad(x, ((1, 0), (2, 1)), v), x=data((3, 4)),
     v=np.array([-3.0], dtype="float32"))
case("pad-4d-large", lambda x: relay.nn.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))),
     x=data((1, 16, 56, 56)))

# --- depth_to_space, space_to_depth, upsampling ---------------------------------------------------
for dtype in ("float32", "int16", "bool"):
    for mode in ("DCR", "CRD"):
        case(f"depth_to_space-{mode}-{dtype}", lambda x, mode=mode: relay.nn.depth_to_space(
            x, 2, mode=mode), x=data((2, 8, 3, 5), dtype))
    case(f"space_to_depth-{dtype}", lambda x: relay.nn.space_to_depth(x, 2),
         x=data((2, 3, 4, 6), dtype))
case("depth_to_space-nhwc", lambda x: relay.nn.depth_to_space(x, 3, layout="NHWC", mode="CRD"),
     x=data((1, 2, 3, 18)))
case("space_to_depth-nhwc", lambda x: relay.nn.space_to_depth(x, 3, layout="NHWC"),
     x=data((1, 6, 3, 2)))
for method in ("nearest_neighbor", "bilinear", "bicubic"):
    for align in (False, True):
        case(f"upsampling-{method}-{align}",
             lambda x, method=method, align=align: relay.nn.upsampling(
                 x, 2, 1.5, method=method, align_corners=align),
             x=data((1, 2, 3, 4)))
case("upsampling-nhwc", lambda x: relay.nn.upsampling(x, 3, 2, layout="NHWC"),
     x=data((1, 3, 4, 5)))
case("upsampling-int32", lambda x: relay.nn.upsampling(x, 2, 2), x=data((1, 2, 3, 4), "int32"))
case("upsampling-uint8-bilinear", lambda x: relay.nn.upsampling(x, 2, 3, method="bilinear"),
     x=data((1, 2, 3, 4), "uint8", 0, 256))
for method, mode in (("nearest_neighbor", "asymmetric"), ("trilinear", "half_pixel"),
                     ("tricubic", "align_corners")):
    case(f"upsampling3d-{method}", lambda x, method=method, mode=mode: relay.nn.upsampling3d(
        x, 2, 1.5, 2, method=method, coordinate_transformation_mode=mode),
        x=data((1, 2, 2, 3, 2)))

# --- fused chains ---------------------------------------------------------------------------------
case("fused-dense-bias-relu", lambda x, w, b: relay.nn.relu(relay.nn.bias_add(
    relay.nn.dense(x, w), b, axis=-1)), x=data((4, 19)), w=data((6, 19)), b=data((6,)))
case("fused-pad-softmax", lambda x: relay.nn.softmax(relay.nn.pad(x, ((0, 0), (1, 2)), -1.0)),
     x=data((3, 5)))


@pytest.fixture(scope="module")
def compiled() -> dict[str, Case]:
    return dict(run_cases(CASES))


@pytest.mark.parametrize("name", sorted(CASES))
def test_nn_op_matches_reference(compiled: dict[str, Case], name: str) -> None:
    check_case(compiled[name])


def _family() -> dict[str, Any]:
    return {d.name: d for d in all_ops().values()
            if d.type_rel.__module__ == FAMILY or d.type_rel.__module__.startswith(FAMILY + "_")}


def test_every_nn_op_has_a_compute() -> None:
    family = _family()
    assert "nn.dense" in family and "nn.layer_norm" in family and "nn.pad" in family
    assert sorted(name for name, d in family.items() if d.compute is None) == []


def test_every_nn_compute_is_tested() -> None:
    called = set()
    for c in CASES.values():
        called |= {n.op.name for n in post_order(c.build())
                   if isinstance(n, Call) and isinstance(n.op, Op)}
    ours = {name for name, d in _family().items() if d.compute.__module__ == "kiln.op.compute_nn"}
    assert len(ours) >= 23
    assert sorted(ours - called) == []
