"""kiln.progress: stages reach the reporter entered for the context; the terminal reporter's text."""

from __future__ import annotations

import io
import threading

import pytest

import kiln as tvm
from kiln import progress, relay
from kiln.transform import ModulePass, PassContext, PassInfo, Sequential


class Recorder(progress.Reporter):
    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.lock = threading.Lock()

    def begin(self, path, total, unit=""):
        with self.lock:
            self.events.append(("begin", path, total, unit))

    def update(self, path, done, total, detail):
        with self.lock:
            self.events.append(("update", path, done, total, detail))

    def end(self, path, seconds, ok):
        assert seconds >= 0
        with self.lock:
            self.events.append(("end", path, ok))

    def message(self, text):
        self.events.append(("message", text))


def test_no_reporter_means_no_output_and_no_error(capsys):
    assert type(progress.current()) is progress.Reporter
    with progress.stage("work", total=2) as st:
        st.advance()
        st.advance()
    assert st.done == 2
    assert capsys.readouterr() == ("", "")


def test_nested_stages_report_their_path_and_failure():
    rec = Recorder()
    with progress.reporting(rec):
        assert progress.current() is rec
        with progress.stage("build"), progress.stage("compiling", total=3, unit="kernels") as st:
            st.advance(2, "k1")
            st.update(3)
        with pytest.raises(RuntimeError), progress.stage("export"):
            raise RuntimeError("disk full")
    assert progress.current() is not rec  # left on exit
    assert rec.events == [
        ("begin", ("build",), None, ""),
        ("begin", ("build", "compiling"), 3, "kernels"),
        ("update", ("build", "compiling"), 2, 3, "k1"),
        ("update", ("build", "compiling"), 3, 3, ""),
        ("end", ("build", "compiling"), True),
        ("end", ("build",), True),
        ("begin", ("export",), None, ""),
        ("end", ("export",), False),
    ]


def test_worker_threads_advance_the_stage_they_were_handed():
    rec = Recorder()
    with progress.reporting(rec), progress.stage("compiling", total=40) as st:
        workers = [threading.Thread(target=lambda: [st.advance() for _ in range(10)])
                   for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    counts = [e[2] for e in rec.events if e[0] == "update"]
    assert counts == list(range(1, 41))  # every count once, in order


def _named(name: str) -> ModulePass:
    return ModulePass(lambda mod, ctx: mod, PassInfo(0, name))


def test_sequential_reports_each_pass_of_the_outermost_sequence():
    mod = tvm.IRModule.from_expr(relay.exp(relay.var("x", shape=(2,))))
    inner = Sequential([_named("B1"), _named("B2")], name="B")
    rec = Recorder()
    with progress.reporting(rec), PassContext(opt_level=0, disabled_pass=["C"]):
        Sequential([_named("A"), inner, _named("C")])(mod)
    assert rec.events == [
        ("begin", ("passes",), 2, "passes"),  # C is disabled; B's passes are not a new stage
        ("update", ("passes",), 0, 2, "A"),
        ("update", ("passes",), 1, 2, "B"),
        ("update", ("passes",), 2, 2, ""),
        ("end", ("passes",), True),
    ]


def test_terminal_reporter_is_silent_unless_asked():
    out = io.StringIO()
    reporter = progress.TerminalReporter(out)
    with progress.reporting(reporter), progress.stage("build", total=2) as st:
        st.advance()
    reporter.message("table")
    reporter.close()
    assert out.getvalue() == ""
    assert progress.TerminalReporter.for_stream(io.StringIO()).bar is False  # not a terminal


def test_terminal_reporter_verbose_lines():
    out = io.StringIO()
    reporter = progress.TerminalReporter(out, verbose=True, prefix="kiln x")
    with progress.reporting(reporter):
        with progress.stage("build"), progress.stage("compiling", total=2, unit="kernels") as st:
            st.advance(2)
        reporter.message("wall time per pass:")
    reporter.close()
    lines = out.getvalue().splitlines()
    assert [line.rsplit(": ", 1)[0] for line in lines[:2]] == ["kiln x: build > compiling",
                                                               "kiln x: build"]
    assert lines[0].endswith(" s (2/2 kernels)") and lines[1].endswith(" s")
    assert lines[2] == "wall time per pass:"


def test_terminal_reporter_bar_is_drawn_in_place_and_cleared():
    out = io.StringIO()
    reporter = progress.TerminalReporter(out, bar=True, prefix="kiln x", interval=0)
    with (progress.reporting(reporter), progress.stage("build"),
          progress.stage("compiling", total=4, unit="kernels") as st):
        st.advance(4, "fused_add")
    text = out.getvalue()
    assert "\rkiln x: build > compiling [....................] 0/4 kernels" in text
    assert "\rkiln x: build > compiling [####################] 4/4 kernels" in text
    assert "\n" not in text
    assert text.endswith("\r\x1b[K")  # cleared when the outermost stage ended
    reporter.close()
