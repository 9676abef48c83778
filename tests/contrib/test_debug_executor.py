"""The debug executor against TVM's own debug dump and printout (tests/fixtures/tvm).

The small network of ``small_relay.txt`` is built from Kiln's relay API with the original weights;
its dump is compared with the files TVM 0.19 wrote (structure, key sets, field types, ordering),
its node outputs with a float64 NumPy computation of the network written here, and the table
formatter is fed the fixture's numbers and must print the fixture's text exactly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib.debugger import debug_executor
from kiln.contrib.debugger.debug_executor import GraphModuleDebug, NodeNotFoundError
from kiln.contrib.debugger.debug_result import (
    DebugResult,
    TableRow,
    format_debug_table,
    format_fitted_table,
    tensor_key,
)
from kiln.runtime.module import load_module
from kiln.runtime.params import load_param_dict

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tvm"
TVM_DUMP = FIXTURES / "debug_dump" / "_tvmdbg_device_CPU_0"
DUMP_FILES = sorted(p.name for p in TVM_DUMP.iterdir())
KEY_RE = re.compile(r"(?P<node>.+)____topo-index:(?P<topo>\d+)____output-num:(?P<out>\d+)")


TARGETS = ["numpy", pytest.param("c", marks=pytest.mark.requires_cc)]


# --- the network and its independent NumPy oracle ------------------------------------------------

def _params() -> dict[str, np.ndarray]:
    raw = load_param_dict((FIXTURES / "small_params_original.params").read_bytes())
    return {k: v.numpy() for k, v in raw.items()}


def _small_module() -> kiln.IRModule:
    data = relay.var("data", shape=(1, 3, 16, 16))
    weight = relay.var("conv_weight", shape=(8, 3, 3, 3))
    bn = [relay.var(n, shape=(8,)) for n in ("bn_gamma", "bn_beta", "bn_mean", "bn_var")]
    dense_w = relay.var("dense_weight", shape=(10, 512))
    dense_b = relay.var("dense_bias", shape=(10,))
    x = relay.nn.conv2d(data, weight, padding=(1, 1), channels=8, kernel_size=(3, 3))
    x = relay.nn.relu(relay.nn.batch_norm(x, *bn)[0])
    x = relay.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    x = relay.nn.bias_add(relay.nn.dense(relay.nn.batch_flatten(x), dense_w), dense_b)
    x = relay.nn.softmax(x)
    return kiln.IRModule.from_expr(relay.Function(relay.analysis.free_vars(x), x))


def _oracle(x: np.ndarray, p: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every layer of the small network in float64, written directly with NumPy."""
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    conv = np.einsum("nchwij,ocij->nohw", windows, p["conv_weight"].astype(np.float64))
    scale = p["bn_gamma"] / np.sqrt(p["bn_var"].astype(np.float64) + 1e-5)
    bn = (conv - p["bn_mean"][None, :, None, None]) * scale[None, :, None, None] + \
        p["bn_beta"][None, :, None, None]
    relu = np.maximum(bn, 0)
    pool = relu.reshape(1, 8, 8, 2, 8, 2).max(axis=(3, 5))
    flat = pool.reshape(1, 512)
    logits = flat @ p["dense_weight"].T.astype(np.float64) + p["dense_bias"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return {"data": x, "relu": relu, "pool": pool, "flat": flat, "logits": logits,
            "softmax": e / e.sum(axis=1, keepdims=True)}


def _oracle_for(func_name: str, layers: dict[str, np.ndarray]) -> np.ndarray | None:
    """The layer a node of the small network computes, from its kernel name."""
    rules = (("nn_relu", "relu"), ("max_pool2d", "pool"), ("batch_flatten", "flat"),
             ("__nop", "flat"), ("dense", "logits"), ("softmax", "softmax"),
             ("layout_transform", "data"))
    for part, layer in rules:
        if func_name.endswith(part) or (part in func_name and layer in ("logits", "pool")):
            return layers[layer]
    return None


def _as_nchw(value: np.ndarray) -> np.ndarray:
    """A node output in NCHW: blocked NCHW{c} outputs (N, C/c, H, W, c) are unpacked."""
    if value.ndim == 5:
        n, outer, h, w, block = value.shape
        return value.transpose(0, 1, 4, 2, 3).reshape(n, outer * block, h, w)
    return value


@pytest.fixture(scope="module", params=TARGETS)
def built(request: pytest.FixtureRequest) -> Any:
    with kiln.transform.PassContext(opt_level=3):
        return relay.build(_small_module(), target=request.param, params=_params())


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    return np.load(FIXTURES / "small_input.npy")


@pytest.fixture(scope="module")
def debugged(built: Any, data: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A debug module after one run() with TVM's defaults; its printed table is kept."""
    dev = kiln.cpu()
    root = tmp_path_factory.mktemp("tvmdbg")
    m = GraphModuleDebug(built["debug_create"]("default", dev), [dev], built.graph_json,
                         dump_root=str(root))
    m.set_input("data", data)
    m.run()
    m.printed = m.debug_datum.get_debug_result()
    return m


# --- the dump folder -----------------------------------------------------------------------------

def test_dump_has_tvms_three_files(debugged: GraphModuleDebug) -> None:
    assert debugged.dump_path.name == "_tvmdbg_device_CPU_0" == TVM_DUMP.name
    assert sorted(p.name for p in debugged.dump_path.iterdir()) == DUMP_FILES


def test_graph_dump_reproduces_tvms_file_byte_for_byte(tmp_path: Path) -> None:
    DebugResult((FIXTURES / "small_o3.graph.json").read_text(), tmp_path)
    ours = (tmp_path / "_tvmdbg_graph_dump.json").read_bytes()
    assert ours == (TVM_DUMP / "_tvmdbg_graph_dump.json").read_bytes()


def _key_order(nodes: list[dict[str, Any]], op: str) -> list[list[str]]:
    return [list(n) for n in nodes if (n["op"] == "param") == (op == "param")]


def test_graph_dump_structure_matches_tvm(debugged: GraphModuleDebug, built: Any) -> None:
    tvm = json.loads((TVM_DUMP / "_tvmdbg_graph_dump.json").read_text())
    text = (debugged.dump_path / "_tvmdbg_graph_dump.json").read_text()
    ours = json.loads(text)
    assert list(ours) == list(tvm)
    assert list(ours["attrs"]) == list(tvm["attrs"])
    assert text.startswith('{\n    "nodes": [\n        {\n            "op": "param",')
    for kind in ("param", "op"):
        assert {tuple(k) for k in _key_order(ours["nodes"], kind)} == \
            {tuple(k) for k in _key_order(tvm["nodes"], kind)}
    graph = built.graph
    names = [n["name"] for n in ours["nodes"]]
    for nid, node in enumerate(ours["nodes"]):
        eid = graph.entry_id(nid, 0)
        assert node["shape"] == list(graph.shapes[eid])
        assert node["attrs"]["T"] == f"type: {graph.dltypes[eid]}"
        assert all(isinstance(v, str) for v in node["attrs"].values())
        if node["op"] == "param":
            assert node["attrs"] == {"T": "type: float32"} and node["inputs"] == []
        else:
            assert node["op"] == node["attrs"]["func_name"]
            assert list(node["attrs"])[:4] == ["num_outputs", "num_inputs", "flatten_data",
                                               "func_name"]
            assert list(node["attrs"])[-1] == "T"
            assert all(isinstance(i, str) and i in names for i in node["inputs"])


def test_tensor_keys_reproduce_tvms_keys() -> None:
    graph = json.loads((FIXTURES / "small_o3.graph.json").read_text())
    expected = {tensor_key(n["name"], i, 0) for i, n in enumerate(graph["nodes"])}
    tvm = load_param_dict((TVM_DUMP / "output_tensors.params").read_bytes())
    assert set(tvm) == expected


def test_output_tensors_hold_every_node_output(debugged: GraphModuleDebug, built: Any,
                                               data: np.ndarray) -> None:
    tvm_keys = list(load_param_dict((TVM_DUMP / "output_tensors.params").read_bytes()))
    assert all(KEY_RE.fullmatch(k) for k in tvm_keys)
    tensors = load_param_dict((debugged.dump_path / "output_tensors.params").read_bytes())
    graph = built.graph
    expected = {tensor_key(n.name, i, j) for i, n in enumerate(graph.nodes)
                for j in range(n.num_outputs)}
    assert set(tensors) == expected
    layers = _oracle(data, _params())
    checked = 0
    for key, value in tensors.items():
        m = KEY_RE.fullmatch(key)
        assert m is not None
        node = graph.nodes[int(m.group("topo"))]
        assert value.shape == graph.shapes[graph.entry_id(int(m.group("topo")), int(m.group("out")))]
        if node.is_input:
            source = data if node.name == "data" else built.get_params()[node.name].numpy()
            np.testing.assert_array_equal(value.numpy(), source)
            continue
        ref = _oracle_for(node.func_name, layers)
        assert ref is not None, node.func_name
        np.testing.assert_allclose(_as_nchw(value.numpy()), ref, rtol=1e-4, atol=1e-5)
        checked += 1
    assert checked == sum(not n.is_input for n in graph.nodes)
    np.testing.assert_allclose(debugged.get_output(0).numpy(), np.load(FIXTURES / "small_o3_output.npy"),
                               rtol=1e-5, atol=1e-6)


# --- the Chrome trace ----------------------------------------------------------------------------

def test_chrome_trace_is_valid_with_matching_begin_end(debugged: GraphModuleDebug) -> None:
    tvm = json.loads((TVM_DUMP / "_tvmdbg_execution_trace.json").read_text())
    trace = json.loads((debugged.dump_path / "_tvmdbg_execution_trace.json").read_text())
    assert list(trace) == list(tvm) == ["displayTimeUnit", "traceEvents"]
    assert trace["displayTimeUnit"] == "ns"
    events = trace["traceEvents"]
    names = [n["name"] for n in debugged.debug_datum.get_graph_nodes()]
    assert len(events) == 2 * len(names)
    assert all(list(e) == list(tvm["traceEvents"][0]) for e in events)
    previous_end = 0.0
    for name, begin, end in zip(names, events[::2], events[1::2]):
        assert (begin["ph"], end["ph"]) == ("B", "E")
        assert begin["name"] == end["name"] == name
        assert begin["tid"] == begin["pid"] == end["tid"] == end["pid"] == 1
        assert isinstance(begin["ts"], float) and begin["ts"] == pytest.approx(previous_end)
        assert end["ts"] >= begin["ts"]
        previous_end = end["ts"]


def test_chrome_trace_reproduces_tvms_trace(tmp_path: Path) -> None:
    tvm = json.loads((TVM_DUMP / "_tvmdbg_execution_trace.json").read_text())["traceEvents"]
    durations = [(e["ts"] - b["ts"]) / 1e6 for b, e in zip(tvm[::2], tvm[1::2])]
    result = DebugResult((FIXTURES / "small_o3.graph.json").read_text(), tmp_path)
    result.set_times([[d] for d in durations])
    ours = json.loads(result.dump_chrome_trace().read_text())["traceEvents"]
    assert [(e["name"], e["ph"], e["tid"], e["pid"]) for e in ours] == \
        [(e["name"], e["ph"], e["tid"], e["pid"]) for e in tvm]
    assert [e["ts"] for e in ours] == pytest.approx([e["ts"] for e in tvm], rel=1e-12, abs=1e-9)


# --- the table -----------------------------------------------------------------------------------

def _fixture_tables() -> dict[str, list[str]]:
    tables: dict[str, list[str]] = {}
    title = ""
    for line in (FIXTURES / "debug_stdout.txt").read_text().splitlines():
        if line.startswith("=== "):
            title = line[4:]
            if "m.run(" in title:
                tables[title] = []
        elif title in tables and (line.startswith(("Node Name", "---")) or tables[title]) and \
                not line.startswith(("DUMPFILE", "output_tensors")):
            tables[title].append(line)
    return tables


TABLES = _fixture_tables()


def _split(line: str) -> list[str]:
    return re.split(r"  +", line.rstrip())


@pytest.mark.parametrize("title", list(TABLES))
def test_table_formatter_reproduces_tvms_text(title: str) -> None:
    lines = TABLES[title]
    sort_by_time = "sort_by_time=False" not in title
    rows, total = [], 0.0
    for line in lines[2:]:
        cells = _split(line)
        if cells[0] == "Total_time":
            total = float(cells[2])
            continue
        shape = tuple(int(s) for s in re.findall(r"\d+", cells[4]))
        rows.append(TableRow(cells[0], cells[1], float(cells[2]), float(cells[3]), shape,
                             int(cells[5]), int(cells[6]), tuple(json.loads(cells[7]))))
    if sort_by_time:
        rows.reverse()  # the formatter must sort them back
    assert format_debug_table(rows, total, sort_by_time) == "\n".join(lines)


def _columns(line: str) -> list[int]:
    return [m.start() for m in re.finditer(r"(?:^|(?<=  ))\S", line)]


def test_printed_table_has_tvms_layout(debugged: GraphModuleDebug) -> None:
    lines = debugged.printed.split("\n")
    tvm = TABLES["o3: m.run() with defaults (number=10, repeat=1, min_repeat_ms=1, sort_by_time=True)"]
    assert _split(lines[0]) == _split(tvm[0]) and _split(lines[1]) == _split(tvm[1])
    op_rows = [n for n in debugged.debug_datum.get_graph_nodes() if n["op"] != "param"]
    assert len(lines) == 2 + len(op_rows) + 1
    table = [_split(line) for line in lines]
    assert table[-1][:2] == ["Total_time", "-"] and table[-1][3:] == ["-"] * 5
    times = [float(r[2]) for r in table[2:-1]]
    assert times == sorted(times, reverse=True)
    assert float(table[-1][2]) == pytest.approx(sum(times), abs=1e-2)
    assert sum(float(r[3]) for r in table[2:-1]) == pytest.approx(100, abs=0.01)
    assert all(re.fullmatch(r"\d+(\.\d{1,3})?(e-\d+)?", r[2]) for r in table[2:])
    starts = _columns(lines[0])
    for line in lines:
        assert _columns(line) == starts
        assert len(line) == len(lines[0])  # every cell padded, the last one too
    widths = [b - a for a, b in zip(starts, [*starts[1:], len(lines[0])])]
    for i, width in enumerate(widths):
        assert width == max(len(cells[i]) for cells in table) + 2


def test_graph_order_table_without_total(debugged: GraphModuleDebug,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    debugged.run(number=2, repeat=3, min_repeat_ms=0, sort_by_time=False)
    lines = capsys.readouterr().out.rstrip("\n").split("\n")
    nodes = [n for n in debugged.module.graph.nodes if not n.is_input]
    assert [_split(line)[0] for line in lines[2:]] == [n.name for n in nodes]
    for line in lines[2:]:
        assert len(json.loads(_split(line)[7])) == 3


def test_start_and_end_time_columns(debugged: GraphModuleDebug) -> None:
    text = debugged.debug_datum.get_debug_result(sort_by_time=False, show_timestamps=True)
    lines = text.split("\n")
    header = _split(lines[0])
    assert header[:6] == ["Node Name", "Ops", "Time(us)", "Time(%)", "Start Time", "End Time"]
    assert _split(lines[1])[4:6] == ["----------", "--------"]
    stamps = [(_split(line)[4], _split(line)[5]) for line in lines[2:]]
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d\.\d{6}", s) for pair in stamps for s in pair)
    flat = [s for pair in stamps for s in pair]
    assert flat == sorted(flat)


# --- the per-node API ----------------------------------------------------------------------------

def test_node_level_functions(debugged: GraphModuleDebug, data: np.ndarray) -> None:
    layers = _oracle(data, _params())
    graph = debugged.module.graph
    pool = next(i for i, n in enumerate(graph.nodes) if "max_pool2d" in n.func_name)
    by_name = debugged.debug_get_output(graph.nodes[pool].name)
    np.testing.assert_allclose(_as_nchw(by_name.numpy()), layers["pool"], rtol=1e-4, atol=1e-5)
    out = np.empty(graph.shapes[graph.entry_id(pool)], "float32")
    assert debugged.debug_get_output(pool, out) is out
    np.testing.assert_allclose(_as_nchw(out), layers["pool"], rtol=1e-4, atol=1e-5)
    last = len(graph.nodes) - 1
    debugged.execute_node(last)
    np.testing.assert_allclose(debugged.get_node_output(last, 0).numpy(), layers["softmax"],
                               rtol=1e-4, atol=1e-6)
    times = debugged.run_individual(number=1, repeat=2)
    assert len(times) == len(graph.nodes) and all(len(t) == 2 for t in times)
    assert all(times[i] == [0.0, 0.0] for i in graph.arg_nodes)
    assert all(t > 0 for i in debugged.module.op_nodes for t in times[i])
    bench = debugged.run_individual_node(pool, number=1, repeat=3)
    assert len(bench.results) == 3 and bench.min > 0
    with pytest.raises(NodeNotFoundError, match="no_such_node"):
        debugged.debug_get_output("no_such_node")
    with pytest.raises(AttributeError):
        debugged.debug_get_output("no_such_node")


def test_profile_rows_and_reconciliation(debugged: GraphModuleDebug) -> None:
    report = debugged.profile(number=2, repeat=3, min_repeat_ms=0)
    graph = debugged.module.graph
    assert [r.index for r in report.rows] == [i for i, n in enumerate(graph.nodes) if not n.is_input]
    for row in report.rows:
        measured = np.asarray(row.measurements_us)
        assert len(measured) == 3
        assert row.mean_us == pytest.approx(measured.mean())
        assert row.std_us == pytest.approx(measured.std())
        assert (row.min_us, row.max_us) == (measured.min(), measured.max())
        eid = graph.entry_id(row.index)
        assert row.shapes == [graph.shapes[eid]] and row.dtypes == ["float32"]
        assert row.func == graph.nodes[row.index].func_name
    assert report.node_sum_us == pytest.approx(sum(r.mean_us for r in report.rows))
    assert report.end_to_end_us > 0
    assert report.gap_us == pytest.approx(report.end_to_end_us - report.node_sum_us)
    assert len(report.gaps_us) == 3  # one paired (nodes, then whole graph) gap per repeat
    assert np.mean(report.gaps_us) == pytest.approx(report.gap_us)
    assert report.gap_std_us == pytest.approx(np.std(report.gaps_us))
    assert "gap" in report.reconciliation() and report.reconciliation() in str(report)
    assert str(report).endswith(report.peak_line())
    json.dumps(report.to_dict())


@pytest.mark.requires_cc
def test_profile_places_nodes_on_the_roofline(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    from kiln.debug import debug_executor as dx
    from kiln.debug.roofline import Peak

    peak = Peak(gflops=100.0, gbps=10.0, num_threads=1, isa="test")
    monkeypatch.setattr(dx, "machine_peak", lambda threads: peak)
    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(1, 8, 16, 16), dtype="float32")
    w = relay.const(rng.standard_normal((16, 8, 3, 3)).astype("float32"))
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1)))))
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    m = debug_executor.create(lib.get_graph_json(), lib, kiln.cpu(), dump_root=str(tmp_path))
    m.set_input("x", rng.standard_normal((1, 8, 16, 16)).astype("float32"))
    report = m.profile(number=1, repeat=1, min_repeat_ms=0)
    (conv,) = [r for r in report.rows if "conv2d" in r.func]
    macs = 16 * 16 * 16 * 8 * 3 * 3
    assert conv.flops is not None and 2 * macs <= conv.flops <= 2.2 * macs  # + padding, relu
    assert conv.bytes == 4 * (8 * 16 * 16 + 16 * 8 * 3 * 3 + 16 * 16 * 16)
    seconds = conv.mean_us * 1e-6
    assert conv.gflops == pytest.approx(conv.flops / seconds / 1e9)
    intensity = conv.flops / conv.bytes
    in_cache = conv.bytes / seconds / 1e9 > 10.0  # faster than the 10 GB/s copy bandwidth
    memory_bound = intensity * 10.0 < 100.0
    attainable = 100.0 if in_cache or not memory_bound else intensity * 10.0
    assert conv.roof_percent == pytest.approx(100 * conv.gflops / attainable)
    assert conv.bound == ("compute" if not memory_bound else "cache" if in_cache else "memory")
    moves = [r for r in report.rows if r.flops is not None and r.flops == 0]
    assert all(r.bound in ("memory", "cache") for r in moves)
    assert report.peak == {"gflops": 100.0, "gbps": 10.0, "num_threads": 1, "isa": "test", "load": 0.0}
    table = report.roofline_table(100)
    assert "Roof(%)" in table and "FMA peak 100.0 GFLOP/s" in table
    assert all(len(line) <= 100 for line in table.splitlines()[:-1])


