"""InferType on variables without a type annotation: their types come from their uses, as TVM's
unification through the operators' type relations gives them."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.errors import KilnTypeError
from kiln.ir import FuncType, TensorType, TupleType
from kiln.transform.infer_type import check_types


def infer(expr):
    return relay.transform.InferType()(tvm.IRModule.from_expr(expr))


def param_types(mod, name="main"):
    return {p.name_hint: p.checked_type for p in mod[name].params}


def test_conv_bias_relu_params_get_types():
    x = relay.var("x", shape=(2, 4, 10, 10))
    w, b = relay.var("weight"), relay.var("bias")
    y = relay.nn.relu(relay.nn.bias_add(
        relay.nn.conv2d(x, w, channels=8, kernel_size=(3, 3), padding=(1, 1)), b))
    mod = infer(relay.Function([x, w, b], y))
    assert param_types(mod) == {"x": TensorType((2, 4, 10, 10)), "weight": TensorType((8, 4, 3, 3)),
                                "bias": TensorType((8,))}
    main = mod["main"]
    # as TVM, the parameters are annotated, so the text and structural comparisons show the types
    assert [p.type_annotation for p in main.params] == [p.checked_type for p in main.params]
    assert "%weight: Tensor[(8, 4, 3, 3), float32]" in main.astext()
    assert main.ret_type == TensorType((2, 8, 10, 10))


def test_same_types_as_a_typed_module():
    x = relay.var("x", shape=(1, 3, 8, 8))
    w = relay.var("w")
    y = relay.nn.conv2d(x, w, channels=5, kernel_size=(3, 3), data_layout="NCHW",
                        kernel_layout="HWIO")
    got = infer(relay.Function([x, w], y))["main"]
    x2 = relay.var("x", shape=(1, 3, 8, 8))
    w2 = relay.var("w", shape=(3, 3, 3, 5))
    want = infer(relay.Function([x2, w2], relay.nn.conv2d(
        x2, w2, channels=5, kernel_size=(3, 3), data_layout="NCHW", kernel_layout="HWIO")))["main"]
    tvm.ir.assert_structural_equal(got, want)


def test_input_expression_keeps_its_untyped_vars():
    x = relay.var("x", shape=(2, 3))
    w = relay.var("w")
    fn = relay.Function([x, w], relay.nn.dense(x, w, units=4))
    out = relay.transform.InferType()(tvm.IRModule.from_expr(fn))
    assert fn.params[1].type_annotation is None
    assert out["main"].params[1] is not w and out["main"].params[1].name_hint == "w"
    assert out["main"].params[1].type_annotation == TensorType((4, 3))


def test_inferred_weight_feeds_other_ops():
    x = relay.var("x", shape=(1, 2, 6, 6))
    w = relay.var("w")
    conv = relay.nn.conv2d(x, w, channels=3, kernel_size=(2, 2))
    # %w is used before its type is known (in sum), then typed by the convolution
    penalty = relay.sum(relay.multiply(w, w))
    mod = infer(relay.Function([x, w], relay.Tuple([conv, penalty, relay.nn.relu(w)])))
    assert param_types(mod)["w"] == TensorType((3, 2, 2, 2))
    assert mod["main"].ret_type == TupleType((TensorType((1, 3, 5, 5)), TensorType(()),
                                              TensorType((3, 2, 2, 2))))


def test_type_flows_backward_through_elementwise_ops():
    x = relay.var("x", shape=(1, 2, 6, 6))
    w = relay.var("w")
    y = relay.nn.conv2d(x, relay.exp(relay.negative(w)), channels=3, kernel_size=(2, 2))
    assert param_types(infer(relay.Function([x, w], y)))["w"] == TensorType((3, 2, 2, 2))


def test_batch_norm_and_dense_chain():
    x = relay.var("x", shape=(4, 3, 5, 5), dtype="float64")
    gamma, beta, mean, var = (relay.var(n) for n in ("gamma", "beta", "mean", "var"))
    w = relay.var("w")
    bn = relay.nn.batch_norm(x, gamma, beta, mean, var)[0]
    y = relay.nn.dense(relay.nn.batch_flatten(bn), w, units=7)
    mod = infer(relay.Function([x, gamma, beta, mean, var, w], y))
    types = param_types(mod)
    for n in ("gamma", "beta", "mean", "var"):
        assert types[n] == TensorType((3,), "float64")
    assert types["w"] == TensorType((7, 75), "float64")


def test_function_literal_param_and_argument():
    # FuseOps' shape: a primitive function with an untyped parameter, called with an untyped var
    x = relay.var("x", shape=(1, 4, 8, 8))
    p0 = relay.var("p0", shape=(1, 4, 8, 8))
    p1 = relay.var("p1")
    f = relay.Function([p0, p1], relay.nn.conv2d(p0, p1, channels=6, kernel_size=(1, 1)))
    w = relay.var("w")
    mod = infer(relay.Function([x, w], relay.Call(f, [x, w])))
    assert param_types(mod)["w"] == TensorType((6, 4, 1, 1))
    inner = mod["main"].body.op
    assert inner.params[1].type_annotation == TensorType((6, 4, 1, 1))
    assert inner.checked_type == FuncType((TensorType((1, 4, 8, 8)), TensorType((6, 4, 1, 1))),
                                          TensorType((1, 6, 8, 8)))


def test_argument_gives_the_parameter_its_type():
    p = relay.var("p")
    f = relay.Function([p], relay.nn.relu(p))
    x = relay.var("x", shape=(3,), dtype="int32")
    mod = infer(relay.Function([x], relay.Call(f, [x])))
    assert mod["main"].body.op.params[0].type_annotation == TensorType((3,), "int32")


def test_let_variable_takes_the_value_type():
    x = relay.var("x", shape=(2, 2))
    t = relay.var("t")
    mod = infer(relay.Function([x], relay.Let(t, relay.log(x), relay.add(t, x))))
    let = mod["main"].body
    assert let.var.type_annotation == TensorType((2, 2))
    assert mod["main"].ret_type == TensorType((2, 2))


def test_recursive_let_function():
    # a loop as TVM writes it: the let variable is called in its own value
    i = relay.var("i", shape=(), dtype="int32")
    s = relay.var("s", shape=(2,))
    loop = relay.var("loop")
    body = relay.If(relay.less(i, relay.const(10, "int32")),
                    loop(i + relay.const(1, "int32"), s + s), s)
    start = relay.var("start", shape=(2,))
    fn = relay.Function([start], relay.Let(loop, relay.Function([i, s], body),
                                           loop(relay.const(0, "int32"), start)))
    mod = infer(fn)
    loop_type = FuncType((TensorType((), "int32"), TensorType((2,))), TensorType((2,)))
    let = mod["main"].body
    assert let.var.type_annotation == loop_type
    # the call inside the loop refers to the annotated variable
    assert let.value.body.then_branch.op is let.var
    assert mod["main"].ret_type == TensorType((2,))


def test_called_variable_gets_a_function_type():
    # TVM's test_incomplete_call
    tt = TensorType((), "int32")
    x = relay.var("x", tt)
    f = relay.var("f")
    fn = relay.Function([x, f], relay.Call(f, [x]), tt)
    assert relay.transform.InferTypeLocal(fn) == FuncType((tt, FuncType((tt,), tt)), tt)


def test_recursive_global_function():
    # TVM's test_global_var_recursion: the declared return type types the recursive call
    mod = tvm.IRModule({})
    gv = relay.GlobalVar("main")
    x = relay.var("x", shape=())
    mod[gv] = relay.Function([x], relay.Call(gv, [x]), TensorType(()))
    mod = relay.transform.InferType()(mod)
    assert mod["main"].checked_type == FuncType((TensorType(()),), TensorType(()))


def test_recursive_global_return_type_from_the_base_case():
    mod = tvm.IRModule({})
    gv = relay.GlobalVar("f")
    n = relay.var("n", shape=(), dtype="int32")
    data = relay.var("data", shape=(3,))
    body = relay.If(relay.equal(n, relay.const(0, "int32")), data,
                    gv(relay.subtract(n, relay.const(1, "int32")), relay.log(data)))
    mod[gv] = relay.Function([n, data], body)
    mod = relay.transform.InferType()(mod)
    assert mod["f"].checked_type == FuncType((TensorType((), "int32"), TensorType((3,))),
                                             TensorType((3,)))


# --- errors ----------------------------------------------------------------------------------

def test_error_names_the_var_function_and_op():
    x = relay.var("x", shape=(2, 3))
    scale = relay.var("scale")
    with pytest.raises(KilnTypeError) as err:
        infer(relay.Function([x, scale], relay.multiply(x, scale)))
    msg = str(err.value)
    # TVM's BroadcastRel needs both operands: the other side does not type %scale
    assert "%scale" in msg and "@main" in msg and "argument 1 of multiply" in msg
    assert "no type annotation" in msg


def test_error_for_grouped_conv2d_weight():
    x = relay.var("x", shape=(1, 4, 8, 8))
    w = relay.var("w")
    with pytest.raises(KilnTypeError, match=r"%w in @main .*argument 1 of nn.conv2d"):
        infer(relay.Function([x, w], relay.nn.conv2d(x, w, channels=4, kernel_size=(3, 3),
                                                     groups=2)))


def test_error_for_unused_untyped_param():
    x = relay.var("x", shape=(2,))
    u = relay.var("unused")
    with pytest.raises(KilnTypeError, match="%unused in @main .*nothing determines its type"):
        infer(relay.Function([x, u], relay.exp(x)))


def test_error_for_contradicting_uses():
    x = relay.var("x", shape=(1, 2, 6, 6))
    w = relay.var("w")
    a = relay.nn.conv2d(x, w, channels=3, kernel_size=(2, 2))
    b = relay.nn.conv2d(x, w, channels=4, kernel_size=(2, 2))
    with pytest.raises(KilnTypeError) as err:
        infer(relay.Function([x, w], relay.Tuple([a, b])))
    # the first use types %w; the second convolution's relation then rejects it
    assert "nn.conv2d in @main: nn.conv2d: channels=4 but weight (3, 2, 2, 2)" in str(err.value)
    # through element-wise ops: each use types its own op's result, which then disagree
    a = relay.nn.conv2d(x, relay.exp(w), channels=3, kernel_size=(2, 2))
    b = relay.nn.conv2d(x, relay.negative(w), channels=4, kernel_size=(2, 2))
    with pytest.raises(KilnTypeError) as err:
        infer(relay.Function([x, w], relay.Tuple([a, b])))
    msg = str(err.value)
    assert "in @main" in msg and ("negative" in msg or "exp" in msg)
    assert "Tensor[(4, 2, 2, 2), float32]" in msg and "Tensor[(3, 2, 2, 2), float32]" in msg


def test_failed_inference_caches_no_types():
    x = relay.var("x", shape=(1, 2, 6, 6))
    w, s = relay.var("w"), relay.var("s")
    conv = relay.nn.conv2d(x, w, channels=3, kernel_size=(2, 2))
    with pytest.raises(KilnTypeError, match="%s"):
        infer(relay.Function([x, w, s], relay.add(conv, s)))
    assert not w.has_type and not conv.has_type


def test_verifier_types_untyped_vars_without_caching():
    x = relay.var("x", shape=(2, 3))
    w = relay.var("w")
    mod = tvm.IRModule.from_expr(relay.Function([x, w], relay.nn.dense(x, w, units=2)))
    check_types(mod)
    assert not w.has_type


# --- the inferred types compile and run ------------------------------------------------------

def _conv_nchw(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    out = np.zeros((n, o, h - kh + 1, wd - kw + 1))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i:i + out.shape[2], j:j + out.shape[3]],
                             w[:, :, i, j])
    return out


@pytest.mark.requires_cc
def test_untyped_module_builds_and_runs(tmp_path):
    from kiln.contrib import graph_executor

    x = relay.var("x", shape=(1, 3, 6, 6))
    w, b, w2 = relay.var("w"), relay.var("b"), relay.var("w2")
    y = relay.nn.relu(relay.nn.bias_add(
        relay.nn.conv2d(x, w, channels=4, kernel_size=(3, 3), padding=(1, 1)), b))
    z = relay.nn.dense(relay.nn.batch_flatten(y), w2, units=5)
    mod = infer(relay.Function([x, w, b, w2], z))
    shapes = {p.name_hint: p.checked_type.shape for p in mod["main"].params}
    assert shapes == {"x": (1, 3, 6, 6), "w": (4, 3, 3, 3), "b": (4,), "w2": (5, 144)}

    rng = np.random.default_rng(0)
    values = {k: rng.standard_normal(s).astype("float32") for k, s in shapes.items()}
    lib = relay.build(mod, "llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    m.run(**values)
    got = m.get_output(0).numpy()
    conv = _conv_nchw(values["x"].astype(float), values["w"].astype(float), 1)
    hidden = np.maximum(conv + values["b"].reshape(1, 4, 1, 1), 0).reshape(1, -1)
    np.testing.assert_allclose(got, hidden @ values["w2"].astype(float).T, rtol=1e-4, atol=1e-4)


# --- passes that require InferType ------------------------------------------------------------

def test_sequential_runs_the_required_infer_type_first():
    # TVM's Sequential runs PassInfo.required (InferType) before a pass: untyped vars get typed
    x = relay.var("x", shape=(1, 2, 4, 4))
    w, b = relay.var("w"), relay.var("b")
    y = relay.nn.bias_add(relay.nn.conv2d(x, w, channels=3, kernel_size=(1, 1)), b)
    mod = tvm.IRModule.from_expr(relay.Function([x, w, b], y))
    with tvm.transform.PassContext(opt_level=3):
        out = tvm.transform.Sequential([relay.transform.CanonicalizeOps()])(mod)
    assert param_types(out)["b"] == TensorType((3,))
    assert out["main"].body.op.name == "add"


def test_unknown_required_pass_is_an_error():
    from kiln.errors import PassError
    from kiln.transform.pass_infra import ModulePass, PassInfo, Sequential

    p = ModulePass(lambda mod, ctx: mod, PassInfo(0, "NeedsMagic", ("Magic",)))
    x = relay.var("x", shape=(2,))
    with pytest.raises(PassError, match="NeedsMagic requires pass 'Magic'"):
        Sequential([p])(tvm.IRModule.from_expr(relay.Function([x], x)))


def test_variable_called_with_itself_is_an_error():
    f = relay.var("f")
    with pytest.raises(KilnTypeError, match="%f in @main: the callee would have to take itself"):
        infer(relay.Function([f], relay.Call(f, [f])))


def test_incomplete_type_annotation_is_inferred():
    # relay.var("alpha", relay.IncompleteType()) is an untyped variable (TVM's test_alter_layout_prelu)
    x = relay.var("x", shape=(1, 4, 3, 3))
    alpha = relay.var("alpha", relay.IncompleteType())
    pair = relay.var("pair", TupleType((TensorType((2,)), relay.IncompleteType())))
    y = relay.Tuple([relay.nn.prelu(x, alpha), relay.nn.bias_add(relay.TupleGetItem(pair, 0),
                                                                 relay.TupleGetItem(pair, 1),
                                                                 axis=0)])
    mod = infer(relay.Function([x, alpha, pair], y))
    assert param_types(mod)["alpha"] == TensorType((4,))
    assert param_types(mod)["pair"] == TupleType((TensorType((2,)), TensorType((2,))))
    assert mod["main"].params[1].type_annotation == TensorType((4,))
    assert relay.IncompleteType() == relay.IncompleteType()
