"""NVIDIA GPUs through the CUDA driver API, loaded with ctypes (no toolkit needed to import).

``libcuda.so.1`` is opened the first time a CUDA device is used, never at ``import kiln``; when it
is missing, or the driver finds no device, :class:`CudaError` says so in one line. What this
module gives the rest of the runtime:

* :func:`cuda` / :class:`CudaDevice`: ``kiln.cuda(0)``, its name, compute capability and limits;
  every device works in its primary context, made current on the calling thread before each use.
* :class:`DeviceBuffer`: device memory (freed when the last reference goes), copies to and from
  host arrays.
* :class:`CudaNDArray`: an :class:`~kiln.runtime.ndarray.NDArray` in device memory; ``numpy()``
  copies back (``kiln.nd.array(x, kiln.cuda())`` makes one).
* :class:`LoadedModule` / :class:`Function`: a PTX or cubin image loaded into the context and
  its kernels, launched on a :class:`Stream`.
* :class:`Graph`: a captured sequence of launches replayed with one call (a CUDA graph), and
  :class:`Event` timing.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from math import prod
from typing import Any

import numpy as np

from kiln.errors import KilnError
from kiln.runtime.dtype import as_dtype, np_dtype
from kiln.runtime.ndarray import Device, NDArray, register_device_array

__all__ = [
    "CudaDevice",
    "CudaError",
    "CudaNDArray",
    "DeviceBuffer",
    "Event",
    "Function",
    "Graph",
    "LoadedModule",
    "Stream",
    "cuda",
    "device_count",
    "driver_available",
    "time_launches",
]

# CUdevice_attribute values (cuda.h)
_ATTR_MAX_THREADS_PER_BLOCK = 1
_ATTR_MAX_SHARED_PER_BLOCK = 8
_ATTR_MULTIPROCESSORS = 16
_ATTR_CC_MAJOR = 75
_ATTR_CC_MINOR = 76
_CAPTURE_MODE_RELAXED = 2


class CudaError(KilnError, RuntimeError):
    """The CUDA driver is missing, failed, or was given something it cannot run."""


_lock = threading.Lock()


@functools.cache
def _driver() -> ctypes.CDLL:
    """``libcuda`` with ``cuInit`` done (once per process)."""
    lib = None
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        raise CudaError("no CUDA driver: libcuda.so.1 is not on this machine's library path "
                        "(install the NVIDIA driver, or build for a CPU target such as 'llvm')")
    code = lib.cuInit(0)
    if code != 0:
        raise CudaError(f"the CUDA driver failed to start: cuInit returned {_error_name(lib, code)} "
                        "(is an NVIDIA GPU visible to this process?)")
    return lib


def _error_name(lib: ctypes.CDLL, code: int) -> str:
    name, text = ctypes.c_char_p(), ctypes.c_char_p()
    lib.cuGetErrorName(code, ctypes.byref(name))
    lib.cuGetErrorString(code, ctypes.byref(text))
    n = name.value.decode() if name.value else f"error {code}"
    return f"{n} ({text.value.decode()})" if text.value else n


def _check(code: int, what: str) -> None:
    if code != 0:
        raise CudaError(f"{what}: {_error_name(_driver(), code)}")


def _call(fn: str, *args: Any) -> None:
    _check(getattr(_driver(), fn)(*args), fn)


def driver_available() -> bool:
    """Whether a CUDA driver is loadable and sees at least one device."""
    try:
        return device_count() > 0
    except CudaError:
        return False


def device_count() -> int:
    """Number of CUDA devices the driver sees (raises :class:`CudaError` without a driver)."""
    n = ctypes.c_int()
    _call("cuDeviceGetCount", ctypes.byref(n))
    return n.value


class CudaDevice:
    """One GPU and its primary context (one per device id and process; see :func:`cuda`)."""

    def __init__(self, device_id: int):
        count = device_count()
        if not 0 <= device_id < count:
            raise CudaError(f"cuda({device_id}): the driver sees {count} CUDA device(s)")
        self.device_id = device_id
        handle = ctypes.c_int()
        _call("cuDeviceGet", ctypes.byref(handle), device_id)
        self._handle = handle.value
        ctx = ctypes.c_void_p()
        _call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), self._handle)
        self.context = ctx
        self.make_current()
        buf = ctypes.create_string_buffer(256)
        _call("cuDeviceGetName", buf, 256, self._handle)
        self.name = buf.value.decode()
        self.compute_capability = (self._attribute(_ATTR_CC_MAJOR), self._attribute(_ATTR_CC_MINOR))
        self.max_threads_per_block = self._attribute(_ATTR_MAX_THREADS_PER_BLOCK)
        self.max_shared_memory_per_block = self._attribute(_ATTR_MAX_SHARED_PER_BLOCK)
        self.multiprocessor_count = self._attribute(_ATTR_MULTIPROCESSORS)

    def _attribute(self, attr: int) -> int:
        value = ctypes.c_int()
        _call("cuDeviceGetAttribute", ctypes.byref(value), attr, self._handle)
        return value.value

    @property
    def arch(self) -> str:
        """``sm_90`` for compute capability 9.0."""
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    def make_current(self) -> None:
        """Make this device's context current on the calling thread."""
        _call("cuCtxSetCurrent", self.context)

    def synchronize(self) -> None:
        """Wait until the device has finished all work."""
        self.make_current()
        _call("cuCtxSynchronize")

    def __repr__(self) -> str:
        return f"CudaDevice({self.device_id}: {self.name}, {self.arch})"


