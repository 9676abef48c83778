"""``kiln compile model.onnx -o model.so``: import, optimize, compile and export one artifact."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kiln.errors import KilnError

__all__ = ["add_arguments", "parse_input_shapes", "run"]


def parse_input_shapes(text: str | None) -> dict[str, tuple[int, ...]]:
    """``"data:1x3x224x224,mask:1x128"`` -> ``{"data": (1, 3, 224, 224), "mask": (1, 128)}``."""
    shapes: dict[str, tuple[int, ...]] = {}
    if not text:
        return shapes
    for item in text.split(","):
        name, sep, dims = item.strip().rpartition(":")
        if not sep or not name:
            raise KilnError(f"--input-shapes: {item!r} is not NAME:D1xD2x... (e.g. data:1x3x224x224)")
        try:
            shapes[name] = tuple(int(d) for d in dims.split("x")) if dims else ()
        except ValueError:
            raise KilnError(f"--input-shapes: dimensions of {name!r} must be integers joined by "
                            f"'x', got {dims!r}") from None
    return shapes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kiln compile``."""
    parser.add_argument("model", type=Path, help="the ONNX model")
    parser.add_argument("-o", "--output", type=Path, required=True,
                        help="artifact to write (.so for the c target)")
    parser.add_argument("--target", default="c", help="c (default; llvm is an alias) or numpy")
    parser.add_argument("--opt-level", type=int, default=3)
    parser.add_argument("--input-shapes", default=None,
                        help="bind input shapes, e.g. data:1x3x224x224,mask:1x128")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    """Compile ``args.model`` into ``args.output``; print a short summary."""
    import json

    import kiln
    from kiln import relay

    t0 = time.perf_counter()
    mod, params = relay.frontend.from_onnx(str(args.model), shape=parse_input_shapes(args.input_shapes))
    t1 = time.perf_counter()
    with kiln.transform.PassContext(opt_level=args.opt_level):
        factory = relay.build(mod, target=args.target, params=params)
    t2 = time.perf_counter()
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
        "export_s": round(t3 - t2, 3),
    }
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
    print(f"import {summary['import_s']:.2f} s, build {summary['build_s']:.2f} s, "
          f"export {summary['export_s']:.2f} s")
    return 0
