"""``bench/_ort_isa.py``: onnxruntime held to its AVX2 kernels for benchmarks.

The byte patch is checked on synthetic bytes; the copy of the installed onnxruntime is run in
subprocesses (one process holds one onnxruntime) on a softmax, whose row sums MLAS accumulates
in vector registers: held to AVX2 it must still be right (NumPy reference), and on an AVX-512
CPU its results must differ in the last bits from the native kernels' (8 lanes per accumulator
instead of 16), which shows the AVX-512 kernels are no longer used. No time is measured.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bench import _ort_isa

ROOT = Path(__file__).resolve().parents[2]
PATTERN = bytes.fromhex("48f7d0a8e0") + bytes.fromhex("0f84") + bytes.fromhex("54010000")


def test_patch_replaces_the_jump_with_a_same_length_no_op() -> None:
    binary = b"\x90" * 100 + PATTERN + b"\xc3" * 50
    patched = _ort_isa.patch_mlas_avx2(binary)
    assert len(patched) == len(binary)
    at = 100 + 5
    assert patched[:at] == binary[:at]
    assert patched[at:at + 6] == bytes.fromhex("660f1f440000")  # nopw 0x0(%rax,%rax,1)
    assert patched[at + 6:] == binary[at + 6:]


@pytest.mark.parametrize("copies", [0, 2])
def test_patch_refuses_unless_the_check_occurs_once(copies: int) -> None:
    with pytest.raises(_ort_isa.OrtIsaError, match=f"occurs {copies} times"):
        _ort_isa.patch_mlas_avx2(b"\x90" * 10 + PATTERN * copies)


@pytest.mark.parametrize(("argv", "isa"), [
    ([], "native"),
    (["--models", "resnet18", "--ort-isa", "avx2"], "avx2"),
    (["--ort-isa=avx2", "--threads", "1"], "avx2"),
    (["--ort-isa", "native"], "native"),
])
def test_isa_from_argv(argv: list[str], isa: str) -> None:
    assert _ort_isa.isa_from_argv(argv) == isa


def test_another_isa_after_import_is_a_parser_error(capsys: pytest.CaptureFixture[str]) -> None:
    import onnxruntime  # noqa: F401  (this process has the native kernels from here on)

    assert _ort_isa.loaded_isa() == "native"
    _ort_isa.require(argparse.ArgumentParser(prog="bench"), "native")
    with pytest.raises(SystemExit) as exc:
        _ort_isa.require(argparse.ArgumentParser(prog="bench"), "avx2")
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "onnxruntime was imported with its native kernels before --ort-isa avx2" in err


def test_unknown_isa_is_one_line_and_status_2() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_models.py"), "--ort-isa",
                          "avx512"], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2
    assert out.stderr.strip() == ("error: --ort-isa: unknown onnxruntime ISA 'avx512'; choose from "
                                  "native, avx2")


_SOFTMAX = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from bench import _ort_isa
    _ort_isa.select({isa!r})
    import numpy as np, onnxruntime as ort
    from onnx import TensorProto, helper
    assert _ort_isa.loaded_isa() == {isa!r}, ort.__file__
    shape = [4, 4099]
    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.save({out!r}, session.run(None, {{"x": x}})[0])
""")


def _softmax(isa: str, tmp_path: Path) -> np.ndarray:
    out = tmp_path / f"{isa}.npy"
    code = _SOFTMAX.format(root=str(ROOT), isa=isa, out=str(out))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    return np.load(out)


def _has_avx512f() -> bool:
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.mark.skipif(sys.platform != "linux" or not _has_avx512f(),
                    reason="the patch is for x86-64 Linux builds; it changes nothing without AVX-512")
def test_avx2_copy_is_right_and_uses_other_kernels(tmp_path: Path) -> None:
    native = _softmax("native", tmp_path)
    avx2 = _softmax("avx2", tmp_path)
    x = np.random.default_rng(0).standard_normal(native.shape).astype(np.float64)
    reference = np.exp(x - x.max(axis=-1, keepdims=True))
    reference /= reference.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(avx2, reference, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(native, reference, rtol=1e-5, atol=1e-9)
    assert np.any(avx2 != native), "held to AVX2, onnxruntime still ran its AVX-512 kernels"
