"""TVM's debugger documentation (docs/arch/debugger.rst), run as written there.

Both flows of "How to use Debugger?" — ``GraphModuleDebug(lib["debug_create"]("default", dev),
[dev], lib.graph_json, dump_root=...)`` and, for an exported library,
``graph_executor.create(lib["get_graph_json"](), lib, dev, dump_root=...)`` with the debugger's
``graph_executor`` — followed by ``set_input('data', ...)``, ``set_input(**params)`` (the model's
params dict: after ``relay.build`` bound them, none of its names is a graph input, and TVM's bulk
form skips them), ``run()``, ``get_output``, and the "Tensor dumping" section's reload of the dump.
The oracle is NumPy (``kiln.topi.testing``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.topi.testing import conv2d_nchw_python

DATA_SHAPE = (1, 3, 8, 8)
OUT_SHAPE = (1, 4, 8, 8)
DTYPE = "float32"


def _model() -> tuple[Any, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    data = relay.var("data", shape=DATA_SHAPE, dtype=DTYPE)
    weight = relay.var("conv_weight", shape=(4, 3, 3, 3), dtype=DTYPE)
    bias = relay.var("conv_bias", shape=(4,), dtype=DTYPE)
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(data, weight, padding=(1, 1)), bias))
    mod = tvm.IRModule.from_expr(relay.Function([data, weight, bias], y))
    params = {"conv_weight": rng.standard_normal((4, 3, 3, 3)).astype(DTYPE),
              "conv_bias": rng.standard_normal(4).astype(DTYPE)}
    return mod, params


def _reference(data: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    conv = conv2d_nchw_python(data, params["conv_weight"], 1, 1)
    return np.maximum(conv + params["conv_bias"].reshape(1, -1, 1, 1), 0)


@pytest.fixture(scope="module")
def built() -> tuple[Any, dict[str, np.ndarray]]:
    mod, params = _model()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    return lib, params


def _check_dumps(dump_root: Path, out: np.ndarray) -> None:
    folder = dump_root / "_tvmdbg_device_CPU_0"
    graph = json.loads((folder / "_tvmdbg_graph_dump.json").read_text())
    assert {"nodes", "arg_nodes", "node_row_ptr", "heads", "attrs"} <= set(graph)
    trace = json.loads((folder / "_tvmdbg_execution_trace.json").read_text())
    assert trace["traceEvents"]
    # "Tensor dumping": the dump loads back with load_params' format, the last node's output last
    with open(folder / "output_tensors.params", "rb") as fi:
        loaded_params = bytearray(fi.read())
    tensors = tvm.runtime.load_param_dict(loaded_params)
    last = list(tensors.values())[-1].numpy()
    np.testing.assert_allclose(last, out, rtol=1e-5, atol=1e-5)


def test_debugger_doc_flow_graph_module_debug(built: tuple[Any, dict[str, np.ndarray]],
                                              tmp_path: Path) -> None:
    lib, params = built
    dev = tvm.cpu()
    data = np.random.default_rng(1).standard_normal(DATA_SHAPE)
    dtype, out_shape = DTYPE, OUT_SHAPE
    # verbatim from the documentation (dump_root in pytest's tmp_path instead of /tmp/tvmdbg)
    from kiln.contrib.debugger.debug_executor import GraphModuleDebug
    m = GraphModuleDebug(
        lib["debug_create"]("default", dev),
        [dev],
        lib.graph_json,
        dump_root=str(tmp_path / "tvmdbg"),
    )
    # set inputs
    m.set_input('data', tvm.nd.array(data.astype(dtype)))
    m.set_input(**params)
    # execute
    m.run()
    tvm_out = m.get_output(0, tvm.nd.empty(out_shape, dtype)).numpy()
    # end of the documentation's code
    expected = _reference(data.astype(dtype), params)
    np.testing.assert_allclose(tvm_out, expected, rtol=1e-5, atol=1e-5)
    _check_dumps(tmp_path / "tvmdbg", tvm_out)


def test_debugger_doc_flow_exported_library(built: tuple[Any, dict[str, np.ndarray]],
                                            tmp_path: Path) -> None:
    lib, params = built
    dev = tvm.cpu()
    data = np.random.default_rng(2).standard_normal(DATA_SHAPE)
    dtype, out_shape = DTYPE, OUT_SHAPE
    lib.export_library(str(tmp_path / "network.so"))
    from kiln.contrib.debugger import debug_executor as graph_executor
    # verbatim from the documentation
    lib = tvm.runtime.load_module(str(tmp_path / "network.so"))
    m = graph_executor.create(lib["get_graph_json"](), lib, dev, dump_root=str(tmp_path / "tvmdbg"))
    # set inputs
    m.set_input('data', tvm.nd.array(data.astype(dtype)))
    m.set_input(**params)
    # execute
    m.run()
    tvm_out = m.get_output(0, tvm.nd.empty(out_shape, dtype)).numpy()
    # end of the documentation's code
    np.testing.assert_allclose(tvm_out, _reference(data.astype(dtype), params), rtol=1e-5, atol=1e-5)
    _check_dumps(tmp_path / "tvmdbg", tvm_out)


def test_debugger_set_input_unknown_name_still_raises(built: tuple[Any, dict[str, np.ndarray]],
                                                      tmp_path: Path) -> None:
    from kiln.contrib.debugger import debug_executor

    lib, params = built
    m = debug_executor.create(lib.get_graph_json(), lib.lib, tvm.cpu(), dump_root=str(tmp_path))
    with pytest.raises(tvm.KilnError, match="conv_weight"):
        m.set_input("conv_weight", params["conv_weight"])
