"""Cost models of the search (TVM's ``tvm.auto_scheduler.cost_model``).

A cost model scores states of a task; higher is better (a predicted relative throughput).
:class:`RandomModel` scores at random (search without a model). :class:`LGBModel` is TVM's
``XGBModel`` with LightGBM as the gradient-boosted trees: every innermost statement of a lowered
state is one row of :mod:`~kiln.auto_scheduler.feature` features; a state is the sum and the
maximum of its rows (:func:`state_vector`), and the trees regress the log of its normalized
throughput ``min_cost / cost`` (per task). On 120 measured random states of a 128^3 dense this
ranked held-out pairs better than TVM's pack-sum of per-statement predictions with LightGBM
(pairwise accuracy 0.69 vs 0.61 after 30 training states, 0.73 vs 0.67 after 60). LightGBM is
the ``kiln[tune]`` extra; :class:`XGBModel` is an alias of :class:`LGBModel`.
"""

from __future__ import annotations

import math
import pickle
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kiln.auto_scheduler.measure import MeasureInput, MeasureResult

__all__ = ["CostModel", "LGBModel", "RandomModel", "XGBModel", "lightgbm_available", "state_vector"]

_NO_LIGHTGBM = ("LGBModel needs LightGBM, which is not installed: install the tuning extra "
                "(pip install 'kiln[tune]')")


def lightgbm_available() -> bool:
    """Whether LightGBM can be imported."""
    try:
        import lightgbm  # noqa: F401
    except ImportError:
        return False
    return True


class CostModel(ABC):
    """Base class of cost models: :meth:`update` with measurements, :meth:`predict` scores."""

    @abstractmethod
    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from measured states.

        Parameters
        ----------
        inputs : list of MeasureInput
            The measured states.
        results : list of MeasureResult
            Their measurements.
        """

    @abstractmethod
    def predict(self, task: Any, states: Sequence[Any]) -> list[float]:
        """Scores of ``states`` of ``task`` (higher is better; ``-inf`` for invalid states)."""

    def update_from_file(self, filename: str | Path) -> None:
        """Learn from every record of a tuning log."""
        from kiln.auto_scheduler.measure_record import RecordReader

        inputs, results = [], []
        for inp, res in RecordReader(filename):
            if inp.task.compute_dag is not None:
                inputs.append(inp)
                results.append(res)
        if inputs:
            self.update(inputs, results)

    def save(self, file_name: str | Path) -> None:
        """Write the model to ``file_name`` (the base model has nothing to save)."""
        Path(file_name).write_bytes(pickle.dumps({}))

    def load(self, file_name: str | Path) -> None:
        """Read the model from ``file_name`` (the base model has nothing to read)."""
        del file_name


class RandomModel(CostModel):
    """Uniformly random scores in [0, 1): search without a cost model.

    Parameters
    ----------
    seed : int, optional
        Seed of the scores.
    """

    def __init__(self, seed: int | None = None):
        self._rng = random.Random(seed)

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Nothing to learn."""

    def predict(self, task: Any, states: Sequence[Any]) -> list[float]:
        """Random scores."""
        return [self._rng.random() for _ in states]


def state_vector(rows: np.ndarray) -> np.ndarray:
    """A state's fixed-length vector: the sum and the maximum of its statements' feature rows."""
    return np.concatenate([rows.sum(axis=0), rows.max(axis=0)])


#: Normalized throughputs below this (and failed states) are trained as this.
MIN_THROUGHPUT = 1e-3


