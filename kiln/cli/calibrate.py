"""``kiln calibrate``: the values entering and leaving each external region, for quantizers.

``kiln calibrate model.onnx --target kiln_c --inputs batch.npz -o calib.npz`` imports the model
(input shapes from the arrays in ``batch.npz``), partitions it for the external target
(AnnotateTarget, MergeCompilerRegions, PartitionGraph), runs it once collecting every region's
inputs and outputs (``relay.analysis.get_calibration_data``), and writes them to one ``.npz``
keyed ``<function>_inputs_<i>`` / ``<function>_outputs_<j>`` (function names as
``tvmgen_default_kiln_c_main_0``). ``--json`` prints a summary a script can parse.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from kiln.errors import KilnError

__all__ = ["add_arguments", "calibration_arrays", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kiln calibrate``."""
    parser.add_argument("model", help="ONNX model to partition and calibrate")
    parser.add_argument("--target", required=True,
                        help="external target whose regions are calibrated (e.g. kiln_c)")
    parser.add_argument("--inputs", required=True,
                        help=".npz with one array per model input, named as the model's inputs")
    parser.add_argument("-o", "--output", required=True, help=".npz to write")
    parser.add_argument("--run-target", default=None,
                        help="build target of the calibration run (numpy, default, or c)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")


def _load_inputs(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: np.array(archive[name]) for name in archive.files}
    except (OSError, ValueError) as e:
        raise KilnError(f"cannot read the inputs {path}: {e}") from None


def calibration_arrays(data: dict[Any, dict[str, list[Any]]]) -> dict[str, np.ndarray]:
    """``get_calibration_data`` output as ``{"<function>_inputs_<i>": array, ...}``.

    Parameters
    ----------
    data : dict
        ``{GlobalVar: {"inputs": [...], "outputs": [...]}}``.

    Returns
    -------
    dict of str to numpy.ndarray
        One entry per array, keyed by function name, kind and position.
    """
    out: dict[str, np.ndarray] = {}
    for gv, values in data.items():
        for kind in ("inputs", "outputs"):
            for i, value in enumerate(values[kind]):
                out[f"{gv.name_hint}_{kind}_{i}"] = np.asarray(value.numpy())
    return out


def run(args: argparse.Namespace) -> int:
    """Partition the model, collect the calibration data in one run, write the ``.npz``."""
    from kiln import progress
    from kiln.analysis.calibration import get_calibration_data
    from kiln.frontend.onnx import from_onnx
    from kiln.transform import AnnotateTarget, MergeCompilerRegions, PartitionGraph

    inputs = _load_inputs(args.inputs)
    with progress.stage("import"):
        mod, params = from_onnx(args.model, shape={k: v.shape for k, v in inputs.items()})
    names = [p.name_hint for p in mod["main"].params if p.name_hint not in params]
    missing = [n for n in names if n not in inputs]
    if missing:
        raise KilnError(f"{args.inputs} lacks the model input(s) {', '.join(missing)} (it has "
                        f"{', '.join(inputs) or 'no arrays'})")
    mod = AnnotateTarget([args.target])(mod)
    mod = PartitionGraph()(MergeCompilerRegions()(mod))
    values = {n: inputs[n] for n in names}
    with progress.stage("calibration run"):  # builds (passes, kernels), then runs once
        data = get_calibration_data(mod, {**values, **params}, target=args.run_target)
    if not data:
        raise KilnError(f"no operator of {args.model} went to external target {args.target!r}, so "
                        "there is nothing to calibrate")
    arrays = calibration_arrays(data)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("wb") as f:
        # numpy's stub matches **kwds against its allow_pickle keyword too (a checker limitation)
        np.savez(f, **arrays)  # type: ignore[arg-type]
    if args.json:
        summary = {gv.name_hint: {kind: [{"shape": list(v.shape), "dtype": v.dtype}
                                         for v in values_[kind]] for kind in ("inputs", "outputs")}
                   for gv, values_ in data.items()}
        print(json.dumps({"output": str(output), "functions": summary}, indent=2))
    return 0
