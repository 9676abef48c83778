"""Every ``kiln`` error is one line on stderr and a non-zero exit; ``--verbose`` adds the traceback.

Run through ``python -m kiln`` in a subprocess, as a user runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

requires_cc = pytest.mark.requires_cc


def kiln(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kiln", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=300)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], command: str, *words: str,
                          status: int = 1) -> str:
    assert proc.returncode == status, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"kiln {command}: error: "), lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    path = tmp_path_factory.mktemp("errors") / "relu.onnx"
    onnx.save(m, path)
    return path


@pytest.fixture(scope="module")
def artifact(model: Path) -> Path:
    out = model.with_name("relu.kiln")
    proc = kiln("compile", str(model), "-o", str(out), "--target", "numpy")
    assert proc.returncode == 0, proc.stderr
    np.savez(model.with_name("x.npz"), x=np.arange(4, dtype="float32").reshape(1, 4) - 2)
    return out


def test_truncated_model_is_one_line_and_verbose_shows_the_traceback(model, tmp_path):
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(model.read_bytes()[:40])
    args = ["compile", str(truncated), "-o", str(tmp_path / "m.so"), "--target", "numpy"]
    assert_one_line_error(kiln(*args), "compile", "truncated.onnx")
    for verbose in (["-v", *args], [*args, "--verbose"]):  # before or after the command
        proc = kiln(*verbose)
        assert proc.returncode == 1
        assert "Traceback" in proc.stderr
        assert proc.stderr.splitlines()[-1].startswith("kiln compile: error: ")


@pytest.mark.parametrize("value", ["0", "-2", "abc"])
def test_bad_thread_option_is_a_usage_error(artifact, value):
    proc = kiln("run", str(artifact), "--inputs", str(artifact.with_name("x.npz")), "--threads",
                value)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("kiln run: error: argument --threads: ")
    assert value in proc.stderr.splitlines()[-1]


@requires_cc
def test_invalid_thread_variable_is_one_line(model, tmp_path):
    proc = kiln("compile", str(model), "-o", str(tmp_path / "m.so"),
                env={"KILN_NUM_THREADS": "abc"})
    assert_one_line_error(proc, "compile", "KILN_NUM_THREADS='abc'")


def test_closed_stdout_exits_quietly(artifact):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before kiln writes, as with `| head -1` on long output
    try:
        proc = subprocess.run([sys.executable, "-m", "kiln", "inspect", str(artifact), "--json"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert proc.returncode == 1
    assert proc.stderr == ""


RAISING = """
    import sys
    import kiln.cli.inspect as command

    def run(args):
        raise {exc}

    command.run = run
    from kiln.cli.main import main
    sys.exit(main(sys.argv[1:] or ["inspect", "x"]))
"""


def test_unexpected_exception_is_one_informative_line():
    proc = run_python(RAISING.format(exc='ValueError("bad\\nvalue")'))
    line = assert_one_line_error(proc, "inspect", "ValueError: bad value", "--verbose")
    assert line.count("error:") == 1


def test_os_error_is_one_line_without_errno(tmp_path):
    proc = run_python(RAISING.format(exc=f"FileNotFoundError(2, 'No such file or directory', "
                                         f"{str(tmp_path / 'gone.npz')!r})"))
    line = assert_one_line_error(proc, "inspect", "No such file or directory", "gone.npz")
    assert "Errno" not in line


def test_keyboard_interrupt_is_one_line_and_status_130():
    proc = run_python(RAISING.format(exc="KeyboardInterrupt()"))
    assert proc.returncode == 130
    assert proc.stderr.strip() == "kiln inspect: interrupted"


def test_missing_compiler_names_cc_and_the_numpy_target(model, tmp_path):
    out = tmp_path / "m.so"
    proc = kiln("compile", str(model), "-o", str(out), env={"CC": "/nonexistent/cc"})
    assert_one_line_error(proc, "compile", "'/nonexistent/cc'", "not found", "CC",
                          "--target numpy")
    assert not out.exists()
    proc = kiln("compile", str(model), "-o", str(out), "--target", "numpy",
                env={"CC": "/nonexistent/cc"})
    assert proc.returncode == 0, proc.stderr  # the way around the error works


def test_debug_inputs_as_npy_is_one_line_naming_npz(model, tmp_path):
    npy = tmp_path / "x.npy"
    np.save(npy, np.zeros((1, 4), dtype="float32"))
    assert_one_line_error(kiln("debug", str(model), "--inputs", str(npy)), "debug", "x.npy", ".npz",
                          "np.savez")
