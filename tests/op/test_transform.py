"""Transform operators: reference kernels vs onnxruntime one-node models and NumPy formulas,
Hypothesis checks of the shape relations, and the type errors' messages."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _oracle_b import rand, read_tvm_params, run_kiln, run_onnx
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.errors import KilnError, KilnTypeError
from kiln.transform.infer_type import infer_expr_type

DTYPES = ["float32", "int64", "bool"]
I64 = np.int64


def _ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=I64)


def _type_error(expr) -> str:
    with pytest.raises(KilnTypeError) as info:
        infer_expr_type(expr.astuple() if isinstance(expr, relay.TupleWrapper) else expr)
    return str(info.value)


# --- reshape family ----------------------------------------------------------------------------

@pytest.mark.parametrize("shape,newshape", [((2, 3, 4), (4, -1)), ((2, 3, 4), (0, -1)), ((2, 3, 4), (-1,)),
                                            ((2, 3, 4), (0, 0, 4)), ((6,), (2, 1, 3)), ((1, 6), (3, 2))])
@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_vs_onnxruntime(rng, shape, newshape, dtype):
    x = rand(rng, shape, dtype)
    got = run_kiln(lambda v: relay.reshape(v, newshape), [x])
    np.testing.assert_array_equal(got, run_onnx("Reshape", [x, _ints(*newshape)], [dtype])[0])


def test_reshape_allowzero_vs_onnxruntime():
    x = np.zeros((0, 3), dtype=np.float32)
    got = run_kiln(lambda v: relay.reshape(v, (3, 0), allowzero=True), [x])
    want = run_onnx("Reshape", [x, _ints(3, 0)], ["float32"], opset=14, allowzero=1)[0]
    assert got.shape == want.shape == (3, 0)


@st.composite
def _reshape_plans(draw):
    """An input shape, a newshape with special codes, and the output shape they must give."""
    dims = st.integers(1, 4)
    ishape, codes, oshape = [], [], []
    has_infer = False
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["copy", "keep", "merge", "split", "infer"]))
        if kind == "infer" and has_infer:
            kind = "keep"
        if kind in ("copy", "keep", "infer"):
            d = draw(dims)
            ishape.append(d)
            oshape.append(d)
            codes.append({"copy": 0, "keep": d, "infer": -1}[kind])
            has_infer |= kind == "infer"
        elif kind == "merge":
            a, b = draw(dims), draw(dims)
            ishape += [a, b]
            oshape.append(a * b)
            codes.append(-3)
        else:
            a, b = draw(dims), draw(dims)
            ishape.append(a * b)
            oshape += [a, b]
            codes += [-4, *draw(st.sampled_from([[a, b], [-1, b], [a, -1]]))]
    if draw(st.booleans()):
        rest = draw(st.lists(dims, max_size=2))
        ishape += rest
        oshape += rest
        codes.append(-2)
    return tuple(ishape), tuple(codes), tuple(oshape)


@given(plan=_reshape_plans())
@settings(max_examples=80, deadline=None)
def test_reshape_special_codes(plan):
    ishape, codes, oshape = plan
    x = np.arange(int(np.prod(ishape)), dtype=np.int32).reshape(ishape)
    got = run_kiln(lambda v: relay.reshape(v, codes), [x])
    assert got.shape == oshape
    np.testing.assert_array_equal(got, x.reshape(oshape))


def test_reshape_error_names_both_shapes():
    x = relay.var("x", shape=(2, 3))
    msg = _type_error(relay.reshape(x, (4, 2)))
    assert "(2, 3)" in msg and "(4, 2)" in msg and "8 elements" in msg and "6" in msg
    assert "more than one dimension is -1" in _type_error(relay.reshape(x, (-1, -1)))
    with pytest.raises(KilnTypeError, match="must be a constant"):
        relay.reshape(x, relay.shape_of(x))


def test_reshape_accepts_a_constant_newshape(rng):
    x = rand(rng, (2, 6), "float32")
    got = run_kiln(lambda v: relay.reshape(v, relay.const(np.array([3, 4]))), [x])
    np.testing.assert_array_equal(got, x.reshape(3, 4))


@pytest.mark.parametrize("like_shape,lhs,rhs,want", [((3, 8), (0, None), (0, None), (3, 8)),
                                                   ((5, 6, 2, 9), (1, 3), (1, 3), (2, 6, 2)),
                                                   ((12, 5), (-2, None), (0, 1), (2, 12))])
def test_reshape_like_vs_numpy(rng, like_shape, lhs, rhs, want):
    x = rand(rng, (2, 3, 4), "float32")
    like = np.zeros(like_shape, np.float32)
    got = run_kiln(lambda v, w: relay.reshape_like(v, w, lhs[0], lhs[1], rhs[0], rhs[1]), [x, like])
    np.testing.assert_array_equal(got, x.reshape(want))


@pytest.mark.parametrize("shape,perm", [((2, 3, 4), None), ((2, 3, 4), (1, 0, 2)), ((2, 3, 4), (2, 0, 1)),
                                        ((5,), None), ((1, 2, 3, 4), (0, 3, 1, 2))])
@pytest.mark.parametrize("dtype", DTYPES)
def test_transpose_vs_onnxruntime(rng, shape, perm, dtype):
    x = rand(rng, shape, dtype)
    got = run_kiln(lambda v: relay.transpose(v, perm), [x])
    attrs = {} if perm is None else {"perm": list(perm)}
    np.testing.assert_array_equal(got, run_onnx("Transpose", [x], [dtype], **attrs)[0])


def test_transpose_negative_axes_and_errors(rng):
    x = rand(rng, (2, 3, 4), "int32")
    np.testing.assert_array_equal(run_kiln(lambda v: relay.transpose(v, (-1, 0, 1)), [x]),
                                  x.transpose(2, 0, 1))
    v = relay.var("v", shape=(2, 3, 4))
    assert "repeats an axis" in _type_error(relay.transpose(v, (0, 0, 1)))
    assert "has 2 elements" in _type_error(relay.transpose(v, (0, 1)))


@pytest.mark.parametrize("shape,axes", [((1, 3, 1, 2), None), ((1, 3, 1, 2), (0,)), ((1, 3, 1, 2), (2, -4)),
                                        ((3, 1), (-1,))])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_squeeze_vs_onnxruntime(rng, shape, axes, dtype):
    x = rand(rng, shape, dtype)
    got = run_kiln(lambda v: relay.squeeze(v, axes), [x])
    inputs = [x] if axes is None else [x, _ints(*axes)]
    np.testing.assert_array_equal(got, run_onnx("Squeeze", inputs, [dtype])[0])
    assert "has size 3, not 1" in _type_error(relay.squeeze(relay.var("v", shape=(1, 3)), axis=1))


@pytest.mark.parametrize("shape,axis", [((2, 3), 0), ((2, 3), 2), ((2, 3), -1), ((2, 3), -3), ((), 0)])
def test_expand_dims_vs_onnxruntime(rng, shape, axis):
    x = rand(rng, shape, "float32")
    got = run_kiln(lambda v: relay.expand_dims(v, axis), [x])
    np.testing.assert_array_equal(got, run_onnx("Unsqueeze", [x, _ints(axis)], ["float32"])[0])


@pytest.mark.parametrize("axis,num", [(1, 2), (-1, 3), (0, 0)])
def test_expand_dims_several_axes(rng, axis, num):
    x = rand(rng, (2, 3), "int32")
    got = run_kiln(lambda v: relay.expand_dims(v, axis, num), [x])
    pivot = axis if axis >= 0 else x.ndim + axis + 1
    assert got.shape == x.shape[:pivot] + (1,) * num + x.shape[pivot:]
    np.testing.assert_array_equal(got.reshape(x.shape), x)


# --- concatenate, stack, split ---------------------------------------------------------------

@pytest.mark.parametrize("shapes,axis", [([(2, 3), (2, 5)], 1), ([(1, 4), (3, 4), (2, 4)], 0),
                                         ([(2, 3, 1), (2, 3, 2)], -1), ([(4,), (0,)], 0)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_concatenate_vs_onnxruntime(rng, shapes, axis, dtype):
    xs = [rand(rng, s, dtype) for s in shapes]
    got = run_kiln(lambda *vs: relay.concatenate(list(vs), axis), xs)
    np.testing.assert_array_equal(got, run_onnx("Concat", xs, [dtype], axis=axis)[0])


def test_concatenate_error_names_the_field():
    a, b = relay.var("a", shape=(2, 3)), relay.var("b", shape=(4, 3))
    c = relay.var("c", shape=(2, 4))
    msg = _type_error(relay.concatenate([a, c, b], axis=1))
    assert "field 2" in msg and "(4, 3)" in msg and "dimension 0 differs" in msg
    msg = _type_error(relay.concatenate([a, relay.var("d", shape=(2, 3), dtype="int32")], 0))
    assert "field 1 has dtype int32" in msg


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack_vs_numpy(rng, axis):
    xs = [rand(rng, (2, 3), "float32") for _ in range(3)]
    got = run_kiln(lambda *vs: relay.stack(vs, axis), xs)
    np.testing.assert_array_equal(got, np.stack(xs, axis=axis))


def test_concatenate_and_stack_of_a_thousand_tensors(rng):
    """An LSTM's outputs over 1000 steps: the compute selects its input by a balanced tree of
    comparisons (a chain 1000 deep overflowed Python's recursion limit while compiling)."""
    xs = [rand(rng, (1, 3), "float32") for _ in range(1000)]
    got = run_kiln(lambda *vs: relay.concatenate(list(vs), 0), xs)
    np.testing.assert_array_equal(got, np.concatenate(xs, 0))
    got = run_kiln(lambda *vs: relay.stack(vs, 1), xs)
    np.testing.assert_array_equal(got, np.stack(xs, 1))


@pytest.mark.parametrize("shape,spec,axis", [((6, 4), 3, 0), ((3, 8), 2, -1), ((3, 8), (1, 5), 1),
                                             ((5, 2), (2,), 0), ((4,), (0, 4), 0)])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_split_vs_onnxruntime(rng, shape, spec, axis, dtype):
    x = rand(rng, shape, dtype)
    got = run_kiln(lambda v: relay.split(v, spec, axis), [x])
    dim = shape[axis]
    bounds = [dim // spec * i for i in range(spec + 1)] if isinstance(spec, int) else [0, *spec, dim]
    sizes = _ints(*np.diff(bounds))
    want = run_onnx("Split", [x, sizes], [dtype] * len(sizes), axis=axis)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@given(shape=st.lists(st.integers(0, 6), min_size=1, max_size=3), data=st.data())
@settings(max_examples=60, deadline=None)
def test_split_shapes_match_numpy(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    dim = shape[axis]
    if data.draw(st.booleans()) and dim:
        spec = data.draw(st.sampled_from([d for d in range(1, dim + 1) if dim % d == 0]))
    else:
        spec = tuple(sorted(data.draw(st.lists(st.integers(0, dim), max_size=3))))
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    got = run_kiln(lambda v: relay.split(v, spec, axis), [x])
    want = np.split(x, spec if isinstance(spec, int) else list(spec), axis=axis)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_split_errors():
    x = relay.var("x", shape=(5, 2))
    assert "3 equal sections do not divide dimension of size 5" in _type_error(relay.split(x, 3))
    assert "ascending" in _type_error(relay.split(x, (3, 1)))


# --- slicing -------------------------------------------------------------------------------------

SLICES = [
    ((5, 6), (1, 2), (4, 5), (1, 1), None),
    ((5, 6), (-1, 0), (-6, 6), (-1, 2), None),
    ((5, 6), (0,), (100,), (2,), (1,)),
    ((5, 6), (-100, 10), (100, -100), (1, -1), (0, 1)),
    ((2, 3, 4), (1, -1), (2, 0), (1, -2), (0, 2)),
    ((4, 4), (3,), (-5,), (-1,), (0,)),
]


@pytest.mark.parametrize("shape,begin,end,steps,axes", SLICES)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_strided_slice_vs_onnxruntime(rng, shape, begin, end, steps, axes, dtype):
    x = rand(rng, shape, dtype)
    got = run_kiln(lambda v: relay.strided_slice(v, begin, end, steps, axes=axes), [x])
    axes_in = _ints(*(axes if axes is not None else range(len(begin))))
    want = run_onnx("Slice", [x, _ints(*begin), _ints(*end), axes_in, _ints(*steps)], [dtype])[0]
    np.testing.assert_array_equal(got, want)


_bound = st.one_of(st.none(), st.integers(-8, 8))


@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=4), data=st.data())
@settings(max_examples=150, deadline=None)
def test_strided_slice_matches_numpy_slicing(shape, data):
    ndim = len(shape)
    n = data.draw(st.integers(1, ndim))
    begin = data.draw(st.lists(_bound, min_size=n, max_size=n))
    end = data.draw(st.lists(_bound, min_size=n, max_size=n))
    steps = data.draw(st.lists(st.integers(-3, 3).filter(bool), min_size=n, max_size=n))
    use_axes = data.draw(st.booleans())
    axes = data.draw(st.permutations(range(ndim)))[:n] if use_axes else list(range(n))
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    index = [slice(None)] * ndim
    for a, b, e, s in zip(axes, begin, end, steps):
        index[a] = slice(b, e, s)
    got = run_kiln(lambda v: relay.strided_slice(v, begin, end, steps, axes=axes if use_axes else None), [x])
    np.testing.assert_array_equal(got, x[tuple(index)])
    assert got.shape == x[tuple(index)].shape


@pytest.mark.parametrize("begin,size,want", [((0, 1), (2, -1), np.s_[0:2, 1:]),
                                             ((-2, 0), (1, 3), np.s_[-2:-1, 0:3]),
                                             ((1,), (10,), np.s_[1:11])])
def test_strided_slice_size_mode(rng, begin, size, want):
    x = rand(rng, (4, 5), "float32")
    got = run_kiln(lambda v: relay.strided_slice(v, begin, size, slice_mode="size"), [x])
    np.testing.assert_array_equal(got, x[want])


def test_strided_slice_errors():
    x = relay.var("x", shape=(3, 4))
    assert "stride of axis 0 is 0" in _type_error(relay.strided_slice(x, [0], [2], [0]))
    assert "more entries than the 2-d data" in _type_error(relay.strided_slice(x, [0, 0, 0], [1, 1, 1]))
    with pytest.raises(KilnTypeError, match="strided_slice: begin must be a constant"):
        relay.strided_slice(x, relay.shape_of(x), [1, 1])


@pytest.mark.parametrize("axes", [None, (1,), (0, -2)])
def test_slice_like_vs_numpy(rng, axes):
    x = rand(rng, (4, 5, 6), "float32")
    like = np.zeros((2, 3), np.float32)
    got = run_kiln(lambda v, w: relay.slice_like(v, w, axes), [x, like])
    chosen = [0, 1] if axes is None else [a % 3 for a in axes]
    want = x[tuple(slice(0, like.shape[a]) if a in chosen else slice(None) for a in range(3))]
    np.testing.assert_array_equal(got, want)


# --- take, gather, gather_nd ---------------------------------------------------------------------

@pytest.mark.parametrize("shape,ishape,axis", [((5, 4), (3,), 0), ((5, 4), (2, 3), 1), ((2, 3, 4), (), -1),
                                               ((6,), (2, 2), 0)])
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_take_fast_vs_onnx_gather(rng, shape, ishape, axis, dtype):
    x = rand(rng, shape, dtype)
    n = shape[axis]
    idx = np.asarray(rng.integers(-n, n, ishape), dtype=np.int64)
    got = run_kiln(lambda v, i: relay.take(v, i, axis=axis, mode="fast"), [x, idx])
    np.testing.assert_array_equal(got, run_onnx("Gather", [x, idx], [dtype], axis=axis)[0])


@pytest.mark.parametrize("mode", ["clip", "wrap"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_take_out_of_range_modes_vs_numpy(rng, mode, axis):
    x = rand(rng, (4, 5), "float32")
    idx = rng.integers(-12, 12, (3, 2)).astype(np.int32)
    got = run_kiln(lambda v, i: relay.take(v, i, axis=axis, mode=mode), [x, idx])
    np.testing.assert_array_equal(got, np.take(x, idx, axis=axis, mode=mode))


def test_out_of_range_indices_are_errors():
    x = np.zeros((4,), np.float32)
    with pytest.raises(KilnError, match="index 4 is out of range for a dimension of size 4"):
        run_kiln(lambda v, i: relay.take(v, i, axis=0, mode="fast"), [x, np.array([4], np.int32)])
    with pytest.raises(KilnError, match="gather: index -5 is out of range"):
        run_kiln(lambda v, i: relay.gather(v, 0, i), [x, np.array([-5], np.int64)])
    empty = relay.var("e", shape=(0, 3))
    assert "empty axis" in _type_error(relay.take(empty, relay.const([0]), axis=0))


@pytest.mark.parametrize("batch_dims,axis", [(1, 1), (1, 2), (2, 2)])
def test_take_batch_dims_vs_loop(rng, batch_dims, axis):
    x = rand(rng, (2, 3, 4, 5), "float32")
    idx = rng.integers(0, x.shape[axis], (*(2, 3, 2)[:batch_dims], 3)).astype(np.int32)
    got = run_kiln(lambda v, i: relay.take(v, i, axis=axis, batch_dims=batch_dims), [x, idx])
    want = np.empty(got.shape, np.float32)
    for b in itertools.product(*[range(d) for d in x.shape[:batch_dims]]):
        want[b] = np.take(x[b], idx[b], axis=axis - batch_dims)
    np.testing.assert_array_equal(got, want)


@given(dshape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
       ishape=st.lists(st.integers(0, 3), max_size=2), data=st.data())
@settings(max_examples=60, deadline=None)
def test_take_shape_relation(dshape, ishape, data):
    axis = data.draw(st.one_of(st.none(), st.integers(-len(dshape), len(dshape) - 1)))
    x = np.arange(int(np.prod(dshape)), dtype=np.float32).reshape(dshape)
    n = x.size if axis is None else dshape[axis]
    idx = np.asarray(data.draw(st.lists(st.integers(0, n - 1), min_size=int(np.prod(ishape)),
                                        max_size=int(np.prod(ishape)))), dtype=np.int64).reshape(ishape)
    got = run_kiln(lambda v, i: relay.take(v, i, axis=axis), [x, idx])
    np.testing.assert_array_equal(got, np.take(x, idx, axis=axis))


@pytest.mark.parametrize("shape,ishape,axis", [((3, 4), (2, 4), 0), ((3, 4), (3, 6), 1),
                                               ((2, 3, 4), (2, 3, 2), -1), ((3, 4), (2, 3), 1)])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_gather_vs_onnx_gather_elements(rng, shape, ishape, axis, dtype):
    x = rand(rng, shape, dtype)
    n = shape[axis]
    idx = rng.integers(-n, n, ishape).astype(np.int64)
    got = run_kiln(lambda v, i: relay.gather(v, axis, i), [x, idx])
    np.testing.assert_array_equal(got, run_onnx("GatherElements", [x, idx], [dtype], axis=axis)[0])


@pytest.mark.parametrize("shape,ishape,batch_dims", [((3, 4, 5), (4, 2), 0), ((3, 4, 5), (2, 1), 0),
                                                     ((3, 4, 5), (2, 2, 3), 0), ((2, 4, 5), (2, 3, 1), 1),
                                                     ((2, 3, 4, 5), (2, 3, 2), 2)])
def test_gather_nd_vs_onnxruntime(rng, shape, ishape, batch_dims):
    x = rand(rng, shape, "float32")
    m = ishape[-1]
    limits = np.array(shape[batch_dims:batch_dims + m])
    idx = (rng.integers(-1000, 1000, ishape) % limits - (rng.random(ishape) > 0.5) * limits).astype(np.int64)
    onnx_out = run_onnx("GatherND", [x, idx], ["float32"], batch_dims=batch_dims)[0]
    relay_idx = np.moveaxis(idx, -1, 0)  # relay puts the index tuple first
    got = run_kiln(lambda v, i: relay.gather_nd(v, i, batch_dims=batch_dims), [x, relay_idx])
    np.testing.assert_array_equal(got, onnx_out)


# --- scatter -------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["update", "add", "mul", "min", "max"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_scatter_elements_vs_onnxruntime(rng, reduction, axis, dtype):
    x = rand(rng, (4, 5), dtype)
    n = x.shape[axis]
    ishape = (3, 5) if axis == 0 else (4, 3)
    if reduction == "update":  # distinct targets per line: ONNX leaves duplicates unspecified
        perm = np.argsort(rng.random((n, 5) if axis == 0 else (4, n)), axis=axis)
        idx = np.take(perm, range(3), axis=axis) - n * (rng.random(ishape) > 0.5)
    else:
        idx = rng.integers(-n, n, ishape)
    idx = idx.astype(np.int64)
    upd = rand(rng, ishape, dtype)
    got = run_kiln(lambda v, i, u: relay.scatter_elements(v, i, u, axis, reduction), [x, idx, upd])
    onnx_red = "none" if reduction == "update" else reduction
    want = run_onnx("ScatterElements", [x, idx, upd], [dtype], axis=axis, reduction=onnx_red)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("reduction", ["update", "add", "mul", "min", "max"])
@pytest.mark.parametrize("dshape,ishape", [((4, 5), (3, 1)), ((4, 5), (2, 2)), ((2, 3, 4), (2, 2, 2))])
def test_scatter_nd_vs_onnxruntime(rng, reduction, dshape, ishape):
    x = rand(rng, dshape, "float32")
    m = ishape[-1]
    if reduction == "update":
        flat = rng.permutation(int(np.prod(dshape[:m])))[:int(np.prod(ishape[:-1]))]
        idx = np.stack(np.unravel_index(flat, dshape[:m]), axis=-1).reshape(ishape)
    else:
        idx = rng.integers(0, np.array(dshape[:m]), ishape)
    idx = idx.astype(np.int64)
    upd = rand(rng, ishape[:-1] + dshape[m:], "float32")
    onnx_red = "none" if reduction == "update" else reduction
    want = run_onnx("ScatterND", [x, idx, upd], ["float32"], reduction=onnx_red)[0]
    got = run_kiln(lambda v, i, u: relay.scatter_nd(v, i, u, reduction), [x, np.moveaxis(idx, -1, 0), upd])
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_scatter_errors():
    x, u = relay.var("x", shape=(4, 5)), relay.var("u", shape=(3, 5))
    i = relay.var("i", shape=(3, 5), dtype="float32")
    assert "indices must be an integer tensor" in _type_error(relay.scatter_elements(x, i, u))
    i = relay.var("i", shape=(1, 3), dtype="int64")
    assert "unknown reduction 'bogus'" in _type_error(relay.scatter_nd(x, i, u, "bogus"))
    assert "need (3, 5)" in _type_error(relay.scatter_nd(x, i, relay.var("w", shape=(3, 4))))


# --- broadcast, tile, repeat, reverse ----------------------------------------------------------------

@pytest.mark.parametrize("shape,target", [((3, 1), (2, 3, 4)), ((4,), (3, 4)), ((), (2, 2)),
                                          ((2, 1), (2, 1))])
@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_to_vs_onnx_expand(rng, shape, target, dtype):
    x = rand(rng, shape, dtype)
    got = run_kiln(lambda v: relay.broadcast_to(v, target), [x])
    np.testing.assert_array_equal(got, run_onnx("Expand", [x, _ints(*target)], [dtype])[0])
    like = np.zeros(target, np.float32)
    got = run_kiln(lambda v, w: relay.broadcast_to_like(v, w), [x, like])
    np.testing.assert_array_equal(got, np.broadcast_to(x, target))


@given(shape=st.lists(st.integers(1, 3), max_size=3), data=st.data())
@settings(max_examples=40, deadline=None)
def test_broadcast_to_shape_relation(shape, data):
    extra = data.draw(st.lists(st.integers(1, 3), max_size=2))
    target = tuple(extra) + tuple(d if data.draw(st.booleans()) or d != 1 else data.draw(st.integers(1, 3))
                                  for d in shape)
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    got = run_kiln(lambda v: relay.broadcast_to(v, target), [x])
    np.testing.assert_array_equal(got, np.broadcast_to(x, target))


def test_broadcast_to_error():
    msg = _type_error(relay.broadcast_to(relay.var("x", shape=(3, 2)), (3, 4)))
    assert "(3, 2)" in msg and "(3, 4)" in msg


@pytest.mark.parametrize("shape,reps", [((2, 3), (2, 1)), ((2, 3), (1, 3)), ((3,), (2,)),
                                        ((2, 1, 2), (1, 2, 3))])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_tile_vs_onnxruntime(rng, shape, reps, dtype):
    x = rand(rng, shape, dtype)
    got = run_kiln(lambda v: relay.tile(v, reps), [x])
    np.testing.assert_array_equal(got, run_onnx("Tile", [x, _ints(*reps)], [dtype])[0])
    got = run_kiln(lambda v: relay.tile(v, (2, *reps)), [x])
    np.testing.assert_array_equal(got, np.tile(x, (2, *reps)))


@pytest.mark.parametrize("repeats,axis", [(2, 0), (3, 1), (1, -1), (2, None)])
def test_repeat_vs_numpy(rng, repeats, axis):
    x = rand(rng, (2, 3), "int32")
    np.testing.assert_array_equal(run_kiln(lambda v: relay.repeat(v, repeats, axis), [x]),
                                  np.repeat(x, repeats, axis=axis))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_reverse_vs_numpy(rng, axis):
    x = rand(rng, (3, 4, 2), "float32")
    np.testing.assert_array_equal(run_kiln(lambda v: relay.reverse(v, axis), [x]), np.flip(x, axis))


@pytest.mark.parametrize("batch_axis,seq_axis", [(0, 1), (1, 0)])
def test_reverse_sequence_vs_onnxruntime(rng, batch_axis, seq_axis):
    x = rand(rng, (4, 4, 3), "float32")
    lengths = np.array([1, 4, 2, 3], dtype=np.int64)
    got = run_kiln(lambda v, n: relay.reverse_sequence(v, n, seq_axis, batch_axis), [x, lengths])
    want = run_onnx("ReverseSequence", [x, lengths], ["float32"], batch_axis=batch_axis,
                    time_axis=seq_axis)[0]
    np.testing.assert_array_equal(got, want)


# --- creation --------------------------------------------------------------------------------------

@pytest.mark.parametrize("start,stop,step,dtype", [(0, 10, 1, "int32"), (1, 2, 0.3, "float32"),
                                                   (10, -3, -4, "int64"), (5, 5, 1, "int32"),
                                                   (-1.5, 2.5, 0.5, "float32")])
def test_arange_vs_onnx_range(start, stop, step, dtype):
    got = run_kiln(lambda: relay.arange(start, stop, step, dtype=dtype), [])
    inputs = [np.array(v, dtype=dtype) for v in (start, stop, step)]
    want = run_onnx("Range", inputs, [dtype])[0]
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(run_kiln(lambda: relay.arange(relay.const(7)), []), np.arange(7.0))


def test_full_zeros_ones_and_likes(rng):
    x = rand(rng, (2, 3), "int32")
    got = run_kiln(lambda: relay.full(2.5, (2, 3), "float32"), [])
    np.testing.assert_array_equal(got, np.full((2, 3), 2.5))
    got = run_kiln(lambda f: relay.full(f, (4,)), [np.array(7, dtype=np.int64)])
    assert got.dtype == np.int64 and (got == 7).all()
    assert run_kiln(lambda: relay.zeros((3,), "int8"), []).dtype == np.int8
    np.testing.assert_array_equal(run_kiln(lambda: relay.ones(2, "float32"), []), np.ones(2))
    np.testing.assert_array_equal(run_kiln(lambda v: relay.full_like(v, 9), [x]), np.full_like(x, 9))
    np.testing.assert_array_equal(run_kiln(lambda v: relay.zeros_like(v), [x]), np.zeros_like(x))
    np.testing.assert_array_equal(run_kiln(lambda v: relay.ones_like(v), [x]), np.ones_like(x))
    assert "must be a scalar" in _type_error(relay.full(relay.var("f", shape=(2,)), (2,)))


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_vs_numpy(rng, indexing):
    xs = [rand(rng, (n,), "float32") for n in (2, 3, 4)]
    got = run_kiln(lambda *vs: relay.meshgrid(list(vs), indexing), xs)
    for g, w in zip(got, np.meshgrid(*xs, indexing=indexing)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("shape,depth,axis", [((3,), 5, -1), ((2, 3), 4, 0), ((2, 3), 4, 1)])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_one_hot_vs_onnxruntime(rng, shape, depth, axis, dtype):
    idx = rng.integers(0, depth, shape).astype(np.int64)
    got = run_kiln(lambda i: relay.one_hot(i, 5, -2, depth, axis, dtype), [idx])
    values = np.array([-2, 5], dtype=dtype)
    want = run_onnx("OneHot", [idx, np.array(depth, np.int64), values], [dtype], axis=axis)[0]
    np.testing.assert_array_equal(got, want)


def test_one_hot_scalar_and_negative_indices_vs_numpy():
    idx = np.array([[1, -1], [3, 0]], dtype=np.int32)
    got = run_kiln(lambda i: relay.one_hot(i, 1, 0, 4, -1, "int32"), [idx])
    np.testing.assert_array_equal(got, (idx[..., None] == np.arange(4)).astype(np.int32))
    got = run_kiln(lambda i: relay.one_hot(i, 2.0, 0.5, relay.const(3), 0, "float32"),
                   [np.array(2, dtype=np.int64)])
    np.testing.assert_array_equal(got, [0.5, 0.5, 2.0])


def test_unravel_index_vs_numpy(rng):
    dims = (3, 4, 5)
    flat = rng.integers(0, 60, (7,)).astype(np.int32)
    got = run_kiln(lambda i: relay.unravel_index(i, dims), [flat])
    np.testing.assert_array_equal(got, np.stack(np.unravel_index(flat, dims)))
    got = run_kiln(lambda i, s: relay.unravel_index(i, s), [np.array(17, np.int64), np.array(dims, np.int64)])
    np.testing.assert_array_equal(got, np.unravel_index(17, dims))


# --- layout, shape queries -----------------------------------------------------------------------------

def test_layout_transform_nchw_blocks_vs_numpy(rng):
    x = rand(rng, (2, 16, 3, 5), "float32")
    got = run_kiln(lambda v: relay.layout_transform(v, "NCHW", "NCHW8c"), [x])
    np.testing.assert_array_equal(got, x.reshape(2, 2, 8, 3, 5).transpose(0, 1, 3, 4, 2))
    back = run_kiln(lambda v: relay.layout_transform(v, "NCHW8c", "NCHW"), [got])
    np.testing.assert_array_equal(back, x)
    nhwc = run_kiln(lambda v: relay.layout_transform(v, "NCHW8c", "NHWC"), [got])
    np.testing.assert_array_equal(nhwc, x.transpose(0, 2, 3, 1))
    re4 = run_kiln(lambda v: relay.layout_transform(v, "NCHW8c", "NCHW4c"), [got])
    np.testing.assert_array_equal(re4, x.reshape(2, 4, 4, 3, 5).transpose(0, 1, 3, 4, 2))


def test_layout_transform_weights_vs_numpy(rng):
    w = rand(rng, (16, 8, 3, 3), "float32")
    got = run_kiln(lambda v: relay.layout_transform(v, "OIHW", "OIHW8i8o"), [w])
    want = w.reshape(2, 8, 1, 8, 3, 3).transpose(0, 2, 4, 5, 3, 1)
    np.testing.assert_array_equal(got, want)


def test_layout_transform_pads_a_partial_block(rng):
    x = rand(rng, (1, 3, 2, 2), "float32")
    got = run_kiln(lambda v: relay.layout_transform(v, "NCHW", "NCHW4c"), [x])
    padded = np.concatenate([x, np.zeros((1, 1, 2, 2), np.float32)], axis=1)
    np.testing.assert_array_equal(got, padded.reshape(1, 1, 4, 2, 2).transpose(0, 1, 3, 4, 2))
    back = run_kiln(lambda v: relay.layout_transform(v, "NCHW4c", "NCHW"), [got])
    np.testing.assert_array_equal(back, padded)


def test_layout_transform_matches_tvm(fixtures_dir):
    """TVM's own layout_transform outputs, from the debug dump of the opt_level-3 small network."""
    dump_file = fixtures_dir / "debug_dump" / "_tvmdbg_device_CPU_0" / "output_tensors.params"
    dump = read_tvm_params(dump_file.read_bytes())
    outputs = {key.split("____")[0]: value for key, value in dump.items()}
    data = outputs["data"]
    got = run_kiln(lambda v: relay.layout_transform(v, "NCHW", "NCHW3c"), [data])
    np.testing.assert_array_equal(got, outputs["tvmgen_default_fused_layout_transform"])
    pooled = outputs["tvmgen_default_fused_nn_max_pool2d"]
    got = run_kiln(lambda v: relay.reshape(relay.layout_transform(v, "NCHW4c", "NCHW"), (0, -1)), [pooled])
    np.testing.assert_array_equal(got, outputs["tvmgen_default_fused_layout_transform_nn_batch_flatten"])
    # the packed dense weight p2 is layout_transform(dense_weight, "NC", "NC5n")
    original = read_tvm_params((fixtures_dir / "small_params_original.params").read_bytes())
    got = run_kiln(lambda v: relay.layout_transform(v, "NC", "NC5n"), [original["dense_weight"]])
    np.testing.assert_array_equal(got, outputs["p2"])


def test_layout_transform_errors():
    x = relay.var("x", shape=(1, 8, 2, 2))
    assert "primal axes differ" in _type_error(relay.layout_transform(x, "NCHW", "NCDHW"))
    assert "does not have the 5 axes" in _type_error(relay.layout_transform(x, "NCHW8c", "NCHW"))
    assert "cannot parse layout" in _type_error(relay.layout_transform(x, "NC-HW", "NCHW"))


@pytest.mark.parametrize("shape", [(2, 3, 4), (5,), ()])
def test_shape_of_and_size_vs_onnxruntime(rng, shape):
    x = rand(rng, shape, "float32")
    got = run_kiln(lambda v: relay.shape_of(v, "int64"), [x])
    np.testing.assert_array_equal(got, run_onnx("Shape", [x], ["int64"])[0])
    assert run_kiln(lambda v: relay.shape_of(v), [x]).dtype == np.int32
    got = run_kiln(lambda v: relay.ndarray_size(v, "int64"), [x])
    np.testing.assert_array_equal(got, run_onnx("Size", [x], ["int64"])[0])


# --- trilu, einsum, matrix_set_diag -----------------------------------------------------------------

@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 3), (5, 2)])
@pytest.mark.parametrize("k", [0, 1, -2, 7])
@pytest.mark.parametrize("upper", [True, False])
def test_trilu_vs_onnxruntime(rng, shape, k, upper):
    x = rand(rng, shape, "float32")
    got = run_kiln(lambda v: relay.trilu(v, k, upper), [x])
    want = run_onnx("Trilu", [x, np.array(k, np.int64)], ["float32"], upper=int(upper))[0]
    np.testing.assert_array_equal(got, want)


EINSUMS = [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ij,j->i", [(3, 4), (4,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ii->i", [(3, 3)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 2)]),
    ("bij->b", [(2, 3, 4)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUMS)
def test_einsum_vs_onnxruntime(rng, equation, shapes):
    xs = [rand(rng, s, "float32") for s in shapes]
    got = run_kiln(lambda *vs: relay.einsum(list(vs), equation), xs)
    want = run_onnx("Einsum", xs, ["float32"], equation=equation)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_einsum_errors():
    a, b = relay.var("a", shape=(2, 3)), relay.var("b", shape=(4, 5))
    assert "letter 'j' has size 3 in one operand and 4" in _type_error(relay.einsum([a, b], "ij,jk->ik"))
    assert "2 tensor(s)" in _type_error(relay.einsum([a, b], "ij->ji"))


def _set_diag_loop(x: np.ndarray, diag: np.ndarray, k1: int, k2: int, align: str) -> np.ndarray:
    out = x.copy()
    rows, cols = x.shape[-2:]
    max_len = min(rows + min(k2, 0), cols - max(k1, 0))
    for b in np.ndindex(x.shape[:-2]):
        for m in range(rows):
            for n in range(cols):
                d = n - m
                if not k1 <= d <= k2:
                    continue
                length = min(cols - max(d, 0), rows + min(d, 0))
                right = align.split("_")[0 if d >= 0 else 1] == "RIGHT"
                offset = max_len - length if right else 0
                pos = n - max(d, 0) + offset
                out[(*b, m, n)] = diag[(*b, pos)] if k1 == k2 else diag[(*b, k2 - d, pos)]
    return out


@pytest.mark.parametrize("k,align", [(0, "RIGHT_LEFT"), (1, "RIGHT_LEFT"), (-1, "LEFT_RIGHT"),
                                     ((-1, 1), "RIGHT_LEFT"), ((-2, 0), "LEFT_LEFT"),
                                     ((0, 2), "RIGHT_RIGHT")])
def test_matrix_set_diag_vs_loop(rng, k, align):
    x = rand(rng, (2, 4, 5), "float32")
    k1, k2 = (k, k) if isinstance(k, int) else k
    max_len = min(4 + min(k2, 0), 5 - max(k1, 0))
    dshape = (2, max_len) if k1 == k2 else (2, k2 - k1 + 1, max_len)
    diag = rand(rng, dshape, "float32")
    got = run_kiln(lambda v, d: relay.matrix_set_diag(v, d, k, align), [x, diag])
    np.testing.assert_array_equal(got, _set_diag_loop(x, diag, k1, k2, align))


def test_printed_attrs_follow_tvm_field_names():
    x = relay.var("x", shape=(2, 3))
    text = relay.Function([x], relay.strided_slice(x, [0], [1])).astext()
    assert "strided_slice(%x, begin=[0], end=[1], strides=[1], axes=None)" in text
    assert relay.take(x, relay.const(1), axis=0).attrs.keys() == ["batch_dims", "axis", "mode"]
