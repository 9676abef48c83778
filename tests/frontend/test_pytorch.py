"""PyTorch importer: every converter against PyTorch eager, through both entry points.

Each case is a small module exercising one converter (sometimes a few related ones, one output
each). The default run merges the cases into three modules imported with ``from_torch_export``
(``torch.export.export``) and one module of the cases whose TorchScript graphs differ most,
imported with ``from_pytorch`` (``torch.jit.trace``): one build per module keeps the run short.
``--runslow`` runs every case on its own through both entry points (recurrent cases included).
Outputs are compiled with ``relay.build`` and compared with PyTorch at rtol 1e-4, atol 1e-5 times
the output's magnitude (integer and boolean outputs exactly).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from kiln.errors import FrontendError, UnsupportedOpError  # noqa: E402
from kiln.frontend.pytorch import from_pytorch, from_torch_export, supported_ops  # noqa: E402
from kiln.frontend.pytorch_ops import CONVERTERS  # noqa: E402
from tests.frontend._compiled import run_compiled  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
DOC = Path(__file__).resolve().parents[2] / "docs" / "frontends" / "pytorch.md"


def _flat(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _flat(item)]
    return [value]


def compare(actual: Sequence[np.ndarray], expected: Sequence[Any], rtol: float = RTOL,
            atol: float = ATOL) -> float:
    """Assert each output matches; the largest error relative to the output's magnitude."""
    assert len(actual) == len(expected), (len(actual), len(expected))
    worst = 0.0
    for i, (a, e) in enumerate(zip(actual, expected)):
        e = e.detach().numpy() if isinstance(e, torch.Tensor) else np.asarray(e)
        assert a.shape == e.shape, f"output {i}: shape {a.shape} != {e.shape}"
        if e.dtype.kind in "biu":
            np.testing.assert_array_equal(a, e, err_msg=f"output {i}")
            continue
        scale = max(1.0, float(np.abs(e).max())) if e.size else 1.0
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol * scale, err_msg=f"output {i}")
        finite = np.isfinite(e)
        if finite.any():
            worst = max(worst, float(np.abs(a[finite] - e[finite]).max() / scale))
    return worst


def import_module(model: nn.Module, inputs: Sequence[torch.Tensor], entry: str,
                  freeze_params: bool | None = None) -> tuple[Any, dict[str, Any], list[str]]:
    """``model`` imported through ``entry`` ("export" or "script"); the input names in order."""
    if entry == "export":
        ep = torch.export.export(model, tuple(inputs))
        names = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
        mod, params = from_torch_export(ep, **({} if freeze_params is None else
                                               {"freeze_params": freeze_params}))
        return mod, params, names
    traced = torch.jit.trace(model, tuple(inputs), check_trace=False)
    names = [f"input{i}" for i in range(len(inputs))]
    infos = [(n, (list(t.shape), str(t.dtype).replace("torch.", ""))) for n, t in zip(names, inputs)]
    mod, params = from_pytorch(traced, infos, **({} if freeze_params is None else
                                                 {"freeze_params": freeze_params}))
    return mod, params, names


def check(model: nn.Module, inputs: Sequence[torch.Tensor], entry: str = "export",
          rtol: float = RTOL, atol: float = ATOL, freeze_params: bool | None = None) -> float:
    """Import ``model``, compile it and compare with PyTorch; the worst relative error."""
    model = model.eval()
    with torch.no_grad():
        expected = _flat(model(*inputs))
    mod, params, names = import_module(model, inputs, entry, freeze_params)
    actual = run_compiled(mod, params, {n: t.numpy() for n, t in zip(names, inputs)})
    return compare(actual, expected, rtol, atol)


class Fn(nn.Module):
    """A module whose forward is ``fn`` (plus optional submodules as attributes)."""

    def __init__(self, fn: Callable[..., Any], **mods: nn.Module):
        super().__init__()
        self.fn = fn
        for k, m in mods.items():
            setattr(self, k, m)

    def forward(self, *xs: torch.Tensor) -> Any:
        return self.fn(self, *xs)


def r(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed + sum(shape)).standard_normal(shape)
                            .astype("float32"))


def ri(high: int, *shape: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(high).integers(0, high, shape).astype("int64"))


def _bn(c: int, dims: int = 2) -> nn.Module:
    bn = nn.BatchNorm2d(c) if dims == 2 else nn.BatchNorm1d(c)
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return bn


