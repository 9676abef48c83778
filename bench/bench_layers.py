"""Per-layer comparison: Kiln's fused kernels against onnxruntime's nodes, and a per-node check
of every kernel against the efficiency its template family reaches in the same model.

Usage (from the repository root)::

    python bench/bench_layers.py resnet50 --threads 1
    python bench/bench_layers.py mobilenet_v2 --threads 2 --worst 20
    python bench/bench_layers.py --models dbnet_det,crnn_rec --threads 1 --check --json out.json
    python bench/bench_layers.py --all --no-ort --check

onnxruntime runs the model with its profiler on (``enable_profiling``) for ``--runs`` runs; each
node's median kernel time is kept under the ONNX node name its profile entry is derived from
(onnxruntime names a node after its first output, e.g. ``/layer1/conv1/Conv_output_0_nchwc``).
Kiln builds the model (``--target``, ``c`` by default; opt level 3) and times every fused
kernel with the debug executor's
:meth:`~kiln.contrib.debugger.debug_executor.GraphModuleDebug.profile`. Each Kiln kernel is
matched to the onnxruntime nodes among its source names (the ONNX nodes it was fused from), so
a row compares the same piece of the model on both sides. Printed: totals, then per
kind of kernel (the fused ops, numbered suffixes dropped) Kiln's and onnxruntime's summed times
and their ratio, then the kernels where Kiln loses the most time. onnxruntime's profiler adds a
little time to each of its nodes; the end-to-end comparison is ``bench_models.py``'s job.

The per-node check
------------------
Every kernel is put in a *family* by its anchor op (:func:`family_of`): ``conv`` (conv1d/2d/3d,
NCHWc, grouped, transposed), ``depthwise`` (depthwise conv), ``dense`` (dense, dense_pack,
batch_matmul, matmul), ``pool_reduce`` (pooling and reductions such as the ``mean`` a global
average pool becomes), ``softmax_norm`` (softmax, layer/batch/instance/group norm, LRN),
``data_movement`` (layout_transform, concatenate, split, transpose, reshape, resize,
strided_slice, depth_to_space, take, pad, ...; and any kernel of zero FLOPs) and ``elementwise``
(the rest). The first three are judged by their FLOPs, the others by the bytes they move.

A family's efficiency (:func:`family_efficiency`) is the *work-weighted 75th percentile* of its
kernels' rates: the kernels sorted by GFLOP/s (GB/s for the byte families), each weighted by its
FLOPs (bytes), and the rate at which three quarters of the family's work is reached. Weighting by
work keeps tiny kernels (whose time is mostly call overhead) from setting the bar, and the 75th
percentile is what the template does well on this model without hanging on one outlier.
Kernels whose byte count is only an upper bound (a computing kernel that gathers or slices part
of an input: the profile counts its inputs whole) are judged but do not set a byte family's
rate. A kernel's expected time is::

    expected_us = max(work / family rate, bytes / machine bandwidth, floor_us)

(the bandwidth term only for the FLOP families, where a matrix-vector dense is judged by what
memory allows, and for a byte family without a rate of its own; ``floor_us`` is the cost of
calling any kernel at all). A kernel fails when its time is
more than ``--limit`` (3) times its expected time, its time being the least over the profile's
``--repeat`` repeats (each the mean of ``--number`` runs): on a shared machine, the repeat least
disturbed by other processes.
With ``--pool-families`` the efficiencies are taken over the kernels of all models given,
otherwise per model. ``--check`` exits with 1 when any kernel fails; ``--json FILE`` writes the
per-kernel rows (family, time, FLOPs, bytes, rates, expected time, ratio, verdict)."""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _ort_isa  # noqa: E402

if __name__ == "__main__":  # onnxruntime's kernels are chosen before anything imports it
    _ort_isa.select_for_script(sys.argv[1:])

import onnxruntime as ort  # noqa: E402

import kiln  # noqa: E402
from bench._engines import build_kiln  # noqa: E402
from bench._report import machine_info, machine_lines, write_json  # noqa: E402
from bench.models import MODELS, make_feeds  # noqa: E402
from kiln.contrib.debugger import debug_executor  # noqa: E402

# --- the per-node check (pure Python) --------------------------------------------------------

FLOP_FAMILIES = ("conv", "depthwise", "dense")
BYTE_FAMILIES = ("pool_reduce", "softmax_norm", "data_movement", "elementwise")
FAMILIES = FLOP_FAMILIES + BYTE_FAMILIES
_PREFIX = "tvmgen_default_fused_"

