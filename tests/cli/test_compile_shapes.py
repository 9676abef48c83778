"""``kiln compile --input-shapes``: both spellings, shapes checked against the model, and the
dynamic-shape hint phrased for the command line (issue 18, points 3 and 4)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from kiln.cli.compile import parse_input_shapes
from kiln.errors import KilnError


def kiln(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True,
                          timeout=300)


def _save(tmp_path, name, inputs, outputs, nodes):
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [vi(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [vi(n, TensorProto.FLOAT, s) for n, s in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    path = tmp_path / name
    onnx.save(model, path)
    return path


@pytest.fixture
def segmenter(tmp_path):
    """Declares ``input`` as [1, 45]: dim 0 is static."""
    return _save(tmp_path, "seg.onnx", [("input", [1, 45])], [("y", [1, 45])],
                 [helper.make_node("Relu", ["input"], ["y"])])


@pytest.fixture
def dynamic(tmp_path):
    """Two inputs with a symbolic batch dim and a static one."""
    return _save(tmp_path, "dyn.onnx", [("a", ["N", 3]), ("b", ["N", 3])], [("y", ["N", 3])],
                 [helper.make_node("Add", ["a", "b"], ["y"])])


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_shape_contradicting_a_static_dim_is_rejected(tmp_path, segmenter):
    # onnxruntime rejects such an input, so the compile must too
    session = ort.InferenceSession(str(segmenter), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="(?i)dimension"):
        session.run(None, {"input": np.zeros((2, 45), np.float32)})
    line = _one_line_error(kiln("compile", str(segmenter), "-o", str(tmp_path / "m.kpkg"),
                                "--target", "numpy", "--input-shapes", "input:2x45"))
    assert "'input'" in line and "dim 0" in line and "declares 1" in line and "got 2" in line
    line = _one_line_error(kiln("compile", str(segmenter), "-o", str(tmp_path / "m.kpkg"),
                                "--target", "numpy", "--input-shapes", "input:[1,45,1]"))
    assert "'input'" in line and "rank 3" in line and "rank 2" in line


def test_matching_shapes_in_both_spellings_compile_and_run(tmp_path, segmenter, dynamic):
    ok = kiln("compile", str(segmenter), "-o", str(tmp_path / "s.kpkg"), "--target", "numpy",
              "--input-shapes", "input:1x45")
    assert ok.returncode == 0, ok.stderr
    # tvmc's form: brackets, spaces inside them, inputs separated by a space
    ok = kiln("compile", str(dynamic), "-o", str(tmp_path / "d.kpkg"), "--target", "numpy",
              "--input-shapes", "a:[2, 3] b:[2,3]")
    assert ok.returncode == 0, ok.stderr
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 2, 3)).astype(np.float32)
    np.savez(tmp_path / "in.npz", a=a, b=b)
    ran = kiln("run", str(tmp_path / "d.kpkg"), "--inputs", str(tmp_path / "in.npz"), "-o",
               str(tmp_path / "out.npz"))
    assert ran.returncode == 0, ran.stderr
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_allclose(out["y"], a + b, rtol=1e-6)


def test_dynamic_dims_without_shapes_hint_at_input_shapes(tmp_path, dynamic):
    line = _one_line_error(kiln("compile", str(dynamic), "-o", str(tmp_path / "d.kpkg"),
                                "--target", "numpy"))
    assert "input 'a' has unknown dim 0 ('N')" in line and "input 'b'" in line
    assert "--input-shapes a:1x3,b:1x3" in line
    assert "shape=" not in line and "from_onnx" not in line
    # the hint is valid input for the option it names
    assert parse_input_shapes("a:1x3,b:1x3") == {"a": (1, 3), "b": (1, 3)}


def test_a_shape_for_a_name_that_is_not_an_input_lists_the_inputs(tmp_path, segmenter):
    line = _one_line_error(kiln("compile", str(segmenter), "-o", str(tmp_path / "m.kpkg"),
                                "--target", "numpy", "--input-shapes", "data:1x45"))
    assert "'data'" in line and "'input'" in line


@pytest.mark.parametrize(("text", "expected"), [
    ("x:1x3x48x320", {"x": (1, 3, 48, 320)}),
    ("x:[1,3,48,320]", {"x": (1, 3, 48, 320)}),
    ("a:[1,3] b:[2]", {"a": (1, 3), "b": (2,)}),
    ("a:[1, 3],b:2", {"a": (1, 3), "b": (2,)}),
    ("a: [1, 3]  b:2x2", {"a": (1, 3), "b": (2, 2)}),
    ("input:0:1x3", {"input:0": (1, 3)}),
    ("/model/in.1:[4]", {"/model/in.1": (4,)}),
    ("s:", {"s": ()}),
    ("s:[]", {"s": ()}),
    ("", {}),
])
def test_parse_input_shapes_accepts_both_forms(text, expected):
    assert parse_input_shapes(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("x", "is not NAME:D1xD2"),
    ("x:1x", "must be integers"),
    ("x:abc", "must be integers"),
    ("x:[1,2", "unclosed '\\['"),
    ("x:1,2]", "unmatched '\\]'"),
    ("x:[1,[2]]", "nested '\\['"),
    ("x:[-1,3]", "static shapes"),
    ("x:1x-1", "static shapes"),
    ("a:1,a:2", "given twice"),
    (" , ", "names no input"),
    ("a:[1]b:[2]", "is not NAME"),
])
def test_parse_input_shapes_rejects_malformed_text_in_one_line(text, message):
    with pytest.raises(KilnError, match=message) as info:
        parse_input_shapes(text)
    assert "\n" not in str(info.value) and str(info.value).startswith("--input-shapes: ")