def _inplace(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """In-place ops as models write them (``+=``, ``relu_``, ``mul_``): later reads see the update."""
    x += y
    z = x * 1.0
    x.relu_()
    x.mul_(2.0)
    return x, z


torch.manual_seed(0)
X = r(2, 3, 4, 5)
Y = r(2, 3, 4, 5, seed=1)
V = r(2, 3, 8)
S = r(2, 5, 16)

CASES: list[Any] = [
    # elementwise arithmetic
    pytest.param(lambda m, x, y: (x + y, torch.add(x, y, alpha=2.0), x + 1.5), [X, Y], id="add"),
    pytest.param(lambda m, x, y: (x - y, torch.sub(x, y, alpha=0.5)), [X, Y], id="sub"),
    pytest.param(lambda m, x: (1.0 - x, torch.rsub(x, 2.0)), [X], id="rsub"),
    pytest.param(lambda m, x, y: (x * y, x * 3.0), [X, Y], id="mul"),
    pytest.param(lambda m, x, y: (x / (y.abs() + 1), x / 4.0), [X, Y], id="div"),
    pytest.param(lambda m, x: (torch.div(x, 0.7, rounding_mode="floor"),
                               torch.div(x, 0.7, rounding_mode="trunc")), [X], id="div_rounding"),
    pytest.param(lambda m, x, y: (x.abs() ** 1.5, x ** 2, torch.pow(x.abs() + 0.1, y)), [X, Y],
                 id="pow"),
    pytest.param(lambda m, x: (torch.rsqrt(x.abs() + 0.1), torch.sqrt(x.abs())), [X], id="rsqrt_sqrt"),
    pytest.param(lambda m, x: (torch.exp(x), torch.log(x.abs() + 0.1)), [X], id="exp_log"),
    pytest.param(lambda m, x: (-x, torch.abs(x), torch.neg(x)), [X], id="neg_abs"),
    pytest.param(lambda m, x: (torch.reciprocal(x.abs() + 0.5), torch.floor(x * 3), torch.ceil(x * 3),
                               torch.sign(x)), [X], id="reciprocal_floor_ceil_sign"),
    pytest.param(lambda m, x: (torch.sin(x), torch.cos(x), torch.erf(x)), [X], id="sin_cos_erf"),
    pytest.param(lambda m, x, y: (torch.clamp(x, -0.5, 0.5), torch.clamp(x, min=0.1),
                                  torch.clamp(x, max=-0.1), x.clamp(min=y)), [X, Y], id="clamp"),
    pytest.param(lambda m, x, y: (torch.where(x > 0, x, y), torch.where(x > y, 1.0, x)), [X, Y],
                 id="where"),
    pytest.param(lambda m, x, y: (torch.maximum(x, y), torch.minimum(x, y)), [X, Y], id="maximum_minimum"),
    pytest.param(lambda m, x, y: ((x > y).float(), (x >= 0).float(), (x < y).float(), (x <= 0.5).float(),
                                  (x == x).float(), (x != y).float()), [X, Y], id="comparisons"),
    pytest.param(lambda m, x, y: ((x > 0) & (y > 0), (x > 0) | (y > 0), ~(x > 0)), [X, Y], id="logical"),
    pytest.param(lambda m, x: x.masked_fill(x > 0.5, -1.0), [X], id="masked_fill"),
    pytest.param(lambda m, x, y: _inplace(x.clone(), y), [X, Y], id="inplace"),
    # activations
    pytest.param(lambda m, x: (F.relu(x), F.relu6(x * 4), m.r(x * 1.0)), [X], id="relu_relu6"),
    pytest.param(lambda m, x: (F.hardtanh(x, -0.5, 0.7), F.hardswish(x * 3), F.hardsigmoid(x * 3)), [X],
                 id="hardtanh_hardswish_hardsigmoid"),
    pytest.param(lambda m, x: (F.silu(x), torch.sigmoid(x), torch.tanh(x)), [X], id="silu_sigmoid_tanh"),
    pytest.param(lambda m, x: (F.gelu(x), F.gelu(x, approximate="tanh")), [X], id="gelu"),
    pytest.param(lambda m, x: (F.leaky_relu(x, 0.2), F.elu(x, alpha=0.7), F.selu(x), F.celu(x, 1.3)),
                 [X], id="leaky_relu_elu"),
    pytest.param(lambda m, x: (F.softplus(x * 3, beta=2.0, threshold=1.0), F.mish(x), F.logsigmoid(x)),
                 [X], id="softplus_mish"),
    pytest.param(lambda m, x: m.p(x), [X], id="prelu"),
    pytest.param(lambda m, x: (F.softmax(x, dim=1), F.log_softmax(x, dim=-1)), [X], id="softmax"),
    # convolution and linear algebra
    pytest.param(lambda m, x: m.c(x), [r(2, 4, 16)], id="conv1d"),
    pytest.param(lambda m, x: m.c(x), [r(1, 4, 9, 9)], id="conv2d"),
    pytest.param(lambda m, x: m.c(x), [r(1, 4, 9, 9)], id="conv2d_same"),
    pytest.param(lambda m, x: m.c(x), [r(1, 6, 8, 8)], id="conv2d_depthwise"),
    pytest.param(lambda m, x: m.c(x), [r(1, 4, 5, 5)], id="conv_transpose2d"),
    pytest.param(lambda m, x: m.c(x), [r(2, 4, 7)], id="conv_transpose1d"),
    pytest.param(lambda m, x: m.fc(x), [r(2, 3, 8)], id="linear"),
    pytest.param(lambda m, x, w: (torch.addmm(w[0], x, w), torch.mm(x, w)), [r(3, 8), r(8, 8, seed=2)],
                 id="addmm_mm"),
    pytest.param(lambda m, x, y: (torch.bmm(x, y), torch.baddbmm(x[:, :, :4], x, y, beta=0.5)),
                 [r(2, 4, 5), r(2, 5, 4)], id="bmm_baddbmm"),
    pytest.param(lambda m, x, y, v: (torch.matmul(x, y), x @ v, v @ y[0], torch.matmul(x[0, 0], v)),
                 [r(2, 3, 4, 5), r(3, 5, 6), r(5)], id="matmul"),
    pytest.param(lambda m, x, y: torch.einsum("bij,bjk->bik", x, y), [r(2, 4, 5), r(2, 5, 3)],
                 id="einsum"),
    # normalisation
    pytest.param(lambda m, x: m.bn(x), [X], id="batch_norm2d"),
    pytest.param(lambda m, x: m.bn(x), [V], id="batch_norm1d"),
    pytest.param(lambda m, x: (m.ln(x), F.layer_norm(x, (5,))), [X], id="layer_norm"),
    pytest.param(lambda m, x: m.gn(x), [r(2, 6, 4, 4)], id="group_norm"),
    pytest.param(lambda m, x: F.instance_norm(x), [X], id="instance_norm"),
    # pooling
    pytest.param(lambda m, x: (F.max_pool2d(x, 3, 2, 1), F.max_pool2d(x, 2, ceil_mode=True)),
                 [r(1, 3, 9, 9)], id="max_pool2d"),
    pytest.param(lambda m, x: (F.max_pool1d(x, 3, 2), F.avg_pool1d(x, 3, 2, 1)), [V], id="pool1d"),
    pytest.param(lambda m, x: (F.avg_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                               F.avg_pool2d(x, 2)), [r(1, 3, 9, 9)], id="avg_pool2d"),
    pytest.param(lambda m, x: (F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x, (2, 3)),
                               F.adaptive_max_pool2d(x, (3, 3))), [r(1, 3, 9, 7)], id="adaptive_pool2d"),
    pytest.param(lambda m, x: F.adaptive_avg_pool1d(x, 3), [V], id="adaptive_avg_pool1d"),
    # reductions
    pytest.param(lambda m, x: (x.mean((2, 3)), x.mean(-1, keepdim=True), x.mean()), [X], id="mean"),
    pytest.param(lambda m, x: (x.sum(1), x.sum(), x.sum((0, 2), keepdim=True)), [X], id="sum"),
    pytest.param(lambda m, x: (x.amax(1), x.amin((2, 3), keepdim=True), x.max(), x.min()), [X],
                 id="amax_amin"),
    pytest.param(lambda m, x: (*x.max(1), *x.min(-1, keepdim=True), x.argmax(2), x.argmin()), [X],
                 id="max_dim_argmax"),
    pytest.param(lambda m, x: (x.var(1), x.std(-1, keepdim=True), x.var(2, unbiased=False)), [X],
                 id="var_std"),
    pytest.param(lambda m, x: (x.prod(1), torch.logsumexp(x, 2), torch.cumsum(x, 3)), [X],
                 id="prod_logsumexp_cumsum"),
    pytest.param(lambda m, x: ((x > 0).all(1), (x > 1).any(-1)), [X], id="all_any"),
    # shapes
    pytest.param(lambda m, x: (x.view(2, -1), x.reshape(6, 20), x.view(x.size(0), x.size(1), -1)), [X],
                 id="view_reshape"),
    pytest.param(lambda m, x: (x.flatten(1), torch.flatten(x), x.flatten(1, 2),
                               x.unflatten(3, (1, 5))), [X], id="flatten_unflatten"),
    pytest.param(lambda m, x: (x.permute(0, 2, 3, 1), x.transpose(1, 3).contiguous(), x[0, 0].t()),
                 [X], id="permute_transpose_t"),
    pytest.param(lambda m, x: (x[:, :1].squeeze(1), x[:1].squeeze(), x.unsqueeze(0), x.unsqueeze(-1)),
                 [X], id="squeeze_unsqueeze"),
    pytest.param(lambda m, x, y: (x[:, :, :1].expand(-1, -1, 4, -1), x[0, :1].expand_as(y[0]),
                                  x.repeat(1, 2, 1, 1), x.repeat(2, 1, 1, 1, 1)), [X, Y],
                 id="expand_repeat"),
    pytest.param(lambda m, x: x.repeat_interleave(2, dim=1), [X], id="repeat_interleave"),
    pytest.param(lambda m, x, y: (torch.cat([x, y], 1), torch.cat((x, y, x), -1), torch.stack([x, y], 2)),
                 [X, Y], id="cat_stack"),
    pytest.param(lambda m, x: (*x.split(2, 1), *torch.split(x, [1, 3], 2), *x.chunk(2, -1),
                               *x.unbind(1)), [X], id="split_chunk_unbind"),
    pytest.param(lambda m, x: (x[:, 1:], x[..., ::2], x[:, :, 1:-1, -3:], x[:, -2:, ::3]), [X], id="slice"),
    pytest.param(lambda m, x: (x[:, 1], x[..., -1], x.select(2, 2), x.narrow(3, 1, 3)), [X],
                 id="select_narrow"),
    pytest.param(lambda m, x, i: (x.index_select(1, i), x[:, i], torch.gather(x, 3, i.view(1, 1, 1, 3)
                                                                          .expand(2, 3, 4, 3))),
                 [X, ri(3, 3)], id="index_select_gather"),
    pytest.param(lambda m, i: m.emb(i), [ri(10, 2, 5)], id="embedding"),
    pytest.param(lambda m, x: (x.flip(1), x.flip((2, 3)), torch.triu(x), torch.tril(x, -1)), [X],
                 id="flip_triu"),
    # resampling and padding
    pytest.param(lambda m, x: (F.interpolate(x, scale_factor=2, mode="nearest"),
                               F.interpolate(x, size=(6, 9), mode="nearest")), [X], id="upsample_nearest"),
    pytest.param(lambda m, x: (F.interpolate(x, scale_factor=2, mode="bilinear"),
                               F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=True),
                               F.interpolate(x, size=(3, 3), mode="bilinear")), [X], id="upsample_bilinear"),
    pytest.param(lambda m, x: (F.interpolate(x, scale_factor=2, mode="nearest"),
                               F.interpolate(x, size=11, mode="linear")), [V], id="upsample_1d"),
    pytest.param(lambda m, x: (F.pad(x, (1, 2)), F.pad(x, (1, 1, 2, 0), value=0.5),
                               F.pad(x, (2, 1, 1, 2), mode="reflect"), F.pad(x, (1, 1, 1, 1),
                                                                            mode="replicate")),
                 [X], id="pad"),
    pytest.param(lambda m, x: (F.pad(x, (2, 1), mode="reflect"), F.pixel_shuffle(x.view(2, 12, 2, 1), 2)),
                 [V], id="pad1d_pixel_shuffle"),
    pytest.param(lambda m, x: (F.interpolate(x, scale_factor=2, mode="nearest-exact"),
                               *x.tensor_split([1, 3], dim=3), *x.tensor_split(2, dim=1),
                               F.avg_pool2d(x, 2, divisor_override=3)), [X], id="nearest_exact_tensor_split"),
    pytest.param(lambda m, x: (m.c(x[0]), F.max_pool2d(x[0], 2), F.adaptive_avg_pool2d(x[0], 2)), [X],
                 id="unbatched"),
    # attention, dropout
    pytest.param(lambda m, q, k, v: (F.scaled_dot_product_attention(q, k, v),
                                     F.scaled_dot_product_attention(q, k, v, is_causal=True)),
                 [r(2, 2, 5, 8), r(2, 2, 5, 8, seed=1), r(2, 2, 5, 8, seed=2)], id="sdpa"),
    pytest.param(lambda m, q, k, v, mask: (F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                                           F.scaled_dot_product_attention(q, k, v, attn_mask=mask > 0,
                                                                          scale=0.3)),
                 [r(2, 2, 5, 8), r(2, 2, 6, 8, seed=1), r(2, 2, 6, 4, seed=2), r(5, 6, seed=3).abs()],
                 id="sdpa_mask"),
    pytest.param(lambda m, x: m.d(x) * 2, [X], id="dropout"),
    # recurrent layers
    pytest.param(lambda m, x: m.rnn(x), [r(2, 5, 4)], id="lstm"),
    pytest.param(lambda m, x, h, c: m.rnn(x, (h, c)), [r(5, 2, 4), r(4, 2, 6), r(4, 2, 6, seed=1)],
                 id="lstm_bidirectional_state"),
    pytest.param(lambda m, x: m.rnn(x), [r(2, 5, 4)], id="gru"),
    pytest.param(lambda m, x, h: m.rnn(x, h), [r(5, 2, 4), r(2, 2, 6)], id="gru_bidirectional_state"),
    pytest.param(lambda m, x: m.rnn(x), [r(2, 5, 4)], id="rnn_tanh"),
    pytest.param(lambda m, x: m.rnn(x), [r(5, 4)], id="rnn_relu_unbatched"),
    # creation and casts
    pytest.param(lambda m, x: (x + torch.arange(5), x * torch.arange(0.5, 3.0, 0.5)[:5],
                               x + torch.zeros(5), x + torch.ones(4, 5), x + torch.full((5,), 2.5)), [X],
                 id="arange_zeros_ones_full"),
    pytest.param(lambda m, x: (torch.zeros_like(x) + x, torch.ones_like(x), torch.full_like(x, 3.0),
                               x.new_zeros((2, 3)), x.new_ones(3) + 1), [X], id="like"),
    pytest.param(lambda m, x, i: ((x * 3).to(torch.int64), x.to(torch.float64), i.float() * x[0, 0, 0, :3],
                                  i.type_as(x), (x > 0).long().sum(1)), [X, ri(4, 3)], id="casts"),
]

