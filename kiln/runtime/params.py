"""TVM's params bytes: ``save_param_dict`` / ``load_param_dict`` (``relay.save_param_dict``).

The layout (all integers little-endian, no padding)::

    u64 0xF7E58D4F05049CB7   u64 reserved
    u64 N, then N x (u64 length, UTF-8 name)
    u64 N again, then N tensor records, the i-th for the i-th name:
        u64 0xDD5E40F096B4A13F  u64 reserved
        i32 device_type  i32 device_id  i32 ndim
        u8 type_code  u8 bits  u16 lanes
        ndim x i64 shape  i64 byte_size  byte_size raw row-major bytes

Kiln writes exactly TVM 0.19's bytes (bool as type code 1 with 1 bit, one byte per element) and
reads TVM 0.27's bool (code 6, 8 bits) as well. Narrow dtypes use DLPack 1.1's type codes
(bfloat16: code 4, 16 bits; float8_e4m3fn/e4m3fnuz/e5m2/e5m2fnuz: 10-13, 8 bits; float4_e2m1fn:
17, 4 bits; int4/uint4/int2/uint2: code 0/1 with 4 or 2 bits), one element per byte as in
memory. Unlike TVM it also reads empty tensors such as
shape ``(2, 0, 3)``. The reader never trusts a header: every count and size is checked against the
bytes that remain before anything is allocated, and errors say what was wrong and at which offset.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from math import prod
from pathlib import Path
from typing import Any

import numpy as np

from kiln.errors import KilnError, ParamsFormatError
from kiln.runtime.dtype import DTYPES, is_narrow
from kiln.runtime.ndarray import NDArray

__all__ = [
    "PARAMS_MAGIC",
    "TENSOR_MAGIC",
    "as_numpy",
    "ByteReader",
    "ByteWriter",
    "load_param_dict",
    "load_param_dict_from_file",
    "read_param_records",
    "save_param_dict",
    "save_param_dict_to_file",
    "write_param_records",
]

PARAMS_MAGIC = 0xF7E58D4F05049CB7
TENSOR_MAGIC = 0xDD5E40F096B4A13F
_MAX_NDIM = 64  # DLPack sets no limit; anything beyond this is a corrupt header

# (DLPack type code, bits) -> NumPy dtype. Code 6 with 8 bits is TVM 0.27's kDLBool.
_DECODE: dict[tuple[int, int], np.dtype] = {
    (0, 8): np.dtype("<i1"),
    (0, 16): np.dtype("<i2"),
    (0, 32): np.dtype("<i4"),
    (0, 64): np.dtype("<i8"),
    (1, 1): np.dtype(np.bool_),
    (1, 8): np.dtype("<u1"),
    (1, 16): np.dtype("<u2"),
    (1, 32): np.dtype("<u4"),
    (1, 64): np.dtype("<u8"),
    (2, 16): np.dtype("<f2"),
    (2, 32): np.dtype("<f4"),
    (2, 64): np.dtype("<f8"),
    (6, 8): np.dtype(np.bool_),
}
_TYPE_NAMES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 6: "bool"}
# NumPy dtype kind/size -> (type code, bits) as TVM 0.19 writes them
_ENCODE: dict[str, tuple[int, int]] = {
    "bool": (1, 1),
    "int8": (0, 8),
    "int16": (0, 16),
    "int32": (0, 32),
    "int64": (0, 64),
    "uint8": (1, 8),
    "uint16": (1, 16),
    "uint32": (1, 32),
    "uint64": (1, 64),
    "float16": (2, 16),
    "float32": (2, 32),
    "float64": (2, 64),
    # narrow dtypes: DLPack 1.1's codes (TVM's bfloat16 is code 4, 16 bits); one byte per element
    "bfloat16": (4, 16),
    "float8_e4m3fn": (10, 8),
    "float8_e4m3fnuz": (11, 8),
    "float8_e5m2": (12, 8),
    "float8_e5m2fnuz": (13, 8),
    "float4_e2m1fn": (17, 4),
    "int4": (0, 4),
    "uint4": (1, 4),
    "int2": (0, 2),
    "uint2": (1, 2),
}
_DECODE.update({code: DTYPES[name] for name, code in _ENCODE.items() if is_narrow(name)})


class ByteReader:
    """A cursor over a bytes-like object that checks every read against the remaining length.

    Parameters
    ----------
    data : bytes-like
        What to read.
    what : str
        How error messages name the data (``"params blob"``, ``"module blob"``, ...).
    error : type
        The :class:`~kiln.errors.KilnError` subclass raised on malformed data.
    offset : int
        Where reading starts.
    """

    def __init__(self, data: bytes | bytearray | memoryview, what: str = "params blob",
                 error: type[KilnError] = ParamsFormatError, offset: int = 0):
        self.data = memoryview(data).cast("B")
        self.what = what
        self.error = error
        self.offset = offset

    @property
    def remaining(self) -> int:
        """Bytes left after the cursor."""
        return len(self.data) - self.offset

    def fail(self, message: str, at: int | None = None) -> KilnError:
        """An error (to raise) naming the data, the problem and the offset."""
        where = self.offset if at is None else at
        return self.error(f"{self.what}: {message} at offset {where} "
                          f"(the data has {len(self.data)} bytes)")

    def need(self, nbytes: int, what: str) -> None:
        """Raise unless ``nbytes`` bytes remain."""
        if nbytes > self.remaining:
            raise self.fail(f"truncated while reading {what}: needs {nbytes} byte(s), "
                            f"{self.remaining} left")

    def _unpack(self, fmt: str, what: str) -> Any:
        size = struct.calcsize(fmt)
        self.need(size, what)
        (value,) = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += size
        return value

    def u64(self, what: str) -> int:
        """Read an unsigned 64-bit integer."""
        return int(self._unpack("<Q", what))

    def i64(self, what: str) -> int:
        """Read a signed 64-bit integer."""
        return int(self._unpack("<q", what))

    def i32(self, what: str) -> int:
        """Read a signed 32-bit integer."""
        return int(self._unpack("<i", what))

    def raw(self, nbytes: int, what: str) -> memoryview:
        """The next ``nbytes`` bytes, without copying."""
        self.need(nbytes, what)
        view = self.data[self.offset:self.offset + nbytes]
        self.offset += nbytes
        return view

    def count(self, what: str, min_item_bytes: int) -> int:
        """Read a u64 element count; each element needs at least ``min_item_bytes`` bytes."""
        start = self.offset
        n = self.u64(what)
        if min_item_bytes and n > self.remaining // min_item_bytes:
            raise self.fail(f"{what} is {n}, but only {self.remaining} byte(s) follow (each item "
                            f"takes at least {min_item_bytes}): truncated or corrupt", start)
        return n

    def string(self, what: str) -> str:
        """Read a u64-length-prefixed UTF-8 string."""
        start = self.offset
        n = self.count(f"length of {what}", 1)
        raw = self.raw(n, what)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{what} is not valid UTF-8 ({e.reason})", start) from None

    def strings(self, what: str) -> list[str]:
        """Read a u64 count then that many strings (TVM's ``std::vector<std::string>``)."""
        n = self.count(f"number of {what}", 8)
        return [self.string(f"{what}[{i}]") for i in range(n)]

    def tensor(self, name: str) -> np.ndarray:
        """Read one tensor record (section-6 layout) into a fresh, writable NumPy array."""
        start = self.offset
        label = f"tensor {name!r}"
        magic = self.u64(f"magic of {label}")
        if magic != TENSOR_MAGIC:
            raise self.fail(f"bad magic 0x{magic:016X} for {label} (expected "
                            f"0x{TENSOR_MAGIC:016X})", start)
        self.u64(f"reserved field of {label}")
        self.i32(f"device type of {label}")
        self.i32(f"device id of {label}")
        ndim_at = self.offset
        ndim = self.i32(f"ndim of {label}")
        code_at = self.offset
        self.need(4, f"dtype of {label}")
        code, bits, lanes = struct.unpack_from("<BBH", self.data, self.offset)
        self.offset += 4
        if ndim < 0 or ndim > _MAX_NDIM:
            raise self.fail(f"{label} has an absurd ndim {ndim} (must be 0..{_MAX_NDIM})", ndim_at)
        if lanes != 1 or (code, bits) not in _DECODE:
            tname = _TYPE_NAMES.get(code, f"type code {code} ")
            raise self.fail(f"{label} has unsupported dtype {tname}{bits}"
                            + (f"x{lanes}" if lanes != 1 else ""), code_at)
        dtype = _DECODE[(code, bits)]
        self.need(8 * ndim + 8, f"shape and byte size of {label}")
        shape = struct.unpack_from(f"<{ndim}q", self.data, self.offset)
        if any(d < 0 for d in shape):
            raise self.fail(f"{label} has a negative dimension in shape {shape}", self.offset)
        self.offset += 8 * ndim
        size_at = self.offset
        byte_size = self.i64(f"byte size of {label}")
        expected = ((bits + 7) // 8) * prod(shape)
        if byte_size != expected:
            raise self.fail(f"{label} declares {byte_size} data byte(s), but shape {shape} of "
                            f"{dtype.name} needs {expected}", size_at)
        raw = self.raw(byte_size, f"data of {label}")
        if dtype == np.bool_:
            flat = np.frombuffer(raw, dtype=np.uint8) != 0
        else:
            flat = np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="), copy=True)
        return flat.reshape(shape)


class ByteWriter:
    """Accumulates bytes in TVM's serialization layout (the inverse of :class:`ByteReader`)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def u64(self, value: int) -> None:
        """Append an unsigned 64-bit integer."""
        self.parts.append(struct.pack("<Q", value))

    def string(self, value: str) -> None:
        """Append a u64-length-prefixed UTF-8 string."""
        raw = value.encode("utf-8")
        self.u64(len(raw))
        self.parts.append(raw)

    def strings(self, values: list[str]) -> None:
        """Append a u64 count then the strings."""
        self.u64(len(values))
        for v in values:
            self.string(v)

    def raw(self, data: bytes) -> None:
        """Append bytes as they are."""
        self.parts.append(data)

    def tensor(self, array: np.ndarray, name: str = "") -> None:
        """Append one tensor record (CPU, TVM 0.19's dtype codes)."""
        dtype_name = array.dtype.name
        if dtype_name not in _ENCODE:
            raise ParamsFormatError(f"cannot save tensor {name!r}: dtype {dtype_name} has no TVM "
                                    f"params encoding (supported: {', '.join(_ENCODE)})")
        code, bits = _ENCODE[dtype_name]
        if dtype_name == "bool":
            payload = array.astype(np.uint8).tobytes()
        else:
            payload = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        self.parts.append(struct.pack("<QQiiiBBH", TENSOR_MAGIC, 0, 1, 0, array.ndim, code, bits, 1))
        self.parts.append(struct.pack(f"<{array.ndim}qq", *array.shape, len(payload)))
        self.parts.append(payload)

    def getvalue(self) -> bytes:
        """Everything appended so far."""
        return b"".join(self.parts)


def as_numpy(value: Any, name: str) -> np.ndarray:
    """``value`` (NDArray, NumPy array or scalar) as a NumPy array, for saving as param ``name``."""
    if isinstance(value, NDArray):
        return value.view_numpy()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return np.asarray(value.numpy())
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    raise ParamsFormatError(f"cannot save param {name!r}: expected an NDArray or NumPy array, "
                            f"got {type(value).__name__}")


def write_param_records(writer: ByteWriter, params: Mapping[str, Any]) -> None:
    """Append names then tensors (the body of a params blob after its 16-byte header)."""
    names = list(params)
    for n in names:
        if not isinstance(n, str):
            raise ParamsFormatError(f"param names must be strings, got {type(n).__name__} {n!r}")
    arrays = [as_numpy(params[n], n) for n in names]
    writer.strings(names)
    writer.u64(len(arrays))
    for n, a in zip(names, arrays):
        writer.tensor(a, n)


def read_param_records(reader: ByteReader) -> dict[str, NDArray]:
    """Read names then tensors (the inverse of :func:`write_param_records`)."""
    names = reader.strings("param names")
    count_at = reader.offset
    count = reader.u64("number of tensors")
    if count != len(names):
        raise reader.fail(f"{len(names)} names but {count} tensors", count_at)
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise reader.fail(f"param name {n!r} appears twice", count_at)
        seen.add(n)
    return {n: NDArray(reader.tensor(n), copy=False) for n in names}


def save_param_dict(params: Mapping[str, Any]) -> bytearray:
    """Serialize named tensors to TVM's params bytes.

    Parameters
    ----------
    params : mapping of str to NDArray or numpy.ndarray
        The tensors, written in the mapping's order.

    Returns
    -------
    bytearray
        The blob (``relay.save_param_dict`` / ``tvm.runtime.save_param_dict`` format; a
        ``bytearray`` as TVM's).

    Examples
    --------
    >>> blob = save_param_dict({"w": np.zeros((2, 3), "float32")})
    >>> load_param_dict(blob)["w"].shape
    (2, 3)
    """
    writer = ByteWriter()
    writer.u64(PARAMS_MAGIC)
    writer.u64(0)
    write_param_records(writer, params)
    return bytearray(writer.getvalue())


def save_param_dict_to_file(params: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write :func:`save_param_dict`'s blob of ``params`` to the file ``path``."""
    Path(path).write_bytes(save_param_dict(params))


def load_param_dict_from_file(path: str | os.PathLike[str]) -> dict[str, NDArray]:
    """The params of a file written by :func:`save_param_dict_to_file` (or TVM's)."""
    return load_param_dict(Path(path).read_bytes())


def load_param_dict(data: bytes | bytearray | memoryview) -> dict[str, NDArray]:
    """Deserialize TVM's params bytes.

    Parameters
    ----------
    data : bytes-like
        A blob written by :func:`save_param_dict` or by TVM.

    Returns
    -------
    dict of str to NDArray
        The tensors in file order.

    Raises
    ------
    ParamsFormatError
        The blob is truncated, has a wrong magic, inconsistent counts or sizes, or an
        unsupported dtype; the message gives the offset.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ParamsFormatError(f"load_param_dict takes bytes, got {type(data).__name__}")
    reader = ByteReader(data)
    magic = reader.u64("file magic")
    if magic != PARAMS_MAGIC:
        raise reader.fail(f"not a params blob: magic 0x{magic:016X}, expected "
                          f"0x{PARAMS_MAGIC:016X}", 0)
    reader.u64("reserved field")
    params = read_param_records(reader)
    if reader.remaining:
        raise reader.fail(f"{reader.remaining} unexpected byte(s) after the last tensor")
    return params
