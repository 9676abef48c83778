"""The debug executor (TVM's ``GraphExecutorDebug``): per-node runs, timing and dumps.

:class:`DebugExecutor` is the runtime module (what ``lib["debug_create"]("default", dev)``
returns): a graph executor that can also run one node at a time, time every node on its own
(:meth:`~DebugExecutor.run_individual`) and hand out any node's outputs. :class:`GraphModuleDebug`
is TVM's Python wrapper around it: ``run()`` times every operator node after one warm-up run,
collects every output of every node, writes ``<dump_root>/_tvmdbg_device_CPU_0/`` (graph dump,
Chrome trace, ``output_tensors.params``) and prints TVM's table; :meth:`GraphModuleDebug.collect`
(beyond TVM) times and collects the same without writing or printing anything, leaving the
choice of files and table (``debug_datum.get_fitted_result(width)``) to the caller.

As in TVM, this is runtime code: it needs nothing from the compiler. The tools built on it (the
per-node profile placed on the machine's roofline, ``.npy`` dumps, comparison with a reference)
live in :mod:`kiln.debug`, whose ``GraphModuleDebug`` (what ``tvm.contrib.debugger`` gives) adds
them to this one.

Examples
--------
>>> m = GraphModuleDebug(lib["debug_create"]("default", dev), [dev], lib.graph_json,
...                      dump_root="/tmp/tvmdbg")  # doctest: +SKIP
>>> m.set_input("data", x); m.run()  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from kiln.errors import KilnError
from kiln.runtime.cuda_driver import time_launches
from kiln.runtime.cuda_executor import CudaGraphExecutor
from kiln.runtime.debug_result import DebugResult
from kiln.runtime.graph_executor import GraphExecutor, GraphModule, first_device
from kiln.runtime.graph_json import GraphJSON
from kiln.runtime.module import Module
from kiln.runtime.ndarray import Device, NDArray
from kiln.runtime.profiling import BenchmarkResult, time_function

__all__ = [
    "CudaDebugExecutor",
    "DebugExecutor",
    "GraphModuleDebug",
    "NodeNotFoundError",
    "create",
    "create_executor",
    "create_from_factory",
    "debug_executor_class",
]

_DUMP_ROOT_PREFIX = "tvmdbg_"
_DUMP_PATH_PREFIX = "_tvmdbg_"


class NodeNotFoundError(KilnError, AttributeError):
    """No graph node has the requested name (an ``AttributeError``, as in TVM)."""


def _wall_clock(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9).strftime("%H:%M:%S.%f")


class DebugExecutor(GraphExecutor):
    """A graph executor that also runs, times and inspects nodes one at a time.

    Parameters
    ----------
    graph_json : str or GraphJSON
        The graph.
    lib : Module
        The kernels (a kernel library, a build result or a loaded artifact).
    device : Device or sequence of Device, optional
        The CPU.
    """

    type_key = "GraphExecutorDebug"

    _FUNCTIONS = (*GraphExecutor._FUNCTIONS, "run_individual", "run_individual_node",
                  "execute_node", "get_node_output", "debug_get_output")

    def __init__(self, graph_json: str | GraphJSON, lib: Module,
                 device: Device | Sequence[Device] | None = None):
        super().__init__(graph_json, lib, device)
        self.last_executed_node = -1

    def _check_node(self, index: int, what: str) -> int:
        index = int(index)
        if not 0 <= index < len(self.graph.nodes):
            raise KilnError(f"{what}: node index {index} is out of range: the graph has "
                            f"{len(self.graph.nodes)} nodes")
        return index

    def execute_node(self, index: int) -> None:
        """Run the nodes after the last executed one up to ``index`` (from 0 when going back).

        Parameters
        ----------
        index : int
            Topological index of the node to reach.
        """
        index = self._check_node(index, "execute_node")
        start = 0 if index < self.last_executed_node else self.last_executed_node + 1
        for nid in range(start, index + 1):
            self.run_node(nid)
        self.last_executed_node = index

    def get_node_output(self, index: int, output_index: int = 0) -> NDArray:
        """A copy of output ``output_index`` of node ``index`` as it is now.

        Parameters
        ----------
        index : int
            Topological index of the node.
        output_index : int
            Which of its outputs.

        Returns
        -------
        NDArray
            The values (a copy: the storage plan reuses the buffer later in the graph).
        """
        index = self._check_node(index, "get_node_output")
        node = self.graph.nodes[index]
        if not 0 <= int(output_index) < node.num_outputs:
            raise KilnError(f"get_node_output: node {index} ({node.name!r}) has {node.num_outputs} "
                            f"output(s), asked for output {output_index}")
        return NDArray(self._host_copy(self.entries[self.graph.entry_id(index, int(output_index))]),
                       copy=False)

    def debug_get_output(self, index: int, out: NDArray | np.ndarray | None = None) -> Any:
        """Run the graph from its start up to node ``index`` and copy its first output.

        Parameters
        ----------
        index : int
            Topological index of the node.
        out : NDArray or numpy.ndarray, optional
            Where to copy the output (same shape and dtype).

        Returns
        -------
        NDArray or numpy.ndarray
            ``out``, or a new NDArray when ``out`` is None.
        """
        index = self._check_node(index, "debug_get_output")
        for nid in range(index + 1):
            self.run_node(nid)
        self.last_executed_node = index
        value = self.get_node_output(index, 0)
        if out is None:
            return value
        target = out.view_numpy() if isinstance(out, NDArray) else out
        source = value.view_numpy()
        if not isinstance(target, np.ndarray) or target.shape != source.shape or \
                target.dtype != source.dtype:
            got = (f"{target.shape} {target.dtype}" if isinstance(target, np.ndarray)
                   else type(out).__name__)
            raise KilnError(f"debug_get_output({index}, out): node {self.graph.nodes[index].name!r} "
                            f"outputs {source.shape} {source.dtype}, out is {got}")
        np.copyto(target, source)
        return out

    def _time_node(self, nid: int, number: int, repeat: int, min_repeat_ms: float,
                   limit_zero_time_iterations: int, cooldown_interval_ms: float,
                   repeats_to_cooldown: int) -> BenchmarkResult:
        return time_function(functools.partial(self.run_node, nid), repeat=repeat, number=number,
                             min_repeat_ms=min_repeat_ms,
                             limit_zero_time_iterations=limit_zero_time_iterations,
                             cooldown_interval_ms=cooldown_interval_ms,
                             repeats_to_cooldown=repeats_to_cooldown, num_threads=self.num_threads)

    def run_individual(self, number: int, repeat: int = 1, min_repeat_ms: float = 0,
                       limit_zero_time_iterations: int = 100, cooldown_interval_ms: float = 0,
                       repeats_to_cooldown: int = 1) -> list[list[float]]:
        """Time every node on its own, after one warm-up run of the whole graph.

        Nodes are timed in graph order, so each one reads the values its predecessors just
        computed. Input nodes take no time.

        Parameters
        ----------
        number : int
            Runs per measurement (grown to fill ``min_repeat_ms``).
        repeat : int
            Measurements per node.
        min_repeat_ms : float
            Minimum duration of one measurement, in milliseconds.
        limit_zero_time_iterations : int
            Zero-duration measurements accepted before giving up on ``min_repeat_ms``.
        cooldown_interval_ms : float
            Pause after every ``repeats_to_cooldown`` measurements.
        repeats_to_cooldown : int
            See ``cooldown_interval_ms``.

        Returns
        -------
        list of list of float
            Per node (topological index), seconds per run for each repeat.
        """
        self.run()
        results: list[list[float]] = []
        for nid, node in enumerate(self.graph.nodes):
            if node.is_input:
                results.append([0.0] * repeat)
                continue
            results.append(self._time_node(nid, number, repeat, min_repeat_ms,
                                           limit_zero_time_iterations, cooldown_interval_ms,
                                           repeats_to_cooldown).results)
        self.last_executed_node = len(self.graph.nodes) - 1
        return results

    def run_individual_node(self, index: int, number: int = 10, repeat: int = 1,
                            min_repeat_ms: float = 0, limit_zero_time_iterations: int = 100,
                            cooldown_interval_ms: float = 0,
                            repeats_to_cooldown: int = 1) -> BenchmarkResult:
        """Time node ``index`` alone, after running the nodes before it once.

        Parameters
        ----------
        index : int
            Topological index of the node.
        number, repeat, min_repeat_ms, limit_zero_time_iterations, cooldown_interval_ms, \