MODS: dict[str, Callable[[], dict[str, nn.Module]]] = {
    "relu_relu6": lambda: {"r": nn.ReLU(inplace=True)},
    "prelu": lambda: {"p": nn.PReLU(3, init=0.1)},
    "conv1d": lambda: {"c": nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2)},
    "conv2d": lambda: {"c": nn.Conv2d(4, 6, 3, stride=2, padding=(1, 2), dilation=(1, 2), groups=2,
                                      bias=False)},
    "conv2d_same": lambda: {"c": nn.Conv2d(4, 4, (3, 4), padding="same")},
    "conv2d_depthwise": lambda: {"c": nn.Conv2d(6, 6, 3, padding=1, groups=6)},
    "conv_transpose2d": lambda: {"c": nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)},
    "conv_transpose1d": lambda: {"c": nn.ConvTranspose1d(4, 2, 4, stride=2, padding=1)},
    "linear": lambda: {"fc": nn.Linear(8, 5)},
    "batch_norm2d": lambda: {"bn": _bn(3)},
    "batch_norm1d": lambda: {"bn": _bn(3, 1)},
    "layer_norm": lambda: {"ln": nn.LayerNorm((4, 5))},
    "group_norm": lambda: {"gn": nn.GroupNorm(3, 6)},
    "embedding": lambda: {"emb": nn.Embedding(10, 4)},
    "dropout": lambda: {"d": nn.Dropout(0.5)},
    "lstm": lambda: {"rnn": nn.LSTM(4, 6, num_layers=2, batch_first=True)},
    "lstm_bidirectional_state": lambda: {"rnn": nn.LSTM(4, 6, num_layers=2, bidirectional=True)},
    "gru": lambda: {"rnn": nn.GRU(4, 6, batch_first=True)},
    "gru_bidirectional_state": lambda: {"rnn": nn.GRU(4, 6, bidirectional=True)},
    "rnn_tanh": lambda: {"rnn": nn.RNN(4, 6, batch_first=True)},
    "rnn_relu_unbatched": lambda: {"rnn": nn.RNN(4, 6, nonlinearity="relu", bidirectional=True)},
    "unbatched": lambda: {"c": nn.Conv2d(3, 2, 3, padding=1)},
}


