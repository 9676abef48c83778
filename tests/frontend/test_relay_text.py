"""The relay text parser: TVM-format text written by hand, print/parse roundtrips, errors."""

from __future__ import annotations

import base64
import json
import struct

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.frontend.relay_text import RelayTextError, parse, parse_expr
from kiln.ir.structural import assert_structural_equal, structural_equal
from kiln.relay.testing import dcgan, densenet, dqn, lstm, mlp, mobilenet, resnet, squeezenet

SEMVER = '#[version = "0.0.5"]\n'


def run(mod: tvm.IRModule, *args: np.ndarray) -> np.ndarray:
    out = relay.create_executor("debug", mod=mod).evaluate()(*args)
    return out.numpy() if hasattr(out, "numpy") else out


def roundtrip(obj: object) -> str:
    """Print with the metadata section, parse back, compare structurally."""
    text = obj.astext()  # type: ignore[attr-defined]
    back = parse_expr(text) if isinstance(obj, relay.Expr) else parse(text)
    assert_structural_equal(back, obj, map_free_vars=True)
    return text


# --- text as TVM prints it, written by hand ----------------------------------------------------

TVM_CONV_BLOCK = SEMVER + """
def @main(%data: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32],
          %b: Tensor[(4), float32]) -> Tensor[(1, 4, 4, 4), float32] {
  %0 = nn.conv2d(%data, %w, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3])
    /* ty=Tensor[(1, 4, 8, 8), float32] */;
  %1 = nn.bias_add(%0, %b) /* ty=Tensor[(1, 4, 8, 8), float32] */;
  %2 = nn.relu(%1);  // a line comment
  /* a block /* nested */ comment */
  nn.max_pool2d(%2, pool_size=[2, 2], strides=[2, 2], padding=[0, 0, 0, 0])
}
"""


def test_parses_tvm_printed_conv_block_and_runs_like_numpy() -> None:
    mod = relay.fromtext(TVM_CONV_BLOCK)
    body = mod["main"].body
    assert body.op.name == "nn.max_pool2d" and body.attrs.pool_size == (2, 2)
    conv = body.args[0].args[0].args[0]
    assert conv.op.name == "nn.conv2d"
    assert conv.attrs.channels == 4 and conv.attrs.kernel_size == (3, 3)
    assert conv.attrs.padding == (1, 1, 1, 1)
    assert mod["main"].checked_type.ret_type == relay.TensorType((1, 4, 4, 4), "float32")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 8, 8)).astype("float32")
    w = rng.standard_normal((4, 3, 3, 3)).astype("float32")
    b = rng.standard_normal(4).astype("float32")
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv_ref = np.zeros((1, 4, 8, 8), "float32")
    for i in range(8):
        for j in range(8):
            conv_ref[0, :, i, j] = np.tensordot(w, xp[0, :, i:i + 3, j:j + 3], axes=3)
    act = np.maximum(conv_ref + b[None, :, None, None], 0)
    ref = act.reshape(1, 4, 4, 2, 4, 2).max(axis=(3, 5))
    np.testing.assert_allclose(run(mod, x, w, b), ref, rtol=1e-5, atol=1e-5)


def test_let_if_tuples_projections_functions_and_infix_operators() -> None:
    text = SEMVER + """
def @f(%n: int32, %d: float32) -> float32 {
  if (%n == 0) {
    %d
  } else {
    cast(%n - 1, dtype="float32") * %d * 2f
  }
}
def @main(%x: Tensor[(2), float32], %c: bool) {
  let %t: (Tensor[(2), float32], Tensor[(2), float32]) = (%x, negative(%x));
  %0 = fn (%a: Tensor[(2), float32], Compiler="none") {
    %a + %a * 3f
  };
  %1 = if (%c) { %t.0 } else { %t.1 };
  (%0(%1), @f(3, 1.5f))
}
"""
    mod = parse(text)
    let = mod["main"].body
    assert isinstance(let, relay.Let) and let.var.name_hint == "t"
    tup = let.body
    fn = tup.fields[0].op
    assert isinstance(fn, relay.Function) and dict(fn.attrs) == {"Compiler": "none"}
    # precedence: a + (a * 3)
    assert fn.body.op.name == "add" and fn.body.args[1].op.name == "multiply"
    x = np.array([1.0, -2.0], "float32")
    out = run(mod, x, np.array(False))
    np.testing.assert_allclose(out[0].numpy(), 4 * -x)
    np.testing.assert_allclose(out[1].numpy(), (3 - 1) * 1.5 * 2)


