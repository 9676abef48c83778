"""``kiln debug`` on a small ONNX model: the table, the dumps, the comparison and exit codes.

Oracles: TVM's table header and dump file names (tests/fixtures/tvm), onnxruntime for the model's
intermediate tensors (through ``--compare``), a weight changed by the test itself, and the ONNX
model's own node names for the source-layer column. The command-line tests run ``python -m kiln``
with ``COLUMNS`` and an empty ``TMPDIR`` of their own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.cli.main import main
from kiln.runtime.factory import GraphExecutorFactoryModule
from kiln.runtime.table import strip_kernel_prefix
from tests.cli._long_names import LAYERS, save_long_names_onnx
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


def _json(files: dict[str, Path], capsys: pytest.CaptureFixture[str], *extra: str,
          model: Path | None = None) -> tuple[int, dict[str, Any]]:
    rc = _debug(files, "--json", *extra, model=model)
    return rc, json.loads(capsys.readouterr().out)


def test_tvm_table_dump_trace_and_json(files: dict[str, Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    rc = _debug(files, "--dump-root", str(tmp_path / "d"), "--tvm-table",
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
    assert trace["traceEvents"] and {e["ph"] for e in trace["traceEvents"]} == {"B", "E"}
    assert f"dump: {device}" in out and f"trace: {tmp_path / 'trace.json'}" in out
    rc, report = _json(files, capsys, "--dump-root", str(tmp_path / "d"))
    assert rc == 0 and report["dump_path"] == str(device)
    assert sorted(r["node"] for r in report["rows"]) == sorted(_split(line)[0] for line in out[2:total])


def test_graph_order_and_timestamps(files: dict[str, Path], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert _debug(files, "--dump-root", str(tmp_path), "--sort", "graph", "--timestamps",
                  "--tvm-table") == 0
    out = capsys.readouterr().out.splitlines()
    assert _split(out[0])[4:6] == ["Start Time", "End Time"]
    assert not any(line.startswith("Total_time") for line in out)
    graph = json.loads((tmp_path / "_tvmdbg_device_CPU_0" / "_tvmdbg_graph_dump.json").read_text())
    ops = [n["name"] for n in graph["nodes"] if n["op"] != "param"]
    assert [_split(line)[0] for line in out[2:2 + len(ops)]] == ops


@pytest.mark.parametrize("kind", ["onnxruntime", "interpreter"])
def test_compare_without_divergence(files: dict[str, Path], tmp_path: Path, kind: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    rc = _debug(files, "--compare", kind)
    out = capsys.readouterr().out
    assert rc == 0 and "no divergence" in out
    rc, data = _json(files, capsys, "--compare", kind)
    report = data["compare"]
    assert rc == 0
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
    compare = ("--compare", "onnxruntime", "--reference-model", str(files["model"]))
    rc = _debug(files, *compare, model=artifact)
    out = capsys.readouterr().out
    assert rc == 1
    marked = [line for line in out.splitlines() if line.startswith(">>")]
    assert len(marked) == 1 and strip_kernel_prefix(reader) in marked[0]
    assert "FIRST DIVERGENCE: node" in out and reader in out
    rc, data = _json(files, capsys, *compare, model=artifact)
    assert rc == 1 and data["compare"]["first_divergence"]["node"] == reader


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
    rc, data = _json(files, capsys, "--profile")
    profile = data["profile"]
    assert rc == 0
    assert profile["node_sum_us"] == pytest.approx(sum(r["mean_us"] for r in profile["rows"]))
    assert len(profile["gaps_us"]) == 3 and profile["end_to_end_us"] > 0
    assert _debug(files, "--profile") == 0
    line = next(li for li in capsys.readouterr().out.splitlines()
                if li.startswith("sum of node times"))
    assert " us, end-to-end " in line and "thread(s)" in line


# --- through the command line: width, source layers, --json, files left behind, no compiler ---

@pytest.fixture(scope="module")
def long_names(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return save_long_names_onnx(tmp_path_factory.mktemp("long_names"))


def _kiln(files: dict[str, Path], tmp_path: Path, *extra: str, target: str | None = "numpy",
          columns: int = 80, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m kiln debug`` with COLUMNS set and an empty TMPDIR of its own."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "kiln", "debug", str(files["model"]), "--inputs",
           str(files["inputs"]), "--number", "1", "--min-repeat-ms", "0", *extra]
    if target:
        cmd += ["--target", target]
    full_env = {**os.environ, "COLUMNS": str(columns), "TMPDIR": str(tmp), **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=300,
                          cwd=tmp_path)


def _matches(shown: str, full: str) -> bool:
    """``shown`` is ``full``, or ``full`` shortened in the middle (kernel prefix maybe dropped)."""
    if shown == full:
        return True
    full = re.sub(r"^tvmgen_.*?_(?=fused_)", "", full)
    if shown == full:
        return True
    head, sep, tail = shown.partition("...")
    return bool(sep) and full.startswith(head) and full.endswith(tail) and \
        len(head) + len(tail) < len(full)


def test_table_fits_the_terminal_and_shows_each_node_once_with_its_layers(
        long_names: dict[str, Path], tmp_path: Path) -> None:
    proc = _kiln(long_names, tmp_path, "--timestamps")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    header = _split(lines[0])
    assert header[:2] == ["#", "Node"] and header[-1] == "Source" and "Ops" not in header
    rows = json.loads(_kiln(long_names, tmp_path, "--json").stdout)["rows"]
    table = {int(c[0]): c for c in (_split(line) for line in lines[2:]) if c[0].isdigit()}
    assert sorted(table) == sorted(r["index"] for r in rows)
    for r in rows:
        cells = table[r["index"]]
        assert _matches(cells[1], r["node"]) and r["node"] not in cells[2:]
        assert _matches(cells[-1], ",".join(r["source_names"]) or "-")
    # every ONNX layer is named somewhere, in full in the JSON
    assert {s for r in rows for s in r["source_names"]} == set(LAYERS)
    assert any("..." in line for line in lines)  # the names needed shortening at 80 columns
    wide = _kiln(long_names, tmp_path, "--width", "0").stdout.splitlines()
    assert any(line.endswith(",".join(r["source_names"])) for r in rows for line in wide)
    assert not any("..." in line for line in wide)


def test_json_is_all_of_stdout_and_leaves_no_files(long_names: dict[str, Path],
                                                   tmp_path: Path) -> None:
    proc = _kiln(long_names, tmp_path, "--json", "--profile", "--compare", "interpreter",
                 "--trace", "trace.json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["dump_path"] is None and data["target"] == "numpy"
    assert all(set(r) >= {"index", "node", "op", "source_names", "time_us", "shape"}
               for r in data["rows"])
    assert data["compare"]["first_divergence"] is None and data["profile"]["rows"]
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert list((tmp_path / "tmpdir").iterdir()) == []
    text = _kiln(long_names, tmp_path)
    assert text.returncode == 0 and "dump:" not in text.stdout
    assert list((tmp_path / "tmpdir").iterdir()) == []


def test_dump_root_replaces_earlier_runs_only(long_names: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "dumps"
    (root / "_tvmdbg_device_CPU_0" / "npy").mkdir(parents=True)
    (root / "_tvmdbg_device_CPU_0" / "npy" / "00003_0_stale.npy").write_bytes(b"old")
    (root / "_tvmdbg_device_GPU_0").mkdir()
    (root / "notes.txt").write_text("mine")
    proc = _kiln(long_names, tmp_path, "--dump-root", str(root), "--npy")
    assert proc.returncode == 0, proc.stderr
    device = root / "_tvmdbg_device_CPU_0"
    assert sorted(p.name for p in root.iterdir()) == ["_tvmdbg_device_CPU_0", "notes.txt"]
    assert {p.name for p in device.iterdir()} == {p.name for p in (
        FIXTURES / "debug_dump" / "_tvmdbg_device_CPU_0").iterdir()} | {"npy"}
    manifest = json.loads((device / "npy" / "manifest.json").read_text())
    assert sorted(p.name for p in (device / "npy").iterdir()) == sorted(
        [t["file"] for t in manifest["tensors"]] + ["manifest.json"])
    assert f"dump: {device}" in proc.stdout


def test_npy_needs_a_folder_and_writes_only_there(long_names: dict[str, Path],
                                                  tmp_path: Path) -> None:
    proc = _kiln(long_names, tmp_path, "--npy")
    assert proc.returncode != 0 and "--npy DIR" in proc.stderr
    proc = _kiln(long_names, tmp_path, "--npy", "npy", "--filter", "*Conv*")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "npy" / "manifest.json").read_text())
    assert [t["source_names"] for t in manifest["tensors"]] == [[LAYERS[0], LAYERS[1]]]
    assert list((tmp_path / "tmpdir").iterdir()) == []


def test_missing_compiler_fallback_is_said_on_stderr(long_names: dict[str, Path],
                                                     tmp_path: Path) -> None:
    proc = _kiln(long_names, tmp_path, "--json", target=None, env={"CC": "/nonexistent/cc"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["target"] == "numpy"
    said = proc.stderr.strip().splitlines()
    assert len(said) == 1 and "/nonexistent/cc" in said[0] and "CC" in said[0]
    assert "numpy" in said[0] and "--target" in said[0]
    chosen = _kiln(long_names, tmp_path, "--json", env={"CC": "/nonexistent/cc"})
    assert chosen.returncode == 0 and chosen.stderr == ""
