"""A library compiled for CPU features the running CPU lacks is refused with one clear error
naming them, instead of dying with SIGILL (issue 17)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln.runtime.native as native_rt
from kiln import relay
from kiln.contrib import graph_executor
from kiln.errors import CPUFeatureError, KilnError
from kiln.ir.module import IRModule
from kiln.runtime.export import decode_module_blob
from kiln.runtime.module import load_module
from kiln.runtime.native import NativeLibrary, cpu_features, missing_cpu_features
from kiln.runtime.ndarray import cpu

pytestmark = pytest.mark.requires_cc

FAKE = "kiln_fake_feature"


def _factory():
    x = relay.var("x", shape=(4, 8), dtype="float32")
    w = relay.const(np.arange(48, dtype=np.float32).reshape(6, 8) / 48)
    func = relay.Function([x], relay.nn.relu(relay.nn.dense(x, w)))
    with relay.transform.PassContext(opt_level=3):
        return relay.build(IRModule.from_expr(func), target="c")


def _expected(x: np.ndarray) -> np.ndarray:
    w = np.arange(48, dtype=np.float32).reshape(6, 8) / 48
    return np.maximum(x @ w.T, 0)


def _run(factory, x):
    gm = graph_executor.GraphModule(factory["default"](cpu()))
    gm.set_input("x", x)
    gm.run()
    return gm.get_output(0).numpy()


@pytest.fixture
def x():
    return np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)


@pytest.fixture
def needs_cpuinfo():
    if cpu_features() is None:
        pytest.skip("this platform does not report CPU features")


def _export_requiring(factory, path, extra: set[str]):
    """Export ``factory`` with ``extra`` added to the features its library records."""
    lib = factory.lib
    saved = lib.isa_features
    lib.isa_features = saved | extra
    try:
        factory.export_library(path)
    finally:
        lib.isa_features = saved
    return path


def test_export_records_the_features_and_loads_here(tmp_path, x):
    factory = _factory()
    path = tmp_path / "model.so"
    factory.export_library(path)
    loaded = load_module(path)
    recorded = loaded.metadata["isa_features"]
    assert recorded == sorted(factory.lib.isa_features)
    if cpu_features() is not None and "avx" in (cpu_features() or ()):
        assert "avx" in recorded  # -march=native on an AVX machine
    np.testing.assert_allclose(_run(loaded, x), _expected(x), rtol=1e-5, atol=1e-5)


def test_artifact_needing_a_missing_feature_is_refused_naming_it(tmp_path, needs_cpuinfo):
    path = _export_requiring(_factory(), tmp_path / "model.so", {FAKE})
    meta = decode_module_blob(_blob(path)).metadata
    assert FAKE in meta["isa_features"]
    with pytest.raises(CPUFeatureError) as info:
        load_module(path)
    message = str(info.value)
    assert message.startswith(f"model.so needs {FAKE}")
    assert "this CPU lacks it" in message and "rebuild with target" in message
    assert info.value.missing == [FAKE]
    assert isinstance(info.value, KilnError)


def _blob(path) -> bytes:
    """The module blob of an exported library, read without running any of its code."""
    lib = NativeLibrary(path, isa_features=())  # told it needs nothing: loads anywhere
    payload = lib.module_blob()
    assert payload is not None
    return payload


def test_missing_avx512_is_named_and_nothing_runs(tmp_path, monkeypatch, needs_cpuinfo, x):
    factory = _factory()
    path = tmp_path / "model.so"
    factory.export_library(path)
    required = sorted(factory.lib.isa_features)
    if not required:
        pytest.skip("the native build records no features on this machine")
    dropped = {"avx512f", "avx512bw"} & set(required) or {required[-1]}
    have = cpu_features() or frozenset()
    monkeypatch.setattr(native_rt, "cpu_features", lambda: frozenset(have - dropped))
    with pytest.raises(CPUFeatureError) as info:
        load_module(path)
    assert set(info.value.missing) == dropped
    if "avx512f" in dropped:
        assert "needs avx512f, avx512bw" in str(info.value)
        assert "-mattr=-avx512f" in str(info.value)


def test_in_process_build_for_another_cpu_exports_but_does_not_run(tmp_path, monkeypatch,
                                                                      needs_cpuinfo, x):
    monkeypatch.setattr(native_rt, "cpu_features", lambda: frozenset({"sse", "sse2"}))
    x_var = relay.var("x", shape=(4, 8), dtype="float32")
    func = relay.Function([x_var], relay.nn.relu(x_var * relay.const(np.float32(3.0))))
    with pytest.warns(UserWarning, match="not run here"), \
            relay.transform.PassContext(opt_level=3):
        factory = relay.build(IRModule.from_expr(func), target="llvm -mcpu=haswell")
    assert "avx2" in factory.lib.missing_features
    with pytest.raises(CPUFeatureError, match="avx2"):
        factory["default"](cpu())
    factory.export_library(tmp_path / "haswell.so")  # building for another CPU still works
    monkeypatch.undo()
    loaded = load_module(tmp_path / "haswell.so")  # this CPU has AVX2
    assert "avx2" in loaded.metadata["isa_features"]
    np.testing.assert_allclose(_run(loaded, x), np.maximum(3 * x, 0), rtol=1e-6)


def test_unknown_cpu_features_skip_the_check(tmp_path, monkeypatch, x):
    path = _export_requiring(_factory(), tmp_path / "model.so", {FAKE})
    monkeypatch.setattr(native_rt, "cpu_features", lambda: None)
    assert missing_cpu_features([FAKE, "avx512f"]) == []
    np.testing.assert_allclose(_run(load_module(path), x), _expected(x), rtol=1e-5, atol=1e-5)


def test_cpuinfo_reader(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse sse2 avx avx2 fma\n\nprocessor\t: 1\n")
    assert native_rt._read_cpuinfo_flags(info) == frozenset(
        {"fpu", "sse", "sse2", "avx", "avx2", "fma"})
    assert native_rt._read_cpuinfo_flags(tmp_path / "absent") is None
    arm = tmp_path / "cpuinfo_arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm\n")
    assert native_rt._read_cpuinfo_flags(arm) == frozenset({"fp", "asimd", "evtstrm"})


def test_kiln_run_prints_one_line_and_exits_1(tmp_path, needs_cpuinfo, x):
    path = _export_requiring(_factory(), tmp_path / "model.so", {FAKE})
    np.savez(tmp_path / "in.npz", x=x)
    result = subprocess.run([sys.executable, "-m", "kiln", "run", str(path), "--inputs",
                             str(tmp_path / "in.npz")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert FAKE in lines[0] and "model.so" in lines[0]


def test_kiln_run_refuses_avx512_library_on_a_cpu_without_it(tmp_path, x, needs_cpuinfo):
    """The CPU feature reader patched in a child process: the CLI names avx512f."""
    path = tmp_path / "wide.so"
    with relay.transform.PassContext(opt_level=3):
        x_var = relay.var("x", shape=(4, 8), dtype="float32")
        factory = relay.build(IRModule.from_expr(relay.Function([x_var], relay.nn.relu(x_var))),
                              target="llvm -mcpu=skylake-avx512")
    if factory.lib.missing_features:
        pytest.skip("this CPU has no AVX-512")
    factory.export_library(path)
    np.savez(tmp_path / "in.npz", x=x)
    code = textwrap.dedent(f"""
        import sys
        import kiln.runtime.native as n
        have = n.cpu_features()
        n.cpu_features = lambda: frozenset(f for f in have if not f.startswith("avx512"))
        from kiln.cli.main import main
        sys.exit(main(["run", {str(path)!r}, "--inputs", {str(tmp_path / "in.npz")!r}]))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "wide.so needs avx512f" in lines[0] and "skylake-avx512" in lines[0]