def test_scalar_literals_keep_their_dtypes() -> None:
    for text, dtype, value in [("42i16", "int16", 42), ("42", "int32", 42), ("-7i64", "int64", -7),
                               ("3f16", "float16", 3.0), ("1e+11f", "float32", 1e11),
                               ("3f64", "float64", 3.0), ("True", "bool", True),
                               ("4294967296", "int64", 2**32), ("-inff", "float32", -np.inf)]:
        c = parse_expr(text)
        assert isinstance(c, relay.Constant), text
        assert c.value.dtype == np.dtype(dtype) and c.value == np.asarray(value, dtype), text


def test_free_vars_sequences_and_graph_bindings() -> None:
    e = parse_expr("free_var %x: Tensor[(3), float32];\n%0 = add(%x, 1f);\n%0; multiply(%0, %0)")
    # `a; b` binds `a` to an unnamed let, as TVM's parser does
    assert isinstance(e, relay.Let) and e.var.name_hint == ""
    assert e.body.op.name == "multiply" and e.body.args[0] is e.body.args[1] is e.value


def test_names_tvm_allows_and_names_imported_models_use() -> None:
    e = parse_expr("free_var %base/x; free_var %conv1.weight; free_var %input:0;"
                   "(%base/x, %conv1.weight, %input:0)")
    assert [f.name_hint for f in e.fields] == ["base/x", "conv1.weight", "input:0"]


# --- metadata -----------------------------------------------------------------------------------

def _tvm_ndarray_b64(arr: np.ndarray) -> str:
    code, bits = {"float32": (2, 32), "int32": (0, 32)}[arr.dtype.name]
    raw = struct.pack("<QQiiiBBH", 0xDD5E40F096B4A13F, 0, 1, 0, arr.ndim, code, bits, 1)
    raw += struct.pack(f"<{arr.ndim}qq", *arr.shape, arr.nbytes) + arr.tobytes()
    return base64.b64encode(raw).decode()