class LGBModel(CostModel):
    """Gradient-boosted trees on statement features (TVM's ``XGBModel``, with LightGBM).

    Until ``num_warmup_sample`` states are measured, :meth:`predict` answers random scores (as
    TVM does); the trees are retrained on every :meth:`update`.

    Parameters
    ----------
    num_warmup_sample : int
        Measured states needed before the model's predictions are used.
    seed : int, optional
        Seed of the trees and of the warm-up scores.
    verbose_eval : int
        Accepted for TVM's signature.
    model_file : str, optional
        Where to save the model after every training (as TVM's ``XGBModel``).
    adaptive_training : bool
        Retrain only when the measured states grew by a fifth since the last training (TVM's
        rule).
    num_boost_round : int
        Boosting rounds per training.
    """

    def __init__(self, num_warmup_sample: int = 100, seed: int | None = None,
                 verbose_eval: int = 25, model_file: str | None = None,
                 adaptive_training: bool = False, num_boost_round: int = 100):
        try:
            import lightgbm
        except ImportError:
            raise ImportError(_NO_LIGHTGBM) from None
        self._lgb = lightgbm
        self.num_warmup_sample = int(num_warmup_sample)
        self.seed = seed
        self.num_boost_round = int(num_boost_round)
        self.model_file = model_file
        self.adaptive_training = bool(adaptive_training)
        self._last_train_size = 0
        self._rng = random.Random(seed)
        self.booster: Any = None
        # per measured state: (workload key, feature rows, cost); cost inf when it failed
        self._data: list[tuple[str, np.ndarray, float]] = []
        self._seen: set[tuple[str, str]] = set()
        self._feature_cache: dict[tuple[str, str], np.ndarray | None] = {}

    @property
    def num_samples(self) -> int:
        """Measured states learned from."""
        return len(self._data)

    def _features(self, task: Any, state: Any) -> np.ndarray | None:
        from kiln.auto_scheduler.feature import state_features
        from kiln.auto_scheduler.sketch import state_key

        key = (task.workload_key, state_key(state))
        if key not in self._feature_cache:
            if len(self._feature_cache) > 50000:
                self._feature_cache.clear()
            dag = task.require_dag() if hasattr(task, "require_dag") else task.compute_dag
            self._feature_cache[key] = state_features(dag, state)
        return self._feature_cache[key]

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Add the measurements and retrain."""
        from kiln.auto_scheduler.sketch import state_key

        for inp, res in zip(inputs, results):
            key = (inp.task.workload_key, state_key(inp.state))
            if key in self._seen:
                continue
            self._seen.add(key)
            feats = self._features(inp.task, inp.state)
            if feats is None or len(feats) == 0:
                continue
            cost = res.mean_cost() if res.error_no == 0 else math.inf
            self._data.append((inp.task.workload_key, feats, cost))
        self._train()

    def _train(self) -> None:
        if self.adaptive_training and self.booster is not None \
                and len(self._data) - self._last_train_size < self._last_train_size / 5:
            return
        best: dict[str, float] = {}
        for key, _, cost in self._data:
            best[key] = min(best.get(key, math.inf), cost)
        x, y = [], []
        for key, feats, cost in self._data:
            ratio = best[key] / cost if math.isfinite(cost) and math.isfinite(best[key]) else 0.0
            x.append(state_vector(feats))
            y.append(math.log(max(ratio, MIN_THROUGHPUT)))
        if len(y) < 2 or max(y) <= math.log(MIN_THROUGHPUT):
            return
        params = {"objective": "regression", "learning_rate": 0.1, "num_leaves": 31,
                  "min_data_in_leaf": 2, "verbose": -1,
                  "seed": self.seed if self.seed is not None else 0, "num_threads": 1}
        data = self._lgb.Dataset(np.asarray(x), label=np.asarray(y), free_raw_data=False)
        self.booster = self._lgb.train(params, data, num_boost_round=self.num_boost_round)
        self._last_train_size = len(self._data)
        if self.model_file:
            self.save(self.model_file)

    def predict(self, task: Any, states: Sequence[Any]) -> list[float]:
        """The model's scores (random during warm-up; ``-inf`` for states that do not lower)."""
        feats = [self._features(task, s) for s in states]
        if self.booster is None or len(self._data) < self.num_warmup_sample:
            return [self._rng.random() if f is not None else -math.inf for f in feats]
        return self.predict_features(feats)

    def predict_features(self, feats: Sequence[np.ndarray | None]) -> list[float]:
        """Scores of states given their feature rows (random before any training)."""
        valid = [state_vector(f) for f in feats if f is not None and len(f)]
        if self.booster is None or not valid:
            return [self._rng.random() if f is not None else -math.inf for f in feats]
        preds = iter(self.booster.predict(np.asarray(valid)))
        return [float(next(preds)) if f is not None and len(f) else -math.inf for f in feats]

    def save(self, file_name: str | Path) -> None:
        """Write the trees and the training data (pickle)."""
        text = self.booster.model_to_string() if self.booster is not None else None
        Path(file_name).write_bytes(pickle.dumps({"booster": text, "data": self._data,
                                                  "seen": self._seen}))

    def load(self, file_name: str | Path) -> None:
        """Read what :meth:`save` wrote."""
        obj = pickle.loads(Path(file_name).read_bytes())
        self._data = list(obj.get("data", []))
        self._seen = set(obj.get("seen", set()))
        text = obj.get("booster")
        self.booster = self._lgb.Booster(model_str=text) if text else None


class XGBModel(LGBModel):
    """TVM's name for the gradient-boosted cost model; Kiln trains it with LightGBM (XGBoost is
    not used), with :class:`LGBModel`'s parameters and behaviour."""
