"""Export and load: both library kinds round-trip; broken files are clear errors."""

from __future__ import annotations

import json
import struct
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.codegen.numpy_library import NumpyLibrary, load_numpy_library, save_numpy_library
from kiln.contrib import graph_executor
from kiln.errors import KilnError, RuntimeFormatError
from kiln.runtime import load_module
from kiln.runtime.export import (
    ModuleBlob,
    decode_module_blob,
    encode_module_blob,
    read_container,
    write_container,
)
from kiln.runtime.factory import GraphExecutorFactoryModule
from kiln.runtime.graph_executor import GraphModule
from kiln.runtime.native import NativeLibrary
from kiln.runtime.params import save_param_dict
from kiln.runtime.python_library import PythonLibrary

X = np.array([[-1.0, 0.25, 0.5], [1.0, 2.0, -3.0]], dtype=np.float32)
W = np.array([[0.5, 0.5, 0.5], [-2.0, 0.0, 4.0]], dtype=np.float32)


def tiny_expected(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tiny graph's outputs by NumPy: y = relu(x + w), z = y > 0.5."""
    y = np.maximum(x + w, 0).astype(np.float32)
    return y, y > 0.5


@pytest.fixture(params=["c", "numpy"])
def factory(request: pytest.FixtureRequest, tiny_graph: str,
            tiny_functions: dict) -> GraphExecutorFactoryModule:
    if request.param == "c":
        so, src = request.getfixturevalue("tiny_native_sources")
        lib = NativeLibrary(so, sources=[src])
    else:
        lib = NumpyLibrary(tiny_functions)
    return GraphExecutorFactoryModule(tiny_graph, lib, {"p0": W},
                                      metadata={"target": request.param, "opt_level": 3})


def _outputs(m: GraphModule) -> list[np.ndarray]:
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def test_factory_runs_both_library_kinds(factory: GraphExecutorFactoryModule) -> None:
    m = GraphModule(factory["default"](kiln.cpu()))
    m.run(x=X)
    y, z = _outputs(m)
    want_y, want_z = tiny_expected(X, W)
    np.testing.assert_array_equal(y, want_y)
    assert z.dtype == np.bool_
    np.testing.assert_array_equal(z, want_z)


def test_export_then_load_gives_identical_outputs(factory: GraphExecutorFactoryModule,
                                                  tmp_path: Path) -> None:
    m = GraphModule(factory["default"](kiln.cpu()))
    m.run(x=X)
    before = _outputs(m)
    path = tmp_path / "net.so"
    factory.export_library(path)
    lib = load_module(path)
    assert lib.type_key == "GraphExecutorFactory"
    assert lib["get_graph_json"]() == factory.get_graph_json()
    inner = lib.imported_modules[0]
    assert inner.type_key == ("library" if isinstance(factory.lib, NativeLibrary) else "numpy")
    loaded = GraphModule(lib["default"](kiln.cpu()))
    loaded.run(x=X)
    for a, b in zip(before, _outputs(loaded)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    # the seed's way: graph_executor.create with the loaded module, params loaded separately
    again = graph_executor.create(lib["get_graph_json"](), lib, kiln.cpu())
    again.load_params(save_param_dict({"p0": W}))
    again.run(x=X)
    for a, b in zip(before, _outputs(again)):
        np.testing.assert_array_equal(a, b)
    params = lib["get_params"]()
    np.testing.assert_array_equal(params["p0"].numpy(), W)


def test_exported_metadata(factory: GraphExecutorFactoryModule, tmp_path: Path) -> None:
    path = tmp_path / "net.so"
    factory.export_library(path)
    meta = load_module(path).metadata
    assert meta["target"] in ("c", "numpy") and meta["opt_level"] == 3
    assert meta["kiln_version"] == kiln.__version__
    assert meta["inputs"] == [{"name": "x", "shape": [2, 3], "dtype": "float32"}]
    assert meta["outputs"] == [{"name": "output_0", "shape": [2, 3], "dtype": "float32"},
                               {"name": "output_1", "shape": [2, 3], "dtype": "bool"}]
    assert meta["created"][:2] == "20"


def test_reexport_of_a_loaded_module(factory: GraphExecutorFactoryModule, tmp_path: Path) -> None:
    first = tmp_path / "a.so"
    factory.export_library(first)
    second = tmp_path / "b.so"
    load_module(first).export_library(second)
    m = GraphModule(load_module(second)["default"](kiln.cpu()))
    m.run(x=X)
    np.testing.assert_array_equal(m.get_output(0).numpy(), tiny_expected(X, W)[0])


def test_truncated_exports_are_clear_errors(factory: GraphExecutorFactoryModule,
                                            tmp_path: Path) -> None:
    path = tmp_path / "net.so"
    factory.export_library(path)
    data = path.read_bytes()
    for i, cut in enumerate([10, 100, len(data) // 3, len(data) // 2, len(data) - 33, len(data) - 1]):
        broken = tmp_path / f"cut{i}.so"
        broken.write_bytes(data[:cut])
        with pytest.raises(RuntimeFormatError, match=str(broken.name)):
            load_module(broken)


def test_corrupt_blob_is_named(tmp_path: Path, tiny_native_sources: tuple[Path, Path],
                               tiny_graph: str) -> None:
    so, src = tiny_native_sources
    factory = GraphExecutorFactoryModule(tiny_graph, NativeLibrary(so, sources=[src]),
                                         {"p0": W})
    path = tmp_path / "net.so"
    factory.export_library(path)
    data = path.read_bytes()
    assert data.count(b"GraphExecutorFactory") == 1
    bad = tmp_path / "bad.so"
    bad.write_bytes(data.replace(b"GraphExecutorFactory", b"GraphExecutorFactorZ"))
    with pytest.raises(RuntimeFormatError, match="'GraphExecutorFactorZ', which Kiln cannot read"):
        load_module(bad)


def test_foreign_files_are_refused(tmp_path: Path, tiny_native_sources: tuple[Path, Path]) -> None:
    text = tmp_path / "model.so"
    text.write_text("definitely not a library")
    with pytest.raises(RuntimeFormatError, match="neither a Kiln shared library"):
        load_module(text)
    with pytest.raises(RuntimeFormatError, match="does not exist"):
        load_module(tmp_path / "missing.so")
    obj = tmp_path / "tiny.o"
    obj.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HH", 1, 62) + bytes(44))
    with pytest.raises(RuntimeFormatError, match="not a shared library"):
        load_module(obj)
    # a shared library without a module blob loads as a plain kernel library
    so, _ = tiny_native_sources
    plain = load_module(so)
    assert isinstance(plain, NativeLibrary) and plain.implemented("tvmgen_default_fused_greater")


def test_numpy_container_corruption(tmp_path: Path, tiny_graph: str, tiny_functions: dict) -> None:
    factory = GraphExecutorFactoryModule(tiny_graph, NumpyLibrary(tiny_functions),
                                         {"p0": W})
    path = tmp_path / "net.kiln"
    factory.export_library(path)
    data = path.read_bytes()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    for name, blob, message in [
        ("flip", bytes(flipped), "checksum mismatch"),
        ("cut", data[:-40], "truncated"),
        ("version", data[:8] + struct.pack("<I", 9) + data[12:], "format version 9"),
        ("tail", data + b"x", "unexpected byte"),
    ]:
        broken = tmp_path / name
        broken.write_bytes(blob)
        with pytest.raises(RuntimeFormatError, match=message):
            load_module(broken)


def _reference_blob(graph: str, params: dict[str, np.ndarray], name: str, meta: dict) -> bytes:
    """TVM's layout, written out field by field from the spec (float32 params only)."""
    def s(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    body = struct.pack("<Q", 2) + s("GraphExecutorFactory") + s(graph)
    body += struct.pack("<Q", len(params)) + struct.pack("<Q", len(params))
    body += b"".join(s(n) for n in params)
    for arr in params.values():
        body += struct.pack("<QQiiiBBH", 0xDD5E40F096B4A13F, 0, 1, 0, arr.ndim, 2, 32, 1)
        body += struct.pack(f"<{arr.ndim}q", *arr.shape) + struct.pack("<q", arr.nbytes)
        body += arr.tobytes()
    body += s(name) + s("kiln_metadata") + s(json.dumps(meta, sort_keys=True))
    return struct.pack("<Q", len(body)) + body


def test_blob_layout_matches_the_spec(tiny_graph: str) -> None:
    graph = tiny_graph
    params = {"p0": W, "p1": np.arange(4, dtype=np.float32).reshape(2, 2)}
    meta = {"target": "c", "inputs": []}
    blob = encode_module_blob(ModuleBlob(graph, params, "default", meta))
    assert blob == _reference_blob(graph, params, "default", meta)
    back = decode_module_blob(blob)
    assert back.graph_json == graph and back.module_name == "default" and back.metadata == meta
    np.testing.assert_array_equal(back.params["p1"].numpy(), params["p1"])


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:-1], "declares a payload of"),
        (lambda b: struct.pack("<Q", len(b) - 9) + b[8:-1], "truncated"),
        (lambda b: b[:8] + struct.pack("<Q", 1 << 60) + b[16:], "number of entries is"),
        (lambda b: b + b"\x00", "declares a payload"),
    ],
)
def test_blob_decode_errors(mutate: Callable[[bytes], bytes], message: str, tiny_graph: str) -> None:
    blob = encode_module_blob(ModuleBlob(tiny_graph, {"p0": W}))
    with pytest.raises(RuntimeFormatError, match=message):
        decode_module_blob(mutate(blob))


def test_container_roundtrip_keeps_functions(tiny_graph: str, tiny_functions: dict) -> None:
    functions = tiny_functions
    blob = encode_module_blob(ModuleBlob(tiny_graph, {"p0": W}))
    payload = save_numpy_library(NumpyLibrary(functions))
    kind, back_blob, back_payload = read_container(write_container(blob, payload, "numpy"))
    assert (kind, back_blob, back_payload) == ("numpy", blob, payload)
    back_functions = load_numpy_library(back_payload).functions
    assert set(back_functions) == set(functions)
    from kiln.ir import structural_equal

    for name, fn in functions.items():
        assert structural_equal(back_functions[name], fn, map_free_vars=True)
        assert back_functions[name].attrs["Primitive"] == 1


def test_native_kernels_are_checked_after_load(factory: GraphExecutorFactoryModule,
                                               tmp_path: Path) -> None:
    path = tmp_path / "net.so"
    factory.export_library(path)
    kernel = load_module(path).lib.get_function("tvmgen_default_fused_greater")
    out = np.zeros((2, 3), np.bool_)
    kernel(np.ones((2, 3), np.float32), out)
    assert out.all()
    with pytest.raises(KilnError, match=r"must be \(2, 3\) float32, got \(3, 2\) float32"):
        kernel(np.ones((3, 2), np.float32), out)
    with pytest.raises(KilnError, match="takes 2 arrays"):
        kernel(np.ones((2, 3), np.float32))


def test_unexportable_library(tmp_path: Path, tiny_graph: str) -> None:
    lib = PythonLibrary({"tvmgen_default_fused_add_nn_relu": lambda *a: None,
                         "tvmgen_default_fused_greater": lambda *a: None})
    factory = GraphExecutorFactoryModule(tiny_graph, lib, {"p0": W})
    with pytest.raises(KilnError, match="cannot export"):
        factory.export_library(tmp_path / "x.so")


def test_debug_create_hook(monkeypatch: pytest.MonkeyPatch, tiny_graph: str,
                           tiny_functions: dict) -> None:
    calls: list[tuple[object, ...]] = []
    import kiln.runtime  # the real package; only its debug_executor module is replaced

    fake = types.ModuleType("kiln.runtime.debug_executor")
    fake.create_from_factory = lambda factory, *devs: calls.append((factory, *devs)) or "debug"
    monkeypatch.setitem(sys.modules, "kiln.runtime.debug_executor", fake)
    lib = NumpyLibrary(tiny_functions)
    factory = GraphExecutorFactoryModule(tiny_graph, lib, {"p0": W})
    assert factory["debug_create"]("default", kiln.cpu()) == "debug"
    assert calls == [(factory, kiln.cpu())]
    with pytest.raises(KilnError, match="not 'other'"):
        factory["debug_create"]("other", kiln.cpu())
