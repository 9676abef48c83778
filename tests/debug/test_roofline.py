"""The roofline: placing kernels against the machine's limits, and measuring those limits."""

from __future__ import annotations

import json

import pytest

from kiln.debug.roofline import Peak, machine_peak, roofline, tensor_bytes

PEAK = Peak(gflops=200.0, gbps=20.0, num_threads=2, isa="test")


def test_compute_bound_kernel() -> None:
    # 2 GFLOP over 10 MB in 20 ms: intensity 200 FLOP/B, attainable = the FMA peak
    place = roofline(2e9, 10e6, 0.02, PEAK)
    assert place.gflops == pytest.approx(100.0) and place.gbps == pytest.approx(0.5)
    assert place.intensity == pytest.approx(200.0)
    assert place.bound == "compute" and place.attainable_gflops == pytest.approx(200.0)
    assert place.percent == pytest.approx(50.0)


def test_memory_bound_kernel() -> None:
    # 1 MFLOP over 4 MB in 1 ms: intensity 0.25, attainable 5 GFLOP/s, achieved 1
    place = roofline(1e6, 4e6, 1e-3, PEAK)
    assert place.bound == "memory" and place.attainable_gflops == pytest.approx(5.0)
    assert place.percent == pytest.approx(20.0)


def test_data_movement_is_judged_by_bandwidth() -> None:
    place = roofline(0.0, 10e6, 1e-3, PEAK)  # 10 GB/s of a 20 GB/s machine
    assert (place.bound, place.percent, place.gflops) == ("memory", pytest.approx(50.0), 0.0)


def test_cache_resident_kernel_is_judged_against_the_fma_peak() -> None:
    # 1 MFLOP over 4 MB in 0.1 ms: 40 GB/s, twice the copy bandwidth, so above the memory roof
    place = roofline(1e6, 4e6, 1e-4, PEAK)
    assert place.bound == "cache" and place.attainable_gflops == pytest.approx(200.0)
    assert place.percent == pytest.approx(5.0)
    moved = roofline(0.0, 4e6, 1e-4, PEAK)
    assert (moved.bound, moved.percent) == ("cache", pytest.approx(200.0))


def test_tensor_bytes() -> None:
    assert tensor_bytes([(2, 3), (4,)], ["float32", "int64"]) == 2 * 3 * 4 + 4 * 8
    assert tensor_bytes([(5,)], ["bool"]) == 5
    assert tensor_bytes([(3,), (2,)], ["bfloat16", "float8_e4m3fn"]) == 3 * 2 + 2


@pytest.mark.requires_cc
def test_machine_peak_is_measured_and_cached(tmp_path, monkeypatch) -> None:
    from kiln.config import settings

    monkeypatch.setattr(settings, "cache_dir", tmp_path)
    peak = machine_peak(1)
    # any CPU of the last decade: more than 1 GFLOP/s of float32 FMA and 0.5 GB/s of copy
    assert peak.gflops > 1.0 and peak.gbps > 0.5 and peak.num_threads == 1
    assert machine_peak(1) == peak  # cached (on file when the machine was quiet, else in process)


def test_contended_multi_thread_probe_is_not_the_peak(tmp_path, monkeypatch) -> None:
    """A 2-thread FMA probe that ran while another process held a core reached one core's rate:
    the peak of 2 threads is still 2 one-core peaks (a kernel never shows above 100% of it),
    and the low probe is not cached for the next process."""
    import kiln.debug.roofline as rl
    from kiln.config import settings

    monkeypatch.setattr(settings, "cache_dir", tmp_path)
    monkeypatch.setattr(rl, "_measured", {})
    rates = {1: 100.0, 2: 105.0}  # the 2-thread probe shared its second core
    monkeypatch.setattr(rl, "_measure", lambda threads, target: Peak(
        gflops=rates[threads], gbps=20.0, num_threads=threads, isa="test", load=0.0))
    assert machine_peak(2).gflops == 200.0

    def cached_threads() -> list[int]:
        return [v["num_threads"] for v in json.loads((tmp_path / "peak.json").read_text()).values()]

    assert cached_threads() == [1]
    rates[2] = 190.0  # quiet: cached, at least 2 one-core peaks
    monkeypatch.setattr(rl, "_measured", {})
    assert machine_peak(2).gflops == 200.0
    assert sorted(cached_threads()) == [1, 2]