# --- other ways in -------------------------------------------------------------------------------

def test_exported_library_seed_step_4(built: Any, data: np.ndarray, tmp_path: Path) -> None:
    path = tmp_path / "network.so"
    built.export_library(str(path))
    lib = load_module(str(path))
    dev = kiln.cpu()
    m = debug_executor.create(lib["get_graph_json"](), lib, dev, dump_root=str(tmp_path / "dbg"))
    m.set_input("data", kiln.nd.array(data))
    m.run(number=1, min_repeat_ms=0)
    expected = _oracle(data, _params())["softmax"]
    out = m.get_output(0, kiln.nd.empty((1, 10), "float32")).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-6)
    assert sorted(p.name for p in m.dump_path.iterdir()) == DUMP_FILES
    m2 = GraphModuleDebug(lib["debug_create"]("default", dev), [dev], lib["get_graph_json"](),
                          dump_root=str(tmp_path / "dbg2"))
    m2.run(number=1, min_repeat_ms=0, data=data)
    np.testing.assert_allclose(m2.get_output(0).numpy(), expected, rtol=1e-4, atol=1e-6)


def test_without_dump_root_a_printed_temporary_folder(built: Any, data: np.ndarray,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    m = GraphModuleDebug(built["default"](kiln.cpu()), [kiln.cpu()], built.graph_json)
    printed = capsys.readouterr().out
    root = m.dump_root
    assert str(root) in printed and root.name.startswith("tvmdbg_")
    assert (root / "_tvmdbg_device_CPU_0" / "_tvmdbg_graph_dump.json").is_file()
    m.exit()
    assert not root.exists()


def test_multi_output_node_has_one_row_per_output(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    x = relay.var("x", shape=(1, 6, 4))
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.split(x, 3, axis=1).astuple()))
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="numpy")
    m = debug_executor.create(lib.graph_json, lib, kiln.cpu(), dump_root=str(tmp_path))
    value = np.arange(24, dtype="float32").reshape(1, 6, 4)
    m.run(number=1, min_repeat_ms=0, x=value)
    rows = [_split(line) for line in capsys.readouterr().out.rstrip("\n").split("\n")[2:-1]]
    assert len(rows) == 3 and all(r[4] == "(1, 2, 4)" and r[6] == "3" for r in rows)
    tensors = load_param_dict((m.dump_path / "output_tensors.params").read_bytes())
    split = next(i for i, n in enumerate(m.module.graph.nodes) if not n.is_input)
    for j in range(3):
        key = tensor_key(m.module.graph.nodes[split].name, split, j)
        np.testing.assert_array_equal(tensors[key].numpy(), value[:, 2 * j:2 * j + 2])


