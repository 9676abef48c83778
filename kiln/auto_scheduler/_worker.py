"""Worker processes that build and run measurement candidates, isolated from the tuning process.

A :class:`Worker` is a child Python process that imports Kiln once and then runs jobs sent to
it over a pipe: ``(function reference, arguments)``, both pickled, where the reference is
``"module:qualified_name"``. A :class:`WorkerPool` hands a list of jobs to its workers, at most
one job per worker at a time, and gives every job its own time limit counted from the moment
that job is handed to a ready worker (not from when it was queued, and not while a worker
starts). A job ends in one of four ways (:class:`JobResult`):

* ``"ok"``: the function returned; ``value`` is its result;
* ``"error"``: it raised; ``value`` is the traceback text;
* ``"timeout"``: it ran past its limit; its worker (with everything it started, such as the C
  compiler: each worker leads its own process group) is killed and a new one started;
* ``"died"``: the worker process ended during the job (a segfault in a kernel, ``os._exit``,
  the OOM killer); ``value`` says how it ended, with the end of its stderr (Python's
  ``faulthandler`` writes the traceback of a fatal signal there). A new worker replaces it.

Workers are reused between jobs and between calls (:func:`get_pool` keeps one pool per
purpose), because importing Kiln takes a good part of a second. A worker also ends by itself
when the tuning process goes away (its job pipe closes, or its parent changes).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from typing import IO, Any, NamedTuple

from kiln.errors import MeasureWorkerError

__all__ = ["JobResult", "MeasureWorkerError", "Worker", "WorkerPool", "close_pools", "get_pool"]

# Seconds a new worker may take to import Kiln and report ready.
STARTUP_TIMEOUT = 120.0
# Consecutive failed starts of one worker before the pool gives up.
MAX_FAILED_STARTS = 3
_HEADER = struct.Struct("<Q")
_STDERR_TAIL = 2000


class JobResult(NamedTuple):
    """How one job ended: ``status`` is ``"ok"``, ``"error"``, ``"timeout"`` or ``"died"``."""

    status: str
    value: Any
    seconds: float


# --- framing ---------------------------------------------------------------------------------

def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int) -> bytes:
    parts = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError("the pipe was closed")
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _send(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    _write_all(fd, _HEADER.pack(len(data)) + data)


def _recv_bytes(fd: int) -> bytes:
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    return _read_exact(fd, size)


def resolve(ref: str) -> Callable[..., Any]:
    """The function named by ``"module:qualified_name"``."""
    module, _, qualname = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def function_ref(fn: Callable[..., Any]) -> str:
    """``"module:qualified_name"`` of a module-level function (what :func:`resolve` reads)."""
    return f"{fn.__module__}:{fn.__qualname__}"


# --- the worker side -------------------------------------------------------------------------

def _watch_parent(parent: int) -> None:
    """End this worker when the tuning process is gone (a job may be stuck in a kernel)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)


def _main(read_fd: int, write_fd: int, parent: int, preload: Sequence[str]) -> None:
    """The worker's loop: run jobs until the job pipe closes."""
    import faulthandler

    faulthandler.enable()  # a fatal signal writes the Python traceback to stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the tuning process's to handle
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    for name in preload:
        importlib.import_module(name)
    _send(write_fd, ("ready", os.getpid()))
    while True:
        try:
            data = _recv_bytes(read_fd)
        except EOFError:
            return
        try:
            path, ref, args = pickle.loads(data)
            if path != sys.path:
                sys.path[:] = path
            out: tuple[str, Any] = ("ok", resolve(ref)(*args))
        except BaseException:  # every failure of a job is reported, the loop goes on
            out = ("error", traceback.format_exc())
        try:
            _send(write_fd, out)
        except (pickle.PicklingError, TypeError, AttributeError):
            _send(write_fd, ("error", "the job's result cannot be pickled:\n"
                             + traceback.format_exc()))


_BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
         "from kiln.auto_scheduler._worker import _main; "
         "_main(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5]))")


