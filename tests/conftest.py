"""Shared test configuration: markers, the --runslow option, fixture paths, pass verification."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kiln.config import settings

FIXTURES = Path(__file__).parent / "fixtures" / "tvm"

# Every pass run by a test is followed by the IR verifier (types, well-formedness).
settings.verify_passes = True


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="run slow tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fixtures_dir() -> Path:
    """Directory of the files written by real TVM (oracles)."""
    return FIXTURES


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded random generator."""
    return np.random.default_rng(0)
