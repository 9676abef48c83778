"""Code generation for fast kernels: register tiles, uniform branches, and real network shapes.

* A ``cache_write`` accumulator computed at an outer loop, indexed by unrolled loops and a
  vectorized lane loop, becomes vector variables (no array), also when a vector loop falls back
  to scalar code; other accesses keep a stack array. Results are checked against NumPy formulas.
* A conditional load whose condition is the same for every lane (padding) is one ``if`` around
  vector code.
* The golden C of one blocked convolution shows the register tile (regenerate with
  ``KILN_UPDATE_GOLDEN=1`` after an intended change and review the diff).
* Layers of ResNet-18/50 and MobileNet at their real sizes, and the whole networks (at a smaller
  image size; 224x224 with ``--runslow``), built with ``relay.build(target="c")`` equal the
  reference interpreter.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import relay, te
from kiln.codegen.c_codegen import CCodegen
from kiln.codegen.native import function_to_dag
from kiln.contrib import graph_executor
from kiln.interpreter import evaluate
from kiln.ir.module import IRModule
from kiln.relay.testing import mobilenet, resnet
from kiln.te.loop_ir import PrimFunc
from kiln.te.templates import TargetInfo, apply_template
from kiln.transform import PassContext
from kiln.transform.infer_type import infer_type

GOLDEN = Path(__file__).parent / "golden_c"
pytestmark = pytest.mark.requires_cc


def _compile(funcs: list[PrimFunc], vector_bytes: int = 64):
    from kiln.codegen.native import compile_module
    from kiln.runtime.native import NativeLibrary

    src = CCodegen(vector_bytes).module(funcs)
    return NativeLibrary(compile_module(src, "perf_shapes_test")), src


def _function_text(src: str, name: str) -> str:
    start = src.index(f"int32_t {name}(void** args)")
    return src[start:src.index("\n}\n", start)]


# --- register tiles -------------------------------------------------------------------------------

def _tiled_matmul(m: int, n: int, k: int, unroll: bool, epilogue: str = "none"):
    """C = A @ B (+ epilogue) with the accumulator tile (4 rows x 16 columns) at the output's
    column-block loop."""
    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    if epilogue == "floor":  # no vector form: the epilogue's lane loop runs as scalar code
        out = te.compute((m, n), lambda i, j: te.floor(c[i, j]), name="T_floor", tag="elemwise")
    else:
        out = c
    dag = te.ComputeDAG([a, b, out])
    s = dag.init_state
    local = s.cache_write(2, "local")
    o = len(s.stages) - 1
    if epilogue != "none":
        s.compute_inline(local + 1)
    i, j = s.stages[o].iters
    i0, i1 = s.split(o, i, [4])
    j0, j1 = s.split(o, j, [16])
    s.reorder(o, [i0, j0, i1, j1])
    if unroll:
        s.unroll(o, 2)
    s.vectorize(o, 3)
    s.compute_at(local, o, 1)
    li, lj, lr = s.stages[local].iters
    s.reorder(local, [lr, li, lj])
    if unroll:
        s.unroll(local, 1)
    s.vectorize(local, 2)
    return te.lower(dag, s, name=f"mm_{unroll}_{epilogue}")


@pytest.mark.parametrize(("unroll", "epilogue"), [(True, "none"), (True, "floor"),
                                                  (False, "none")])
def test_accumulator_tile_in_vector_variables(unroll: bool, epilogue: str) -> None:
    prim = _tiled_matmul(8, 48, 37, unroll, epilogue)
    lib, src = _compile([prim])
    text = _function_text(src, prim.name)
    if unroll:
        assert re.search(r"kiln_f32x16 C_local_0, C_local_1, C_local_2, C_local_3;", text), text
        assert "C_local[" not in text and "malloc" not in text
        if epilogue == "floor":
            assert re.search(r"floorf\(C_local_\d\[", text), text  # scalar lanes of a variable
    else:
        assert "float C_local[64]" in text  # indexed by a serial loop: stays an array
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 37)).astype("float32")
    b = rng.standard_normal((37, 48)).astype("float32")
    out = np.zeros((8, 48), "float32")
    lib.kernel(prim.name)(a, b, out)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if epilogue == "floor":
        ref = np.floor(ref)
        # floor may differ by one where the float32 sum rounds across an integer
        assert np.mean(out != ref) < 0.02
    else:
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_uniform_condition_is_one_branch_around_vector_code() -> None:
    x = te.placeholder((3, 10, 16), name="x")
    pad = te.compute((3, 12, 16), lambda c, i, j: te.if_then_else(
        te.all(i >= 1, i < 11), x[c, i - 1, j], te.const(-1.5)), name="T_pad", tag="injective")
    dag = te.ComputeDAG([x, pad])
    s = dag.init_state
    s.vectorize(1, 2)
    prim = te.lower(dag, s, name="pad_rows")
    lib, src = _compile([prim])
    text = _function_text(src, prim.name)
    assert "kiln_f32x16" in text and "? " not in text
    data = np.random.default_rng(2).standard_normal((3, 10, 16)).astype("float32")
    out = np.zeros((3, 12, 16), "float32")
    lib.kernel(prim.name)(data, out)
    np.testing.assert_array_equal(out, np.pad(data, ((0, 0), (1, 1), (0, 0)),
                                              constant_values=-1.5))


def test_broadcast_keeps_negative_zero() -> None:
    x = te.placeholder((16,), name="x")
    y = te.compute((4, 16), lambda i, j: x[j] * 0 + te.const(-0.0), name="T_negzero",
                   tag="elemwise")
    dag = te.ComputeDAG([x, y])
    s = dag.init_state
    s.vectorize(1, 1)
    prim = te.lower(dag, s, name="negzero")
    lib, _ = _compile([prim])
    out = np.ones((4, 16), "float32")
    data = np.full(16, -2.0, "float32")
    lib.kernel(prim.name)(data, out)
    assert np.all(np.signbit(out)) and np.all(out == 0)  # -2*0 + -0.0 is -0.0


@pytest.mark.parametrize(("vector_bytes", "pairs"), [(32, True), (64, True), (32, False)])
def test_constant_lane_offsets_load_vectors_and_shuffle(vector_bytes: int, pairs: bool) -> None:
    """A blocked depth-to-space reads pairs (lane offsets 0, 1, 4, 5, ...): whole vectors within
    the elements read and one shuffle, not a scalar load per lane; a nearest upsample (offsets
    0, 0, 1, 1, ...) reads fewer elements than a vector and stays lane by lane."""
    a = te.placeholder((4, 64), name="a")
    if pairs:  # 16 pixels x 4 channels per row -> 2 x 2 output pixels per input pixel
        fn = lambda y, x: a[y // 2, (x // 2) * 4 + (y % 2) * 2 + x % 2]  # noqa: E731
        ref = lambda d: np.array([[d[y // 2, (x // 2) * 4 + (y % 2) * 2 + x % 2]  # noqa: E731
                                   for x in range(32)] for y in range(8)])
    else:
        fn = lambda y, x: a[y // 2, x // 2]  # noqa: E731
        ref = lambda d: np.array([[d[y // 2, x // 2] for x in range(32)]  # noqa: E731
                                  for y in range(8)])
    out = te.compute((8, 32), fn, name="T_gather", tag="injective")
    dag = te.ComputeDAG([a, out])
    state = dag.init_state
    lanes = vector_bytes // 4
    state.split(1, 1, [lanes])
    state.vectorize(1, 2)
    prim = te.lower(dag, state, name="gather")
    lib, src = _compile([prim], vector_bytes)
    assert ("__builtin_shufflevector" in _function_text(src, "gather")) == pairs
    data = np.random.default_rng(0).standard_normal((4, 64)).astype("float32")
    got = np.empty((8, 32), "float32")
    lib.kernel(prim.name)(data, got)
    np.testing.assert_array_equal(got, ref(data))


# --- golden C of a blocked convolution ------------------------------------------------------------

def _blocked_conv_function():
    data = relay.var("data", shape=(1, 1, 8, 8, 16), dtype="float32")
    weight = relay.var("weight", shape=(2, 1, 3, 3, 16, 16), dtype="float32")
    bias = relay.var("bias", shape=(1, 2, 1, 1, 16), dtype="float32")
    conv = relay.nn.contrib_conv2d_nchwc(data, weight, padding=1, channels=32, kernel_size=3,
                                         data_layout="NCHW16c", kernel_layout="OIHW16i16o",
                                         out_layout="NCHW16c")
    body = relay.nn.relu(relay.add(conv, bias))
    func = relay.Function([data, weight, bias], body).with_attr("Primitive", 1)
    return infer_type(IRModule.from_expr(func))["main"]


def test_golden_conv_register_tile() -> None:
    func = _blocked_conv_function()
    fdag = function_to_dag(func, "fused_conv2d_NCHWc_add_relu")
    state = apply_template(fdag.dag, TargetInfo(vector_bytes=64, num_threads=2))
    assert state is not None
    prim = te.lower(fdag.dag, state, args=fdag.args, name="fused_conv2d_NCHWc_add_relu",
                    attrs={"fused_ops": fdag.ops, "source_names": fdag.source_names})
    text = CCodegen(64).function(prim)
    path = GOLDEN / "conv_nchwc_register_tile.c"
    if os.environ.get("KILN_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), "generated C changed; see the module docstring"
    # 2 channel blocks x the 8 columns of a row accumulate in 16 vector variables; bias and relu
    # are applied to them before the single store of each output vector
    assert "buffer conv2d_NCHWc_local in 16 vector variables" in text
    assert "kiln_f32x16 conv2d_NCHWc_local_8, " in text and "conv2d_NCHWc_local_15;" in text
    assert "conv2d_NCHWc_local[" not in text
    assert text.count("*(kiln_f32x16u*)&T_relu[") == 16


# --- real layer shapes through relay.build --------------------------------------------------------

def _build_and_compare(mod: kiln.IRModule, params: dict, inputs: dict[str, np.ndarray],
                       rtol: float = 1e-4) -> None:
    ref = evaluate(mod, inputs, params)
    ref_list = list(ref) if isinstance(ref, tuple) else [ref]
    with PassContext(opt_level=3):
        factory = relay.build(mod, target="c", params=params)
    m = graph_executor.GraphModule(factory["default"](kiln.cpu()))
    m.set_input(**inputs)
    m.run()
    for i, r in enumerate(ref_list):
        out = m.get_output(i).numpy()
        r = np.asarray(r)
        scale = float(np.abs(r).max())
        np.testing.assert_allclose(out, r, rtol=rtol, atol=rtol * scale)


LAYERS = [
    # (name, in channels, size, out channels, kernel, stride, groups)
    ("resnet_3x3_56", 64, 56, 64, 3, 1, 1),
    ("resnet_3x3_s2_28", 128, 28, 256, 3, 2, 1),
    ("resnet50_1x1_56", 256, 56, 64, 1, 1, 1),
    ("resnet50_1x1_s2_14", 1024, 14, 2048, 1, 2, 1),
    ("resnet_stem", 3, 224, 64, 7, 2, 1),
    ("mobilenet_dw_112", 32, 112, 32, 3, 1, 32),
    ("mobilenet_dw_s2_56", 128, 56, 128, 3, 2, 128),
    ("mobilenet_pw_14", 512, 14, 512, 1, 1, 1),
]


@pytest.mark.parametrize(("name", "cin", "size", "cout", "k", "stride", "groups"), LAYERS,
                         ids=[x[0] for x in LAYERS])
def test_layer_shapes_match_interpreter(name: str, cin: int, size: int, cout: int, k: int,
                                        stride: int, groups: int) -> None:
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    x = relay.var("x", shape=(1, cin, size, size), dtype="float32")
    w = relay.var("w", shape=(cout, cin // groups, k, k), dtype="float32")
    b = relay.var("b", shape=(cout,), dtype="float32")
    y = relay.nn.conv2d(x, w, strides=stride, padding=k // 2, groups=groups, channels=cout,
                        kernel_size=k)
    y = relay.nn.relu(relay.nn.bias_add(y, b))
    if name == "resnet_stem":
        y = relay.nn.max_pool2d(y, 3, 2, padding=1)
    mod = kiln.IRModule.from_expr(relay.Function([x, w, b], y))
    params = {"w": (rng.standard_normal((cout, cin // groups, k, k)) * 0.1).astype("float32"),
              "b": rng.standard_normal(cout).astype("float32")}
    data = rng.standard_normal((1, cin, size, size)).astype("float32")
    _build_and_compare(mod, params, {"x": data})


# --- whole networks -------------------------------------------------------------------------------

NETWORKS = [("resnet18", 64), ("resnet50", 64), ("mobilenet", 64)]


def _network(name: str, size: int):
    """The workload with its final softmax removed: with random weights the class
    probabilities are almost uniform, so the logits are what tells a wrong kernel apart."""
    if name == "mobilenet":
        mod, params = mobilenet.get_workload(image_shape=(3, size, size))
    else:
        mod, params = resnet.get_workload(num_layers=int(name[6:]), image_shape=(3, size, size))
    main = mod["main"]
    assert main.body.op.name == "nn.softmax"
    return kiln.IRModule.from_expr(relay.Function(main.params, main.body.args[0])), params


def _check_network(name: str, size: int) -> None:
    mod, params = _network(name, size)
    data = np.random.default_rng(5).standard_normal((1, 3, size, size)).astype("float32")
    ref = np.asarray(evaluate(mod, {"data": data}, params))
    with PassContext(opt_level=3):
        factory = relay.build(mod, target="c", params=params)
    m = graph_executor.GraphModule(factory["default"](kiln.cpu()))
    m.set_input("data", data)
    m.run()
    out = m.get_output(0).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    assert int(np.argmax(out)) == int(np.argmax(ref))


@pytest.mark.parametrize(("name", "size"), NETWORKS, ids=[n for n, _ in NETWORKS])
def test_network_matches_interpreter(name: str, size: int) -> None:
    _check_network(name, size)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet"])
def test_network_224_matches_interpreter(name: str) -> None:
    _check_network(name, 224)
