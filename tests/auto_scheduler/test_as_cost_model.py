"""Cost models (issue 12, part A): features from lowered loop IR, ``RandomModel``, ``LGBModel``
(LightGBM, TVM's pack-sum objective) trained on real measurements of a dense task."""

from __future__ import annotations

import math
import random
import time

import numpy as np
import pytest

from kiln import auto_scheduler, te
from kiln.auto_scheduler import LocalBuilder, LocalRunner, MeasureInput
from kiln.auto_scheduler import sketch as sk
from kiln.auto_scheduler.cost_model import LGBModel, RandomModel, XGBModel
from kiln.auto_scheduler.feature import FEATURE_NAMES, prim_func_features, state_features
from kiln.auto_scheduler.measure_record import save_records
from kiln.te.lower import lower
from kiln.te.steps import SplitStep
from kiln.te.templates import TargetInfo, apply_template
from kiln.te.templates.conv2d import choose_register_tile

pytestmark = pytest.mark.requires_cc

lightgbm = pytest.importorskip("lightgbm")


def cm_dense(m: int, n: int, k: int) -> list[te.Tensor]:
    """``C = A @ W.T``."""
    A = te.placeholder((m, k), name="A")
    W = te.placeholder((n, k), name="W")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * W[j, r], axis=[r]), name="C")
    return [A, W, C]


auto_scheduler.register_workload(cm_dense, override=True)


@pytest.fixture(scope="module")
def measured() -> tuple[auto_scheduler.SearchTask, list[MeasureInput], list]:
    """40 distinct random states of a 64x64x64 dense, measured."""
    task = auto_scheduler.SearchTask(func=cm_dense, args=(64, 64, 64), target="llvm")
    dag = task.compute_dag
    rng = random.Random(0)
    sketches = sk.generate_sketches(dag, {}, 2)
    states: dict[str, object] = {}
    while len(states) < 40:
        s = sk.sample_state(dag, rng.choice(sketches), rng, {}, 2)
        if s is not None:
            states.setdefault(sk.state_key(s), s)
    inputs = [MeasureInput(task, s) for s in states.values()]
    builds = LocalBuilder(timeout=60).build(inputs, verbose=0)
    results = LocalRunner(timeout=30, number=2, repeat=2, min_repeat_ms=2).run(inputs, builds,
                                                                               verbose=0)
    return task, inputs, results


def _conv_dag() -> tuple[object, object]:
    data = te.placeholder((1, 4, 58, 58, 16), name="data")
    kernel = te.placeholder((4, 4, 3, 3, 16, 16), name="kernel")
    ic = te.reduce_axis((0, 64), name="ic")
    kh = te.reduce_axis((0, 3), name="kh")
    kw = te.reduce_axis((0, 3), name="kw")
    out = te.compute((1, 4, 56, 56, 16), lambda n, c, y, x, b: te.sum(
        data[n, ic // 16, y + kh, x + kw, ic % 16] * kernel[c, ic // 16, kh, kw, ic % 16, b],
        axis=[ic, kh, kw]), name="conv", tag="conv2d_NCHWc")
    dag = te.ComputeDAG([data, kernel, out])
    return dag, apply_template(dag, TargetInfo(64, 2))


def test_features_are_finite_rows_per_store_and_fast() -> None:
    dag, state = _conv_dag()
    assert state is not None
    func = lower(dag, state, name="f")
    tic = time.perf_counter()
    for _ in range(10):
        feats = prim_func_features(func)
    per_state = (time.perf_counter() - tic) / 10
    tic = time.perf_counter()
    state_features(dag, state)
    with_lowering = time.perf_counter() - tic
    print(f"conv features: {per_state * 1e3:.1f} ms per state, {with_lowering * 1e3:.1f} ms with "
          "lowering")
    # the accumulator's init and update, the copy to the output
    assert feats.shape == (3, len(FEATURE_NAMES))
    assert np.isfinite(feats).all()
    row = dict(zip(FEATURE_NAMES, feats[1]))
    assert row["vec_len"] == pytest.approx(math.log2(17)) and row["vec_pos_inner"] == 1
    # loop trips: a row's partial last register tile counts whole (its guard is not modelled)
    ow_t = choose_register_tile(4, 56, 56, 28, 1, 2, issue_bound=True).ow_t
    columns = -(-56 // ow_t) * ow_t
    assert row["float_mul"] == pytest.approx(math.log2(1 + 56 * columns * 64 * 64 * 9))
    assert per_state < 0.05
    # an invalid state has no features
    bad = dag.init_state
    bad.transform_steps.append(SplitStep(7, 0, 1, (2,), True))
    assert state_features(dag, bad) is None


def test_random_model_scores() -> None:
    scores = RandomModel(0).predict(None, [object()] * 50)
    assert len(scores) == 50 and all(0 <= s < 1 for s in scores) and len(set(scores)) == 50


def _pairwise_accuracy(pred: list[float], cost: list[float]) -> float:
    good = total = 0
    for i in range(len(pred)):
        for j in range(i + 1, len(pred)):
            if cost[i] == cost[j]:
                continue
            total += 1
            good += (pred[i] > pred[j]) == (cost[i] < cost[j])
    return good / max(1, total)


def test_lgb_model_trains_and_ranks_held_out_states(measured, tmp_path) -> None:
    task, inputs, results = measured
    ok = [(i, r) for i, r in zip(inputs, results) if r.error_no == 0]
    assert len(ok) >= 30
    train, test = ok[:28], ok[28:]
    model = LGBModel(num_warmup_sample=0, seed=0)
    model.update([i for i, _ in train], [r for _, r in train])
    assert model.num_samples == 28 and model.booster is not None
    pred = model.predict(task, [i.state for i, _ in test])
    assert all(math.isfinite(p) for p in pred)
    acc = _pairwise_accuracy(pred, [r.mean_cost() for _, r in test])
    train_acc = _pairwise_accuracy(model.predict(task, [i.state for i, _ in train]),
                                   [r.mean_cost() for _, r in train])
    print(f"LGBModel pairwise accuracy: held-out {acc:.2f}, train {train_acc:.2f}")
    assert train_acc > 0.7  # it learned something; the held-out accuracy is printed
    # save / load keep the predictions; an update from a log trains the same way
    path = tmp_path / "model.lgb"
    model.save(path)
    other = XGBModel(num_warmup_sample=0, seed=0)
    other.load(path)
    assert other.predict(task, [i.state for i, _ in test]) == pytest.approx(pred)
    log = tmp_path / "log.json"
    save_records(log, [i for i, _ in train], [r for _, r in train])
    from_log = LGBModel(num_warmup_sample=0, seed=0)
    from_log.update_from_file(log)
    assert from_log.num_samples == 28


def test_lgb_model_is_random_during_warmup(measured) -> None:
    task, inputs, results = measured
    model = LGBModel(num_warmup_sample=100, seed=0)
    model.update(inputs[:10], results[:10])
    scores = model.predict(task, [i.state for i in inputs[10:20]])
    assert all(0 <= s < 1 for s in scores)
    assert issubclass(XGBModel, LGBModel) and "LightGBM" in (XGBModel.__doc__ or "")