# --- beyond TVM: collect() without files, the fitted table ---------------------------------------

def test_collect_writes_nothing_but_the_graph_dump(built: Any, data: np.ndarray,
                                                   tmp_path: Path) -> None:
    m = debug_executor.create(built.graph_json, built, kiln.cpu(), dump_root=str(tmp_path))
    datum = m.collect(number=1, min_repeat_ms=0, data=data)
    assert sorted(p.name for p in m.dump_path.iterdir()) == ["_tvmdbg_graph_dump.json"]
    trace = datum.dump_chrome_trace(tmp_path / "elsewhere.json")
    assert trace == tmp_path / "elsewhere.json"
    events = json.loads(trace.read_text())["traceEvents"]
    assert [e["name"] for e in events[::2]] == [n.name for n in m.module.graph.nodes]
    assert sorted(p.name for p in m.dump_path.iterdir()) == ["_tvmdbg_graph_dump.json"]
    rows = datum.table_rows()
    assert [r.index for r in rows] == [i for i, n in enumerate(m.module.graph.nodes)
                                       if not n.is_input]
    assert datum.total_time_us() == pytest.approx(sum(r.time_us for r in rows))
    np.testing.assert_allclose(m.get_output(0).numpy(), _oracle(data, _params())["softmax"],
                               rtol=1e-4, atol=1e-6)


