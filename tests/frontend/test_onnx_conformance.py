"""The ONNX project's node conformance tests through Kiln's importer and reference interpreter.

Every case of ``onnx.backend.test`` runs with the suite's tolerances; each failure is classified
(unsupported op, import error, runtime error, wrong result, timeout). The pass count must not fall
below the floor recorded from the last full run, and must stay at or above 85% of the cases
onnxruntime passes (its per-case results are in ``data/onnxruntime_conformance.json``, written by
``python scripts/onnx_conformance.py --onnxruntime``). ``python scripts/onnx_conformance.py``
regenerates ``docs/onnx_coverage.md`` with the per-operator details.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest

from kiln.frontend.onnx_conformance import STATUSES, CaseResult, load_cases, run_case, run_suite

# Recorded from the last full run (onnx 1.23.2): raise them when Kiln improves.
PASS_FLOOR = 1769
ORT_SHARE_FLOOR = 0.85

BASELINE = Path(__file__).parent / "data" / "onnxruntime_conformance.json"


@pytest.fixture(scope="module")
def cases() -> list:
    return load_cases()


@pytest.fixture(scope="module")
def results(cases) -> list[CaseResult]:
    return run_suite(cases, backend="kiln", timeout=20.0)


def _failures(results: list[CaseResult], statuses: tuple[str, ...]) -> str:
    rows = [f"{r.name}: {r.status}: {r.message}" for r in results if r.status in statuses]
    return "\n".join(rows[:40])


def test_every_case_is_classified(results):
    assert len(results) > 1800
    assert {r.status for r in results} <= set(STATUSES)
    for r in results:
        assert r.status == "pass" or r.message, r.name


def test_pass_count_stays_above_floor(results):
    counts = Counter(r.status for r in results)
    assert counts["pass"] >= PASS_FLOOR, (
        f"{counts['pass']} cases pass, the floor is {PASS_FLOOR}; failures:\n"
        + _failures(results, ("import_error", "runtime_error", "wrong_result", "timeout")))


def test_share_of_onnxruntime_passes(results):
    baseline = json.loads(BASELINE.read_text())
    ort_pass = {name for name, status in baseline.items() if status == "pass"}
    both = {r.name for r in results if r.status == "pass"} & ort_pass
    assert len(both) / len(ort_pass) >= ORT_SHARE_FLOOR, (
        f"Kiln passes {len(both)} of the {len(ort_pass)} cases onnxruntime passes")


def test_no_harness_failures(results):
    # Kiln's own errors are classified; a timeout or a failure outside Kiln would be a harness bug.
    assert not [r for r in results if r.status == "timeout"], _failures(results, ("timeout",))
    assert not [r for r in results if "(at " in r.message], _failures(results, tuple(STATUSES))


def test_skips_are_types_kiln_lacks(results):
    reasons = {r.message for r in results if r.status == "skipped"}
    allowed = ("uses ", "training op ")
    assert reasons and all(m.startswith(allowed) for m in reasons)


def test_a_wrong_answer_is_classified_as_wrong_result(cases):
    case = next(c for c in cases if c.name == "test_abs")
    inputs, outputs = case.data_sets[0]
    broken = dataclasses.replace(case, data_sets=[(inputs, [outputs[0] + 1])])
    result = run_case(broken)
    assert result.status == "wrong_result" and "values differ" in result.message


def _build_numpy(mod, params, feeds):
    """Compile with relay.build for the numpy target and run the graph executor."""
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor

    lib = relay.build(mod, target="numpy", params=params)
    module = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    for name, value in feeds.items():
        module.set_input(name, value)
    module.run()
    return [module.get_output(i).numpy() for i in range(module.get_num_outputs())]


def test_compiled_path_agrees_on_a_sample(cases, results):
    # Every 20th case that passes in the interpreter also passes when built with relay.build.
    passed = {r.name for r in results if r.status == "pass"}
    sample = [c for c in cases[::20] if c.name in passed]
    compiled = [run_case(c, execute=_build_numpy) for c in sample]
    bad = [f"{r.name}: {r.status}: {r.message}" for r in compiled if r.status != "pass"]
    assert len(sample) > 50 and not bad, "\n".join(bad)
