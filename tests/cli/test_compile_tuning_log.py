"""``kiln compile --tuning-log LOG``: the log's best records replace the default schedules, and
the command prints the coverage line (issue 11, items 5 and 7)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln import relay
from kiln.auto_scheduler import MeasureInput, MeasureResult, extract_tasks, save_records
from kiln.codegen.native import detect_vector_bytes
from kiln.config import settings
from kiln.te.default_schedule import default_schedule
from kiln.te.steps import SplitStep
from kiln.te.templates import TargetInfo, apply_template

pytestmark = pytest.mark.requires_cc


def kiln(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def model(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype("float32")
    b = rng.standard_normal(8).astype("float32")
    wg = (rng.standard_normal((8 * 4 * 4, 10)) * 0.1).astype("float32")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2],
                              name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wg"], ["g"], name="fc"),
             helper.make_node("Softmax", ["g"], ["y"], name="softmax")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(wg, "wg")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path / "model.onnx"
    onnx.save(m, path)
    x = rng.standard_normal((1, 3, 8, 8)).astype("float32")
    np.savez(tmp_path / "x.npz", x=x)
    expected = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    return path, tmp_path / "x.npz", expected


def _tasks(path):
    mod, params = relay.frontend.from_onnx(str(path))
    return extract_tasks(mod, params, "llvm")[0]


def _state(task, mutate):
    vb, threads = detect_vector_bytes(), max(1, settings.num_threads)
    dag = task.compute_dag
    state = apply_template(dag, TargetInfo(vb, threads)) or default_schedule(dag, vb, threads)
    if mutate:  # another valid factorization of one split
        steps = list(state.transform_steps)
        for i, s in enumerate(steps):
            if isinstance(s, SplitStep) and s.lengths and s.lengths[-1] and s.lengths[-1] % 2 == 0:
                steps[i] = SplitStep(s.stage_id, s.iter_id, s.extent,
                                     (*s.lengths[:-1], s.lengths[-1] // 2), s.inner_to_outer)
                state = state.copy()
                state.transform_steps = steps
                break
    return state


def _log(path, tasks, mutate=True):
    save_records(path, [MeasureInput(t, _state(t, mutate)) for t in tasks],
                 [MeasureResult([1e-3], 0, "", 0.1, 1700000000) for _ in tasks])
    return path


def _run(tmp_path, artifact, inputs):
    out = tmp_path / "out.npz"
    result = kiln("run", str(artifact), "--inputs", str(inputs), "-o", str(out))
    assert result.returncode == 0, result.stderr
    with np.load(out) as data:
        return data[data.files[0]]


def test_full_log_prints_full_coverage_and_computes_the_model(tmp_path, model):
    path, inputs, expected = model
    tasks = _tasks(path)
    assert len(tasks) == 4  # conv+relu, pool, dense, softmax
    log = _log(tmp_path / "log.json", tasks)
    artifact = tmp_path / "tuned.so"
    result = kiln("compile", str(path), "-o", str(artifact), "--tuning-log", str(log))
    assert result.returncode == 0, result.stderr
    assert "tuning log: 4/4 tasks applied\n" in result.stdout
    assert "tuning log" not in result.stderr  # printed once, not logged a second time
    np.testing.assert_allclose(_run(tmp_path, artifact, inputs), expected, rtol=1e-5, atol=1e-6)


def test_partial_log_and_json(tmp_path, model):
    path, inputs, expected = model
    tasks = _tasks(path)
    keep = [t for t in tasks if "softmax" not in t.desc]
    log = _log(tmp_path / "partial.json", keep, mutate=False)
    artifact = tmp_path / "partial.so"
    # tvmc's spelling of the option works too
    result = kiln("compile", str(path), "-o", str(artifact), "--tuning-records", str(log),
                  "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    softmax = next(t.desc for t in tasks if "softmax" in t.desc)
    assert softmax.endswith(" [softmax]")  # the description names the source layer
    softmax = softmax.removesuffix(" [softmax]")
    assert summary["tuning"]["line"] == ("tuning log: 3/4 tasks applied; default schedule for: "
                                         f"{softmax}")
    assert summary["tuning_log"] == str(log)
    np.testing.assert_allclose(_run(tmp_path, artifact, inputs), expected, rtol=1e-5, atol=1e-6)


def test_missing_log_is_a_one_line_error(tmp_path, model):
    path, _, _ = model
    result = kiln("compile", str(path), "-o", str(tmp_path / "m.so"), "--tuning-log",
                  str(tmp_path / "nope.json"))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "nope.json" in lines[0] and "Traceback" not in result.stderr