# Anchor ops, most specific family first; each is matched as whole ``_``-separated op names.
_ANCHORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("depthwise", ("depthwise_conv1d", "depthwise_conv2d", "depthwise_conv2d_NCHWc",
                   "depthwise_conv2d_nchw", "depthwise_conv2d_nhwc")),
    ("conv", ("conv1d", "conv2d", "conv3d", "conv2d_NCHWc", "conv2d_winograd_without_weight_transform",
              "conv1d_transpose", "conv2d_transpose", "conv3d_transpose", "group_conv2d",
              "deformable_conv2d", "conv2d_nhwc", "conv2d_nchw")),
    ("dense", ("dense", "dense_pack", "batch_matmul", "matmul", "bmm")),
    ("pool_reduce", ("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d",
                     "avg_pool3d", "global_max_pool2d", "global_avg_pool2d", "adaptive_max_pool1d",
                     "adaptive_max_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
                     "adaptive_avg_pool3d", "mean", "sum", "max", "min", "prod", "argmax",
                     "argmin", "variance", "std", "logsumexp", "all", "any")),
    ("softmax_norm", ("softmax", "log_softmax", "fast_softmax", "layer_norm", "batch_norm",
                      "instance_norm", "group_norm", "l2_normalize", "lrn")),
)
# Ops that only move data: a kernel made of these alone (or of zero FLOPs) is ``data_movement``;
# one that also computes (``strided_slice_sigmoid_multiply``) is ``elementwise``.
_MOVEMENT_OPS: tuple[str, ...] = tuple(sorted((
    "layout_transform", "concatenate", "split", "transpose", "reshape", "reverse_reshape",
    "squeeze", "expand_dims", "batch_flatten", "flatten", "resize1d", "resize2d", "resize3d",
    "upsampling", "strided_slice", "dynamic_strided_slice", "slice_like", "slice",
    "depth_to_space", "space_to_depth", "take", "gather", "gather_nd", "pad", "copy", "tile",
    "repeat", "broadcast_to", "reverse", "stack", "one_hot", "scatter", "scatter_nd", "cast",
    "identity"), key=len, reverse=True))
_NAMESPACES = {"nn", "contrib", "image", "vision", "dyn"}
# Ops that read part of an input: the profile counts a computing kernel's inputs whole, so the
# bytes of such a kernel (``take_add`` of an embedding table) are only an upper bound.
_PARTIAL_READ_OPS = ("take", "gather", "gather_nd", "strided_slice", "dynamic_strided_slice",
                     "slice", "split")


def kernel_kind(func: str) -> str:
    """``func`` without the ``tvmgen_default_fused_`` prefix and numbered suffixes."""
    return re.sub(r"(_\d+)+$", "", func.removeprefix(_PREFIX))


def family_of(func: str, flops: float | None = None) -> str:
    """The family of a fused kernel, from the ops its name lists.

    Parameters
    ----------
    func : str
        The kernel's name, e.g. ``tvmgen_default_fused_nn_contrib_conv2d_NCHWc_add_clip_3``.
    flops : float, optional
        Its FLOPs. Without a compute anchor (conv, dense, pooling, reduction, softmax, norm),
        a kernel is ``data_movement`` when it has zero FLOPs or is made of data-movement ops
        alone (``layout_transform_reshape``), ``elementwise`` otherwise
        (``strided_slice_sigmoid_multiply``).

    Returns
    -------
    str
        One of :data:`FAMILIES`.
    """
    name = f"_{kernel_kind(func)}_"
    for family, ops in _ANCHORS:
        if any(f"_{op}_" in name for op in ops):
            return family
    rest = name
    for op in _MOVEMENT_OPS:  # longest first: "strided_slice" before "slice"
        rest = re.sub(rf"(?<=_){op}(?=_)", "", rest)
    if flops == 0 or not [t for t in rest.split("_") if t and t not in _NAMESPACES]:
        return "data_movement"
    return "elementwise"