repeats_to_cooldown
            As for :meth:`run_individual`.

        Returns
        -------
        BenchmarkResult
            Seconds per run, one value per repeat.
        """
        index = self._check_node(index, "run_individual_node")
        for nid in range(index):
            self.run_node(nid)
        self.last_executed_node = index
        if self._execs[index] is None:  # an input or __nop node runs nothing: 0 s, as TVM's
            return BenchmarkResult([0.0] * max(repeat, 1), num_threads=self.num_threads)
        return self._time_node(index, number, repeat, min_repeat_ms, limit_zero_time_iterations,
                               cooldown_interval_ms, repeats_to_cooldown)

    def run_per_layer(self) -> tuple[list[np.ndarray], list[tuple[str, str]]]:
        """Run every node once in order and copy each output right after its node ran.

        Returns
        -------
        outputs : list of numpy.ndarray
            One copy per entry (every output of every node, inputs included), in entry order.
        timestamps : list of (str, str)
            Per node, wall-clock start and end (``HH:MM:SS.ffffff``).
        """
        outputs: list[np.ndarray] = []
        stamps: list[tuple[str, str]] = []
        for nid in range(len(self.graph.nodes)):
            start = time.time_ns()
            self.run_node(nid)
            end = time.time_ns()
            stamps.append((_wall_clock(start), _wall_clock(end)))
            outputs.extend(self._host_copy(self.entries[eid])
                           for eid in self.node_output_entries(nid))
        self.last_executed_node = len(self.graph.nodes) - 1
        return outputs, stamps


class CudaDebugExecutor(DebugExecutor, CudaGraphExecutor):
    """The debug executor on a CUDA GPU: nodes run one at a time on the kernels' stream, each
    node's time measured with CUDA events, node outputs copied to the host."""

    def _time_node(self, nid: int, number: int, repeat: int, min_repeat_ms: float,
                   limit_zero_time_iterations: int, cooldown_interval_ms: float,
                   repeats_to_cooldown: int) -> BenchmarkResult:
        call = self._execs[nid]
        if call is None:
            return BenchmarkResult([0.0] * max(repeat, 1))
        return BenchmarkResult(time_launches(call, self.stream, number, repeat, min_repeat_ms))

    def run_node(self, nid: int) -> None:
        """Run node ``nid`` and wait for the GPU."""
        super().run_node(nid)
        self.stream.synchronize()


