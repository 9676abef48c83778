"""kiln compile / run / inspect on a real ONNX model, checked against onnxruntime."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln.cli.compile import parse_input_shapes
from kiln.cli.main import main
from kiln.errors import KilnError

TARGETS = ["numpy", pytest.param("c", marks=pytest.mark.requires_cc),
           pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.requires_cuda_compiler])]


@pytest.fixture
def model(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    b = rng.standard_normal(4).astype("float32")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          ["n", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path / "model.onnx"
    onnx.save(m, path)
    x = rng.standard_normal((2, 3, 8, 8)).astype("float32")
    np.savez(tmp_path / "x.npz", x=x)
    expected = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    return path, tmp_path / "x.npz", expected


@pytest.mark.parametrize("target", TARGETS)
def test_compile_run_inspect(model, tmp_path, capsys, target):
    path, inputs, expected = model
    artifact = tmp_path / "model.so"
    assert main(["compile", str(path), "-o", str(artifact), "--target", target,
                 "--input-shapes", "x:2x3x8x8"]) == 0
    assert artifact.exists()
    out = tmp_path / "out.npz"
    assert main(["run", str(artifact), "--inputs", str(inputs), "-o", str(out)]) == 0
    with np.load(out) as data:
        got = data[data.files[0]]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    capsys.readouterr()
    assert main(["inspect", str(artifact), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "artifact"
    assert info["metadata"]["inputs"][0]["name"] == "x"
    assert any("conv" in n["source_names"] for n in info["nodes"])


def test_run_reports_missing_inputs(model, tmp_path, capsys):
    path, _, _ = model
    artifact = tmp_path / "model.kiln"
    assert main(["compile", str(path), "-o", str(artifact), "--target", "numpy",
                 "--input-shapes", "x:1x3x8x8"]) == 0
    np.savez(tmp_path / "wrong.npz", z=np.zeros(3))
    capsys.readouterr()
    assert main(["run", str(artifact), "--inputs", str(tmp_path / "wrong.npz")]) == 1
    err = capsys.readouterr().err
    assert "lacks input(s) x" in err and "(1, 3, 8, 8) float32" in err


def test_unbound_dim_is_a_one_line_error(model, tmp_path, capsys):
    path, _, _ = model
    assert main(["compile", str(path), "-o", str(tmp_path / "m.so"), "--target", "numpy"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kiln compile: error:") and "x" in err


def test_inspect_params_and_graph_fixtures(fixtures_dir, capsys):
    assert main(["inspect", str(fixtures_dir / "small_o3.params"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert {p["name"] for p in info["params"]} == {"p0", "p1", "p2", "p3"}
    assert main(["inspect", str(fixtures_dir / "small_o3.graph.json"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["kind"] == "graph" and len(info["nodes"]) == 11


def test_parse_input_shapes():
    assert parse_input_shapes("data:1x3x224x224,mask:1x128") == {"data": (1, 3, 224, 224),
                                                                 "mask": (1, 128)}
    assert parse_input_shapes("ns:a:2x2") == {"ns:a": (2, 2)}
    with pytest.raises(KilnError, match="NAME:D1xD2"):
        parse_input_shapes("data")
    with pytest.raises(KilnError, match="must be integers"):
        parse_input_shapes("data:1xfoo")


@pytest.mark.requires_cuda_compiler
def test_compile_for_a_gpu_without_one(model, tmp_path, capsys):
    """A machine with NVRTC and no GPU builds for a named architecture; running needs the GPU."""
    path, inputs, _ = model
    artifact = tmp_path / "model.kiln"
    assert main(["compile", str(path), "-o", str(artifact), "--target", "cuda -arch=sm_80",
                 "--input-shapes", "x:2x3x8x8"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(artifact), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["target"].startswith("cuda")
    from kiln.runtime.cuda_driver import driver_available

    if not driver_available():
        assert main(["run", str(artifact), "--inputs", str(inputs)]) == 1
        assert "CUDA driver" in capsys.readouterr().err
