"""``.npy`` + ``manifest.json`` dumps: readable with NumPy and json alone, filtered, size-capped.

Oracles: the arrays the test itself hands to the writer, TVM's own ``output_tensors.params`` and
graph dump (tests/fixtures/tvm/debug_dump), read back with plain ``np.load`` / ``json.load``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib.debugger import debug_executor
from kiln.debug import TensorRecord, convert_params_dump, read_npy_dump, write_npy_dump
from kiln.debug.dump import fused_ops
from kiln.runtime.params import load_param_dict

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tvm"
TVM_DUMP = FIXTURES / "debug_dump" / "_tvmdbg_device_CPU_0"
MANIFEST_KEYS = ["key", "node", "topo_index", "output_num", "nbytes", "func_name", "fused_ops",
                 "source_names", "shape", "dtype", "file"]


def _records(rng: np.random.Generator) -> list[TensorRecord]:
    shapes = [(1, 3, 4, 4), (8,), (), (2, 0, 3), (1, 10)]
    dtypes = ["float32", "int64", "float16", "float32", "bool"]
    records = []
    for i, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        array = np.asarray(rng.standard_normal(shape) * 10).astype(dtype)
        func = "" if i == 0 else f"tvmgen_default_fused_nn_relu_{i}"
        records.append(TensorRecord(f"node/{i}" if i else "data", i, 0, func,
                                    ["nn.relu"] if func else [], [f"src{i}"] if func else [],
                                    array))
    return records


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def test_every_tensor_readable_with_numpy_alone(tmp_path: Path, rng: np.random.Generator) -> None:
    records = _records(rng)
    manifest = write_npy_dump(tmp_path, records)
    data = _manifest(tmp_path)
    assert data == manifest.to_dict() and data["format"] == "kiln-npy-dump/1"
    assert data["skipped"] == [] and len(data["tensors"]) == len(records)
    for entry, record in zip(data["tensors"], records):
        assert list(entry) == MANIFEST_KEYS
        array = np.load(tmp_path / entry["file"], allow_pickle=False)
        np.testing.assert_array_equal(array, record.array)
        assert entry["shape"] == list(record.array.shape)
        assert entry["dtype"] == str(record.array.dtype)
        assert (entry["node"], entry["topo_index"], entry["output_num"]) == \
            (record.node, record.topo_index, record.output_index)
        assert entry["key"] == f"{record.node}____topo-index:{record.topo_index}____output-num:0"
        assert "/" not in entry["file"]
    assert data["total_bytes"] == sum(r.array.nbytes for r in records)
    back = read_npy_dump(tmp_path)
    assert list(back) == [r.key for r in records]


@pytest.mark.parametrize(("include", "expected"), [
    ("node/*", [1, 2, 3, 4]),
    (["data", "src3"], [0, 3]),
    ("*relu_2", [2]),
    ("nothing", []),
])
def test_name_filter(tmp_path: Path, rng: np.random.Generator, include: object,
                     expected: list[int]) -> None:
    records = _records(rng)
    manifest = write_npy_dump(tmp_path, records, include=include)
    assert [t["topo_index"] for t in manifest.tensors] == expected
    assert all(s["reason"] == "filter" for s in manifest.skipped)
    assert len(manifest.skipped) + len(expected) == len(records)
    assert len(list(tmp_path.glob("*.npy"))) == len(expected)


def test_predicate_filter(tmp_path: Path, rng: np.random.Generator) -> None:
    manifest = write_npy_dump(tmp_path, _records(rng), include=lambda r: r.array.ndim == 1)
    assert [t["topo_index"] for t in manifest.tensors] == [1]
    assert manifest.filter is None


@pytest.mark.parametrize("cap", [0, 40, 100, 250, 10**6])
def test_size_cap(tmp_path: Path, rng: np.random.Generator, cap: int) -> None:
    records = _records(rng)
    manifest = write_npy_dump(tmp_path, records, max_bytes=cap)
    assert manifest.total_bytes <= cap
    written = {t["topo_index"] for t in manifest.tensors}
    # greedy in graph order: a tensor is skipped only when it would not fit after the earlier ones
    total = 0
    for r in records:
        fits = total + r.array.nbytes <= cap
        assert (r.topo_index in written) == fits
        total += r.array.nbytes if fits else 0
    assert all(s["reason"] == "size cap" for s in manifest.skipped)
    assert sum(p.stat().st_size > 0 for p in tmp_path.glob("*.npy")) == len(written)


def test_tvm_params_dump_converted(tmp_path: Path) -> None:
    shutil.copytree(TVM_DUMP, tmp_path / "dump")
    manifest = convert_params_dump(tmp_path / "dump" / "output_tensors.params", tmp_path / "npy")
    tvm = load_param_dict((TVM_DUMP / "output_tensors.params").read_bytes())
    back = read_npy_dump(tmp_path / "npy")
    assert set(back) == set(tvm)
    for key, value in tvm.items():
        np.testing.assert_array_equal(back[key], value.numpy())
    graph = json.loads((TVM_DUMP / "_tvmdbg_graph_dump.json").read_text())["nodes"]
    assert [t["topo_index"] for t in manifest.tensors] == list(range(len(graph)))
    for entry in manifest.tensors:
        node = graph[entry["topo_index"]]
        assert entry["node"] == node["name"]
        assert entry["func_name"] == ("" if node["op"] == "param" else node["op"])
    conv = next(t for t in manifest.tensors if "conv2d" in t["func_name"])
    assert conv["fused_ops"] == ["nn.contrib_conv2d_NCHWc", "add", "nn.relu"]


@pytest.mark.parametrize(("name", "ops"), [
    ("tvmgen_default_fused_nn_conv2d_add_nn_relu_3", ["nn.conv2d", "add", "nn.relu"]),
    ("tvmgen_default_fused_layout_transform_nn_batch_flatten",
     ["layout_transform", "nn.batch_flatten"]),
    ("tvmgen_default_fused_nn_dense_add_1", ["nn.dense", "add"]),
    ("tvmgen_default_fused_my_custom_op_nn_relu", ["my_custom_op", "nn.relu"]),
    ("__nop", ["reshape"]),
])
def test_fused_ops_from_kernel_names(name: str, ops: list[str]) -> None:
    assert fused_ops(name) == ops


def test_debug_module_dump_npy(tmp_path: Path) -> None:
    x = relay.var("x", shape=(2, 8))
    # a softmax over a leading axis keeps TVM's grouping (relu+multiply in their own kernel)
    y = relay.nn.softmax(relay.nn.relu(x) * relay.const(2.0, "float32"), axis=0)
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(kiln.IRModule.from_expr(relay.Function([x], y)), target="numpy")
    m = debug_executor.create(lib.graph_json, lib, kiln.cpu(), dump_root=str(tmp_path))
    value = np.linspace(-2, 2, 16, dtype="float32").reshape(2, 8)
    m.run(number=1, min_repeat_ms=0, x=value)
    manifest = m.dump_npy(include="*relu*")
    assert manifest.folder == m.dump_path / "npy"
    (entry,) = manifest.tensors
    assert entry["fused_ops"] == ["nn.relu", "multiply"]
    np.testing.assert_allclose(np.load(manifest.folder / entry["file"]), np.maximum(value, 0) * 2)
    everything = m.dump_npy(tmp_path / "all")
    last = np.load(tmp_path / "all" / everything.tensors[-1]["file"])
    e = np.exp(np.maximum(value, 0) * 2)
    np.testing.assert_allclose(last, e / e.sum(0, keepdims=True), rtol=1e-6)