_DEVICES: dict[int, CudaDevice] = {}


def cuda(device_id: int = 0) -> CudaDevice:
    """The :class:`CudaDevice` of ``device_id`` (opened once per process)."""
    with _lock:
        dev = _DEVICES.get(device_id)
        if dev is None:
            dev = _DEVICES[device_id] = CudaDevice(device_id)
    dev.make_current()
    return dev


def _free(ptr: int, device_id: int) -> None:
    try:
        cuda(device_id)
        _driver().cuMemFree_v2(ctypes.c_uint64(ptr))
    except CudaError:  # the process is shutting down
        pass


class DeviceBuffer:
    """``nbytes`` of device memory on ``device_id``, zero-filled; freed with the object."""

    def __init__(self, nbytes: int, device_id: int = 0):
        self.device_id = device_id
        self.nbytes = int(nbytes)
        ptr = ctypes.c_uint64()
        cuda(device_id)
        _call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(max(self.nbytes, 1)))
        self.ptr = int(ptr.value)
        _call("cuMemsetD8_v2", ctypes.c_uint64(self.ptr), ctypes.c_ubyte(0),
              ctypes.c_size_t(max(self.nbytes, 1)))
        weakref.finalize(self, _free, self.ptr, device_id)


def copy_to_device(ptr: int, host: np.ndarray, device_id: int) -> None:
    """Copy a C-contiguous host array to device address ``ptr`` (synchronous)."""
    src = np.ascontiguousarray(host)
    if src.nbytes:
        cuda(device_id)
        _call("cuMemcpyHtoD_v2", ctypes.c_uint64(ptr), ctypes.c_void_p(src.ctypes.data),
              ctypes.c_size_t(src.nbytes))


def copy_to_host(host: np.ndarray, ptr: int, device_id: int) -> None:
    """Copy device memory at ``ptr`` into a C-contiguous host array (synchronous)."""
    if host.nbytes:
        cuda(device_id)
        _call("cuMemcpyDtoH_v2", ctypes.c_void_p(host.ctypes.data), ctypes.c_uint64(ptr),
              ctypes.c_size_t(host.nbytes))


def copy_device(dst: int, src: int, nbytes: int, device_id: int) -> None:
    """Copy ``nbytes`` between two device addresses."""
    if nbytes:
        cuda(device_id)
        _call("cuMemcpyDtoD_v2", ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_size_t(nbytes))


