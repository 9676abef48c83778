"""``kiln tune``: a two-task model (convolution + dense) tuned end to end, the log used by
``kiln compile --tuning-log`` (output checked against onnxruntime), a run killed mid-way and
resumed with the same budget, the progress plot, and the one-line errors (issue 12, part B)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln.cli.main import main

pytestmark = pytest.mark.requires_cc

#: A small evolutionary search keeps each round well under a second.
SMALL = ["--search-param", "evolutionary_search_population=16",
         "--search-param", "evolutionary_search_num_iters=1",
         "--search-param", "sample_init_min_population=8",
         "--min-repeat-ms", "0", "--number", "1"]


def kiln(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def model(tmp_path: Path) -> tuple[Path, Path, np.ndarray]:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    wg = (rng.standard_normal((4 * 6 * 6, 10)) * 0.1).astype("float32")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wg"], ["y"], name="fc")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(wg, "wg")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path / "model.onnx"
    onnx.save(m, path)
    x = rng.standard_normal((1, 3, 8, 8)).astype("float32")
    np.savez(tmp_path / "x.npz", x=x)
    expected = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    return path, tmp_path / "x.npz", expected


def _keys(log: Path) -> list[str]:
    return [json.dumps(json.loads(line)["i"], sort_keys=True) for line in log.read_text().splitlines()]


def test_tune_then_compile_with_the_log(tmp_path: Path, model: tuple[Path, Path, np.ndarray]) -> None:
    path, inputs, expected = model
    log, png = tmp_path / "model.log", tmp_path / "progress.png"
    # the batch dim is symbolic: bound with compile's --input-shapes syntax
    r = kiln("tune", str(path), "-o", str(log), "--trials", "8", "--trials-per-round", "4",
             "--input-shapes", "x:[1,3,8,8]", "--plot", str(png), *SMALL)
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "2 tasks to tune, 8 trials"
    rows = [line.split() for line in out[2:4]]
    assert [row[0] for row in rows] == ["0", "1"]
    assert "conv2d" in out[2] and "dense" in out[3]
    assert sum(int(row[-2]) for row in rows) == 8 and all(float(row[-1]) > 0 for row in rows)
    assert out[4].startswith("estimated latency: ") and "; 8 trials; log " in out[4]
    # progress: one plain line per round on stderr (not a terminal), with an ETA
    progress = [line for line in r.stderr.splitlines() if line.startswith("task ")]
    assert len(progress) == 2 and all("ETA" in line for line in progress)
    assert progress[-1].split("|")[1].strip().startswith("8/8 trials, est. latency ")
    keys = _keys(log)
    assert len(keys) == 8 and len(set(keys)) == 8
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000

    artifact, out_npz = tmp_path / "tuned.so", tmp_path / "out.npz"
    r = kiln("compile", str(path), "-o", str(artifact), "--input-shapes", "x:1x3x8x8", "--tuning-log",
             str(log))
    assert r.returncode == 0, r.stderr
    assert "tuning log: 2/2 tasks applied" in r.stdout
    r = kiln("run", str(artifact), "--inputs", str(inputs), "-o", str(out_npz))
    assert r.returncode == 0, r.stderr
    with np.load(out_npz) as data:
        np.testing.assert_allclose(data[data.files[0]], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # ~30 s; test_as_task_scheduler.py resumes an interrupted run by default
def test_killed_run_resumes_to_the_same_budget(tmp_path: Path, model: tuple[Path, Path, np.ndarray]
                                               ) -> None:
    path, _, _ = model
    log = tmp_path / "model.log"
    args = ["tune", str(path), "-o", str(log), "--trials", "12", "--trials-per-round", "3",
            "--input-shapes", "x:1x3x8x8", *SMALL]
    proc = subprocess.Popen([sys.executable, "-m", "kiln", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if log.exists() and len(log.read_text().splitlines()) >= 4:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed"
    finally:
        proc.kill()
        proc.wait()
    first = _keys(log)
    assert 4 <= len(first) < 12

    r = kiln(*args)  # no --resume: the log is not touched
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "--resume" in r.stderr
    assert _keys(log) == first

    r = kiln(*args, "--resume")
    assert r.returncode == 0, r.stderr
    assert f"(resuming {log})" in r.stdout and f"12 trials ({len(first)} resumed from the log)" in r.stdout
    keys = _keys(log)
    assert keys[:len(first)] == first
    assert len(keys) == 12 and len(set(keys)) == 12  # the same budget, nothing measured twice
    r = kiln(*args, "--resume")  # the budget is spent: nothing more is measured
    assert r.returncode == 0, r.stderr
    assert len(_keys(log)) == 12


def test_errors_are_one_line(tmp_path: Path, model: tuple[Path, Path, np.ndarray],
                             monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path, _, _ = model
    log = tmp_path / "m.log"
    cases = [(["--trials", "1", "--input-shapes", "x:1x3x8x8"],
              "--trials 1 is too small: the model has 2 tasks"),
             (["--trials", "4", "--target", "numpy"], "only native targets"),
             (["--trials", "4", "--search-param", "population=8"], "unknown parameter 'population'"),
             (["--trials", "4"], "--input-shapes")]  # the symbolic batch dim
    for extra, want in cases:
        assert main(["tune", str(path), "-o", str(log), *extra]) == 1
        err = capsys.readouterr().err
        assert err.startswith("kiln tune: error: ") and err.count("\n") == 1 and want in err, err
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    assert main(["tune", str(path), "-o", str(log), "--trials", "4", "--plot", str(tmp_path / "p.png")]) == 1
    assert "--plot needs matplotlib" in capsys.readouterr().err
    assert not log.exists()


@pytest.mark.slow
def test_tune_on_a_local_ray_instance(tmp_path: Path, model: tuple[Path, Path, np.ndarray]) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (the optional extra kiln[ray])")
    path, _, _ = model
    log = tmp_path / "ray.log"
    r = kiln("tune", str(path), "-o", str(log), "--trials", "4", "--trials-per-round", "2",
             "--input-shapes", "x:1x3x8x8", "--ray", "local", *SMALL)
    assert r.returncode == 0, r.stderr
    assert "Ray: 1 node(s)" in r.stdout and "; 4 trials; log " in r.stdout
    assert len(set(_keys(log))) == 4
