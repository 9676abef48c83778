"""Process-wide settings, read from the environment in this one place.

Everything else takes its configuration from explicit objects (``PassContext``, build options,
executor arguments); these settings are only the defaults those objects fall back to.

=====================  ==========================================================
variable               meaning
=====================  ==========================================================
``CC``                 C compiler command for the native target (default ``cc``)
``KILN_CACHE_DIR``     compile cache (default ``~/.cache/kiln``)
``KILN_NUM_THREADS``   worker threads for compiled kernels (default: usable CPUs)
``KILN_VERIFY_PASSES`` ``1`` to type-check and verify the IR after every pass
``KILN_DEBUG``         verbosity of build logging (0 quiet, 1 passes, 2 kernels)
=====================  ==========================================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Settings", "settings", "usable_cpus"]


def usable_cpus() -> int:
    """CPUs this process may run on: the affinity mask, capped by a cgroup CPU quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = _cgroup_cpu_limit()
    if quota is not None:
        n = max(1, min(n, quota))
    return n


def _cgroup_cpu_limit() -> int | None:
    try:  # cgroup v2
        text = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if text and text[0] != "max":
            return max(1, int(int(text[0]) / int(text[1]) + 0.5))
    except (OSError, ValueError, IndexError):
        pass
    try:  # cgroup v1
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        if quota > 0 and period > 0:
            return max(1, int(quota / period + 0.5))
    except (OSError, ValueError):
        pass
    return None


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


@dataclass
class Settings:
    """Defaults taken from the environment when Kiln is imported; change them from Python freely."""

    cc: str = field(default_factory=lambda: os.environ.get("CC", "cc"))
    cache_dir: Path = field(default_factory=lambda: Path(
        os.environ.get("KILN_CACHE_DIR") or Path.home() / ".cache" / "kiln"))
    num_threads: int = field(default_factory=lambda: _env_int("KILN_NUM_THREADS", 0) or usable_cpus())
    verify_passes: bool = field(default_factory=lambda: os.environ.get("KILN_VERIFY_PASSES") == "1")
    debug: int = field(default_factory=lambda: _env_int("KILN_DEBUG", 0))


settings = Settings()
