"""nn.correlation and nn.bitpack against NumPy (TVM's reference semantics)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.errors import KilnTypeError
from kiln.relay.testing import run_infer_type
from kiln.topi.testing import correlation_nchw_python


def _run(func: relay.Function, target: str, *args: np.ndarray) -> np.ndarray:
    return relay.create_executor("graph", device=kiln.cpu(), target=target).evaluate(func)(*args).numpy()


@pytest.mark.parametrize(("target", "shape", "k", "md", "s1", "s2", "pad", "mult"), [
    ("llvm", (1, 3, 10, 10), 1, 4, 1, 1, 4, True),
    ("numpy", (2, 1, 4, 4), 3, 1, 2, 1, 2, True),
    ("llvm", (2, 2, 6, 4), 3, 1, 2, 2, 2, False),
    ("numpy", (1, 1, 11, 11), 5, 1, 1, 1, 2, False),
])
def test_correlation_matches_numpy(target: str, shape: tuple[int, ...], k: int, md: int, s1: int,
                                   s2: int, pad: int, mult: bool) -> None:
    a = relay.var("a", shape=shape)
    b = relay.var("b", shape=shape)
    y = relay.nn.correlation(a, b, k, md, s1, s2, pad, mult, "NCHW")
    rng = np.random.default_rng(0)
    x1, x2 = rng.random(shape, dtype=np.float32), rng.random(shape, dtype=np.float32)
    want = correlation_nchw_python(x1, x2, k, md, s1, s2, pad, mult)
    assert run_infer_type(y).checked_type == relay.TensorType(want.shape, "float32")
    got = _run(relay.Function([a, b], y), target, x1, x2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_correlation_output_size_rounds_up_as_tvms_relation() -> None:
    # padded 7 - 2 * border 0 = 7 positions at stride 3: TVM's relation gives ceil(7 / 3) = 3
    a = relay.var("a", shape=(1, 1, 7, 7))
    y = relay.nn.correlation(a, a, 1, 0, 3, 1, 0, True)
    assert run_infer_type(y).checked_type.shape == (1, 1, 3, 3)


def test_correlation_type_errors() -> None:
    a = relay.var("a", shape=(1, 1, 4, 4))
    b = relay.var("b", shape=(1, 1, 4, 5))
    with pytest.raises(KilnTypeError, match="one shape"):
        run_infer_type(relay.nn.correlation(a, b, 1, 1, 1, 1, 1, True))
    with pytest.raises(KilnTypeError, match="odd"):
        run_infer_type(relay.nn.correlation(a, a, 2, 1, 1, 1, 1, True))


def _bitpack_loops(data: np.ndarray, bits: int, pack_axis: int, bit_axis: int, width: int) -> np.ndarray:
    """TVM's topi.nn.bitpack written as loops: element k of a word goes to bit (width - 1 - k)."""
    moved = np.moveaxis(data, pack_axis, -1)
    out = np.zeros((*moved.shape[:-1], moved.shape[-1] // width, bits), dtype=np.uint64)
    for idx in np.ndindex(*moved.shape[:-1]):
        for word in range(moved.shape[-1] // width):
            for b in range(bits):
                value = 0
                for k in range(width):
                    value = (value << 1) | ((int(moved[(*idx, word * width + k)]) >> b) & 1)
                out[(*idx, word, b)] = value
    out = np.moveaxis(out, -1, 0)  # (bits, ..., words)
    out = np.moveaxis(out, -1, pack_axis + 1)
    return np.moveaxis(out, 0, bit_axis)


@pytest.mark.parametrize("target", ["numpy", "c"])
@pytest.mark.parametrize(("shape", "bits", "pack_axis", "bit_axis", "pack_type", "width"), [
    ((2, 16, 3), 1, 1, 3, "uint16", 16),
    ((2, 8, 3), 2, 1, 1, "uint8", 8),
    ((16, 3), 3, 0, 2, "uint8", 8),
    ((2, 64), 2, 1, 1, "uint32", 32),
])
def test_bitpack_matches_tvms_loops(shape: tuple[int, ...], bits: int, pack_axis: int, bit_axis: int,
                                    pack_type: str, width: int, target: str) -> None:
    x = relay.var("x", shape=shape, dtype="int32")
    y = relay.nn.bitpack(x, bits=bits, pack_axis=pack_axis, bit_axis=bit_axis, pack_type=pack_type)
    data = np.random.default_rng(1).integers(0, 8, size=shape).astype("int32")
    want = _bitpack_loops(data, bits, pack_axis, bit_axis, width).astype(pack_type)
    assert run_infer_type(y).checked_type == relay.TensorType(want.shape, pack_type)
    got = _run(relay.Function([x], y), target, data)
    np.testing.assert_array_equal(got, want)


def test_bitpack_rejects_a_partial_word() -> None:
    x = relay.var("x", shape=(2, 12), dtype="int32")
    with pytest.raises(KilnTypeError, match="multiple of the 8 bits"):
        run_infer_type(relay.nn.bitpack(x, pack_axis=1, bit_axis=2, pack_type="uint8"))
