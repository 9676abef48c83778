"""Run the ONNX node conformance tests through Kiln and write docs/onnx_coverage.md.

Usage::

    python scripts/onnx_conformance.py                      # Kiln; writes docs/onnx_coverage.md
    python scripts/onnx_conformance.py --onnxruntime        # refresh the onnxruntime baseline
    python scripts/onnx_conformance.py -k resize --no-doc   # a subset, print failures only
    python scripts/onnx_conformance.py --target c           # compile (opt level 3, C kernels
                                                            # built in batches of cases) and run
                                                            # the graph executor
    python scripts/onnx_conformance.py --target numpy       # relay.build's numpy target, case by
                                                            # case

The onnxruntime baseline (which cases onnxruntime itself passes) is kept in
``tests/frontend/data/onnxruntime_conformance.json``; the coverage page compares against it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kiln.frontend.onnx_conformance import (  # noqa: E402
    STATUSES,
    CaseResult,
    Execute,
    coverage_markdown,
    load_cases,
    run_suite,
    run_suite_compiled,
)

BASELINE = ROOT / "tests" / "frontend" / "data" / "onnxruntime_conformance.json"
DOC = ROOT / "docs" / "onnx_coverage.md"


def _summary(label: str, results: list[CaseResult]) -> str:
    counts = Counter(r.status for r in results)
    parts = [f"{s}={counts[s]}" for s in STATUSES if counts.get(s)]
    return f"{label}: {len(results)} cases: " + ", ".join(parts)


def build_and_run(target: str) -> Execute:
    """An executor that compiles with ``relay.build(target=...)`` and runs the graph executor."""
    import numpy as np

    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor

    def execute(mod: kiln.IRModule, params: dict, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        lib = relay.build(mod, target=target, params=params)
        module = graph_executor.GraphModule(lib["default"](kiln.cpu()))
        for name, value in feeds.items():
            module.set_input(name, value)
        module.run()
        return [module.get_output(i).numpy() for i in range(module.get_num_outputs())]

    return execute


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", "--pattern", help="only cases whose name contains this")
    parser.add_argument("--onnxruntime", action="store_true",
                        help="run onnxruntime instead and rewrite the baseline file")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    parser.add_argument("--no-doc", action="store_true", help="do not write docs/onnx_coverage.md")
    parser.add_argument("--failures", action="store_true", help="print every failure")
    parser.add_argument("--json", type=Path, help="also write the per-case results here")
    parser.add_argument("--target", help="build for this target (numpy, c) instead of interpreting")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    cases = load_cases(args.pattern)
    backend = "onnxruntime" if args.onnxruntime else "kiln"
    done = [0]

    def progress(result: CaseResult) -> None:
        done[0] += 1
        if sys.stderr.isatty() and done[0] % 25 == 0:
            print(f"\r{done[0]}/{len(cases)}", end="", file=sys.stderr, flush=True)

    if args.target == "c" and not args.onnxruntime:
        results = run_suite_compiled(cases, target="c", timeout=args.timeout, progress=progress)
    else:
        execute = build_and_run(args.target) if args.target else None
        results = run_suite(cases, backend=backend, timeout=args.timeout, progress=progress,
                            execute=execute)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    elapsed = time.perf_counter() - start
    label = backend if not args.target else f"{backend} (relay.build target={args.target})"
    print(_summary(label, results) + f" ({elapsed:.0f} s)")

    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=1))
    if args.onnxruntime:
        if args.pattern:
            print("not writing the baseline for a subset (-k)")
            return 0
        BASELINE.parent.mkdir(parents=True, exist_ok=True)
        BASELINE.write_text(json.dumps({r.name: r.status for r in results}, indent=0, sort_keys=True) + "\n")
        print(f"wrote {BASELINE.relative_to(ROOT)}")
        return 0

    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    if baseline:
        ort_pass = {n for n, s in baseline.items() if s == "pass"}
        both = sum(r.status == "pass" and r.name in ort_pass for r in results)
        considered = [r for r in results if r.name in baseline]
        ort_here = sum(baseline[r.name] == "pass" for r in considered)
        print(f"onnxruntime passes {ort_here} of these cases; Kiln passes {both} of them "
              f"({100.0 * both / max(ort_here, 1):.1f}%)")
    if args.failures or args.pattern:
        for r in results:
            if r.status != "pass":
                print(f"{r.name}: {r.status}: {r.message}")
    if not args.no_doc and not args.pattern and not args.target:
        DOC.write_text(coverage_markdown(results, baseline or None))
        print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
