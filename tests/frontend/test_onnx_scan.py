"""Scan, unrolled at import: directions, axes, several states and outputs, opset 8's batch form.

Oracle: onnxruntime on the same model.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from kiln.errors import UnsupportedOpError
from kiln.frontend.onnx import from_onnx
from tests.frontend._onnx_helpers import init, make_model, node, run_kiln, run_ort, value_info

F32 = np.float32


def _body(with_weight: bool = False) -> object:
    """(state s, slice x) -> (s + x * w, s * x, tanh(x)): two scan outputs per step."""
    nodes = [node("Mul", ["x", "w"] if with_weight else ["x", "x"], ["xw"]),
             node("Add", ["s", "xw"], ["s_next"]),
             node("Mul", ["s", "x"], ["prod"]),
             node("Tanh", ["x"], ["act"])]
    inits = [init("w", np.linspace(0.5, 1.5, 3).astype(F32))] if with_weight else []
    return helper.make_graph(nodes, "body", [value_info("s", F32, [3]), value_info("x", F32, [3])],
                             [value_info("s_next", F32, [3]), value_info("prod", F32, [3]),
                              value_info("act", F32, [3])], inits)


@pytest.mark.parametrize("in_axis, in_dir, out_axes, out_dirs", [
    (0, 0, [0, 0], [0, 0]),
    (0, 1, [0, 1], [0, 1]),
    (1, 0, [1, 0], [1, 0]),
    (-2, 1, [-1, -2], [1, 1]),
])
@pytest.mark.parametrize("with_weight", [False, True])
def test_scan_matches_onnxruntime(in_axis, in_dir, out_axes, out_dirs, with_weight):
    steps = 4
    shape = [steps, 3] if in_axis in (0, -2) else [3, steps]
    body = _body(with_weight)  # a slice along either axis is (3,)
    scan = node("Scan", ["s0", "xs"], ["s_final", "prods", "acts"], num_scan_inputs=1, body=body,
                scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                scan_output_axes=out_axes, scan_output_directions=out_dirs)
    model = make_model([scan], [value_info("s0", F32, [3]), value_info("xs", F32, shape)],
                       [value_info("s_final", F32, None), value_info("prods", F32, None),
                        value_info("acts", F32, None)], opset=16)
    rng = np.random.default_rng(1)
    feeds = {"s0": rng.standard_normal(3).astype(F32), "xs": rng.standard_normal(shape).astype(F32)}
    expected = run_ort(model, feeds)
    actual = run_kiln(model, feeds)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)


def test_scan8_batched_form():
    body = helper.make_graph([node("Add", ["s", "x"], ["s_next"]), node("Identity", ["s_next"], ["y"])],
                             "body", [value_info("s", F32, [2]), value_info("x", F32, [2])],
                             [value_info("s_next", F32, [2]), value_info("y", F32, [2])])
    scan = node("Scan", ["", "s0", "xs"], ["s_final", "ys"], num_scan_inputs=1, body=body)
    model = make_model([scan], [value_info("s0", F32, [3, 2]), value_info("xs", F32, [3, 5, 2])],
                       [value_info("s_final", F32, None), value_info("ys", F32, None)], opset=8)
    rng = np.random.default_rng(2)
    feeds = {"s0": rng.standard_normal((3, 2)).astype(F32),
             "xs": rng.standard_normal((3, 5, 2)).astype(F32)}
    for a, e in zip(run_kiln(model, feeds), run_ort(model, feeds)):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)


def test_scan8_with_sequence_lens_is_an_explicit_error():
    body = helper.make_graph([node("Add", ["s", "x"], ["s_next"])], "body",
                             [value_info("s", F32, [2]), value_info("x", F32, [2])],
                             [value_info("s_next", F32, [2])])
    scan = node("Scan", ["lens", "s0", "xs"], ["s_final"], num_scan_inputs=1, body=body, name="sc")
    model = make_model([scan], [value_info("lens", np.int32, [1]), value_info("s0", F32, [1, 2]),
                                value_info("xs", F32, [1, 4, 2])],
                       [value_info("s_final", F32, None)], opset=8)
    with pytest.raises(UnsupportedOpError, match="sequence_lens"):
        from_onnx(model)


def test_body_initializers_become_one_param_each():
    scan = node("Scan", ["s0", "xs"], ["s_final", "prods", "acts"], num_scan_inputs=1,
                body=_body(with_weight=True))
    model = make_model([scan], [value_info("s0", F32, [3]), value_info("xs", F32, [5, 3])],
                       [value_info("s_final", F32, None), value_info("prods", F32, None),
                        value_info("acts", F32, None)], opset=16)
    rng = np.random.default_rng(3)
    feeds = {"s0": rng.standard_normal(3).astype(F32), "xs": rng.standard_normal((5, 3)).astype(F32)}
    _, params = from_onnx(model, shape={k: v.shape for k, v in feeds.items()}, freeze_params=False)
    assert list(params) == ["w"]  # bound once, shared by the five unrolled steps
    for a, e in zip(run_kiln(model, feeds, freeze_params=False), run_ort(model, feeds)):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)
