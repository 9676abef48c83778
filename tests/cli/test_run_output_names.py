"""``kiln run -o out.npz`` keys the outputs by the model's output names (issue 18, point 2)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

TARGETS = [("numpy", "model.kpkg"),
           pytest.param("c", "model.so", marks=pytest.mark.requires_cc)]


def kiln(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def stateful(tmp_path):
    """A recurrent-style step: ``output`` and ``stateN`` (also an output named like a savez
    keyword, ``file``, and one that is the state input itself)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 4)).astype("float32")
    nodes = [helper.make_node("MatMul", ["input", "w"], ["m"], name="proj"),
             helper.make_node("Add", ["m", "state"], ["stateN"], name="add"),
             helper.make_node("Tanh", ["stateN"], ["output"], name="act"),
             helper.make_node("Sigmoid", ["stateN"], ["file"], name="gate")]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "step", [vi("input", TensorProto.FLOAT, [1, 4]), vi("state", TensorProto.FLOAT, [1, 4])],
        [vi("output", TensorProto.FLOAT, [1, 4]), vi("stateN", TensorProto.FLOAT, [1, 4]),
         vi("file", TensorProto.FLOAT, [1, 4]), vi("state", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    path = tmp_path / "step.onnx"
    onnx.save(model, path)
    feeds = {"input": rng.standard_normal((1, 4)).astype("float32"),
             "state": rng.standard_normal((1, 4)).astype("float32")}
    np.savez(tmp_path / "in.npz", **feeds)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    return path, expected


@pytest.mark.parametrize(("target", "artifact"), TARGETS)
def test_run_writes_the_models_output_names(tmp_path, stateful, target, artifact):
    path, expected = stateful
    built = kiln("compile", str(path), "-o", str(tmp_path / artifact), "--target", target)
    assert built.returncode == 0, built.stderr
    ran = kiln("run", str(tmp_path / artifact), "--inputs", str(tmp_path / "in.npz"),
               "-o", str(tmp_path / "out.npz"))
    assert ran.returncode == 0, ran.stderr
    assert [line.split(":")[0] for line in ran.stdout.splitlines()[:4]] == list(expected)
    with np.load(tmp_path / "out.npz") as out:
        assert out.files == list(expected)  # output, stateN, file, state: the model's order
        for name, value in expected.items():
            np.testing.assert_allclose(out[name], value, rtol=1e-5, atol=1e-6)