class DeviceView:
    """A typed, shaped window of a :class:`DeviceBuffer`: the graph executor's entries on a GPU
    (what a kernel's ``bind`` receives). It keeps its buffer alive."""

    __slots__ = ("buffer", "dtype", "offset", "shape")

    def __init__(self, buffer: DeviceBuffer, shape: Sequence[int], dtype: Any, offset: int = 0):
        self.buffer = buffer
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(np_dtype(as_dtype(dtype)))
        self.offset = offset
        if offset + self.nbytes > buffer.nbytes:
            raise CudaError(f"a {self.shape} {self.dtype} view at byte {offset} does not fit a "
                            f"{buffer.nbytes}-byte device buffer")

    @property
    def ptr(self) -> int:
        """Device address of the first element."""
        return self.buffer.ptr + self.offset

    @property
    def size(self) -> int:
        """Number of elements."""
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes it covers."""
        return self.size * self.dtype.itemsize

    def reshape(self, shape: Sequence[int]) -> DeviceView:
        """The same memory with another shape of the same size."""
        shape = tuple(int(d) for d in shape)
        if prod(shape) != self.size:
            raise CudaError(f"cannot reshape a device view of {self.shape} to {shape}")
        return DeviceView(self.buffer, shape, self.dtype, self.offset)

    def numpy(self) -> np.ndarray:
        """A host copy."""
        out = np.empty(self.shape, self.dtype)
        copy_to_host(out, self.ptr, self.buffer.device_id)
        return out

    def copy_from(self, host: np.ndarray) -> None:
        """Overwrite from a host array of the same shape and dtype."""
        copy_to_device(self.ptr, np.asarray(host, self.dtype).reshape(self.shape),
                       self.buffer.device_id)


class CudaNDArray(NDArray):
    """An NDArray in GPU memory: ``numpy()`` copies to the host, ``copyfrom`` to the device."""

    __slots__ = ("view",)

    def __init__(self, data: Any, device: Device | None = None, copy: bool = True):
        dev = device or Device(2, 0)
        if isinstance(data, DeviceView):
            self.view = data
        else:
            host = data.numpy() if isinstance(data, NDArray) else np.ascontiguousarray(data)
            as_dtype(host.dtype)
            self.view = DeviceView(DeviceBuffer(host.nbytes, dev.device_id), host.shape,
                                   host.dtype)
            self.view.copy_from(host)
        self._array = None  # type: ignore[assignment]
        self.device = dev

    @property
    def shape(self) -> tuple[int, ...]:
        """Its shape."""
        return self.view.shape

    @property
    def dtype(self) -> str:
        """Its dtype name."""
        return as_dtype(self.view.dtype)

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.view.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of device memory it covers."""
        return self.view.nbytes

    @property
    def data_ptr(self) -> int:
        """Device address of its first byte."""
        return self.view.ptr

    def numpy(self) -> np.ndarray:
        """A host copy of the contents."""
        return self.view.numpy()

    asnumpy = numpy

    def view_numpy(self) -> np.ndarray:
        """Refused: device memory has no host view (use ``numpy()``)."""
        raise CudaError(f"an NDArray on {self.device} has no host buffer; use .numpy() to copy it")

    def copyfrom(self, source: Any) -> NDArray:
        """Overwrite the contents from a host array or NDArray of the same shape and dtype."""
        src = source.numpy() if isinstance(source, NDArray) else np.asarray(source)
        if src.shape != self.shape:
            raise ValueError(f"copyfrom: shape {src.shape} does not match {self.shape}")
        if src.dtype != self.view.dtype:
            raise ValueError(f"copyfrom: dtype {src.dtype} does not match {self.view.dtype}")
        self.view.copy_from(src)
        return self

    def copyto(self, target: NDArray | Device) -> NDArray:
        """Copy into another NDArray, or to a device (a new NDArray)."""
        if isinstance(target, Device):
            if target.device_type == 2:
                out = CudaNDArray(DeviceView(DeviceBuffer(self.nbytes, target.device_id),
                                             self.shape, self.view.dtype), target)
                copy_device(out.view.ptr, self.view.ptr, self.nbytes, target.device_id)
                return out
            return NDArray(self.numpy(), target, copy=False)
        return target.copyfrom(self)

    def __setitem__(self, key: Any, value: Any) -> None:
        if not (isinstance(key, slice) and key == slice(None)):
            raise ValueError("NDArray only supports whole assignment: arr[:] = value")
        self.copyfrom(np.asarray(value.numpy() if isinstance(value, NDArray) else value,
                                 self.view.dtype))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        host = self.numpy()
        return host if dtype is None else host.astype(dtype)

    def same_as(self, other: object) -> bool:
        """Whether both are the same device memory."""
        return isinstance(other, CudaNDArray) and other.view.ptr == self.view.ptr \
            and other.view.buffer is self.view.buffer

    def __repr__(self) -> str:
        return f"<kiln.NDArray shape={self.shape}, {self.device}>\n{self.numpy()!r}"

    def __str__(self) -> str:
        return str(self.numpy())


register_device_array(2, CudaNDArray, lambda dev: cuda(dev.device_id) is not None)


class Stream:
    """A CUDA stream of ``device_id`` (blocking: ordered after synchronous copies)."""

    def __init__(self, device_id: int = 0):
        self.device_id = device_id
        cuda(device_id)
        handle = ctypes.c_void_p()
        _call("cuStreamCreate", ctypes.byref(handle), 0)
        self.handle = handle
        weakref.finalize(self, _destroy, "cuStreamDestroy_v2", handle.value, device_id)

    def synchronize(self) -> None:
        """Wait for everything queued on the stream."""
        _call("cuStreamSynchronize", self.handle)


def _destroy(fn: str, handle: int | None, device_id: int) -> None:
    try:
        cuda(device_id)
        getattr(_driver(), fn)(ctypes.c_void_p(handle))
    except CudaError:
        pass


