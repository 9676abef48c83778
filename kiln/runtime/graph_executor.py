"""The graph executor: runs a graph JSON's nodes in order over a preallocated storage plan.

Memory follows the graph's plan: one buffer per ``storage_id``, sized by its largest entry, and
every entry (node output) a typed view into its buffer; ``__nop`` nodes (reshapes) make their
output a view of their input and run nothing. At creation every node's kernel is looked up and
bound to its argument views once, so :meth:`GraphExecutor.run` does no allocation, lookup or
shape check per run: when every kernel is compiled code it is one call of the library's
``kiln_run_plan`` (a C loop over function pointers and argument arrays into the storage plan,
see :class:`~kiln.runtime.native.RunPlan`), otherwise a Python loop of bound calls. Checks happen
where data comes in (:meth:`~GraphExecutor.set_input`, :meth:`~GraphExecutor.load_params`), and a
kernel never sees an array of another shape than the graph says.

:class:`GraphExecutor` is the runtime module (``lib["default"](dev)``); :class:`GraphModule` is
TVM's Python wrapper around it (``graph_executor.GraphModule``). A debugger subclasses
:class:`GraphExecutor` and overrides :meth:`~GraphExecutor.run_node`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from math import prod
from typing import Any, TypeVar, overload

import numpy as np

from kiln.errors import KilnError
from kiln.runtime.dtype import NARROW_FLOATS, NARROW_INTS, np_dtype
from kiln.runtime.graph_json import GraphJSON, Node, parse_graph_json
from kiln.runtime.module import KernelError, Module
from kiln.runtime.native import RunPlan
from kiln.runtime.ndarray import Device, NDArray, cpu
from kiln.runtime.params import load_param_dict
from kiln.runtime.profiling import BenchmarkResult, time_function

# the array get_output copies an output into (returned as given)
_Out = TypeVar("_Out", NDArray, np.ndarray)

__all__ = ["GraphExecutor", "GraphModule", "InputConversionWarning", "InputError"]

_ALIGNMENT = 64  # bytes; a cache line, and enough for any vector load


class InputError(KilnError, ValueError):
    """An input was set with an unknown name, or a shape or dtype the graph does not take."""


class InputConversionWarning(UserWarning):
    """An input value was converted to the graph's dtype of the same kind (float64 -> float32)."""


def _dtype_kind(dtype: np.dtype[Any]) -> str:
    """``"float"``, ``"int"`` (signed and unsigned), ``"bool"``, ... of a NumPy dtype (the narrow
    ``ml_dtypes`` ones included: bfloat16 and float8 are floats, int4 an int)."""
    if dtype.name in NARROW_FLOATS:
        return "float"
    if dtype.name in NARROW_INTS:
        return "int"
    return {"f": "float", "i": "int", "u": "int", "b": "bool", "c": "complex"}.get(dtype.kind,
                                                                                   dtype.kind)