def _case_model(case_id: str, fn: Callable[..., Any]) -> nn.Module:
    torch.manual_seed(0)
    mods = MODS.get(case_id, dict)()
    if "ln" in mods:
        with torch.no_grad():
            mods["ln"].weight.uniform_(0.5, 1.5)
            mods["ln"].bias.uniform_(-0.5, 0.5)
    return Fn(fn, **mods)


# Recurrent cases unroll into many kernels (slow to compile): the LSTM/GRU taggers of
# test_pytorch_models.py cover them in the default run.
SLOW_CASES = {"lstm", "lstm_bidirectional_state", "gru", "gru_bidirectional_state", "rnn_tanh",
              "rnn_relu_unbatched"}
N_CHUNKS = 3


class Merged(nn.Module):
    """Several cases in one module (one export and one build for all): a flat tuple of outputs."""

    def __init__(self, cases: Sequence[Any]):
        super().__init__()
        self.ids = [p.id for p in cases]
        self.parts = nn.ModuleList([_case_model(p.id, p.values[0]) for p in cases])
        self.n_in = [len(p.values[1]) for p in cases]

    def forward(self, *xs: torch.Tensor) -> tuple[Any, ...]:
        outs: list[Any] = []
        i = 0
        for part, n in zip(self.parts, self.n_in):
            outs.extend(_flat(part(*xs[i:i + n])))
            i += n
        return tuple(outs)


