"""Lowering: every step kind computes what the unscheduled computation computes.

Each case schedules a small DAG with Ansor steps, lowers it to loop IR and runs it twice, with
the loop-IR evaluator (``kiln.te.interp``) and as compiled C; both must match a NumPy formula
written in the test. Shapes are chosen so that splits do not divide evenly.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import te
from kiln.codegen.c_codegen import CCodegen
from kiln.te.interp import run_prim_func
from kiln.te.loop_ir import Allocate, For, IfThenElse, walk_stmts
from kiln.te.lower import lower
from kiln.te.steps import parse_step
from tests._toolchain import have_cc

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tvm"
HAVE_CC = have_cc()


def _run_c(func, arrays: list[np.ndarray]) -> None:
    from kiln.codegen.native import compile_module
    from kiln.runtime.native import NativeLibrary

    src = CCodegen(32).module([func])
    lib = NativeLibrary(compile_module(src, "te_lower_test",
                                       flags=["-ffp-contract=fast", "-fno-math-errno"]))
    lib.kernel(func.name)(*arrays)


def check(tensors: Sequence[te.Tensor], steps: Callable[[te.State], None] | list | None,
          expected: Callable[..., np.ndarray | tuple], rtol: float = 1e-5,
          seed: int = 0) -> te.State:
    """Schedule, lower, run (evaluator and C) and compare with ``expected(*inputs)``."""
    dag = te.ComputeDAG(tensors)
    state = dag.init_state
    if callable(steps):
        steps(state)
    elif steps:
        for raw in steps:
            step = parse_step(raw)
            state.transform_steps.append(step)
            step.apply_to_state(state, dag)
    func = lower(dag, state, name="kernel")
    rng = np.random.default_rng(seed)
    inputs = [_input(rng, t) for t in dag.tensors if isinstance(t.op, te.PlaceholderOp)]
    outputs = [t for t in dag.tensors if not isinstance(t.op, te.PlaceholderOp)]
    want = expected(*inputs)
    want = list(want) if isinstance(want, tuple) else [want]
    runners = [("evaluator", run_prim_func)]
    if HAVE_CC:
        runners.append(("C", _run_c))
    for label, runner in runners:
        outs = [np.full(t.shape, 7, dtype=t.dtype) for t in outputs]
        runner(func, [*inputs, *outs])
        for got, ref in zip(outs, want):
            np.testing.assert_allclose(got, ref, rtol=rtol, atol=1e-5, err_msg=f"{label}\n{func}")
    return state


def _input(rng: np.random.Generator, t: te.Tensor) -> np.ndarray:
    if t.dtype.startswith("float"):
        return rng.standard_normal(t.shape).astype(t.dtype)
    return rng.integers(-5, 6, t.shape).astype(t.dtype)


def matmul(n: int, m: int, k: int) -> list[te.Tensor]:
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=[r]), name="C")
    return [A, B, C]


def mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


def test_no_steps() -> None:
    check(matmul(5, 7, 3), None, mm)


@pytest.mark.parametrize("lengths", [[4], [3, 2], [16]])
def test_split_factor_and_reorder(lengths: list[int]) -> None:
    def sched(s: te.State) -> None:
        s.split(2, 0, lengths)
        n = len(s.stages[2].iters)
        s.reorder(2, [n - 1, *range(n - 1)])  # reduction loop outermost

    check(matmul(10, 6, 5), sched, mm)


def test_split_nparts() -> None:
    check(matmul(10, 6, 5), [["SP", 2, 1, 6, [4], 0]], mm)


def test_fuse_parallel_vectorize_unroll_pragma() -> None:
    def sched(s: te.State) -> None:
        i_o, i_i = s.split(2, 0, [4])
        j_o, j_i = s.split(2, 2, [8])
        s.reorder(2, [i_o, j_o, 4, i_i, j_i])
        fused = s.fuse(2, [0, 1])
        s.parallel(2, fused)
        s.unroll(2, 2)
        s.vectorize(2, 3)
        s.pragma(2, 0, "auto_unroll_max_step$16")

    check(matmul(9, 19, 6), sched, mm)


def test_cache_write_compute_at_follow_split() -> None:
    def sched(s: te.State) -> None:
        s.cache_write(2, "global")
        i_o, _ = s.split(3, 0, [4])
        s.follow_split(2, 0, 1, 1)
        s.compute_at(2, 3, i_o)

    state = check(matmul(10, 7, 5), sched, mm)
    assert [st.op.name for st in state.stages] == ["A", "B", "C.global", "C"]


def test_cache_read_compute_at_storage_align() -> None:
    def sched(s: te.State) -> None:
        s.cache_read(1, "shared", [2])
        s.split(3, 0, [3])
        s.compute_at(2, 3, 0)
        s.storage_align(2, 1, 8, 4)

    dag_tensors = matmul(8, 6, 5)
    check(dag_tensors, sched, mm)
    func = lower(te.ComputeDAG(dag_tensors), _state(dag_tensors, sched))
    allocs = [s.buffer for s in walk_stmts(func.body) if isinstance(s, Allocate)]
    assert [b.name for b in allocs] == ["B_shared"]
    assert allocs[0].strides == (24, 4)  # last dim: 1 -> 4 (8k + 4); rows: 4 * 6 columns


def _state(tensors, sched) -> te.State:
    s = te.ComputeDAG(tensors).init_state
    sched(s)
    return s


def test_compute_root_after_compute_at() -> None:
    check(matmul(6, 6, 4), [["CHW", 2, "global"], ["CA", 2, 3, 0], ["CR", 2]], mm)


def test_rfactor_with_uneven_split() -> None:
    state = check(matmul(4, 3, 13), [["SP", 2, 2, 13, [4], 1], ["RF", 2, 3, 2]], mm)
    assert [st.op.name for st in state.stages] == ["A", "B", "C.rf", "C.repl"]


def test_rfactor_outer_part_at_axis_zero() -> None:
    check(matmul(4, 3, 12), [["SP", 2, 2, 12, [4], 1], ["RF", 2, 2, 0]], mm)


def test_follow_fused_split_and_inline() -> None:
    A, B, C = matmul(20, 12, 3)
    D = te.compute(C.shape, lambda i0, i1: te.max(C[i0, i1], te.const(0.0, "float32")))
    E = te.compute(D.shape, lambda i0, i1: D[i0, i1] * 2.0)
    steps = [["SP", 4, 0, 20, [2, 5], 1], ["SP", 4, 3, 12, [3, 2], 1],
             ["FFSP", 3, 0, [0, 1], 1, 1], ["CI", 3]]
    state = check([A, B, E], steps[:3], lambda a, b: np.maximum(mm(a, b), 0) * 2)
    assert state.stages[3].iters[1].extent == 10  # 5 * 2 from the two sources' level 1
    check([A, B, E], [["CI", 3]], lambda a, b: np.maximum(mm(a, b), 0) * 2)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_fixture_records_on_smaller_shapes(index: int) -> None:
    """TVM's recorded schedules (made for 512) on small shapes: every split overhangs."""
    rec = json.loads((FIXTURES / "ansor_manual_steps_log.json").read_text().splitlines()[index])
    steps = rec["i"][1][1]
    if index == 1:
        A, B, C = matmul(20, 24, 8)
        D = te.compute(C.shape, lambda i0, i1: te.max(C[i0, i1], te.const(0.0, "float32")))
        E = te.compute(D.shape, lambda i0, i1: te.max(D[i0, i1], te.const(0.0, "float32")))
        check([A, B, E], steps, lambda a, b: np.maximum(mm(a, b), 0))
    else:
        check(matmul(20, 24, 8), steps, mm)


