"""kiln.config: settings from the environment; an invalid value is a clear error where it is used."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kiln.config import Settings, usable_cpus
from kiln.errors import ConfigError


def test_defaults_without_environment():
    s = Settings(environ={})
    assert s.cc == "cc"
    assert s.num_threads == usable_cpus() >= 1
    assert s.verify_passes is False


def test_values_from_environment():
    s = Settings(environ={"CC": "clang", "KILN_NUM_THREADS": " 3 ",
                          "KILN_VERIFY_PASSES": "1", "KILN_CACHE_DIR": "/tmp/kiln-cache"})
    assert (s.cc, s.num_threads, s.verify_passes) == ("clang", 3, True)
    assert str(s.cache_dir) == "/tmp/kiln-cache"


@pytest.mark.parametrize("value", ["abc", "0", "-2", "1.5"])
def test_invalid_thread_count_is_an_error_naming_the_variable(value):
    s = Settings(environ={"KILN_NUM_THREADS": value})  # constructing does not raise
    with pytest.raises(ConfigError) as info:
        _ = s.num_threads
    message = str(info.value)
    assert "KILN_NUM_THREADS" in message and repr(value) in message
    assert "\n" not in message


def test_python_assignment_overrides_and_is_checked():
    s = Settings(environ={"KILN_NUM_THREADS": "abc"})
    s.num_threads = 2  # an explicit value wins over the invalid environment
    assert s.num_threads == 2
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="num_threads"):
            s.num_threads = bad  # type: ignore[assignment]


def test_import_survives_an_invalid_environment():
    env = {**os.environ, "KILN_NUM_THREADS": "abc"}
    proc = subprocess.run([sys.executable, "-c", "import kiln; print('imported')"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "imported" and "Traceback" not in proc.stderr
