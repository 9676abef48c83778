"""FuseLayerNorm: spelled-out layer norms become ``nn.layer_norm``, near misses stay as they are.

Oracles: the structure written by hand in each test, the reference interpreter run on the module
*before* the pass, a NumPy layer norm, and onnxruntime for the compiled ONNX block.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from _pass_helpers import apply, assert_same_values, module, random_inputs, run_unchanged_input
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.interpreter import evaluate
from kiln.ir import assert_structural_equal, post_order
from kiln.ir.expr import Call, Expr
from kiln.relay.frontend import from_onnx
from kiln.target import Target
from kiln.transform import PassContext
from kiln.transform.alter_batch_matmul import padded_columns
from kiln.transform.fuse_patterns import FuseLayerNorm, match_layer_norm

EPS = 1e-5


def fused(body: Expr, params: list[relay.Var]) -> kiln.IRModule:
    return apply(FuseLayerNorm(), module(body, params), opt_level=1)


def op_names(mod: kiln.IRModule) -> list[str]:
    return [n.op.name for n in post_order(mod["main"]) if isinstance(n, Call)]


def const(value: float, dtype: str = "float32") -> Expr:
    return relay.const(np.asarray(value, dtype=dtype))


def spelled_out(x: Expr, gamma: Expr | None = None, beta: Expr | None = None, *,
                form: str = "exporter", eps: Expr | None = None, axis: int = -1,
                var_axis: int | None = None) -> Expr:
    """A layer norm over ``axis`` written as exporters, frontends and SimplifyInference do."""
    eps = const(EPS, _dtype(x)) if eps is None else eps
    var_axis = axis if var_axis is None else var_axis
    mean = relay.mean(x, axis=[axis], keepdims=True)
    centered = relay.subtract(x, mean)
    if form == "exporter":  # ONNX ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div
        var = relay.mean(relay.power(centered, const(2.0, _dtype(x))), axis=[var_axis], keepdims=True)
        normed = relay.divide(centered, relay.sqrt(relay.add(var, eps)))
    elif form == "frontend":  # Kiln's ONNX LayerNormalization (non-last axis path): c*c, rsqrt
        var = relay.mean(relay.multiply(centered, centered), axis=[var_axis], keepdims=True)
        normed = relay.multiply(centered, relay.rsqrt(relay.add(var, eps)))
    elif form == "inference":  # SimplifyInference: variance(x, mean)
        var = relay.variance(x, axis=[var_axis], keepdims=True, with_mean=mean)
        normed = relay.multiply(centered, relay.rsqrt(relay.add(var, eps)))
    elif form == "reciprocal":  # c * (1 / sqrt(v + eps)), operands commuted
        var = relay.mean(relay.multiply(centered, centered), axis=[var_axis], keepdims=True)
        inv = relay.divide(const(1.0, _dtype(x)), relay.sqrt(relay.add(eps, var)))
        normed = relay.multiply(inv, centered)
    elif form == "unshared":  # the centering computed twice
        again = relay.subtract(x, relay.mean(x, axis=[axis], keepdims=True))
        var = relay.mean(relay.multiply(again, again), axis=[var_axis], keepdims=True)
        normed = relay.divide(centered, relay.sqrt(relay.add(var, eps)))
    else:
        raise ValueError(form)
    out = normed
    if gamma is not None:
        out = relay.multiply(gamma, out) if form == "reciprocal" else relay.multiply(out, gamma)
    if beta is not None:
        out = relay.add(beta, out) if form == "reciprocal" else relay.add(out, beta)
    return out


def _dtype(x: Expr) -> str:
    from kiln.transform.rewrite import ensure_types

    return ensure_types(x).checked_type.dtype


FORMS = ["exporter", "frontend", "inference", "reciprocal", "unshared"]


# --- structure ---------------------------------------------------------------------------------

@pytest.mark.parametrize("form", FORMS)
def test_every_form_becomes_one_layer_norm(form):
    x = relay.var("x", shape=(2, 5, 8))
    g, b = relay.var("g", shape=(8,)), relay.var("b", shape=(8,))
    after = fused(spelled_out(x, g, b, form=form), [x, g, b])
    eps = float(np.float32(EPS))
    expected = relay.nn.layer_norm(x, g, b, axis=-1, epsilon=eps)
    assert_structural_equal(after, module(expected, [x, g, b]))


@pytest.mark.parametrize("with_gamma,with_beta", [(False, False), (True, False), (False, True)])
def test_missing_scale_or_shift_uses_ones_or_zeros_and_flags(with_gamma, with_beta):
    x = relay.var("x", shape=(3, 6))
    g, b = relay.var("g", shape=(6,)), relay.var("b", shape=(6,))
    params = [x] + ([g] if with_gamma else []) + ([b] if with_beta else [])
    after = fused(spelled_out(x, g if with_gamma else None, b if with_beta else None), params)
    gamma = g if with_gamma else relay.const(np.ones(6, "float32"))
    beta = b if with_beta else relay.const(np.zeros(6, "float32"))
    expected = relay.nn.layer_norm(x, gamma, beta, axis=-1, epsilon=float(np.float32(EPS)),
                                   center=with_beta, scale=with_gamma)
    assert_structural_equal(after, module(expected, params))


def test_constant_scale_and_shift_with_leading_unit_axes_become_vectors():
    x = relay.var("x", shape=(1, 4, 6))
    g = np.linspace(0.5, 1.5, 6, dtype="float32").reshape(1, 1, 6)
    after = fused(spelled_out(x, relay.const(g), relay.const(np.float32(0.25))), [x])
    expected = relay.nn.layer_norm(x, relay.const(g.reshape(6)), relay.const(np.full(6, 0.25, "float32")),
                                   axis=-1, epsilon=float(np.float32(EPS)))
    assert_structural_equal(after, module(expected, [x]))


@pytest.mark.parametrize("gamma_shape", [(1, 1, 6), (1, 6), (), (1,)])
def test_variable_scale_of_any_channel_shape_becomes_a_vector(gamma_shape, rng):
    x = relay.var("x", shape=(2, 4, 6))
    g = relay.var("g", shape=gamma_shape)
    before = module(spelled_out(x, g, None, form="inference"), [x, g])
    after = apply(FuseLayerNorm(), before, opt_level=1)
    ln = after["main"].body
    assert ln.op.name == "nn.layer_norm" and ln.args[1].checked_type.shape == (6,)
    assert_same_values(before, after, random_inputs(before, rng))


def test_positive_axis_and_float64():
    x = relay.var("x", shape=(2, 3, 5), dtype="float64")
    after = fused(spelled_out(x, form="frontend", axis=2), [x])
    assert op_names(after) == ["nn.layer_norm"]
    assert after["main"].body.attrs.epsilon == EPS


def test_new_call_carries_every_source_name():
    x = relay.var("x", shape=(2, 8))
    names = iter(f"node{i}" for i in range(20))

    def named(call: Call) -> Call:
        return call.replace(source_names=(next(names),))

    m = named(relay.mean(x, axis=[-1], keepdims=True))
    c = named(relay.subtract(x, m))
    v = named(relay.mean(named(relay.power(c, const(2.0))), axis=[-1], keepdims=True))
    d = named(relay.sqrt(named(relay.add(v, const(EPS)))))
    body = named(relay.add(named(relay.multiply(named(relay.divide(c, d)), const(2.0))), const(1.0)))
    after = fused(body, [x])
    assert after["main"].body.source_names == tuple(f"node{i}" for i in range(9))


def test_input_module_is_not_mutated():
    x = relay.var("x", shape=(2, 8))
    run_unchanged_input(FuseLayerNorm(), module(spelled_out(x, const(2.0), const(1.0)), [x]))


# --- near misses -------------------------------------------------------------------------------

def _near_misses():
    x = relay.var("x", shape=(2, 5, 8))
    y = relay.var("y", shape=(2, 5, 8))
    e = relay.var("e", shape=())
    mean = relay.mean(x, axis=[-1], keepdims=True)
    c = relay.subtract(x, mean)
    cases = {
        "mean over axis 1": spelled_out(x, axis=1),
        "variance over another axis": spelled_out(x, form="frontend", var_axis=1),
        "eps a variable": spelled_out(x, eps=e),
        "eps a vector": spelled_out(x, eps=relay.const(np.full(8, EPS, "float32"))),
        "mean over two axes": relay.divide(
            relay.subtract(x, relay.mean(x, axis=[1, 2], keepdims=True)),
            relay.sqrt(relay.add(relay.mean(relay.multiply(c, c), axis=[-1], keepdims=True),
                                 const(EPS)))),
        "another tensor centred": relay.divide(c, relay.sqrt(relay.add(relay.mean(
            relay.multiply(relay.subtract(y, relay.mean(y, axis=[-1], keepdims=True)), c),
            axis=[-1], keepdims=True), const(EPS)))),
        "unbiased variance": relay.multiply(c, relay.rsqrt(relay.add(relay.variance(
            x, axis=[-1], keepdims=True, unbiased=True, with_mean=mean), const(EPS)))),
        "cube instead of square": relay.divide(c, relay.sqrt(relay.add(relay.mean(
            relay.power(c, const(3.0)), axis=[-1], keepdims=True), const(EPS)))),
        "no square root": relay.divide(c, relay.add(relay.mean(
            relay.multiply(c, c), axis=[-1], keepdims=True), const(EPS))),
        "float16": spelled_out(relay.var("h", shape=(2, 8), dtype="float16")),
    }
    return cases


@pytest.mark.parametrize("case", list(_near_misses()))
def test_near_misses_are_left_alone(case):
    body = _near_misses()[case]
    before = module(body)
    after = apply(FuseLayerNorm(), before, opt_level=1)
    assert "nn.layer_norm" not in op_names(after)
    assert_structural_equal(after, before)


def test_scale_varying_along_another_axis_stays_outside():
    x = relay.var("x", shape=(2, 5, 8))
    g = relay.var("g", shape=(5, 8))  # varies along the rows too: not a layer-norm gamma
    b = relay.var("b", shape=(8,))
    after = fused(spelled_out(x, g, b), [x, g, b])
    ones, zeros = relay.const(np.ones(8, "float32")), relay.const(np.zeros(8, "float32"))
    core = relay.nn.layer_norm(x, ones, zeros, axis=-1, epsilon=float(np.float32(EPS)),
                               center=False, scale=False)
    assert_structural_equal(after, module(relay.add(relay.multiply(core, g), b), [x, g, b]))


def test_shift_that_widens_the_result_stays_outside():
    x = relay.var("x", shape=(5, 8))
    b = relay.var("b", shape=(3, 1, 8))  # broadcasting the result up to (3, 5, 8)
    after = fused(spelled_out(x, None, b), [x, b])
    assert op_names(after) == ["nn.layer_norm", "add"]
    assert after["main"].body.checked_type.shape == (3, 5, 8)


def test_intermediate_used_elsewhere_blocks_or_shrinks_the_rewrite():
    x = relay.var("x", shape=(4, 8))
    g, b = relay.var("g", shape=(8,)), relay.var("b", shape=(8,))
    mean = relay.mean(x, axis=[-1], keepdims=True)
    c = relay.subtract(x, mean)
    normed = relay.multiply(c, relay.rsqrt(relay.add(
        relay.mean(relay.multiply(c, c), axis=[-1], keepdims=True), const(EPS))))
    # the mean is also an output: nothing may be replaced without computing it twice
    out = relay.Tuple([relay.add(relay.multiply(normed, g), b), mean])
    after = fused(out, [x, g, b])
    assert "nn.layer_norm" not in op_names(after)
    # the normalized value is also an output: only the part below it becomes a layer norm
    after = fused(relay.Tuple([relay.add(relay.multiply(normed, g), b), normed]), [x, g, b])
    assert sorted(op_names(after)) == ["add", "multiply", "nn.layer_norm"]
    ln = next(n for n in post_order(after["main"]) if isinstance(n, Call)
              and n.op.name == "nn.layer_norm")
    assert not ln.attrs.scale and not ln.attrs.center


def test_match_reports_the_pieces():
    x = relay.var("x", shape=(2, 8))
    g = relay.var("g", shape=(8,))
    body = spelled_out(x, g, None, form="exporter")
    module(body, [x, g])  # types the nodes
    found = match_layer_norm(body)
    assert found is not None
    assert found.data is x and found.gamma is g and found.beta is None
    assert found.epsilon == float(np.float32(EPS))
    assert [c.op.name for c in found.calls][:2] == ["multiply", "divide"]
    assert len(found.calls) == 8


# --- values ------------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(lead=st.lists(st.integers(1, 4), min_size=0, max_size=3), d=st.integers(1, 17),
       form=st.sampled_from(FORMS), dtype=st.sampled_from(["float32", "float64"]),
       eps=st.sampled_from([1e-12, 1e-5, 0.1]), affine=st.sampled_from(["none", "gamma", "both"]),
       seed=st.integers(0, 2**16))
def test_random_layer_norms_keep_their_values(lead, d, form, dtype, eps, affine, seed):
    shape = (*lead, d)
    x = relay.var("x", shape=shape, dtype=dtype)
    g = relay.var("g", shape=(d,), dtype=dtype) if affine != "none" else None
    b = relay.var("b", shape=(d,), dtype=dtype) if affine == "both" else None
    params = [p for p in (x, g, b) if p is not None]
    before = module(spelled_out(x, g, b, form=form, eps=const(eps, dtype)), params)
    after = apply(FuseLayerNorm(), before, opt_level=1)
    assert op_names(after) == ["nn.layer_norm"]
    inputs = random_inputs(before, np.random.default_rng(seed))
    assert_same_values(before, after, inputs, rtol=1e-5, atol=1e-5)
    # and both agree with a direct NumPy layer norm
    xv = inputs["x"].astype(np.float64)
    ref = (xv - xv.mean(-1, keepdims=True)) / np.sqrt(xv.var(-1, keepdims=True) + float(
        np.asarray(eps, dtype)))
    if g is not None:
        ref = ref * inputs["g"]
    if b is not None:
        ref = ref + inputs["b"]
    np.testing.assert_allclose(evaluate(after, inputs), ref.astype(dtype), rtol=1e-5, atol=1e-5)


# --- in the build ------------------------------------------------------------------------------

def test_pipeline_runs_it_for_native_targets_only():
    from kiln.build_module import build_pipeline

    native = [p.info.name for p in build_pipeline(Target("c"))]
    assert native.index("FoldScaleAxis") < native.index("FuseLayerNorm") < native.index("SimplifyExpr")
    assert "FuseLayerNorm" not in [p.info.name for p in build_pipeline(Target("numpy"))]


def _onnx_encoder_block(tokens: int, dim: int, rng: np.random.Generator) -> onnx.ModelProto:
    """x -> spelled-out LayerNorm -> MatMul + Add -> erf GELU -> MatMul + Add -> + x -> LayerNorm."""
    nodes, inits = [], []

    def w(name: str, shape: tuple[int, ...], scale: float = 0.3, mean: float = 0.0) -> str:
        inits.append(numpy_helper.from_array(
            (rng.normal(size=shape) * scale + mean).astype(np.float32), name))
        return name

    def node(op: str, inputs: list[str], **attrs) -> str:
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{len(nodes)}", **attrs))
        return out

    def layer_norm(x: str, tag: str) -> str:
        mean = node("ReduceMean", [x], axes=[-1], keepdims=1)
        c = node("Sub", [x, mean])
        var = node("ReduceMean", [node("Pow", [c, w(f"two{tag}", (), 0.0, 2.0)])], axes=[-1],
                   keepdims=1)
        std = node("Sqrt", [node("Add", [var, w(f"eps{tag}", (), 0.0, 1e-12)])])
        scaled = node("Mul", [node("Div", [c, std]), w(f"g{tag}", (dim,), 0.1, 1.0)])
        return node("Add", [scaled, w(f"b{tag}", (dim,), 0.1)])

    x = "x"
    h = layer_norm(x, "1")
    h = node("Add", [node("MatMul", [h, w("w1", (dim, 2 * dim))]), w("c1", (2 * dim,))])
    erf = node("Erf", [node("Div", [h, w("sqrt2", (), 0.0, np.sqrt(2.0))])])
    h = node("Mul", [node("Mul", [h, node("Add", [erf, w("one", (), 0.0, 1.0)])]),
                     w("half", (), 0.0, 0.5)])
    h = node("Add", [node("Add", [node("MatMul", [h, w("w2", (2 * dim, dim))]), w("c2", (dim,))]), x])
    out = layer_norm(h, "2")
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, tokens, dim))],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, (1, tokens, dim))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def test_onnx_block_optimizes_to_layer_norms_and_fused_epilogues(rng):
    model = _onnx_encoder_block(6, 16, rng)
    mod, params = from_onnx(model, {"x": (1, 6, 16)})
    with PassContext(opt_level=3):
        out, _ = relay.optimize(mod, target="c", params=params)
    fused_ops = [[n.op.name for n in post_order(call.op.body) if isinstance(n, Call)]
                 for call in post_order(out["main"], into_functions=False)
                 if isinstance(call, Call) and isinstance(call.op, relay.Function)]
    assert [ops for ops in fused_ops if "nn.layer_norm" in ops] == [["nn.layer_norm"]] * 2
    dense = [ops for ops in fused_ops if "nn.contrib_dense_pack" in ops]
    assert dense[0][0] == "nn.contrib_dense_pack" and "erf" in dense[0]  # bias + GELU epilogue
    assert dense[1].count("add") == 2  # bias + residual epilogue
    assert not any(name in ops for ops in fused_ops for name in ("mean", "power", "divide"))


@pytest.mark.requires_cc
@pytest.mark.requires_cc
def test_onnx_block_compiles_and_matches_onnxruntime(rng):
    model = _onnx_encoder_block(8, 16, rng)
    x = rng.normal(size=(1, 8, 16)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    mod, params = from_onnx(model, {"x": x.shape})
    with PassContext(opt_level=3):
        lib = relay.build(mod, target="c", params=params)
    m = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-4)
    kernels = [n for n in lib.graph.nodes if not n.is_input and n.func_name != "__nop"]
    assert len(kernels) == 4  # layer norm, dense + GELU, dense + residual, layer norm


def test_stacked_layer_norms_are_all_rewritten(rng):
    x = relay.var("x", shape=(3, 8))
    g = relay.var("g", shape=(8,))
    inner = spelled_out(x, g, const(0.5), form="frontend")
    body = spelled_out(relay.add(inner, x), relay.multiply(g, const(2.0)), None, form="exporter")
    before = module(body, [x, g])
    after = apply(FuseLayerNorm(), before, opt_level=1)
    assert op_names(after).count("nn.layer_norm") == 2
    assert "mean" not in op_names(after)
    assert_same_values(before, after, random_inputs(before, rng))


# --- PadSoftmaxRows -----------------------------------------------------------------------------

LANES = {"float32": 8, "float64": 4}


def padded_rows(mod: kiln.IRModule, lanes: dict[str, int] | None = None) -> kiln.IRModule:
    from kiln.transform.fuse_patterns import pad_softmax_rows

    return apply(kiln.transform.function_pass(
        lambda fn, m, ctx: pad_softmax_rows(fn, lanes or LANES, m), opt_level=3,
        name="PadSoftmaxRows"), mod)


def attention(q, k, v, scale: float = 0.5, transpose_b: bool = False, heads: int | None = None):
    """``softmax(q @ k * scale) @ v`` as the ONNX frontend writes it (4-d softmax when heads)."""
    scores = relay.nn.batch_matmul(q, k, transpose_b=transpose_b)
    shape = ensure(scores).checked_type.shape
    if heads:
        scores = relay.reshape(scores, (1, *shape))
    probs = relay.nn.softmax(relay.multiply(scores, const(scale, _dtype(q))), axis=-1)
    if heads:
        probs = relay.reshape(probs, shape)
    return relay.nn.batch_matmul(probs, v, transpose_b=transpose_b)


def ensure(expr):
    from kiln.transform.rewrite import ensure_types

    return ensure_types(expr)


def test_attention_over_a_ragged_token_count_keeps_its_padding():
    q, k, v = (relay.var(n, shape=s) for n, s in (("q", (2, 5, 4)), ("k", (2, 4, 5)),
                                                  ("v", (2, 5, 3))))
    after = padded_rows(module(attention(q, k, v, heads=2), [q, k, v]))
    mask = np.array([0, 0, 0, 0, 0, -np.inf, -np.inf, -np.inf], "float32")
    scores = relay.nn.batch_matmul(q, relay.nn.pad(k, ((0, 0), (0, 0), (0, 3))), transpose_b=False)
    scores = relay.add(relay.multiply(relay.reshape(scores, (1, 2, 5, 8)), const(0.5)),
                       relay.const(mask))
    probs = relay.reshape(relay.nn.softmax(scores, axis=-1), (2, 5, 8))
    expected = relay.nn.batch_matmul(probs, relay.nn.pad(v, ((0, 0), (0, 3), (0, 0))),
                                     transpose_b=False)
    assert_structural_equal(after, module(expected, [q, k, v]))


@settings(max_examples=30, deadline=None)
@given(batch=st.integers(1, 3), rows=st.integers(1, 7), cols=st.integers(1, 11),
       depth=st.integers(1, 5), width=st.integers(1, 4), transpose_b=st.booleans(),
       heads=st.booleans(), dtype=st.sampled_from(["float32", "float64"]),
       seed=st.integers(0, 2**16))
def test_padded_attention_keeps_its_values(batch, rows, cols, depth, width, transpose_b, heads,
                                           dtype, seed):
    k_shape = (batch, cols, depth) if transpose_b else (batch, depth, cols)
    v_shape = (batch, width, cols) if transpose_b else (batch, cols, width)
    q = relay.var("q", shape=(batch, rows, depth), dtype=dtype)
    k, v = relay.var("k", shape=k_shape, dtype=dtype), relay.var("v", shape=v_shape, dtype=dtype)
    before = module(attention(q, k, v, 0.3, transpose_b, heads=heads or None), [q, k, v])
    after = padded_rows(before)
    assert ("nn.pad" in op_names(after)) == (padded_columns(cols, LANES[dtype]) != cols)
    inputs = random_inputs(before, np.random.default_rng(seed))
    assert_same_values(before, after, inputs, rtol=1e-5, atol=1e-6)
    expected = _softmax(np.einsum("bij,bkj->bik" if transpose_b else "bij,bjk->bik",
                                  inputs["q"].astype(np.float64), inputs["k"]) * 0.3)
    expected = np.einsum("bik,bjk->bij" if transpose_b else "bik,bkj->bij", expected, inputs["v"])
    np.testing.assert_allclose(evaluate(after, inputs), expected.astype(dtype), rtol=1e-5,
                               atol=1e-5)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _attention_near_misses():
    q, k, v = (relay.var(n, shape=s) for n, s in (("q", (2, 5, 4)), ("k", (2, 4, 5)),
                                                  ("v", (2, 5, 3))))
    scores = relay.nn.batch_matmul(q, k, transpose_b=False)
    probs = relay.nn.softmax(scores)

    def product(p):
        return relay.nn.batch_matmul(p, v, transpose_b=False)

    return {
        "whole vectors": attention(relay.var("q", shape=(2, 8, 4)), relay.var("k", shape=(2, 4, 8)),
                                   relay.var("v", shape=(2, 8, 3))),
        "softmax over rows": product(relay.nn.softmax(scores, axis=1)),
        "log_softmax": product(relay.nn.log_softmax(scores)),
        "exp before the softmax": product(relay.nn.softmax(relay.exp(scores))),
        "mask vector": product(relay.nn.softmax(relay.add(scores, relay.var("m", shape=(5,))))),
        "probabilities also returned": relay.Tuple([product(probs), probs]),
        "scores also returned": relay.Tuple([product(probs), scores]),
        "reshape mixing the last axis": relay.nn.batch_matmul(
            relay.reshape(relay.nn.softmax(relay.reshape(scores, (2, 25, 1))), (2, 5, 5)), v,
            transpose_b=False),
    }


@pytest.mark.parametrize("case", list(_attention_near_misses()))
def test_attention_near_misses_are_left_alone(case):
    before = module(_attention_near_misses()[case])
    after = padded_rows(before)
    assert_structural_equal(after, before)


def test_pipeline_pads_attention_rows_for_native_targets_only():
    from kiln.build_module import build_pipeline

    native = [p.info.name for p in build_pipeline(Target("c"))]
    assert native.index("FuseLayerNorm") < native.index("PadSoftmaxRows") < native.index("SimplifyExpr")
    assert "PadSoftmaxRows" not in [p.info.name for p in build_pipeline(Target("numpy"))]


@pytest.mark.requires_cc
@pytest.mark.requires_cc
def test_ragged_attention_compiles_without_a_slice_and_matches_numpy(rng):
    q, k, v = (relay.var(n, shape=s) for n, s in (("q", (3, 13, 8)), ("k", (3, 8, 13)),
                                                  ("v", (3, 13, 8))))
    mod = kiln.IRModule.from_expr(relay.Function([q, k, v], attention(q, k, v, 0.35, heads=3)))
    with PassContext(opt_level=3):
        lib = relay.build(mod, target="c")
    assert not any("strided_slice" in n.func_name for n in lib.graph.nodes if not n.is_input)
    m = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    inputs = {n: rng.normal(size=s).astype(np.float32) for n, s in
              (("q", (3, 13, 8)), ("k", (3, 8, 13)), ("v", (3, 13, 8)))}
    for name, value in inputs.items():
        m.set_input(name, value)
    m.run()
    expected = _softmax(inputs["q"].astype(np.float64) @ inputs["k"] * 0.35) @ inputs["v"]
    np.testing.assert_allclose(m.get_output(0).numpy(), expected, rtol=1e-5, atol=1e-5)
