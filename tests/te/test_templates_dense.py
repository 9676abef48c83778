"""Register-tiled templates for matrix products: ``dense_pack``, ``dense``, ``matmul``,
``batch_matmul``, with their fused epilogues.

Oracles: NumPy formulas written here (float64 products of the unpacked operands, the epilogue
spelled out), the reference interpreter for the fused functions, and onnxruntime for encoder
blocks built end to end. Every case is compiled through the template registry (the same call
``build_native`` makes) for an AVX-512-like target (16 lanes, 32 registers, 2 threads) and an
AVX2-like one (8 lanes, 16 registers, 1 thread); the C compiler targets this machine either way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.codegen.c_codegen import CCodegen
from kiln.codegen.native import build_native, function_to_dag
from kiln.interpreter import evaluate
from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function
from kiln.ir.module import IRModule
from kiln.op.nn_pack import contrib_dense_pack
from kiln.te import parse_step
from kiln.te.loop_ir import For, IfThenElse, walk_stmts
from kiln.te.loop_state import State
from kiln.te.lower import lower
from kiln.te.steps import ComputeAtStep
from kiln.te.templates import TargetInfo, apply_template
from kiln.te.templates.dense import choose_gemm_tile, find_contraction, stream_panel
from kiln.transform import InferType

AVX512 = TargetInfo(vector_bytes=64, num_threads=2)
AVX2 = TargetInfo(vector_bytes=32, num_threads=1)
TARGETS = {"avx512": AVX512, "avx2": AVX2}


def _typed(expr: Expr) -> Function:
    return InferType()(IRModule.from_expr(Function(free_vars(expr), expr)))["main"]


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype("float32")


def _pack(weight: np.ndarray, n: int) -> np.ndarray:
    """``(N, K)`` to TVM's ``NC{n}n`` with a loop: ``packed[j // n, :, j % n] = weight[j]``."""
    units, k = weight.shape
    packed = np.empty((units // n, k, n), weight.dtype)
    for j in range(units):
        packed[j // n, :, j % n] = weight[j]
    return packed


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return x * 0.5 * (1.0 + erf(x / math.sqrt(2.0)))


class Case:
    """A relay expression, its inputs, and the NumPy value it must compute."""

    def __init__(self, expr: Expr, inputs: dict[str, np.ndarray], expected: np.ndarray):
        self.func = _typed(expr)
        self.inputs = inputs
        self.expected = expected


def _epilogue(kind: str, y: Expr, bias: Expr, res: Expr) -> Expr:
    if kind == "bias_relu":
        return relay.nn.relu(relay.nn.bias_add(y, bias))
    if kind == "bias_gelu":  # as exporters write it: x * (erf(x / sqrt 2) + 1) * 0.5
        z = relay.add(y, bias)
        erf = relay.erf(relay.divide(z, relay.const(math.sqrt(2.0), "float32")))
        return relay.multiply(relay.multiply(z, relay.add(erf, relay.const(1.0, "float32"))),
                              relay.const(0.5, "float32"))
    if kind == "bias_residual":
        return relay.add(relay.add(y, bias), res)
    return y


def _apply_numpy(kind: str, y: np.ndarray, bias: np.ndarray, res: np.ndarray) -> np.ndarray:
    if kind == "bias_relu":
        return np.maximum(y + bias, 0)
    if kind == "bias_gelu":
        return _gelu(y + bias)
    if kind == "bias_residual":
        return y + bias + res
    return y


EPILOGUES = ["none", "bias_relu", "bias_gelu", "bias_residual"]
# (M, N, K, panel): GEMV, rows that are not a multiple of any row tile, odd K, 8- and 5-wide
# panels (ResNet's 1000 classes pack by 8), the transformer shapes.
PACK_SHAPES = [(1, 1000, 64, 8), (1, 64, 24, 32), (5, 48, 7, 16), (13, 96, 33, 32),
               (197, 192, 64, 32), (3, 40, 9, 8), (7, 10, 5, 5), (128, 384, 96, 32),
               (37, 10, 64, 10), (9, 30, 20, 30), (1, 512, 128, 16),  # an LSTM step
               (1, 512, 128, 128), (2, 192, 48, 96), (3, 256, 66, 128)]  # streamed panels


def _dense_pack_case(rng: np.random.Generator, m: int, n: int, k: int, panel: int,
                     epilogue: str) -> Case:
    x, w, b, r = _rand(rng, m, k), _rand(rng, n, k), _rand(rng, n), _rand(rng, m, n)
    data, packed = relay.var("x", shape=(m, k)), relay.var("w", shape=(n // panel, k, panel))
    bias, res = relay.var("b", shape=(n,)), relay.var("r", shape=(m, n))
    y = contrib_dense_pack(data, packed, f"NC{panel}n", units=n)
    expr = _epilogue(epilogue, y, bias, res)
    expected = _apply_numpy(epilogue, x.astype(np.float64) @ w.astype(np.float64).T, b, r)
    inputs = {"x": x, "w": _pack(w, panel), "b": b, "r": r}
    return Case(expr, inputs, expected)


def _dense_case(rng: np.random.Generator, m: int, n: int, k: int, epilogue: str) -> Case:
    x, w, b, r = _rand(rng, m, k), _rand(rng, n, k), _rand(rng, n), _rand(rng, m, n)
    y = relay.nn.dense(relay.var("x", shape=(m, k)), relay.var("w", shape=(n, k)))
    expr = _epilogue(epilogue, y, relay.var("b", shape=(n,)), relay.var("r", shape=(m, n)))
    expected = _apply_numpy(epilogue, x.astype(np.float64) @ w.astype(np.float64).T, b, r)
    return Case(expr, {"x": x, "w": w, "b": b, "r": r}, expected)


def _matmul_case(rng: np.random.Generator, m: int, n: int, k: int, ta: bool, tb: bool) -> Case:
    a = _rand(rng, *((k, m) if ta else (m, k)))
    b = _rand(rng, *((n, k) if tb else (k, n)))
    expr = relay.nn.matmul(relay.var("a", shape=a.shape), relay.var("b", shape=b.shape),
                           transpose_a=ta, transpose_b=tb)
    expected = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    return Case(expr, {"a": a, "b": b}, expected)


def _batch_matmul_case(rng: np.random.Generator, batch: tuple[int, int], m: int, n: int, k: int,
                       ta: bool, tb: bool, scaled: bool) -> Case:
    a = _rand(rng, batch[0], *((k, m) if ta else (m, k)))
    b = _rand(rng, batch[1], *((n, k) if tb else (k, n)))
    mask = _rand(rng, 1, 1, n)
    y = relay.nn.batch_matmul(relay.var("a", shape=a.shape), relay.var("b", shape=b.shape),
                              transpose_a=ta, transpose_b=tb)
    at = a.transpose(0, 2, 1) if ta else a
    bt = b.transpose(0, 2, 1) if tb else b
    expected = at.astype(np.float64) @ bt.astype(np.float64)
    inputs = {"a": a, "b": b}
    if scaled:  # the attention epilogue: scale, then an additive mask
        y = relay.add(relay.multiply(y, relay.const(0.125, "float32")),
                      relay.var("mask", shape=mask.shape))
        expected = expected * 0.125 + mask
        inputs["mask"] = mask
    return Case(y, inputs, expected)


def _run(cases: dict[str, Case], target: TargetInfo) -> dict[str, np.ndarray]:
    """Compile every case (scheduled by the template registry for ``target``) into one library
    and run it; every case must have been claimed by a template."""
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
        assert claimed[names[name]], f"no template claimed {name}"
        args = [np.ascontiguousarray(case.inputs[p.name_hint]) for p in case.func.params]
        out = np.empty(case.expected.shape, "float32")
        lib.kernel(names[name]).bind([*args, out])()
        outputs[name] = out
    return outputs


def _check(got: np.ndarray, want: np.ndarray, k: int) -> None:
    # float32 products of K terms: error grows like sqrt(K) ulps of the terms' magnitude
    tol = 2e-6 * max(1.0, math.sqrt(k)) * max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=tol)


@pytest.fixture(scope="module", params=sorted(TARGETS))
def target(request: pytest.FixtureRequest) -> TargetInfo:
    return TARGETS[request.param]


@pytest.fixture(scope="module")
def dense_pack_results(target: TargetInfo) -> tuple[dict[str, Case], dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    cases = {f"{shape}-{epi}": _dense_pack_case(rng, *shape, epi)
             for shape in PACK_SHAPES for epi in EPILOGUES}
    return cases, _run(cases, target)


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("shape", PACK_SHAPES, ids=str)
def test_dense_pack_template(dense_pack_results, shape, epilogue):
    cases, outputs = dense_pack_results
    name = f"{shape}-{epilogue}"
    _check(outputs[name], cases[name].expected, shape[2])


DENSE_SHAPES = [(1, 64, 24), (13, 40, 33), (7, 40, 5), (64, 96, 64), (2, 3, 100)]


@pytest.fixture(scope="module")
def dense_results(target: TargetInfo) -> tuple[dict[str, Case], dict[str, np.ndarray]]:
    rng = np.random.default_rng(2)
    cases = {f"{shape}-{epi}": _dense_case(rng, *shape, epi)
             for shape in DENSE_SHAPES for epi in ("none", "bias_relu", "bias_residual")}
    return cases, _run(cases, target)


@pytest.mark.parametrize("epilogue", ["none", "bias_relu", "bias_residual"])
@pytest.mark.parametrize("shape", DENSE_SHAPES, ids=str)
def test_dense_template(dense_results, shape, epilogue):
    """Plain dense (weight ``(N, K)``): the dot-product tiling along ``K``."""
    cases, outputs = dense_results
    name = f"{shape}-{epilogue}"
    _check(outputs[name], cases[name].expected, shape[2])


MATMUL_SHAPES = [(1, 48, 16), (13, 97, 33), (16, 32, 8), (6, 5, 3)]
MATMUL_FLAGS = [(False, False), (True, False), (False, True)]


@pytest.fixture(scope="module")
def matmul_results(target: TargetInfo) -> tuple[dict[str, Case], dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    cases = {f"{shape}-{flags}": _matmul_case(rng, *shape, *flags)
             for shape in MATMUL_SHAPES for flags in MATMUL_FLAGS}
    return cases, _run(cases, target)


@pytest.mark.parametrize("flags", MATMUL_FLAGS, ids=str)
@pytest.mark.parametrize("shape", MATMUL_SHAPES, ids=str)
def test_matmul_template(matmul_results, shape, flags):
    cases, outputs = matmul_results
    name = f"{shape}-{flags}"
    _check(outputs[name], cases[name].expected, shape[2])


# (batch of a, batch of b), M, N, K: attention heads (QK^T, PV), ViT's 197 tokens, a broadcast
# operand, GEMV rows
BMM_SHAPES = [((4, 4), 32, 32, 16), ((3, 3), 21, 37, 16), ((2, 1), 9, 64, 7),
              ((1, 3), 1, 17, 5), ((2, 2), 19, 8, 40)]
BMM_FLAGS = [(False, False), (False, True), (True, False), (True, True)]


@pytest.fixture(scope="module")
def bmm_results(target: TargetInfo) -> tuple[dict[str, Case], dict[str, np.ndarray]]:
    rng = np.random.default_rng(4)
    cases = {}
    for shape in BMM_SHAPES:
        for flags in BMM_FLAGS:
            for scaled in (False, True):
                cases[f"{shape}-{flags}-{scaled}"] = _batch_matmul_case(rng, *shape, *flags,
                                                                        scaled)
    # both transposed: no operand is contiguous along j or along k; the default schedule runs
    claimed = {n: c for n, c in cases.items() if "(True, True)" not in n}
    return cases, {**_run(claimed, target), **_default_outputs(cases, claimed)}


def _default_outputs(cases: dict[str, Case], claimed: dict[str, Case]) -> dict[str, np.ndarray]:
    rest = {n: c for n, c in cases.items() if n not in claimed}
    for case in rest.values():
        assert apply_template(function_to_dag(case.func, "k").dag, AVX512) is None
    names = {name: f"d{i}" for i, name in enumerate(rest)}
    lib = build_native({names[n]: c.func.with_attr("Primitive", 1) for n, c in rest.items()})
    outputs = {}
    for name, case in rest.items():
        args = [case.inputs[p.name_hint] for p in case.func.params]
        out = np.empty(case.expected.shape, "float32")
        lib.kernel(names[name]).bind([*args, out])()
        outputs[name] = out
    return outputs


@pytest.mark.parametrize("scaled", [False, True])
@pytest.mark.parametrize("flags", BMM_FLAGS, ids=str)
@pytest.mark.parametrize("shape", BMM_SHAPES, ids=str)
def test_batch_matmul_template(bmm_results, shape, flags, scaled):
    cases, outputs = bmm_results
    name = f"{shape}-{flags}-{scaled}"
    _check(outputs[name], cases[name].expected, shape[3])


def test_dense_with_batched_data_and_interpreter(rng):
    """3-d data: the leading axis becomes a batch axis of the tiling; checked against the
    reference interpreter of the same function."""
    x, w = _rand(rng, 2, 7, 24), _rand(rng, 40, 24)
    expr = relay.nn.relu(relay.nn.dense(relay.var("x", shape=x.shape), relay.var("w", shape=w.shape)))
    case = Case(expr, {"x": x, "w": w}, np.asarray(evaluate(expr, {"x": x, "w": w})))
    out = _run({"c": case}, AVX512)["c"]
    np.testing.assert_allclose(out, case.expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind, units, panel", [("dense_pack", 32, 16), ("matmul", 32, 32),
                                                ("dense_pack", 9, 9), ("matmul", 9, 9)])
def test_float64_products(rng, kind, units, panel):
    """float64 operands: 8-lane vectors on AVX-512, the same tilings; 9 columns make masked
    updates of a register tile of 64-bit lanes."""
    x, w = rng.standard_normal((13, 24)), rng.standard_normal((units, 24))
    if kind == "dense_pack":
        expr = contrib_dense_pack(relay.var("x", shape=x.shape, dtype="float64"),
                                  relay.var("w", shape=(units // panel, 24, panel), dtype="float64"),
                                  f"NC{panel}n", units=units)
        inputs = {"x": x, "w": _pack(w, panel)}
    else:
        expr = relay.nn.matmul(relay.var("x", shape=x.shape, dtype="float64"),
                               relay.var("w", shape=(24, units), dtype="float64"))
        inputs = {"x": x, "w": np.ascontiguousarray(w.T)}
    func = _typed(expr)
    state = apply_template(function_to_dag(func, "k").dag, AVX512)
    assert state is not None and "vectorize" in str(state)
    lib = build_native({"k": func.with_attr("Primitive", 1)},
                       schedule_lookup=lambda dag, name: state)
    out = np.empty((13, units))
    lib.kernel("k").bind([inputs[p.name_hint] for p in func.params] + [out])()
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-12, atol=1e-12)


def test_dense_pack_with_fused_producer_and_consumer_reshapes(rng):
    """Element-wise producers (a reshape and an add feeding the data) are inlined into the
    product's loads; a reshape after the product keeps it at the root (root mode)."""
    x, w, b = _rand(rng, 1, 9, 24), _rand(rng, 32, 24), _rand(rng, 24)
    data = relay.reshape(relay.add(relay.var("x", shape=x.shape), relay.var("b", shape=b.shape)),
                         (9, 24))
    y = contrib_dense_pack(data, relay.var("w", shape=(2, 24, 16)), "NC16n", units=32)
    expr = relay.nn.relu(relay.reshape(y, (1, 9, 32)))
    expected = np.maximum((x[0] + b).astype(np.float64) @ w.T.astype(np.float64), 0)[None]
    case = Case(expr, {"x": x, "w": _pack(w, 16), "b": b}, expected)
    out = _run({"c": case}, AVX512)["c"]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


# --- schedule structure and replay -------------------------------------------------------------

def _dag(expr: Expr):
    return function_to_dag(_typed(expr), "kern")


def _pack_expr(m: int, n: int, k: int, panel: int, epilogue: str) -> Expr:
    y = contrib_dense_pack(relay.var("x", shape=(m, k)),
                           relay.var("w", shape=(n // panel, k, panel)), f"NC{panel}n", units=n)
    return _epilogue(epilogue, y, relay.var("b", shape=(n,)), relay.var("r", shape=(m, n)))


def test_dense_pack_schedule_structure():
    """The product is computed at the output tile (one ``CA`` step), vectorized and unrolled, and
    the tile loops run in parallel; the epilogue is inlined into the output stage."""
    state = apply_template(_dag(_pack_expr(128, 384, 384, 32, "bias_gelu")).dag, AVX512)
    assert state is not None
    text = str(state)
    assert text.count("parallel") == 1 and "vectorize" in text and "unroll" in text
    assert sum(isinstance(s, ComputeAtStep) for s in state.transform_steps) == 1
    assert "T_dense_pack" in text and "T_multiply" in text.splitlines()[-1]


@pytest.mark.parametrize("m, n, panel", [(360, 10, 10), (64, 30, 30), (5, 7, 7)])
def test_odd_width_accumulators_stay_in_registers(m, n, panel):
    """Columns that are no multiple of the vector width: the accumulator tile's rows are aligned
    to whole vectors, so it lives in vector variables instead of a stack array that every step
    would load and store with masks (a 10-class head ran 6x slower that way)."""
    fdag = _dag(_pack_expr(m, n, 64, panel, "none"))
    state = apply_template(fdag.dag, AVX512)
    assert state is not None
    code = CCodegen(64).function(lower(fdag.dag, state, args=fdag.args, name="kern"))
    assert "vector variables" in code and "T_dense_pack_local[" not in code


@pytest.mark.parametrize("build", [
    lambda: _pack_expr(13, 96, 33, 32, "bias_gelu"),
    lambda: _pack_expr(1, 40, 9, 8, "none"),
    lambda: relay.nn.dense(relay.var("x", shape=(7, 20)), relay.var("w", shape=(12, 20))),
    lambda: relay.nn.batch_matmul(relay.var("a", shape=(3, 21, 16)),
                                  relay.var("b", shape=(3, 16, 37)), transpose_b=False),
], ids=["dense_pack_gelu", "gemv", "dense_dot", "batch_matmul"])
def test_template_replays_from_records(build: Callable[[], Expr], rng):
    """Steps written as tuning-record JSON and parsed back lower to the same C, and that C
    computes the product."""
    fdag = _dag(build())
    state = apply_template(fdag.dag, AVX512)
    assert state is not None
    records = json.loads(json.dumps([s.to_record() for s in state.transform_steps]))
    steps = [parse_step(r) for r in records]
    assert [s.to_record() for s in steps] == records
    original = lower(fdag.dag, state, args=fdag.args, name="kern")
    replayed = lower(fdag.dag, steps, args=fdag.args, name="kern")
    assert CCodegen(64).function(original) == CCodegen(64).function(replayed)
    func = _typed(build())
    inputs = {p.name_hint: _rand(rng, *p.checked_type.shape) for p in func.params}
    lib = build_native({"kern": func.with_attr("Primitive", 1)},
                       schedule_lookup=lambda dag, name: steps)
    out = np.empty(func.ret_type.shape, "float32")
    lib.kernel("kern").bind([inputs[p.name_hint] for p in func.params] + [out])()
    want = np.asarray(evaluate(IRModule.from_expr(func), inputs))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


def test_contraction_kinds():
    """Which tiling each operand layout gets."""
    def kind(expr: Expr) -> str | None:
        c = find_contraction(_dag(expr).dag, ("dense_pack", "dense", "matmul", "batch_matmul"))
        return None if c is None else c.kind

    a, bt, b = (relay.var(n, shape=s) for n, s in (("a", (4, 8)), ("bt", (6, 8)), ("b", (8, 6))))
    assert kind(relay.nn.matmul(a, b)) == "broadcast"
    assert kind(relay.nn.matmul(a, bt, transpose_b=True)) == "dot"
    assert kind(relay.nn.dense(a, bt)) == "dot"
    assert kind(_pack_expr(4, 32, 8, 16, "none")) == "broadcast"
    at = relay.var("at", shape=(8, 4))
    assert kind(relay.nn.matmul(at, bt, transpose_a=True, transpose_b=True)) is None
    ints = relay.var("i", shape=(4, 8), dtype="int32")
    assert kind(relay.nn.matmul(ints, relay.var("j", shape=(8, 6), dtype="int32"))) is None


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 300), cols_vectors=st.integers(1, 64), depth=st.integers(1, 2048),
       panel_choice=st.sampled_from([0, 8, 16, 32]), wide=st.booleans())
def test_tile_choice_fits_registers(rows, cols_vectors, depth, panel_choice, wide):
    """Any shape gets a tile whose accumulators fit the register file next to the operands, whose
    vectors stay within a packed panel (or are whole panels), and whose row count is at most M."""
    target = AVX512 if wide else AVX2
    lanes = target.lanes()
    cols = cols_vectors * (panel_choice or lanes)
    panel = panel_choice or cols
    tile = choose_gemm_tile(rows, cols, depth, panel, "float32", target)
    assert 1 <= tile.rows <= rows
    assert tile.rows * tile.vectors <= target.vector_registers - 4
    if rows > 3 and tile.rows > 1:  # accumulators, the B vectors the rows reuse, A's broadcast
        assert tile.rows * tile.vectors + tile.vectors + 1 <= target.vector_registers
    assert tile.lanes <= lanes and tile.lanes & (tile.lanes - 1) == 0
    if panel != cols:
        assert cols % tile.cols == 0
        assert panel % tile.cols == 0 or tile.cols % panel == 0  # within a panel or whole ones
    assert depth % tile.k_unroll == 0


def test_single_row_tiles_span_panels():
    """A one-row product (an LSTM step, h @ R) gets enough independent accumulators from several
    16-column panels: 8 AVX2 vectors, where one panel held 2 (a chain of K dependent
    multiply-adds each; conv1d_bilstm's 128 x 512 steps, AVX2 build: 4.2 -> 2.9 us)."""
    tile = choose_gemm_tile(1, 512, 128, 16, "float32", AVX2)
    assert (tile.rows, tile.vectors, tile.lanes) == (1, 8, 8)


@pytest.mark.parametrize(("target", "panel", "vectors", "unroll"),
                         [(AVX512, 128, 8, 2), (AVX2, 64, 8, 4)])
def test_streamed_panel_is_one_tile_unrolled_within_1kb(target, panel, vectors, unroll):
    """A one-row product over a panel as wide as a tile (:func:`stream_panel`) reads one
    contiguous block per tile, and unrolls ``k`` only as far as 1 KB of the weight per iteration:
    the 128 x 512 product from L2 (Zen 5) took 1.9 us unrolled by 4 (2 KB), 1.1 us by 2."""
    assert stream_panel(512, 1, target.lanes(), target.vector_bytes) == panel
    tile = choose_gemm_tile(1, 512, 128, panel, "float32", target)
    assert (tile.rows, tile.vectors, tile.cols, tile.k_unroll) == (1, vectors, panel, unroll)
    assert choose_gemm_tile(128, 384, 384, 32, "float32", target).k_unroll == 4  # GEMM tiles


@settings(max_examples=200, deadline=None)
@given(units=st.integers(1, 4096), rows=st.integers(1, 8), wide=st.booleans())
def test_stream_panel_divides_units_and_fits_one_tile(units, rows, wide):
    """A streamed panel is whole vectors, divides the columns, and fits the register tile of its
    rows (so the tile chooser takes one whole panel); only products of up to 3 rows get one."""
    target = AVX512 if wide else AVX2
    lanes = target.lanes()
    panel = stream_panel(units, rows, lanes, target.vector_bytes)
    if panel is None:
        return
    assert rows <= 3 and panel % lanes == 0 and units % panel == 0
    assert 2 <= panel // lanes <= min(8, (target.vector_registers - 8 if wide else 12) // rows)
    tile = choose_gemm_tile(rows, units, 64, panel, "float32", target)
    assert tile.cols == panel


def test_transformer_tiles():
    """The shapes of the benchmark encoders get full register tiles without column tails."""
    for m, n, k in [(128, 384, 384), (128, 1536, 384), (128, 384, 1536), (197, 576, 192),
                    (197, 768, 192), (197, 192, 768)]:
        tile = choose_gemm_tile(m, n, k, 32, "float32", AVX512)
        assert tile.lanes == 16 and n % tile.cols == 0
        assert tile.rows * tile.vectors >= 10
        assert -(-m // tile.rows) * tile.rows - m < tile.rows


@pytest.mark.parametrize(("m", "n", "k", "panel"), [
    (128, 384, 384, 32), (128, 1536, 384, 32), (128, 384, 1536, 32),  # MiniLM's products
    (128, 32, 128, 32), (128, 128, 32, 128),  # its attention: P V and Q K^T (B transposed)
    (197, 576, 192, 32), (197, 192, 768, 32),  # ViT's
])
def test_avx2_tiles_are_six_rows_of_two_vectors(m, n, k, panel):
    """With 16 registers a GEMM tile is 6 x 2 vectors: 12 accumulators, 2 of B, 1 broadcast of A.
    3 x 4 (12 accumulators, 4 of B) spills and 5 x 2 pads fewer rows but is slower (AVX2 build on
    Zen 5: MiniLM's 128 x 384 x 1536 product 1321 us as 3 x 4, 1198 as 5 x 2, 1141 as 6 x 2;
    attention's 128 x 128 x 32 177 -> 96 us)."""
    tile = choose_gemm_tile(m, n, k, panel, "float32", AVX2)
    assert (tile.rows, tile.vectors, tile.lanes) == (6, 2, 8)


@pytest.mark.parametrize(("rows", "epilogue", "unswitched"), [
    (100, "bias_gelu", True), (102, "bias_gelu", False), (100, "bias_residual", False)])
def test_partial_tiles_of_vector_math_epilogues_are_unswitched(rows, epilogue, unswitched):
    """A product whose rows leave a partial last register tile and whose epilogue calls vector
    math (GELU's erf) runs whole tiles in a copy of the tile body without the row checks: the
    tile loop's body is ``if (every row of the tile is inside) {unchecked} else {checked}``. GCC
    compiled the checked body slowly for every tile (AVX2, 100 x 256 x 1024 with GELU: 834 us,
    446 unswitched). Plain epilogues and whole tiles keep one body (compile time)."""
    fdag = function_to_dag(_typed(_pack_expr(rows, 1024, 256, 32, epilogue)), "k")
    state = apply_template(fdag.dag, AVX2)
    assert state is not None
    func = lower(fdag.dag, state, args=fdag.args, name="k")
    tile_loop = next(s for s in walk_stmts(func.body) if isinstance(s, For))
    body = tile_loop.body
    assert isinstance(body, IfThenElse) == unswitched
    if unswitched:
        row_checks = [s for s in walk_stmts(body.else_case) if isinstance(s, IfThenElse)]
        assert row_checks and not any(isinstance(s, IfThenElse) for s in walk_stmts(body.then_case))


# --- encoders end to end -----------------------------------------------------------------------

def _encoder_outputs(model, feeds: dict[str, np.ndarray],
                     monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, np.ndarray, set[str]]:
    """Kiln's and onnxruntime's outputs, and the names of the kernels no template claimed."""
    import kiln
    import kiln.codegen.native as native
    from kiln.contrib import graph_executor

    untemplated: set[str] = set()

    def recording(dag: object, target: TargetInfo) -> State | None:
        state = apply_template(dag, target)  # type: ignore[arg-type]
        if state is None:
            untemplated.add(" ".join(op.name for op in dag.ops))  # type: ignore[attr-defined]
        return state

    monkeypatch.setattr(native, "apply_template", recording)
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in feeds.items()})
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="c", params=params)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    gm.run(**feeds)
    got = gm.get_output(0).numpy()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)[0]
    return got, want, untemplated


# Stages whose kernels the templates must schedule (products and row reductions).
_TEMPLATED = ("T_dense_pack", "T_batch_matmul", "T_softmax", "T_mean", "T_variance",
              "T_layer_norm")


def _assert_templated(untemplated: set[str]) -> None:
    missed = [k for k in untemplated if any(stage in k for stage in _TEMPLATED)]
    assert not missed, f"kernels left to the default schedule: {missed}"


def test_bert_block_matches_onnxruntime(monkeypatch):
    """One BERT layer (MatMul + Add projections, attention with mask, spelled-out layer norm,
    erf GELU) at reduced width: Kiln's build equals onnxruntime's run."""
    from bench.models import make_feeds
    from bench.models_transformer import bert

    model = bert(seq_len=32, hidden=64, heads=4, layers=1, intermediate=128, vocab=50,
                 max_positions=64)
    got, want, untemplated = _encoder_outputs(model, make_feeds(model), monkeypatch)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    _assert_templated(untemplated)


def test_vit_block_matches_onnxruntime(monkeypatch):
    """One ViT block (197-like odd token count: 17 tokens) with LayerNormalization ops."""
    from bench.models import make_feeds
    from bench.models_transformer import vit

    model = vit(image_size=32, patch=8, dim=48, depth=1, heads=3, mlp=96, num_classes=10)
    got, want, untemplated = _encoder_outputs(model, make_feeds(model), monkeypatch)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    _assert_templated(untemplated)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["minilm_l6", "vit_tiny"])
def test_benchmark_encoders_match_onnxruntime(name, monkeypatch):
    """The full benchmark encoders (sequence 128, 197 tokens)."""
    from bench.models import MODELS, make_feeds

    model = MODELS[name].build()
    got, want, untemplated = _encoder_outputs(model, make_feeds(model), monkeypatch)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    _assert_templated(untemplated)
