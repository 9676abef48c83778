"""The graph executor on a CUDA GPU.

The storage plan lives in device memory (one :class:`~kiln.runtime.cuda_driver.DeviceBuffer` per
storage id, entries are :class:`~kiln.runtime.cuda_driver.DeviceView` s into them); params are
uploaded once (``set_params`` / ``load_params``); inputs are copied in by ``set_input`` and
outputs are :class:`~kiln.runtime.cuda_driver.CudaNDArray` s (``get_output(i).numpy()`` copies
back). Each node's kernels are bound once, to device pointers that never move, so the first
:meth:`CudaGraphExecutor.run` captures every launch of the graph into a CUDA graph and each run
after that is one ``cuGraphLaunch`` (:attr:`use_cuda_graph`; False launches kernel by kernel).
``run`` returns when the GPU has finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.runtime.cuda_driver import CudaNDArray, DeviceBuffer, DeviceView, Graph, Stream, cuda
from kiln.runtime.graph_executor import GraphExecutor, first_device
from kiln.runtime.graph_json import GraphJSON
from kiln.runtime.module import KernelError, Module
from kiln.runtime.ndarray import Device, NDArray

__all__ = ["CudaGraphExecutor", "executor_class"]


def executor_class(device: Device | Sequence[Device] | None) -> type[GraphExecutor]:
    """The graph executor class for a device: :class:`CudaGraphExecutor` for a CUDA device."""
    return CudaGraphExecutor if first_device(device).device_type == 2 else GraphExecutor


class CudaGraphExecutor(GraphExecutor):
    """Runs a graph on ``kiln.cuda(i)`` with a ``cuda`` kernel library (see the module docstring).

    Attributes
    ----------
    use_cuda_graph : bool
        Replay the launches as one CUDA graph (default True).
    """

    type_key = "GraphExecutor"
    device_type = 2

    def __init__(self, graph_json: str | GraphJSON, lib: Module,
                 device: Device | Sequence[Device] | None = None):
        dev = first_device(device)
        self.gpu = cuda(dev.device_id)  # a clear error when there is no driver or device
        self._stream: Stream | None = None
        self._cuda_graph: Graph | None = None
        self.use_cuda_graph = True
        super().__init__(graph_json, lib, device)

    def _new_storage(self, nbytes: int) -> DeviceBuffer:
        return DeviceBuffer(nbytes, self.device.device_id)

    def _storage_view(self, sid: int, eid: int) -> DeviceView:
        storage: list[Any] = self.storage
        return DeviceView(storage[sid], self.graph.shapes[eid], self.graph.entry_dtype(eid))

    def _bind(self) -> None:
        super()._bind()
        self._cuda_graph = None  # pointers changed (share_params): capture again

    def _make_plan(self) -> None:
        return None

    def _store(self, entry: Any, value: np.ndarray) -> None:
        entry.copy_from(np.asarray(value).astype(entry.dtype, copy=False))

    def _load(self, entry: Any, out: np.ndarray) -> None:
        np.copyto(out, entry.numpy())

    def _as_ndarray(self, entry: Any) -> NDArray:
        return CudaNDArray(entry, self.device)

    def _host_copy(self, entry: Any) -> np.ndarray:
        return entry.numpy()

    def _copy_in(self, key: int | str, value: Any) -> None:
        if isinstance(value, NDArray) and value.device.device_type != 1:
            value = value.numpy()
        super()._copy_in(key, value)

    @property
    def stream(self) -> Stream:
        """The stream the kernels run on (the kernel library's, on this device)."""
        if self._stream is None:
            libs = [m for m in (self.lib, *self.lib._walk_imports()) if hasattr(m, "stream")]
            if not libs:
                raise KernelError(f"Module[{self.lib.type_key}] has no CUDA kernels: build the "
                                  "model for target='cuda' to run it on a GPU")
            self._stream = libs[0].stream(self.device.device_id)
        return self._stream

    @property
    def num_threads(self) -> int:
        """1: the GPU's threads are set by the kernels' launch shapes."""
        return 1

    def set_num_threads(self, num_threads: int) -> None:
        """Accepted for the CPU executor's interface; GPU kernels are not affected."""
        if num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, got {num_threads}")

    def run(self, **inputs: Any) -> None:
        """Set ``inputs`` (by name), run every node on the GPU, and wait for it to finish."""
        if inputs:
            self.set_input(**inputs)
        stream = self.stream
        if not self._fast:
            for nid in self.op_nodes:
                self.run_node(nid)
        elif self.use_cuda_graph and self._run_list:
            if self._cuda_graph is None:
                self._cuda_graph = Graph(stream, self._launch_all)
            self._cuda_graph.launch()
        else:
            self._launch_all()
        stream.synchronize()

    def _launch_all(self) -> None:
        for call in self._run_list:
            call()  # type: ignore[misc]
