"""DFT, STFT and MelWeightMatrix: imported as products with constant matrices.

Oracles: ``numpy.fft`` in float64 (DFT, STFT: a window times framed slices, then ``rfft``) and
ONNX's own reference evaluator (MelWeightMatrix).
"""

from __future__ import annotations

import numpy as np
import onnx.reference
import pytest
from onnx import TensorProto, helper

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.errors import FrontendError
from kiln.frontend.onnx import from_onnx
from tests.frontend._onnx_helpers import make_model, node, run_kiln, value_info

F32 = np.float32


def _ints(name: str, values: list[int] | int) -> TensorProto:
    values = [values] if isinstance(values, int) else values
    return helper.make_tensor(name, TensorProto.INT64, [] if len(values) == 1 else [len(values)],
                              values)


def _as_complex(x: np.ndarray) -> np.ndarray:
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0]


def _as_pairs(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1)


def _dft_model(shape, opset, axis, length=None, **attrs):
    inputs = ["x", "n" if length is not None else ""]
    inits = [_ints("n", length)] if length is not None else []
    if opset >= 20:
        inputs.append("axis")
        inits.append(_ints("axis", axis))
    else:
        attrs["axis"] = axis
    while inputs and inputs[-1] == "":
        inputs.pop()
    return make_model([node("DFT", inputs, ["y"], **attrs)], [value_info("x", F32, shape)],
                      [value_info("y", F32, None)], inits, opset=opset)


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("axis, length, inverse, onesided", [
    (1, None, 0, 0), (1, 12, 0, 0), (1, 7, 0, 0), (1, None, 0, 1), (2, None, 0, 0),
    (1, None, 1, 0), (1, 16, 1, 0),
])
def test_dft_matches_numpy(opset, parts, axis, length, inverse, onesided):
    shape = [2, 10, 3, parts]
    x = np.random.default_rng(0).standard_normal(shape).astype(F32)
    model = _dft_model(shape, opset, axis, length, inverse=inverse, onesided=onesided)
    z = _as_complex(x.astype(np.float64))
    n = length or shape[axis]
    want = np.fft.ifft(z, n=n, axis=axis) if inverse else np.fft.fft(z, n=n, axis=axis)
    if onesided:
        want = np.take(want, np.arange(n // 2 + 1), axis=axis)
    (got,) = run_kiln(model, {"x": x})
    assert got.dtype == F32
    np.testing.assert_allclose(got, _as_pairs(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("length", [None, 9, 8])
def test_inverse_onesided_is_irfft(length):
    spectrum = np.fft.rfft(np.random.default_rng(1).standard_normal((3, 8)), axis=1)
    x = _as_pairs(spectrum).astype(F32)  # (3, 5, 2)
    model = _dft_model(list(x.shape), 20, 1, length, inverse=1, onesided=1)
    (got,) = run_kiln(model, {"x": x})
    want = np.fft.irfft(spectrum, n=length or 8, axis=1)[..., None]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("with_window", [True, False])
@pytest.mark.parametrize("onesided", [1, 0])
def test_stft_matches_numpy(with_window, onesided):
    signal = np.random.default_rng(2).standard_normal((2, 64, 1)).astype(F32)
    window = np.hanning(16).astype(F32)
    inputs = ["x", "step", "w" if with_window else "", "frame"]
    inits = [_ints("step", 6), _ints("frame", 16)]
    graph_inputs = [value_info("x", F32, [2, 64, 1])]
    if with_window:
        graph_inputs.append(value_info("w", F32, [16]))
    model = make_model([node("STFT", inputs, ["y"], onesided=onesided)], graph_inputs,
                       [value_info("y", F32, None)], inits, opset=17)
    feeds = {"x": signal, **({"w": window} if with_window else {})}
    (got,) = run_kiln(model, feeds)
    frames = 1 + (64 - 16) // 6
    starts = np.arange(frames) * 6
    framed = np.stack([signal[:, s:s + 16, 0] for s in starts], axis=1).astype(np.float64)
    if with_window:
        framed = framed * window
    spectrum = np.fft.rfft(framed, axis=-1) if onesided else np.fft.fft(framed, axis=-1)
    np.testing.assert_allclose(got, _as_pairs(spectrum), rtol=1e-5, atol=1e-5)


def test_dft_compiles_to_c():
    shape = [2, 10, 3, 2]
    model = _dft_model(shape, 20, 1, None, onesided=0)
    x = np.random.default_rng(3).standard_normal(shape).astype(F32)
    mod, params = from_onnx(model)
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="c", params=params)
    module = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    module.run(x=x)
    want = _as_pairs(np.fft.fft(_as_complex(x.astype(np.float64)), axis=1))
    np.testing.assert_allclose(module.get_output(0).numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bins, length, rate, low, high", [(8, 16, 8192, 0.0, 4096.0),
                                                           (20, 64, 16000, 30.0, 7000.0)])
def test_mel_weight_matrix_matches_the_onnx_reference(bins, length, rate, low, high):
    inits = [_ints("bins", bins), _ints("len", length), _ints("rate", rate),
             helper.make_tensor("low", TensorProto.FLOAT, [], [low]),
             helper.make_tensor("high", TensorProto.FLOAT, [], [high])]
    model = make_model([node("MelWeightMatrix", ["bins", "len", "rate", "low", "high"], ["y"])],
                       [], [value_info("y", F32, None)], inits, opset=17)
    (want,) = onnx.reference.ReferenceEvaluator(model).run(None, {})
    (got,) = run_kiln(model, {})
    assert got.shape == (length // 2 + 1, bins) and got.dtype == F32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_dft_over_the_pair_axis_is_an_error():
    model = _dft_model([2, 10, 2], 20, -1)
    with pytest.raises(FrontendError, match="is the .real, imaginary. axis"):
        from_onnx(model)
