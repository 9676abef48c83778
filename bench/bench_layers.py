"""Per-layer comparison: Kiln's fused kernels against onnxruntime's nodes, on one benchmark model.

Usage (from the repository root)::

    python bench/bench_layers.py resnet50 --threads 1
    python bench/bench_layers.py mobilenet_v2 --threads 2 --worst 20

onnxruntime runs the model with its profiler on (``enable_profiling``) for ``--runs`` runs; each
node's median kernel time is kept under the ONNX node name its profile entry is derived from
(onnxruntime names a node after its first output, e.g. ``/layer1/conv1/Conv_output_0_nchwc``).
Kiln builds the model (``c`` target, opt level 3) and times every fused kernel with the debug
executor's :meth:`~kiln.contrib.debugger.debug_executor.GraphModuleDebug.profile`. Each Kiln
kernel is matched to the onnxruntime nodes among its source names (the ONNX nodes it was fused
from), so a row compares the same piece of the model on both sides. Printed: totals, then per
kind of kernel (the fused ops, numbered suffixes dropped) Kiln's and onnxruntime's summed times
and their ratio, then the kernels where Kiln loses the most time. onnxruntime's profiler adds a
little time to each of its nodes; the end-to-end comparison is ``bench_models.py``'s job.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import kiln  # noqa: E402
from bench._engines import build_kiln  # noqa: E402
from bench._report import machine_info, machine_lines  # noqa: E402
from bench.models import MODELS, make_feeds  # noqa: E402
from kiln.contrib.debugger import debug_executor  # noqa: E402


def ort_node_times(model: onnx.ModelProto, feeds: dict, threads: int, runs: int) -> dict[str, float]:
    """Median microseconds per onnxruntime node, keyed by the ONNX node name it stands for."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.enable_profiling = True
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="kiln-ort-prof-") as tmp:
        options.profile_file_prefix = str(Path(tmp) / "ort")
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        for _ in range(runs):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    times: dict[str, list[float]] = defaultdict(list)
    for event in events:
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.endswith("_kernel_time"):
            times[name.removesuffix("_kernel_time").split("_output_")[0]].append(event["dur"])
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=30, help="onnxruntime runs profiled")
    parser.add_argument("--number", type=int, default=10, help="Kiln runs per node measurement")
    parser.add_argument("--worst", type=int, default=10, help="kernels listed where Kiln loses most")
    args = parser.parse_args(argv)

    print("\n".join(machine_lines(machine_info())))
    model = MODELS[args.model].build()
    feeds = make_feeds(model)
    ort_us = ort_node_times(model, feeds, args.threads, args.runs)
    build = build_kiln(model)
    with tempfile.TemporaryDirectory(prefix="kiln-layers-") as tmp:
        debug = debug_executor.create(build.factory.graph_json, build.factory, kiln.cpu(),
                                      dump_root=tmp)
        debug.module.set_num_threads(args.threads)
        debug.set_input(**feeds)
        report = debug.profile(number=args.number, repeat=3)

    rows, matched = [], set()
    for row in report.rows:
        theirs = [s for s in row.source_names if s in ort_us]
        matched.update(theirs)
        rows.append((row.func, row.mean_us, sum(ort_us[s] for s in theirs), row.source_names))
    unmatched = sum(t for name, t in ort_us.items() if name not in matched)
    print(f"{args.model}, {args.threads} thread(s): Kiln kernels sum to {report.node_sum_us:.0f} us, "
          f"onnxruntime nodes to {sum(ort_us.values()):.0f} us ({unmatched:.0f} us in nodes no "
          "Kiln kernel names)")
    kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for func, ours, theirs, _ in rows:
        kind = re.sub(r"(_\d+)+$", "", func.removeprefix("tvmgen_default_fused_"))
        kinds[kind][0] += ours
        kinds[kind][1] += theirs
        kinds[kind][2] += 1
    print(f"{'kernel kind':60s} {'n':>4s} {'Kiln us':>10s} {'ORT us':>10s} {'Kiln/ORT':>9s}")
    for kind, (ours, theirs, count) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
        ratio = f"{ours / theirs:9.2f}" if theirs else "        -"
        print(f"{kind[:60]:60s} {count:4d} {ours:10.0f} {theirs:10.0f} {ratio}")
    print("kernels where Kiln loses the most time (Kiln - ORT):")
    for func, ours, theirs, sources in sorted(rows, key=lambda r: r[2] - r[1])[:args.worst]:
        if theirs and ours > theirs:
            print(f"  {func.removeprefix('tvmgen_default_fused_')[:50]:50s} {ours:8.0f} us vs "
                  f"{theirs:8.0f} us  {', '.join(sources)[:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
