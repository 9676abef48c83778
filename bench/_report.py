"""What every benchmark prints besides its numbers: the machine, versions, load, the peak."""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

import kiln
from bench._ort_isa import loaded_isa
from kiln.codegen.native import detect_vector_bytes
from kiln.config import settings, usable_cpus

__all__ = ["machine_info", "machine_lines", "peak_lines", "peak_table", "pct", "write_json"]


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return (f"{fields.get('model name', platform.machine())} (family {fields.get('cpu family', '?')}, "
            f"model {fields.get('model', '?')})")


def _compiler() -> str:
    try:
        out = subprocess.run([*shlex.split(settings.cc), "--version"], capture_output=True,
                             text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return f"{settings.cc} (not runnable)"
    return out.stdout.splitlines()[0] if out.stdout else settings.cc


def machine_info() -> dict[str, Any]:
    """The machine and software a benchmark ran on (CPU, usable CPUs, vector width, versions)."""
    return {
        "cpu": _cpu_model(),
        "usable_cpus": usable_cpus(),
        "vector_bytes": detect_vector_bytes(),
        "load_average": list(os.getloadavg()),
        "kiln": kiln.__version__,
        "onnxruntime": ort.__version__,
        "onnxruntime_kernels": loaded_isa(),
        "onnx": onnx.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cc": _compiler(),
    }


def machine_lines(info: dict[str, Any]) -> list[str]:
    """``machine_info`` as printable lines."""
    load = ", ".join(f"{x:.2f}" for x in info["load_average"])
    return [
        f"cpu: {info['cpu']}; usable CPUs {info['usable_cpus']}; vector registers "
        f"{info['vector_bytes']} bytes (-march=native)",
        f"load average (1, 5, 15 min): {load}  (other processes share these cores)",
        f"kiln {info['kiln']}, onnxruntime {info['onnxruntime']} ({info['onnxruntime_kernels']} "
        f"kernels), onnx {info['onnx']}, numpy "
        f"{info['numpy']}, python {info['python']}; cc: {info['cc']}",
    ]


def peak_table(measured: dict[int, float], threads: Sequence[int]) -> dict[int, float]:
    """The FMA peak used for "% of peak" per thread count: threads x the one-core peak.

    The probe's own multi-thread figure is printed beside it; on a shared machine it is lower
    than the hardware's whenever another process holds a core, so it is not the denominator.
    """
    return {t: t * measured[1] for t in threads}


def peak_lines(measured: dict[int, float], peaks: dict[int, float]) -> list[str]:
    """The peak per thread count as printed, with a warning where the probe fell short.

    Parameters
    ----------
    measured : dict of int to float
        The probe's GFLOP/s per thread count (only ``1`` when the peak was given by hand).
    peaks : dict of int to float
        :func:`peak_table`'s result.
    """
    lines = []
    for t, peak in peaks.items():
        probe = measured.get(t)
        if probe is None:
            lines.append(f"FMA peak T={t}: {peak:.1f} GFLOP/s ({t} x the given one-core peak)")
            continue
        lines.append(f"FMA peak T={t}: {peak:.1f} GFLOP/s ({t} x the one-core probe; the "
                     f"{t}-thread probe reached {probe:.1f})")
        if probe < 0.8 * peak:
            lines.append(f"  WARNING: with {t} threads the probe reached only {100 * probe / peak:.0f}% "
                         f"of {t} cores: other processes hold cores, so T={t} times are suspect")
    return lines


def pct(gflops: float, peak: float) -> float:
    """``gflops`` as a percentage of ``peak``."""
    return 100.0 * gflops / peak if peak else float("nan")


def write_json(path: str | Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` as indented JSON (NaN written as null)."""
    def clean(x: Any) -> Any:
        if isinstance(x, float) and math.isnan(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    Path(path).write_text(json.dumps(clean(payload), indent=2) + "\n")
