"""``tvm.contrib.graph_executor``: create a graph executor from graph JSON and a library.

The executor itself lives in :mod:`kiln.runtime.graph_executor`; this is TVM's entry point.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kiln.runtime.cuda_executor import executor_class
from kiln.runtime.graph_executor import GraphModule
from kiln.runtime.module import Module
from kiln.runtime.ndarray import Device

__all__ = ["GraphModule", "create"]


def create(graph_json_str: str, libmod: Module, device: Device | Sequence[Device],
           dump_root: str | Path | None = None) -> GraphModule:
    """An executor for ``graph_json_str`` with kernels from ``libmod``.

    Parameters
    ----------
    graph_json_str : str
        The graph JSON (``lib.get_graph_json()`` or ``lib["get_graph_json"]()``).
    libmod : Module
        A kernel library, or a module importing one (a build result or a loaded artifact).
    device : Device or sequence of Device
        The CPU.
    dump_root : str or Path, optional
        Given, the executor is the debug executor (TVM's behaviour when the debugger is
        enabled), dumping per-node outputs and timings under this folder.

    Returns
    -------
    GraphModule
        The executor. Params are not set: call ``load_params`` or ``set_input``.

    Examples
    --------
    >>> lib = kiln.runtime.load_module("net.so")  # doctest: +SKIP
    >>> m = create(lib["get_graph_json"](), lib, kiln.cpu())  # doctest: +SKIP
    """
    if not isinstance(graph_json_str, str):
        raise TypeError(f"graph_json_str must be the graph JSON text, got "
                        f"{type(graph_json_str).__name__}")
    if dump_root is not None:
        from kiln.contrib.debugger import debug_executor

        return debug_executor.create(graph_json_str, libmod, device, dump_root=dump_root)
    return GraphModule(executor_class(device)(graph_json_str, libmod, device))
