"""NativeLibrary: the kernel ABI through ctypes, with kernels compiled by the system compiler."""

from __future__ import annotations

import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.codegen.compiler import compile_cached, compile_shared
from kiln.config import settings
from kiln.contrib import graph_executor
from kiln.errors import RuntimeFormatError
from kiln.runtime.factory import GraphExecutorFactoryModule
from kiln.runtime.graph_executor import GraphModule
from kiln.runtime.module import FunctionNotFoundError, KernelError
from kiln.runtime.native import NativeLibrary, check_elf


@pytest.fixture
def lib(tiny_native_sources: tuple[Path, Path]) -> NativeLibrary:
    so, src = tiny_native_sources
    return NativeLibrary(so, sources=[src])


def test_kernel_call_matches_numpy(lib: NativeLibrary) -> None:
    x = np.array([[-1, 0.5, 2], [3, -4, 0.25]], dtype=np.float32)
    w = np.full((2, 3), 0.25, dtype=np.float32)
    y = np.empty((2, 3), dtype=np.float32)
    lib["tvmgen_default_fused_add_nn_relu"](x, w, y)
    np.testing.assert_array_equal(y, np.maximum(x + w, 0))
    z = np.empty((2, 3), dtype=np.bool_)
    lib.get_function("tvmgen_default_fused_greater")(kiln.nd.array(y), kiln.nd.array(z))
    out = kiln.nd.empty((2, 3), "bool")
    lib["tvmgen_default_fused_greater"](y, out)
    np.testing.assert_array_equal(out.numpy(), y > 0.5)


def test_nonzero_return_is_an_error(lib: NativeLibrary) -> None:
    fail = lib["kiln_test_fail"]
    fail(np.ones(1, np.float32))
    with pytest.raises(KernelError, match=r"kiln_test_fail failed with code 7 .*\(1,\) float32"):
        fail(np.full(1, -1.0, np.float32))


def test_arguments_must_be_dense_arrays(lib: NativeLibrary) -> None:
    kernel = lib["tvmgen_default_fused_greater"]
    strided = np.ones((2, 6), np.float32)[:, ::2]
    with pytest.raises(KernelError, match="C-contiguous"):
        kernel(strided, np.empty((2, 3), np.bool_))
    with pytest.raises(KernelError, match="NumPy array or NDArray"):
        kernel([1.0, 2.0], np.empty(2, np.bool_))


def test_signatures_check_count_shape_and_dtype(tiny_native_sources: tuple[Path, Path]) -> None:
    so, _ = tiny_native_sources
    lib = NativeLibrary(so, signatures={"tvmgen_default_fused_greater": (((2, 3), "float32"),
                                                                          ((2, 3), "bool"))})
    kernel = lib["tvmgen_default_fused_greater"]
    with pytest.raises(KernelError, match="takes 2 arrays .* got 1"):
        kernel(np.ones((2, 3), np.float32))
    with pytest.raises(KernelError, match=r"argument 1 must be \(2, 3\) bool, got \(2, 3\) uint8"):
        kernel(np.ones((2, 3), np.float32), np.zeros((2, 3), np.uint8))


def test_missing_symbols(lib: NativeLibrary) -> None:
    assert lib.kernel("no_such_kernel") is None
    assert lib.kernel("__tvm_dev_mblob") is None
    with pytest.raises(FunctionNotFoundError, match="no function 'no_such_kernel'"):
        lib["no_such_kernel"]
    with pytest.raises(AttributeError):
        lib.get_function("no_such_kernel")


def test_thread_count_is_explicit(lib: NativeLibrary) -> None:
    out = np.zeros(1, np.int32)
    lib["kiln_test_threads"](out)
    assert out[0] == settings.num_threads == lib.num_threads
    lib.set_num_threads(3)
    lib["kiln_test_threads"](out)
    assert out[0] == 3


def test_executor_reports_library_threads(lib: NativeLibrary, tiny_graph: str) -> None:
    lib.set_num_threads(2)
    m = graph_executor.create(tiny_graph, lib, kiln.cpu())
    result = m.benchmark(kiln.cpu(), repeat=2, number=3, x=np.ones((2, 3), np.float32))
    assert result.num_threads == 2 and "2 thread(s)" in str(result)


