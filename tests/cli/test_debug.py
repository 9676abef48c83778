"""``kiln debug`` on a small ONNX model: the table, the dumps, the comparison and exit codes.

Oracles: TVM's table header and dump file names (tests/fixtures/tvm), onnxruntime for the model's
intermediate tensors (through ``--compare``), and a weight changed by the test itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.cli.main import main
from kiln.runtime.factory import GraphExecutorFactoryModule
from tests.debug._models import INPUT_SHAPE, save_resnet_onnx

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tvm"
TVM_HEADER = (FIXTURES / "debug_stdout.txt").read_text().splitlines()[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli")
    model = save_resnet_onnx(root / "model.onnx")
    x = np.random.RandomState(3).standard_normal(INPUT_SHAPE).astype(np.float32)
    np.savez(root / "x.npz", data=x)
    return {"root": root, "model": model, "inputs": root / "x.npz"}


def _split(line: str) -> list[str]:
    return re.split(r"  +", line.rstrip())


def _debug(files: dict[str, Path], *extra: str, model: Path | None = None) -> int:
    return main(["debug", str(model or files["model"]), "--inputs", str(files["inputs"]),
                 "--target", "numpy", "--number", "1", "--min-repeat-ms", "0", *extra])


def test_table_dump_trace_and_json(files: dict[str, Path], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc = _debug(files, "--dump-root", str(tmp_path / "d"), "--json", str(tmp_path / "r.json"),
                "--trace", str(tmp_path / "trace.json"))
    out = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert _split(out[0]) == _split(TVM_HEADER)
    assert _split(out[1])[0] == "---------"
    total = next(i for i, line in enumerate(out) if line.startswith("Total_time"))
    times = [float(_split(line)[2]) for line in out[2:total]]
    assert times == sorted(times, reverse=True)
    device = tmp_path / "d" / "_tvmdbg_device_CPU_0"
    assert sorted(p.name for p in device.iterdir()) == sorted(
        p.name for p in (FIXTURES / "debug_dump" / "_tvmdbg_device_CPU_0").iterdir())
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace == json.loads((device / "_tvmdbg_execution_trace.json").read_text())
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["dump_path"] == str(device)
    assert sorted(r["node"] for r in report["rows"]) == sorted(_split(line)[0] for line in out[2:total])


def test_graph_order_and_timestamps(files: dict[str, Path], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert _debug(files, "--dump-root", str(tmp_path), "--sort", "graph", "--timestamps") == 0
    out = capsys.readouterr().out.splitlines()
    assert _split(out[0])[4:6] == ["Start Time", "End Time"]
    assert not any(line.startswith("Total_time") for line in out)
    graph = json.loads((tmp_path / "_tvmdbg_device_CPU_0" / "_tvmdbg_graph_dump.json").read_text())
    ops = [n["name"] for n in graph["nodes"] if n["op"] != "param"]
    assert [_split(line)[0] for line in out[2:2 + len(ops)]] == ops


@pytest.mark.parametrize("kind", ["onnxruntime", "interpreter"])
def test_compare_without_divergence(files: dict[str, Path], tmp_path: Path, kind: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    rc = _debug(files, "--dump-root", str(tmp_path), "--compare", kind, "--json",
                str(tmp_path / "r.json"))
    out = capsys.readouterr().out
    assert rc == 0 and "no divergence" in out
    report = json.loads((tmp_path / "r.json").read_text())["compare"]
    assert report["first_divergence"] is None and report["compared"] == len(report["nodes"])


def test_artifact_with_a_changed_weight_reports_the_divergence(
        files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mod, params = relay.frontend.from_onnx(str(files["model"]), shape={"data": INPUT_SHAPE})
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="numpy", params=params)
    built = {k: v.numpy() for k, v in lib.get_params().items()}
    name = next(k for k, v in built.items() if v.ndim == 4 and k != "p0")
    built[name] = built[name] + 0.5
    reader = next(n.name for n in lib.graph.nodes
                  if any(lib.graph.nodes[e.node_id].name == name for e in n.inputs))
    artifact = tmp_path / "faulty.so"
    GraphExecutorFactoryModule(lib.graph_json, lib.get_lib(), built).export_library(str(artifact))
    rc = _debug(files, "--dump-root", str(tmp_path / "d"), "--compare", "onnxruntime",
                "--reference-model", str(files["model"]), "--json", str(tmp_path / "r.json"),
                model=artifact)
    out = capsys.readouterr().out
    assert rc == 1
    marked = [line for line in out.splitlines() if line.startswith(">>")]
    assert len(marked) == 1 and reader in marked[0]
    assert "FIRST DIVERGENCE: node" in out and reader in out
    data = json.loads((tmp_path / "r.json").read_text())["compare"]
    assert data["first_divergence"]["node"] == reader


def test_artifact_needs_a_source_model_to_compare(files: dict[str, Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    mod, params = relay.frontend.from_onnx(str(files["model"]), shape={"data": INPUT_SHAPE})
    with kiln.transform.PassContext(opt_level=3):
        relay.build(mod, target="numpy", params=params).export_library(str(tmp_path / "m.so"))
    rc = _debug(files, "--dump-root", str(tmp_path / "d"), "--compare", "interpreter",
                model=tmp_path / "m.so")
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("kiln debug: error:") and "onnx" in err
    assert len(err.strip().splitlines()) == 1


def test_npy_dump_with_filter_and_cap(files: dict[str, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    rc = _debug(files, "--dump-root", str(tmp_path), "--npy", "--filter", "block2*",
                "--max-bytes", "5000")
    assert rc == 0
    folder = tmp_path / "_tvmdbg_device_CPU_0" / "npy"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["tensors"] and manifest["total_bytes"] <= 5000
    assert {s["reason"] for s in manifest["skipped"]} == {"filter", "size cap"}
    for entry in manifest["tensors"]:
        assert any(s.startswith("block2") for s in entry["source_names"])
        assert np.load(folder / entry["file"]).shape == tuple(entry["shape"])
    assert f"{len(manifest['tensors'])} tensors" in capsys.readouterr().out


def test_missing_inputs_file_is_a_one_line_error(files: dict[str, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["debug", str(files["model"]), "--inputs", str(tmp_path / "none.npz")])
    err = capsys.readouterr().err
    assert rc == 1 and "none.npz" in err and len(err.strip().splitlines()) == 1


def test_profile_reconciles_node_times_with_the_whole_graph(
        files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _debug(files, "--dump-root", str(tmp_path / "d"), "--profile",
                  "--json", str(tmp_path / "r.json")) == 0
    out = capsys.readouterr().out
    line = next(li for li in out.splitlines() if li.startswith("sum of node times"))
    profile = json.loads((tmp_path / "r.json").read_text())["profile"]
    assert f"{profile['node_sum_us']:.3f} us" in line and f"{profile['gap_us']:+.3f} us" in line
    assert profile["node_sum_us"] == pytest.approx(sum(r["mean_us"] for r in profile["rows"]))
    assert len(profile["gaps_us"]) == 3 and profile["end_to_end_us"] > 0
