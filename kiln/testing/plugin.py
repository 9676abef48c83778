"""pytest plugin for TVM-style tests: ``target``/``dev`` fixtures over Kiln's enabled targets.

Load it with ``pytest -p kiln.testing.plugin`` (the TVM conformance runner does). A test that takes
``target`` and is not already parametrized over it runs once per enabled target (``llvm``, ``c``),
as TVM's own plugin does; ``dev`` is the target's Device.
"""

from __future__ import annotations

from typing import Any

import pytest

from kiln import testing


def pytest_configure(config: Any) -> None:
    """Register the ``gpu`` marker that :func:`kiln.testing.uses_gpu` sets."""
    config.addinivalue_line("markers", "gpu: the test also runs on GPU targets (TVM's uses_gpu)")


def pytest_generate_tests(metafunc: Any) -> None:
    """Parametrize ``target`` (and ``dev``) over the enabled targets unless already parametrized."""
    if "target" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        if "target" in names:
            return
    argnames, params = testing._target_params(metafunc.function, None)
    metafunc.parametrize(",".join(argnames), params)


@pytest.fixture
def dev(target: str) -> Any:
    """The Device of ``target``."""
    return testing._device(target)
