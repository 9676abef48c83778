"""The C compiler driver and its content-addressed cache, with the real system compiler."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.codegen.compiler import (
    blob_c_source,
    cache_info,
    clear_cache,
    compile_cached,
    compile_shared,
    prune_cache,
    simd_pragmas_supported,
)
from kiln.config import settings
from kiln.errors import CompileError
from kiln.runtime import toolchain

pytestmark = pytest.mark.requires_cc

SCALE = """#include <stdint.h>
int32_t kiln_test_scale(void** args) {
  const float* x = (const float*)args[0];
  float* y = (float*)args[1];
  for (int i = 0; i < 6; ++i) y[i] = 3.0f * x[i] + 1.0f;
  return 0;
}
"""


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setattr(settings, "cache_dir", folder)
    return folder


def _call_scale(so: Path) -> np.ndarray:
    lib = ctypes.CDLL(str(so), mode=os.RTLD_LOCAL)
    x = np.arange(6, dtype=np.float32)
    y = np.zeros(6, dtype=np.float32)
    argv = (ctypes.c_void_p * 2)(x.ctypes.data, y.ctypes.data)
    assert lib.kiln_test_scale(argv) == 0
    return y


def test_compiles_a_kernel_and_keeps_the_source(cache_dir: Path) -> None:
    so = compile_cached(SCALE, "scale")
    assert so.parent == cache_dir / "compile" and so.name.startswith("scale-")
    assert so.with_suffix(".c").read_text() == SCALE
    assert so.with_suffix(".o").is_file()
    np.testing.assert_array_equal(_call_scale(so), 3 * np.arange(6, dtype=np.float32) + 1)


@pytest.fixture
def compiler_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The commands the toolchain runs from now on (they still run)."""
    calls: list[list[str]] = []
    real_run = subprocess.run

    def counting_run(cmd: list[str], *args: object, **kwargs: object) -> object:
        calls.append(cmd)
        return real_run(cmd, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(toolchain.subprocess, "run", counting_run)
    return calls


def test_second_call_is_a_cache_hit_without_compiler_runs(compiler_calls: list[list[str]]) -> None:
    first = compile_cached(SCALE, "scale")
    calls = compiler_calls
    calls.clear()  # the first build's runs
    hits = cache_info().hits
    assert compile_cached(SCALE, "scale") == first
    assert calls == []
    assert cache_info().hits == hits + 1
    other = compile_cached(SCALE + "\n/* changed */\n", "scale")
    assert other != first and calls  # a different source compiles again
    calls.clear()
    flagged = compile_cached(SCALE, "scale", flags=("-DKILN_TEST=1",))
    assert flagged != first and calls  # flags are part of the key


def test_unlinked_part_is_one_compiler_run_and_links_later(compiler_calls: list[list[str]],
                                                          tmp_path: Path) -> None:
    """``link=False`` (a library's part): the object only, one compiler run and no linker run;
    a second call is a hit; the object links into a working library afterwards."""
    calls = compiler_calls
    source = SCALE + "\n/* unlinked part */\n"
    obj = compile_cached(source, "part", link=False)
    assert obj.suffix == ".o" and obj.is_file() and not obj.with_suffix(".so").exists()
    assert len(calls) == 1 and "-c" in calls[0]
    calls.clear()
    assert compile_cached(source, "part", link=False) == obj and calls == []
    so = tmp_path / "linked.so"
    compile_shared([obj], so)
    np.testing.assert_array_equal(_call_scale(so), 3 * np.arange(6, dtype=np.float32) + 1)


def test_concurrent_builds_from_two_processes(cache_dir: Path) -> None:
    root = Path(kiln.__file__).resolve().parents[1]
    env = {**os.environ, "KILN_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(root)}
    script = ("import sys; from kiln.codegen.compiler import compile_cached; "
              "print(compile_cached(sys.stdin.read(), 'race'))")
    procs = [subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    for p in procs:
        p.stdin.write(SCALE)  # type: ignore[union-attr]
        p.stdin.close()  # type: ignore[union-attr]
    outs = []
    for p in procs:
        out, err = p.stdout.read(), p.stderr.read()  # type: ignore[union-attr]
        assert p.wait(timeout=120) == 0, err
        outs.append(out.strip())
    assert outs[0] == outs[1]
    so = Path(outs[0])
    np.testing.assert_array_equal(_call_scale(so), 3 * np.arange(6, dtype=np.float32) + 1)
    leftovers = [p.name for p in so.parent.iterdir() if p.name.startswith(".") or
                 p.name.startswith("kiln-cc-")]
    assert leftovers == []


def test_missing_compiler_names_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "cc", "/nonexistent/cc")
    with pytest.raises(CompileError) as info:
        compile_cached(SCALE, "scale")
    message = str(info.value)
    assert "'/nonexistent/cc' not found" in message
    assert "command: /nonexistent/cc" in message


def test_unparsable_compiler_command_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "cc", 'cc -DX="')
    with pytest.raises(CompileError, match=r"C compiler command 'cc -DX=\"' .* cannot be split"):
        compile_cached(SCALE, "scale")


def test_syntax_error_gives_command_and_stderr(cache_dir: Path) -> None:
    with pytest.raises(CompileError) as info:
        compile_cached("int broken( {\n", "broken")
    message = str(info.value)
    assert "failed with exit code" in message
    command = next(line for line in message.splitlines() if line.startswith("command: "))
    assert " -c " in command and "broken-" in command and "-O3" in command
    assert "stderr:" in message and "error" in message.split("stderr:")[1]
    assert not list((cache_dir / "compile").glob("broken-*.so"))


def test_simd_flag_fallback_is_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          cache_dir: Path) -> None:
    fake = tmp_path / "no_simd_cc"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = "-fopenmp-simd" ] && exit 3; done\n'
                    'exec cc "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setattr(settings, "cc", str(fake))
    assert simd_pragmas_supported() is False
    so = compile_cached(SCALE, "scale")
    np.testing.assert_array_equal(_call_scale(so), 3 * np.arange(6, dtype=np.float32) + 1)
    memo = list((cache_dir / "compile").glob("openmp-simd-*.txt"))
    assert len(memo) == 1 and memo[0].read_text() == "0"
    toolchain.forget_probes()  # a new process reads the memo instead of probing again
    monkeypatch.setattr(toolchain, "run_compiler", lambda *a, **k: pytest.fail("probed again"))
    monkeypatch.setattr(toolchain, "_versions", {str(fake): toolchain.compiler_version()})
    assert simd_pragmas_supported() is False


