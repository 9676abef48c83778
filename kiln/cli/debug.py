"""``kiln debug``: per-node times of a model, TVM-format dumps on request, the layer that diverges.

``kiln debug model.onnx --inputs x.npz`` imports and builds the model (``model.so`` or a
``numpy`` container is loaded as exported), times every node with the debug executor and prints
one row per node: index, node (kernel) name, time, shape and the source-model (ONNX) layers it
came from, fitted to the terminal's width (``--width``; ``--tvm-table`` prints TVM's own table).
``--json`` prints the same rows, untruncated, as JSON on stdout instead.

Nothing is left on disk unless asked: ``--dump-root D`` writes TVM's dump files to
``D/_tvmdbg_device_CPU_0`` (removing earlier ``_tvmdbg_*`` runs in ``D`` first); ``--trace FILE``
and ``--npy DIR`` write just those. ``--compare onnxruntime`` (or ``interpreter``) then compares
every node with the reference and prints the comparison with the first divergence highlighted;
the exit status is then 1 when a node diverges.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from kiln.errors import KilnError

__all__ = ["add_arguments", "prepare_dump_root", "run"]

_EPILOG = """\
output:
  The table shows each node once (kernel names shortened in the middle to fit the width) with the
  ONNX layers it came from. --json prints the rows (full names, source layers, every measurement),
  the profile and the comparison as one JSON document on stdout and nothing else there; save it
  with a redirect: kiln debug model.onnx --inputs x.npz --json > report.json

files:
  Without --dump-root, --trace or --npy nothing is written (work files live in a temporary folder
  removed at exit). --dump-root DIR writes TVM's layout, DIR/_tvmdbg_device_CPU_0/
  (_tvmdbg_graph_dump.json, _tvmdbg_execution_trace.json, output_tensors.params), after removing
  the _tvmdbg_* folders of earlier runs in DIR (nothing else in DIR is touched).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kiln debug``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _EPILOG
    parser.add_argument("model", help="model.onnx, or an artifact written by export_library")
    parser.add_argument("--inputs", required=True, help=".npz file with one array per model input")
    parser.add_argument("--dump-root", default=None, metavar="DIR",
                        help="write TVM's dump files to DIR/_tvmdbg_device_CPU_0, removing earlier "
                             "_tvmdbg_* runs in DIR first (default: no dump)")
    parser.add_argument("--compare", choices=("onnxruntime", "interpreter", "reference"),
                        default=None, help="compare every node with a reference run")
    parser.add_argument("--reference-model", default=None,
                        help="the source .onnx for --compare onnxruntime when MODEL is an artifact")
    parser.add_argument("--json", action="store_true",
                        help="print the rows (with source layers), profile and comparison as JSON "
                             "on stdout, and nothing else there (save with: --json > report.json)")
    parser.add_argument("--sort", choices=("time", "graph"), default="time",
                        help="table order (default: time, slowest first)")
    parser.add_argument("--width", type=int, default=None, metavar="N",
                        help="table width in characters (default: the terminal's, 100 when output "
                             "is not a terminal; 0: no limit, full names)")
    parser.add_argument("--tvm-table", action="store_true",
                        help="print TVM's table instead (TVM's columns and full names, not fitted)")
    parser.add_argument("--trace", default=None, metavar="FILE",
                        help="write the Chrome trace (chrome://tracing, Perfetto) to FILE")
    parser.add_argument("--timestamps", action="store_true",
                        help="add each node's wall-clock start and end times")
    parser.add_argument("--number", type=int, default=10, help="runs per node measurement")
    parser.add_argument("--repeat", type=int, default=1, help="measurements per node")
    parser.add_argument("--min-repeat-ms", type=float, default=1.0)
    parser.add_argument("--profile", action="store_true",
                        help="also time the whole graph and reconcile it with the sum of node times")
    parser.add_argument("--target", default=None,
                        help="build target for .onnx models: c (default with a C compiler) or numpy")
    parser.add_argument("--opt-level", type=int, default=3)
    parser.add_argument("--npy", nargs="?", const="", default=None, metavar="DIR",
                        help="also write every node output as .npy plus manifest.json to DIR "
                             "(default with --dump-root: its _tvmdbg_device_CPU_0/npy)")
    parser.add_argument("--filter", action="append", default=None, metavar="GLOB",
                        help="with --npy: only tensors whose node/kernel/source name matches")
    parser.add_argument("--max-bytes", type=int, default=None, help="with --npy: total size cap")
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--atol", type=float, default=1e-4)


