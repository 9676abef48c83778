"""Tuning records: TVM's lines in and out byte for byte, lenient reading, Kiln's lines, sidecars.

The oracle is ``ansor_manual_steps_log.json``, written by TVM's own record writer, and the loop
nests TVM printed for those records (``ansor_manual_stdout.txt``).
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from kiln import auto_scheduler, te
from kiln.auto_scheduler import measure_record as mr
from kiln.auto_scheduler.measure import MeasureErrorNo, MeasureInput, MeasureResult
from kiln.errors import TuningLogError
from kiln.target import Target
from kiln.testing.auto_scheduler import matmul_auto_scheduler_test

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tvm"
LOG = FIXTURES / "ansor_manual_steps_log.json"
MATMUL_KEY = '["matmul_auto_scheduler_test", 512, 512, 512]'


def matmul_relu_relu(n: int) -> list[te.Tensor]:
    A, B, C = matmul_auto_scheduler_test(n, n, n)
    D = te.compute(C.shape, lambda i0, i1: te.max(C[i0, i1], te.const(0.0, "float32")))
    F = te.compute(D.shape, lambda i0, i1: te.max(D[i0, i1], te.const(0.0, "float32")))
    return [A, B, F]


def _register_fixture_dag() -> None:
    dag = te.ComputeDAG(matmul_relu_relu(512))
    te.register_workload_tensors(dag.workload_key(), dag.tensors)


def _lines() -> list[str]:
    return LOG.read_text().splitlines(keepends=True)


def _expected_prints() -> list[str]:
    text = (FIXTURES / "ansor_manual_stdout.txt").read_text()
    blocks = []
    for title in ("cache_rw_split_fuse_annotate_pragma_fsp_ca_cr_sa \n",
                  "follow_fused_split \n", "rfactor \n"):
        start = text.index(title) + len(title)
        blocks.append(text[start:text.index(" \n\n", start)][1:])
    return blocks


def _with(line: str, costs: list[float] | None = None, error_no: int | None = None,
          key: str | None = None, target: str | None = None) -> str:
    """A fixture line with some fields replaced (written in TVM's spacing)."""
    rec = json.loads(line)
    if costs is not None:
        rec["r"][0] = costs
    if error_no is not None:
        rec["r"][1] = error_no
    if key is not None:
        rec["i"][0][0] = key
    if target is not None:
        rec["i"][0][1] = target
    return json.dumps(rec) + "\n"


# --- TVM's lines ---------------------------------------------------------------------------------
def test_fixture_loads_and_dumps_back_byte_identically(tmp_path: Path) -> None:
    _register_fixture_dag()
    lines = _lines()
    pairs = list(auto_scheduler.load_records(LOG))
    assert len(pairs) == len(lines) == 3
    for line, (inp, res) in zip(lines, pairs):
        assert mr.dump_record_to_string(inp, res) == line
        inp2, res2 = mr.load_record_from_string(line)
        assert mr.dump_record_to_string(inp2, res2) == line
    out = tmp_path / "again.json"
    auto_scheduler.save_records(out, [p[0] for p in pairs], [p[1] for p in pairs])
    assert out.read_bytes() == LOG.read_bytes()


def test_fixture_states_replay_as_tvm_printed() -> None:
    _register_fixture_dag()
    inputs, results = auto_scheduler.RecordReader(LOG).read_lines()
    assert [str(inp.state) for inp in inputs] == _expected_prints()
    first = inputs[0]
    assert first.task.workload_key == MATMUL_KEY
    assert str(first.task.target) == "llvm -keys=cpu -mtriple=x86_64-unknown-linux-gnu"
    assert first.task.hardware_params.to_list() == [1, 64, 64, 0, 0, 0, 0, 0]
    assert first.task.layout_rewrite_option == 1 and first.task.task_input_names == []
    assert first.task.compute_dag.print_dag() == te.workload_key_to_dag(MATMUL_KEY).print_dag()
    assert results[0].costs == [0.1] and results[0].all_cost == 0.2
    assert results[0].timestamp == 1 and results[0].error_no == 0
    # replaying does not change what is written
    assert mr.dump_record_to_string(first, results[0]) == _lines()[0]


def test_read_lines_max_and_skip() -> None:
    reader = auto_scheduler.RecordReader(LOG)
    inputs, _ = reader.read_lines(max_lines=1, skip_lines=1)
    assert [len(mr.input_steps(i)) for i in inputs] == [11]
    inputs, _ = reader.read_lines(skip_lines=2)
    assert [s.to_record()[0] for s in mr.input_steps(inputs[0])] == ["SP", "RF"]


@pytest.mark.parametrize("value, text", [(0.1, "0.1"), (1e10, "1e+10"), (1.0, "1"),
                                         (0.000123456789, "0.000123457"),
                                         (123456789.0, "1.23457e+08"), (2.5e-7, "2.5e-07")])
def test_doubles_are_written_as_cpp_ostream_writes_them(value: float, text: str) -> None:
    assert mr.format_double(value) == text


def test_load_best_record_ranks_valid_records_by_mean_cost(tmp_path: Path) -> None:
    lines = _lines()
    log = tmp_path / "best.json"
    log.write_text("".join([
        _with(lines[0], costs=[0.3, 0.1]),                     # 1: matmul, mean 0.2
        _with(lines[2], costs=[0.15]),                          # 2: matmul, best valid llvm
        _with(lines[0], costs=[0.01], error_no=4),              # 3: an error: never the best
        _with(lines[2], costs=[0.05], target="c -keys=cpu"),    # 4: best, but a c target
        _with(lines[1], costs=[0.001]),                         # 5: another workload
        _with(lines[2], costs=[0.02],                           # 6: compatible (half the rows)
              key='["matmul_auto_scheduler_test", 256, 512, 512]'),
    ]))
    text = log.read_text().splitlines(keepends=True)

    def best(**kw: object) -> str:
        inp, res = auto_scheduler.load_best_record(log, **kw)
        assert inp is not None and res is not None
        return mr.dump_record_to_string(inp, res)

    assert best(workload_key=MATMUL_KEY, target=Target("llvm")) == text[1]
    assert best(workload_key=MATMUL_KEY, target="c") == text[3]
    assert best(workload_key=MATMUL_KEY) == text[3]
    assert best(workload_key=MATMUL_KEY, target="llvm", include_compatible=True) == text[5]
    assert best() == text[4]
    assert auto_scheduler.load_best_record(log, '["nothing_like_this", 1]') == (None, None)


# --- lenient reading ------------------------------------------------------------------------------
def test_bad_lines_are_skipped_with_one_warning_each(tmp_path: Path) -> None:
    lines = _lines()
    good = lines[0]
    log = tmp_path / "mixed.json"
    log.write_text("".join([
        good,                                                   # 1
        "# a comment line\n",                                   # 2 (silent)
        good[: len(good) // 2] + "\n",                          # 3 truncated
        "\n",                                                   # 4 blank (silent)
        good.replace('"v": "v0.6"', '"v": "v9.9"'),             # 5 unknown version
        good.replace('["CR", 3]', '["XX", 3]'),                 # 6 unknown step kind
        lines[1],                                               # 7
        good.replace('"v": "v0.6"}', '"v": "v0.6", "kiln": 1}'),  # 8 a key TVM rejects
        "{not json at all\n",                                   # 9 corrupt
        good.replace("[1, 64, 64, 0, 0, 0, 0, 0]", "[1, 64]"),  # 10 bad hardware params
        lines[2].rstrip("\n"),                                  # 11 (no final newline)
    ]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pairs = list(auto_scheduler.load_records(log))
    assert [mr.dump_record_to_string(*p) for p in pairs] == [lines[0], lines[1], lines[2]]
    messages = [str(w.message) for w in caught if issubclass(w.category, mr.RecordWarning)]
    numbers = [int(re.match(rf"{re.escape(str(log))}:(\d+): ", m).group(1)) for m in messages]
    assert numbers == [3, 5, 6, 8, 9, 10]
    assert "truncated" in messages[0] and "v9.9" in messages[1] and "'XX'" in messages[2]
    assert "'kiln'" in messages[3] and "hardware params" in messages[5]


def test_missing_log_reads_as_empty_with_a_warning(tmp_path: Path) -> None:
    with pytest.warns(mr.RecordWarning, match="does not exist"):
        assert list(auto_scheduler.load_records(tmp_path / "nope.json")) == []


def test_load_record_from_string_rejects_a_bad_line() -> None:
    with pytest.raises(TuningLogError, match="unknown version"):
        mr.load_record_from_string(_lines()[0].replace("v0.6", "v7"))


def test_unknown_workload_loads_lists_and_writes_back() -> None:
    line = _with(_lines()[0], key='["never_registered_workload_xyz", 3]')
    inp, res = mr.load_record_from_string(line)
    assert inp.task.compute_dag is None
    assert mr.dump_record_to_string(inp, res) == line
    assert [s.to_record()[0] for s in inp.state.transform_steps][:2] == ["CHR", "CHW"]
    assert inp.state.stages == []
    with pytest.raises(TuningLogError, match="never_registered_workload_xyz.*register"):
        inp.task.require_dag()


def test_steps_that_do_not_replay_name_the_line(tmp_path: Path) -> None:
    log = tmp_path / "bad_replay.json"
    log.write_text(_lines()[0] + _lines()[0].replace('["CR", 3]', '["CR", 9]'))
    inputs, results = auto_scheduler.RecordReader(log).read_lines()
    assert len(inputs) == 2
    assert "C = ..." in str(inputs[0].state)
    with pytest.raises(TuningLogError, match=rf"{re.escape(str(log))}:2: step 12 \['CR', 9\]"):
        inputs[1].state  # noqa: B018
    assert mr.dump_record_to_string(inputs[1], results[1]) == _lines()[0].replace(
        '["CR", 3]', '["CR", 9]')


@pytest.mark.parametrize("target, kind", [
    ("llvm -keys=cpu -link-params=0 -mcpu=core-avx2", "llvm"),
    ("cuda -keys=cuda,gpu -arch=sm_80 -max_num_threads=1024 -thread_warp_size=32", "cuda"),
])
def test_targets_kiln_cannot_parse_are_kept_verbatim(target: str, kind: str) -> None:
    line = _with(_lines()[2], target=target)
    inp, res = mr.load_record_from_string(line)
    assert inp.task.target.kind.name == kind
    assert mr.dump_record_to_string(inp, res) == line


# --- Kiln's own lines -----------------------------------------------------------------------------
def _kiln_input(target: str = "llvm") -> MeasureInput:
    task = auto_scheduler.SearchTask(func="matmul_auto_scheduler_test", args=(64, 64, 64),
                                     target=target)
    state = task.compute_dag.init_state
    state.split(2, 0, [8])
    state.parallel(2, 0)
    return MeasureInput(task, state)


def test_kiln_lines_have_exactly_tvms_keys_and_shapes() -> None:
    inp = _kiln_input("llvm -mcpu=skylake-avx512")
    res = MeasureResult([1.5e-05, 2.5e-05], 0, "", 0.123456789, 1700000000.9)
    line = mr.dump_record_to_string(inp, res)
    assert line.endswith("}\n") and line.count("\n") == 1
    rec = json.loads(line)
    assert list(rec) == ["i", "r", "v"] and rec["v"] == "v0.6"
    task, state = rec["i"]
    assert len(task) == 6
    key, target, hw, host, layout, names = task
    assert key == '["matmul_auto_scheduler_test", 64, 64, 64]'
    assert target == str(Target("llvm -mcpu=skylake-avx512")) == "llvm -keys=cpu -mcpu=skylake-avx512"
    assert len(hw) == 8 and all(type(v) is int for v in hw) and hw[1] == 64 and hw[2] == 64
    assert (host, layout, names) == ("", 1, [])
    assert state == [[], [["SP", 2, 0, 64, [8], 1], ["AN", 2, 0, 3]]]
    assert '"r": [[1.5e-05, 2.5e-05], 0, 0.123457, 1700000000], "v": "v0.6"}' in line
    # and it reads back to the same line
    assert mr.dump_record_to_string(*mr.load_record_from_string(line)) == line
    plain = json.loads(mr.dump_record_to_string(_kiln_input("llvm"), res))
    assert plain["i"][0][1] == str(Target("llvm"))
    assert re.fullmatch(r"llvm -keys=cpu -mtriple=\S+", plain["i"][0][1])


def test_error_results_are_written_as_tvm_writes_them() -> None:
    res = MeasureResult([1e10], MeasureErrorNo.RUN_TIMEOUT, "timed out after 10 s", 10.5, 5)
    line = mr.dump_record_to_string(_kiln_input(), res)
    assert line.endswith('"r": [[1e+10], 7, 10.5, 5], "v": "v0.6"}\n')
    assert "timed out" not in line


def test_sidecar_round_trip(tmp_path: Path) -> None:
    log = tmp_path / "sub" / "tune.json"
    cb = auto_scheduler.RecordToFile(log)
    inp = _kiln_input()
    ok = MeasureResult([0.002], 0, "", 0.5, 100)
    crash = MeasureResult([1e10], MeasureErrorNo.RUNTIME_DEVICE, "Segmentation fault\nin kernel",
                          0.7, 101)
    cb.callback(None, [inp, inp], [ok, crash])
    cb.callback(None, [inp], [MeasureResult([1e10], 6, "build timed out", 15.0, 102)])
    lines = log.read_text().splitlines()
    assert len(lines) == 3 and all(list(json.loads(ln)) == ["i", "r", "v"] for ln in lines)
    side = mr.read_sidecar(log)
    assert mr.sidecar_path(log) == tmp_path / "sub" / "tune.json.kiln.jsonl"
    assert len(side.sessions) == 1 and side.sessions[0]["kiln_version"]
    assert side.sessions[0]["machine"]["usable_cpus"] >= 1
    assert side.dags == {inp.task.workload_key: inp.task.compute_dag.print_dag()}
    assert len(side.errors) == 2
    results = [res for _, res in auto_scheduler.load_records(log)]
    assert [r.error_msg for r in results] == ["", "Segmentation fault\nin kernel",
                                              "build timed out"]
    assert [r.error_no for r in results] == [0, 4, 6]
    mr.sidecar_path(log).unlink()
    assert [r.error_msg for _, r in auto_scheduler.load_records(log)] == ["", "", ""]


def test_save_records_appends(tmp_path: Path) -> None:
    log = tmp_path / "a.json"
    inp = _kiln_input()
    auto_scheduler.save_records(log, [inp], [MeasureResult([0.1], 0, "", 0.2, 1)])
    auto_scheduler.save_records(log, [inp], [MeasureResult([0.3], 0, "", 0.2, 2)])
    assert len(log.read_text().splitlines()) == 2
    assert len(mr.read_sidecar(log).sessions) == 2


# --- distill and merge ---------------------------------------------------------------------------
def test_distill_keeps_the_best_line_of_each_workload(tmp_path: Path) -> None:
    lines = _lines()
    log = tmp_path / "big.json"
    log.write_text("".join([
        _with(lines[0], costs=[0.5]), _with(lines[1], costs=[0.4]),
        _with(lines[2], costs=[0.2]), _with(lines[1], costs=[0.9]),
        _with(lines[0], costs=[0.01], error_no=5), "garbage\n",
    ]))
    text = log.read_text().splitlines(keepends=True)
    out = tmp_path / "best.json"
    with pytest.warns(mr.RecordWarning, match=r"big\.json:6: "):
        assert mr.distill_record_file(log, out) == 2
    assert out.read_text() == text[1] + text[2]


def test_merge_drops_duplicates_and_merges_sidecars(tmp_path: Path) -> None:
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "m.json"
    inp = _kiln_input()
    auto_scheduler.save_records(a, [inp], [MeasureResult([1e10], 4, "boom", 1.0, 1)])
    b.write_text(_lines()[0] + a.read_text())
    assert mr.merge_record_files(out, [a, b]) == (2, 1)
    assert out.read_text() == a.read_text() + _lines()[0]
    assert [r.error_msg for _, r in auto_scheduler.load_records(out)] == ["boom", ""]
    assert inp.task.workload_key in mr.read_sidecar(out).dags