@dataclass
class KernelRow:
    """One profiled kernel and its verdict.

    Attributes
    ----------
    model : str
        The benchmark model it belongs to.
    func : str
        The kernel's name.
    us : float
        Time the check uses, microseconds: the least over the profile's repeats (each the mean
        of ``number`` runs), the one least disturbed by other processes.
    flops : float
        FLOPs of one run (0 when unknown).
    bytes : float
        Bytes of the tensors it reads and writes.
    source_names : list of str
        The ONNX nodes it was fused from.
    mean_us : float
        Mean over all runs (the profile's ``mean_us``; ``us`` when not given).
    family : str
        :func:`family_of` (filled by :func:`check_rows`).
    gflops, gbps : float
        Achieved rates.
    expected_us, ratio : float
        Expected time at the family's efficiency and ``us / expected_us``.
    ok : bool
        ``ratio <= limit``.
    """

    model: str
    func: str
    us: float
    flops: float
    bytes: float
    source_names: list[str] = field(default_factory=list)
    mean_us: float = 0.0
    family: str = ""
    gflops: float = 0.0
    gbps: float = 0.0
    expected_us: float = 0.0
    ratio: float = 0.0
    ok: bool = True

    def __post_init__(self) -> None:
        if not self.mean_us:
            self.mean_us = self.us


def _work(row: KernelRow, family: str) -> float:
    return row.flops if family in FLOP_FAMILIES else row.bytes


def bytes_exact(row: KernelRow) -> bool:
    """Whether the profile's byte count of ``row`` is what it moves, not an upper bound.

    A kernel of zero FLOPs is counted as twice its output (exact); one that computes as its
    inputs whole plus its output, an over-count when it reads part of an input (a gather from
    an embedding table, a strided slice of a gate tensor).
    """
    name = f"_{kernel_kind(row.func)}_"
    return row.flops == 0 or not any(f"_{op}_" in name for op in _PARTIAL_READ_OPS)


def weighted_percentile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    """The value at which the weights of the smaller-or-equal values reach ``q`` of their total.

    Parameters
    ----------
    values, weights : sequence of float
        Values and their (non-negative) weights; pairs of zero weight are ignored.
    q : float
        The fraction, in ``(0, 1]``.

    Returns
    -------
    float
        0.0 when no pair has a positive weight.
    """
    pairs = sorted((v, w) for v, w in zip(values, weights) if w > 0)
    total = sum(w for _, w in pairs)
    if not pairs or total <= 0:
        return 0.0
    running = 0.0
    for value, weight in pairs:
        running += weight
        if running >= q * total * (1 - 1e-12):
            return value
    return pairs[-1][0]


def family_efficiency(rows: Iterable[KernelRow], quantile: float = 0.75) -> dict[str, float]:
    """Per family, the work-weighted ``quantile`` of the kernels' rates.

    GFLOP/s for :data:`FLOP_FAMILIES` (weights: FLOPs), GB/s for the others (weights: bytes).
    Rows must have their ``family`` set; kernels that took no time are left out, and so are, in
    the byte families, kernels whose byte count is only an upper bound (:func:`bytes_exact`):
    they are judged, but do not set the rate.
    """
    rates: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for row in rows:
        work = _work(row, row.family)
        if row.family in BYTE_FAMILIES and not bytes_exact(row):
            continue
        if row.us > 0 and work > 0:
            rates[row.family].append((work / row.us / 1e3, work))
    return {family: weighted_percentile([r for r, _ in pairs], [w for _, w in pairs], quantile)
            for family, pairs in rates.items()}


def check_rows(rows: Sequence[KernelRow], limit: float = 3.0, quantile: float = 0.75,
               floor_us: float = 2.0, bandwidth_gbps: float | None = None,
               efficiency: dict[str, float] | None = None) -> dict[str, float]:
    """Classify ``rows``, set each one's expected time, ratio and verdict (in place).

    Parameters
    ----------
    rows : sequence of KernelRow
        The kernels (family filled in here when empty).
    limit : float
        A kernel fails when it takes more than ``limit`` times its expected time.
    quantile : float
        The work-weighted quantile of the family's rates taken as its efficiency.
    floor_us : float
        The least time any kernel is expected to take (the cost of a call).
    bandwidth_gbps : float, optional
        The machine's memory bandwidth: FLOP-family kernels are expected to take at least their
        bytes over it (a matrix-vector product is memory-bound), and so are the kernels of a
        byte family that has no rate of its own.
    efficiency : dict, optional
        Family efficiencies to use (default: computed from ``rows``).

    Returns
    -------
    dict of str to float
        The family efficiencies used (GFLOP/s or GB/s).
    """
    for row in rows:
        if not row.family:
            row.family = family_of(row.func, row.flops)
        row.gflops = row.flops / row.us / 1e3 if row.us > 0 else 0.0
        row.gbps = row.bytes / row.us / 1e3 if row.us > 0 else 0.0
    eff = efficiency if efficiency is not None else family_efficiency(rows, quantile)
    for row in rows:
        rate = eff.get(row.family, 0.0)
        work = _work(row, row.family)
        expected = work / rate / 1e3 if rate > 0 else 0.0
        if bandwidth_gbps and (row.family in FLOP_FAMILIES or rate <= 0):
            # FLOP families: memory may be the limit; a byte family with no rate of its own
            # (its only kernels over-count their bytes): the machine's bandwidth
            expected = max(expected, row.bytes / bandwidth_gbps / 1e3)
        row.expected_us = max(expected, floor_us)
        row.ratio = row.us / row.expected_us if row.expected_us > 0 else 0.0
        row.ok = row.ratio <= limit
    return eff


