"""The cuda target's compiler driver: NVRTC or nvcc, its cache, its errors."""

from __future__ import annotations

import pytest

from kiln.codegen import cuda_compiler
from kiln.codegen.cuda_compiler import compile_cuda
from kiln.config import settings
from kiln.errors import CompileError, CompilerNotFoundError

KERNEL = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n'


def test_no_compiler_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_compiler, "find_nvrtc", lambda: None)
    monkeypatch.setattr(cuda_compiler, "find_nvcc", lambda: None)
    with pytest.raises(CompilerNotFoundError, match="neither NVRTC .* nor nvcc"):
        compile_cuda(KERNEL, "sm_80")


def test_an_architecture_must_be_named_as_sm_xy() -> None:
    with pytest.raises(CompileError, match="'sm_90'"):
        compile_cuda(KERNEL, "hopper")


@pytest.mark.requires_cuda_compiler
def test_compiles_caches_and_reports_the_compiler_log(tmp_path: object,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "cache_dir", tmp_path)
    first = compile_cuda(KERNEL, "sm_80", "twice")
    assert b".entry twice" in first.ptx and first.arch == "sm_80"
    again = compile_cuda(KERNEL, "sm_80", "twice")  # from the cache
    assert again.ptx == first.ptx and again.cubin == first.cubin
    with pytest.raises(CompileError, match="undefined_thing"):
        compile_cuda(KERNEL.replace("2.0f", "undefined_thing"), "sm_80")
