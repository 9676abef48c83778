"""Entry point of the ``kiln`` command: parses arguments and dispatches to one module per command.

Each command module defines ``add_arguments(parser)`` and ``run(args) -> int``; errors Kiln raises
on purpose become one-line messages and exit status 1 (2 for usage errors).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kiln.errors import KilnError

__all__ = ["main"]

# command name -> (module under kiln.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "compile, run and time the bundled digits classifier"),
    "compile": ("compile", "import an ONNX model, compile it and export one artifact"),
    "run": ("run", "run an exported artifact on inputs from an .npz file"),
    "inspect": ("inspect", "show what a graph JSON, artifact or params file holds"),
    "debug": ("debug", "time every node, dump TVM's debug files, find the layer that diverges"),
    "calibrate": ("calibrate", "save the inputs and outputs of each external-target region"),
}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    from kiln import __version__

    parser = argparse.ArgumentParser(prog="kiln", description="Kiln: a deep-learning model compiler.")
    parser.add_argument("--version", action="version", version=f"kiln {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(f"kiln.cli.{module}").add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``kiln`` command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(f"kiln.cli.{COMMANDS[args.command][0]}")
    try:
        return int(module.run(args) or 0)
    except KilnError as e:
        print(f"kiln {args.command}: error: {e}", file=sys.stderr)
        return 1
    except FileNotFoundError as e:
        print(f"kiln {args.command}: error: {e}", file=sys.stderr)
        return 1