# --- the parent side -------------------------------------------------------------------------

class Worker:
    """One worker process (started by :meth:`start`, replaced by :meth:`restart`).

    Parameters
    ----------
    preload : sequence of str
        Modules the worker imports before it reports ready.
    """

    def __init__(self, preload: Sequence[str] = ()):
        self.preload = list(preload)
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready = False
        self.started_at = 0.0
        self.failed_starts = 0
        self._send_fd = -1
        self._recv_fd = -1
        self._stderr: IO[bytes] | None = None

    @property
    def recv_fd(self) -> int:
        """The pipe to select on for this worker's next message."""
        return self._recv_fd

    def start(self) -> None:
        """Start the process (it reports ready once it has imported Kiln)."""
        import json

        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self._stderr = tempfile.TemporaryFile(prefix="kiln-worker-stderr-")  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, json.dumps(sys.path), str(to_child_r),
                 str(from_child_w), str(os.getpid()), json.dumps(self.preload)],
                pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=self._stderr, start_new_session=True)
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self._send_fd, self._recv_fd = to_child_w, from_child_r
        self.ready = False
        self.started_at = time.monotonic()

    def send_bytes(self, message: bytes) -> None:
        """Send one pickled job message."""
        _write_all(self._send_fd, _HEADER.pack(len(message)) + message)

    def recv(self) -> Any:
        """Receive one message (raises EOFError when the process ended)."""
        return pickle.loads(_recv_bytes(self._recv_fd))

    def stop(self) -> None:
        """Kill the process and everything it started; close the pipes."""
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        for fd in (self._send_fd, self._recv_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._send_fd = self._recv_fd = -1
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self.proc = None
        self.ready = False

    def restart(self) -> None:
        """Replace the process by a new one."""
        self.stop()
        self.start()

    def death_message(self) -> str:
        """How the process ended, with the end of its stderr."""
        code = None
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=10)
        if code is None:
            how = "the worker stopped answering"
        elif code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            how = f"the worker process was killed by {name}"
        else:
            how = f"the worker process exited with code {code}"
        tail = ""
        if self._stderr is not None:
            with contextlib.suppress(OSError):
                size = self._stderr.seek(0, os.SEEK_END)
                self._stderr.seek(max(0, size - _STDERR_TAIL))
                tail = self._stderr.read().decode("utf-8", "replace").strip()
        return how + (f"; its stderr ends with:\n{tail}" if tail else "")