def test_reads_a_metadata_section_as_tvm_writes_it() -> None:
    weights = np.arange(6, dtype="float32").reshape(2, 3)
    meta = {  # TVM 0.14's save_json layout: VirtualDevice and runtime.String nodes included
        "root": 1,
        "nodes": [
            {"type_key": ""},
            {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
            {"type_key": "Array", "data": [3]},
            {"type_key": "relay.Constant",
             "attrs": {"_checked_type_": "0", "data": "0", "span": "0", "virtual_device_": "4"}},
            {"type_key": "VirtualDevice",
             "attrs": {"device_type_int": "-1", "memory_scope": "5", "target": "0",
                       "virtual_device_id": "-1"}},
            {"type_key": "runtime.String", "repr_str": ""},
        ],
        "b64ndarrays": [_tvm_ndarray_b64(weights)],
        "attrs": {"tvm_version": "0.14.0"},
    }
    text = (SEMVER + "def @main(%x: Tensor[(2, 3), float32]) {\n"
            "  add(%x, meta[relay.Constant][0] /* ty=Tensor[(2, 3), float32] */)\n}\n\n"
            "#[metadata]\n" + json.dumps(meta, indent=2))
    mod = parse(text)
    const = mod["main"].body.args[1]
    np.testing.assert_array_equal(const.value, weights)
    np.testing.assert_array_equal(run(mod, np.ones((2, 3), "float32")), weights + 1)


def test_old_map_layout_and_init_meta_table() -> None:
    # TVM before 0.9 saved a string-keyed map as [key node, value node, ...] pairs
    meta = {"root": 1, "nodes": [
        {"type_key": ""}, {"type_key": "Map", "data": [2, 3]},
        {"type_key": "runtime.String", "repr_str": "relay.Constant"},
        {"type_key": "Array", "data": [4]},
        {"type_key": "relay.Constant", "attrs": {"data": "0", "span": "0"}}],
        "b64ndarrays": [_tvm_ndarray_b64(np.array([7, 8], "int32"))], "attrs": {}}
    extra = relay.const(np.array([1, 1], "int32"))
    e = parse_expr("add(meta[relay.Constant][0], meta[relay.Constant][0])\n#[metadata]\n"
                   + json.dumps(meta))
    assert e.args[0].value.tolist() == [7, 8] and e.args[1] is e.args[0]
    with pytest.raises(RelayTextError, match="out of bounds"):
        parse_expr(f"meta[relay.Constant][1]\n#[metadata]\n{json.dumps(meta)}")
    mod = parse(SEMVER + "def @main() { add(meta[relay.Constant][0], meta[relay.Constant][1]) }"
                "\n#[metadata]\n" + json.dumps(meta), init_meta_table={"relay.Constant": [extra]})
    assert mod["main"].body.args[1] is extra


def test_constants_and_dtypes_roundtrip_through_the_metadata_section() -> None:
    x = relay.var("x", shape=(3,), dtype="int8")
    consts = [relay.const(np.array([1, -2, 3], "int8")), relay.const(np.int8(5)),
              relay.const(np.float32(0.1)), relay.const(np.float32(np.nan)),
              relay.const(np.array(3.4028235e38, "float32")), relay.const(np.uint8(7))]
    e = relay.Tuple([x + consts[0], x * consts[1], *consts[2:]])
    text = roundtrip(e)
    # TVM's simple scalars print inline; int8/uint8 scalars and NaN go to the metadata section
    assert "0.1f" in text and "3.40282e+38f" not in text and "3.4028235e+38f" in text
    assert "meta[relay.Constant][1]" in text and "meta[relay.Constant][3]" in text


# --- roundtrips of Kiln's programs --------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: mlp.get_workload(1),
    lambda: dqn.get_workload(1),
    lambda: dcgan.get_workload(1, ngf=8),
    lambda: squeezenet.get_workload(1, version="1.1", image_shape=(3, 64, 64)),
    lambda: densenet.get_workload(121, classes=10, batch_size=1, image_shape=(3, 224, 224)),
    lambda: lstm.get_workload(3, 4),
    lambda: resnet.get_workload(1, num_classes=10, num_layers=18, image_shape=(3, 32, 32)),
    lambda: mobilenet.get_workload(1, num_classes=10, image_shape=(3, 32, 32)),
], ids=["mlp", "dqn", "dcgan", "squeezenet", "densenet", "lstm", "resnet", "mobilenet"])
def test_every_workload_roundtrips(make: object) -> None:
    mod, _ = make()  # type: ignore[operator]
    roundtrip(mod)