def debug_executor_class(device: Device | Sequence[Device] | None) -> type[DebugExecutor]:
    """The debug executor for a device: :class:`CudaDebugExecutor` for a CUDA device."""
    return CudaDebugExecutor if first_device(device).device_type == 2 else DebugExecutor


def create_from_factory(factory: Any, *devices: Device) -> DebugExecutor:
    """The debug executor of a build result, params set (``factory["debug_create"]``).

    Parameters
    ----------
    factory : GraphExecutorFactoryModule
        What ``relay.build`` returns or ``load_module`` loads.
    *devices : Device
        The CPU.

    Returns
    -------
    DebugExecutor
        Ready to wrap in :class:`GraphModuleDebug`.
    """
    executor = debug_executor_class(list(devices) or None)(factory.graph, factory,
                                                          list(devices) or None)
    executor.set_params(factory.get_params())
    return executor


def create(graph_json_str: str, libmod: Module, device: Device | Sequence[Device],
           dump_root: str | Path | None = None) -> GraphModuleDebug:
    """A debug executor for ``graph_json_str`` with kernels from ``libmod``.

    Parameters
    ----------
    graph_json_str : str
        The graph JSON (``lib.graph_json`` or ``lib["get_graph_json"]()``).
    libmod : Module
        A build result, a loaded artifact or a kernel library. The params of a build result or
        loaded artifact are set, as TVM does with ``get_graph_params``.
    device : Device or sequence of Device
        The CPU.
    dump_root : str or Path, optional
        Folder for the dumps; a fresh temporary folder (its path printed) when None.

    Returns
    -------
    GraphModuleDebug
        The debug module.

    Examples
    --------
    >>> lib = kiln.runtime.load_module("net.so")  # doctest: +SKIP
    >>> m = create(lib["get_graph_json"](), lib, kiln.cpu(), dump_root="/tmp/tvmdbg")  # doctest: +SKIP
    """
    return GraphModuleDebug(create_executor(graph_json_str, libmod, device), device,
                            graph_json_str, dump_root)


def create_executor(graph_json_str: str, libmod: Module,
                    device: Device | Sequence[Device]) -> DebugExecutor:
    """The debug executor :func:`create` wraps: params set from a build result or artifact.

    Parameters
    ----------
    graph_json_str : str
        The graph JSON.
    libmod : Module
        A build result, a loaded artifact or a kernel library.
    device : Device or sequence of Device
        The CPU.
    """
    if not isinstance(graph_json_str, str):
        raise TypeError(f"graph_json_str must be the graph JSON text, got "
                        f"{type(graph_json_str).__name__}")
    executor = debug_executor_class(device)(graph_json_str, libmod, device)
    get_params = getattr(libmod, "get_params", None)
    if callable(get_params):
        executor.set_params(get_params())
    return executor


