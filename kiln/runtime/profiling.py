"""Timing: TVM's ``time_evaluator`` loop and its ``BenchmarkResult`` summary.

Every result records the thread count the kernels ran with, so no figure is reported without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["BenchmarkResult", "time_function"]


class BenchmarkResult:
    """Runtimes of repeated measurements, in seconds (TVM's ``BenchmarkResult``).

    Parameters
    ----------
    results : sequence of float
        One runtime per repeat (the mean over that repeat's ``number`` runs).
    num_threads : int, optional
        Threads the kernels used.

    Attributes
    ----------
    mean, median, std, min, max : float
        Statistics of ``results``.
    """

    def __init__(self, results: Sequence[float], num_threads: int | None = None):
        self.results = list(results)
        if not self.results:
            raise ValueError("BenchmarkResult needs at least one measurement")
        self.num_threads = num_threads
        self.mean = float(np.mean(self.results))
        self.std = float(np.std(self.results))
        self.median = float(np.median(self.results))
        self.min = float(np.min(self.results))
        self.max = float(np.max(self.results))

    def __repr__(self) -> str:
        return (f"BenchmarkResult(min={self.min}, mean={self.mean}, median={self.median}, "
                f"max={self.max}, std={self.std}, results={self.results}, "
                f"num_threads={self.num_threads})")

    def __str__(self) -> str:
        threads = "?" if self.num_threads is None else str(self.num_threads)
        return ("Execution time summary:\n"
                f"{'mean (ms)':^12} {'median (ms)':^12} {'max (ms)':^12} "
                f"{'min (ms)':^12} {'std (ms)':^12}\n"
                f"{self.mean * 1000:^12.4f} {self.median * 1000:^12.4f} {self.max * 1000:^12.4f} "
                f"{self.min * 1000:^12.4f} {self.std * 1000:^12.4f}"
                "               \n"
                f"({len(self.results)} repeats, {threads} thread(s))")


def time_function(
    fn: Callable[[], object],
    repeat: int = 5,
    number: int = 5,
    min_repeat_ms: float = 0.0,
    limit_zero_time_iterations: int = 100,
    cooldown_interval_ms: float = 0.0,
    repeats_to_cooldown: int = 1,
    num_threads: int | None = None,
) -> BenchmarkResult:
    """Time ``fn`` as TVM's ``time_evaluator`` does.

    One warm-up call, then ``repeat`` measurements of ``number`` back-to-back calls each. When a
    measurement takes less than ``min_repeat_ms``, ``number`` grows (to what should fill
    ``min_repeat_ms``, and at least by the golden ratio) and the measurement is taken again.

    Parameters
    ----------
    fn : callable
        What to time (no arguments).
    repeat, number : int
        Measurements, and calls per measurement.
    min_repeat_ms : float
        Minimum duration of one measurement, in milliseconds.
    limit_zero_time_iterations : int
        How many zero-duration measurements to accept before giving up on ``min_repeat_ms``.
    cooldown_interval_ms : float
        Pause after every ``repeats_to_cooldown`` measurements.
    repeats_to_cooldown : int
        See ``cooldown_interval_ms``.
    num_threads : int, optional
        Recorded in the result.

    Returns
    -------
    BenchmarkResult
        Seconds per call, one value per measurement.
    """
    if repeat < 1 or number < 1:
        raise ValueError(f"repeat and number must be positive, got repeat={repeat}, "
                         f"number={number}")
    fn()  # warm-up: first-touch of buffers, lazy initialisation
    results = []
    for i in range(repeat):
        duration_ms = 0.0
        zero_times = 0
        while True:
            if duration_ms > 0.0:
                number = int(max(min_repeat_ms / (duration_ms / number) + 1, number * 1.618))
            start = time.perf_counter_ns()
            for _ in range(number):
                fn()
            elapsed = time.perf_counter_ns() - start
            zero_times += elapsed == 0
            duration_ms = elapsed / 1e6
            if duration_ms >= min_repeat_ms or zero_times >= limit_zero_time_iterations:
                break
        results.append(duration_ms / 1e3 / number)
        if cooldown_interval_ms > 0 and i % max(repeats_to_cooldown, 1) == 0:
            time.sleep(cooldown_interval_ms / 1e3)
    return BenchmarkResult(results, num_threads)
