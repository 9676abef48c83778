"""Tensor-expression computes of the ``nn`` family (``kiln.op.nn``, ``nn_norm``, ``nn_spatial``).

Each compute follows its operator's NumPy reference:

* ``dense``/``matmul``/``batch_matmul`` are one reduction over the contracted axis (``T_matmul_NT``
  for dense, ``T_batch_matmul_NT``, ... as TVM names them), accumulating as
  :func:`~kiln.op.compute_conv.accumulate_dtype` says; a batch of 1 broadcasts.
* Activations, ``bias_add`` and ``batch_norm`` are element-wise; float16 data is computed in
  float32 and rounded once, as the reference rounds its float64 result once.
* Softmax-like ops and the normalisations (``layer_norm``, ``instance_norm``, ``group_norm``,
  ``l2_normalize``, ``lrn``) reduce in float32 (float64 for float64 data): a max/sum stage, then
  an element-wise stage. Mean and variance use two passes (sum, then sum of squared deviations),
  the biased variance, as the reference.
* ``pad`` crops negative widths first, then pads (constant, edge or reflect: reflect mirrors
  without repeating the border, like ``numpy.pad``); ``depth_to_space``/``space_to_depth`` map
  indices (DCR or CRD order) in any layout of ``NCHW``; ``upsampling`` and ``upsampling3d`` reuse
  the resize compute of :mod:`kiln.op.compute_image`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any, TypeVar

from kiln import te
from kiln.ir.types import Type
from kiln.op import nn  # noqa: F401  (the operators must be registered before their computes)
from kiln.op.compute_conv import (
    Coord,
    accumulate_dtype,
    cast_output,
    compute_dtype,
    layout_coords,
    layout_index,
    tensor_type,
)
from kiln.op.compute_elemwise import ax_compute, named_compute
from kiln.op.nn_common import Layout
from kiln.op.nn_spatial import _upsample_plan
from kiln.op.registry import get_op_def, normalize_axis
from kiln.te import expr as E
from kiln.te.expr import PrimExpr

__all__: list[str] = []

Index = tuple[PrimExpr, ...]
IndexFn = Callable[[Index, Index], Index]
ComputeFn = Callable[[list[te.Tensor], Any, Type], Any]


# --- dense, matmul, batch_matmul ---------------------------------------------------------------

def _contract(a: te.Tensor, b: te.Tensor, out_type: Type, extent: int, a_index: IndexFn,
              b_index: IndexFn, name: str, tag: str,
              axes: Sequence[str] | None = None) -> te.Tensor:
    """``out[i] = sum_k a[a_index(i, k)] * b[b_index(i, k)]`` in the accumulation dtype.

    ``axes`` names the output iterators (default ``i0, i1, ...``, as TOPI's ``nn.matmul``).
    """
    out = tensor_type(out_type, tag)
    acc = accumulate_dtype((a.dtype, b.dtype), out.dtype)
    k = te.reduce_axis((0, extent), name="k")

    def element(*i: PrimExpr) -> PrimExpr:
        kk = (k.var,)
        return te.sum(E.cast(a[a_index(i, kk)], acc) * E.cast(b[b_index(i, kk)], acc), axis=k)

    if axes is not None:
        result = named_compute(out.shape, element, axes, name=name, tag=tag)
    else:
        result = te.compute(out.shape, element, name=name, tag=tag)
    return cast_output(result, out.dtype, name)


def _dense_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    data, weight = inputs
    # TOPI's nn.dense is nn.matmul(transpose_b=True) (python/tvm/topi/nn/dense.py, TVM 0.15+):
    # T_matmul_NT(i0, i1) += (p0[i0, k]*p1[i1, k]), tag "dense"; TVM's x86 strategy picks it
    # (dense.generic) when the auto-scheduler is enabled.
    return _contract(data, weight, out_type, data.shape[-1],
                     lambda i, k: (*i[:-1], *k), lambda i, k: (i[-1], *k), "T_matmul_NT", "dense")


def _matmul_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    a, b = inputs
    ta, tb = bool(attrs.transpose_a), bool(attrs.transpose_b)
    extent = a.shape[-2] if ta else a.shape[-1]

    def a_index(i: Index, k: Index) -> Index:
        return (*i[:-2], *k, i[-2]) if ta else (*i[:-1], *k)

    def b_index(i: Index, k: Index) -> Index:
        return (i[-1], *k) if tb else (*k, i[-1])

    flags = ("T" if ta else "N") + ("T" if tb else "N")
    return _contract(a, b, out_type, extent, a_index, b_index, f"T_matmul_{flags}", "matmul")


def _batch_matmul_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    a, b = inputs
    ta, tb = bool(attrs.transpose_a), bool(attrs.transpose_b)
    extent = a.shape[1] if ta else a.shape[2]

    def batch(t: te.Tensor, i: Index) -> PrimExpr:
        return E.const(0) if t.shape[0] == 1 else i[0]

    def a_index(i: Index, k: Index) -> Index:
        return (batch(a, i), *k, i[1]) if ta else (batch(a, i), i[1], *k)

    def b_index(i: Index, k: Index) -> Index:
        return (batch(b, i), i[2], *k) if tb else (batch(b, i), *k, i[2])

    flags = ("T" if ta else "N") + ("T" if tb else "N")
    # TOPI's nn.batch_matmul (python/tvm/topi/nn/batch_matmul.py): lambda b, i, j over k
    return _contract(a, b, out_type, extent, a_index, b_index, f"T_batch_matmul_{flags}",
                     "batch_matmul", ("b", "i", "j"))


# --- bias_add, activations ---------------------------------------------------------------------

def _bias_add_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    data, bias = inputs
    axis = normalize_axis(attrs.axis, data.ndim, "nn.bias_add")
    return ax_compute(data.shape, lambda *i: E.cast(data(*i) + bias[i[axis]], data.dtype),
                      name="T_add", tag="broadcast")


def _relu_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    zero = E.const(0, x.dtype)
    # topi::relu (include/tvm/topi/nn.h): T_relu(ax0, ...) = max(x[ax0, ...], 0)
    return ax_compute(x.shape, lambda *i: E.binary("max", x(*i), zero), name="T_relu",
                      tag="elemwise")


def _leaky(x: PrimExpr, alpha: PrimExpr, dtype: str) -> PrimExpr:
    """``x if x > 0 else alpha * x`` computed in :func:`compute_dtype`, rounded to ``dtype``."""
    cd = compute_dtype(dtype)
    xc = E.cast(x, cd)
    return E.cast(E.select(xc > E.const(0, cd), xc, E.cast(alpha, cd) * xc), dtype)


def _leaky_relu_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    alpha = E.const(float(attrs.alpha), compute_dtype(x.dtype))
    return te.compute(x.shape, lambda *i: _leaky(x(*i), alpha, x.dtype), name="T_leaky_relu",
                      tag="elemwise")


def _prelu_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x, alpha = inputs
    axis = normalize_axis(attrs.axis, x.ndim, "nn.prelu")
    return te.compute(x.shape, lambda *i: _leaky(x(*i), alpha[i[axis]], x.dtype),
                      name="T_prelu", tag="broadcast")


# --- softmax family ----------------------------------------------------------------------------

def _insert(i: Index, axis: int, value: PrimExpr) -> Index:
    return (*i[:axis], value, *i[axis:])


_T = TypeVar("_T")


def _drop(i: tuple[_T, ...], axis: int) -> tuple[_T, ...]:
    return (*i[:axis], *i[axis + 1:])


def _softmax(log: bool, prefix: str) -> ComputeFn:
    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        x = inputs[0]
        axis = normalize_axis(attrs.axis, x.ndim, f"nn.{prefix}")
        cd = compute_dtype(x.dtype)
        outer = _drop(x.shape, axis)
        n = x.shape[axis]

        def xc(i: Index) -> PrimExpr:
            return E.cast(x[i], cd)

        k1 = te.reduce_axis((0, n), name="k")
        maxelem = te.compute(outer, lambda *i: te.max(xc(_insert(i, axis, k1.var)), axis=k1),
                             name=f"T_{prefix}_maxelem")

        def shifted(i: Index) -> PrimExpr:
            return xc(i) - maxelem[_drop(i, axis)]

        exp = te.compute(x.shape, lambda *i: te.exp(shifted(i), upper=0.0),
                         name=f"T_{prefix}_exp", tag="elemwise")
        k2 = te.reduce_axis((0, n), name="k")
        expsum = te.compute(outer, lambda *i: te.sum(exp[_insert(i, axis, k2.var)], axis=k2),
                            name=f"T_{prefix}_expsum")
        if log:
            return te.compute(x.shape,
                              lambda *i: E.cast(shifted(i) - te.log(expsum[_drop(i, axis)]), x.dtype),
                              name=f"T_{prefix}_norm", tag="elemwise")
        return te.compute(x.shape, lambda *i: E.cast(exp(*i) / expsum[_drop(i, axis)], x.dtype),
                          name=f"T_{prefix}_norm", tag="elemwise")

    return compute


# --- dropout, batch_flatten --------------------------------------------------------------------

def _dropout_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> list[te.Tensor]:
    x = inputs[0]
    one = E.const(1, x.dtype)
    return [te.compute(x.shape, lambda *i: x(*i), name="T_dropout", tag="injective"),
            te.compute(x.shape, lambda *i: one, name="T_dropout_mask", tag="injective")]


def _unravel(flat: PrimExpr, shape: Sequence[int]) -> Index:
    """Row-major indices of position ``flat`` (non-negative) in a tensor of ``shape``."""
    out: list[PrimExpr] = []
    for d in reversed(shape):
        out.append(te.floormod(flat, d))
        flat = te.floordiv(flat, d)
    return tuple(reversed(out))


def _batch_flatten_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    out = tensor_type(out_type, "nn.batch_flatten")
    # topi::nn::flatten (include/tvm/topi/nn/flatten.h): tensor(ax0, ax1)
    return ax_compute(out.shape, lambda b, j: x[(b, *_unravel(j, x.shape[1:]))], name="tensor",
                      tag="injective")


# --- batch_norm ---------------------------------------------------------------------------------

def _affine(y: PrimExpr, c: PrimExpr, gamma: te.Tensor, beta: te.Tensor, attrs: Any,
            cd: str) -> PrimExpr:
    if attrs.scale:
        y = y * E.cast(gamma[c], cd)
    if attrs.center:
        y = y + E.cast(beta[c], cd)
    return y


def _batch_norm_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> list[te.Tensor]:
    data, gamma, beta, mean, var = inputs
    axis = normalize_axis(attrs.axis, data.ndim, "nn.batch_norm")
    cd = compute_dtype(data.dtype)
    eps = E.const(float(attrs.epsilon), cd)

    def element(*i: PrimExpr) -> PrimExpr:
        c = i[axis]
        y = (E.cast(data(*i), cd) - E.cast(mean[c], cd)) / te.sqrt(E.cast(var[c], cd) + eps)
        return E.cast(_affine(y, c, gamma, beta, attrs, cd), data.dtype)

    out = te.compute(data.shape, element, name="T_batch_norm", tag="broadcast")
    return [out,
            te.compute(mean.shape, lambda c: mean[c], name="T_batch_norm_mean", tag="injective"),
            te.compute(var.shape, lambda c: var[c], name="T_batch_norm_var", tag="injective")]


# --- layer_norm, instance_norm, group_norm, l2_normalize ---------------------------------------

@dataclass(frozen=True)
class _Grouping:
    """How a normalisation groups elements for its statistics.

    ``shape`` is the statistics' shape, ``extents`` the reduction extents; ``source(s, r)`` is the
    data index of reduction position ``r`` of statistic ``s``, ``of(i)`` the statistic of data
    index ``i``; ``count`` elements feed each statistic.
    """

    shape: tuple[int, ...]
    extents: tuple[int, ...]
    source: IndexFn
    of: Callable[[Index], Index]

    @property
    def count(self) -> int:
        """Elements per statistic."""
        return prod(self.extents)


def _over_axes(shape: Sequence[int], axes: Sequence[int]) -> _Grouping:
    """Statistics over ``axes``, one per position of the other axes."""
    reduced = sorted(set(axes))
    kept = [d for d in range(len(shape)) if d not in reduced]

    def source(s: Index, r: Index) -> Index:
        index: dict[int, PrimExpr] = dict(zip(kept, s))
        index.update(zip(reduced, r))
        return tuple(index[d] for d in range(len(shape)))

    return _Grouping(tuple(shape[d] for d in kept), tuple(shape[d] for d in reduced), source,
                     lambda i: tuple(i[d] for d in kept))


def _over_groups(shape: Sequence[int], axis: int, groups: int) -> _Grouping:
    """Group-norm statistics: per batch and channel group, over the group's channels and every
    other axis."""
    per_group = shape[axis] // groups
    others = [d for d in range(1, len(shape)) if d != axis]

    def source(s: Index, r: Index) -> Index:
        index: dict[int, PrimExpr] = {0: s[0], axis: s[1] * per_group + r[0]}
        index.update(zip(others, r[1:]))
        return tuple(index[d] for d in range(len(shape)))

    return _Grouping((shape[0], groups), (per_group, *(shape[d] for d in others)), source,
                     lambda i: (i[0], te.floordiv(i[axis], per_group)))


def _group_sum(g: _Grouping, value: Callable[[Index, Index], PrimExpr], name: str) -> te.Tensor:
    """``sum over r of value(s, source(s, r))`` for every statistic ``s``."""
    red = [te.reduce_axis((0, e), name=f"k{j}") for j, e in enumerate(g.extents)]

    def element(*s: PrimExpr) -> PrimExpr:
        return te.sum(value(s, g.source(s, tuple(r.var for r in red))), axis=red)

    return te.compute(g.shape, element, name=name)


def _normalize(x: te.Tensor, gamma: te.Tensor, beta: te.Tensor, axis: int, g: _Grouping,
               attrs: Any, prefix: str) -> te.Tensor:
    """``(x - mean) / sqrt(var + eps)``, then scaled and shifted along ``axis``."""
    cd = compute_dtype(x.dtype)
    n = E.const(g.count, cd)
    eps = E.const(float(attrs.epsilon), cd)

    def xc(i: Index) -> PrimExpr:
        return E.cast(x[i], cd)

    total = _group_sum(g, lambda s, i: xc(i), f"T_{prefix}_sum")

    def centered(s: Index, i: Index) -> PrimExpr:
        return xc(i) - total[s] / n

    squares = _group_sum(g, lambda s, i: centered(s, i) * centered(s, i), f"T_{prefix}_sqsum")

    def element(*i: PrimExpr) -> PrimExpr:
        s = g.of(i)
        y = centered(s, i) / te.sqrt(squares[s] / n + eps)
        return E.cast(_affine(y, i[axis], gamma, beta, attrs, cd), x.dtype)

    return te.compute(x.shape, element, name=f"T_{prefix}", tag="injective")


def _layer_norm_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x, gamma, beta = inputs
    axis = normalize_axis(attrs.axis, x.ndim, "nn.layer_norm")
    return _normalize(x, gamma, beta, axis, _over_axes(x.shape, [axis]), attrs, "layer_norm")


def _instance_norm_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x, gamma, beta = inputs
    axis = normalize_axis(attrs.axis, x.ndim, "nn.instance_norm")
    axes = [d for d in range(1, x.ndim) if d != axis]
    return _normalize(x, gamma, beta, axis, _over_axes(x.shape, axes), attrs, "instance_norm")


def _group_norm_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x, gamma, beta = inputs
    axis = normalize_axis(attrs.axis, x.ndim, "nn.group_norm")
    grouping = _over_groups(x.shape, axis, int(attrs.num_groups))
    return _normalize(x, gamma, beta, axis, grouping, attrs, "group_norm")


def _l2_normalize_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    axes = [normalize_axis(a, x.ndim, "nn.l2_normalize") for a in attrs.axis] or \
        list(range(x.ndim))
    g = _over_axes(x.shape, axes)
    cd = compute_dtype(x.dtype)
    squares = _group_sum(g, lambda s, i: E.cast(x[i], cd) * E.cast(x[i], cd), "T_l2_normalize_sqsum")
    eps = E.const(float(attrs.eps), cd)

    def element(*i: PrimExpr) -> PrimExpr:
        norm = te.sqrt(E.binary("max", squares[g.of(i)], eps))
        return E.cast(E.cast(x(*i), cd) / norm, x.dtype)

    return te.compute(x.shape, element, name="T_l2_normalize", tag="injective")


def _lrn_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    x = inputs[0]
    axis = normalize_axis(attrs.axis, x.ndim, "nn.lrn")
    size = int(attrs.size)
    before = (size - 1) // 2
    cd = compute_dtype(x.dtype)
    n = x.shape[axis]
    pshape = list(x.shape)
    pshape[axis] += size - 1
    zero = E.const(0, cd)

    def padded(*i: PrimExpr) -> PrimExpr:
        c = i[axis] - before
        src = (*i[:axis], c, *i[axis + 1:])
        return te.if_then_else(te.all(c >= 0, c < n), E.cast(x[src], cd), zero)

    pad = te.compute(tuple(pshape), padded, name="T_lrn_pad", tag="injective")
    k = te.reduce_axis((0, size), name="k")

    def window(*i: PrimExpr) -> PrimExpr:
        v = pad[(*i[:axis], i[axis] + k.var, *i[axis + 1:])]
        return te.sum(v * v, axis=k)

    sqsum = te.compute(x.shape, window, name="T_lrn_sqsum")
    bias = E.const(float(attrs.bias), cd)
    alpha = E.const(float(attrs.alpha), cd)
    beta = E.const(float(attrs.beta), cd)
    count = E.const(size, cd)

    def element(*i: PrimExpr) -> PrimExpr:
        denom = te.power(bias + alpha * sqsum(*i) / count, beta)
        return E.cast(E.cast(x(*i), cd) / denom, x.dtype)

    return te.compute(x.shape, element, name="T_lrn", tag="injective")


# --- pad -----------------------------------------------------------------------------------------

def _pad_source(i: PrimExpr, size: int, before: int, after: int,
                mode: str) -> tuple[PrimExpr, list[PrimExpr]]:
    """Input position read by output position ``i`` along one axis, and the conditions for it to
    be data (constant mode only): negative widths crop, then the kept part is padded."""
    start = max(-before, 0)
    kept = size + min(before, 0) + min(after, 0)
    c = i - max(before, 0)
    if mode == "constant":
        conds = []
        if before > 0:
            conds.append(c >= 0)
        if after > 0:
            conds.append(c < kept)
        return c + start, conds
    if mode == "edge":
        if before > 0:
            c = E.binary("max", c, E.const(0))
        if after > 0:
            c = E.binary("min", c, E.const(kept - 1))
        return c + start, []
    if before > 0:  # reflect: -c before the start, 2 (kept - 1) - c after the end
        c = E.select(c < 0, E.const(0) - c, c)
    if after > 0:
        c = E.select(c >= kept, E.const(2 * (kept - 1)) - c, c)
    return c + start, []


def _pad_compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
    data, value = inputs
    out = tensor_type(out_type, "nn.pad")
    fill = E.cast(value[(E.const(0),) * value.ndim], data.dtype)

    def element(*i: PrimExpr) -> PrimExpr:
        src: list[PrimExpr] = []
        inside: list[PrimExpr] = []
        for d, (before, after) in enumerate(attrs.pad_width):
            pos, conds = _pad_source(i[d], data.shape[d], before, after, attrs.pad_mode)
            src.append(pos)
            inside += conds
        return te.if_then_else(te.all(*inside), data[tuple(src)], fill)

    return te.compute(out.shape, element, name="T_pad", tag="injective")


# --- depth_to_space, space_to_depth -------------------------------------------------------------

def _subpixel_compute(to_space: bool) -> ComputeFn:
    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        x = inputs[0]
        out = tensor_type(out_type, "nn.depth_to_space" if to_space else "nn.space_to_depth")
        layout = Layout(attrs.layout)
        bs = int(attrs.block_size)
        in_c = layout.forward_shape(x.shape, "NCHW", "nn.depth_to_space", "data")[1]
        out_c = in_c // (bs * bs) if to_space else in_c

        def element(*i: PrimExpr) -> PrimExpr:
            o = layout_coords(layout, "NCHW", i)
            h, w, c = o["H"].value, o["W"].value, o["C"].value
            if to_space:  # output (c, h, w) reads channel block (h % bs, w % bs)
                block = te.floormod(h, bs) * bs + te.floormod(w, bs)
                if attrs.mode == "DCR":
                    src_c = block * out_c + c
                else:
                    src_c = c * (bs * bs) + block
                src_h, src_w = te.floordiv(h, bs), te.floordiv(w, bs)
            else:  # output channel (block row, block column, input channel)
                block = te.floordiv(c, out_c)
                src_c = te.floormod(c, out_c)
                src_h = h * bs + te.floordiv(block, bs)
                src_w = w * bs + te.floormod(block, bs)
            coords = {"N": o["N"], "C": Coord(src_c), "H": Coord(src_h), "W": Coord(src_w)}
            return x[layout_index(layout, coords)]

        name = "T_depth_to_space" if to_space else "T_space_to_depth"
        return te.compute(out.shape, element, name=name, tag="injective")

    return compute


# --- upsampling -----------------------------------------------------------------------------------

def _upsampling_compute(name: str, letters: str) -> ComputeFn:
    def compute(inputs: list[te.Tensor], attrs: Any, out_type: Type) -> te.Tensor:
        from kiln.op.compute_image import resize_tensor  # the image family loads after nn

        x = inputs[0]
        scales = tuple(float(getattr(attrs, f"scale_{a.lower()}")) for a in letters)
        axes, sizes, method, mode = _upsample_plan(name, x.shape, attrs, letters, scales)
        roi = ((0.0, 0.0),) * len(axes)
        return resize_tensor(x, axes, sizes, roi, method, mode, "", -0.5, False, 0.0, x.dtype,
                             f"T_{name.removeprefix('nn.')}")

    return compute


def _register() -> None:
    computes: dict[str, ComputeFn] = {
        "nn.dense": _dense_compute,
        "nn.matmul": _matmul_compute,
        "nn.batch_matmul": _batch_matmul_compute,
        "nn.bias_add": _bias_add_compute,
        "nn.relu": _relu_compute,
        "nn.leaky_relu": _leaky_relu_compute,
        "nn.prelu": _prelu_compute,
        "nn.softmax": _softmax(False, "softmax"),
        "nn.fast_softmax": _softmax(False, "fast_softmax"),
        "nn.log_softmax": _softmax(True, "log_softmax"),
        "nn.dropout": _dropout_compute,
        "nn.batch_flatten": _batch_flatten_compute,
        "nn.batch_norm": _batch_norm_compute,
        "nn.layer_norm": _layer_norm_compute,
        "nn.instance_norm": _instance_norm_compute,
        "nn.group_norm": _group_norm_compute,
        "nn.l2_normalize": _l2_normalize_compute,
        "nn.lrn": _lrn_compute,
        "nn.pad": _pad_compute,
        "nn.depth_to_space": _subpixel_compute(True),
        "nn.space_to_depth": _subpixel_compute(False),
        "nn.upsampling": _upsampling_compute("nn.upsampling", "HW"),
        "nn.upsampling3d": _upsampling_compute("nn.upsampling3d", "DHW"),
    }
    for name, fn in computes.items():
        get_op_def(name).compute = fn


_register()
