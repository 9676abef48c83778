"""Vector width, compiler flags and recorded CPU features follow the target (issue 17):
``llvm -mcpu=znver3`` or ``-mattr=+avx2,+fma,-avx512f`` builds an AVX2 library on any x86 machine,
whatever ``-march=native`` would give."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln import relay
from kiln.codegen.compiler import compile_cached, compiler_flags
from kiln.codegen.native import COMPILE_FLAGS, target_compile_flags
from kiln.contrib import graph_executor
from kiln.runtime.native import cpu_features
from kiln.runtime.ndarray import cpu
from kiln.target import Target, TargetError, native_isa

pytestmark = [
    pytest.mark.requires_cc,
    pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                       reason="instruction-set targets are checked on x86-64"),
]

AVX2_TARGETS = ["llvm -mattr=+avx2,+fma,-avx512f", "llvm -mcpu=znver3"]


@pytest.mark.parametrize(("target", "flags", "vector_bytes", "has", "lacks"), [
    ("llvm -mcpu=znver3", ("-march=znver3",), 32, {"avx2", "fma"}, {"avx512f"}),
    ("llvm -mcpu=haswell", ("-march=haswell",), 32, {"avx2", "fma"}, {"avx512f"}),
    ("llvm -mcpu=core-avx2", ("-march=core-avx2",), 32, {"avx2"}, {"avx512f"}),
    ("llvm -mcpu=x86-64-v3", ("-march=x86-64-v3",), 32, {"avx2", "fma"}, {"avx512f"}),
    ("llvm -mcpu=x86-64", ("-march=x86-64",), 16, {"sse2"}, {"avx", "avx2"}),
    ("llvm -mcpu=skylake-avx512", ("-march=skylake-avx512",), 64, {"avx512f", "avx512bw"},
     set()),
    ("llvm -mcpu=cascadelake", ("-march=cascadelake",), 64, {"avx512f", "avx512_vnni"}, set()),
    ("llvm -mattr=+avx2,+fma,-avx512f", ("-march=x86-64", "-mavx2", "-mfma", "-mno-avx512f"), 32,
     {"avx2", "fma"}, {"avx512f"}),
    ("llvm -mcpu=skylake-avx512 -mattr=-avx512f", ("-march=skylake-avx512", "-mno-avx512f"), 32,
     {"avx2", "fma"}, {"avx512f", "avx512bw", "avx512vl"}),
])
def test_target_chooses_flags_width_and_features(target, flags, vector_bytes, has, lacks):
    isa = Target(target).isa()
    assert isa.flags == flags
    assert isa.vector_bytes == vector_bytes
    assert Target(target).vector_width("float32") == vector_bytes // 4
    assert has <= isa.features
    assert not lacks & isa.features
    assert isa.vector_registers == (32 if vector_bytes == 64 else 16)
    assert not isa.native


def test_a_cpu_the_compiler_does_not_know_is_approximated_with_its_extensions():
    # GCC 12 has no znver4: the closest CPU it knows plus Zen 4's AVX-512 extensions
    isa = Target("llvm -mcpu=znver4").isa()
    assert isa.vector_bytes == 64
    assert {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"} <= isa.features
    assert isa.flags[0].startswith("-march=znver")


def test_default_and_native_targets_compile_for_this_machine():
    for text in ("c", "llvm", "llvm -mcpu=native"):
        isa = Target(text).isa()
        assert isa.flags == ("-march=native",) and isa.native
        assert isa == native_isa()
    assert target_compile_flags("c") == (*COMPILE_FLAGS, "-march=native")
    assert "-march=native" in compiler_flags(COMPILE_FLAGS)
    assert "-march=native" not in compiler_flags(target_compile_flags("llvm -mcpu=znver3"))
    # -mcpu=native keeps -mattr on top of it
    assert Target("llvm -mcpu=native -mattr=-avx512f").isa().flags == ("-march=native",
                                                                       "-mno-avx512f")


def test_native_features_are_what_this_cpu_reports():
    """The features recorded for -march=native are all in /proc/cpuinfo (no false refusal)."""
    have = cpu_features()
    if have is None:
        pytest.skip("no /proc/cpuinfo flags")
    assert native_isa().features, "the compiler's -march=native macros gave no features"
    assert native_isa().features <= have
    assert ("avx512f" in native_isa().features) == ("avx512f" in have)


def test_an_extension_the_compiler_rejects_is_a_target_error():
    with pytest.raises(TargetError, match="-mnot-an-extension"):
        Target("llvm -mattr=+not-an-extension").isa()


def test_compile_cache_key_includes_the_target_flags():
    src = "float kiln_isa_probe(float a, float b, float c) { return a * b + c; }\n"
    native = compile_cached(src, "isa_key", flags=target_compile_flags("c"))
    avx2 = compile_cached(src, "isa_key", flags=target_compile_flags(AVX2_TARGETS[0]))
    znver3 = compile_cached(src, "isa_key", flags=target_compile_flags(AVX2_TARGETS[1]))
    assert len({native, avx2, znver3}) == 3


# --- a small CNN built for AVX2 on this machine -------------------------------------------------

def _small_cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(7)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], group=32),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    inits = [init("w1", 32, 3, 3, 3), init("b1", 32), init("w2", 32, 32, 3, 3), init("b2", 32),
             init("w3", 32, 1, 3, 3), init("b3", 32), init("wf", 10, 32), init("bf", 10)]
    graph = helper.make_graph(
        nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 30, 30])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def cnn():
    ort = pytest.importorskip("onnxruntime")
    model = _small_cnn()
    x = np.random.default_rng(3).standard_normal((1, 3, 30, 30)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return model, x, sess.run(None, {"x": x})[0]


def _build(model, target):
    mod, params = relay.frontend.from_onnx(model, shape={"x": (1, 3, 30, 30)})
    with relay.transform.PassContext(opt_level=3):
        return relay.build(mod, target=target, params=params)


def _run(factory, x):
    gm = graph_executor.GraphModule(factory["default"](cpu()))
    gm.set_input("x", x)
    gm.run()
    return gm.get_output(0).numpy()


def _sources(factory) -> str:
    return "\n".join(p.read_text() for p in factory.lib.sources if p.suffix == ".c")


def _vector_sizes(text: str, ctype: str = "float") -> set[int]:
    """Bytes of the ``ctype`` vector types the C declares (a float64 accumulator of a float32
    schedule may span two registers, which GCC splits)."""
    return {int(n) for n in re.findall(rf"typedef {ctype} \w+ __attribute__\(\(vector_size\((\d+)\)\)\)",
                                       text)}


@pytest.mark.parametrize("target", AVX2_TARGETS)
def test_avx2_build_runs_and_matches_onnxruntime(cnn, target):
    model, x, expected = cnn
    factory = _build(model, target)
    lib = factory.lib
    assert "avx2" in lib.isa_features and "avx512f" not in lib.isa_features
    assert not lib.missing_features  # an AVX2 library runs on an AVX-512 machine
    assert "-mno-avx512f" in lib.compile_flags or "-march=znver3" in lib.compile_flags
    got = _run(factory, x)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))
    # the generated C uses 256-bit float vectors at most, and the machine code no zmm register
    sizes = _vector_sizes(_sources(factory))
    assert 32 in sizes and max(sizes) == 32, sizes
    objdump = shutil.which("objdump")
    if objdump:
        text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(lib.path)],
                              capture_output=True, text=True, check=True).stdout
        assert "%ymm" in text
        assert "%zmm" not in text, "AVX-512 registers in an AVX2 library"
    # the exported metadata records what a CPU must have to run it
    assert "avx2" in _exported_features(factory, model)
    assert "avx512f" not in _exported_features(factory, model)


def _exported_features(factory, model) -> list[str]:
    from kiln.runtime.export import decode_module_blob

    return decode_module_blob(factory.module_blob()).metadata["isa_features"]


def test_native_and_avx2_builds_are_different_cached_libraries(cnn):
    model, x, expected = cnn
    native = _build(model, "llvm")
    avx2 = _build(model, AVX2_TARGETS[0])
    assert native.lib.path != avx2.lib.path
    assert native.lib.isa_features == native_isa().features
    if "avx512f" in native_isa().features:  # an AVX-512 machine: its default build uses zmm
        assert 64 in _vector_sizes(_sources(native))
    np.testing.assert_allclose(_run(native, x), _run(avx2, x), rtol=1e-4,
                               atol=1e-4 * float(np.abs(expected).max()))
