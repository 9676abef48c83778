"""IR JSON: save then load gives a structurally equal graph with annotations, attrs, provenance."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kiln import relay
from kiln.errors import RuntimeFormatError
from kiln.interpreter import evaluate
from kiln.ir import (
    Call,
    Constant,
    Function,
    GlobalVar,
    IRModule,
    Let,
    TensorType,
    TupleType,
    Var,
    assert_structural_equal,
    post_order,
)
from kiln.ir.serialize import load_json, save_json


def _fused() -> Function:
    x = relay.var("x", shape=(2, 3))
    y = relay.var("y", shape=(2, 3), dtype="float32")
    s = relay.add(x, y)
    c = Call(relay.Op.get("clip"), [s], relay.clip(s, -1.0, 2.5).attrs, source_names=("Clip_7",))
    body = relay.Tuple([relay.cast(c, "int32"), relay.greater(s, relay.const(0.5)), c])
    return Function([x, y], body).with_attr({"Primitive": 1, "Compiler": "test", "ratio": 0.5,
                                             "shape": (1, 2)})


def test_function_roundtrip_keeps_everything() -> None:
    fn = _fused()
    back = load_json(save_json(fn))
    assert isinstance(back, Function)
    assert_structural_equal(back, fn, map_free_vars=True)
    assert dict(back.attrs) == {"Primitive": 1, "Compiler": "test", "ratio": 0.5, "shape": (1, 2)}
    assert isinstance(back.attrs["Primitive"], int) and isinstance(back.attrs["ratio"], float)
    assert [p.name_hint for p in back.params] == ["x", "y"]
    assert back.params[0].type_annotation == TensorType((2, 3), "float32")
    clips = [n for n in post_order(back) if isinstance(n, Call) and n.op.name == "clip"]
    assert len(clips) == 1 and clips[0].source_names == ("Clip_7",)
    assert clips[0].attrs.a_min == -1.0 and clips[0].attrs.a_max == 2.5


def test_shared_nodes_stay_shared() -> None:
    fn = _fused()
    back = load_json(save_json(fn))
    calls = [n for n in post_order(back) if isinstance(n, Call) and n.op.name == "add"]
    assert len(calls) == 1  # %s is used three times but stored once
    x = back.params[0]
    assert calls[0].args[0] is x


def test_loaded_function_computes_the_same() -> None:
    fn = _fused()
    back = load_json(save_json(fn))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3)).astype("float32")
    y = rng.standard_normal((2, 3)).astype("float32")
    got = evaluate(IRModule.from_expr(back), {"x": x, "y": y})
    s = x + y
    np.testing.assert_array_equal(got[0], np.clip(s, -1.0, 2.5).astype(np.int32))
    np.testing.assert_array_equal(got[1], s > 0.5)
    np.testing.assert_array_equal(got[2], np.clip(s, -1.0, 2.5))


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int8", "int32", "int64",
                                   "uint8", "uint16", "bool"])
@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (3, 4)])
def test_constants_roundtrip_bitwise(dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    value = np.asarray((rng.standard_normal(shape) * 50).astype(dtype))
    back = load_json(save_json(Constant(value)))
    assert isinstance(back, Constant)
    assert back.value.dtype == value.dtype and back.value.shape == value.shape
    assert back.value.tobytes() == value.tobytes()


def test_module_with_global_calls_let_and_if() -> None:
    a = relay.var("a", shape=(4,))
    helper = Function([a], relay.negative(a), ret_type=TensorType((4,), "float32"))
    x = relay.var("x", shape=(4,))
    t = Var("t", TensorType((4,), "float32"))
    cond = relay.var("c", shape=(), dtype="bool")
    body = Let(t, Call(GlobalVar("helper"), [x]), relay.If(cond, t, relay.add(t, x)))
    mod = IRModule({"helper": helper, "main": Function([x, cond], body)}, attrs={"note": "kept"})
    back = load_json(save_json(mod))
    assert isinstance(back, IRModule)
    assert [g.name_hint for g in back.get_global_vars()] == ["helper", "main"]
    assert back.attrs == {"note": "kept"}
    assert back["helper"].ret_type == TensorType((4,), "float32")
    assert_structural_equal(back, mod, map_free_vars=True)
    xs = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(evaluate(back, {"x": xs, "c": np.array(False)}), -xs + xs)


def test_tuple_types_and_tuple_get_item() -> None:
    pair = relay.var("p", TupleType([TensorType((2,), "int32"), TensorType((), "float32")]))
    fn = Function([pair], relay.TupleGetItem(pair, 1))
    back = load_json(save_json(fn))
    assert back.params[0].type_annotation == pair.type_annotation
    assert_structural_equal(back, fn, map_free_vars=True)


def test_deep_chain_needs_no_recursion() -> None:
    x = relay.var("x", shape=(1,))
    y = x
    for _ in range(5000):
        y = relay.negative(y)
    back = load_json(save_json(Function([x], y)))
    assert sum(1 for n in post_order(back) if isinstance(n, Call)) == 5000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not valid JSON"),
        ("{}", "not a Kiln IR document"),
        ('{"kiln_ir": 99, "nodes": []}', "format version 99"),
        ('{"kiln_ir": 1, "kind": "Expr", "root": 0, "nodes": [{"t": "Bogus"}]}', "unknown kind"),
        ('{"kiln_ir": 1, "kind": "Expr", "root": 3, "nodes": []}', "not an earlier node"),
        ('{"kiln_ir": 1, "kind": "Expr", "root": 0, "nodes": [{"t": "Call", "op": {"Op": "nope"}, '
         '"args": [], "attrs": null, "source_names": []}]}', "malformed"),
    ],
)
def test_bad_documents(text: str, message: str) -> None:
    with pytest.raises(RuntimeFormatError, match=message):
        load_json(text)


def test_document_is_plain_json() -> None:
    doc = json.loads(save_json(_fused()))
    assert doc["kiln_ir"] == 1 and doc["kind"] == "Expr"
    kinds = {n["t"] for n in doc["nodes"]}
    assert {"Var", "Call", "Constant", "Tuple", "Function"} <= kinds
