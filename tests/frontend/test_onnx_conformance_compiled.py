"""The ONNX node conformance cases through the compiled path (relay.build + C kernels).

The native build must pass the same cases as the reference interpreter: every case that passes
through ``from_onnx`` and the interpreter is optimized at opt level 3, compiled to C (in batches
of cases, see :func:`kiln.frontend.onnx_conformance.run_suite_compiled`) and run on the graph
executor, with the suite's tolerances. Compiling the whole suite takes several minutes on two
cores, so the test is marked slow (``.ci/run`` runs it after the default suite).
"""

from __future__ import annotations

import pytest

from kiln.frontend.onnx_conformance import load_cases, run_suite, run_suite_compiled

pytestmark = [pytest.mark.slow, pytest.mark.requires_cc]


def test_compiled_path_passes_what_the_interpreter_passes():
    cases = load_cases()
    interpreted = {r.name: r for r in run_suite(cases)}
    compiled = run_suite_compiled(cases, target="c")
    lost = [f"{r.name}: {r.status}: {r.message}" for r in compiled
            if interpreted[r.name].status == "pass" and r.status != "pass"]
    assert not lost, f"{len(lost)} cases pass in the interpreter but not compiled:\n" + "\n".join(lost[:60])
    assert sum(r.status == "pass" for r in compiled) >= 1560
