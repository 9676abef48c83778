"""Transposes through vector registers (``kiln.codegen.c_transpose``): compiled kernels against
NumPy, for the native vector width and an AVX2 build (16 and 8 lanes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kiln import relay
from kiln.codegen.c_transpose import transpose_helper
from kiln.codegen.native import build_native
from kiln.ir.module import IRModule
from kiln.transform.infer_type import infer_type

pytestmark = pytest.mark.requires_cc

TARGETS = ["c", "llvm -mcpu=znver3"]


def _typed(params: list, body: relay.Expr) -> relay.Function:
    return infer_type(IRModule.from_expr(relay.Function(params, body)))["main"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_padded_key_transpose_of_attention(target: str, dtype: str) -> None:
    """ViT's K^T: a head's (tokens, 64) block of the QKV projection, transposed to (64, tokens)
    with the tokens padded to whole vectors (AlterBatchMatmul's B operand)."""
    x = relay.var("x", shape=(1, 197, 3, 3, 64), dtype=dtype)
    k = relay.strided_slice(x, begin=[0, 0, 1, 0, 0], end=[1, 197, 2, 3, 64])
    k = relay.reshape(relay.transpose(k, (2, 0, 3, 1, 4)), (3, 197, 64))
    k = relay.nn.pad(k, pad_width=((0, 0), (0, 11), (0, 0)))
    lib = build_native({"vit_key_transpose": _typed([x], relay.transpose(k, (0, 2, 1)))}, target)
    assert any("transpose through registers" in Path(s).read_text() for s in lib.sources)
    a = (np.random.default_rng(0).standard_normal((1, 197, 3, 3, 64)) * 100).astype(dtype)
    out = np.full((3, 64, 208), 7, dtype)
    lib.kernel("vit_key_transpose")(a, out)
    want = np.pad(a[0, :, 1].transpose(1, 0, 2), ((0, 0), (0, 11), (0, 0))).transpose(0, 2, 1)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_the_helper_trades_every_index_bit(lanes: int) -> None:
    """The helper's shuffles, interpreted: element (i, l) ends at (l, i)."""
    rows = [[(i, lane) for lane in range(lanes)] for i in range(lanes)]
    for line in transpose_helper("float32", lanes).splitlines():
        line = line.strip()
        if line.startswith("a = r["):
            i, j = (int(t.split("]")[0]) for t in line.split("r[")[1:])
            a, b = rows[i], rows[j]
        elif "__builtin_shufflevector" in line:
            dest = int(line.split("]")[0].split("[")[1])
            picks = [int(t) for t in line.split("(a, b, ")[1].rstrip(");").split(", ")]
            rows[dest] = [(a + b)[p] for p in picks]
    assert rows == [[(lane, i) for lane in range(lanes)] for i in range(lanes)]


@pytest.mark.parametrize("target", TARGETS)
def test_concatenated_blocked_maps_to_plain_layout(target: str) -> None:
    """YOLOv8n's detect head: two NCHW{c} maps concatenated on channels and unblocked to NCHW
    (rows chosen per tile by a condition on the tile, not on the lanes)."""
    lanes = 16 if target == "c" else 8
    a = relay.var("a", shape=(1, 2, 6, 8, lanes), dtype="float32")
    b = relay.var("b", shape=(1, 3, 6, 8, lanes), dtype="float32")
    cat = relay.concatenate([a, b], axis=1)
    plain = relay.layout_transform(cat, f"NCHW{lanes}c", "NCHW")
    func = _typed([a, b], relay.reshape(plain, (1, 5 * lanes, 48)))
    lib = build_native({"head_unblock": func}, target)
    assert any("transpose through registers" in Path(s).read_text() for s in lib.sources)
    rng = np.random.default_rng(1)
    xa = rng.standard_normal((1, 2, 6, 8, lanes)).astype("float32")
    xb = rng.standard_normal((1, 3, 6, 8, lanes)).astype("float32")
    out = np.zeros((1, 5 * lanes, 48), "float32")
    lib.kernel("head_unblock")(xa, xb, out)
    want = np.concatenate([xa, xb], axis=1).transpose(0, 1, 4, 2, 3).reshape(1, 5 * lanes, 48)
    np.testing.assert_array_equal(out, want)



@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("block", [4, 8])
def test_weight_scaled_per_input_channel_while_packed(target: str, block: int) -> None:
    """A squeeze-excitation gate folded into the next 1x1 conv's weight (FoldScaleAxis with a
    run-time scale): ``W[o, i] * s[i]`` packed to ``OIHW{b}i{b}o`` at run time, each row one
    vector load and one multiply before the transpose."""
    o, i = 3 * block, 5 * block
    w = relay.var("w", shape=(o, i, 1, 1), dtype="float32")
    s = relay.var("s", shape=(i,), dtype="float32")
    scaled = relay.multiply(w, relay.reshape(s, (1, i, 1, 1)))
    packed = relay.layout_transform(scaled, "OIHW", f"OIHW{block}i{block}o")
    lib = build_native({"pack_scaled": _typed([w, s], packed)}, target)
    assert any("transpose through registers" in Path(src).read_text() for src in lib.sources)
    rng = np.random.default_rng(2)
    xw = rng.standard_normal((o, i, 1, 1)).astype("float32")
    xs = rng.standard_normal(i).astype("float32")
    out = np.zeros((3, 5, 1, 1, block, block), "float32")
    lib.kernel("pack_scaled")(xw, xs, out)
    want = (xw * xs[None, :, None, None]).reshape(3, block, 5, block).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(out, want.reshape(3, 5, 1, 1, block, block))
