"""The relay VM's runtime API (TVM's ``tvm.runtime.vm``): :class:`Executable` and
:class:`VirtualMachine`.

Kiln's VM executable is a static graph: ``relay.vm.compile`` builds the module as ``relay.build``
does, and :meth:`Executable.save` gives TVM's pair ``(code, lib)``: ``code`` holds the graph JSON,
the params and the shape of the result (tensor or nested tuple), ``lib`` the kernel library. A
model whose shapes depend on input values (``dyn.specialized_import``) compiles to an executable
that is specialized per value when run; it runs but cannot be saved.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from typing import Any

from kiln.errors import KilnError
from kiln.runtime.container import ADT
from kiln.runtime.graph_executor import GraphExecutor
from kiln.runtime.module import Module
from kiln.runtime.ndarray import Device, NDArray
from kiln.runtime.params import load_param_dict, save_param_dict

__all__ = ["Executable", "VirtualMachine"]

_MAGIC = b"KILNVM\x00\x01"

#: The structure of a result: None for a tensor, a list of structures for a tuple.
Structure = Any


def _regroup(flat: list[NDArray], structure: Structure) -> Any:
    if structure is None:
        return flat.pop(0)
    return ADT(_regroup(flat, s) for s in structure)


class Executable:
    """A compiled relay program for the VM.

    Parameters
    ----------
    graph_json : str
        The graph of ``main``.
    lib : Module
        The kernel library.
    params : dict of str to NDArray
        The params the graph takes (``p0, p1, ...``).
    structure : None or nested list
        The result's shape: None for one tensor, a list (of structures) for a tuple.
    """

    def __init__(self, graph_json: str, lib: Module, params: dict[str, NDArray],
                 structure: Structure = None):
        self.graph_json = graph_json
        self.lib = lib
        self.params = params
        self.structure = structure

    def save(self) -> tuple[bytearray, Module]:
        """TVM's ``(code, lib)``: the graph, params and result structure as bytes, and the library."""
        head = json.dumps({"graph_json": self.graph_json, "structure": self.structure}).encode()
        return bytearray(_MAGIC + struct.pack("<Q", len(head)) + head
                         + bytes(save_param_dict(self.params))), self.lib

    @staticmethod
    def load_exec(bytecode: bytes | bytearray, lib: Module) -> Executable:
        """The executable saved as ``(bytecode, lib)``."""
        data = bytes(bytecode)
        if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 8:
            raise KilnError("Executable.load_exec: not a Kiln VM executable (bad magic); save it "
                            "with Executable.save() of this Kiln version")
        (n,) = struct.unpack_from("<Q", data, len(_MAGIC))
        start = len(_MAGIC) + 8
        head = json.loads(data[start:start + n].decode())
        return Executable(head["graph_json"], lib, load_param_dict(data[start + n:]),
                          head["structure"])

    def runner(self, device: Device) -> Callable[..., Any]:
        """``f(*args, **kwargs)`` running ``main`` on ``device`` (NDArray, or ADT for tuples)."""
        graph = GraphExecutor(self.graph_json, self.lib, device)
        if self.params:
            graph.set_params(dict(self.params))
        names = graph.graph.input_names
        inputs = [n for n in names if n not in self.params]

        def run(*args: Any, **kwargs: Any) -> Any:
            if len(args) > len(inputs):
                raise KilnError(f"main takes {len(inputs)} input(s) ({', '.join(inputs)}), "
                                f"got {len(args)} positional arguments")
            for name, value in zip(inputs, args):
                graph.set_input(name, value)
            for name, value in kwargs.items():
                graph.set_input(name, value)
            graph.run()
            flat = [NDArray(graph.get_output(i), device) for i in range(graph.get_num_outputs())]
            return _regroup(flat, self.structure)

        return run


class VirtualMachine:
    """Runs an :class:`Executable` (TVM's ``tvm.runtime.vm.VirtualMachine``).

    Parameters
    ----------
    exe : Executable
        The compiled program.
    device : Device or list of Device
        The CPU.
    memory_cfg : optional
        Accepted for TVM compatibility.
    """

    def __init__(self, exe: Executable, device: Device | Sequence[Device],
                 memory_cfg: Any = None):
        if not isinstance(exe, Executable):
            raise KilnError(f"VirtualMachine takes an Executable (relay.vm.compile), got "
                            f"{type(exe).__name__}")
        dev = device if isinstance(device, Device) else device[0]
        self._run = exe.runner(dev)
        self._inputs: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}

    @staticmethod
    def _check(func_name: str) -> None:
        if func_name != "main":
            raise KilnError(f"VirtualMachine: Kiln's executables have one function, 'main', not "
                            f"{func_name!r}")

    def set_input(self, func_name: str, *args: Any, **kwargs: Any) -> None:
        """Remember the arguments of ``func_name`` for a later :meth:`invoke` without any."""
        self._check(func_name)
        self._inputs[func_name] = (args, kwargs)

    def invoke(self, func_name: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``func_name`` on the arguments (or on those given to :meth:`set_input`)."""
        self._check(func_name)
        if not args and not kwargs:
            args, kwargs = self._inputs.get(func_name, ((), {}))
        return self._run(*args, **kwargs)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Run ``main``."""
        return self.invoke("main", *args, **kwargs)
