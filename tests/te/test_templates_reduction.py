"""The row-reduction template: softmax, log-softmax, layer norm, mean/variance chains, sums.

Oracles: NumPy formulas written here (in float64, then compared with float32 tolerances) and
the reference interpreter for whole fused chains. Cases are compiled through the template
registry for an AVX-512-like and an AVX2-like target; reductions the template must not claim
(over leading axes) are checked to fall back to the default schedule and stay correct.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln.op as K
from kiln import relay
from kiln.codegen.c_codegen import CCodegen
from kiln.codegen.native import build_native, function_to_dag
from kiln.interpreter import evaluate
from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function
from kiln.ir.module import IRModule
from kiln.te import parse_step
from kiln.te.loop_state import State
from kiln.te.lower import lower
from kiln.te.templates import TargetInfo, apply_template
from kiln.te.templates.reduction import schedule_row_reduction
from kiln.transform import InferType

TARGETS = {"avx512": TargetInfo(64, 2), "avx2": TargetInfo(32, 1)}
# Row counts that are and are not multiples of the rows handled per step, row lengths below,
# at and above the vector width and not a multiple of it (ViT's 197).
SHAPES = [(2, 5, 7), (4, 384), (3, 21, 197), (1, 4, 32, 32), (6, 3), (2, 3, 1)]


def _typed(expr: Expr) -> Function:
    return InferType()(IRModule.from_expr(Function(free_vars(expr), expr)))["main"]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


def _decomposed_layer_norm(x: Expr, g: Expr, b: Expr, eps: float) -> Expr:
    """ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add as BERT exporters write it."""
    axis = [len(x.checked_type.shape) - 1] if x.has_type else [-1]
    centered = relay.subtract(x, relay.mean(x, axis=axis, keepdims=True))
    var = relay.mean(relay.power(centered, relay.const(2.0, "float32")), axis=axis, keepdims=True)
    std = relay.sqrt(relay.add(var, relay.const(eps, "float32")))
    return relay.add(relay.multiply(relay.divide(centered, std), g), b)


class Case:
    """A relay expression, its inputs, and the value it must compute (float64)."""

    def __init__(self, expr: Expr, inputs: dict[str, np.ndarray], expected: np.ndarray,
                 templated: bool = True):
        self.func = _typed(expr)
        self.inputs = inputs
        self.expected = np.asarray(expected)
        self.templated = templated


def _cases(rng: np.random.Generator) -> dict[str, Case]:
    cases: dict[str, Case] = {}
    for shape in SHAPES:
        x = (rng.standard_normal(shape) * 3).astype("float32")
        x64 = x.astype(np.float64)
        n = len(shape)
        v = relay.var("x", shape=shape)
        g = rng.standard_normal(shape[-1]).astype("float32")
        b = rng.standard_normal(shape[-1]).astype("float32")
        gv, bv = relay.var("g", shape=g.shape), relay.var("b", shape=b.shape)
        mean = x64.mean(-1, keepdims=True)
        cases[f"softmax{shape}"] = Case(relay.nn.softmax(v, axis=n - 1), {"x": x}, _softmax(x64))
        cases[f"log_softmax{shape}"] = Case(relay.nn.log_softmax(v, axis=-1), {"x": x},
                                            np.log(_softmax(x64)))
        cases[f"layer_norm{shape}"] = Case(relay.nn.layer_norm(v, gv, bv, epsilon=1e-5),
                                           {"x": x, "g": g, "b": b},
                                           _layer_norm(x64, g, b, 1e-5))
        cases[f"decomposed_ln{shape}"] = Case(_decomposed_layer_norm(v, gv, bv, 1e-12),
                                              {"x": x, "g": g, "b": b},
                                              _layer_norm(x64, g, b, 1e-12))
        m = relay.mean(v, axis=[n - 1], keepdims=True)
        cases[f"mean{shape}"] = Case(m, {"x": x}, mean)
        cases[f"power_mean{shape}"] = Case(
            relay.mean(relay.power(v, relay.const(2.0, "float32")), axis=[n - 1], keepdims=True),
            {"x": x}, (x64 ** 2).mean(-1, keepdims=True))
        cases[f"variance{shape}"] = Case(
            K.variance(v, axis=[n - 1], keepdims=True, with_mean=m), {"x": x},
            ((x64 - mean) ** 2).mean(-1, keepdims=True))
        cases[f"max{shape}"] = Case(relay.max(v, axis=[n - 1]), {"x": x}, x64.max(-1))
        cases[f"min_keepdims{shape}"] = Case(relay.min(v, axis=[n - 1], keepdims=True), {"x": x},
                                             x64.min(-1, keepdims=True))
        if n >= 3:
            cases[f"sum_trailing2{shape}"] = Case(relay.sum(v, axis=[n - 2, n - 1]), {"x": x},
                                                  x64.sum((-2, -1)))
            # over a leading axis: not a row reduction, the default schedule runs
            cases[f"softmax_axis0{shape}"] = Case(
                relay.nn.softmax(v, axis=0), {"x": x},
                np.moveaxis(_softmax(np.moveaxis(x64, 0, -1)), -1, 0), templated=False)
    x = rng.standard_normal((5, 40)).astype("float64")
    cases["mean_float64"] = Case(relay.mean(relay.var("x", shape=(5, 40), dtype="float64"),
                                            axis=[1]), {"x": x}, x.mean(-1))
    return cases


@pytest.fixture(scope="module", params=sorted(TARGETS))
def results(request: pytest.FixtureRequest) -> tuple[dict[str, Case], dict[str, np.ndarray]]:
    target = TARGETS[request.param]
    cases = _cases(np.random.default_rng(5))
    claimed: dict[str, bool] = {}

    def lookup(dag: object, name: str) -> State | None:
        state = apply_template(dag, target)  # type: ignore[arg-type]
        claimed[name] = state is not None
        return state

    names = {name: f"k{i}" for i, name in enumerate(cases)}
    lib = build_native({names[n]: c.func.with_attr("Primitive", 1) for n, c in cases.items()},
                       schedule_lookup=lookup)
    lib.set_num_threads(target.num_threads)
    outputs = {}
    for name, case in cases.items():
        assert claimed[names[name]] == case.templated, name
        args = [case.inputs[p.name_hint] for p in case.func.params]
        out = np.empty(case.expected.shape, case.inputs["x"].dtype)
        lib.kernel(names[name]).bind([*args, out])()
        outputs[name] = out
    return cases, outputs


NAMES = sorted(_cases(np.random.default_rng(5)))


@pytest.mark.parametrize("name", NAMES)
def test_row_reduction(results, name):
    cases, outputs = results
    want = cases[name].expected
    np.testing.assert_allclose(outputs[name], want, rtol=2e-5, atol=2e-5 * max(1, np.abs(want).max()))


def test_decomposed_chain_against_interpreter(rng):
    """The whole spelled-out layer norm as one fused function (two reductions, one reading the
    other through ``subtract``) equals the reference interpreter."""
    x = rng.standard_normal((1, 12, 40)).astype("float32")
    g, b = rng.standard_normal(40).astype("float32"), rng.standard_normal(40).astype("float32")
    expr = _decomposed_layer_norm(relay.var("x", shape=x.shape), relay.var("g", shape=(40,)),
                                  relay.var("b", shape=(40,)), 1e-6)
    func = _typed(expr)
    assert apply_template(function_to_dag(func, "k").dag, TARGETS["avx512"]) is not None
    lib = build_native({"k": func.with_attr("Primitive", 1)})
    out = np.empty(x.shape, "float32")
    inputs = {"x": x, "g": g, "b": b}
    lib.kernel("k").bind([inputs[p.name_hint] for p in func.params] + [out])()
    want = np.asarray(evaluate(IRModule.from_expr(func), inputs))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_softmax_computes_exp_once():
    """``exp`` is materialized per row (one vector ``exp`` in the kernel), the rows run in
    parallel, and both reductions are vectorized through ``rfactor``."""
    func = _typed(relay.nn.softmax(relay.var("x", shape=(1, 12, 128, 128)), axis=3))
    fdag = function_to_dag(func, "k")
    state = schedule_row_reduction(fdag.dag, TARGETS["avx512"])
    assert state is not None
    text = str(state)
    assert text.count("parallel") == 1 and text.count("vectorize") == 4
    assert "T_softmax_maxelem.rf" in text and "T_softmax_expsum.rf" in text
    c = CCodegen(64).function(lower(fdag.dag, state, args=fdag.args, name="k"))
    assert c.count("kiln_vexpneg_f32x16(") == 1 and "expf(" not in c


@pytest.mark.parametrize("expr_fn", [
    lambda: relay.nn.softmax(relay.var("x", shape=(3, 21, 197)), axis=2),
    lambda: relay.nn.layer_norm(relay.var("x", shape=(1, 20, 48)), relay.var("g", shape=(48,)),
                                relay.var("b", shape=(48,))),
], ids=["softmax", "layer_norm"])
def test_replay_from_records(expr_fn, rng):
    """The template's steps, written as record JSON and parsed back, lower to the same C and
    compute the same values as NumPy."""
    func = _typed(expr_fn())
    fdag = function_to_dag(func, "k")
    state = apply_template(fdag.dag, TARGETS["avx512"])
    assert state is not None
    records = json.loads(json.dumps([s.to_record() for s in state.transform_steps]))
    steps = [parse_step(r) for r in records]
    a = CCodegen(64).function(lower(fdag.dag, state, args=fdag.args, name="k"))
    b = CCodegen(64).function(lower(fdag.dag, steps, args=fdag.args, name="k"))
    assert a == b
    inputs = {p.name_hint: rng.standard_normal(p.checked_type.shape).astype("float32")
              for p in func.params}
    lib = build_native({"k": func.with_attr("Primitive", 1)}, schedule_lookup=lambda d, n: steps)
    out = np.empty(func.ret_type.shape, "float32")
    lib.kernel("k").bind([inputs[p.name_hint] for p in func.params] + [out])()
    x = inputs["x"].astype(np.float64)
    want = _softmax(x) if "g" not in inputs else _layer_norm(x, inputs["g"], inputs["b"], 1e-5)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
