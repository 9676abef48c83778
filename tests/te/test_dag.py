"""ComputeDAG: TVM's print format, workload keys and FLOP counts.

Expected texts are written by hand from TVM's ``ComputeDAG::PrintDAG`` and legacy expression
printer; the matmul + relu chain key is the one TVM wrote in the fixture log.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from kiln import te
from kiln.errors import KilnTypeError
from kiln.te import expr as E


def matmul(n: int, m: int, k: int) -> list[te.Tensor]:
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=[r]), name="C")
    return [A, B, C]


def test_matmul_print_and_simple_mode() -> None:
    dag = te.ComputeDAG(matmul(512, 512, 512))
    assert dag.print_dag() == (
        "A = PLACEHOLDER [512, 512]\n"
        "B = PLACEHOLDER [512, 512]\n"
        "C(i, j) += (A[i, k]*B[k, j])\n")
    assert dag.print_dag(simple_mode=True) == (
        "A = PLACEHOLDER \nB = PLACEHOLDER \nC(i, j) += (A[i, k]*B[k, j])\n")


def test_relay_style_dense_print_matches_spec() -> None:
    p0 = te.placeholder((1, 512), name="p0")
    p1 = te.placeholder((1000, 512), name="p1")
    k = te.reduce_axis((0, 512), name="k")
    out = te.compute((1, 1000), lambda i0, i1: te.sum(p0[i0, k] * p1[i1, k], axis=k),
                     name="T_matmul_NT")
    text = te.ComputeDAG([p0, p1, out]).print_dag()
    assert text == ("p0 = PLACEHOLDER [1, 512]\np1 = PLACEHOLDER [1000, 512]\n"
                    "T_matmul_NT(i0, i1) += (p0[i0, k]*p1[i1, k])\n")


def test_fixture_workload_key_of_matmul_relu_relu() -> None:
    # The second record of ansor_manual_steps_log.json was written by TVM for this DAG.
    A, B, C = matmul(512, 512, 512)
    D = te.compute(C.shape, lambda i0, i1: te.max(C[i0, i1], te.const(0.0, "float32")))
    F = te.compute(D.shape, lambda i0, i1: te.max(D[i0, i1], te.const(0.0, "float32")))
    dag = te.ComputeDAG([A, B, F])
    assert dag.print_dag().splitlines()[3:] == ["compute(i0, i1) = max(C[i0, i1], 0f)",
                                                "compute(i0, i1) = max(compute[i0, i1], 0f)"]
    assert dag.workload_key() == ('["29e25072f17c5958ebb33297f879aa32", [512, 512], '
                                  '[512, 512], [512, 512]]')


def test_workload_key_is_md5_of_simple_print() -> None:
    dag = te.ComputeDAG(matmul(8, 16, 4))
    digest = hashlib.md5(dag.print_dag(simple_mode=True).encode()).hexdigest()
    assert json.loads(dag.workload_key()) == [digest, [8, 4], [4, 16], [8, 16]]


def test_reductions_select_cast_and_intrinsics_print() -> None:
    A = te.placeholder((4, 8), name="A")
    I = te.placeholder((4,), dtype="int32", name="I")
    k = te.reduce_axis((0, 8), name="k")
    mx = te.compute((4,), lambda i: te.max(A[i, k], axis=k), name="mx")
    k2 = te.reduce_axis((0, 8), name="k2")
    mn = te.compute((4,), lambda i: te.min(A[i, k2], axis=k2), name="mn")
    k3 = te.reduce_axis((0, 8), name="k3")
    pr = te.compute((4,), lambda i: te.prod(A[i, k3], axis=k3), name="pr")
    sel = te.compute((4,), lambda i: te.select(mx[i] > 0.5, mn[i], pr[i] * 2.0), name="sel")
    cst = te.compute((4,), lambda i: sel[i] + I[i].astype("float32"), name="cst")
    ex = te.compute((4,), lambda i: te.exp(cst[i]), name="ex")
    dv = te.compute((4,), lambda i: te.floordiv(I[i], 4) + te.floormod(I[i], 3)
                    + te.const(5, "int64").astype("int32"), name="dv")
    text = te.ComputeDAG([A, I, ex, dv]).print_dag()
    assert text.splitlines() == [
        "A = PLACEHOLDER [4, 8]",
        "mx(i) max= A[i, k]",
        "mn(i) min= A[i, k2]",
        "pr(i)reduce(x*y)",
        "sel(i) = select((mx[i] > 0.5f), mn[i], (pr[i]*2f))",
        "I = PLACEHOLDER [4]",
        "cst(i) = (sel[i] + float32(I[i]))",
        "ex(i) = tir.exp(cst[i])",
        "dv(i) = ((floordiv(I[i], 4) + floormod(I[i], 3)) + 5)",
    ]
    simple = te.ComputeDAG([A, I, ex, dv]).print_dag(simple_mode=True).splitlines()
    assert simple[0] == "A = PLACEHOLDER " and simple[7] == "ex(i) = Op(tir.exp)"


def test_tuple_reduction_prints_select_combiner_and_value_index() -> None:
    def fcombine(x, y):
        keep = x[1] >= y[1]
        return [te.select(keep, x[0], y[0]), te.select(keep, x[1], y[1])]

    def fidentity(t0, t1):
        return [te.const(-1, t0), te.min_value(t1)]

    argmax = te.comm_reducer(fcombine, fidentity, name="argmax")
    A = te.placeholder((3, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    idx, val = te.compute((3,), lambda i: argmax((k.var, A[i, k]), axis=k), name="am")
    lines = te.ComputeDAG([A, idx, val]).print_dag().splitlines()
    assert lines[1] == "am(i).v0 select((x_1 >= y_1), x_0, y_0)= (k,A[i, k])"
    assert lines[2] == "am(i).v1 select((x_1 >= y_1), x_1, y_1)= (k,A[i, k])"


@pytest.mark.parametrize(("value", "dtype", "text"), [
    (0.0, "float32", "0f"), (0.5, "float32", "0.5f"), (1e-5, "float32", "1e-05f"),
    (3.5, "float64", "3.5"), (1.0, "float16", "1h"), (7, "int32", "7"), (7, "int64", "(int64)7"),
    (True, "bool", "(bool)1"), (-2, "int8", "(int8)-2"),
])
def test_constant_print(value, dtype: str, text: str) -> None:
    assert str(te.const(value, dtype)) == text


def test_flop_count() -> None:
    assert te.ComputeDAG(matmul(8, 16, 4)).flop_ct == 2 * 8 * 16 * 4
    A = te.placeholder((10, 3), name="A")
    B = te.compute((10, 3), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    assert te.ComputeDAG([A, B]).flop_ct == 60
    # integer index arithmetic inside a float compute does not count
    C = te.compute((10,), lambda i: A[i // 2, (i + 1) % 3] + 1.0, name="C")
    assert te.ComputeDAG([A, C]).flop_ct == 10
    D = te.compute((10, 3), lambda i, j: A[i, j], name="D", attrs={"FLOP": 1234})
    assert te.ComputeDAG([A, D]).flop_ct == 1234


def test_duplicate_iterator_names_are_rejected() -> None:
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis((0, 4), name="i")
    with pytest.raises(KilnTypeError, match="not unique"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="bad")


def test_expression_building_and_folding() -> None:
    i = te.var("i")
    assert str(i * 1 + 0) == "i"
    assert str(te.const(2) * 3 + 4) == "10"
    assert str((i + 1) * 4) == "((i + 1)*4)"
    assert str(i // 4) == "floordiv(i, 4)" and str(i % 4) == "floormod(i, 4)"
    x = te.var("x", "float32")
    assert (x + 1).dtype == "float32" and str(x + 1) == "(x + 1f)"
    assert str(te.if_then_else(i < 3, x, 0.0)) == "tir.if_then_else((i < 3), x, 0f)"
    assert str(te.all(i >= 0, i < 4)) == "((i >= 0) && (i < 4))"
    assert str(~(i < 2)) == "!(i < 2)"
    assert str(x.astype("int32") + i) == "(int32(x) + i)"
    with pytest.raises(TypeError, match="truth value"):
        bool(i < 3)
    assert isinstance(E.cast(te.const(3.7), "int32"), E.IntImm)
    assert E.cast(te.const(300), "int8").value == 44
