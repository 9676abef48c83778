"""The default schedule's vector length for data-movement kernels (issue 17).

A concatenation of 8-channel blocks into 16-channel ones, or a depth-to-space between blocked
layouts, reads two sources (or two channel blocks) within one 16-lane vector: at the full
AVX-512 width every lane needs its own select or gather, so the kernel ran as scalar code
(6.2 ms for DBNet's head, 25x onnxruntime). An 8-lane vector keeps each source uniform and each
load contiguous. Each kernel here is checked for the width the schedule picks and, compiled,
against the reference interpreter.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from kiln import relay
from kiln.codegen.native import build_native, function_to_dag
from kiln.interpreter import evaluate
from kiln.ir.analysis import free_vars
from kiln.ir.expr import Expr, Function
from kiln.ir.module import IRModule
from kiln.te.default_schedule import default_schedule
from kiln.transform import InferType
from tests.fuzz._harness import c_available

F32 = np.float32


def _typed(expr: Expr) -> Function:
    return InferType()(IRModule.from_expr(Function(free_vars(expr), expr)))["main"]


def _concat_blocks() -> Function:
    """Three 8-channel-blocked maps concatenated (24 + 24 + 24 channels) into 16-channel blocks."""
    parts = [relay.var(f"x{i}", shape=(1, 3, 5, 7, 8)) for i in range(3)]
    return _typed(relay.layout_transform(relay.concatenate(parts, axis=1), "NCHW8c", "NCHW16c"))


def _depth_to_space_blocks() -> Function:
    """DBNet's upsampling head after a 1x1 conv: NCHW16c -> depth_to_space(2) -> NCHW8c."""
    x = relay.var("x", shape=(1, 6, 5, 7, 16))
    nchw = relay.layout_transform(x, "NCHW16c", "NCHW")
    return _typed(relay.layout_transform(relay.nn.depth_to_space(nchw, 2), "NCHW", "NCHW8c"))


def _lanes(state_text: str) -> list[str]:
    return [line for line in state_text.splitlines() if "vectorize" in line]


CASES = {"concat_8c_to_16c": _concat_blocks, "depth_to_space_16c_to_8c": _depth_to_space_blocks}


def _blocked_to_rows() -> Function:
    """YOLOv8's detect head: NCHW16c maps flattened to (N, C, H*W)."""
    x = relay.var("x", shape=(1, 4, 6, 8, 16))
    return _typed(relay.reshape(relay.layout_transform(x, "NCHW16c", "NCHW"), (1, 64, 48)))


def _attention_key_transpose() -> Function:
    """BERT's K: (batch, seq, heads, head_dim) -> (batch, heads, head_dim, seq)."""
    k = relay.var("k", shape=(1, 32, 3, 16))
    return _typed(relay.transpose(k, (0, 2, 3, 1)))


TRANSPOSES = {"nchw16c_to_rows": _blocked_to_rows, "attention_key": _attention_key_transpose}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("vector_bytes", [32, 64])
def test_blocked_data_movement_is_vectorized_by_8(case: str, vector_bytes: int, rng) -> None:
    func = CASES[case]()
    state = default_schedule(function_to_dag(func, "k").dag, vector_bytes, 2)
    text = str(state)
    # 8 float32 lanes on both widths: the 16-lane AVX-512 vector would straddle two sources
    assert [line.split()[-1] for line in _lanes(text)] == ["(0,8)"], text
    if not c_available():
        return
    lib = build_native({"k": func.with_attr("Primitive", 1)},
                       schedule_lookup=lambda dag, name: default_schedule(dag, vector_bytes, 2))
    inputs = {p.name_hint: rng.standard_normal(tuple(p.checked_type.shape)).astype(F32)
              for p in func.params}
    out = np.full(tuple(func.ret_type.shape), np.nan, F32)
    lib.kernel("k").bind([inputs[p.name_hint] for p in func.params] + [out])()
    want = np.asarray(evaluate(IRModule.from_expr(func), inputs))
    np.testing.assert_array_equal(out, want)


def test_contiguous_copies_keep_the_full_width() -> None:
    """A plain element-wise map reads every input contiguously: the full width stays."""
    x = relay.var("x", shape=(4, 64))
    state = default_schedule(function_to_dag(_typed(relay.nn.relu(x)), "k").dag, 64, 2)
    assert [line.split()[-1] for line in _lanes(str(state))] == ["(0,16)"], str(state)


@pytest.mark.parametrize("case", sorted(TRANSPOSES))
def test_transposes_block_the_axis_their_gathers_step_along(case: str, rng) -> None:
    """A vector loop that gathers (its loads step by 16 elements) is nested in a 16-iteration
    loop over the output axis that reads consecutive elements, so the cache lines one vector
    gathers serve the next 15 (yolov8n's detect-head concat 789 -> 267 us, MiniLM's key
    transpose 30 -> 11 us on one Zen 4 core)."""
    func = TRANSPOSES[case]()
    state = default_schedule(function_to_dag(func, "k").dag, 64, 2)
    lines = str(state).splitlines()
    vec = next(i for i, line in enumerate(lines) if "vectorize" in line)
    assert lines[vec].split()[-1] == "(0,16)" and lines[vec - 1].split()[-1] == "(0,16)", state
    assert lines[vec - 1].lstrip().startswith("for "), state
    if not c_available():
        return
    lib = build_native({"k": func.with_attr("Primitive", 1)},
                       schedule_lookup=lambda dag, name: default_schedule(dag, 64, 2))
    inputs = {p.name_hint: rng.standard_normal(tuple(p.checked_type.shape)).astype(F32)
              for p in func.params}
    out = np.full(tuple(func.ret_type.shape), np.nan, F32)
    lib.kernel("k").bind([inputs[p.name_hint] for p in func.params] + [out])()
    np.testing.assert_array_equal(out, np.asarray(evaluate(IRModule.from_expr(func), inputs)))


@pytest.mark.parametrize("vector_bytes", [32, 64])
def test_coordinates_read_as_quotient_and_remainder_become_split_loops(vector_bytes: int) -> None:
    """A depth-to-space reads its output row and column only as ``h // 2`` and ``h % 2``: both
    axes are split by 2, so the loop variables are those values and no index divides (DBNet's
    9.8 MB head on one Zen 5 core: 478 -> 320 us)."""
    func = _depth_to_space_blocks()
    text = str(default_schedule(function_to_dag(func, "k").dag, vector_bytes, 1))
    assert "for ax2.1 (0,2)" in text and "for ax3.1 (0,2)" in text, text
    if not c_available():
        return
    lib = build_native({"k": func.with_attr("Primitive", 1)},
                       schedule_lookup=lambda dag, name: default_schedule(dag, vector_bytes, 1))
    source = "".join(Path(s).read_text() for s in lib.sources if "kiln_runtime" not in Path(s).name)
    assert re.search(r"\bax[23]\b", source) is None  # only ax2_o, ax2_i, ax3_o, ax3_i