def test_onnx_imported_resnet_block_roundtrips() -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)

    def init(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype("float32"), name)

    nodes = [
        helper.make_node("Conv", ["x", "conv1.weight"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn1.scale", "bn1.bias", "bn1.mean",
                                                "bn1.var"], ["b1"], epsilon=1e-5),
        helper.make_node("Relu", ["b1"], ["r1"]),
        helper.make_node("Conv", ["r1", "conv2.weight"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    inits = [init("conv1.weight", (4, 4, 3, 3)), init("conv2.weight", (4, 4, 3, 3)),
             init("bn1.scale", (4,)), init("bn1.bias", (4,)), init("bn1.mean", (4,)),
             numpy_helper.from_array(np.abs(rng.standard_normal(4)).astype("float32"), "bn1.var")]
    graph = helper.make_graph(nodes, "block",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    mod, _ = relay.frontend.from_onnx(model, {"x": (1, 4, 6, 6)})
    # parse() type-checks, which declares return types: compare with the type-checked module
    text = roundtrip(relay.transform.InferType()(mod))
    assert "meta[relay.Constant][5]" in text  # the weights, in the metadata section
    mod, _ = relay.frontend.from_onnx(model, {"x": (1, 4, 6, 6)}, freeze_params=False)
    assert "%conv1.weight" in roundtrip(relay.transform.InferType()(mod))


def test_deep_chain_roundtrips() -> None:
    x = relay.var("x", shape=(2,))
    one = relay.const(1.5)
    z = x
    for _ in range(3000):
        z = relay.add(z, one)
    text = roundtrip(relay.Function([x], z))
    assert "%2998 = add(%2997, 1.5f);" in text


def test_printer_format_matches_tvm_rules() -> None:
    tup = relay.Tuple([relay.const(0), relay.const(0)])
    x = relay.var("x")
    # a let value used twice is bound; one used once is inlined (TVM's IsUnique)
    assert roundtrip(relay.Let(x, tup, tup)) == SEMVER + "%0 = (0, 0);\nlet %x = %0;\n%0"
    assert roundtrip(relay.Let(x, tup, x)) == SEMVER + "let %x = (0, 0);\n%x"
    call = relay.Call(relay.op.get("add"), [relay.const(1), relay.const(2)],
                      span=relay.Span(relay.SourceName("Add0"), 3, 3, 7, 9))
    assert "add(1, 2) /* span=Add0:3:7 */" in roundtrip(call)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(call))
    text = mod.astext(annotate=lambda e: " /* call */" if isinstance(e, relay.Call) else "")
    assert "add(1, 2) /* call */" in text and "ty=" not in text


# --- errors -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ("def @main(%x: float32) { %x }", "1:1: expected the text format version"),
    (SEMVER + "def @main(%x: float32) {\n  nn.frobnicate(%x)\n}",
     "3:3: operator `nn.frobnicate` not found"),
    (SEMVER + "def @main(%x: float32) {\n  add(%x, %y)\n}",
     "3:11: local variable %y has not been declared"),
    (SEMVER + "def @main(%x: Tensor[(1, 2), float32]) {\n  nn.softmax(%x, axes=1)\n}",
     "3:18: `nn.softmax` has no attribute 'axes'"),
    (SEMVER + "def @main(%x: float32) {\n  add(%x %x)\n}", "3:10: expected `,` or `)` in a call"),
    (SEMVER + "def @main(%x: Tensor[(?, 2), float32]) { %x }", "2:23: dynamic dimensions"),
    (SEMVER + "def @id[A](%x: A) -> A { %x }", "2:8: type parameters"),
    (SEMVER + "type List[A] { Nil }", "2:1: algebraic data types"),
    (SEMVER + "def @main() { %0 }", "2:15: graph variable %0 has not been defined"),
    (SEMVER + "def @main() { 1 } $", "2:19: unexpected character(s) `$`"),
    (SEMVER + "def @main() { 1 /* open", "2:17: comment `/*` is not closed"),
    (SEMVER + "def @f() { 1 }\ndef @f() { 2 }", "3:5: @f is defined twice"),
])
def test_errors_name_line_column_and_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(RelayTextError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("?", r"\?").replace("[", r"\[").replace("$", r"\$")
                       .replace("*", r"\*")):
        parse(text, source_name="prog.rly") if text.startswith(("#", "def")) else parse_expr(text)


def test_error_names_the_source() -> None:
    with pytest.raises(RelayTextError, match=r"^prog\.rly:2:15: "):
        parse(SEMVER + "def @main() { %0 }", source_name="prog.rly")


def test_tvm_names_for_the_parser() -> None:
    from kiln import parser

    text = SEMVER + "def @main(%x: float32) { %x }"
    for mod in (tvm.parser.parse(text), parser.fromtext(text), relay.parse(text),
                relay.fromtext(text, "src")):
        assert structural_equal(mod, relay.parse(text))
    assert isinstance(tvm.parser.parse_expr("1f"), relay.Constant)


def test_parsed_calls_carry_spans_and_annotate_spans_pass() -> None:
    mod = parse(SEMVER + "def @main(%x: float32) {\n  %0 = log(%x);\n  add(%0, %0)\n}",
                source_name="prog.rly")
    body = mod["main"].body
    assert str(body.span) == "prog.rly:4:3" and str(body.args[0].span) == "prog.rly:3:8"
    assert (body.span.end_line, body.span.end_column) == (4, 14)
    x = relay.var("x", shape=(2,))
    plain = tvm.IRModule.from_expr(relay.exp(x) + relay.const(np.ones(2, "float32")))
    annotated = relay.transform.AnnotateSpans()(plain)
    assert structural_equal(annotated, relay.transform.InferType()(plain))
    assert str(annotated["main"].body.span).startswith("GeneratedSource:")
    assert "span=GeneratedSource:" in annotated.astext()
