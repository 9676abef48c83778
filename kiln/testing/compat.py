"""Run TVM's relay-era test files against Kiln (``import kiln as tvm``) and tabulate the results.

The files (``../shared/tvm_relay_tests/tests/*.py``) are read, converted with mechanical edits only
(:func:`convert_source`: the ``tvm`` imports renamed to ``kiln``), written to a temporary folder and
run by pytest in a subprocess per file, with a timeout. This module is also the pytest plugin
(``-p kiln.testing.compat``) that logs each unit's outcome as a JSON line, so a file that times out
still reports the units it finished. :func:`compat_markdown` writes the per-file table of
``docs/tvm_compat.md``; ``scripts/tvm_compat.py`` is the command line.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "FileResult",
    "TutorialResult",
    "UnitResult",
    "compat_markdown",
    "convert_source",
    "convert_tutorial",
    "out_of_scope_reason",
    "run_file",
    "run_suite",
    "run_tutorial",
    "run_tutorials",
    "tutorials_markdown",
]

_IMPORT_TVM = re.compile(
    r"^(?P<ind>[ \t]*)import tvm(?P<sub>(\.[\w.]+)?)(?P<alias>[ \t]+as[ \t]+\w+)?[ \t]*(?P<rest>#.*)?$", re.M)
_FROM_TVM = re.compile(r"^(?P<ind>[ \t]*)from tvm(?P<sub>(\.[\w.]+)?)[ \t]+import\b", re.M)


#: TVM module paths that are one module under two names in TVM, and the one Kiln has:
#: ``tvm.ir.instrument`` is ``tvm.instrument`` (Kiln's instruments sit in the transform layer,
#: above ``kiln.ir``, so only ``kiln.instrument`` exists).
MODULE_ALIASES: dict[str, str] = {".ir.instrument": ".instrument"}


def convert_source(text: str) -> str:
    """``text`` with TVM's imports renamed to Kiln's; nothing else changes.

    ``import tvm`` -> ``import kiln as tvm``; ``import tvm.X`` -> ``import kiln.X; import kiln as tvm``
    (so ``tvm.X`` keeps working through the alias); ``import tvm.X as Y`` -> ``import kiln.X as Y``;
    ``from tvm[.X] import ...`` -> ``from kiln[.X] import ...``; module paths in
    :data:`MODULE_ALIASES` take Kiln's name of the same module.
    """
    def repl_import(m: re.Match[str]) -> str:
        ind, sub, alias, rest = m["ind"], MODULE_ALIASES.get(m["sub"] or "", m["sub"] or ""), \
            m["alias"], m["rest"]
        tail = f"  {rest}" if rest else ""
        if alias:
            return f"{ind}import kiln{sub}{alias}{tail}"
        if sub:
            return f"{ind}import kiln{sub}; import kiln as tvm{tail}"
        return f"{ind}import kiln as tvm{tail}"

    text = _IMPORT_TVM.sub(repl_import, text)
    return _FROM_TVM.sub(
        lambda m: f"{m['ind']}from kiln{MODULE_ALIASES.get(m['sub'] or '', m['sub'] or '')} import",
        text)


@dataclass
class UnitResult:
    """One test unit: its node id, ``passed``/``failed``/``skipped``/``error``, the first error line."""

    nodeid: str
    outcome: str
    message: str = ""


@dataclass
class FileResult:
    """One file's units, or the error that stopped it being collected (``import_error``)."""

    name: str
    units: list[UnitResult] = field(default_factory=list)
    import_error: str = ""
    timed_out: bool = False
    seconds: float = 0.0

    def count(self, outcome: str) -> int:
        """Units with ``outcome``."""
        return sum(u.outcome == outcome for u in self.units)


# ---------------------------------------------------------------------------------------------
# pytest plugin side (runs inside the child pytest)

_LOG: dict[str, Any] = {}


def pytest_addoption(parser: Any) -> None:
    """``--kiln-compat-log PATH``: where to append one JSON line per unit."""
    parser.addoption("--kiln-compat-log", default=None, help="JSON-lines log of unit outcomes")


def pytest_configure(config: Any) -> None:
    """Remember the log path."""
    _LOG["path"] = config.getoption("--kiln-compat-log")


