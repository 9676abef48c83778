"""``kiln compile`` shows progress on a terminal, nothing when piped, and times with ``-v``.

The terminal is a pseudo-terminal (:mod:`pty`) on the command's standard error.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

requires_cc = pytest.mark.requires_cc
TARGETS = ["numpy", pytest.param("c", marks=requires_cc)]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path_factory.mktemp("progress") / "model.onnx"
    onnx.save(m, path)
    return path


def compile_args(model: Path, tmp_path: Path, target: str) -> list[str]:
    return [sys.executable, "-m", "kiln", "compile", str(model), "-o", str(tmp_path / "m.so"),
            "--target", target]


def run_with_terminal_stderr(cmd: list[str]) -> tuple[int, str, str]:
    """Run ``cmd`` with stderr on a 120-column pseudo-terminal; (status, stdout, terminal text)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    # the whole-build cache would skip the passes whose progress these tests watch
    env = {**os.environ, "KILN_BUILD_CACHE": "0"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    received = bytearray()
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            received += data
        assert proc.stdout is not None
        out = proc.stdout.read().decode()
        status = proc.wait(timeout=60)
    finally:
        os.close(master)
    return status, out, received.decode()


@pytest.mark.parametrize("target", TARGETS)
def test_terminal_shows_a_bar_and_clears_it(model, tmp_path, target):
    status, out, term = run_with_terminal_stderr(compile_args(model, tmp_path, target))
    assert status == 0, term
    assert out.startswith("wrote ")
    assert "Traceback" not in term
    assert "\rkiln compile: import" in term
    assert "kiln compile: build > passes [" in term and " passes" in term
    assert "\rkiln compile: export" in term
    if target == "c":
        assert "kiln compile: build > compiling C [" in term and "distinct kernels" in term
        assert "kiln compile: build > lowering [" in term
    last_clear = term.rindex("\r\x1b[K")
    assert term[last_clear + 4:].strip() == ""  # nothing is left on the line afterwards


@pytest.mark.parametrize("target", TARGETS)
def test_piped_stderr_stays_empty(model, tmp_path, target):
    proc = subprocess.run(compile_args(model, tmp_path, target), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.startswith("wrote ")


@pytest.mark.parametrize("target", TARGETS)
def test_verbose_prints_stage_and_pass_times(model, tmp_path, target):
    proc = subprocess.run([*compile_args(model, tmp_path, target), "-v"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert "\r" not in err  # lines, not a bar, when piped
    lines = err.splitlines()
    for stage in ("import", "build > passes", "build", "export"):
        assert any(line.startswith(f"kiln compile: {stage}: ") and line.split(": ")[-1][0].isdigit()
                   for line in lines), (stage, err)
    if target == "c":
        assert any(line.startswith("kiln compile: build > compiling C: ") for line in lines)
    table = lines[lines.index("wall time per pass:") + 1:]
    names = [row.split()[0] for row in table if row.startswith("  ")]
    assert {"FoldConstant", "FuseOps", "InferType"} <= set(names)
    assert any(row.strip().startswith("total (leaf passes)") for row in table)
