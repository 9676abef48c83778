"""kiln.register_func / get_global_func: TVM's global-function registry."""

from __future__ import annotations

import pytest

import kiln
from kiln.errors import KilnError
from kiln.runtime.func_registry import get_registered_func, list_registered_funcs, remove_func


def test_register_lookup_override_and_remove():
    name = "kiln.test.func_registry.double"
    try:
        kiln.register_func(name, lambda x: 2 * x)
        assert kiln.get_global_func(name)(4) == 8
        assert name in list_registered_funcs()
        with pytest.raises(KilnError, match="already registered"):
            kiln.register_func(name, lambda x: x)

        @kiln.register_func(name, override=True)
        def triple(x):
            return 3 * x

        assert get_registered_func(name) is triple and kiln.get_global_func(name)(2) == 6
    finally:
        remove_func(name)
    assert kiln.get_global_func(name, allow_missing=True) is None
    with pytest.raises(ValueError, match="no global function"):
        kiln.get_global_func(name)
