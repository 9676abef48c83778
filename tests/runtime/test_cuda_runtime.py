"""The CUDA runtime: devices, device NDArrays, the GPU graph executor, exported cuda libraries.

Tests marked ``cuda`` need a GPU and are skipped without one; the rest check what a machine
without a GPU must do (clear errors, the exported format).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.errors import CompileError, KilnError
from kiln.runtime.cuda_driver import CudaError, driver_available
from kiln.runtime.cuda_library import CudaLibrary, LaunchSpec, load_cuda_library, save_cuda_library
from kiln.transform import PassContext


def _model() -> tuple[kiln.IRModule, dict[str, np.ndarray]]:
    x = relay.var("x", shape=(1, 3, 16, 16))
    w = relay.var("w", shape=(8, 3, 3, 3))
    y = relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1)))
    d = relay.var("d", shape=(10, 2048))
    z = relay.nn.softmax(relay.nn.dense(relay.reshape(y, (1, -1)), d))
    mod = kiln.IRModule.from_expr(relay.Function([x, w, d], z))
    rng = np.random.default_rng(1)
    params = {"w": rng.standard_normal((8, 3, 3, 3)).astype("float32"),
              "d": (rng.standard_normal((10, 2048)) * 0.05).astype("float32")}
    return mod, params


def _reference(mod: kiln.IRModule, params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    with PassContext(opt_level=3):
        lib = relay.build(mod, target="numpy", params=params)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    gm.set_input("x", x)
    gm.run()
    return gm.get_output(0).numpy()


def test_cuda_library_payload_round_trips() -> None:
    lib = CudaLibrary("sm_90", b"// ptx\n.version 8.0\n", b"\x7fELFcubin",
                      {"f": {"workspace": [64], "launches": [LaunchSpec("f_kernel0", (4, 1, 1),
                                                                        (128, 1, 1), (0, -1, 1))]}},
                      {"f": (((2, 3), "float32"), ((2, 3), "float32"))})
    back = load_cuda_library(save_cuda_library(lib), "test")
    assert back.arch == "sm_90" and back.ptx == lib.ptx and back.cubin == lib.cubin
    assert back.plans == lib.plans and back.signatures == lib.signatures


def test_truncated_cuda_payload_is_a_format_error() -> None:
    data = save_cuda_library(CudaLibrary("sm_80", b"ptx", None, {}, {}))
    with pytest.raises(kiln.errors.RuntimeFormatError, match="truncated"):
        load_cuda_library(data[:-2], "net.kiln")


def test_cuda_target_needs_an_arch_without_a_gpu() -> None:
    if driver_available():
        pytest.skip("a GPU is present: the architecture comes from it")
    mod, params = _model()
    with pytest.raises(CompileError, match="-arch"), PassContext(opt_level=3):
        relay.build(mod, target="cuda", params=params)


def test_running_on_cuda_without_a_driver_is_one_clear_error() -> None:
    if driver_available():
        pytest.skip("a GPU is present")
    with pytest.raises(CudaError, match="driver"):
        kiln.nd.array(np.zeros(3, "float32"), kiln.cuda(0))
    assert not kiln.cuda(0).exist and kiln.cpu().exist


def test_cpu_build_refuses_a_cuda_device() -> None:
    mod, params = _model()
    with PassContext(opt_level=3):
        lib = relay.build(mod, target="numpy", params=params)
    with pytest.raises(KilnError, match="cuda"):
        lib["default"](kiln.cuda(0))


@pytest.mark.requires_cuda_compiler
def test_cuda_build_exports_one_file_that_loads(tmp_path: Path) -> None:
    mod, params = _model()
    with PassContext(opt_level=3):
        lib = relay.build(mod, target="cuda -arch=sm_80", params=params)
    path = tmp_path / "net.kiln"
    lib.export_library(path)
    loaded = kiln.runtime.load_module(path)
    assert loaded.get_lib().type_key == "cuda"
    assert loaded.get_lib().plans == lib.get_lib().plans
    assert loaded["get_graph_json"]() == lib.get_graph_json()


@pytest.mark.cuda
def test_device_ndarray_round_trip() -> None:
    x = np.arange(24, dtype="float32").reshape(2, 3, 4)
    arr = kiln.nd.array(x, kiln.cuda(0))
    assert arr.device == kiln.cuda(0) and arr.shape == (2, 3, 4) and arr.dtype == "float32"
    np.testing.assert_array_equal(arr.numpy(), x)
    arr.copyfrom(x * 2)
    np.testing.assert_array_equal(arr.copyto(kiln.cpu()).numpy(), x * 2)
    np.testing.assert_array_equal(arr.copyto(kiln.cuda(0)).numpy(), x * 2)
    assert kiln.cuda(0).exist


@pytest.mark.cuda
@pytest.mark.parametrize("use_graph", [True, False])
def test_graph_executor_on_the_gpu(use_graph: bool) -> None:
    mod, params = _model()
    with PassContext(opt_level=3):
        lib = relay.build(mod, target="cuda", params=params)
    gm = graph_executor.GraphModule(lib["default"](kiln.cuda(0)))
    gm.module.use_cuda_graph = use_graph
    rng = np.random.default_rng(2)
    for _ in range(2):  # the second run replays the captured graph on new input
        x = rng.standard_normal((1, 3, 16, 16)).astype("float32")
        gm.set_input("x", x)
        gm.run()
        out = gm.get_output(0)
        assert out.device == kiln.cuda(0)
        np.testing.assert_allclose(out.numpy(), _reference(mod, params, x), rtol=1e-4, atol=1e-6)
    host = np.empty((1, 10), "float32")
    gm.get_output(0, host)
    np.testing.assert_allclose(host, out.numpy())


@pytest.mark.cuda
def test_exported_cuda_library_runs(tmp_path: Path) -> None:
    mod, params = _model()
    with PassContext(opt_level=3):
        lib = relay.build(mod, target="cuda", params=params)
    lib.export_library(tmp_path / "net.kiln")
    loaded = kiln.runtime.load_module(tmp_path / "net.kiln")
    gm = graph_executor.GraphModule(loaded["default"](kiln.cuda(0)))
    x = np.ones((1, 3, 16, 16), "float32")
    gm.run(x=x)
    np.testing.assert_allclose(gm.get_output(0).numpy(), _reference(mod, params, x), rtol=1e-4,
                               atol=1e-6)


@pytest.mark.cuda
def test_debug_executor_on_the_gpu_times_nodes_with_events(tmp_path: Path) -> None:
    from kiln.contrib.debugger import debug_executor

    mod, params = _model()
    with PassContext(opt_level=3):
        lib = relay.build(mod, target="cuda", params=params)
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype("float32")
    m = debug_executor.GraphModuleDebug(lib["debug_create"]("default", kiln.cuda(0)),
                                        [kiln.cuda(0)], lib.get_graph_json(), str(tmp_path))
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), _reference(mod, params, x), rtol=1e-4,
                               atol=1e-6)
    times = m.module.run_individual(number=5, repeat=2)
    ops = [i for i, n in enumerate(m.module.graph.nodes)
           if not n.is_input and n.func_name != "__nop"]
    assert all(t > 0 for i in ops for t in times[i])
    last = ops[-1]
    np.testing.assert_allclose(m.module.get_node_output(last).numpy(), m.get_output(0).numpy())