def _as_debug_executor(module: Any) -> DebugExecutor:
    if isinstance(module, GraphModule):
        module = module.module
    if isinstance(module, DebugExecutor):
        return module
    if isinstance(module, GraphExecutor):
        # a plain executor (lib["default"](dev)): same graph and kernels, inputs carried over
        executor = debug_executor_class(module.device)(module.graph, module.lib, module.device)
        for nid in module.graph.arg_nodes:
            eid = module.graph.entry_id(nid, 0)
            executor._store(executor.entries[eid], module._host_copy(module.entries[eid]))
        executor.param_names |= module.param_names
        return executor
    raise TypeError("GraphModuleDebug wraps the module lib['debug_create']('default', dev) returns, "
                    f"got {type(module).__name__}")


class GraphModuleDebug(GraphModule):
    """The debug graph module: TVM's ``GraphModuleDebug``
    (:class:`kiln.debug.debug_executor.GraphModuleDebug` adds the per-node profile and ``.npy``
    dumps).

    Creating it makes ``<dump_root>/_tvmdbg_device_CPU_0/`` and writes the graph dump there.

    Parameters
    ----------
    module : DebugExecutor
        ``lib["debug_create"]("default", dev)`` (a plain graph executor is converted).
    device : Device or sequence of Device
        The CPU.
    graph_json_str : str, optional
        The graph JSON (default: the module's graph).
    dump_root : str or Path, optional
        Folder for the dumps; a fresh temporary folder (its path printed) when None.

    Attributes
    ----------
    debug_datum : DebugResult
        The collected times and outputs, and the dump writers.

    Examples
    --------
    >>> m = GraphModuleDebug(lib["debug_create"]("default", dev), [dev], lib.graph_json,
    ...                      dump_root="/tmp/tvmdbg")  # doctest: +SKIP
    >>> m.set_input("data", x); m.run(); y = m.get_output(0).numpy()  # doctest: +SKIP
    """

    module: DebugExecutor

    def __init__(self, module: Any, device: Device | Sequence[Device] | None = None,
                 graph_json_str: str | GraphJSON | None = None,
                 dump_root: str | Path | None = None):
        super().__init__(_as_debug_executor(module))
        if graph_json_str is None:
            graph_json_str = self.module.graph.to_json()
        elif isinstance(graph_json_str, GraphJSON):
            graph_json_str = graph_json_str.to_json()
        if dump_root is None:
            dump_root = tempfile.mkdtemp(prefix=_DUMP_ROOT_PREFIX)
            print(f"debug executor: dumping to {dump_root}")
        self._dump_root = Path(dump_root)
        self._dump_path = self._dump_root / (_DUMP_PATH_PREFIX + "device_" +
                                             self._format_device(device))
        self._dump_path.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.debug_datum = DebugResult(graph_json_str, self._dump_path)
        self._outputs: list[np.ndarray] = []

    def _format_device(self, device: Device | Sequence[Device] | None) -> str:
        dev = device[0] if isinstance(device, Sequence) and device else device
        text = str(dev if isinstance(dev, Device) else self.module.device)
        return text.upper().replace("(", ":").replace(")", "").replace(":", "_")

    @property
    def dump_root(self) -> Path:
        """The dump root folder."""
        return self._dump_root

    @property
    def dump_path(self) -> Path:
        """The device folder holding the dump files."""
        return self._dump_path

    # --- running -------------------------------------------------------------------------------
    def run(self, number: int = 10, repeat: int = 1, min_repeat_ms: float = 1,
            limit_zero_time_iterations: int = 100, cooldown_interval_ms: float = 0,
            repeats_to_cooldown: int = 1, sort_by_time: bool = True,
            show_timestamps: bool = False, **input_dict: Any) -> None:
        """Time every node, collect every node output, write the dumps and print the table.

        Parameters
        ----------
        number : int
            Runs per measurement of one node (grown to fill ``min_repeat_ms``).
        repeat : int
            Measurements per node (the table's ``Measurements(us)``).
        min_repeat_ms : float
            Minimum duration of one measurement, in milliseconds.
        limit_zero_time_iterations : int
            Zero-duration measurements accepted before giving up on ``min_repeat_ms``.
        cooldown_interval_ms : float
            Pause after every ``repeats_to_cooldown`` measurements.
        repeats_to_cooldown : int
            See ``cooldown_interval_ms``.
        sort_by_time : bool
            Sort the table slowest first with a ``Total_time`` row (else graph order).
        show_timestamps : bool
            Add the ``Start Time`` / ``End Time`` columns (wall clock of each node's run).
        **input_dict
            Inputs to set first, by name.
        """
        self.collect(number, repeat, min_repeat_ms, limit_zero_time_iterations,
                     cooldown_interval_ms, repeats_to_cooldown, **input_dict)
        self.debug_datum.dump_output_tensor()
        self.debug_datum.dump_chrome_trace()
        self.debug_datum.display_debug_result(sort_by_time, show_timestamps)

    def collect(self, number: int = 10, repeat: int = 1, min_repeat_ms: float = 1,
                limit_zero_time_iterations: int = 100, cooldown_interval_ms: float = 0,
                repeats_to_cooldown: int = 1, **input_dict: Any) -> DebugResult:
        """Time every node and collect every node output, writing and printing nothing.

        :meth:`run` is this plus the dump files and the printed table; call it when you want
        to choose what to write (``debug_datum.dump_output_tensor()``,
        ``debug_datum.dump_chrome_trace(path)``, ``dump_npy`` of :mod:`kiln.debug`'s module) and
        how to show the times (``debug_datum.get_fitted_result(width)``).

        Parameters
        ----------
        number, repeat, min_repeat_ms, limit_zero_time_iterations, cooldown_interval_ms, \
repeats_to_cooldown
            As for :meth:`run`.
        **input_dict
            Inputs to set first, by name.

        Returns
        -------
        DebugResult
            ``debug_datum``, holding the times and outputs.
        """
        if input_dict:
            self.set_input(**input_dict)
        times = self.run_individual(number, repeat, min_repeat_ms, limit_zero_time_iterations,
                                    cooldown_interval_ms, repeats_to_cooldown)
        self._outputs, stamps = self.module.run_per_layer()
        self.debug_datum.set_times(times, stamps)
        self.debug_datum.update_output_tensors(self._outputs)
        return self.debug_datum

    def run_individual(self, number: int, repeat: int = 1, min_repeat_ms: float = 0,
                       limit_zero_time_iterations: int = 100, cooldown_interval_ms: float = 0,
                       repeats_to_cooldown: int = 1) -> list[list[float]]:
        """Per node, seconds per run for each repeat (see :meth:`DebugExecutor.run_individual`)."""
        return self.module.run_individual(number, repeat, min_repeat_ms, limit_zero_time_iterations,
                                          cooldown_interval_ms, repeats_to_cooldown)

    def run_individual_node(self, index: int, number: int = 10, repeat: int = 1,
                            min_repeat_ms: float = 0, limit_zero_time_iterations: int = 100,
                            cooldown_interval_ms: float = 0,
                            repeats_to_cooldown: int = 1) -> BenchmarkResult:
        """Time one node (see :meth:`DebugExecutor.run_individual_node`)."""
        return self.module.run_individual_node(index, number, repeat, min_repeat_ms,
                                               limit_zero_time_iterations, cooldown_interval_ms,
                                               repeats_to_cooldown)

    def execute_node(self, index: int) -> None:
        """Run the graph up to node ``index`` (see :meth:`DebugExecutor.execute_node`)."""
        self.module.execute_node(index)

    def get_node_output(self, index: int, output_index: int = 0) -> NDArray:
        """A copy of output ``output_index`` of node ``index``."""
        return self.module.get_node_output(index, output_index)

    def node_index(self, name: str) -> int:
        """Topological index of the first node called ``name``."""
        for i, node in enumerate(self.module.graph.nodes):
            if node.name == name:
                return i
        raise NodeNotFoundError(f"Could not find a node named {name} in this graph.")

    def debug_get_output(self, node: int | str, out: NDArray | np.ndarray | None = None) -> Any:
        """Run the graph up to ``node`` (index or name) and copy its first output into ``out``.

        Returns
        -------
        NDArray or numpy.ndarray
            ``out``, or a new NDArray when ``out`` is None.
        """
        if isinstance(node, str):
            index = self.node_index(node)
        elif isinstance(node, (int, np.integer)) and not isinstance(node, bool):
            index = int(node)
        else:
            raise TypeError(f"debug_get_output takes a node index or name, got {type(node).__name__}")
        return self.module.debug_get_output(index, out)

    def get_output_tensors(self) -> dict[str, np.ndarray]:
        """Every output of every node from the last :meth:`run`, keyed as in the dump."""
        return self.debug_datum.get_output_tensors()

    def exit(self) -> None:
        """Delete the dump root folder and everything in it."""
        if self._dump_root.is_dir():
            shutil.rmtree(self._dump_root)