def rate_unit(family: str) -> str:
    """``"GFLOP/s"`` or ``"GB/s"``: what a family's efficiency is measured in."""
    return "GFLOP/s" if family in FLOP_FAMILIES else "GB/s"


def check_lines(rows: Sequence[KernelRow], efficiency: dict[str, dict[str, float]],
                limit: float = 3.0, worst: int | None = None, near: int = 0) -> list[str]:
    """The printed report of a check: families, failing kernels, the summary line.

    Parameters
    ----------
    rows : sequence of KernelRow
        Checked rows (:func:`check_rows`), of one or several models.
    efficiency : dict
        Per model (or ``"*"`` when pooled), the family efficiencies.
    limit : float
        The limit the rows were checked with.
    worst : int, optional
        List at most this many failing kernels (the most time lost first).
    near : int
        Also list this many passing kernels with the highest ratios.
    """
    lines = [f"{'model':14s} {'family':14s} {'n':>4s} {'fail':>4s} {'us':>10s}  efficiency"]
    groups: dict[tuple[str, str], list[KernelRow]] = defaultdict(list)
    for row in rows:
        groups[(row.model, row.family)].append(row)
    for (model, family), members in sorted(groups.items(), key=lambda kv: (kv[0][0], -sum(
            r.us for r in kv[1]))):
        rate = efficiency.get(model, efficiency.get("*", {})).get(family, 0.0)
        lines.append(f"{model[:14]:14s} {family:14s} {len(members):4d} "
                     f"{sum(not r.ok for r in members):4d} {sum(r.us for r in members):10.0f}  "
                     f"{rate:.1f} {rate_unit(family)}")
    header = (f"  {'model':14s} {'kernel':46s} {'family':13s} {'us':>9s} {'expected':>9s} "
              f"{'ratio':>6s}  source names")

    def line(r: KernelRow) -> str:
        return (f"  {r.model[:14]:14s} {r.func.removeprefix(_PREFIX)[:46]:46s} {r.family:13s} "
                f"{r.us:9.1f} {r.expected_us:9.1f} {r.ratio:6.1f}  {', '.join(r.source_names)[:80]}")

    failing = sorted((r for r in rows if not r.ok), key=lambda r: r.expected_us - r.us)
    if failing:
        lines += [f"kernels over {limit:g}x their family's expected time (most time lost first):",
                  header, *(line(r) for r in failing[:worst])]
        if worst is not None and len(failing) > worst:
            lines.append(f"  ... and {len(failing) - worst} more")
    passing = sorted((r for r in rows if r.ok), key=lambda r: -r.ratio)[:near]
    if passing:
        lines += ["passing kernels closest to the limit:", header, *(line(r) for r in passing)]
    lines.append(summary_line(rows, limit))
    return lines


def summary_line(rows: Sequence[KernelRow], limit: float = 3.0) -> str:
    """``"N of M kernels within 3x of their family's efficiency"``."""
    return (f"{sum(r.ok for r in rows)} of {len(rows)} kernels within {limit:g}x of their "
            "family's efficiency")


_MEASURED = ("model", "func", "us", "flops", "bytes", "source_names", "mean_us")


