"""``kiln debug``: per-node times and TVM-format dumps of a model, or the layer that diverges.

``kiln debug model.onnx --inputs x.npz`` imports and builds the model (``model.so`` or a
``numpy`` container is loaded as exported), runs the debug executor (dump folder
``<dump root>/_tvmdbg_device_CPU_0``) and prints TVM's table. ``--compare onnxruntime`` (or
``interpreter``) then compares every node with the reference and prints the comparison with the
first divergence highlighted; the exit status is then 1 when a node diverges.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from kiln.errors import KilnError

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kiln debug``."""
    parser.add_argument("model", help="model.onnx, or an artifact written by export_library")
    parser.add_argument("--inputs", required=True, help=".npz file with one array per model input")
    parser.add_argument("--dump-root", default=None,
                        help="dump folder (default: a fresh temporary folder, printed)")
    parser.add_argument("--compare", choices=("onnxruntime", "interpreter", "reference"),
                        default=None, help="compare every node with a reference run")
    parser.add_argument("--reference-model", default=None,
                        help="the source .onnx for --compare onnxruntime when MODEL is an artifact")
    parser.add_argument("--json", default=None, help="write the table rows (and comparison) as JSON")
    parser.add_argument("--sort", choices=("time", "graph"), default="time",
                        help="table order (default: time, slowest first)")
    parser.add_argument("--trace", default=None, help="also copy the Chrome trace to this file")
    parser.add_argument("--timestamps", action="store_true",
                        help="add the Start Time / End Time columns")
    parser.add_argument("--number", type=int, default=10, help="runs per node measurement")
    parser.add_argument("--repeat", type=int, default=1, help="measurements per node")
    parser.add_argument("--min-repeat-ms", type=float, default=1.0)
    parser.add_argument("--profile", action="store_true",
                        help="also time the whole graph and reconcile it with the sum of node times")
    parser.add_argument("--target", default=None,
                        help="build target for .onnx models: c (default with a C compiler) or numpy")
    parser.add_argument("--opt-level", type=int, default=3)
    parser.add_argument("--npy", action="store_true",
                        help="also write every node output as .npy plus manifest.json")
    parser.add_argument("--filter", action="append", default=None, metavar="GLOB",
                        help="with --npy: only tensors whose node/kernel/source name matches")
    parser.add_argument("--max-bytes", type=int, default=None, help="with --npy: total size cap")
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--atol", type=float, default=1e-4)


def _default_target() -> str:
    import kiln.codegen
    from kiln.config import settings

    native = hasattr(kiln.codegen, "build_native") and shutil.which(settings.cc.split()[0])
    return "c" if native else "numpy"


def _load_inputs(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as e:
        raise KilnError(f"cannot read inputs from {path}: {e}") from None


def _build(args: argparse.Namespace, inputs: dict[str, np.ndarray]) -> tuple[Any, Any]:
    """The built (or loaded) module, and the imported module when the model is ONNX."""
    import kiln
    from kiln import relay
    from kiln.runtime.module import load_module

    if Path(args.model).suffix.lower() != ".onnx":
        return load_module(args.model), None
    import onnx

    graph_inputs = {i.name for i in onnx.load(args.model, load_external_data=False).graph.input}
    shapes = {k: v.shape for k, v in inputs.items() if k in graph_inputs}
    mod, params = relay.frontend.from_onnx(args.model, shape=shapes)
    with kiln.transform.PassContext(opt_level=args.opt_level):
        lib = relay.build(mod, target=args.target or _default_target(), params=params)
    return lib, mod


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


def run(args: argparse.Namespace) -> int:
    """Run the debug executor on the model; optionally compare every node with a reference."""
    import kiln
    from kiln.contrib.debugger import debug_executor
    from kiln.debug import compare

    inputs = _load_inputs(args.inputs)
    lib, mod = _build(args, inputs)
    m = debug_executor.create(lib.get_graph_json(), lib, kiln.cpu(), dump_root=args.dump_root)
    m.set_input(**inputs)
    m.run(number=args.number, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms,
          sort_by_time=args.sort == "time", show_timestamps=args.timestamps)
    print(f"dump: {m.dump_path}")
    if args.trace:
        shutil.copyfile(m.dump_path / "_tvmdbg_execution_trace.json", args.trace)
    if args.npy:
        manifest = m.dump_npy(include=args.filter, max_bytes=args.max_bytes)
        print(f"npy: {len(manifest.tensors)} tensors ({manifest.total_bytes} bytes) in "
              f"{manifest.folder}, {len(manifest.skipped)} skipped")
    result: dict[str, Any] = {
        "dump_path": str(m.dump_path),
        "rows": [{"node": r.name, "op": r.op, "time_us": r.time_us, "time_percent": r.time_percent,
                  "shape": list(r.shape), "measurements_us": list(r.measurements_us)}
                 for r in m.debug_datum.table_rows()],
    }
    if args.profile:
        profile = m.profile(number=args.number, repeat=max(args.repeat, 3),
                            min_repeat_ms=args.min_repeat_ms)
        print(profile.reconciliation())
        result["profile"] = profile.to_dict()
    status = 0
    if args.compare:
        report = compare(lib, _reference(args, mod), inputs, rtol=args.rtol, atol=args.atol, mod=mod)
        print(report)
        result["compare"] = report.to_dict()
        status = 1 if report.first_divergence is not None else 0
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return status
