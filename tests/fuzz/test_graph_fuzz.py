"""Random small ONNX graphs through every Kiln path, against onnxruntime and the interpreter.

Each drawn graph (see :mod:`tests.fuzz._graphs`) is imported, evaluated by the reference
interpreter, and built for the ``c`` target (when a C compiler is present) and the ``numpy``
target at opt levels 0 and 3; every result is compared with onnxruntime. The default run draws a
fixed (derandomized) set of graphs, so a rerun hits the compile cache; the slow run draws many more.
Without the fix for issue 18's Keras crash (a vectorized reduction reading a 0-d tensor), the
default run fails, shrinking to ``ReduceSum(Mul(ReduceMean(x, keepdims=0), x), axes=[1, 2])``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzz._graphs import GraphCase, graphs
from tests.fuzz._harness import check_model

_SETTINGS = settings(derandomize=True, deadline=None, database=None, print_blob=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                            HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])


@settings(_SETTINGS, max_examples=40)
@given(graphs())
def test_random_graphs_match_onnxruntime(case: GraphCase) -> None:
    check_model(case.model, case.feeds)


@pytest.mark.slow
@settings(_SETTINGS, max_examples=400)
@given(graphs(max_nodes=10))
def test_many_random_graphs_match_onnxruntime(case: GraphCase) -> None:
    check_model(case.model, case.feeds)
