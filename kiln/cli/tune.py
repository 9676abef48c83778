"""``kiln tune model.onnx -o model.log --trials N``: auto-schedule a model's kernels into a log.

The command imports the model, extracts its tuning tasks (one per distinct fused kernel with a
reduction, weighted by how often the graph calls it), and shares the trial budget among them
with Ansor's task scheduler. Records are appended to the log as they are measured; ``--resume``
continues a stopped run on the same log with the same budget (its trials count, none is measured
twice). The summary lists every task's trials and best latency and the estimated end-to-end
latency; ``kiln compile model.onnx --tuning-log model.log`` then builds with the tuned kernels.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kiln.cli._args import positive_int
from kiln.errors import DynamicShapeError, KilnError

__all__ = ["add_arguments", "run"]

POLICIES = ("default", "sketch.xgb", "sketch.lgb", "sketch.random")


def _search_param(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    for kind in (int, float):
        try:
            return name, kind(value)
        except ValueError:
            pass
    return name, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kiln tune``."""
    parser.add_argument("model", type=Path, help="the ONNX model")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="LOG",
                        help="the tuning log to write (records are appended as they are measured)")
    parser.add_argument("--trials", type=positive_int, required=True, metavar="N",
                        help="candidates to measure in all (with --resume: counting the log's)")
    parser.add_argument("--trials-per-round", type=positive_int, default=64, metavar="K",
                        help="candidates per round of one task (default 64)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run recorded in LOG (same budget: its trials count)")
    parser.add_argument("--target", default="c", help="c (default; llvm is an alias)")
    parser.add_argument("--opt-level", type=int, default=3)
    parser.add_argument("--input-shapes", default=None,
                        help="bind input shapes, as kiln compile takes them (data:1x3x224x224)")
    parser.add_argument("--ray", default=None, metavar="ADDRESS",
                        help="build and measure on a Ray cluster (an address, 'auto', or 'local' to "
                             "start one here); needs kiln[ray]")
    parser.add_argument("--plot", type=Path, default=None, metavar="PNG",
                        help="write a PNG of the best latency per task against trials (matplotlib)")
    parser.add_argument("--search-policy", choices=POLICIES, default="default",
                        help="sketch search with the gradient-boosted cost model (default) or "
                             "with random scores (sketch.random)")
    parser.add_argument("--search-param", type=_search_param, action="append", default=[],
                        metavar="NAME=VALUE",
                        help="a SketchPolicy parameter, e.g. evolutionary_search_population=64 "
                             "(repeatable)")
    parser.add_argument("--early-stopping", type=positive_int, default=None, metavar="N",
                        help="stop after N trials without improving the estimated latency")
    parser.add_argument("--strategy", choices=("gradient", "round-robin"), default="gradient",
                        help="how rounds are shared among tasks (default: Ansor's gradient)")
    parser.add_argument("--include-simple-tasks", action="store_true",
                        help="also tune kernels without a reduction (element-wise, layout)")
    parser.add_argument("--number", type=positive_int, default=3,
                        help="runs per measurement (grown to fill --min-repeat-ms)")
    parser.add_argument("--repeat", type=positive_int, default=1, help="measurements per candidate")
    parser.add_argument("--min-repeat-ms", type=float, default=100,
                        help="shortest measurement, in ms (default 100)")
    parser.add_argument("--timeout", type=float, default=10,
                        help="seconds one candidate's build or run may take (default 10)")


def _plot_available() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise KilnError("--plot needs matplotlib: pip install matplotlib") from None


