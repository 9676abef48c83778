"""Library kinds: containers hold libraries of registered kinds, the runtime knows none itself."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln
from kiln.codegen.numpy_library import NumpyLibrary
from kiln.errors import KilnError, RuntimeFormatError
from kiln.ir.module import IRModule
from kiln.ir.serialize import save_json
from kiln.runtime import module as runtime_module
from kiln.runtime.export import ModuleBlob, encode_module_blob, write_container
from kiln.runtime.factory import GraphExecutorFactoryModule
from kiln.runtime.graph_executor import GraphModule
from kiln.runtime.module import (
    KernelLibrary,
    library_kind,
    library_kind_of,
    load_module,
    register_library_kind,
    registered_library_kinds,
)
from kiln.runtime.python_library import PythonLibrary

X = np.array([[-1.0, 0.25, 0.5], [1.0, 2.0, -3.0]], dtype=np.float32)
W = np.array([[0.5, 0.5, 0.5], [-2.0, 0.0, 4.0]], dtype=np.float32)


def _expected() -> tuple[np.ndarray, np.ndarray]:
    y = np.maximum(X + W, 0).astype(np.float32)
    return y, y > 0.5


def _run(lib: Any) -> list[np.ndarray]:
    m = GraphModule(lib["default"](kiln.cpu()))
    m.run(x=X)
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def _check(outputs: list[np.ndarray]) -> None:
    y, z = _expected()
    np.testing.assert_array_equal(outputs[0], y)
    np.testing.assert_array_equal(outputs[1], z)


# A kind defined outside the runtime: kernels named after a fixed table of NumPy operations, its
# payload the JSON of kernel -> operation.
_OPS = {
    "add_relu": lambda x, w, y: np.copyto(y, np.maximum(x + w, 0)),
    "greater": lambda y, z: np.copyto(z, y > 0.5),
}


class NamedOpsLibrary(PythonLibrary):
    type_key = "named_ops"

    def __init__(self, ops: dict[str, str]):
        super().__init__({name: _OPS[op] for name, op in ops.items()})
        self.ops = dict(ops)


_TINY_OPS = {"tvmgen_default_fused_add_nn_relu": "add_relu", "tvmgen_default_fused_greater": "greater"}


@pytest.fixture
def kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry as it is, restored after the test."""
    monkeypatch.setattr(runtime_module, "_KINDS", dict(runtime_module._KINDS))


def test_the_compiler_registers_the_numpy_kind(tiny_functions: dict) -> None:
    kind = library_kind("numpy")
    assert kind.library_type is NumpyLibrary and "numpy" in registered_library_kinds()
    assert library_kind_of(NumpyLibrary(tiny_functions)) is kind
    assert library_kind_of(PythonLibrary({})) is None


def test_unknown_kind_is_a_clear_error(tmp_path: Path, tiny_graph: str) -> None:
    blob = encode_module_blob(ModuleBlob(tiny_graph, {"p0": W}))
    path = tmp_path / "net.kiln"
    path.write_bytes(write_container(blob, b"{}", "nonesuch"))
    with pytest.raises(RuntimeFormatError,
                       match=r"net\.kiln: holds a library of kind 'nonesuch', but no such library "
                             r"kind is registered \(registered: .*numpy"):
        load_module(path)


def test_a_kind_registered_outside_the_runtime_round_trips(kinds: None, tmp_path: Path,
                                                           tiny_graph: str) -> None:
    register_library_kind("named_ops", NamedOpsLibrary,
                          lambda lib: json.dumps(lib.ops).encode(),
                          lambda payload, what: NamedOpsLibrary(json.loads(payload)))
    factory = GraphExecutorFactoryModule(tiny_graph, NamedOpsLibrary(_TINY_OPS), {"p0": W})
    path = tmp_path / "net.kiln"
    factory.export_library(path)
    data = path.read_bytes()
    assert data[8:12] == struct.pack("<I", 2)  # a kind other than numpy: named in the file
    loaded = load_module(path)
    assert isinstance(loaded.lib, NamedOpsLibrary) and loaded.lib.ops == _TINY_OPS
    _check(_run(loaded))
    (tmp_path / "cut").write_bytes(data[:22])  # inside the kind's name
    with pytest.raises(RuntimeFormatError, match="library kind"):
        load_module(tmp_path / "cut")
    runtime_module._KINDS.pop("named_ops")
    with pytest.raises(RuntimeFormatError, match="kind 'named_ops'"):
        load_module(path)


def test_unregistered_libraries_cannot_be_exported(tmp_path: Path, tiny_graph: str) -> None:
    factory = GraphExecutorFactoryModule(tiny_graph, NamedOpsLibrary(_TINY_OPS), {"p0": W})
    with pytest.raises(KilnError, match=r"Module\[named_ops\].*registered library kinds \(c, .*numpy"):
        factory.export_library(tmp_path / "net.kiln")


def test_only_kernel_libraries_are_registered(kinds: None) -> None:
    with pytest.raises(TypeError, match="KernelLibrary subclass"):
        register_library_kind("bad", dict, lambda lib: b"", lambda payload, what: None)  # type: ignore[arg-type]
    assert issubclass(NamedOpsLibrary, KernelLibrary)


def test_numpy_exports_keep_the_version_1_layout(tmp_path: Path, tiny_graph: str,
                                                 tiny_functions: dict) -> None:
    factory = GraphExecutorFactoryModule(tiny_graph, NumpyLibrary(tiny_functions), {"p0": W})
    path = tmp_path / "net.kiln"
    factory.export_library(path)
    data = path.read_bytes()
    assert data[:16] == b"KILNPKG\x00" + struct.pack("<II", 1, 0)  # every Kiln reads them
    loaded = load_module(path)
    assert isinstance(loaded.lib, NumpyLibrary)
    _check(_run(loaded))


def test_a_numpy_export_written_before_library_kinds_loads_and_runs(tmp_path: Path, tiny_graph: str,
                                                                    tiny_functions: dict) -> None:
    # the version 1 layout, field by field as Kiln wrote it before library kinds existed
    blob = encode_module_blob(ModuleBlob(tiny_graph, {"p0": W}, "default", {"target": "numpy"}))
    ir = save_json(IRModule(dict(tiny_functions))).encode()
    body = (b"KILNPKG\x00" + struct.pack("<II", 1, 0) + struct.pack("<Q", len(blob)) + blob
            + struct.pack("<Q", len(ir)) + ir)
    path = tmp_path / "old.kiln"
    path.write_bytes(body + hashlib.sha256(body).digest())
    loaded = load_module(path)
    assert loaded.metadata == {"target": "numpy"}
    _check(_run(loaded))
    broken = body.replace(b'"kiln_ir"', b'"kiln_xx"')
    path.write_bytes(broken + hashlib.sha256(broken).digest())
    with pytest.raises(RuntimeFormatError, match="old.kiln: fused functions are unreadable"):
        load_module(path)