def test_reloading_a_rewritten_library(tmp_path: Path) -> None:
    path = tmp_path / "k.so"
    for value in (11, 22):
        src = tmp_path / f"k{value}.c"
        src.write_text("#include <stdint.h>\nint32_t kiln_test_value(void** a) { "
                       f"((int32_t*)a[0])[0] = {value}; return 0; }}\n")
        compile_shared([src], path)
        out = np.zeros(1, np.int32)
        NativeLibrary(path)["kiln_test_value"](out)
        assert out[0] == value  # not the code dlopen had already mapped under this path


def test_truncated_libraries_are_refused_before_dlopen(tiny_native_sources: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    so, _ = tiny_native_sources
    data = so.read_bytes()
    for cut in (0, 30, 63, 64, 1000, len(data) // 2, len(data) - 64, len(data) - 1):
        broken = tmp_path / f"cut{cut}.so"
        broken.write_bytes(data[:cut])
        with pytest.raises(RuntimeFormatError, match=r"truncated|not an ELF"):
            check_elf(broken)
        with pytest.raises(RuntimeFormatError):
            kiln.runtime.load_module(broken)
    good = tmp_path / "good.so"
    shutil.copyfile(so, good)
    check_elf(good)


def test_export_links_the_cached_objects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         tiny_c_source: str, tiny_graph: str) -> None:
    monkeypatch.setattr(settings, "cache_dir", tmp_path / "cache")
    so = compile_cached(tiny_c_source, "tiny")
    lib = NativeLibrary(so, sources=[so.with_suffix(".c")])
    assert lib.link_inputs() == [so.with_suffix(".o")]
    w = np.full((2, 3), 0.75, np.float32)
    factory = GraphExecutorFactoryModule(tiny_graph, lib, {"p0": w})
    factory.export_library(tmp_path / "net.so")
    x = np.array([[0, -1, 2], [0.5, -0.5, -0.8]], np.float32)
    m = GraphModule(kiln.runtime.load_module(tmp_path / "net.so")["default"](kiln.cpu()))
    m.run(x=x)
    np.testing.assert_array_equal(m.get_output(0).numpy(), np.maximum(x + w, 0))
    np.testing.assert_array_equal(m.get_output(1).numpy(), np.maximum(x + w, 0) > 0.5)
    # the kernels alone, without a graph: load_module gives the library back
    lib.export_library(tmp_path / "kernels.so")
    alone = kiln.runtime.load_module(tmp_path / "kernels.so")
    assert isinstance(alone, NativeLibrary) and alone.implemented("tvmgen_default_fused_greater")
    so.with_suffix(".o").unlink()
    so.with_suffix(".c").unlink()
    with pytest.raises(RuntimeFormatError, match="no longer exists"):
        factory.export_library(tmp_path / "again.so")


def test_run_allocates_no_tensors(lib: NativeLibrary, tiny_graph: str) -> None:
    m = graph_executor.create(tiny_graph, lib, kiln.cpu())
    m.set_input("x", np.ones((2, 3), np.float32))
    m.run()
    tracemalloc.start()
    try:
        for _ in range(100):
            m.run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4096  # a few ctypes temporaries at most; no arrays, no per-run setup


@pytest.mark.requires_cc
def test_get_source_returns_the_c_of_a_built_model() -> None:
    x = kiln.relay.var("x", shape=(4, 8), dtype="float32")
    mod = kiln.IRModule.from_expr(kiln.relay.Function([x], kiln.relay.nn.relu(x * kiln.relay.const(2.0))))
    lib = kiln.relay.build(mod, target="llvm")
    source = lib.get_lib().get_source()
    # one function per fused group named by its func_name, then the runtime compiled beside it
    assert "tvmgen_default_fused_multiply_nn_relu" in source
    assert "void kiln_set_num_threads(int32_t n)" in source
    assert lib.get_lib().get_source("c") == source
    with pytest.raises(RuntimeFormatError, match="only C source"):
        lib.get_lib().get_source("ll")
    loaded = NativeLibrary(lib.get_lib().path)
    with pytest.raises(RuntimeFormatError, match="without its sources"):
        loaded.get_source()
