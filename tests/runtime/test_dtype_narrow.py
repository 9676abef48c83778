"""Narrow dtypes in the dtype table and the runtime: names, bit widths, ranges, NDArrays filled
from float32 (as TVM's harness does), params files with DLPack's type codes."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln.errors import ParamsFormatError
from kiln.ir.types import TensorType
from kiln.runtime.dtype import (
    NARROW_FLOATS,
    NARROW_INTS,
    as_dtype,
    compute_dtype,
    dtype_bits,
    dtype_range,
    has_inf,
    is_float,
    is_int,
    is_narrow,
    np_dtype,
    storage_dtype,
)
from kiln.runtime.params import load_param_dict, save_param_dict

NARROW = sorted(NARROW_FLOATS | NARROW_INTS)


@pytest.mark.parametrize("name", NARROW)
def test_names_round_trip_through_ml_dtypes(name: str) -> None:
    npt = getattr(ml_dtypes, name)
    assert as_dtype(name) == name
    assert as_dtype(npt) == name
    assert as_dtype(np.dtype(npt)) == name
    assert np_dtype(name) == np.dtype(npt)
    assert np_dtype(name).itemsize == np.dtype(storage_dtype(name)).itemsize
    assert is_narrow(name)
    assert is_float(name) == (name in NARROW_FLOATS)
    assert is_int(name) == (name in NARROW_INTS)


@pytest.mark.parametrize("name", NARROW)
def test_bits_ranges_and_compute_types_follow_ml_dtypes(name: str) -> None:
    npt = getattr(ml_dtypes, name)
    info = ml_dtypes.finfo(npt) if name in NARROW_FLOATS else ml_dtypes.iinfo(npt)
    assert dtype_bits(name) == info.bits
    assert dtype_range(name) == (float(info.min), float(info.max))
    assert compute_dtype(name) == ("float32" if name in NARROW_FLOATS else "int32")
    if name in NARROW_FLOATS:
        assert has_inf(name) == bool(np.isinf(np.array(np.inf, np.float32).astype(npt)))


def test_standard_dtypes_are_unchanged() -> None:
    assert not is_narrow("float16") and storage_dtype("float16") == "float16"
    assert dtype_bits("float8_e4m3fn") == 8 and dtype_bits("int64") == 64
    assert dtype_range("int8") == (-128.0, 127.0) and has_inf("float32")
    with pytest.raises(ValueError, match="unsupported dtype"):
        as_dtype("float8_e3m4")


def test_sub_byte_tensors_take_a_byte_per_element() -> None:
    assert TensorType((3, 5), "int4").nbytes == 15
    assert TensorType((3, 5), "bfloat16").nbytes == 30


def test_ndarray_copyfrom_float32_rounds_to_nearest_even() -> None:
    src = np.array([1.0, 1.00390625, 1.01171875, 3.4e38, np.nan, -0.0], np.float32)
    nd = kiln.nd.empty(src.shape, "bfloat16").copyfrom(src)
    assert nd.dtype == "bfloat16"
    out = nd.numpy()
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.view(np.uint16), src.astype(ml_dtypes.bfloat16).view(np.uint16))
    assert out.view(np.uint16)[1] == 0x3F80 and out.view(np.uint16)[2] == 0x3F82  # ties to even
    f8 = kiln.nd.empty((3,), "float8_e4m3fn").copyfrom(np.array([500.0, 460.0, -1e-9], np.float32))
    np.testing.assert_array_equal(f8.numpy().view(np.uint8), [0x7F, 0x7E, 0x80])
    with pytest.raises(ValueError, match="does not match"):
        kiln.nd.empty((3,), "float32").copyfrom(np.zeros(3, np.float64))


def test_ndarray_copyfrom_uint16_takes_bfloat16_bits_like_tvm() -> None:
    bits = np.array([0x3F80, 0xC049, 0x7FC0], np.uint16)
    nd = kiln.nd.empty((3,), "bfloat16").copyfrom(bits)
    np.testing.assert_array_equal(nd.numpy().view(np.uint16), bits)
    assert float(nd.numpy()[0]) == 1.0 and float(nd.numpy()[1]) == -3.140625


@pytest.mark.parametrize("name", NARROW)
def test_params_round_trip(name: str) -> None:
    npt = getattr(ml_dtypes, name)
    lo, hi = dtype_range(name)
    values = np.linspace(lo, hi, 12).astype(np.float32).astype(npt).reshape(3, 4)
    blob = save_param_dict({"w": kiln.nd.array(values)})
    back = load_param_dict(blob)["w"].numpy()
    assert back.dtype == values.dtype
    np.testing.assert_array_equal(back.view(np.uint8), values.view(np.uint8))


def _dtype_header(blob: bytes) -> tuple[int, int, int]:
    at = blob.index(struct.pack("<Q", 0xDD5E40F096B4A13F))
    code, bits, lanes = struct.unpack_from("<BBH", blob, at + 8 + 8 + 12)
    return code, bits, lanes


@pytest.mark.parametrize(("name", "code", "bits"), [
    ("bfloat16", 4, 16), ("float8_e4m3fn", 10, 8), ("float8_e4m3fnuz", 11, 8),
    ("float8_e5m2", 12, 8), ("float8_e5m2fnuz", 13, 8), ("float4_e2m1fn", 17, 4),
    ("int4", 0, 4), ("uint4", 1, 4), ("int2", 0, 2), ("uint2", 1, 2)])
def test_params_use_dlpack_type_codes(name: str, code: int, bits: int) -> None:
    blob = save_param_dict({"w": kiln.nd.array(np.zeros(5, getattr(ml_dtypes, name)))})
    assert _dtype_header(blob) == (code, bits, 1)
    assert blob.endswith(bytes(5 * np.dtype(getattr(ml_dtypes, name)).itemsize))


def test_params_reject_a_dlpack_float8_kiln_lacks() -> None:
    blob = bytearray(save_param_dict({"w": kiln.nd.array(np.zeros(5, ml_dtypes.float8_e5m2))}))
    at = bytes(blob).index(struct.pack("<Q", 0xDD5E40F096B4A13F)) + 28
    blob[at] = 14  # kDLFloat8_e8m0fnu
    with pytest.raises(ParamsFormatError, match="unsupported dtype type code 14 8"):
        load_param_dict(bytes(blob))


def test_graph_executor_converts_inputs_within_a_kind_into_narrow_dtypes() -> None:
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.runtime.graph_executor import InputError

    x = relay.var("x", shape=(3,), dtype="bfloat16")
    n = relay.var("n", shape=(3,), dtype="int4")
    body = relay.Tuple([x + x, n])
    with kiln.transform.PassContext(opt_level=3):
        lib = kiln.relay.build(kiln.IRModule.from_expr(relay.Function([x, n], body)), target="llvm")
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    a = np.array([1.1, 2.2, -3.3], np.float32)
    with pytest.warns(UserWarning, match="converting float32 to bfloat16"):
        gm.set_input("x", a)
    with pytest.warns(UserWarning, match="converting int64 to int4"):
        gm.set_input("n", np.array([-8, 7, 9], np.int64))
    with pytest.raises(InputError, match="within a kind"):
        gm.set_input("n", a)
    gm.run()
    b = a.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(gm.get_output(0).numpy(), b + b)
    np.testing.assert_array_equal(gm.get_output(1).numpy().astype(np.int8), [-8, 7, -7])