class LoadedModule:
    """A PTX or cubin image loaded into ``device_id``'s context (``cuModuleLoadData``)."""

    def __init__(self, image: bytes, device_id: int = 0, what: str = "CUDA module"):
        cuda(device_id)
        self.device_id = device_id
        handle = ctypes.c_void_p()
        data = image if image.startswith(b"\x7fELF") or image.endswith(b"\0") else image + b"\0"
        self._image = ctypes.create_string_buffer(data, len(data))
        code = _driver().cuModuleLoadData(ctypes.byref(handle), self._image)
        if code != 0:
            raise CudaError(f"loading {what} on cuda({device_id}): "
                            f"{_error_name(_driver(), code)}")
        self.handle = handle
        weakref.finalize(self, _destroy, "cuModuleUnload", handle.value, device_id)

    def function(self, name: str) -> Function:
        """Kernel ``name`` of the module."""
        handle = ctypes.c_void_p()
        code = _driver().cuModuleGetFunction(ctypes.byref(handle), self.handle, name.encode())
        if code != 0:
            raise CudaError(f"the CUDA module has no kernel {name!r}: "
                            f"{_error_name(_driver(), code)}")
        return Function(name, handle, self)


class Function:
    """One ``__global__`` kernel; :meth:`launcher` binds it to arguments and a launch shape."""

    def __init__(self, name: str, handle: ctypes.c_void_p, module: LoadedModule):
        self.name = name
        self.handle = handle
        self.module = module  # keeps the module loaded

    def launcher(self, grid: Sequence[int], block: Sequence[int], pointers: Sequence[int],
                 stream: Stream, shared_bytes: int = 0) -> Callable[[], None]:
        """A call that launches the kernel on ``stream`` with device pointers as its arguments."""
        values = [ctypes.c_uint64(p) for p in pointers]
        params = (ctypes.c_void_p * max(len(values), 1))(
            *[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
        gx, gy, gz = (*grid, 1, 1, 1)[:3]
        bx, by, bz = (*block, 1, 1, 1)[:3]
        launch = _driver().cuLaunchKernel
        handle, sh = self.handle, stream.handle
        name = self.name

        def run() -> None:
            code = launch(handle, gx, gy, gz, bx, by, bz, shared_bytes, sh, params, None)
            if code != 0:
                raise CudaError(f"launching {name} <<<({gx},{gy},{gz}), ({bx},{by},{bz})>>>: "
                                f"{_error_name(_driver(), code)}")

        run.keep = (values, params)  # type: ignore[attr-defined]
        return run


class Graph:
    """Launches captured from a stream once, replayed with one ``cuGraphLaunch``."""

    def __init__(self, stream: Stream, record: Callable[[], None]):
        self.stream = stream
        _call("cuStreamBeginCapture_v2", stream.handle, _CAPTURE_MODE_RELAXED)
        try:
            record()
        finally:
            graph = ctypes.c_void_p()
            _call("cuStreamEndCapture", stream.handle, ctypes.byref(graph))
        self._graph = graph
        weakref.finalize(self, _destroy, "cuGraphDestroy", graph.value, stream.device_id)
        exe = ctypes.c_void_p()
        _call("cuGraphInstantiateWithFlags", ctypes.byref(exe), graph, ctypes.c_ulonglong(0))
        self._exec = exe
        weakref.finalize(self, _destroy, "cuGraphExecDestroy", exe.value, stream.device_id)

    def launch(self) -> None:
        """Queue the whole graph on its stream."""
        _call("cuGraphLaunch", self._exec, self.stream.handle)


def time_launches(call: Callable[[], None], stream: Stream, number: int = 10, repeat: int = 1,
                  min_repeat_ms: float = 0) -> list[float]:
    """Seconds per call of ``call`` (which queues work on ``stream``), timed with CUDA events:
    one warm-up call, then ``repeat`` measurements of ``number`` back-to-back calls, ``number``
    growing until a measurement lasts ``min_repeat_ms``."""
    call()
    start, end = Event(stream.device_id), Event(stream.device_id)
    results = []
    n = max(1, number)
    for _ in range(max(1, repeat)):
        while True:
            start.record(stream)
            for _ in range(n):
                call()
            end.record(stream)
            ms = end.elapsed_ms(start)
            if ms >= min_repeat_ms or n >= 1 << 20:
                break
            n = max(n + 1, int(n * min_repeat_ms / max(ms, 1e-3) * 1.1))
        results.append(ms / 1e3 / n)
    return results


class Event:
    """A CUDA event, for timing work on a stream (:meth:`elapsed_ms`)."""

    def __init__(self, device_id: int = 0):
        cuda(device_id)
        handle = ctypes.c_void_p()
        _call("cuEventCreate", ctypes.byref(handle), 0)
        self.handle = handle
        weakref.finalize(self, _destroy, "cuEventDestroy_v2", handle.value, device_id)

    def record(self, stream: Stream) -> None:
        """Mark the point the stream has reached."""
        _call("cuEventRecord", self.handle, stream.handle)

    def elapsed_ms(self, start: Event) -> float:
        """Milliseconds from ``start`` to this event (waits for this one)."""
        _call("cuEventSynchronize", self.handle)
        ms = ctypes.c_float()
        _call("cuEventElapsedTime", ctypes.byref(ms), start.handle, self.handle)
        return float(ms.value)