def test_compile_shared_parallel_sources_and_blob(tmp_path: Path) -> None:
    sources = []
    for i in range(3):
        src = tmp_path / f"k{i}.c"
        src.write_text(f"int kiln_test_k{i}(void) {{ return {i + 40}; }}\n")
        sources.append(src)
    blob = bytes(range(256)) * 3 + b"tail"
    out = compile_shared(sources, tmp_path / "lib.so", blob=blob)
    lib = ctypes.CDLL(str(out), mode=os.RTLD_LOCAL)
    assert [getattr(lib, f"kiln_test_k{i}")() for i in range(3)] == [40, 41, 42]
    data = (ctypes.c_ubyte * len(blob)).in_dll(lib, "__tvm_dev_mblob")
    assert bytes(data) == blob


@pytest.mark.parametrize("assembler_ok", [True, False])
def test_large_blobs_use_incbin_or_fall_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            assembler_ok: bool) -> None:
    monkeypatch.setattr(toolchain, "_INCBIN_MIN_BYTES", 100)
    if not assembler_ok:  # a toolchain whose assembler rejects .incbin
        fake = tmp_path / "no_incbin_cc"
        fake.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in *.c) grep -q incbin "$a" && '
                        'exit 5;; esac; done\nexec cc "$@"\n')
        fake.chmod(0o755)
        monkeypatch.setattr(settings, "cc", str(fake))
    blob = np.random.default_rng(7).integers(0, 256, 5000, dtype=np.uint8).tobytes()
    src = tmp_path / "k.c"
    src.write_text("int kiln_test_k(void) { return 5; }\n")
    out = compile_shared([src], tmp_path / "big.so", blob=blob)
    lib = ctypes.CDLL(str(out), mode=os.RTLD_LOCAL)
    assert lib.kiln_test_k() == 5
    assert bytes((ctypes.c_ubyte * len(blob)).in_dll(lib, "__tvm_dev_mblob")) == blob


def test_compile_shared_links_cached_objects(tmp_path: Path) -> None:
    so = compile_cached(SCALE, "scale")
    out = compile_shared([so.with_suffix(".o")], tmp_path / "relinked.so", blob=b"\x01\x02")
    np.testing.assert_array_equal(_call_scale(out), 3 * np.arange(6, dtype=np.float32) + 1)


def test_compile_shared_reports_missing_sources(tmp_path: Path) -> None:
    with pytest.raises(CompileError, match="not found"):
        compile_shared([tmp_path / "nope.c"], tmp_path / "x.so")


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 1000])
def test_blob_source_embeds_exact_bytes(tmp_path: Path, size: int) -> None:
    rng = np.random.default_rng(size)
    blob = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    src = tmp_path / "blob.c"
    src.write_text(blob_c_source(blob, "kiln_test_blob"))
    out = compile_shared([src], tmp_path / f"blob{size}.so")
    lib = ctypes.CDLL(str(out), mode=os.RTLD_LOCAL)
    data = (ctypes.c_ubyte * max(size, 1)).in_dll(lib, "kiln_test_blob")
    assert bytes(data)[:size] == blob


def test_cache_info_prune_and_clear(cache_dir: Path) -> None:
    paths = [compile_cached(SCALE + f"\n/* {i} */\n", f"entry{i}") for i in range(3)]
    info = cache_info()
    assert info.entries == 3 and info.total_bytes > 0 and info.path == cache_dir / "compile"
    now = time.time()
    for age, so in zip((300, 200, 100), paths):  # entry0 least recently used
        for p in (so, so.with_suffix(".o"), so.with_suffix(".c")):
            os.utime(p, (now - age, now - age))
    one_entry = sum(p.stat().st_size for p in paths[2].parent.glob(paths[2].stem + ".*"))
    assert prune_cache(max_bytes=one_entry * 2) == 1
    assert not paths[0].exists() and paths[1].exists() and paths[2].exists()
    assert prune_cache(max_age_s=150) == 1
    assert not paths[1].exists() and paths[2].exists()
    assert clear_cache() >= 3
    assert cache_info().entries == 0
