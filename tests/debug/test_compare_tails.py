"""Layer comparison through value-preserving tails: no false divergence, planted faults named.

A fused kernel whose last operations only move data (a reshape after a ReLU, an unsqueeze, a
transpose, a flatten, a concat) holds the value of the operation below them; the comparison must
match it with that operation's reference tensor, not with the tensor its last name points at
(issue 18: a voice-activity model reported a false ``FIRST DIVERGENCE`` on ``fused_nn_relu_reshape``
and on an LSTM cell fused with a ``Gather`` of its state).

Oracles: onnxruntime on the source ONNX model and Kiln's interpreter on the unoptimised module;
faults are planted by building Kiln's module from a copy of the model with one weight changed
while the reference runs the original.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import kiln
from kiln import relay
from kiln.debug import compare
from tests.debug._models import native_available
from tests.debug._vad import HIDDEN, SAMPLES, TAILS, make_tail_onnx, make_vad_onnx, vad_inputs

TARGETS = ["numpy", pytest.param("c", marks=[pytest.mark.requires_cc, pytest.mark.skipif(
    not native_available(), reason="the C backend (kiln.codegen.build_native) is not available")])]
REFERENCES = ["onnxruntime", "interpreter"]
VAD_SHAPES = {"input": (1, SAMPLES), "state": (2, 1, HIDDEN)}
ROOT = Path(__file__).parents[2]


def _build(model: onnx.ModelProto, target: str, shapes: Mapping[str, tuple[int, ...]]
           ) -> tuple[Any, kiln.IRModule, dict[str, Any]]:
    mod, params = relay.frontend.from_onnx(model, shape=shapes)
    with kiln.transform.PassContext(opt_level=3):
        return relay.build(mod, target=target, params=params), mod, params


def _compare(lib: Any, kind: str, model: onnx.ModelProto, mod: kiln.IRModule,
             params: dict[str, Any], inputs: dict[str, np.ndarray]) -> Any:
    if kind == "onnxruntime":
        return compare(lib, model, inputs)
    return compare(lib, mod, inputs, reference_params=params)


def _node(report: Any, source: str) -> Any:
    return next(n for n in report.nodes if source in n.source_nodes)


@pytest.fixture(scope="module")
def vad_model() -> onnx.ModelProto:
    return make_vad_onnx()


@pytest.fixture(scope="module", params=TARGETS)
def vad_built(request: pytest.FixtureRequest, vad_model: onnx.ModelProto
              ) -> tuple[Any, kiln.IRModule, dict[str, Any]]:
    return _build(vad_model, request.param, VAD_SHAPES)


@pytest.mark.parametrize("kind", REFERENCES)
def test_vad_like_model_compares_clean(kind: str, vad_model: onnx.ModelProto,
                                       vad_built: tuple[Any, kiln.IRModule, dict[str, Any]]) -> None:
    lib, mod, params = vad_built
    report = _compare(lib, kind, vad_model, mod, params, vad_inputs())
    assert report.first_divergence is None, report.summary()
    assert report.first_nonfinite is None
    # the ReLU whose output the build reshapes (the unsqueeze sunk below it) is compared with the
    # ReLU's tensor, not the unsqueeze's (which holds the values before the ReLU)
    relu = _node(report, "/model/decoder/decoder/1/Relu")
    assert relu.status == "ok" and relu.reference is not None
    assert relu.reference.startswith("/model/decoder/decoder/1/Relu")
    # every encoder layer, the spectrum, the outputs: compared and within tolerance
    for source in ["/model/stft/Sqrt", "/model/encoder/encoder.3/activation/Relu",
                   "/model/ReduceMean", "/model/Concat"]:
        node = _node(report, source)
        assert node.status == "ok" and node.max_abs_err is not None and node.max_abs_err < 1e-4
    # LSTM internals have no reference: partial, or one of its several outputs (unknown which)
    for node in report.nodes:
        if node.source_nodes == ["/model/decoder/rnn/LSTM"]:
            assert node.status == "no reference"
            assert node.reason.startswith(("partial", "ambiguous")), node.reason
    assert report.compared >= 14


@pytest.mark.parametrize("kind", REFERENCES)
def test_vad_transposed_into_the_lstm_compares_clean(kind: str) -> None:
    model = make_vad_onnx(transpose_in=True)
    lib, mod, params = _build(model, "numpy", VAD_SHAPES)
    report = _compare(lib, kind, model, mod, params, vad_inputs())
    assert report.first_divergence is None, report.summary()
    assert _node(report, "/model/decoder/decoder/1/Relu").status == "ok"


PLANTED = [
    ("model.stft.forward_basis_buffer", "/model/stft/Conv"),
    ("model.encoder.0.reparam_conv.weight", "/model/encoder/encoder.0/reparam_conv/Conv"),
    ("model.encoder.2.reparam_conv.weight", "/model/encoder/encoder.2/reparam_conv/Conv"),
    ("model.decoder.decoder.2.weight", "/model/decoder/decoder/2/Conv"),
    # the LSTM's own nodes have no reference (see above): the first layer after it is named
    ("onnx::LSTM_W", "/model/decoder/decoder/1/Relu"),
]


@pytest.mark.parametrize(("weight", "source"), PLANTED)
def test_planted_fault_in_the_vad_model_is_named(weight: str, source: str,
                                                 vad_model: onnx.ModelProto,
                                                 vad_built: tuple[Any, kiln.IRModule, dict[str, Any]]
                                                 ) -> None:
    target = "c" if vad_built[0].get_lib().type_key == "library" else "numpy"
    faulty, _, _ = _build(make_vad_onnx(perturb=weight), target, VAD_SHAPES)
    _, mod, params = vad_built  # the reference is the original model
    for kind in REFERENCES:
        report = _compare(faulty, kind, vad_model, mod, params, vad_inputs())
        first = report.first_divergence
        assert first is not None, (kind, report.summary())
        assert source in first.source_nodes, (kind, first.node_index, first.source_nodes)
        assert first.max_abs_err is not None and first.max_abs_err > 1e-3
        assert not any(n.diverged for n in report.nodes if n.node_index < first.node_index)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("tail", TAILS)
def test_tails_compare_clean_and_name_a_fault(tail: str, target: str) -> None:
    model = make_tail_onnx(tail)
    shapes = {"x": (1, 4, 8)}
    x = {"x": np.random.RandomState(3).standard_normal((1, 4, 8)).astype(np.float32)}
    lib, mod, params = _build(model, target, shapes)
    for kind in REFERENCES:
        report = _compare(lib, kind, model, mod, params, x)
        assert report.first_divergence is None, (kind, report.summary())
        assert report.nodes[-1].status == "ok", (kind, report.nodes[-1].reason)
        relu = _node(report, "relu1")
        assert relu.status == "ok", (kind, relu.reason)
        assert relu.reference is not None and relu.reference.startswith("relu1")
    if tail == "split":  # a two-output node: each output against the Split output of its index
        parts = [n for n in report.nodes if n.source_nodes[-1:] == ["split"]]
        assert [(n.status, n.reference) for n in parts] == [("ok", "split:split.0"),
                                                             ("ok", "split:split.1")]
    # the same layers with conv1's weight changed: conv1's node is the first divergence
    faulty_model = onnx.ModelProto()
    faulty_model.CopyFrom(model)
    w1 = next(t for t in faulty_model.graph.initializer if t.name == "w1")
    value = onnx.numpy_helper.to_array(w1).copy()
    value[0] += 0.5
    w1.CopyFrom(onnx.numpy_helper.from_array(value, "w1"))
    faulty, _, _ = _build(faulty_model, target, shapes)
    for kind in REFERENCES:
        first = _compare(faulty, kind, model, mod, params, x).first_divergence
        assert first is not None and "conv1" in first.source_nodes, kind


@pytest.fixture(scope="module")
def vad_files(tmp_path_factory: pytest.TempPathFactory, vad_model: onnx.ModelProto) -> Path:
    folder = tmp_path_factory.mktemp("vad")
    onnx.save(vad_model, str(folder / "vad.onnx"))
    np.savez(folder / "in.npz", **vad_inputs())
    return folder


def _kiln(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kiln", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=_env())


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "80"
    return env


@pytest.mark.parametrize("kind", REFERENCES)
def test_cli_debug_compare_on_the_vad_model_exits_0(kind: str, vad_files: Path) -> None:
    # relative dump root: the printed "dump: <path>" line must not depend on the temp path's
    # length (longer under pytest-xdist, or with a longer user name)
    done = _kiln("debug", "vad.onnx", "--inputs", "in.npz", "--compare", kind, "--dump-root",
                 f"dump_{kind}", cwd=vad_files)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "no divergence" in done.stdout
    assert "FIRST DIVERGENCE" not in done.stdout
    too_wide = [line for line in done.stdout.splitlines() if len(line) > 80]
    assert not too_wide, too_wide


def test_cli_debug_names_the_planted_fault(vad_files: Path) -> None:
    target = "c" if native_available() else "numpy"
    faulty, _, _ = _build(make_vad_onnx(perturb="model.encoder.2.reparam_conv.weight"), target,
                          VAD_SHAPES)
    artifact = vad_files / ("faulty.so" if target == "c" else "faulty.kiln")
    faulty.export_library(str(artifact))
    done = _kiln("debug", artifact.name, "--inputs", "in.npz", "--compare", "onnxruntime",
                 "--reference-model", "vad.onnx", "--dump-root", str(vad_files / "dump_faulty"),
                 "--width", "0", cwd=vad_files)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("FIRST DIVERGENCE"))
    assert "/model/encoder/encoder.2/reparam_conv/Conv" in line


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", ["vad", *TAILS])
def test_without_fused_functions_no_false_divergence(case: str, target: str) -> None:
    """A loaded artifact keeps no fused functions: the graph JSON alone must not cry wolf."""
    from kiln.contrib.debugger.debug_executor import create_from_factory
    from kiln.debug import compare_outputs, onnx_reference

    if case == "vad":
        model, shapes, inputs = make_vad_onnx(), VAD_SHAPES, vad_inputs()
    else:
        model, shapes = make_tail_onnx(case), {"x": (1, 4, 8)}
        inputs = {"x": np.random.RandomState(3).standard_normal((1, 4, 8)).astype(np.float32)}
    lib, _, _ = _build(model, target, shapes)
    executor = create_from_factory(lib)
    executor.set_input(**inputs)
    outputs, _ = executor.run_per_layer()
    nodes = compare_outputs(executor.graph, outputs, onnx_reference(model, inputs), None)
    assert not any(n.diverged for n in nodes), [(n.node_index, n.reference) for n in nodes
                                                  if n.diverged]
    relu = "/model/encoder/encoder.3/activation/Relu" if case == "vad" else "relu1"
    assert next(n for n in nodes if relu in n.source_nodes).status == "ok"
    for n in nodes:
        if n.status == "no reference" and n.func_name.endswith(("_reshape", "_transpose")):
            assert "fused function is not available" in n.reason
