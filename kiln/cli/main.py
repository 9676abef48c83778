"""Entry point of the ``kiln`` command: parses arguments and dispatches to one module per command.

Each command module defines ``add_arguments(parser)`` and ``run(args) -> int``. Whatever a command
raises becomes one line on standard error, ``kiln <command>: error: <message>``, and exit status 1
(2 for usage errors, 130 when interrupted); ``-v/--verbose`` (before or after the command) also
prints the traceback, and the time of every stage and pass. Long work shows its progress on
standard error: a bar on a terminal, nothing when standard error is piped (unless ``-v``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from kiln import progress
from kiln.errors import KilnError

__all__ = ["build_parser", "error_message", "main"]

# command name -> (module under kiln.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "compile, run and time the bundled digits classifier"),
    "compile": ("compile", "import an ONNX model, compile it and export one artifact"),
    "run": ("run", "run an exported artifact on inputs from an .npz file"),
    "inspect": ("inspect", "show what a graph JSON, artifact or params file holds"),
    "debug": ("debug", "time every node, dump TVM's debug files, find the layer that diverges"),
    "calibrate": ("calibrate", "save the inputs and outputs of each external-target region"),
    "records": ("records", "show, validate, merge and distill auto-scheduler tuning logs"),
    "tune": ("tune", "auto-schedule a model's kernels into a tuning log (kiln compile --tuning-log)"),
}

VERBOSE_HELP = "print stage and per-pass times, and the traceback of an error"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    from kiln._version import __version__

    parser = argparse.ArgumentParser(prog="kiln", description="Kiln: a deep-learning model compiler.")
    parser.add_argument("--version", action="version", version=f"kiln {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(f"kiln.cli.{module}").add_arguments(p)
        # also after the command; SUPPRESS keeps a -v given before the command
        with contextlib.suppress(argparse.ArgumentError):  # the command has its own -v
            p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                           help=VERBOSE_HELP)
    return parser


def error_message(exc: BaseException) -> str:
    """The text after ``error:`` for an exception a command raised.

    Kiln's own errors are shown as written; an ``OSError`` without its ``[Errno N]`` prefix;
    anything else as ``Type: message`` on one line, with a pointer to ``--verbose``.
    """
    if isinstance(exc, KilnError):
        return str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename!r}" if exc.filename is not None else ""
        return f"{exc.strerror}{where}"
    text = " ".join(str(exc).split())
    return (f"{type(exc).__name__}{': ' + text if text else ''} "
            "(unexpected; --verbose shows the traceback)")


def _discard_stdout() -> None:
    """Point standard output at devnull, so the exit flush cannot fail again (see Python's
    "Note on SIGPIPE" in the signal module's docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # stdout is not a real file (e.g. captured)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``kiln`` command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    command = args.command
    verbose = bool(getattr(args, "verbose", False))
    reporter = progress.TerminalReporter.for_stream(sys.stderr, verbose=verbose,
                                                    prefix=f"kiln {command}")
    try:
        try:
            module = importlib.import_module(f"kiln.cli.{COMMANDS[command][0]}")
            with progress.reporting(reporter):
                status = int(module.run(args) or 0)
            sys.stdout.flush()  # a closed pipe shows here, not at exit
        finally:
            reporter.close()
    except BrokenPipeError:  # e.g. `kiln inspect model.so | head -1`: the reader has gone
        _discard_stdout()
        return 1
    except KeyboardInterrupt:
        if verbose:
            traceback.print_exc()
        print(f"kiln {command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if verbose:
            traceback.print_exc()
        print(f"kiln {command}: error: {error_message(e)}", file=sys.stderr)
        return 1
    return status