def _aligned_zeros(nbytes: int) -> np.ndarray:
    raw = np.zeros(nbytes + _ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % _ALIGNMENT
    return raw[start:start + nbytes]


def first_device(device: Device | Sequence[Device] | None) -> Device:
    """The device an executor runs on: the first one given (default: the CPU)."""
    devs = [device] if isinstance(device, Device) or device is None else list(device)
    if not devs:
        raise KilnError("the graph executor needs a device (e.g. kiln.cpu())")
    dev = devs[0] or cpu()
    if not isinstance(dev, Device):
        raise TypeError(f"expected a Device such as kiln.cpu(), got {type(dev).__name__}")
    return dev


def _devices(device: Device | Sequence[Device] | None, device_type: int = 1) -> Device:
    dev = first_device(device)
    if dev.device_type != device_type:
        where = "the CPU" if device_type == 1 else "a CUDA GPU"
        raise KilnError(f"device {dev} is not supported by this executor, which runs on {where}; "
                        "build for the matching target ('llvm' for kiln.cpu(), 'cuda' for "
                        "kiln.cuda())")
    return dev


class GraphExecutor(Module):
    """Runs one graph on one device with kernels from a library module.

    Parameters
    ----------
    graph_json : str or GraphJSON
        The graph.
    lib : Module
        Where the kernels come from: a kernel library or a module importing one (a factory).
    device : Device or sequence of Device, optional
        The CPU (the first device is used).

    Attributes
    ----------
    graph : GraphJSON
        The parsed graph.
    entries : list of numpy.ndarray
        Per entry id, its typed view into the storage plan.
    op_nodes : list of int
        Node ids that run a kernel, in execution order (null and ``__nop`` nodes excluded).
    param_names : set of str
        Inputs set as params (by ``load_params``, ``share_params`` or a factory).
    use_run_plan : bool
        Run the graph with one C call when every kernel is compiled (default True); False
        calls the kernels one by one from Python (what subclasses that hook
        :meth:`run_node` always do).
    """

    type_key = "GraphExecutor"
    #: DLPack device type it runs on (the CPU; :class:`kiln.runtime.cuda_executor.CudaGraphExecutor` 2)
    device_type = 1

    def __init__(self, graph_json: str | GraphJSON, lib: Module,
                 device: Device | Sequence[Device] | None = None):
        super().__init__()
        if not isinstance(lib, Module):
            raise TypeError(f"the kernel library must be a runtime Module, got {type(lib).__name__}")
        self.graph = graph_json if isinstance(graph_json, GraphJSON) else parse_graph_json(graph_json)
        self.lib = lib
        self.device = _devices(device, self.device_type)
        self.input_index = {name: i for i, name in enumerate(self.graph.input_names)}
        self.param_names: set[str] = set()
        self._converted_inputs: set[str] = set()
        self._overrides: dict[int, np.ndarray] = {}
        self._kernels = self._find_kernels()
        self.storage = self._allocate()
        self.entries: list[np.ndarray] = []
        self._execs: list[Callable[[], None] | None] = []
        self.op_nodes = [nid for nid, n in enumerate(self.graph.nodes)
                         if not n.is_input and n.func_name != "__nop"]
        self._plan: RunPlan | None = None
        self.use_run_plan = True
        # run() may skip the per-node method call unless a subclass hooks run_node
        self._fast = type(self).run_node is GraphExecutor.run_node
        self._build_views()
        self._bind()

    # --- setup ---------------------------------------------------------------------------------
    def _find_kernels(self) -> dict[str, Any]:
        kernels: dict[str, Any] = {}
        for nid, node in enumerate(self.graph.nodes):
            name = node.func_name
            if node.is_input or name == "__nop" or name in kernels:
                continue
            kernel = self.lib.find_kernel(name)
            if kernel is None:
                raise KernelError(f"graph node {nid} ({node.name!r}) calls {name}, which "
                                  f"Module[{self.lib.type_key}] does not provide")
            kernels[name] = kernel
        return kernels

    def _entry_nbytes(self, eid: int) -> int:
        return prod(self.graph.shapes[eid]) * np_dtype(self.graph.entry_dtype(eid)).itemsize

    def _allocate(self) -> list[np.ndarray]:
        sizes: dict[int, int] = {}
        for eid, sid in enumerate(self.graph.storage_ids):
            sizes[sid] = max(sizes.get(sid, 0), self._entry_nbytes(eid))
        return [self._new_storage(sizes.get(sid, 0)) for sid in range(max(sizes, default=-1) + 1)]

    def _new_storage(self, nbytes: int) -> Any:
        """One zero-filled storage buffer of ``nbytes``."""
        return _aligned_zeros(nbytes)

    def _build_views(self) -> None:
        g = self.graph
        entries = []
        for eid, sid in enumerate(g.storage_ids):
            if eid in self._overrides:
                entries.append(self._overrides[eid])
                continue
            entries.append(self._storage_view(sid, eid))
        for nid, node in enumerate(g.nodes):
            if node.is_input or node.func_name != "__nop":
                continue
            if len(node.inputs) != node.num_outputs:
                raise KernelError(f"graph node {nid} ({node.name!r}) is a __nop with "
                                  f"{len(node.inputs)} input(s) and {node.num_outputs} output(s)")
            for k, src in enumerate(node.inputs):
                source = entries[g.entry_id(src)]
                eid = g.entry_id(nid, k)
                shape, dtype = g.shapes[eid], np_dtype(g.entry_dtype(eid))
                if source.dtype != dtype or source.size != prod(shape):
                    raise KernelError(f"graph node {nid} ({node.name!r}) is a __nop from "
                                      f"{source.shape} {source.dtype} to {shape} {dtype}: only "
                                      "same-size reshapes can alias")
                entries[eid] = source.reshape(shape)
        self.entries = entries
        # per-run lookups done once: an input's buffer by name, each output as an NDArray
        self._input_buffers = {name: entries[g.entry_id(g.arg_nodes[i], 0)]
                               for name, i in self.input_index.items()}
        self._outputs = [self._as_ndarray(entries[e]) for e in g.output_entries]

    def _storage_view(self, sid: int, eid: int) -> Any:
        """Entry ``eid``: a typed, shaped view of storage ``sid``."""
        view = self.storage[sid][:self._entry_nbytes(eid)].view(np_dtype(self.graph.entry_dtype(eid)))
        return view.reshape(self.graph.shapes[eid])

    def _bind(self) -> None:
        execs: list[Callable[[], None] | None] = [None] * len(self.graph.nodes)
        for nid in self.op_nodes:
            node = self.graph.nodes[nid]
            kernel = self._kernels[node.func_name]
            try:
                execs[nid] = kernel.bind(self.node_inputs(nid) + self.node_outputs(nid))
            except KernelError as e:
                raise KernelError(f"graph node {nid} ({node.name!r}): {e}") from None
        self._execs = execs
        self._run_list = [execs[nid] for nid in self.op_nodes]
        self._plan = self._make_plan() if self._fast else None

    def _make_plan(self) -> RunPlan | None:
        """The compiled kernels as one run plan, or None when a node's kernel is not compiled
        code (a NumPy or Python kernel) or no library exports the runner."""
        entries = []
        for nid in self.op_nodes:
            kernel = self._kernels[self.graph.nodes[nid].func_name]
            make = getattr(kernel, "plan_entry", None)
            entry = make(self.node_inputs(nid) + self.node_outputs(nid)) if make else None
            if entry is None:
                return None
            entries.append(entry)
        return RunPlan.create(entries) if entries else None

    @property
    def run_plan_active(self) -> bool:
        """Whether :meth:`run` is one C call (see :attr:`use_run_plan`)."""
        return self._plan is not None and self.use_run_plan

    # --- structure (for debuggers) -------------------------------------------------------------
    @property
    def nodes(self) -> tuple[Node, ...]:
        """The graph's nodes."""
        return self.graph.nodes

    def node_input_entries(self, nid: int) -> list[int]:
        """Entry ids node ``nid`` reads."""
        return [self.graph.entry_id(e) for e in self.graph.nodes[nid].inputs]

    def node_output_entries(self, nid: int) -> list[int]:
        """Entry ids node ``nid`` writes."""
        return [self.graph.entry_id(nid, k) for k in range(self.graph.nodes[nid].num_outputs)]

    def node_inputs(self, nid: int) -> list[np.ndarray]:
        """The arrays node ``nid`` reads (views into the storage plan)."""
        return [self.entries[e] for e in self.node_input_entries(nid)]

    def node_outputs(self, nid: int) -> list[np.ndarray]:
        """The arrays node ``nid`` writes (views into the storage plan)."""
        return [self.entries[e] for e in self.node_output_entries(nid)]

    @property
    def num_threads(self) -> int:
        """Threads the kernels run with (1 for libraries without threading)."""
        for mod in (self.lib, *self.lib._walk_imports()):
            threads = getattr(mod, "num_threads", None)
            if threads:
                return int(threads)
        return 1

    def set_num_threads(self, num_threads: int) -> None:
        """Run this executor's compiled kernels with ``num_threads`` threads."""
        if num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, got {num_threads}")
        for mod in (self.lib, *self.lib._walk_imports()):
            setter = getattr(mod, "set_num_threads", None)
            if setter is not None:
                setter(num_threads)

    # --- running -------------------------------------------------------------------------------
    def run_node(self, nid: int) -> None:
        """Run node ``nid``'s kernel (nothing for input and ``__nop`` nodes); the debug hook."""
        call = self._execs[nid]
        if call is not None:
            call()

    def run(self, **inputs: Any) -> None:
        """Set ``inputs`` (by name), then run every node in order.

        Raises
        ------
        KernelError
            A kernel reported a failure (the nodes after it did not run).
        """
        if inputs:
            self.set_input(**inputs)
        plan = self._plan
        if plan is not None and self.use_run_plan:
            failed = plan()
            if failed >= 0:
                nid = self.op_nodes[failed]
                shapes = ", ".join(f"{a.shape} {a.dtype}" for a in plan.entries[failed].arrays)
                raise KernelError(f"graph node {nid} ({self.graph.nodes[nid].name!r}): kernel "
                                  f"{plan.entries[failed].name} failed (arguments: {shapes})")
        elif self._fast:
            for call in self._run_list:
                call()  # type: ignore[misc]
        else:
            for nid in self.op_nodes:
                self.run_node(nid)

    # --- inputs --------------------------------------------------------------------------------
    def get_input_index(self, name: str) -> int:
        """Index of input ``name``, or -1 (TVM's convention)."""
        return self.input_index.get(name, -1)

    def _input_entry(self, key: int | str) -> tuple[str, int]:
        if isinstance(key, str):
            if key not in self.input_index:
                raise InputError(f"the graph has no input named {key!r}; its inputs are "
                                 f"{', '.join(self.graph.input_names)}")
            index = self.input_index[key]
        elif isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            index = int(key)
            if not 0 <= index < len(self.graph.arg_nodes):
                raise InputError(f"input index {index} is out of range: the graph has "
                                 f"{len(self.graph.arg_nodes)} inputs")
        else:
            raise TypeError(f"inputs are named by str or int index, got {type(key).__name__}")
        nid = self.graph.arg_nodes[index]
        return self.graph.nodes[nid].name, self.graph.entry_id(nid, 0)

    def set_input(self, key: int | str | None = None, value: Any = None, **params: Any) -> None:
        """Copy data into inputs: ``set_input("data", x)``, ``set_input(0, x)`` or ``set_input(**d)``.

        As TVM's, the keyword form is a bulk load: names that are not inputs of the graph are
        skipped (a params dict may hold more than one graph uses), while a named ``key`` must exist.
        A value of the same kind as the input (float64 for a float32 input, int32 for int64)
        is converted, with one :class:`InputConversionWarning` per input; a value of another kind
        (int for a float input, float for an int input) is refused.

        Raises
        ------
        InputError
            Unknown ``key`` (name or index), a value of another shape, or of another kind of dtype.
        """
        if key is not None:
            self._copy_in(key, value)
        for name, v in params.items():
            target = self._input_buffers.get(name)
            if target is None:
                continue
            if type(v) is np.ndarray and v.dtype == target.dtype and v.shape == target.shape:
                self._store(target, v)  # the common case, without the checks' lookups
            else:
                self._copy_in(name, v)

    def _copy_in(self, key: int | str, value: Any) -> None:
        name, eid = self._input_entry(key)
        target = self.entries[eid]
        if value is None:
            raise InputError(f"set_input({key!r}): no value given")
        if isinstance(value, NDArray):
            src = value.view_numpy()
        elif isinstance(value, np.ndarray):
            src = value
        elif hasattr(value, "numpy"):
            src = np.asarray(value.numpy())
        else:  # Python scalars and nested lists take the input's dtype
            src = np.asarray(value, dtype=target.dtype)
        if src.shape != target.shape:
            raise InputError(f"input {name!r} expects shape {target.shape} dtype "
                             f"{self.graph.entry_dtype(eid)}, got shape {src.shape} dtype "
                             f"{src.dtype}")
        if src.dtype != target.dtype:
            want = self.graph.entry_dtype(eid)
            if _dtype_kind(src.dtype) != _dtype_kind(target.dtype):
                raise InputError(f"input {name!r} expects shape {target.shape} dtype {want}, got "
                                 f"shape {src.shape} dtype {src.dtype}: Kiln converts only within a "
                                 f"kind (float to float, int to int); convert the value with "
                                 f".astype({want!r})")
            if name not in self._converted_inputs:
                self._converted_inputs.add(name)
                warnings.warn(f"input {name!r}: converting {src.dtype} to {want}",
                              InputConversionWarning, stacklevel=3)
        self._store(target, src)

    def _store(self, entry: Any, value: np.ndarray) -> None:
        """Copy a host array of the entry's shape into an entry (converting its dtype)."""
        np.copyto(entry, value, casting="unsafe")

    def _load(self, entry: Any, out: np.ndarray) -> None:
        """Copy an entry into a host array of its shape and dtype."""
        np.copyto(out, entry)

    def _host_copy(self, entry: Any) -> np.ndarray:
        """A host copy of an entry (for debuggers)."""
        return np.array(entry, copy=True)

    def _as_ndarray(self, entry: Any) -> NDArray:
        """An NDArray sharing an entry's memory."""
        return NDArray(entry, self.device, copy=False)

    def get_input(self, key: int | str) -> NDArray:
        """Input ``key`` (name or index) as an NDArray sharing the executor's buffer."""
        _, eid = self._input_entry(key)
        return self._as_ndarray(self.entries[eid])

    def get_num_inputs(self) -> int:
        """Number of input nodes, params included (TVM counts every arg node)."""
        return len(self.graph.arg_nodes)

    def get_input_info(self) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
        """Shapes and dtypes of the inputs that are not params, by name."""
        shapes: dict[str, tuple[int, ...]] = {}
        dtypes: dict[str, str] = {}
        for nid in self.graph.arg_nodes:
            name = self.graph.nodes[nid].name
            if name in self.param_names:
                continue
            eid = self.graph.entry_id(nid, 0)
            shapes[name] = self.graph.shapes[eid]
            dtypes[name] = self.graph.entry_dtype(eid)
        return shapes, dtypes

    def load_params(self, params_bytes: bytes | bytearray) -> None:
        """Set inputs from a params blob (``save_param_dict`` bytes); unknown names are skipped."""
        for name, value in load_param_dict(params_bytes).items():
            if name in self.input_index:
                self._copy_in(name, value)
                self.param_names.add(name)

    def set_params(self, params: dict[str, Any]) -> None:
        """Set inputs from a dict of params and remember them as params; unknown names are skipped."""
        for name, value in params.items():
            if name in self.input_index:
                self._copy_in(name, value)
                self.param_names.add(name)

    def share_params(self, other: GraphExecutor | GraphModule, params_bytes: bytes | bytearray) -> None:
        """Use ``other``'s buffers for the params named in ``params_bytes`` (no copy).

        Parameters
        ----------
        other : GraphExecutor or GraphModule
            An executor of a graph with the same param inputs.
        params_bytes : bytes
            A params blob; only its names are used.
        """
        other_exec = other.module if isinstance(other, GraphModule) else other
        if not isinstance(other_exec, GraphExecutor):
            raise TypeError(f"share_params takes a graph executor, got {type(other).__name__}")
        for name in load_param_dict(params_bytes):
            if name not in self.input_index or name not in other_exec.input_index:
                continue
            _, eid = self._input_entry(name)
            _, other_eid = other_exec._input_entry(name)
            theirs = other_exec.entries[other_eid]
            if theirs.shape != self.entries[eid].shape or theirs.dtype != self.entries[eid].dtype:
                raise InputError(f"share_params: {name!r} is {theirs.shape} {theirs.dtype} in the "
                                 f"other graph but {self.entries[eid].shape} "
                                 f"{self.entries[eid].dtype} here")
            self._overrides[eid] = theirs
            self.param_names.add(name)
        self._build_views()
        self._bind()

    # --- outputs -------------------------------------------------------------------------------
    def get_num_outputs(self) -> int:
        """Number of graph outputs."""
        return len(self.graph.heads)

    def get_output_names(self) -> list[str]:
        """The output names, by index (the model's, or ``output_0``, ``output_1``, ...)."""
        return list(self.graph.output_names)

    def get_output_index(self, name: str) -> int:
        """Index of output ``name``, or -1 (as :meth:`get_input_index`)."""
        names = self.graph.output_names
        return names.index(name) if name in names else -1

    def _output_index(self, key: int | str) -> int:
        if isinstance(key, str):
            index = self.get_output_index(key)
            if index < 0:
                raise InputError(f"the graph has no output named {key!r}; its outputs are "
                                 f"{', '.join(self.graph.output_names)}")
            return index
        if not isinstance(key, (int, np.integer)) or isinstance(key, bool):
            raise TypeError(f"outputs are named by str or int index, got {type(key).__name__}")
        if not 0 <= int(key) < len(self.graph.heads):
            raise IndexError(f"output index {key} is out of range: the graph has "
                             f"{len(self.graph.heads)} output(s)")
        return int(key)

    @overload
    def get_output(self, index: int | str, out: None = None) -> NDArray: ...

    @overload
    def get_output(self, index: int | str, out: _Out) -> _Out: ...

    def get_output(self, index: int | str,
                   out: NDArray | np.ndarray | None = None) -> NDArray | np.ndarray:
        """Output ``index`` (an int, or an output name): an NDArray sharing the executor's
        buffer, or copied into ``out``.

        Raises
        ------
        InputError
            No output has that name (the message lists the names).
        IndexError
            The index is out of range.
        """
        if out is None:
            return self._outputs[self._output_index(index)]
        value = self.entries[self.graph.output_entries[self._output_index(index)]]
        if isinstance(out, NDArray) and out.device.device_type != 1:
            if out.shape != value.shape or out.dtype != self.graph.entry_dtype(
                    self.graph.output_entries[self._output_index(index)]):
                raise InputError(f"get_output({index}, out): out must be {value.shape} "
                                 f"{value.dtype}, got {out.shape} {out.dtype}")
            out.copyfrom(self._outputs[self._output_index(index)])
            return out
        target = out.view_numpy() if isinstance(out, NDArray) else out
        if not isinstance(target, np.ndarray) or target.shape != value.shape or \
                target.dtype != value.dtype:
            got = (f"{target.shape} {target.dtype}" if isinstance(target, np.ndarray)
                   else type(out).__name__)
            raise InputError(f"get_output({index}, out): out must be {value.shape} {value.dtype}, "
                             f"got {got}")
        self._load(value, target)
        return out

    # --- module functions (TVM's packed-function names) ----------------------------------------
    _FUNCTIONS: tuple[str, ...] = ("set_input", "run", "get_output", "get_input", "get_num_outputs",
                  "get_num_inputs", "get_input_index", "get_input_info", "load_params",
                  "share_params", "get_output_index", "get_output_names")

    def _function(self, name: str) -> Callable[..., Any] | None:
        return getattr(self, name) if name in self._FUNCTIONS else None


class GraphModule:
    """TVM's Python wrapper of a graph executor module (``graph_executor.GraphModule``).

    Parameters
    ----------
    module : GraphExecutor
        ``lib["default"](dev)`` or an executor from ``graph_executor.create``.

    Examples
    --------
    >>> m = GraphModule(lib["default"](kiln.cpu()))  # doctest: +SKIP
    >>> m.set_input("data", x); m.run(); y = m.get_output(0).numpy()  # doctest: +SKIP
    >>> m.get_output_names(), m.get_output("output")  # doctest: +SKIP
    """

    def __init__(self, module: GraphExecutor | GraphModule):
        if isinstance(module, GraphModule):
            module = module.module
        if not isinstance(module, GraphExecutor):
            raise TypeError("GraphModule wraps the executor module that lib['default'](dev) or "
                            f"graph_executor.create returns, got {type(module).__name__}")
        self.module: GraphExecutor = module

    def set_input(self, key: int | str | None = None, value: Any = None, **params: Any) -> None:
        """Set inputs by name or index, or several by keyword (see :meth:`GraphExecutor.set_input`)."""
        self.module.set_input(key, value, **params)

    def run(self, **input_dict: Any) -> None:
        """Set inputs given by keyword, then run the graph."""
        self.module.run(**input_dict)

    def get_input(self, index: int | str, out: NDArray | None = None) -> NDArray:
        """Input ``index`` (name or index); copied into ``out`` when given."""
        value = self.module.get_input(index)
        return value if out is None else out.copyfrom(value)

    def get_input_index(self, name: str) -> int:
        """Index of input ``name``, or -1."""
        return self.module.get_input_index(name)

    def get_input_info(self) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
        """Shape and dtype dicts of the non-param inputs."""
        return self.module.get_input_info()

    @overload
    def get_output(self, index: int | str, out: None = None) -> NDArray: ...

    @overload
    def get_output(self, index: int | str, out: _Out) -> _Out: ...

    def get_output(self, index: int | str,
                   out: NDArray | np.ndarray | None = None) -> NDArray | np.ndarray:
        """Output ``index`` (an int or an output name); copied into ``out`` when given."""
        return self.module.get_output(index, out)

    def get_output_index(self, name: str) -> int:
        """Index of output ``name``, or -1."""
        return self.module.get_output_index(name)

    def get_output_names(self) -> list[str]:
        """The output names, by index (the model's, or ``output_0``, ``output_1``, ...)."""
        return self.module.get_output_names()

    def get_num_outputs(self) -> int:
        """Number of outputs."""
        return self.module.get_num_outputs()

    def get_num_inputs(self) -> int:
        """Number of inputs, params included."""
        return self.module.get_num_inputs()

    def load_params(self, params_bytes: bytes | bytearray) -> None:
        """Set params from a params blob."""
        self.module.load_params(params_bytes)

    def set_num_threads(self, num_threads: int) -> None:
        """Run the kernels with ``num_threads`` threads (default: the CPUs this process may use)."""
        self.module.set_num_threads(num_threads)

    @property
    def num_threads(self) -> int:
        """Threads the kernels run with."""
        return self.module.num_threads

    def share_params(self, other: GraphModule | GraphExecutor, params_bytes: bytes | bytearray) -> None:
        """Share ``other``'s param buffers for the names in ``params_bytes``."""
        self.module.share_params(other, params_bytes)

    def __getitem__(self, key: str) -> Callable[..., Any]:
        return self.module[key]

    def benchmark(
        self,
        device: Device,
        func_name: str = "run",
        repeat: int = 5,
        number: int = 5,
        min_repeat_ms: float | None = None,
        limit_zero_time_iterations: int = 100,
        end_to_end: bool = False,
        cooldown_interval_ms: float = 0,
        repeats_to_cooldown: int = 1,
        **kwargs: Any,
    ) -> BenchmarkResult:
        """Time the graph as TVM's ``GraphModule.benchmark`` does.

        Parameters
        ----------
        device : Device
            Where it runs (the CPU).
        func_name : str
            The module function to time (``"run"``).
        repeat, number : int
            Measurements, and runs per measurement.
        min_repeat_ms : float, optional
            Minimum duration of one measurement (``number`` grows to reach it).
        limit_zero_time_iterations : int
            Zero-duration measurements accepted before giving up on ``min_repeat_ms``.
        end_to_end : bool
            Also time copying ``kwargs`` in and every output out to fresh host arrays.
        cooldown_interval_ms : float
            Pause between groups of ``repeats_to_cooldown`` measurements.
        repeats_to_cooldown : int
            See ``cooldown_interval_ms``.
        **kwargs
            Inputs, set before timing (or within each run when ``end_to_end``).

        Returns
        -------
        BenchmarkResult
            Seconds per run, with the thread count.
        """
        _devices(device, self.module.device_type)
        fn: Callable[[], object]
        if end_to_end:
            module = self.module

            def fn() -> None:
                module.run(**kwargs)
                for i in range(module.get_num_outputs()):
                    module.get_output(i).numpy()
        else:
            if kwargs:
                self.set_input(**kwargs)
            fn = self.module.get_function(func_name)
        return time_function(fn, repeat=repeat, number=number, min_repeat_ms=min_repeat_ms or 0.0,
                             limit_zero_time_iterations=limit_zero_time_iterations,
                             cooldown_interval_ms=cooldown_interval_ms,
                             repeats_to_cooldown=repeats_to_cooldown,
                             num_threads=self.module.num_threads)
