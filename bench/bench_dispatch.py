"""Per-node dispatch cost: a graph of many tiny operators, Kiln against onnxruntime.

Usage (from the repository root)::

    python bench/bench_dispatch.py                  # 200 nodes of 16 floats, 1 thread
    python bench/bench_dispatch.py --nodes 400 --size 64 --json dispatch.json

The graph is a chain ``y = ((x + z) * z + z) * z ...`` of ``--nodes`` elementwise ONNX nodes on
``--size`` floats, so a run is almost nothing but dispatching. Kiln builds it at opt level 0
(nothing fuses: one kernel per node) with the ``c`` target and runs it two ways: the C run plan
(one ``kiln_run_plan`` call per run, the default) and the Python loop over pre-bound kernels
(``use_run_plan = False``). onnxruntime runs the same model with graph optimizations off (so
it too executes every node). Inputs are set once and outputs bound once on both sides: a run
is the graph alone. Each Kiln mode is timed against onnxruntime in alternating blocks in this
process; the line gives the medians, the ratio and the cost per node.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._engines import KilnRunner, build_kiln, check_outputs, ort_runner  # noqa: E402
from bench._report import machine_info, machine_lines, write_json  # noqa: E402
from bench._timing import compare  # noqa: E402


def chain_model(nodes: int, size: int) -> onnx.ModelProto:
    """``x, z -> x + z, * z, + z, ...``: ``nodes`` alternating Add and Mul nodes."""
    names = ["x"] + [f"t{i}" for i in range(nodes - 1)] + ["y"]
    body = [helper.make_node("Add" if i % 2 == 0 else "Mul", [names[i], "z"], [names[i + 1]],
                             name=f"node{i}") for i in range(nodes)]
    vec = [size]
    graph = helper.make_graph(body, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, vec),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, vec)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, vec)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=10, help="block pairs per comparison")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    info = machine_info()
    print("\n".join(machine_lines(info)))
    model = chain_model(args.nodes, args.size)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal(args.size).astype(np.float32),
             "z": (rng.random(args.size) * 0.5 + 0.75).astype(np.float32)}

    build = build_kiln(model, target="c", opt_level=0)
    print(f"Kiln: {build.kernels} kernels, build {build.cold_s:.2f} s cold")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    ort_run = ort_runner(session, feeds, copy_io=False)
    expected = [np.array(o) for o in ort_run()]

    kiln_run = KilnRunner(build, feeds, threads=1, copy_io=False)
    executor = kiln_run.module.module
    ok = True
    results = []
    for mode, use_plan in (("run plan", True), ("Python loop", False)):
        executor.use_run_plan = use_plan
        kiln_run()
        check = check_outputs(kiln_run.outputs(), expected)
        ok &= check.ok
        cmp = compare(kiln_run, ort_run, blocks=args.repeat)
        kiln_us, ort_us = cmp.a.median_ms * 1e3, cmp.b.median_ms * 1e3
        lo, hi = cmp.ratio_spread
        print(f"{mode:12s} Kiln {kiln_us:8.1f} us ({kiln_us * 1e3 / args.nodes:6.0f} ns/node)  "
              f"ORT {ort_us:8.1f} us ({ort_us * 1e3 / args.nodes:6.0f} ns/node)  "
              f"Kiln/ORT {cmp.ratio:.2f} [{lo:.2f}-{hi:.2f}]  max|diff| {check.max_abs:.1e}"
              + ("" if check.ok else f"  <<< WRONG OUTPUT: {check.problem}"))
        results.append({"mode": mode, "kiln_us": kiln_us, "ort_us": ort_us, "ratio": cmp.ratio,
                        "ratio_spread": [lo, hi], "kiln_ns_per_node": kiln_us * 1e3 / args.nodes,
                        "ort_ns_per_node": ort_us * 1e3 / args.nodes, "max_abs": check.max_abs})
    if args.json:
        write_json(args.json, {"args": vars(args), "machine": info, "results": results})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
