"""The inlining size budget: stages whose inlined expression would blow up get their own buffer.

A chain of stages that each read their producer three times (``where(a > 0, a * 0.5, a + 1)``)
grows as 3^depth when everything is inlined; the default schedule and the lowering must stop
inlining at :data:`~kiln.te.bound.INLINE_MAX_NODES`. Oracles: hand-counted expression sizes
and the NumPy loop computing the chain.
"""

from __future__ import annotations

import numpy as np
import pytest

from kiln import te
from kiln.codegen.c_codegen import CCodegen
from kiln.te.bound import INLINE_MAX_NODES, inline_costs, limit_inlining
from kiln.te.default_schedule import default_schedule
from kiln.te.loop_state import ComputeAtKind
from kiln.te.lower import lower
from tests._toolchain import have_cc

HAVE_CC = have_cc()


def test_inline_costs_count_nodes_as_printed() -> None:
    x = te.placeholder((8,), name="x")
    a = te.compute((8,), lambda i: x[i] + x[i], name="a")
    b = te.compute((8,), lambda i: a[i] * a[i], name="b")
    c = te.compute((7,), lambda i: a[i + 1], name="c")
    (cost_a,) = inline_costs(a.op, {})
    # add(load(x, i), load(x, i)): 1 + 2 * (1 + 1)
    assert (cost_a.size, cost_a.uses) == (5, (2,))
    (cost_b,) = inline_costs(b.op, {a.key: cost_a})
    # mul of two copies of a's 5 nodes
    assert (cost_b.size, cost_b.uses) == (11, (4,))
    (cost_c,) = inline_costs(c.op, {a.key: cost_a})
    # a with i -> (i + 1): each of its 2 uses of i grows by 2 nodes
    assert (cost_c.size, cost_c.uses) == (9, (2,))
    (not_inlined,) = inline_costs(b.op, {})
    assert (not_inlined.size, not_inlined.uses) == (5, (2,))


def _where_step(prev: te.Tensor, k: int) -> te.Tensor:
    """where(p > 0, p * 0.5, p + 1): reads its producer three times."""
    return te.compute(prev.shape, lambda i: te.if_then_else(prev[i] > 0.0, prev[i] * 0.5,
                                                             prev[i] + 1.0),
                      name=f"w{k}", tag="injective")


def _where_chain(depth: int, n: int = 37) -> tuple[te.Tensor, te.Tensor]:
    x = te.placeholder((n,), name="x")
    stage = x
    for k in range(depth):
        stage = _where_step(stage, k)
    return x, stage


def _chain_oracle(x: np.ndarray, depth: int) -> np.ndarray:
    a = x.astype(np.float32)
    for _ in range(depth):
        a = np.where(a > 0, a * np.float32(0.5), a + np.float32(1.0)).astype(np.float32)
    return a


def test_exponential_chain_costs_are_exact_big_integers() -> None:
    _, out = _where_chain(40)
    inlined = {}
    ops = _stages(out)
    for op in ops[:-1]:
        (cost,) = inline_costs(op, inlined)
        inlined[op.output(0).key] = cost
    (cost,) = inline_costs(ops[-1], inlined)
    # every level: select(compare(p, 0), mul(p, 0.5), add(p, 1)) holds p three times
    assert cost.size > 3 ** 40 and cost.uses == (3 ** 40,)


def _stages(out: te.Tensor) -> list[te.ComputeOp]:
    ops = []
    t = out
    while isinstance(t.op, te.ComputeOp):
        ops.append(t.op)
        t = t.op.input_tensors()[0]
    return ops[::-1]


@pytest.mark.parametrize("depth", [3, 12, 40])
def test_default_schedule_keeps_chains_within_the_budget(depth: int) -> None:
    x, out = _where_chain(depth)
    dag = te.ComputeDAG([x, out])
    state = default_schedule(dag, 32, 1)
    inlined = sum(1 for s in state.stages if s.compute_at == ComputeAtKind.INLINED)
    if 3 ** depth * 8 < INLINE_MAX_NODES:
        assert inlined == depth - 1  # small chains still inline completely
    else:
        assert inlined < depth - 1
    func = lower(dag, state, name="chain")
    text = CCodegen(32).module([func])
    assert len(text) < 400_000
    if HAVE_CC:
        from kiln.codegen.native import compile_module
        from kiln.runtime.native import NativeLibrary

        lib = NativeLibrary(compile_module(text, "inline_budget_test"))
        data = np.random.default_rng(depth).standard_normal(37).astype(np.float32) * 8
        got = np.empty(37, np.float32)
        lib.kernel("chain")(data, got)
        np.testing.assert_allclose(got, _chain_oracle(data, depth), rtol=1e-6)


def test_lowering_limits_a_schedule_that_inlines_everything() -> None:
    from kiln.te.interp import run_prim_func

    depth = 30
    x, out = _where_chain(depth, n=11)
    dag = te.ComputeDAG([x, out])
    state = dag.init_state
    for i, op in enumerate(dag.ops):
        if isinstance(op, te.ComputeOp) and op is not out.op:
            state.compute_inline(i)  # a hand-written schedule ignoring the budget
    sch = dag.apply_steps(state.transform_steps)
    moved = limit_inlining(sch)
    assert moved and all(s.attach_type == "root" for s in moved)
    func = lower(dag, state, name="chain_all_inline")
    assert len(CCodegen(32).module([func])) < 400_000
    data = np.linspace(-20, 20, 11).astype(np.float32)
    got = np.empty(11, np.float32)
    run_prim_func(func, [data, got])
    np.testing.assert_allclose(got, _chain_oracle(data, depth), rtol=1e-6)


@pytest.mark.slow
@pytest.mark.requires_cc
def test_gridsample_conformance_builds_stay_small(tmp_path, monkeypatch) -> None:
    # GridSample imports as chains of where/floor/clip that once made an 11 MB expression
    from kiln.config import settings
    from kiln.frontend.onnx_conformance import load_cases, run_suite_compiled

    monkeypatch.setattr(settings, "cache_dir", tmp_path)
    results = run_suite_compiled(load_cases("gridsample"), group=64)
    assert {r.status for r in results} == {"pass"}
    largest = max(p.stat().st_size for p in (tmp_path / "compile").glob("*.c"))
    assert largest < 3_000_000
