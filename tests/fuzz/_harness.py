"""Run one ONNX model through every Kiln path and compare with the oracles.

The oracles are onnxruntime and Kiln's reference interpreter (``kiln.interpreter.evaluate``); the
paths checked are ``relay.build`` for the ``c`` target (when a C compiler is present) and the
``numpy`` target, at opt levels 0 and 3, each run through the graph executor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.interpreter import evaluate
from kiln.transform import PassContext
from tests._toolchain import have_cc
from tests.frontend._onnx_helpers import run_ort

__all__ = ["BUILDS", "c_available", "check_model"]


def c_available() -> bool:
    """Whether the ``c`` target can build here (a C compiler is found)."""
    return have_cc()


#: (target, opt_level) pairs every model is built for.
BUILDS: tuple[tuple[str, int], ...] = (("c", 0), ("c", 3), ("numpy", 0), ("numpy", 3))


def _compare(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], what: str,
             model: onnx.ModelProto, rtol: float, atol: float) -> None:
    try:
        assert len(actual) == len(expected), f"{len(actual)} outputs, expected {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            a = np.asarray(a)
            assert a.shape == e.shape, f"output {i} has shape {a.shape}, expected {e.shape}"
            # The absolute tolerance grows with the output's magnitude (float32 sums of large values).
            scale = float(np.max(np.abs(e[np.isfinite(e)]), initial=1.0))
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol * max(1.0, scale),
                                       err_msg=f"output {i}")
    except AssertionError as err:
        raise AssertionError(f"{what} differs from onnxruntime: {err}\n"
                             f"{onnx.printer.to_text(model.graph)}") from None


def check_model(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
                builds: Sequence[tuple[str, int]] = BUILDS, rtol: float = 1e-4,
                atol: float = 1e-4) -> None:
    """Compare Kiln with onnxruntime on ``model``: the interpreter, then every build in ``builds``.

    Parameters
    ----------
    model : onnx.ModelProto
        The model (every graph input is fed; shapes are taken from ``feeds``).
    feeds : mapping of str to numpy.ndarray
        The inputs.
    builds : sequence of (target, opt_level)
        The builds to check; ``c`` ones are skipped when no C compiler is found.
    rtol, atol : float
        Tolerances (``atol`` is scaled by the largest magnitude of each expected output).
    """
    expected = run_ort(model, feeds)
    mod, params = relay.frontend.from_onnx(model, shape={k: v.shape for k, v in feeds.items()})
    out = evaluate(mod, dict(feeds), params=params)
    _compare(list(out) if isinstance(out, tuple) else [out], expected, "interpreter", model, rtol, atol)
    for target, opt_level in builds:
        if target == "c" and not c_available():
            continue
        with PassContext(opt_level=opt_level):
            factory = relay.build(mod, target=target, params=params)
        gm = graph_executor.GraphModule(factory["default"](kiln.cpu()))
        gm.set_input(**feeds)
        gm.run()
        actual = [gm.get_output(i).numpy() for i in range(gm.get_num_outputs())]
        _compare(actual, expected, f"target {target!r} at opt_level {opt_level}", model, rtol, atol)
