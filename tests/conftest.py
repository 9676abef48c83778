"""Shared test configuration: markers, the --runslow option, fixture paths, pass verification.

The suite runs in parallel (``pytest -n auto``, pytest-xdist): tests write only under their own
``tmp_path``, and the shared compile cache (``KILN_CACHE_DIR``) is safe for concurrent builds.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings as hypothesis_settings

from kiln.config import settings
from tests import _toolchain

FIXTURES = Path(__file__).parent / "fixtures" / "tvm"

# Every pass run by a test is followed by the IR verifier (types, well-formedness).
settings.verify_passes = True

# CI draws the same Hypothesis examples every run (a red CI is then a real regression, never a
# lucky draw); a developer's run keeps exploring new ones.
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="run slow tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``slow`` tests unless ``--runslow``; skip ``requires_cc`` tests without a C compiler,
    ``requires_cuda_compiler`` ones without NVRTC or nvcc and ``cuda`` ones without a GPU."""
    from kiln.codegen.cuda_compiler import find_nvcc, find_nvrtc
    from kiln.runtime.cuda_driver import driver_available

    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    skip_cc = pytest.mark.skip(reason=f"no C compiler ({settings.cc!r} not found; set CC)")
    skip_nvrtc = pytest.mark.skip(reason="no CUDA compiler (NVRTC or nvcc): pip install "
                                  "'.[cuda]' or install the CUDA toolkit")
    skip_gpu = pytest.mark.skip(reason="no CUDA GPU: these run where the NVIDIA driver sees one")
    runslow = config.getoption("--runslow")
    have_cc = _toolchain.have_cc()
    wants_nvrtc = [item.get_closest_marker("requires_cuda_compiler") is not None for item in items]
    wants_gpu = [item.get_closest_marker("cuda") is not None for item in items]
    have_nvrtc = not any(wants_nvrtc) or find_nvrtc() is not None or find_nvcc() is not None
    have_gpu = not any(wants_gpu) or driver_available()
    for item, nvrtc, gpu in zip(items, wants_nvrtc, wants_gpu):
        if "slow" in item.keywords and not runslow:
            item.add_marker(skip_slow)
        if "requires_cc" in item.keywords and not have_cc:
            item.add_marker(skip_cc)
        if nvrtc and not have_nvrtc:
            item.add_marker(skip_nvrtc)
        if gpu and not have_gpu:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _no_inherited_terminal_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without ``COLUMNS``/``LINES``, serial or parallel alike.

    pytest-xdist's workers have them set (80x24) while a serial run has not, and the width of
    Kiln's tables follows them; a test that wants a width sets it itself.
    """
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture
def fixtures_dir() -> Path:
    """Directory of the files written by real TVM (oracles)."""
    return FIXTURES


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded random generator."""
    return np.random.default_rng(0)
