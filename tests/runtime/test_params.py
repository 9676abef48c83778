"""Params bytes against files TVM wrote, an independent encoder, and corrupted inputs."""

from __future__ import annotations

import json
import struct
import tracemalloc
from math import prod
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kiln
from kiln.errors import ParamsFormatError
from kiln.runtime.ndarray import NDArray
from kiln.runtime.params import load_param_dict, save_param_dict

PARAM_FILES = [
    "param_dict_multi_dtype.params",
    "param_dict_multi_dtype_tvm027.params",
    "small_o3.params",
    "small_o0_unbound.params",
    "small_params_original.params",
    "debug_dump/_tvmdbg_device_CPU_0/output_tensors.params",
]

# --- an independent reference encoder, written from SPEC section 6 -------------------------------

_CODES = {"i": 0, "u": 1, "f": 2}


def reference_encode(params: dict[str, np.ndarray]) -> bytes:
    out = struct.pack("<QQ", 0xF7E58D4F05049CB7, 0)
    out += struct.pack("<Q", len(params))
    for name in params:
        raw = name.encode("utf-8")
        out += struct.pack("<Q", len(raw)) + raw
    out += struct.pack("<Q", len(params))
    for arr in params.values():
        if arr.dtype == np.bool_:
            code, bits, data = 1, 1, bytes(int(v) for v in arr.ravel())
        else:
            code, bits = _CODES[arr.dtype.kind], arr.dtype.itemsize * 8
            data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        out += struct.pack("<QQiiiBBH", 0xDD5E40F096B4A13F, 0, 1, 0, arr.ndim, code, bits, 1)
        out += b"".join(struct.pack("<q", d) for d in arr.shape)
        out += struct.pack("<q", (bits + 7) // 8 * prod(arr.shape)) + data
    return out


def _fixture_dict(meta: dict) -> dict[str, np.ndarray]:
    entries = {e["name"]: e for e in meta["entries"]}
    return {name: np.frombuffer(bytes.fromhex(entries[name]["data_hex_le"]),
                                entries[name]["numpy_dtype"]).reshape(entries[name]["shape"])
            for name in meta["file_order"]}


@pytest.mark.parametrize("stem", ["param_dict_multi_dtype", "param_dict_multi_dtype_tvm027"])
def test_reads_tvm_multi_dtype_files(fixtures_dir: Path, stem: str) -> None:
    meta = json.loads((fixtures_dir / f"{stem}.json").read_text())
    loaded = load_param_dict((fixtures_dir / f"{stem}.params").read_bytes())
    assert list(loaded) == meta["file_order"]
    entries = {e["name"]: e for e in meta["entries"]}
    for name, value in loaded.items():
        e = entries[name]
        assert isinstance(value, NDArray)
        assert value.dtype == e["numpy_dtype"], name
        assert list(value.shape) == e["shape"], name
        assert value.numpy().tobytes().hex() == e["data_hex_le"], name
        values = np.array(e["values"], dtype=e["numpy_dtype"]).reshape(e["shape"])
        np.testing.assert_array_equal(value.numpy(), values)
    headers = {h["name"]: h for h in meta["parsed_headers"]}
    assert headers["bool_5"]["dtype_code"] == (1 if stem.endswith("dtype") else 6)


def test_tvm027_reads_the_same_values(fixtures_dir: Path) -> None:
    old = load_param_dict((fixtures_dir / "param_dict_multi_dtype.params").read_bytes())
    new = load_param_dict((fixtures_dir / "param_dict_multi_dtype_tvm027.params").read_bytes())
    assert set(old) == set(new)
    for name in old:
        assert old[name].dtype == new[name].dtype and old[name].shape == new[name].shape
        np.testing.assert_array_equal(old[name].numpy(), new[name].numpy())


def test_writes_tvm019_bytes_exactly(fixtures_dir: Path) -> None:
    meta = json.loads((fixtures_dir / "param_dict_multi_dtype.json").read_text())
    expected = (fixtures_dir / "param_dict_multi_dtype.params").read_bytes()
    assert save_param_dict(_fixture_dict(meta)) == expected
    as_nd = {k: kiln.nd.array(v) for k, v in _fixture_dict(meta).items()}
    assert save_param_dict(as_nd) == expected


@pytest.mark.parametrize("name", PARAM_FILES)
def test_every_fixture_file_loads_and_rewrites(fixtures_dir: Path, name: str) -> None:
    data = (fixtures_dir / name).read_bytes()
    loaded = load_param_dict(data)
    assert loaded
    if "tvm027" not in name:  # TVM 0.27 writes bool as code 6; Kiln writes 0.19's bytes
        assert save_param_dict(loaded) == data
        assert reference_encode({k: v.numpy() for k, v in loaded.items()}) == data


def test_debug_dump_matches_tvm_listing_and_values(fixtures_dir: Path) -> None:
    loaded = load_param_dict(
        (fixtures_dir / "debug_dump/_tvmdbg_device_CPU_0/output_tensors.params").read_bytes())
    lines = (fixtures_dir / "debug_stdout.txt").read_text().splitlines()
    start = lines.index("output_tensors.params keys (dict order after load):") + 1
    listed = {}
    for line in lines[start:]:
        if not line.startswith("   "):
            break
        key, _, rest = line.strip().partition(" ")
        listed[key] = rest
    assert {k: f"{v.shape} {v.dtype}" for k, v in loaded.items()} == listed
    # the dump holds the run of the opt_level 3 network on small_input.npy
    np.testing.assert_array_equal(loaded["data____topo-index:0____output-num:0"].numpy(),
                                  np.load(fixtures_dir / "small_input.npy"))
    params = load_param_dict((fixtures_dir / "small_o3.params").read_bytes())
    for name, nid in (("p0", 2), ("p1", 3), ("p2", 7), ("p3", 8)):
        np.testing.assert_array_equal(loaded[f"{name}____topo-index:{nid}____output-num:0"].numpy(),
                                      params[name].numpy())
    np.testing.assert_allclose(
        loaded["tvmgen_default_fused_nn_softmax____topo-index:10____output-num:0"].numpy(),
        np.load(fixtures_dir / "small_o3_output.npy"), rtol=0, atol=1e-6)


def test_small_o3_params_values(fixtures_dir: Path) -> None:
    loaded = load_param_dict((fixtures_dir / "small_o3.params").read_bytes())
    assert {k: v.shape for k, v in loaded.items()} == {
        "p0": (2, 1, 3, 3, 3, 4), "p1": (1, 2, 1, 1, 4), "p2": (2, 512, 5), "p3": (1, 10)}
    assert all(v.dtype == "float32" for v in loaded.values())


@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (1, 1, 1, 1), (3, 0)])
@pytest.mark.parametrize("dtype", ["float32", "bool", "int64", "uint8", "float16"])
def test_zero_d_and_empty_roundtrip(shape: tuple[int, ...], dtype: str) -> None:
    arr = np.ones(shape, dtype=dtype)
    data = save_param_dict({"t": arr})
    assert data == reference_encode({"t": arr})
    back = load_param_dict(data)["t"]
    assert back.shape == shape and back.dtype == dtype
    np.testing.assert_array_equal(back.numpy(), arr)