def _default_target() -> str:
    """``c`` when the configured C compiler runs, else ``numpy`` (said in one line on stderr)."""
    from kiln.cli._common import compiler_problem

    problem = compiler_problem()
    if problem is None:
        return "c"
    print(f"kiln debug: {problem}; using the numpy target (reference kernels, slower): pass "
          "--target numpy to choose it, or --target c to require the compiler", file=sys.stderr)
    return "numpy"


def _load_inputs(path: str) -> dict[str, np.ndarray]:
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise KilnError(f"cannot read inputs from {path}: {e}") from None
    if isinstance(data, np.ndarray):  # a .npy: one array, no input name
        raise KilnError(f"{path} holds one array without a name; --inputs takes an .npz with one "
                        "array per model input, named after it: np.savez('x.npz', <input>=array)")
    with data:
        return {k: data[k] for k in data.files}


def _onnx_input_names(path: str) -> set[str]:
    import onnx

    try:
        model = onnx.load(path, load_external_data=False)
    except FileNotFoundError:
        raise
    except Exception as e:  # onnx raises protobuf's DecodeError and others on a damaged file
        raise KilnError(f"cannot read ONNX model {path}: {type(e).__name__}: {e}") from None
    return {i.name for i in model.graph.input}


def _build(args: argparse.Namespace, inputs: dict[str, np.ndarray]) -> tuple[Any, Any, str]:
    """The built (or loaded) module, the imported module (ONNX only) and the target."""
    from kiln import progress, relay
    from kiln.cli._common import pass_context
    from kiln.runtime.module import load_module

    if Path(args.model).suffix.lower() != ".onnx":
        lib = load_module(args.model)
        return lib, None, str(getattr(lib, "metadata", {}).get("target", ""))
    with progress.stage("import"):
        graph_inputs = _onnx_input_names(args.model)
        shapes = {k: v.shape for k, v in inputs.items() if k in graph_inputs}
        mod, params = relay.frontend.from_onnx(args.model, shape=shapes)
    target = args.target or _default_target()
    with progress.stage("build"), pass_context(args.opt_level, getattr(args, "verbose", False)):
        lib = relay.build(mod, target=target, params=params)
    return lib, mod, target


def _reference(args: argparse.Namespace, mod: Any) -> Any:
    if args.compare == "onnxruntime":
        source = args.reference_model or (args.model if mod is not None else None)
        if source is None:
            raise KilnError("--compare onnxruntime needs the source model: pass --reference-model "
                            "model.onnx")
        return source
    if mod is None:
        raise KilnError(f"--compare {args.compare} runs the unoptimised module, which an exported "
                        "artifact does not hold: give the .onnx model instead")
    return "interpreter"


def prepare_dump_root(root: Path) -> Path:
    """Make ``root`` ready for a new run: created, its earlier ``_tvmdbg_*`` entries removed.

    Parameters
    ----------
    root : Path
        The ``--dump-root`` folder; nothing in it but ``_tvmdbg_*`` entries is touched.

    Returns
    -------
    Path
        ``root``.
    """
    from kiln.debug.debug_executor import _DUMP_PATH_PREFIX

    if root.exists() and not root.is_dir():
        raise KilnError(f"--dump-root {root} is a file; give a folder")
    for old in root.glob(_DUMP_PATH_PREFIX + "*"):
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        else:
            old.unlink()
    root.mkdir(parents=True, exist_ok=True)
    return root


def _check_args(args: argparse.Namespace) -> None:
    if args.npy == "" and args.dump_root is None:
        raise KilnError("--npy needs a folder: --npy DIR, or --dump-root DIR to write "
                        "DIR/_tvmdbg_device_CPU_0/npy")
    if (args.filter or args.max_bytes is not None) and args.npy is None:
        raise KilnError("--filter and --max-bytes select what --npy writes: add --npy DIR")
    if args.width is not None and args.width < 0:
        raise KilnError(f"--width must be 0 (no limit) or positive, got {args.width}")


