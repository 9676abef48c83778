"""The per-node check of ``bench/bench_layers.py``: families, family efficiency, verdicts.

The classification and the check are pure Python and are tested on synthetic rows whose times
are written here; the end-to-end test builds a reduced MobileNetV2 and checks the shape of what
the check reports, never a measured time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.bench_layers import (
    FAMILIES,
    KernelRow,
    check_lines,
    check_models,
    check_rows,
    family_efficiency,
    family_of,
    kernel_rows,
    main,
    profile_kiln,
    summary_line,
    weighted_percentile,
)
from bench.models import MODELS, make_feeds

P = "tvmgen_default_fused_"


@pytest.mark.parametrize(("func", "flops", "family"), [
    (P + "nn_contrib_conv2d_NCHWc_add_nn_relu_3", 1e6, "conv"),
    (P + "nn_conv2d_add", 1e6, "conv"),
    (P + "nn_conv1d_add_nn_relu", 1e6, "conv"),
    (P + "nn_conv2d_transpose_add", 1e6, "conv"),
    (P + "nn_contrib_depthwise_conv2d_NCHWc_add_clip_9", 1e5, "depthwise"),
    (P + "nn_contrib_dense_pack_add_add", 1e5, "dense"),
    (P + "nn_dense_add", 1e5, "dense"),
    (P + "nn_batch_matmul_1", 1e5, "dense"),
    (P + "add_sigmoid_subtract_nn_dense_multiply_add_add_tanh_multiply", 1e4, "dense"),
    (P + "nn_max_pool2d_2", 1e3, "pool_reduce"),
    (P + "nn_global_avg_pool2d", 1e3, "pool_reduce"),
    (P + "mean", 1e3, "pool_reduce"),
    (P + "nn_softmax", 1e3, "softmax_norm"),
    (P + "nn_layer_norm_add", 1e3, "softmax_norm"),
    (P + "layout_transform", 0, "data_movement"),
    (P + "layout_transform_reshape_transpose_reshape", 0, "data_movement"),
    (P + "strided_slice_1", 0, "data_movement"),
    (P + "concatenate_2", 0, "data_movement"),
    (P + "image_resize2d", 1e4, "data_movement"),  # interpolation arithmetic: still movement
    (P + "nn_depth_to_space", 0, "data_movement"),
    (P + "split", None, "data_movement"),
    (P + "multiply_add_clip", 0, "data_movement"),  # zero FLOPs: judged by the bytes
    (P + "strided_slice_sigmoid_multiply_strided_slice_sigmoid", 384, "elementwise"),
    (P + "add_maximum", 10, "elementwise"),  # "maximum" is not the reduction "max"
    (P + "squeeze_reshape_expand_dims_multiply_layout_transform", 10, "elementwise"),
    (P + "sigmoid_multiply", None, "elementwise"),
])
def test_family_of(func: str, flops: float | None, family: str) -> None:
    assert family_of(func, flops) == family
    assert family in FAMILIES


def test_weighted_percentile() -> None:
    assert weighted_percentile([1.0, 2.0, 3.0, 4.0], [1, 1, 1, 1], 0.75) == 3.0
    # the heavy kernel sets the percentile
    assert weighted_percentile([10.0, 50.0], [1, 99], 0.75) == 50.0
    assert weighted_percentile([10.0, 50.0], [99, 1], 0.75) == 10.0
    assert weighted_percentile([5.0, 7.0], [0, 0], 0.75) == 0.0  # no work: no rate
    assert weighted_percentile([], [], 0.5) == 0.0


def conv(us: float, flops: float = 1e8, name: str = "nn_contrib_conv2d_NCHWc_add") -> KernelRow:
    return KernelRow(model="m", func=P + name, us=us, flops=flops, bytes=1e5)


def test_slow_kernel_is_flagged() -> None:
    # five conv kernels at 100 GFLOP/s (1e8 FLOPs in 1000 us), one ten times slower
    rows = [conv(1000.0) for _ in range(5)] + [conv(10000.0, name="nn_contrib_conv2d_NCHWc_add_7")]
    eff = check_rows(rows, bandwidth_gbps=20.0)
    assert eff["conv"] == pytest.approx(100.0)
    assert [r.ok for r in rows] == [True] * 5 + [False]
    assert rows[-1].ratio == pytest.approx(10.0)
    assert rows[0].expected_us == pytest.approx(1000.0)
    assert all(r.family == "conv" for r in rows)
    assert summary_line(rows) == "5 of 6 kernels within 3x of their family's efficiency"
    lines = check_lines(rows, {"m": eff})
    assert any("nn_contrib_conv2d_NCHWc_add_7" in line and "10.0" in line for line in lines)
    assert lines[-1] == summary_line(rows)


def test_two_and_a_half_times_slower_passes() -> None:
    rows = [conv(1000.0) for _ in range(5)] + [conv(2500.0)]
    check_rows(rows)
    assert all(r.ok for r in rows)
    check_rows(rows, limit=2.0, efficiency=None)
    assert not rows[-1].ok


def test_families_have_their_own_efficiency() -> None:
    # dense at 20 GFLOP/s is fine among dense kernels though conv runs at 100
    rows = [conv(1000.0) for _ in range(3)]
    rows += [KernelRow(model="m", func=P + f"nn_contrib_dense_pack_add_{i}", us=5000.0,
                       flops=1e8, bytes=1e5) for i in range(3)]
    eff = check_rows(rows)
    assert eff["conv"] == pytest.approx(100.0)
    assert eff["dense"] == pytest.approx(20.0)
    assert all(r.ok for r in rows)
    # the same dense kernels judged at the conv family's rate fail
    check_rows(rows, efficiency={"conv": 100.0, "dense": 100.0})
    assert [r.ok for r in rows] == [True] * 3 + [False] * 3


def test_data_movement_is_judged_by_bytes() -> None:
    # layout transforms at 10 GB/s (1e6 bytes in 100 us), one at 1 GB/s; FLOPs play no part
    rows = [KernelRow(model="m", func=P + "layout_transform", us=100.0, flops=0.0, bytes=1e6)
            for _ in range(4)]
    rows.append(KernelRow(model="m", func=P + "concatenate", us=1000.0, flops=0.0, bytes=1e6))
    eff = check_rows(rows)
    assert eff == {"data_movement": pytest.approx(10.0)}
    assert [r.ok for r in rows] == [True] * 4 + [False]
    assert rows[-1].expected_us == pytest.approx(100.0)
    assert rows[-1].gbps == pytest.approx(1.0)


def test_over_counted_bytes_do_not_set_the_rate() -> None:
    # a gather from an embedding table is counted as reading the whole table: 1000 GB/s "achieved"
    rows = [KernelRow(model="m", func=P + "add_sigmoid", us=100.0, flops=1e3, bytes=1e6)
            for _ in range(3)]
    rows.append(KernelRow(model="m", func=P + "less_add_where_take_add", us=50.0, flops=1e3,
                          bytes=5e7))
    eff = check_rows(rows)
    assert eff == {"elementwise": pytest.approx(10.0)}
    assert all(r.ok for r in rows[:3])
    # zero-FLOP kernels are counted exactly (twice their output) and do set the rate
    moves = [KernelRow(model="m", func=P + "strided_slice", us=10.0, flops=0.0, bytes=1e6),
             KernelRow(model="m", func=P + "layout_transform", us=100.0, flops=0.0, bytes=1e6)]
    assert check_rows(moves) == {"data_movement": pytest.approx(100.0)}
    assert [r.ok for r in moves] == [True, False]
    # a family whose only kernel over-counts has no rate: judged by the machine's bandwidth
    alone = [KernelRow(model="m", func=P + "reshape_strided_slice_subtract", us=200.0, flops=1e3,
                       bytes=2e6)]
    assert check_rows(alone, bandwidth_gbps=20.0) == {}
    assert alone[0].expected_us == pytest.approx(100.0) and alone[0].ok


def test_zero_flops_and_zero_work_do_not_divide_by_zero() -> None:
    rows = [KernelRow(model="m", func=P + "layout_transform", us=3.0, flops=0.0, bytes=0.0),
            KernelRow(model="m", func=P + "nn_contrib_conv2d_NCHWc", us=5.0, flops=0.0, bytes=0.0),
            KernelRow(model="m", func=P + "strided_slice", us=0.0, flops=0.0, bytes=100.0)]
    eff = check_rows(rows, floor_us=2.0, bandwidth_gbps=20.0)
    assert eff == {}
    assert [r.expected_us for r in rows] == [2.0, 2.0, 2.0]  # the floor
    assert [r.ok for r in rows] == [True, True, True]
    assert rows[1].ratio == pytest.approx(2.5)


def test_floor_and_bandwidth_bound() -> None:
    # a matrix-vector dense (1 FLOP/byte) is expected to take its bytes over the bandwidth
    rows = [KernelRow(model="m", func=P + "nn_contrib_dense_pack_add", us=1000.0, flops=1e8,
                      bytes=1e6),
            KernelRow(model="m", func=P + "nn_contrib_dense_pack_add_1", us=100.0, flops=2e5,
                      bytes=8e5)]
    check_rows(rows, bandwidth_gbps=10.0)
    assert rows[1].expected_us == pytest.approx(80.0)  # 8e5 bytes at 10 GB/s
    assert rows[1].ok
    check_rows(rows, bandwidth_gbps=None)  # FLOPs alone: 2 us at 100 GFLOP/s
    assert rows[1].expected_us == pytest.approx(2.0)
    assert not rows[1].ok
    # a tiny kernel is never expected to beat the floor
    tiny = [conv(1000.0), conv(1.5, flops=10.0)]
    check_rows(tiny, floor_us=2.0)
    assert tiny[1].expected_us == 2.0 and tiny[1].ok


def test_check_models_per_model_and_pooled() -> None:
    # model "a" runs conv at 100 GFLOP/s, model "b" at 20: per model both pass, pooled "b" fails
    rows = [KernelRow(model=m, func=P + "nn_conv2d", us=us, flops=1e8, bytes=1e5)
            for m, us in [("a", 1000.0)] * 4 + [("b", 5000.0)]]
    peaks = {"a": {"gbps": 20.0}, "b": None}
    eff = check_models(rows, ["a", "b"], peaks)
    assert eff == {"a": {"conv": pytest.approx(100.0)}, "b": {"conv": pytest.approx(20.0)}}
    assert all(r.ok for r in rows)
    eff = check_models(rows, ["a", "b"], peaks, pool=True)
    assert eff == {"*": {"conv": pytest.approx(100.0)}}
    assert [r.ok for r in rows] == [True] * 4 + [False]
    lines = check_lines(rows, eff, near=2)
    assert "passing kernels closest to the limit:" in lines
    assert lines[-1] == "4 of 5 kernels within 3x of their family's efficiency"


def test_rows_from_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--rows-from checks saved rows again without measuring; --check sets the exit code."""
    rows = [conv(1000.0) for _ in range(5)] + [conv(10000.0, name="nn_contrib_conv2d_NCHWc_9")]
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps({"models": ["m"], "threads": 1, "peaks": {"m": None},
                                 "rows": [r.__dict__ for r in rows]}))
    out = tmp_path / "out.json"
    assert main(["--rows-from", str(saved), "--json", str(out)]) == 0
    assert main(["--rows-from", str(saved), "--check"]) == 1
    assert main(["--rows-from", str(saved), "--check", "--limit", "20"]) == 0
    text = capsys.readouterr().out
    assert "5 of 6 kernels within 3x of their family's efficiency" in text
    assert "nn_contrib_conv2d_NCHWc_9" in text
    data = json.loads(out.read_text())
    assert [r["ok"] for r in data["rows"]] == [True] * 5 + [False]
    assert data["rows"][-1]["ratio"] == pytest.approx(10.0)
    assert {"func", "family", "us", "flops", "bytes", "gflops", "expected_us", "ratio",
            "ok"} <= set(data["rows"][0])


