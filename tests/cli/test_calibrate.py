"""``kiln calibrate``: region inputs and outputs of an ONNX model written to an ``.npz``.

Oracles: the reference interpreter running the partitioned module and recording every region
call (its arguments and results), and onnxruntime for the model's output, which the last region
produces.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln.cli.main import main
from kiln.frontend.onnx import from_onnx
from kiln.interpreter import Interpreter
from kiln.transform import AnnotateTarget, MergeCompilerRegions, PartitionGraph


def write_model(path: Path, rng: np.random.Generator) -> None:
    """conv -> relu -> sin -> add(bias): kiln_c takes all but sin, so two regions."""
    w = numpy_helper.from_array(rng.normal(size=(4, 2, 3, 3)).astype("float32"), "w")
    bias = numpy_helper.from_array(rng.normal(size=(1, 4, 5, 5)).astype("float32"), "bias")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Sin", ["r"], ["s"], name="sin"),
        helper.make_node("Add", ["s", "bias"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes, "calib", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])], [w, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path))


def region_calls(model: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every region call's arguments and results, from an interpreter run."""
    mod, params = from_onnx(str(model), shape={"x": x.shape})
    mod = PartitionGraph()(MergeCompilerRegions()(AnnotateTarget(["kiln_c"])(mod)))
    seen: dict[str, np.ndarray] = {}

    class Recording(Interpreter):
        def call_function(self, fn, args, name="function"):
            out = super().call_function(fn, args, name)
            if name.startswith("@tvmgen"):
                outs = list(out) if isinstance(out, tuple) else [out]
                for kind, values in (("inputs", args), ("outputs", outs)):
                    for i, v in enumerate(values):
                        seen[f"{name[1:]}_{kind}_{i}"] = np.asarray(v)
            return out

    Recording(mod).run({"x": x, **{k: v.numpy() for k, v in params.items()}})
    return seen


@pytest.fixture
def files(tmp_path: Path, rng: np.random.Generator) -> tuple[Path, Path, np.ndarray]:
    model = tmp_path / "model.onnx"
    write_model(model, rng)
    x = rng.normal(size=(1, 2, 5, 5)).astype("float32")
    inputs = tmp_path / "batch.npz"
    np.savez(inputs, x=x)
    return model, inputs, x


def test_writes_every_region_boundary(files, tmp_path, capsys):
    model, inputs, x = files
    out = tmp_path / "calib.npz"
    rc = main(["calibrate", str(model), "--target", "kiln_c", "--inputs", str(inputs),
               "-o", str(out), "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    # conv's inputs x and w open regions 0 and 1 (merged), add's open 2 and 3 (merged)
    assert sorted(summary["functions"]) == ["tvmgen_default_kiln_c_main_0",
                                            "tvmgen_default_kiln_c_main_2"]
    written = np.load(out)
    expected = region_calls(model, x)
    assert sorted(written.files) == sorted(expected)
    for name in expected:
        np.testing.assert_allclose(written[name], expected[name], rtol=1e-5, atol=1e-6)
    assert summary["functions"]["tvmgen_default_kiln_c_main_0"]["inputs"] == [
        {"shape": [1, 2, 5, 5], "dtype": "float32"}]

    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(written["tvmgen_default_kiln_c_main_2_outputs_0"], ref,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(written["tvmgen_default_kiln_c_main_0_inputs_0"], x)


def test_quiet_without_json(files, tmp_path, capsys):
    model, inputs, _ = files
    rc = main(["calibrate", str(model), "--target", "kiln_c", "--inputs", str(inputs),
               "-o", str(tmp_path / "c.npz")])
    assert rc == 0 and capsys.readouterr().out == ""


@pytest.mark.parametrize("arrays,message", [({}, "lacks the model input(s) x"),
                                            ({"y": np.zeros(3, "float32")}, "'y'")])
def test_wrong_inputs_are_a_one_line_error(files, tmp_path, capsys, arrays, message):
    model, _, _ = files
    other = tmp_path / "other.npz"
    np.savez(other, **arrays)
    rc = main(["calibrate", str(model), "--target", "kiln_c", "--inputs", str(other),
               "-o", str(tmp_path / "c.npz")])
    err = capsys.readouterr().err
    assert rc == 1 and message in err and len(err.strip().splitlines()) == 1


def test_dnnl_is_not_available(files, tmp_path, capsys):
    model, inputs, _ = files
    rc = main(["calibrate", str(model), "--target", "dnnl", "--inputs", str(inputs),
               "-o", str(tmp_path / "c.npz")])
    err = capsys.readouterr().err
    assert rc == 1 and "'dnnl' is not available in Kiln" in err
