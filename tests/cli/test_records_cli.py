"""``kiln records show|best|validate|merge|distill``, run as a user runs them (a subprocess).

The workloads of these logs are not registered in the subprocess: every action must work from
the records alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tvm"
LOG = FIXTURES / "ansor_manual_steps_log.json"
MATMUL_KEY = '["matmul_auto_scheduler_test", 512, 512, 512]'


def kiln(*args: str, columns: int = 200) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "kiln", "records", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def _with(line: str, costs: list[float], error_no: int = 0) -> str:
    rec = json.loads(line)
    rec["r"][0] = costs
    rec["r"][1] = error_no
    return json.dumps(rec) + "\n"


def _mixed_log(tmp_path: Path) -> tuple[Path, list[str]]:
    lines = LOG.read_text().splitlines(keepends=True)
    body = [
        _with(lines[0], [0.004, 0.002]),      # 1 matmul, mean 3 ms
        _with(lines[2], [0.001]),             # 2 matmul, best: 1 ms
        _with(lines[0], [1e10], 4),           # 3 runtime error
        _with(lines[2], [1e10], 7),           # 4 run timeout
        _with(lines[2], [1e10], 7),           # 5 run timeout
        lines[1],                             # 6 the other workload: 100 ms
        '{"i": [["truncated',                 # 7 bad
    ]
    log = tmp_path / "mixed.json"
    log.write_text("".join(body) + "\n")
    return log, body


def test_show_prints_a_row_per_workload(tmp_path: Path) -> None:
    log, _ = _mixed_log(tmp_path)
    proc = kiln("show", str(log))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert "6 records, 2 workloads, 1 bad lines" in out[0]
    header = out[1].split()
    assert header == ["Workload", "Trials", "Valid", "Best(ms)", "Mean(ms)", "Errors"]
    row = next(line for line in out if line.startswith(MATMUL_KEY))
    cells = row[len(MATMUL_KEY):].split()
    assert cells[:4] == ["5", "2", "1", "2"]
    assert " ".join(cells[4:]) == "4 RuntimeDeviceError x1, 7 RunTimeoutError x2"
    other = next(line for line in out if line.startswith('["29e25072'))
    assert other.split()[-5:] == ["1", "1", "100", "100", "-"]


def test_show_json(tmp_path: Path) -> None:
    log, _ = _mixed_log(tmp_path)
    proc = kiln("show", str(log), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert (data["records"], data["bad_lines"]) == (6, 1)
    mm = next(w for w in data["workloads"] if w["workload_key"] == MATMUL_KEY)
    assert (mm["trials"], mm["valid"]) == (5, 2)
    assert abs(mm["best_cost"] - 0.001) < 1e-12 and abs(mm["mean_cost"] - 0.002) < 1e-12
    assert mm["errors"] == {"4": {"name": "RuntimeDeviceError", "count": 1, "example": ""},
                            "7": {"name": "RunTimeoutError", "count": 2, "example": ""}}


def test_best_prints_the_best_line_of_each_workload(tmp_path: Path) -> None:
    log, body = _mixed_log(tmp_path)
    proc = kiln("best", str(log))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == body[1] + body[5]


def test_validate_reports_every_bad_line(tmp_path: Path) -> None:
    log, body = _mixed_log(tmp_path)
    with open(log, "a") as f:
        f.write(body[0].replace("v0.6", "v0.9"))           # line 8
        f.write(body[0].replace('["CR", 3]', '["ZZ", 3]'))  # line 9
    proc = kiln("validate", str(log))
    assert proc.returncode == 1
    reported = [line.split(": ", 1)[0] for line in proc.stdout.splitlines()[:-1]]
    assert reported == [f"{log}:7", f"{log}:8", f"{log}:9"]
    assert "6 good records, 3 bad lines" in proc.stdout
    ok = kiln("validate", str(LOG), "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout) == {"records": 3, "bad": []}


def test_merge_and_distill(tmp_path: Path) -> None:
    log, body = _mixed_log(tmp_path)
    second = tmp_path / "second.json"
    second.write_text(body[5] + LOG.read_text().splitlines(keepends=True)[0])
    merged = tmp_path / "merged.json"
    proc = kiln("merge", str(merged), str(log), str(second))
    assert proc.returncode == 0, proc.stderr
    # lines 4 and 5 of the first log are the same line, and the second log repeats line 6
    assert "wrote 6 records" in proc.stdout and "2 duplicate" in proc.stdout
    assert f"{log}:7" in proc.stderr
    assert merged.read_text() == "".join(body[:4] + body[5:6]) + \
        LOG.read_text().splitlines(keepends=True)[0]
    proc = kiln("distill", str(merged), "-o", str(tmp_path / "best.json"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["records"] == 2
    assert (tmp_path / "best.json").read_text() == body[1] + body[5]
    proc = kiln("distill", str(second))
    assert proc.returncode == 0, proc.stderr
    assert Path(str(second) + ".best.json").is_file()


def test_a_missing_log_is_a_one_line_error(tmp_path: Path) -> None:
    proc = kiln("show", str(tmp_path / "nope.json"))
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"kiln records: error: tuning log {tmp_path / 'nope.json'} " \
        "does not exist"