def test_family_efficiency_ignores_zero_time() -> None:
    rows = [conv(0.0), conv(1000.0)]
    for r in rows:
        r.family = "conv"
    assert family_efficiency(rows) == {"conv": pytest.approx(100.0)}


@pytest.mark.requires_cc
def test_end_to_end_small_model() -> None:
    """A reduced MobileNetV2 built and profiled: every kernel classified and given a verdict."""
    model = MODELS["mobilenet_v2"].build(image_size=32, width_mult=0.25, num_classes=10)
    report = profile_kiln(model, make_feeds(model), threads=1, number=1, repeat=1)
    rows = kernel_rows("mobilenet_v2", report)
    assert rows and all(r.func != "__nop" for r in rows)
    eff = check_rows(rows, bandwidth_gbps=report.peak["gbps"] if report.peak else None)
    families = {r.family for r in rows}
    assert {"conv", "depthwise", "dense"} <= families
    assert set(eff) <= set(FAMILIES)
    assert all(r.expected_us >= 2.0 and r.ratio == pytest.approx(r.us / r.expected_us)
               for r in rows)
    assert all(r.ok == (r.ratio <= 3.0) for r in rows)
    assert summary_line(rows).endswith(f"of {len(rows)} kernels within 3x of their family's "
                                       "efficiency")


@pytest.mark.requires_cc
def test_main_writes_json(tmp_path: Path) -> None:
    """The command line on the smallest benchmark model (exported from torch), onnxruntime off."""
    pytest.importorskip("torch")
    out = tmp_path / "layers.json"
    code = main(["tiny_gru_stream", "--no-ort", "--number", "1", "--repeat", "1",
                 "--json", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    assert data["models"] == ["tiny_gru_stream"]
    assert data["rows"] and {"func", "family", "us", "flops", "bytes", "gflops", "expected_us",
                             "ratio", "ok"} <= set(data["rows"][0])
    assert "kernels within 3x" in data["summary"]