def test_conv_like_padding_inlined_and_attached() -> None:
    """A 3x3 convolution over a padded input, with the padding stage inlined or computed at."""
    data = te.placeholder((2, 9, 11), name="data")
    weight = te.placeholder((4, 2, 3, 3), name="weight")
    pad = te.compute((2, 11, 13), lambda c, y, x: te.if_then_else(
        te.all(y >= 1, y < 10, x >= 1, x < 12), data[c, y - 1, x - 1], te.const(0.0)),
        name="pad")
    rc = te.reduce_axis((0, 2), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    conv = te.compute((4, 9, 11), lambda o, y, x: te.sum(
        pad[rc, y + ry, x + rx] * weight[o, rc, ry, rx], axis=[rc, ry, rx]), name="conv")

    def expected(d: np.ndarray, w: np.ndarray) -> np.ndarray:
        p = np.pad(d.astype(np.float64), ((0, 0), (1, 1), (1, 1)))
        out = np.zeros((4, 9, 11))
        for o in range(4):
            for y in range(9):
                for x in range(11):
                    out[o, y, x] = np.sum(p[:, y:y + 3, x:x + 3] * w[o])
        return out

    dag = te.ComputeDAG([data, weight, conv])
    assert [op.name for op in dag.ops] == ["data", "pad", "weight", "conv"]
    check([data, weight, conv], [["CI", 1]], expected)
    # pad computed per block of 4 output rows: a 2 x 6 x 13 window of it (rows y..y+5)
    state = check([data, weight, conv], [["SP", 3, 1, 9, [4], 1], ["CA", 1, 3, 1]], expected)
    bounds = dag.infer_bound(state)
    assert [it.extent for it in bounds.stages[1].iters] == [2, 6, 13]


def _padded_rows(fill: float, rows: int = 2) -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    data = te.placeholder((3, rows, 5), name="data")
    weight = te.placeholder((2, 3, 3, 3), name="weight")
    pad = te.compute((3, rows + 2, 7), lambda c, y, x: te.if_then_else(
        te.all(y >= 1, y < rows + 1, x >= 1, x < 6), data[c, y - 1, x - 1], te.const(fill)),
        name="pad")
    return data, weight, pad


def _skipped_loops(func) -> list[str]:
    """Loops whose body is a guard (the zero-tap skips of the lowering)."""
    return [s.var.name for s in walk_stmts(func.body)
            if isinstance(s, For) and isinstance(s.body, IfThenElse)]


def _conv_reference(d: np.ndarray, w: np.ndarray, fill: float) -> np.ndarray:
    p = np.pad(d.astype(np.float64), ((0, 0), (1, 1), (1, 1)), constant_values=fill)
    out = np.zeros((w.shape[0], d.shape[1], d.shape[2]))
    for o in range(w.shape[0]):
        for y in range(d.shape[1]):
            for x in range(d.shape[2]):
                out[o, y, x] = np.sum(p[:, y:y + 3, x:x + 3] * w[o])
    return out


@pytest.mark.parametrize("rows", [1, 2, 4])
def test_sum_over_zero_padding_skips_padding_taps(rows: int) -> None:
    """A sum of products with a zero-padded operand guards the kernel-row and kernel-column loops
    by the padding's bounds (a 3x3 conv over 2 rows does 2/3 of the taps), with the padding
    materialised or inlined, and computes the same values."""
    data, weight, pad = _padded_rows(0.0, rows)
    rc, ry, rx = (te.reduce_axis((0, 3), name=n) for n in ("rc", "ry", "rx"))
    conv = te.compute((2, rows, 5), lambda o, y, x: te.sum(
        pad[rc, y + ry, x + rx] * weight[o, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    dag = te.ComputeDAG([data, weight, conv])
    for steps in (None, [["CI", 1]]):
        state = check([data, weight, conv], steps, lambda d, w: _conv_reference(d, w, 0.0))
        assert _skipped_loops(lower(dag, state, name="kernel")) == ["ry", "rx"]
    # the conv templates' order, output columns inside the taps: the column test reads x, so
    # it guards nothing; with the rows inside too, nothing is skipped (unless there is one row)
    for order, skipped in (([0, 1, 3, 4, 5, 2], ["ry"]),
                           ([0, 3, 4, 5, 1, 2], ["ry"] if rows == 1 else [])):
        state = check([data, weight, conv], [["RE", 3, order]],
                      lambda d, w: _conv_reference(d, w, 0.0))
        assert _skipped_loops(lower(dag, state, name="kernel")) == skipped


def test_padding_taps_kept_where_they_count() -> None:
    """No skip where a padding tap changes the result: a nonzero fill, a max reduction."""
    data, weight, pad = _padded_rows(1.5)
    rc, ry, rx = (te.reduce_axis((0, 3), name=n) for n in ("rc", "ry", "rx"))
    conv = te.compute((2, 2, 5), lambda o, y, x: te.sum(
        pad[rc, y + ry, x + rx] * weight[o, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    check([data, weight, conv], None, lambda d, w: _conv_reference(d, w, 1.5))
    assert _skipped_loops(lower(te.ComputeDAG([data, weight, conv]), None, name="k")) == []
    data, _, zpad = _padded_rows(0.0)
    ry, rx = te.reduce_axis((0, 3), name="ry"), te.reduce_axis((0, 3), name="rx")
    pool = te.compute((3, 2, 5), lambda c, y, x: te.max(zpad[c, y + ry, x + rx], axis=[ry, rx]),
                      name="pool")

    def pooled(d: np.ndarray) -> np.ndarray:
        p = np.pad(d, ((0, 0), (1, 1), (1, 1)))
        return np.array([[[p[c, y:y + 3, x:x + 3].max() for x in range(5)] for y in range(2)]
                         for c in range(3)])

    check([data, pool], None, pooled)
    assert _skipped_loops(lower(te.ComputeDAG([data, pool]), None, name="k")) == []


def test_reduction_with_where_init_and_argmax() -> None:
    A = te.placeholder((5, 9), name="A")
    k = te.reduce_axis((0, 9), name="k")
    masked = te.compute((5,), lambda i: te.sum(A[i, k], axis=k, where=k % 2 == 0, init=1.5),
                        name="masked")

    def fcombine(x, y):
        keep = x[1] >= y[1]
        return [te.select(keep, x[0], y[0]), te.select(keep, x[1], y[1])]

    argmax = te.comm_reducer(fcombine, lambda t0, t1: [te.const(-1, t0), te.min_value(t1)])
    k2 = te.reduce_axis((0, 9), name="k2")
    idx, val = te.compute((5,), lambda i: argmax((k2.var, A[i, k2]), axis=k2), name="am")
    check([A, masked, idx, val], None,
          lambda a: (a[:, ::2].astype(np.float64).sum(1) + 1.5, np.argmax(a, 1), a.max(1)))


def test_softmax_like_dag_with_default_schedule() -> None:
    from kiln.te.default_schedule import default_schedule

    x = te.placeholder((6, 37), name="x")
    k = te.reduce_axis((0, 37), name="k")
    mx = te.compute((6,), lambda i: te.max(x[i, k], axis=k), name="mx")
    e = te.compute((6, 37), lambda i, j: te.exp(x[i, j] - mx[i]), name="e")
    k2 = te.reduce_axis((0, 37), name="k2")
    s = te.compute((6,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
    out = te.compute((6, 37), lambda i, j: e[i, j] / s[i], name="out")

    def expected(a: np.ndarray) -> np.ndarray:
        z = np.exp(a.astype(np.float64) - a.max(1, keepdims=True))
        return z / z.sum(1, keepdims=True)

    dag = te.ComputeDAG([x, out])
    state = check([x, out], lambda st: _copy_steps(st, default_schedule(dag, 32, 2)), expected)
    assert [st.compute_at for st in state.stages] == [0, 0, 1, 0, 0]


def _copy_steps(target: te.State, source: te.State) -> None:
    for step in source.transform_steps:
        target.transform_steps.append(step)
        step.apply_to_state(target, target.dag)


def test_default_schedule_elementwise_broadcast_is_vectorized() -> None:
    from kiln.te.default_schedule import default_schedule

    a = te.placeholder((64, 40), name="a")
    b = te.placeholder((40,), name="b")
    c = te.compute((64, 40), lambda i, j: a[i, j] + b[j], name="c", tag="broadcast")
    dag = te.ComputeDAG([a, b, c])
    state = default_schedule(dag, vector_bytes=32, num_threads=2)
    func = lower(dag, state)
    kinds = [s.kind for s in walk_stmts(func.body) if isinstance(s, For)]
    # 2560 elements: too little work to go parallel, so rows and vectors stay nested loops
    assert kinds == ["serial", "serial", "vectorized"]
    assert not any(isinstance(s, IfThenElse) for s in walk_stmts(func.body))  # 40 = 5 * 8
    check([a, b, c], lambda st: _copy_steps(st, state), lambda x, y: x + y)


def test_lowered_ir_prints() -> None:
    func = lower(te.ComputeDAG(matmul(4, 4, 4)), [parse_step(["SP", 2, 0, 4, [2], 1])],
                 name="mm")
    text = str(func)
    assert text.startswith("primfn mm(A: float32[4, 4], B: float32[4, 4], C: float32[4, 4]) {")
    assert "for (i_o, 0, 2) {" in text and "C[(((i_o*8) + (i_i*4)) + j)] = 0f" in text


def test_split_after_compute_at_moves_the_attachment_inward() -> None:
    def sched(s: te.State) -> None:
        s.cache_write(2, "global")
        s.compute_at(2, 3, 0)  # at C's i
        s.split(3, 0, [3])  # i -> i.0, i.1: C.global moves to i.1 (TVM's rule)

    state = check(matmul(7, 5, 4), sched, mm)
    assert state.attach_map.stage_to_attach_iter == {2: (3, 1)}
    bounds = te.ComputeDAG(matmul(7, 5, 4)).infer_bound(state)
    assert [it.extent for it in bounds.stages[2].iters] == [1, 5, 4]


def test_auto_unroll_pragma_unrolls_small_inner_loops() -> None:
    tensors = matmul(8, 8, 4)
    # j_i runs 4 x (1 init + 4 updates) = 20 steps <= 32; j_o would be 40
    steps = [["SP", 2, 1, 8, [4], 1], ["PR", 2, 0, "auto_unroll_max_step$32"]]
    check(tensors, steps, mm)
    func = lower(te.ComputeDAG(tensors), [parse_step(s) for s in steps])
    kinds = {s.var.name: s.kind for s in walk_stmts(func.body) if isinstance(s, For)}
    assert kinds == {"i": "serial", "j_o": "serial", "j_i": "unrolled", "k": "unrolled"}


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_schedules_keep_the_result(data) -> None:
    """Random splits, reorders, fuses and annotations of a matmul (checked with the evaluator)."""
    tensors = matmul(5, 6, 4)
    dag = te.ComputeDAG(tensors)
    s = dag.init_state
    for axis in (2, 1, 0):  # split k, j, i (right to left keeps the ids stable)
        if data.draw(st.booleans(), label=f"split {axis}"):
            lengths = data.draw(st.lists(st.integers(1, 7), min_size=1, max_size=2))
            s.split(2, axis, lengths, inner_to_outer=data.draw(st.booleans()))
    n = len(s.stages[2].iters)
    s.reorder(2, data.draw(st.permutations(list(range(n)))))
    if data.draw(st.booleans()) and n > 1:
        start = data.draw(st.integers(0, n - 2))
        if all(it.iter_kind == s.stages[2].iters[start].iter_kind
               for it in s.stages[2].iters[start:start + 2]):
            s.fuse(2, [start, start + 1])
    last = len(s.stages[2].iters) - 1
    if s.stages[2].iters[last].iter_kind == 0:
        s.vectorize(2, last)
    if s.stages[2].iters[0].iter_kind == 0:
        s.parallel(2, 0)
    func = lower(dag, s)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 4)).astype(np.float32)
    b = rng.standard_normal((4, 6)).astype(np.float32)
    out = np.full((5, 6), np.nan, np.float32)
    run_prim_func(func, [a, b, out])
    np.testing.assert_allclose(out, mm(a, b), rtol=1e-5, atol=1e-6, err_msg=str(func))


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_random_compute_at_windows(data) -> None:
    """A producer computed at a random loop of a consumer reading overlapping windows of it."""
    A = te.placeholder((7, 9), name="A")
    P = te.compute((7, 9), lambda i, j: A[i, j] * 2.0 + 1.0, name="P")
    Q = te.compute((6, 7), lambda i, j: P[i, j] + P[i + 1, j + 2] - P[i, j + 1], name="Q")
    dag = te.ComputeDAG([A, Q])
    s = dag.init_state
    for axis in (1, 0):
        if data.draw(st.booleans(), label=f"split Q {axis}"):
            s.split(2, axis, [data.draw(st.integers(1, 5))])
    n = len(s.stages[2].iters)
    s.reorder(2, data.draw(st.permutations(list(range(n)))))
    s.compute_at(1, 2, data.draw(st.integers(0, n - 1), label="attach"))
    if data.draw(st.booleans(), label="split P"):
        s.split(1, 1, [data.draw(st.integers(1, 4))])
    func = lower(dag, s)
    a = np.random.default_rng(1).standard_normal((7, 9)).astype(np.float32)
    out = np.full((6, 7), np.nan, np.float32)
    run_prim_func(func, [a, out])
    p = a.astype(np.float64) * 2 + 1
    want = p[:6, :7] + p[1:7, 2:9] - p[:6, 1:8]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=str(func))
