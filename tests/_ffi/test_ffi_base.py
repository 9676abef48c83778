"""kiln._ffi.base.TVMError is Kiln's error base, so TVM's ``except TVMError`` catches Kiln's errors."""

from __future__ import annotations

import pytest

import kiln
from kiln import relay
from kiln.relay.testing import run_infer_type


def test_tvm_error_catches_a_type_error() -> None:
    x = relay.var("p1", shape=(2, 5))
    y = relay.var("p2", shape=(2, 3))
    with pytest.raises(kiln._ffi.base.TVMError):
        run_infer_type(relay.Function([x, y], relay.concatenate([x, y], axis=0)))
    assert kiln._ffi.TVMError is kiln.KilnError