def _first_line(text: str, limit: int = 160) -> str:
    text = re.sub(r" \((/|[A-Za-z]:\\)[^)]*\)", "", str(text))  # drop absolute paths
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    e_lines = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    line = e_lines[0] if e_lines else (lines[-1] if lines else "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _write(record: dict[str, str]) -> None:
    path = _LOG.get("path")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def _crash(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        lines = [ln.strip() for ln in str(crash.message).splitlines() if ln.strip()]
        text = " ".join(lines[:2]) if lines and lines[0].endswith(":") else (lines[0] if lines else "")
        return _first_line(text)
    return _first_line(str(report.longrepr))


def pytest_collectreport(report: Any) -> None:
    """Log a file that fails to collect (import error)."""
    if report.failed:
        _write({"nodeid": report.nodeid, "outcome": "import_error", "message": _crash(report)})


def pytest_runtest_logreport(report: Any) -> None:
    """Log each unit once: its failing phase, its skip reason, or its pass."""
    if report.skipped:
        if hasattr(report, "wasxfail"):
            reason = f"xfail: {report.wasxfail}"
        else:
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        _write({"nodeid": report.nodeid, "outcome": "skipped", "message": _first_line(reason)})
    elif report.failed:
        outcome = "failed" if report.when == "call" else "error"
        _write({"nodeid": report.nodeid, "outcome": outcome, "message": _crash(report)})
    elif report.when == "call":
        _write({"nodeid": report.nodeid, "outcome": "passed", "message": ""})


# ---------------------------------------------------------------------------------------------
# runner side

#: TVM's test-tree helper modules the converted files import, supplied by Kiln's own versions:
#: relative path in the work folder -> its source.
TEST_TREE_MODULES: dict[str, str] = {
    "utils/__init__.py": '"""TVM\'s tests/python/relay/utils, supplied by Kiln."""\n',
    "utils/external_codegen.py": ("from kiln.relay.testing.external_codegen import *  # noqa: F403\n"
                                  "from kiln.relay.testing.external_codegen import __all__  # noqa: F401\n"),
}


def write_test_tree(workdir: Path) -> None:
    """Write :data:`TEST_TREE_MODULES` under ``workdir`` (where the converted files run)."""
    for rel, text in TEST_TREE_MODULES.items():
        path = workdir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def run_file(source: Path, workdir: Path, timeout: float = 300.0) -> FileResult:
    """Convert ``source`` into ``workdir`` and run pytest on it in a subprocess.

    Parameters
    ----------
    source : Path
        A TVM test file.
    workdir : Path
        An empty-enough folder to write the converted file and the log in.
    timeout : float
        Seconds before the child pytest is killed; units finished by then are kept.
    """
    dest = workdir / source.name
    dest.write_text(convert_source(source.read_text(encoding="utf-8")), encoding="utf-8")
    write_test_tree(workdir)
    log = workdir / f"{source.stem}.jsonl"
    log.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", str(dest), "-q", "-p", "no:cacheprovider",
           "-p", "kiln.testing.compat", "-p", "kiln.testing.plugin",
           "-p", "kiln.relay.testing.tvm_test_env", "-o", "addopts=",
           "--rootdir", str(workdir), "--kiln-compat-log", str(log), "-W", "ignore"]
    result = FileResult(source.name)
    start = time.monotonic()
    try:
        subprocess.run(cmd, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        result.timed_out = True
    result.seconds = time.monotonic() - start
    seen: dict[str, UnitResult] = {}
    if log.exists():
        for line in log.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec["outcome"] == "import_error":
                result.import_error = rec["message"] or "collection failed"
                continue
            prev = seen.get(rec["nodeid"])
            if prev is None or prev.outcome == "passed":  # a teardown error overrides a pass
                seen[rec["nodeid"]] = UnitResult(rec["nodeid"].split("::", 1)[-1], rec["outcome"],
                                                 rec["message"])
    result.units = list(seen.values())
    return result


def run_suite(sources: list[Path], timeout: float = 300.0, progress: bool = False) -> list[FileResult]:
    """:func:`run_file` on each of ``sources`` in one temporary folder."""
    results = []
    with tempfile.TemporaryDirectory(prefix="kiln_tvm_compat_") as tmp:
        for src in sources:
            res = run_file(src, Path(tmp), timeout)
            results.append(res)
            if progress:
                print(f"{src.name}: {res.count('passed')}/{len(res.units)} passed"
                      f"{' (import error)' if res.import_error else ''}"
                      f"{' (timed out)' if res.timed_out else ''} in {res.seconds:.0f}s", flush=True)
    return results


# ---------------------------------------------------------------------------------------------
# tutorials

#: Edits every tutorial gets besides :func:`convert_source`: (old text, new text, why).
TUTORIAL_COMMON_EDITS: list[tuple[str, str, str]] = [
    ("from kiln.contrib.download import download_testdata",
     "from kiln.testing.tutorial_data import download_testdata",
     "downloads replaced by locally built files (kiln.testing.tutorial_data)"),
]

#: Per-tutorial edits: (old text, new text, why); each must apply, or the tutorial is reported.
TUTORIAL_EDITS: dict[str, list[tuple[str, str, str]]] = {
    "relay_quick_start.py": [
        ("target = tvm.target.cuda()", 'target = tvm.target.Target("llvm")', "CPU target, not CUDA"),
        ("dev = tvm.cuda()", "dev = tvm.cpu()", "CPU device, not CUDA"),
    ],
}

#: Parts of tutorials that are out of scope until tuning lands (a tutorial that uses them).
_TUNING = re.compile(r"\b(auto_scheduler|autotvm)\b")


@dataclass
class TutorialResult:
    """One tutorial: ``runs``/``fails``/``timed out``, the error line, the edits applied to it."""

    name: str
    status: str
    message: str = ""
    seconds: float = 0.0
    edits: list[str] = field(default_factory=list)
    tuning: bool = False


def convert_tutorial(name: str, text: str) -> tuple[str, list[str]]:
    """``text`` converted (:func:`convert_source`) and edited; the reasons of the edits applied.

    Raises
    ------
    ValueError
        A listed edit of this tutorial no longer matches its text.
    """
    out = convert_source(text)
    applied = []
    for old, new, why in TUTORIAL_COMMON_EDITS:
        if old in out:
            out = out.replace(old, new)
            applied.append(why)
    for old, new, why in TUTORIAL_EDITS.get(name, []):
        if old not in out:
            raise ValueError(f"tutorial edit no longer applies: {old!r}")
        out = out.replace(old, new)
        applied.append(why)
    return out, applied


def run_tutorial(source: Path, workdir: Path, timeout: float = 600.0) -> TutorialResult:
    """Convert the tutorial ``source`` into ``workdir`` and run it as a script there."""
    text = source.read_text(encoding="utf-8")
    result = TutorialResult(source.name, "fails", tuning=bool(_TUNING.search(text)))
    try:
        converted, result.edits = convert_tutorial(source.name, text)
    except ValueError as err:
        result.message = str(err)
        return result
    dest = workdir / f"tutorial_{source.name}"
    dest.write_text(converted, encoding="utf-8")
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(dest)], cwd=workdir, capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        result.status, result.message = "timed out", f"still running after {timeout:.0f} s"
    else:
        if proc.returncode == 0:
            result.status = "runs"
        else:
            lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
            result.message = _first_line(lines[-1] if lines else f"exit status {proc.returncode}")
    result.seconds = time.monotonic() - start
    return result


def run_tutorials(sources: list[Path], timeout: float = 600.0,
                  progress: bool = False) -> list[TutorialResult]:
    """:func:`run_tutorial` on each of ``sources`` in one temporary folder."""
    results = []
    with tempfile.TemporaryDirectory(prefix="kiln_tvm_tutorials_") as tmp:
        for src in sources:
            res = run_tutorial(src, Path(tmp), timeout)
            results.append(res)
            if progress:
                print(f"{src.name}: {res.status}{': ' + res.message if res.message else ''} "
                      f"in {res.seconds:.0f}s", flush=True)
    return results


def tutorials_markdown(results: list[TutorialResult]) -> str:
    """The tutorials section of ``docs/tvm_compat.md``."""
    out = ["## Tutorials", "",
           "TVM's tutorials (`../shared/tvm_relay_tests/tutorials/`) converted as the tests are, plus the "
           "edits listed (downloads replaced by locally built files, GPU targets by the CPU), and run "
           "as scripts.", "",
           "| tutorial | result | seconds | edits besides the imports |", "|---|---|---:|---|"]
    for r in results:
        status = r.status + (f": {_esc(r.message)}" if r.message else "")
        if r.status != "runs" and (why := out_of_scope_reason(r.message)):
            status += f" (out of scope: {why})"
        edits = "; ".join(_esc(e) for e in r.edits) or "none"
        out.append(f"| {r.name} | {status} | {r.seconds:.0f} | {edits} |")
    tuning = [r.name for r in results if r.tuning]
    out += ["", "Out of scope until tuning lands (their auto-scheduler/AutoTVM parts): "
            + (", ".join(f"`{n}`" for n in tuning) if tuning else "none of these tutorials has one") + "."]
    return "\n".join(out) + "\n"


_EXTERNAL = "needs a module outside Kiln (PyTorch, torchvision, onnxscript)"
_OUT_OF_SCOPE = [
    (re.compile(r"cuda|gpu|opencl|metal|vulkan|rocm|nvcc|cudnn|cublas|tensorrt|amdgpu", re.I),
     "needs a GPU or a GPU library"),
    (re.compile(r"x86|avx512|vnni|arm dot|tensorize|requires llvm \d", re.I),
     "needs TVM's target-specific codegen"),
    (re.compile(r"kiln\.tir|\btir\b|kiln\.te\.schedule|lower\(", re.I), "needs TIR internals"),
    (re.compile(r"_ffi|kiln\.rpc|\brpc\b|kiln\.runtime\.(ndarray|module)\._|aot|kiln\.autotvm", re.I),
     "needs TVM's C++ runtime (FFI, RPC, AOT, autotvm)"),
    (re.compile(r"No module named '(torch|torchvision|onnxscript)\b"),
     _EXTERNAL),
    (re.compile(r"onnxruntime.*(NOT_IMPLEMENTED|INVALID_GRAPH)", re.S),
     "the reference (onnxruntime) cannot run the model"),
]


def out_of_scope_reason(message: str) -> str | None:
    """Why a skip or failure with ``message`` is out of Kiln's scope, or None when it is in scope."""
    for pattern, reason in _OUT_OF_SCOPE:
        if pattern.search(message):
            return reason
    return None


def _import_out_of_scope(message: str) -> str | None:
    """A whole file failing at import is in scope (Kiln should provide the name) unless the module
    it misses is not TVM's (PyTorch, TVM's test-tree helpers)."""
    reason = out_of_scope_reason(message)
    return reason if reason == _EXTERNAL else None


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def compat_markdown(results: list[FileResult], command: str = "python scripts/tvm_compat.py",
                    tutorials: list[TutorialResult] | None = None) -> str:
    """The ``docs/tvm_compat.md`` page for ``results`` (and ``tutorials``, when run)."""
    total = sum(len(r.units) for r in results)
    passed = sum(r.count("passed") for r in results)
    pct = 100.0 * passed / total if total else 0.0
    out = [
        "# TVM relay test conformance",
        "",
        "TVM v0.14.0's relay-era test files (`../shared/tvm_relay_tests/tests/`) run against Kiln with",
        "mechanical edits only (`import tvm` -> `import kiln as tvm`, `from tvm...` -> `from kiln...`),",
        "on the CPU targets `llvm` and `c`. Generated by `" + command + "`; do not edit by hand.",
        "",
        f"**{passed} / {total} units pass ({pct:.1f}%)**; files failing at import count no units.",
        "",
        "| file | collected | passed | failed | error | skipped | out of scope | import error |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        oos = sum(1 for u in r.units if u.outcome != "passed" and out_of_scope_reason(u.message))
        imp = _esc(r.import_error) if r.import_error else ("timed out" if r.timed_out else "")
        out.append(f"| {r.name} | {len(r.units)} | {r.count('passed')} | {r.count('failed')} | "
                   f"{r.count('error')} | {r.count('skipped')} | {oos} | {imp} |")
    out += ["", "## Out of scope", "",
            "Units (and files) that need a GPU, TIR internals or TVM's C++ runtime, with the reason.", ""]
    any_oos = False
    for r in results:
        if r.import_error and _import_out_of_scope(r.import_error):
            out.append(f"- `{r.name}` (whole file): {_import_out_of_scope(r.import_error)}: "
                       f"{_esc(r.import_error)}")
            any_oos = True
        for u in r.units:
            if u.outcome != "passed" and (why := out_of_scope_reason(u.message)):
                out.append(f"- `{r.name}::{u.nodeid}` ({u.outcome}): {why}: {_esc(u.message)}")
                any_oos = True
    if not any_oos:
        out.append("None.")
    out += ["", "## Failures in scope", "", "The first error line of each unit that fails, errors or skips "
            "for a reason Kiln should fix.", ""]
    for r in results:
        rows = [u for u in r.units if u.outcome in ("failed", "error", "skipped")
                and not out_of_scope_reason(u.message)]
        if r.import_error and not _import_out_of_scope(r.import_error):
            rows_text = [f"- import error: {_esc(r.import_error)}"]
        else:
            rows_text = []
        rows_text += [f"- `{u.nodeid}` ({u.outcome}): {_esc(u.message)}" for u in rows]
        if rows_text:
            out += [f"### {r.name}", "", *rows_text, ""]
    if tutorials:
        out += ["", tutorials_markdown(tutorials)]
    return "\n".join(out).rstrip() + "\n"
