"""NDArray and Device: Kiln's runtime tensors (TVM's ``tvm.nd`` and ``tvm.cpu``).

An :class:`NDArray` owns a C-contiguous NumPy buffer; compiled kernels read and write it in place
through its data pointer. ``numpy()`` returns a copy, as TVM's does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.runtime.dtype import as_dtype, is_narrow, np_dtype

__all__ = ["Device", "NDArray", "array", "cpu", "cuda", "device", "empty", "register_device_array"]

_DEVICE_NAMES = {1: "cpu", 2: "cuda", 4: "opencl", 7: "vulkan", 8: "metal", 10: "rocm"}
_DEVICE_TYPES = {"cpu": 1, "llvm": 1, "c": 1, "stackvm": 1, "numpy": 1, "cuda": 2, "gpu": 2,
                 "opencl": 4, "vulkan": 7, "metal": 8, "rocm": 10}


@dataclass(frozen=True)
class Device:
    """A device: ``device_type`` (1 = CPU, as DLPack numbers them) and ``device_id``."""

    device_type: int = 1
    device_id: int = 0

    @property
    def exist(self) -> bool:
        """Whether Kiln can run on this device: the CPU, or a GPU its driver sees."""
        if self.device_type == 1:
            return True
        kind = _DEVICE_ARRAYS.get(self.device_type)
        if kind is None:
            return False
        try:
            return kind[1](self)
        except Exception:  # no driver, no such device: it does not exist here
            return False

    def sync(self) -> None:
        """Wait for pending work (CPU kernels are synchronous; a GPU is synchronized)."""
        if self.device_type != 1:
            device_runtime(self).synchronize()

    def __str__(self) -> str:
        return f"{_DEVICE_NAMES.get(self.device_type, 'dev' + str(self.device_type))}({self.device_id})"

    __repr__ = __str__


def cpu(dev_id: int = 0) -> Device:
    """The CPU device."""
    return Device(1, dev_id)


def cuda(dev_id: int = 0) -> Device:
    """CUDA GPU ``dev_id`` (``tvm.cuda``); its driver is loaded when the device is first used."""
    return Device(2, dev_id)


# device type -> (NDArray subclass holding device memory, probe(device) -> exists), registered
# by the module that drives that kind of device (kiln.runtime.cuda_driver)
_DEVICE_ARRAYS: dict[int, tuple[type[NDArray], Callable[[Device], Any]]] = {}


def register_device_array(device_type: int, array_type: type[NDArray],
                          probe: Callable[[Device], Any]) -> None:
    """Make ``array(x, device)`` of ``device_type`` build an ``array_type``; ``probe(device)``
    opens the device (returning its runtime handle) or raises when it is not there."""
    _DEVICE_ARRAYS[device_type] = (array_type, probe)


def _device_kind(dev: Device) -> tuple[type[NDArray], Callable[[Device], Any]]:
    kind = _DEVICE_ARRAYS.get(dev.device_type)
    if kind is None:
        raise ValueError(f"device {dev} is not supported by Kiln; it runs on cpu and cuda")
    return kind


def device_runtime(dev: Device) -> Any:
    """The runtime handle of a non-CPU device (a :class:`kiln.runtime.cuda_driver.CudaDevice`)."""
    return _device_kind(dev)[1](dev)


def device(dev_type: str | int, dev_id: int = 0) -> Device:
    """A device by name (``"cpu"``, ``"llvm"``, ...) or DLPack type code."""
    if isinstance(dev_type, str):
        key = dev_type.split()[0].lower()
        if key not in _DEVICE_TYPES:
            raise ValueError(f"unknown device {dev_type!r}")
        code = _DEVICE_TYPES[key]
    else:
        code = int(dev_type)
    if code not in (1, 2):
        raise ValueError(f"device {dev_type!r} is not supported by Kiln; it runs on cpu and cuda")
    return Device(code, dev_id)


class NDArray:
    """A tensor in host memory.

    Parameters
    ----------
    data : array-like
        Its contents (copied into a fresh C-contiguous buffer).
    device : Device
        Where it lives (the CPU).
    """

    __slots__ = ("_array", "device")

    def __init__(self, data: Any, device: Device | None = None, copy: bool = True):
        arr = data._array if isinstance(data, NDArray) else np.asarray(data)
        as_dtype(arr.dtype)
        if copy or not arr.flags.c_contiguous:
            arr = np.array(arr, order="C", copy=True)
        self._array: np.ndarray = arr  # (np.ascontiguousarray would turn a 0-d array into 1-d)
        self.device: Device = device or cpu()

    @property
    def shape(self) -> tuple[int, ...]:
        """Its shape."""
        return tuple(self._array.shape)

    @property
    def dtype(self) -> str:
        """Its dtype name (``"float32"``, ``"bool"``, ...)."""
        return as_dtype(self._array.dtype)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return self._array.ndim

    @property
    def nbytes(self) -> int:
        """Bytes of its buffer."""
        return self._array.nbytes

    @property
    def data_ptr(self) -> int:
        """Address of its first byte (for compiled kernels)."""
        return int(self._array.ctypes.data)

    def numpy(self) -> np.ndarray:
        """A NumPy copy of the contents."""
        return self._array.copy()

    asnumpy = numpy

    def view_numpy(self) -> np.ndarray:
        """The underlying NumPy buffer, without copying (writes go to the tensor)."""
        return self._array

    def copyfrom(self, source: Any) -> NDArray:
        """Overwrite the contents from an array of the same shape; returns self.

        The dtypes must match, except into a narrow dtype (bfloat16, float8, int4, ...), which
        takes numeric data converted like ``ml_dtypes`` (float32 rounds to nearest even), or for
        bfloat16 its bits in a uint16 array (TVM's convention).
        """
        src = source._array if isinstance(source, NDArray) else np.asarray(source)
        if src.shape != self._array.shape:
            raise ValueError(f"copyfrom: shape {src.shape} does not match {self._array.shape}")
        if src.dtype != self._array.dtype:
            if not (is_narrow(as_dtype(self._array.dtype)) and src.dtype.kind in "biuf"):
                raise ValueError(f"copyfrom: dtype {src.dtype} does not match {self._array.dtype}")
            if src.dtype == np.uint16 and self._array.dtype.name == "bfloat16":
                src = src.view(self._array.dtype)  # TVM's bfloat16 bits held in uint16
            else:  # numeric data (float32, ...) converts like ml_dtypes: to nearest even
                src = src.astype(self._array.dtype)
        np.copyto(self._array, src)
        return self

    def copyto(self, target: NDArray | Device) -> NDArray:
        """Copy into another NDArray, or to a device (a new NDArray)."""
        if isinstance(target, NDArray):
            return target.copyfrom(self)
        if isinstance(target, Device):
            return array(self._array, target)
        raise TypeError(f"copyto takes an NDArray or a Device, got {type(target).__name__}")

    def __setitem__(self, key: Any, value: Any) -> None:
        if not (isinstance(key, slice) and key == slice(None)):
            raise ValueError("NDArray only supports whole assignment: arr[:] = value")
        src = value._array if isinstance(value, NDArray) else np.asarray(value)
        if src.shape != self._array.shape:
            raise ValueError(f"cannot assign shape {src.shape} to an NDArray of shape "
                             f"{self._array.shape}")
        np.copyto(self._array, src.astype(self._array.dtype, copy=False))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._array if dtype is None else self._array.astype(dtype)

    def same_as(self, other: object) -> bool:
        """Whether both share one buffer."""
        return isinstance(other, NDArray) and other._array is self._array

    def __repr__(self) -> str:
        return f"<kiln.NDArray shape={self.shape}, {self.device}>\n{self._array!r}"

    def __str__(self) -> str:
        return str(self._array)


def array(arr: Any, device: Device | None = None, dtype: str | None = None) -> NDArray:
    """An NDArray holding a copy of ``arr`` (``tvm.nd.array``)."""
    if isinstance(arr, NDArray):
        arr = arr._array
    a = np.asarray(arr)
    if dtype is not None:
        a = a.astype(np_dtype(dtype))
    if device is not None and device.device_type != 1:
        return _device_kind(device)[0](a, device)
    return NDArray(a, device)


def empty(shape: Sequence[int], dtype: str = "float32", device: Device | None = None) -> NDArray:
    """A zero-filled NDArray (``tvm.nd.empty``; Kiln zeroes it for reproducibility)."""
    if device is not None and device.device_type != 1:
        return _device_kind(device)[0](np.zeros(tuple(int(s) for s in shape), np_dtype(dtype)), device)
    return NDArray(np.zeros(tuple(int(s) for s in shape), np_dtype(dtype)), device, copy=False)
