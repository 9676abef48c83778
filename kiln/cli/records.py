"""``kiln records show|best|validate|merge|distill``: look into and tidy auto-scheduler tuning logs.

Logs are TVM's JSON lines (TVM's and Kiln's alike). ``show`` prints a table with one row per
workload: trials, valid ones, the best and the mean cost of the valid ones, and the errors by
number and name; ``best`` prints the best record of each workload as log lines; ``validate``
reports every line that is not a readable record (exit status 1 when there is one); ``merge``
writes the records of several logs into one; ``distill`` keeps the best record of each workload.
None of them needs the workloads to be registered. ``--json`` prints JSON instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from kiln.errors import TuningLogError

__all__ = ["add_arguments", "run", "summarize"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kiln records``."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help="print JSON instead of text")
        # -v after the action too (SUPPRESS keeps one given before it)
        p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                       help="print the traceback of an error")

    p = sub.add_parser("show", help="a table per workload: trials, valid, best and mean cost, "
                                    "errors by number",
                       description="a table with one row per workload key")
    p.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="tuning log(s)")
    p.add_argument("--width", type=int, default=None, metavar="N",
                   help="table width (default: the terminal's, 100 when piped; 0: no limit)")
    common(p)
    p = sub.add_parser("best", help="the best valid record of each workload, as log lines",
                       description="the best valid record of each workload, as log lines")
    p.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="tuning log(s)")
    common(p)
    p = sub.add_parser("validate", help="report every bad line (exit 1 if there is one)",
                       description="report every line that is not a readable record, with its "
                                   "number and why; exit status 1 when there is one")
    p.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="tuning log(s)")
    common(p)
    p = sub.add_parser("merge", help="write the records of several logs into one",
                       description="write the readable records of LOG... into OUT (each line "
                                   "once, bad lines skipped, sidecars merged)")
    p.add_argument("out", type=Path, metavar="OUT", help="the merged log (replaced)")
    p.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="tuning logs")
    common(p)
    p = sub.add_parser("distill", help="keep the best record of each workload",
                       description="keep the best valid record of each workload of LOG in OUT "
                                   "(records already in OUT compete too, as in TVM)")
    p.add_argument("log", type=Path, metavar="LOG", help="tuning log")
    p.add_argument("-o", "--output", type=Path, default=None, metavar="OUT",
                   help="the distilled log (default: LOG.best.json)")
    common(p)


def _check_exists(paths: Sequence[Path]) -> None:
    for path in paths:
        if not path.is_file():
            raise TuningLogError(f"tuning log {path} does not exist")


@contextlib.contextmanager
def _warnings_to_stderr() -> Iterator[None]:
    """Show the skipped-line warnings as ``kiln records: warning: ...`` lines."""
    from kiln.auto_scheduler.measure_record import RecordWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RecordWarning)
        try:
            yield
        finally:
            for w in caught:
                if issubclass(w.category, RecordWarning):
                    print(f"kiln records: warning: {w.message}", file=sys.stderr)
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _entries(paths: Sequence[Path]) -> Iterator[tuple[Path, Any]]:
    from kiln.auto_scheduler.measure_record import RecordReader

    for path in paths:
        for entry in RecordReader(path).entries():
            yield path, entry


def summarize(paths: Sequence[Path]) -> dict[str, Any]:
    """Per-workload statistics of the records in ``paths`` (for ``show``).

    Returns
    -------
    dict
        ``{"workloads": [{"workload_key", "targets", "trials", "valid", "best_cost",
        "mean_cost", "errors": {"<no>": {"name", "count", "example"}}}], "records", "bad_lines"}``
        (costs in seconds, None when there is no valid record).
    """
    from kiln.auto_scheduler.measure import error_name
    from kiln.auto_scheduler.measure_record import read_sidecar

    rows: dict[str, dict[str, Any]] = {}
    bad = 0
    records = 0
    sidecar_dags: dict[str, str] = {}
    for path in paths:
        sidecar_dags.update(read_sidecar(path).dags)
    for _, entry in _entries(paths):
        if entry.error is not None:
            bad += 1
            continue
        records += 1
        key = entry.inp.task.workload_key
        row = rows.setdefault(key, {"workload_key": key, "targets": [], "trials": 0, "valid": 0,
                                    "best_cost": None, "_costs": [], "errors": {}})
        target = entry.inp.task.target_text
        if target not in row["targets"]:
            row["targets"].append(target)
        row["trials"] += 1
        res = entry.res
        if res.error_no == 0 and res.costs:
            cost = sum(res.costs) / len(res.costs)
            row["valid"] += 1
            row["_costs"].append(cost)
            if row["best_cost"] is None or cost < row["best_cost"]:
                row["best_cost"] = cost
        elif res.error_no != 0:
            err = row["errors"].setdefault(str(res.error_no), {
                "name": error_name(res.error_no), "count": 0, "example": ""})
            err["count"] += 1
            if res.error_msg and not err["example"]:
                err["example"] = res.error_msg.strip().splitlines()[-1] if res.error_msg.strip() \
                    else ""
    out = []
    for row in rows.values():
        costs = row.pop("_costs")
        row["mean_cost"] = sum(costs) / len(costs) if costs else None
        row["dag"] = sidecar_dags.get(row["workload_key"])
        out.append(row)
    return {"workloads": out, "records": records, "bad_lines": bad}


def _ms(cost: float | None) -> str:
    return "-" if cost is None else f"{cost * 1e3:.4g}"


def _show(args: argparse.Namespace) -> int:
    from kiln.runtime.table import Column, format_table, terminal_width

    summary = summarize(args.logs)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    rows = []
    for row in summary["workloads"]:
        errors = ", ".join(f"{no} {e['name']} x{e['count']}"
                           for no, e in sorted(row["errors"].items(), key=lambda kv: int(kv[0])))
        rows.append([row["workload_key"], str(row["trials"]), str(row["valid"]),
                     _ms(row["best_cost"]), _ms(row["mean_cost"]), errors or "-"])
    columns = [Column("Workload", shrink=1, min_width=16, soft_width=40),
               Column("Trials", align=">"), Column("Valid", align=">"),
               Column("Best(ms)", align=">"), Column("Mean(ms)", align=">"),
               Column("Errors", shrink=2, min_width=12)]
    width = terminal_width() if args.width is None else args.width
    names = ", ".join(str(p) for p in args.logs)
    print(f"{names}: {summary['records']} records, {len(rows)} workloads"
          + (f", {summary['bad_lines']} bad lines (see `kiln records validate`)"
             if summary["bad_lines"] else ""))
    if rows:
        print(format_table(columns, rows, width or None))
    return 0


def _best(args: argparse.Namespace) -> int:
    from kiln.auto_scheduler.measure_record import best_entries

    entries = [entry for _, entry in _entries(args.logs) if entry.error is None]
    best: list[Any] = best_entries(entries)
    if args.json:
        print(json.dumps([{"workload_key": e.inp.task.workload_key, "line": e.line,
                           "cost": sum(e.res.costs) / len(e.res.costs) if e.res.costs else None}
                          for e in best], indent=2))
        return 0
    for e in best:
        print(e.line)
    return 0


def _validate(args: argparse.Namespace) -> int:
    problems = []
    lines = 0
    for path, entry in _entries(args.logs):
        lines += 1
        reason = entry.error
        if reason is None and entry.inp.task.compute_dag is not None:
            try:  # the workload is known here: its steps must replay
                entry.inp.state  # noqa: B018
            except TuningLogError as e:
                reason = str(e).split(": ", 1)[-1] if str(e).startswith(str(path)) else str(e)
        if reason is not None:
            problems.append({"file": str(path), "line": entry.lineno, "reason": reason})
    if args.json:
        print(json.dumps({"records": lines - len(problems), "bad": problems}, indent=2))
    else:
        for p in problems:
            print(f"{p['file']}:{p['line']}: {p['reason']}")
        print(f"{lines - len(problems)} good records, {len(problems)} bad lines")
    return 1 if problems else 0


def _merge(args: argparse.Namespace) -> int:
    from kiln.auto_scheduler.measure_record import merge_record_files

    with _warnings_to_stderr():
        written, duplicates = merge_record_files(args.out, args.logs)
    if args.json:
        print(json.dumps({"output": str(args.out), "records": written, "duplicates": duplicates}))
    else:
        print(f"wrote {written} records to {args.out}"
              + (f" ({duplicates} duplicate lines dropped)" if duplicates else ""))
    return 0


def _distill(args: argparse.Namespace) -> int:
    from kiln.auto_scheduler.measure_record import distill_record_file

    out = args.output or Path(str(args.log) + ".best.json")
    with _warnings_to_stderr():
        kept = distill_record_file(args.log, out)
    if args.json:
        print(json.dumps({"output": str(out), "records": kept}))
    else:
        print(f"kept the best {kept} records in {out}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``kiln records ACTION``."""
    _check_exists(args.logs if hasattr(args, "logs") else [args.log])
    action = {"show": _show, "best": _best, "validate": _validate, "merge": _merge,
              "distill": _distill}[args.action]
    return action(args)
