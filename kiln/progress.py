"""Progress of long work (import, passes, lowering, kernel compilation, export), for a listener.

Library code marks its stages and does not care who, if anyone, listens::

    with progress.stage("compiling kernels", total=len(kernels)) as st:
        for chunk in chunks:
            compile(chunk)
            st.advance(len(chunk))

The events go to the :class:`Reporter` entered for the current context with
``with progress.reporting(reporter):`` (a :mod:`contextvars` variable: another thread or task
keeps its own, and a worker thread reports through the :class:`Stage` object it was handed).
With none entered the default reporter ignores everything, so a stage costs a few calls.
Stages nest: a stage opened inside another is reported with the path of names leading to it.

:class:`TerminalReporter` is the command line's listener: a one-line bar redrawn on a terminal,
and with ``verbose`` one line per finished stage with its wall time.

Examples
--------
>>> from kiln import progress
>>> with progress.reporting(progress.TerminalReporter(verbose=True)):  # doctest: +SKIP
...     lib = relay.build(mod, target="c", params=params)
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TextIO

__all__ = ["Reporter", "Stage", "TerminalReporter", "current", "reporting", "stage"]


class Reporter:
    """Receives progress events; this base class ignores them (subclass it to show them).

    A stage is named by its ``path``: the names of the stages open around it, then its own.
    Calls may come from several threads (a stage's :meth:`Stage.advance` from workers).
    """

    def begin(self, path: tuple[str, ...], total: int | None, unit: str = "") -> None:
        """A stage started; ``total`` is its units of work (called ``unit``) when known."""

    def update(self, path: tuple[str, ...], done: int, total: int | None, detail: str) -> None:
        """``done`` of ``total`` units of a stage are finished; ``detail`` says what runs now."""

    def end(self, path: tuple[str, ...], seconds: float, ok: bool) -> None:
        """A stage ended after ``seconds`` (``ok`` False when it raised)."""

    def message(self, text: str) -> None:
        """Extra information for a verbose listener (e.g. a timing table)."""

    def close(self) -> None:
        """No more events will come: tidy up the display."""


_NULL = Reporter()
_reporter: ContextVar[Reporter] = ContextVar("kiln_progress_reporter", default=_NULL)
_path: ContextVar[tuple[str, ...]] = ContextVar("kiln_progress_path", default=())


def current() -> Reporter:
    """The reporter of the current context (a no-op one when none was entered)."""
    return _reporter.get()


@contextlib.contextmanager
def reporting(reporter: Reporter) -> Iterator[Reporter]:
    """Send the progress of the work done inside the ``with`` block to ``reporter``.

    Parameters
    ----------
    reporter : Reporter
        The listener; it is not closed on exit (the caller owns it).
    """
    token = _reporter.set(reporter)
    path_token = _path.set(())
    try:
        yield reporter
    finally:
        _path.reset(path_token)
        _reporter.reset(token)


class Stage:
    """A running stage: count its finished units with :meth:`advance` (from any thread)."""

    def __init__(self, reporter: Reporter, path: tuple[str, ...], total: int | None):
        self.reporter = reporter
        self.path = path
        self.total = total
        self.done = 0
        self._lock = threading.Lock()

    def advance(self, n: int = 1, detail: str = "") -> None:
        """``n`` more units are finished; ``detail`` names what runs next (optional)."""
        with self._lock:
            self.done += n
            self.reporter.update(self.path, self.done, self.total, detail)

    def update(self, done: int, detail: str = "") -> None:
        """``done`` units in all are finished; ``detail`` names what runs now."""
        with self._lock:
            self.done = done
            self.reporter.update(self.path, done, self.total, detail)


@contextlib.contextmanager
def stage(name: str, total: int | None = None, unit: str = "") -> Iterator[Stage]:
    """Report the work inside the ``with`` block as a stage called ``name``.

    Parameters
    ----------
    name : str
        Short, lower-case, e.g. ``"compiling kernels"``.
    total : int, optional
        Units of work (advanced with :meth:`Stage.advance`), when known.
    unit : str
        What a unit is, plural (``"kernels"``), for display.
    """
    reporter = _reporter.get()
    path = (*_path.get(), name)
    token = _path.set(path)
    st = Stage(reporter, path, total)
    reporter.begin(path, total, unit)
    start = time.perf_counter()
    ok = False
    try:
        yield st
        ok = True
    finally:
        _path.reset(token)
        reporter.end(path, time.perf_counter() - start, ok)


# --- the command line's listener ----------------------------------------------------------------

@dataclass
class _Open:
    path: tuple[str, ...]
    total: int | None
    unit: str
    start: float
    done: int = 0
    detail: str = ""


class TerminalReporter(Reporter):
    """Progress on a text stream (standard error by default).

    Parameters
    ----------
    stream : file, optional
        Where to write (default ``sys.stderr`` at the time of each write).
    bar : bool
        Redraw one status line (stages, ``done/total`` with a bar, elapsed seconds) in place;
        only sensible on a terminal. It is cleared when the outermost stage ends.
    verbose : bool
        Print a line with the wall time of every finished stage, and :meth:`message` texts.
    prefix : str
        Start of every line (e.g. ``"kiln compile"``).
    interval : float
        Seconds between redraws of the bar while nothing changes (it shows the elapsed time);
        0 redraws only on events.
    """

    def __init__(self, stream: TextIO | None = None, bar: bool = False, verbose: bool = False,
                 prefix: str = "kiln", interval: float = 0.25):
        self.stream = stream
        self.bar = bar
        self.verbose = verbose
        self.prefix = prefix
        self.interval = interval
        self._open: list[_Open] = []
        self._lock = threading.RLock()
        self._shown = False
        self._last_draw = 0.0
        self._t0: float | None = None  # first stage's start: the bar shows the time since
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    @classmethod
    def for_stream(cls, stream: TextIO, verbose: bool = False,
                   prefix: str = "kiln") -> TerminalReporter:
        """A reporter with a bar when ``stream`` is a terminal and lines only when ``verbose``."""
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        return cls(stream=stream, bar=tty, verbose=verbose, prefix=prefix)

    @property
    def _out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stderr

    def _find(self, path: tuple[str, ...]) -> _Open | None:
        for entry in reversed(self._open):
            if entry.path == path:
                return entry
        return None

    def begin(self, path: tuple[str, ...], total: int | None, unit: str = "") -> None:
        """Show the new stage."""
        with self._lock:
            now = time.perf_counter()
            if self._t0 is None:
                self._t0 = now
            self._open.append(_Open(path, total, unit, now))
            if self.bar:
                self._start_ticker()
                self._draw(force=True)

    def update(self, path: tuple[str, ...], done: int, total: int | None, detail: str) -> None:
        """Move the stage's counter."""
        with self._lock:
            entry = self._find(path)
            if entry is None:
                return
            entry.done, entry.total, entry.detail = done, total, detail
            if self.bar:
                self._draw(force=total is not None and done >= total)

    def end(self, path: tuple[str, ...], seconds: float, ok: bool) -> None:
        """Drop the stage; print its time when verbose."""
        with self._lock:
            entry = self._find(path)
            if entry is not None:
                self._open.remove(entry)
            if self.verbose and ok:
                count = ""
                if entry is not None and entry.total is not None:
                    count = f" ({entry.done}/{entry.total} {entry.unit})".replace(" )", ")")
                self._write_line(f"{self.prefix}: {' > '.join(path)}: {seconds:.3f} s{count}")
            if not self.bar:
                return
            if self._open:
                self._draw(force=True)
            else:
                self._clear()

    def message(self, text: str) -> None:
        """Print ``text`` when verbose."""
        if self.verbose:
            with self._lock:
                self._write_line(text)

    def close(self) -> None:
        """Stop redrawing and clear the bar."""
        self._stop.set()
        ticker = self._ticker
        if ticker is not None and ticker is not threading.current_thread():
            ticker.join(timeout=1.0)
        with self._lock:
            self._clear()

    # --- drawing --------------------------------------------------------------------------------

    def _write_line(self, text: str) -> None:
        self._clear()
        self._out.write(text + "\n")
        self._out.flush()
        if self.bar and self._open:
            self._draw(force=True)

    def _clear(self) -> None:
        if self._shown:
            self._out.write("\r\x1b[K")
            self._out.flush()
            self._shown = False

    def _status(self, columns: int) -> str:
        """The status line, at most ``columns - 1`` wide: the bar narrows first, then the
        detail shortens, so the counts and the elapsed time stay visible."""
        entry = self._open[-1]
        start = self._t0 if self._t0 is not None else entry.start
        head = f"{self.prefix}: {' > '.join(entry.path)}"
        count = ""
        if entry.total:
            count = f" {entry.done}/{entry.total}" + (f" {entry.unit}" if entry.unit else "")
        tail = f"  {time.perf_counter() - start:.1f}s"
        room = columns - 1 - len(head) - len(count) - len(tail)
        bar = ""
        if entry.total and room >= 8:
            width = min(20, room - 3)
            filled = min(width, entry.done * width // entry.total)
            bar = f" [{'#' * filled}{'.' * (width - filled)}]"
        text = head + bar + count + tail
        room = columns - 1 - len(text) - 2
        if entry.detail and room >= 8:  # what runs now
            detail = entry.detail if len(entry.detail) <= room else entry.detail[:room - 3] + "..."
            text += f"  {detail}"
        if len(text) >= columns:
            text = text[:columns - 4] + "..."
        return text

    def _draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not self._open or (not force and now - self._last_draw < 0.05):
            return
        try:
            columns = os.get_terminal_size(self._out.fileno()).columns
        except (AttributeError, OSError, ValueError):
            columns = 0
        if columns < 20:  # unknown (0 under some pseudo-terminals) or absurdly narrow
            columns = 80
        line = self._status(columns)
        self._out.write("\r" + line + "\x1b[K")
        self._out.flush()
        self._shown = True
        self._last_draw = now

    def _start_ticker(self) -> None:
        if self._ticker is not None or self.interval <= 0:
            return

        def tick() -> None:
            while not self._stop.wait(self.interval):
                with self._lock:
                    if self._open:
                        with contextlib.suppress(OSError, ValueError):
                            self._draw()

        self._ticker = threading.Thread(target=tick, name="kiln-progress", daemon=True)
        self._ticker.start()
