"""Mutable references (RefCreate / RefRead / RefWrite): typing, printing, comparing, walking and
evaluating them."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import relay
from kiln.errors import KilnTypeError
from kiln.interpreter import evaluate
from kiln.ir import IRModule, structural_equal, structural_hash
from kiln.ir.ref import RefCreate, RefRead, RefType, RefWrite
from kiln.ir.types import TensorType, TupleType
from kiln.ir.visitor import children, post_order, rewrite
from kiln.transform import InferType


def _typed(expr):
    return InferType()(IRModule.from_expr(expr))["main"].body


def test_types_of_ref_nodes():
    r = RefCreate(relay.const(np.ones(3, "float32")))
    read = RefRead(r)
    write = RefWrite(r, relay.nn.relu(read))
    body = _typed(relay.Tuple([read, write]))
    t = body.checked_type
    assert t == TupleType((TensorType((3,), "float32"), TupleType(())))
    assert _typed(r).checked_type == RefType(TensorType((3,), "float32"))


def test_reading_a_non_reference_is_a_type_error():
    with pytest.raises(KilnTypeError, match="RefRead of a non-reference"):
        _typed(RefRead(relay.const(1.0)))
    with pytest.raises(KilnTypeError, match="writing"):
        _typed(RefWrite(RefCreate(relay.const(1.0)), relay.const(np.ones(2, "float32"))))


def test_printing_follows_relay_text():
    r = RefCreate(relay.const(1.0))
    text = RefWrite(r, RefRead(r)).astext()
    assert "ref(1f)" in text and "ref_read(%0)" in text and "ref_write(%0, %1)" in text


def test_structural_equality_and_hash():
    def build():
        r = RefCreate(relay.const(1.0))
        return RefWrite(r, relay.nn.relu(RefRead(r)))

    a, b = build(), build()
    assert structural_equal(a, b) and structural_hash(a) == structural_hash(b)
    r = RefCreate(relay.const(1.0))
    assert not structural_equal(a, RefWrite(r, relay.nn.relu(relay.const(1.0))))


def test_walkers_see_and_rebuild_children():
    x = relay.var("x", shape=(2,))
    r = RefCreate(x)
    w = RefWrite(r, RefRead(r))
    assert children(w) == (r, w.value) and children(r) == (x,)
    assert x in post_order(w)
    y = relay.var("y", shape=(2,))
    out = rewrite(w, lambda new, old: y if old is x else None)
    assert isinstance(out, RefWrite) and out.ref.value is y and out.value.ref is out.ref


def test_interpreter_evaluates_reads_after_writes():
    x = relay.var("x", shape=(3,))
    r, u = relay.var("r"), relay.var("u")
    body = relay.Let(r, RefCreate(x),
                     relay.Let(u, RefWrite(r, relay.exp(RefRead(r))), RefRead(r)))
    data = np.linspace(-1, 1, 3).astype("float32")
    out = evaluate(IRModule.from_expr(relay.Function([x], body)), [data])
    np.testing.assert_allclose(out, np.exp(data), rtol=1e-6)
