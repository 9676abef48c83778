"""The whole-build cache: a rebuild of an unchanged model comes back without the passes or codegen,
any change of what the build reads is a new build, and what it cannot see is never cached."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import build_cache, relay
from kiln.config import settings
from kiln.contrib import graph_executor
from kiln.ir.module import IRModule
from kiln.target import Target
from kiln.transform import PassContext, PassInstrument

pytestmark = pytest.mark.requires_cc

RNG = np.random.default_rng(7)
W = RNG.standard_normal((8, 3, 3, 3)).astype("float32")
B = RNG.standard_normal(8).astype("float32")
X = RNG.standard_normal((1, 3, 10, 10)).astype("float32")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setattr(settings, "cache_dir", folder)
    monkeypatch.setattr(settings, "build_cache", True)
    return folder


def _model(weight: np.ndarray = W, name: str = "x", source: str = "conv") -> IRModule:
    x = relay.var(name, shape=X.shape, dtype="float32")
    conv = relay.nn.conv2d(x, relay.const(weight), padding=(1, 1), channels=8, kernel_size=(3, 3))
    y = relay.nn.relu(relay.nn.bias_add(conv, relay.const(B)))
    mod = IRModule.from_expr(relay.Function([x], y))
    if source:  # provenance, as importers set it
        main = mod["main"]
        body = main.body
        mod = IRModule.from_expr(relay.Function(main.params, relay.Call(
            body.op, body.args, body.attrs, source_names=(source,))))
    return mod


def _reference(weight: np.ndarray = W) -> np.ndarray:
    xp = np.pad(X, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    out = np.einsum("nchwij,ocij->nohw", windows, weight) + B[None, :, None, None]
    return np.maximum(out, 0)


def _build(mod: IRModule, target: str = "llvm", opt_level: int = 3, **ctx: Any) -> Any:
    with PassContext(opt_level=opt_level, **ctx):
        return relay.build(mod, target=target)


def _run(factory: Any) -> np.ndarray:
    m = graph_executor.GraphModule(factory["default"](kiln.cpu()))
    m.set_input(0, X)
    m.run()
    return np.asarray(m.get_output(0).numpy())


def _hits() -> int:
    return build_cache.counts["hits"]


def test_a_rebuild_comes_from_the_cache_and_computes_the_same() -> None:
    first = _build(_model())
    hits = _hits()
    second = _build(_model())  # a fresh module object with the same content
    assert _hits() == hits + 1
    np.testing.assert_allclose(_run(second), _reference(), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(_run(second), _run(first))
    assert second.graph_json == first.graph_json
    assert second.metadata["passes"] == first.metadata["passes"]
    assert second.get_lib().functions.keys() == first.get_lib().functions.keys()
    assert all(f.checked_type is not None for f in second.get_lib().functions.values())


def test_the_cached_build_exports_and_loads(tmp_path: Path) -> None:
    _build(_model())
    hit = _build(_model())
    hit.export_library(tmp_path / "net.so")
    loaded = kiln.runtime.load_module(tmp_path / "net.so")
    np.testing.assert_allclose(_run(loaded), _reference(), rtol=1e-4, atol=1e-4)


CHANGES: dict[str, Callable[[], object]] = {
    "a weight": lambda: _build(_model(weight=W * 2)),
    "an input name": lambda: _build(_model(name="image")),
    "a source name": lambda: _build(_model(source="layer1/conv")),
    "the opt level": lambda: _build(_model(), opt_level=2),
    "a disabled pass": lambda: _build(_model(), disabled_pass=["FoldScaleAxis"]),
    "a pass config": lambda: _build(_model(), config={"tir.disable_vectorize": True}),
    "the instruction set": lambda: _build(_model(), target="llvm -mcpu=znver3"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_any_change_of_what_the_build_reads_is_a_new_build(change: str) -> None:
    _build(_model())
    hits = _hits()
    factory = CHANGES[change]()
    assert _hits() == hits, f"changing {change} reused the old build"
    want = _reference(W * 2) if change == "a weight" else _reference()
    np.testing.assert_allclose(_run(factory), want, rtol=1e-4, atol=1e-4)


def test_the_key_covers_threads_params_and_module_name(monkeypatch: pytest.MonkeyPatch) -> None:
    mod, target = _model(), Target("llvm")
    with PassContext(opt_level=3):
        base = build_cache.build_key(mod, None, target, "default")
        assert base == build_cache.build_key(_model(), None, target, "default")
        assert base != build_cache.build_key(mod, None, target, "other")
        assert base != build_cache.build_key(mod, {"x": X}, target, "default")
        assert (build_cache.build_key(mod, {"x": X}, target, "default")
                != build_cache.build_key(mod, {"x": X + 1}, target, "default"))
        monkeypatch.setattr(settings, "num_threads", settings.num_threads + 1)
        assert base != build_cache.build_key(mod, None, target, "default")


def test_an_operator_overridden_outside_kiln_changes_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln.op.registry import get_op_def

    mod, target = _model(), Target("llvm")
    with PassContext(opt_level=3):
        base = build_cache.build_key(mod, None, target, "default")
        op_def = get_op_def("nn.relu")

        def my_relu(arrays: list[np.ndarray], attrs: object, ty: object) -> np.ndarray:
            return np.maximum(arrays[0], 0)

        monkeypatch.setattr(op_def, "reference", my_relu)
        assert build_cache.build_key(mod, None, target, "default") != base


class _Counter(PassInstrument):
    def __init__(self) -> None:
        self.passes = 0

    def run_before_pass(self, mod: IRModule, info: object) -> None:
        self.passes += 1


def test_builds_it_cannot_see_through_are_never_cached(monkeypatch: pytest.MonkeyPatch,
                                                       cache_dir: Path) -> None:
    _build(_model())
    hits = _hits()
    counter = _Counter()  # instruments expect the passes to run
    _build(_model(), instruments=[counter])
    assert counter.passes > 0
    _build(_model(), target="numpy")  # not a native library
    _build(_model(), target="numpy")
    monkeypatch.setattr(settings, "build_cache", False)  # KILN_BUILD_CACHE=0
    _build(_model())
    assert _hits() == hits
    with PassContext(opt_level=3):
        assert build_cache.build_key(_model(), None, Target("numpy"), "default") is None


def test_pruned_kernels_or_a_damaged_entry_mean_a_rebuild(cache_dir: Path) -> None:
    _build(_model())
    build_cache.wait()  # the entry is written in the background
    shutil.rmtree(cache_dir / "compile")
    hits = _hits()
    np.testing.assert_allclose(_run(_build(_model())), _reference(), rtol=1e-4, atol=1e-4)
    assert _hits() == hits
    build_cache.wait()
    (entry,) = (cache_dir / "builds").iterdir()
    (entry / "params.bin").write_bytes(b"garbage")
    np.testing.assert_allclose(_run(_build(_model())), _reference(), rtol=1e-4, atol=1e-4)
    assert _hits() == hits
    _build(_model())  # the damaged entry was replaced
    assert _hits() == hits + 1


def test_prune_keeps_the_most_recent_builds(cache_dir: Path) -> None:
    for scale in (1, 2, 3):
        _build(_model(weight=W * scale))
    build_cache.wait()
    assert len(list((cache_dir / "builds").iterdir())) == 3
    assert build_cache.prune(max_bytes=0) == 3
    assert build_cache.clear() == 0


def test_a_second_process_reuses_the_build(tmp_path: Path, cache_dir: Path) -> None:
    script = tmp_path / "build.py"
    script.write_text(
        "import sys, numpy as np, kiln\n"
        "from kiln import relay, build_cache\n"
        "x = relay.var('x', shape=(4, 16), dtype='float32')\n"
        "w = relay.const(np.arange(64, dtype='float32').reshape(4, 16))\n"
        "mod = kiln.IRModule.from_expr(relay.Function([x], relay.nn.dense(x, w)))\n"
        "with kiln.transform.PassContext(opt_level=3):\n"
        "    relay.build(mod, target='llvm')\n"
        "print(build_cache.counts['hits'])\n")
    env = {**os.environ, "KILN_CACHE_DIR": str(cache_dir)}
    env.pop("KILN_BUILD_CACHE", None)
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           env=env, timeout=300, check=True).stdout.split() for _ in range(2)]
    assert runs == [["0"], ["1"]]


def test_kiln_compile_says_when_it_reused_a_build(tmp_path: Path, cache_dir: Path) -> None:
    import json

    model = Path(kiln.__file__).parent / "data" / "digits_cnn.onnx"
    env = {**os.environ, "KILN_CACHE_DIR": str(cache_dir)}
    env.pop("KILN_BUILD_CACHE", None)

    def compile_(*extra: str) -> str:
        cmd = [sys.executable, "-m", "kiln", "compile", str(model), "-o", str(tmp_path / "m.so"),
               "--input-shapes", "image:4x1x8x8", *extra]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300,
                              check=True).stdout

    assert json.loads(compile_("--json"))["build_cached"] is False
    assert "(reused from the build cache)" in compile_()
    loaded = kiln.runtime.load_module(tmp_path / "m.so")
    assert len(loaded.graph.nodes) > 1
