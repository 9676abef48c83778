"""kiln.runtime.convert: containers as Kiln's IR takes them (TVM's Array -> list)."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import relay


def test_convert_containers_and_numpy_scalars() -> None:
    out = kiln.runtime.convert((1, np.int64(2), {"a": (np.float32(0.5),)}))
    assert out == [1, 2, {"a": [0.5]}] and type(out[1]) is int


def test_convert_builds_a_tuple_type_as_tvm_tests_do() -> None:
    fields = [relay.TensorType((3, 2, 1), "float32"), relay.TensorType((2,), "float32")]
    assert relay.TupleType(kiln.runtime.convert(fields)) == relay.TupleType(fields)
