"""``tvm.contrib.utils.tempdir`` and ``tvm.contrib.graph_runtime`` in a TVM tutorial's export flow.

Oracle: the dense + bias + relu written with NumPy in the test.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_runtime, utils


def test_tutorial_export_flow_with_tempdir_and_graph_runtime() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 12)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    x = relay.var("x", shape=(3, 12))
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, relay.var("w", shape=(8, 12))),
                                        relay.var("b", shape=(8,))))
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))
    with tvm.transform.PassContext(opt_level=3):
        graph, lib, params = relay.build(mod, target="llvm", params={"w": w, "b": b})

    temp = utils.tempdir()
    path = temp.relpath("deploy.so")
    lib.export_library(path)
    assert temp.listdir() == ["deploy.so"]
    loaded = tvm.runtime.load_module(path)
    module = graph_runtime.create(graph, loaded, tvm.cpu(0))
    module.load_params(tvm.runtime.save_param_dict(params))
    data = rng.standard_normal((3, 12)).astype(np.float32)
    module.set_input("x", data)
    module.run()
    np.testing.assert_allclose(module.get_output(0).numpy(), np.maximum(data @ w.T + b, 0),
                               rtol=1e-5, atol=1e-5)
    folder = temp.temp_dir
    temp.remove()
    assert not os.path.exists(folder)


def test_tempdir_cleanup_rules(tmp_path: Path) -> None:
    custom = utils.tempdir(tmp_path / "mine")
    Path(custom.relpath("a.txt")).write_text("x")
    custom.remove()
    assert (tmp_path / "mine" / "a.txt").exists()  # a given folder is never deleted

    kept = utils.tempdir(keep_for_debug=True)
    kept.remove()
    assert os.path.isdir(kept.temp_dir)
    os.rmdir(kept.temp_dir)

    with utils.tempdir() as scoped:
        folder = scoped.temp_dir
        assert os.path.isdir(folder)
    assert not os.path.exists(folder)

    dropped = utils.tempdir()
    folder = dropped.temp_dir
    del dropped
    gc.collect()
    assert not os.path.exists(folder)