def run(args: argparse.Namespace) -> int:
    """Tune ``args.model`` into ``args.output``; print the per-task summary."""
    from kiln import auto_scheduler, progress, relay
    from kiln.auto_scheduler.measure import LocalBuilder, LocalRunner
    from kiln.auto_scheduler.task_scheduler import PrintTableInfo, TuningProgress
    from kiln.auto_scheduler.tuning import tune_tasks
    from kiln.cli._common import pass_context, require_compiler
    from kiln.cli.compile import parse_input_shapes
    from kiln.target import Target

    verbose = bool(getattr(args, "verbose", False))
    shapes = parse_input_shapes(args.input_shapes)
    if not Target(args.target).is_native:
        raise KilnError(f"--target {args.target}: only native targets (c, llvm) have kernels to tune")
    require_compiler()
    if args.plot is not None:
        _plot_available()
    if args.search_param:
        from kiln.auto_scheduler.search_policy import DEFAULT_PARAMS

        unknown = sorted({name for name, _ in args.search_param} - set(DEFAULT_PARAMS))
        if unknown:
            raise KilnError(f"--search-param: unknown parameter {unknown[0]!r}; SketchPolicy's are "
                            + ", ".join(sorted(DEFAULT_PARAMS)))
    log: Path = args.output
    if log.exists() and log.stat().st_size > 0 and not args.resume:
        raise KilnError(f"{log} already holds records: pass --resume to continue that run, or write "
                        "to another log")

    hardware = None
    if args.ray is not None:
        builder, runner, hardware = _ray_measurement(args)
    else:
        builder = LocalBuilder(timeout=args.timeout)
        runner = LocalRunner(timeout=args.timeout, number=args.number, repeat=args.repeat,
                             min_repeat_ms=args.min_repeat_ms)

    with progress.stage("import"):
        try:
            mod, params = relay.frontend.from_onnx(str(args.model), shape=shapes)
        except DynamicShapeError as e:
            raise KilnError(e.describe("cli")) from e
    with progress.stage("extract tasks"), pass_context(args.opt_level, verbose):
        tasks, weights = auto_scheduler.extract_tasks(mod, params, args.target, hardware_params=hardware,
                                                      include_simple_tasks=args.include_simple_tasks,
                                                      opt_level=args.opt_level)
    if not tasks:
        raise KilnError(f"{args.model} has no kernel to tune (no convolution, dense, pooling or other "
                        "reduction); --include-simple-tasks tunes element-wise kernels too")
    if args.trials < len(tasks):
        raise KilnError(f"--trials {args.trials} is too small: the model has {len(tasks)} tasks and "
                        "each needs at least one trial")
    print(f"{len(tasks)} tasks to tune, {args.trials} trials"
          + (f" (resuming {log})" if args.resume and log.exists() else ""), flush=True)
    callbacks: list[Any] = [TuningProgress(enabled=True)]
    if verbose:
        callbacks.insert(0, PrintTableInfo())
    try:
        scheduler = tune_tasks(tasks, weights, log, args.trials, resume=args.resume,
                               num_measures_per_round=args.trials_per_round, builder=builder,
                               runner=runner, search_policy=args.search_policy,
                               search_policy_params=dict(args.search_param) or None,
                               early_stopping=args.early_stopping, strategy=args.strategy,
                               callbacks=callbacks, verbose=1 if verbose else 0)
    except KeyboardInterrupt:
        print(f"kiln tune: stopped; the records so far are in {log}: run the same command with "
              "--resume to continue", file=sys.stderr)
        raise
    _print_summary(scheduler, log, args)
    if args.plot is not None:
        from kiln.auto_scheduler.plot import plot_tuning_progress

        plot_tuning_progress(log, args.plot, tasks, weights, title=f"kiln tune {args.model.name}")
        print(f"wrote {args.plot}")
    return 0


def _ray_measurement(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """RayBuilder, RayRunner and the cluster's hardware params (None when nodes differ)."""
    from kiln.auto_scheduler.ray_measure import RayBuilder, RayRunner, init_ray, ray_hardware_params

    init_ray(args.ray)
    found = ray_hardware_params()
    distinct = {tuple(h.to_list()) for h in found.values()}
    hardware = next(iter(found.values())) if len(distinct) == 1 else None
    if len(distinct) > 1:
        print(f"kiln tune: the Ray cluster's {len(found)} nodes differ in hardware; tuning for this "
              "machine's", file=sys.stderr)
    print(f"Ray: {len(found)} node(s)", flush=True)
    builder = RayBuilder(timeout=args.timeout)
    runner = RayRunner(timeout=args.timeout, number=args.number, repeat=args.repeat,
                       min_repeat_ms=args.min_repeat_ms)
    return builder, runner, hardware


def _print_summary(scheduler: Any, log: Path, args: argparse.Namespace) -> None:
    rows = scheduler.summary()
    width = max([4] + [len(r["desc"]) for r in rows])
    width = min(width, 60)
    print(f"{'ID':>3}  {'task':<{width}}  {'weight':>6}  {'trials':>6}  {'latency (ms)':>12}")
    for r in rows:
        desc = r["desc"] if len(r["desc"]) <= width else r["desc"][:width - 3] + "..."
        lat = f"{1e3 * r['latency']:.4f}" if r["latency"] is not None else "-"
        print(f"{r['id']:>3}  {desc:<{width}}  {r['weight']:>6g}  {r['trials']:>6}  {lat:>12}")
    total = scheduler.estimated_latency()
    resumed = f" ({scheduler.restored_ct} resumed from the log)" if scheduler.restored_ct else ""
    est = f"{1e3 * total:.4f} ms" if total is not None else "- (a task has no valid measurement)"
    print(f"estimated latency: {est}; {scheduler.ct} trials{resumed}; log {log}")
    print(f"use it: kiln compile {args.model} --tuning-log {log} -o MODEL.so")
