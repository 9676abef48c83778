"""IRModule.import_from_std: core.rly imports (nothing to add); ADT libraries are refused."""

from __future__ import annotations

import pytest

import kiln


def test_core_rly_imports_and_adt_prelude_is_refused() -> None:
    mod = kiln.IRModule()
    mod.import_from_std("core.rly")
    assert len(mod) == 0
    with pytest.raises(NotImplementedError, match="ADT"):
        mod.import_from_std("prelude.rly")
