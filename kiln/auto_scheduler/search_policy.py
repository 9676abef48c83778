"""Search policies (TVM's ``tvm.auto_scheduler.search_policy``): Ansor's ``SketchPolicy``.

Each round of :meth:`SketchPolicy.continue_search_one_round`:

1. the sketches of the task (:func:`~kiln.auto_scheduler.sketch.generate_sketches`, made once)
   are sampled into an initial population of concrete states;
2. the population is seeded with the schedule Kiln builds without tuning (the template's state
   for this DAG, :func:`kiln.te.templates.apply_template`, and the default schedule) and the best
   measured states;
3. an evolutionary search scores the population with the cost model, keeps the best
   not-yet-measured states and breeds the next generation by mutation (selection proportional to
   score);
4. the best states plus an eps-greedy share of random ones are measured (the untuned schedules
   first, in round 1, so tuning never ends worse than the untuned build), and the cost model
   learns from the results.

Nothing is measured twice: every measured state's canonical key
(:func:`~kiln.auto_scheduler.sketch.state_key`) is in :attr:`SketchPolicy.measured_state_keys`,
which :meth:`SketchPolicy.add_measured` (or the :class:`PreloadMeasuredStates` callback, from a
log) also fills.

Defaults follow TVM's ``SketchPolicy.DEFAULT_PARAMS`` except the population: 2048 states per
generation is affordable in C++, not in pure Python (scoring a state lowers it, ~10-25 ms), so
Kiln's default is 256.
"""

from __future__ import annotations

import math
import random
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kiln.auto_scheduler import sketch as _sketch
from kiln.auto_scheduler.cost_model import CostModel, LGBModel, RandomModel, lightgbm_available
from kiln.auto_scheduler.measure import MeasureErrorNo, MeasureInput, MeasureResult
from kiln.auto_scheduler.sketch import state_key

__all__ = [
    "DEFAULT_PARAMS",
    "EmptyPolicy",
    "PreloadMeasuredStates",
    "SearchCallback",
    "SearchPolicy",
    "SketchPolicy",
]

#: Search parameters (TVM's names; ``evolutionary_search_population`` scaled down, see above).
DEFAULT_PARAMS: dict[str, Any] = {
    "eps_greedy": 0.05,
    "retry_search_one_round_on_empty": 1,
    "sample_init_min_population": 50,
    "sample_init_use_measured_ratio": 0.2,
    "evolutionary_search_population": 256,
    "evolutionary_search_num_iters": 4,
    "evolutionary_search_mutation_prob": 0.85,
    "cpu_multi_level_tiling_structure": "SSRSRS",
    "max_innermost_split_factor": 64,
    "max_vectorize_size": 16,
    "disable_change_compute_location": 0,
}

_warned_no_model = False


def _default_cost_model(seed: int | None) -> CostModel:
    global _warned_no_model
    if lightgbm_available():
        return LGBModel(seed=seed)
    if not _warned_no_model:
        _warned_no_model = True
        warnings.warn("tuning without a cost model: install kiln[tune]", stacklevel=3)
    return RandomModel(seed)


class SearchCallback(ABC):
    """Called once when a policy starts (TVM's ``SearchCallback``)."""

    @abstractmethod
    def callback(self, policy: SearchPolicy) -> None:
        """Act on the new policy."""


class PreloadMeasuredStates(SearchCallback):
    """Load a log's records of the policy's task into the policy (resume without re-measuring).

    Parameters
    ----------
    filename : str or Path
        The tuning log.
    """

    def __init__(self, filename: str | Path):
        self.filename = str(filename)

    def callback(self, policy: SearchPolicy) -> None:
        """Call ``policy.add_measured`` with the log's records of its task."""
        from kiln.auto_scheduler.measure_record import RecordReader

        if not Path(self.filename).exists():
            return
        key = policy.search_task.workload_key
        inputs, results = [], []
        for inp, res in RecordReader(self.filename):
            if inp.task.workload_key == key:
                inputs.append(inp)
                results.append(res)
        if inputs:
            policy.add_measured(inputs, results)
        if policy.verbose >= 1:
            print(f"PreloadMeasuredStates: loaded {len(inputs)} records of {key} from "
                  f"{self.filename}")


