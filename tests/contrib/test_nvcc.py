"""kiln.contrib.nvcc / cudnn: TVM's capability checks, CUDA compilation, and cuDNN's absence."""

from __future__ import annotations

import pytest

from kiln.contrib import cudnn, nvcc
from kiln.errors import CompileError, CompilerNotFoundError


@pytest.mark.parametrize(("version", "fp16", "int8", "tensorcore", "bf16"), [
    ("5.2", False, False, False, False),
    ("5.3", True, False, False, False),
    ("6.0", True, False, False, False),
    ("6.1", True, True, False, False),
    ("7.5", True, True, True, False),
    ("8.6", True, True, True, True),
])
def test_capabilities_follow_the_compute_version(version: str, fp16: bool, int8: bool,
                                                 tensorcore: bool, bf16: bool) -> None:
    assert nvcc.have_fp16(version) is fp16
    assert nvcc.have_int8(version) is int8
    assert nvcc.have_tensorcore(version) is tensorcore
    assert nvcc.have_bf16(version) is bf16


def test_bad_compute_version() -> None:
    with pytest.raises(ValueError, match="major.minor"):
        nvcc.have_fp16("seven")


def test_without_a_toolchain_the_errors_say_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvcc, "find_nvcc", lambda: None)
    monkeypatch.setattr(nvcc, "nvrtc_version", lambda: None)
    monkeypatch.setattr(nvcc.settings, "cuda_home", None)
    with pytest.raises(CompilerNotFoundError, match="CUDA_HOME"):
        nvcc.find_cuda_path()
    with pytest.raises(CompilerNotFoundError, match="neither NVRTC nor nvcc"):
        nvcc.get_cuda_version()
    with pytest.raises(CompileError, match="'ptx' or 'cubin'"):
        nvcc.compile_cuda("", target_format="fatbin")


@pytest.mark.requires_cuda_compiler
def test_compile_cuda_gives_ptx_and_cubin(tmp_path) -> None:  # type: ignore[no-untyped-def]
    code = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n'
    ptx = nvcc.compile_cuda(code, "ptx", arch="sm_80", path_target=str(tmp_path / "k.ptx"))
    assert b".entry k" in ptx and (tmp_path / "k.ptx").read_bytes() == ptx
    major, _ = nvcc.get_cuda_version()
    assert major >= 11
    if nvcc.nvrtc_version() is not None:
        assert nvcc.compile_cuda(code, "cubin", arch=["-arch", "sm_80"]).startswith(b"\x7fELF")


def test_cudnn_never_exists() -> None:
    assert cudnn.exists() is False
