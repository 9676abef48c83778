"""Timing two engines honestly: in one process, warmed up, in alternating blocks of runs.

On shared VMs the speed of a core drifts over seconds (other tenants, host placement of the
vCPUs), so timing one engine and then the other compares two different machines. Here the two
engines run in alternating blocks, each block about ``block_s`` seconds of runs, in the order
A B, B A, A B, ... so neither engine always follows the other. Each run is timed on its own.
The ratio of the two engines is taken per pair of neighbouring blocks (the machine is the same
for both) and its median over the pairs is reported, next to each engine's median run time.
Every block starts after an idle gap (:data:`BLOCK_GAP_S`), so that one engine's leftover
spinning threads do not run during the other's block.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BLOCK_GAP_S", "Comparison", "EngineTimes", "compare", "runs_per_block", "time_alone",
           "time_runs", "warm_up"]

# Idle seconds before each timed block (onnxruntime's threads spin-wait for tens of ms).
BLOCK_GAP_S = 0.1


def time_runs(fn: Callable[[], object], runs: int) -> list[float]:
    """Seconds taken by each of ``runs`` calls of ``fn``."""
    times = []
    clock = time.perf_counter
    for _ in range(runs):
        start = clock()
        fn()
        times.append(clock() - start)
    return times


def warm_up(fn: Callable[[], object], min_runs: int = 2, min_seconds: float = 0.3) -> float:
    """Call ``fn`` once, then at least ``min_runs`` more times, for ``min_seconds`` in all.

    Returns
    -------
    float
        The median seconds per call over the warm-up runs after the first.
    """
    times = time_runs(fn, 1)
    while len(times) < min_runs + 1 or sum(times) < min_seconds:
        times += time_runs(fn, 1)
    return statistics.median(times[1:])


def runs_per_block(seconds_per_run: float, block_s: float) -> int:
    """Runs that fill about ``block_s`` seconds (at least one)."""
    return max(1, round(block_s / max(seconds_per_run, 1e-9)))


@dataclass(frozen=True)
class EngineTimes:
    """One engine's run times, block by block (seconds per run)."""

    blocks: tuple[tuple[float, ...], ...]

    @property
    def runs(self) -> list[float]:
        """Every run's time, in order."""
        return [t for block in self.blocks for t in block]

    @property
    def median_ms(self) -> float:
        """Median milliseconds per run over every block."""
        return 1e3 * statistics.median(self.runs)

    @property
    def block_medians(self) -> list[float]:
        """Median seconds per run of each block."""
        return [statistics.median(block) for block in self.blocks]


@dataclass(frozen=True)
class Comparison:
    """Engine A against engine B, measured in alternating blocks.

    Attributes
    ----------
    a, b : EngineTimes
        The two engines' times.
    """

    a: EngineTimes
    b: EngineTimes

    @property
    def ratios(self) -> list[float]:
        """Per pair of neighbouring blocks: A's median run time / B's."""
        return [ta / tb for ta, tb in zip(self.a.block_medians, self.b.block_medians)]

    @property
    def ratio(self) -> float:
        """Median over the block pairs of A's time / B's (above 1: A is slower)."""
        return statistics.median(self.ratios)

    @property
    def ratio_spread(self) -> tuple[float, float]:
        """The lowest and highest per-pair ratio."""
        return min(self.ratios), max(self.ratios)

    @property
    def best_ratio(self) -> float:
        """A's fastest block median / B's fastest: robust to slowdowns that come and go and need
        not hit both engines alike (on a shared VM, 8-lane AVX2 code was seen running ~30%
        slower for seconds at a time while AVX-512 code barely slowed), as long as some block
        of each engine ran outside them."""
        return min(self.a.block_medians) / min(self.b.block_medians)

    @property
    def blocks(self) -> int:
        """Block pairs measured."""
        return len(self.a.blocks)


def compare(a: Callable[[], object], b: Callable[[], object], blocks: int = 10,
            block_s: float = 0.2, max_seconds: float = 60.0, min_blocks: int = 3,
            warm_up_s: float = 0.3, gap_s: float = BLOCK_GAP_S) -> Comparison:
    """Time ``a`` against ``b`` in alternating blocks after warming both up.

    Parameters
    ----------
    a, b : callable
        One run of each engine (inputs already set).
    blocks : int
        Block pairs wanted.
    block_s : float
        Seconds one block should last; each engine's runs per block are chosen from its
        warm-up speed (at least one run).
    max_seconds : float
        Budget for the timed blocks: fewer pairs are run when ``blocks`` of them would take
        longer, so a very slow engine does not stall the suite.
    min_blocks : int
        Block pairs run whatever the budget (unless ``blocks`` is smaller).
    warm_up_s : float
        Seconds each engine runs untimed first (at least three runs).
    gap_s : float
        Idle seconds before each block, so that the other engine's idle threads have stopped
        spinning: onnxruntime's intra-op threads spin-wait for tens of milliseconds after a
        run, and without a gap they held the second core through Kiln's next block (an
        EfficientNet-style model at 2 threads measured 8.3 ms against 5.2 ms with a 50 ms gap;
        onnxruntime's own time barely moved).

    Returns
    -------
    Comparison
        Both engines' per-run times, block by block.
    """
    per_run_a = warm_up(a, min_seconds=warm_up_s)
    per_run_b = warm_up(b, min_seconds=warm_up_s)
    runs_a = runs_per_block(per_run_a, block_s)
    runs_b = runs_per_block(per_run_b, block_s)
    pair_s = runs_a * per_run_a + runs_b * per_run_b
    pairs = min(blocks, max(min_blocks, int(max_seconds / pair_s)))
    times_a: list[tuple[float, ...]] = []
    times_b: list[tuple[float, ...]] = []

    def block(fn: Callable[[], object], runs: int) -> tuple[float, ...]:
        time.sleep(gap_s)
        return tuple(time_runs(fn, runs))

    for i in range(pairs):
        if i % 2 == 0:
            times_a.append(block(a, runs_a))
            times_b.append(block(b, runs_b))
        else:
            times_b.append(block(b, runs_b))
            times_a.append(block(a, runs_a))
    return Comparison(EngineTimes(tuple(times_a)), EngineTimes(tuple(times_b)))


def time_alone(fn: Callable[[], object], blocks: int = 10, block_s: float = 0.2,
               max_seconds: float = 60.0, min_blocks: int = 3,
               warm_up_s: float = 0.3) -> EngineTimes:
    """Time one engine in blocks, as :func:`compare` does, when there is nothing to compare to.

    Parameters
    ----------
    fn : callable
        One run.
    blocks, block_s, max_seconds, min_blocks, warm_up_s
        As for :func:`compare`.

    Returns
    -------
    EngineTimes
        Per-run times, block by block.
    """
    per_run = warm_up(fn, min_seconds=warm_up_s)
    runs = runs_per_block(per_run, block_s)
    count = min(blocks, max(min_blocks, int(max_seconds / (runs * per_run))))
    return EngineTimes(tuple(tuple(time_runs(fn, runs)) for _ in range(count)))