def _fitted_rows() -> list[TableRow]:
    kernel = "tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add_nn_relu_and_a_long_tail"
    return [
        TableRow(kernel, kernel, 12.5, 62.5, (1, 2, 16, 16, 4), 3, 1, (12.0, 13.0),
                 index=4, source_names=("/model/stage_0/conv/Conv", "/model/stage_0/act/Relu")),
        TableRow(kernel + "_1", kernel, 7.5, 37.5, (1, 10), 3, 1, (7.5, 7.5), index=9,
                 source_names=("/model/head/fc/Gemm",)),
        TableRow("reshape_nop", "__nop", 0.0, 0.0, (1, 512), 1, 1, (0.0, 0.0), index=6),
    ]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_fitted_table_fits_and_names_each_node_once(width: int) -> None:
    rows = _fitted_rows()
    lines = format_fitted_table(rows, 20.0, width).split("\n")
    assert max(len(line) for line in lines) <= width
    assert _split(lines[0]) == ["#", "Node", "Time(us)", "Time(%)", "Shape", "Std(us)", "Source"]
    body = [_split(line.strip()) for line in lines[2:]]
    assert [cells[0] for cells in body[:-1]] == ["4", "9", "6"]  # slowest first
    assert body[-1][:2] == ["Total", "20.000"] and body[-1][2] == "100.00"
    assert body[0][2:4] == ["12.500", "62.50"] and body[0][5] == "0.500"  # numbers are never cut
    head, _, tail = body[0][4].partition("...")
    assert "1x2x16x16x4".startswith(head) and "1x2x16x16x4".endswith(tail)
    assert body[2][-1] == "-"
    for cells, row in zip(body, rows):
        head, _, tail = cells[1].partition("...")
        name = row.name.removeprefix("tvmgen_default_")
        assert name.startswith(head) and name.endswith(tail)
        source = ",".join(row.source_names) or "-"
        head, _, tail = cells[-1].partition("...")
        assert source.startswith(head) and source.endswith(tail)


def test_fitted_table_without_a_limit_is_complete_and_shows_other_kernels() -> None:
    rows = [*_fitted_rows(), TableRow("my_node", "tvmgen_default_fused_add", 1.0, 100.0, (3,), 2,
                                      1, (1.0,), index=2)]
    lines = format_fitted_table(rows, 21.0, None, sort_by_time=False).split("\n")
    header = _split(lines[0])
    assert header == ["#", "Node", "Kernel", "Time(us)", "Time(%)", "Shape", "Std(us)", "Source"]
    body = [_split(line.strip()) for line in lines[2:]]
    assert [cells[1] for cells in body] == [r.name for r in rows]  # graph order, no Total
    assert body[3][2] == "tvmgen_default_fused_add"  # only where the kernel is not the name
    assert body[0][-1] == "/model/stage_0/conv/Conv,/model/stage_0/act/Relu"
    assert all(len(cells) == len(header) or cells[2] != rows[i].op
               for i, cells in enumerate(body))