# The cases whose TorchScript graphs differ most from the exported ones (size arithmetic,
# aten::_convolution, in-place ops, list unpacking, aten::to, .vec overloads, Python scalars):
# the default run imports these through torch.jit.trace too; --runslow traces every case.
SCRIPT_CASES = {"add", "inplace", "div_rounding", "relu_relu6", "conv2d", "conv2d_same", "conv_transpose2d",
                "view_reshape", "split_chunk_unbind", "slice", "max_dim_argmax", "upsample_nearest",
                "upsample_bilinear", "casts", "arange_zeros_ones_full", "like", "sdpa_mask", "expand_repeat"}


def _chunk(chunk: str) -> list[Any]:
    fast = [p for p in CASES if p.id not in SLOW_CASES]
    if chunk == "traced":
        return [p for p in fast if p.id in SCRIPT_CASES]
    if chunk == "traced_rest":
        return [p for p in fast if p.id not in SCRIPT_CASES]
    return fast[int(chunk)::N_CHUNKS]


@pytest.mark.parametrize(("chunk", "entry"), [
    *((str(k), "export") for k in range(N_CHUNKS)),
    ("traced", "script"),
    pytest.param("traced_rest", "script", marks=pytest.mark.slow),
])
def test_converters(chunk: str, entry: str) -> None:
    """The (non-recurrent) cases merged into a few modules, through one entry point."""
