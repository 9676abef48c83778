"""Process-wide settings, read from the environment in this one place.

Everything else takes its configuration from explicit objects (``PassContext``, build options,
executor arguments); these settings are only the defaults those objects fall back to.

=====================  ==========================================================
variable               meaning
=====================  ==========================================================
``CC``                 C compiler command for the native target (default ``cc``)
``CUDA_HOME``          CUDA toolkit for the cuda target (``CUDA_PATH`` too; default: search)
``KILN_CACHE_DIR``     compile and build caches (default ``~/.cache/kiln``)
``KILN_BUILD_CACHE``   ``0`` to rebuild every model in full (no whole-build cache)
``KILN_NUM_THREADS``   kernel threads, a positive integer (default: usable CPUs)
``KILN_VERIFY_PASSES`` ``1`` to type-check and verify the IR after every pass
=====================  ==========================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kiln.errors import ConfigError

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


def _parse_int(name: str, text: str | None, minimum: int) -> int | None:
    """``text`` as an int of at least ``minimum``; None when unset or blank."""
    if text is None or not text.strip():
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer of at least {minimum}"
        raise ConfigError(f"environment variable {name}={text!r} is not {kind}; fix or unset it")
    return value


class Settings:
    """Defaults taken from the environment when Kiln is imported; change them from Python freely.

    An invalid environment value does not stop ``import kiln``: it raises
    :class:`~kiln.errors.ConfigError` (naming the variable and its value) where the setting is
    first used, e.g. ``KILN_NUM_THREADS=abc`` when a kernel library is built or loaded.

    Attributes
    ----------
    cc : str
        C compiler command (``CC``, default ``cc``).
    cache_dir : Path
        Compile and build caches (``KILN_CACHE_DIR``, default ``~/.cache/kiln``).
    build_cache : bool
        Whether ``relay.build`` keeps whole builds and reuses them for an unchanged model and
        options (``KILN_BUILD_CACHE=0`` turns it off; :mod:`kiln.build_cache`).
    num_threads : int
        Kernel threads (``KILN_NUM_THREADS``, default :func:`usable_cpus`); at least 1.
    verify_passes : bool
        Verify the IR after every pass (``KILN_VERIFY_PASSES=1``).
    cuda_home : Path or None
        The CUDA toolkit where the cuda target looks first for NVRTC and nvcc (``CUDA_HOME``,
        else ``CUDA_PATH``).
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.cc: str = env.get("CC", "cc")
        self.cache_dir: Path = Path(env.get("KILN_CACHE_DIR") or Path.home() / ".cache" / "kiln")
        self.verify_passes: bool = env.get("KILN_VERIFY_PASSES") == "1"
        self.build_cache: bool = env.get("KILN_BUILD_CACHE") != "0"
        cuda_home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
        self.cuda_home: Path | None = Path(cuda_home) if cuda_home else None
        self._num_threads_env = env.get("KILN_NUM_THREADS")
        self._num_threads: int | None = None

    @property
    def num_threads(self) -> int:
        """Kernel threads: set from Python, else ``KILN_NUM_THREADS``, else the usable CPUs."""
        if self._num_threads is None:
            self._num_threads = (_parse_int("KILN_NUM_THREADS", self._num_threads_env, 1)
                                 or usable_cpus())
        return self._num_threads

    @num_threads.setter
    def num_threads(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"settings.num_threads must be a positive integer, got {value!r}")
        self._num_threads = value

    def __repr__(self) -> str:
        return (f"Settings(cc={self.cc!r}, cache_dir={str(self.cache_dir)!r}, "
                f"num_threads={self._num_threads if self._num_threads is not None else '<lazy>'}, "
                f"verify_passes={self.verify_passes}, build_cache={self.build_cache})")


settings = Settings()
