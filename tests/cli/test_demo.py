"""``kiln demo``: every line it prints is true, and it says what it skipped or fell back from."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

from kiln.cli.demo import data_path

requires_cc = pytest.mark.requires_cc

# `kiln demo` in a process where `import onnxruntime` fails as it does when it is not installed
WITHOUT_ORT = ("import sys; sys.modules['onnxruntime'] = None; from kiln.cli.main import main; "
               "sys.exit(main(sys.argv[1:]))")


def demo(*args: str, env: dict[str, str] | None = None,
         without_onnxruntime: bool = False) -> subprocess.CompletedProcess[str]:
    head = ["-c", WITHOUT_ORT] if without_onnxruntime else ["-m", "kiln"]
    return subprocess.run([sys.executable, *head, "demo", "--repeat", "2", *args],
                          capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=300)


def line(out: str, key: str) -> str:
    found = [x for x in out.splitlines() if x.startswith(key)]
    assert len(found) == 1, out
    return found[0]


def test_without_onnxruntime_says_what_was_skipped_and_how_to_get_it():
    proc = demo("--target", "numpy", without_onnxruntime=True)
    assert proc.returncode == 0, proc.stderr
    check = line(proc.stdout, "check ")
    assert "skipped" in check and "onnxruntime is not installed" in check
    assert "pip install onnxruntime" in check
    latency = line(proc.stdout, "latency ")
    assert "onnxruntime" not in latency and "alternating" not in latency
    assert "median of 2 runs" in latency
    assert proc.stderr == ""


def test_with_onnxruntime_the_check_is_true():
    proc = demo("--target", "numpy")
    assert proc.returncode == 0, proc.stderr
    data = np.load(data_path("digits_test.npz"))
    sess = ort.InferenceSession(str(data_path("digits_cnn.onnx")),
                                providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"image": data["images"]})[0]
    accuracy = float((ref.argmax(1) == data["labels"]).mean())
    assert line(proc.stdout, "accuracy ").split()[1] == f"{accuracy:.4f}"
    check = line(proc.stdout, "check ")
    assert "same predictions: True" in check
    assert float(check.split("|")[2].split(",")[0]) < 1e-4
    latency = line(proc.stdout, "latency ")
    assert "onnxruntime" in latency and "alternating" in latency and "[1 thread(s)" in latency
    assert "target=numpy" in line(proc.stdout, "build ")


def test_without_a_compiler_it_says_it_falls_back_to_numpy():
    proc = demo(env={"CC": "/nonexistent/cc"})
    assert proc.returncode == 0, proc.stderr
    warnings = proc.stderr.splitlines()
    assert len(warnings) == 1, proc.stderr
    assert warnings[0].startswith("kiln demo: warning: ")
    for word in ("'/nonexistent/cc'", "CC", "not found", "falling back", "--target numpy"):
        assert word in warnings[0], word
    assert "target=numpy" in line(proc.stdout, "build ")


def test_asking_for_native_code_without_a_compiler_is_one_line():
    proc = demo("--target", "c", env={"CC": "/nonexistent/cc"})
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kiln demo: error: ")
    assert "CC" in lines[0] and "--target numpy" in lines[0]


@requires_cc
def test_native_by_default_with_threads():
    proc = demo("--threads", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert "target=c" in line(proc.stdout, "build ")
    assert "[1 thread(s)" in line(proc.stdout, "latency ")


@pytest.mark.parametrize(("option", "value"), [("--threads", "0"), ("--repeat", "-1")])
def test_bad_threads_or_repeat_is_a_usage_error(option, value):
    proc = demo(option, value)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(f"kiln demo: error: argument {option}")
