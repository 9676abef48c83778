"""``relay.const`` with a dtype given as a type (TVM's tests pass ``relay.scalar_type(...)``)."""

from __future__ import annotations

import numpy as np

from kiln import relay


def test_const_takes_a_tensor_type_as_its_dtype() -> None:
    c = relay.const(0, relay.TensorType((), "int64"))
    assert c.value.dtype == np.int64 and c.value == 0
    assert relay.const(1.5, relay.TensorType((), "float16")).value.dtype == np.float16
