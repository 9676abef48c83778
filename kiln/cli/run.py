"""``kiln run model.so --inputs x.npz``: run an exported artifact on inputs from an .npz file."""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

import numpy as np

from kiln.cli._args import positive_int
from kiln.errors import KilnError

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kiln run``."""
    parser.add_argument("artifact", type=Path, help="a file written by kiln compile / export_library")
    parser.add_argument("--inputs", type=Path, required=True,
                        help=".npz with one array per graph input, by input name")
    parser.add_argument("-o", "--output", type=Path, default=None,
                        help=".npz to write the outputs to (keys: output names)")
    parser.add_argument("--benchmark", "--print-time", dest="benchmark", action="store_true",
                        help="also time the run (median over repeats)")
    parser.add_argument("--repeat", type=positive_int, default=10,
                        help="timed measurements with --benchmark")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="kernel threads (default: usable CPUs)")


def save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` as ``np.savez`` does, keyed by any names.

    ``np.savez(path, **arrays)`` cannot take the keys ``file`` or ``allow_pickle`` (ONNX output
    names are free text), and it appends ``.npz`` to a path without it.
    """
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, value in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(value), allow_pickle=False)


def run(args: argparse.Namespace) -> int:
    """Load the artifact, set the inputs, run, print (and save) the outputs."""
    import kiln
    from kiln.contrib import graph_executor
    from kiln.runtime.module import load_module

    lib = load_module(args.artifact)
    kernels = lib.get_lib() if hasattr(lib, "get_lib") else lib
    device = kiln.cuda(0) if kernels.type_key == "cuda" else kiln.cpu()  # a cuda build: GPU 0
    module = graph_executor.GraphModule(lib["default"](device))
    if args.threads is not None:
        module.set_num_threads(args.threads)
    shapes, dtypes = module.get_input_info()
    with np.load(args.inputs) as data:
        given = {k: data[k] for k in data.files}
    missing = sorted(set(shapes) - set(given))
    if missing:
        raise KilnError(f"{args.inputs} lacks input(s) {', '.join(missing)}; the model takes "
                        + ", ".join(f"{n} {tuple(shapes[n])} {dtypes[n]}" for n in shapes))
    extra = sorted(set(given) - set(shapes))
    if extra:
        raise KilnError(f"{args.inputs} has array(s) {', '.join(extra)} that are not inputs of the "
                        f"model (inputs: {', '.join(shapes)})")
    for name, value in given.items():
        module.set_input(name, value)
    module.run()
    outputs = {}
    for i, name in enumerate(module.get_output_names()):  # the model's output names
        value = outputs[name] = module.get_output(i).numpy()
        print(f"{name}: shape {value.shape} {value.dtype}, min {value.min() if value.size else 0:.6g}, "
              f"max {value.max() if value.size else 0:.6g}, mean {value.mean() if value.size else 0:.6g}")
    if args.output is not None:
        save_npz(args.output, outputs)
        print(f"wrote {args.output}")
    if args.benchmark:
        result = module.benchmark(device, repeat=args.repeat, number=1, min_repeat_ms=50)
        print(result)
    return 0