class SearchPolicy(ABC):
    """Base class of search policies.

    Parameters
    ----------
    task : SearchTask
        The task to search schedules for.
    verbose : int
        0 silent, 1 a line per round.
    """

    def __init__(self, task: Any, verbose: int = 1):
        self.search_task = task
        self.verbose = int(verbose)
        self.measured_state_keys: set[str] = set()

    @abstractmethod
    def continue_search_one_round(self, num_measure: int, measurer: Any
                                  ) -> tuple[list[MeasureInput], list[MeasureResult]]:
        """Propose up to ``num_measure`` new states, measure them with ``measurer``.

        Returns
        -------
        (list of MeasureInput, list of MeasureResult)
            What was measured (empty when nothing new is left).
        """

    def add_measured(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Remember measured states (so they are not measured again)."""
        for inp in inputs:
            self.measured_state_keys.add(_input_key(inp))

    def run_callbacks(self, callbacks: Sequence[SearchCallback] | None) -> None:
        """Run init-search callbacks on this policy."""
        for cb in callbacks or ():
            cb.callback(self)


def _input_key(inp: MeasureInput) -> str:
    from kiln.auto_scheduler.measure_record import input_steps

    return state_key(input_steps(inp))


class EmptyPolicy(SearchPolicy):
    """Measures the task's initial state once, then nothing (TVM's ``EmptyPolicy``)."""

    def __init__(self, task: Any, init_search_callbacks: Sequence[SearchCallback] | None = None,
                 verbose: int = 1):
        super().__init__(task, verbose)
        self.run_callbacks(init_search_callbacks)

    def continue_search_one_round(self, num_measure: int, measurer: Any
                                  ) -> tuple[list[MeasureInput], list[MeasureResult]]:
        """The initial state, unless it is measured already."""
        state = self.search_task.require_dag().init_state
        if num_measure <= 0 or state_key(state) in self.measured_state_keys:
            return [], []
        inputs = [MeasureInput(self.search_task, state)]
        results = measurer.measure(self.search_task, self, inputs)
        self.add_measured(inputs, results)
        return inputs, results


class SketchPolicy(SearchPolicy):
    """Ansor's sketch-based evolutionary search on CPU.

    Parameters
    ----------
    task : SearchTask
        The task.
    program_cost_model : CostModel, optional
        Scores states; default (None): :class:`~kiln.auto_scheduler.cost_model.LGBModel` when
        LightGBM is installed, else :class:`~kiln.auto_scheduler.cost_model.RandomModel` (with
        one warning per process).
    params : dict, optional
        Overrides of :data:`DEFAULT_PARAMS`.
    seed : int, optional
        Seed of the search's random choices.
    verbose : int
        0 silent, 1 a line per round.
    init_search_callbacks : list of SearchCallback, optional
        Run once at the start (e.g. :class:`PreloadMeasuredStates`).
    """

    DEFAULT_PARAMS = DEFAULT_PARAMS

    def __init__(self, task: Any, program_cost_model: CostModel | None = None,
                 params: dict[str, Any] | None = None, seed: int | None = None, verbose: int = 1,
                 init_search_callbacks: Sequence[SearchCallback] | None = None):
        super().__init__(task, verbose)
        self.dag = task.require_dag()
        self.params = dict(DEFAULT_PARAMS)
        lanes = max(1, int(task.hardware_params.vector_unit_bytes) // 4)
        self.params["max_vectorize_size"] = max(16, lanes)
        self.params.update(params or {})
        self.cost_model = program_cost_model if program_cost_model is not None \
            else _default_cost_model(seed)
        self.rng = random.Random(seed)
        self.num_cores = max(1, int(task.hardware_params.num_cores))
        self._sketches: list[Any] | None = None
        self._measured: list[tuple[float, Any]] = []  # (throughput, state) of valid measurements
        self._valid: dict[str, bool] = {}
        self._seeds: list[Any] | None = None
        self.run_callbacks(init_search_callbacks)

    @property
    def program_cost_model(self) -> CostModel:
        """TVM's name of :attr:`cost_model`."""
        return self.cost_model

    # --- the pieces --------------------------------------------------------------------------
    def generate_sketches(self, print_for_debug: bool = False) -> list[Any]:
        """The task's sketches (made once)."""
        if self._sketches is None:
            self._sketches = _sketch.generate_sketches(self.dag, self.params, self.num_cores)
        if print_for_debug:
            for i, s in enumerate(self._sketches):
                print(f"=== sketch {i} ===\n{s}")
        return self._sketches

    def untuned_states(self) -> list[Any]:
        """The states Kiln builds without tuning: the template's (if one matches) and the default
        schedule, distinct."""
        if self._seeds is None:
            from kiln.config import settings
            from kiln.te.default_schedule import default_schedule
            from kiln.te.templates import TargetInfo, apply_template

            vb = int(self.search_task.hardware_params.vector_unit_bytes)
            threads = max(1, settings.num_threads)
            out: list[Any] = []
            for make in (lambda: apply_template(self.dag, TargetInfo(vb, threads)),
                         lambda: default_schedule(self.dag, vb, threads)):
                try:
                    st = make()
                except Exception:  # a template that fails on this DAG: not a seed
                    st = None
                if st is not None and state_key(st) not in {state_key(s) for s in out}:
                    out.append(st)
            self._seeds = out
        return self._seeds

    def sample_initial_population(self) -> list[Any]:
        """Random concrete states of the sketches: batches of the population size until at least
        ``sample_init_min_population`` distinct valid ones."""
        sketches = self.generate_sketches()
        if not sketches:
            return []
        pop_size = int(self.params["evolutionary_search_population"])
        min_pop = int(self.params["sample_init_min_population"])
        out: list[Any] = []
        seen: set[str] = set()
        for _ in range(5):
            for _ in range(pop_size):
                st = _sketch.sample_state(self.dag, self.rng.choice(sketches), self.rng,
                                          self.params, self.num_cores)
                if st is None:
                    continue
                key = state_key(st)
                if key not in seen:
                    seen.add(key)
                    out.append(st)
                if len(out) >= pop_size:
                    break
            if len(out) >= min(min_pop, pop_size):
                break
        return out

    def evolutionary_search(self, init_population: Sequence[Any], out_size: int) -> list[Any]:
        """The ``out_size`` best-scoring unmeasured states found by evolving ``init_population``."""
        pop = list(init_population)
        if not pop:
            return []
        n_iters = int(self.params["evolutionary_search_num_iters"])
        pop_size = int(self.params["evolutionary_search_population"])
        mut_prob = float(self.params["evolutionary_search_mutation_prob"])
        best: dict[str, tuple[float, Any]] = {}
        n_mut = n_ok = 0
        for it in range(n_iters + 1):
            scores = self.cost_model.predict(self.search_task, pop)
            for st, sc in zip(pop, scores):
                key = state_key(st)
                if math.isfinite(sc) and key not in self.measured_state_keys and key not in best:
                    best[key] = (sc, st)
            if len(best) > out_size:
                best = dict(sorted(best.items(), key=lambda kv: -kv[1][0])[:out_size])
            if it == n_iters:
                break
            weights = [max(s, 0.0) if math.isfinite(s) else 0.0 for s in scores]
            if sum(weights) <= 0:
                weights = [1.0] * len(pop)
            nxt: list[Any] = []
            keys: set[str] = set()
            for _ in range(pop_size * 2):
                if len(nxt) >= pop_size:
                    break
                parent = self.rng.choices(pop, weights=weights)[0]
                if self.rng.random() < mut_prob:
                    n_mut += 1
                    child = _sketch.mutate(self.dag, parent, self.rng, self.params)
                    if child is None:
                        continue
                    n_ok += 1
                    key = state_key(child)
                    if key in keys:
                        continue
                    keys.add(key)
                    nxt.append(child)
                else:
                    nxt.append(parent)
            pop = nxt or pop
        self.last_mutation_stats = (n_ok, n_mut)
        return [st for _, st in sorted(best.values(), key=lambda x: -x[0])][:out_size]

    # --- one round ---------------------------------------------------------------------------
    def _is_valid(self, state: Any) -> bool:
        key = state_key(state)
        if key not in self._valid:
            from kiln.te.lower import lower

            try:
                lower(self.dag, state, name="kiln_check")
                self._valid[key] = True
            except Exception:  # does not lower: never measured
                self._valid[key] = False
        return self._valid[key]

    def search_one_round(self, num_measure: int, num_random_states: int) -> tuple[list[Any], list[Any]]:
        """Evolve a population; returns (best unmeasured states, random states for eps-greedy)."""
        ratio = float(self.params["sample_init_use_measured_ratio"])
        pop_size = int(self.params["evolutionary_search_population"])
        init = self.sample_initial_population()
        random_states = self.rng.sample(init, min(num_random_states, len(init)))
        n_use = min(len(self._measured), int(ratio * pop_size))
        measured = [st for _, st in sorted(self._measured, key=lambda x: -x[0])[:n_use]]
        seeds = self.untuned_states() + measured
        best = self.evolutionary_search(init + seeds, 2 * num_measure)
        return best, random_states

    def continue_search_one_round(self, num_measure: int, measurer: Any
                                  ) -> tuple[list[MeasureInput], list[MeasureResult]]:
        """Search, measure up to ``num_measure`` new states, update the model."""
        inputs: list[MeasureInput] = []
        chosen: set[str] = set()

        def take(st: Any) -> None:
            key = state_key(st)
            if len(inputs) < num_measure and key not in self.measured_state_keys \
                    and key not in chosen and self._is_valid(st):
                chosen.add(key)
                inputs.append(MeasureInput(self.search_task, st))

        for st in self.untuned_states():
            take(st)
        retries = int(self.params["retry_search_one_round_on_empty"])
        for _ in range(retries + 1):
            if len(inputs) >= num_measure:
                break
            num_random = int(float(self.params["eps_greedy"]) * num_measure)
            best, random_states = self.search_one_round(num_measure, num_random * 3)
            num_good = num_measure - num_random
            for st in best:
                if len(inputs) >= num_good:
                    break
                take(st)
            for st in random_states + best:
                take(st)
            if inputs:
                break
        if not inputs:
            return [], []
        if self.verbose >= 1:
            print(f"SketchPolicy: measuring {len(inputs)} states of {self.search_task.workload_key}")
        results = measurer.measure(self.search_task, self, inputs)
        self.add_measured(inputs, results)
        return inputs, results

    def add_measured(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Remember measured states, their throughputs (seeds of later rounds), and update the cost
        model (what a resume calls with a log's records)."""
        from kiln.auto_scheduler.measure_record import input_steps

        mine_in, mine_res = [], []
        for inp, res in zip(inputs, results):
            if inp.task.workload_key != self.search_task.workload_key:
                continue
            steps = input_steps(inp)
            key = state_key(steps)
            if key in self.measured_state_keys:
                continue
            self.measured_state_keys.add(key)
            state = _sketch.replay(self.dag, steps)
            if state is None:
                continue
            if res.error_no == MeasureErrorNo.NO_ERROR:
                self._measured.append((1.0 / max(res.mean_cost(), 1e-12), state))
            mine_in.append(MeasureInput(self.search_task, state))
            mine_res.append(res)
        if mine_in:
            self.cost_model.update(mine_in, mine_res)