class WorkerPool:
    """Worker processes running jobs in parallel, each job under its own time limit.

    Parameters
    ----------
    n_workers : int
        Processes (and so jobs running at once).
    preload : sequence of str
        Modules every worker imports before it takes jobs.
    """

    def __init__(self, n_workers: int, preload: Sequence[str] = ()):
        if n_workers < 1:
            raise ValueError(f"a worker pool needs at least one worker, got {n_workers}")
        self.workers = [Worker(preload) for _ in range(n_workers)]

    def close(self) -> None:
        """Stop every worker."""
        for w in self.workers:
            w.stop()

    def map(self, ref: str, jobs: Sequence[tuple[Any, ...]], timeout: float,
            on_done: Callable[[int, JobResult], None] | None = None) -> list[JobResult]:
        """Run ``resolve(ref)(*args)`` for every ``args`` in ``jobs``.

        Parameters
        ----------
        ref : str
            ``"module:qualified_name"`` of the function.
        jobs : sequence of tuple
            The arguments of each call (pickled to the workers).
        timeout : float
            Seconds each job may run, from when a worker takes it.
        on_done : callable, optional
            Called as ``on_done(index, result)`` when a job ends (in the order they end).

        Returns
        -------
        list of JobResult
            In the order of ``jobs``.
        """
        results: list[JobResult | None] = [None] * len(jobs)
        pending = deque(enumerate(jobs))
        busy: dict[int, tuple[int, float]] = {}  # worker index -> (job index, start)

        def finish(i: int, res: JobResult) -> None:
            results[i] = res
            if on_done is not None:
                on_done(i, res)

        if not jobs:
            return []
        for w in self.workers[:len(jobs)]:
            if w.proc is None or w.proc.poll() is not None:
                w.restart()
        try:
            while pending or busy:
                self._dispatch(ref, pending, busy, finish)
                self._wait(busy, timeout, finish)
        except BaseException:  # interrupted: no worker may keep a job the next call would see
            self.close()
            raise
        return [r for r in results if r is not None]

    def _dispatch(self, ref: str, pending: deque[tuple[int, tuple[Any, ...]]],
                  busy: dict[int, tuple[int, float]],
                  finish: Callable[[int, JobResult], None]) -> None:
        for k, w in enumerate(self.workers):
            if not pending:
                return
            if k in busy or not w.ready:
                continue
            i, args = pending.popleft()
            try:
                message = pickle.dumps((list(sys.path), ref, args),
                                       protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # an argument that cannot be pickled fails its job only
                finish(i, JobResult("error", traceback.format_exc(), 0.0))
                continue
            try:
                w.send_bytes(message)
            except OSError:  # the worker died while idle: start another, keep the job
                pending.appendleft((i, args))
                w.restart()
                continue
            busy[k] = (i, time.monotonic())

    def _wait(self, busy: dict[int, tuple[int, float]], timeout: float,
              finish: Callable[[int, JobResult], None]) -> None:
        now = time.monotonic()
        deadlines = [start + timeout for _, start in busy.values()]
        starting = [w for w in self.workers if w.proc is not None and not w.ready]
        deadlines += [w.started_at + STARTUP_TIMEOUT for w in starting]
        wait = max(0.0, min(deadlines, default=now + 1.0) - now)
        fds = [self.workers[k].recv_fd for k in busy] + [w.recv_fd for w in starting]
        readable = set(select.select(fds, [], [], wait)[0]) if fds else set()
        now = time.monotonic()
        for k, w in enumerate(self.workers):
            if w.proc is None or w.recv_fd not in readable:
                continue
            try:
                status, value = w.recv()
            except (EOFError, OSError, pickle.UnpicklingError):
                if k in busy:
                    i, start = busy.pop(k)
                    finish(i, JobResult("died", w.death_message(), now - start))
                    w.restart()
                else:
                    self._failed_start(w)
                continue
            if k not in busy:  # the ready message of a new worker
                w.ready = True
                w.failed_starts = 0
                continue
            i, start = busy.pop(k)
            finish(i, JobResult(status, value, now - start))
        for k in list(busy):
            i, start = busy[k]
            if now - start >= timeout:
                del busy[k]
                self.workers[k].restart()
                finish(i, JobResult("timeout", None, now - start))
        for w in self.workers:
            if w.proc is not None and not w.ready and now - w.started_at > STARTUP_TIMEOUT:
                self._failed_start(w)

    def _failed_start(self, w: Worker) -> None:
        w.failed_starts += 1
        message = w.death_message()
        if w.failed_starts >= MAX_FAILED_STARTS:
            w.stop()
            raise MeasureWorkerError(f"a measurement worker process failed to start "
                                     f"{w.failed_starts} times: {message}")
        w.restart()


_pools: dict[tuple[str, int], WorkerPool] = {}


def get_pool(purpose: str, n_workers: int, preload: Sequence[str] = ()) -> WorkerPool:
    """The pool for ``purpose`` (``"build"``, ``"run"``) with ``n_workers``, reused across calls."""
    key = (purpose, n_workers)
    pool = _pools.get(key)
    if pool is None:
        for old_key in [k for k in _pools if k[0] == purpose]:
            _pools.pop(old_key).close()
        pool = _pools[key] = WorkerPool(n_workers, preload)
    return pool


@atexit.register
def close_pools() -> None:
    """Stop every worker of every pool."""
    while _pools:
        _pools.popitem()[1].close()