_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64"]


@st.composite
def param_dicts(draw: st.DrawFn) -> dict[str, np.ndarray]:
    names = draw(st.lists(st.text(min_size=0, max_size=12), max_size=5, unique=True))
    out = {}
    for name in names:
        dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))
        out[name] = draw(hnp.arrays(dtype, shape))
    return out


@settings(max_examples=60, deadline=None)
@given(param_dicts())
def test_hypothesis_roundtrip(params: dict[str, np.ndarray]) -> None:
    data = save_param_dict(params)
    assert data == reference_encode(params)
    back = load_param_dict(data)
    assert list(back) == list(params)
    for name, arr in params.items():
        got = back[name].numpy()
        assert got.dtype == arr.dtype and got.shape == arr.shape
        assert got.tobytes() == arr.tobytes()  # bitwise, NaNs included


# --- corrupted and hostile inputs ----------------------------------------------------------------

def _header_offsets(data: bytes) -> list[int]:
    """Offsets where a header field starts, found by walking the layout independently."""
    offsets = [0, 8, 16]
    pos = 16
    (n,) = struct.unpack_from("<Q", data, pos)
    pos += 8
    for _ in range(n):
        offsets.append(pos)
        (ln,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + ln
    offsets.append(pos)
    pos += 8
    for _ in range(n):
        for size in (8, 8, 4, 4, 4, 4):
            offsets.append(pos)
            pos += size
        (ndim,) = struct.unpack_from("<i", data, pos - 8)
        for _ in range(ndim):
            offsets.append(pos)
            pos += 8
        offsets.append(pos)
        (nbytes,) = struct.unpack_from("<q", data, pos)
        pos += 8 + nbytes
        offsets.append(pos)
    assert pos == len(data)
    return offsets


@pytest.mark.parametrize("name", PARAM_FILES)
def test_truncation_at_every_header_offset(fixtures_dir: Path, name: str) -> None:
    data = (fixtures_dir / name).read_bytes()
    cuts = set(_header_offsets(data))
    cuts |= {c + d for c in list(cuts) for d in (-1, 1, 3)}
    for cut in sorted(c for c in cuts if 0 <= c < len(data)):
        with pytest.raises(ParamsFormatError, match="offset"):
            load_param_dict(data[:cut])


def test_truncation_at_every_byte_of_small_files(fixtures_dir: Path) -> None:
    for name in ("small_o0_unbound.params", "param_dict_multi_dtype.params"):
        data = (fixtures_dir / name).read_bytes()
        for cut in range(len(data)):
            with pytest.raises(ParamsFormatError):
                load_param_dict(data[:cut])


def _tensor_starts(data: bytes) -> list[int]:
    pos = 16
    (n,) = struct.unpack_from("<Q", data, pos)
    pos += 8
    for _ in range(n):
        (ln,) = struct.unpack_from("<Q", data, pos)
        pos += 8 + ln
    pos += 8
    starts = []
    for _ in range(n):
        starts.append(pos)
        (ndim,) = struct.unpack_from("<i", data, pos + 24)
        pos += 32 + 8 * ndim
        (nbytes,) = struct.unpack_from("<q", data, pos)
        pos += 8 + nbytes
    return starts


def _patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, offset, value)
    return bytes(buf)


