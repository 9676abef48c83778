"""The text printer against TVM's own output (fixtures) and TVM's printing rules."""

from __future__ import annotations

import json

import numpy as np

import kiln as tvm
from kiln import relay
from kiln.ir.printer import VERSION_HEADER, format_attr_value


def build_seed003_module() -> tuple[tvm.IRModule, relay.GlobalVar, relay.GlobalVar]:
    """The module-construction block of seed 003, verbatim but for ``import kiln as tvm``."""
    mod = tvm.IRModule()

    x0 = relay.var("x0", shape=(8, 8))
    y0 = relay.var("y0", shape=(8, 8))
    z0 = x0 + y0
    z1 = x0 - y0
    z2 = relay.Tuple((z0, z1))
    f0 = relay.Function([x0, y0], z2)
    f0 = f0.with_attr("Compiler", "test_graph")
    g0 = relay.GlobalVar("g0")
    mod[g0] = f0
    mod = relay.transform.InferType()(mod)

    x1 = relay.var("x1", shape=(8, 8))
    y1 = relay.var("y1", shape=(8, 8))
    z1 = x1 - y1
    f1 = relay.Function([x1, y1], z1)
    f1 = f1.with_attr("Compiler", "test_graph")
    g1 = relay.GlobalVar("g1")
    mod[g1] = f1
    mod = relay.transform.InferType()(mod)

    x = relay.var("x", shape=(8, 8))
    y = relay.var("y", shape=(8, 8))
    z = relay.var("z", shape=(8, 8))
    c0 = relay.Call(g0, [x, y])
    c1 = relay.Call(g1, [relay.TupleGetItem(c0, 0), z])
    fm = relay.Function([x, y, z], c1)
    mod["main"] = fm
    mod = relay.transform.InferType()(mod)
    return mod, g0, g1


def test_seed003_module_prints_as_tvm(fixtures_dir, capsys):
    mod, _, _ = build_seed003_module()
    mod.show()
    printed = capsys.readouterr().out
    expected = (fixtures_dir / "calibration_mod_show.txt").read_text()
    lines = printed.splitlines()
    assert lines[0] == VERSION_HEADER
    assert lines[1:] == expected.splitlines() + [""] * (len(lines) - 1 - len(expected.splitlines()))
    # astext() equals TVM's astext() exactly, header included
    assert mod.astext() == json.loads((fixtures_dir / "calibration.json").read_text())["mod_show"]
    assert str(mod) == mod.astext()


def test_untyped_nodes_have_no_type_comment_and_bindings_follow_tvm_order(fixtures_dir):
    # TVM's calibrate module: new untyped projections of a typed call, printed without types;
    # the shared typed projection keeps number %3 because its first user is printed first.
    mod, g0, g1 = build_seed003_module()
    main = mod["main"]
    call_g1 = main.body
    proj = call_g1.args[0]
    call_g0 = proj.tuple_value
    x, y, z = main.params
    fields = [x, y, relay.TupleGetItem(call_g0, 0), relay.TupleGetItem(call_g0, 1), proj, z, call_g1]
    out = tvm.IRModule()
    for gv in (g0, g1):
        out[gv] = mod[gv].with_attr("Inline", 1).with_attr("Compiler", None)
    out["main"] = relay.Function(main.params, relay.Tuple(fields))
    expected = json.loads((fixtures_dir / "calibration.json").read_text())["calibrate_module"]
    assert out.astext() == expected


def test_scalar_constants_and_attrs_print_like_tvm():
    x = relay.var("x", shape=(2, 3))
    body = relay.clip(relay.multiply(x, relay.const(2.0)), 0.0, 6.0)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(body))
    text = mod.astext()
    assert "multiply(%x, 2f /* ty=float32 */)" in text
    assert "clip(%0, a_min=0f, a_max=6f)" in text or "clip(%0, a_max=6f)" in text