def check_models(rows: Sequence[KernelRow], names: Sequence[str], peaks: dict[str, Any],
                 pool: bool = False, **options: Any) -> dict[str, dict[str, float]]:
    """:func:`check_rows` on the rows of each model of ``names``.

    Parameters
    ----------
    rows : sequence of KernelRow
        The kernels of all models.
    names : sequence of str
        The models.
    peaks : dict
        Per model, the profile's machine limits (``ProfileReport.peak``: ``gbps`` is the
        bandwidth) or None.
    pool : bool
        Take the family efficiencies over all models' kernels, not per model.
    **options
        ``limit``, ``quantile``, ``floor_us`` of :func:`check_rows`.

    Returns
    -------
    dict
        Per model (``"*"`` when pooled), the family efficiencies used.
    """
    efficiency: dict[str, dict[str, float]] = {}
    if pool:
        for row in rows:
            row.family = row.family or family_of(row.func, row.flops)
        efficiency["*"] = family_efficiency(rows, options.get("quantile", 0.75))
    for name in names:
        peak = peaks.get(name)
        eff = check_rows([r for r in rows if r.model == name],
                         bandwidth_gbps=float(peak["gbps"]) if peak else None,
                         efficiency=efficiency.get("*"), **options)
        if not pool:
            efficiency[name] = eff
    return efficiency


# --- measuring ---------------------------------------------------------------------------------


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


def profile_kiln(model: onnx.ModelProto, feeds: dict, threads: int, number: int = 10,
                 repeat: int = 3, target: str = "c") -> Any:
    """Build ``model`` with Kiln and profile every fused kernel (a ``ProfileReport``)."""
    build = build_kiln(model, target)
    with tempfile.TemporaryDirectory(prefix="kiln-layers-") as tmp:
        debug = debug_executor.create(build.factory.graph_json, build.factory, kiln.cpu(),
                                      dump_root=tmp)
        debug.module.set_num_threads(threads)
        debug.set_input(**feeds)
        return debug.profile(number=number, repeat=repeat)


def kernel_rows(model_name: str, report: Any) -> list[KernelRow]:
    """The profile's rows as :class:`KernelRow` (unchecked); ``__nop`` nodes (reshapes the
    executor elides) are not kernels and are left out."""
    return [KernelRow(model=model_name, func=r.func,
                      us=r.min_us if r.measurements_us else r.mean_us,
                      flops=float(r.flops or 0.0), bytes=float(r.bytes),
                      source_names=list(r.source_names), mean_us=r.mean_us)
            for r in report.rows if r.func != "__nop"]