def test_corruptions_are_named(fixtures_dir: Path) -> None:
    data = (fixtures_dir / "small_o3.params").read_bytes()
    t0 = _tensor_starts(data)[0]
    (names,) = struct.unpack_from("<Q", data, 16)
    count_at = t0 - 8
    (ndim,) = struct.unpack_from("<i", data, t0 + 24)
    cases = [
        (_patched(data, 0, "<Q", 0x1234), r"magic 0x0000000000001234.*at offset 0"),
        (_patched(data, t0, "<Q", 0xDEAD), rf"bad magic .* tensor 'p2' .* at offset {t0} "),
        (_patched(data, count_at, "<Q", names + 1), rf"4 names but 5 tensors at offset {count_at}"),
        (_patched(data, t0 + 24, "<i", 1 << 30), rf"absurd ndim 1073741824 .* offset {t0 + 24}"),
        (_patched(data, t0 + 24, "<i", -1), r"absurd ndim -1"),
        (_patched(data, t0 + 28, "<B", 9), r"unsupported dtype type code 9"),
        (_patched(data, t0 + 30, "<H", 4), r"unsupported dtype float32x4"),
        (_patched(data, t0 + 32, "<q", -2), r"negative dimension"),
        (_patched(data, t0 + 32 + 8 * ndim, "<q", 1 << 62), r"declares 4611686018427387904 data "
                                                             r"byte\(s\), but shape"),
        (_patched(data, t0 + 32, "<q", 1 << 40), r"but shape \(1099511627776, 512, 5\)"),
        (data + b"\x00", r"1 unexpected byte\(s\) after the last tensor"),
        (_patched(data, 16, "<Q", 1 << 61), r"number of param names is 2305843009213693952"),
        (_patched(data, 24, "<Q", 1 << 60), r"length of param names\[0\] is 1152921504606846976"),
    ]
    for blob, message in cases:
        with pytest.raises(ParamsFormatError, match=message):
            load_param_dict(blob)


