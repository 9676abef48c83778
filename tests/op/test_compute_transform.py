"""Compiled transform operators (``kiln.op.compute_transform*``) against the reference interpreter.

Every case becomes one fused function of a single library built once per file. Integer and bool
results must match bit for bit; float results of pure data movement too (tolerance 0), float
contractions (``einsum``) within rtol 1e-5.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from _compute_native import Case, check_case, random_array, run_cases, var
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay, te
from kiln.op.compute_transform import reshape_tensor
from kiln.op.registry import all_ops
from kiln.te.dag import ComputeDAG
from kiln.te.interp import run_prim_func
from kiln.te.lower import lower

FAMILY_MODULES = ("kiln.op.transform", "kiln.op.transform_fill", "kiln.op.transform_index",
                  "kiln.op.transform_layout", "kiln.op.transform_math", "kiln.op.transform_scatter")

rng = np.random.default_rng(0)
CASES: dict[str, Case] = {}


def case(name: str, fn: Callable[..., Any], rtol: float = 0.0, **arrays: np.ndarray) -> None:
    """Register ``fn(*vars)`` on ``arrays`` (one relay variable per keyword, in order)."""
    CASES[name] = Case(lambda: fn(*[var(k, v) for k, v in arrays.items()]), arrays, rtol=rtol,
                       atol=0.0)


def data(shape: tuple[int, ...], dtype: str = "float32", low: int = -20, high: int = 20) -> np.ndarray:
    return random_array(rng, shape, dtype, low, high)


# --- reshape family, transpose, concatenate, stack, split ------------------------------------
for dtype in ("float32", "int32", "bool", "float16"):
    x = data((2, 3, 4, 5), dtype)
    for n, shape in enumerate([(6, 20), (-1,), (2, 0, -1), (4, 3, 10), (2, 3, 20, 1), (120,)]):
        case(f"reshape-{dtype}-{n}", lambda a, s=shape: relay.reshape(a, s), x=x)
    case(f"transpose-{dtype}", lambda a: relay.transpose(a, (2, 0, 3, 1)), x=x)
    case(f"transpose-rev-{dtype}", lambda a: relay.transpose(a), x=x)
    case(f"split-{dtype}", lambda a: relay.split(a, (1, 3), axis=-1).astuple(), x=x)
x = data((1, 7, 1, 3))
case("reshape-specials", lambda a: relay.reshape(a, (0, -4, 7, 1, -2)), x=x)
case("reshape_like", lambda a, b: relay.reshape_like(a, b, lhs_begin=1, lhs_end=3, rhs_end=1),
     x=x, like=data((7, 2)))
case("squeeze-all", lambda a: relay.squeeze(a), x=x)
case("squeeze-axis", lambda a: relay.squeeze(a, axis=(-2,)), x=x)
case("expand_dims", lambda a: relay.expand_dims(a, 1, num_newaxis=2), x=x)
case("expand_dims-neg", lambda a: relay.expand_dims(a, -1), x=x)
case("split-sections", lambda a: relay.split(a, 3, axis=0).astuple(), x=data((9, 5), "int8"))
case("split-empty", lambda a: relay.split(a, (0, 2, 2), axis=1).astuple(), x=data((3, 5)))
for axis in (0, 1, -1):
    parts = [data((3, 4, 5)), data((3, 4, 5)), data((3, 4, 5))]
    case(f"stack-{axis}", lambda a, b, c, ax=axis: relay.stack([a, b, c], ax),
         a=parts[0], b=parts[1], c=parts[2])
for axis, shapes in ((0, [(2, 5), (3, 5), (1, 5)]), (1, [(3, 1), (3, 7), (3, 0), (3, 17)]),
                     (-1, [(2, 2, 9), (2, 2, 9)])):
    arrays = {f"x{k}": data(s, "int32") for k, s in enumerate(shapes)}
    case(f"concatenate-{axis}", lambda *vs, ax=axis: relay.concatenate(list(vs), ax), **arrays)

# --- layout ----------------------------------------------------------------------------------
for src, dst, shape in (("NCHW", "NCHW8c", (1, 16, 3, 5)), ("NCHW", "NCHW4c", (2, 6, 3, 3)),
                        ("NCHW8c", "NCHW", (1, 2, 3, 5, 8)), ("NCHW4c", "NCHW8c", (1, 3, 2, 2, 4)),
                        ("NCHW", "NHWC", (2, 3, 4, 5)), ("OIHW", "OIHW4i8o", (9, 6, 3, 3))):
    case(f"layout_transform-{src}-{dst}", lambda a, s=src, d=dst: relay.layout_transform(a, s, d),
         x=data(shape))
case("shape_of", lambda a: relay.shape_of(a, "int64"), x=data((2, 0, 7)))
case("ndarray_size", lambda a: relay.ndarray_size(a, "int32"), x=data((2, 3, 7)))

# --- slicing and indexing --------------------------------------------------------------------
x = data((5, 7, 9))
for n, (b, e, s, axes, mode) in enumerate([
        ((1, 0, 2), (4, 7, 9), (1, 2, 3), None, "end"),
        ((-1,), (-6,), (-2,), None, "end"),
        ((0, 9), (100, -100), (1, -1), (1, 2), "end"),
        ((1, 2), (2, -1), None, None, "size"),
        ((3,), (3,), (1,), (0,), "end")]):
    case(f"strided_slice-{n}", lambda a, b=b, e=e, s=s, ax=axes, m=mode: relay.strided_slice(
        a, b, e, s, axes=ax, slice_mode=m), x=x)
case("strided_slice-bool", lambda a: relay.strided_slice(a, (1,), (None,), (2,), axes=(1,)),
     x=data((3, 8), "bool"))
case("strided_slice-int8", lambda a: relay.strided_slice(a, (-1, 0), (0, 5), (-1, 2)),
     x=data((4, 6), "int8"))
case("slice_like", lambda a, b: relay.slice_like(a, b, axes=(0, 2)), x=x, like=data((2, 1, 4)))
for mode in ("clip", "wrap", "fast"):
    low = -7 if mode != "clip" else -20
    high = 7 if mode == "fast" else 20
    idx = data((3, 4), "int64", low, high)
    case(f"take-{mode}-axis1", lambda a, i, m=mode: relay.take(a, i, axis=1, mode=m), x=x, i=idx)
    flat = data((6,), "int32", -300 if mode != "fast" else -315, 315)
    case(f"take-{mode}-flat", lambda a, i, m=mode: relay.take(a, i, mode=m), x=x, i=flat)
idx = data((5, 4), "int32", -7, 7)
case("take-uint8", lambda a, i: relay.take(a, i, axis=0), x=data((5, 3), "float16"),
     i=data((7,), "uint8", 0, 9))
case("take-batch", lambda a, i: relay.take(a, i, axis=1, batch_dims=1), x=x, i=idx)
case("gather-axis1", lambda a, i: relay.gather(a, 1, i), x=x, i=data((4, 3, 9), "int64", -7, 7))
case("gather-axis0", lambda a, i: relay.gather(a, 0, i), x=x, i=data((5, 7, 2), "int32", -5, 5))
case("gather-uint16", lambda a, i: relay.gather(a, 0, i), x=data((4, 3), "bool"),
     i=data((6, 3), "uint16", 0, 4))
case("gather_nd", lambda a, i: relay.gather_nd(a, i), x=x, i=data((2, 3, 4), "int32", -5, 5))
case("gather_nd-batch", lambda a, i: relay.gather_nd(a, i, batch_dims=1), x=x,
     i=data((1, 5, 6), "int64", -7, 7))
for axis in (-1, 0, 1):
    case(f"one_hot-{axis}", lambda i, on, off, ax=axis: relay.one_hot(i, on, off, 5, ax, "float32"),
         i=data((3, 4), "int32", -1, 6), on=np.array(2.5, "float32"), off=np.array(-1.0, "float32"))
case("one_hot-int", lambda i, on, off: relay.one_hot(i, on, off, 4, -1, "int8"),
     i=data((7,), "int64", 0, 4), on=np.array(3, "int8"), off=np.array(0, "int8"))
case("unravel_index", lambda i, s: relay.unravel_index(i, s),
     i=data((11,), "int64", -60, 60), s=np.array([3, 4, 5], "int64"))
case("unravel_index-0d", lambda i, s: relay.unravel_index(i, s),
     i=np.array(17, "int32"), s=np.array([2, 3, 4], "int32"))

# --- scatters: duplicate indices, every reduction ----------------------------------------------
for mode in ("update", "add", "mul", "min", "max"):
    for dtype in ("float32", "int32"):
        x = data((4, 5, 6), dtype, -3, 4)
        idx = data((4, 3, 6), "int64", -5, 5)
        upd = data((4, 3, 6), dtype, -3, 4)
        case(f"scatter_elements-{mode}-{dtype}", lambda a, i, u, m=mode: relay.scatter_elements(
            a, i, u, axis=1, reduction=m), x=x, i=idx, u=upd)
        x2 = data((6, 5, 3), dtype, -3, 4)
        idx2 = data((2, 4, 2), "int32", -5, 5)
        upd2 = data((4, 2, 3), dtype, -3, 4)
        case(f"scatter_nd-{mode}-{dtype}", lambda a, i, u, m=mode: relay.scatter_nd(a, i, u, m),
             x=x2, i=idx2, u=upd2)
case("scatter_elements-axis0", lambda a, i, u: relay.scatter_elements(a, i, u, axis=0),
     x=data((5, 3)), i=data((2, 2), "int32", -5, 5), u=data((2, 2)))
case("scatter_nd-single", lambda a, i, u: relay.scatter_nd(a, i, u, "add"),
     x=data((4, 3)), i=np.array([-2], "int64"), u=data((3,)))

# --- fills, broadcasting, repeats ------------------------------------------------------------
for dtype in ("float32", "int32", "bool"):
    x = data((3, 1, 5), dtype)
    case(f"broadcast_to-{dtype}", lambda a: relay.broadcast_to(a, (2, 3, 4, 5)), x=x)
    case(f"tile-{dtype}", lambda a: relay.tile(a, (2, 1, 3, 2)), x=x)
    case(f"repeat-{dtype}", lambda a: relay.repeat(a, 3, axis=-1), x=x)
    case(f"reverse-{dtype}", lambda a: relay.reverse(a, axis=2), x=x)
    case(f"zeros_like-{dtype}", lambda a: relay.zeros_like(a), x=x)
    case(f"ones_like-{dtype}", lambda a: relay.ones_like(a), x=x)
x = data((3, 1, 5))
case("broadcast_to_like", lambda a, b: relay.broadcast_to_like(a, b), x=x, like=data((4, 3, 7, 5)))
case("tile-short-reps", lambda a: relay.tile(a, (3,)), x=x)
case("repeat-flat", lambda a: relay.repeat(a, 2, axis=None), x=x)
case("reverse-all", lambda a: relay.reverse(a, axis=None), x=x)
for seq, batch in ((1, 0), (0, 2)):
    x = data((4, 6, 3), "int32")
    lengths = np.array([0, 1, 3, 9, 6, 2][: x.shape[batch]], "int64")
    case(f"reverse_sequence-{seq}-{batch}", lambda a, n, s=seq, b=batch: relay.reverse_sequence(
        a, n, seq_axis=s, batch_axis=b), x=x, n=lengths)
for n, (start, stop, step, dtype) in enumerate([(0, 37, 1, "int32"), (-3.5, 4.0, 0.25, "float32"),
                                                (10, -5, -3, "int64"), (1.0, 2.0, 0.1, "float64"),
                                                (5, 5, 1, "int32")]):
    case(f"arange-{n}", lambda s=start, e=stop, d=step, t=dtype: relay.arange(
        relay.const(s, t), relay.const(e, t), relay.const(d, t), dtype=t))
case("full", lambda v: relay.full(v, (3, 17), "float32"), v=np.array(2.5, "float32"))
case("full-cast", lambda v: relay.full(v, (2, 9), "int32"), v=np.array(-7.75, "float32"))
case("full_like", lambda a, v: relay.full_like(a, v), x=data((5, 3), "int8"),
     v=np.array(9, "int8"))
case("zeros", lambda: relay.zeros((4, 33), "float32"))
case("ones", lambda: relay.ones((2, 3), "int64"))
for indexing in ("ij", "xy"):
    case(f"meshgrid-{indexing}", lambda a, b, c, ix=indexing: relay.meshgrid([a, b, c], ix).astuple(),
         a=data((3,)), b=data((4,)), c=data((2,)))
case("meshgrid-0d", lambda a, b: relay.meshgrid([a, b]).astuple(), a=np.array(1.5, "float32"),
     b=data((3,)))

# --- trilu, einsum, matrix_set_diag ----------------------------------------------------------
for k in (-2, 0, 3):
    for upper in (True, False):
        case(f"trilu-{k}-{upper}", lambda a, kk, u=upper: relay.trilu(a, kk, u),
             x=data((2, 5, 7), "int32"), k=np.array(k, "int64"))
for n, (eq, shapes, dtype) in enumerate([
        ("ij,jk->ik", [(3, 17), (17, 5)], "float32"),
        ("bij,bjk", [(2, 3, 4), (2, 4, 5)], "float32"),
        ("ii->i", [(4, 4)], "float32"),
        ("ii", [(5, 5)], "int32"),
        ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)], "float32"),
        ("i,j->ij", [(3,), (4,)], "int32"),
        ("bhqd,bhkd->bhqk", [(1, 2, 3, 8), (1, 2, 5, 8)], "float32"),
        ("ij->", [(3, 4)], "bool"),
        ("ij,ij->ij", [(3, 4), (3, 4)], "bool")]):
    arrays = {f"x{k}": data(s, dtype) for k, s in enumerate(shapes)}
    case(f"einsum-{n}", lambda *vs, e=eq: relay.einsum(list(vs), e), rtol=1e-5, **arrays)
for n, (shape, k, align) in enumerate([((4, 5), 0, "RIGHT_LEFT"), ((2, 4, 5), (-1, 2), "RIGHT_LEFT"),
                                       ((3, 6, 4), (-2, 1), "LEFT_RIGHT"), ((5, 3), 1, "LEFT_LEFT"),
                                       ((4, 4), (-3, 3), "RIGHT_RIGHT")]):
    k1, k2 = (k, k) if isinstance(k, int) else k
    rows, cols = shape[-2:]
    length = min(rows + min(k2, 0), cols - max(k1, 0))
    band = (k2 - k1 + 1,) if k1 != k2 else ()
    case(f"matrix_set_diag-{n}", lambda a, d, kk=k, al=align: relay.matrix_set_diag(a, d, kk, al),
         x=data(shape, "int32"), d=data((*shape[:-2], *band, length), "int32"))


@pytest.fixture(scope="module")
def compiled() -> dict[str, Case]:
    return dict(run_cases(CASES))


@pytest.mark.parametrize("name", sorted(CASES))
def test_transform_matches_reference(compiled: dict[str, Case], name: str) -> None:
    check_case(compiled[name])


def test_every_transform_has_a_compute() -> None:
    family = [name for name, op in all_ops().items()
              if inspect.getmodule(op.reference).__name__ in FAMILY_MODULES]
    assert len(family) >= 37
    assert [name for name in family if all_ops()[name].compute is None] == []


@st.composite
def _reshapes(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """An input shape and an output shape with the same element count (size-1 dims included)."""
    factors = draw(st.lists(st.sampled_from([1, 2, 3, 5]), min_size=0, max_size=5))

    def shape() -> list[int]:
        order = draw(st.permutations(factors))
        dims: list[int] = []
        for f in order:
            if dims and draw(st.booleans()):
                dims[-1] *= f
            else:
                dims.append(f)
        for _ in range(draw(st.integers(0, 2))):
            dims.insert(draw(st.integers(0, len(dims))), 1)
        return dims

    return shape(), shape()


@settings(max_examples=60, deadline=None)
@given(_reshapes())
def test_reshape_coordinates_match_numpy(shapes: tuple[list[int], list[int]]) -> None:
    # The grouped ravel/unravel of reshape, run by the loop-IR interpreter (no C compiler).
    in_shape, out_shape = shapes
    x = te.placeholder(in_shape, "int32", "x")
    y = reshape_tensor(x, out_shape)
    data = np.arange(int(np.prod(in_shape)), dtype="int32").reshape(in_shape)
    out = np.zeros(out_shape, "int32")
    run_prim_func(lower(ComputeDAG([x, y]), args=[x, y]), [data, out])
    np.testing.assert_array_equal(out, data.reshape(out_shape))