@pytest.mark.slow
@pytest.mark.parametrize("entry", ["export", "script"])
@pytest.mark.parametrize(("case_id", "fn", "inputs"),
                         [pytest.param(p.id, *p.values, id=p.id, marks=p.marks) for p in CASES])
def test_converter(case_id: str, fn: Callable[..., Any], inputs: list[torch.Tensor], entry: str) -> None:
    """Each case on its own (slow: one build per case)."""
    check(_case_model(case_id, fn), inputs, entry)


# --- behaviour of the importer ---------------------------------------------------------------------
class _Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = _bn(4)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.bn(self.conv(x))).mean((2, 3)))


def test_params_named_after_state_dict() -> None:
    """Unfrozen, the weights are params named after their state_dict names (both entry points)."""
    model = _Small().eval()
    x = r(1, 3, 6, 6)
    for entry in ("export", "script"):
        mod, params, _ = import_module(model, [x], entry, freeze_params=False)
        assert {"conv.weight", "conv.bias", "bn.running_mean", "fc.weight"} <= set(params)
        np.testing.assert_array_equal(params["conv.weight"].numpy(), model.conv.weight.detach().numpy())
        assert {p.name_hint for p in mod["main"].params} >= {"conv.weight", "fc.bias"}
    assert check(model, [x], "script", freeze_params=False) < RTOL


def test_frozen_export_has_no_params() -> None:
    mod, params, names = import_module(_Small().eval(), [r(1, 3, 6, 6)], "export")
    assert params == {} and names == ["x"]
    assert [p.name_hint for p in mod["main"].params] == ["x"]


def test_parser_friendly_names() -> None:
    traced = torch.jit.trace(_Small().eval(), (r(1, 3, 6, 6),))
    _, params = from_pytorch(traced, [("data", [1, 3, 6, 6])], use_parser_friendly_name=True)
    assert "conv_weight" in params and "conv.weight" not in params


