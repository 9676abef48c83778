"""Scan and Loop, unrolled at import: Scan's directions, axes, several states and outputs and
opset 8's batch form; Loop with a known trip count, a condition that stops it early, and the
errors for a trip count or condition that depend on graph inputs.

Oracle: onnxruntime on the same model.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from kiln.errors import FrontendError, UnsupportedOpError
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


def _loop_model(trip: int | None, stop_after: int | None = None, data_cond: bool = False) -> object:
    """acc <- acc * 2 + i, also scanned out. cond_out: the incoming cond, or ``i < stop_after``
    (known at import), or ``sum(acc) < 40`` (``data_cond``: depends on the graph input)."""
    nodes = [node("Cast", ["i"], ["i_f"], to=1),
             node("Mul", ["acc", "two"], ["acc2"]),
             node("Add", ["acc2", "i_f"], ["acc_next"]),
             node("Identity", ["acc_next"], ["acc_scan"])]
    if data_cond:
        nodes += [node("ReduceSum", ["acc_next"], ["total"], keepdims=0),
                  node("Less", ["total", "forty"], ["cond_out"])]
    elif stop_after is not None:
        nodes.append(node("Less", ["i", "stop"], ["cond_out"]))
    else:
        nodes.append(node("Identity", ["cond"], ["cond_out"]))
    body = helper.make_graph(
        nodes, "body", [value_info("i", np.int64, []), value_info("cond", np.bool_, []),
                        value_info("acc", F32, [2])],
        [value_info("cond_out", np.bool_, []), value_info("acc_next", F32, [2]),
         value_info("acc_scan", F32, [2])],
        [init("two", np.array(2, F32)), init("forty", np.array(40, F32)),
         init("stop", np.array(stop_after or 0, np.int64))])
    inits = [init("M", np.array(trip, np.int64))] if trip is not None else []
    inits.append(init("c0", np.array(True)))
    loop = node("Loop", ["M" if trip is not None else "", "c0", "a0"], ["a_final", "a_all"],
                body=body, name="loop")
    return make_model([loop], [value_info("a0", F32, [2])],
                      [value_info("a_final", F32, None), value_info("a_all", F32, None)], inits,
                      opset=16)


@pytest.mark.parametrize("trip, stop_after", [(5, None), (1, None), (50, 3), (None, 6)])
def test_loop_matches_onnxruntime(trip, stop_after):
    model = _loop_model(trip, stop_after)
    feeds = {"a0": np.array([0.5, -1.0], F32)}
    expected = run_ort(model, feeds)
    actual = run_kiln(model, feeds)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=1e-6)


def test_loop_with_an_input_trip_count_names_the_input_and_binds_with_const_inputs():
    model = _loop_model(4)
    model.graph.initializer.pop(0)  # M becomes a graph input
    model.graph.input.append(value_info("M", np.int64, []))
    with pytest.raises(FrontendError, match="Loop whose trip count or condition depends on graph "
                                            "input.s. 'M'"):
        from_onnx(model, shape={"a0": (2,), "M": ()})
    feeds = {"a0": np.array([1.0, 2.0], F32), "M": np.array(4, np.int64)}
    expected = run_ort(model, feeds)
    actual = run_kiln(model, {"a0": feeds["a0"]}, const_inputs={"M": feeds["M"]})
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-6)


def test_loop_whose_condition_depends_on_data_is_an_error():
    model = _loop_model(None, data_cond=True)
    with pytest.raises(FrontendError, match=r"Loop whose condition \(iteration 0\) depends on graph "
                                            r"input.s. 'a0'"):
        from_onnx(model, shape={"a0": (2,)})


@pytest.mark.parametrize("trip, message", [(0, "zero iterations with scan outputs"),
                                           (5000, "unrolls at most 4096")])
def test_loops_that_cannot_be_unrolled_say_why(trip, message):
    with pytest.raises(UnsupportedOpError, match=message):
        from_onnx(_loop_model(trip), shape={"a0": (2,)})


def test_loop_whose_first_condition_is_false_returns_the_initial_values():
    body = helper.make_graph(
        [node("Identity", ["cond"], ["cond_out"]), node("Add", ["acc", "acc"], ["acc_next"])],
        "body", [value_info("i", np.int64, []), value_info("cond", np.bool_, []),
                 value_info("acc", F32, [2])],
        [value_info("cond_out", np.bool_, []), value_info("acc_next", F32, [2])])
    model = make_model([node("Loop", ["", "c0", "a0"], ["a_final"], body=body)],
                       [value_info("a0", F32, [2])], [value_info("a_final", F32, None)],
                       [init("c0", np.array(False))], opset=16)
    feeds = {"a0": np.array([3.0, 4.0], F32)}
    (got,) = run_kiln(model, feeds)
    np.testing.assert_array_equal(got, run_ort(model, feeds)[0])
    np.testing.assert_array_equal(got, feeds["a0"])
