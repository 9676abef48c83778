"""kiln.contrib.nvcc / cudnn: TVM's capability checks, and a clear refusal of CUDA work."""

from __future__ import annotations

import pytest

from kiln.contrib import cudnn, nvcc
from kiln.errors import TopiUnsupportedError


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


def test_cuda_toolchain_is_refused_with_the_reason() -> None:
    for call in (nvcc.find_cuda_path, nvcc.get_cuda_version, lambda: nvcc.compile_cuda("")):
        with pytest.raises(TopiUnsupportedError, match="CPU only"):
            call()


def test_cudnn_never_exists() -> None:
    assert cudnn.exists() is False