def _sources(mod: Any) -> set[str]:
    from kiln.ir import Call, post_order

    return {s for node in post_order(mod["main"].body) if isinstance(node, Call)
            for s in node.source_names}


def test_provenance_module_paths() -> None:
    """Calls carry ``<module path>/<node>`` source names, into the built graph JSON."""
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
            self.bn1 = _bn(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.relu(self.bn1(self.conv1(x)))

    model = nn.Sequential(nn.Sequential(Block())).eval()
    x = r(1, 3, 6, 6)
    mod_e, _, _ = import_module(model, [x], "export")
    mod_s, _, _ = import_module(model, [x], "script")
    src_e, src_s = _sources(mod_e), _sources(mod_s)
    assert any(s.startswith("0.0.conv1/") for s in src_e), src_e
    assert any(s.startswith("0.0.bn1/") for s in src_e), src_e
    assert any(s.startswith("0.0.conv1/") for s in src_s), src_s
    import kiln
    from kiln import relay

    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod_e, target="llvm")
    assert "0.0.conv1/conv2d" in lib.get_graph_json()


def test_unsupported_ops_listed_together() -> None:
    """Every unsupported op is reported at once, with its node names, before converting."""
    model = Fn(lambda m, x: torch.fft.fft(x).real + torch.special.i0(x) + torch.special.i0(x * 2))
    x = r(2, 8)
    with pytest.raises(UnsupportedOpError) as info:
        import_module(model, [x], "export")
    msg = str(info.value)
    assert "i0" in msg and "fft" in msg, msg
    assert "special_i0" in msg or "i0_1" in msg or "i0" in msg
    with pytest.raises(UnsupportedOpError) as info:
        import_module(Fn(lambda m, x: torch.special.i0(x) + torch.special.i0(x * 2)), [x], "script")
    assert re.search(r"aten::special_i0|aten::i0", str(info.value)), str(info.value)


