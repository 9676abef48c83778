"""kiln.support: build flags answered for Kiln, and a module of Python kernels."""

from __future__ import annotations

import json

import numpy as np

import kiln
from kiln import support
from kiln.contrib.debugger import debug_executor


def test_libinfo_is_truthful() -> None:
    info = support.libinfo()
    assert info["USE_PROFILER"] == "ON"
    assert info["USE_CUDA"] == "OFF" and info["USE_RPC"] == "OFF" and info["USE_LLVM"] == "OFF"
    assert info.get("USE_MICRO", "OFF") == "OFF"


def test_frontend_test_module_runs_in_the_debug_executor(tmp_path) -> None:  # type: ignore[no-untyped-def]
    graph = {
        "nodes": [{"op": "null", "name": "x", "inputs": []},
                  {"op": "tvm_op", "name": "add", "inputs": [[0, 0, 0]],
                   "attrs": {"func_name": "myadd", "flatten_data": "1", "num_inputs": "1",
                             "num_outputs": "1"}}],
        "arg_nodes": [0], "node_row_ptr": [0, 1, 2], "heads": [[1, 0, 0]],
        "attrs": {"shape": ["list_shape", [[4], [4]]], "dltype": ["list_str", ["float32", "float32"]],
                  "storage_id": ["list_int", [0, 1]]},
    }
    lib = support.FrontendTestModule()
    lib["myadd"] = lambda a, out: np.add(a, 1.0, out=out)
    mod = debug_executor.create(json.dumps(graph), lib, kiln.cpu(0), dump_root=str(tmp_path))
    a = np.arange(4, dtype="float32")
    mod.set_input(x=a)
    mod.run()
    np.testing.assert_array_equal(mod.get_output(0).numpy(), a + 1)
    assert mod.run_individual_node(0, number=1).mean == 0  # an input node runs nothing
