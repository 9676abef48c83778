"""ONNX converters: LSTM, GRU and RNN, unrolled over the static sequence length.

Each direction projects the whole input sequence with one ``nn.dense`` (input weights and bias),
then runs one step per time index: a ``nn.dense`` with the recurrence weights, the gate
activations and the state update. Reverse directions walk the sequence backwards; with a constant
``sequence_lens`` each batch entry is reversed within its own length (a constant gather), and a
step past an entry's length keeps its state and writes zeros to ``Y``, as ONNX specifies; an
entry of length 0 ends with zero states, as onnxruntime's. ``sequence_lens`` computed from graph
inputs works the same way, with the step masks and the reversal gather computed at run time.
Outputs follow ``layout`` (0: time-major, 1: batch-major). A bidirectional node whose two
recurrence weights fit in L2 together runs its directions' steps alternately (:func:`_interleaved`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.frontend.onnx_common import NodeContext, const, converter, scalar_like
from kiln.frontend.onnx_tensor import reshape_to, static_slice
from kiln.ir.expr import Expr
from kiln.op import elemwise as ew
from kiln.te.templates.registry import L2_RESIDENT_BYTES

__all__: list[str] = []

Activation = Callable[[Expr], Expr]

_USES_ALPHA = {"leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu", "affine"}
_USES_BETA = {"scaledtanh", "hardsigmoid", "affine"}
_DEFAULTS = {"leakyrelu": (0.01, 0.0), "thresholdedrelu": (1.0, 0.0), "scaledtanh": (1.0, 1.0),
             "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0), "affine": (1.0, 0.0)}
_KNOWN = {"relu", "tanh", "sigmoid", "softsign", "softplus", *_DEFAULTS}
_DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _check_rnn(attrs: dict[str, Any], opset: int) -> str | None:
    acts = attrs.get("activations") or []
    bad = [a for a in acts if a.lower() not in _KNOWN]
    if bad:
        return f"activation(s) {', '.join(bad)}"
    direction = attrs.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        return f"direction={direction!r}"
    return None


def _activation(ctx: NodeContext, name: str, alpha: float, beta: float, like: Expr) -> Activation:
    def f(v: float) -> Expr:
        return scalar_like(ctx, v, like)

    kind = name.lower()
    table: dict[str, Activation] = {
        "sigmoid": ew.sigmoid,
        "tanh": ew.tanh,
        "relu": lambda x: ew.maximum(x, f(0)),
        "softsign": lambda x: ew.divide(x, ew.add(f(1), ew.abs(x))),
        "softplus": lambda x: ew.log(ew.add(f(1), ew.exp(x))),
        "leakyrelu": lambda x: ew.where(ew.less(x, f(0)), ew.multiply(x, f(alpha)), x),
        "thresholdedrelu": lambda x: ew.where(ew.greater(x, f(alpha)), x, f(0)),
        "scaledtanh": lambda x: ew.multiply(f(alpha), ew.tanh(ew.multiply(x, f(beta)))),
        "hardsigmoid": lambda x: ew.clip(ew.add(ew.multiply(x, f(alpha)), f(beta)), 0.0, 1.0),
        "elu": lambda x: ew.where(ew.less(x, f(0)),
                                  ew.multiply(f(alpha), ew.subtract(ew.exp(x), f(1))), x),
        "affine": lambda x: ew.add(ew.multiply(x, f(alpha)), f(beta)),
    }
    return table[kind]


def _activations(ctx: NodeContext, num_dirs: int, like: Expr) -> list[list[Activation]]:
    """Per direction, the activation functions (f, g[, h]) with their alpha/beta bound."""
    names = ctx.attr("activations") or _DEFAULT_ACTS[ctx.op_type] * num_dirs
    per_dir = len(_DEFAULT_ACTS[ctx.op_type])
    if len(names) == per_dir and num_dirs == 2:
        names = list(names) * 2
    if len(names) != per_dir * num_dirs:
        raise ctx.error(f"expected {per_dir * num_dirs} activations, got {list(names)}")
    alphas = iter(float(a) for a in ctx.attr("activation_alpha") or [])
    betas = iter(float(b) for b in ctx.attr("activation_beta") or [])
    funcs = []
    for name in names:
        kind = name.lower()
        alpha, beta = _DEFAULTS.get(kind, (0.0, 0.0))
        if kind in _USES_ALPHA:
            alpha = next(alphas, alpha)
        if kind in _USES_BETA:
            beta = next(betas, beta)
        funcs.append(_activation(ctx, name, alpha, beta, like))
    return [funcs[d * per_dir:(d + 1) * per_dir] for d in range(num_dirs)]


@dataclass
class _Setup:
    """The static facts of one recurrent node."""

    x: Expr  # time-major (seq, batch, input)
    seq: int
    batch: int
    hidden: int
    dirs: list[str]
    lens: np.ndarray | None  # per batch entry, when some entry is shorter than seq
    clip: float | None
    lens_expr: Expr | None = None  # (batch,) int64 lengths known only at run time

    @property
    def varlen(self) -> bool:
        """Whether batch entries may stop before ``seq`` (constant or run-time lengths)."""
        return self.lens is not None or self.lens_expr is not None


def _tf() -> Any:
    from kiln.op import transform

    return transform


def _dense(a: Expr, w: Expr) -> Expr:
    from kiln.op import nn

    return nn.dense(a, w)


def _setup(ctx: NodeContext) -> _Setup:
    """The node's sequence (time-major), sizes, directions, lengths and clip."""
    x = ctx.input(0)
    layout = int(ctx.attr("layout", 0))
    if layout:
        x = _tf().transpose(x, axes=[1, 0, 2])
    seq, batch, _ = ctx.shape(x)
    direction = ctx.attr("direction", "forward")
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    hidden = int(ctx.attr("hidden_size", ctx.shape(1)[1] // _GATES[ctx.op_type]))
    lens = None
    lens_expr = None
    if ctx.has_input(4) and ctx.value(4) is None:
        # lengths computed from graph inputs: masks and reversal gathers become expressions
        if int(np.prod(ctx.shape(4))) != batch:
            raise ctx.error(f"sequence_lens of shape {ctx.shape(4)} must hold {batch} lengths")
        lens_expr = ew.cast(reshape_to(ctx, ctx.input(4), (batch,)), "int64")
    elif ctx.has_input(4):
        lens = np.asarray(ctx.const_input(4, "sequence_lens")).astype(np.int64).reshape(-1)
        if lens.shape != (batch,) or (lens < 0).any() or (lens > seq).any():
            raise ctx.error(f"sequence_lens {lens.tolist()} must hold {batch} lengths within [0, {seq}]")
        if (lens == seq).all():
            lens = None
    clip = ctx.attr("clip")
    return _Setup(x, seq, batch, hidden, dirs, lens, None if clip is None else float(clip), lens_expr)


def _direction_slice(ctx: NodeContext, v: Expr, d: int) -> Expr:
    """Entry ``d`` of a per-direction tensor (first axis), without that axis."""
    shape = ctx.shape(v)
    return reshape_to(ctx, static_slice(ctx, v, [0], [d], [d + 1]), shape[1:])


def _initial_state(ctx: NodeContext, i: int, d: int, s: _Setup) -> Expr:
    """Direction ``d``'s initial state from input ``i``, zeros when not given."""
    if not ctx.has_input(i):
        return const(np.zeros((s.batch, s.hidden)), ctx.dtype(0))
    v = ctx.input(i)
    if int(ctx.attr("layout", 0)):
        v = _tf().transpose(v, axes=[1, 0, 2])
    return _direction_slice(ctx, v, d)


def _reverse_gather(ctx: NodeContext, s: _Setup) -> Expr:
    """:func:`_reverse_index` as an expression; computed from the run-time lengths when the
    node has them."""
    if s.lens_expr is None:
        return const(_reverse_index(s))
    t = const(np.arange(s.seq, dtype=np.int64).reshape(s.seq, 1))
    b = const(np.arange(s.batch, dtype=np.int64).reshape(1, s.batch))
    lens = reshape_to(ctx, s.lens_expr, (1, s.batch))
    src = ew.where(ew.less(t, lens), ew.subtract(ew.subtract(lens, const(np.int64(1))), t), t)
    idx = ew.add(ew.multiply(src, const(np.int64(s.batch))), b)
    return reshape_to(ctx, idx, (s.seq * s.batch,))


def _reverse_index(s: _Setup) -> np.ndarray:
    """Flat (seq * batch) gather indices that reverse each batch entry within its length."""
    lens = s.lens if s.lens is not None else np.full(s.batch, s.seq)
    idx = np.empty((s.seq, s.batch), dtype=np.int64)
    for b in range(s.batch):
        for t in range(s.seq):
            src = lens[b] - 1 - t if t < lens[b] else t
            idx[t, b] = src * s.batch + b
    return idx.reshape(-1)


def _projected_inputs(ctx: NodeContext, s: _Setup, d: int, reverse: bool) -> list[Expr]:
    """Per time step (in processing order), ``X_t W^T + Wb`` for direction ``d``."""
    w = _direction_slice(ctx, ctx.input(1), d)
    gates = ctx.shape(w)[0]
    flat = reshape_to(ctx, s.x, (s.seq * s.batch, ctx.shape(s.x)[2]))
    if reverse and s.varlen:
        flat = _tf().take(flat, _reverse_gather(ctx, s), axis=0)
    proj = _dense(flat, w)
    if ctx.has_input(3):
        bias = _direction_slice(ctx, ctx.input(3), d)
        proj = ew.add(proj, static_slice(ctx, bias, [0], [0], [gates]))
    steps = [reshape_to(ctx, static_slice(ctx, proj, [0], [t * s.batch], [(t + 1) * s.batch]),
                        (s.batch, gates)) for t in range(s.seq)]
    if reverse and not s.varlen:
        steps.reverse()
    return steps


def _recurrent_bias(ctx: NodeContext, d: int, gates: int) -> Expr | None:
    """The second half of direction ``d``'s bias (``Rb``), if the node has biases."""
    if not ctx.has_input(3):
        return None
    bias = _direction_slice(ctx, ctx.input(3), d)
    return static_slice(ctx, bias, [0], [gates], [2 * gates])


def _split_gates(ctx: NodeContext, v: Expr, n: int, hidden: int) -> list[Expr]:
    """The ``n`` gate blocks of width ``hidden`` along axis 1."""
    return [static_slice(ctx, v, [1], [k * hidden], [(k + 1) * hidden]) for k in range(n)]


def _clipped(s: _Setup, f: Activation) -> Activation:
    """``f`` applied to its input clipped to ``[-clip, clip]`` (when the node sets ``clip``)."""
    if s.clip is None:
        return f
    c = s.clip
    return lambda v: f(ew.clip(v, -c, c))


def _step_mask(ctx: NodeContext, s: _Setup, t: int) -> Expr | None:
    """(batch, 1) mask of the entries still inside their sequence at step ``t``."""
    if s.lens_expr is not None:
        return reshape_to(ctx, ew.less(const(np.int64(t)), s.lens_expr), (s.batch, 1))
    if s.lens is None:
        return None
    return const((t < s.lens).reshape(s.batch, 1))


def _run_direction(ctx: NodeContext, s: _Setup, d: int,
                   cell: Callable[[Expr, list[Expr]], list[Expr]],
                   states: list[Expr]) -> tuple[list[Expr], list[Expr]]:
    """Unroll one direction; (outputs in time order, final states)."""
    reverse = s.dirs[d] == "reverse"
    xs = _projected_inputs(ctx, s, d, reverse)
    outputs: list[Expr] = []
    for t, x_t in enumerate(xs):
        new = cell(x_t, states)
        mask = _step_mask(ctx, s, t)
        if mask is not None:
            zero = scalar_like(ctx, 0, new[0])
            outputs.append(ew.where(mask, new[0], zero))
            states = [ew.where(mask, n, o) for n, o in zip(new, states)]
        else:
            outputs.append(new[0])
            states = new
    if s.varlen:
        # an entry of length 0 ends with zero states (onnxruntime's Y_h/Y_c), not its initial ones
        started = _step_mask(ctx, s, 0)
        assert started is not None
        states = [ew.where(started, st, scalar_like(ctx, 0, st)) for st in states]
    if reverse and not s.varlen:
        outputs.reverse()
    elif reverse:
        # Step t of entry b processed original time lens[b] - 1 - t: gather back (an involution).
        flat = reshape_to(ctx, _stack(ctx, s, outputs), (s.seq * s.batch, s.hidden))
        back = _tf().take(flat, _reverse_gather(ctx, s), axis=0)
        outputs = [reshape_to(ctx, static_slice(ctx, back, [0], [t * s.batch], [(t + 1) * s.batch]),
                              (s.batch, s.hidden)) for t in range(s.seq)]
    return outputs, states


def _stack(ctx: NodeContext, s: _Setup, outputs: list[Expr]) -> Expr:
    """Per-step (batch, hidden) outputs stacked into (seq, batch, hidden)."""
    parts = [reshape_to(ctx, o, (1, s.batch, s.hidden)) for o in outputs]
    return parts[0] if len(parts) == 1 else _tf().concatenate(parts, axis=0)


def _interleaved(ctx: NodeContext, s: _Setup, forward: list[Expr], backward: list[Expr]) -> Expr:
    """``Y`` (seq, 2, batch, hidden) of a bidirectional node from its outputs in time order,
    gathered from a stack of both directions' outputs in processing order (forward step 0,
    reverse step 0, forward step 1, ...). Kernels run in the graph's order, so the two chains'
    steps alternate: each step's matrix-vector product starts while the other direction's last
    step ends, where a chain run to its end waits on its own previous step (conv1d_bilstm's
    kernels, one Zen 5 core: 1.74 -> 1.59 ms). Only while both directions' recurrence weights
    stay in L2 together: at hidden 256 (1 MB each) alternating them took 7.8 ms against 6.6."""
    stacked = _stack(ctx, s, [o for t in range(s.seq) for o in (forward[t], backward[s.seq - 1 - t])])
    order = np.array([i for t in range(s.seq) for i in (2 * t, 2 * (s.seq - 1 - t) + 1)], np.int64)
    y = _tf().take(stacked, const(order), axis=0)
    return reshape_to(ctx, y, (s.seq, 2, s.batch, s.hidden))


def _assemble(ctx: NodeContext, s: _Setup, per_dir: list[tuple[list[Expr], list[Expr]]]) -> list[Expr | None]:
    """Y, Y_h (and Y_c) in the node's layout."""
    layout = int(ctx.attr("layout", 0))
    recurrence_bytes = int(np.prod(ctx.shape(2))) * np.dtype(ctx.dtype(0)).itemsize
    if len(per_dir) == 2 and not s.varlen and s.seq > 1 and recurrence_bytes <= L2_RESIDENT_BYTES:
        y = _interleaved(ctx, s, per_dir[0][0], per_dir[1][0])
    else:
        ys = [reshape_to(ctx, _stack(ctx, s, outs), (s.seq, 1, s.batch, s.hidden))
              for outs, _ in per_dir]
        y = ys[0] if len(ys) == 1 else _tf().concatenate(ys, axis=1)
    results: list[Expr | None] = []
    if layout:
        y = _tf().transpose(y, axes=[2, 0, 1, 3])
    results.append(y)
    for k in range(len(per_dir[0][1])):
        finals = [reshape_to(ctx, states[k], (1, s.batch, s.hidden)) for _, states in per_dir]
        h = finals[0] if len(finals) == 1 else _tf().concatenate(finals, axis=0)
        if layout:
            h = _tf().transpose(h, axes=[1, 0, 2])
        results.append(h)
    return results


@converter("LSTM", needs=("nn.dense", "sigmoid", "tanh", "concatenate", "strided_slice", "take"),
           check=_check_rnn)
def _lstm(ctx: NodeContext) -> list[Expr | None]:
    s = _setup(ctx)
    acts = _activations(ctx, len(s.dirs), ctx.input(0))
    coupled = bool(int(ctx.attr("input_forget", 0)))
    h = s.hidden
    per_dir = []
    for d in range(len(s.dirs)):
        r = _direction_slice(ctx, ctx.input(2), d)
        rb = _recurrent_bias(ctx, d, 4 * h)
        peep = _split_gates(ctx, reshape_to(ctx, _direction_slice(ctx, ctx.input(7), d), (1, 3 * h)), 3, h) \
            if ctx.has_input(7) else None
        f, g = (_clipped(s, a) for a in acts[d][:2])
        hact = acts[d][2]  # onnxruntime clips the gate inputs, not the cell state fed to h

        def cell(x_t: Expr, states: list[Expr], r: Expr = r, rb: Expr | None = rb,
                 peep: list[Expr] | None = peep, f: Activation = f, g: Activation = g,
                 hact: Activation = hact) -> list[Expr]:
            h_prev, c_prev = states
            z = ew.add(x_t, _dense(h_prev, r))
            if rb is not None:
                z = ew.add(z, rb)
            zi, zo, zf, zc = _split_gates(ctx, z, 4, h)
            if peep is not None:
                zi = ew.add(zi, ew.multiply(peep[0], c_prev))
                zf = ew.add(zf, ew.multiply(peep[2], c_prev))
            i = f(zi)
            forget = ew.subtract(scalar_like(ctx, 1, i), i) if coupled else f(zf)
            c = ew.add(ew.multiply(forget, c_prev), ew.multiply(i, g(zc)))
            if peep is not None:
                zo = ew.add(zo, ew.multiply(peep[1], c))
            o = f(zo)
            return [ew.multiply(o, hact(c)), c]

        states = [_initial_state(ctx, 5, d, s), _initial_state(ctx, 6, d, s)]
        per_dir.append(_run_direction(ctx, s, d, cell, states))
    return _assemble(ctx, s, per_dir)


@converter("GRU", needs=("nn.dense", "sigmoid", "tanh", "concatenate", "strided_slice", "take"),
           check=_check_rnn)
def _gru(ctx: NodeContext) -> list[Expr | None]:
    s = _setup(ctx)
    acts = _activations(ctx, len(s.dirs), ctx.input(0))
    before_reset = bool(int(ctx.attr("linear_before_reset", 0)))
    h = s.hidden
    per_dir = []
    for d in range(len(s.dirs)):
        r_all = _direction_slice(ctx, ctx.input(2), d)
        r_zr = static_slice(ctx, r_all, [0], [0], [2 * h])
        r_h = static_slice(ctx, r_all, [0], [2 * h], [3 * h])
        rb = _recurrent_bias(ctx, d, 3 * h)
        rb_zr = static_slice(ctx, rb, [0], [0], [2 * h]) if rb is not None else None
        rb_h = static_slice(ctx, rb, [0], [2 * h], [3 * h]) if rb is not None else None
        f, g = (_clipped(s, a) for a in acts[d])

        def cell(x_t: Expr, states: list[Expr], r_zr: Expr = r_zr, r_h: Expr = r_h,
                 rb_zr: Expr | None = rb_zr, rb_h: Expr | None = rb_h, f: Activation = f,
                 g: Activation = g) -> list[Expr]:
            (h_prev,) = states
            xz, xr, xh = _split_gates(ctx, x_t, 3, h)
            hzr = _dense(h_prev, r_zr)
            if rb_zr is not None:
                hzr = ew.add(hzr, rb_zr)
            hz, hr = _split_gates(ctx, hzr, 2, h)
            z = f(ew.add(xz, hz))
            r = f(ew.add(xr, hr))
            if before_reset:
                rec = _dense(h_prev, r_h)
                if rb_h is not None:
                    rec = ew.add(rec, rb_h)
                cand = g(ew.add(xh, ew.multiply(r, rec)))
            else:
                rec = _dense(ew.multiply(r, h_prev), r_h)
                if rb_h is not None:
                    rec = ew.add(rec, rb_h)
                cand = g(ew.add(xh, rec))
            one = scalar_like(ctx, 1, z)
            return [ew.add(ew.multiply(ew.subtract(one, z), cand), ew.multiply(z, h_prev))]

        per_dir.append(_run_direction(ctx, s, d, cell, [_initial_state(ctx, 5, d, s)]))
    return _assemble(ctx, s, per_dir)


@converter("RNN", needs=("nn.dense", "tanh", "concatenate", "strided_slice", "take"), check=_check_rnn)
def _rnn(ctx: NodeContext) -> list[Expr | None]:
    s = _setup(ctx)
    acts = _activations(ctx, len(s.dirs), ctx.input(0))
    per_dir = []
    for d in range(len(s.dirs)):
        r = _direction_slice(ctx, ctx.input(2), d)
        rb = _recurrent_bias(ctx, d, s.hidden)
        f = _clipped(s, acts[d][0])

        def cell(x_t: Expr, states: list[Expr], r: Expr = r, rb: Expr | None = rb,
                 f: Activation = f) -> list[Expr]:
            z = ew.add(x_t, _dense(states[0], r))
            if rb is not None:
                z = ew.add(z, rb)
            return [f(z)]

        per_dir.append(_run_direction(ctx, s, d, cell, [_initial_state(ctx, 5, d, s)]))
    return _assemble(ctx, s, per_dir)