def _row_dict(r: Any, timestamps: bool) -> dict[str, Any]:
    row = {"index": r.index, "node": r.name, "op": r.op, "source_names": list(r.source_names),
           "time_us": r.time_us, "time_percent": r.time_percent, "shape": list(r.shape),
           "inputs": r.inputs, "outputs": r.outputs, "measurements_us": list(r.measurements_us)}
    if timestamps:
        row.update(start_time=r.start_time, end_time=r.end_time)
    return row


def _width(args: argparse.Namespace) -> int:
    from kiln.runtime.table import terminal_width

    return terminal_width() if args.width is None else args.width


def _table(datum: Any, args: argparse.Namespace) -> str:
    sort_by_time = args.sort == "time"
    if args.tvm_table:
        return str(datum.get_debug_result(sort_by_time, args.timestamps))
    width = _width(args)
    table = str(datum.get_fitted_result(width, sort_by_time, args.timestamps))
    if width and table != datum.get_fitted_result(0, sort_by_time, args.timestamps):
        note = "(names shortened: --width 0 for full names)"
        if len(note) <= width:
            table += "\n" + note
    return table


def run(args: argparse.Namespace) -> int:
    """Time every node of the model; optionally dump, and compare every node with a reference."""
    import kiln
    from kiln import progress
    from kiln.contrib.debugger import debug_executor
    from kiln.debug import compare

    _check_args(args)
    inputs = _load_inputs(args.inputs)
    lib, mod, target = _build(args, inputs)
    reference = _reference(args, mod) if args.compare else None

    def say(text: str) -> None:  # stdout is the JSON document alone with --json
        if not args.json:
            print(text, flush=True)

    with contextlib.ExitStack() as stack:
        if args.dump_root is not None:
            root = prepare_dump_root(Path(args.dump_root))
        else:  # the executor's work folder: removed at exit, whatever happens
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kiln-debug-")))
        m = debug_executor.create(lib.get_graph_json(), lib, kiln.cpu(), dump_root=root)
        for name, value in inputs.items():
            m.set_input(name, value)
        with progress.stage("timing nodes"):
            datum = m.collect(number=args.number, repeat=args.repeat,
                              min_repeat_ms=args.min_repeat_ms)
        result: dict[str, Any] = {
            "model": args.model, "target": target,
            "dump_path": str(m.dump_path) if args.dump_root is not None else None,
            "total_time_us": datum.total_time_us(),
            "rows": [_row_dict(r, args.timestamps) for r in datum.table_rows()],
        }
        say(_table(datum, args))
        if args.dump_root is not None:
            datum.dump_output_tensor()
            datum.dump_chrome_trace()
            say(f"dump: {m.dump_path}")
        if args.trace:
            result["trace"] = str(datum.dump_chrome_trace(args.trace))
            say(f"trace: {args.trace}")
        if args.npy is not None:
            manifest = m.dump_npy(args.npy or None, include=args.filter, max_bytes=args.max_bytes)
            result["npy"] = {"folder": str(manifest.folder), "tensors": len(manifest.tensors),
                             "total_bytes": manifest.total_bytes, "skipped": len(manifest.skipped)}
            say(f"npy: {len(manifest.tensors)} tensors ({manifest.total_bytes} bytes) in "
                f"{manifest.folder}, {len(manifest.skipped)} skipped")
        if args.profile:
            with progress.stage("profile"):
                profile = m.profile(number=args.number, repeat=max(args.repeat, 3),
                                    min_repeat_ms=args.min_repeat_ms)
            say(profile.roofline_table(_width(args)))
            say(profile.reconciliation())
            result["profile"] = profile.to_dict()
    status = 0
    if reference is not None:
        with progress.stage("compare"):
            report = compare(lib, reference, inputs, rtol=args.rtol, atol=args.atol, mod=mod)
        say(report.format(_width(args)))
        result["compare"] = report.to_dict()
        status = 1 if report.first_divergence is not None else 0
    if args.json:
        print(json.dumps(result, indent=2))
    return status
