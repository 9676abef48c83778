"""relay.prelude: the ADT standard library is a clear error in Kiln."""

from __future__ import annotations

import pytest

from kiln.ir import IRModule
from kiln.relay.prelude import Prelude, StaticTensorArrayOps


def test_prelude_is_a_clear_error():
    with pytest.raises(NotImplementedError, match="algebraic data types"):
        Prelude(IRModule())
    with pytest.raises(NotImplementedError, match="algebraic data types"):
        StaticTensorArrayOps(None, "float32", [2, 3])