def test_nonscalar_constant_prints_as_meta():
    x = relay.var("x", shape=(3,))
    body = x + relay.const(np.arange(3, dtype="float32"))
    mod = tvm.IRModule.from_expr(body)
    text = str(mod)  # TVM: str() omits the metadata section, astext() appends it
    assert "add(%x, meta[relay.Constant][0])" in text
    assert "metadata section has been omitted" in text
    full = mod.astext()
    assert "add(%x, meta[relay.Constant][0])" in full
    assert "#[metadata]" in full and '"type_key": "relay.Constant"' in full
    assert "omitted" not in full


def test_duplicate_parameter_names_are_made_unique_across_the_module():
    a = relay.var("p0", shape=(2,))
    b = relay.var("p0", shape=(2,))
    mod = tvm.IRModule()
    mod["f"] = relay.Function([a], relay.negative(a))
    mod["main"] = relay.Function([b], relay.Call(relay.GlobalVar("f"), [b]))
    text = mod.astext()
    assert "def @f(%p0: Tensor[(2), float32])" in text
    assert "def @main(%p01: Tensor[(2), float32])" in text


def test_nested_function_literal_is_bound_before_its_call():
    p = relay.var("p0", shape=(4,))
    fused = relay.Function([p], relay.exp(relay.negative(p))).with_attr("Primitive", 1)
    x = relay.var("x", shape=(4,))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Call(fused, [x])))
    lines = mod.astext().splitlines()
    assert lines[1].startswith("def @main(%x: Tensor[(4), float32]")
    assert lines[2].startswith("  %1 = fn (%p0: Tensor[(4), float32]")
    assert "Primitive=1) -> Tensor[(4), float32] {" in lines[2]
    assert lines[3] == "    %0 = negative(%p0) /* ty=Tensor[(4), float32] */;"
    assert lines[4] == "    exp(%0) /* ty=Tensor[(4), float32] */"
    assert lines[5].startswith("  } /* ty=fn (Tensor[(4), float32]) -> Tensor[(4), float32] */;")
    assert lines[6] == "  %1(%x) /* ty=Tensor[(4), float32] */"


def test_format_attr_value():
    assert format_attr_value((1, 1, 1, 1)) == "[1, 1, 1, 1]"
    assert format_attr_value("NCHW") == '"NCHW"'
    assert format_attr_value(1e-5) == "1e-05f"
    assert format_attr_value(None) == "None"
    assert format_attr_value(True) == "True"


def test_scalar_types_print_bare_dtype():
    x = relay.var("x", shape=(), dtype="int64")
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(x + relay.const(1, "int64")))
    assert "%x: int64" in mod.astext()
    assert "1i64" in mod.astext()


def test_spans_and_annotations_print_as_tvm() -> None:
    x = relay.var("x", shape=(2,))
    call = relay.Call(relay.op.get("exp"), [x], span=relay.Span(relay.SourceName("Exp0"), 4, 4, 2, 9))
    assert str(call).endswith("exp(%x) /* span=Exp0:4:2 */")
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(call))
    assert "exp(%x) /* ty=Tensor[(2), float32] span=Exp0:4:2 */" in str(mod)
    text = mod.astext(annotate=lambda e: "@" if isinstance(e, relay.Call) else "")
    assert "exp(%x)@" in text and "ty=" not in text


def test_shared_scope_roots_and_let_values_are_bound_not_inlined() -> None:
    x = relay.var("x", shape=(2,))
    y = relay.exp(x)
    fn = relay.Function([x], relay.Let(relay.var("v"), y, relay.Tuple([y, y])))
    # exp is used by the let and the tuple: bound once, before the let (TVM's IsUnique)
    assert str(fn).endswith("{\n  %0 = exp(%x);\n  let %v = %0;\n  (%0, %0)\n}")
    assert "let %v = exp(%x);" in str(relay.Function([x], relay.Let(relay.var("v"), y, x)))
