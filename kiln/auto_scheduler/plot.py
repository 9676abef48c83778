"""A PNG of tuning progress, read from a tuning log (matplotlib, optional).

The left panel has one curve per task: the best latency found against the task's trials. With
the tasks' weights, the right panel has the estimated end-to-end latency (``sum(weight * best
latency)``) against all trials, from the first trial at which every task has a valid one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kiln.errors import KilnError

if TYPE_CHECKING:
    from kiln.auto_scheduler.search_task import SearchTask

__all__ = ["TuningCurves", "plot_tuning_progress", "tuning_curves"]


class TuningCurves:
    """Best-so-far curves of a log.

    Attributes
    ----------
    keys : list of str
        The workload keys, in the order of the tasks given (else of first appearance).
    labels : list of str
        A label per key (the task's description when known).
    per_task : list of list of (int, float)
        Per key: (trials of this task so far, best latency in ms so far), one point per valid
        record that improved the best, plus the last trial.
    total : list of (int, float)
        (trials so far, estimated end-to-end latency in ms) after each record, once every task
        has a valid latency (empty without weights).
    """

    def __init__(self, keys: list[str], labels: list[str], per_task: list[list[tuple[int, float]]],
                 total: list[tuple[int, float]]):
        self.keys, self.labels, self.per_task, self.total = keys, labels, per_task, total


def tuning_curves(log_file: str | Path, tasks: Sequence[SearchTask] | None = None,
                  weights: Sequence[float] | None = None) -> TuningCurves:
    """The best-so-far curves of ``log_file``'s valid records (see :class:`TuningCurves`).

    Parameters
    ----------
    log_file : str or Path
        A tuning log.
    tasks : list of SearchTask, optional
        Keep only these tasks' records, labelled with their descriptions.
    weights : list of float, optional
        The tasks' weights, for the end-to-end curve (needs ``tasks``).
    """
    from kiln.auto_scheduler.measure_record import load_records

    keys: list[str] = [t.workload_key for t in tasks] if tasks is not None else []
    labels: list[str] = [(t.desc or t.workload_key) for t in tasks] if tasks is not None else []
    index = {k: i for i, k in enumerate(keys)}
    per_task: list[list[tuple[int, float]]] = [[] for _ in keys]
    trials: list[int] = [0] * len(keys)
    best: list[float] = [float("inf")] * len(keys)
    total: list[tuple[int, float]] = []
    ct = 0
    for inp, res in load_records(log_file):
        key = inp.task.workload_key
        if key not in index:
            if tasks is not None:
                continue
            index[key] = len(keys)
            keys.append(key)
            labels.append(key)
            per_task.append([])
            trials.append(0)
            best.append(float("inf"))
        i = index[key]
        trials[i] += 1
        ct += 1
        if res.error_no == 0 and res.costs:
            cost = 1e3 * sum(res.costs) / len(res.costs)
            if cost < best[i]:
                best[i] = cost
                per_task[i].append((trials[i], cost))
        if weights is not None and all(b < float("inf") for b in best):
            total.append((ct, sum(w * b for w, b in zip(weights, best))))
    for i in range(len(keys)):
        if per_task[i] and per_task[i][-1][0] != trials[i]:
            per_task[i].append((trials[i], best[i]))
    return TuningCurves(keys, labels, per_task, total)


def plot_tuning_progress(log_file: str | Path, output: str | Path,
                         tasks: Sequence[SearchTask] | None = None,
                         weights: Sequence[float] | None = None, title: str | None = None) -> Path:
    """Write a PNG of ``log_file``'s tuning progress (see the module docstring).

    Parameters
    ----------
    log_file : str or Path
        A tuning log.
    output : str or Path
        The PNG to write.
    tasks, weights : optional
        As :func:`tuning_curves`.
    title : str, optional
        The figure's title (default: the log's name).

    Returns
    -------
    Path
        ``output``.

    Raises
    ------
    KilnError
        matplotlib is not installed.
    """
    plt = _pyplot()
    curves = tuning_curves(log_file, tasks, weights)
    panels = 2 if curves.total else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.5 * panels, 4.5), squeeze=False)
    ax = axes[0][0]
    for label, points in zip(curves.labels, curves.per_task):
        if points:
            xs, ys = zip(*points)
            ax.step(xs, ys, where="post", marker="o", markersize=3, label=_short(label))
    ax.set_xlabel("trials of the task")
    ax.set_ylabel("best latency (ms)")
    ax.set_yscale("log")
    ax.set_title("best latency per task")
    ax.grid(True, which="both", alpha=0.3)
    if any(curves.per_task):
        ax.legend(fontsize="small")
    if curves.total:
        ax2 = axes[0][1]
        xs, ys = zip(*curves.total)
        ax2.step(xs, ys, where="post", color="black")
        ax2.set_xlabel("trials (all tasks)")
        ax2.set_ylabel("estimated latency (ms)")
        ax2.set_title("estimated end-to-end latency")
        ax2.grid(True, alpha=0.3)
    fig.suptitle(title if title is not None else Path(log_file).name)
    fig.tight_layout()
    out = Path(output)
    fig.savefig(out, format="png", dpi=100)
    plt.close(fig)
    return out


def _short(label: str, width: int = 48) -> str:
    return label if len(label) <= width else label[:width - 3] + "..."


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise KilnError("plotting needs matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg")  # no display: write files only
    import matplotlib.pyplot as plt

    return plt
