"""Helpers of the TensorFlow frontend tests: freeze a ``tf.function``, run the frozen graph with
TensorFlow, import it with Kiln, build it (native C) and compare."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import (
    convert_variables_to_constants_v2,
)

from kiln.frontend.tensorflow import from_tensorflow
from kiln.ir.module import IRModule
from tests.frontend._compiled import run_compiled

__all__ = ["RTOL", "assert_close", "check_function", "freeze"]

RTOL = 1e-4


def freeze(fn: Callable[..., Any], inputs: Sequence[np.ndarray]) -> tuple[Any, Any]:
    """The concrete function of ``fn`` traced on ``inputs``' specs, and its frozen graph."""
    specs = [tf.TensorSpec(x.shape, tf.as_dtype(x.dtype)) for x in inputs]
    concrete = tf.function(fn).get_concrete_function(*specs)
    return concrete, convert_variables_to_constants_v2(concrete, lower_control_flow=False)


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float = RTOL, atol: float = 1e-5) -> float:
    """``actual`` matches ``expected`` within ``rtol`` and ``atol`` times the output's magnitude;
    returns the max abs error."""
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected)
        return 0.0
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol * scale)
    return float(np.max(np.abs(actual.astype(np.float64) - expected))) if expected.size else 0.0


def check_function(fn: Callable[..., Any], inputs: Sequence[np.ndarray], rtol: float = RTOL,
                   atol: float = 1e-5, opt_level: int = 3) -> tuple[IRModule, float, set[str]]:
    """Freeze ``fn`` (traced on ``inputs``), import the frozen GraphDef, build and run it, and
    compare every output with TensorFlow running the same frozen graph; the module, the max abs
    error and the op types of the frozen graph and its functions. (Freezing is slow, so it is done
    once here; ``from_tf_function`` freezes the same way.)"""
    _, frozen = freeze(fn, inputs)
    gd = frozen.graph.as_graph_def()
    ops = {n.op for n in gd.node} | {n.op for f in gd.library.function for n in f.node_def}
    expected = [np.asarray(t) for t in tf.nest.flatten(frozen(*[tf.constant(x) for x in inputs]))]
    mod, params = from_tensorflow(gd, outputs=[t.name for t in frozen.outputs])
    names = [t.name.split(":")[0] for t in frozen.inputs]
    actual = run_compiled(mod, params, dict(zip(names, inputs)), opt_level=opt_level)
    assert len(actual) == len(expected)
    err = max((assert_close(a, e, rtol, atol) for a, e in zip(actual, expected)), default=0.0)
    return mod, err, ops