def ort_comparison_lines(name: str, threads: int, report: Any, ort_us: dict[str, float],
                         worst: int) -> list[str]:
    """Kiln's kernels against onnxruntime's nodes: totals, per kind of kernel, the worst."""
    rows: list[tuple[str, float, float, list[str], list[str]]] = []
    matched: set[str] = set()
    for row in report.rows:
        names = [s for s in row.source_names if s in ort_us]
        matched.update(names)
        rows.append((row.func, row.mean_us, sum(ort_us[s] for s in names), names,
                     row.source_names))
    unmatched = sum(t for n, t in ort_us.items() if n not in matched)
    lines = [f"{name}, {threads} thread(s): Kiln kernels sum to {report.node_sum_us:.0f} us, "
             f"onnxruntime nodes to {sum(ort_us.values()):.0f} us ({unmatched:.0f} us in nodes no "
             "Kiln kernel names)"]
    # per kind, each onnxruntime node counts once (an LSTM node is the source of hundreds of
    # Kiln kernels)
    kinds: dict[str, tuple[list[float], set[str]]] = defaultdict(lambda: ([0.0, 0.0], set()))
    for func, ours, _, names, _ in rows:
        totals, sources = kinds[kernel_kind(func)]
        totals[0] += ours
        totals[1] += 1
        sources.update(names)
    lines.append(f"{'kernel kind':60s} {'n':>4s} {'Kiln us':>10s} {'ORT us':>10s} {'Kiln/ORT':>9s}")
    for kind, ((ours, count), sources) in sorted(kinds.items(), key=lambda kv: -kv[1][0][0]):
        theirs = sum(ort_us[s] for s in sources)
        ratio = f"{ours / theirs:9.2f}" if theirs else "        -"
        lines.append(f"{kind[:60]:60s} {int(count):4d} {ours:10.0f} {theirs:10.0f} {ratio}")
    lines.append("kernels where Kiln loses the most time (Kiln - ORT):")
    for func, ours, total, _, shown in sorted(rows, key=lambda r: r[2] - r[1])[:worst]:
        if total and ours > total:
            lines.append(f"  {func.removeprefix(_PREFIX)[:50]:50s} {ours:8.0f} us vs "
                         f"{total:8.0f} us  {', '.join(shown)[:70]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", choices=sorted(MODELS), help="one model")
    parser.add_argument("--models", help="comma-separated models (instead of MODEL)")
    parser.add_argument("--all", action="store_true", help="every benchmark model")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--target", default="c",
                        help="Kiln target (default c; 'llvm -mcpu=znver3' builds for AVX2)")
    _ort_isa.add_option(parser)
    parser.add_argument("--runs", type=int, default=30, help="onnxruntime runs profiled")
    parser.add_argument("--number", type=int, default=10, help="Kiln runs per node measurement")
    parser.add_argument("--repeat", type=int, default=5,
                        help="Kiln profile repeats (the check takes each kernel's fastest)")
    parser.add_argument("--worst", type=int, default=10, help="kernels listed where Kiln loses most")
    parser.add_argument("--no-ort", action="store_true", help="skip the onnxruntime comparison")
    parser.add_argument("--limit", type=float, default=3.0,
                        help="a kernel fails above this many times its expected time")
    parser.add_argument("--quantile", type=float, default=0.75,
                        help="work-weighted quantile of a family's rates taken as its efficiency")
    parser.add_argument("--floor-us", type=float, default=2.0,
                        help="least time any kernel is expected to take")
    parser.add_argument("--pool-families", action="store_true",
                        help="family efficiencies over all models given, not per model")
    parser.add_argument("--max-failing", type=int, default=40, help="failing kernels listed")
    parser.add_argument("--near", type=int, default=5,
                        help="passing kernels listed with the highest ratios")
    parser.add_argument("--rows-from", metavar="FILE",
                        help="check the rows of a JSON written by --json again (no measuring)")
    parser.add_argument("--check", action="store_true", help="exit 1 when any kernel fails")
    parser.add_argument("--json", metavar="FILE", help="write per-kernel rows as JSON")
    args = parser.parse_args(argv)
    _ort_isa.require(parser, args.ort_isa)

    if args.all:
        names = sorted(MODELS)
    elif args.models:
        names = [n.strip() for n in args.models.split(",") if n.strip()]
        unknown = [n for n in names if n not in MODELS]
        if unknown:
            parser.error(f"unknown models {unknown}; choose from {sorted(MODELS)}")
    elif args.model:
        names = [args.model]
    elif args.rows_from:
        names = []  # every model of the file
    else:
        parser.error("give MODEL, --models a,b, --all or --rows-from FILE")

    info = machine_info()
    print("\n".join(machine_lines(info)))
    if args.rows_from:
        saved = json.loads(Path(args.rows_from).read_text())
        names = names or list(saved["models"])
        all_rows = [KernelRow(**{k: v for k, v in r.items() if k in _MEASURED})
                    for r in saved["rows"] if r["model"] in names]
        peaks: dict[str, Any] = saved.get("peaks", {})
        threads = saved.get("threads", args.threads)
    else:
        all_rows, peaks, threads = [], {}, args.threads
        for name in names:
            model = MODELS[name].build()
            feeds = make_feeds(model)
            ort_us = None if args.no_ort else ort_node_times(model, feeds, threads, args.runs)
            report = profile_kiln(model, feeds, threads, args.number, args.repeat, args.target)
            peaks[name] = report.peak
            if ort_us is not None:
                print("\n".join(ort_comparison_lines(name, threads, report, ort_us, args.worst)))
            else:
                print(f"{name}, {threads} thread(s): Kiln kernels sum to "
                      f"{report.node_sum_us:.0f} us")
            all_rows += kernel_rows(name, report)
            sys.stdout.flush()

    options = {"limit": args.limit, "quantile": args.quantile, "floor_us": args.floor_us}
    efficiency = check_models(all_rows, names, peaks, pool=args.pool_families, **options)
    print(f"per-node check, {threads} thread(s): expected = max(work / family efficiency "
          f"(work-weighted p{100 * args.quantile:g}), bytes / machine bandwidth, {args.floor_us:g} us)")
    print("\n".join(check_lines(all_rows, efficiency, args.limit, args.max_failing, args.near)))
    if args.json:
        write_json(args.json, {
            "machine": info, "threads": threads, "models": names, "options": options,
            "pool_families": args.pool_families, "peaks": peaks, "efficiency": efficiency,
            "summary": summary_line(all_rows, args.limit),
            "rows": [asdict(r) for r in all_rows]})
    return 1 if args.check and not all(r.ok for r in all_rows) else 0

if __name__ == "__main__":
    sys.exit(main())
