"""``kiln compile model.onnx -o model.so``: import, optimize, compile and export one artifact."""

from __future__ import annotations

import argparse
import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path

from kiln.errors import DynamicShapeError, KilnError

__all__ = ["add_arguments", "parse_input_shapes", "run"]


_SHAPES_FORMS = "NAME:D1xD2x... or NAME:[D1,D2,...] (e.g. data:1x3x224x224 or data:[1,3,224,224])"


def _shape_items(text: str) -> list[str]:
    """Split at commas and spaces outside brackets; ``a: [1, 2]`` stays one item."""
    items: list[str] = []
    current, depth = "", 0
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise KilnError(f"--input-shapes: nested '[' in {text!r}; expected {_SHAPES_FORMS}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise KilnError(f"--input-shapes: unmatched ']' in {text!r}; expected {_SHAPES_FORMS}")
        if depth == 0 and (ch == "," or ch.isspace()):
            if current:
                items.append(current)
            current = ""
            continue
        current += ch
    if depth:
        raise KilnError(f"--input-shapes: unclosed '[' in {text!r}; expected {_SHAPES_FORMS}")
    if current:
        items.append(current)
    merged: list[str] = []
    for item in items:  # "a: [1,2]" and "a :[1,2]" split at the space; join them again
        if merged and (merged[-1].endswith(":") or item.startswith(":")):
            merged[-1] += item
        else:
            merged.append(item)
    return merged


def _parse_dims(name: str, dims: str) -> tuple[int, ...]:
    if dims.startswith("[") or dims.endswith("]"):
        if not (dims.startswith("[") and dims.endswith("]")):
            raise KilnError(f"--input-shapes: the dimensions of {name!r} are {dims!r}; expected "
                            f"{_SHAPES_FORMS}")
        parts = [d.strip() for d in dims[1:-1].split(",")] if dims[1:-1].strip() else []
    else:
        parts = dims.split("x") if dims else []
    if not all(p.isascii() and p.isdigit() for p in parts):
        negative = any(p.startswith("-") and p[1:].isdigit() for p in parts)
        why = (" (Kiln compiles static shapes: give every dim a size)" if negative else "")
        raise KilnError(f"--input-shapes: the dimensions of {name!r} must be integers (0 or "
                        f"more), got {dims!r}{why}; expected {_SHAPES_FORMS}")
    return tuple(int(p) for p in parts)


def parse_input_shapes(text: str | None) -> dict[str, tuple[int, ...]]:
    """Parse ``--input-shapes``: Kiln's ``x`` form or tvmc's bracket form, several inputs.

    Inputs are separated by commas or spaces; an input name may itself hold ``:`` (the last one
    starts the dims).

    Parameters
    ----------
    text : str or None
        ``"data:1x3x224x224,mask:1x128"``, ``"data:[1,3,224,224] mask:[1,128]"`` (tvmc), or a
        mix; ``"x:"`` or ``"x:[]"`` is a 0-d input.

    Returns
    -------
    dict of str to tuple of int
        ``{"data": (1, 3, 224, 224), "mask": (1, 128)}``.

    Raises
    ------
    KilnError
        Malformed text, a negative or non-integer dim, or an input named twice (one line).
    """
    shapes: dict[str, tuple[int, ...]] = {}
    if not text or not text.strip():
        return shapes
    for item in _shape_items(text):
        name, sep, dims = item.rpartition(":")
        if not sep or not name or "[" in name or "]" in name:
            raise KilnError(f"--input-shapes: {item!r} is not {_SHAPES_FORMS}")
        if name in shapes:
            raise KilnError(f"--input-shapes: input {name!r} is given twice")
        shapes[name] = _parse_dims(name, dims)
    if not shapes:
        raise KilnError(f"--input-shapes: {text!r} names no input; expected {_SHAPES_FORMS}")
    return shapes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kiln compile``."""
    parser.add_argument("model", type=Path, help="the ONNX model")
    parser.add_argument("-o", "--output", type=Path, required=True,
                        help="artifact to write (.so for the c target)")
    parser.add_argument("--target", default="c",
                        help="c (default; llvm is an alias), cuda (\"cuda -arch=sm_90\") or numpy")
    parser.add_argument("--opt-level", type=int, default=3)
    parser.add_argument("--input-shapes", default=None,
                        help="bind input shapes, e.g. data:1x3x224x224,mask:1x128 or (as tvmc) "
                             "\"data:[1,3,224,224] mask:[1,128]\"")
    parser.add_argument("--tuning-log", "--tuning-records", dest="tuning_log", type=Path,
                        default=None, metavar="LOG",
                        help="apply the best records of an auto-scheduler tuning log (TVM's or "
                             "Kiln's); prints how many tasks it covered")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


@contextlib.contextmanager
def _tuning(log: Path | None) -> Iterator[None]:
    """Apply a tuning log to the build inside (nothing when ``log`` is None).

    The build logs its coverage line on the ``kiln.auto_scheduler`` logger; the command prints
    it itself, so the logger gets a null handler meanwhile (no second copy on standard error).
    """
    if log is None:
        yield
        return
    from kiln.auto_scheduler.dispatcher import ApplyHistoryBest

    if not log.is_file():
        raise KilnError(f"--tuning-log: {log} is not a file")
    logger = logging.getLogger("kiln.auto_scheduler")
    quiet = logging.NullHandler()
    logger.addHandler(quiet)
    try:
        with ApplyHistoryBest(str(log)):
            yield
    finally:
        logger.removeHandler(quiet)


def run(args: argparse.Namespace) -> int:
    """Compile ``args.model`` into ``args.output``; print a short summary."""
    import json

    from kiln import progress, relay
    from kiln.cli._common import pass_context, require_compiler
    from kiln.target import Target

    shapes = parse_input_shapes(args.input_shapes)
    if Target(args.target).is_native:  # fail before the import, naming the way around
        require_compiler()
    t0 = time.perf_counter()
    with progress.stage("import"):
        try:
            mod, params = relay.frontend.from_onnx(str(args.model), shape=shapes)
        except DynamicShapeError as e:  # hint at --input-shapes, not the Python API's shape=
            raise KilnError(e.describe("cli")) from e
    t1 = time.perf_counter()
    with progress.stage("build"), pass_context(args.opt_level, getattr(args, "verbose", False)), \
            _tuning(getattr(args, "tuning_log", None)):
        factory = relay.build(mod, target=args.target, params=params)
    t2 = time.perf_counter()
    with progress.stage("export"):
        factory.export_library(args.output)
    t3 = time.perf_counter()
    graph = factory.graph
    plan = factory.metadata.get("memory_plan", {})
    summary = {
        "model": str(args.model),
        "output": str(args.output),
        "target": args.target,
        "opt_level": args.opt_level,
        "inputs": {p.name_hint: list(getattr(p.type_annotation, "shape", ()))
                   for p in mod["main"].params if p.name_hint not in params},
        "kernels": sum(1 for n in graph.nodes if n.op == "tvm_op"),
        "params": len(factory.params),
        "param_bytes": sum(p.nbytes for p in factory.params.values()),
        "planned_bytes": plan.get("planned_bytes"),
        "unplanned_bytes": plan.get("unplanned_bytes"),
        "intermediate_planned_bytes": plan.get("intermediate_planned_bytes"),
        "intermediate_unplanned_bytes": plan.get("intermediate_unplanned_bytes"),
        "import_s": round(t1 - t0, 3),
        "build_s": round(t2 - t1, 3),
        "build_cached": factory.from_build_cache,
        "export_s": round(t3 - t2, 3),
    }
    tuning = factory.metadata.get("tuning")
    if getattr(args, "tuning_log", None) is not None:
        summary["tuning_log"] = str(args.tuning_log)
        summary["tuning"] = tuning
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"wrote {args.output}: {summary['kernels']} kernels, {summary['params']} params "
          f"({summary['param_bytes'] / 1e6:.1f} MB), target {args.target}, opt level {args.opt_level}")
    if plan:
        print(f"memory plan: {plan['planned_bytes'] / 1e6:.2f} MB planned vs "
              f"{plan['unplanned_bytes'] / 1e6:.2f} MB unplanned (computed tensors: "
              f"{plan['intermediate_planned_bytes'] / 1e6:.2f} vs "
              f"{plan['intermediate_unplanned_bytes'] / 1e6:.2f} MB)")
    if getattr(args, "tuning_log", None) is not None:
        print(tuning["line"] if tuning else f"tuning log: not used (target {args.target} has no "
              "schedules to tune)")
    cached = " (reused from the build cache)" if factory.from_build_cache else ""
    print(f"import {summary['import_s']:.2f} s, build {summary['build_s']:.2f} s{cached}, "
          f"export {summary['export_s']:.2f} s")
    return 0