def test_control_flow_unsupported() -> None:
    class Branch(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:
                return x * 2
            return x

    scripted = torch.jit.script(Branch())
    with pytest.raises(UnsupportedOpError, match="prim::If"):
        from_pytorch(scripted, [("x", [2, 3])])


def test_custom_convert_map() -> None:
    from kiln import relay

    calls: list[list[str]] = []

    def my_i0(inputs: list[Any], types: list[str]) -> Any:
        calls.append(types)
        return relay.add(inputs[0], relay.const(1.0))

    x = r(2, 3)
    traced = torch.jit.trace(Fn(lambda m, x: torch.special.i0(x) * 2), (x,))
    mod, params = from_pytorch(traced, [("x", [2, 3])], custom_convert_map={"aten::special_i0": my_i0,
                                                                             "aten::i0": my_i0})
    out = run_compiled(mod, params, {"x": x.numpy()})[0]
    np.testing.assert_allclose(out, (x.numpy() + 1) * 2, rtol=1e-6)
    assert calls and calls[0][0] == "float32"


@pytest.mark.parametrize("infos", [
    None,
    [],
    [("x", [2, 3]), ("y", [2, 3])],
    [("x",)],
    [("x", "not a shape")],
    [("x", [2, -1])],
    "x",
])
def test_bad_input_infos(infos: Any) -> None:
    traced = torch.jit.trace(Fn(lambda m, x: x + 1), (r(2, 3),))
    with pytest.raises(FrontendError, match="input"):
        from_pytorch(traced, infos)


def test_input_infos_with_dtype_and_new_shape() -> None:
    """``(name, (shape, dtype))`` entries; a traced module takes a new static shape."""
    model = Fn(lambda m, x, i: m.emb(i).sum(1) + x.mean(), emb=nn.Embedding(7, 3))
    traced = torch.jit.trace(model, (r(2, 3), ri(7, 2, 4)))
    x, i = r(3, 5), ri(7, 3, 6)
    mod, params = from_pytorch(traced, [("x", ([3, 5], "float32")), ("idx", ([3, 6], "int64"))])
    assert [p.name_hint for p in mod["main"].params][:2] == ["x", "idx"]
    out = run_compiled(mod, params, {"x": x.numpy(), "idx": i.numpy()})
    with torch.no_grad():
        compare(out, [model(x, i)])


def test_wrong_argument_types() -> None:
    with pytest.raises(FrontendError, match="ExportedProgram"):
        from_torch_export(nn.Linear(2, 2))
    with pytest.raises(FrontendError, match="TorchScript"):
        from_pytorch(nn.Linear(2, 2), [("x", [1, 2])])


def test_relay_entry_point() -> None:
    from kiln import relay

    traced = torch.jit.trace(_Small().eval(), (r(1, 3, 6, 6),))
    mod, params = relay.frontend.from_pytorch(traced, [("data", [1, 3, 6, 6])])
    assert "conv.weight" in params and mod["main"].params[0].name_hint == "data"


def test_training_mode_batch_norm_rejected() -> None:
    model = _Small().train()
    traced = torch.jit.trace(model, (r(2, 3, 6, 6),), check_trace=False)
    with pytest.raises(FrontendError, match="eval"):
        from_pytorch(traced, [("x", [2, 3, 6, 6])])


class _CoreMix(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.gn = nn.Conv2d(3, 8, 3, padding=1), _bn(8), nn.GroupNorm(2, 8)
        self.fc, self.rnn, self.ln = nn.Linear(8, 4), nn.GRU(4, 5, batch_first=True), nn.LayerNorm(5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = F.max_pool2d(F.interpolate(F.hardswish(self.gn(self.bn(self.conv(x)))), scale_factor=2,
                                       mode="bilinear"), 2)
        z = F.softmax(self.fc(F.gelu(y.mean((2, 3)))), -1).unsqueeze(1).expand(-1, 3, -1)
        o, _ = self.rnn(z)
        return self.ln(o), F.scaled_dot_product_attention(o, o, o, is_causal=True)


def test_core_aten_program() -> None:
    """A program decomposed to core ATen (convolution, addmm, native norms, unrolled GRU, ...)."""
    torch.manual_seed(0)
    model = _CoreMix().eval()
    x = r(2, 3, 8, 8)
    ep = torch.export.export(model, (x,)).run_decompositions()
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert {"aten.convolution.default", "aten.addmm.default", "aten.native_layer_norm.default",
            "aten._native_batch_norm_legit_no_training.default"} <= targets
    mod, params = from_torch_export(ep)
    with torch.no_grad():
        compare(run_compiled(mod, params, {"x": x.numpy()}), _flat(model(x)))


def test_decomposes_when_needed() -> None:
    """Operators without a converter (addcmul, lerp, hardshrink, glu) are decomposed first."""
    model = Fn(lambda m, x: (torch.addcmul(x, x, x, value=0.5), torch.lerp(x, x * 2, 0.3),
                             F.hardshrink(x), F.glu(x, -1)))
    x = r(2, 4)
    ep = torch.export.export(model, (x,))
    with pytest.raises(UnsupportedOpError, match="addcmul"):
        from_torch_export(ep, decompose=False)
    mod, params = from_torch_export(ep)
    name = mod["main"].params[0].name_hint  # the placeholder of forward(*xs)
    with torch.no_grad():
        compare(run_compiled(mod, params, {name: x.numpy()}), _flat(model(x)))


def test_fast_path_fused_ops_script() -> None:
    """Traced under no_grad, eval-mode attention runs PyTorch's fused fast path:
    aten::_transformer_encoder_layer_fwd and aten::_native_multi_head_attention."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, activation="gelu", norm_first=True)
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    model = Fn(lambda m, x: (m.layer(x), *m.mha(x, x, x)), layer=layer, mha=mha).eval()
    x = r(2, 5, 16)
    with torch.no_grad():
        traced = torch.jit.trace(model, (x,), check_trace=False)
        expected = _flat(model(x))
    graph = traced.graph.copy()
    torch._C._jit_pass_inline(graph)
    kinds = {n.kind() for n in graph.nodes()}
    assert {"aten::_transformer_encoder_layer_fwd", "aten::_native_multi_head_attention"} <= kinds
    mod, params = from_pytorch(traced, [("x", [2, 5, 16])])
    compare(run_compiled(mod, params, {"x": x.numpy()}), expected)


def test_doc_table_matches_converters() -> None:
    """docs/frontends/pytorch.md lists exactly the converter table's operators."""
    text = DOC.read_text()
    block = text.split("<!-- ops:begin -->", 1)[1].split("<!-- ops:end -->", 1)[0]
    listed = set(re.findall(r"`([A-Za-z0-9_]+)`", block))
    assert listed == set(CONVERTERS), (sorted(listed - set(CONVERTERS)), sorted(set(CONVERTERS) - listed))
    assert supported_ops() == sorted(CONVERTERS)