def test_huge_headers_allocate_nothing_large(fixtures_dir: Path) -> None:
    data = (fixtures_dir / "small_o3.params").read_bytes()
    t0 = _tensor_starts(data)[0]
    hostile = [
        _patched(data, 16, "<Q", 1 << 62),
        _patched(data, 24, "<Q", 1 << 62),
        _patched(data, t0 + 24, "<i", 2**31 - 1),
        _patched(_patched(data, t0 + 32, "<q", 1 << 40), t0 + 32 + 8 * 3, "<q", 1 << 45),
        _patched(data, t0 - 8, "<Q", 1 << 62),
    ]
    tracemalloc.start()
    try:
        for blob in hostile:
            tracemalloc.reset_peak()
            with pytest.raises(ParamsFormatError):
                load_param_dict(blob)
            _, peak = tracemalloc.get_traced_memory()
            assert peak < 4 * len(data) + (1 << 20)
    finally:
        tracemalloc.stop()


def test_duplicate_names_and_bad_utf8(fixtures_dir: Path) -> None:
    dup = save_param_dict({"a": np.zeros(2, "float32"), "b": np.zeros(2, "float32")})
    dup = dup.replace(b"\x01\x00\x00\x00\x00\x00\x00\x00b", b"\x01\x00\x00\x00\x00\x00\x00\x00a")
    with pytest.raises(ParamsFormatError, match="'a' appears twice"):
        load_param_dict(dup)
    bad = save_param_dict({"a": np.zeros(1, "float32")}).replace(b"\x00a", b"\x00\xff", 1)
    with pytest.raises(ParamsFormatError, match="UTF-8"):
        load_param_dict(bad)


def test_save_rejects_unsupported_values() -> None:
    with pytest.raises(ParamsFormatError, match="complex64"):
        save_param_dict({"c": np.zeros(2, np.complex64)})
    with pytest.raises(ParamsFormatError, match="list"):
        save_param_dict({"c": [1, 2]})
    with pytest.raises(ParamsFormatError, match="bytes"):
        load_param_dict("not bytes")  # type: ignore[arg-type]


def test_runtime_facade_exports_the_functions() -> None:
    blob = kiln.runtime.save_param_dict({"w": np.arange(3, dtype="int32")})
    np.testing.assert_array_equal(kiln.runtime.load_param_dict(blob)["w"].numpy(), [0, 1, 2])


def test_damaged_blobs_give_params_format_errors_only() -> None:
    """Truncate or flip bytes of a real blob many times: it loads or fails with ParamsFormatError."""
    blob = bytes(save_param_dict({"a": np.ones((3, 4), np.float32),
                                  "b": np.arange(5, dtype=np.int64),
                                  "c": np.array(True)}))
    rng = np.random.default_rng(5)
    for _ in range(500):
        damaged = bytearray(blob)
        if rng.random() < 0.3:
            damaged = damaged[: int(rng.integers(0, len(blob)))]
        else:
            for pos in rng.integers(0, len(blob), size=rng.integers(1, 4)):
                damaged[pos] = int(rng.integers(0, 256))
        try:
            loaded = load_param_dict(bytes(damaged))
        except ParamsFormatError:
            continue
        assert all(isinstance(v, NDArray) for v in loaded.values())
